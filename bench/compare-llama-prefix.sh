#!/usr/bin/env bash
# compare-llama-prefix.sh — the prefix cache side by side with llama.cpp's server (issue 19,
# docs/performance.md "Prefix caching"): time to first token of requests sharing a P-token
# prefix with a U-token unique suffix, cold and warm, interleaved in one sitting.
#
#   bench/compare-llama-prefix.sh --llama-bin DIR --gguf FILE --model DIR
#                                 [--rounds N] [--threads T] [--shared P] [--unique U]
#                                 [--requests K] [--pagedhybrid BIN] [--out DIR] [--port N]
#
#   --llama-bin DIR   a llama.cpp build's bin directory holding llama-server
#   --gguf FILE       the GGUF llama-server runs (the weights of --model). It must carry a token
#                     list: llama-server turns the sampled token into text and aborts on a GGUF
#                     whose tokenizer model is "none"; any placeholder vocabulary will do, the
#                     requests are token ids
#   --model DIR       our checkpoint of that model
#   --rounds N        rounds (default 3); the order of the two sides turns over every round
#   --threads T       threads of both (default 2)
#   --shared P, --unique U, --requests K   the workload (default 1024, 64, 3)
#
# One round:
#   ours   pagedhybrid bench --scenario prefix --shared-prefix P --unique U --requests K
#          --repeats 1 --json: the cache cleared, a cold request, its twin on an engine without
#          the cache, K warm requests (other suffixes), every output checked against the
#          uncached engine;
#   llama  llama-server -np 1 (one slot: a single user's cache) with cache_prompt: a new shared
#          prefix, a cold request, then K requests with other suffixes; TTFT = the response's
#          timings.prompt_ms (prompt evaluation up to the first token), timings.prompt_n = the
#          tokens it computed.
# Prints a table of medians over rounds (TTFT cold, warm, warm/cold, tokens computed when warm)
# and writes the raw outputs under --out. Needs bash, curl and python3 (standard library only).
set -euo pipefail

LLAMA_BIN="" GGUF="" MODEL="" ROUNDS=3 THREADS=2 SHARED=1024 UNIQUE=64 REQUESTS=3
OURS="build/release/pagedhybrid" OUT="" PORT=8099
while [ $# -gt 0 ]; do
  case "$1" in
    --llama-bin) LLAMA_BIN="$2"; shift 2 ;;
    --gguf) GGUF="$2"; shift 2 ;;
    --model) MODEL="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --shared) SHARED="$2"; shift 2 ;;
    --unique) UNIQUE="$2"; shift 2 ;;
    --requests) REQUESTS="$2"; shift 2 ;;
    --pagedhybrid) OURS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    *) echo "compare-llama-prefix.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "$LLAMA_BIN" ] && [ -n "$GGUF" ] && [ -n "$MODEL" ] || {
  echo "usage: compare-llama-prefix.sh --llama-bin DIR --gguf FILE --model DIR [options]" >&2; exit 2; }
[ -x "$LLAMA_BIN/llama-server" ] || { echo "no llama-server in $LLAMA_BIN" >&2; exit 2; }
OUT="${OUT:-build/compare-llama-prefix/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$LLAMA_BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

SERVER_PID=""
stop_server() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null; SERVER_PID=""; }
trap stop_server EXIT

llama_round() { # $1: round
  "$LLAMA_BIN/llama-server" -m "$GGUF" -t "$THREADS" -tb "$THREADS" -c $((2 * (SHARED + UNIQUE) + 64)) \
    -np 1 --port "$PORT" > "$OUT/llama-server.$1.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 120); do curl -sf "localhost:$PORT/health" > /dev/null && break; sleep 1; done
  python3 - "$PORT" "$SHARED" "$UNIQUE" "$REQUESTS" "$1" > "$OUT/llama.$1.json" <<'EOF'
import json, random, sys, urllib.request
port, shared, unique, k, rnd = (int(x) for x in sys.argv[1:])
rng = random.Random(1000 + rnd)
def req(tokens):
    body = json.dumps({"prompt": tokens, "n_predict": 1, "cache_prompt": True,
                       "temperature": 0}).encode()
    r = urllib.request.urlopen(urllib.request.Request(
        f"http://127.0.0.1:{port}/completion", body, {"Content-Type": "application/json"}))
    t = json.loads(r.read())["timings"]
    return {"ttft_ms": t["prompt_ms"], "computed": t["prompt_n"]}
prefix = [rng.randrange(1000, 100000) for _ in range(shared)]
runs = [req(prefix + [rng.randrange(1000, 100000) for _ in range(unique)]) for _ in range(k + 1)]
print(json.dumps({"cold": runs[0], "warm": runs[1:]}))
EOF
  stop_server
}

ours_round() { # $1: round
  "$OURS" bench --model "$MODEL" --scenario prefix --shared-prefix "$SHARED" --unique "$UNIQUE" \
    --requests "$REQUESTS" --repeats 1 --threads "$THREADS" --json > "$OUT/ours.$1.json"
}

for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then ours_round "$r"; llama_round "$r"; else llama_round "$r"; ours_round "$r"; fi
  echo "round $r of $ROUNDS done" >&2
done

python3 - "$OUT" "$ROUNDS" "$SHARED" "$UNIQUE" <<'EOF' | tee "$OUT/table.md"
import json, statistics, sys
out, rounds, shared, unique = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
med = statistics.median
oc, ow, lc, lw, lcomp, ocomp, fma, bf16 = [], [], [], [], [], [], [], []
for r in range(1, rounds + 1):
    whole = json.load(open(f"{out}/ours.{r}.json"))
    o = whole["prefix"]
    fma.append(whole["machine"]["fma_gflops"] or 0); bf16.append(whole["machine"]["bf16_gflops"] or 0)
    oc.append(o["cold"]["ttft_ms"]); ow.append(o["warm"]["ttft_ms"])
    ocomp.append(o["prompt_tokens"] - o["warm"]["cached_tokens"])
    l = json.load(open(f"{out}/llama.{r}.json"))
    lc.append(l["cold"]["ttft_ms"]); lw.append(med(w["ttft_ms"] for w in l["warm"]))
    lcomp.append(med(w["computed"] for w in l["warm"]))
n = shared + unique
print(f"{shared} shared + {unique} unique tokens ({n}-token prompts); medians of {rounds} rounds; "
      f"machine (measured by our bench in the same rounds): fp32 FMA {med(fma):.0f} GFLOP/s, "
      f"bf16 dot {med(bf16):.0f} GFLOP/s\n")
print("| | TTFT cold ms | TTFT warm ms | warm / cold | tokens computed warm |")
print("|---|---:|---:|---:|---:|")
print(f"| pagedhybrid | {med(oc):,.0f} | {med(ow):,.0f} | {med(ow) / med(oc):.3f} | {med(ocomp):,.0f} |")
print(f"| llama.cpp server | {med(lc):,.0f} | {med(lw):,.0f} | {med(lw) / med(lc):.3f} | {med(lcomp):,.0f} |")
print(f"| llama.cpp / pagedhybrid | {med(lc) / med(oc):.2f} | {med(lw) / med(ow):.2f} | | |")
EOF
