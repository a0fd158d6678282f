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

{{/* A server list as serve reads it, comma-separated: a YAML sequence in
a values file is joined, where rendering it whole ([a b c]) would be refused
by serve. */}}
{{- define "stockguard.list" -}}
{{- if kindIs "slice" . -}}
{{- join "," . -}}
{{- else if . -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/* The chosen backend's lock servers: without them serve would fall back
to its loopback defaults and answer every write 503. Redlock needs a
majority that survives a node's loss, so three masters at least. Each
address is checked as serve checks it (host:port with a port of 1 to 65535;
etcd also http(s)://host:port or unix://path), and none may be given twice
(serve also resolves names, which the chart cannot): serve would refuse the
list, and every replica crash-loop with exit 2. */}}
{{- define "stockguard.checkLockServers" -}}
{{- $l := .Values.lock -}}
{{- $need := dict "redis" (list "lock.redisAddrs" $l.redisAddrs 1) "redlock" (list "lock.redisAddrs" $l.redisAddrs 3) "zookeeper" (list "lock.zkServers" $l.zkServers 1) "etcd" (list "lock.etcdEndpoints" $l.etcdEndpoints 1) -}}
{{- with get $need $l.backend -}}
{{- $name := index . 0 -}}
{{- $addrs := compact (splitList "," (nospace (include "stockguard.list" (index . 1)))) -}}
{{- $n := len $addrs -}}
{{- if lt $n (index . 2) -}}
{{- fail (printf "lock.backend=%s needs %s: at least %d comma-separated address(es), got %d" $l.backend $name (index . 2) $n) -}}
{{- end -}}
{{- $hostPort := "^(\\[[^\\[\\]]+\\]|[^\\[\\]:]+):[0-9]+$" -}}
{{- $endpoint := "^https?://([^@/]*@)?(\\[[^\\[\\]/]+\\]|[^\\[\\]:/@]+):[0-9]+/?$|^unixs?://.+" -}}
{{- range $addrs -}}
{{- $port := regexReplaceAll ".*:([0-9]+)/?$" . "${1}" -}}
{{- $ok := or (regexMatch $hostPort .) (and (eq $l.backend "etcd") (regexMatch $endpoint .)) -}}
{{- if or (not $ok) (and (not (regexMatch "^unixs?://" .)) (or (lt (atoi $port) 1) (gt (atoi $port) 65535))) -}}
{{- fail (printf "%s: %q: want host:port with a port of 1 to 65535%s" $name . (ternary " (or http(s)://host:port, unix://path)" "" (eq $l.backend "etcd"))) -}}
{{- end -}}
{{- end -}}
{{- if lt (len (uniq (splitList "," (lower (join "," $addrs))))) $n -}}
{{- fail (printf "%s=%q names a server twice" $name (join "," $addrs)) -}}
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

{{/* lock.ttl and lock.wait as serve accepts them: a TTL of 100ms to 24h, a
wait above 0 and at most 24h (serve's ceiling on both, cmd/stockguard's
limits.go). Anything else (a bare number such as 10, 0s, 2d) would pass
helm and crash-loop every replica with exit 2. */}}
{{- define "stockguard.checkLockDurations" -}}
{{- $day := 86400000.0 -}}
{{- $ttl := float64 (include "stockguard.durationMs" (list "lock.ttl" .Values.lock.ttl)) -}}
{{- if or (lt $ttl 100.0) (gt $ttl $day) -}}
{{- fail (printf "lock.ttl=%v: want 100ms to 24h (serve's --lock-ttl)" .Values.lock.ttl) -}}
{{- end -}}
{{- $wait := float64 (include "stockguard.lockWaitMs" .) -}}
{{- if or (le $wait 0.0) (gt $wait $day) -}}
{{- fail (printf "lock.wait=%v: want above 0 and at most 24h (serve's --lock-wait)" .Values.lock.wait) -}}
{{- end -}}
{{- end -}}

{{/* The backends serve knows (its --lock). */}}
{{- define "stockguard.checkBackend" -}}
{{- $known := list "none" "local" "postgres" "redis" "redlock" "zookeeper" "etcd" -}}
{{- if not (has .Values.lock.backend $known) -}}
{{- fail (printf "lock.backend=%v: want one of %s (serve's --lock)" .Values.lock.backend (join ", " $known)) -}}
{{- end -}}
{{- end -}}

{{/* lock.fencing as serve reads it: on or off. Unquoted in a values file,
on and off (and yes and no) are YAML booleans, which would render as true
and false and be refused by serve on every replica: they are mapped back. */}}
{{- define "stockguard.fencing" -}}
{{- $f := .Values.lock.fencing -}}
{{- if kindIs "bool" $f -}}
{{- ternary "on" "off" $f -}}
{{- else if has $f (list "on" "off") -}}
{{- $f -}}
{{- else -}}
{{- fail (printf "lock.fencing=%v: want on or off (serve's --fencing)" $f) -}}
{{- end -}}
{{- end -}}

