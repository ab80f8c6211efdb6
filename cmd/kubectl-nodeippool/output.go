package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"

	ippoolv1 "github.com/nmstate-ippool/nmstate-ippool/api/v1"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/holder"
	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/poolstatus"
)

// printer writes results as tables, JSON or YAML.
type printer struct {
	w      io.Writer
	format string
}

// structured writes v as JSON or YAML and reports whether it did.
func (p printer) structured(v any) (bool, error) {
	switch p.format {
	case "json":
		enc := json.NewEncoder(p.w)
		enc.SetIndent("", "  ")
		return true, enc.Encode(v)
	case "yaml":
		raw, err := yaml.Marshal(v)
		if err != nil {
			return true, err
		}
		_, err = p.w.Write(raw)
		return true, err
	}
	return false, nil
}

func (p printer) table() *tabwriter.Writer { return tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0) }

func (p printer) list(pools []ippoolv1.NodeIPPool) error {
	rows := make([]poolSummary, 0, len(pools))
	for i := range pools {
		rows = append(rows, summarize(&pools[i]))
	}
	if done, err := p.structured(rows); done {
		return err
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintln(p.w, "No NodeIPPools.")
		return err
	}
	tw := p.table()
	fmt.Fprintln(tw, "NAME\tCIDR\tRANGE\tSIZE\tALLOCATED\tFREE\tAVAILABLE\tREASON")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", r.Name, r.CIDR, r.Range, r.Size, r.Allocated, r.Free, r.Available, r.Reason)
	}
	return tw.Flush()
}

func (p printer) detail(d poolDetail) error {
	if done, err := p.structured(d); done {
		return err
	}
	fmt.Fprintf(p.w, "NodeIPPool:    %s\n", d.Name)
	fmt.Fprintf(p.w, "Range:         %s %s (prefix-length %d)\n", d.CIDR, d.Range, d.PrefixLength)
	fmt.Fprintf(p.w, "Addresses:     %d allocated, %d free, %d in all\n", d.Allocated, d.Free, d.Size)
	fmt.Fprintf(p.w, "Available:     %s %s: %s\n", d.Available, d.Reason, d.Message)
	if d.Releases != "" {
		fmt.Fprintf(p.w, "Releases:      %s\n", d.Releases)
	}
	fmt.Fprintln(p.w)
	if len(d.Addresses) == 0 {
		_, err := fmt.Fprintln(p.w, "No address is allocated or recorded.")
		return err
	}
	tw := p.table()
	fmt.Fprintln(tw, "OFFSET\tIP\tSTATE\tNODE\tINTERFACE\tPOLICY\tCAPTURE")
	for _, a := range d.Addresses {
		if k := a.KeptFor; k != nil {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", dash(a.Offset), a.IP, a.State, k.Node, "-", policyColumn(holder.Parse(k.HolderName()), k.Node, ""), k.Capture)
			continue
		}
		if q := a.Quarantine; q != nil {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", dash(a.Offset), a.IP, a.State, dash(q.Node), dash(q.Interface),
				policyColumn(holder.Parse(q.HolderName()), q.Node, ""), dash(q.Capture))
			continue
		}
		for _, h := range holdersOrNone(a.Holders) {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", dash(a.Offset), a.IP, a.State, dash(h.Node), dash(h.Interface),
				policyColumn(h.Holder, "", h.Policy), dash(h.Capture))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return p.quarantines(d.Addresses)
}

// quarantines tells why each quarantined address is held.
func (p printer) quarantines(rows []addressRow) error {
	first := true
	for _, a := range rows {
		if a.Quarantine == nil {
			continue
		}
		if first {
			fmt.Fprintln(p.w, "\nQuarantined:")
			first = false
		}
		if _, err := fmt.Fprintf(p.w, "  %s: %s\n", a.IP, a.Why); err != nil {
			return err
		}
	}
	return nil
}

func (p printer) decoded(pool string, a addressRow) error {
	if done, err := p.structured(a); done {
		return err
	}
	where := "outside the range"
	if a.Offset != "" {
		where = "offset " + a.Offset
	}
	if k := a.KeptFor; k != nil {
		_, err := fmt.Fprintf(p.w, "NodeIPPool %s: %s is %s, free and kept since %s for the return of node %s (enactment %s, capture %s); "+
			"other holders get it only when no other address is free, and no holder while another node's network carries it\n",
			pool, a.IP, where, k.Since.UTC().Format(time.RFC3339), k.Node, k.HolderName(), k.Capture)
		return err
	}
	fmt.Fprintf(p.w, "NodeIPPool %s: %s is %s, %s", pool, a.IP, where, a.State)
	if a.Why != "" {
		_, err := fmt.Fprintf(p.w, ": %s\n", a.Why)
		return err
	}
	if len(a.Holders) == 0 {
		_, err := fmt.Fprintln(p.w)
		return err
	}
	held := make([]string, 0, len(a.Holders))
	for _, h := range a.Holders {
		switch ref := h.Holder; ref.Kind {
		case holder.Claim:
			held = append(held, fmt.Sprintf("%s (its IPAddress %s/%s)", ref.Title(), ref.Namespace, ref.Name))
			continue
		case holder.PolicyNode:
			held = append(held, fmt.Sprintf("node %s on %s (%s %s, capture %s)", ref.Node, dash(h.Interface),
				holder.PooledPolicyKind, ref.Name, dash(h.Capture)))
			continue
		case holder.IPAddress:
			held = append(held, ref.Title())
			continue
		}
		held = append(held, fmt.Sprintf("node %s on %s (enactment %s, policy %s, capture %s)",
			dash(h.Node), dash(h.Interface), h.Holder.Name, dash(h.Policy), dash(h.Capture)))
	}
	_, err := fmt.Fprintf(p.w, ", held by %s\n", strings.Join(held, " and "))
	return err
}

func (p printer) checks(checks []poolCheck) error {
	if done, err := p.structured(checks); done {
		return err
	}
	bad := 0
	for _, c := range checks {
		for _, note := range c.Notes {
			fmt.Fprintf(p.w, "NOTE      %s: %s\n", c.Pool, note)
		}
		if len(c.Problems) == 0 {
			fmt.Fprintf(p.w, "ok        %s\n", c.Pool)
			continue
		}
		bad++
		for _, problem := range c.Problems {
			fmt.Fprintf(p.w, "MISMATCH  %s: %s\n", c.Pool, problem)
		}
	}
	if bad > 0 {
		_, err := fmt.Fprintf(p.w, "%d of %d pools disagree with their holders' records or the nodes' networks\n", bad, len(checks))
		return err
	}
	_, err := fmt.Fprintf(p.w, "all %d pools agree with their holders' records\n", len(checks))
	return err
}

// policyColumn is what show's POLICY column says of a holder, whichever
// the row (held, quarantined, kept): an enactment's policy (policy, or
// its name without "<node>." when node, the entry's, is known: node and
// policy names may both hold dots, so only the node tells where the
// policy begins), a pooled policy as pnncp/<name> (companion mode), a
// claim or an IPAddress by its title (no node, no policy).
func policyColumn(ref holder.Ref, node, policy string) string {
	switch ref.Kind {
	case holder.Claim, holder.IPAddress:
		return ref.Title()
	case holder.PolicyNode:
		return "pnncp/" + ref.Name
	}
	if policy == "" && node != "" {
		if name, ok := strings.CutPrefix(ref.Name, node+"."); ok {
			policy = name
		}
	}
	return dash(policy)
}

func holdersOrNone(h []poolstatus.Owner) []poolstatus.Owner {
	if len(h) == 0 {
		return []poolstatus.Owner{{}}
	}
	return h
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
