// Package scale holds the project's scale benchmark (make bench-scale): N
// handlers, each an in-process manager with exactly the handler binary's
// cache and watches (handler.CacheOptions, the policy handler and the
// NodeNetworkState reporter), against a real kube-apiserver and etcd, with
// the pool controller as a real process. Each node's network is kept in
// memory: the benchmark measures the cost of the control loops, not of
// nmstatectl. See docs/benchmarks.md for what it reports and the figures.
package scale
