// Package kinds runs each way of breaking the promise (one address, one
// NIC; nothing lost) that was first found for one kind of holder against
// every kind it reaches, written once: an enactment of this project's
// handler (served by the pool controller, or --self-allocate), a node of a
// pooled policy beside kubernetes-nmstate's handler (a double here; the
// real handler runs these cases in test/peer), and a Cluster API claim.
// Each kind is an adapter (how its holders are written, join, are reset
// and deleted); each way is one function that reads the holders of every
// kind through the one list the pool controller reads (holder.List).
package kinds
