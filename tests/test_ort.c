/* test_ort — exported packages against ONNX Runtime 1.30 (onnxruntime-node, CPU EP): a real
 * runtime, written elsewhere, runs what we emit (docs/ort-check.md).
 *
 * For each golden checkpoint, the dense package is exported with weights f32 and f16 (and, for
 * the bf16 checkpoint, as stored: bf16; activations are f32 in all), read back with
 * onnx_read_model and run by our executor; the same package runs on ORT through
 * tests/ort/run_ort.mjs (a node process; inputs and outputs travel as safetensors files). Both see
 * identical inputs:
 *   prefill       a whole golden sequence from empty state (past K/V [1, Hkv, 0, D], zero conv and
 *                 recurrent states) — sequence 0 (5-7 tokens) and sequence 1 (70 / 130 tokens:
 *                 crosses LinearAttention's 64-token chunk);
 *   continuation  more tokens (5 after sequence 0, 1 after sequence 1) with past = the prefill's
 *                 present outputs (ours, so both runtimes start the step from the same bytes).
 * Every graph output (logits and every present.*) must match within TOL_PAIR of the tensor's own
 * scale (max |ORT value|). Where the package's weights are exactly the checkpoint's (f32, and bf16
 * as stored), ORT's prefill logits must also match the golden float64 reference within
 * TOL_GOLDEN: the graph is the model, not just something two runtimes agree on.
 *
 * Tolerances (tests/check.h). ORT against the golden reference: GOLDEN_F32_TOL, 2e-4 of scale,
 * the bound the golden references give any float32 implementation of the model. Ours against
 * ORT: two such implementations, each within that bound of the f64 result, so within twice it
 * (PAIR_F32_TOL, triangle inequality); both compute in f32 and differ only in summation order,
 * so they land far closer (printed). f16 weights: the same bounds. The package stores the
 * weights f16 behind a Cast to f32;
 * ORT runs that Cast (exact: every f16 is an f32) and an f32 MatMul, our executor reads the f16
 * bytes in its MatMulWT and widens them exactly. Both compute the same f32 function of the same
 * weights, so only arithmetic order differs again; ORT inserts no casts of activations (they are
 * f32 throughout, and its Cast insertion only wraps float-only kernels fed f16 activations; the
 * model ORT writes with optimizedModelFilePath holds exactly our Casts).
 * bf16 weights as stored: the same argument (bf16 -> f32 is exact too).
 * The measured errors are printed; a real mistake is orders of magnitude above the bound.
 * Quantized packages (test_ort_quantized: int8 and int4, sym and asym, at accuracy_level 1): the
 * same TOL_PAIR, argued there. At accuracy_level 4 ORT 1.30's CPU kernel quantizes the
 * activations to int8 per block for 4 and 8 bits alike (measured: 1e-2 .. 4e-1 of scale from its
 * own level-1 result on these random tiny models, docs/export.md), so level 4 is not a pair check.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <jansson.h>

#include "onnx.pb-c.h"

#include "base/fmap.h"
#include "check.h"
#include "exec/exec.h"
#include "graph/prepare.h"
#include "io/onnx.h"
#include "io/safetensors.h"
#include "models/export.h"
#include "models/model.h"
#include "models/tiny.h"
#include "ort_testing.h"
#include "tensor/dtype.h"

#define TOL_PAIR   PAIR_F32_TOL   /* ours vs ORT */
#define TOL_GOLDEN GOLDEN_F32_TOL /* ORT vs the f64 golden reference */
/* graph inputs or outputs: 2 per layer + 3; the golden models have 4 and 8 layers */
#define MAX_IO     64

/* ---- named tensors (the I/O of one run) ---------------------------------------------------- */

typedef struct named {
  char name[96];
  ph_dtype dtype;
  int rank;
  int64_t dims[TENSOR_MAX_DIMS];
  void *data; /* owned; NULL when empty */
} named;

typedef struct io_list {
  named t[MAX_IO];
  int n;
} io_list;

static int64_t named_numel(const named *t) {
  int64_t n = 1;
  for (int k = 0; k < t->rank; k++) n *= t->dims[k];
  return n;
}

