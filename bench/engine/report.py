"""Tables of make engine's results (bench/engine/engine.sh), in Markdown.

python3 report.py RESULTS_DIR PARALLEL "USERS..." "COMPARE_USERS..." ROUNDS
"""
import json
import os
import statistics
import sys

res, parallel = sys.argv[1], int(sys.argv[2])
users = sys.argv[3].split()
compare = sys.argv[4].split()
rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 1


def load(name, kind):
    path = os.path.join(res, f"{name}.{kind}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def sec(ns):
    return f"{ns / 1e9:.1f}"


def limits(name):
    path = os.path.join(res, f"{name}.status.jsonl")
    xs = []
    if os.path.exists(path):
        text, dec, i = open(path).read(), json.JSONDecoder(), 0
        while True:
            while i < len(text) and text[i].isspace():
                i += 1
            if i >= len(text):
                break
            try:
                st, i = dec.raw_decode(text, i)
            except ValueError:
                break
            for p in st.get("providers", []):
                xs.append(p["limit"])
    if not xs:
        return "-"
    n = len(xs)
    settled = sorted(xs[n // 2:])  # the second half of the run
    return f"{statistics.median(settled):g} ({settled[0]}-{settled[-1]}); from {xs[0]}"


print(f"Engine alone ({parallel} parallel sequences, 1 thread), closed-loop openai-python-like users:\n")
print("| users | output tokens/s | calls OK | engine TTFT p50 / p90 (s) | waited for a sequence p50 (s) | client TTFT p50 / p99 (s) | calls failed |")
print("|---|---|---|---|---|---|---|")
for u in users:
    e, l = load(f"alone-{u}", "engine"), load(f"alone-{u}", "load")
    if not e or not l:
        continue
    c = l["Calls"]
    print(f"| {u} | {e['tokens_per_second']:.1f} | {c['OK']} | {e['ttft_ms']['p50']/1e3:.1f} / {e['ttft_ms']['p90']/1e3:.1f} "
          f"| {e['queue_wait_ms']['p50']/1e3:.1f} | {sec(c['TTFT']['P50'])} / {sec(c['TTFT']['P99'])} | {c['Failed']} |")

for u in compare:
    print(f"\n{u} users, direct and behind Sluice (default config but the algorithm), one round after the other:\n")
    print("| round | run | output tokens/s | vs direct | calls OK / failed | attempts refused by Sluice | engine TTFT p50 / p90 (s) | client TTFT p50 / p99 (s) | limit, second half: median (range); first |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in range(1, rounds + 1):
        d = load(f"direct-{u}-r{r}", "engine")
        for name in ["direct", "fixed", "aimd", "gradient2"]:
            run = f"{name}-{u}-r{r}"
            e, l = load(run, "engine"), load(run, "load")
            if not e or not l:
                continue
            c = l["Calls"]
            ratio = e["tokens_per_second"] / d["tokens_per_second"] if d and d["tokens_per_second"] else 0
            label = f"fixed {parallel}" if name == "fixed" else name
            print(f"| {r} | {label} | {e['tokens_per_second']:.1f} | {ratio:.0%} | {c['OK']} / {c['Failed']} | {l['RejectedSluice']} "
                  f"| {e['ttft_ms']['p50']/1e3:.1f} / {e['ttft_ms']['p90']/1e3:.1f} | {sec(c['TTFT']['P50'])} / {sec(c['TTFT']['P99'])} "
                  f"| {limits(run) if name != 'direct' else '-'} |")
