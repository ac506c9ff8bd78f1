package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestDemoFlags checks the demo's argument handling; the demo itself is
// tested in bench/demo.
func TestDemoFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want int
		msg  string // expected on stderr
	}{
		{[]string{"-bogus"}, 2, "flag provided but not defined"},
		{[]string{"extra"}, 2, "unexpected arguments"},
		{[]string{"-duration", "1s"}, 1, "at least 5s"},
		{[]string{"-h"}, 0, "usage: sluice-bench demo"},
	} {
		var stdout, stderr bytes.Buffer
		if got := dispatch(context.Background(), append([]string{"demo"}, tc.args...), &stdout, &stderr); got != tc.want {
			t.Errorf("demo %v: exit %d, want %d", tc.args, got, tc.want)
		}
		if !strings.Contains(stderr.String(), tc.msg) {
			t.Errorf("demo %v: stderr %q lacks %q", tc.args, stderr.String(), tc.msg)
		}
	}
}
