package sim

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"
)

// TestClosedLoopLoad drives 3C closed-loop clients (streams and non-streams,
// all three dialects) for a short while against the default model, 20x
// faster than real time: capacity is never exceeded, overload is rejected
// with the dialect's status, and every request is counted once.
func TestClosedLoopLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	const c = 8
	cfg := Config{Schedule: []Step{{Capacity: c}}, TimeScale: 0.05, Seed: 3, MeanOutputTokens: 40}
	h := start(t, cfg, false)
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	paths := []string{"/v1/chat/completions", "/v1/messages", "/v1/responses"}
	bodies := []string{`{"stream":true,"max_tokens":60}`, `{"max_tokens":60}`}
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for i := range 3 * c {
		wg.Go(func() {
			for j := 0; ctx.Err() == nil; j++ {
				resp, err := h.post(context.Background(), paths[(i+j)%3], bodies[(i+j)%2])
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				statuses[resp.StatusCode]++
				mu.Unlock()
				if resp.StatusCode != 200 {
					time.Sleep(2 * time.Millisecond) // back off a little; spare the CPU
				}
			}
		})
	}
	wg.Wait()
	st := h.s.Stats()
	t.Logf("statuses %v stats %+v", statuses, st)
	if st.MaxRunning != c || st.MaxInFlight > c*3/2 {
		t.Errorf("MaxRunning %d (want %d), MaxInFlight %d (want <= %d)", st.MaxRunning, c, st.MaxInFlight, c*3/2)
	}
	if statuses[200] == 0 || statuses[429] == 0 || statuses[529] == 0 {
		t.Errorf("want 200s, 429s and 529s: %v", statuses)
	}
	if uint64(statuses[200]) != st.Completed || uint64(statuses[429]) != st.Rejected429 || uint64(statuses[529]) != st.Rejected529 {
		t.Errorf("client saw %v, server counted %+v", statuses, st)
	}
	if st.Open != 0 || st.Running != 0 || st.Queued != 0 {
		t.Errorf("left over: %+v", st)
	}
}
