package rls

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// ErrInvalidConfig is returned, wrapped with the file and the reason, for a
// rate-limit configuration that cannot be loaded, and by [Config.Validate].
// Check for it with errors.Is.
var ErrInvalidConfig = errors.New("rls: invalid config")

// Ruleset is a loaded rate-limit configuration: one descriptor tree per
// domain. It is immutable and safe for concurrent use. Create it with [Load]
// or [Parse]; the zero Ruleset configures no domain, so every descriptor is
// answered OK.
type Ruleset struct {
	domains map[string]*domain
}

// domain is the configuration of one domain.
type domain struct {
	root *node // its descriptor tree
	// limits is set when the domain's file sets allow_descriptor_limits:
	// a descriptor's own limit (RateLimitDescriptor.limit) applies there,
	// and is ignored everywhere else.
	limits bool
	// workspace is the domain's [WorkspaceOf], made once.
	workspace string
}

// workspaceOf returns the workspace of the counters of d, named name (d
// nil: a domain not configured).
func (d *domain) workspaceOf(name string) string {
	if d == nil {
		return WorkspaceOf(name)
	}
	return d.workspace
}

// newDomain returns the domain of a file f whose tree is root.
func newDomain(f domainFile, root *node) *domain {
	return &domain{root: root, limits: f.AllowDescriptorLimits, workspace: WorkspaceOf(f.Domain)}
}

// node is one level of a domain's descriptor tree: the rule configured at
// this descriptor (if any) and the descriptors nested under it.
type node struct {
	rule      *rule
	exact     map[entry]*node  // key and value
	wildcards []wildcard       // key and value prefix, in file order
	byKey     map[string]*node // key only: the default for any value
}

// wildcard is a nested descriptor whose value ends in "*".
type wildcard struct {
	key, prefix string
	node        *node
}

// entry is one key/value pair of a descriptor.
type entry struct {
	key, value string
}

// rule is the rate_limit of one configured descriptor.
type rule struct {
	name       string
	limit      int64 // requests_per_unit
	unit       rlsv3.RateLimitResponse_RateLimit_Unit
	multiplier uint32        // unit_multiplier, 1 when not set
	window     time.Duration // unit × multiplier
	unlimited  bool
	shadow     bool
	// report counts the hits of the descriptors of this rule as usage
	// after the fact (sluice.Limiter.ReportMany): never OVER_LIMIT,
	// counted whatever the limit. A descriptor of 0 hits checks the limit
	// instead, as a peek.
	report   bool
	replaces []string

	// current is the limit as a descriptor status carries it, built with
	// the rule and shared by every answer (answers only read it).
	current *rlsv3.RateLimitResponse_RateLimit
}

// withCurrentLimit sets r.current from the rule's fields and returns r.
func (r *rule) withCurrentLimit() *rule {
	r.current = &rlsv3.RateLimitResponse_RateLimit{Name: r.name, RequestsPerUnit: uint32(r.limit), Unit: r.unit}
	if r.multiplier != 1 {
		r.current.UnitMultiplier = wrapperspb.UInt32(r.multiplier)
	}
	return r
}

// currentLimit returns the rule's limit as a descriptor status carries it.
func (r *rule) currentLimit() *rlsv3.RateLimitResponse_RateLimit {
	if r.current == nil { // a rule built without withCurrentLimit
		return (&rule{name: r.name, limit: r.limit, unit: r.unit, multiplier: r.multiplier}).withCurrentLimit().current
	}
	return r.current
}

// unitLengths are the window lengths of the units, as upstream defines them:
// a month is 30 days and a year 365 days, both aligned to the Unix epoch.
var unitLengths = map[rlsv3.RateLimitResponse_RateLimit_Unit]time.Duration{
	rlsv3.RateLimitResponse_RateLimit_SECOND: time.Second,
	rlsv3.RateLimitResponse_RateLimit_MINUTE: time.Minute,
	rlsv3.RateLimitResponse_RateLimit_HOUR:   time.Hour,
	rlsv3.RateLimitResponse_RateLimit_DAY:    24 * time.Hour,
	rlsv3.RateLimitResponse_RateLimit_WEEK:   7 * 24 * time.Hour,
	rlsv3.RateLimitResponse_RateLimit_MONTH:  30 * 24 * time.Hour,
	rlsv3.RateLimitResponse_RateLimit_YEAR:   365 * 24 * time.Hour,
}

