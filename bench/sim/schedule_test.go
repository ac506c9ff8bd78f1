package sim

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseSchedule(t *testing.T) {
	steps, err := ParseSchedule(" 40, 40@120s,20@60s ")
	if err != nil {
		t.Fatal(err)
	}
	want := []Step{{0, 40}, {60 * time.Second, 20}, {120 * time.Second, 40}}
	if len(steps) != 3 || steps[0] != want[0] || steps[1] != want[1] || steps[2] != want[2] {
		t.Errorf("got %v, want %v", steps, want)
	}
	if got := FormatSchedule(steps); got != "40,20@1m0s,40@2m0s" {
		t.Errorf("FormatSchedule = %q", got)
	}
	for _, bad := range []string{"", "x", "-1", "40@-1s", "40@soon", "40,20@0s", "40@1s,1@1s"} {
		if _, err := ParseSchedule(bad); err == nil {
			t.Errorf("ParseSchedule(%q): no error", bad)
		}
	}
}

// TestScheduleClock: with a custom clock the schedule follows it (lazily,
// at each Stats/Capacity/arrival), scaled by TimeScale.
func TestScheduleClock(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Unix(1_700_000_000, 0).UnixNano())
	s := New(Config{
		Schedule:  []Step{{0, 40}, {60 * time.Second, 20}, {120 * time.Second, 40}},
		TimeScale: 0.1,
		Clock:     func() time.Time { return time.Unix(0, now.Load()) },
	})
	defer s.Close()
	advance := func(d time.Duration) { now.Add(int64(d)) }
	for _, tc := range []struct {
		advance time.Duration
		want    int
	}{{0, 40}, {5999 * time.Millisecond, 40}, {time.Millisecond, 20}, {6 * time.Second, 40}, {time.Hour, 40}} {
		advance(tc.advance)
		if got := s.Capacity(); got != tc.want {
			t.Errorf("after +%v: capacity %d, want %d", tc.advance, got, tc.want)
		}
	}
	s.SetCapacity(7)
	if got := s.Stats().Capacity; got != 7 {
		t.Errorf("SetCapacity: %d", got)
	}
	s.SetSchedule([]Step{{0, 1}, {10 * time.Second, 2}})
	advance(time.Second)
	if got := s.Capacity(); got != 2 {
		t.Errorf("SetSchedule is relative to its call: %d", got)
	}
}

// TestScheduleStepAdmitsQueued: a capacity rise from the schedule admits
// queued requests at the step, without waiting for a completion.
func TestScheduleStepAdmitsQueued(t *testing.T) {
	cfg := fast()
	cfg.TimeScale = 1
	cfg.Schedule = []Step{{0, 1}, {80 * time.Millisecond, 3}}
	cfg.OverloadFactor = 10
	h := start(t, cfg, false)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			resp, err := h.post(context.Background(), "/v1/chat/completions", `{"stream":true}`, HeaderTTFT, "1000h")
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body) // until Close cuts it
			resp.Body.Close()
		})
	}
	h.waitStats("1 running, 2 queued", func(st Stats) bool { return st.Running+st.Queued == 3 })
	st := h.waitStats("3 running after the step", func(st Stats) bool { return st.Running == 3 })
	if st.Capacity != 3 || st.Completed != 0 {
		t.Errorf("stats %+v", st)
	}
	_ = h.s.Close()
	wg.Wait()
}

// TestDeterministicOutputs: the same seed gives the same output lengths
// for a sequential client; lengths follow the configured distribution.
func TestDeterministicOutputs(t *testing.T) {
	lengths := func(seed uint64) []int {
		cfg := fast()
		cfg.Seed = seed
		cfg.MeanOutputTokens = 20
		cfg.MaxOutputTokens = 40
		cfg.ITL = -1
		cfg.BaseTTFT = -1
		h := start(t, cfg, false)
		var out []int
		for range 30 {
			resp := h.mustPost("/v1/chat/completions", `{}`)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			n := path(decode(t, sseEvent{data: string(b)}), "usage", "completion_tokens").(float64)
			out = append(out, int(n))
		}
		return out
	}
	a, b, c := lengths(5), lengths(5), lengths(6)
	if !equal(a, b) {
		t.Errorf("same seed, different lengths:\n%v\n%v", a, b)
	}
	if equal(a, c) {
		t.Errorf("different seeds, same lengths: %v", a)
	}
	sum := 0
	for _, n := range a {
		if n < 1 || n > 40 {
			t.Errorf("length %d out of [1,40]", n)
		}
		sum += n
	}
	if mean := float64(sum) / float64(len(a)); mean < 12 || mean > 28 {
		t.Errorf("mean length %.1f, want ~20", mean)
	}
}
