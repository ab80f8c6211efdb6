// Command kubectl-nodeippool is a kubectl plugin that explains NodeIPPools,
// the "tool to understand NodeIPPool offsets" of kubernetes-nmstate's "Host
// IP pooling with NNCPs" proposal:
//
//	kubectl nodeippool list                    pools, their ranges, use and condition
//	kubectl nodeippool show POOL               every allocated offset → IP → node, interface, policy, capture
//	kubectl nodeippool decode POOL OFFSET|IP   an offset or an address, both ways
//	kubectl nodeippool check [POOL...]         exit 1 if a pool's status and its holders' records (enactments, pooled policies, Cluster API claims) disagree, or an address is on two nodes' networks, listing how
//	kubectl nodeippool plan -f FILE            who would keep, move or lose an address under a proposed pool or pooled policy
//	kubectl nodeippool history IP              what happened to an address lately, from the audit trail's Events (they last an hour by default)
//	kubectl nodeippool explain --cidr ...      a range's offsets, offline
//	kubectl nodeippool version                 the plugin's version
//
// The cluster commands print tables, or -o json|yaml, and find the cluster
// as kubectl does: --kubeconfig, --context, $KUBECONFIG, ~/.kube/config.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	nncev1beta1 "github.com/nmstate-ippool/nmstate-ippool/api/v1beta1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/capi"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/cli"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/scheme"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/version"
)