// The YAML documents, decoded strictly. Their type names appear in decoding
// errors ("field foo not found in type rls.descriptor").
type (
	domainFile struct {
		Domain                string       `yaml:"domain"`
		AllowDescriptorLimits bool         `yaml:"allow_descriptor_limits"`
		Descriptors           []descriptor `yaml:"descriptors"`
	}
	descriptor struct {
		Key            string       `yaml:"key"`
		Value          string       `yaml:"value"`
		RateLimit      *rateLimit   `yaml:"rate_limit"`
		ShadowMode     bool         `yaml:"shadow_mode"`
		Report         bool         `yaml:"report"`          // Sluice's: hits are usage after the fact
		DetailedMetric bool         `yaml:"detailed_metric"` // accepted; Sluice's metrics are per domain
		Descriptors    []descriptor `yaml:"descriptors"`
	}
	rateLimit struct {
		Unit            string    `yaml:"unit"`
		RequestsPerUnit *int64    `yaml:"requests_per_unit"`
		UnitMultiplier  *int64    `yaml:"unit_multiplier"`
		Unlimited       bool      `yaml:"unlimited"`
		Name            string    `yaml:"name"`
		Replaces        []replace `yaml:"replaces"`
	}
	replace struct {
		Name string `yaml:"name"`
	}
)

// Load reads the configuration at path: one YAML file, or a folder whose
// *.yaml and *.yml files each hold one domain (hidden files and subfolders
// are skipped). Two files may not configure the same domain. Every error
// wraps [ErrInvalidConfig] and names the file.
func Load(path string) (*Ruleset, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	files := []string{path}
	if info.IsDir() {
		if files, err = yamlFiles(path); err != nil {
			return nil, err
		}
	}
	rs := &Ruleset{domains: make(map[string]*domain)}
	origin := make(map[string]string) // domain -> file
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		f, root, err := parse(name, data)
		if err != nil {
			return nil, err
		}
		domain := f.Domain
		if first, dup := origin[domain]; dup {
			return nil, fmt.Errorf("%w: %s: duplicate domain %q (also in %s)", ErrInvalidConfig, name, domain, first)
		}
		origin[domain] = name
		rs.domains[domain] = newDomain(f, root)
	}
	return rs, nil
}

