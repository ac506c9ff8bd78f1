package sim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ParseSchedule parses a capacity schedule such as "40,20@60s,40@120s":
// comma-separated CAPACITY[@AT] items, where AT is a Go duration in model time
// (an item without @ starts at 0). Whitespace around items is ignored. The
// result is sorted by At; two steps at the same At are an error.
func ParseSchedule(s string) ([]Step, error) {
	var steps []Step
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		capStr, atStr, hasAt := strings.Cut(item, "@")
		c, err := strconv.Atoi(strings.TrimSpace(capStr))
		if err != nil || c < 0 {
			return nil, fmt.Errorf("schedule item %q: capacity must be a non-negative integer", item)
		}
		var at time.Duration
		if hasAt {
			at, err = time.ParseDuration(strings.TrimSpace(atStr))
			if err != nil || at < 0 {
				return nil, fmt.Errorf("schedule item %q: bad time: want a non-negative Go duration like 60s", item)
			}
		}
		steps = append(steps, Step{At: at, Capacity: c})
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("schedule %q: no steps", s)
	}
	steps = sortedSteps(steps)
	for i := 1; i < len(steps); i++ {
		if steps[i].At == steps[i-1].At {
			return nil, fmt.Errorf("schedule %q: two steps at %v", s, steps[i].At)
		}
	}
	return steps, nil
}

// FormatSchedule is the inverse of ParseSchedule.
func FormatSchedule(steps []Step) string {
	var b strings.Builder
	for i, st := range steps {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(st.Capacity))
		if st.At != 0 {
			b.WriteByte('@')
			b.WriteString(st.At.String())
		}
	}
	return b.String()
}

// sortedSteps returns a sorted copy with negative capacities clamped to 0.
func sortedSteps(steps []Step) []Step {
	out := slices.Clone(steps)
	for i := range out {
		out[i].Capacity = max(0, out[i].Capacity)
	}
	slices.SortStableFunc(out, func(a, b Step) int {
		switch {
		case a.At < b.At:
			return -1
		case a.At > b.At:
			return 1
		}
		return 0
	})
	return out
}

// stepAt returns the index of the step in force at model time t (the last
// step with At <= t, or 0 before the first step). steps must be non-empty
// and sorted.
func stepAt(steps []Step, t time.Duration) int {
	i := 0
	for j := 1; j < len(steps); j++ {
		if steps[j].At <= t {
			i = j
		}
	}
	return i
}
