package config

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// decoder walks a yaml.Node tree into a pre-defaulted Config. It checks
// keys against the yaml struct tags (unknown and duplicate keys are errors),
// records the line of every key it sees (lines, keyed by field path) so that
// later validation errors can point into the file, and keeps going after an
// error so that one pass reports everything.
//
// Fields are only written when their key is present, which is what keeps
// absent keys at their default and explicit zeros at zero.
type decoder struct {
	lines  map[string]int  // field path -> line of its key ("" -> document)
	failed map[string]bool // paths whose value could not be decoded
	errs   []*FieldError

	// The alias budget. A YAML alias is a pointer, so a few kilobytes of
	// aliases of aliases can stand for billions of values; walking them
	// all took a 38 KB file ten seconds and 2 GB. Every value and key
	// reached through an alias or a merge key is counted, and decoding
	// stops at maxAliasValues. Values written out in the file are bounded
	// by MaxFileSize instead.
	aliasDepth int // > 0 while decoding what an alias or merge key points to
	aliasLine  int // line of the outermost alias being expanded
	expanded   int // values and keys decoded through aliases so far
	over       bool
}

// Short YAML tags.
const (
	tagNull  = "!!null"
	tagStr   = "!!str"
	tagInt   = "!!int"
	tagFloat = "!!float"
	tagMerge = "!!merge"
)

var durationType = reflect.TypeFor[time.Duration]()

// fail reports a value that could not be decoded: path keeps its default,
// and validation errors at or below path are not reported on top.
func (d *decoder) fail(line int, path, format string, args ...any) {
	d.errorf(line, path, format, args...)
	d.failed[path] = true
}

// hasFailed reports whether path or an enclosing path failed to decode.
func (d *decoder) hasFailed(path string) bool {
	for {
		if d.failed[path] {
			return true
		}
		if path == "" {
			return false
		}
		path = parentPath(path)
	}
}

// value decodes n into v. The caller has recorded path's line.
func (d *decoder) value(path string, n *yaml.Node, v reflect.Value) {
	if n.Kind == yaml.AliasNode {
		d.enterAlias(n.Line)
		defer d.leaveAlias()
	}
	if !d.spend(path) {
		return
	}
	n = deref(n)
	switch v.Type() {
	case durationType:
		d.duration(path, n, v)
		return
	case byteSizeType:
		d.byteSize(path, n, v)
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.mapping(path, n, v)
	case reflect.Slice:
		d.sequence(path, n, v)
	case reflect.Map:
		d.stringMap(path, n, v)
	case reflect.String:
		if s, ok := d.scalar(path, n); ok {
			v.SetString(s.Value)
		}
	case reflect.Int:
		d.integer(path, n, v)
	case reflect.Float64:
		d.float(path, n, v)
	case reflect.Bool:
		d.boolean(path, n, v)
	default:
		panic("config: unsupported field type " + v.Type().String())
	}
}

// deref follows aliases to the anchored node.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == tagNull
}

// describe names a node's kind for "must be X, got Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "no value"
		}
		if v := []rune(n.Value); len(v) > 64 {
			return fmt.Sprintf("%q...", string(v[:64]))
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "an unsupported YAML node"
}

// fieldTable maps yaml key names to struct field indexes, per struct type.
var fieldTables sync.Map // reflect.Type -> *fieldTable

type fieldTable struct {
	index map[string][]int // yaml key -> field index (through inlined structs)
	keys  []string         // in declaration order, for "valid keys" hints
}

// fieldsOf returns t's yaml keys. A field tagged `yaml:",inline"` (an
// embedded settings type) contributes its own keys, as if they were
// written in t.
func fieldsOf(t reflect.Type) *fieldTable {
	if ft, ok := fieldTables.Load(t); ok {
		return ft.(*fieldTable)
	}
	ft := &fieldTable{index: map[string][]int{}}
	ft.add(t, nil)
	fieldTables.Store(t, ft)
	return ft
}

func (ft *fieldTable) add(t reflect.Type, parent []int) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		idx := append(append([]int(nil), parent...), i)
		if tag == "" && opts == "inline" && f.Type.Kind() == reflect.Struct {
			ft.add(f.Type, idx)
			continue
		}
		if tag == "" || tag == "-" {
			continue
		}
		ft.index[tag] = idx
		ft.keys = append(ft.keys, tag)
	}
}

