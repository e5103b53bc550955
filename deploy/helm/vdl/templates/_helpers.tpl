{{/*
fullname prefixes every object: the release name, with "-vdl" unless it
already says vdl. Cut to 40 characters because a StatefulSet's name plus
"-server-<zone>" and the revision hash must stay within the 63 of a label.
*/}}
{{- define "vdl.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "vdl.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* selector: the labels that pick one component's pods; call with (list $ "server") */}}
{{- define "vdl.selector" -}}
app.kubernetes.io/name: {{ (index . 0).Chart.Name }}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "vdl.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "vdl.configServerService" -}}{{ include "vdl.fullname" . }}-config{{- end -}}
{{- define "vdl.serverService" -}}{{ include "vdl.fullname" . }}-server{{- end -}}

{{/* configServerHost: the DNS name of config server pod ordinal; call with (list $ ordinal) */}}
{{- define "vdl.configServerHost" -}}
{{- $ := index . 0 -}}
{{- printf "%s-%d.%s.%s.svc.%s" (include "vdl.configServerService" $) (index . 1) (include "vdl.configServerService" $) $.Release.Namespace $.Values.clusterDomain -}}
{{- end -}}

{{/*
serverGroups: the servers' StatefulSets as YAML {groups: [...]}, each with
its name, DC, zone ("" : not pinned) and node id base. One group without
zones; one per zone with them, ids zoneIndex*100 + ordinal + 1 so that
adding servers to a zone never renumbers another zone's.
*/}}
{{- define "vdl.serverGroups" -}}
{{- $svc := include "vdl.serverService" . -}}
{{- if gt (int .Values.server.replicas) 99 -}}
{{- fail "server.replicas: at most 99 (node ids are zoneIndex*100 + ordinal + 1)" -}}
{{- end -}}
groups:
{{- if .Values.server.zones }}
{{- range $i, $zone := .Values.server.zones }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $zone) }}
{{- fail (printf "server.zones: %q is not a DNS label (it names a StatefulSet)" $zone) }}
{{- end }}
- name: {{ printf "%s-%s" $svc $zone | quote }}
  dc: {{ $zone | quote }}
  zone: {{ $zone | quote }}
  base: {{ mul $i 100 }}
{{- end }}
{{- else }}
- name: {{ $svc | quote }}
  dc: {{ .Values.server.dc | quote }}
  zone: ""
  base: 0
{{- end }}
{{- end -}}

{{/* antiAffinity keeps pods of one component on different nodes; call with (list $ component mode) */}}
{{- define "vdl.antiAffinity" -}}
{{- $ := index . 0 -}}
podAntiAffinity:
{{- if eq (index . 2) "hard" }}
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- include "vdl.selector" (list $ (index . 1)) | nindent 10 }}
{{- else }}
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "vdl.selector" (list $ (index . 1)) | nindent 12 }}
{{- end }}
{{- end -}}

{{/* metricsAnnotations: Prometheus scrape annotations; call with (list $ port) */}}
{{- define "vdl.metricsAnnotations" -}}
{{- $ := index . 0 -}}
{{- if $.Values.metrics.podAnnotations -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ index . 1 | quote }}
prometheus.io/path: /metrics
prometheus.io/scheme: {{ ternary "https" "http" $.Values.tls.enabled }}
{{- end }}
{{- end -}}

{{/*
certsCommand: the `vdl certs` line that makes this release's certificates:
every server and config server id, and DNS names covering every pod (the
servers and config servers check each other's HTTPS by host name) and the
Kafka bootstrap service.
*/}}
{{- define "vdl.certsCommand" -}}
{{- $ids := list -}}
{{- range $g := (include "vdl.serverGroups" . | fromYaml).groups -}}
{{- range $o := until (int $.Values.server.replicas) -}}
{{- $ids = append $ids (add (int $g.base) $o 1) -}}
{{- end -}}
{{- end -}}
{{- $suffix := printf "%s.svc.%s" .Release.Namespace .Values.clusterDomain -}}
vdl certs --dir certs --cluster {{ .Values.clusterId }} --nodes {{ join "," $ids }} --config-servers {{ join "," (untilStep 1 (int (add1 .Values.configServer.replicas)) 1) }} --hosts '*.{{ include "vdl.serverService" . }}.{{ $suffix }},*.{{ include "vdl.configServerService" . }}.{{ $suffix }},{{ include "vdl.fullname" . }}-kafka.{{ $suffix }}'
{{- end -}}
