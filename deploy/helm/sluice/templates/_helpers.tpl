{{/* Names and labels. */}}
{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
The bundled Redis has a name of its own, so that no selector of Sluice's
(Service, Deployment, PodDisruptionBudget, monitors) matches its pod.
*/}}
{{- define "sluice.redisSelectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}-redis
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Secrets the chart creates or uses. Each returns "" when there is none. */}}
{{- define "sluice.envSecret" -}}
{{- if .Values.secrets.env -}}{{ include "sluice.fullname" . }}-env{{- end -}}
{{- end -}}

{{- define "sluice.adminTokenSecret" -}}
{{- if .Values.adminToken.enabled -}}
{{- if .Values.adminToken.existingSecret -}}{{ .Values.adminToken.existingSecret }}
{{- else if .Values.adminToken.value -}}{{ include "sluice.fullname" . }}-admin-token
{{- else -}}{{ fail "adminToken.enabled needs adminToken.value or adminToken.existingSecret" }}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "sluice.adminTokenKey" -}}
{{- if .Values.adminToken.existingSecret -}}{{ .Values.adminToken.existingSecretKey }}{{- else -}}token{{- end -}}
{{- end -}}

{{- define "sluice.redisPasswordSecret" -}}
{{- if ne .Values.redis.mode "none" -}}
{{- if .Values.redis.auth.existingSecret -}}{{ .Values.redis.auth.existingSecret }}
{{- else if .Values.redis.auth.password -}}{{ include "sluice.fullname" . }}-redis
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "sluice.redisPasswordKey" -}}
{{- if .Values.redis.auth.existingSecret -}}{{ .Values.redis.auth.existingSecretKey }}{{- else -}}redis-password{{- end -}}
{{- end -}}

{{- define "sluice.redisAddress" -}}
{{- if eq .Values.redis.mode "bundled" -}}{{ include "sluice.fullname" . }}-redis:6379
{{- else if eq .Values.redis.mode "external" -}}{{ required "redis.mode external needs redis.external.address" .Values.redis.external.address }}
{{- end -}}
{{- end -}}

{{/*
The config file: the user's config with the keys the chart owns set from
its values. Sluice rejects unknown keys, so the chart adds nothing else.
*/}}
{{- define "sluice.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) -}}
{{- range $k := list "listen" "admin" "shutdown" -}}
{{- if hasKey $cfg $k -}}
{{- fail (printf "config.%s is set by the chart: use ports, adminToken and shutdownGraceSeconds (docs/deploy.md)" $k) -}}
{{- end -}}
{{- end -}}
{{- if not (has .Values.redis.mode (list "bundled" "external" "none")) -}}
{{- fail (printf "redis.mode must be bundled, external or none, got %q" .Values.redis.mode) -}}
{{- end -}}
{{- $_ := set $cfg "listen" (printf "0.0.0.0:%d" (int .Values.ports.http)) -}}
{{- $admin := dict "listen" (printf "0.0.0.0:%d" (int .Values.ports.admin)) -}}
{{- if .Values.adminToken.enabled -}}{{- $_ := set $admin "token_env" "SLUICE_ADMIN_TOKEN" -}}{{- end -}}
{{- $_ := set $cfg "admin" $admin -}}
{{- $_ := set $cfg "shutdown" (dict "grace" (printf "%ds" (int .Values.shutdownGraceSeconds))) -}}
{{- $cluster := deepCopy ($cfg.cluster | default dict) -}}
{{- if eq .Values.redis.mode "none" -}}
{{- if $cluster -}}{{- fail "config.cluster needs redis.mode bundled or external" -}}{{- end -}}
{{- $_ := unset $cfg "cluster" -}}
{{- else -}}
{{- range $k := list "redis" "password_env" "expected_replicas" -}}
{{- if hasKey $cluster $k -}}
{{- fail (printf "config.cluster.%s is set by the chart: use redis and replicaCount (docs/deploy.md)" $k) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $cluster "redis" (include "sluice.redisAddress" .) -}}
{{- if include "sluice.redisPasswordSecret" . -}}{{- $_ := set $cluster "password_env" "REDIS_PASSWORD" -}}{{- end -}}
{{- $_ := set $cluster "expected_replicas" (int .Values.replicaCount) -}}
{{- $_ := set $cfg "cluster" $cluster -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{- define "sluice.redisLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "sluice.redisSelectorLabels" . }}
app.kubernetes.io/component: redis
app.kubernetes.io/part-of: {{ include "sluice.name" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}
