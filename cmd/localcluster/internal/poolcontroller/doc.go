// Package poolcontroller runs the pool controller of a cluster of
// simulated nodes as processes, one per replica, and its NodeIPPool
// webhook, called by URL with the cluster's own certificate.
package poolcontroller
