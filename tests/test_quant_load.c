/* test_quant_load — quantizing a checkpoint's linear weights when the engine loads it
 * (ph_engine_params.quant, docs/quantization.md "Quantizing at load").
 *
 *   params      every bad field is PH_ERR_INVALID_ARGUMENT naming it; ph_engine_info.params.quant
 *               gives the resolved values (block 32, accuracy level 4 for 0) and the engine's own
 *               copy of skip; quantized_linears counts the MatMulNBits layers (skip lm_head: one
 *               fewer); a package with bits != 0 is refused, a package exported quantized reports
 *               its quantization and runs to the bits of the same checkpoint quantized at load.
 *   batched     int8 and int4, accuracy levels 4 and 1: every request packed with others gives the
 *               tokens and logits of its run alone, bit for bit.
 *   references  the engine did not produce:
 *               - the dense session (runtime/dense_session.h) of the same checkpoint with the same
 *                 quant options, teacher-forced over each request (engine_testing.h
 *                 dense_ref_check), at accuracy level 1, within PAIR_F32_TOL: both are f32
 *                 evaluations of one function — the model over the dequantized weights (level 1
 *                 dequantizes each weight to (code - zp) * scale, one rounding, and sums in f32) —
 *                 each within GOLDEN_F32_TOL of the f64 result, so within twice it of each other;
 *               - the f32 engine over a checkpoint whose selected weights were replaced by
 *                 quant_dequantize's f32 values (tensor/quant.h; written to a temporary
 *                 checkpoint), at level 1: the same argument, the same bound. The plain f32
 *                 engine is checked to be far outside it, so a wrong or unquantized weight shows.
 *               Level 4 quantizes each activation row to int8 per block: a 1-ulp difference
 *               between the dense and the paged graph's inputs may move a code by one step, so
 *               no f32 pair bound holds there; level 4 is held to batch invariance here and to
 *               the golden references by test_golden's accuracy table.
 *   families    every family the engine serves loads with quant: Qwen3.5 dense (f32, bf16 VLM),
 *               Qwen3.5 MoE (experts stay float), DeepSeek-V3 MLA, and a make-tiny Qwen3.5 with
 *               an MTP head drafting under quantization (speculative output = plain output).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "engine_testing.h"
#include "io/safetensors.h"
#include "models/export.h"
#include "models/tiny.h"
#include "models/weights.h"
#include "runtime/mtp_session.h"
#include "runtime/runtime.h"
#include "tensor/quant.h"

static char g_tmp[512];

static ph_quant_params qp(int bits, int block, int asym, int level, const char *skip) {
  ph_quant_params q = {bits, block, asym, level, skip};
  return q;
}

static const char *golden_set(const char *set) {
  static char path[4][1024];
  static int at;
  char *p = path[at++ % 4];
  check_data(p, 1024, "golden/%s/checkpoint", set);
  return p;
}

/* ---- params --------------------------------------------------------------------------------- */

static void expect_refused(const ph_quant_params *q, const char *field) {
  ph_engine_params p = small_params(4, 256, 16, 32);
  p.quant = *q;
  engine *e = NULL;
  diag d;
  diag_clear(&d);
  const ph_status st = engine_create(golden_dir(), &p, &e, &d);
  if (!CHECK(st == PH_ERR_INVALID_ARGUMENT))
    printf("  quant {%d, %d, %d, %d, %s}: %s\n", q->bits, q->block_size, q->asymmetric,
           q->accuracy_level, q->skip ? q->skip : "NULL", ph_status_name(st));
  CHECK_CONTAINS(d.msg, field);
  engine_free(e);
}

