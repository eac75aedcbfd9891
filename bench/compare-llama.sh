#!/usr/bin/env bash
# compare-llama.sh — pagedhybrid and llama.cpp side by side on one model geometry, interleaved
# in one sitting, with this machine's limits measured in the same run (docs/performance.md,
# "Side by side with llama.cpp"; issue 16; quantized weights against Q8_0/Q4_0: issue 18).
#
#   bench/compare-llama.sh --llama-bin DIR --gguf FILE --model DIR
#                          [--rounds N] [--threads T] [--baseline BIN] [--pagedhybrid BIN]
#                          [--prompt N] [--decode-steps N] [--batches LIST] [--out DIR]
#                          [--ours-args "ARGS"] [--quant int8|int4]
#
#   --llama-bin DIR     a llama.cpp build's bin directory holding llama-bench and
#                       llama-batched-bench
#   --gguf FILE         the GGUF llama.cpp runs (same geometry and weights as --model)
#   --model DIR         our checkpoint (or package) of that model
#   --rounds N          rounds (default 5); every figure is the median over rounds
#   --threads T         threads of every program and of the probes (default 2)
#   --baseline BIN      an older pagedhybrid binary, run in every round too: the "previous
#                       figure" column (it gets only options every bench has had)
#   --pagedhybrid BIN   ours (default build/release/pagedhybrid)
#   --prompt N          prefill prompt length (default 512: llama-bench pp512)
#   --decode-steps N    timed decode steps per batch size: our --decode-steps and llama's -ntg /
#                       -n (default 16)
#   --batches LIST      decode batch sizes (default 1,4,16,64: llama-batched-bench -npl)
#   --out DIR           raw outputs (default build/compare-llama/<UTC time>)
#   --ours-args "ARGS"  extra options for our bench only (e.g. "--precision bf16")
#   --quant int8|int4   quantized weights side by side: ours quantizes --model's weights at load
#                       with --quant int8|int4 --quant-block 32 --quant-sym (Q8_0's and Q4_0's
#                       geometry: symmetric, 32 weights per scale along K), and --gguf must be
#                       the Q8_0 (int8) or Q4_0 (int4) GGUF of the same weights (checked against
#                       llama-bench's model_type); the limit column then divides prefill by the
#                       int8 dot peak (accuracy_level 4), and the baseline, when given, runs
#                       without --quant (e.g. this binary at bf16: what quantizing buys)
#
# One round, in this order (the order turns over every round so neither side always runs
# first after the other):
#   ours      pagedhybrid bench --model M --prompt P --batches B --decode-steps N --repeats 1
#             --threads T --json: prefill of a P-token prompt (P / time to first token), decode
#             at each batch with 16-token prompts (B / median steady step), and the machine
#             probes (DRAM read bandwidth, f32 FMA peak, and the bf16 and int8 dot peaks when
#             this bench reports them) measured in the same process; with --quant, plus
#             --quant int8|int4 --quant-block 32 --quant-sym
#   llama     llama-bench -p P -n 0 (pp: P-token prompt time), llama-bench -p 0 -n N -d 16 (tg at
#             batch 1 after a 16-token context), llama-batched-bench -npp 16 -ntg N -npl B
#             (tg at each batch: B x N / the N steps' time), all with -t T and -lm none (weights
#             read into memory, as ours copies them, not a file mapping)
#   baseline  the same command as ours with --baseline (when given)
# Then a markdown table of medians: figure | ours | llama.cpp | ratio | baseline | baseline ratio
# | ours vs the machine limit | llama.cpp vs the machine limit. "ratio" is the median over rounds
# of ours / llama.cpp measured in the same round (baseline ratio: baseline / llama.cpp), so drift
# between rounds cancels. Ours vs the limit is our bench's own (vs_bandwidth with the bytes a step
# reads, vs_compute against the peak engine.compute_peak names); llama.cpp's is its decode step's
# GGUF weight bytes (llama-bench's model_size: weights only, no state or KV) over the bandwidth,
# and its prefill's 2 x model_n_params per token over the same compute peak as ours.
# Needs bash and python3 (standard library only: the medians and the table).
set -euo pipefail

