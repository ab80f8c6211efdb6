package envtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nmstate/kubernetes-nmstate/api/shared"
	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// ExamplesDir is where the suites read the documented kinds of policies
// from: $NMSTATE_EXAMPLES (a checkout's kubernetes-nmstate/docs/examples,
// to run its files unchanged), else test/e2e/testdata/examples.
func ExamplesDir() string {
	if d := os.Getenv("NMSTATE_EXAMPLES"); d != "" {
		return d
	}
	return filepath.Join(RepoRoot(), "test", "e2e", "testdata", "examples")
}

// ExamplePolicies reads every NodeNetworkConfigurationPolicy of the YAML
// files in dir, in file order; a file may hold several documents.
func ExamplePolicies(dir string) ([]*unstructured.Unstructured, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, doc := range strings.Split("\n"+string(raw), "\n---") {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if u.GetKind() == "NodeNetworkConfigurationPolicy" {
				out = append(out, u)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no policies in %s", dir)
	}
	return out, nil
}

// AddressState is a policy's desired state that puts the address of the
// capture addr on iface.
func AddressState(iface string) string {
	return strings.Replace(OneAddressState, "name: eth1", "name: "+iface, 1)
}

// Applies counts the applies the simulated network of a local cluster's
// node took (nmstatectl-sim's <state>.applies), in the cluster of dir.
func Applies(dir, node string) int {
	return AppliesTo(filepath.Join(dir, "nodes", node+".yaml"))
}

// AppliesTo returns how many applies the simulated network kept in the
// state file state took (nmstatectl-sim's <state>.applies).
func AppliesTo(state string) int {
	raw, err := os.ReadFile(state + ".applies")
	if err != nil {
		return 0
	}
	return bytes.Count(raw, []byte("\n"))
}

// Sampler runs a check every interval until it is stopped and keeps what
// the check found wrong, with the time of each sample.
type Sampler struct {
	mu       sync.Mutex
	samples  int
	problems []string
	stop     chan struct{}
	done     sync.WaitGroup
}

// Sample starts a Sampler of check, which returns what it found wrong in
// one sample (nothing when all is well) and false when it could not look
// (the sample is not counted).
func Sample(interval time.Duration, check func() ([]string, bool)) *Sampler {
	s := &Sampler{stop: make(chan struct{})}
	s.done.Go(func() {
		for {
			select {
			case <-s.stop:
				return
			case <-time.After(interval):
			}
			problems, ok := check()
			if !ok {
				continue
			}
			at := time.Now().Format(time.StampMilli)
			s.mu.Lock()
			s.samples++
			for _, p := range problems {
				s.problems = append(s.problems, at+": "+p)
			}
			s.mu.Unlock()
		}
	})
	return s
}

// End stops the sampler and returns how many samples it took and what they
// found wrong.
func (s *Sampler) End() (int, []string) {
	close(s.stop)
	s.done.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, slices.Clone(s.problems)
}

// StaticAddressPolicy is one node's policy as admins write them without
// pools: the address typed in (a /24) on eth1, the node chosen by its
// hostname.
func StaticAddressPolicy(name, node, ip string) *nmstatev1.NodeNetworkConfigurationPolicy {
	p := &nmstatev1.NodeNetworkConfigurationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	p.Spec.DesiredState = shared.NewState(fmt.Sprintf("interfaces:\n- name: eth1\n  type: ethernet\n  state: up\n  ipv4:\n"+
		"    enabled: true\n    dhcp: false\n    address:\n    - ip: %s\n      prefix-length: 24\n", ip))
	return p
}

// PolicyAvailability returns "Status Reason: message" of a policy's
// Available condition, or why there is none.
func PolicyAvailability(ctx context.Context, k client.Client, name string) string {
	var p nmstatev1.NodeNetworkConfigurationPolicy
	if err := k.Get(ctx, client.ObjectKey{Name: name}, &p); err != nil {
		return err.Error()
	}
	c := p.Status.Conditions.Find(shared.NodeNetworkConfigurationPolicyConditionAvailable)
	if c == nil {
		return "no condition"
	}
	return fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
}
