// Package install installs nmstate-ippool on a local cluster of real
// nodes, as an admin would: the kustomize overlay with kubectl apply -k,
// or the Helm chart, and does what cert-manager would for the webhook.
package install