/* Appends a tensor with a copy of data (zeroed when data is NULL). */
static named *io_add(io_list *l, const char *name, ph_dtype dt, int rank, const int64_t *dims,
                     const void *data) {
  if (l->n >= MAX_IO) return NULL;
  named *t = &l->t[l->n++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->dtype = dt;
  t->rank = rank;
  memcpy(t->dims, dims, (size_t)rank * sizeof(int64_t));
  size_t bytes = (size_t)named_numel(t) * dtype_size(dt);
  if (bytes) {
    t->data = calloc(1, bytes);
    if (data && t->data) memcpy(t->data, data, bytes);
  }
  return t;
}

static const named *io_find(const io_list *l, const char *name) {
  for (int i = 0; i < l->n; i++)
    if (strcmp(l->t[i].name, name) == 0) return &l->t[i];
  return NULL;
}

static void io_free(io_list *l) {
  for (int i = 0; i < l->n; i++) free(l->t[i].data);
  l->n = 0;
}

/* ---- inputs -------------------------------------------------------------------------------- */

/* The inputs of one step of S tokens after P cached ones, for whatever inputs the graph
 * declares (docs/graph-io.md). past_key_values.X comes from prev's present.X, or, from empty
 * state (prev NULL), is zeros with the graph's static dims, batch 1 and past length 0. */
static int make_inputs(const graph *g, const int64_t *tokens, int64_t S, int64_t P,
                       const io_list *prev, io_list *in) {
  int64_t buf[3 * 256];
  for (int i = 0; i < g->n_inputs; i++) {
    const gvalue *v = &g->values[g->inputs[i]];
    const tinfo *ty = &v->type;
    named *t = NULL;
    if (strcmp(v->name, "input_ids") == 0) {
      t = io_add(in, v->name, PH_DTYPE_I64, 2, (int64_t[]){1, S}, tokens);
    } else if (strcmp(v->name, "attention_mask") == 0) {
      for (int64_t k = 0; k < P + S; k++) buf[k] = 1;
      t = io_add(in, v->name, PH_DTYPE_I64, 2, (int64_t[]){1, P + S}, buf);
    } else if (strcmp(v->name, "position_ids") == 0) {
      /* text: the MRoPE planes T, H, W are equal */
      for (int r = 0; r < 3; r++)
        for (int64_t k = 0; k < S; k++) buf[r * S + k] = P + k;
      t = ty->rank == 3 ? io_add(in, v->name, PH_DTYPE_I64, 3, (int64_t[]){3, 1, S}, buf)
                        : io_add(in, v->name, PH_DTYPE_I64, 2, (int64_t[]){1, S}, buf);
    } else if (strncmp(v->name, "past_key_values.", 16) == 0) {
      char present[128];
      snprintf(present, sizeof present, "present.%s", v->name + 16);
      const named *src = prev ? io_find(prev, present) : NULL;
      if (prev && !src) {
        fprintf(stderr, "    %s: no output %s to feed back\n", v->name, present);
        return 0;
      }
      if (src) {
        t = io_add(in, v->name, src->dtype, src->rank, src->dims, src->data);
      } else {
        int64_t dims[TENSOR_MAX_DIMS];
        for (int k = 0; k < ty->rank; k++) dims[k] = k == 0 ? 1 : ty->dims[k] < 0 ? 0 : ty->dims[k];
        t = io_add(in, v->name, ty->dtype, ty->rank, dims, NULL);
      }
    } else {
      fprintf(stderr, "    graph input %s is not a dense decoder input\n", v->name);
      return 0;
    }
    if (!t) return 0;
    if (t->dtype != ty->dtype) {
      fprintf(stderr, "    graph input %s: dtype %s, expected %s\n", v->name,
              dtype_safetensors_name(ty->dtype), dtype_safetensors_name(t->dtype));
      return 0;
    }
  }
  return 1;
}

/* ---- the two runtimes ---------------------------------------------------------------------- */

static int run_ours(executor *e, const graph *g, const io_list *in, io_list *out, diag *d) {
  for (int i = 0; i < in->n; i++) {
    const named *n = &in->t[i];
    tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = n->dtype;
    t.rank = n->rank;
    memcpy(t.dims, n->dims, sizeof t.dims);
    t.data = n->data;
    int k = exec_input_index(e, n->name);
    if (k < 0 || exec_bind_input(e, k, &t, d) != PH_OK) return 0;
  }
  if (exec_run(e, d) != PH_OK) return 0;
  for (int i = 0; i < g->n_outputs; i++) {
    const char *name = g->values[g->outputs[i]].name;
    const tensor *t = exec_output(e, exec_output_index(e, name));
    if (!io_add(out, name, t->dtype, t->rank, t->dims, t->data)) return 0;
  }
  return 1;
}

/* Runs pkg on ONNX Runtime (ort_run, files <tag>.in/out.safetensors): in, and every output into
 * out. */
static int run_ort(const char *pkg, const char *tag, const io_list *in, io_list *out,
                   double *seconds) {
  st_write_entry e[MAX_IO];
  static const char empty[1]; /* data of zero-element tensors: must be non-NULL */
  for (int i = 0; i < in->n; i++) {
    const named *n = &in->t[i];
    e[i].name = n->name;
    e[i].dtype = n->dtype;
    e[i].shape = shape_make(n->rank, n->dims);
    e[i].data = n->data ? n->data : empty;
  }
  st_set *set = NULL;
  if (!ort_run(pkg, tag, e, (size_t)in->n, &set, seconds)) return 0;
  int ok = 1;
  for (size_t i = 0; i < st_count(set) && ok; i++) {
    const st_tensor *t = st_at(set, i);
    ok = io_add(out, t->name, t->dtype, t->shape.n_dims, t->shape.dims, t->data) != NULL;
  }
  st_close(set);
  return ok;
}

/* ---- comparison ---------------------------------------------------------------------------- */

/* max |got - ref| / max |ref| over n f32 values (NaN anywhere counts as infinite error). */
static double rel_error(const float *got, const float *ref, int64_t n, int64_t *worst) {
  double scale = 0.0, err = 0.0;
  *worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double r = fabs((double)ref[i]), e = fabs((double)got[i] - (double)ref[i]);
    if (r > scale) scale = r;
    if (e != e) e = INFINITY;
    if (e > err) {
      err = e;
      *worst = i;
    }
  }
  return scale > 0 ? err / scale : err;
}

