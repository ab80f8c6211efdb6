#!/usr/bin/env bash
# demo.sh is `make demo`: on a fresh machine it builds what it needs, starts
# a local cluster of three nodes, applies the README's pool and policy, adds
# a node, removes one, resets the pool, and tears the cluster down, printing
# the commands it runs and which node carries which address. It exits
# non-zero as soon as a step does not come out as expected.
#
# With REAL=1 (make demo REAL=1, as root) the nodes are real: kubelets with
# their own containerd (localcluster up --kubelets 3), and the handler and
# the pool controller run as the pods of the install of deploy/local.
set -euo pipefail
cd "$(dirname "$0")/.."

real=${REAL:-}
prefix=node
if [[ -n $real ]]; then
	prefix=real
fi
dir=${DEMO_DIR:-.local${real:+-real}}
export PATH="$PWD/bin:$PATH" KUBECONFIG="$PWD/$dir/kubeconfig"

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
run() {
	printf '$ %s\n' "$*"
	"$@"
}
fail() {
	printf '\n\033[31mDEMO FAILED: %s\033[0m\nLogs: %s/logs\n' "$*" "$dir" >&2
	exit 1
}

# wait_until DESCRIPTION SECONDS COMMAND... retries COMMAND every second.
wait_until() {
	local what=$1 seconds=$2
	shift 2
	for ((i = 0; i < seconds; i++)); do
		if "$@" >/dev/null 2>&1; then
			return 0
		fi
		sleep 1
	done
	fail "$what: not after ${seconds}s"
}

# address_of NODE prints the address the node's enactment records.
address_of() {
	kubectl get nnce "$1.static-ip" -o jsonpath='{.status.ippool.traffic-1.allocated[0]}'
}

enactment_available() {
	[[ $(kubectl get nnce "$1.static-ip" -o jsonpath='{.status.conditions[?(@.type=="Available")].status}') == True ]]
}

# addresses prints "node address" for every enactment of the policy.
addresses() {
	kubectl get nnce -l nmstate.io/policy=static-ip \
		-o jsonpath='{range .items[*]}{.metadata.labels.nmstate\.io/node}{" "}{.status.ippool.traffic-1.allocated[0]}{"\n"}{end}'
}

# expect_nodes N checks that N nodes hold N different addresses and that
# each node's network carries its own.
expect_nodes() {
	local want=$1 got status node ip
	got=$(addresses | awk '{print $2}' | sort -u | grep -c .) || true
	((got == want)) || fail "expected $want nodes with different addresses, found $got: $(addresses | tr '\n' ';')"
	status=$(localcluster status --dir "$dir")
	while read -r node ip; do
		grep -Eq "^$node +running +eth1 +$ip/24\$" <<<"$status" || fail "$node does not carry $ip on eth1"
	done < <(addresses)
	kubectl nodeippool check >/dev/null || fail "kubectl nodeippool check found a mismatch: $(kubectl nodeippool check)"
}

table() {
	run kubectl nodeippool show traffic-1
	printf '\nWhat each node'"'"'s network carries (from localcluster status):\n'
	localcluster status --dir "$dir" | sed -n '/^NODE/,$p'
}

cleanup() {
	if [[ -f $dir/state.json ]]; then
		localcluster down --dir "$dir" >/dev/null 2>&1 || true
	fi
}

n2=${prefix}02 n4=${prefix}04
if [[ -n $real ]]; then
	say "Building the binaries, kubectl, the local control plane, the node components and the images (the first time, about ten minutes)"
	make --no-print-directory build envtest-assets kubectl node-packages node-assets images-local

	say "Starting a local cluster of three real nodes: kubelets with their own containerd"
	trap cleanup EXIT
	run localcluster up --kubelets 3 --dir "$dir"
	run kubectl get nodes -o wide

	say "Installing nmstate-ippool: kubectl apply -k deploy/local"
	run localcluster install --dir "$dir"
	run kubectl -n nmstate-ippool get pods -o wide
else
	say "Building the binaries, kubectl and the local control plane (the first time, kube-apiserver takes about five minutes)"
	make --no-print-directory build envtest-assets kubectl

	say "Starting a local cluster of three nodes"
	trap cleanup EXIT
	run localcluster up --nodes 3 --dir "$dir"
	run kubectl get nodes
fi

say "Applying the README's NodeIPPool and NNCP (deploy/samples)"
run kubectl apply -k deploy/samples
run kubectl wait nncp/static-ip --for=condition=Available --timeout=120s
run kubectl get nodeippools
table
expect_nodes 3

say "Scaling up: $n4 joins and gets an address of its own"
run localcluster node add "$n4" ${real:+--kubelet} --dir "$dir"
wait_until "$n4's enactment Available" 90 enactment_available "$n4"
table
expect_nodes 4

say "Scaling down: $n2 leaves; its address is free again once $n2 is gone, kept for its return"
freed=$(address_of "$n2")
run localcluster node remove "$n2" --dir "$dir"
# The pool controller frees a departed Node's addresses once its Node is
# gone and the departure hold (30 s, the default, which neither cluster's
# quarantine period shortens) has passed since the release: wait for that
# and a busy machine.
wait_until "$freed free again after $n2 left" 90 bash -c \
	"kubectl nodeippool decode traffic-1 '$freed' | grep -q ', free and kept since .* for the return of node $n2'"
run kubectl nodeippool decode traffic-1 "$freed"
expect_nodes 3

say "Resetting the pool: it is rebuilt from the holders' records and every address is kept"
before=$(addresses | sort)
run kubectl annotate nodeippool traffic-1 nmstate.io/reset-ippool=
wait_until "the reset annotation removed" 60 bash -c \
	"! kubectl get nodeippool traffic-1 -o jsonpath='{.metadata.annotations}' | grep -q reset-ippool"
run kubectl wait nodeippool/traffic-1 --for=condition=Available --timeout=60s
[[ $(addresses | sort) == "$before" ]] || fail "the reset moved addresses: $(addresses | tr '\n' ';')"
run kubectl get events --field-selector involvedObject.name=traffic-1 --sort-by=.metadata.creationTimestamp
expect_nodes 3

say "The allocations now"
table

say "Tearing down"
trap - EXIT
run localcluster down --dir "$dir"

printf '\n\033[32mDEMO OK\033[0m: three nodes got addresses, a new node got its own, a removed node gave its back, and a reset kept them all.\n'
