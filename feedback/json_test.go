package feedback

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestSkipValue(t *testing.T) {
	cases := []struct {
		in   string
		want int // index after the value, -1 for none
	}{
		{`"abc" x`, 5},
		{`"a\"b"`, 6},
		{`"a\\"b`, 5},
		{`"a\\\"b"`, 8},
		{`"unterminated`, -1},
		{`"ends in backslash\"`, -1},
		{`{"a":[1,{"b":"}"}]} x`, 19},
		{`[[[[]]]]`, 8},
		{`[1,2`, -1},
		{`123,`, 3},
		{`true}`, 4},
		{`-1.5e3]`, 6},
		{`}`, -1},
		{``, -1},
	}
	// Strings past the short-string loop, with escapes on both sides of
	// it and runs of backslashes before quotes.
	long := strings.Repeat("a", 40)
	for _, body := range []string{
		long, long + `\"` + long, `\\` + long + `\\\\`, long[:31] + `\"`, long[:30] + `\\`, long[:31] + `\\`,
		strings.Repeat(`\"`, 50), strings.Repeat(`\\`, 50), long + strings.Repeat(`\\\"`, 20) + long,
	} {
		in := `"` + body + `" tail`
		cases = append(cases, struct {
			in   string
			want int
		}{in, len(in) - len(" tail")})
		cases = append(cases, struct {
			in   string
			want int
		}{`"` + body, -1})
	}
	for _, tc := range cases {
		if got := skipValue([]byte(tc.in), 0); got != tc.want {
			t.Errorf("skipValue(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestCursorWalk(t *testing.T) {
	in := ` { "a" : 1 , "b":{"x":[1,"]",{"y":null}]}, "c" : "s\"t", "d":[true,false] , "e\u0066":2 } tail`
	c, ok := openObject([]byte(in), 0)
	if !ok {
		t.Fatal("open")
	}
	var keys []string
	for c.next(nil) {
		k := c.key()
		keys = append(keys, string(k))
		switch string(k) {
		case "a":
			if n, ok := c.int(); !ok || n != 1 {
				t.Fatalf("a = %d %v", n, ok)
			}
		case "c":
			if s, ok := c.str(); !ok || string(s) != `s\"t` {
				t.Fatalf("c = %q", s)
			}
		case "d":
			var n int
			arr := c.elements()
			for arr.nextElem(&c) {
				n++
			}
			if n != 2 {
				t.Fatalf("d has %d elements", n)
			}
		}
	}
	if c.state != curEnd || in[c.i:] != " tail" {
		t.Fatalf("state %d at %q", c.state, in[c.i:])
	}
	if got := strings.Join(keys, ","); got != "a,b,c,d,ef" {
		t.Fatalf("keys %s", got)
	}
}

// TestCursorMembers checks the walks nested with members and elements:
// a walk that reaches its end moves the parent past the child (without a
// second scan), one that stops early leaves the parent at the child to
// skip it, and a value of the other kind yields nothing and stays
// unconsumed.
func TestCursorMembers(t *testing.T) {
	in := `{"o":{"a":1,"b":{"x":2}},"arr":[{"k":"v"},3,{"k":"w"}],"s":"str","stop":{"a":1,"b":2},"n":7}`
	c, _ := openObject([]byte(in), 0)
	var got []string
	for c.next(nil) {
		switch k := string(c.key()); k {
		case "o":
			o := c.members()
			for o.next(&c) {
				got = append(got, "o."+string(o.key()))
			}
			if c.state != curAfter {
				t.Fatalf("after a complete walk of o the parent is in state %d", c.state)
			}
		case "arr":
			a := c.elements()
			for a.nextElem(&c) {
				o := a.members()
				for o.next(&a) {
					s, _ := o.str()
					got = append(got, "arr.k="+string(s))
				}
			}
			if c.state != curAfter {
				t.Fatalf("after a complete walk of arr the parent is in state %d", c.state)
			}
		case "s":
			o := c.members()
			for o.next(&c) {
				t.Fatalf("a string yielded member %q", o.key())
			}
			if s, ok := c.str(); !ok || string(s) != "str" {
				t.Fatalf("the string was consumed by members: %q %v", s, ok)
			}
		case "stop":
			o := c.members()
			for o.next(&c) {
				got = append(got, "stop."+string(o.key()))
				break
			}
			if c.state != curValue {
				t.Fatalf("after a break the parent is in state %d, want at the value", c.state)
			}
		case "n":
			n, _ := c.int()
			got = append(got, fmt.Sprint("n=", n))
		}
	}
	if c.state != curEnd {
		t.Fatalf("state %d at the end", c.state)
	}
	want := "o.a,o.b,arr.k=v,arr.k=w,stop.a,n=7"
	if g := strings.Join(got, ","); g != want {
		t.Fatalf("walk %s, want %s", g, want)
	}
}

func TestCursorMalformed(t *testing.T) {
	for _, in := range []string{
		`{`, `{"a"`, `{"a":`, `{"a":1`, `{"a":1,`, `{"a" 1}`, `{1:2}`, `{"a":1 "b":2}`, `{"a":"`, `{"a\`,
	} {
		c, ok := openObject([]byte(in), 0)
		if !ok {
			t.Fatalf("open %q", in)
		}
		for n := 0; ; n++ {
			if !c.next(nil) {
				break
			}
			if n > 10 {
				t.Fatalf("%q: no end", in)
			}
		}
		if c.state != curBad {
			t.Errorf("%q: state %d, want bad", in, c.state)
		}
	}
}

func TestUnescapeMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{
		`plain`, `a\"b`, `\\`, `\/`, `\b\f\n\r\t`, `\u0041\u00e9\u263a`,
		`\ud83d\ude00`, `\ud83d`, `\ud83dx`, `\ude00`, `\ud83d\u0041`, `\ud83d\ud83d\ude00`,
	} {
		var want string
		if err := json.Unmarshal([]byte(`"`+s+`"`), &want); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		buf := make([]byte, 64)
		n, ok := unescapeInto(buf, []byte(s))
		if !ok || string(buf[:n]) != want {
			t.Errorf("unescape(%q) = %q %v, want %q", s, buf[:n], ok, want)
		}
	}
	for _, bad := range []string{`\`, `\x`, `\u12`, `\u12g4`} {
		if _, ok := unescapeInto(make([]byte, 64), []byte(bad)); ok {
			t.Errorf("unescape(%q) accepted", bad)
		}
	}
	if _, ok := unescapeInto(make([]byte, 2), []byte(`abc`)); ok {
		t.Error("overflow accepted")
	}
	if _, ok := unescapeInto(make([]byte, 2), []byte(`\u263a`)); ok {
		t.Error("rune overflow accepted")
	}
}

// TestStopAt checks the word-at-a-time scan against a byte loop, with bytes
// chosen to provoke borrow false positives (0x21, 0x23, 0x5b, 0x5d, 0x00,
// 0x80...).
func TestStopAt(t *testing.T) {
	alphabet := []byte{'"', '\\', 0x21, 0x23, 0x5b, 0x5d, 0x00, 0x01, 0x80, 0xa2, 0xdc, 0xff, 'a', ' '}
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 20000; n++ {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			if rng.IntN(4) == 0 {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			} else {
				b[i] = alphabet[2+rng.IntN(len(alphabet)-2)]
			}
		}
		i := rng.IntN(len(b) + 1)
		e := i + rng.IntN(len(b)-i+1)
		want := i
		for want < e && b[want] != '"' && b[want] != '\\' {
			want++
		}
		if got := stopAt(b, i, e); got != want {
			t.Fatalf("stopAt(%q, %d, %d) = %d, want %d", b, i, e, got, want)
		}
	}
}