static void test_params(void) {
  expect_refused(&(ph_quant_params){3, 0, 0, 0, NULL}, "quant.bits 3");
  expect_refused(&(ph_quant_params){8, 48, 0, 0, NULL}, "quant.block_size 48");
  expect_refused(&(ph_quant_params){8, 8, 0, 0, NULL}, "quant.block_size 8");
  expect_refused(&(ph_quant_params){4, 512, 0, 0, NULL}, "quant.block_size 512");
  expect_refused(&(ph_quant_params){8, 0, 2, 0, NULL}, "quant.asymmetric 2");
  expect_refused(&(ph_quant_params){8, 0, 0, 5, NULL}, "quant.accuracy_level 5");
  expect_refused(&(ph_quant_params){8, 0, 0, -1, NULL}, "quant.accuracy_level -1");
  expect_refused(&(ph_quant_params){8, 0, 0, 0, ""}, "entry 1 is empty");
  expect_refused(&(ph_quant_params){8, 0, 0, 0, "lm_head,,x"}, "entry 2 is empty");
  expect_refused(&(ph_quant_params){8, 0, 0, 0, "lm_head,"}, "entry 2 is empty");
  expect_refused(&(ph_quant_params){0, 64, 0, 0, NULL}, "quant.block_size set");
  expect_refused(&(ph_quant_params){0, 0, 0, 0, "lm_head"}, "quant.skip set");

  /* resolved values, the engine's own copy of skip, the layer count */
  char skip[32];
  snprintf(skip, sizeof skip, "lm_head");
  ph_engine_params p = small_params(4, 256, 16, 32);
  p.quant = qp(4, 0, 1, 0, skip);
  ph_engine *e = NULL, *e_all = NULL, *e_none = NULL;
  CHECK_STATUS(ph_engine_create(golden_dir(), &p, &e), PH_OK, ph_engine_error(e));
  memset(skip, 'x', sizeof skip - 1); /* the caller's string need not outlive the call */
  p.quant = qp(4, 64, 0, 1, NULL);
  CHECK_STATUS(ph_engine_create(golden_dir(), &p, &e_all), PH_OK, ph_engine_error(e_all));
  p.quant = qp(0, 0, 0, 0, NULL);
  CHECK_STATUS(ph_engine_create(golden_dir(), &p, &e_none), PH_OK, ph_engine_error(e_none));
  ph_engine_info in, in_all, in_none;
  if (e && e_all && e_none && ph_engine_get_info(e, &in) == PH_OK &&
      ph_engine_get_info(e_all, &in_all) == PH_OK &&
      ph_engine_get_info(e_none, &in_none) == PH_OK) {
    CHECK_EQ_INT(in.params.quant.bits, 4);
    CHECK_EQ_INT(in.params.quant.block_size, 32);
    CHECK_EQ_INT(in.params.quant.asymmetric, 1);
    CHECK_EQ_INT(in.params.quant.accuracy_level, 4);
    CHECK(in.params.quant.skip != NULL && in.params.quant.skip != skip);
    if (in.params.quant.skip) CHECK_EQ_STR(in.params.quant.skip, "lm_head");
    CHECK_EQ_INT(in_all.params.quant.block_size, 64);
    CHECK_EQ_INT(in_all.params.quant.accuracy_level, 1);
    /* qwen35-tiny-f32: 3 GatedDeltaNet layers (in_proj_qkv, in_proj_z, out_proj) and 1 attention
     * layer (q, k, v, o), 4 dense MLPs (gate, up, down), the untied LM head: 9 + 4 + 12 + 1 */
    CHECK_EQ_INT(in_all.quantized_linears, 26);
    CHECK_EQ_INT(in.quantized_linears, 25);
    CHECK_EQ_INT(in_none.quantized_linears, 0);
    CHECK_EQ_INT(in_none.params.quant.bits, 0);
  }
  ph_engine_free(e);
  ph_engine_free(e_all);
  ph_engine_free(e_none);
}

/* ---- requests ------------------------------------------------------------------------------- */

enum { N_REQ = 5 };