// yamlFiles lists the configuration files of dir in name order.
func yamlFiles(dir string) ([]string, error) {
	list, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	var files []string
	for _, e := range list {
		name := e.Name()
		ext := filepath.Ext(name)
		if strings.HasPrefix(name, ".") || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		path := filepath.Join(dir, name)
		info, err := os.Stat(path) // follows symlinks, as in Kubernetes ConfigMaps
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		if !info.IsDir() {
			files = append(files, path)
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: %s: no *.yaml or *.yml file", ErrInvalidConfig, dir)
	}
	return files, nil
}

// Parse reads one YAML document that configures one domain. name labels
// errors, usually the file name. Every error wraps [ErrInvalidConfig].
func Parse(name string, data []byte) (*Ruleset, error) {
	f, root, err := parse(name, data)
	if err != nil {
		return nil, err
	}
	return &Ruleset{domains: map[string]*domain{f.Domain: newDomain(f, root)}}, nil
}

// Domains returns the configured domains in sorted order.
func (rs *Ruleset) Domains() []string {
	var ds []string
	for d := range rs.domains {
		ds = append(ds, d)
	}
	slices.Sort(ds)
	return ds
}

// parse decodes and checks one domain file.
func parse(name string, data []byte) (domainFile, *node, error) {
	fail := func(format string, args ...any) (domainFile, *node, error) {
		return domainFile{}, nil, fmt.Errorf("%w: %s: %s", ErrInvalidConfig, name, fmt.Sprintf(format, args...))
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f domainFile
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return fail("%s", strings.Join(te.Errors, "; "))
		}
		return fail("%v", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return fail("more than one YAML document (one domain per file)")
	}
	switch {
	case f.Domain == "":
		return fail("domain is missing")
	case len(f.Domain) > MaxDomainBytes:
		return fail("domain is %d bytes, over the cap of %d (its counters' workspace, %q + the domain, is at most 255 bytes)", len(f.Domain), MaxDomainBytes, Workspace+":")
	}
	root, err := build(f.Descriptors, "")
	if err != nil {
		return fail("domain %q: %v", f.Domain, err)
	}
	return f, root, nil
}

// build compiles one level of descriptors (and, recursively, the levels
// under it). path names the parent descriptor in errors.
func build(list []descriptor, path string) (*node, error) {
	n := &node{exact: make(map[entry]*node), byKey: make(map[string]*node)}
	seen := make(map[entry]bool)
	for _, d := range list {
		here := d.Key
		if d.Value != "" {
			here += "=" + d.Value
		}
		if path != "" {
			here = path + " > " + here
		}
		if d.Key == "" {
			if path == "" {
				return nil, errors.New("a top-level descriptor has an empty key")
			}
			return nil, fmt.Errorf("a descriptor under %q has an empty key", path)
		}
		e := entry{d.Key, d.Value}
		if seen[e] {
			return nil, fmt.Errorf("duplicate descriptor %q", here)
		}
		seen[e] = true
		child, err := build(d.Descriptors, here)
		if err != nil {
			return nil, err
		}
		if d.Report && d.RateLimit == nil {
			return nil, fmt.Errorf("descriptor %q: report needs a rate_limit", here)
		}
		if d.RateLimit != nil {
			if child.rule, err = newRule(d.RateLimit, d.ShadowMode, d.Report); err != nil {
				return nil, fmt.Errorf("descriptor %q: %w", here, err)
			}
		}
		switch prefix, ok := strings.CutSuffix(d.Value, "*"); {
		case d.Value == "":
			n.byKey[d.Key] = child
		case ok:
			n.wildcards = append(n.wildcards, wildcard{key: d.Key, prefix: prefix, node: child})
		default:
			n.exact[e] = child
		}
	}
	return n, nil
}

// newRule checks and compiles one rate_limit block, of a descriptor in
// shadow mode or reporting usage (report) if so.
func newRule(y *rateLimit, shadow, report bool) (*rule, error) {
	switch {
	case report && shadow:
		return nil, errors.New("report and shadow_mode exclude each other (a report is never denied)")
	case report && y.Unlimited:
		return nil, errors.New("report needs a limit, not unlimited")
	}
	r := &rule{name: y.Name, unlimited: y.Unlimited, shadow: shadow, report: report, multiplier: 1}
	for _, rep := range y.Replaces {
		switch rep.Name {
		case "":
			return nil, errors.New("replaces has an entry with an empty name")
		case y.Name:
			return nil, fmt.Errorf("rate limit %q replaces itself", y.Name)
		}
		r.replaces = append(r.replaces, rep.Name)
	}
	if y.Unlimited {
		if y.Unit != "" || y.RequestsPerUnit != nil || y.UnitMultiplier != nil {
			return nil, errors.New("an unlimited rate_limit must not set unit, requests_per_unit or unit_multiplier")
		}
		return r, nil
	}
	v, ok := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(y.Unit)]
	length, known := unitLengths[rlsv3.RateLimitResponse_RateLimit_Unit(v)]
	switch {
	case y.Unit == "":
		return nil, errors.New("unit is missing (or set unlimited: true)")
	case !ok || !known:
		return nil, fmt.Errorf("unknown unit %q (want second, minute, hour, day, week, month or year)", y.Unit)
	case y.RequestsPerUnit == nil:
		return nil, errors.New("requests_per_unit is missing")
	case *y.RequestsPerUnit < 0 || *y.RequestsPerUnit > math.MaxUint32:
		return nil, fmt.Errorf("requests_per_unit %d is out of range 0..%d", *y.RequestsPerUnit, uint32(math.MaxUint32))
	}
	r.unit = rlsv3.RateLimitResponse_RateLimit_Unit(v)
	r.limit = *y.RequestsPerUnit
	if m := y.UnitMultiplier; m != nil {
		if *m < 1 || *m > math.MaxUint32 || *m > math.MaxInt64/int64(length) {
			return nil, fmt.Errorf("unit_multiplier %d is out of range 1..%d for unit %s", *m, min(math.MaxUint32, math.MaxInt64/int64(length)), y.Unit)
		}
		r.multiplier = uint32(*m)
	}
	r.window = length * time.Duration(r.multiplier)
	return r.withCurrentLimit(), nil
}

// match returns the rule that applies to a descriptor with these entries,
// or nil. It walks the tree one entry per level, preferring at each level
// the exact key and value, then the first wildcard value that is a prefix,
// then the key alone; it never backtracks. The rule is the one of the node
// reached by the last entry: a descriptor that ends above or runs past the
// configured depth matches nothing.
func (n *node) match(entries []entry) *rule {
	for _, e := range entries {
		if n = n.child(e); n == nil {
			return nil
		}
	}
	return n.rule
}

// child returns the node for entry e at this level, or nil.
func (n *node) child(e entry) *node {
	if c := n.exact[e]; c != nil {
		return c
	}
	for _, w := range n.wildcards {
		if w.key == e.key && strings.HasPrefix(e.value, w.prefix) {
			return w.node
		}
	}
	return n.byKey[e.key]
}
