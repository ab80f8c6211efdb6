// Package metricsauth serves a component's Prometheus metrics the way
// kubebuilder scaffolds them: over HTTPS, to callers the API server
// authenticates (TokenReview) and authorizes (SubjectAccessReview for
// "get" on the non-resource URL /metrics; the nmstate-ippool-metrics-reader
// ClusterRole grants it). Plain HTTP without either is for local test
// processes only, and says so in the flag's help.
//
// The reviews are this package's own (filter.go), with their answers
// cached for a while, rather than controller-runtime's filters package:
// that one builds on k8s.io/apiserver, which brought cel-go, gRPC and
// OpenTelemetry into every binary and about 15 MB into the resident memory
// of each handler (docs/benchmarks.md).
package metricsauth

import (
	"flag"

	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Flags are a component's metrics flags.
type Flags struct {
	// BindAddress is the address of the endpoint; "0" disables it.
	BindAddress string
	// Secure serves HTTPS behind authentication and authorization.
	Secure bool
	// CertDir holds tls.crt and tls.key; empty: a self-signed certificate
	// made at start.
	CertDir string
}

// Bind registers the flags on fs, with addr as the default address.
func (f *Flags) Bind(fs *flag.FlagSet, addr string) {
	fs.StringVar(&f.BindAddress, "metrics-bind-address", addr, "address of the Prometheus metrics endpoint; 0 disables it")
	fs.BoolVar(&f.Secure, "metrics-secure", true,
		"serve metrics over HTTPS to callers the API server authenticates and authorizes (get on /metrics, ClusterRole nmstate-ippool-metrics-reader); "+
			"false serves plain HTTP to anyone, for local tests only")
	fs.StringVar(&f.CertDir, "metrics-cert-dir", "",
		"directory holding the metrics endpoint's certificate, tls.crt and tls.key (default: a self-signed one made at start)")
}

// What the secure endpoint needs of the API server, in the RBAC of each
// component: to authenticate a caller's token and to ask whether it may
// get /metrics.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Options returns the metrics server's options.
func (f Flags) Options() metricsserver.Options {
	o := metricsserver.Options{BindAddress: f.BindAddress, SecureServing: f.Secure, CertDir: f.CertDir}
	if f.Secure {
		o.FilterProvider = filter
	}
	return o
}
