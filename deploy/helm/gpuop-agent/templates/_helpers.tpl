{{/* The agent's name: its Pods' selector label (app.kubernetes.io/name). */}}
{{- define "gpuop-agent.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Its objects' name: the release's where it already says the chart's, else both. */}}
{{- define "gpuop-agent.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "gpuop-agent.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "gpuop-agent.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "gpuop-agent.serviceAccountName" -}}
{{- default (include "gpuop-agent.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{/* The labels of the kustomization's objects (deploy/agent), then Helm's own. */}}
{{- define "gpuop-agent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuop-agent.name" . }}
{{- end }}

{{- define "gpuop-agent.podLabels" -}}
{{ include "gpuop-agent.selectorLabels" . }}
app.kubernetes.io/part-of: gpuop
{{- end }}

{{- define "gpuop-agent.labels" -}}
{{ include "gpuop-agent.podLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "gpuop-agent.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
