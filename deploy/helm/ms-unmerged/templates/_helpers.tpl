{{/*
The objects' name, as CMSWEB's ArgoCD apps name them (ms-unmer-<partition>): the release must be named so, so
that `helm install` takes over those objects (README, "Migration"). In `helm lint` `required` and `fail` only
warn, so the chart lints without values (named after lint's release).
*/}}
{{- define "msunmerged.name" -}}
{{- $partition := required "partition: must be set (t1, t2t3 or t2t3us: -f values-<partition>.yaml)" .Values.partition -}}
{{- if and $partition (ne .Release.Name (printf "ms-unmer-%s" $partition)) -}}
{{- fail (printf "release name %s: must be ms-unmer-%s, the name of CMSWEB's objects of partition %s" .Release.Name $partition $partition) -}}
{{- end -}}
{{- .Release.Name -}}
{{- end -}}

{{/*
A value as TOML, from (list "<values key>" <value>): a string quoted (JSON escapes are TOML's), a whole number
without exponent (values files give float64: 1000000 would print 1e+06), a bool, a list of strings; null or a
missing key fails the render naming the key (an empty TOML value would crash-loop the pod).
*/}}
{{- define "msunmerged.toml" -}}
{{- $key := index . 0 -}}{{- $v := index . 1 -}}
{{- if kindIs "invalid" $v -}}
{{- fail (printf "%s: must be set (it is null or missing in the values)" $key) -}}
{{- else if kindIs "string" $v -}}{{ $v | toJson }}
{{- else if kindIs "bool" $v -}}{{ $v }}
{{- else if kindIs "float64" $v -}}{{ if eq $v (floor $v) }}{{ $v | int64 }}{{ else }}{{ $v }}{{ end }}
{{- else if or (kindIs "int" $v) (kindIs "int64" $v) -}}{{ $v }}
{{- else if kindIs "slice" $v -}}
{{- range $v }}{{ if not (kindIs "string" .) }}{{ fail (printf "%s: a list of strings" $key) }}{{ end }}{{ end -}}
{{ $v | toJson }}
{{- else -}}{{ fail (printf "%s: %s is not a value of the configuration" $key (kindOf $v)) }}
{{- end -}}
{{- end -}}

{{/* The labels of every object: CMSWEB's `app` (its selector, immutable, and its NetworkPolicy's) and Helm's. */}}
{{- define "msunmerged.labels" -}}
app: {{ include "msunmerged.name" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}
{{- end -}}
