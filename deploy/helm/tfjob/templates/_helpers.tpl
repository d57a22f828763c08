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