static void make_requests(req_spec *q, int64_t vocab) {
  static const int lens[N_REQ] = {3, 40, 17, 1, 29}; /* up to 3 prefill chunks of 16 */
  rng r = rng_seed(18);
  for (int i = 0; i < N_REQ; i++) {
    fill_prompt(&r, &q[i], lens[i], vocab);
    q[i].sp = i == 2 ? sampled(6, 0.8f, 0, 1.0f, 7) : greedy(6);
    q[i].sp.ignore_eos = 1;
  }
}

/* Runs q[N_REQ] packed in one engine of p on dir; outcomes into o. */
static void run_packed(const char *dir, const ph_engine_params *p, const req_spec *q, outcome *o) {
  engine *e = NULL;
  diag d;
  diag_clear(&d);
  memset(o, 0, N_REQ * sizeof *o);
  CHECK_STATUS(engine_create(dir, p, &e, &d), PH_OK, d.msg);
  if (!e) return;
  engine_set_capture_logits(e, 1);
  uint64_t ids[N_REQ];
  for (int i = 0; i < N_REQ; i++)
    CHECK_STATUS(engine_add(e, q[i].prompt, q[i].n_prompt, &q[i].sp, &ids[i], &d), PH_OK, d.msg);
  run_stats rs;
  memset(&rs, 0, sizeof rs);
  drain(e, &rs);
  if (rs.bad_steps) printf("  %s\n", rs.first_bad);
  CHECK_EQ_INT(rs.bad_steps, 0);
  for (int i = 0; i < N_REQ; i++) take_outcome(e, ids[i], &o[i]);
  engine_free(e);
}

/* Each of q run alone in one engine of p on dir (one after another). */
static void run_each_alone(const char *dir, const ph_engine_params *p, const req_spec *q,
                           outcome *o) {
  engine *e = NULL;
  diag d;
  diag_clear(&d);
  memset(o, 0, N_REQ * sizeof *o);
  CHECK_STATUS(engine_create(dir, p, &e, &d), PH_OK, d.msg);
  if (!e) return;
  engine_set_capture_logits(e, 1);
  for (int i = 0; i < N_REQ; i++) run_alone_in(e, &q[i], &o[i]);
  engine_free(e);
}

/* max |a - b| / max |b| over the generated rows of every request (NaN: infinite). */
static double rows_rel(const outcome *a, const outcome *b, int64_t V) {
  double err = 0, scale = 0;
  for (int i = 0; i < N_REQ; i++) {
    const int64_t n = a[i].n_generated < b[i].n_generated ? a[i].n_generated : b[i].n_generated;
    if (a[i].n_generated != b[i].n_generated || n == 0) return INFINITY;
    for (int64_t k = 0; k < n * V; k++) check_err_acc(a[i].logits[k], b[i].logits[k], &err, &scale);
  }
  return scale > 0 ? err / scale : err;
}

static int64_t vocab_of(const char *dir) {
  ph_model *m = NULL;
  CHECK_STATUS(ph_model_open(dir, NULL, &m), PH_OK, ph_model_error(m));
  ph_model_info mi;
  int64_t V = m && ph_model_get_info(m, &mi) == PH_OK ? mi.vocab_size : 0;
  ph_model_free(m);
  return V;
}

/* The engine of p on dir with quant q: packed == alone bit for bit; at level 1 every request
 * against the dense session with the same quant options within PAIR_F32_TOL. */
