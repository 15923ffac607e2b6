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

{{/* The admission policies' variables the agent's and the uninstall hook's share (admission.yaml, forget-policy.yaml). */}}
{{- define "gpuop-agent.policyVariables" }}
    - name: sub  # the request's subresource is absent, not empty, where it names none
      expression: "has(request.subResource) ? request.subResource : ''"
    - name: resource  # as kubectl names it: pods/eviction, events.events.k8s.io
      expression: >-
        request.resource.resource + (variables.sub == '' ? '' : '/' + variables.sub) +
        (request.resource.group == '' ? '' : '.' + request.resource.group)
    - name: ownNamespace
      expression: request.userInfo.username.split(':')[2]
    - name: nodeUpdate
      expression: >-
        request.resource.group == '' && request.resource.resource == 'nodes' &&
        request.operation == 'UPDATE' && variables.sub in ['', 'status']
    - name: gate
      expression: "'gpuop.io/restart-unsafe'"
    - name: gpuopConditions
      expression: "['gpuop.io/GPURuntimeProblem', 'gpuop.io/GPURuntimeRestartUnsafe']"
    - name: labels
      expression: "has(object.metadata.labels) ? object.metadata.labels : {}"
    - name: oldLabels
      expression: "has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}"
    - name: labelsButGate  # every label but the gate's as it was
      expression: >-
        variables.labels.all(k, k == variables.gate || (k in variables.oldLabels && variables.oldLabels[k] == variables.labels[k])) &&
        variables.oldLabels.all(k, k == variables.gate || k in variables.labels)
    - name: metadataButLabels  # annotations, finalizers and owners as they were
      expression: >-
        (has(object.metadata.annotations) ? object.metadata.annotations : {}) ==
        (has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}) &&
        (has(object.metadata.finalizers) ? object.metadata.finalizers : []) ==
        (has(oldObject.metadata.finalizers) ? oldObject.metadata.finalizers : []) &&
        (has(object.metadata.ownerReferences) ? object.metadata.ownerReferences : []) ==
        (has(oldObject.metadata.ownerReferences) ? oldObject.metadata.ownerReferences : [])
    - name: conditions
      expression: "has(object.status.conditions) ? object.status.conditions : []"
    - name: oldConditions
      expression: "has(oldObject.status.conditions) ? oldObject.status.conditions : []"
    - name: statusButConditions  # a Node's status, every field but its conditions as it was
      expression: >-
        has(object.status.capacity) == has(oldObject.status.capacity) &&
        (!has(object.status.capacity) || object.status.capacity == oldObject.status.capacity) &&
        has(object.status.allocatable) == has(oldObject.status.allocatable) &&
        (!has(object.status.allocatable) || object.status.allocatable == oldObject.status.allocatable) &&
        has(object.status.addresses) == has(oldObject.status.addresses) &&
        (!has(object.status.addresses) || object.status.addresses == oldObject.status.addresses) &&
        has(object.status.nodeInfo) == has(oldObject.status.nodeInfo) &&
        (!has(object.status.nodeInfo) || object.status.nodeInfo == oldObject.status.nodeInfo) &&
        has(object.status.daemonEndpoints) == has(oldObject.status.daemonEndpoints) &&
        (!has(object.status.daemonEndpoints) || object.status.daemonEndpoints == oldObject.status.daemonEndpoints) &&
        has(object.status.phase) == has(oldObject.status.phase) &&
        (!has(object.status.phase) || object.status.phase == oldObject.status.phase) &&
        has(object.status.images) == has(oldObject.status.images) &&
        (!has(object.status.images) || object.status.images == oldObject.status.images) &&
        has(object.status.config) == has(oldObject.status.config) &&
        (!has(object.status.config) || object.status.config == oldObject.status.config) &&
        has(object.status.runtimeHandlers) == has(oldObject.status.runtimeHandlers) &&
        (!has(object.status.runtimeHandlers) || object.status.runtimeHandlers == oldObject.status.runtimeHandlers) &&
        has(object.status.features) == has(oldObject.status.features) &&
        (!has(object.status.features) || object.status.features == oldObject.status.features) &&
        has(object.status.declaredFeatures) == has(oldObject.status.declaredFeatures) &&
        (!has(object.status.declaredFeatures) || object.status.declaredFeatures == oldObject.status.declaredFeatures) &&
        has(object.status.volumesInUse) == has(oldObject.status.volumesInUse) &&
        (!has(object.status.volumesInUse) || object.status.volumesInUse == oldObject.status.volumesInUse) &&
        has(object.status.volumesAttached) == has(oldObject.status.volumesAttached) &&
        (!has(object.status.volumesAttached) || object.status.volumesAttached == oldObject.status.volumesAttached)
{{- end }}
