#!/usr/bin/env bash
# install-manifests.sh KUSTOMIZE INSTALL [REGISTRY TAG]
#
# Renders the install deploy/INSTALL (default, companion, self-allocate,
# ...) to stdout. With REGISTRY and TAG, its images are those make push
# pushed: REGISTRY/handler:TAG and REGISTRY/pool-controller:TAG.
set -euo pipefail
cd "$(dirname "$0")/.."
kustomize=$1 install=$2 registry=${3:-} tag=${4:-}
if [[ ! -f deploy/$install/kustomization.yaml ]]; then
	echo "install-manifests: deploy/$install is not an install (INSTALL=default, companion, ...)" >&2
	exit 1
fi
if [[ -z $registry && -z $tag ]]; then
	exec "$kustomize" build "deploy/$install"
fi
if [[ -z $registry || -z $tag ]]; then
	echo "install-manifests: give both REGISTRY and TAG, the ones make push was given" >&2
	exit 1
fi
# An overlay beside the tree (kustomize takes only relative resources),
# in bin/, which git ignores.
overlay=$(mktemp -d "$PWD/bin/install-overlay.XXXXXX")
trap 'rm -rf "$overlay"' EXIT
cat >"$overlay/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../../deploy/$install
images:
- name: ghcr.io/nmstate-ippool/handler
  newName: ${registry%/}/handler
  newTag: $tag
- name: ghcr.io/nmstate-ippool/pool-controller
  newName: ${registry%/}/pool-controller
  newTag: $tag
YAML
"$kustomize" build "$overlay"
