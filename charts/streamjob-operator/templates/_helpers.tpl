{{- define "streamjob.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "streamjob.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "streamjob.labels" -}}
app.kubernetes.io/name: {{ include "streamjob.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "streamjob.selectorLabels" -}}
app.kubernetes.io/name: {{ include "streamjob.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "streamjob.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "streamjob.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Rules the operator needs on StreamJobs and the objects it runs them with. */}}
{{- define "streamjob.rules" -}}
# Exactly what the operator calls (operator/src/controller.rs, e2e smoke test checks it with
# kubectl auth can-i --list): watch StreamJobs and patch their finalizers and status.
- apiGroups: ["streamjob.io"]
  resources: ["streamjobs"]
  verbs: ["list", "watch", "patch"]
- apiGroups: ["streamjob.io"]
  resources: ["streamjobs/status"]
  verbs: ["patch"]
# Owner references with blockOwnerDeletion need update on the owner's finalizers.
- apiGroups: ["streamjob.io"]
  resources: ["streamjobs/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete"]
# Plan results and savepoint paths of exited runtime pods are read from their logs.
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
# One manifest ConfigMap per deployed spec.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "create", "delete"]
# A Flink JobManager's rest Service, created and deleted with its run.
- apiGroups: [""]
  resources: ["services"]
  verbs: ["create", "delete"]
# The per-job control-token Secret: created once, read back to call the runtime's control API.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create"]
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
# A Flink job's Ingress (spec.flink.ingress): applied when it changes, deleted when it goes.
- apiGroups: ["networking.k8s.io"]
  resources: ["ingresses"]
  verbs: ["create", "patch", "delete"]
{{- if .Values.networkPolicy.enabled }}
# One NetworkPolicy per StreamJob, created once (owned by it, so deleted with it).
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "create"]
{{- end }}
{{- end -}}
