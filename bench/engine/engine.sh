#!/usr/bin/env bash
# The real engine of the benchmark suite (make engine): llama.cpp through
# node-llama-cpp, serving a model with SmolLM2-135M's shapes (bench/engine),
# characterized alone from 1 to 64 users, then measured direct, behind
# Sluice with a fixed limit at its slots, and behind each adaptive
# algorithm, with closed-loop openai-python-like users (sluice-bench load
# -sdk openai). Everything it installs or writes stays under DIR (in the
# ignored bin/); it skips, saying why, where node, npm or the npm registry
# cannot be had.
#
#   bench/engine/engine.sh install DIR     node-llama-cpp, the patch, the model
#   bench/engine/engine.sh suite DIR BIN   the runs; results in DIR/results
set -euo pipefail

cmd=${1:?usage: engine.sh install|suite DIR [BIN]}
dir=${2:?usage: engine.sh install|suite DIR [BIN]}
bin=${3:-bin}
here=$(cd "$(dirname "$0")" && pwd)
NLC_VERSION=3.21.1
PARALLEL=${ENGINE_PARALLEL:-8}
MAX_TOKENS=${ENGINE_MAX_TOKENS:-16}
CHARACTERIZE_USERS=${ENGINE_USERS:-1 2 4 8 16 32 64}
CHARACTERIZE_SECONDS=${ENGINE_CHAR_SECONDS:-30}
COMPARE_USERS=${ENGINE_COMPARE_USERS:-64}
COMPARE_SECONDS=${ENGINE_COMPARE_SECONDS:-120}
ROUNDS=${ENGINE_ROUNDS:-2}
ENGINE_PORT=${ENGINE_PORT:-18090}
SLUICE_PORT=${ENGINE_SLUICE_PORT:-18080}
ADMIN_PORT=${ENGINE_ADMIN_PORT:-18081}
model=$dir/smollm2-135m-random-q8_0.gguf

skip() { echo "make engine: SKIPPED: $*" >&2; exit 0; }

install() {
	command -v node >/dev/null 2>&1 || skip "node is not installed (Debian: apt-get install nodejs npm)"
	command -v npm >/dev/null 2>&1 || skip "npm is not installed (Debian: apt-get install npm)"
	mkdir -p "$dir"
	if [ ! -f "$dir/node_modules/node-llama-cpp/package.json" ] ||
		! grep -q "\"version\": \"$NLC_VERSION\"" "$dir/node_modules/node-llama-cpp/package.json"; then
		echo "installing node-llama-cpp@$NLC_VERSION into $dir (npm)"
		[ -f "$dir/package.json" ] || echo '{"private": true}' >"$dir/package.json"
		# --ignore-scripts: its postinstall would try to download or build
		# llama.cpp; the prebuilt binaries come in its platform packages.
		(cd "$dir" && npm install --no-audit --no-fund --ignore-scripts "node-llama-cpp@$NLC_VERSION") ||
			skip "npm could not install node-llama-cpp@$NLC_VERSION (no network or registry?)"
	fi
	node "$here/patch.mjs" "$dir"
	if [ ! -f "$model" ]; then
		echo "writing $model"
		"$bin/sluice-bench" gguf -out "$model" -seed 1
	fi
}

# wait_http URL: until it answers, at most 120 s (loading the model).
wait_http() {
	for _ in $(seq 240); do
		curl -fs -o /dev/null "$1" && return 0
		sleep 0.5
	done
	echo "engine.sh: $1 did not answer" >&2
	return 1
}

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

start_engine() {
	# Run from DIR, so that its import finds DIR/node_modules.
	cp "$here/server.mjs" "$dir/server.mjs"
	node "$dir/server.mjs" -model "$model" -listen "127.0.0.1:$ENGINE_PORT" \
		-parallel "$PARALLEL" -threads 1 -ctx-per-seq 256 -max-tokens "$MAX_TOKENS" 2>"$dir/results/engine.log" &
	pids+=($!)
	wait_http "http://127.0.0.1:$ENGINE_PORT/stats"
}

