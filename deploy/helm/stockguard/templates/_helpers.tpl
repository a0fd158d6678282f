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

{{/* The chosen backend's lock servers: without them serve would fall back
to its loopback defaults and answer every write 503. Redlock needs a
majority that survives a node's loss, so three masters at least. */}}
{{- define "stockguard.checkLockServers" -}}
{{- $l := .Values.lock -}}
{{- $need := dict "redis" (list "lock.redisAddrs" $l.redisAddrs 1) "redlock" (list "lock.redisAddrs" $l.redisAddrs 3) "zookeeper" (list "lock.zkServers" $l.zkServers 1) "etcd" (list "lock.etcdEndpoints" $l.etcdEndpoints 1) -}}
{{- with get $need $l.backend -}}
{{- $n := len (compact (splitList "," (nospace (toString (index . 1))))) -}}
{{- if lt $n (index . 2) -}}
{{- fail (printf "lock.backend=%s needs %s: at least %d comma-separated address(es), got %d" $l.backend (index . 0) (index . 2) $n) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A Go duration of h, m, s and ms parts (5s, 1500ms, 1m30s) in
milliseconds; fails naming the value. Takes (list "lock.wait" value). */}}
{{- define "stockguard.durationMs" -}}
{{- $name := index . 0 -}}
{{- $s := toString (index . 1) -}}
{{- if not (regexMatch "^([0-9]+(\\.[0-9]+)?(h|ms|m|s))+$" $s) -}}
{{- fail (printf "%s=%q: want a duration such as 5s, 1500ms or 1m30s" $name $s) -}}
{{- end -}}
{{- $ms := 0.0 -}}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(h|ms|m|s)" $s -1 -}}
{{- $unit := regexFind "(h|ms|m|s)$" . -}}
{{- $ms = addf $ms (mulf (float64 (trimSuffix $unit .)) (get (dict "h" 3600000 "m" 60000 "s" 1000 "ms" 1) $unit)) -}}
{{- end -}}
{{- $ms -}}
{{- end -}}

{{/* lock.wait in milliseconds. */}}
{{- define "stockguard.lockWaitMs" -}}
{{- include "stockguard.durationMs" (list "lock.wait" .Values.lock.wait) -}}
{{- end -}}

{{/* lock.ttl as serve accepts it (a duration of at least 100ms): a bare
number such as 10 would pass helm and crash-loop every replica with exit 2. */}}
{{- define "stockguard.checkLockTTL" -}}
{{- if lt (float64 (include "stockguard.durationMs" (list "lock.ttl" .Values.lock.ttl))) 100.0 -}}
{{- fail (printf "lock.ttl=%v: want at least 100ms (serve's --lock-ttl)" .Values.lock.ttl) -}}
{{- end -}}
{{- end -}}

{{/* none and local take no lock across processes: with several replicas
they oversell by design. Running them so is a demonstration, never a
deployment, so it takes lock.acknowledgeOversell=true to render. */}}
{{- define "stockguard.checkUnsafeReplicas" -}}
{{- if and (has .Values.lock.backend (list "none" "local")) (gt (int .Values.replicaCount) 1) (not .Values.lock.acknowledgeOversell) -}}
{{- fail (printf "lock.backend=%s with replicaCount=%v oversells: the replicas do not lock each other out; use a distributed backend, replicaCount=1, or set lock.acknowledgeOversell=true for a demonstration" .Values.lock.backend .Values.replicaCount) -}}
{{- end -}}
{{- end -}}

{{/* The drain (serve's --shutdown-timeout) must outlast a request's lock
wait, or SIGTERM cuts off requests still waiting for their locks. */}}
{{- define "stockguard.checkDrain" -}}
{{- if le (mulf .Values.shutdown.drainSeconds 1000) (float64 (include "stockguard.lockWaitMs" .)) -}}
{{- fail (printf "shutdown.drainSeconds=%v must be above lock.wait=%v: the drain must let a request that waits for its locks finish" .Values.shutdown.drainSeconds .Values.lock.wait) -}}
{{- end -}}
{{- end -}}
