{{/* The release's name for every object, within DNS label limits. */}}
{{- define "stockguard.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "stockguard.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "stockguard.labels" -}}
{{ include "stockguard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "stockguard.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The Secret holding the database URL and the admin token. */}}
{{- define "stockguard.secretName" -}}
{{ include "stockguard.fullname" . }}
{{- end -}}

{{- define "stockguard.databaseSecret" -}}
{{ .Values.database.existingSecret | default (include "stockguard.secretName" .) }}
{{- end -}}

{{- define "stockguard.adminSecret" -}}
{{ .Values.adminToken.existingSecret | default (include "stockguard.secretName" .) }}
{{- end -}}

{{- define "stockguard.hasAdminToken" -}}
{{- if or .Values.adminToken.value .Values.adminToken.existingSecret }}true{{ end -}}
{{- end -}}

{{/* The pod's security settings: no root, no privilege, nothing written. */}}
{{- define "stockguard.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "stockguard.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

{{/* Environment shared by the service and the migration Job. */}}
{{- define "stockguard.databaseEnv" -}}
- name: STOCKGUARD_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "stockguard.databaseSecret" . }}
      key: {{ .Values.database.urlKey }}
{{- end -}}