const usage = `Usage:
  kubectl nodeippool list                     [-o table|json|yaml]
  kubectl nodeippool show POOL                [-o table|json|yaml]
  kubectl nodeippool decode POOL OFFSET|IP    [-o table|json|yaml]
  kubectl nodeippool check [POOL...]          [-o table|json|yaml]
  kubectl nodeippool plan -f FILE             [-o table|json|yaml]
  kubectl nodeippool history IP               [-o table|json|yaml]
  kubectl nodeippool explain --cidr CIDR [--start IP] [--end IP] [--exclude IP|CIDR,...]
                             [--allocated SNAPSHOT] [--allocate N] [--limit N]
  kubectl nodeippool version

list shows the pools; show, every allocated or recorded address of a pool
with its offset, state and holders (node, interface, policy, capture);
decode turns an offset into an address or back; check exits 1 when a
pool's status and its holders' records (enactments, pooled policies,
Cluster API claims) disagree, or when the nodes' NodeNetworkStates show an
address of a pool on two nodes (or on one node while a record holds it for
another), listing every mismatch, and notes each address a node carries
that no record holds, with what becomes of it; plan
reads proposed NodeIPPools and pooled policies from FILE (- for standard
input) and shows, for each pool, which nodes would keep, move or lose their
address, at which offsets, and whether kubectl apply may change the pool in
place; for each policy, which address every node it selects would have:
the one it already carries on the interface (adopted), the one its
record holds (its enactment, or the pooled policy's status) or an address kept for its return, or a new one, or none if the pool is full, and why; history lists the Events of the audit trail about an address (who
took, recorded, released or regained it, and why), oldest first, while
the API server keeps them (docs/audit.md: the log keeps the rest). They
take --kubeconfig and --context like kubectl; none changes anything.

explain needs no cluster: it shows how a range maps offsets to addresses,
which are excluded, what a status.allocatedOffsets snapshot holds and, with
--allocate N, which addresses the next N allocations get.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line and returns the exit code: 0 on success, 1
// when the input is invalid, the cluster cannot be read or check finds a
// mismatch, 2 on a usage error.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "explain":
		err = runExplain(rest, stdout, stderr)
	case "plan":
		err = runPlan(rest, stdout, stderr)
	case "history":
		err = runHistory(rest, stdout, stderr)
	case "list", "show", "decode", "check":
		err = runCluster(cmd, rest, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case "version", "--version":
		fmt.Fprintln(stdout, "kubectl-nodeippool", version.Get())
		return 0
	default:
		err = fmt.Errorf("%w: unknown command %q", cli.ErrUsage, cmd)
	}
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, cli.ErrUsage):
		fmt.Fprintf(stderr, "error: %v\n\n%s", err, usage)
		return 2
	case errors.Is(err, errMismatch):
		return 1
	default:
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
}

// arity is how many positional arguments each cluster command takes.
var arity = map[string][2]int{"list": {0, 0}, "show": {1, 1}, "decode": {2, 2}, "check": {0, -1}}

func runCluster(cmd string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	flags := bindClusterFlags(fs, stderr)
	pos, err := cli.Parse(fs, args, arity[cmd][0], arity[cmd][1])
	if err != nil {
		return err
	}
	if err := flags.check(); err != nil {
		return err
	}
	st, err := flags.read(cmd == "check")
	if err != nil {
		return err
	}
	p := printer{w: stdout, format: flags.output}
	switch cmd {
	case "list":
		return p.list(st.pools)
	case "show":
		return st.show(p, pos[0])
	case "decode":
		return st.decode(p, pos[0], pos[1])
	default:
		return st.check(p, pos)
	}
}

// clusterFlags are the flags of every command that reads the cluster.
type clusterFlags struct {
	kubeconfig, context, output string
}

// bindClusterFlags defines the cluster flags on fs, whose errors and usage
// go to stderr.
func bindClusterFlags(fs *flag.FlagSet, stderr io.Writer) *clusterFlags {
	f := &clusterFlags{}
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "path of the kubeconfig file (default $KUBECONFIG, then ~/.kube/config)")
	fs.StringVar(&f.context, "context", "", "the kubeconfig context to use")
	fs.StringVar(&f.output, "o", "table", "output format: table, json or yaml")
	fs.StringVar(&f.output, "output", "table", "output format: table, json or yaml")
	return f
}

// check refuses an output format the printer does not know.
func (f *clusterFlags) check() error {
	if f.output != "table" && f.output != "json" && f.output != "yaml" {
		return fmt.Errorf("%w: -o %q: use table, json or yaml", cli.ErrUsage, f.output)
	}
	return nil
}

// read connects to the cluster and reads every pool and enactment.
// read reads the snapshot, with the nodes' networks when withNetworks.
func (f *clusterFlags) read(withNetworks bool) (*snapshot, error) {
	k, err := connect(f.kubeconfig, f.context)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	s, err := read(ctx, k)
	if err != nil || !withNetworks {
		return s, err
	}
	s.networks, err = readNetworks(ctx, k)
	return s, err
}

// connect builds a client the way kubectl finds its cluster.
func connect(kubeconfig, kubeContext string) (client.Client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
		&clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("find the cluster: %w", err)
	}
	s, err := scheme.New()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: s})
}

// snapshot is what the plugin reads: every pool and enactment, and the
// records of the Cluster API claims the pools serve.
type snapshot struct {
	pools []ippoolv1.NodeIPPool
	// records are every holder's, of every kind.
	records []holder.Record
	// networks are what the nodes carry; read for check only.
	networks networks
}

func read(ctx context.Context, k client.Client) (*snapshot, error) {
	var pools ippoolv1.NodeIPPoolList
	if err := k.List(ctx, &pools); err != nil {
		return nil, fmt.Errorf("list NodeIPPools: %w", err)
	}
	var enactments nncev1beta1.NodeNetworkConfigurationEnactmentList
	if err := k.List(ctx, &enactments); err != nil {
		return nil, fmt.Errorf("list enactments: %w", err)
	}
	// Cluster API claims and pooled policies hold addresses of the pools
	// too; IPAddresses the provider did not make only when the signing key
	// cannot be read (capi.FindSigner).
	records, err := holder.List(ctx, k, enactments.Items, holder.Every(capi.FindSigner(ctx, k)))
	if err != nil {
		return nil, err
	}
	return &snapshot{pools: pools.Items, records: records}, nil
}

// find returns the inspected pool called name.
func (s *snapshot) find(name string) (*inspected, error) {
	for i := range s.pools {
		if s.pools[i].Name == name {
			return inspect(&s.pools[i], s.records)
		}
	}
	return nil, fmt.Errorf("NodeIPPool %q not found; 'kubectl nodeippool list' shows the pools", name)
}

func (s *snapshot) show(p printer, name string) error {
	in, err := s.find(name)
	if err != nil {
		return err
	}
	return p.detail(in.detail())
}

func (s *snapshot) decode(p printer, name, arg string) error {
	in, err := s.find(name)
	if err != nil {
		return err
	}
	row, err := in.decodeArg(arg)
	if err != nil {
		return err
	}
	return p.decoded(name, row)
}

// check prints every pool's problems (of the named pools, if any) and
// returns errMismatch if there are some.
func (s *snapshot) check(p printer, names []string) error {
	checks := checkAll(s.pools, s.records, s.networks)
	if len(names) > 0 {
		var kept []poolCheck
		for _, name := range names {
			found := false
			for _, c := range checks {
				if c.Pool == name {
					kept, found = append(kept, c), true
				}
			}
			if !found {
				return fmt.Errorf("NodeIPPool %q not found; 'kubectl nodeippool list' shows the pools", name)
			}
		}
		checks = kept
	}
	if err := p.checks(checks); err != nil {
		return err
	}
	for _, c := range checks {
		if len(c.Problems) > 0 {
			return errMismatch
		}
	}
	return nil
}
