package capi

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ProvenanceAnnotation is on every IPAddress this provider makes for a
// claim: a keyed digest of what makes it that claim's (see Signer). An
// IPAddress naming a NodeIPPool without a valid one is unrecognized: it
// holds no address as a record does.
const ProvenanceAnnotation = "nmstate.io/ippool-provenance"

// KeySecretKey is the key of the signing key in its Secret.
const KeySecretKey = "key"

// DefaultKeySecret names the Secret, in the pool controller's namespace,
// that holds the key IPAddresses are signed with.
const DefaultKeySecret = "nmstate-ippool-provenance-key"

// provenanceVersion prefixes every signature, so a later format can be
// told apart.
const provenanceVersion = "v1."

// Signer signs the IPAddresses this provider makes and tells them from
// any other: the signature is an HMAC-SHA256, under a key only the pool
// controller reads, of the IPAddress's namespace, name, claim, pool,
// address and the UID of the claim that controls it. Nobody without the
// key can make one; a copy moved to another name, namespace, pool or
// address does not verify; nor does an old IPAddress created again after
// its claim is gone (the claim's UID differs, or no claim has it).
type Signer struct{ key []byte }

// NewSigner returns a signer with key, which must hold 32 bytes at least.
func NewSigner(key []byte) (*Signer, error) {
	if len(key) < 32 {
		return nil, fmt.Errorf("a signing key needs 32 bytes at least, this one has %d", len(key))
	}
	return &Signer{key: key}, nil
}

// NewEphemeralSigner returns a signer with a random key that lives as long
// as the process: what it signs is recognized until it restarts, then
// adopted again by its claims.
func NewEphemeralSigner() *Signer {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	return &Signer{key: key}
}

// LoadOrCreateSigner reads the signing key from the Secret namespace/name,
// and creates that Secret with a random key when there is none: every
// replica of the pool controller, and every restart, signs with the same
// key.
func LoadOrCreateSigner(ctx context.Context, c client.Client, namespace, name string) (*Signer, error) {
	for range 2 {
		var s corev1.Secret
		err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &s)
		if err == nil {
			signer, err := NewSigner(s.Data[KeySecretKey])
			if err != nil {
				return nil, fmt.Errorf("the signing key's Secret %s/%s: %w; delete it to have a new key made (every IPAddress is then signed again by its claim)",
					namespace, name, err)
			}
			return signer, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("read the signing key from Secret %s/%s: %w", namespace, name, err)
		}
		key := make([]byte, 32)
		_, _ = rand.Read(key)
		s = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: maps.Clone(keyLabel)},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{KeySecretKey: key},
		}
		err = c.Create(ctx, &s)
		if err == nil {
			return &Signer{key: key}, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create the signing key's Secret %s/%s: %w", namespace, name, err)
		}
		// Another replica made it meanwhile: read theirs.
	}
	return nil, fmt.Errorf("the signing key's Secret %s/%s was created and deleted meanwhile; try again", namespace, name)
}

// Sign returns the signature of addr (an IPAddress), controlled by the
// claim whose UID is claimUID.
func (s *Signer) Sign(addr *unstructured.Unstructured, claimUID types.UID) string {
	a := AddressOf(addr)
	mac := hmac.New(sha256.New, s.key)
	for _, part := range []string{a.Namespace, a.Name, a.Claim, a.Pool.Name, a.IP.String(), string(claimUID)} {
		fmt.Fprintf(mac, "%d:%s;", len(part), part)
	}
	return provenanceVersion + hex.EncodeToString(mac.Sum(nil))
}

// SetProvenance signs addr for the claim whose UID is claimUID.
func (s *Signer) SetProvenance(addr *unstructured.Unstructured, claimUID types.UID) {
	annotations := addr.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[ProvenanceAnnotation] = s.Sign(addr, claimUID)
	addr.SetAnnotations(annotations)
}

// Signed reports whether addr carries this provider's signature for the
// claim whose UID is claimUID, and names that claim as its controller.
func (s *Signer) Signed(addr *unstructured.Unstructured, claimUID types.UID) bool {
	if s == nil {
		return true
	}
	got := addr.GetAnnotations()[ProvenanceAnnotation]
	if claimUID == "" || !strings.HasPrefix(got, provenanceVersion) || ControllerClaimUID(addr) != claimUID {
		return false
	}
	return hmac.Equal([]byte(got), []byte(s.Sign(addr, claimUID)))
}

// ControllerClaimUID returns the UID of the IPAddressClaim addr names as
// its controller, of the claim addr's spec.claimRef names, or "".
func ControllerClaimUID(addr *unstructured.Unstructured) types.UID {
	ref := metav1.GetControllerOfNoCopy(addr)
	if ref == nil || ref.Kind != ClaimKind || !strings.HasPrefix(ref.APIVersion, Group+"/") || ref.Name != AddressOf(addr).Claim {
		return ""
	}
	return ref.UID
}

// keyLabel marks the Secret of the signing key, so that tools can find it
// in whichever namespace the install runs.
var keyLabel = map[string]string{"app.kubernetes.io/part-of": "nmstate-ippool"}

// FindSigner finds the signing key's Secret (DefaultKeySecret, labelled
// as LoadOrCreateSigner makes it) in any namespace, for tools that read
// pools as the pool controller does (kubectl-nodeippool). It returns nil,
// and no error, when there is none, or more than one, or the caller may
// not read Secrets: every IPAddress then counts as a record.
func FindSigner(ctx context.Context, reader client.Reader) *Signer {
	var list corev1.SecretList
	if err := reader.List(ctx, &list, client.MatchingLabels(keyLabel)); err != nil {
		return nil
	}
	var found []*Signer
	for i := range list.Items {
		if list.Items[i].Name != DefaultKeySecret {
			continue
		}
		if s, err := NewSigner(list.Items[i].Data[KeySecretKey]); err == nil {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		return nil
	}
	return found[0]
}
