{{/* Labels on every object, and the subset that selects the pods. */}}
{{- define "tributary.selectorLabels" -}}
app.kubernetes.io/name: tributary
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tributary.labels" -}}
{{ include "tributary.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The Secret with tls.crt, tls.key and ca.crt: the Certificate's, or the one named by the user. */}}
{{- define "tributary.tlsSecret" -}}
{{- if .Values.tls.certManager.enabled -}}
{{ .Release.Name }}-tls
{{- else -}}
{{ required "tls.enabled needs tls.existingSecret (a Secret with tls.crt, tls.key, ca.crt) or tls.certManager.enabled" .Values.tls.existingSecret }}
{{- end -}}
{{- end }}

{{/* Where the TLS Secret is mounted in the container. */}}
{{- define "tributary.tlsDir" -}}
/etc/tributary/tls
{{- end }}

{{/* Where the ConfigMap is mounted in the container. */}}
{{- define "tributary.configDir" -}}
/etc/tributary/config
{{- end }}
