package envtest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Writers records which field manager set which part of the objects of
// one kind, as the API server's managedFields say, for a test that keeps
// a table "who writes what" of docs/protocol.md true: the API server, not
// the code under test, says who wrote what. It sees what is set, not what
// is removed (an annotation or a finalizer taken off leaves no owner).
type Writers struct {
	watch interface{ Stop() }
	done  chan struct{}
	mu    sync.Mutex
	seen  map[string]map[string]bool // part -> field managers
	errs  []string
	// stopped: Stop closed the watch; before, its end is an error.
	stopped bool
}

// WatchWriters starts watching the objects of list's kind. keep picks the
// test's own objects (another test may write its objects by hand); the
// fields named in split (a status field, "slot") are parts field by
// field, and those of a map named with "[*]" ("ippool[*]") are parts by
// the fields of its entries ("status.ippool[*].releasing").
func WatchWriters(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, list client.ObjectList,
	keep func(metav1.Object) bool, split ...string) (*Writers, error) {
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	w, err := wc.Watch(ctx, list)
	if err != nil {
		return nil, err
	}
	ws := &Writers{watch: w, done: make(chan struct{}), seen: map[string]map[string]bool{}}
	go func() {
		defer close(ws.done)
		for ev := range w.ResultChan() {
			ws.note(ev, keep, split)
		}
		ws.mu.Lock()
		defer ws.mu.Unlock()
		if !ws.stopped {
			ws.errs = append(ws.errs, "the watch closed before the test stopped it: what it saw is partial")
		}
	}()
	return ws, nil
}

// note records the parts one watch event's object shows set, and by whom.
func (ws *Writers) note(ev watch.Event, keep func(metav1.Object) bool, split []string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.stopped {
		return // the end of the stream Stop asked for
	}
	if ev.Type == watch.Error {
		ws.errs = append(ws.errs, fmt.Sprintf("watch error: %v", ev.Object))
		return
	}
	o, ok := ev.Object.(metav1.Object)
	if !ok || !keep(o) {
		return
	}
	values, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ev.Object)
	if err != nil {
		ws.errs = append(ws.errs, err.Error())
		return
	}
	for _, mf := range o.GetManagedFields() {
		parts, err := PartsOf(mf, values, split...)
		if err != nil {
			ws.errs = append(ws.errs, err.Error())
		}
		for _, part := range parts {
			if ws.seen[part] == nil {
				ws.seen[part] = map[string]bool{}
			}
			ws.seen[part][mf.Manager] = true
		}
	}
}

// Stop ends the watch and returns, by part, the field managers that set
// it, and what went wrong: managedFields it could not read, a watch error
// or a watch closed early.
func (ws *Writers) Stop() (map[string]map[string]bool, []string) {
	ws.mu.Lock()
	ws.stopped = true
	ws.mu.Unlock()
	ws.watch.Stop()
	<-ws.done
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.seen, ws.errs
}

// projectKey says whether a label, annotation or finalizer is one the
// tables name: this project's, kubernetes-nmstate's and Cluster API's.
func projectKey(key string) bool {
	return strings.Contains(key, "nmstate.io/") || strings.Contains(key, "cluster.x-k8s.io/")
}

// PartsOf returns the parts of an object that a managedFields entry owns,
// named as the tables name them: "spec" when it sets any of it, each
// status field that holds a value ("status.conditions"; a field in split
// by its own fields, "status.slot.granted"; a map in split as "ippool[*]"
// by its entries' fields, "status.ippool[*].allocated"), and "annotation K", "label K"
// and "finalizer K" of the keys projectKey names. values is the object
// (runtime.DefaultUnstructuredConverter): in managedFields a value and an
// empty object look alike ({}), and an empty object sets nothing (an empty
// struct that Go serializes, such as desiredStateMetaInfo, which every
// full status update sends).
func PartsOf(mf metav1.ManagedFieldsEntry, values map[string]any, split ...string) ([]string, error) {
	if mf.FieldsV1 == nil {
		return nil, nil
	}
	var fields map[string]map[string]json.RawMessage
	if err := json.Unmarshal(mf.FieldsV1.Raw, &fields); err != nil {
		return nil, fmt.Errorf("managedFields of %s: %w", mf.Manager, err)
	}
	var out []string
	if len(setFields(fields["f:spec"], values, "spec")) > 0 {
		out = append(out, "spec")
	}
	for _, name := range setFields(fields["f:status"], values, "status") {
		var sub map[string]json.RawMessage
		_ = json.Unmarshal(fields["f:status"]["f:"+name], &sub)
		switch {
		case slices.Contains(split, name):
			for _, half := range setFields(sub, values, "status", name) {
				out = append(out, "status."+name+"."+half)
			}
		case slices.Contains(split, name+"[*]"):
			out = append(out, entryFields(sub, values, name)...)
		default:
			out = append(out, "status."+name)
		}
	}
	metadata := fields["f:metadata"]
	for _, kind := range []string{"annotations", "labels", "finalizers"} {
		var keys map[string]json.RawMessage
		_ = json.Unmarshal(metadata["f:"+kind], &keys)
		for key := range keys {
			name := strings.Trim(strings.TrimPrefix(strings.TrimPrefix(key, "f:"), "v:"), `"`)
			if projectKey(name) {
				out = append(out, strings.TrimSuffix(kind, "s")+" "+name)
			}
		}
	}
	return out, nil
}

