package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/settings"
)

// FieldError is one configuration error. Its Error() is
// "FILE:LINE: FIELD.PATH: message", leaving out the parts that are unknown:
// errors from [Config.Validate] have no file or line, and file-level errors
// (YAML syntax, multiple documents) have no path.
type FieldError struct {
	File string // file name as given to Parse or Load; "" from Validate
	Line int    // 1-based line in File; 0 when unknown
	Path string // e.g. "providers[1].limit.ceiling"; "" for file-level errors
	Msg  string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	case e.File != "":
		b.WriteString(e.File + ": ")
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Load reads the file at path and parses it with [Parse]. The returned
// Config's Path is path.
func Load(path string) (*Config, error) {
	return loadWithEnv(path, os.LookupEnv)
}

func loadWithEnv(path string, lookup func(string) (string, bool)) (*Config, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := ParseWithEnv(path, data, lookup)
	if err != nil {
		return nil, err
	}
	cfg.Path = path
	return cfg, nil
}

// Parse parses and validates a YAML configuration. name is used in error messages only (the
// returned Config's Path is ""). API keys are read from the process
// environment.
//
// On failure the error joins one [*FieldError] per problem found, sorted by
// line, and the Config is nil.
func Parse(name string, data []byte) (*Config, error) {
	return ParseWithEnv(name, data, os.LookupEnv)
}

// MaxFileSize is the largest configuration file Sluice reads: 1 MiB, a
// hundred times a large real configuration. Together with the budget on
// YAML alias expansion it bounds the time and memory a load can take,
// whatever the file holds.
const MaxFileSize = 1 << 20

// readFile reads a configuration file of at most MaxFileSize bytes, without
// reading more than that from whatever the path names.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	if len(data) > MaxFileSize {
		return nil, tooLarge(path)
	}
	return data, nil
}

func tooLarge(name string) error {
	return &FieldError{File: name, Msg: fmt.Sprintf("larger than %d bytes (1 MiB), the most a configuration file may hold", MaxFileSize)}
}

// ParseWithEnv is [Parse] with an injectable environment lookup (same
// contract as [os.LookupEnv]) for api_key_env.
func ParseWithEnv(name string, data []byte, lookup func(string) (string, bool)) (*Config, error) {
	if len(data) > MaxFileSize {
		return nil, tooLarge(name)
	}
	root, err := parseDocument(name, data)
	if err != nil {
		return nil, err
	}
	cfg := Default()
	d := &decoder{lines: map[string]int{"": 1}, failed: map[string]bool{}}
	if root != nil {
		d.lines[""] = root.Line
		d.value("", root, reflect.ValueOf(cfg).Elem())
	}
	if d.over {
		// Decoding stopped half-way: validating what was decoded would
		// only add noise.
		return nil, joinErrors(name, d.errs)
	}
	derivedDefaults(cfg, d.lines)
	normalize(cfg)
	cfg.Warnings = append(deprecations(name, cfg, d.lines), untrustedHeaders(name, cfg, d.lines)...)

	v := &validator{lookup: lookup}
	v.config(cfg)

	// A value that failed to decode kept its default; do not pile
	// validation errors about it on top of the decode error.
	errs := d.errs
	for _, e := range v.errs {
		if d.hasFailed(e.Path) {
			continue
		}
		e.Line = lineOf(d.lines, e.Path)
		errs = append(errs, e)
	}
	if len(errs) == 0 {
		return cfg, nil
	}
	return nil, joinErrors(name, errs)
}

// joinErrors sorts errs by line, sets their file, and joins them.
func joinErrors(name string, errs []*FieldError) error {
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
	joined := make([]error, len(errs))
	for i, e := range errs {
		e.File = name
		joined[i] = e
	}
	return errors.Join(joined...)
}

