{{/* The base name of every object: the release name, or release-firn. */}}
{{- define "firn.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "firn.selectorLabels" -}}
app.kubernetes.io/name: firn
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "firn.labels" -}}
{{ include "firn.selectorLabels" . }}
app.kubernetes.io/part-of: firn
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "firn.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The names of the generators, in order. */}}
{{- define "firn.generatorNames" -}}
{{- range .Values.generators }}{{ regexReplaceAll "=.*" . "" }} {{ end -}}
{{- end -}}

{{/*
Values the chart cannot default: checked once, by the ConfigMap, so that
a missing one fails the whole render with its name.
*/}}
{{- define "firn.validate" -}}
{{- $c := .Values.coordinator -}}
{{- if and (empty $c.etcd.endpoints) (empty $c.zookeeper.servers) -}}
{{- fail "coordinator.etcd.endpoints or coordinator.zookeeper.servers is required: the coordinator every node shares (there is no embedded choice: each pod would be a separate ID space issuing the same IDs)" -}}
{{- end -}}
{{- if and $c.etcd.endpoints $c.zookeeper.servers -}}
{{- fail "coordinator.etcd.endpoints and coordinator.zookeeper.servers are both set: a node runs on one coordinator only" -}}
{{- end -}}
{{- if and (empty .Values.ntp.servers) (not .Values.ntp.disabled) -}}
{{- fail "ntp.servers is required: the NTP servers your hosts' chrony follows (or ntp.disabled=true to leave only the peer check)" -}}
{{- end -}}
{{- if and .Values.ntp.servers .Values.ntp.disabled -}}
{{- fail "ntp.servers is set and ntp.disabled is true: choose one" -}}
{{- end -}}
{{- if empty .Values.generators -}}
{{- fail "generators must name at least one generator (name=layout)" -}}
{{- end -}}
{{- range .Values.generators -}}
{{- if not (regexMatch "^[a-zA-Z0-9_.-]+=." .) -}}
{{- fail (printf "generators: %q is not name=layout" .) -}}
{{- end -}}
{{- end -}}
{{- $names := splitList " " (include "firn.generatorNames" . | trim) -}}
{{- if and .Values.readiness.generator (not (has .Values.readiness.generator $names)) -}}
{{- fail (printf "readiness.generator %q is not one of the generators %v" .Values.readiness.generator $names) -}}
{{- end -}}
{{- if and .Values.tls.enabled (empty .Values.tls.issuerRef.name) -}}
{{- fail "tls.issuerRef.name is required with tls.enabled: the cert-manager issuer of the nodes' and callers' certificates" -}}
{{- end -}}
{{- range $i, $caller := .Values.tls.callers -}}
{{- if or (empty $caller.name) (empty $caller.commonName) -}}
{{- fail (printf "tls.callers[%d]: name and commonName are required" $i) -}}
{{- end -}}
{{- if and $caller.namespace (ne $caller.namespace $.Release.Namespace) (ne $.Values.tls.issuerRef.kind "ClusterIssuer") -}}
{{- fail (printf "tls.callers[%d].namespace %q: a caller in another namespace needs tls.issuerRef.kind ClusterIssuer (an Issuer signs in its own namespace only)" $i $caller.namespace) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The readiness probe's path. */}}
{{- define "firn.readyzPath" -}}
{{- if .Values.readiness.generator -}}
/readyz?generator={{ .Values.readiness.generator }}
{{- else -}}
/readyz
{{- end -}}
{{- end -}}
