package capture

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// Literal returns the desired state template with every reference to the
// ippool captures of allocated (by capture name) replaced by its value,
// and every other reference left as it is, for a handler that resolves
// ordinary captures but knows no pools (kubernetes-nmstate's). A value
// that is one reference and nothing else takes the field's type
// (prefix-length a number, dns-servers a list); a reference inside a
// longer string is written as text. A reference to a field the address
// lacks (a gateway of a pool without one) is an error wrapping
// ErrTemplate that names it. The result is YAML.
func Literal(desiredState []byte, allocated map[string]Address) ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(desiredState, &doc); err != nil {
		return nil, fmt.Errorf("parse the desired state: %w", err)
	}
	states := map[string]any{}
	for name, a := range allocated {
		var s any
		_ = json.Unmarshal(a.State(), &s) // State is JSON
		states[name] = s
	}
	var errs []error
	out := literal(doc, states, &errs)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if out == nil {
		return []byte{}, nil
	}
	return yaml.Marshal(out)
}

func literal(v any, states map[string]any, errs *[]error) any {
	switch v := v.(type) {
	case string:
		return literalString(v, states, errs)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = literal(e, states, errs)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for _, k := range slices.Sorted(maps.Keys(v)) {
			out[k] = literal(v[k], states, errs)
		}
		return out
	}
	return v
}

// literalString resolves the references of one string value.
func literalString(s string, states map[string]any, errs *[]error) any {
	matches := reference.FindAllStringSubmatchIndex(s, -1)
	if len(matches) == 1 && matches[0][0] == 0 && matches[0][1] == len(s) {
		m := matches[0]
		name, path := s[m[2]:m[3]], strings.TrimPrefix(s[m[4]:m[5]], ".")
		if _, ok := states[name]; ok {
			v, err := step(states[name], name, path)
			if err != nil {
				*errs = append(*errs, err)
				return s
			}
			return v
		}
		return s
	}
	var b strings.Builder
	last := 0
	for _, m := range matches {
		name, path := s[m[2]:m[3]], strings.TrimPrefix(s[m[4]:m[5]], ".")
		if _, ok := states[name]; !ok {
			continue
		}
		v, err := step(states[name], name, path)
		if err != nil {
			*errs = append(*errs, err)
			continue
		}
		b.WriteString(s[last:m[0]])
		switch v := v.(type) {
		case string:
			b.WriteString(v)
		case float64:
			b.WriteString(strconv.FormatFloat(v, 'f', -1, 64))
		default:
			*errs = append(*errs, fmt.Errorf("%w: %s is a list, which cannot be written inside the text %q: make the reference the whole value",
				ErrTemplate, s[m[0]:m[1]], s))
			b.WriteString(s[m[0]:m[1]])
		}
		last = m[1]
	}
	b.WriteString(s[last:])
	return b.String()
}

// step follows path (dot-separated keys and list indices) into a captured
// state.
func step(v any, name, path string) (any, error) {
	if path == "" {
		return v, nil
	}
	for _, key := range strings.Split(path, ".") {
		switch c := v.(type) {
		case map[string]any:
			next, ok := c[key]
			if !ok {
				return nil, fmt.Errorf("%w: the template reads {{ capture.%s.%s }}, but the address has no %q: an ippool capture gives %s",
					ErrTemplate, name, path, key, strings.Join(fields, ", "))
			}
			v = next
		case []any:
			i, err := strconv.Atoi(key)
			if err != nil || i < 0 || i >= len(c) {
				return nil, fmt.Errorf("%w: the template reads {{ capture.%s.%s }}, but %q is not an index of its %d entries",
					ErrTemplate, name, path, key, len(c))
			}
			v = c[i]
		default:
			return nil, fmt.Errorf("%w: the template reads {{ capture.%s.%s }}, which goes past a single value at %q",
				ErrTemplate, name, path, key)
		}
	}
	return v, nil
}

// Plain returns the captures of c that are no ippool capture, for a
// handler that resolves them on the node. An ordinary capture whose
// expression reads an ippool capture cannot be resolved there, and is an
// error naming both.
func (c Captures) Plain() (map[string]string, error) {
	ippool := map[string]bool{}
	for _, r := range c.Refs {
		ippool[r.Capture] = true
	}
	out := map[string]string{}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(c.All)) {
		if ippool[name] {
			continue
		}
		expr := c.All[name]
		for _, r := range c.Refs {
			if readsCapture(expr, r.Capture) {
				errs = append(errs, fmt.Errorf("%w: capture %q (%s) reads the ippool capture %q, which only the pool controller resolves: "+
					"read the address in the desired state instead", ErrTemplate, name, expr, r.Capture))
			}
		}
		out[name] = expr
	}
	if len(out) == 0 {
		out = nil
	}
	return out, errors.Join(errs...)
}

// readsCapture reports whether an nmpolicy expression reads
// capture.<name>.
func readsCapture(expr, name string) bool {
	needle := "capture." + name
	for i := strings.Index(expr, needle); i >= 0; {
		end := i + len(needle)
		if end == len(expr) || expr[end] == '.' || expr[end] == ' ' {
			return true
		}
		j := strings.Index(expr[end:], needle)
		if j < 0 {
			break
		}
		i = end + j
	}
	return false
}
