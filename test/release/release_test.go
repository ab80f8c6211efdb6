// Package release checks a release that make release wrote: make
// test-release writes one and runs these tests on it.
package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

var (
	dir      = flag.String("release", "", "the release's directory (dist/release/VERSION)")
	version  = flag.String("version", "", "the release's version")
	registry = flag.String("registry", "", "the registry its images are named in")
)

func release(t *testing.T) string {
	t.Helper()
	if *dir == "" || *version == "" || *registry == "" {
		t.Skip("make test-release runs these on the release it writes (-release, -version, -registry)")
	}
	return *dir
}

// TestChecksums: SHA256SUMS lists every file of the release, and each
// file has its digest.
func TestChecksums(t *testing.T) {
	d := release(t)
	sums, err := os.ReadFile(filepath.Join(d, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(sums)), "\n") {
		sum, file, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS: %q is not 'digest  file'", line)
		}
		listed[file] = sum
	}
	var files []string
	err = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || e.Name() == "SHA256SUMS" {
			return err
		}
		rel, _ := filepath.Rel(d, p)
		files = append(files, rel)
		raw, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(raw)
		if listed[rel] != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: SHA256SUMS says %q, the file's digest is %x", rel, listed[rel], sum)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(listed) {
		t.Errorf("SHA256SUMS lists %d files, the release holds %d: %v", len(listed), len(files), files)
	}
}

// TestInstallsNameTheReleaseImages: every container of every install runs
// an image of this release, from its registry, of its version.
func TestInstallsNameTheReleaseImages(t *testing.T) {
	d := release(t)
	want := regexp.MustCompile("^" + regexp.QuoteMeta(strings.TrimSuffix(*registry, "/")) + "/(handler|pool-controller):" + regexp.QuoteMeta(*version) + "$")
	for _, install := range []string{"default", "companion", "self-allocate"} {
		objs := decode(t, filepath.Join(d, "install-"+install+".yaml"))
		var images []string
		for _, o := range objs {
			for _, path := range [][]string{{"spec", "template", "spec", "containers"}, {"spec", "template", "spec", "initContainers"}} {
				containers, _, _ := unstructured.NestedSlice(o.Object, path...)
				for _, c := range containers {
					image, _ := c.(map[string]any)["image"].(string)
					images = append(images, image)
					if !want.MatchString(image) {
						t.Errorf("install-%s.yaml: %s %s runs %q, not an image of release %s in %s", install, o.GetKind(), o.GetName(), image, *version, *registry)
					}
				}
			}
		}
		if !slices.ContainsFunc(images, func(i string) bool { return strings.Contains(i, "/pool-controller:") }) {
			t.Errorf("install-%s.yaml runs no pool controller: %v", install, images)
		}
	}
}

// TestCRDs: crds.yaml holds every CRD of deploy/crd.
func TestCRDs(t *testing.T) {
	d := release(t)
	var got []string
	for _, o := range decode(t, filepath.Join(d, "crds.yaml")) {
		if o.GetKind() != "CustomResourceDefinition" {
			t.Errorf("crds.yaml holds a %s", o.GetKind())
		}
		got = append(got, o.GetName())
	}
	files, err := filepath.Glob("../../deploy/crd/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		for _, o := range decode(t, f) {
			want = append(want, o.GetName())
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("crds.yaml holds %v, deploy/crd %v", got, want)
	}
}

// TestCompanionCRDs: crds-companion.yaml holds the CRDs of companion mode
// and none of kubernetes-nmstate's, which its operator owns: applying it
// to upgrade replaces nothing of the operator's.
func TestCompanionCRDs(t *testing.T) {
	d := release(t)
	var got []string
	for _, o := range decode(t, filepath.Join(d, "crds-companion.yaml")) {
		if o.GetKind() != "CustomResourceDefinition" {
			t.Errorf("crds-companion.yaml holds a %s", o.GetKind())
		}
		got = append(got, o.GetName())
	}
	slices.Sort(got)
	want := []string{"nodeippools.nmstate.io", "poolednodenetworkconfigurationpolicies.nmstate.io"}
	if !slices.Equal(got, want) {
		t.Errorf("crds-companion.yaml holds %v, want %v", got, want)
	}
}