static void check_engine(const char *dir, const char *label, ph_engine_params p,
                         const ph_quant_params *q, int expect_linears, int dense_same_function) {
  p.quant = *q;
  const int64_t V = vocab_of(dir);
  req_spec reqs[N_REQ];
  make_requests(reqs, V);
  outcome packed[N_REQ], alone[N_REQ];
  run_packed(dir, &p, reqs, packed);
  run_each_alone(dir, &p, reqs, alone);
  int same = 0;
  for (int i = 0; i < N_REQ; i++) {
    char what[128];
    snprintf(what, sizeof what, "%s int%d level %d request %d", label, q->bits, q->accuracy_level,
             i);
    same += same_as_alone(&packed[i], &alone[i], V, what);
  }
  CHECK_EQ_INT(same, N_REQ);
  if (expect_linears >= 0) { /* the engine really serves MatMulNBits layers */
    engine *e = NULL;
    diag d;
    diag_clear(&d);
    CHECK_STATUS(engine_create(dir, &p, &e, &d), PH_OK, d.msg);
    if (e) CHECK_EQ_INT(paged_session_quant(engine_session(e), NULL), expect_linears);
    engine_free(e);
  }
  if (dense_same_function) {
    dense_ref r;
    memset(&r, 0, sizeof r);
    diag d;
    diag_clear(&d);
    CHECK_STATUS(ph_model_open(dir, NULL, &r.m), PH_OK, ph_model_error(r.m));
    r.max_context = 512;
    if (r.m)
      CHECK_STATUS(dense_session_create_quant(r.m, r.max_context, 2, p.precision, q, &r.s, &d),
                   PH_OK, d.msg);
    if (r.s) {
      r.V = dense_session_vocab(r.s);
      r.tokens = malloc((size_t)r.max_context * sizeof *r.tokens);
      r.logits = malloc((size_t)(r.max_context * r.V) * sizeof *r.logits);
      r.scratch_bytes = sampler_scratch_bytes(r.V);
      r.scratch = malloc(r.scratch_bytes);
      if (expect_linears >= 0)
        CHECK_EQ_INT(dense_session_quant(r.s, NULL), expect_linears);
      else
        CHECK(dense_session_quant(r.s, NULL) > 0);
      char what[160];
      snprintf(what, sizeof what, "%s int%d block %d level %d", label, q->bits, q->block_size,
               q->accuracy_level);
      if (q->accuracy_level == 1) {
        for (int i = 0; i < N_REQ; i++) dense_ref_check(&r, &reqs[i], &packed[i], label);
        dense_ref_report(&r, what);
      } else { /* measured, not bounded (see the top of the file) */
        double worst = 0;
        for (int i = 0; i < N_REQ; i++) {
          dense_ref_check(&r, &reqs[i], &packed[i], "  level 4, measured:");
          if (!(r.worst <= worst)) worst = r.worst;
        }
        printf(
            "  %s vs the dense session: worst %.2e of scale (measured; int8 activation codes may "
            "differ between the two graphs)\n",
            what, worst);
      }
    }
    dense_ref_close(&r);
  }
  for (int i = 0; i < N_REQ; i++) {
    outcome_free(&packed[i]);
    outcome_free(&alone[i]);
  }
}

static void test_batched_and_dense(void) {
  const ph_engine_params p = small_params(4, 48, 16, 64);
  static const int modes[][3] = {{8, 32, 4}, {4, 32, 4}, {8, 32, 1}, {4, 64, 1}, {4, 128, 1}};
  for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
    const ph_quant_params q = qp(modes[k][0], modes[k][1], k == 3, modes[k][2], NULL);
    check_engine(golden_dir(), "qwen35-tiny-f32", p, &q, 26, 1);
  }
}

/* ---- the dequantized checkpoint ------------------------------------------------------------- */

static int skipped(const char *skip, const char *name) {
  if (!skip) return 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", skip);
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ","))
    if (strstr(name, tok)) return 1;
  return 0;
}

/* The linear weights the builder reads through a Linear (experts are the MoE op's). */
static int linear_role(weight_role r) {
  return weight_role_quantizable(r) && r != W_MOE_GATE_UP_FUSED && r != W_MOE_DOWN_FUSED &&
         r != W_EXPERT_GATE && r != W_EXPERT_UP && r != W_EXPERT_DOWN && r != W_MTP_FC;
}

/* Writes <out>/config.json (copied) and <out>/model.safetensors: every tensor of the checkpoint
 * in dir, with each weight the quantization selects replaced by quant_dequantize's f32 values.
 * Returns the number of tensors replaced, -1 on failure. */
