{{- define "tfjob.labels" -}}
app.kubernetes.io/name: tfjob
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
{{- define "tfjob.selector" -}}
app.kubernetes.io/name: tfjob
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- /* Prefix of every object name: the release name unless
     fullnameOverride is set (the gpufleet umbrella chart sets one per
     controller, so three charts share one release without clashes). */ -}}
{{- define "tfjob.fullname" -}}
{{ .Values.fullnameOverride | default .Release.Name }}
{{- end -}}
