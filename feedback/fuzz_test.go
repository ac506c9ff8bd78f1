package feedback

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"unicode/utf8"
)

// Run a fuzzer with a short minimization budget, e.g.
//
//	go test -run=NONE -fuzz='^FuzzSSE$' -fuzztime=20s -fuzzminimizetime=3s ./feedback/
//
// With the default 60 s budget, minimizing one new input of a few hundred
// bytes can use the whole of a short run, during which no new inputs are
// tried.

// FuzzSSE feeds arbitrary bytes to a Meter of each dialect. Invariants: no
// panic; the Result is the same whether the input is written whole, split
// at any point, or in chunks of 1 to 7 bytes; the framer agrees with the naive
// reference framer; MeterJSON does not panic on the same bytes.
func FuzzSSE(f *testing.F) {
	for _, g := range goldens() {
		b, err := readFileBytes(g.file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(g.dialect), uint16(len(b)/2))
	}
	f.Fuzz(func(t *testing.T, data []byte, dialect uint8, split uint16) {
		if len(data) > 4<<10 {
			// Large inputs add time (and slow minimization), not coverage.
			t.Skip()
		}
		d := Dialect(dialect%3 + 1)
		whole := meterChunks(d, t0, data)
		k := int(split) % (len(data) + 1)
		if got := meterChunks(d, t0, data[:k], data[k:]); got != whole {
			t.Fatalf("split at %d:\n got %+v\nwant %+v", k, got, whole)
		}
		n := int(split)%7 + 1
		if got := meterChunks(d, t0, chunk(data, n)...); got != whole {
			t.Fatalf("chunks of %d:\n got %+v\nwant %+v", n, got, whole)
		}
		if got, want := frame(data), refFrame(data); !reflect.DeepEqual(got, want) {
			t.Fatalf("framer disagrees with reference:\n got %v\nwant %v", got, want)
		}
		var m Meter
		m.Reset(d, t0)
		m.MeterJSON(data, t0)
		_ = m.Result()
	})
}

func readFileBytes(name string) ([]byte, error) {
	return os.ReadFile(filepath.Join("testdata", name))
}

// FuzzInspectRequest checks that no body panics and that, for any valid JSON
// object, the facts match what encoding/json reads from the same
// top-level members (last occurrence wins).
func FuzzInspectRequest(f *testing.F) {
	f.Add([]byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"stream":true}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		got := InspectRequest(body)
		if got.PromptTokens < 0 || got.MaxTokens < 0 {
			t.Fatalf("negative: %+v", got)
		}
		if !json.Valid(body) {
			return
		}
		want, ok := oracleRequest(body)
		if !ok {
			return
		}
		if got != want {
			t.Fatalf("body %q\n got %+v\nwant %+v", body, got, want)
		}
	})
}

// oracleRequest computes Request with encoding/json. ok is false when the
// body is not an object or holds values whose reading is documented to
// differ (non-integer max token numbers, invalid UTF-8 in the model).
func oracleRequest(body []byte) (r Request, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return r, false
	}
	var maxes [3]int
	prompt := 0
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return r, false
		}
		key := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return r, false
		}
		switch key {
		case "model":
			var s string
			r.Model = ""
			if json.Unmarshal(raw, &s) == nil {
				if !utf8.Valid(raw) {
					return r, false
				}
				r.Model = s
			}
		case "stream":
			r.Stream = string(raw) == "true"
		case "max_tokens", "max_completion_tokens", "max_output_tokens":
			i := map[string]int{"max_tokens": 0, "max_completion_tokens": 1, "max_output_tokens": 2}[key]
			if bytes.ContainsAny(raw, ".eE") && raw[0] != '"' && raw[0] != '{' && raw[0] != '[' {
				return r, false
			}
			var n int64
			switch err := json.Unmarshal(raw, &n); {
			case err == nil:
				maxes[i] = int(min(max(n, 0), maxCount))
			case raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'):
				return r, false // out of int64 range
			default:
				maxes[i] = 0
			}
		case "stream_options":
			var so map[string]json.RawMessage
			r.IncludeUsage = false
			if json.Unmarshal(raw, &so) == nil && so != nil {
				r.IncludeUsage = string(so["include_usage"]) == "true"
			}
		case "messages", "input", "system", "prompt", "instructions", "tools":
			prompt += len(raw)
		}
	}
	r.MaxTokens = max(maxes[0], maxes[1], maxes[2])
	r.PromptTokens = ceilDiv4(prompt)
	return r, true
}

// FuzzClassifyError checks that no body panics, that the class is a
// parsed one (never ErrTimeout), and that the unambiguous statuses win.
func FuzzClassifyError(f *testing.F) {
	f.Add(429, []byte(`{"error":{"type":"insufficient_quota"}}`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		c := ClassifyError(status, body)
		if c > ErrOther || c == ErrTimeout {
			t.Fatalf("class %d", c)
		}
		fixed := map[int]ErrorClass{529: ErrOverloaded, 400: ErrInvalidRequest, 413: ErrInvalidRequest,
			422: ErrInvalidRequest, 401: ErrAuth, 403: ErrAuth, 404: ErrNotFound}
		if want, ok := fixed[status]; ok && c != want {
			t.Fatalf("status %d: %v", status, c)
		}
		switch status {
		case 429:
			if c != ErrRateLimit && c != ErrInsufficientQuota && c != ErrOverloaded {
				t.Fatalf("429: %v", c)
			}
		case 503:
			if c != ErrOverloaded && c != ErrUnavailable {
				t.Fatalf("503: %v", c)
			}
		}
	})
}
