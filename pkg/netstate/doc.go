// Package netstate reads nmstate state documents (the JSON or YAML of
// "nmstatectl show", and a NodeNetworkState's currentState): which
// interface carries which address, the static addresses of each
// interface, and a state with some addresses taken off. It runs nothing;
// pkg/nmstatectl runs the command line. The control plane reads
// published states with it, the handler both.
package netstate