// parseDocument returns the root node of the single YAML document in data,
// or nil when data holds no document (empty or comments only).
func parseDocument(name string, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, syntaxError(name, err)
	}
	// Further documents are an error unless empty (a stray trailing "---").
	for {
		var extra yaml.Node
		err := dec.Decode(&extra)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, syntaxError(name, err)
		}
		if documentRoot(&extra) != nil {
			return nil, &FieldError{File: name, Line: extra.Line, Msg: "multiple YAML documents are not supported"}
		}
	}
	root := documentRoot(&doc)
	if root != nil && root.Kind != yaml.MappingNode {
		return nil, &FieldError{File: name, Line: root.Line, Msg: "the configuration must be a mapping, got " + describe(root)}
	}
	return root, nil
}

// documentRoot returns a document's content, or nil when it is empty.
func documentRoot(doc *yaml.Node) *yaml.Node {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil
	}
	root := deref(doc.Content[0])
	if isNull(root) {
		return nil
	}
	return root
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError turns a YAML parser error into a FieldError with its line.
func syntaxError(name string, err error) error {
	msg := err.Error()
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &FieldError{File: name, Line: line, Msg: "invalid YAML: " + m[2]}
	}
	return &FieldError{File: name, Msg: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

// lineOf returns the line of path's key, or of the nearest enclosing key
// when path is absent from the file.
func lineOf(lines map[string]int, path string) int {
	for {
		if l, ok := lines[path]; ok {
			return l
		}
		if path == "" {
			return 0
		}
		path = parentPath(path)
	}
}

// deprecations lists, as warnings, the keys of the providers' limit
// blocks that the file sets and settings.Limit calls deprecated.
func deprecations(name string, c *Config, lines map[string]int) []string {
	var out []string
	warn := func(block string, dep map[string]string) {
		keys := make([]string, 0, len(dep))
		for k := range dep {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i := range c.Providers {
			for _, k := range keys {
				path := fmt.Sprintf("providers[%d].%s.%s", i, block, k)
				if line, ok := lines[path]; ok {
					out = append(out, (&FieldError{File: name, Line: line, Path: path, Msg: dep[k]}).Error())
				}
			}
		}
	}
	warn("limit", settings.Limit{}.Deprecated())
	return out
}

// derivedDefaults fills in defaults that depend on other settings, for the
// keys absent from the file (lines holds the present ones).
func derivedDefaults(c *Config, lines map[string]int) {
	for i := range c.Providers {
		p := &c.Providers[i]
		pp := fmt.Sprintf("providers[%d]", i)
		present := func(block string) func(string) bool {
			return func(key string) bool { _, ok := lines[pp+block+key]; return ok }
		}
		if !present(".")("auth") {
			p.Auth = defaultAuth(p.Dialect)
		}
		p.Limit = p.Limit.Complete(present(".limit."))
		p.Queue = p.Queue.Complete(present(".queue."))
	}
}

// normalize canonicalises values whose spelling does not matter: the
// match host is lower-cased (and an IPv6 literal loses its brackets), and a
// trailing "/" is removed from upstream URLs. Validate rejects the non-canonical forms in hand-built configs, so
// the proxy can rely on them.
func normalize(c *Config) {
	for i := range c.Providers {
		p := &c.Providers[i]
		h := strings.ToLower(p.Match.Host)
		if len(h) > 2 && h[0] == '[' && h[len(h)-1] == ']' {
			h = h[1 : len(h)-1] // IPv6 literal: stored bare, as the proxy compares it
		}
		if a, err := netip.ParseAddr(h); err == nil && a.Is6() && a.Zone() == "" {
			h = a.String() // one spelling per address: 2001:DB8:0::1 -> 2001:db8::1
		}
		p.Match.Host = h
		if u, err := url.Parse(p.Upstream); err == nil && u.RawQuery == "" && !u.ForceQuery && u.Fragment == "" && u.Host != "" {
			p.Upstream = strings.TrimRight(p.Upstream, "/")
		}
		normalizeUpstreams(p)
	}
}
