{{- define "ainic-dra.fullname" -}}
{{ .Values.fullnameOverride | default .Release.Name }}
{{- end -}}

{{- define "ainic-dra.serviceAccountName" -}}
{{ .Values.serviceAccount.name | default (include "ainic-dra.fullname" .) }}
{{- end -}}

{{- define "ainic-dra.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "ainic-dra.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: node-agent
{{- end -}}

{{- define "ainic-dra.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- /* Feature gates in the upstream flag syntax, sorted by name. */ -}}
{{- define "ainic-dra.featureGates" -}}
{{- range $i, $name := keys .Values.featureGates | sortAlpha -}}
{{- if $i }},{{ end }}{{ $name }}={{ index $.Values.featureGates $name }}
{{- end -}}
{{- end -}}

{{- /* Nodes with an AMD NIC, as labelled by NFD (vendor-only or class_vendor
labels) or by the AMD network operator's rule. */ -}}
{{- define "ainic-dra.nodeAffinity" -}}
{{- if .Values.nodeAffinity -}}
{{ toYaml .Values.nodeAffinity }}
{{- else -}}
requiredDuringSchedulingIgnoredDuringExecution:
  nodeSelectorTerms:
  - matchExpressions:
    - key: feature.node.kubernetes.io/amd-nic
      operator: In
      values: ["true"]
  - matchExpressions:
    - key: feature.node.kubernetes.io/pci-1dd8.present
      operator: In
      values: ["true"]
  - matchExpressions:
    - key: feature.node.kubernetes.io/pci-0200_1dd8.present
      operator: In
      values: ["true"]
{{- end -}}
{{- end -}}

{{/*
KUBERNETES_SERVICE_HOST/PORT for clusters where the API server's Service
address does not reach it (no kube-proxy yet, or an API server on the
node's loopback): values apiServer.host and apiServer.port override what
the kubelet injects. Empty: in-cluster defaults.
*/}}
{{- define "ainic-dra.apiServerEnv" -}}
{{- if .Values.apiServer.host }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ .Values.apiServer.host | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ .Values.apiServer.port | default 443 | quote }}
{{- end }}
{{- end -}}

{{/* The host part of the agent's --http-addr, from metrics.bind. */}}
{{- define "ainic-dra.httpHost" -}}
{{- if eq .Values.metrics.bind "hostIP" -}}
[$(HOST_IP)]
{{- else if eq .Values.metrics.bind "loopback" -}}
127.0.0.1
{{- else if eq .Values.metrics.bind "all" -}}
0.0.0.0
{{- else -}}
{{- fail (printf "metrics.bind %q is not one of hostIP, loopback, all" .Values.metrics.bind) -}}
{{- end -}}
{{- end -}}

{{/* The names the API server reaches the webhook by: the host of
admission.webhook.url, else the webhook Service's DNS name. */}}
{{- define "ainic-dra.webhookHosts" -}}
{{- if .Values.admission.webhook.url -}}
{{- $host := (urlParse .Values.admission.webhook.url).host -}}
{{- regexReplaceAll "^\\[(.*)\\](:[0-9]+)?$|:[0-9]+$" $host "${1}" -}}
{{- else -}}
{{ include "ainic-dra.fullname" . }}-webhook.{{ .Release.Namespace }}.svc
{{- end -}}
{{- end -}}
