package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/cli"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// runExplain is the explain command.
func runExplain(args []string, stdout, stderr io.Writer) error {
	opts, err := parseExplain(args, stderr)
	if err != nil {
		return err
	}
	return explain(opts, stdout)
}

type explainOptions struct {
	spec      ippool.Spec
	allocated string
	allocate  uint64
	limit     uint64
}

func parseExplain(args []string, stderr io.Writer) (explainOptions, error) {
	var o explainOptions
	var exclude string
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	fs.StringVar(&o.spec.CIDR, "cidr", "", "the pool's spec.range.cidr (required)")
	fs.StringVar(&o.spec.Start, "start", "", "spec.range.start (default: first usable address)")
	fs.StringVar(&o.spec.End, "end", "", "spec.range.end (default: last usable address)")
	fs.StringVar(&exclude, "exclude", "", "comma-separated spec.range.exclude entries")
	fs.StringVar(&o.allocated, "allocated", "", "a status.allocatedOffsets snapshot to decode")
	fs.Uint64Var(&o.allocate, "allocate", 0, "simulate this many allocations")
	fs.Uint64Var(&o.limit, "limit", 64, "print at most this many offsets")
	if _, err := cli.Parse(fs, args, 0, 0); err != nil {
		return o, err
	}
	if o.spec.CIDR == "" {
		return o, fmt.Errorf("%w: --cidr is required", cli.ErrUsage)
	}
	if exclude != "" {
		o.spec.Exclude = strings.Split(exclude, ",")
	}
	return o, nil
}

func explain(o explainOptions, w io.Writer) error {
	r, err := ippool.NewRange(o.spec)
	if err != nil {
		return err
	}
	a := ippool.NewAllocator(r)
	if err := a.Restore(o.allocated); err != nil {
		return fmt.Errorf("--allocated: %w", err)
	}
	var handedOut []string
	for range o.allocate {
		off, err := a.AllocateNext()
		if err != nil {
			return fmt.Errorf("allocation %d: %w", len(handedOut)+1, err)
		}
		ip, _ := r.IP(off)
		handedOut = append(handedOut, fmt.Sprintf("%s (offset %d)", ip, off))
	}
	fmt.Fprintf(w, "range:         %s\n", r)
	fmt.Fprintf(w, "prefix-length: %d\n", r.Prefix().Bits())
	fmt.Fprintf(w, "size:          %d assignable of %s offsets\n", r.Size(), offsetCount(r))
	fmt.Fprintf(w, "allocated:     %d, free %d\n", a.Count(), a.Free())
	if len(handedOut) > 0 {
		fmt.Fprintf(w, "allocations:   %s\n", strings.Join(handedOut, ", "))
		fmt.Fprintf(w, "snapshot:      %q\n", a.Snapshot())
	}
	fmt.Fprintln(w)
	return printOffsets(w, a, o.limit)
}

// offsetCount is Last()+1 as text, since a 2^64 range overflows uint64.
func offsetCount(r *ippool.Range) string {
	if r.Last() == ^uint64(0) {
		return "18446744073709551616"
	}
	return strconv.FormatUint(r.Last()+1, 10)
}

func printOffsets(w io.Writer, a *ippool.Allocator, limit uint64) error {
	r := a.Range()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OFFSET\tIP\tSTATE")
	var off uint64
	for ; off <= r.Last() && off < limit; off++ {
		ip, _ := r.IP(off)
		state := "free"
		switch {
		case r.Excluded(off):
			state = "excluded"
		case a.Has(off):
			state = "allocated"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\n", off, ip, state)
		if off == r.Last() {
			break
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if off < r.Last() {
		_, err := fmt.Fprintf(w, "... %d more offsets; raise --limit to see them\n", r.Last()-off+1)
		return err
	}
	return nil
}