// entryFields names the fields that a managedFields object sets in the
// entries of the status map name, whatever their keys:
// "status.ippool[*].releasing".
func entryFields(entries map[string]json.RawMessage, values map[string]any, name string) []string {
	var out []string
	for key, raw := range entries {
		if key == "." {
			continue
		}
		var sub map[string]json.RawMessage
		_ = json.Unmarshal(raw, &sub)
		for _, field := range setFields(sub, values, "status", name, strings.TrimPrefix(key, "f:")) {
			if part := "status." + name + "[*]." + field; !slices.Contains(out, part) {
				out = append(out, part)
			}
		}
	}
	return out
}

// setFields names the fields of a managedFields object (at path in values)
// that hold a value: a leaf ({}), or an object that sets a field; an
// object that values shows empty sets nothing.
func setFields(fields map[string]json.RawMessage, values map[string]any, path ...string) []string {
	var out []string
	for key := range fields {
		if key == "." {
			continue
		}
		name := strings.TrimPrefix(key, "f:")
		if v, _, _ := unstructured.NestedFieldNoCopy(values, append(slices.Clone(path), name)...); empty(v) {
			continue
		}
		out = append(out, name)
	}
	return out
}

// empty reports whether a value sets nothing: null, an empty list, or an
// object whose fields set nothing (an empty struct serializes as one,
// with its zero times as null).
func empty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case []any:
		return len(x) == 0
	case map[string]any:
		for _, f := range x {
			if !empty(f) {
				return false
			}
		}
		return true
	}
	return false
}

// removal matches a clause of a table cell that says who removes or
// clears a part: the test sees what is set, so such a writer is not one
// that may set it.
var removal = regexp.MustCompile(`[^;,.]*\b(removes?|removing|empties|emptying|clears?|clearing)\b[^;,.]*`)

// WritersTable reads the table of docs/protocol.md whose first column is
// headed header: by part (each name ticked in the first column, after
// "annotation", "label" or "finalizer" when the cell starts with it),
// which of writers the other columns name as setting it (a clause that
// says who removes or clears it names no writer).
func WritersTable(header string, writers ...string) (map[string]map[string]bool, error) {
	raw, err := os.ReadFile(filepath.Join(RepoRoot(), "docs", "protocol.md"))
	if err != nil {
		return nil, err
	}
	_, table, ok := strings.Cut(string(raw), "\n| "+header+" |")
	if !ok {
		return nil, fmt.Errorf("docs/protocol.md has no table headed %q", header)
	}
	ticked := regexp.MustCompile("`([^`]+)`")
	out := map[string]map[string]bool{}
	for _, line := range strings.Split(table, "\n")[1:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) < 2 || strings.HasPrefix(cells[0], "---") {
			continue
		}
		text := removal.ReplaceAllString(strings.ToLower(strings.Join(cells[1:], "; ")), "")
		for _, m := range ticked.FindAllStringSubmatch(cells[0], -1) {
			part := m[1]
			for _, kind := range []string{"annotation", "label", "finalizer"} {
				if strings.HasPrefix(cells[0], kind) {
					part = kind + " " + part
				}
			}
			if out[part] == nil {
				out[part] = map[string]bool{}
			}
			for _, w := range writers {
				out[part][w] = out[part][w] || strings.Contains(text, w)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the table headed %q in docs/protocol.md names no part", header)
	}
	return out, nil
}

// Check stops the watch and compares what it saw of kind with the table
// of docs/protocol.md headed header, whose writers are writers (writerOf
// names the writer of a field manager): one message per problem (a table
// that cannot be read, a watch that failed or saw nothing, what
// CheckWriters finds). It returns what was seen too.
func (ws *Writers) Check(kind, header string, writers []string, writerOf func(manager string) string) (map[string]map[string]bool, []string) {
	seen, problems := ws.Stop()
	table, err := WritersTable(header, writers...)
	if err != nil {
		return seen, append(problems, err.Error())
	}
	if len(seen) == 0 {
		problems = append(problems, "the watch of "+kind+" saw no writes")
	}
	return seen, append(problems, CheckWriters(kind, seen, table, writerOf)...)
}

// CheckWriters compares what was seen with a table: one message for each
// part of a kind that a writer set while the table does not name the part,
// or names it without that writer. writerOf names the writer of a field
// manager as the table does.
func CheckWriters(kind string, seen, table map[string]map[string]bool, writerOf func(manager string) string) []string {
	var out []string
	for _, part := range slices.Sorted(maps.Keys(seen)) {
		allowed, named := table[part]
		for _, m := range slices.Sorted(maps.Keys(seen[part])) {
			switch {
			case !named:
				out = append(out, fmt.Sprintf("%s writes %s of a %s, a part the table of docs/protocol.md does not name", m, part, kind))
			case !allowed[writerOf(m)]:
				out = append(out, fmt.Sprintf("%s (%s) writes %s of a %s; the table of docs/protocol.md does not name it as its writer", m, writerOf(m), part, kind))
			}
		}
	}
	return out
}
