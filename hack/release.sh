#!/usr/bin/env bash
# release.sh KUSTOMIZE HELM VERSION REGISTRY HANDLER_BASE ARCH LDFLAGS
#
# Writes the release VERSION into dist/release/VERSION, everything an
# admin pins when installing that version:
#   install-default.yaml, install-companion.yaml, install-self-allocate.yaml
#       the installs of deploy/, naming REGISTRY/handler:VERSION and
#       REGISTRY/pool-controller:VERSION
#   crds.yaml                 the CRDs alone (upgrade them first)
#   crds-companion.yaml       the CRDs of companion mode alone: NodeIPPool and
#                             PooledNodeNetworkConfigurationPolicy, never
#                             kubernetes-nmstate's, which its operator owns
#   nmstate-ippool-X.Y.Z.tgz  the Helm chart, version X.Y.Z, appVersion VERSION,
#                             its images REGISTRY's
#   images/*.tar              the images as tarballs, named as above: the pool
#                             controller always, the handler when HANDLER_BASE
#                             (an image with nmstatectl) is given
#   plugin/                   the kubectl plugin's archives and krew manifest
#   SHA256SUMS                the digest of every file above
# The binaries report VERSION (--version, kubectl nodeippool version, the
# nmstate_ippool_build_info metric). A release is made from committed
# sources only: a tree with changes to tracked files is refused (set
# RELEASE_ALLOW_DIRTY=1 to try a release out), so that VERSION names one
# commit.
set -euo pipefail
cd "$(dirname "$0")/.."
kustomize=$1 helm=$2 version=$3 registry=$4 handler_base=$5 arch=$6 ldflags=$7
semver='^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$'
if [[ ! $version =~ $semver ]]; then
	echo "release: VERSION=$version: give a semantic version with a leading v, such as v0.2.0" >&2
	exit 1
fi
if [[ ${RELEASE_ALLOW_DIRTY:-} != 1 ]] && git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	changed=$(git status --porcelain --untracked-files=no)
	if [[ -n $changed ]]; then
		echo "release: the tree has uncommitted changes; commit or stash them, so that $version is one commit" \
			"(RELEASE_ALLOW_DIRTY=1 to try a release out):" >&2
		echo "$changed" >&2
		exit 1
	fi
fi
out=dist/release/$version
rm -rf "$out"
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "release $version: binaries for linux/$arch"
CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "$ldflags" -o "$work/bin/" ./cmd/handler ./cmd/pool-controller

echo "release $version: images"
images=pool-controller
if [[ -n $handler_base ]]; then
	images=handler,pool-controller
else
	echo "  no HANDLER_BASE: the handler's image is not written (give an image with nmstatectl to add it to);" \
		"companion mode needs only the pool controller's" >&2
fi
(cd hack/images && go run . -bin "$work/bin" -push "$registry" -tag "$version" -handler-base "$handler_base" \
	-arch "$arch" -images "$images" -save "$OLDPWD/$out/images")

echo "release $version: install manifests"
for install in default companion self-allocate; do
	hack/install-manifests.sh "$kustomize" "$install" "$registry" "$version" >"$out/install-$install.yaml"
done
"$kustomize" build deploy/crd >"$out/crds.yaml"
"$kustomize" build deploy/crd-companion >"$out/crds-companion.yaml"

echo "release $version: Helm chart"
cp -r deploy/helm/nmstate-ippool "$work/chart"
sed -i "s|^  registry: .*|  registry: $registry|" "$work/chart/values.yaml"
grep -q "^  registry: $registry\$" "$work/chart/values.yaml" || {
	echo "release: could not set image.registry in the chart's values.yaml" >&2
	exit 1
}
"$helm" package "$work/chart" --version "${version#v}" --app-version "$version" --destination "$out" >/dev/null

echo "release $version: kubectl plugin"
go run ./hack/plugin-release --version "$version" --out "$out/plugin" >/dev/null

(cd "$out" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
echo "release $version written to $out:"
(cd "$out" && find . -type f -printf '  %P\n' | LC_ALL=C sort)
