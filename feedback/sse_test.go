package feedback

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// ev is a dispatched SSE event as seen by a sink.
type ev struct {
	Type, Data string
	Trunc      bool
}

func (e ev) String() string { return fmt.Sprintf("{%q %q %v}", e.Type, e.Data, e.Trunc) }

// recorder is an eventSink that copies every event.
type recorder struct{ evs []ev }

func (r *recorder) event(typ, data []byte, truncated bool) {
	r.evs = append(r.evs, ev{string(typ), string(data), truncated})
}

// frame feeds chunks to a fresh parser, closes it, and returns the events.
func frame(chunks ...[]byte) []ev {
	var p sseParser
	var r recorder
	for _, c := range chunks {
		p.write(c, &r)
	}
	p.close(&r)
	return r.evs
}

// refFrame is a deliberately naive reference framer written straight from
// the WHATWG algorithm (plus dispatch at EOF), used as an oracle. It has no
// size limits.
func refFrame(in []byte) []ev {
	var lines []string
	var cur []byte
	for i := 0; i < len(in); i++ {
		switch c := in[i]; c {
		case '\n':
			lines = append(lines, string(cur))
			cur = cur[:0]
		case '\r':
			lines = append(lines, string(cur))
			cur = cur[:0]
			if i+1 < len(in) && in[i+1] == '\n' {
				i++
			}
		default:
			cur = append(cur, c)
		}
	}
	if len(cur) > 0 {
		lines = append(lines, string(cur))
	}
	var evs []ev
	var data []string
	hasData, typ := false, ""
	dispatch := func() {
		if hasData {
			evs = append(evs, ev{Type: typ, Data: strings.Join(data, "\n")})
		}
		data, hasData, typ = nil, false, ""
	}
	for _, l := range lines {
		if l == "" {
			dispatch()
			continue
		}
		if l[0] == ':' {
			continue
		}
		name, val, found := strings.Cut(l, ":")
		if found {
			val = strings.TrimPrefix(val, " ")
		}
		switch name {
		case "data":
			data, hasData = append(data, val), true
		case "event":
			typ = val
			if len(typ) > maxEventType {
				typ = typ[:maxEventType]
			}
		}
	}
	dispatch()
	return evs
}

var framingCases = []struct {
	name string
	in   string
	want []ev
}{
	{"lf", "data: a\n\ndata: b\n\n", []ev{{"", "a", false}, {"", "b", false}}},
	{"crlf", "data: a\r\n\r\ndata: b\r\n\r\n", []ev{{"", "a", false}, {"", "b", false}}},
	{"cr", "data: a\r\rdata: b\r\r", []ev{{"", "a", false}, {"", "b", false}}},
	{"mixed", "data: a\r\n\rdata: b\n\r\ndata: c\r\n", []ev{{"", "a", false}, {"", "b", false}, {"", "c", false}}},
	{"lf_cr_is_two_endings", "data: a\n\rdata: b\n\n", []ev{{"", "a", false}, {"", "b", false}}},
	{"multiline_data", "data: line1\ndata: line2\ndata:line3\n\n", []ev{{"", "line1\nline2\nline3", false}}},
	{"one_space_dropped", "data:  two\ndata:none\n\n", []ev{{"", " two\nnone", false}}},
	{"tab_kept", "data:\tx\n\n", []ev{{"", "\tx", false}}},
	{"comments", ": hello\n:\ndata: a\n: mid\n\n: tail\n\n", []ev{{"", "a", false}}},
	{"event_field", "event: ping\ndata: {}\n\ndata: x\n\n", []ev{{"ping", "{}", false}, {"", "x", false}}},
	{"event_last_wins", "event: a\nevent: b\ndata: 1\n\n", []ev{{"b", "1", false}}},
	{"event_without_data_dropped", "event: lonely\n\ndata: x\n\n", []ev{{"", "x", false}}},
	{"data_no_colon", "data\n\n", []ev{{"", "", false}}},
	{"empty_data", "data:\n\n", []ev{{"", "", false}}},
	{"empty_data_twice", "data:\ndata:\n\n", []ev{{"", "\n", false}}},
	{"colon_in_value", "data: {\"a\":\"b:c\"}\n\n", []ev{{"", "{\"a\":\"b:c\"}", false}}},
	{"ignored_fields", "id: 7\nretry: 100\nfoo: bar\nDATA: no\ndata : no\ndata: yes\n\n", []ev{{"", "yes", false}}},
	{"final_event_no_blank", "data: a\n\ndata: b\n", []ev{{"", "a", false}, {"", "b", false}}},
	{"final_line_no_newline", "data: a\n\ndata: [DONE]", []ev{{"", "a", false}, {"", "[DONE]", false}}},
	{"final_cr", "event: x\ndata: a\r", []ev{{"x", "a", false}}},
	{"blank_lines_only", "\n\r\n\r\n\n", nil},
	{"empty", "", nil},
	{"nul_and_utf8", "data: \x00\xff☺\n\n", []ev{{"", "\x00\xff☺", false}}},
	{"long_event_type", "event: " + strings.Repeat("t", 100) + "\ndata: x\n\n", []ev{{strings.Repeat("t", 64), "x", false}}},
}

