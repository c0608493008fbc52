{{- define "obscura.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}{{- else -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "obscura.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: include "obscura.selector" (list . "nats"). */}}
{{- define "obscura.selector" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ $.Chart.Name }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "obscura.operatorSelector" -}}
{{ include "obscura.selector" (list . "operator") }}
{{- end -}}

{{/* An image reference: include "obscura.image" (list . .Values.images.nats). */}}
{{- define "obscura.image" -}}
{{- $ := index . 0 -}}
{{- $img := index . 1 -}}
{{- $ref := printf "%s:%s" $img.repository ($img.tag | default $.Chart.AppVersion) -}}
{{- with $img.digest }}{{ $ref = printf "%s@%s" $ref . }}{{ end -}}
{{- $ref -}}
{{- end -}}

{{/* The address a component listens on: 127.0.0.1 on the node's network, every address otherwise. */}}
{{- define "obscura.listenHost" -}}
{{- if .Values.platform.hostNetwork }}127.0.0.1{{ else }}0.0.0.0{{ end -}}
{{- end -}}

{{/* How a client in the cluster reaches a chart Service: include "obscura.serviceHost" (list . "nats"). */}}
{{- define "obscura.serviceHost" -}}
{{- $ := index . 0 -}}
{{- if $.Values.platform.hostNetwork -}}127.0.0.1{{- else -}}
{{- printf "%s-%s.%s.svc.%s" (include "obscura.fullname" $) (index . 1) $.Release.Namespace $.Values.platform.clusterDomain -}}
{{- end -}}
{{- end -}}

