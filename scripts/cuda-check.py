#!/usr/bin/env python3
"""Check a `pagedhybrid export --layout paged` (CUDA target) package on a CUDA machine.

WRITTEN WITHOUT A GPU; NOT YET RUN ON CUDA. The pure-Python parts (argument and token parsing,
the packed step's integer inputs, the safetensors reader/writer, the comparison) are exercised
by `selftest`; everything that talks to ONNX Runtime or ONNX Runtime GenAI has only been read
against their documented Python APIs (../shared/spec/abi.md §1.4, §8.6). docs/export.md,
"Checking a package on CUDA", gives the exact commands and what each result settles.

    cuda-check.py engine PKG --tokens 1,2,3 [--tokens 4,5 ...] [--max-new N]
        ONNX Runtime GenAI's Engine on the CUDA EP: every request added, stepped to completion,
        greedy. Prints what `pagedhybrid generate --model PKG` prints on stdout, so the two
        outputs can be diffed. Needs onnxruntime-genai-cuda and numpy.
    cuda-check.py step PKG --tokens ... [--tokens ...] --out FILE.safetensors
        One packed prefill step of every sequence from empty state in ONNX Runtime on the CUDA EP
        (IOBinding; KV pages bound as both past and present, which the CUDA PagedAttention
        kernel requires). Writes the logits as `generate --logits-out` does with --max-new 0:
        F32 `seq{i}.logits [T_i, vocab]`, plus `logits` when there is one sequence.
        Needs onnxruntime-gpu (1.30 or later) and numpy.
    cuda-check.py compare OURS.safetensors THEIRS.safetensors [--tol F]
        Per tensor of both files: max|a-b| / max|a| over the rows both have (a = OURS; a
        non-finite value counts as infinite). Exit 1 when any is above --tol or none is common.
        Standard library only (numpy used when present, for speed).
    cuda-check.py tokens PKG THEIRS.txt [--tol F] [--pagedhybrid PATH]
        Judges the engine's tokens (THEIRS.txt: the engine subcommand's output) by our own
        logits, teacher-forced on the engine's prefixes (our `generate --max-new 0` on prompt +
        generated tokens): each must be our top token or within 2 x tol x scale of it (a
        near-tie, which logits within tol cannot rule out). Exit 1 otherwise. Standard library.
    cuda-check.py selftest
        Checks the pure-Python parts here, no GPU needed (numpy parts when numpy is present).

Default --tol 0.16 of scale, for an f16 package on both sides. tests/test_paged_batch.c bounds
an f16 forward of the golden model (tests/data/golden/qwen35-tiny-f32) at S / 2 = 0.0797 of
scale from the f64 reference, where S = 0.159 is the golden bf16 forward's worst deviation (f16
has 3 more significant bits than bf16: the first-order estimate is 2 S / 8, our f16 package
measures 0.0395, and the bound doubles the estimate; the derivation is there). Two f16
implementations, each within that of f64, differ by at most twice it (triangle inequality):
0.159, so 0.16. Against reference.safetensors itself use --tol 0.08. A broken kernel, cast or
binding moves logits by O(1) of scale. The bound is derived for the golden model and prompts
only (docs/export.md).
"""
import argparse
import json
import math
import os
import re
import struct
import subprocess
import sys
import tempfile
from array import array

DEFAULT_TOL = 0.16


def need(module, pip_name):
    """Imports `module`, or exits 1 naming the pip package that provides it."""
    try:
        return __import__(module)
    except ImportError as e:
        sys.exit(f"error: cannot import {module} ({e}); install it with: pip install {pip_name}")


def token_list(text):
    """'1,2,3' -> [1, 2, 3]: non-empty, non-negative integer ids (argparse type)."""
    try:
        ids = [int(t) for t in text.split(",")]
    except ValueError:
        ids = None
    if not ids or any(t < 0 for t in ids):
        raise argparse.ArgumentTypeError(f"expected token ids like 1,2,3, got {text!r}")
    return ids


def read_package(pkg):
    """genai_config.json's decoder section and the page size of a paged package."""
    with open(os.path.join(pkg, "genai_config.json")) as f:
        cfg = json.load(f)
    dec = cfg["model"]["decoder"]
    if "block_table" not in dec["inputs"]:
        sys.exit(f"error: {pkg} is not a packed paged package (no block_table input)")
    return dec, cfg["engine"]["dynamic_batching"]["block_size"]