usage() {
  sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

LLAMA_BIN="" GGUF="" MODEL="" ROUNDS=5 THREADS=2 BASELINE="" OURS="build/release/pagedhybrid"
PROMPT=512 STEPS=16 BATCHES="1,4,16,64" OUT="" OURS_ARGS="" QUANT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --llama-bin) LLAMA_BIN="$2"; shift 2 ;;
    --gguf) GGUF="$2"; shift 2 ;;
    --model) MODEL="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --baseline) BASELINE="$2"; shift 2 ;;
    --pagedhybrid) OURS="$2"; shift 2 ;;
    --prompt) PROMPT="$2"; shift 2 ;;
    --decode-steps) STEPS="$2"; shift 2 ;;
    --batches) BATCHES="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --ours-args) OURS_ARGS="$2"; shift 2 ;;
    --quant) QUANT="$2"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "compare-llama: unknown option $1" >&2; usage ;;
  esac
done
if [ -z "$LLAMA_BIN" ] || [ -z "$GGUF" ] || [ -z "$MODEL" ]; then usage; fi
for n in "$ROUNDS" "$THREADS" "$PROMPT" "$STEPS"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "compare-llama: expected a positive integer, got '$n'" >&2; exit 2; }
done
[[ "$BATCHES" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
  { echo "compare-llama: --batches expects a comma-separated list, got '$BATCHES'" >&2; exit 2; }
# --quant: our load-time quantization in Q8_0's / Q4_0's geometry, and the GGUF type it must meet
QUANT_ARGS="" GGUF_TYPE=""
case "$QUANT" in
  "") ;;
  int8) QUANT_ARGS="--quant int8 --quant-block 32 --quant-sym" GGUF_TYPE="Q8_0" ;;
  int4) QUANT_ARGS="--quant int4 --quant-block 32 --quant-sym" GGUF_TYPE="Q4_0" ;;
  *) echo "compare-llama: --quant expects int8 or int4, got '$QUANT'" >&2; exit 2 ;;
esac
for f in "$LLAMA_BIN/llama-bench" "$LLAMA_BIN/llama-batched-bench" "$OURS" ${BASELINE:+"$BASELINE"}; do
  [ -x "$f" ] || { echo "compare-llama: $f is not an executable" >&2; exit 1; }
done
[ -f "$GGUF" ] || { echo "compare-llama: no GGUF at $GGUF" >&2; exit 1; }
[ -e "$MODEL" ] || { echo "compare-llama: no model at $MODEL" >&2; exit 1; }
OUT="${OUT:-build/compare-llama/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"

# llama-batched-bench keeps max(npl) sequences of 16 + N tokens each
MAX_B=$(tr , '\n' <<<"$BATCHES" | sort -n | tail -1)
CTX=$(( MAX_B * (16 + STEPS) + 256 ))

log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

run_ours() { # BIN FILE [extra args...]
  local bin="$1" file="$2"; shift 2
  # shellcheck disable=SC2086
  "$bin" bench --model "$MODEL" --prompt "$PROMPT" --batches "$BATCHES" \
    --decode-steps "$STEPS" --repeats 1 --threads "$THREADS" --json "$@" >"$file" 2>"$file.err"
}

run_llama() { # ROUND_DIR
  local d="$1"
  "$LLAMA_BIN/llama-bench" -m "$GGUF" -t "$THREADS" -lm none -r 1 -p "$PROMPT" -n 0 -o json \
    >"$d/llama-pp.json" 2>"$d/llama-pp.err"
  "$LLAMA_BIN/llama-bench" -m "$GGUF" -t "$THREADS" -lm none -r 1 -p 0 -n "$STEPS" -d 16 -o json \
    >"$d/llama-tg.json" 2>"$d/llama-tg.err"
  "$LLAMA_BIN/llama-batched-bench" -m "$GGUF" -t "$THREADS" -tb "$THREADS" -lm none -c "$CTX" \
    -npp 16 -ntg "$STEPS" -npl "$BATCHES" --output-format jsonl \
    >"$d/llama-batched.jsonl" 2>"$d/llama-batched.err"
}

