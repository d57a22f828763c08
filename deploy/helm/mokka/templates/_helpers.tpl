{{- define "mokka.labels" -}}
app.kubernetes.io/name: mokka-control-plane
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
{{- define "mokka.selector" -}}
app.kubernetes.io/name: mokka-control-plane
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "mokka.serviceAccount" -}}
{{ include "mokka.fullname" . }}-control-plane
{{- end -}}
{{- /* Prefix of every object name: the release name unless
     fullnameOverride is set (the gpufleet umbrella chart sets one per
     controller, so three charts share one release without clashes). */ -}}
{{- define "mokka.fullname" -}}
{{ .Values.fullnameOverride | default .Release.Name }}
{{- end -}}
