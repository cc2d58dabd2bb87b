{{/* The chart's name, or nameOverride. */}}
{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: fullnameOverride, else release-name, without a
repeated chart name. Kept to 54 characters so that "-headless" fits in 63. */}}
{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 54 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 54 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 54 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The headless Service through whose DNS name the cluster's nodes find
each other. */}}
{{- define "sluice.headless" -}}
{{- printf "%s-headless" (include "sluice.fullname" .) }}
{{- end }}

{{/* The seed address of --cluster-join: the headless Service's DNS name,
which stands for every pod's address, and the gossip port. */}}
{{- define "sluice.clusterJoin" -}}
{{- printf "%s.%s.svc.%s:%d" (include "sluice.headless" .) .Release.Namespace .Values.cluster.clusterDomain (int .Values.cluster.gossipPort) }}
{{- end }}

{{- define "sluice.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sluice.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sluice.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "sluice.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/* The Secret the chart writes, when it holds root keys or the cluster
secret given in values. */}}
{{- define "sluice.secretName" -}}
{{- include "sluice.fullname" . }}
{{- end }}

{{/* Whether the chart writes a Secret of its own. */}}
{{- define "sluice.ownSecret" -}}
{{- if or (and (not .Values.auth.existingSecret) .Values.auth.rootKeys) (and (eq .Values.mode "cluster") (not .Values.cluster.existingSecret) .Values.cluster.secret) }}true{{ end }}
{{- end }}

{{/* Whether a root key file is mounted. */}}
{{- define "sluice.rootKeyFile" -}}
{{- if or .Values.auth.existingSecret .Values.auth.rootKeys }}true{{ end }}
{{- end }}

{{/* The RLS ConfigMap: the user's or the chart's. */}}
{{- define "sluice.rlsConfigMap" -}}
{{- default (printf "%s-rls" (include "sluice.fullname" .)) .Values.rls.existingConfigMap }}
{{- end }}

{{/* validate stops the rendering on values that would not start. */}}
{{- define "sluice.validate" -}}
{{- if not (has .Values.mode (list "cluster" "redis")) }}
{{- fail (printf "mode %q: want cluster or redis" .Values.mode) }}
{{- end }}
{{- if not (or .Values.auth.existingSecret .Values.auth.rootKeys .Values.auth.rootKeySHA256s) }}
{{- fail "no root key: set auth.existingSecret (a Secret holding KEY:WORKSPACE lines), auth.rootKeys or auth.rootKeySHA256s; sluice refuses to listen beyond loopback without one" }}
{{- end }}
{{- range .Values.auth.rootKeys }}
{{- if not (regexMatch "^.{16,}:[^:]+$" .) }}
{{- fail "auth.rootKeys: each entry is KEY:WORKSPACE with a key of at least 16 bytes" }}
{{- end }}
{{- end }}
{{- if eq .Values.mode "cluster" }}
{{- if not (or .Values.cluster.existingSecret .Values.cluster.secret) }}
{{- fail "mode cluster needs cluster.existingSecret (a Secret holding the cluster secret) or cluster.secret (at least 32 bytes, e.g. openssl rand -hex 32)" }}
{{- end }}
{{- if and .Values.cluster.secret (lt (len .Values.cluster.secret) 32) }}
{{- fail "cluster.secret must be at least 32 bytes (e.g. openssl rand -hex 32)" }}
{{- end }}
{{- end }}
{{- if and (eq .Values.mode "redis") (not (or .Values.redis.url .Values.redis.existingSecret)) }}
{{- fail "mode redis needs redis.url (redis://host:port/db) or redis.existingSecret (a Secret holding the URL)" }}
{{- end }}
{{- if and .Values.redis.url (regexMatch "^rediss?://[^/@]*:[^/@]*@" .Values.redis.url) }}
{{- fail "redis.url holds a password: put the URL in a Secret and set redis.existingSecret instead" }}
{{- end }}
{{- end }}

{{/* validateRLS: the rate limit service needs its configuration. */}}
{{- define "sluice.validateRLS" -}}
{{- if and .Values.rls.enabled (not (or .Values.rls.config .Values.rls.existingConfigMap)) }}
{{- fail "rls.enabled needs rls.config (envoyproxy/ratelimit YAML files) or rls.existingConfigMap" }}
{{- end }}
{{- end }}
