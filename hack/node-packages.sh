#!/usr/bin/env bash
# node-packages.sh installs, from Debian's packages, what the local
# cluster's real nodes need, unless it is there: containerd and runc, the
# CNI plugins (/usr/lib/cni), iptables and conntrack for kube-proxy, and
# iproute2 and util-linux (ip, nsenter) for the nodes' network namespaces.
set -euo pipefail
need=()
for pair in containerd:containerd runc:runc ctr:containerd iptables:iptables conntrack:conntrack ip:iproute2 nsenter:util-linux; do
	command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
done
[[ -x /usr/lib/cni/bridge ]] || need+=(containernetworking-plugins)
if ((${#need[@]} == 0)); then
	echo "node packages: all there"
	exit 0
fi
if ((EUID != 0)); then
	echo "node packages missing (${need[*]}); install them as root: apt-get install ${need[*]}" >&2
	exit 1
fi
mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
echo "installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
