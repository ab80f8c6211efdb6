// Package capture connects NodeNetworkConfigurationPolicy captures to IP
// pools and renders desired states with nmpolicy.
//
// A capture whose expression is "ippool.<pool>.allocate" asks for one address
// from the NodeIPPool <pool>; every other expression is an ordinary nmpolicy
// expression. Parse splits the two and rejects malformed ippool expressions
// with an error that names the capture and the expected form.
//
// Render hands the allocated addresses to nmpolicy as cached captures whose
// state is {ip: "<address>", prefix-length: <int>} plus, when the pool has
// them, gateway: "<address>", dns-servers: [...] and dns-search: [...], so
// that a desired state can use {{ capture.<name>.ip }},
// {{ capture.<name>.prefix-length }}, {{ capture.<name>.gateway }} and the
// DNS lists,
// resolves the ordinary captures against the current state, and returns the
// rendered desired state with every captured state.
//
// Literal is the other way, for a handler that knows no pools
// (kubernetes-nmstate's, in companion mode): it writes the ippool captures'
// values into the template and leaves every other reference, and Plain the
// other captures, for that handler to resolve on the node.
//
// The package is pure: it imports nmpolicy and the standard library, never a
// Kubernetes client.
package capture