// pair is one key/value of a mapping, after merge keys are expanded.
// merged is the line of the merge key it came from (0: written in the
// mapping itself).
type pair struct {
	key, val *yaml.Node
	merged   int
}

// pairValue decodes p's value into v, counting it against the alias
// budget when it came from a merge key.
func (d *decoder) pairValue(path string, p pair, v reflect.Value) {
	if p.merged > 0 {
		d.enterAlias(p.merged)
		defer d.leaveAlias()
	}
	d.value(path, p.val, v)
}

// pairs returns the key/value pairs of mapping n, with YAML merge keys
// ("<<: *anchor") expanded: explicit keys win over merged ones, and earlier
// merge sources win over later ones. Duplicate explicit keys are reported.
func (d *decoder) pairs(path string, n *yaml.Node) []pair {
	var out, merged []pair
	seen := map[string]int{} // key -> line of first occurrence
	visited := map[*yaml.Node]bool{n: true}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !d.spend(path) {
			return nil
		}
		if isMergeKey(k) {
			d.enterAlias(k.Line)
			merged = d.mergeSources(path, k.Line, v, visited, merged)
			d.leaveAlias()
			if d.over {
				return nil
			}
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.errorf(k.Line, path, "mapping keys must be strings, got %s", describe(deref(k)))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.errorf(k.Line, joinKey(path, k.Value), "duplicate key (first set on line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		out = append(out, pair{key: k, val: v})
	}
	for _, p := range merged {
		if _, ok := seen[p.key.Value]; !ok {
			seen[p.key.Value] = p.key.Line
			out = append(out, p)
		}
	}
	return out
}

func isMergeKey(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && k.ShortTag() == tagMerge
}

// mergeSources appends the pairs of the mapping(s) named by a merge key's
// value; line is the merge key's. visited stops cycles and repeated
// expansion of the same anchor.
func (d *decoder) mergeSources(path string, line int, v *yaml.Node, visited map[*yaml.Node]bool, acc []pair) []pair {
	v = deref(v)
	switch v.Kind {
	case yaml.MappingNode:
		if visited[v] {
			return acc
		}
		visited[v] = true
		var nested []pair
		for i := 0; i+1 < len(v.Content); i += 2 {
			if !d.spend(path) {
				return acc
			}
			k, val := v.Content[i], v.Content[i+1]
			if isMergeKey(k) {
				nested = d.mergeSources(path, line, val, visited, nested)
				continue
			}
			if k.Kind == yaml.ScalarNode {
				acc = append(acc, pair{k, val, line})
			}
		}
		return append(acc, nested...)
	case yaml.SequenceNode:
		for _, e := range v.Content {
			if !d.spend(path) {
				return acc
			}
			if e = deref(e); e.Kind != yaml.MappingNode {
				d.errorf(e.Line, path, "merge key (<<) list entries must be mappings, got %s", describe(e))
				continue
			}
			acc = d.mergeSources(path, line, e, visited, acc)
		}
		return acc
	default:
		d.errorf(v.Line, path, "merge key (<<) must be a mapping or a list of mappings, got %s", describe(v))
		return acc
	}
}

func (d *decoder) mapping(path string, n *yaml.Node, v reflect.Value) {
	if isNull(n) {
		return // "admin:" with everything commented out: keep the defaults
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n.Line, path, "must be a mapping, got %s", describe(n))
		return
	}
	ft := fieldsOf(v.Type())
	for _, p := range d.pairs(path, n) {
		key := p.key.Value
		fp := joinKey(path, key)
		i, ok := ft.index[key]
		if !ok {
			if _, isProvider := v.Addr().Interface().(*Provider); isProvider && key == "api_key" {
				d.errorf(p.key.Line, fp, "unknown key: keys are not stored in the file; put the key in an environment variable and name it in api_key_env")
				continue
			}
			d.errorf(p.key.Line, fp, "unknown key%s", hint(key, ft.keys))
			continue
		}
		d.lines[fp] = p.key.Line
		d.pairValue(fp, p, v.FieldByIndex(i))
	}
}