# ---- engine -------------------------------------------------------------------------------

def format_generation(prompts, outputs, max_new):
    """The lines `pagedhybrid generate` prints: prompt, generated ids, finish reason; prefixed
    `seq{i} ` when there are several sequences. A request GenAI ended early (an eos id, say)
    reads `stop (...)`, which never matches ours: our generate has no stop tokens."""
    lines = []
    for i, (p, g) in enumerate(zip(prompts, outputs)):
        tag = f"seq{i} " if len(prompts) > 1 else ""
        lines.append(f"{tag}prompt: " + ",".join(map(str, p)))
        lines.append(f"{tag}generated:" + (" " + ",".join(map(str, g)) if g else ""))
        reason = "length" if len(g) == max_new else f"stop ({len(g)} of {max_new} tokens)"
        lines.append(f"{tag}finish: {reason}")
    return "\n".join(lines)


def cmd_engine(args):
    np = need("numpy", "numpy")
    og = need("onnxruntime_genai", "onnxruntime-genai-cuda")
    config = og.Config(args.pkg)
    config.clear_providers()
    config.append_provider("cuda")
    model = og.Model(config)
    engine = og.Engine(model)
    tags = [[i] for i in range(len(args.tokens))]  # opaque data is a borrowed pointer: keep alive
    outputs = [[] for _ in args.tokens]
    for i, prompt in enumerate(args.tokens):
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=len(prompt) + args.max_new)
        req = og.Request(params)
        req.add_tokens(np.array(prompt, dtype=np.int32))
        req.set_opaque_data(tags[i])
        engine.add_request(req)
    budget = 4 * len(args.tokens) * (args.max_new + 1) + 16  # a stuck engine is an error
    while (r := engine.step()) is not None:
        budget -= 1
        if budget < 0:
            sys.exit("error: the engine is still stepping after 4x the steps the requests need")
        i = r.get_opaque_data()[0]
        while r.has_unseen_tokens():
            outputs[i].append(int(r.get_unseen_token()))
        # abi.md §8.6 (GenAI main) names it is_turn_complete; earlier bindings, is_done
        if (r.is_turn_complete if hasattr(r, "is_turn_complete") else r.is_done)():
            engine.remove_request(r)
    print(format_generation(args.tokens, outputs, args.max_new))
    return 0


def parse_generation(text):
    """[(prompt, generated)] from `generate`'s (or `engine`'s) stdout."""
    seqs = {}
    for line in text.splitlines():
        m = re.match(r"^(?:seq(\d+) )?(prompt|generated):(.*)$", line)
        if m:
            ids = [int(t) for t in m.group(3).strip().split(",") if t]
            seqs.setdefault(int(m.group(1) or 0), {})[m.group(2)] = ids
    return [(seqs[i]["prompt"], seqs[i].get("generated", [])) for i in sorted(seqs)]


def judge_tokens(seqs, logits, tol, out=print):
    """Each generated token against our logits teacher-forced on the same prefix: token j of a
    sequence with prompt length L is judged on row L-1+j. Logits within tol x scale of ours
    (scale: max |logit| of the sequence) cannot pick a token whose logit lies more than
    2 tol x scale below our top one: closer is a near-tie, further is an error. Returns the
    exit code."""
    worst = 0.0
    for i, (prompt, gen) in enumerate(seqs):
        shape, vals = logits[f"seq{i}.logits"]
        vocab, same = shape[1], 0
        if not all(map(math.isfinite, vals)):
            out(f"  seq{i}: our logits are not finite")
            worst = math.inf
            continue
        scale = max(abs(x) for x in vals)
        for j, tok in enumerate(gen):
            row = vals[(len(prompt) - 1 + j) * vocab:(len(prompt) + j) * vocab]
            top = max(range(vocab), key=row.__getitem__)
            gap = (row[top] - row[tok]) / scale if 0 <= tok < vocab and scale > 0 else math.inf
            worst, same = max(worst, gap), same + (tok == top)
            if tok != top:
                out(f"  seq{i} token {j}: theirs {tok}, our top {top}, {gap:.4g} of scale below "
                    f"it ({'near-tie' if gap <= 2 * tol else 'TOO FAR'})")
        out(f"  seq{i}: {same} of {len(gen)} tokens are our top token")
    out(f"worst gap {worst:.4g} of scale (allowed 2 x tol = {2 * tol:.4g}): "
        f"{'pass' if worst <= 2 * tol else 'FAIL'}")
    return 0 if worst <= 2 * tol else 1


