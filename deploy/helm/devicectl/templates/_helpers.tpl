{{/* Names: Kubernetes caps names (and label values) at 63 characters. */}}
{{- define "devicectl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* <release>-devicectl, or the release name alone when it already says devicectl. */}}
{{- define "devicectl.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* A second object's name: the full name with a suffix, still within 63 characters. */}}
{{- define "devicectl.suffixed" -}}
{{- $full := include "devicectl.fullname" .root }}
{{- printf "%s-%s" ($full | trunc (int (sub 62 (len .suffix))) | trimSuffix "-") .suffix }}
{{- end }}

{{- define "devicectl.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "devicectl.selectorLabels" -}}
app.kubernetes.io/name: {{ include "devicectl.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "devicectl.labels" -}}
helm.sh/chart: {{ include "devicectl.chart" . }}
{{ include "devicectl.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The simulator's own name label: the controller's Service and ServiceMonitor never select it. */}}
{{- define "devicectl.simulatorLabels" -}}
helm.sh/chart: {{ include "devicectl.chart" . }}
app.kubernetes.io/name: {{ include "devicectl.name" . }}-bmc-sim
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: bmc-simulator
{{- end }}

{{- define "devicectl.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "devicectl.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "devicectl.image" -}}
"{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}"
{{- end }}

{{/* Pod placement and pull secrets, shared by the controller, the migration Job and the simulator. */}}
{{- define "devicectl.scheduling" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Whether the Prometheus Operator kind `.kind` renders: true, or auto where its CRD is served. */}}
{{- define "devicectl.operatorKind" -}}
{{- $on := toString .enabled }}
{{- if or (eq $on "true") (and (eq $on "auto") (.root.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" .kind))) }}true{{ end }}
{{- end }}

{{/* The environment `devicectl db upgrade` needs: the database URL only. */}}
{{- define "devicectl.databaseEnv" -}}
- name: DEVICECTL_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.secretName }}
      key: {{ .Values.database.secretKey }}
{{- end }}

{{- define "devicectl.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end }}

{{- define "devicectl.podSecurity" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The gRPC port's TLS Secret: tls.secretName, or <fullname>-tls. */}}
{{- define "devicectl.tlsSecretName" -}}
{{- default (include "devicectl.suffixed" (dict "root" . "suffix" "tls")) .Values.tls.secretName }}
{{- end }}

{{/* The roles setting (identity=role+role,...) from .Values.roles. */}}
{{- define "devicectl.roles" -}}
{{- $pairs := list }}
{{- range $identity, $roles := .Values.roles }}
{{- $pairs = append $pairs (printf "%s=%s" $identity (join "+" $roles)) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}

{{/* The Service's DNS names (the server certificate's subject alternative names). */}}
{{- define "devicectl.dnsNames" -}}
{{- $name := include "devicectl.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- list $name (printf "%s.%s" $name $ns) (printf "%s.%s.svc" $name $ns) (printf "%s.%s.svc.cluster.local" $name $ns) | toJson }}
{{- end }}

{{/* What the chart refuses about TLS: plaintext only when asked for by name, gRPC probes only in
plaintext, a client CA only with roles (devicectl itself refuses both at start). */}}
{{- define "devicectl.checkTls" -}}
{{- if and (not .Values.tls.enabled) (not .Values.insecure) }}
{{- fail "tls.enabled: false serves plaintext gRPC on the pod network, where every pod the NetworkPolicy admits may call every method (StartWriteCycle included): set insecure: true to accept that" }}
{{- end }}
{{- if and .Values.tls.enabled (eq .Values.probes.type "grpc") }}
{{- fail "probes.type grpc: kubelet's gRPC probe speaks plaintext only; use probes.type http with TLS" }}
{{- end }}
{{- if and .Values.tls.enabled .Values.tls.clientCA (not .Values.roles) }}
{{- fail "tls.clientCA needs roles (identity -> [topology|operator|admin]): devicectl refuses a client CA without them" }}
{{- end }}
{{- if and .Values.tls.enabled (eq .Values.tls.source "certManager") (not .Values.tls.certManager.issuerRef.name) }}
{{- fail "tls.source certManager needs tls.certManager.issuerRef.name" }}
{{- end }}
{{- end }}
{{/*
The controller container's resources: `resources` is one process's, so with `workers` > 0 (a
front end and N executors in the pod) its memory request and limit are multiplied by 1 + workers.
Memory must then be given in Mi or Gi.
*/}}
{{- define "devicectl.controllerResources" -}}
{{- $r := deepCopy .Values.resources -}}
{{- $n := add1 (int .Values.workers) -}}
{{- if gt $n 1 -}}
{{- range $kind := list "requests" "limits" -}}
{{- $part := get $r $kind -}}
{{- if and $part (hasKey $part "memory") -}}
{{- $q := toString (get $part "memory") -}}
{{- $scaled := "" -}}
{{- if regexMatch "^[0-9]+Gi$" $q -}}
{{- $scaled = printf "%dGi" (mul (int (trimSuffix "Gi" $q)) $n) -}}
{{- else if regexMatch "^[0-9]+Mi$" $q -}}
{{- $scaled = printf "%dMi" (mul (int (trimSuffix "Mi" $q)) $n) -}}
{{- else -}}
{{- fail (printf "resources.%s.memory %q: give it in Mi or Gi (whole numbers), so the chart can multiply it by 1 + workers" $kind $q) -}}
{{- end -}}
{{- $_ := set $part "memory" $scaled -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toYaml $r -}}
{{- end -}}
