package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	nmstatev1 "github.com/nmstate/kubernetes-nmstate/api/v1"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolchange"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/cli"
)

// poolPlan is what plan reports of one proposed pool.
type poolPlan struct {
	*poolchange.Assessment
	// Exists is set when a pool of that name exists; then InPlace says
	// whether `kubectl apply` may change it in place, and Refusals why not.
	Exists   bool     `json:"exists"`
	InPlace  bool     `json:"inPlace"`
	Refusals []string `json:"refusals,omitempty"`
}

// runPlan reads proposed NodeIPPools and pooled policies from a file and
// prints, for each pool, what applying it would do to the addresses in
// use: who keeps, moves or loses an address, and whether the change can be
// made in place; for each policy, which address every node it selects
// would have: the one it carries on the interface (adopted), the one its
// record holds (its enactment, or the pooled policy's status) or one kept
// for its return, or a new one, and why. It changes nothing.
func runPlan(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	flags := bindClusterFlags(fs, stderr)
	file := fs.String("f", "", "file with the proposed NodeIPPool(s) and pooled NodeNetworkConfigurationPolicies, YAML or JSON; - reads standard input")
	fs.StringVar(file, "filename", "", "same as -f")
	if _, err := cli.Parse(fs, args, 0, 0); err != nil {
		return err
	}
	if *file == "" {
		return fmt.Errorf("%w: plan needs -f FILE with the proposed NodeIPPool or pooled policy", cli.ErrUsage)
	}
	if err := flags.check(); err != nil {
		return err
	}
	proposed, policies, err := readProposed(*file)
	if err != nil {
		return err
	}
	k, err := connect(flags.kubeconfig, flags.context)
	if err != nil {
		return err
	}
	ctx := context.Background()
	st, err := read(ctx, k)
	if err != nil {
		return err
	}
	plans := make([]poolPlan, 0, len(proposed))
	for i := range proposed {
		pl, err := st.plan(&proposed[i])
		if err != nil {
			return err
		}
		plans = append(plans, pl)
	}
	out := printer{w: stdout, format: flags.output}
	if len(policies) == 0 {
		return out.plans(plans)
	}
	n, err := readNodes(ctx, k)
	if err != nil {
		return err
	}
	adoption := st.adoptionPlans(policies, proposed, plans, n)
	if done, err := out.structured(struct {
		Pools    []poolPlan   `json:"pools"`
		Policies []policyPlan `json:"policies"`
	}{plans, adoption}); done {
		return err
	}
	if len(plans) > 0 {
		if err := out.plans(plans); err != nil {
			return err
		}
		fmt.Fprintln(stdout)
	}
	return out.policyPlans(adoption)
}

// readProposed decodes every NodeIPPool and NodeNetworkConfigurationPolicy
// of a YAML or JSON stream; it refuses a stream that holds neither.
func readProposed(path string) ([]ippoolv1.NodeIPPool, []nmstatev1.NodeNetworkConfigurationPolicy, error) {
	var raw []byte
	var err error
	if path == "-" {
		raw, err = io.ReadAll(os.Stdin)
	} else {
		raw, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read the proposed pool or policy: %w", err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var (
		pools    []ippoolv1.NodeIPPool
		policies []nmstatev1.NodeNetworkConfigurationPolicy
	)
	for doc := 1; ; doc++ {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, nil, fmt.Errorf("%s: document %d: %w", path, doc, err)
		}
		if obj == nil {
			continue
		}
		pool, policy, err := decodeProposed(obj)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: document %d: %w", path, doc, err)
		}
		if pool != nil {
			pools = append(pools, *pool)
		}
		if policy != nil {
			policies = append(policies, *policy)
		}
	}
	if len(pools)+len(policies) == 0 {
		return nil, nil, fmt.Errorf("%s holds no NodeIPPool, no NodeNetworkConfigurationPolicy and no PooledNodeNetworkConfigurationPolicy", path)
	}
	return pools, policies, nil
}

// decodeProposed decodes one document of a proposal: a NodeIPPool, a
// NodeNetworkConfigurationPolicy, a PooledNodeNetworkConfigurationPolicy,
// or anything else, which it skips.
func decodeProposed(obj map[string]any) (*ippoolv1.NodeIPPool, *nmstatev1.NodeNetworkConfigurationPolicy, error) {
	b, err := yaml.Marshal(obj)
	if err != nil {
		return nil, nil, err
	}
	switch obj["kind"] {
	case "NodeIPPool":
		var p ippoolv1.NodeIPPool
		if err := yaml.UnmarshalStrict(b, &p); err != nil {
			return nil, nil, fmt.Errorf("not a valid NodeIPPool: %w", err)
		}
		if p.Name == "" {
			return nil, nil, errors.New("the NodeIPPool has no metadata.name")
		}
		return &p, nil, nil
	case "NodeNetworkConfigurationPolicy", holder.PooledPolicyKind:
		// A pooled policy (companion mode) has an NNCP's spec; its Kind
		// stays what the file says, and names its holders (nodePlan).
		var p nmstatev1.NodeNetworkConfigurationPolicy
		if err := yaml.Unmarshal(b, &p); err != nil {
			return nil, nil, fmt.Errorf("not a valid %s: %w", obj["kind"], err)
		}
		if p.Name == "" {
			return nil, nil, fmt.Errorf("the %s has no metadata.name", obj["kind"])
		}
		return nil, &p, nil
	}
	return nil, nil, nil
}