typedef struct worst {
  double logits, present;
  char present_name[96];
} worst;

/* Every ORT output against ours: same dtype and dims, values within TOL_PAIR of scale. */
static void compare_outputs(const char *what, const io_list *ours, const io_list *ort, worst *w) {
  CHECK_EQ_INT(ort->n, ours->n);
  CHECK(ort->n >= 3); /* logits and at least one layer's two presents: never a vacuous pass */
  for (int i = 0; i < ort->n; i++) {
    const named *r = &ort->t[i], *o = io_find(ours, r->name);
    if (!check_report(o != NULL, __FILE__, __LINE__, "ORT output is one of ours")) {
      fprintf(stderr, "       %s: ORT output %s\n", what, r->name);
      continue;
    }
    int same = o->dtype == r->dtype && o->dtype == PH_DTYPE_F32 && o->rank == r->rank &&
               memcmp(o->dims, r->dims, (size_t)r->rank * sizeof(int64_t)) == 0;
    if (!check_report(same, __FILE__, __LINE__, "output dtype and shape agree")) {
      fprintf(stderr, "       %s: %s\n", what, r->name);
      continue;
    }
    int64_t at, n = named_numel(r);
    double rel = n ? rel_error(o->data, r->data, n, &at) : 0.0;
    if (!check_report(rel <= TOL_PAIR, __FILE__, __LINE__, "ours ~= ORT within TOL_PAIR of scale"))
      fprintf(stderr, "       %s: %s rel error %.3g at %lld: ours %.7g, ORT %.7g\n", what, r->name,
              rel, (long long)at, (double)((float *)o->data)[at], (double)((float *)r->data)[at]);
    if (strcmp(r->name, "logits") == 0) {
      if (rel > w->logits) w->logits = rel;
    } else if (rel >= w->present) {
      w->present = rel;
      snprintf(w->present_name, sizeof w->present_name, "%s", r->name);
    }
  }
}

/* ---- golden sets --------------------------------------------------------------------------- */

typedef struct golden {
  const char *name;
  ph_model *model;
  st_set *ref;
  int64_t tokens[2][256];
  int64_t n_tokens[2];
} golden;

static int load_golden(golden *g, const char *name) {
  memset(g, 0, sizeof *g);
  g->name = name;
  char path[1200];
  check_data(path, sizeof path, "golden/%s/checkpoint", name);
  ph_status s = ph_model_open(path, NULL, &g->model);
  CHECK_STATUS(s, PH_OK, ph_model_error(g->model));
  if (s != PH_OK) return 0;
  diag d;
  check_data(path, sizeof path, "golden/%s/reference.safetensors", name);
  s = st_open_file(path, &g->ref, &d);
  CHECK_STATUS(s, PH_OK, d.msg);
  check_data(path, sizeof path, "golden/%s/manifest.json", name);
  json_error_t e;
  json_t *m = json_load_file(path, 0, &e);
  CHECK(m != NULL);
  if (!m || s != PH_OK) {
    json_decref(m);
    return 0;
  }
  json_t *seqs = json_object_get(m, "sequences");
  int ok = json_array_size(seqs) >= 2;
  for (size_t i = 0; i < 2 && ok; i++) {
    json_t *toks = json_object_get(json_array_get(seqs, i), "tokens");
    g->n_tokens[i] = (int64_t)json_array_size(toks);
    ok = g->n_tokens[i] >= 1 && g->n_tokens[i] <= 250; /* leaves room for a continuation */
    for (size_t k = 0; ok && k < json_array_size(toks); k++)
      g->tokens[i][k] = json_integer_value(json_array_get(toks, k));
  }
  json_decref(m);
  CHECK(ok);
  return ok;
}

