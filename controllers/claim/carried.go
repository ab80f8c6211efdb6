package claim

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/netstate"
)

// carriedStates returns a cache of the NodeNetworkStates, each reduced as
// it arrives to its name and the addresses it carries (carriedOnly), run
// by mgr. A claim's new address avoids every address a node carries, and
// claims are served one at a time: listing a fleet's states from the API
// server for each claim made a claim take 650 ms beside a thousand nodes,
// most of it decoding and parsing states. The cache is the claim
// controller's alone: nothing that reads whole states reads it.
func carriedStates(mgr ctrl.Manager) (client.Reader, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(),
		Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{
			&nncev1beta1.NodeNetworkState{}: {Transform: carriedOnly},
		},
		ReaderFailOnMissingInformer: true,
	})
	if err != nil {
		return nil, fmt.Errorf("make the cache of the addresses nodes carry: %w", err)
	}
	if _, err := c.GetInformer(context.Background(), &nncev1beta1.NodeNetworkState{}); err != nil {
		return nil, fmt.Errorf("watch NodeNetworkStates, for the addresses nodes carry: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return nil, err
	}
	return c, nil
}

// carriedOnly reduces a NodeNetworkState to its name and a state that
// carries what it carries (netstate.CarriedState), nothing else.
func carriedOnly(o any) (any, error) {
	nns, ok := o.(*nncev1beta1.NodeNetworkState)
	if !ok {
		return o, nil
	}
	out := &nncev1beta1.NodeNetworkState{ObjectMeta: metav1.ObjectMeta{
		Name: nns.Name, UID: nns.UID, ResourceVersion: nns.ResourceVersion}}
	out.Status.LastSuccessfulUpdateTime = nns.Status.LastSuccessfulUpdateTime
	out.Status.CurrentState.Raw = netstate.CarriedState(netstate.Carriers(nns.Status.CurrentState.Raw))
	return out, nil
}
