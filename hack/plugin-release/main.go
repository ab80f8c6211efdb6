// Command plugin-release builds the release archives of the kubectl plugin
// (kubectl-nodeippool) for every platform krew installs it on, and the
// krew manifest that points at them:
//
//	go run ./hack/plugin-release --version v0.1.0 --out dist/plugin
//
// writes dist/plugin/kubectl-nodeippool_v0.1.0_<os>_<arch>.tar.gz (the
// binary and LICENSE, byte for byte the same for the same source) and
// dist/plugin/nodeippool.yaml, whose URIs name --base-url (by default the
// project's GitHub release of that version) and whose digests are the
// archives'. Upload the archives there and submit the manifest to
// krew-index, or install it directly:
//
//	kubectl krew install --manifest dist/plugin/nodeippool.yaml
//
// make plugin-release runs it; its test validates the manifest with krew's
// own validation and installs every platform from a local server.
package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Platform is one os/arch krew installs the plugin on.
type Platform struct{ OS, Arch string }

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// binary is the plugin's executable on p.
func (p Platform) binary() string {
	if p.OS == "windows" {
		return pluginBinary + ".exe"
	}
	return pluginBinary
}

// Platforms are those a release covers: where kubectl runs for admins.
var Platforms = []Platform{
	{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}, {"windows", "amd64"},
}

const (
	pluginBinary = "kubectl-nodeippool"
	// pluginName is the plugin's name in krew: kubectl krew install
	// nodeippool.
	pluginName = "nodeippool"
	homepage   = "https://github.com/nmstate-ippool/nmstate-ippool"
)

// versionVar is the variable the binaries' version is linked into.
const versionVar = "github.com/nmstate-ippool/nmstate-ippool/internal/plumbing/version.version"