// plan assesses a proposed pool against the pool of that name, if any, and
// the enactments, as the webhook would.
func (s *snapshot) plan(proposed *ippoolv1.NodeIPPool) (poolPlan, error) {
	var stored *ippoolv1.NodeIPPool
	for i := range s.pools {
		if s.pools[i].Name == proposed.Name {
			stored = &s.pools[i]
		}
	}
	a, err := poolchange.Assess(proposed, stored, poolchange.Holdings(proposed.Name, stored, s.records), s.pools)
	if err != nil {
		return poolPlan{}, fmt.Errorf("the proposed pool cannot hand out addresses: %w", err)
	}
	pl := poolPlan{Assessment: a, Exists: stored != nil}
	if stored == nil {
		// As the admission webhook judges a creation, and then the pool
		// controller.
		for _, e := range a.Refusals(false) {
			pl.Refusals = append(pl.Refusals, e.Error())
		}
		if len(a.Overlapping) > 0 {
			pl.Refusals = append(pl.Refusals, fmt.Sprintf("it overlaps NodeIPPool %s: the pool controller refuses the newer of two "+
				"overlapping pools (OverlappingIPPool), and it would hand out nothing; pick a range outside them",
				strings.Join(a.Overlapping, ", ")))
		}
		return pl, nil
	}
	// As the CRD's rules and the admission webhook judge a change.
	if stored.Spec.Range.CIDR != proposed.Spec.Range.CIDR {
		pl.Refusals = append(pl.Refusals, fmt.Sprintf("spec.range.cidr is immutable (%s): delete the pool and create it anew to renumber it into %s",
			stored.Spec.Range.CIDR, proposed.Spec.Range.CIDR))
	}
	if stored.Spec.Gateway != proposed.Spec.Gateway {
		pl.Refusals = append(pl.Refusals, "spec.gateway is immutable: the enactments record it with every address; create a new pool to change it")
	}
	if !equality.Semantic.DeepEqual(stored.Spec.DNS, proposed.Spec.DNS) {
		pl.Refusals = append(pl.Refusals, "spec.dns is immutable: the enactments record it with every address; create a new pool to change it")
	}
	// The webhook judges a change of the range, or of the reservations
	// alone, and admits any other.
	rangeChanged := !equality.Semantic.DeepEqual(stored.Spec.Range, proposed.Spec.Range)
	if rangeChanged || !equality.Semantic.DeepEqual(stored.Spec.Reservations, proposed.Spec.Reservations) {
		for _, e := range a.Refusals(rangeChanged) {
			pl.Refusals = append(pl.Refusals, e.Error())
		}
	}
	pl.InPlace = len(pl.Refusals) == 0
	return pl, nil
}

func (p printer) plans(plans []poolPlan) error {
	if done, err := p.structured(plans); done {
		return err
	}
	for i, pl := range plans {
		if i > 0 {
			fmt.Fprintln(p.w)
		}
		if err := p.plan(pl); err != nil {
			return err
		}
	}
	return nil
}

func (p printer) plan(pl poolPlan) error {
	switch {
	case !pl.Exists && len(pl.Refusals) > 0:
		fmt.Fprintf(p.w, "NodeIPPool %s: new, range %s; it would be refused or serve nothing:\n", pl.Pool, pl.To)
		for _, r := range pl.Refusals {
			fmt.Fprintf(p.w, "  - %s\n", r)
		}
	case !pl.Exists:
		fmt.Fprintf(p.w, "NodeIPPool %s: new, range %s\n", pl.Pool, pl.To)
	case pl.InPlace:
		fmt.Fprintf(p.w, "NodeIPPool %s: %s -> %s; kubectl apply changes it in place\n", pl.Pool, pl.From, pl.To)
	default:
		fmt.Fprintf(p.w, "NodeIPPool %s: %s -> %s; kubectl apply would be refused:\n", pl.Pool, pl.From, pl.To)
		for _, r := range pl.Refusals {
			fmt.Fprintf(p.w, "  - %s\n", r)
		}
		fmt.Fprintln(p.w, "Deleting the pool and creating it anew would do this:")
	}
	if len(pl.Outcomes) > 0 {
		tw := p.table()
		fmt.Fprintln(tw, "NODE\tPOLICY\tCAPTURE\tIP\tHELD AS\tOFFSET\tOUTCOME")
		for _, o := range pl.Outcomes {
			outcome := string(o.Verdict)
			if o.Why != "" {
				outcome += ": " + o.Why
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", dash(o.Node), dash(o.Policy), dash(o.Capture), o.IP, o.Kind, offsets(o), outcome)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(p.w, "No address of this pool is in use.")
	}
	for _, line := range pl.Summary() {
		fmt.Fprintln(p.w, line)
	}
	return nil
}

// offsets shows an address's offset before and after: "2 -> 10".
func offsets(o poolchange.Outcome) string {
	show := func(off *uint64) string {
		if off == nil {
			return "-"
		}
		return strconv.FormatUint(*off, 10)
	}
	if o.OldOffset == nil {
		return show(o.Offset)
	}
	return show(o.OldOffset) + " -> " + show(o.Offset)
}
