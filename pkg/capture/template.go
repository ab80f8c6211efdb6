package capture

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// ErrTemplate is wrapped by every error about a desired state template
// that can never render, whatever node it is rendered on: a reference to a
// capture the policy does not define, or to a field an ippool capture does
// not give.
var ErrTemplate = errors.New("the desired state cannot be rendered")

// The fields of an ippool capture's state (Address.State). The optional
// ones are there only when the pool sets them.
const (
	FieldIP           = "ip"
	FieldPrefixLength = "prefix-length"
	FieldGateway      = "gateway"
	FieldDNSServers   = "dns-servers"
	FieldDNSSearch    = "dns-search"
)

// fields are every field of an ippool capture, in the order messages list
// them.
var fields = []string{FieldIP, FieldPrefixLength, FieldGateway, FieldDNSServers, FieldDNSSearch}

// Use is one reference of a desired state template to a capture:
// {{ capture.<Capture>.<Path> }}.
type Use struct {
	Capture string
	// Path is what follows the capture's name, "" for the whole capture.
	Path string
	// Interface is the name of the entry of interfaces the reference is
	// in, "" when it is in none (routes, dns-resolver) or the entry has no
	// literal name.
	Interface string
}

// Field returns the first step of the use's path: for an ippool capture,
// the field it reads.
func (u Use) Field() string {
	f, _, _ := strings.Cut(u.Path, ".")
	return f
}

// Expression returns the use as the template writes it.
func (u Use) Expression() string {
	if u.Path == "" {
		return "{{ capture." + u.Capture + " }}"
	}
	return "{{ capture." + u.Capture + "." + u.Path + " }}"
}

// reference matches a capture reference in a template value, the way
// nmpolicy writes them: {{ capture.<name>[.<path>] }}.
var reference = regexp.MustCompile(`\{\{\s*capture\.([^.\s}]+)((?:\.[^\s}]+)?)\s*\}\}`)

// Uses returns every capture reference of a desired state template (YAML
// or JSON), in a stable order: lists in order, the keys of a mapping
// sorted. A template that does not parse has none.
func Uses(desiredState []byte) []Use {
	var doc any
	if err := yaml.Unmarshal(desiredState, &doc); err != nil {
		return nil
	}
	var out []Use
	walk(doc, "", &out)
	return out
}

// walk collects the references in v, inside the interface entry iface.
func walk(v any, iface string, out *[]Use) {
	switch v := v.(type) {
	case string:
		for _, m := range reference.FindAllStringSubmatch(v, -1) {
			*out = append(*out, Use{Capture: m[1], Path: strings.TrimPrefix(m[2], "."), Interface: iface})
		}
	case []any:
		for _, e := range v {
			walk(e, iface, out)
		}
	case map[string]any:
		if list, ok := v["interfaces"].([]any); ok {
			for _, e := range list {
				name := ""
				if m, ok := e.(map[string]any); ok {
					name, _ = m["name"].(string)
					if reference.MatchString(name) {
						name = ""
					}
				}
				walk(e, name, out)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if k != "interfaces" {
				walk(v[k], iface, out)
			}
		}
	}
}

// Interfaces returns the interfaces on which the template puts the address
// of the capture (the entries whose addresses read its ip), sorted.
func Interfaces(desiredState []byte, captureName string) []string {
	var out []string
	for _, u := range Uses(desiredState) {
		if u.Capture == captureName && u.Field() == FieldIP && u.Interface != "" {
			out = append(out, u.Interface)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// CheckTemplate reports the references of a desired state template that no
// node can resolve: a capture the policy does not define, and a field an
// ippool capture never gives. Each error names the reference, the capture
// and the fix; all of them are joined, and each wraps ErrTemplate. Fields
// that depend on the pool (gateway, DNS) are checked by Needs.
func (c Captures) CheckTemplate(desiredState []byte) error {
	pools := map[string]string{}
	for _, r := range c.Refs {
		pools[r.Capture] = r.Pool
	}
	var errs []error
	seen := map[Use]bool{}
	for _, u := range Uses(desiredState) {
		u.Interface = ""
		if seen[u] {
			continue
		}
		seen[u] = true
		pool, ippool := pools[u.Capture]
		_, defined := c.All[u.Capture]
		switch {
		case !defined:
			errs = append(errs, fmt.Errorf("%w: the template reads %s, but the policy defines no capture %q (spec.capture has %s): "+
				"add the capture, or correct the name", ErrTemplate, u.Expression(), u.Capture, listOf(slices.Sorted(maps.Keys(c.All)))))
		case ippool && !slices.Contains(fields, u.Field()):
			errs = append(errs, fmt.Errorf("%w: the template reads %s, but capture %q (ippool.%s.allocate) has no field %q: "+
				"an ippool capture gives %s", ErrTemplate, u.Expression(), u.Capture, pool, u.Field(), strings.Join(fields, ", ")))
		}
	}
	return errors.Join(errs...)
}

// Needs returns the optional fields (gateway, dns-servers, dns-search) that
// the template reads from the ippool captures refs, by capture name: their
// pools must set them for the template to render.
func Needs(desiredState []byte, refs []Ref) map[string][]string {
	ofPool := map[string]bool{}
	for _, r := range refs {
		ofPool[r.Capture] = true
	}
	out := map[string][]string{}
	for _, u := range Uses(desiredState) {
		if f := u.Field(); ofPool[u.Capture] && (f == FieldGateway || f == FieldDNSServers || f == FieldDNSSearch) &&
			!slices.Contains(out[u.Capture], f) {
			out[u.Capture] = append(out[u.Capture], f)
		}
	}
	return out
}

// Missing checks the fields Needs returned against what the pool gives
// (a, an address of the pool): it returns an error naming each capture,
// field and the pool setting that provides it, or nil.
func Missing(needs map[string][]string, pool string, a Address) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(needs)) {
		for _, f := range needs[name] {
			var setting string
			switch {
			case f == FieldGateway && !a.Gateway.IsValid():
				setting = "spec.gateway"
			case f == FieldDNSServers && len(a.DNSServers) == 0:
				setting = "spec.dns.servers"
			case f == FieldDNSSearch && len(a.DNSSearch) == 0:
				setting = "spec.dns.search"
			default:
				continue
			}
			errs = append(errs, fmt.Errorf("%w: the template reads {{ capture.%s.%s }}, but NodeIPPool %s sets no %s "+
				"(which a pool cannot gain once created): draw the capture from a pool that sets %s, or remove the reference from the policy",
				ErrTemplate, name, f, pool, setting, setting))
		}
	}
	return errors.Join(errs...)
}

func listOf(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
