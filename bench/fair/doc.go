// Package fair runs the fair queue's benchmark scenarios: a simulated
// provider (bench/sim) behind the real Sluice handler (proxy) over
// loopback, driven by several streaming load generators at once
// (bench/load), one per flow (tenant, class, deadline), in real time.
//
//   - batch-flood: interactive traffic alone, and beside a batch flood at
//     five times the provider's capacity, side by side: the interactive
//     queue wait and refusals.
//   - two-tenants: one tenant at ten times its fair share beside one at
//     its fair share; then a tenant sending 20k-token prompts beside one
//     sending 1k-token prompts, fair by tenant and FIFO (one tenant) side
//     by side: throughput and token shares.
//   - early-rejection: a flood whose requests allow 2 s of waiting: how
//     fast Sluice refuses what will not fit, and how the Retry-After it
//     gives compares with the wait a retry at that time really has.
//
// Sluice's side is read from its spans (an in-memory span processor on
// the server spans: class, queue wait, refusal, duration), the clients'
// side from bench/load's records. bench drives Sluice through its public
// API only (proxy.New, Apply, NewFastHTTPServer, Options.TracerProvider).
package fair
