package holder

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
)

// Sources says which kinds of holder List reads besides enactments. A
// kind whose CRD is not installed has none.
type Sources struct {
	// Claims reads the IPAddresses of Cluster API claims.
	Claims bool
	// Signer tells the IPAddresses this provider made for a claim from
	// the others (ForIPAddress); nil recognizes every one.
	Signer *capi.Signer
	// PooledPolicies reads the nodes of companion mode's pooled policies.
	PooledPolicies bool
}

// Every reads every kind, recognizing the IPAddresses signer signed.
func Every(signer *capi.Signer) Sources {
	return Sources{Claims: true, Signer: signer, PooledPolicies: true}
}

// List returns the records of every holder of the pools: those of
// enactments (listed by the caller, which knows from where), and those of
// the kinds s names, read through reader. It is the one list every
// decision about a pool's holders takes.
func List(ctx context.Context, reader client.Reader, enactments []nncev1beta1.NodeNetworkConfigurationEnactment, s Sources) ([]Record, error) {
	out := OfEnactments(enactments)
	if s.Claims {
		claims, err := claimRecords(ctx, reader, s.Signer)
		if err != nil {
			return nil, err
		}
		out = append(out, claims...)
	}
	if s.PooledPolicies {
		var list ippoolv1.PooledNodeNetworkConfigurationPolicyList
		switch err := reader.List(ctx, &list); {
		case missing(err), runtime.IsNotRegisteredError(err):
		case err != nil:
			return nil, fmt.Errorf("list %ss: %w", PooledPolicyKind, err)
		default:
			out = append(out, OfPooledPolicies(list.Items)...)
		}
	}
	return out, nil
}

// claimRecords lists the IPAddresses of NodeIPPools through reader and
// returns each as the record of its claim (ForClaim), holding its address
// under the pool's name. An IPAddress being deleted still holds its
// address.
//
// Only an IPAddress signer signed for the claim that controls it, and
// that claim exists, is a claim's record. Any other naming a pool (made by
// someone else, or restored from a backup that dropped its owner) is the
// record of ForIPAddress: it keeps its address from being handed out, and
// holds it against nobody.
func claimRecords(ctx context.Context, reader client.Reader, signer *capi.Signer) ([]Record, error) {
	for _, v := range capi.Versions {
		list := capi.NewAddressList(v)
		// Read only, into records of their own: a cache's objects need no
		// copy.
		err := reader.List(ctx, list, client.UnsafeDisableDeepCopy)
		if missing(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list IPAddresses: %w", err)
		}
		claims := map[types.NamespacedName]types.UID{}
		if signer != nil && len(list.Items) > 0 {
			cl := capi.NewClaimList(v)
			if err := reader.List(ctx, cl, client.UnsafeDisableDeepCopy); err != nil {
				return nil, fmt.Errorf("list IPAddressClaims: %w", err)
			}
			for i := range cl.Items {
				claims[client.ObjectKeyFromObject(&cl.Items[i])] = cl.Items[i].GetUID()
			}
		}
		return addressRecords(list.Items, func(u *unstructured.Unstructured) bool {
			if signer == nil {
				return true
			}
			uid := claims[types.NamespacedName{Namespace: u.GetNamespace(), Name: capi.AddressOf(u).Claim}]
			return signer.Signed(u, uid)
		}), nil
	}
	return nil, nil
}

// addressRecords returns the records of the IPAddresses of items that
// name a NodeIPPool and a valid address.
func addressRecords(items []unstructured.Unstructured, recognized func(*unstructured.Unstructured) bool) []Record {
	out := make([]Record, 0, len(items))
	for i := range items {
		a := capi.AddressOf(&items[i])
		if !a.Pool.Ours() || !a.IP.IsValid() {
			continue
		}
		h := ForClaim(a.Namespace, a.Claim)
		if !recognized(&items[i]) {
			h = ForIPAddress(a.Namespace, a.Name)
		}
		out = append(out, Record{Holder: h, Pools: ippoolv1.EnactmentIPPools{a.Pool.Name: {Allocated: []string{a.IP.String()}}}})
	}
	return out
}

// missing reports whether err says the kind is not served.
func missing(err error) bool {
	return err != nil && (meta.IsNoMatchError(err) || apierrors.IsNotFound(err))
}
