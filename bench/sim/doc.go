// Package sim is a simulated LLM provider: an HTTP server that speaks the
// OpenAI Chat Completions, OpenAI Responses and Anthropic Messages wire formats
// (see shared/providers.md) and behaves like a provider with a hidden,
// time-varying concurrency capacity. Sluice's demo, scenario benchmarks and
// tests use it as the upstream.
//
// # Model
//
// At most C requests run (decode) at once, where C comes from a capacity
// schedule ([Config.Schedule], [Server.SetCapacity]). Admitted requests beyond
// C wait in a FIFO queue inside the provider, so their time to first token
// (TTFT) grows by the queue wait. When running+queued >= OverloadFactor*C a new
// request is rejected at once: 429 rate_limit_exceeded in the OpenAI dialects,
// 529 overloaded_error in the Anthropic dialect, both with retry-after.
//
// Once a request runs, its first token comes after
//
//	(BaseTTFT + promptTokens/PrefillRate) * lognormal(JitterSigma) * (1 + SoftTTFT*running/C)
//
// and each further token after ITL * (1 + ITLLoad*running/C) * lognormal(ITLJitter),
// with running and C read at the time of each token. The number of output
// tokens is drawn from a lognormal with mean MeanOutputTokens, capped by
// MaxOutputTokens and by the request's max_tokens.
//
// That is the queueing shape ([ShapeQueue], the default). Two other shapes
// ([Config.Shape]) run every admitted request at once, with no queue inside
// the provider, and stretch both formulas' load factors into one slowdown:
//
//	knee:     max(1, running/C)        refused when running >= OverloadFactor*C
//	no-knee:  1 + Rise*running/C       never refused for load
//
// The knee shape is a provider where concurrency beyond C buys only
// latency; the no-knee shape one with room for everything whose latency
// rises gently as its host fills, so completions keep rising with
// concurrency.
//
// # Time
//
// Every duration in [Config] and in x-sim-* request headers is model time.
// Real time is model time multiplied by [Config.TimeScale], so a TimeScale of
// 0.1 runs a scenario ten times faster. Rates scale the other way (a
// RateLimitRPS of 10 allows 100 real requests per second at TimeScale 0.1).
// Response headers that clients act on in real time (retry-after,
// retry-after-ms) carry real time.
//
// # Determinism
//
// Each request draws its random numbers from its own PCG generator seeded with
// (Seed, arrival number), in a fixed order. A single sequential client
// therefore sees the same token counts, TTFT jitter and fault rolls on every
// run; concurrent clients see the same multiset, in arrival order.
//
// # Disconnects
//
// A client that goes away ends its request and frees its slot or queue
// place (counted in Stats.Disconnects). A streaming request notices on its
// next failed write; a silent one (queued, in prefill, non-stream, hanging)
// notices within 25 ms by peeking its socket (TCP and Unix sockets on Unix
// systems; on other connections, such as fasthttputil's in-memory pipes, it
// notices only when it next writes).
//
// # Request headers
//
//	x-sim-prompt-tokens: N     prompt size in tokens (default: body bytes / 4)
//	x-sim-output-tokens: N     exact output length (still capped by max_tokens)
//	x-sim-ttft: 500ms          TTFT once running, replacing the formula (model time)
//	x-sim-itl: 10ms            base inter-token latency for this request (model time)
//	x-sim-fail: KIND           fault: 429, 500, 502, 503, 529, reset-mid-stream, hang
//	x-sim-fail-after: K        for reset-mid-stream: events written before the drop (default 3)
//	x-sim-silent-headers: 1    hold the response headers until the first token
//
// # Endpoints
//
//	POST .../chat/completions  OpenAI Chat Completions
//	POST .../messages          Anthropic Messages
//	POST .../responses         OpenAI Responses
//	GET  /sim/stats            counters as JSON (see [Stats])
//	POST /sim/capacity?c=N     same as [Server.SetCapacity]
//
// Paths are matched by suffix, so a proxy may keep a prefix such as /openai.
package sim