{{/* A whole number as serve reads an int flag, in digits; fails unless it
is one from min to max (0: no max). Takes (list "database.maxConns" value
min max). Helm reads a number in a values file as a float64, which renders
in exponent form from a million on (1e+06) and keeps a fraction: serve
would refuse either. */}}
{{- define "stockguard.int" -}}
{{- $name := index . 0 -}}
{{- $v := index . 1 -}}
{{- $min := index . 2 -}}
{{- $max := index . 3 -}}
{{- $whole := or (kindIs "int" $v) (kindIs "int64" $v) (and (kindIs "string" $v) (regexMatch "^[0-9]+$" (toString $v))) (and (kindIs "float64" $v) (eq $v (float64 (int64 $v)))) -}}
{{- if or (not $whole) (lt (int64 $v) (int64 $min)) (and $max (gt (int64 $v) (int64 $max))) -}}
{{- fail (printf "%s=%v: want a whole number from %d%s" $name $v $min (ternary (printf " to %d" $max) " up" (gt $max 0))) -}}
{{- end -}}
{{- int64 $v -}}
{{- end -}}

{{/* An extraEnv value as serve reads it. YAML's booleans given to serve's
on/off settings are mapped back to on and off, and whole numbers are
written in digits (see stockguard.int). */}}
{{- define "stockguard.envValue" -}}
{{- $k := index . 0 -}}
{{- $v := index . 1 -}}
{{- if and (kindIs "bool" $v) (eq $k "STOCKGUARD_COALESCE") -}}
{{- ternary "on" "off" $v -}}
{{- else if and (kindIs "float64" $v) (eq $v (float64 (int64 $v))) -}}
{{- int64 $v -}}
{{- else -}}
{{- toString $v -}}
{{- end -}}
{{- end -}}

{{/* extraEnv may not set what the chart sets from its own values: the
later definition would win, past the chart's checks, and --migrate=false on
the command line would ignore STOCKGUARD_MIGRATE. */}}
{{- define "stockguard.checkExtraEnv" -}}
{{- $owned := dict "STOCKGUARD_ADDR" "service.port" "STOCKGUARD_LOCK" "lock.backend" "STOCKGUARD_FENCING" "lock.fencing" "STOCKGUARD_LOCK_TTL" "lock.ttl" "STOCKGUARD_LOCK_WAIT" "lock.wait" "STOCKGUARD_SHUTDOWN_TIMEOUT" "shutdown.drainSeconds" "STOCKGUARD_REDIS_ADDRS" "lock.redisAddrs" "STOCKGUARD_ZK_SERVERS" "lock.zkServers" "STOCKGUARD_ETCD_ENDPOINTS" "lock.etcdEndpoints" "STOCKGUARD_DB_MAX_CONNS" "database.maxConns" "STOCKGUARD_DATABASE_URL" "database.url or database.existingSecret" "STOCKGUARD_ADMIN_TOKEN" "adminToken" "STOCKGUARD_MIGRATE" "migration.enabled" "STOCKGUARD_METRICS_ADDR" "metrics.port" -}}
{{- range $k, $v := .Values.extraEnv -}}
{{- with get $owned $k -}}
{{- fail (printf "extraEnv.%s: the chart sets it from %s; set that instead" $k .) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* metrics.port in digits, or nothing when unset (/metrics on
service.port). serve refuses a port already taken by --addr (exit 2), and
the ServiceMonitor would scrape a listener that is not there. */}}
{{- define "stockguard.metricsPort" -}}
{{- $p := .Values.metrics.port -}}
{{- if and (not (kindIs "invalid" $p)) (ne (toString $p) "") -}}
{{- $n := include "stockguard.int" (list "metrics.port" $p 1 65535) -}}
{{- if eq $n (include "stockguard.int" (list "service.port" .Values.service.port 1 65535)) -}}
{{- fail (printf "metrics.port=%s is service.port's: serve listens once on each port; pick another, or leave metrics.port empty to serve /metrics with the API" $n) -}}
{{- end -}}
{{- $n -}}
{{- end -}}
{{- end -}}

{{/* The admin token as serve accepts it: a string (a number would render
in another form than the one written, 1e+06) with no whitespace around it,
which no client could send (a YAML block scalar ends in a newline). */}}
{{- define "stockguard.checkAdminToken" -}}
{{- with .Values.adminToken.value -}}
{{- if not (kindIs "string" .) -}}
{{- fail "adminToken.value: want a string (quote it)" -}}
{{- end -}}
{{- if ne . (trim .) -}}
{{- fail "adminToken.value has leading or trailing whitespace (a block scalar's newline?), which no client can send" -}}
{{- end -}}
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

{{/* The drain (serve's --shutdown-timeout), in whole seconds, must
outlast a request's lock wait, or SIGTERM cuts off requests still waiting
for their locks. */}}
{{- define "stockguard.drainSeconds" -}}
{{- include "stockguard.int" (list "shutdown.drainSeconds" .Values.shutdown.drainSeconds 1 0) -}}
{{- end -}}

{{- define "stockguard.checkDrain" -}}
{{- if le (mulf (include "stockguard.drainSeconds" .) 1000) (float64 (include "stockguard.lockWaitMs" .)) -}}
{{- fail (printf "shutdown.drainSeconds=%v must be above lock.wait=%v: the drain must let a request that waits for its locks finish" .Values.shutdown.drainSeconds .Values.lock.wait) -}}
{{- end -}}
{{- end -}}
