{{/* "true" when the chart renders the Prometheus-operator objects (monitoring.prometheusOperator:
enabled, or auto and monitoring.coreos.com/v1 served); "" otherwise. */}}
{{- define "obscura.prometheusOperator" -}}
{{- $m := .Values.monitoring.prometheusOperator -}}
{{- if or (eq $m "enabled") (and (eq $m "auto") (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1")) -}}true{{- end -}}
{{- end -}}

{{/* prometheus.io/* pod annotations, only when no PodMonitor covers the pod:
include "obscura.scrapeAnnotations" (list . port [path]); the path is /metrics unless given. */}}
{{- define "obscura.scrapeAnnotations" -}}
{{- $ := index . 0 -}}
{{- if not (include "obscura.prometheusOperator" $) -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ index . 1 | quote }}
prometheus.io/path: {{ if gt (len .) 2 }}{{ index . 2 }}{{ else }}/metrics{{ end }}
{{- end -}}
{{- end -}}