static void free_golden(golden *g) {
  ph_model_free(g->model);
  st_close(g->ref);
}

/* ---- the check ----------------------------------------------------------------------------- */

/* Exports the dense package with weights of dtype wdt into dir. */
static ph_status export_package(const ph_model *m, const char *dir, ph_dtype wdt, export_rotary rot,
                                const ph_quant_params *q, diag *d) {
  export_options opt = export_options_default();
  opt.dtype = wdt;
  opt.rotary = rot;
  if (q) opt.quant = *q;
  opt.force = 1; /* a rerun writes over the last run's package */
  return model_export(m, dir, &opt, d);
}

/* One sequence: prefill it from empty state, then continue with n_cont tokens; both steps run on
 * both runtimes and are compared. When the weights are exactly the checkpoint's (exact), the ORT
 * prefill logits are also checked against the golden reference of that sequence. */
static void check_sequence(const golden *gs, int seq, const int64_t *cont, int64_t n_cont, graph *g,
                           executor *e, const char *pkg, const char *tag, int exact,
                           double *ort_s) {
  io_list in = {0}, ours = {0}, ort = {0}, in2 = {0}, ours2 = {0}, ort2 = {0};
  worst wp = {0}, wc = {0};
  diag d;
  char t1[256], t2[256];
  const int64_t T = gs->n_tokens[seq];
  snprintf(t1, sizeof t1, "%s.seq%d.prefill", tag, seq);
  snprintf(t2, sizeof t2, "%s.seq%d.cont", tag, seq);

  int ok = make_inputs(g, gs->tokens[seq], T, 0, NULL, &in);
  CHECK(ok);
  if (ok) ok = run_ours(e, g, &in, &ours, &d);
  if (!check_report(ok, __FILE__, __LINE__, "our executor ran the prefill"))
    fprintf(stderr, "       %s\n", d.msg);
  if (ok && (ok = run_ort(pkg, t1, &in, &ort, ort_s))) compare_outputs(t1, &ours, &ort, &wp);

  /* ORT against the float64 reference (exact weights only: rounded weights are another model) */
  double golden_rel = -1;
  char name[64];
  snprintf(name, sizeof name, "seq%d.logits", seq);
  const st_tensor *ref = st_find(gs->ref, name);
  const named *lg = ok ? io_find(&ort, "logits") : NULL;
  if (ref && lg && ref->dtype == PH_DTYPE_F32 && named_numel(lg) == shape_numel(&ref->shape)) {
    float *r = malloc((size_t)shape_numel(&ref->shape) * sizeof(float));
    memcpy(r, ref->data, (size_t)shape_numel(&ref->shape) * sizeof(float)); /* maybe unaligned */
    int64_t at;
    golden_rel = rel_error(lg->data, r, named_numel(lg), &at);
    free(r);
    if (exact) {
      if (!check_report(golden_rel <= TOL_GOLDEN, __FILE__, __LINE__,
                        "ORT logits ~= golden reference"))
        fprintf(stderr, "       %s: rel error %.3g\n", t1, golden_rel);
    }
  } else if (ok) {
    CHECK(ref != NULL && lg != NULL);
  }

  if (ok) {
    ok = make_inputs(g, cont, n_cont, T, &ours, &in2);
    CHECK(ok);
    if (ok) ok = run_ours(e, g, &in2, &ours2, &d);
    if (!check_report(ok, __FILE__, __LINE__, "our executor ran the continuation"))
      fprintf(stderr, "       %s\n", d.msg);
    if (ok && run_ort(pkg, t2, &in2, &ort2, ort_s)) compare_outputs(t2, &ours2, &ort2, &wc);
  }
  char vs_golden[64] = "n/a";
  if (golden_rel >= 0)
    snprintf(vs_golden, sizeof vs_golden, "%.2e%s", golden_rel,
             exact ? "" : " (rounded weights: info)");
  printf("  %-28s prefill %3lld: logits %.2e  present %.2e (%s); ORT vs golden %s\n"
         "  %-28s  + cont %3lld: logits %.2e  present %.2e (%s)\n",
         tag, (long long)T, wp.logits, wp.present, wp.present_name, vs_golden, "",
         (long long)n_cont, wc.logits, wc.present, wc.present_name);
  io_free(&in);
  io_free(&ours);
  io_free(&ort);
  io_free(&in2);
  io_free(&ours2);
  io_free(&ort2);
}

/* wdt: the export's weight dtype (PH_DTYPE_INVALID: as stored); exact: those weights are the
 * checkpoint's values exactly; rot: the form of RoPE; q: the quantization (NULL: none). */
