// Package probe checks that a node still works after a new network state
// was applied, before the handler commits it: kubernetes-nmstate's
// probes, which admins rely on to keep a bad policy from cutting a node
// off.
//
// Four probes are defined:
//
//   - api-server: a fresh, uncached GET of namespace "default";
//   - node-readiness: the node's own Node is Ready;
//   - ping: the next hop of the default route (main table, IPv4 or IPv6)
//     answers an ICMP echo;
//   - dns: a running nameserver answers an NS lookup.
//
// ping and dns are conditional: they run after an apply only when they
// passed before it, so a node whose gateway never answered pings is not
// refused every policy. ping and dns read the state they probe (the
// default route, the nameservers) from the node's state after the apply:
// a policy that drops the default route or the last nameserver fails
// them.
//
// A Set runs the probes: Before picks the ones to run, After polls each
// until it passes or its time is up and returns a *Failure naming the
// probe and what it saw last. Nothing here decides what to do about a
// failure; the handler rolls back.
package probe