static int write_dequantized(const char *dir, const char *out, const ph_quant_params *q) {
  ph_model *m = NULL;
  CHECK_STATUS(ph_model_open(dir, NULL, &m), PH_OK, ph_model_error(m));
  if (!m) return -1;
  const model_weights *w = model_weights_of(m);
  const st_set *set = model_tensors(m);
  const size_t n = st_count(set);
  st_write_entry *ent = calloc(n, sizeof *ent);
  float **bufs = calloc(n, sizeof *bufs);
  const quant_params p = {q->bits, q->block_size ? q->block_size : 32, !q->asymmetric,
                          PH_DTYPE_F32};
  int replaced = 0;
  diag d;
  diag_clear(&d);
  for (size_t i = 0; ent && bufs && i < n; i++) {
    const st_tensor *t = st_at(set, i);
    ent[i] = (st_write_entry){t->name, t->dtype, t->shape, t->data};
    int sel = 0;
    for (int l = 0; l < w->n_layers && !sel; l++)
      for (int r = 0; r < W_ROLE_COUNT && !sel; r++)
        sel = w->layer[l * W_ROLE_COUNT + r] == t && linear_role((weight_role)r);
    sel = sel || (w->global[W_LM_HEAD] == t);
    if (!sel || skipped(q->skip, t->name)) continue;
    const int64_t N = t->shape.dims[0], K = t->shape.dims[1];
    size_t bb = 0, ns = 0, zb = 0;
    CHECK_STATUS(quant_sizes(&p, N, K, &bb, &ns, &zb, &d), PH_OK, d.msg);
    uint8_t *b = malloc(bb), *zp = zb ? malloc(zb) : NULL;
    float *sc = malloc(ns * sizeof *sc);
    bufs[i] = malloc((size_t)(N * K) * sizeof(float));
    CHECK_STATUS(quant_quantize(&p, t->data, t->dtype, N, K, b, sc, zp, t->name, &d), PH_OK, d.msg);
    CHECK_STATUS(quant_dequantize(&p, b, sc, zp, N, K, bufs[i], &d), PH_OK, d.msg);
    free(b);
    free(sc);
    free(zp);
    ent[i].dtype = PH_DTYPE_F32;
    ent[i].data = bufs[i];
    replaced++;
  }
  char path[1200], cmd[2600];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s/config.json' '%s/'", out, dir, out);
  CHECK(system(cmd) == 0);
  snprintf(path, sizeof path, "%s/model.safetensors", out);
  CHECK_STATUS(st_write_file(path, ent, n, NULL, NULL, &d), PH_OK, d.msg);
  for (size_t i = 0; bufs && i < n; i++) free(bufs[i]);
  free(bufs);
  free(ent);
  ph_model_free(m);
  return replaced;
}

/* At accuracy level 1 the quantized engine against the f32 engine over the dequantized weights:
 * within PAIR_F32_TOL (see the top of the file); the plain f32 engine far outside it. */
