{{/* The manager image: repository@digest when a digest is set, else repository:tag (tag defaults to appVersion). */}}
{{- define "tpu-slice-operator.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}
