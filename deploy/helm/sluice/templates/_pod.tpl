{{/* The flags of `sluice serve`, each as --name=value. Secrets are never
here: they are files (--root-key-file, --cluster-secret-file) or
environment variables from Secrets (sluice.env). */}}
{{- define "sluice.args" -}}
- serve
- --http-addr=0.0.0.0:{{ .Values.httpPort }}
- --admin-addr=0.0.0.0:{{ .Values.adminPort }}
- {{ printf "--region=%s" .Values.region | quote }}
- {{ printf "--log-format=%s" .Values.logFormat | quote }}
- {{ printf "--log-level=%s" .Values.logLevel | quote }}
- --data-dir=/var/lib/sluice
- --max-counters={{ int64 .Values.maxCounters }}
- {{ printf "--shutdown-timeout=%s" .Values.shutdownTimeout | quote }}
{{- if include "sluice.rootKeyFile" . }}
- --root-key-file=/etc/sluice/root-keys/root-keys
{{- end }}
{{- range .Values.auth.rootKeySHA256s }}
- {{ printf "--root-key-sha256=%s" . | quote }}
{{- end }}
{{- if eq .Values.mode "cluster" }}
- --origin=cluster
- --cluster-addr=0.0.0.0:{{ .Values.cluster.gossipPort }}
- --cluster-advertise=$(POD_IP):{{ .Values.cluster.gossipPort }}
- {{ printf "--cluster-join=%s" (include "sluice.clusterJoin" .) | quote }}
- --cluster-secret-file=/etc/sluice/cluster-secret/cluster-secret
- {{ printf "--cluster-preset=%s" .Values.cluster.preset | quote }}
{{- else }}
- --origin=redis
{{- with .Values.redis.url }}
- {{ printf "--redis-url=%s" . | quote }}
{{- end }}
{{- end }}
{{- if .Values.global.existingSecret }}
- {{ printf "--global-interval=%s" .Values.global.interval | quote }}
{{- end }}
{{- if .Values.rls.enabled }}
- --rls-config=/etc/sluice/rls
- --rls-addr=0.0.0.0:{{ .Values.rls.port }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* The container's environment: the pod's IP for --cluster-advertise,
and the Redis URL and MySQL DSN from Secrets, which may hold passwords. */}}
{{- define "sluice.env" -}}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- if and (eq .Values.mode "redis") .Values.redis.existingSecret (not .Values.redis.url) }}
- name: SLUICE_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.existingSecret }}
      key: {{ .Values.redis.urlKey }}
{{- end }}
{{- if .Values.global.existingSecret }}
- name: SLUICE_MYSQL_DSN
  valueFrom:
    secretKeyRef:
      name: {{ .Values.global.existingSecret }}
      key: {{ .Values.global.dsnKey }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "sluice.volumeMounts" -}}
- name: data
  mountPath: /var/lib/sluice
{{- if include "sluice.rootKeyFile" . }}
- name: root-keys
  mountPath: /etc/sluice/root-keys
  readOnly: true
{{- end }}
{{- if eq .Values.mode "cluster" }}
- name: cluster-secret
  mountPath: /etc/sluice/cluster-secret
  readOnly: true
{{- end }}
{{- if .Values.rls.enabled }}
- name: rls
  mountPath: /etc/sluice/rls
  readOnly: true
{{- end }}
{{- end }}

{{/* The volumes: the SQLite store's folder (namespaces and overrides when
neither Redis nor MySQL holds them), and the files of the Secrets and of
the RLS ConfigMap, readable by the pod's group only. */}}
{{- define "sluice.volumes" -}}
- name: data
  emptyDir: {}
{{- if include "sluice.rootKeyFile" . }}
- name: root-keys
  secret:
    secretName: {{ .Values.auth.existingSecret | default (include "sluice.secretName" .) }}
    defaultMode: 0440
    items:
      - key: {{ if .Values.auth.existingSecret }}{{ .Values.auth.existingSecretKey }}{{ else }}root-keys{{ end }}
        path: root-keys
{{- end }}
{{- if eq .Values.mode "cluster" }}
- name: cluster-secret
  secret:
    secretName: {{ .Values.cluster.existingSecret | default (include "sluice.secretName" .) }}
    defaultMode: 0440
    items:
      - key: {{ if .Values.cluster.existingSecret }}{{ .Values.cluster.existingSecretKey }}{{ else }}cluster-secret{{ end }}
        path: cluster-secret
{{- end }}
{{- if .Values.rls.enabled }}
- name: rls
  configMap:
    name: {{ include "sluice.rlsConfigMap" . }}
{{- end }}
{{- end }}
