package envtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// EarlierVersion is the version the upgrade tests upgrade from, on
// simulated nodes (test/upgrade) and on real kubelets (test/realnodes):
// the last commit before a pool's entries named their holder in holder
// (they named the enactment only), so that an upgrade carries state an
// earlier version wrote in an earlier shape. Move it forward when an API
// change needs its own test; an API change that has no additive path or
// conversion fails there.
const EarlierVersion = "d04e52ece210a0f63c0575e9094193aed6a87eb4"

// BuildAt checks out commit into tree, a detached worktree of this
// repository, and builds the commands it names (handler, pool-controller)
// into bin; static builds them without cgo, for an image with no libc.
// The returned function removes the worktree.
func BuildAt(commit, tree, bin string, static bool, commands ...string) (remove func(), err error) {
	root := RepoRoot()
	remove = func() {
		_, _ = exec.Command("git", "-C", root, "worktree", "remove", "--force", tree).CombinedOutput()
		_, _ = exec.Command("git", "-C", root, "worktree", "prune").CombinedOutput() // the tree removed with its parent
	}
	if err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		return func() {}, fmt.Errorf("commit %s, the version upgraded from, is not in this clone (a shallow clone? git fetch --unshallow): %w", commit, err)
	}
	if out, err := exec.Command("git", "-C", root, "worktree", "add", "--detach", tree, commit).CombinedOutput(); err != nil {
		return func() {}, fmt.Errorf("git worktree add %s %s: %w\n%s", tree, commit, err, out)
	}
	args := []string{"build", "-o", bin + "/"}
	if static {
		args = append(args, "-trimpath")
	}
	for _, c := range commands {
		args = append(args, "./cmd/"+c)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = tree
	if static {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return remove, fmt.Errorf("go %s in %s: %w\n%s", strings.Join(args, " "), filepath.Base(tree), err, out)
	}
	return remove, nil
}