func TestSSEFraming(t *testing.T) {
	for _, tc := range framingCases {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			if got := frame(in); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("whole: got %v, want %v", got, tc.want)
			}
			if got := refFrame(in); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("reference framer disagrees with the table: got %v, want %v", got, tc.want)
			}
			for k := 0; k <= len(in); k++ {
				if got := frame(in[:k], in[k:]); !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("split at %d: got %v, want %v", k, got, tc.want)
				}
			}
			for n := 1; n <= len(in); n++ {
				if got := frame(chunk(in, n)...); !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("chunks of %d: got %v, want %v", n, got, tc.want)
				}
			}
		})
	}
}

// TestSSECRLFAcrossWrites pins the one subtle rule: a CR ending one write and
// an LF starting the next are one line ending, not an empty line.
func TestSSECRLFAcrossWrites(t *testing.T) {
	got := frame([]byte("data: a\r"), []byte("\ndata: b\r"), nil, []byte("\n\r\n"))
	want := []ev{{"", "a\nb", false}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// An empty write between CR and LF must not forget the pending CR.
	got = frame([]byte("data: a\r"), []byte{}, []byte("\n\n"))
	if want := []ev{{"", "a", false}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestSSEDataNotRetained checks that an event pending at the end of a write
// does not point into the caller's buffer, which the caller may reuse.
func TestSSEDataNotRetained(t *testing.T) {
	var p sseParser
	var r recorder
	buf := []byte("data: first\ndata: x")
	p.write(buf[:12], &r) // "data: first\n": data aliases buf until the write ends
	copy(buf, "XXXXXXXXXXXXXXXXXXX")
	p.write([]byte("\n\n"), &r)
	p.close(&r)
	if want := []ev{{"", "first", false}}; !reflect.DeepEqual(r.evs, want) {
		t.Fatalf("got %v, want %v", r.evs, want)
	}
}

func TestSSEOversize(t *testing.T) {
	big := bytes.Repeat([]byte("x"), maxLine+1)
	exact := bytes.Repeat([]byte("y"), maxLine-len("data: "))
	stream := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	cases := []struct {
		name    string
		in      []byte
		want    []ev
		skipped int
	}{
		{"data_line", stream([]byte("event: e\ndata: "), big, []byte("\n\ndata: ok\n\n")),
			[]ev{{"e", "", true}, {"", "ok", false}}, 1},
		{"data_after_data", stream([]byte("data: a\ndata: "), big, []byte("\ndata: b\n\n")),
			[]ev{{"", "a", true}}, 1},
		{"exact_limit_kept", stream([]byte("data: "), exact, []byte("\n\n")),
			[]ev{{"", string(exact), false}}, 0},
		{"comment_line", stream([]byte(":"), big, []byte("\ndata: ok\n\n")),
			[]ev{{"", "ok", false}}, 1},
		{"event_line", stream([]byte("event: "), big, []byte("\ndata: ok\n\n")),
			[]ev{{"\x00", "ok", false}}, 1},
		{"at_eof", stream([]byte("data: "), big),
			[]ev{{"", "", true}}, 1},
		{"joined_data_over_limit", stream([]byte("data: "), exact, []byte("\ndata: "), exact, []byte("\n\n")),
			[]ev{{"", string(exact), true}}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, n := range []int{len(tc.in), 1 << 16, 4096, 7, 1} {
				if n == 1 && testing.Short() {
					continue
				}
				var p sseParser
				var r recorder
				for _, c := range chunk(tc.in, n) {
					p.write(c, &r)
				}
				p.close(&r)
				if !reflect.DeepEqual(r.evs, tc.want) {
					t.Fatalf("chunks of %d: got %d events %.80v, want %.80v", n, len(r.evs), r.evs, tc.want)
				}
				if p.skipped != tc.skipped {
					t.Fatalf("chunks of %d: skipped %d lines, want %d", n, p.skipped, tc.skipped)
				}
				if cap(p.line) > 2*maxLine {
					t.Fatalf("line buffer grew to %d", cap(p.line))
				}
			}
		})
	}
}

// chunk splits b into pieces of at most n bytes.
func chunk(b []byte, n int) [][]byte {
	var out [][]byte
	for len(b) > n {
		out = append(out, b[:n])
		b = b[n:]
	}
	return append(out, b)
}