# start_sluice NAME ALGORITHM CEILING: Sluice in front of the engine with
# the default config but for the algorithm and ceiling.
start_sluice() {
	local cfg="$dir/results/sluice-$1.yaml"
	cat >"$cfg" <<YAML
listen: 127.0.0.1:$SLUICE_PORT
admin: { listen: 127.0.0.1:$ADMIN_PORT }
providers:
  - name: engine
    upstream: http://127.0.0.1:$ENGINE_PORT
    match: { path_prefix: /engine }
    dialect: openai
    limit: { algorithm: $2$( [ -n "$3" ] && echo ", ceiling: $3, initial: $3" ) }
YAML
	"$bin/sluice" serve -config "$cfg" 2>"$dir/results/sluice-$1.log" &
	SLUICE_PID=$!
	pids+=($SLUICE_PID)
	wait_http "http://127.0.0.1:$ADMIN_PORT/healthz"
}

# run NAME URL USERS SECONDS: one closed-loop run of short prompts (on
# 2 shared cores a batch of long prompts' prefill holds every sequence
# for seconds), with the engine's stats,
# the load summary and (behind Sluice) the limit once a second.
run() {
	local name=$1 url=$2 users=$3 secs=$4
	curl -fs -X POST "http://127.0.0.1:$ENGINE_PORT/stats/reset"
	local poll=""
	if [ "$url" != "${url#*$SLUICE_PORT}" ]; then
		(while sleep 1; do curl -fs "http://127.0.0.1:$ADMIN_PORT/admin/status" || true; echo; done) >"$dir/results/$name.status.jsonl" &
		poll=$!
	fi
	echo "run $name: $users users for ${secs}s"
	"$bin/sluice-bench" load -url "$url" -clients "$users" -duration "${secs}s" -sdk openai -model engine \
		-prompt 15 -prompt-sigma 0.2 -prompt-max 30 -json >"$dir/results/$name.load.json" 2>"$dir/results/$name.load.log"
	curl -fs "http://127.0.0.1:$ENGINE_PORT/stats" >"$dir/results/$name.engine.json"
	[ -n "$poll" ] && kill "$poll" 2>/dev/null || true
}

suite() {
	[ -f "$model" ] && [ -f "$dir/node_modules/node-llama-cpp/package.json" ] || install
	[ -x "$bin/sluice" ] && [ -x "$bin/sluice-bench" ] || { echo "engine.sh: build $bin/sluice and $bin/sluice-bench first (make build)" >&2; exit 1; }
	mkdir -p "$dir/results"
	start_engine
	local direct="http://127.0.0.1:$ENGINE_PORT/v1/chat/completions"
	local via="http://127.0.0.1:$SLUICE_PORT/engine/v1/chat/completions"
	for u in $CHARACTERIZE_USERS; do run "alone-$u" "$direct" "$u" "$CHARACTERIZE_SECONDS"; done
	# Round-robin, ROUNDS times: the machine's load drifts, and each
	# configuration should see the same drift.
	for r in $(seq "$ROUNDS"); do
		for u in $COMPARE_USERS; do
			run "direct-$u-r$r" "$direct" "$u" "$COMPARE_SECONDS"
			for alg in "fixed $PARALLEL" "aimd" "gradient2"; do
				set -- $alg
				start_sluice "$1-$u-r$r" "$1" "${2:-}"
				run "$1-$u-r$r" "$via" "$u" "$COMPARE_SECONDS"
				kill "$SLUICE_PID"
				wait "$SLUICE_PID" 2>/dev/null || true
			done
		done
	done
	python3 "$here/report.py" "$dir/results" "$PARALLEL" "$CHARACTERIZE_USERS" "$COMPARE_USERS" "$ROUNDS" | tee "$dir/results/report.md"
}

case $cmd in
install) install ;;
suite) suite ;;
*) echo "usage: engine.sh install|suite DIR [BIN]" >&2; exit 2 ;;
esac
