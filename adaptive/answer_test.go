package adaptive

import (
	"os"
	"testing"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/feedback"
)

// TestAnswerController is the controller's column of the answer table:
// what each answer means to the congestion controller.
func TestAnswerController(t *testing.T) {
	cases := []struct {
		status int
		class  feedback.ErrorClass
		want   OutcomeKind
	}{
		{200, feedback.ErrNone, OutcomeSuccess},
		{201, feedback.ErrNone, OutcomeSuccess},
		{200, feedback.ErrOverloaded, OutcomeDrop}, // overloaded_error mid-stream
		{200, feedback.ErrRateLimit, OutcomeDrop},  // rate limit mid-stream (Responses response.failed)
		{200, feedback.ErrServer, OutcomeIgnore},   // other mid-stream error
		{200, feedback.ErrOther, OutcomeIgnore},
		{200, feedback.ErrInsufficientQuota, OutcomeIgnore},
		{200, feedback.ErrTimeout, OutcomeDrop}, // headers came, first token did not
		{429, feedback.ErrRateLimit, OutcomeDrop},
		{429, feedback.ErrNone, OutcomeDrop},
		{429, feedback.ErrOther, OutcomeDrop},
		{429, feedback.ErrInsufficientQuota, OutcomeIgnore},
		{429, feedback.ErrOverloaded, OutcomeDrop},
		{529, feedback.ErrOverloaded, OutcomeDrop},
		{529, feedback.ErrNone, OutcomeDrop},
		{503, feedback.ErrOverloaded, OutcomeDrop},
		{503, feedback.ErrUnavailable, OutcomeDrop},
		{503, feedback.ErrNone, OutcomeDrop},
		{500, feedback.ErrServer, OutcomeIgnore},
		{502, feedback.ErrServer, OutcomeIgnore},
		{504, feedback.ErrServer, OutcomeIgnore},
		{500, feedback.ErrOverloaded, OutcomeDrop},
		{400, feedback.ErrInvalidRequest, OutcomeIgnore},
		{401, feedback.ErrAuth, OutcomeIgnore},
		{403, feedback.ErrAuth, OutcomeIgnore},
		{404, feedback.ErrNotFound, OutcomeIgnore},
		{413, feedback.ErrInvalidRequest, OutcomeIgnore},
		{422, feedback.ErrInvalidRequest, OutcomeIgnore},
		{0, feedback.ErrTimeout, OutcomeDrop},
		{0, feedback.ErrNone, OutcomeIgnore}, // connect failure
		{0, feedback.ErrOther, OutcomeIgnore},
		{0, feedback.ErrServer, OutcomeIgnore},
		{0, feedback.ErrOverloaded, OutcomeDrop},
		{302, feedback.ErrOther, OutcomeIgnore},
	}
	for _, tc := range cases {
		if got := AnswerMeaning(tc.status, tc.class).Controller.Kind; got != tc.want {
			t.Errorf("AnswerMeaning(%d, %v) = %v, want %v", tc.status, tc.class, got, tc.want)
		}
	}
}

// TestAnswerDropKinds checks the kind of each drop.
func TestAnswerDropKinds(t *testing.T) {
	cases := []struct {
		r    AttemptResult
		want control.DropKind
	}{
		{AttemptResult{Failure: AttemptTimeout, Class: feedback.ErrTimeout}, control.DropTimeout},
		{AttemptResult{Status: 200, Class: feedback.ErrTimeout}, control.DropTimeout},
		{AttemptResult{Status: 429, Class: feedback.ErrRateLimit}, control.DropRateLimit},
		{AttemptResult{Status: 429, Class: feedback.ErrOverloaded}, control.DropRateLimit},
		{AttemptResult{Status: 200, Class: feedback.ErrRateLimit}, control.DropRateLimit},
		{AttemptResult{Status: 503, Class: feedback.ErrRateLimit}, control.DropRateLimit},
		{AttemptResult{Status: 529, Class: feedback.ErrNone}, control.DropOverloaded},
		{AttemptResult{Status: 503, Class: feedback.ErrOverloaded}, control.DropOverloaded},
		{AttemptResult{Status: 200, Class: feedback.ErrOverloaded}, control.DropOverloaded},
		{AttemptResult{Status: 500, Class: feedback.ErrOverloaded}, control.DropOverloaded},
		{AttemptResult{Status: 503, Class: feedback.ErrUnavailable}, control.DropUnavailable},
		{AttemptResult{Status: 503, Class: feedback.ErrNone}, control.DropUnavailable},
	}
	for _, tc := range cases {
		got := MeaningOf(tc.r).Controller
		if got.Kind != OutcomeDrop || got.Drop != tc.want {
			t.Errorf("%+v: %v %v, want a drop of kind %v", tc.r, got.Kind, got.Drop, tc.want)
		}
	}
}

