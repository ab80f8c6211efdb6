package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	eventsv1 "k8s.io/api/events/v1"

	"github.com/nmstate-ippool/nmstate-ippool/internal/allocation/audit"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/cli"
	"github.com/nmstate-ippool/nmstate-ippool/pkg/ippool"
)

// historyRow is one Event of the audit trail about an address.
type historyRow struct {
	Time   time.Time `json:"time"`
	Reason string    `json:"reason"`
	// Object is the holder the Event is on (kind, namespace/name), or the
	// pool for a change no holder is named in.
	Object string `json:"object"`
	Note   string `json:"note"`
}

// runHistory prints the Events of the audit trail about one address,
// oldest first: what happened to it while the API server keeps Events.
func runHistory(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("history", flag.ContinueOnError)
	flags := bindClusterFlags(fs, stderr)
	pos, err := cli.Parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if err := flags.check(); err != nil {
		return err
	}
	ip, err := ippool.ParseAddr(pos[0])
	if err != nil {
		return fmt.Errorf("%w: history: %q is not an IP address", cli.ErrUsage, pos[0])
	}
	k, err := connect(flags.kubeconfig, flags.context)
	if err != nil {
		return err
	}
	var list eventsv1.EventList
	if err := k.List(context.Background(), &list); err != nil {
		return fmt.Errorf("list Events: %w", err)
	}
	rows := historyOf(list.Items, ip.String())
	p := printer{w: stdout, format: flags.output}
	if done, err := p.structured(rows); done {
		return err
	}
	if len(rows) == 0 {
		fmt.Fprintf(stdout, "No Events about %s. Events last an hour by default (the API server's --event-ttl); "+
			"older changes are in the log of the component that made them (the pool controller; a handler with --self-allocate): "+
			"see docs/audit.md.\n", ip)
		return nil
	}
	tw := p.table()
	fmt.Fprintln(tw, "TIME\tREASON\tOBJECT\tNOTE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Time.UTC().Format(time.RFC3339), r.Reason, r.Object, r.Note)
	}
	return tw.Flush()
}

// historyOf returns the audit trail's Events about ip, oldest first.
func historyOf(events []eventsv1.Event, ip string) []historyRow {
	prefix := ip + " of NodeIPPool "
	var rows []historyRow
	for _, e := range events {
		if e.Action != audit.Action || !strings.HasPrefix(e.Note, prefix) {
			continue
		}
		object := e.Regarding.Kind + " " + e.Regarding.Name
		if e.Regarding.Namespace != "" {
			object = e.Regarding.Kind + " " + e.Regarding.Namespace + "/" + e.Regarding.Name
		}
		rows = append(rows, historyRow{Time: eventTime(e), Reason: e.Reason, Object: object, Note: e.Note})
	}
	slices.SortStableFunc(rows, func(a, b historyRow) int { return a.Time.Compare(b.Time) })
	return rows
}

// eventTime is when an Event happened last.
func eventTime(e eventsv1.Event) time.Time {
	switch {
	case e.Series != nil:
		return e.Series.LastObservedTime.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}
