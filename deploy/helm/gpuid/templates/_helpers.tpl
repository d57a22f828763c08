{{- define "gpuid.labels" -}}
app.kubernetes.io/name: gpuid
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
{{- define "gpuid.selector" -}}
app.kubernetes.io/name: gpuid
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