// TestChart: the chart is of the release's version, and installs its
// images by default.
func TestChart(t *testing.T) {
	d := release(t)
	semver := strings.TrimPrefix(*version, "v")
	files := untar(t, filepath.Join(d, "nmstate-ippool-"+semver+".tgz"), "nmstate-ippool/Chart.yaml", "nmstate-ippool/values.yaml")
	var chart struct{ Version, AppVersion string }
	if err := yaml.Unmarshal(files["nmstate-ippool/Chart.yaml"], &chart); err != nil {
		t.Fatal(err)
	}
	if chart.Version != semver || chart.AppVersion != *version {
		t.Errorf("Chart.yaml: version %q, appVersion %q; want %q and %q", chart.Version, chart.AppVersion, semver, *version)
	}
	var values struct {
		Image struct{ Registry, Tag string }
	}
	if err := yaml.Unmarshal(files["nmstate-ippool/values.yaml"], &values); err != nil {
		t.Fatal(err)
	}
	if values.Image.Registry != *registry || values.Image.Tag != "" {
		t.Errorf("values.yaml: image.registry %q, image.tag %q; want %q and the appVersion (empty)", values.Image.Registry, values.Image.Tag, *registry)
	}
}

// TestBinariesSayTheVersion: the pool controller in the release's image,
// and the kubectl plugin in its archive for this machine, report the
// release's version.
func TestBinariesSayTheVersion(t *testing.T) {
	d := release(t)
	ref := strings.TrimSuffix(*registry, "/") + "/pool-controller:" + *version
	bin := fromImage(t, filepath.Join(d, "images", "pool-controller.tar"), ref, "usr/local/bin/pool-controller")
	runs(t, bin, []string{"--version"}, "pool-controller "+*version+" ")

	archive := filepath.Join(d, "plugin", fmt.Sprintf("kubectl-nodeippool_%s_%s_%s.tar.gz", *version, runtime.GOOS, runtime.GOARCH))
	plugin := extract(t, gunzip(t, archive), "kubectl-nodeippool")
	runs(t, plugin, []string{"version"}, "kubectl-nodeippool "+*version)
}

// fromImage extracts path from the image ref of an image tarball (docker
// save's format: manifest.json and the layers, each a tar, gzipped or
// not), from its top layer down.
func fromImage(t *testing.T, tarball, ref, path string) string {
	t.Helper()
	f, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	files := readTar(t, f, tarball)
	var manifest []struct {
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil {
		t.Fatalf("%s: manifest.json: %v", tarball, err)
	}
	i := slices.IndexFunc(manifest, func(m struct {
		RepoTags []string
		Layers   []string
	}) bool {
		return slices.Contains(m.RepoTags, ref)
	})
	if i < 0 {
		t.Fatalf("%s holds no image named %s: %+v", tarball, ref, manifest)
	}
	layers := manifest[i].Layers
	for j := len(layers) - 1; j >= 0; j-- {
		var r io.Reader = bytes.NewReader(files[layers[j]])
		if gz, err := gzip.NewReader(bytes.NewReader(files[layers[j]])); err == nil {
			r = gz
		}
		if out, ok := extractIf(t, r, path); ok {
			return out
		}
	}
	t.Fatalf("image %s has no %s", ref, path)
	return ""
}

// runs runs bin with args and fails unless its first line starts with
// want.
func runs(t *testing.T, bin string, args []string, want string) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", filepath.Base(bin), args, err, out)
	}
	line, _, _ := bytes.Cut(out, []byte("\n"))
	if !strings.HasPrefix(string(line), want) {
		t.Errorf("%s %v says %q, want it to start with %q", filepath.Base(bin), args, line, want)
	}
}

// extract writes the file path of a tar stream into a temporary
// directory, executable, and returns where.
func extract(t *testing.T, r io.Reader, path string) string {
	t.Helper()
	out, ok := extractIf(t, r, path)
	if !ok {
		t.Fatalf("%s is not in the archive", path)
	}
	return out
}

// extractIf is extract, reporting whether the stream held path.
func extractIf(t *testing.T, r io.Reader, path string) (string, bool) {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", false
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimPrefix(h.Name, "/") != path {
			continue
		}
		out := filepath.Join(t.TempDir(), filepath.Base(path))
		f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, tr); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		return out, true
	}
}

// untar reads the named files of a .tgz.
func untar(t *testing.T, path string, names ...string) map[string][]byte {
	t.Helper()
	all := readTar(t, gunzip(t, path), path)
	out := map[string][]byte{}
	for _, n := range names {
		if out[n] = all[n]; out[n] == nil {
			t.Fatalf("%s holds no %s", path, n)
		}
	}
	return out
}

// gunzip opens a gzipped file for the test.
func gunzip(t *testing.T, path string) io.Reader {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return gz
}

// readTar reads every file of a tar stream, what names in messages.
func readTar(t *testing.T, r io.Reader, what string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if out[h.Name], err = io.ReadAll(tr); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

// decode reads every object of a multi-document YAML file.
func decode(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var o unstructured.Unstructured
		if err := yaml.Unmarshal(doc, &o.Object); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(o.Object) > 0 {
			objs = append(objs, &o)
		}
	}
}