static void test_dequantized_checkpoint(void) {
  const ph_engine_params p = small_params(4, 48, 16, 64);
  const int64_t V = vocab_of(golden_dir());
  req_spec reqs[N_REQ];
  make_requests(reqs, V);
  for (int k = 0; k < 3; k++) {
    const ph_quant_params q = k == 0   ? qp(8, 32, 0, 1, NULL)
                              : k == 1 ? qp(4, 32, 0, 1, NULL)
                                       : qp(4, 64, 1, 1, "lm_head,layers.0.mlp");
    char dq_dir[700];
    snprintf(dq_dir, sizeof dq_dir, "%s/dequantized-int%d-%d", g_tmp, q.bits, k);
    const int replaced = write_dequantized(golden_dir(), dq_dir, &q);
    CHECK_EQ_INT(replaced, k == 2 ? 22 : 26); /* the skip keeps the head and gate/up/down */
    ph_engine_params pq = p;
    pq.quant = q;
    outcome quant[N_REQ], ref[N_REQ], plain[N_REQ];
    run_packed(golden_dir(), &pq, reqs, quant);
    run_packed(dq_dir, &p, reqs, ref);
    run_packed(golden_dir(), &p, reqs, plain);
    /* the greedy requests must have taken the same tokens for their rows to be compared; a
     * sampled one draws from rows within the bound of each other */
    int same_tokens = 1;
    for (int i = 0; i < N_REQ; i++)
      same_tokens &= quant[i].n_generated == ref[i].n_generated &&
                     memcmp(quant[i].tokens, ref[i].tokens,
                            (size_t)quant[i].n_generated * sizeof(int64_t)) == 0;
    CHECK(same_tokens);
    const double rel = rows_rel(quant, ref, V), quant_rel = rows_rel(quant, plain, V);
    printf("  int%d block %d %s skip %s: |engine - f32 engine on dq(q(W))| %.2e of scale (bound "
           "%.0e); |engine - f32 engine on W| %.2e\n",
           q.bits, q.block_size, q.asymmetric ? "asym" : "sym", q.skip ? q.skip : "-", rel,
           PAIR_F32_TOL, quant_rel);
    CHECK(rel <= PAIR_F32_TOL);
    CHECK(quant_rel > 10 * PAIR_F32_TOL); /* the comparison would see an unquantized weight */
    for (int i = 0; i < N_REQ; i++) {
      outcome_free(&quant[i]);
      outcome_free(&ref[i]);
      outcome_free(&plain[i]);
    }
  }
}

/* ---- packages ------------------------------------------------------------------------------- */

/* A package exported quantized runs as exported (bits 0 takes it; bits != 0 is refused) and gives
 * the bits of the same checkpoint quantized at load. */
