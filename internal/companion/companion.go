// Package companion reads the records of companion mode's pooled policies
// (PooledNodeNetworkConfigurationPolicy, status.nodes) for every reader of
// a pool's holders: the pool controller, the range webhook and the
// plugin. Each node of a pooled policy is presented as an enactment named
// holder.ForPolicyNode(policy, node), with the node and the policy in
// kubernetes-nmstate's enactment labels and its addresses in
// status.ippool, so that rebuilds, garbage collection, collisions,
// overlaps, quarantines (their holder is the node: its NodeNetworkState is
// the evidence) and reservations count them as they count enactments.
package companion

import (
	"context"
	"fmt"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/capi"
	"github.com/nmstate-ippool/nmstate-ippool/internal/holder"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/capture"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// Records lists the pooled policies through reader and returns the record
// of each of their nodes as an enactment (see the package doc). A node
// whose addresses are being released still holds them. Without the CRD
// there are none.
func Records(ctx context.Context, reader client.Reader) ([]nncev1beta1.NodeNetworkConfigurationEnactment, error) {
	var list ippoolv1.PooledNodeNetworkConfigurationPolicyList
	err := reader.List(ctx, &list)
	switch {
	case meta.IsNoMatchError(err), apierrors.IsNotFound(err), runtime.IsNotRegisteredError(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("list %ss: %w", holder.PooledPolicyKind, err)
	}
	return RecordsOf(list.Items), nil
}

// RecordsOf returns the records of the nodes of policies as enactments.
func RecordsOf(policies []ippoolv1.PooledNodeNetworkConfigurationPolicy) []nncev1beta1.NodeNetworkConfigurationEnactment {
	var out []nncev1beta1.NodeNetworkConfigurationEnactment
	for i := range policies {
		p := &policies[i]
		for _, n := range p.Status.Nodes {
			if len(n.Held()) == 0 {
				continue
			}
			out = append(out, RecordOf(p.Name, n))
		}
	}
	return out
}

// RecordOf returns the record of one node of the pooled policy named
// policy as an enactment.
func RecordOf(policy string, n ippoolv1.PooledPolicyNode) nncev1beta1.NodeNetworkConfigurationEnactment {
	e := nncev1beta1.NodeNetworkConfigurationEnactment{ObjectMeta: metav1.ObjectMeta{
		Name:   holder.ForPolicyNode(policy, n.Node).String(),
		Labels: map[string]string{shared.EnactmentNodeLabel: n.Node, shared.EnactmentPolicyLabel: policy},
	}}
	e.Status.IPPool = n.Record()
	e.Status.CapturedStates = map[string]shared.NodeNetworkConfigurationEnactmentCapturedState{}
	for _, a := range n.Addresses {
		ip, err := ippool.ParseAddr(a.IP)
		if err != nil {
			continue
		}
		// The capture's name by address, for messages; the prefix length
		// is the pool's, which a record does not repeat.
		e.Status.CapturedStates[a.Capture] = shared.NodeNetworkConfigurationEnactmentCapturedState{
			State: shared.NewState(string(capture.Address{IP: ip}.State())),
		}
	}
	return e
}

// WithRecords appends the pooled policies' records to enactments: the
// list every decision about a pool's holders takes.
func WithRecords(ctx context.Context, reader client.Reader,
	enactments []nncev1beta1.NodeNetworkConfigurationEnactment) ([]nncev1beta1.NodeNetworkConfigurationEnactment, error) {
	records, err := Records(ctx, reader)
	if err != nil || len(records) == 0 {
		return enactments, err
	}
	return append(enactments[:len(enactments):len(enactments)], records...), nil
}

// WithForeignRecords appends to enactments every record that is no
// enactment: the Cluster API claims' (capi.Records, whose IPAddresses
// signer tells apart) and the pooled policies'. A kind whose CRD is not
// installed has none.
func WithForeignRecords(ctx context.Context, reader client.Reader, signer *capi.Signer,
	enactments []nncev1beta1.NodeNetworkConfigurationEnactment) ([]nncev1beta1.NodeNetworkConfigurationEnactment, error) {
	enactments, err := capi.WithRecords(ctx, reader, signer, enactments)
	if err != nil {
		return nil, err
	}
	return WithRecords(ctx, reader, enactments)
}
