#!/usr/bin/env bash
# Forged class, forged tenant and rotated keys on the wire (issue 27, M1,
# M2, M3): a victim client and an attacker side by side through bin/sluice
# in front of the simulated provider (capacity 8), on loopback, 20 s a run.
#
#   docs/bench/identity.sh SLUICE SLUICE_BENCH before|after
#
# SLUICE is the proxy binary under test, SLUICE_BENCH the simulator and
# load generator (this branch's: it has -rotate-keys). "before" runs the
# configs a binary without clients: understands; "after" adds each run's
# clients: policy. Prints, per run and client: calls OK, calls Sluice
# refused (by reason), calls made.
set -euo pipefail
SLUICE=$1 BENCH=$2 MODE=$3
DUR=${DUR:-20s}
T=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$T"' EXIT
sha() { printf %s "$1" | sha256sum | cut -c1-64; } # what sluice hash-key prints
VICTIM_SHA=$(sha sk-victim)

"$BENCH" sim -listen 127.0.0.1:18081 -capacity 8 -overload -1 >"$T/sim.log" 2>&1 &
sleep 0.5

# run NAME PROVIDER_KEYS CLIENTS_BLOCK: Sluice with that config, then the
# victim (VICTIM: load flags) and the attacker (ATTACKER) at once.
run() {
	local name=$1 clients=$3
	[ "$MODE" = after ] || clients=""
	cat >"$T/sluice.yaml" <<YAML
listen: 127.0.0.1:18080
admin: { listen: "off" }
shutdown: { grace: 0s }
providers:
  - name: sim
    upstream: http://127.0.0.1:18081
    match: { path_prefix: /sim }
    dialect: openai
    limit: { algorithm: fixed, ceiling: 8, initial: 8 }
$2
$clients
YAML
	"$SLUICE" serve -config "$T/sluice.yaml" -log-level error >"$T/sluice.log" 2>&1 &
	local pid=$!
	sleep 0.5
	local common=(-url http://127.0.0.1:18080/sim/v1/chat/completions -duration "$DUR" -sim-headers -prompt 100 -output 40 -timeout 30s -json)
	"$BENCH" load "${common[@]}" "${VICTIM[@]}" >"$T/victim.json" 2>/dev/null &
	local v=$!
	"$BENCH" load "${common[@]}" "${ATTACKER[@]}" >"$T/attacker.json" 2>/dev/null &
	local a=$!
	wait $v $a
	kill $pid
	wait $pid 2>/dev/null || true
	for who in victim attacker; do
		python3 - "$T/$who.json" "$MODE" "$name" "$who" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:6} {sys.argv[3]:14} {sys.argv[4]:8} ok {s['OK']:4}  refused {s['RejectedSluice']:4} {dict(sorted(s['Rejected'].items()))}  calls {s['Requests']}")
PY
	done
}

# M1: the attacker sends every request as interactive; the victim is
# standard. After: unknown keys are capped at the default class.
VICTIM=(-rate 1.5 -header "Authorization: Bearer sk-victim")
ATTACKER=(-clients 32 -think 0 -refusal-pause 50ms -header "Authorization: Bearer sk-attacker" -header "X-Sluice-Class: interactive")
run forged-class "    queue: { max_wait: 2s }" "clients:
  entries:
    - { name: victim, key_sha256: [$VICTIM_SHA] }"

# M2: the victim's tenant is named by a header; the attacker sends the
# same value. After: the header is not trusted (no hop in front sets it),
# and the victim's tenant comes from its clients: entry.
VICTIM=(-rate 1.5 -header "Authorization: Bearer sk-victim" -header "X-Team: victim")
ATTACKER=(-clients 32 -think 0 -refusal-pause 50ms -header "Authorization: Bearer sk-attacker" -header "X-Team: victim")
run forged-tenant "    queue: { max_wait: 2s, tenant_header: X-Team }" "clients:
  entries:
    - { name: victim, key_sha256: [$VICTIM_SHA], tenant: victim }"

# M3: per-client limits of 1 request/s (rate.per_client, 4 keys
# tracked); the attacker sends each request with a new key, short
# requests, so that the table's entries are idle and can be taken. The
# same config before and after: only what eviction forgives differs.
VICTIM=(-rate 0.5 -output 5 -header "Authorization: Bearer sk-victim")
ATTACKER=(-rate 20 -output 5 -rotate-keys)
RATE="    queue: { max_wait: 2s }
    rate: { rpm: 1200, request_window: 1s, per_client: { rpm: 60, max_keys: 4 } }"
run rotated-keys "$RATE" ""
# M3 with clients: the victim is known (its own 1/s), unknown keys share
# the default policy's 1/s.
if [ "$MODE" = after ]; then
	run rotated+clients "$RATE" "clients:
  default: { rpm: 60 }
  entries:
    - { name: victim, key_sha256: [$VICTIM_SHA], rpm: 60 }"
fi
