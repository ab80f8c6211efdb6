package pool_test

import "github.com/nmstate-ippool/nmstate-ippool/test/envtest"

// carried returns the addresses a node's network carries on eth1.
func carried(nd *envtest.Node) func() []string {
	return func() []string { return nd.ConfiguredAll("eth1") }
}
