// Package holder is the one model of what holds an address of a pool,
// whatever its kind: an enactment (handler mode), a node of a pooled
// policy (companion mode), a Cluster API claim, or an IPAddress this
// provider did not make.
//
// A Ref names a holder: its kind and the names that find it. The pool's
// entries name a holder by a string (the holder field of api/v1's
// entries); Parse reads that string once, and Ref.String writes it.
//
// A Record is a holder's durable record of the addresses it holds, read
// from wherever its kind keeps it. List is the one way to read every
// holder's record: the pool controller, the claim controller, the range
// webhook and the plugin all count the same holders.
package holder

import "strings"

// Kind is the kind of a holder.
type Kind int

const (
	// Enactment is a NodeNetworkConfigurationEnactment of handler mode,
	// named "<node>.<policy>".
	Enactment Kind = iota
	// PolicyNode is a node of a PooledNodeNetworkConfigurationPolicy,
	// companion mode's: "PooledNodeNetworkConfigurationPolicy/<policy>/<node>".
	PolicyNode
	// Claim is a Cluster API IPAddressClaim:
	// "IPAddressClaim/<namespace>/<name>".
	Claim
	// IPAddress is an IPAddress naming a pool that this provider did not
	// make for a claim: "IPAddress/<namespace>/<name>". It holds its
	// address against nobody, and no entry ever names it.
	IPAddress
)

// PooledPolicyKind is the kind of companion mode's policies.
const PooledPolicyKind = "PooledNodeNetworkConfigurationPolicy"

// prefixes start the names of every kind but Enactment; no enactment's
// name can hold their slashes.
var prefixes = map[Kind]string{PolicyNode: PooledPolicyKind + "/", Claim: "IPAddressClaim/", IPAddress: "IPAddress/"}

// Ref is a holder: its kind and the names that find it.
type Ref struct {
	Kind Kind
	// Namespace is a Claim's or an IPAddress's.
	Namespace string
	// Name is the enactment's, the pooled policy's, the claim's or the
	// IPAddress's.
	Name string
	// Node is a PolicyNode's node, or an Enactment's: the part of its
	// name "<node>.<policy>" before the last dot (node names may hold
	// dots, policy names none); empty for the other kinds.
	Node string
}

// ForEnactment is the holder that is the enactment name.
func ForEnactment(name string) Ref {
	r := Ref{Kind: Enactment, Name: name}
	if i := strings.LastIndex(name, "."); i > 0 {
		r.Node = name[:i]
	}
	return r
}

// ForPolicyNode is the holder of the addresses a pooled policy holds for
// one node.
func ForPolicyNode(policy, node string) Ref { return Ref{Kind: PolicyNode, Name: policy, Node: node} }

// ForClaim is the holder of a Cluster API IPAddressClaim's address.
func ForClaim(namespace, name string) Ref { return Ref{Kind: Claim, Namespace: namespace, Name: name} }

// ForIPAddress is an IPAddress this provider did not make.
func ForIPAddress(namespace, name string) Ref {
	return Ref{Kind: IPAddress, Namespace: namespace, Name: name}
}

// Parse reads a holder's name; any name of no other kind is an
// enactment's.
func Parse(s string) Ref {
	for _, kind := range []Kind{PolicyNode, Claim, IPAddress} {
		rest, ok := strings.CutPrefix(s, prefixes[kind])
		if !ok {
			continue
		}
		first, second, ok := strings.Cut(rest, "/")
		if !ok {
			break
		}
		if kind == PolicyNode {
			return ForPolicyNode(first, second)
		}
		return Ref{Kind: kind, Namespace: first, Name: second}
	}
	return ForEnactment(s)
}

// String is the holder's name, as entries and records name it. The node
// of a PolicyNode comes last: node names may hold dots, policy names no
// slash.
func (r Ref) String() string {
	switch r.Kind {
	case PolicyNode:
		return prefixes[r.Kind] + r.Name + "/" + r.Node
	case Claim, IPAddress:
		return prefixes[r.Kind] + r.Namespace + "/" + r.Name
	}
	return r.Name
}

// Foreign reports whether the holder is no enactment: its records live
// elsewhere, and no enactment write reaches them.
func (r Ref) Foreign() bool { return r.Kind != Enactment }

// SoleWriter reports whether one writer alone takes addresses for the
// holder: a claim's controller (under the claim's UID) and the companion
// controller for a pooled policy's node (under the policy's
// resourceVersion it read). An enactment has several
// (the pool controller serving it, a reset, a self-allocating handler),
// each under the resourceVersion it read, which may be ahead of another
// writer's cache. An entry of a sole writer under another token is dead;
// every entry naming an enactment may be one being served.
func (r Ref) SoleWriter() bool { return r.Kind != Enactment }

// Title describes the holder for messages: "IPAddressClaim <namespace>/<name>",
// "node <node> (PooledNodeNetworkConfigurationPolicy <policy>)",
// "IPAddress <namespace>/<name> (not made by this provider for a claim)",
// "enactment <name>".
func (r Ref) Title() string {
	switch r.Kind {
	case PolicyNode:
		return "node " + r.Node + " (" + PooledPolicyKind + " " + r.Name + ")"
	case Claim:
		return "IPAddressClaim " + r.Namespace + "/" + r.Name
	case IPAddress:
		return "IPAddress " + r.Namespace + "/" + r.Name + " (not made by this provider for a claim)"
	}
	return "enactment " + r.Name
}

// MarshalText writes the holder's name (String), so that JSON names a
// holder as pools' entries do.
func (r Ref) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads a holder's name (Parse).
func (r *Ref) UnmarshalText(b []byte) error {
	*r = Parse(string(b))
	return nil
}
