package cluster

import (
	"testing"
	"time"
)

// A flat hash from Redis may hold entries another build wrote or a broken
// write left: they are skipped, the good ones read.
func TestParseFlatHashesSkipMalformed(t *testing.T) {
	d := parseDemand([]any{
		"a", "3 1 50 40",
		"b", "3 1 50", // too few fields
		"c", "3 -1 50 40", // negative
		"", "1 1 1 1", // no id
		"e", "x 1 50 40", // not a number
		"g", "3 1 50 40",
		"f", // no value
	}, []any{
		"a", "20",
		"b", "20", // its demand was skipped
		"g", "-3", // negative: as if not said
	})
	if len(d) != 2 || d["a"] != (demand{id: "a", inflight: 3, waiting: 1, ceiling: 50, cap: 40, own: 20}) ||
		d["g"] != (demand{id: "g", inflight: 3, waiting: 1, ceiling: 50, cap: 40, own: -1}) {
		t.Fatalf("parseDemand = %+v, want a with its limit and g without", d)
	}
	b := parseBaselines([]any{
		"a", "250000000 50000000 12.5 25 40",
		"b", "250000000 50000000 12.5 25", // too few fields
		"c", "250000000 x 12.5 25 40",
		7, "250000000 50000000 12.5 25 40", // id not a string
	})
	if len(b) != 1 || b["a"].TTFT != 250*time.Millisecond || b["a"].Samples != 40 || b["a"].Load != 12.5 {
		t.Fatalf("parseBaselines = %+v, want only a", b)
	}
}