def cmd_tokens(args):
    with open(args.theirs) as f:
        seqs = parse_generation(f.read())
    if not seqs or not any(g for _, g in seqs):
        sys.exit(f"error: no generated tokens in {args.theirs}")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "forced.safetensors")
        cmd = [args.pagedhybrid, "generate", "--model", args.pkg, "--max-new", "0",
               "--logits-out", path]
        for prompt, gen in seqs:
            cmd += ["--tokens", ",".join(map(str, prompt + gen))]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"error: {' '.join(cmd[:2])} failed ({run.returncode}): {run.stderr.strip()}")
        return judge_tokens(seqs, read_f32_safetensors(path), args.tol)


# ---- step ---------------------------------------------------------------------------------

def packed_step(seqs, block_size):
    """The integer inputs of one packed prefill step from empty state, as Python lists:
    sequences back to back; positions 0..T_i-1; each sequence its own pages, numbered from 1
    (page 0 is the null page and pads block_table rows, graph-io.md); attention_metadata
    [max query length, max KV length, 0] (nothing is cached yet, so both are the longest
    prompt)."""
    n_pages = [-(-len(s) // block_size) for s in seqs]
    cu, table, next_page = [0], [], 1
    for s, n in zip(seqs, n_pages):
        cu.append(cu[-1] + len(s))
        table.append(list(range(next_page, next_page + n)) + [0] * (max(n_pages) - n))
        next_page += n
    longest = max(len(s) for s in seqs)
    return {
        "input_ids": [t for s in seqs for t in s],
        "positions": [p for s in seqs for p in range(len(s))],
        "cumulative_sequence_lengths": cu,
        "past_sequence_lengths": [0] * len(seqs),
        "block_table": table,
        "attention_metadata": [longest, longest, 0],
        "num_blocks": next_page,
    }


def state_names(dec):
    """{graph input: graph output} of every state tensor the state groups name."""
    ins, outs, pairs = dec["inputs"], dec["outputs"], {}
    kinds = {"paged_kv": ("key", "value"), "fixed_conv": ("conv",),
             "fixed_recurrent": ("recurrent",)}
    for group in dec.get("state_groups", []):
        for part in kinds[group["kind"]]:
            for layer in group["layer_ids"]:
                pairs[ins[f"past_{part}_names"] % layer] = outs[f"present_{part}_names"] % layer
    return pairs


def state_shape(name, dims, num_blocks, batch):
    """A state input's shape with its leading symbolic dim filled: the page count for KV pages
    (past_key_values.*.key/value), the batch for conv and recurrent states."""
    lead = num_blocks if name.endswith((".key", ".value")) else batch
    shape = [lead] + list(dims[1:])
    if not all(isinstance(d, int) for d in shape):
        sys.exit(f"error: {name} has symbolic dims {dims} beyond the first")
    return shape


NP_TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16",
            "tensor(int64)": "int64", "tensor(int32)": "int32"}
INT_TYPES = {"input_ids": "int64", "position_ids": "int64", "block_table": "int32",
             "cumulative_sequence_lengths": "int32", "past_sequence_lengths": "int32",
             "attention_metadata": "int32"}


def int_arrays(np, plan, pos_rank):
    """The packed step's integer inputs as numpy arrays, keyed by genai_config's input keys.
    position_ids is [3, N] (MRoPE planes, equal for text) or [N] (plain RoPE)."""
    pos = plan["positions"]
    arrays = {k: np.array(plan[k], dtype=t) for k, t in INT_TYPES.items() if k != "position_ids"}
    arrays["position_ids"] = np.array([pos] * 3 if pos_rank == 2 else pos, dtype=np.int64)
    return arrays


def cmd_step(args):
    np = need("numpy", "numpy")
    ort = need("onnxruntime", "onnxruntime-gpu")
    dec, block_size = read_package(args.pkg)
    sess = ort.InferenceSession(os.path.join(args.pkg, dec["filename"]),
                                providers=["CUDAExecutionProvider"])
    if "CUDAExecutionProvider" not in sess.get_providers():
        sys.exit(f"error: no CUDA EP in this onnxruntime ({sess.get_providers()})")
    graph_in = {i.name: i for i in sess.get_inputs()}
    graph_out = {o.name: o for o in sess.get_outputs()}
    named = [dec["inputs"][k] for k in INT_TYPES] + list(state_names(dec))
    if set(named) - set(graph_in) or dec["outputs"]["logits"] not in graph_out:
        sys.exit(f"error: genai_config.json names I/O model.onnx lacks: "
                 f"{sorted(set(named) - set(graph_in))} {dec['outputs']['logits']}")
    plan = packed_step(args.tokens, block_size)
    batch, n = len(args.tokens), len(plan["input_ids"])
    io = sess.io_binding()

    logits_name = dec["outputs"]["logits"]
    if graph_out[logits_name].type not in ("tensor(float)", "tensor(float16)"):
        sys.exit(f"error: logits are {graph_out[logits_name].type}; this script reads f32/f16")
    io.bind_output(logits_name, "cpu")  # first bound: io.get_outputs()[0]
    bound_in, bound_out = set(), {logits_name}
    ints = int_arrays(np, plan, len(graph_in[dec["inputs"]["position_ids"]].shape))
    for key, arr in ints.items():
        name = dec["inputs"][key]
        if graph_in[name].type != f"tensor({arr.dtype.name})":
            sys.exit(f"error: {name} is {graph_in[name].type}, the ABI says {arr.dtype.name}")
        io.bind_cpu_input(name, arr)  # attention_metadata must stay in CPU memory
        bound_in.add(name)
    keep = []  # OrtValues must outlive the run
    for past, present in state_names(dec).items():
        info = graph_in[past]
        shape = state_shape(past, info.shape, plan["num_blocks"], batch)
        if info.type == "tensor(bfloat16)":  # no numpy bf16: raw zero bits into a bf16 tensor
            v = ort.OrtValue.ortvalue_from_shape_and_type(shape, 16, "cuda", 0)
            v.update_inplace(np.zeros(shape, dtype=np.uint16))
        else:
            v = ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, NP_TYPES[info.type]), "cuda", 0)
        keep.append(v)
        io.bind_ortvalue_input(past, v)
        if past.endswith((".key", ".value")):
            io.bind_ortvalue_output(present, v)  # the same buffer (abi.md §1.4)
        else:
            io.bind_output(present, "cuda")
        bound_in.add(past)
        bound_out.add(present)
    missing = sorted(set(graph_in) - bound_in) + sorted(set(graph_out) - bound_out)
    if missing:
        sys.exit(f"error: graph I/O that genai_config.json does not name: {missing}")
    sess.run_with_iobinding(io)

    logits = io.get_outputs()[0].numpy().astype("<f4")  # little-endian f32, as the file holds
    if logits.shape[0] != n:
        sys.exit(f"error: logits have {logits.shape[0]} rows for {n} tokens "
                 "(a --prune-lm-head package has no per-position logits)")
    cu = plan["cumulative_sequence_lengths"]
    tensors = [(f"seq{i}.logits", logits[cu[i]:cu[i + 1]]) for i in range(batch)]
    if batch == 1:
        tensors.append(("logits", logits))
    write_f32_safetensors(args.out, [(k, list(v.shape), v.tobytes()) for k, v in tensors])
    print(f"wrote {args.out}: {batch} sequences, {n} tokens, {logits.shape[1]} logits each")
    return 0


