package admin

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/proxy"
)

// NewTracerProvider: none unless configured; the config block overrides
// OTEL_TRACES_EXPORTER.
func TestNewTracerProviderSelection(t *testing.T) {
	unset := config.Tracing{SampleRatio: config.SampleRatioUnset}
	cases := []struct {
		env    string
		cfg    config.Tracing
		wantOn bool
	}{
		{"", unset, false},
		{"none", unset, false},
		{"console", unset, true},
		{"console", config.Tracing{Exporter: "none", SampleRatio: config.SampleRatioUnset}, false},
		{"", config.Tracing{Exporter: "console", SampleRatio: 0.5}, true},
	}
	for _, tc := range cases {
		t.Setenv("OTEL_TRACES_EXPORTER", tc.env)
		tp, shutdown, err := NewTracerProvider(context.Background(), tc.cfg, "test")
		if err != nil {
			t.Fatalf("env %q cfg %+v: %v", tc.env, tc.cfg, err)
		}
		if (tp != nil) != tc.wantOn {
			t.Errorf("env %q cfg %+v: provider %v, want on=%v", tc.env, tc.cfg, tp, tc.wantOn)
		}
		if _, ok := tp.(*proxy.TracerProvider); tc.wantOn && !ok {
			t.Errorf("env %q cfg %+v: provider is a %T, not a *proxy.TracerProvider", tc.env, tc.cfg, tp)
		}
		if err := shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "bogus")
	if _, _, err := NewTracerProvider(context.Background(), unset, "test"); err == nil {
		t.Error("unknown OTEL_TRACES_EXPORTER accepted")
	}
}

func TestSamplerFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name, arg string
		want      string // sampler description; "" = error
	}{
		{"", "", "ParentBased{root:AlwaysOnSampler"},
		{"always_off", "", "AlwaysOffSampler"},
		{"traceidratio", "0.5", "TraceIDRatioBased{0.5}"},
		{"parentbased_traceidratio", "0.01", "ParentBased{root:TraceIDRatioBased{0.01}"},
		{"parentbased_traceidratio", "2", ""},
		{"jaeger_remote", "", ""},
	} {
		t.Setenv("OTEL_TRACES_SAMPLER", tc.name)
		t.Setenv("OTEL_TRACES_SAMPLER_ARG", tc.arg)
		s, err := samplerFromEnv()
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%s=%s: no error", tc.name, tc.arg)
		case tc.want != "" && (err != nil || !strings.HasPrefix(s.Description(), tc.want)):
			t.Errorf("%s=%s: %v, %v; want %s", tc.name, tc.arg, s, err, tc.want)
		}
	}
}
