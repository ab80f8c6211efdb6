{{/*
The image of a component: <registry>/<name>:<tag, or the appVersion>.
*/}}
{{- define "nmstate-ippool.image" -}}
{{ .root.Values.image.registry }}/{{ .name }}:{{ .root.Values.image.tag | default .root.Chart.AppVersion }}
{{- end }}

{{/*
The pull policy and pull secrets of a pod's containers, when set.
*/}}
{{- define "nmstate-ippool.pullPolicy" -}}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end }}

{{- define "nmstate-ippool.pullSecrets" -}}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
{{- range . }}
- name: {{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The annotations of the webhook configuration that have its CA injected.
*/}}
{{- define "nmstate-ippool.webhookAnnotations" -}}
{{- if eq .Values.webhook.certificate "cert-manager" }}
cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/nmstate-ippool-webhook
{{- else if eq .Values.webhook.certificate "service-ca" }}
service.beta.openshift.io/inject-cabundle: "true"
{{- end }}
{{- end }}

{{/*
The annotations of the webhook's Service: with OpenShift's service CA, the
Secret it writes the serving certificate to.
*/}}
{{- define "nmstate-ippool.webhookServiceAnnotations" -}}
{{- if eq .Values.webhook.certificate "service-ca" }}
service.beta.openshift.io/serving-cert-secret-name: nmstate-ippool-webhook-cert
{{- end }}
{{- end }}

{{/*
Checks of values that depend on each other, which the schema cannot say
as plainly.
*/}}
{{- define "nmstate-ippool.validate" -}}
{{- if and (eq .Values.webhook.certificate "provided") (not .Values.webhook.caBundle) }}
{{- fail "webhook.caBundle is empty: with webhook.certificate=provided, create the Secret nmstate-ippool-webhook-cert (tls.crt, tls.key) and give the CA that signed it, PEM and base64-encoded" }}
{{- end }}
{{- if and (ne .Values.webhook.certificate "provided") .Values.webhook.caBundle }}
{{- fail (printf "webhook.caBundle is set, but webhook.certificate=%s injects the CA itself: set webhook.certificate=provided, or leave caBundle empty" .Values.webhook.certificate) }}
{{- end }}
{{- end }}
