package main

// usage is the help of every command, printed by localcluster help and
// after a usage error.
const usage = `Usage:
  localcluster up --nodes N [--dir DIR] [--gc-grace-period D] [--quarantine-period D] [--controllers N] [--bin DIR] [--assets DIR]
                  [--handler ours|upstream [--companion]] [--self-allocate] [--peer-handler PATH] [--retries N]
                  [--garbage-collector=false] [--node-lifecycle=false] [--node-grace-period D] [--crd FILE]... [--crd-dir DIR]
  localcluster handler use ours|upstream [--dir DIR]
  localcluster up --kubelets K [--images DIR] [--dir DIR] [--bin DIR] [--assets DIR]
  localcluster install [--overlay DIR] [--kubectl PATH] [--cert-manager-crds FILE] [--timeout D] [--dir DIR]
  localcluster install --helm CHART [--values FILE] [--namespace NS] [--helm-bin PATH] [--kubectl PATH] [--timeout D] [--dir DIR]
  localcluster node add NAME [--label k=v]... [--kubelet] [--clock-offset D] [--dir DIR]
  localcluster node remove NAME [--crash] [--dir DIR]
  localcluster node restart NAME [--crash] [--dir DIR]
  localcluster node stall NAME [--dir DIR]
  localcluster node resume NAME [--dir DIR]
  localcluster node stop NAME [--dir DIR]
  localcluster node start NAME [--dir DIR]
  localcluster upgrade --bin DIR [--crd-dir DIR] [--pool-controller=false] [--handlers N] [--dir DIR]
  localcluster etcd snapshot|restore NAME [--dir DIR]
  localcluster backup FILE [--dir DIR]
  localcluster restore FILE [--with-status] [--dir DIR]
  localcluster controller restart [--crash] [--dir DIR]
  localcluster apiserver restart [--crash] [--dir DIR]
  localcluster status [--dir DIR]
  localcluster down [--dir DIR]
  localcluster kubelets [--dir DIR]    (started by up; not for hand use)

up starts etcd, kube-apiserver, the pool controller and a handler per node
(node01...), writes DIR/kubeconfig and returns once all are ready, leaving
them running. node remove deletes a Node (with --crash, its handler is
killed first, without a chance to clean up, and a Node a finalizer still
holds is tainted node.kubernetes.io/out-of-service so that it can go).
node stall freezes a node's handler (SIGSTOP), as a GC pause would, until
node resume. node stop powers a node's machine off: its handler is killed
and its heartbeats stop, its Node and its network stay, and Kubernetes'
node lifecycle controller turns the Node NotReady once --node-grace-period
(40s) has passed; node start powers it on again. Beside simulated nodes run
kube-controller-manager's garbage collector (--cascade=foreground and
orphan work as in a cluster) and node lifecycle controller, and a
process that posts every running node's heartbeat, as kubelets do; turn
them off with --garbage-collector=false or --node-lifecycle=false (the
heartbeats' process is localcluster kubelets, which up starts).
controller restart and apiserver restart stop the pool controller (the
replica that leads, of several) or kube-apiserver (killed, with --crash)
and start it again. down stops every process up
and node add started, and removes nothing. DIR defaults to .local.

up --handler upstream runs kubernetes-nmstate's handler, unmodified (make
peer-handler builds it from a copy of its source beside the repository:
PEERS_DIR, ../shared/peers by default), on the simulated nodes
instead of ours, without the pool controller: a cluster as admins run it
today. With --companion the pool controller runs beside it in companion
mode (pool-controller --mode companion): pooled policies get one plain NNCP
per node, which kubernetes-nmstate's handler applies.

upgrade rolls a cluster of simulated nodes to the programs in --bin, in
the order an admin upgrades an install: the CRDs first (this version's, or
those of --crd-dir), then the pool controller's replicas, then each node's
handler, one at a time. With an earlier version's programs and CRDs it
downgrades. up --bin DIR --crd-dir DIR starts a cluster of an earlier
version to upgrade from.

etcd snapshot NAME saves a snapshot of etcd (etcdctl snapshot save) into
DIR/snapshots/NAME.db; etcd restore NAME restores it as Kubernetes'
procedure does, while the nodes keep running what was applied since, with
the handlers stopped first (docs/operations.md): the handlers stop, the
API server stops, etcd's data is restored (etcdutl snapshot restore), both
start again, the Kubernetes controllers restart, the nodes the snapshot
does not know register again (with the default labels), the pool
controller restarts, and every handler starts again.

backup FILE writes the pools and policies, and Cluster API's
IPAddresses and IPAddressClaims, status included, into FILE, as a backup
tool keeps them (enactments and NodeNetworkStates are the handlers' to
write again); restore FILE reads and checks FILE, then
rebuilds the control plane from nothing while the nodes keep running: the
handlers and the pool controller stop, etcd is emptied, the CRDs are
installed again, the nodes register again, the objects are created
(without owner references) and without their status, as Velero restores by default (with --with-status,
their status too, as Velero's restoreStatus), and the components start.
etcd snapshot and restore name a snapshot: letters, digits, '.', '_', '-'.

handler use switches every node to the other handler: it stops
the running handlers, starts (ours) or stops (upstream) the pool
controller, and starts the other handler on every node, which takes over
the enactments as it finds them.

up --kubelets K runs K real nodes instead (real01...; needs root, make
node-packages node-assets images-local): each a kubelet with its own
containerd, kube-proxy and network namespace, beside kube-controller-manager
and kube-scheduler. install then applies the install of deploy/local with
kubectl apply -k, and the handler and the pool controller run as pods;
install --helm deploy/helm/nmstate-ippool installs the Helm chart instead
(helm upgrade --install, with deploy/local/helm-values.yaml and the
webhook's certificate signed by the cluster's CA).
node add NAME --kubelet adds a real node; node remove deletes its Node,
waits until its enactments are gone, and stops it (with --crash, it stops
it first).
`
