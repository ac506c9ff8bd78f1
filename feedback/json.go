package feedback

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// This file holds the small JSON scanner used on the per-event path. It is
// not a validating parser: it walks objects and arrays far enough to find a
// handful of keys, skips everything else, and on malformed or truncated
// input simply stops reporting keys. It never panics, never recurses (deep
// nesting costs only time) and never allocates: keys and string values are
// returned as slices of the input, still escaped unless decoded into a
// caller-provided buffer with decodeStr.

// delim marks bytes that end a bare scalar (number, true, false, null).
var delim = [256]bool{
	',': true, '}': true, ']': true, ':': true, '"': true, '{': true, '[': true,
	' ': true, '\t': true, '\n': true, '\r': true,
}

// strStop marks the bytes that end a plain run inside a JSON string.
var strStop = [256]bool{'"': true, '\\': true}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// stopAt returns the index of the first '"' or '\\' in b[i:e], or e if
// there is none. It tests eight bytes at a time (SWAR): for each byte of
// the word, (x-1)&^x has its top bit set when x is zero; a borrow can only
// flag bytes after the first real match, so the lowest flag is exact.
func stopAt(b []byte, i, e int) int {
	for ; i+8 <= e; i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		q := w ^ ('"' * lsb)
		s := w ^ ('\\' * lsb)
		if m := ((q-lsb)&^q | (s-lsb)&^s) & msb; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for i < e && !strStop[b[i]] {
		i++
	}
	return i
}

func skipWS(b []byte, i int) int {
	if i < len(b) && b[i] > ' ' {
		return i // fast path: compact JSON
	}
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// trimWS trims JSON whitespace from both ends of b.
func trimWS(b []byte) []byte {
	b = b[skipWS(b, 0):]
	for len(b) > 0 {
		switch b[len(b)-1] {
		case ' ', '\t', '\n', '\r':
			b = b[:len(b)-1]
		default:
			return b
		}
	}
	return b
}

// skipString returns the index just past the closing quote of the string
// whose opening quote is at b[i], or -1 if the string is unterminated.
func skipString(b []byte, i int) int {
	i++
	// Most strings on the hot path are short (keys, tokens, ids): a plain
	// loop beats the call into IndexByte for them.
	i = stopAt(b, i, min(len(b), i+64))
	if i < len(b) && b[i] == '"' {
		return i + 1
	}
	return skipEscaped(b, i)
}

// skipEscaped finishes skipString from i, a position inside a string that
// is not in the middle of an escape. It is linear in the string's length:
// the next quote is searched for again only after an escaped quote.
func skipEscaped(b []byte, i int) int {
	q := -1 // the next quote at or after i, once known
	for i < len(b) {
		if b[i] == '\\' {
			i += 2
			continue
		}
		if q < i {
			j := bytes.IndexByte(b[i:], '"')
			if j < 0 {
				return -1
			}
			q = i + j
		}
		k := bytes.IndexByte(b[i:q], '\\')
		if k < 0 {
			return q + 1
		}
		i += k
	}
	return -1
}

// skipValue returns the index just past the JSON value starting at b[i], or
// -1 if there is no complete value there. Scalars are any run of
// non-delimiter bytes (lenient: "tru" or "1x" are accepted as scalars).
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				if i = skipString(b, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	case '}', ']', ',', ':':
		return -1
	}
	j := i
	for j < len(b) && !delim[b[j]] {
		j++
	}
	return j
}

// cursor walks the members of one JSON object or the elements of one array.
// After next or nextElem it is positioned at a value; the value helpers
// (str, int, lit, object, array, raw) consume it, and a value left
// unconsumed is skipped by the next call. A nested cursor obtained from
// object or array may be handed back with resume once it has reached its
// end, which spares the parent a second scan; next and nextElem do that
// when given the parent.
//
// Every walk over the keys of an object is written
//
//	o := c.members()
//	for o.next(c) {
//		switch string(o.key()) {
//		case "usage":
//			u = readUsage(&o)
//		}
//	}
//
// or, at the top level, openObject followed by for c.next(nil). The
// iterator is the cursor itself, a value on the caller's stack, so that
// walking costs no allocation: a range-over-func loop body is a function
// called through a variable, and handing it the cursor (or a key decoded
// into the cursor's buffer) moves the cursor to the heap. For the same
// reason a cursor holds no pointer but to the input: the parent is passed
// to next rather than stored, and the current key is kept as offsets. The
// cursor is declared before the loop, not in its init statement, where
// it would be copied at every iteration.
type cursor struct {
	b        []byte
	i        int
	state    uint8
	klo, khi int // the current member's raw key is b[klo:khi]
	kn       int // when > 0, its decoded form is kbuf[:kn]
	kbuf     [32]byte
}

const (
	curFirst = iota // just inside the opening bracket
	curValue        // at an unconsumed value
	curAfter        // just after a consumed value
	curEnd          // the closing bracket was consumed; i is past it
	curBad          // malformed or truncated
)

// openObject returns a cursor over the object starting at b[i] (after
// optional whitespace).
func openObject(b []byte, i int) (cursor, bool) {
	i = skipWS(b, i)
	if i >= len(b) || b[i] != '{' {
		return cursor{state: curBad}, false
	}
	return cursor{b: b, i: i + 1}, true
}

// openArray is openObject for arrays.
func openArray(b []byte, i int) (cursor, bool) {
	i = skipWS(b, i)
	if i >= len(b) || b[i] != '[' {
		return cursor{state: curBad}, false
	}
	return cursor{b: b, i: i + 1}, true
}