static void check_set_full(const char *set, ph_dtype wdt, int exact, export_rotary rot,
                           const ph_quant_params *q) {
  golden gs;
  if (!load_golden(&gs, set)) {
    free_golden(&gs);
    return;
  }
  const char *dt = wdt == PH_DTYPE_F16 ? "f16" : wdt == PH_DTYPE_F32 ? "f32" : "stored";
  const char *rs = rot == EXPORT_ROTARY_OPS ? "-rope-ops" : "";
  char pkg[1200], tag[128], qs[64] = "";
  if (q)
    snprintf(qs, sizeof qs, "-int%d-b%d%s-acc%d", (int)q->bits, (int)q->block_size,
             q->asymmetric ? "a" : "", (int)q->accuracy_level);
  snprintf(pkg, sizeof pkg, "%s/%s-%s%s%s", g_tmp, set, dt, rs, qs);
  snprintf(tag, sizeof tag, "%s-%s%s%s", set, dt, rs, qs);
  diag d;
  graph *g = NULL;
  executor *e = NULL;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ph_status s = path_mkdirs(pkg, &d);
  if (s == PH_OK) s = export_package(gs.model, pkg, wdt, rot, q, &d);
  CHECK_STATUS(s, PH_OK, d.msg);
  if (s == PH_OK) {
    s = onnx_read_model(pkg, &g, &d);
    CHECK_STATUS(s, PH_OK, d.msg);
  }
  if (s == PH_OK) {
    s = graph_prepare_cpu(g, &d);
    if (s == PH_OK) s = exec_create(g, 2, &e, &d);
    CHECK_STATUS(s, PH_OK, d.msg);
  }
  double ort_s = 0;
  if (s == PH_OK) {
    /* sequence 0 continued by the first 5 tokens of sequence 1; sequence 1 by one token */
    int64_t n5 = gs.n_tokens[1] < 5 ? gs.n_tokens[1] : 5;
    check_sequence(&gs, 0, gs.tokens[1], n5, g, e, pkg, tag, exact, &ort_s);
    check_sequence(&gs, 1, gs.tokens[0], 1, g, e, pkg, tag, exact, &ort_s);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("  %-28s %.2f s (ORT processes %.2f s)\n", tag,
         (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec), ort_s);
  exec_free(e);
  graph_free(g);
  free_golden(&gs);
}

static void check_set_rotary(const char *set, ph_dtype wdt, int exact, export_rotary rot) {
  check_set_full(set, wdt, exact, rot, NULL);
}

static void check_set(const char *set, ph_dtype wdt, int exact) {
  check_set_rotary(set, wdt, exact, EXPORT_ROTARY_DEFAULT);
}

static void test_ort_f32_weights(void) {
  check_set("qwen35-tiny-f32", PH_DTYPE_F32, 1);
  check_set("qwen35-tiny-bf16-vlm", PH_DTYPE_F32, 1);
}

static void test_ort_f16_weights(void) {
  check_set("qwen35-tiny-f32", PH_DTYPE_F16, 0);
  check_set("qwen35-tiny-bf16-vlm", PH_DTYPE_F16, 0);
}

/* The default export (no --dtype) of the bf16 checkpoint: bf16 weights behind a Cast. */
static void test_ort_stored_bf16_weights(void) {
  check_set("qwen35-tiny-bf16-vlm", PH_DTYPE_INVALID, 1);
}

/* RoPE as plain ONNX ops (what a CUDA-target package holds; here in the dense graph, the one
 * ORT's CPU EP can run): ORT runs it to the golden references within TOL_GOLDEN and agrees with
 * our executor within TOL_PAIR, as the fused form does. */
static void test_ort_rotary_ops(void) {
  check_set_rotary("qwen35-tiny-f32", PH_DTYPE_F32, 1, EXPORT_ROTARY_OPS);
  check_set_rotary("qwen35-tiny-bf16-vlm", PH_DTYPE_INVALID, 1, EXPORT_ROTARY_OPS);
}

/* The MoE models (issue 14): Qwen3.5-MoE's experts on ONNX Runtime's MoE with its own routing,
 * DeepSeek-V3's MLA (decomposed, GroupQueryAttention) with its routing in standard ops feeding the
 * same MoE op (docs/moe.md). ONNX Runtime runs both dense exports to the golden references and to
 * our executor's numbers (the same bounds as the dense models). */
static void test_ort_moe(void) {
  check_set("qwen35-moe-tiny", PH_DTYPE_INVALID, 1);
  check_set("deepseek-v3-tiny-moe", PH_DTYPE_INVALID, 1);
}

/* Quantized dense packages (export --quant, docs/export.md "Quantized packages"): every linear
 * layer a com.microsoft::MatMulNBits. At accuracy_level 1 ORT's CPU kernel dequantizes B to f32
 * and multiplies in f32, as our executor does: the same f32 weights (each (code - zp) * scale),
 * so only the summation order differs and the f32 pair bound TOL_PAIR holds as for f32 weights.
 * The golden references belong to the unquantized model: printed, not checked. */
static void test_ort_quantized(void) {
  static const char *const sets[3] = {"qwen35-tiny-f32", "qwen35-moe-tiny", "deepseek-v3-tiny-moe"};
  static const ph_quant_params modes[] = {
      {8, 32, 0, 1, NULL}, {4, 32, 0, 1, NULL}, {4, 64, 1, 1, NULL}, {8, 128, 1, 1, NULL}};
  for (int s = 0; s < 3; s++)
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++)
      if (s == 0 || k < 2)
        check_set_full(sets[s], PH_DTYPE_INVALID, 0, EXPORT_ROTARY_DEFAULT, &modes[k]);
}

