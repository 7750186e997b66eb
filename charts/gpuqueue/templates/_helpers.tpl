{{/* Labels every object carries; component-specific ones add app.kubernetes.io/component. */}}
{{- define "gpuqueue.labels" -}}
app.kubernetes.io/name: gpuqueue
app.kubernetes.io/component: {{ . }}
{{- end }}

{{- define "gpuqueue.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The namespaces nothing of gpuqueue checks: kube-system, the release's, then the values'. */}}
{{- define "gpuqueue.exemptNamespaces" -}}
{{- $ns := list "kube-system" .Release.Namespace -}}
{{- range .Values.configuration.enforcement.exemptNamespaces }}{{ if not (has . $ns) }}{{ $ns = append $ns . }}{{ end }}{{ end -}}
{{ toJson $ns }}
{{- end }}

{{- define "gpuqueue.schedulerNames" -}}
{{- if .Values.configuration.enforcement.schedulerNames -}}
{{ toJson .Values.configuration.enforcement.schedulerNames }}
{{- else if eq .Values.schedulerMode "own-scheduler" -}}
["gpuqueue-scheduler"]
{{- else if eq .Values.schedulerMode "cluster-scheduler" -}}
["default-scheduler"]
{{- else -}}
{{ fail (printf "schedulerMode: %q is neither own-scheduler nor cluster-scheduler" .Values.schedulerMode) }}
{{- end }}
{{- end }}

{{/* A Deployment's pod placement: (dict "root" $ "v" .Values.webhook "component" "webhook"). */}}
{{- define "gpuqueue.placement" -}}
{{- with .v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .v.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
affinity:
{{- if .v.affinity }}
  {{- toYaml .v.affinity | nindent 2 }}
{{- else }}
  podAntiAffinity:
    # Preferred, not required: a one-node cluster still runs both replicas.
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels: {app.kubernetes.io/name: gpuqueue, app.kubernetes.io/component: {{ .component }}}
{{- end }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "gpuqueue.podSecurityContext" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  seccompProfile: {type: RuntimeDefault}
{{- end }}

{{- define "gpuqueue.containerSecurityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  runAsNonRoot: true
  capabilities: {drop: [ALL]}
{{- end }}

{{/* A webhook's clientConfig: Service gpuqueue-webhook, or webhook.external (development). */}}
{{- define "gpuqueue.webhookClientConfig" -}}
{{- $ext := .root.Values.webhook.external -}}
{{- if $ext.url -}}
url: {{ printf "%s%s" (trimSuffix "/" $ext.url) .path }}
{{- with $ext.caBundle }}
caBundle: {{ . }}
{{- end }}
{{- else -}}
service: {name: gpuqueue-webhook, namespace: {{ .root.Release.Namespace }}, path: {{ .path }}, port: 443}
{{- end }}
{{- end }}

{{/* Where the webhook configurations get their caBundle (none with webhook.external: it is given). */}}
{{- define "gpuqueue.caInjection" -}}
{{- if and .Values.enableCertManager (not .Values.webhook.external.url) }}
annotations:
  cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/gpuqueue-serving
{{- end }}
{{- end }}

{{- define "gpuqueue.pdb" -}}
{{- if .v.podDisruptionBudget.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: gpuqueue-{{ .component }}
  namespace: {{ .root.Release.Namespace }}
  labels: {app.kubernetes.io/name: gpuqueue, app.kubernetes.io/component: {{ .component }}}
spec:
  minAvailable: {{ .v.podDisruptionBudget.minAvailable }}
  selector:
    matchLabels: {app.kubernetes.io/name: gpuqueue, app.kubernetes.io/component: {{ .component }}}
{{- end }}
{{- end }}

{{/* podWebhooks.namespaceLabels: the pod and binding webhooks only in namespaces labelled so. */}}
{{- define "gpuqueue.podWebhookNamespaces" -}}
{{- range $k, $v := .Values.podWebhooks.namespaceLabels }}
- {key: {{ $k }}, operator: In, values: [{{ $v | quote }}]}
{{- end }}
{{- end }}

{{/* Whether the server evaluates a webhook's matchConditions (GA in 1.30, beta and on in 1.28-1.29). */}}
{{- define "gpuqueue.hasMatchConditions" -}}
{{- if and .Values.podWebhooks.matchConditions (semverCompare ">=1.28.0-0" .Capabilities.KubeVersion.Version) }}true{{ end }}
{{- end }}

{{/* A CEL test that a resource list (a map, possibly absent) names a resource the webhook cares about:
     one that is not among those every pod asks for (gpuqueue/jobframework/enforcement.py
     BASE_RESOURCES), or one the operator enforces by name. */}}
{{- define "gpuqueue.celWants" -}}
{{- $base := toJson (list "cpu" "memory" "ephemeral-storage" "pods") | replace "\"" "'" -}}
{{- $named := .root.Values.configuration.enforcement.resources | default list -}}
{{- $parts := splitList "." .m -}}
{{- $has := list -}}
{{- range $i, $_ := $parts }}{{ if gt $i (int $.from) }}{{ $has = append $has (printf "has(%s)" (join "." (slice $parts 0 (add1 $i)))) }}{{ end }}{{ end -}}
({{ join " && " $has }} && {{ .m }}.exists(r, !(r in {{ $base }}){{ if $named }} || r in {{ toJson $named | replace "\"" "'" }}{{ end }}))
{{- end }}

{{/* pod.gpuqueue.io (mutating and validating) is not called for a pod that requests nothing but
     cpu, memory, ephemeral-storage and pods (containers, init containers, the pod-level
     spec.resources, spec.overhead; requests or limits) and carries no kueue.x-k8s.io/ label:
     the webhook leaves such a pod alone. Not when the pod integration is on: Kueue's pod
     integration reads every pod (a default LocalQueue, manageJobsWithoutQueueName). */}}
{{- define "gpuqueue.podMatchConditions" -}}
{{- if and (include "gpuqueue.hasMatchConditions" .) (not (has "pod" .Values.configuration.integrations.frameworks)) -}}
matchConditions:
- name: wants-a-gpu-or-a-queue
  expression: >-
    (has(object.metadata.labels) && object.metadata.labels.exists(k, k.startsWith('kueue.x-k8s.io/')))
    || object.spec.containers.exists(c, {{ include "gpuqueue.celWants" (dict "root" . "m" "c.resources.requests" "from" 0) }} || {{ include "gpuqueue.celWants" (dict "root" . "m" "c.resources.limits" "from" 0) }})
    || (has(object.spec.initContainers) && object.spec.initContainers.exists(c, {{ include "gpuqueue.celWants" (dict "root" . "m" "c.resources.requests" "from" 0) }} || {{ include "gpuqueue.celWants" (dict "root" . "m" "c.resources.limits" "from" 0) }}))
    || {{ include "gpuqueue.celWants" (dict "root" . "m" "object.spec.resources.requests" "from" 1) }} || {{ include "gpuqueue.celWants" (dict "root" . "m" "object.spec.resources.limits" "from" 1) }}
    || {{ include "gpuqueue.celWants" (dict "root" . "m" "object.spec.overhead" "from" 1) }}
{{- end }}
{{- end }}

{{/* binding.gpuqueue.io is not called for the bindings of the schedulers the webhook lets bind
     anything (--scheduler-username, webhook/pod_admission.py DEFAULT_SCHEDULER_USERNAMES). */}}
{{- define "gpuqueue.schedulerUsernames" -}}
{{ toJson (list "system:kube-scheduler" (printf "system:serviceaccount:%s:gpuqueue-scheduler" .Release.Namespace)) }}
{{- end }}

{{- define "gpuqueue.bindingMatchConditions" -}}
{{- if include "gpuqueue.hasMatchConditions" . -}}
matchConditions:
- name: not-by-a-scheduler
  expression: "!(request.userInfo.username in {{ include "gpuqueue.schedulerUsernames" . | replace "\"" "'" }})"
{{- end }}
{{- end }}
