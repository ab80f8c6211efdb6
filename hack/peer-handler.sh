#!/usr/bin/env bash
# peer-handler.sh BIN builds kubernetes-nmstate's handler, unmodified, from
# the source kept in $PEERS_DIR (default ../shared/peers; see its README)
# into BIN/kubernetes-nmstate-handler, to run beside ours in the local
# cluster (localcluster up --handler upstream) and in make bench-peer.
#
# Without the peers folder it says so and exits 0: the peer is optional,
# and what needs it skips; with REQUIRE_PEERS=1 (CI sets it) it fails
# instead, so that no suite beside the peer is skipped unseen. It builds
# again only when the tarball changed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$1
peers=${PEERS_DIR:-$here/../../shared/peers}
tarball=$(ls "$peers"/kubernetes-nmstate-*.tar.gz 2>/dev/null | head -n1 || true)
if [[ -z $tarball ]]; then
	if [[ ${REQUIRE_PEERS:-} == 1 ]]; then
		echo "peer-handler: no kubernetes-nmstate-*.tar.gz in $peers, and REQUIRE_PEERS=1: set PEERS_DIR to the folder that holds it" >&2
		exit 1
	fi
	echo "peer-handler: no kubernetes-nmstate-*.tar.gz in $peers; the upstream handler is not built (what needs it skips)"
	exit 0
fi
out=$bin/kubernetes-nmstate-handler
src=$bin/peer
mkdir -p "$bin"
# One build at a time: make and a test suite may ask at once.
exec 9>"$bin/.peer-handler.lock"
flock 9
sum=$(sha256sum "$tarball" | cut -d' ' -f1)
if [[ -x $out && -f $src/.sha256 && $(cat "$src/.sha256") == "$sum" ]]; then
	echo "peer-handler: $out is built from $(basename "$tarball")"
	exit 0
fi
rm -rf "$src"
mkdir -p "$src"
tar xzf "$tarball" -C "$src"
# Everything is vendored: nothing is downloaded, whatever GOFLAGS says.
(cd "$src/kubernetes-nmstate" &&
	GOFLAGS=-mod=vendor "$here/progress.sh" "building kubernetes-nmstate's handler" \
		go build -o "$out" ./cmd/handler)
echo "$sum" >"$src/.sha256"
echo "peer-handler: built $out from $(basename "$tarball")"