# ---- safetensors (F32 only, as `generate --logits-out` writes) ------------------------------

def write_f32_safetensors(path, tensors):
    """tensors: [(name, shape, little-endian f32 bytes)], written in that order with the
    header our writer uses ({"__metadata__":{"format":"pt"}}, compact, space-padded to 8)."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, data in tensors:
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, _, data in tensors:
            f.write(data)


def read_f32_safetensors(path):
    """{name: (shape, array('f'))} of every F32 tensor (other dtypes are skipped)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        a, b = t["data_offsets"]
        values = array("f", blob[8 + n + a:8 + n + b])
        if sys.byteorder == "big":
            values.byteswap()
        out[name] = (t["shape"], values)
    return out


# ---- compare ------------------------------------------------------------------------------

def deviation(a, b):
    """(max|a-b|, max|a|) over two equal-length float sequences; a non-finite value in either
    makes the difference infinite (max() alone would drop a NaN)."""
    try:
        import numpy as np
    except ImportError:
        np = None
    if np is not None:
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        fa = np.isfinite(a)
        scale = float(np.abs(a[fa]).max()) if fa.any() else 0.0
        if not (fa.all() and np.isfinite(b).all()):
            return math.inf, scale
        return (float(np.abs(a - b).max()) if a.size else 0.0), scale
    err = scale = 0.0
    for x, y in zip(a, b):
        if not (math.isfinite(x) and math.isfinite(y)):
            err = math.inf
        else:
            err, scale = max(err, abs(x - y)), max(scale, abs(x))
    return err, scale


