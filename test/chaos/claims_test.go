package chaos

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
)

// claimVersion is the IPAM version the cluster serves: the CRDs' storage
// version, without Cluster API's conversion webhook.
const claimVersion = "v1beta2"

// createClaim creates the next IPAddressClaim of chaos-v4.
func (c *cluster) createClaim() bool {
	c.claimsMade++
	u := capi.NewClaim(claimVersion)
	u.SetNamespace(claimsNamespace)
	u.SetName(fmt.Sprintf("machine%02d-eth0", c.claimsMade))
	u.Object["spec"] = map[string]any{"poolRef": map[string]any{"apiGroup": "nmstate.io", "kind": "NodeIPPool", "name": pool4}}
	c.target = u.GetName()
	return c.k.Create(c.ctx, u) == nil
}

// claimNames lists the claims that exist and are not being deleted.
func (c *cluster) claimNames() []string {
	list := capi.NewClaimList(claimVersion)
	if err := c.k.List(c.ctx, list, client.InNamespace(claimsNamespace)); err != nil {
		return nil
	}
	var out []string
	for _, u := range list.Items {
		if u.GetDeletionTimestamp() == nil {
			out = append(out, u.GetName())
		}
	}
	sort.Strings(out)
	return out
}

// replaceClaim deletes a claim, as an infrastructure provider does when
// its machine goes (in the background, the foreground, or orphaning its
// IPAddress: the release is the claim's finalizer's either way), and
// creates another, as for a new machine.
func (c *cluster) replaceClaim(rng *rand.Rand) bool {
	names := c.claimNames()
	if len(names) == 0 {
		return false
	}
	u := capi.NewClaim(claimVersion)
	u.SetNamespace(claimsNamespace)
	u.SetName(names[rng.IntN(len(names))])
	propagation := anyPropagation(rng)
	if c.k.Delete(c.ctx, u, client.PropagationPolicy(propagation)) != nil {
		return false
	}
	gone := u.GetName()
	if !c.createClaim() {
		return false
	}
	c.target = gone + " (" + string(propagation) + ") -> " + c.target
	return true
}

// deleteAddress deletes a claim's IPAddress while the claim lives: the
// provider puts it back with the same address.
func (c *cluster) deleteAddress(rng *rand.Rand) bool {
	names := c.claimNames()
	if len(names) == 0 {
		return false
	}
	a := capi.NewAddress(claimVersion)
	a.SetNamespace(claimsNamespace)
	a.SetName(names[rng.IntN(len(names))])
	c.target = a.GetName()
	return c.k.Delete(c.ctx, a) == nil
}

// claimAddresses maps each address an IPAddress of the claims holds to
// "namespace/name@uid" of that IPAddress; two IPAddresses of one address
// show as "ip#2".
func (c *cluster) claimAddresses() map[string]string {
	list := capi.NewAddressList(claimVersion)
	if err := c.k.List(c.ctx, list, client.InNamespace(claimsNamespace)); err != nil {
		return nil
	}
	out := map[string]string{}
	for i := range list.Items {
		a := capi.AddressOf(&list.Items[i])
		key := a.IP.String()
		if _, twice := out[key]; twice {
			key += "#2"
		}
		out[key] = fmt.Sprintf("%s/%s@%s", a.Namespace, a.Name, list.Items[i].GetUID())
	}
	return out
}

// claimedAndCarried lists the addresses that one IPAddress held all
// along (in before and after, the same object) while a present node
// carried them, and those two IPAddresses held at once.
func claimedAndCarried(before, after map[string]string, nets map[string][]string, present []string) []string {
	var out []string
	for ip, holder := range before {
		if after[ip] != holder {
			continue
		}
		if base, ok := cutTwice(ip); ok {
			out = append(out, fmt.Sprintf("%s held by two IPAddresses (%s and %s)", base, before[base], holder))
			continue
		}
		for node, ips := range nets {
			if slices.Contains(present, node) && slices.Contains(ips, ip) {
				out = append(out, fmt.Sprintf("%s held by IPAddress %s and on node %s", ip, holder, node))
			}
		}
	}
	sort.Strings(out)
	return out
}

func cutTwice(key string) (string, bool) {
	if len(key) > 2 && key[len(key)-2:] == "#2" {
		return key[:len(key)-2], true
	}
	return "", false
}

// claimsServed reports an error until every claim has its IPAddress and
// is Ready.
func (c *cluster) claimsServed() error {
	var missing []string
	for _, name := range c.claimNames() {
		u := capi.NewClaim(claimVersion)
		if err := c.k.Get(c.ctx, types.NamespacedName{Namespace: claimsNamespace, Name: name}, u); err != nil {
			missing = append(missing, name+": "+err.Error())
			continue
		}
		if ref, _, _ := unstructured.NestedString(u.Object, "status", "addressRef", "name"); ref == "" {
			missing = append(missing, name+": no addressRef")
		}
	}
	if len(missing) > 0 {
		return errors.New(fmt.Sprint(missing))
	}
	return nil
}
