package envtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Suite is what a test package shares: a control plane, a client of it, and
// the project's commands built for it.
type Suite struct {
	Env    *Env
	Client client.Client
	// Bin holds the commands Run built.
	Bin string
}

// Command returns the path of a built command.
func (s *Suite) Command(name string) string { return filepath.Join(s.Bin, name) }

// Runner runs a package's tests: *testing.M, or a wrapper that also stops
// what setup started before the control plane goes.
type Runner interface{ Run() int }

// Run is a TestMain: it sends the controllers' logs to $TEST_LOG (or
// discards them), builds commands, starts the control plane, hands the
// suite to setup, runs the tests and tears everything down. It returns the
// exit code.
func Run(m Runner, setup func(*Suite), commands ...string) int {
	return RunWith(m, nil, setup, commands...)
}

// RunWith is Run with the control plane started with opts.
func RunWith(m Runner, opts []Option, setup func(*Suite), commands ...string) int {
	s, cleanup, err := setUp(opts, commands)
	defer cleanup()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	setup(s)
	return m.Run()
}

func setUp(opts []Option, commands []string) (*Suite, func(), error) {
	var undo []func()
	cleanup := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	if path := os.Getenv("TEST_LOG"); path == "" {
		ctrl.SetLogger(logr.Discard())
	} else {
		f, err := os.Create(path)
		if err != nil {
			return nil, cleanup, err
		}
		undo = append(undo, func() { _ = f.Close() })
		ctrl.SetLogger(zap.New(zap.WriteTo(f)))
	}
	dir, err := os.MkdirTemp("", "nmstate-ippool-test-")
	if err != nil {
		return nil, cleanup, err
	}
	undo = append(undo, func() { _ = os.RemoveAll(dir) })
	if err := BuildCommands(dir, commands...); err != nil {
		return nil, cleanup, err
	}
	env, err := Start(opts...)
	if err != nil {
		return nil, cleanup, err
	}
	undo = append(undo, func() { _ = env.Stop() })
	c, err := client.New(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		return nil, cleanup, errors.Join(errors.New("create a client of the control plane"), err)
	}
	return &Suite{Env: env, Client: c, Bin: dir}, cleanup, nil
}
