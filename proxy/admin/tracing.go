package admin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/proxy"
)

// noneExporter marks "no exporter configured" (OTEL_TRACES_EXPORTER unset).
type noneExporter struct{ sdktrace.SpanExporter }

// NewTracerProvider builds the tracer provider from the standard OTEL_*
// environment variables, overridden by the config's tracing block:
//
//   - exporter: cfg.Exporter if set, else OTEL_TRACES_EXPORTER (otlp,
//     console, none); "none" when neither is set. otlp honours
//     OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL (http/protobuf by default, grpc),
//     OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, _HEADERS, _TIMEOUT, ...;
//   - sampler: parent-based TraceIDRatio(cfg.SampleRatio) if set, else
//     OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG, else parent-based
//     always-on (jaeger_remote and xray are not supported);
//   - resource: service.name "sluice" and service.version, then
//     OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES;
//   - OTEL_SDK_DISABLED=true turns tracing off.
//
// With no exporter it returns a nil provider: the request path then does no
// span work at all, and a client's traceparent is forwarded unchanged.
// Otherwise the provider is a *proxy.TracerProvider, whose sampler the
// request path asks itself.
// shutdown flushes and stops the exporter; it is never nil.
func NewTracerProvider(ctx context.Context, cfg config.Tracing, version string) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	shutdown = func(context.Context) error { return nil }
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, shutdown, nil
	}
	var exp sdktrace.SpanExporter
	console := false
	switch cfg.Exporter {
	case "none":
		return nil, shutdown, nil
	case "console":
		exp, err = stdouttrace.New()
		console = true
	case "otlp":
		exp, err = newOTLPExporter(ctx)
	case "":
		exp, err = autoexport.NewSpanExporter(ctx, autoexport.WithFallbackSpanExporter(
			func(context.Context) (sdktrace.SpanExporter, error) { return noneExporter{}, nil }))
		if err == nil && (autoexport.IsNoneSpanExporter(exp) || isNoneExporter(exp)) {
			return nil, shutdown, nil
		}
		console = strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")) == "console"
	default:
		return nil, shutdown, fmt.Errorf("tracing: unknown exporter %q", cfg.Exporter)
	}
	if err != nil {
		return nil, shutdown, fmt.Errorf("tracing: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(
			attribute.String("service.name", "sluice"),
			attribute.String("service.version", version),
		),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil && res == nil {
		return nil, shutdown, fmt.Errorf("tracing: resource: %w", err)
	}
	sampler, err := samplerFromEnv()
	if err != nil {
		return nil, shutdown, fmt.Errorf("tracing: %w", err)
	}
	if r := cfg.SampleRatio; r != config.SampleRatioUnset {
		sampler = sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r))
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if console {
		// The console exporter is for looking at spans by hand: print each
		// span when it ends rather than in batches.
		opts = append(opts, sdktrace.WithSyncer(exp))
	} else {
		// Batched export off the request path; OTEL_BSP_* tune it.
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	p := proxy.NewTracerProvider(sampler, opts...)
	return p, p.Shutdown, nil
}

// samplerFromEnv is the SDK's reading of OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG (parent-based always-on when unset), repeated here
// because Sluice needs the sampler itself. Unsupported values are errors.
func samplerFromEnv() (sdktrace.Sampler, error) {
	name := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER")))
	arg := strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER_ARG"))
	ratio := func() (sdktrace.Sampler, error) {
		if arg == "" {
			return sdktrace.TraceIDRatioBased(1), nil
		}
		v, err := strconv.ParseFloat(arg, 64)
		if err != nil || !(v >= 0 && v <= 1) {
			return nil, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG must be a ratio between 0 and 1, got %q", arg)
		}
		return sdktrace.TraceIDRatioBased(v), nil
	}
	switch name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return ratio()
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		return sdktrace.ParentBased(r), nil
	}
	return nil, fmt.Errorf("OTEL_TRACES_SAMPLER %q is not supported (always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio)", name)
}

func isNoneExporter(e sdktrace.SpanExporter) bool {
	_, ok := e.(noneExporter)
	return ok
}

// newOTLPExporter picks the OTLP transport as autoexport does.
func newOTLPExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch proto {
	case "", "http/protobuf":
		return otlptracehttp.New(ctx)
	case "grpc":
		return otlptracegrpc.New(ctx)
	}
	return nil, errors.New("OTEL_EXPORTER_OTLP_PROTOCOL must be http/protobuf or grpc, got " + proto)
}