def compare(ours, theirs, tol, out=print):
    """Compares the tensors both files have, over their common leading rows; returns the exit
    code (0 all within tol, 1 otherwise or when nothing is common)."""
    worst, common = 0.0, sorted(set(ours) & set(theirs))
    alone = sorted(set(ours) ^ set(theirs))
    if alone:
        out(f"  skipped {len(alone)} tensors in one file only: {', '.join(alone[:3])}"
            + (", ..." if len(alone) > 3 else ""))
    for name in common:
        (sa, a), (sb, b) = ours[name], theirs[name]
        if sa[1:] != sb[1:]:
            out(f"  {name}: shapes {sa} and {sb} differ beyond the rows")
            worst = math.inf
            continue
        rows = min(sa[0], sb[0]) if sa else 1
        width = len(a) // sa[0] if sa and sa[0] else 1
        err, scale = deviation(a[:rows * width], b[:rows * width])
        ratio = err / scale if scale > 0 else (0.0 if err == 0 else math.inf)
        worst = max(worst, ratio)
        out(f"  {name}: rows {rows} of {sa[0] if sa else 1}/{sb[0] if sb else 1}, "
            f"max|a-b| {err:.4g}, max|a| {scale:.4g}, {ratio:.4g} of scale "
            f"{'ok' if ratio <= tol else 'ABOVE TOL'}")
    if not common:
        out("no tensor in common")
        return 1
    out(f"worst {worst:.4g} of scale over {len(common)} tensors (tol {tol}): "
        f"{'pass' if worst <= tol else 'FAIL'}")
    return 0 if worst <= tol else 1


def cmd_compare(args):
    return compare(read_f32_safetensors(args.ours), read_f32_safetensors(args.theirs), args.tol)


# ---- selftest -----------------------------------------------------------------------------

