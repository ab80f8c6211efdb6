package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/nodes"
	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/state"
	"github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/cli"
)

// beatsAtOnce is how many nodes' heartbeats are posted at once.
const beatsAtOnce = 8

// cmdKubelets runs "kubelets --dir DIR": until the cluster's state is
// gone, it posts, every beat, the heartbeat of every simulated node that
// runs. up starts it; it is not meant to be run by hand.
func cmdKubelets(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet(state.KubeletsName, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", ".local", "directory of the cluster")
	if _, err := cli.Parse(fs, args, 0, 0); err != nil {
		return err
	}
	c, err := state.Load(*dir)
	if err != nil {
		return err
	}
	grace, err := c.NodeGrace()
	if err != nil {
		return err
	}
	// Each node's heartbeat is three requests: paced at client-go's
	// default of 5 a second, a hundred nodes' took a minute, longer than
	// their grace period, and Nodes turned NotReady while their machines
	// ran (the handlers' node-readiness probe then rolled applies back).
	k, err := c.UnthrottledClient()
	if err != nil {
		return err
	}
	tick := time.NewTicker(nodes.BeatInterval(grace))
	defer tick.Stop()
	for {
		// Read again each beat: node add, stop, start and remove change it.
		if c, err = state.Load(*dir); err != nil {
			return err
		}
		var g errgroup.Group
		g.SetLimit(beatsAtOnce)
		for _, node := range c.PoweredOn() {
			g.Go(func() error {
				// A request that hangs costs its node this beat, not every
				// node the next.
				ctx, cancel := context.WithTimeout(ctx, grace/2)
				defer cancel()
				if err := nodes.Beat(ctx, k, node, grace); err != nil {
					fmt.Fprintf(stderr, "%s node %s: %v\n", time.Now().Format(time.RFC3339), node, err)
				}
				return nil
			})
		}
		_ = g.Wait()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