// advance moves past an unconsumed value and the following separator. It
// returns false at the closing bracket or on malformed input.
func (c *cursor) advance(closer byte) bool {
	b, i := c.b, c.i
	switch c.state {
	case curValue:
		if i = skipValue(b, i); i < 0 {
			c.state = curBad
			return false
		}
		fallthrough
	case curAfter:
		i = skipWS(b, i)
		if i >= len(b) {
			c.state = curBad
			return false
		}
		if b[i] == closer {
			c.i, c.state = i+1, curEnd
			return false
		}
		if b[i] != ',' {
			c.state = curBad
			return false
		}
		i = skipWS(b, i+1)
	case curFirst:
		i = skipWS(b, i)
		if i >= len(b) {
			c.state = curBad
			return false
		}
		if b[i] == closer {
			c.i, c.state = i+1, curEnd
			return false
		}
	default:
		return false
	}
	c.i = i
	return true
}

// next advances to the next member of an object, positions the cursor at
// its value and reports whether there was one; key returns its key. parent
// is the cursor c was opened from (members), nil at the top level: at the
// closing brace it is moved past the object.
func (c *cursor) next(parent *cursor) bool {
	if !c.advance('}') {
		if parent != nil {
			parent.resume(c)
		}
		return false
	}
	b, i := c.b, c.i
	if i >= len(b) || b[i] != '"' {
		c.state = curBad
		return false
	}
	j := stopAt(b, i+1, len(b))
	c.kn = 0
	if j < len(b) && b[j] == '"' {
		c.klo, c.khi = i+1, j
		j++
	} else {
		e := skipString(b, i)
		if e < 0 {
			c.state = curBad
			return false
		}
		c.klo, c.khi = i+1, e-1
		if n, ok := unescapeInto(c.kbuf[:], b[i+1:e-1]); ok {
			c.kn = n
		}
		j = e
	}
	j = skipWS(b, j)
	if j >= len(b) || b[j] != ':' {
		c.state = curBad
		return false
	}
	c.i, c.state = skipWS(b, j+1), curValue
	return true
}

// key returns the key of the member next moved to, decoded when it holds
// escapes (a key whose decoded form does not fit 32 bytes is returned raw
// and so matches no known key).
func (c *cursor) key() []byte {
	if c.kn > 0 {
		return c.kbuf[:c.kn]
	}
	return c.b[c.klo:c.khi]
}

// nextElem is next for the elements of an array (from elements).
func (c *cursor) nextElem(parent *cursor) bool {
	if !c.advance(']') {
		if parent != nil {
			parent.resume(c)
		}
		return false
	}
	c.state = curValue
	return true
}

// str consumes a string value and returns its raw (still escaped) content.
// It returns false, leaving the value unconsumed, if the value is not a
// string.
func (c *cursor) str() ([]byte, bool) {
	if c.state != curValue || c.i >= len(c.b) || c.b[c.i] != '"' {
		return nil, false
	}
	e := skipString(c.b, c.i)
	if e < 0 {
		c.state = curBad
		return nil, false
	}
	s := c.b[c.i+1 : e-1]
	c.i, c.state = e, curAfter
	return s, true
}

// maxCount caps parsed counts so that sums and conversions cannot overflow.
const maxCount = 1<<31 - 1

// int consumes a number and returns its integer part, clamped to
// [-maxCount, maxCount]. A fraction or exponent is ignored ("1e3" is 1). It
// returns false, leaving the value unconsumed, if the value is not a number.
func (c *cursor) int() (int, bool) {
	if c.state != curValue {
		return 0, false
	}
	b, i := c.b, c.i
	neg := false
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	start, n := i, 0
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		if n < maxCount {
			n = n*10 + int(b[i]-'0')
		}
		i++
	}
	if i == start {
		return 0, false
	}
	n = min(n, maxCount)
	for i < len(b) && !delim[b[i]] {
		i++
	}
	c.i, c.state = i, curAfter
	if neg {
		n = -n
	}
	return n, true
}

// lit consumes the bare literal s (true, false or null) if the value is
// exactly that literal.
func (c *cursor) lit(s string) bool {
	if c.state != curValue {
		return false
	}
	b, i := c.b, c.i
	e := i + len(s)
	if e > len(b) || string(b[i:e]) != s || (e < len(b) && !delim[b[e]]) {
		return false
	}
	c.i, c.state = e, curAfter
	return true
}

// raw consumes any value and returns its bytes; it returns false on a
// truncated value (the cursor is then bad).
func (c *cursor) raw() ([]byte, bool) {
	if c.state != curValue {
		return nil, false
	}
	e := skipValue(c.b, c.i)
	if e < 0 {
		c.state = curBad
		return nil, false
	}
	v := c.b[c.i:e]
	c.i, c.state = e, curAfter
	return v, true
}

// object returns a cursor over the current value if it is an object. The
// parent stays positioned at the value: call resume after walking the
// child to its end, or let the parent skip it.
func (c *cursor) object() (cursor, bool) {
	if c.state != curValue {
		return cursor{state: curBad}, false
	}
	return openObject(c.b, c.i)
}

// array is object for arrays.
func (c *cursor) array() (cursor, bool) {
	if c.state != curValue {
		return cursor{state: curBad}, false
	}
	return openArray(c.b, c.i)
}

// members returns a cursor over the object at the current value, to walk
// with next(c). When the walk reaches the closing brace, c is moved past
// the object; if it stops earlier, c stays at the object and skips it. A
// value that is not an object yields no member and stays unconsumed.
func (c *cursor) members() cursor {
	o, _ := c.object()
	return o
}

// elements is members for arrays, walked with nextElem(c).
func (c *cursor) elements() cursor {
	a, _ := c.array()
	return a
}

// resume moves the parent past a child value that was walked to its end.
func (c *cursor) resume(child *cursor) {
	if c.state == curValue && child.state == curEnd {
		c.i, c.state = child.i, curAfter
	}
}
