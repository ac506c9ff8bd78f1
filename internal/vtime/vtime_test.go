package vtime

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// Events run in time order, ties in the order they were scheduled, and
// nothing at or after the end runs.
func TestLoopOrder(t *testing.T) {
	t.Parallel()
	var l Loop
	var got []string
	l.Schedule(2*time.Second, func() { got = append(got, "b") })
	l.Schedule(time.Second, func() {
		got = append(got, "a")
		l.Schedule(2*time.Second, func() { got = append(got, "c") })
	})
	l.Schedule(3*time.Second, func() { got = append(got, "end") })
	for {
		fn, ok := l.Next(3 * time.Second)
		if !ok {
			break
		}
		fn()
	}
	if s := strings.Join(got, ""); s != "abc" {
		t.Fatalf("ran %q, want abc", s)
	}
	if l.Elapsed() != 2*time.Second || !l.Now().Equal(Epoch.Add(2*time.Second)) {
		t.Fatalf("time after the run = %v, want the last event's (2s)", l.Elapsed())
	}
}

func TestClockTick(t *testing.T) {
	t.Parallel()
	c := NewClock()
	c.Advance(time.Second)
	if got := c.Now(); !got.Equal(Epoch.Add(time.Second)) {
		t.Fatalf("Now = %v, want Epoch+1s", got)
	}
	c.Tick = time.Millisecond
	c.Now()
	if got := c.Elapsed(); got != time.Second+time.Millisecond {
		t.Fatalf("Elapsed = %v, want 1.001s after one Now with a 1ms tick", got)
	}
}

func TestLognormalClamp(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	d := Lognormal{Mean: 100, Sigma: 2, Max: 300}
	sum := 0
	for range 10000 {
		n := d.Draw(r)
		if n < 1 || n > 300 {
			t.Fatalf("Draw = %d, outside [1, 300]", n)
		}
		sum += n
	}
	if mean := float64(sum) / 10000; mean < 30 || mean > 100 {
		t.Fatalf("mean of clamped draws = %.1f, want below the unclamped mean 100 and well above 1", mean)
	}
}