{
  echo "date_utc=$(date -u +%FT%TZ)"
  echo "host=$(uname -n) cpus=$(nproc)"
  echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "ours=$OURS commit=$(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null)"
  echo "baseline=$BASELINE"
  echo "llama_bin=$LLAMA_BIN"
  echo "gguf=$GGUF model=$MODEL"
  echo "rounds=$ROUNDS threads=$THREADS prompt=$PROMPT decode_steps=$STEPS batches=$BATCHES ctx=$CTX ours_args=$OURS_ARGS"
  echo "quant=$QUANT quant_args=$QUANT_ARGS gguf_type=$GGUF_TYPE gguf_bytes=$(stat -c %s "$GGUF")"
} >"$OUT/setup.txt"

for ((r = 1; r <= ROUNDS; r++)); do
  d="$OUT/round-$r"
  mkdir -p "$d"
  uptime >"$d/uptime-start.txt"
  if ((r % 2)); then order="ours llama baseline"; else order="baseline llama ours"; fi
  for who in $order; do
    case "$who" in
      ours)
        log "round $r/$ROUNDS: pagedhybrid"
        # shellcheck disable=SC2086
        run_ours "$OURS" "$d/ours.json" $QUANT_ARGS $OURS_ARGS ||
          { echo "compare-llama: our bench failed:" >&2; cat "$d/ours.json.err" >&2; exit 1; } ;;
      llama)
        log "round $r/$ROUNDS: llama.cpp"
        run_llama "$d" ||
          { echo "compare-llama: llama.cpp failed (logs in $d/llama-*.err)" >&2; tail -5 "$d"/llama-*.err >&2; exit 1; }
        if [ -n "$GGUF_TYPE" ] && ! grep -q "\"model_type\": \".* $GGUF_TYPE\"" "$d/llama-pp.json"; then
          echo "compare-llama: --quant $QUANT needs a $GGUF_TYPE GGUF; llama-bench read $GGUF as" \
            "$(grep -o '"model_type": "[^"]*"' "$d/llama-pp.json")" >&2
          exit 1
        fi ;;
      baseline)
        [ -n "$BASELINE" ] || continue
        log "round $r/$ROUNDS: baseline"
        run_ours "$BASELINE" "$d/baseline.json" ||
          { echo "compare-llama: the baseline bench failed:" >&2; cat "$d/baseline.json.err" >&2; exit 1; } ;;
    esac
  done
  uptime >"$d/uptime-end.txt"
done

python3 - "$OUT" "$ROUNDS" "$PROMPT" "$BATCHES" "$STEPS" "$QUANT" <<'EOF' | tee "$OUT/table.md"
import json, os, re, statistics, sys