// TestAnswerClassifyEndToEnd runs recorded error bodies through
// feedback.ClassifyError and the table, as the proxy does.
func TestAnswerClassifyEndToEnd(t *testing.T) {
	cases := []struct {
		status int
		file   string
		want   OutcomeKind
	}{
		{429, "openai_429_rate_limit.json", OutcomeDrop},
		{429, "openai_429_quota.json", OutcomeIgnore},
		{529, "anthropic_529.json", OutcomeDrop},
		{503, "nginx_503.html", OutcomeDrop},
		{500, "openai_500.json", OutcomeIgnore},
		{400, "anthropic_400.json", OutcomeIgnore},
	}
	for _, tc := range cases {
		body, err := os.ReadFile("../feedback/testdata/errors/" + tc.file)
		if err != nil {
			t.Fatal(err)
		}
		if got := AnswerMeaning(tc.status, feedback.ClassifyError(tc.status, body)).Controller.Kind; got != tc.want {
			t.Errorf("%d %s: %v, want %v", tc.status, tc.file, got, tc.want)
		}
	}
}

// TestAnswerHeard checks that only a drop carries the provider's
// Retry-After.
func TestAnswerHeard(t *testing.T) {
	if o := AnswerMeaning(429, feedback.ErrRateLimit).Heard(3e9); o.Kind != OutcomeDrop || o.RetryAfter != 3e9 {
		t.Errorf("429: %+v", o)
	}
	if o := AnswerMeaning(200, feedback.ErrNone).Heard(3e9); o.Kind != OutcomeSuccess || o.RetryAfter != 0 {
		t.Errorf("200: %+v", o)
	}
}

// TestAnswerOutOfRange: a failure or class the table does not know is
// neither success nor drop, and is never retried.
func TestAnswerOutOfRange(t *testing.T) {
	for _, r := range []AttemptResult{{Failure: numAttemptFailures}, {Class: feedback.NumErrorClasses}} {
		m := MeaningOf(r)
		if m.Controller.Kind != OutcomeIgnore || m.Breaker != verdictNeutral || m.Retry != retryNever {
			t.Errorf("%+v: %+v", r, m)
		}
	}
}

func TestMeaningOfNoAllocs(t *testing.T) {
	r := AttemptResult{Status: 429, Class: feedback.ErrRateLimit}
	if n := testing.AllocsPerRun(100, func() { _ = MeaningOf(r) }); n != 0 {
		t.Fatalf("%v allocs", n)
	}
}

// TestDropKindsExhaustive fails when a DropKind is added without its
// metric label.
func TestDropKindsExhaustive(t *testing.T) {
	seen := map[string]bool{}
	for k := control.DropKind(1); k < control.NumDropKinds; k++ {
		if name := k.String(); name == "none" || seen[name] {
			t.Errorf("DropKind %d has no label of its own (%q)", k, name)
		} else {
			seen[name] = true
		}
	}
}

// TestAnswerColumnsExhaustive fails when a failure kind, a status class
// or a column's value has no name (the golden table would not tell them
// apart).
func TestAnswerColumnsExhaustive(t *testing.T) {
	for f := range numAttemptFailures {
		if f.String() == "?" {
			t.Errorf("AttemptFailure %d has no name", f)
		}
	}
	for s := range numStatusClasses {
		if s.String() == "?" {
			t.Errorf("StatusClass %d has no name", s)
		}
	}
	for f := range numAttemptFailures {
		for s := range numStatusClasses {
			for c := range feedback.NumErrorClasses {
				m := answers[f][s][c]
				if m.Controller.Kind.String() == "?" || m.Breaker.String() == "?" || m.Retry.String() == "?" {
					t.Errorf("%v %v %v: a column without a name: %+v", f, s, c, m)
				}
			}
		}
	}
}