/* DeepSeek's other routing paths (models/moe.c), on make-tiny checkpoints with no golden: V2
 * group-limited (softmax, never renormalised, x16) and V3 without renormalisation. ONNX Runtime
 * runs each dense export to our executor's numbers (TOL_PAIR of scale), logits and caches. */
static void check_tiny_routing(const char *tag, const char *type, const char *extra_json) {
  char ckpt[1200], pkg[1200];
  snprintf(ckpt, sizeof ckpt, "%s/%s-ckpt", g_tmp, tag);
  snprintf(pkg, sizeof pkg, "%s/%s-pkg", g_tmp, tag);
  tiny_params tp = tiny_params_default();
  tp.model_type = type;
  tp.seed = 7;
  diag d;
  CHECK_STATUS(tiny_write(ckpt, &tp, &d), PH_OK, d.msg);
  char path[1300];
  snprintf(path, sizeof path, "%s/config.json", ckpt);
  json_error_t je;
  json_t *cfg = json_load_file(path, 0, &je), *add = json_loads(extra_json, 0, &je);
  if (CHECK(cfg && add)) {
    json_object_update(cfg, add);
    CHECK(json_dump_file(cfg, path, JSON_INDENT(1)) == 0);
  }
  json_decref(cfg);
  json_decref(add);
  ph_model *m = NULL;
  ph_status st = ph_model_open(ckpt, NULL, &m);
  CHECK_STATUS(st, PH_OK, m ? ph_model_error(m) : "no model");
  graph *g = NULL;
  executor *e = NULL;
  if (st == PH_OK) st = export_package(m, pkg, PH_DTYPE_INVALID, EXPORT_ROTARY_DEFAULT, NULL, &d);
  if (st == PH_OK) st = onnx_read_model(pkg, &g, &d);
  if (st == PH_OK) st = graph_prepare_cpu(g, &d);
  if (st == PH_OK) st = exec_create(g, 2, &e, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  if (st == PH_OK) {
    static const int64_t tokens[9] = {5, 17, 33, 2, 9, 100, 7, 64, 250};
    io_list in = {0}, ours = {0}, ortv = {0};
    worst w = {0};
    double secs = 0;
    int ok = make_inputs(g, tokens, 9, 0, NULL, &in) && run_ours(e, g, &in, &ours, &d);
    if (!check_report(ok, __FILE__, __LINE__, "our executor ran the prefill"))
      fprintf(stderr, "       %s\n", d.msg);
    if (ok && run_ort(pkg, tag, &in, &ortv, &secs)) compare_outputs(tag, &ours, &ortv, &w);
    printf("  %-28s prefill   9: logits %.2e  present %.2e (%s)\n", tag, w.logits, w.present,
           w.present_name);
    io_free(&in);
    io_free(&ours);
    io_free(&ortv);
  }
  exec_free(e);
  graph_free(g);
  ph_model_free(m);
}

static void test_ort_moe_routing(void) {
  check_tiny_routing("v2-group-limited", "deepseek_v2",
                     "{\"topk_method\": \"group_limited_greedy\", \"n_group\": 4, "
                     "\"topk_group\": 2, \"routed_scaling_factor\": 16.0}");
  check_tiny_routing("v3-grouped-no-norm", "deepseek_v3",
                     "{\"n_group\": 4, \"topk_group\": 2, \"norm_topk_prob\": false}");
}

/* The packed paged export cannot run on ORT's CPU EP (PagedAttention, GatedDeltaNet and
 * VarlenCausalConvWithState have CUDA kernels only, ort-1.30.md §1), but ORT checks the whole
 * graph against its schemas when it loads it: types, arities, attributes of every node. The
 * default CUDA-target export (f16, plain-op RoPE) of each golden checkpoint, and the one with the
 * fused RoPE, pass that check and fail only later, at CPU kernel placement: ORT inserts f32 Casts
 * in front of PagedAttention (the failure ort-1.30.md documents for a valid f16 PagedAttention).
 * The CPU-target f32 export is refused at the schema, as it must be: ORT's PagedAttention takes
 * f16/bf16 only. The --io-dtype bf16 export passes the schema check too and fails at the first
 * kernel placement, the bf16 MatMul the CPU EP does not have (ORT resolves the whole graph, every
 * node's types against its schema, before it places kernels). The packages with compact state
 * updates (state_update_capacity 4 and 8: GatedDeltaNet inputs 9/10 and output 2,
 * VarlenCausalConvWithState input 5 and output 2, the attribute) fail exactly where the C = 0 ones
 * do; test_ort_state_update_schema_control shows the schema check does read the new inputs.
 * Quantized packages (int4 asymmetric, int8 symmetric: MatMulNBits with f16 scales) fail where
 * the others do too. */
static int ort_load(const char *pkg, char *err, size_t n) {
  char cmd[4400], log[1100];
  snprintf(log, sizeof log, "%s/ort-load.log", g_tmp);
  snprintf(cmd, sizeof cmd, "env -u LD_PRELOAD node '%s' '%s' --load-only >'%s' 2>&1", g_script,
           pkg, log);
  int st = system(cmd);
  char *text = NULL;
  size_t len = 0;
  diag d;
  err[0] = '\0';
  if (file_read_all(log, 1 << 20, &text, &len, &d) == PH_OK) snprintf(err, n, "%s", text);
  free(text);
  return st == 0;
}

typedef enum ort_expect {
  LOADS_FAILS_AT_KERNELS, /* f16: schema passes; ORT's f32 Casts then break PagedAttention */
  LOADS_NO_BF16_KERNELS,  /* bf16: schema passes; the CPU EP has no bf16 MatMul to place */
  REFUSED_AT_SCHEMA       /* f32: PagedAttention's schema refuses float */
} ort_expect;

static void paged_case(ph_model *m, const char *tag, const export_options *o, ort_expect want) {
  char pkg[1100], err[4096];
  diag d;
  snprintf(pkg, sizeof pkg, "%s/paged-%s", g_tmp, tag);
  export_options oo = *o;
  oo.layout = EXPORT_LAYOUT_PAGED;
  oo.max_context = 256;
  oo.force = 1;
  CHECK_STATUS(model_export(m, pkg, &oo, &d), PH_OK, d.msg);
  CHECK(!ort_load(pkg, err, sizeof err));
  printf("  paged %s, ORT says: %.200s\n", tag, err);
  switch (want) {
  case LOADS_FAILS_AT_KERNELS: /* the load (schema check of every node) passes */
    CHECK_CONTAINS(err, "of operator (PagedAttention)");
    CHECK_CONTAINS(err, "InsertedPrecisionFreeCast_");
    CHECK(!strstr(err, "Load model from"));
    break;
  case REFUSED_AT_SCHEMA:
    CHECK_CONTAINS(err, "of operator (PagedAttention)");
    CHECK_CONTAINS(err, "Load model from");
    break;
  case LOADS_NO_BF16_KERNELS:
    CHECK_CONTAINS(err, "Could not find an implementation for MatMul");
    CHECK(!strstr(err, "Load model from") && !strstr(err, "Type Error"));
    break;
  }
}

/* The negative control of the capacity cases: ORT's schema check does read the capture inputs.
 * The golden set's C = 4 CUDA package with state_update_capture_count retyped to int64 (the
 * ops' TI is int32 only) is refused at load, naming one of the capturing ops. */
static void test_ort_state_update_schema_control(void) {
  char ckpt[1024], pkg[1100], path[1200], err[4096];
  check_data(ckpt, sizeof ckpt, "golden/qwen35-tiny-f32/checkpoint");
  ph_model *m = NULL;
  CHECK_STATUS(ph_model_open(ckpt, NULL, &m), PH_OK, ph_model_error(m));
  if (!m) return;
  export_options o = export_options_default();
  o.layout = EXPORT_LAYOUT_PAGED;
  o.max_context = 256;
  o.force = 1;
  o.state_update_capacity = 4;
  diag d;
  snprintf(pkg, sizeof pkg, "%s/paged-su4-i64-capture", g_tmp);
  CHECK_STATUS(model_export(m, pkg, &o, &d), PH_OK, d.msg);
  ph_model_free(m);
  snprintf(path, sizeof path, "%s/model.onnx", pkg);
  char *bytes = NULL;
  size_t n = 0;
  CHECK_STATUS(file_read_all(path, (size_t)1 << 26, &bytes, &n, &d), PH_OK, d.msg);
  Onnx__ModelProto *mp = bytes ? onnx__model_proto__unpack(NULL, n, (const uint8_t *)bytes) : NULL;
  free(bytes);
  if (!CHECK(mp && mp->graph)) return;
  int retyped = 0;
  for (size_t i = 0; i < mp->graph->n_input; i++)
    if (strcmp(mp->graph->input[i]->name, "state_update_capture_count") == 0) {
      mp->graph->input[i]->type->tensor_type->elem_type = 7; /* INT64 */
      retyped++;
    }
  CHECK_EQ_INT(retyped, 1);
  size_t len = onnx__model_proto__get_packed_size(mp);
  uint8_t *out = malloc(len);
  if (out) onnx__model_proto__pack(mp, out);
  onnx__model_proto__free_unpacked(mp, NULL);
  FILE *f = out ? fopen(path, "wb") : NULL;
  CHECK(f && fwrite(out, 1, len, f) == len);
  if (f) fclose(f);
  free(out);
  CHECK(!ort_load(pkg, err, sizeof err));
  printf("  paged C=4 with an int64 capture_count, ORT says: %.200s\n", err);
  CHECK_CONTAINS(err, "Load model from");
  CHECK(strstr(err, "GatedDeltaNet") || strstr(err, "VarlenCausalConvWithState"));
}

static void test_ort_paged_schema(void) {
  static const char *const sets[3] = {"qwen35-tiny-f32", "qwen35-tiny-bf16-vlm",
                                      "deepseek-v3-tiny-moe"};
  /* deepseek-v3-tiny-moe: the LATENT PagedAttention node (kv_cache_layout, v_head_size,
   * rotary_offset, do_rotary, slot_mapping, 2 outputs) and the MoE routing pass ORT 1.30's schema
   * check the same way */
  for (int s = 0; s < 3; s++) {
    char ckpt[1024], tag[128];
    check_data(ckpt, sizeof ckpt, "golden/%s/checkpoint", sets[s]);
    ph_model *m = NULL;
    CHECK_STATUS(ph_model_open(ckpt, NULL, &m), PH_OK, ph_model_error(m));
    if (!m) continue;
    export_options o = export_options_default(); /* CUDA target: f16, plain-op RoPE */
    snprintf(tag, sizeof tag, "%s-cuda-default", sets[s]);
    paged_case(m, tag, &o, LOADS_FAILS_AT_KERNELS);
    o.rotary = EXPORT_ROTARY_FUSED;
    snprintf(tag, sizeof tag, "%s-cuda-fused-rope", sets[s]);
    paged_case(m, tag, &o, LOADS_FAILS_AT_KERNELS);
    o = export_options_default();
    o.io_dtype = PH_DTYPE_BF16;
    snprintf(tag, sizeof tag, "%s-cuda-bf16", sets[s]);
    paged_case(m, tag, &o, LOADS_NO_BF16_KERNELS);
    /* compact state updates (issue 15): the capture inputs, the attribute and the extra inputs
     * and outputs of every GatedDeltaNet / VarlenCausalConvWithState pass the schema check as
     * well, at the default capacity 4 and the largest, 8 (DeepSeek: forced to 0) */
    for (int cap = 4; cap <= 8; cap += 4) {
      o = export_options_default();
      o.state_update_capacity = cap;
      snprintf(tag, sizeof tag, "%s-cuda-su%d", sets[s], cap);
      paged_case(m, tag, &o, LOADS_FAILS_AT_KERNELS);
    }
    /* quantized (export --quant): MatMulNBits with f16 scales (and packed zero points) passes
     * the schema check like every other node */
    for (int bits = 4; bits <= 8; bits += 4) {
      o = export_options_default();
      o.quant = (ph_quant_params){bits, 32, bits == 4, 4, NULL};
      snprintf(tag, sizeof tag, "%s-cuda-int%d", sets[s], bits);
      paged_case(m, tag, &o, LOADS_FAILS_AT_KERNELS);
    }
    o = export_options_default();
    o.target = EXPORT_TARGET_CPU;
    snprintf(tag, sizeof tag, "%s-cpu-f32", sets[s]);
    paged_case(m, tag, &o, REFUSED_AT_SCHEMA);
    ph_model_free(m);
  }
}

int main(void) {
  int rc = ort_testing_init("test_ort");
  if (rc) return rc;
  RUN(test_ort_f32_weights);
  RUN(test_ort_f16_weights);
  RUN(test_ort_stored_bf16_weights);
  RUN(test_ort_rotary_ops);
  RUN(test_ort_moe);
  RUN(test_ort_moe_routing);
  RUN(test_ort_quantized);
  RUN(test_ort_paged_schema);
  RUN(test_ort_state_update_schema_control);
  return check_finish();
}
