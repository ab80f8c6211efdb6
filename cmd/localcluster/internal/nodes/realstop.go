package nodes

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nmstate-ippool/nmstate-ippool/cmd/localcluster/internal/process"
)

// killContainers kills every container of a node's containerd and deletes
// its task, so that no pod outlives its node, and removes the network
// namespaces of its pod sandboxes, which containerd would have removed on
// a sandbox's stop.
func (c *cluster) killContainers(node string) {
	out, err := exec.Command("ctr", "--address", c.containerdSocket(node), "--namespace", "k8s.io", "tasks", "ls", "-q").Output()
	if err != nil {
		return
	}
	ids := strings.Fields(string(out))
	var sandboxNetns []string
	for _, id := range ids {
		sandboxNetns = append(sandboxNetns, c.podNetns(node, id)...)
		_ = c.ctr(node, "tasks", "kill", "--all", "--signal", "SIGKILL", id)
	}
	for _, id := range ids {
		process.WaitFor(5*time.Second, func() bool { return c.ctr(node, "tasks", "delete", id) == nil })
	}
	for _, ns := range sandboxNetns {
		if err := syscall.Unmount(ns, syscall.MNT_DETACH); err == nil {
			_ = os.Remove(ns)
		}
	}
}

// podNetns returns the network namespace a container joins if it is a
// file of /run/netns: a pod sandbox's.
func (c *cluster) podNetns(node, id string) []string {
	out, err := exec.Command("ctr", "--address", c.containerdSocket(node), "--namespace", "k8s.io", "containers", "info", id).Output()
	if err != nil {
		return nil
	}
	var info struct {
		Spec struct {
			Linux struct {
				Namespaces []struct {
					Type string `json:"type"`
					Path string `json:"path"`
				} `json:"namespaces"`
			} `json:"linux"`
		} `json:"Spec"`
	}
	if json.Unmarshal(out, &info) != nil {
		return nil
	}
	var paths []string
	for _, ns := range info.Spec.Linux.Namespaces {
		if ns.Type == "network" && (strings.HasPrefix(ns.Path, "/run/netns/") || strings.HasPrefix(ns.Path, "/var/run/netns/")) {
			paths = append(paths, ns.Path)
		}
	}
	return paths
}

// killShims kills the containerd shims of a containerd socket: they
// outlive containerd.
func killShims(socket string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		args := strings.Split(string(raw), "\x00")
		if len(args) == 0 || !strings.Contains(filepath.Base(args[0]), "containerd-shim") || !slices.Contains(args, socket) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(f, "/proc/%d/cmdline", &pid); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// UnmountUnder unmounts every mount below dir, deepest first: the
// kubelet's volumes and containerd's root filesystems.
func UnmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	var mounts []string
	scan := bufio.NewScanner(f)
	scan.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for scan.Scan() {
		fields := strings.Fields(scan.Text())
		if len(fields) < 5 {
			continue
		}
		point := strings.ReplaceAll(fields[4], `\040`, " ")
		if point == dir || strings.HasPrefix(point, dir+"/") {
			mounts = append(mounts, point)
		}
	}
	slices.SortFunc(mounts, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}