static void test_package(void) {
  ph_model *m = NULL;
  CHECK_STATUS(ph_model_open(golden_dir(), NULL, &m), PH_OK, ph_model_error(m));
  if (!m) return;
  char pkg[700];
  snprintf(pkg, sizeof pkg, "%s/pkg-int8", g_tmp);
  export_options eo = export_options_default();
  eo.layout = EXPORT_LAYOUT_PAGED;
  eo.target = EXPORT_TARGET_CPU;
  eo.io_dtype = PH_DTYPE_F32;
  eo.block_size = 16;
  eo.max_context = 512;
  eo.force = 1;
  eo.quant = qp(8, 32, 0, 1, NULL);
  diag d;
  diag_clear(&d);
  const ph_status st = model_export(m, pkg, &eo, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  ph_model_free(m);
  if (st != PH_OK) return;
  ph_engine_params p = small_params(4, 48, 16, 64);
  p.block_size = p.max_context = 0; /* a package fixes them */
  p.quant = qp(8, 0, 0, 0, NULL);
  engine *e = NULL;
  CHECK(engine_create(pkg, &p, &e, &d) == PH_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(d.msg, "quantize at export");
  engine_free(e);
  e = NULL;
  p.quant = qp(0, 0, 0, 0, NULL);
  CHECK_STATUS(engine_create(pkg, &p, &e, &d), PH_OK, d.msg);
  if (e) {
    const ph_engine_params *r = engine_params_of(e);
    CHECK_EQ_INT(r->quant.bits, 8);
    CHECK_EQ_INT(r->quant.block_size, 32);
    CHECK_EQ_INT(r->quant.accuracy_level, 1);
    CHECK_EQ_INT(paged_session_quant(engine_session(e), NULL), 26);
  }
  engine_free(e);
  /* the package's tokens and logits == the checkpoint quantized at load */
  const int64_t V = vocab_of(golden_dir());
  req_spec reqs[N_REQ];
  make_requests(reqs, V);
  outcome from_pkg[N_REQ], at_load[N_REQ];
  run_packed(pkg, &p, reqs, from_pkg);
  ph_engine_params pl = small_params(4, 48, 16, 64);
  pl.quant = eo.quant;
  run_packed(golden_dir(), &pl, reqs, at_load);
  int same = 0;
  for (int i = 0; i < N_REQ; i++) {
    same += same_as_alone(&from_pkg[i], &at_load[i], V, "package vs at load");
    outcome_free(&from_pkg[i]);
    outcome_free(&at_load[i]);
  }
  CHECK_EQ_INT(same, N_REQ);
}

/* ---- every family --------------------------------------------------------------------------- */

static void test_families(void) {
  ph_engine_params p = small_params(4, 48, 16, 64);
  static const char *const sets[] = {"qwen35-tiny-bf16-vlm", "qwen35-moe-tiny",
                                     "deepseek-v3-tiny-moe"};
  for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++)
    for (int k = 0; k < 3; k++) {
      const ph_quant_params q = k == 0   ? qp(8, 32, 0, 4, NULL)
                                : k == 1 ? qp(4, 32, 0, 4, NULL)
                                         : qp(8, 32, 0, 1, NULL);
      ph_engine_params pf = p;
      if (s == 2) pf.max_batch_size = pf.max_requests = 4; /* no state slots: pages bound it */
      /* DeepSeek: the paged (LATENT) graph quantizes the absorbed q and o products of kv_b,
       * the dense graph kv_b itself: two different quantized models, so the dense session is no
       * f32 twin of the engine there (test_deepseek_dense_differs) */
      check_engine(golden_set(sets[s]), sets[s], pf, &q, -1, s != 2);
      /* quantized at all: the served graph has MatMulNBits layers */
      pf.quant = q;
      engine *e = NULL;
      diag d;
      diag_clear(&d);
      CHECK_STATUS(engine_create(golden_set(sets[s]), &pf, &e, &d), PH_OK, d.msg);
      if (e) CHECK(paged_session_quant(engine_session(e), NULL) > 0);
      engine_free(e);
    }
}

/* DeepSeek MLA: the engine's LATENT graph absorbs kv_b into the q and o projections and
 * quantizes those products; the dense graph quantizes kv_b. Measured and printed: the engine
 * against the dense session with the same options (no bound: different quantized functions),
 * and against the unquantized engine (the quantization itself). Asserted: without quantization
 * the two stay within PAIR_F32_TOL, so the difference is the quantization's placement. */
static void test_deepseek_dense_differs(void) {
  const char *dir = golden_set("deepseek-v3-tiny-moe");
  const int64_t V = vocab_of(dir);
  req_spec reqs[N_REQ];
  make_requests(reqs, V);
  for (int k = 0; k < 2; k++) {
    ph_engine_params p = small_params(4, 48, 16, 64);
    const ph_quant_params q = k ? qp(8, 32, 0, 1, NULL) : qp(0, 0, 0, 0, NULL);
    p.quant = q;
    outcome o[N_REQ], plain[N_REQ];
    run_packed(dir, &p, reqs, o);
    p.quant = qp(0, 0, 0, 0, NULL);
    run_packed(dir, &p, reqs, plain);
    dense_ref r;
    memset(&r, 0, sizeof r);
    diag d;
    diag_clear(&d);
    CHECK_STATUS(ph_model_open(dir, NULL, &r.m), PH_OK, ph_model_error(r.m));
    r.max_context = 512;
    if (r.m)
      CHECK_STATUS(dense_session_create_quant(r.m, 512, 2, PH_PRECISION_F32, &q, &r.s, &d), PH_OK,
                   d.msg);
    if (r.s) {
      r.V = dense_session_vocab(r.s);
      r.tokens = malloc((size_t)r.max_context * sizeof *r.tokens);
      r.logits = malloc((size_t)(r.max_context * r.V) * sizeof *r.logits);
      r.scratch_bytes = sampler_scratch_bytes(r.V);
      r.scratch = malloc(r.scratch_bytes);
      for (int i = 0; i < N_REQ; i++) dense_ref_check(&r, &reqs[i], &o[i], "deepseek");
      printf("  deepseek-v3-tiny-moe %s level 1: engine vs dense session %.2e of scale, engine vs "
             "unquantized engine %.2e\n",
             k ? "int8" : "f32 ", r.worst, rows_rel(o, plain, V));
      if (k == 0) CHECK(r.worst <= PAIR_F32_TOL);
    }
    dense_ref_close(&r);
    for (int i = 0; i < N_REQ; i++) {
      outcome_free(&o[i]);
      outcome_free(&plain[i]);
    }
  }
}

/* A make-tiny Qwen3.5 with an MTP head: the drafter is built with the target's quantization, and
 * speculative MTP decoding gives the plain run's tokens and logits bit for bit. */
static void test_mtp_quantized(void) {
  char dir[700];
  snprintf(dir, sizeof dir, "%s/tiny-mtp", g_tmp);
  tiny_params tp = tiny_params_default();
  tp.mtp_layers = 1;
  diag d;
  diag_clear(&d);
  CHECK_STATUS(tiny_write(dir, &tp, &d), PH_OK, d.msg);
  ph_engine_params p = small_params(4, 48, 16, 64);
  p.state_update_capacity = 4;
  p.quant = qp(4, 32, 0, 4, NULL);
  const int64_t V = vocab_of(dir);
  req_spec reqs[N_REQ], spec[N_REQ];
  make_requests(reqs, V);
  memcpy(spec, reqs, sizeof reqs);
  for (int i = 0; i < N_REQ; i++) {
    spec[i].sp.speculative.method = PH_DRAFT_MTP;
    spec[i].sp.speculative.num_draft_tokens = 3;
  }
  engine *e = NULL;
  CHECK_STATUS(engine_create(dir, &p, &e, &d), PH_OK, d.msg);
  if (e) CHECK(engine_has_mtp(e));
  engine_free(e);
  /* the drafter's graph is quantized as the target's: its fc, attention (q, k, v, o), MLP (gate,
   * up, down) and LM head */
  runtime_source src;
  CHECK_STATUS(runtime_source_open(dir, &src, &d), PH_OK, d.msg);
  runtime_build rb;
  memset(&rb, 0, sizeof rb);
  rb.block_size = 16;
  rb.max_context = 512;
  rb.io_dtype = PH_DTYPE_F32;
  rb.quant = p.quant;
  mtp_session *ms = NULL;
  CHECK_STATUS(runtime_mtp_session(&src, &rb, 4, 48, 0, &ms, &d), PH_OK, d.msg);
  if (ms) {
    ph_quant_params mq;
    const int n_mq = mtp_session_quant(ms, &mq);
    printf("  MTP drafter: %d MatMulNBits layers, int%d block %d\n", n_mq, mq.bits, mq.block_size);
    CHECK_EQ_INT(n_mq, 9);
    CHECK_EQ_INT(mq.bits, 4);
  }
  mtp_session_free(ms);
  runtime_source_close(&src);
  outcome plain[N_REQ], drafted[N_REQ];
  run_packed(dir, &p, reqs, plain);
  run_packed(dir, &p, spec, drafted);
  int same = 0;
  int64_t n_drafted = 0;
  for (int i = 0; i < N_REQ; i++) {
    same += same_as_alone(&drafted[i], &plain[i], V, "MTP speculative vs plain, int4");
    n_drafted += drafted[i].n_drafted;
    outcome_free(&plain[i]);
    outcome_free(&drafted[i]);
  }
  CHECK_EQ_INT(same, N_REQ);
  CHECK(n_drafted > 0);
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "%s", check_env("PH_TMP_DIR"));
  diag d;
  diag_clear(&d);
  if (path_mkdirs(g_tmp, &d) != PH_OK) return 1;
  RUN(test_params);
  RUN(test_batched_and_dense);
  RUN(test_dequantized_checkpoint);
  RUN(test_package);
  RUN(test_families);
  RUN(test_deepseek_dense_differs);
  RUN(test_mtp_quantized);
  return check_finish();
}