{{/* Pod-level fields every chart pod shares: the network mode and the restricted Pod Security profile. */}}
{{- define "obscura.podSpec" -}}
{{- if .Values.platform.hostNetwork }}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
{{- end }}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  fsGroup: 65532
  seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{/* Container-level restricted profile. */}}
{{- define "obscura.containerSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities: {drop: ["ALL"]}
  seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{/* A probe's host: the kubelet must never dial the node's InternalIP on the node's network. */}}
{{- define "obscura.probeHost" -}}
{{- if .Values.platform.hostNetwork }}host: 127.0.0.1{{ end -}}
{{- end -}}

{{/*
The operator's NATS passwords (keys operator, pda-proxy, pda-db): the existing Secret's on
upgrade, random on install. Memoised in the values so the Secret and the bootstrap accounts
file rendered in the same run agree.
*/}}
{{- define "obscura.natsOperatorPasswords" -}}
{{- if not (hasKey .Values "__natsOperatorPasswords") -}}
{{- $name := printf "%s-nats-operator" (include "obscura.fullname" .) -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace $name -}}
{{- $pw := dict -}}
{{- range $k := list "operator" "pda-proxy" "pda-db" -}}
{{- if and $existing $existing.data (hasKey $existing.data $k) -}}
{{- $_ := set $pw $k (index $existing.data $k | b64dec) -}}
{{- else -}}
{{- $_ := set $pw $k (randAlphaNum 32) -}}
{{- end -}}
{{- end -}}
{{- $_ := set .Values "__natsOperatorPasswords" $pw -}}
{{- end -}}
{{- toJson (index .Values "__natsOperatorPasswords") -}}
{{- end -}}

{{/* The NATS URL the operator and its workloads connect to. On the node's network a cluster's
nodes listen on 127.0.0.1:<client port + ordinal>, so the URL lists every node (nats.go takes a
comma-separated list and fails over between them); on a pod network the Service reaches a ready
node and the clients learn the others from it. */}}
{{- define "obscura.natsURL" -}}
{{- if .Values.nats.enabled -}}
{{- if .Values.platform.hostNetwork -}}
{{- $urls := list -}}
{{- range $i := until (int .Values.nats.cluster.replicas) -}}
{{- $urls = append $urls (printf "nats://127.0.0.1:%d" (add $.Values.nats.ports.client $i)) -}}
{{- end -}}
{{- join "," $urls -}}
{{- else -}}
{{- printf "nats://%s:%d" (include "obscura.serviceHost" (list . "nats")) (int .Values.nats.ports.client) -}}
{{- end -}}
{{- else -}}{{ .Values.nats.url }}{{- end -}}
{{- end -}}

{{/* The password of the NATS cluster's routes: the existing config Secret's on upgrade, random on
install (memoised like the operator's passwords). */}}
{{- define "obscura.natsRoutePassword" -}}
{{- if not (hasKey .Values "__natsRoutePassword") -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (printf "%s-nats-config" (include "obscura.fullname" .)) -}}
{{- $pw := randAlphaNum 32 -}}
{{- if and $existing $existing.data (hasKey $existing.data "route-password") -}}
{{- $pw = index $existing.data "route-password" | b64dec -}}
{{- end -}}
{{- $_ := set .Values "__natsRoutePassword" $pw -}}
{{- end -}}
{{- index .Values "__natsRoutePassword" -}}
{{- end -}}

{{- define "obscura.edgeUpstreamHost" -}}
{{- if .Values.edge.upstream.host -}}{{ .Values.edge.upstream.host }}
{{- else if .Values.platform.hostNetwork -}}127.0.0.1
{{- else -}}{{ printf "%s-gateway.%s.svc.%s" .Values.edge.round .Release.Namespace .Values.platform.clusterDomain }}
{{- end -}}
{{- end -}}

{{/* The EncounterMailbox Service the edge routes /v1/mailboxes/ to. */}}
{{- define "obscura.edgeMailboxHost" -}}
{{- $m := .Values.edge.sddrMailbox -}}
{{- if $m.host -}}{{ $m.host }}
{{- else if .Values.platform.hostNetwork -}}127.0.0.1
{{- else -}}{{ printf "%s-sddr-mailbox.%s.svc.%s" $m.name .Release.Namespace .Values.platform.clusterDomain }}
{{- end -}}
{{- end -}}

{{/* The PDA proxy ingress the edge passes participants' TLS through to. */}}
{{- define "obscura.edgePDAProxyHost" -}}
{{- $p := .Values.edge.pdaProxy -}}
{{- if $p.host -}}{{ $p.host }}
{{- else if .Values.platform.hostNetwork -}}127.0.0.1
{{- else -}}{{ printf "%s-proxy.%s.svc.%s" $p.job ($p.namespace | default .Release.Namespace) .Values.platform.clusterDomain }}
{{- end -}}
{{- end -}}

{{- define "obscura.edgeTLSSecret" -}}
{{- .Values.edge.tls.existingSecret | default (printf "%s-edge-tls" (include "obscura.fullname" .)) -}}
{{- end -}}

{{/* The name clients verify the edge's certificate against. */}}
{{- define "obscura.edgeServerName" -}}
{{- if .Values.platform.hostNetwork -}}localhost{{- else -}}
{{- printf "%s-edge.%s.svc" (include "obscura.fullname" .) .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{- define "obscura.edgeDNSNames" -}}
{{- $f := include "obscura.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $names := list (printf "%s-edge" $f) (printf "%s-edge.%s" $f $ns) (printf "%s-edge.%s.svc" $f $ns) (printf "%s-edge.%s.svc.%s" $f $ns .Values.platform.clusterDomain) "localhost" -}}
{{- toJson (concat $names .Values.edge.tls.dnsNames | uniq) -}}
{{- end -}}

{{- define "obscura.certManager" -}}
{{- if and .Values.edge.enabled (not .Values.edge.tls.existingSecret) .Values.edge.tls.certManager.enabled (.Capabilities.APIVersions.Has "cert-manager.io/v1") -}}true{{- end -}}
{{- end -}}

{{/* The NATS pod's ephemeral storage as JSON {sizeLimit, request, limit}: without persistence the
JetStream store (nats.jetstream.maxFile, a NATS size: K/M/G/T are powers of 1024) lives in an
emptyDir of that size, requested as ephemeral storage, limited to 5/4 of it (the /tmp volume and
the logs besides); with a PVC only /tmp and the logs (32Mi, 64Mi). */}}
{{- define "obscura.natsStore" -}}
{{- if .Values.nats.jetstream.persistence.enabled -}}
{{- dict "sizeLimit" "" "request" "32Mi" "limit" "64Mi" | toJson -}}
{{- else -}}
{{- $max := .Values.nats.jetstream.maxFile | trimSuffix "B" -}}
{{- $n := regexFind "^[0-9]+" $max | int64 -}}
{{- $u := trimPrefix (toString $n) $max -}}
{{- $lower := dict "K" "" "M" "Ki" "G" "Mi" "T" "Gi" -}}
{{- $q := ternary (printf "%d" $n) (printf "%d%si" $n $u) (eq $u "") -}}
{{- $l := ternary (printf "%d" (div (mul $n 5) 4)) (printf "%d%s" (div (mul $n 1280) 1) (get $lower $u)) (eq $u "") -}}
{{- dict "sizeLimit" $q "request" $q "limit" $l | toJson -}}
{{- end -}}
{{- end -}}

{{/*
obscura.redisData: the data volume of a Redis instance (list $ instance) and its ephemeral storage,
as JSON {sizeLimit, request, limit}. With the append-only file on, the file is a base (an RDB of
the dataset, at most redis.maxMemory), increments until they reach the base's size (Redis'
auto-aof-rewrite-percentage 100, here from 16 MB), and during a rewrite a new base beside both:
up to 3 × maxMemory, plus 32Mi. A smaller volume evicts the pod and its file with it (the
cluster e2e's ×8 load grew the 64Mi it once had past its limit: the integrator's Redis was
evicted mid-round and restarted empty). Without the file the volume stays small. The limit adds
/tmp's 16Mi and 16Mi of slack; values' resources win.
*/}}
{{- define "obscura.redisData" -}}
{{- $ := index . 0 -}}{{- $r := index . 1 -}}
{{- if $r.appendfsync -}}
{{- $m := $.Values.redis.maxMemory | toString | lower | trimSuffix "b" -}}
{{- $n := regexFind "^[0-9]+" $m | int64 -}}
{{- $u := trimPrefix (toString $n) $m -}}
{{- $mi := get (dict "" (div $n 1048576) "k" (div $n 1024) "m" $n "g" (mul $n 1024)) $u | int64 -}}
{{- if not (hasKey (dict "" 1 "k" 1 "m" 1 "g" 1) $u) -}}{{- fail (printf "redis.maxMemory %q: want a Redis size (e.g. 256mb)" ($.Values.redis.maxMemory | toString)) -}}{{- end -}}
{{- $size := add (mul $mi 3) 32 -}}
{{- dict "sizeLimit" (printf "%dMi" $size) "request" (printf "%dMi" (add $mi 32)) "limit" (printf "%dMi" (add $size 32)) | toJson -}}
{{- else -}}
{{- dict "sizeLimit" "16Mi" "request" "32Mi" "limit" "64Mi" | toJson -}}
{{- end -}}
{{- end -}}
