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
{{ .Release.Name }}-control-plane
{{- end -}}
