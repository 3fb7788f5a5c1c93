{{/* Chart name, truncated to 63 characters (DNS label). */}}
{{- define "poolguard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name. Truncated to 52 characters so that suffixes added by this chart
(-validating, -selfsigned, ...) stay within the 63 characters of a label value / DNS label.
*/}}
{{- define "poolguard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "poolguard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "poolguard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "poolguard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "poolguard.labels" -}}
helm.sh/chart: {{ include "poolguard.chart" . }}
{{ include "poolguard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "poolguard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "poolguard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Names of the two webhook configurations (cluster-scoped, so they include the release). */}}
{{- define "poolguard.mutatingName" -}}
{{- printf "%s-mutating" (include "poolguard.fullname" .) }}
{{- end }}

{{- define "poolguard.validatingName" -}}
{{- printf "%s-validating" (include "poolguard.fullname" .) }}
{{- end }}

{{/* DNS name the API server uses to reach the webhook Service. */}}
{{- define "poolguard.serviceDNS" -}}
{{- printf "%s.%s.svc" (include "poolguard.fullname" .) .Release.Namespace }}
{{- end }}

{{/* Secret with tls.crt and tls.key. */}}
{{- define "poolguard.tlsSecretName" -}}
{{- if eq .Values.certificates.mode "provided" }}
{{- required "certificates.secretName is required when certificates.mode is provided" .Values.certificates.secretName }}
{{- else }}
{{- default (printf "%s-tls" (include "poolguard.fullname" .)) .Values.certificates.secretName }}
{{- end }}
{{- end }}

{{- define "poolguard.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* poolguard's per-request deadline: one second below the webhooks' timeoutSeconds. */}}
{{- define "poolguard.deadlineMs" -}}
{{- sub (mul (int .Values.webhook.timeoutSeconds) 1000) 1000 }}
{{- end }}

{{/*
caBundle for the webhook configurations in mode provided: base64 of the PEM. A PEM value is
encoded here; anything else is taken as already base64-encoded.
*/}}
{{- define "poolguard.caBundle" -}}
{{- $ca := required "certificates.caBundle is required when certificates.mode is provided" .Values.certificates.caBundle | trim }}
{{- if hasPrefix "-----BEGIN" $ca }}
{{- $ca | b64enc }}
{{- else }}
{{- $ca | nospace }}
{{- end }}
{{- end }}

{{/*
clientConfig of a webhook; the argument is a dict with "root" (the chart context) and "path".
With webhook.url the API server calls <url><path> (a poolguard outside the cluster), otherwise
the Service.
In mode self the caBundle field is deliberately absent: poolguard injects it at run time and a
field helm never rendered is one helm never owns, so `helm upgrade` leaves the injected value
alone. In mode certManager cert-manager's cainjector owns it (inject-ca-from annotation).
*/}}
{{- define "poolguard.clientConfig" -}}
{{- $root := .root -}}
{{- $path := .path -}}
clientConfig:
  {{- with $root.Values.webhook.url }}
  url: {{ printf "%s%s" (trimSuffix "/" .) $path | quote }}
  {{- else }}
  service:
    name: {{ include "poolguard.fullname" $root }}
    namespace: {{ $root.Release.Namespace }}
    path: {{ $path }}
    port: {{ $root.Values.service.port }}
  {{- end }}
  {{- if eq $root.Values.certificates.mode "provided" }}
  caBundle: {{ include "poolguard.caBundle" $root }}
  {{- end }}
{{- end }}

{{/* With native.webhookFallback: the namespace of the canary pods (native.canary). */}}
{{- define "poolguard.canaryNamespace" -}}
{{- .Values.native.canary.namespace | default (printf "%s-canary" (include "poolguard.fullname" .)) }}
{{- end }}

{{/*
Namespaces the pod and workload webhooks are never called for: the excluded namespaces and, with
native.webhookFallback, the canary namespace, whose dry-run pods must be decided by the native
objects alone to show that the API server enforces them.
*/}}
{{- define "poolguard.podWebhookExcludedNamespaces" -}}
{{- $excluded := include "poolguard.excludedNamespaces" . | fromJsonArray }}
{{- if .Values.native.webhookFallback }}
{{- $excluded = append $excluded (include "poolguard.canaryNamespace" .) }}
{{- end }}
{{- toJson $excluded }}
{{- end }}

{{/* Namespaces neither webhook is ever called for. */}}
{{- define "poolguard.excludedNamespaces" -}}
{{- $excluded := list .Release.Namespace "kube-system" }}
{{- range .Values.webhook.excludedNamespaces }}
{{- if not (has . $excluded) }}
{{- $excluded = append $excluded . }}
{{- end }}
{{- end }}
{{- toJson $excluded }}
{{- end }}

{{/*
config.placement.unlabelledNamespaces is choose: pods of namespaces without the pool label get a
pool chosen, so the mutating webhook must see every namespace that is not excluded. Prints "true"
or nothing.
*/}}
{{- define "poolguard.choosesUnlabelled" -}}
{{- with .Values.config.placement }}{{ if eq (toString .unlabelledNamespaces) "choose" }}true{{ end }}{{ end }}
{{- end }}

{{/*
The namespace label keys only config.poolAuthority may set, change or remove, as a JSON list, each
once: config.namespaceLabel first, then config.poolAuthority.guardedLabels, the keys of
webhook.namespaceMatchLabels (removing one would take a namespace out of both webhooks and the
audit) and every key a rollout group's namespaceSelector reads (changing one would move a
namespace out of an enforcing group). The pool-authority webhooks are registered per key, and
poolguard's config gets all but the first as config.poolAuthority.guardedLabels
(poolguard.config).
*/}}
{{- define "poolguard.guardedLabels" -}}
{{- $keys := list .Values.config.namespaceLabel }}
{{- with .Values.config.poolAuthority }}
{{- range .guardedLabels }}{{ $keys = append $keys . }}{{ end }}
{{- end }}
{{- range $key, $_ := .Values.webhook.namespaceMatchLabels }}{{ $keys = append $keys $key }}{{ end }}
{{- range $name, $policy := .Values.config.policies }}
{{- with $policy }}{{ with .rollout }}{{ range .groups }}{{ with .namespaceSelector }}
{{- range $key, $_ := .matchLabels }}{{ $keys = append $keys $key }}{{ end }}
{{- range .matchExpressions }}{{ $keys = append $keys .key }}{{ end }}
{{- end }}{{ end }}{{ end }}{{ end }}
{{- end }}
{{- toJson (uniq $keys) }}
{{- end }}

{{/*
poolguard's config file: config, with config.poolAuthority.guardedLabels completed to every key of
poolguard.guardedLabels but the pool label (which poolguard always guards).
*/}}
{{- define "poolguard.config" -}}
{{- $config := deepCopy .Values.config }}
{{- if $config.exceptions }}
{{- fail "config.exceptions is set by the chart from exceptions.namespaces and exceptions.maxDuration (and only while exceptions.enabled, when poolguard reads PolicyExceptions): set those instead" }}
{{- end }}
{{- if .Values.exceptions.enabled }}
{{- $namespaces := .Values.exceptions.namespaces | default (list .Release.Namespace) }}
{{- $_ := set $config "exceptions" (dict "namespaces" $namespaces "maxDuration" .Values.exceptions.maxDuration) }}
{{- end }}
{{- $guarded := rest (include "poolguard.guardedLabels" . | fromJsonArray) }}
{{- if $guarded }}
{{- $authority := default (dict) $config.poolAuthority }}
{{- $_ := set $authority "guardedLabels" $guarded }}
{{- $_ = set $config "poolAuthority" $authority }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/* Annotations of both webhook configurations. */}}
{{- define "poolguard.webhookAnnotations" -}}
{{- if eq .Values.certificates.mode "certManager" }}
annotations:
  cert-manager.io/inject-ca-from: {{ printf "%s/%s-tls" .Release.Namespace (include "poolguard.fullname" .) }}
{{- end }}
{{- end }}

{{/*
The background audit runs unless audit.interval is a zero duration ("0", or e.g. "0s"; the
schema admits only humantime durations and 0, so "no digit 1-9" means zero). Prints "true" or
nothing.
*/}}
{{- define "poolguard.auditEnabled" -}}
{{- if regexMatch "[1-9]" (toString .Values.audit.interval) }}true{{ end }}
{{- end }}

{{/* Lease the replicas elect the audit's single runner with (in the release namespace). */}}
{{- define "poolguard.rolloutConfigMapName" -}}
{{- printf "%s-rollouts" (include "poolguard.fullname" .) }}
{{- end }}

{{- define "poolguard.auditLeaseName" -}}
{{- printf "%s-audit" (include "poolguard.fullname" .) }}
{{- end }}

{{/*
--audit-namespace-selector: the validating webhook's namespaceSelector
(validatingwebhookconfiguration.yaml) as a label selector string, so the audit reports on exactly
the namespaces whose objects the validating webhook checks. Built from the same values:
webhook.namespaceMatchLabels -> "key=value" terms (sorted by key), validating.requireNamespaceLabel
-> the bare pool label key (Exists), the namespaces the pod webhooks leave out -> "kubernetes.io/metadata.name
notin (...)". Terms are comma-joined, which ANDs them like matchLabels and matchExpressions do.
*/}}
{{- define "poolguard.auditNamespaceSelector" -}}
{{- $terms := list }}
{{- range $key, $value := .Values.webhook.namespaceMatchLabels }}
{{- $terms = append $terms (printf "%s=%s" $key (toString $value)) }}
{{- end }}
{{- if .Values.validating.requireNamespaceLabel }}
{{- $terms = append $terms .Values.config.namespaceLabel }}
{{- end }}
{{- $excluded := include "poolguard.podWebhookExcludedNamespaces" . | fromJsonArray }}
{{- $terms = append $terms (printf "kubernetes.io/metadata.name notin (%s)" (join "," $excluded)) }}
{{- join "," $terms }}
{{- end }}

{{/*
The report API of audit.reportApi: its group, version, the resources poolguard writes (one
namespaced report per namespace, one cluster report for the cluster-scoped objects the
Gatekeeper constraints match) and the CRDs of that API.
*/}}
{{- define "poolguard.reportApi" -}}
{{- if eq .Values.audit.reportApi "openreports" -}}
group: openreports.io
version: v1alpha1
resource: reports
clusterResource: clusterreports
crds:
  - {kind: Report, listKind: ReportList, plural: reports, singular: report, shortName: rep, scope: Namespaced, source: true}
  - {kind: ClusterReport, listKind: ClusterReportList, plural: clusterreports, singular: clusterreport, shortName: crep, scope: Cluster, source: true}
{{- else -}}
group: wgpolicyk8s.io
version: v1alpha2
resource: policyreports
clusterResource: clusterpolicyreports
crds:
  - {kind: PolicyReport, listKind: PolicyReportList, plural: policyreports, singular: policyreport, shortName: polr, scope: Namespaced, source: false}
  - {kind: ClusterPolicyReport, listKind: ClusterPolicyReportList, plural: clusterpolicyreports, singular: clusterpolicyreport, shortName: cpolr, scope: Cluster, source: false}
{{- end }}
{{- end }}

{{/* OpenAPI schema of an object reference in a report; the argument is its description. */}}
{{- define "poolguard.objectReferenceSchema" -}}
type: object
description: {{ . | quote }}
properties:
  apiVersion:
    type: string
  kind:
    type: string
  name:
    type: string
  namespace:
    type: string
  uid:
    type: string
  resourceVersion:
    type: string
  fieldPath:
    type: string
{{- end }}

{{/*
matchConditions of the validating webhook (webhook.skipUnchangedUpdates): the API server sends a
request unless it is an UPDATE of the main resource (no subresource: pods/ephemeralcontainers is
always sent) that leaves alone everything poolguard reads:
- a Pod's spec (images of every container kind, nodeSelector, affinity, tolerations, nodeName,
  scheduling gates, image volumes, resources);
- a workload's pod template: spec.template, for a CronJob spec.jobTemplate.spec.template (labels
  and annotations of the template included);
- the object's poolguard.io/* annotations (added, removed or changed: sent).
poolguard decides an UPDATE by denying only what the new object has and the old one had not;
with the spec (or template) and the name unchanged, its checks and every policy that reads the
pod spec see the same input twice, so such an UPDATE is allowed: skipping it changes no decision.
A policy that reads labels through input.review judges each object as itself and can refuse a
label taken away: not rendered while gatekeeperPolicies or gatekeeperFromCluster is set; for such SIT policies, set
webhook.skipUnchangedUpdates=false.
The expression cannot fail on any object the API server stores (a failure would refuse the
request with failurePolicy Fail, and skip it with Ignore): every optional field is tested with
has() before it is read, and the annotation scan only runs on objects with at most 1000
annotations (more: sent), which bounds its cost far below the API server's CEL limits.
Kubernetes 1.30+ (matchConditions GA); not rendered for older clusters, which then get every
request.
*/}}
{{- define "poolguard.skipUnchangedUpdates" -}}
matchConditions:
  - name: changes-what-poolguard-checks
    expression: |-
      request.operation != "UPDATE"
      || (has(request.subResource) && request.subResource != "")
      || object == null || oldObject == null
      || !(has(object.metadata) && has(oldObject.metadata) && has(object.spec) && has(oldObject.spec)
        && (
          (request.resource.group == "" && request.resource.resource == "pods"
            && object.spec == oldObject.spec)
          || (((request.resource.group == "" && request.resource.resource == "replicationcontrollers")
              || (request.resource.group == "apps"
                && request.resource.resource in ["deployments", "replicasets", "statefulsets", "daemonsets"])
              || (request.resource.group == "batch" && request.resource.resource == "jobs"))
            && has(object.spec.template) && has(oldObject.spec.template)
            && object.spec.template == oldObject.spec.template)
          || (request.resource.group == "batch" && request.resource.resource == "cronjobs"
            && has(object.spec.jobTemplate) && has(oldObject.spec.jobTemplate)
            && has(object.spec.jobTemplate.spec) && has(oldObject.spec.jobTemplate.spec)
            && has(object.spec.jobTemplate.spec.template) && has(oldObject.spec.jobTemplate.spec.template)
            && object.spec.jobTemplate.spec.template == oldObject.spec.jobTemplate.spec.template))
        && (!has(object.metadata.annotations)
          || (size(object.metadata.annotations) <= 1000
            && object.metadata.annotations.all(k, !k.startsWith("poolguard.io/")
              || (has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations
                && oldObject.metadata.annotations[k] == object.metadata.annotations[k]))))
        && (!has(oldObject.metadata.annotations)
          || (size(oldObject.metadata.annotations) <= 1000
            && oldObject.metadata.annotations.all(k, !k.startsWith("poolguard.io/")
              || (has(object.metadata.annotations) && k in object.metadata.annotations)))))
{{- end }}

{{/* native.mode apply needs the audit's leader election. */}}
{{- define "poolguard.nativeChecks" -}}
{{- if and (eq .Values.native.mode "apply") (not (include "poolguard.auditEnabled" .)) }}
{{- fail "native.mode apply needs the audit's leader election: set audit.interval, not 0" }}
{{- end }}
{{- if and .Values.native.webhookFallback (or (ne .Values.native.mode "apply") (ne .Values.webhook.registration "poolguard")) }}
{{- fail "native.webhookFallback needs native.mode apply and webhook.registration poolguard (poolguard itself registers the webhooks and leaves them out)" }}
{{- end }}
{{- end }}

{{/*
The controller (poolguard controller): what writes to the cluster, under its own ServiceAccount,
so that the serving pods' token writes no admission configuration. It runs when something needs
writing: certificates.mode self (the Secret and the CA bundle), webhook.registration poolguard,
the audit (reports, its Lease, progressive enforcement's state) or native.mode apply (which needs
the audit). Prints "true" or nothing.
*/}}
{{- define "poolguard.controllerEnabled" -}}
{{- if or (eq .Values.certificates.mode "self") (eq .Values.webhook.registration "poolguard") (include "poolguard.auditEnabled" .) }}true{{ end }}
{{- end }}

{{- define "poolguard.controllerName" -}}
{{- printf "%s-controller" (include "poolguard.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Its own app.kubernetes.io/name: no selector of the serving pods (Deployment, Service, PDB)
matches its pods. */}}
{{- define "poolguard.controllerSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-controller" (include "poolguard.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "poolguard.controllerLabels" -}}
helm.sh/chart: {{ include "poolguard.chart" . }}
{{ include "poolguard.controllerSelectorLabels" . }}
app.kubernetes.io/component: controller
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "poolguard.controllerServiceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "poolguard.controllerName" .) .Values.controller.serviceAccountName }}
{{- else }}
{{- required "controller.serviceAccountName is required when serviceAccount.create is false (the controller's identity is not the serving pods')" .Values.controller.serviceAccountName }}
{{- end }}
{{- end }}

{{/* Arguments both Deployments pass: the config and the policies they decide with. */}}
{{- define "poolguard.ruleArgs" -}}
- --config
- /config/config.yaml
- --policies-dir
- /policies
- --placement-policies-dir
- /placement-policies
{{- if .Values.gatekeeperPolicies }}
- --gatekeeper-dir
- /gatekeeper
{{- end }}
{{- if .Values.gatekeeperFromCluster }}
- --gatekeeper-from-cluster
{{- end }}
{{- if .Values.karpenter.nodePools }}
- --nodepools
{{- end }}
{{- if .Values.exceptions.enabled }}
- --policy-exceptions
{{- end }}
{{- if .Values.karpenter.instanceTypes }}
- --instance-types-file
- /instance-types/instance-types.json
{{- end }}
- --log-format
- {{ .Values.logFormat }}
{{- end }}

{{/* Volumes of the config and policies (both Deployments). */}}
{{- define "poolguard.ruleVolumes" -}}
- name: config
  configMap:
    name: {{ include "poolguard.fullname" . }}-config
- name: policies
  configMap:
    name: {{ include "poolguard.fullname" . }}-policies
- name: placement-policies
  configMap:
    name: {{ include "poolguard.fullname" . }}-placement-policies
{{- if .Values.gatekeeperPolicies }}
- name: gatekeeper
  configMap:
    name: {{ include "poolguard.fullname" . }}-gatekeeper
{{- end }}
{{- if .Values.karpenter.instanceTypes }}
- name: instance-types
  configMap:
    name: {{ include "poolguard.fullname" . }}-instance-types
{{- end }}
{{- end }}

{{- define "poolguard.ruleVolumeMounts" -}}
- name: config
  mountPath: /config
  readOnly: true
- name: policies
  mountPath: /policies
  readOnly: true
# Its own directory, not /policies/placement: a mount point inside another ConfigMap
# volume is not something the kubelet's atomic updates of that volume expect.
- name: placement-policies
  mountPath: /placement-policies
  readOnly: true
{{- if .Values.gatekeeperPolicies }}
- name: gatekeeper
  mountPath: /gatekeeper
  readOnly: true
{{- end }}
{{- if .Values.karpenter.instanceTypes }}
- name: instance-types
  mountPath: /instance-types
  readOnly: true
{{- end }}
{{- end }}