out, rounds, prompt, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[5])
batches = [int(b) for b in sys.argv[4].split(",")]
quant = sys.argv[6]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def jsonl(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    rows.append(json.loads(line))
    except OSError:
        pass
    return rows


PEAK_KEYS = {"int8 dot": "int8_gops", "bf16 dot": "bf16_gflops", "f32 FMA": "fma_gflops"}


def compute_peak(j):
    """(name, value) of the compute peak one `pagedhybrid bench --json` compared its arithmetic
    with (engine.compute_peak: int8 dot for --quant at accuracy_level 4, bf16 dot in bf16 mode,
    else f32 FMA), or (None, None). Benches from before engine.compute_peak: bf16 dot in bf16
    mode, else f32 FMA."""
    if not j:
        return None, None
    m, e = j.get("machine") or {}, j.get("engine") or {}
    name = e.get("compute_peak")
    if name is None:
        name = "bf16 dot" if e.get("precision") == "bf16" and m.get("bf16_gflops") else "f32 FMA"
    v = m.get(PEAK_KEYS.get(name, ""))
    return (name, v) if v else (None, None)


def ours_figures(j):
    """figure name -> (value, fraction-of-limit text) from one `pagedhybrid bench --json`."""
    if not j:
        return {}
    f = {}
    p = j.get("prefill") or {}
    name, peak = compute_peak(j)
    other = peak if name and name != "f32 FMA" else None  # a peak besides the FMA's
    lim = []
    if other and p.get("gflops"):
        lim.append(f"{p['gflops'] / other:.3f} of the {name} peak")
    if p.get("vs_fma") is not None:
        lim.append(f"{p['vs_fma']:.3f} of f32 FMA")
    f["prefill"] = (p.get("tok_s"), ", ".join(lim))
    for d in j.get("decode") or []:
        if d.get("skipped"):
            continue
        lim = []
        if d.get("vs_bandwidth") is not None:
            lim.append(f"{d['vs_bandwidth']:.3f} of bandwidth")
        if other and d.get("gflops"):
            lim.append(f"{d['gflops'] / other:.3f} of the {name} peak")
        elif d.get("vs_fma_peak") is not None:
            lim.append(f"{d['vs_fma_peak']:.3f} of f32 FMA")
        f[f"decode{d['batch']}"] = (d.get("tok_s"), ", ".join(lim))
    return f


def llama_model(d):
    """(model_type, model_size bytes, model_n_params) from a round's llama-bench JSON."""
    for t in load(os.path.join(d, "llama-pp.json")) or []:
        if t.get("model_size"):
            return t.get("model_type"), t["model_size"], t.get("model_n_params")
    return None, None, None


def llama_limits(lf, d, j):
    """figure name -> llama.cpp's fraction-of-limit text in round d, against the limits our
    bench measured in the same round (j): decode, its GGUF's weight bytes read once per step
    (weights only: no state, no KV) over the bandwidth; prefill, 2 x its parameters per token
    over the compute peak our bench used."""
    _, size, params = llama_model(d)
    m = (j or {}).get("machine") or {}
    bw = m.get("bandwidth_gbs")
    name, peak = compute_peak(j)
    out = {}
    if lf.get("prefill") and params and peak:
        out["prefill"] = f"{lf['prefill'] * 2 * params / 1e9 / peak:.3f} of the {name} peak"
    for b in batches:
        v = lf.get(f"decode{b}")
        if v and size and bw:
            out[f"decode{b}"] = f"{v / b * size / 1e9 / bw:.3f} of bandwidth (weights only)"
    return out


def machine(j):
    m = (j or {}).get("machine") or {}
    r = {}
    if m.get("bandwidth_gbs"):
        r["bw"] = m["bandwidth_gbs"]
    if m.get("fma_gflops"):
        r["fma"] = m["fma_gflops"]
    if m.get("bf16_gflops"):
        r["bf16"] = m["bf16_gflops"]
    if m.get("int8_gops"):
        r["int8"] = m["int8_gops"]
    return r


def llama_figures(d):
    f = {}
    pp = load(os.path.join(d, "llama-pp.json")) or []
    for t in pp:
        if t.get("n_prompt") == prompt and t.get("n_gen") == 0:
            f["prefill"] = t["avg_ts"]
    tg = load(os.path.join(d, "llama-tg.json")) or []
    for t in tg:
        if t.get("n_gen") == steps and t.get("n_prompt") == 0:
            f["tg1"] = t["avg_ts"]
    for t in jsonl(os.path.join(d, "llama-batched.jsonl")):
        if t.get("pp") == 16 and t.get("tg") == steps:
            f[f"decode{t['pl']}"] = t["speed_tg"]
    return f


def llama_build(d):
    for t in load(os.path.join(d, "llama-pp.json")) or []:
        if t.get("build_commit"):
            return f"{t['build_commit']} (build {t.get('build_number')})"
    return None


def load_avg(path):
    try:
        s = open(path).read()
        return float(re.search(r"load average: ([0-9.]+)", s).group(1))
    except (OSError, AttributeError, ValueError):
        return None


rows = ["prefill"] + [f"decode{b}" for b in batches]
names = {"prefill": f"prefill, {prompt} tokens (tok/s)"}
for b in batches:
    names[f"decode{b}"] = f"decode, batch {b} (tok/s)"
ours, base, lla, lim, llim, mach, loads = {}, {}, {}, {}, {}, {}, []
tg1, weights_read, quants = [], [], []
have_base = False
for r in range(1, rounds + 1):
    d = os.path.join(out, f"round-{r}")
    oj, bj = load(os.path.join(d, "ours.json")), load(os.path.join(d, "baseline.json"))
    have_base = have_base or bj is not None
    of, bf, lf = ours_figures(oj), ours_figures(bj), llama_figures(d)
    ll = llama_limits(lf, d, oj)
    if oj:
        weights_read.append((oj.get("model") or {}).get("weight_bytes_read") or
                            (oj.get("model") or {}).get("weight_bytes"))
        quants.append((oj.get("engine") or {}).get("quant"))
    for k, v in machine(oj).items():
        mach.setdefault(k, []).append(v)
    for k in rows:
        ours.setdefault(k, []).append(of.get(k, (None, ""))[0])
        base.setdefault(k, []).append(bf.get(k, (None, ""))[0])
        lla.setdefault(k, []).append(lf.get(k))
        lim.setdefault(k, []).append(of.get(k, (None, ""))[1])
        llim.setdefault(k, []).append(ll.get(k, ""))
    tg1.append(lf.get("tg1"))
    for f in ("uptime-start.txt", "uptime-end.txt"):
        a = load_avg(os.path.join(d, f))
        if a is not None:
            loads.append(a)


def med(v):
    v = [x for x in v if x]
    return statistics.median(v) if v else None


def ratio(a, b):
    return med([x / y for x, y in zip(a, b) if x and y])


def fmt(x, p=1):
    return "—" if x is None else f"{x:.{p}f}"


def median_text(texts, values):
    """The limit text of the round whose figure is the median (texts are per round)."""
    pairs = [(v, t) for v, t in zip(values, texts) if v and t]
    if not pairs:
        return "—"
    pairs.sort()
    return pairs[(len(pairs) - 1) // 2][1]


print(f"| figure | pagedhybrid | llama.cpp | ratio | baseline | baseline ratio | pagedhybrid vs this machine's limit "
      f"| llama.cpp vs this machine's limit |")
print("|---|---:|---:|---:|---:|---:|---|---|")
for k in rows:
    print(f"| {names[k]} | {fmt(med(ours[k]))} | {fmt(med(lla[k]))} | {fmt(ratio(ours[k], lla[k]), 2)} "
          f"| {fmt(med(base[k])) if have_base else '—'} | {fmt(ratio(base[k], lla[k]), 2) if have_base else '—'} "
          f"| {median_text(lim[k], ours[k])} | {median_text(llim[k], lla[k])} |")
if any(tg1):
    k = "decode1"
    print(f"| decode, batch 1, llama-bench tg{steps} @ d16 (tok/s) | {fmt(med(ours.get(k, [])))} | {fmt(med(tg1))} "
          f"| {fmt(ratio(ours.get(k, []), tg1), 2)} | {fmt(med(base.get(k, []))) if have_base else '—'} "
          f"| {fmt(ratio(base.get(k, []), tg1), 2) if have_base else '—'} | | |")
print()
mtype, msize, _ = llama_model(os.path.join(out, "round-1"))
q = next((x for x in quants if x), None)
qtext = (f"int{q['bits']}, block {q['block_size']}, {'asymmetric' if q['asymmetric'] else 'symmetric'}, "
         f"accuracy_level {q['accuracy_level']}" + (f", skip {q['skip']}" if q.get("skip") else "")
         if q else "none")
if quant and not q:
    qtext += f" (WARNING: --quant {quant} was asked for, but our bench reported no quantization)"
wr = med(weights_read)
print(f"Weights a decode step reads: pagedhybrid {wr / 1e6:.1f} MB (quantization: {qtext}), "
      f"llama.cpp {msize / 1e6:.1f} MB ({mtype})." if wr and msize else
      f"Weights a decode step reads: not reported (quantization: {qtext}).")
parts = []
if mach.get("bw"):
    parts.append(f"DRAM read {med(mach['bw']):.1f} GB/s")
if mach.get("fma"):
    parts.append(f"f32 FMA {med(mach['fma']):.1f} GFLOP/s")
if mach.get("bf16"):
    parts.append(f"bf16 dot {med(mach['bf16']):.1f} GFLOP/s")
if mach.get("int8"):
    parts.append(f"int8 dot {med(mach['int8']):.1f} GOP/s")
build = llama_build(os.path.join(out, "round-1"))
build_text = f" llama.cpp {build}." if build else ""
load_text = f" 1-minute load average during the run: {min(loads):.2f}–{max(loads):.2f}." if loads else ""
print(f"Machine (probes in our bench, every round, medians): {', '.join(parts) or 'not measured'}. "
      f"Medians of {rounds} interleaved rounds; ratios are medians of per-round ratios.{build_text}{load_text}")
EOF
echo "raw outputs in $OUT" >&2
