package main

import "testing"

// TestDemoFlags checks the demo's argument handling; the demo itself is
// tested in bench/demo.
func TestDemoFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"-bogus"}, 2},
		{[]string{"extra"}, 2},
		{[]string{"-duration", "1s"}, 1}, // below the 5 s minimum
		{[]string{"-h"}, 0},
	} {
		if got := demo(tc.args); got != tc.want {
			t.Errorf("demo %v: exit %d, want %d", tc.args, got, tc.want)
		}
	}
}
