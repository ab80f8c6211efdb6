package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/cli"
	"github.com/nmstate-ippool/nmstate-ippool/internal/poolchange"
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

// runPlan reads proposed NodeIPPools from a file and prints, for each, what
// applying it would do to the addresses in use: who keeps, moves or loses
// an address, and whether the change can be made in place. It changes
// nothing.
func runPlan(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	flags := bindClusterFlags(fs, stderr)
	file := fs.String("f", "", "file with the proposed NodeIPPool(s), YAML or JSON; - reads standard input")
	fs.StringVar(file, "filename", "", "same as -f")
	if _, err := cli.Parse(fs, args, 0, 0); err != nil {
		return err
	}
	if *file == "" {
		return fmt.Errorf("%w: plan needs -f FILE with the proposed NodeIPPool", cli.ErrUsage)
	}
	if err := flags.check(); err != nil {
		return err
	}
	proposed, err := readPools(*file)
	if err != nil {
		return err
	}
	st, err := flags.read()
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
	return printer{w: stdout, format: flags.output}.plans(plans)
}

// readPools decodes every NodeIPPool of a YAML or JSON stream; it refuses
// a stream that holds none, and says which documents it skipped.
func readPools(path string) ([]ippoolv1.NodeIPPool, error) {
	var raw []byte
	var err error
	if path == "-" {
		raw, err = io.ReadAll(os.Stdin)
	} else {
		raw, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("read the proposed pool: %w", err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var pools []ippoolv1.NodeIPPool
	for doc := 1; ; doc++ {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, doc, err)
		}
		if obj == nil || obj["kind"] != "NodeIPPool" {
			continue // a policy or anything else beside the pool
		}
		b, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		var p ippoolv1.NodeIPPool
		if err := yaml.UnmarshalStrict(b, &p); err != nil {
			return nil, fmt.Errorf("%s: document %d is not a valid NodeIPPool: %w", path, doc, err)
		}
		if p.Name == "" {
			return nil, fmt.Errorf("%s: document %d: the NodeIPPool has no metadata.name", path, doc)
		}
		pools = append(pools, p)
	}
	if len(pools) == 0 {
		return nil, fmt.Errorf("%s holds no NodeIPPool (kind: NodeIPPool)", path)
	}
	return pools, nil
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
	a, err := poolchange.Assess(proposed, stored, poolchange.Holdings(proposed.Name, stored, s.enactments), s.pools)
	if err != nil {
		return poolPlan{}, fmt.Errorf("the proposed pool cannot hand out addresses: %w", err)
	}
	pl := poolPlan{Assessment: a, Exists: stored != nil}
	if stored == nil {
		return pl, nil
	}
	if stored.Spec.Range.CIDR != proposed.Spec.Range.CIDR {
		pl.Refusals = append(pl.Refusals, fmt.Sprintf("spec.range.cidr is immutable (%s): delete the pool and create it anew to renumber it into %s",
			stored.Spec.Range.CIDR, proposed.Spec.Range.CIDR))
	}
	for _, e := range a.Refusals(true) {
		pl.Refusals = append(pl.Refusals, e.Error())
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