func (d *decoder) sequence(path string, n *yaml.Node, v reflect.Value) {
	if isNull(n) {
		v.Set(reflect.Zero(v.Type()))
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(n.Line, path, "must be a list, got %s", describe(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, e := range n.Content {
		if d.over {
			break
		}
		ep := fmt.Sprintf("%s[%d]", path, i)
		d.lines[ep] = deref(e).Line
		elem := s.Index(i)
		switch p := elem.Addr().Interface().(type) {
		case *Provider:
			*p = DefaultProvider()
		case *Upstream:
			*p = DefaultUpstream()
		}
		d.value(ep, e, elem)
	}
	v.Set(s)
}

// stringMap decodes a map[string]string (provider headers).
func (d *decoder) stringMap(path string, n *yaml.Node, v reflect.Value) {
	if isNull(n) {
		v.Set(reflect.Zero(v.Type()))
		return
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n.Line, path, "must be a mapping, got %s", describe(n))
		return
	}
	m := reflect.MakeMap(v.Type())
	for _, p := range d.pairs(path, n) {
		fp := joinKey(path, p.key.Value)
		d.lines[fp] = p.key.Line
		ev := reflect.New(v.Type().Elem()).Elem()
		d.pairValue(fp, p, ev)
		m.SetMapIndex(reflect.ValueOf(p.key.Value).Convert(v.Type().Key()), ev)
	}
	v.Set(m)
}

// scalar checks that n is a non-null scalar.
func (d *decoder) scalar(path string, n *yaml.Node) (*yaml.Node, bool) {
	if n.Kind != yaml.ScalarNode {
		d.fail(n.Line, path, "must be a single value, got %s", describe(n))
		return nil, false
	}
	if isNull(n) {
		d.fail(n.Line, path, "missing value (remove the key to use the default)")
		return nil, false
	}
	return n, true
}

func (d *decoder) integer(path string, n *yaml.Node, v reflect.Value) {
	s, ok := d.scalar(path, n)
	if !ok {
		return
	}
	var i int
	if s.ShortTag() != tagInt || s.Decode(&i) != nil {
		d.fail(s.Line, path, "must be an integer, got %s", describe(s))
		return
	}
	v.SetInt(int64(i))
}

func (d *decoder) float(path string, n *yaml.Node, v reflect.Value) {
	s, ok := d.scalar(path, n)
	if !ok {
		return
	}
	var f float64
	if tag := s.ShortTag(); (tag != tagInt && tag != tagFloat) || s.Decode(&f) != nil {
		d.fail(s.Line, path, "must be a number, got %s", describe(s))
		return
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		d.fail(s.Line, path, "must be a finite number, got %s", describe(s))
		return
	}
	v.SetFloat(f)
}

func (d *decoder) boolean(path string, n *yaml.Node, v reflect.Value) {
	s, ok := d.scalar(path, n)
	if !ok {
		return
	}
	var b bool
	if s.ShortTag() != "!!bool" || s.Decode(&b) != nil {
		d.fail(s.Line, path, "must be true or false, got %s", describe(s))
		return
	}
	v.SetBool(b)
}

func (d *decoder) duration(path string, n *yaml.Node, v reflect.Value) {
	s, ok := d.scalar(path, n)
	if !ok {
		return
	}
	tag := s.ShortTag()
	if tag == tagInt || tag == tagFloat {
		var f float64
		if s.Decode(&f) == nil && f == 0 {
			v.SetInt(0)
			return
		}
		d.fail(s.Line, path, "invalid duration %q: a unit is required (Go syntax, e.g. \"5s\", \"1m30s\", \"250ms\")", s.Value)
		return
	}
	dur, err := time.ParseDuration(s.Value)
	if tag != tagStr || err != nil {
		d.fail(s.Line, path, "invalid duration %q: use Go syntax, e.g. \"5s\", \"1m30s\", \"250ms\"", s.Value)
		return
	}
	v.SetInt(int64(dur))
}

func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// parentPath returns the enclosing field path: "a.b[2].c" -> "a.b[2]" -> "a.b" -> "a" -> "".
func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// hint suggests the closest valid key, or lists them all.
func hint(key string, valid []string) string {
	best, bestDist := "", 3
	for _, k := range valid {
		if dist := editDistance(strings.ToLower(key), k); dist < bestDist {
			best, bestDist = k, dist
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	sorted := append([]string(nil), valid...)
	sort.Strings(sorted)
	return "; valid keys: " + strings.Join(sorted, ", ")
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