def cmd_selftest(args):
    failed = []

    def check(ok, what):
        print(f"  {'ok  ' if ok else 'FAIL'} {what}")
        if not ok:
            failed.append(what)

    parser = build_parser()
    a = parser.parse_args(["step", "P", "--tokens", "1,2,3", "--tokens", "4,5", "--out", "o"])
    check(a.tokens == [[1, 2, 3], [4, 5]], "repeated --tokens parse to id lists")
    for bad in ("", "1,,2", "1,-2", "x", "1.5"):
        try:
            token_list(bad)
            check(False, f"--tokens {bad!r} refused")
        except argparse.ArgumentTypeError:
            check(True, f"--tokens {bad!r} refused")

    p = packed_step([[7, 8, 9], [4, 5]], 256)
    check(p["input_ids"] == [7, 8, 9, 4, 5] and p["positions"] == [0, 1, 2, 0, 1],
          "packed ids and positions: sequences back to back, each from 0")
    check(p["cumulative_sequence_lengths"] == [0, 3, 5] and p["past_sequence_lengths"] == [0, 0],
          "cumulative lengths [0,3,5], past lengths zero")
    check(p["block_table"] == [[1], [2]] and p["num_blocks"] == 3,
          "one page each, disjoint, page 0 unused: 3 pages")
    check(p["attention_metadata"] == [3, 3, 0], "attention_metadata [max q, max kv, 0]")
    p = packed_step([[1] * 40, [2] * 16, [3]], 16)
    check(p["block_table"] == [[1, 2, 3], [4, 0, 0], [5, 0, 0]] and p["num_blocks"] == 6,
          "pages of 16: 40 tokens take 3, rows padded with the null page 0")
    check(p["attention_metadata"] == [40, 40, 0], "metadata bounds the longest prompt")

    dec = {"inputs": {"past_key_names": "past_key_values.%d.key",
                      "past_value_names": "past_key_values.%d.value",
                      "past_conv_names": "past_key_values.%d.conv_state",
                      "past_recurrent_names": "past_key_values.%d.recurrent_state"},
           "outputs": {"present_key_names": "present.%d.key",
                       "present_value_names": "present.%d.value",
                       "present_conv_names": "present.%d.conv_state",
                       "present_recurrent_names": "present.%d.recurrent_state"},
           "state_groups": [{"kind": "paged_kv", "layer_ids": [3]},
                            {"kind": "fixed_conv", "layer_ids": [0, 1]},
                            {"kind": "fixed_recurrent", "layer_ids": [0, 1]}]}
    pairs = state_names(dec)
    check(len(pairs) == 6 and pairs["past_key_values.3.value"] == "present.3.value"
          and pairs["past_key_values.1.recurrent_state"] == "present.1.recurrent_state",
          "state groups give each past name its present name")
    check(state_shape("past_key_values.3.key", ["num_blocks", 256, 2, 32], 3, 2)
          == [3, 256, 2, 32], "KV pages: leading dim is the page count")
    check(state_shape("past_key_values.0.conv_state", ["batch_size", 128, 3], 3, 2)
          == [2, 128, 3], "conv state: leading dim is the batch")

    nan, inf = float("nan"), float("inf")
    quiet = lambda *_: None
    check(deviation([1.0, -4.0], [1.5, -4.0]) == (0.5, 4.0), "max|a-b| and max|a|")
    check(deviation([1.0, 2.0], [1.0, nan])[0] == inf, "NaN in THEIRS counts as infinite")
    check(deviation([nan, 2.0], [1.0, 2.0])[0] == inf, "NaN in OURS counts as infinite")
    with tempfile.TemporaryDirectory() as tmp:
        f1, f2 = os.path.join(tmp, "a.safetensors"), os.path.join(tmp, "b.safetensors")
        rows = array("f", [1.0, -2.0, 0.5, 4.0, 3.0, 1.0])
        write_f32_safetensors(f1, [("seq0.logits", [3, 2], rows.tobytes()),
                                   ("only_a", [1], array("f", [1.0]).tobytes())])
        back = read_f32_safetensors(f1)
        check(back["seq0.logits"] == ([3, 2], rows), "safetensors F32 round trip")
        with open(f1, "rb") as f:
            blob = f.read()
        (hn,) = struct.unpack("<Q", blob[:8])
        check((8 + hn) % 8 == 0 and blob[8:9] == b"{", "header padded to a multiple of 8")
        near = array("f", [1.0, -2.0, 0.5, 4.1])  # 2 rows: 0.1 of scale 4
        write_f32_safetensors(f2, [("seq0.logits", [2, 2], near.tobytes())])
        ours, theirs = read_f32_safetensors(f1), read_f32_safetensors(f2)
        check(compare(ours, theirs, 0.0249, quiet) == 1 and compare(ours, theirs, 0.026, quiet)
              == 0, "common rows only: 0.1 / 4 = 0.025 of scale, judged against tol")
        check(compare(ours, {}, 1.0, quiet) == 1, "nothing in common fails")
        bad = {"seq0.logits": ([2, 2], array("f", [1.0, -2.0, nan, 4.0]))}
        check(compare(ours, bad, 1e9, quiet) == 1, "a NaN fails at any tolerance")
        wide = {"seq0.logits": ([3, 3], array("f", [0.0] * 9))}
        check(compare(ours, wide, 1e9, quiet) == 1, "a different vocab fails")
    out = format_generation([[1, 2, 3], [4, 5]], [[9, 8], [7]], 2).splitlines()
    check(out == ["seq0 prompt: 1,2,3", "seq0 generated: 9,8", "seq0 finish: length",
                  "seq1 prompt: 4,5", "seq1 generated: 7", "seq1 finish: stop (1 of 2 tokens)"],
          "engine output in generate's format, several sequences")
    check(format_generation([[1, 2, 3]], [[]], 0).splitlines()
          == ["prompt: 1,2,3", "generated:", "finish: length"], "one sequence: no seq tag")
    check(parse_generation("\n".join(out)) == [([1, 2, 3], [9, 8]), ([4, 5], [7])]
          and parse_generation("prompt: 1,2\ngenerated:\nfinish: length") == [([1, 2], [])],
          "generate's output parses back")
    rows = array("f", [0, 0, 0, 0,  0, 4.0, 3.9, -4.0,  0, 1.0, 2.0, 3.0])  # prompt [5, 6]
    forced = {"seq0.logits": ([3, 4], rows)}
    check(judge_tokens([([5, 6], [1, 3])], forced, 0.02, quiet) == 0, "our top tokens pass")
    check(judge_tokens([([5, 6], [2, 3])], forced, 0.02, quiet) == 0,
          "0.1 below the top of 4: a near-tie at tol 0.02 (0.025 of scale <= 0.04)")
    check(judge_tokens([([5, 6], [2, 3])], forced, 0.01, quiet) == 1, "but too far at tol 0.01")
    check(judge_tokens([([5, 6], [1, 0])], forced, 1.0, quiet) == 0 and
          judge_tokens([([5, 6], [1, 0])], forced, 0.3, quiet) == 1, "a token 0.75 of scale below the top: passes at tol 1, not 0.3")
    check(judge_tokens([([5, 6], [1, 9])], forced, 1e9, quiet) == 1, "a token beyond the vocab")
    nan_rows = {"seq0.logits": ([3, 4], array("f", list(rows[:11]) + [nan]))}
    check(judge_tokens([([5, 6], [1, 3])], nan_rows, 1e9, quiet) == 1, "NaN logits fail")

    try:
        import numpy as np
    except ImportError:
        print("  skip numpy not installed: int_arrays not checked")
    else:
        arr = int_arrays(np, packed_step([[7, 8, 9], [4, 5]], 256), 2)
        check(arr["position_ids"].shape == (3, 5) and arr["position_ids"].dtype == np.int64
              and (arr["position_ids"] == [[0, 1, 2, 0, 1]] * 3).all(),
              "position_ids [3, N] int64, three equal planes")
        check(arr["input_ids"].dtype == np.int64 and arr["block_table"].shape == (2, 1)
              and all(arr[k].dtype == np.int32 for k in ("block_table", "attention_metadata",
                      "cumulative_sequence_lengths", "past_sequence_lengths")),
              "ids int64; block_table [B, max_blocks], lengths and metadata int32")
        check(int_arrays(np, packed_step([[1, 2]], 16), 1)["position_ids"].shape == (2,),
              "plain-RoPE position_ids [N]")
    print(f"selftest: {'FAIL, ' + str(len(failed)) + ' failed' if failed else 'all passed'}")
    return 1 if failed else 0


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("engine", "step"):
        p = sub.add_parser(name)
        p.add_argument("pkg", help="package directory (model.onnx, genai_config.json)")
        p.add_argument("--tokens", type=token_list, action="append", required=True,
                       help="prompt token ids, comma-separated; repeat for more sequences")
    sub.choices["engine"].add_argument("--max-new", type=int, default=16,
                                       help="tokens to generate greedily (default 16, >= 1)")
    sub.choices["step"].add_argument("--out", required=True, help="logits file (safetensors)")
    p = sub.add_parser("compare")
    p.add_argument("ours")
    p.add_argument("theirs")
    p.add_argument("--tol", type=float, default=DEFAULT_TOL,
                   help=f"max |a-b| / max |a| per tensor (default {DEFAULT_TOL})")
    p = sub.add_parser("tokens")
    p.add_argument("pkg", help="the package the engine ran")
    p.add_argument("theirs", help="the engine subcommand's output")
    p.add_argument("--pagedhybrid", default=os.path.join(os.path.dirname(
        os.path.abspath(__file__)), "..", "build", "release", "pagedhybrid"),
        help="our CLI (default: build/release/pagedhybrid beside this script)")
    p.add_argument("--tol", type=float, default=DEFAULT_TOL,
                   help=f"the logits tolerance; a token may be 2 x tol below our top")
    sub.add_parser("selftest")
    return parser


def main():
    args = build_parser().parse_args()
    if args.cmd == "engine" and args.max_new < 1:
        build_parser().error("--max-new must be >= 1 (GenAI's max_length is prompt + new)")
    return {"engine": cmd_engine, "tokens": cmd_tokens, "step": cmd_step,
            "compare": cmd_compare, "selftest": cmd_selftest}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
