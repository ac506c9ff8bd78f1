package adaptive

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/feedback"
)

// answerGolden is the answer table as text, one line per failure, status
// class and error class: what the controller, the breaker and the retry
// policy make of each answer. Changing a decision changes this file, so a
// review sees every cell that moved.
const answerGolden = "testdata/answers.golden"

var updateAnswers = flag.Bool("update-answers", false, "rewrite "+answerGolden+" from the answer table")

// statusExamples are statuses of each status class, all of which must get
// the same row.
var statusExamples = [...][]int{
	StatusNone:        {0},
	StatusSuccess:     {200, 201, 204, 299},
	StatusRateLimited: {429},
	StatusUnavailable: {503},
	StatusOverloaded:  {529},
	StatusServerError: {500, 501, 502, 504, 520, 599},
	StatusOther:       {100, 101, 199, 300, 301, 304, 399, 400, 401, 403, 404, 408, 409, 413, 422, 451, 499, 600, 999},
	// With the provider's rate-limit headers (AttemptResult.RateLimitHeaders).
	StatusAccountLimited: {429},
}

// goldenLine renders one row of the table for answers.golden.
func goldenLine(f AttemptFailure, s StatusClass, c feedback.ErrorClass, m Meaning) string {
	ctl := m.Controller.Kind.String()
	if m.Controller.Kind == OutcomeDrop {
		ctl += ":" + m.Controller.Drop.String()
	}
	cls := c.String()
	if cls == "" {
		cls = "none"
	}
	return fmt.Sprintf("%-9s %-13s %-18s controller=%-27s breaker=%-7s busy=%-5t retry=%-9s failed=%-5t refund=%-5t client=%s",
		f, s, cls, ctl, m.Breaker, m.Busy, m.Retry, m.Failed, m.QuotaRefund, m.Client)
}

// TestAnswerTableGolden checks every cell of the answer table against
// answers.golden, and that every status of a status class gets its
// class's row.
func TestAnswerTableGolden(t *testing.T) {
	var b strings.Builder
	for f := range numAttemptFailures {
		for s := range numStatusClasses {
			for c := range feedback.NumErrorClasses {
				hdrs := s == StatusAccountLimited
				m := MeaningOf(AttemptResult{Failure: f, Status: statusExamples[s][0], Class: c, RateLimitHeaders: hdrs})
				for _, st := range statusExamples[s][1:] {
					if o := MeaningOf(AttemptResult{Failure: f, Status: st, Class: c, RateLimitHeaders: hdrs}); o != m {
						t.Errorf("%v %d %v: %+v, but %d of the same class: %+v", f, st, c, o, statusExamples[s][0], m)
					}
				}
				b.WriteString(goldenLine(f, s, c, m))
				b.WriteByte('\n')
			}
		}
	}
	if *updateAnswers {
		if err := os.WriteFile(answerGolden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(answerGolden)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(b.String(), "\n")
	for i, w := range strings.Split(string(want), "\n") {
		if i >= len(got) || got[i] != w {
			g := ""
			if i < len(got) {
				g = got[i]
			}
			t.Errorf("answers.golden line %d:\n got  %s\n want %s", i+1, g, w)
		}
	}
	if len(got) != len(strings.Split(string(want), "\n")) {
		t.Errorf("answer table has %d lines, answers.golden %d (run with -update-answers after a deliberate change)", len(got), len(strings.Split(string(want), "\n")))
	}
}