// version is a release's version as krew requires it: semantic, with v.
var version = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?$`)

// Release says what to build and where.
type Release struct {
	// Version is the release's version (v1.2.3).
	Version string
	// Root is the repository's root: the plugin's source and LICENSE.
	Root string
	// Out is the directory the archives and the manifest are written to.
	Out string
	// BaseURL is where the archives will be downloaded from.
	BaseURL string
	// Platforms are those built; nil builds every one of Platforms.
	Platforms []Platform
}

// Archive is one platform's archive, as written.
type Archive struct {
	Platform Platform
	Path     string
	SHA256   string
}

func main() {
	r := Release{}
	flag.StringVar(&r.Version, "version", "", "the release's version, v-prefixed semantic version (v0.1.0)")
	flag.StringVar(&r.Out, "out", "dist/plugin", "directory to write the archives and the manifest to")
	flag.StringVar(&r.BaseURL, "base-url", "", "where the archives are downloaded from (default: the project's GitHub release of --version)")
	flag.StringVar(&r.Root, "root", ".", "the repository's root")
	flag.Parse()
	if r.BaseURL == "" {
		r.BaseURL = homepage + "/releases/download/" + r.Version
	}
	manifest, err := r.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "plugin-release:", err)
		os.Exit(1)
	}
	fmt.Println("wrote", manifest)
}

// Build writes every platform's archive and the manifest, and returns the
// manifest's path.
func (r Release) Build() (string, error) {
	if !version.MatchString(r.Version) {
		return "", fmt.Errorf("--version %q: krew needs a semantic version with a leading v, such as v0.1.0", r.Version)
	}
	if r.BaseURL == "" {
		return "", errors.New("--base-url: empty")
	}
	if err := os.MkdirAll(r.Out, 0o755); err != nil {
		return "", err
	}
	platforms := r.Platforms
	if platforms == nil {
		platforms = Platforms
	}
	archives := make([]Archive, 0, len(platforms))
	for _, p := range platforms {
		a, err := r.archive(p)
		if err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
		archives = append(archives, a)
	}
	raw, err := yaml.Marshal(r.Manifest(archives))
	if err != nil {
		return "", err
	}
	path := filepath.Join(r.Out, pluginName+".yaml")
	return path, os.WriteFile(path, raw, 0o644)
}

// archive builds the plugin for p and writes its archive.
func (r Release) archive(p Platform) (Archive, error) {
	tmp, err := os.MkdirTemp("", "plugin-release-")
	if err != nil {
		return Archive{}, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	bin := filepath.Join(tmp, p.binary())
	// No VCS stamp: the same source builds the same binary in a clone
	// with or without local changes to other files.
	// The release's version is linked in (kubectl nodeippool version).
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w -X "+versionVar+"="+r.Version,
		"-o", bin, "./cmd/kubectl-nodeippool")
	cmd.Dir = r.Root
	cmd.Env = append(os.Environ(), "GOOS="+p.OS, "GOARCH="+p.Arch, "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return Archive{}, fmt.Errorf("go build: %w\n%s", err, out)
	}
	path := filepath.Join(r.Out, fmt.Sprintf("%s_%s_%s_%s.tar.gz", pluginBinary, r.Version, p.OS, p.Arch))
	sum, err := writeArchive(path, map[string]string{
		p.binary(): bin,
		"LICENSE":  filepath.Join(r.Root, "LICENSE"),
	})
	if err != nil {
		return Archive{}, err
	}
	return Archive{Platform: p, Path: path, SHA256: sum}, nil
}

// writeArchive writes a gzipped tar of files (name in the archive → path
// on disk), in name order, with fixed times and owners so that the same
// files give the same bytes, and returns its SHA-256.
func writeArchive(path string, files map[string]string) (string, error) {
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	gz := gzip.NewWriter(io.MultiWriter(f, h))
	tw := tar.NewWriter(gz)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := addFile(tw, n, files[n]); err != nil {
			_ = f.Close()
			return "", err
		}
	}
	if err := errors.Join(tw.Close(), gz.Close(), f.Close()); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func addFile(tw *tar.Writer, name, path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	mode := int64(0o644)
	if strings.HasPrefix(name, pluginBinary) {
		mode = 0o755
	}
	hdr := &tar.Header{Name: name, Mode: mode, Size: int64(len(raw)), ModTime: time.Unix(0, 0).UTC(), Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err = tw.Write(raw)
	return err
}

// Manifest is the krew plugin manifest of archives.
func (r Release) Manifest(archives []Archive) map[string]any {
	platforms := make([]map[string]any, 0, len(archives))
	for _, a := range archives {
		platforms = append(platforms, map[string]any{
			"selector": map[string]any{"matchLabels": map[string]string{"os": a.Platform.OS, "arch": a.Platform.Arch}},
			"uri":      strings.TrimSuffix(r.BaseURL, "/") + "/" + filepath.Base(a.Path),
			"sha256":   a.SHA256,
			"bin":      a.Platform.binary(),
		})
	}
	return map[string]any{
		"apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
		"kind":       "Plugin",
		"metadata":   map[string]any{"name": pluginName},
		"spec": map[string]any{
			"version":          r.Version,
			"homepage":         homepage,
			"shortDescription": "Show, check and plan nmstate-ippool's NodeIPPools",
			"description": "Explains the NodeIPPools of nmstate-ippool, which give each node's secondary NICs\n" +
				"a cluster-unique static address: which node, interface and policy holds every\n" +
				"address of a pool (show), whether a pool's status and its holders agree (check),\n" +
				"who would keep, move or lose an address under a proposed pool or pooled policy\n" +
				"(plan), and how a range maps offsets to addresses, offline (explain, decode).\n" +
				"It changes nothing in the cluster.\n",
			"caveats": "It reads NodeIPPools, enactments, policies, pooled policies and Cluster API\n" +
				"IPAddresses with your kubeconfig's credentials, which need get and list on them.\n",
			"platforms": platforms,
		},
	}
}
