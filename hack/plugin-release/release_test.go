package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/nmstate-ippool/nmstate-ippool/test/envtest"
)

// krewTool returns a binary of hack/krew's module (krew or
// validate-krew-manifest): bin/'s if built, else built for the test.
func krewTool(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(envtest.RepoRoot(), "bin", name)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	bin = filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", bin, "sigs.k8s.io/krew/cmd/"+name)
	cmd.Dir = filepath.Join(envtest.RepoRoot(), "hack", "krew")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	return bin
}

// krewE2E says whether to run the tests that build the plugin for other
// platforms and run krew: make test-krew (CI) sets it. Cold, each
// platform's build takes a minute or more here.
func krewE2E(t *testing.T) {
	t.Helper()
	if os.Getenv("KREW_E2E") == "" {
		t.Skip("set KREW_E2E=1 (make test-krew) to build release archives and run krew")
	}
}

// kubectlShim returns a PATH in which kubectl hands `kubectl krew …` to
// krew, as kubectl does with an installed krew: that is all krew's
// validation calls.
func kubectlShim(t *testing.T, krew string) []string {
	t.Helper()
	dir := t.TempDir()
	shim := "#!/bin/sh\n[ \"$1\" = krew ] || { echo \"kubectl shim: only krew\" >&2; exit 1; }\nshift\nexec " + krew + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "kubectl"), []byte(shim), 0o755); err != nil {
		t.Fatal(err)
	}
	return append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// run runs a command with env and returns its output; a failure fails t.
func run(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\n%s", filepath.Base(name), args, err, b.String())
	}
	return b.String()
}

// TestManifestIsValid: the manifest of a release for every platform passes
// krew's own structural validation: name, version, descriptions, one
// platform per os/arch, digests and URIs.
func TestManifestIsValid(t *testing.T) {
	krewE2E(t)
	dir := t.TempDir()
	r := Release{Version: "v0.0.1-test", Root: envtest.RepoRoot(), Out: dir, BaseURL: "https://example.com/v0.0.1-test"}
	var archives []Archive
	for _, p := range Platforms {
		archives = append(archives, Archive{Platform: p, Path: filepath.Join(dir, p.OS+"_"+p.Arch+".tar.gz"),
			SHA256: strings.Repeat("ab", 32)})
	}
	raw, err := yaml.Marshal(r.Manifest(archives))
	if err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, pluginName+".yaml")
	if err := os.WriteFile(manifest, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, os.Environ(), krewTool(t, "validate-krew-manifest"), "-manifest", manifest, "-skip-install")
}

// TestKrewInstallsTheRelease builds a release for this machine and for
// Windows (the one platform whose binary has another name), serves its
// archives from a local server, has krew's own validation install each,
// then installs it for this machine with krew and runs the installed
// plugin.
func TestKrewInstallsTheRelease(t *testing.T) {
	krewE2E(t)
	out := t.TempDir()
	server := httptest.NewServer(http.FileServer(http.Dir(out)))
	defer server.Close()
	host := Platform{runtime.GOOS, runtime.GOARCH}
	other := Platform{"windows", "amd64"}
	r := Release{Version: "v0.0.1-test", Root: envtest.RepoRoot(), Out: out, BaseURL: server.URL, Platforms: []Platform{host, other}}
	manifest, err := r.Build()
	if err != nil {
		t.Fatal(err)
	}
	krew := krewTool(t, "krew")
	env := kubectlShim(t, krew)
	got := run(t, env, krewTool(t, "validate-krew-manifest"), "-manifest", manifest)
	if !strings.Contains(got, "all 2 spec.platforms installed fine") {
		t.Fatalf("validate-krew-manifest did not install every platform:\n%s", got)
	}

	root := t.TempDir()
	env = append(env, "KREW_ROOT="+root)
	run(t, env, krew, "install", "--manifest", manifest)
	explained := run(t, env, filepath.Join(root, "bin", "kubectl-nodeippool"), "explain", "--cidr", "10.0.0.0/30")
	if !strings.Contains(explained, "10.0.0.1") {
		t.Fatalf("the installed plugin did not explain a range:\n%s", explained)
	}
}

// TestArchivesAreReproducible: the same source gives the same archive,
// so a manifest's digests can be checked against a rebuild.
func TestArchivesAreReproducible(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "kubectl-nodeippool")
	if err := os.WriteFile(src, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"kubectl-nodeippool": src, "LICENSE": filepath.Join(envtest.RepoRoot(), "LICENSE")}
	a, err := writeArchive(filepath.Join(dir, "a.tar.gz"), files)
	if err != nil {
		t.Fatal(err)
	}
	b, err := writeArchive(filepath.Join(dir, "b.tar.gz"), files)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatalf("two archives of the same files differ: %s, %s", a, b)
	}
}

// TestVersionRefused: krew needs a semantic version with a leading v.
func TestVersionRefused(t *testing.T) {
	for _, v := range []string{"", "0.1.0", "v1", "v1.2", "latest"} {
		_, err := Release{Version: v, Root: envtest.RepoRoot(), Out: t.TempDir(), BaseURL: "http://x"}.Build()
		if err == nil || !strings.Contains(err.Error(), "semantic version") {
			t.Errorf("version %q: %v, want a refusal naming the form", v, err)
		}
	}
}
