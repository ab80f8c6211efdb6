package process

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// sleeperEnv makes the test binary a process that sleeps, a child for
// TestProcessIdentity that needs nothing from the machine.
const sleeperEnv = "LOCALCLUSTER_TEST_SLEEPER"

func TestMain(m *testing.M) {
	if os.Getenv(sleeperEnv) != "" {
		time.Sleep(time.Minute)
		return
	}
	os.Exit(m.Run())
}

// TestProcessIdentity: a process is alive only while its PID runs its
// binary, so that stopping a cluster can never signal a stranger that
// reused a PID; stop ends it.
func TestProcessIdentity(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The child is this test binary, which only sleeps (see TestMain).
	p := &Process{Binary: self, Env: []string{sleeperEnv + "=1"}, Log: filepath.Join(t.TempDir(), "sleep.log")}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(p.PID, syscall.SIGKILL) })
	if !p.Alive() {
		t.Fatal("the process it started is not alive")
	}
	stranger := &Process{PID: p.PID, Binary: "/bin/true"}
	if stranger.Alive() {
		t.Error("a PID running another binary counts as alive")
	}
	if err := stranger.Stop(syscall.SIGKILL, time.Second); err != nil || !p.Alive() {
		t.Errorf("stopping a stranger's PID touched it: %v, alive %v", err, p.Alive())
	}
	if err := p.Stop(syscall.SIGTERM, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if p.Alive() {
		t.Error("still alive after stop")
	}
}

// TestFreePortsAreDistinct: the ports handed out are never handed out
// again, even when nothing has bound them yet (etcd's client and peer
// ports were once the same).
func TestFreePortsAreDistinct(t *testing.T) {
	seen := map[int]bool{}
	for range 300 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
	}
}
