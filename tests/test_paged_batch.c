/* The packed paged layout under continuous-batching traffic (issue 5), through paged_session and
 * its pools: unequal lengths around the page size (15, 16, 17) and the GatedDeltaNet chunk
 * (63, 64, 65), nonzero past and multi-token continuations, the batch reordered between steps
 * (slots bound as a slice and gathered), a request removed and its pages reused — pre-filled with
 * garbage — by a request admitted next to continuing ones. Checked after every step against one
 * dense session per sequence (logits, the logical K/V page contents, conv and recurrent states),
 * and per sequence bit for bit against the same sequence run alone in the paged layout (batch
 * invariance). Also: a pruned LM head gives exactly the last rows; f16 and bf16 activation graphs
 * are batch invariant too and within bounds derived from the golden bf16 forward, on the plan
 * (vs the f32 graph) and on the golden sequences (vs the f64 reference). The model is the golden
 * f32 checkpoint (layers 0-2 linear, 3 full). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "check.h"
#include "exec/exec.h"
#include "graph/prepare.h"
#include "io/safetensors.h"
#include "models/model.h"
#include "models/registry.h"
#include "runtime/dense_session.h"
#include "runtime/paged_session.h"
#include "tensor/dtype.h"

#define BLOCK   16
#define MAX_TOK 160
#define N_SEQ   6
#define PAGES   40 /* incl. the null page: enough for the live sequences, so E's pages get reused */

typedef struct seq {
  int64_t tokens[MAX_TOK];
  int64_t n_total, done;
  int32_t slot;
  int live;
  block_table bt;
  float *logits;        /* [n_total, V] */
  dense_session *dense; /* reference (may be NULL) */
  int64_t chunks[32];   /* the chunk list it ran, replayed alone */
  int n_chunks;
} seq;

/* One step: up to N_SEQ (sequence, tokens) entries in batch order; remove lists sequences that
 * leave before the step (their pages and slot go back to the pools). */
typedef struct step_plan {
  int n;
  int who[N_SEQ];
  int64_t len[N_SEQ];
  int n_remove;
  int remove[2];
} step_plan;

/* A: 65 then 3, 1...; B: 15, 1 (=16), 1 (=17), 16; C: 64, 1, 2; D admitted at step 2 (17, 5);
 * E: 63 then removed; F admitted at step 3 into E's recycled, garbage-filled pages. */
static const step_plan PLAN[] = {
    {4, {0, 1, 2, 4}, {65, 15, 64, 63}, 0, {0}},   {4, {2, 1, 0, 3}, {1, 1, 3, 17}, 0, {0}},
    {4, {5, 0, 1, 3}, {16, 1, 1, 5}, 1, {4}},      {5, {1, 2, 5, 0, 3}, {16, 2, 1, 1, 1}, 0, {0}},
    {5, {0, 1, 2, 3, 5}, {1, 1, 1, 1, 1}, 0, {0}}, {3, {3, 5, 0}, {1, 1, 1}, 0, {0}},
};
#define N_STEPS ((int)(sizeof PLAN / sizeof PLAN[0]))

static ph_model *open_golden(void) {
  char path[1024];
  check_data(path, sizeof path, "golden/qwen35-tiny-f32/checkpoint");
  ph_model *m = NULL;
  CHECK_STATUS(ph_model_open(path, NULL, &m), PH_OK, ph_model_error(m));
  return m;
}

static paged_session *open_session_rotary(ph_model *m, ph_dtype io, int prune, model_rotary rot);

static paged_session *open_session(ph_model *m, ph_dtype io, int prune) {
  return open_session_rotary(m, io, prune, MODEL_ROTARY_FUSED);
}

/* prune: 0 every row's logits, 1 a pruned LM head, 2 the logit_rows input with compact state
 * updates (capacity 8, two state banks: sequences with capture > 0 verify). */
static paged_session *open_session_rotary(ph_model *m, ph_dtype io, int prune, model_rotary rot) {
  const hf_config *c = model_config(m);
  model_options o = model_options_default();
  o.rotary = rot;
  o.paged = 1;
  o.block_size = BLOCK;
  o.max_context = 512;
  o.io_dtype = io;
  o.prune_lm_head = prune == 1;
  o.logit_rows = prune == 2;
  o.state_update_capacity = prune >= 2 ? 8 : 0;
  graph *g = NULL;
  diag d;
  CHECK_STATUS(model_build_graph(c, model_weights_of(m), &o, &g, &d), PH_OK, d.msg);
  if (!g) return NULL;
  paged_binding bind;
  paged_binding_for_config(c, &bind);
  paged_session_params p = paged_session_params_default();
  p.n_blocks = PAGES;
  p.max_slots = N_SEQ;
  p.max_batch = N_SEQ;
  p.max_tokens = 512;
  p.n_threads = 2;
  p.state_banks = prune >= 2 ? 2 : 1;
  paged_session *s = NULL;
  CHECK_STATUS(paged_session_create(g, &bind, &p, &s, &d), PH_OK, d.msg);
  return s;
}

/* Fills pages [ids] of every layer with NaN: a kernel reading beyond a sequence's tokens would
 * spread it into the logits. */
static void dirty_pages(paged_session *s, const model_weights *w, const hf_config *c,
                        const int32_t *ids, int n) {
  (void)w;
  kv_buffers *kv = hybrid_cache_kv(paged_session_cache(s));
  for (int i = 0; i < (int)c->n_layers; i++) {
    if (c->layer_kind[i] != PH_LAYER_FULL_ATTENTION) continue;
    for (int which = 0; which < 2; which++) {
      tensor v;
      diag d;
      CHECK_STATUS(which ? kv_buffers_value(kv, i, &v, &d) : kv_buffers_key(kv, i, &v, &d), PH_OK,
                   d.msg);
      const size_t page = (size_t)(v.dims[1] * v.dims[2] * v.dims[3]);
      const size_t es = dtype_size(v.dtype);
      for (int k = 0; k < n; k++)
        memset((char *)v.data + (size_t)ids[k] * page * es, 0xff, page * es);
    }
  }
}

static void load_f32(const tensor *v, int64_t at, int64_t n, float *dst) {
  dtype_convert(dst, PH_DTYPE_F32, (const char *)v->data + (size_t)at * dtype_size(v->dtype),
                v->dtype, (size_t)n, NULL);
}

typedef struct worst {
  double logits, kv, conv, rec;
} worst;

static double rel(double err, double scale) { return scale > 0 ? err / scale : err; }

/* Paged state of sequence q after a step vs its dense session. */
static void compare_states(paged_session *s, const hf_config *c, const seq *q, worst *w) {
  diag d;
  for (int i = 0; i < (int)c->n_layers; i++) {
    int rank = 0;
    int64_t dims[4];
    if (c->layer_kind[i] == PH_LAYER_FULL_ATTENTION) {
      const int64_t Hkv = c->n_kv_heads, D = c->head_dim;
      for (int which = 0; which < 2; which++) {
        const float *ref = dense_session_state(q->dense, i, which, &rank, dims); /* [Hkv, P, D] */
        tensor v;
        CHECK_STATUS(which ? kv_buffers_value(hybrid_cache_kv(paged_session_cache(s)), i, &v, &d)
                           : kv_buffers_key(hybrid_cache_kv(paged_session_cache(s)), i, &v, &d),
                     PH_OK, d.msg);
        double err = 0, scale = 0;
        float row[256];
        for (int64_t t = 0; t < q->done; t++) {
          const int32_t page = q->bt.ids[t / BLOCK];
          load_f32(&v, ((int64_t)page * BLOCK + t % BLOCK) * Hkv * D, Hkv * D, row);
          for (int64_t h = 0; h < Hkv; h++)
            for (int64_t k = 0; k < D; k++) {
              const float r = ref[(h * dims[1] + t) * D + k];
              check_err_acc(row[h * D + k], r, &err, &scale);
            }
        }
        w->kv = fmax(w->kv, rel(err, scale));
      }
    } else {
      tensor cv, rv;
      CHECK_STATUS(
          state_pool_slot_conv(hybrid_cache_states(paged_session_cache(s)), i, q->slot, &cv, &d),
          PH_OK, d.msg);
      CHECK_STATUS(state_pool_slot_recurrent(hybrid_cache_states(paged_session_cache(s)), i,
                                             q->slot, &rv, &d),
                   PH_OK, d.msg);
      const float *rc = dense_session_state(q->dense, i, 0, &rank, dims); /* [C, K-1] */
      const int64_t nc = dims[0] * dims[1];
      float *pc = malloc((size_t)nc * sizeof *pc);
      load_f32(&cv, 0, nc, pc);
      double err = 0, scale = 0;
      for (int64_t k = 0; k < nc; k++) check_err_acc(pc[k], rc[k], &err, &scale);
      free(pc);
      w->conv = fmax(w->conv, rel(err, scale));
      const float *rr = dense_session_state(q->dense, i, 1, &rank, dims); /* [Hv, Dk, Dv] */
      const float *pr = rv.data;                                          /* [Hv, Dv, Dk] */
      const int64_t Hv = dims[0], Dk = dims[1], Dv = dims[2];
      err = scale = 0;
      for (int64_t h = 0; h < Hv; h++)
        for (int64_t a = 0; a < Dk; a++)
          for (int64_t b = 0; b < Dv; b++) {
            const float r = rr[(h * Dk + a) * Dv + b];
            check_err_acc(pr[(h * Dv + b) * Dk + a], r, &err, &scale);
          }
      w->rec = fmax(w->rec, rel(err, scale));
    }
  }
}

static void admit(paged_session *s, const hf_config *c, seq *q, int64_t n_tokens, int dirty) {
  diag d;
  q->slot = -1; /* a new sequence: the cache gives it a slot with its pages */
  CHECK_EQ_INT(paged_session_block_size(s), BLOCK);
  CHECK_STATUS(hybrid_cache_reserve(paged_session_cache(s), &q->bt, &q->slot, n_tokens, &d), PH_OK,
               d.msg);
  if (dirty) dirty_pages(s, NULL, c, q->bt.ids, q->bt.n_blocks);
  q->live = 1;
}

static void retire(paged_session *s, seq *q) {
  diag d;
  CHECK_STATUS(hybrid_cache_release(paged_session_cache(s), &q->bt, &q->slot, &d), PH_OK, d.msg);
  free(q->bt.ids);
  block_table_init(&q->bt);
  q->live = 0;
}

/* Runs the plan packed; with with_dense, checks every step against the dense sessions. */
static void run_plan(paged_session *s, ph_model *m, seq *seqs, int with_dense, worst *w,
                     uint64_t *moved, int *zero_copy_steps) {
  const hf_config *c = model_config(m);
  const int64_t V = c->vocab_size;
  diag d;
  for (int k = 0; k < N_STEPS; k++) {
    const step_plan *p = &PLAN[k];
    for (int r = 0; r < p->n_remove; r++) retire(s, &seqs[p->remove[r]]);
    paged_seq batch[N_SEQ];
    for (int b = 0; b < p->n; b++) {
      seq *q = &seqs[p->who[b]];
      /* admission reserves pages for the whole sequence; recycled pages are dirtied */
      if (!q->live) admit(s, c, q, q->n_total, k > 0);
      batch[b] = (paged_seq){q->slot, &q->bt, q->done, q->tokens + q->done, p->len[b], 0};
    }
    ph_status st = paged_session_run(s, batch, p->n, &d);
    CHECK_STATUS(st, PH_OK, d.msg);
    if (st != PH_OK) return;
    paged_step_stats ss = paged_session_last_stats(s);
    *moved += ss.state_bytes_moved;
    *zero_copy_steps += ss.state_zero_copy;
    for (int b = 0; b < p->n; b++) {
      seq *q = &seqs[p->who[b]];
      for (int64_t j = 0; j < p->len[b]; j++)
        memcpy(q->logits + (q->done + j) * V, paged_session_token_logits(s, b, j),
               (size_t)V * sizeof(float));
      q->chunks[q->n_chunks++] = p->len[b];
      if (with_dense) {
        float *ref = malloc((size_t)(p->len[b] * V) * sizeof *ref);
        CHECK_STATUS(dense_session_step(q->dense, q->tokens + q->done, p->len[b], ref, &d), PH_OK,
                     d.msg);
        double err = 0, scale = 0;
        for (int64_t e = 0; e < p->len[b] * V; e++)
          check_err_acc(q->logits[q->done * V + e], ref[e], &err, &scale);
        w->logits = fmax(w->logits, rel(err, scale));
        free(ref);
      }
      q->done += p->len[b];
      if (with_dense) compare_states(s, c, q, w);
    }
  }
}

static void init_seqs(seq *seqs, const hf_config *c) {
  rng r = rng_seed(2026);
  memset(seqs, 0, N_SEQ * sizeof *seqs);
  for (int k = 0; k < N_STEPS; k++)
    for (int b = 0; b < PLAN[k].n; b++) seqs[PLAN[k].who[b]].n_total += PLAN[k].len[b];
  for (int i = 0; i < N_SEQ; i++) {
    block_table_init(&seqs[i].bt);
    seqs[i].slot = -1;
    for (int64_t t = 0; t < seqs[i].n_total; t++)
      seqs[i].tokens[t] = (int64_t)(rng_next(&r) % (uint64_t)c->vocab_size);
    seqs[i].logits = calloc((size_t)(seqs[i].n_total * c->vocab_size), sizeof(float));
  }
}

static void free_seqs(seq *seqs, paged_session *s) {
  for (int i = 0; i < N_SEQ; i++) {
    if (seqs[i].live) retire(s, &seqs[i]);
    free(seqs[i].logits);
    dense_session_free(seqs[i].dense);
  }
}

/* Each sequence alone, same chunks, fresh slot and pages: logits bit-identical to the packed run.
 */
static int alone_matches(paged_session *s, const hf_config *c, const seq *packed) {
  const int64_t V = c->vocab_size;
  int all = 1;
  diag d;
  for (int i = 0; i < N_SEQ; i++) {
    seq q = packed[i];
    q.done = 0;
    q.live = 0;
    block_table_init(&q.bt);
    q.logits = calloc((size_t)(q.n_total * V), sizeof(float));
    admit(s, c, &q, q.n_total, 1);
    for (int k = 0; k < q.n_chunks; k++) {
      paged_seq one = {q.slot, &q.bt, q.done, q.tokens + q.done, q.chunks[k], 0};
      CHECK_STATUS(paged_session_run(s, &one, 1, &d), PH_OK, d.msg);
      for (int64_t j = 0; j < q.chunks[k]; j++)
        memcpy(q.logits + (q.done + j) * V, paged_session_token_logits(s, 0, j),
               (size_t)V * sizeof(float));
      q.done += q.chunks[k];
    }
    const int same =
        memcmp(q.logits, packed[i].logits, (size_t)(q.n_total * V) * sizeof(float)) == 0;
    if (!same) printf("  sequence %d differs from its run alone\n", i);
    all &= same;
    retire(s, &q);
    free(q.logits);
  }
  return all;
}

static void test_packed_vs_dense_and_alone(void) {
  ph_model *m = open_golden();
  if (!m) return;
  const hf_config *c = model_config(m);
  paged_session *s = open_session(m, PH_DTYPE_F32, 0);
  if (!s) {
    ph_model_free(m);
    return;
  }
  seq seqs[N_SEQ];
  init_seqs(seqs, c);
  diag d;
  for (int i = 0; i < N_SEQ; i++)
    CHECK_STATUS(dense_session_create(m, 512, 2, &seqs[i].dense, &d), PH_OK, d.msg);
  /* every page starts dirty */
  int32_t all[PAGES - 1];
  for (int i = 0; i < PAGES - 1; i++) all[i] = i + 1;
  dirty_pages(s, NULL, c, all, PAGES - 1);
  worst w = {0};
  uint64_t moved = 0;
  int zero_copy = 0;
  run_plan(s, m, seqs, 1, &w, &moved, &zero_copy);
  printf("  packed vs dense per step, worst of scale: logits %.2e, K/V pages %.2e, conv %.2e, "
         "recurrent %.2e (bound %.0e)\n  state bytes moved %llu over %d steps (%d bound as "
         "zero-copy slices)\n",
         w.logits, w.kv, w.conv, w.rec, PAIR_F32_TOL, (unsigned long long)moved, N_STEPS,
         zero_copy);
  /* PAIR_F32_TOL (tests/check.h): paged and dense are two float32 implementations over the same
   * weights, each within the golden bound (2e-4 of the reference's scale, for logits and for
   * every state tensor: tests/test_golden.c, test_paged.c), so they differ by at most twice it. */
  CHECK(w.logits <= PAIR_F32_TOL && w.kv <= PAIR_F32_TOL && w.conv <= PAIR_F32_TOL &&
        w.rec <= PAIR_F32_TOL);
  CHECK(zero_copy >= 1 && zero_copy < N_STEPS); /* both binding paths ran */
  for (int i = 0; i < N_SEQ; i++)
    for (int64_t e = 0; e < seqs[i].done * c->vocab_size; e++)
      if (!isfinite(seqs[i].logits[e])) {
        CHECK(!"a non-finite logit: garbage pages leaked in");
        break;
      }
  /* removal released E's pages and slot; the pools balance */
  CHECK_EQ_INT(state_pool_used_count(hybrid_cache_states(paged_session_cache(s))), N_SEQ - 1);
  int32_t held = 0;
  for (int i = 0; i < N_SEQ; i++) held += seqs[i].live ? seqs[i].bt.n_blocks : 0;
  CHECK_EQ_INT(block_pool_used_count(hybrid_cache_blocks(paged_session_cache(s))), held);
  for (int i = 0; i < N_SEQ; i++)
    if (seqs[i].live) retire(s, &seqs[i]);
  CHECK(alone_matches(s, c, seqs));
  CHECK_EQ_INT(block_pool_used_count(hybrid_cache_blocks(paged_session_cache(s))), 0);
  CHECK_EQ_INT(state_pool_used_count(hybrid_cache_states(paged_session_cache(s))), 0);
  free_seqs(seqs, s);
  paged_session_free(s);
  ph_model_free(m);
}

/* ---- f16 / bf16 activations ----------------------------------------------------------------
 * f16 / bf16 activations, KV pages and conv state (what ONNX Runtime's CUDA PagedAttention
 * takes), with the f32 checkpoint's weights rounded to the io dtype too (ONNX MatMul takes one
 * dtype): still bit-identical packed vs alone, and as close to exact as the format allows.
 *
 * The bounds are derived from the golden bf16 forward (tests/data/golden/qwen35-tiny-f32/
 * reference-bf16-forward.safetensors; ../shared/golden/README.md): the same model in float32
 * arithmetic with every activation rounded to bf16 where a bf16 forward rounds it (after each
 * linear layer, norm, activation and residual add), weights f32. S, read from the files here, is
 * its worst deviation from the f64 reference over the three golden sequences, as a fraction of
 * each sequence's logit scale (0.159; 0.062 / 0.159 / 0.0086 per sequence): how far this model's
 * logits move when its activations are rounded at bf16's unit roundoff 2^-8.
 *  - bf16: 2 S. Our bf16 graph rounds the activations as that forward does, and the weights as
 *    well. Rounding a linear layer's weights moves each output y = sum_i x_i w_i by
 *    sum_i x_i w_i d_i with |d_i| <= 2^-9 of random sign: about 2^-9 |y| for these random
 *    weights, the size of rounding y itself, which the forward already does at every linear
 *    layer (besides its norms, activations and residual adds). So the weights add at most
 *    another S, and the two add at worst: 2 S.
 *  - f16: S / 2. The same rounding points with unit roundoff 2^-11 instead of 2^-8 (11
 *    significant bits, not 8): to first order the error scales with it, 2 S / 8 = 0.25 S, and
 *    that is what f16 measures (0.248 S): an estimate of the typical size, not a bound. The
 *    worst of ~20k logits, each a sum of independent roundings, scatters around that size (an
 *    unrelated change of summation order moves it either way), and f16's narrower exponent
 *    range rounds its few subnormal values (0.03% of the golden weights) in absolute steps.
 *    Twice the estimate, S / 2, leaves room for both and stays at half the bf16 forward's own
 *    deviation, the product's bar for a reduced-precision mode. S is the worst of the three
 *    sequences, the model's sensitivity (per sequence the scaling is looser).
 * These bound the distance to the f64 reference (test_io_dtype_golden: the golden sequences,
 * measured bf16 0.154, f16 0.0395 of scale; until issue 12 the CPU prepare pass dropped the
 * rounding of f32 weights cast to the io dtype, which measured f16 at 0.019). Against the f32
 * graph on the traffic plan, add the f32 graph's own distance to f64, GOLDEN_F32_TOL
 * (io_dtype_case; measured bf16 0.147, f16 0.036).
 * A broken rounding or cast moves logits by O(1) of scale. */

/* S: the worst |bf16 forward - reference| / scale over the golden f32 sequences; 0 (and a
 * failed check) when the files do not hold the expected tensors. */
static double golden_bf16_sensitivity(void) {
  char path[1024];
  diag d;
  st_set *ref = NULL, *bf = NULL;
  CHECK_STATUS(
      st_open_file(check_data(path, sizeof path, "golden/qwen35-tiny-f32/reference.safetensors"),
                   &ref, &d),
      PH_OK, d.msg);
  CHECK_STATUS(st_open_file(check_data(path, sizeof path,
                                       "golden/qwen35-tiny-f32/reference-bf16-forward.safetensors"),
                            &bf, &d),
               PH_OK, d.msg);
  double S = 0;
  int n = 0;
  for (int s = 0; ref && bf; s++) {
    char name[32];
    snprintf(name, sizeof name, "seq%d.logits", s);
    const st_tensor *r = st_find(ref, name), *b = st_find(bf, name);
    if (!r) break;
    if (!CHECK(b && r->dtype == PH_DTYPE_F32 && b->dtype == PH_DTYPE_F32 &&
               shape_numel(&r->shape) == shape_numel(&b->shape)))
      break;
    double err = 0, scale = 0;
    for (int64_t k = 0; k < shape_numel(&r->shape); k++)
      check_err_acc(((const float *)b->data)[k], ((const float *)r->data)[k], &err, &scale);
    if (!(err / scale <= S)) S = err / scale;
    n++;
  }
  CHECK_EQ_INT(n, 3);
  CHECK(S > 0.01 && S < 1.0); /* the README's 0.159: a bf16-rounded forward, not a copy */
  st_close(ref);
  st_close(bf);
  return n == 3 ? S : 0.0;
}

static double bound_for(ph_dtype io, double S) { return io == PH_DTYPE_BF16 ? 2.0 * S : S / 2.0; }

static void io_dtype_case(ph_dtype io) {
  const double S = golden_bf16_sensitivity();
  const double bound = bound_for(io, S) + GOLDEN_F32_TOL;
  ph_model *m = open_golden();
  if (!m) return;
  const hf_config *c = model_config(m);
  paged_session *s32 = open_session(m, PH_DTYPE_F32, 0);
  paged_session *s16 = open_session(m, io, 0);
  if (s32 && s16) {
    seq a[N_SEQ], b[N_SEQ];
    init_seqs(a, c);
    init_seqs(b, c);
    worst w = {0};
    uint64_t moved = 0;
    int zc = 0;
    run_plan(s32, m, a, 0, &w, &moved, &zc);
    run_plan(s16, m, b, 0, &w, &moved, &zc);
    double err = 0, scale = 0;
    for (int i = 0; i < N_SEQ; i++)
      for (int64_t e = 0; e < a[i].n_total * c->vocab_size; e++)
        check_err_acc(b[i].logits[e], a[i].logits[e], &err, &scale);
    printf("  %s activations vs f32 on the plan: worst logits difference %.3f of scale (bound "
           "%.3f)\n",
           ph_dtype_name(io), err / scale, bound);
    CHECK(err <= bound * scale);
    for (int i = 0; i < N_SEQ; i++)
      if (b[i].live) retire(s16, &b[i]);
    CHECK(alone_matches(s16, c, b));
    free_seqs(a, s32);
    free_seqs(b, s16);
  }
  paged_session_free(s32);
  paged_session_free(s16);
  ph_model_free(m);
}

static void test_f16_io(void) { io_dtype_case(PH_DTYPE_F16); }
static void test_bf16_io(void) { io_dtype_case(PH_DTYPE_BF16); }

/* One sequence of n tokens alone through ps in chunks of 64; its logits into lg [n, V]. */
static void run_alone(paged_session *ps, const hf_config *c, const int64_t *toks, int64_t n,
                      float *lg) {
  const int64_t V = c->vocab_size;
  diag d;
  seq q;
  memset(&q, 0, sizeof q);
  block_table_init(&q.bt);
  admit(ps, c, &q, n, 0);
  for (int64_t done = 0; done < n;) {
    const int64_t len = n - done < 64 ? n - done : 64;
    paged_seq one = {q.slot, &q.bt, done, toks + done, len, 0};
    const ph_status st = paged_session_run(ps, &one, 1, &d);
    CHECK_STATUS(st, PH_OK, d.msg);
    if (st != PH_OK) break;
    for (int64_t j = 0; j < len; j++)
      memcpy(lg + (done + j) * V, paged_session_token_logits(ps, 0, j), (size_t)V * sizeof *lg);
    done += len;
  }
  retire(ps, &q);
}

/* The golden sequences' tokens (manifest.json), n_seq of them; NULL when unreadable. */
static json_t *golden_manifest(void) {
  char path[1024];
  json_error_t je;
  json_t *man =
      json_load_file(check_data(path, sizeof path, "golden/qwen35-tiny-f32/manifest.json"), 0, &je);
  CHECK(man != NULL);
  return man;
}

static int64_t golden_tokens(const json_t *man, int s, int64_t *toks) {
  const json_t *t =
      json_object_get(json_array_get(json_object_get(man, "sequences"), (size_t)s), "tokens");
  const int64_t n = (int64_t)json_array_size(t);
  if (!CHECK(n >= 1 && n <= MAX_TOK)) return 0;
  for (int64_t j = 0; j < n; j++) toks[j] = json_integer_value(json_array_get(t, (size_t)j));
  return n;
}

/* ---- f16 range ------------------------------------------------------------------------------
 * An f16 package (the CUDA target's default) holds every activation in f16, whose largest finite
 * value is 65504; a larger one rounds to infinity and turns the logits into NaN. The checkpoints
 * are bf16 (range 3.4e38), so nothing guarantees a model stays in f16's range: this measures it
 * on the golden sequences. The f32 graph runs them with an observer on the executor, and every
 * value the f16 graph holds in f16 (matched by name: the builder names values the same in both)
 * has its largest magnitude recorded. The golden model must stay below 65504 (it does by far:
 * the printed headroom); a real model is checked the same way by running its f16 package on our
 * runtime, whose engine ends a request whose logits are not finite with PH_ERR_NON_FINITE
 * (docs/export.md). */
typedef struct range_probe {
  char **names; /* sorted names of the values the f16 graph holds in f16 */
  int n;
  double max;
  char where[256];
  int non_finite;
} range_probe;

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void range_observe(void *ctx, const graph *g, const gnode *n, const tensor *const *out) {
  range_probe *p = ctx;
  for (int k = 0; k < n->n_outputs; k++) {
    const tensor *t = out[k];
    if (!t || t->dtype != PH_DTYPE_F32 || n->outputs[k] < 0) continue;
    const char *name = g->values[n->outputs[k]].name;
    if (!bsearch(&name, p->names, (size_t)p->n, sizeof *p->names, cmp_name)) continue;
    const float *x = t->data;
    for (int64_t i = 0; i < tensor_numel(t); i++) {
      if (!isfinite(x[i])) p->non_finite++;
      if (fabs(x[i]) > p->max) {
        p->max = fabs(x[i]);
        snprintf(p->where, sizeof p->where, "%s", name);
      }
    }
  }
}

static void test_f16_range(void) {
  ph_model *m = open_golden();
  if (!m) return;
  const hf_config *c = model_config(m);
  range_probe p = {0};
  model_options o = model_options_default();
  o.paged = 1;
  o.block_size = BLOCK;
  o.max_context = 512;
  o.io_dtype = PH_DTYPE_F16;
  graph *g16 = NULL;
  diag d;
  CHECK_STATUS(model_build_graph(c, model_weights_of(m), &o, &g16, &d), PH_OK, d.msg);
  for (int v = 0; g16 && v < g16->n_values; v++)
    if (g16->values[v].kind == VALUE_INTERMEDIATE && g16->values[v].type.dtype == PH_DTYPE_F16)
      p.n++;
  p.names = calloc((size_t)(p.n ? p.n : 1), sizeof *p.names);
  for (int v = 0, k = 0; g16 && v < g16->n_values; v++)
    if (g16->values[v].kind == VALUE_INTERMEDIATE && g16->values[v].type.dtype == PH_DTYPE_F16)
      p.names[k++] = (char *)g16->values[v].name;
  qsort(p.names, (size_t)p.n, sizeof *p.names, cmp_name);
  CHECK(p.n > 100); /* every layer's activations, not a handful */
  paged_session *ps = open_session(m, PH_DTYPE_F32, 0);
  json_t *man = golden_manifest();
  if (ps && man) {
    exec_set_observer(paged_session_executor(ps), range_observe, &p);
    const int64_t V = c->vocab_size;
    for (int s = 0; s < (int)json_array_size(json_object_get(man, "sequences")); s++) {
      int64_t toks[MAX_TOK];
      const int64_t n = golden_tokens(man, s, toks);
      float *lg = calloc((size_t)((n ? n : 1) * V), sizeof *lg);
      if (n) run_alone(ps, c, toks, n, lg);
      free(lg);
    }
  }
  printf("  %d values held in f16; largest |activation| on the golden sequences %.4g (%s): %.0fx "
         "below f16's 65504\n",
         p.n, p.max, p.where, p.max > 0 ? 65504.0 / p.max : 0.0);
  CHECK(p.max > 0 && p.max < 65504.0);
  CHECK_EQ_INT(p.non_finite, 0);
  json_decref(man);
  paged_session_free(ps);
  free(p.names);
  graph_free(g16);
  ph_model_free(m);
}

/* Logits [n, V] of the dense graph (RoPE form rot) run on tokens from empty state, with position
 * rows T = j, H = j/2 + 3, W = (7j) % 5 (n < 0: -n tokens, every row T = j). NULL on failure. */
static float *dense_planes_apart(ph_model *m, const int64_t *toks, int64_t n, model_rotary rot) {
  const hf_config *c = model_config(m);
  const int same = n < 0;
  n = same ? -n : n;
  model_options qo = model_options_default();
  qo.max_context = 512;
  qo.rotary = rot;
  graph *g = NULL;
  executor *e = NULL;
  diag d;
  CHECK_STATUS(model_build_graph(c, model_weights_of(m), &qo, &g, &d), PH_OK, d.msg);
  if (g) CHECK_STATUS(graph_prepare_cpu(g, &d), PH_OK, d.msg);
  if (g) CHECK_STATUS(exec_create(g, 2, &e, &d), PH_OK, d.msg);
  float *out = NULL;
  int64_t *pos = calloc((size_t)(3 * n), sizeof *pos), *mask = calloc((size_t)n, sizeof *mask);
  void *zeros = calloc(1 << 20, 1);
  ph_status st = e && pos && mask && zeros ? PH_OK : PH_ERR_NO_MEMORY;
  for (int64_t j = 0; j < n && pos && mask; j++) {
    pos[j] = j;
    pos[n + j] = same ? j : j / 2 + 3;
    pos[2 * n + j] = same ? j : (7 * j) % 5;
    mask[j] = 1;
  }
  for (int i = 0; st == PH_OK && i < g->n_inputs; i++) {
    const gvalue *v = &g->values[g->inputs[i]];
    tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = v->type.dtype;
    t.rank = v->type.rank;
    for (int k = 0; k < t.rank; k++) t.dims[k] = v->type.dims[k];
    if (strcmp(v->name, "input_ids") == 0 || strcmp(v->name, "attention_mask") == 0) {
      t.dims[0] = 1;
      t.dims[1] = n;
      t.data = strcmp(v->name, "input_ids") == 0 ? (void *)toks : (void *)mask;
    } else if (strcmp(v->name, "position_ids") == 0) {
      t.dims[1] = 1;
      t.dims[2] = n;
      t.data = pos;
    } else { /* empty past K/V [1, Hkv, 0, D]; zero conv and recurrent states */
      t.dims[0] = 1;
      for (int k = 1; k < t.rank; k++)
        if (t.dims[k] < 0) t.dims[k] = 0;
      t.data = zeros;
      CHECK(tensor_numel(&t) * (int64_t)dtype_size(t.dtype) <= (1 << 20));
    }
    st = exec_bind_input(e, i, &t, &d);
  }
  if (st == PH_OK) st = exec_run(e, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  const int li = e ? exec_output_index(e, "logits") : -1;
  if (st == PH_OK && li >= 0) {
    const tensor *l = exec_output(e, li);
    out = malloc((size_t)tensor_numel(l) * sizeof *out);
    if (out) memcpy(out, l->data, (size_t)tensor_numel(l) * sizeof *out);
  }
  free(pos);
  free(mask);
  free(zeros);
  exec_free(e);
  graph_free(g);
  return out;
}

/* ---- the two forms of RoPE ------------------------------------------------------------------
 * A CUDA-target package computes RoPE with plain ONNX ops, a CPU-target one with the fused op
 * (qwen35.h model_rotary). Both compute in f32 with the same roundings, so the packed graph's
 * logits must be bit-identical in both forms, for every io dtype, on the golden sequences; so
 * must the dense graph's (the form ORT checks, test_ort). */
static void test_rotary_forms(void) {
  ph_model *m = open_golden();
  json_t *man = golden_manifest();
  if (!m || !man) {
    json_decref(man);
    ph_model_free(m);
    return;
  }
  const hf_config *c = model_config(m);
  const int64_t V = c->vocab_size;
  const int n_seq = (int)json_array_size(json_object_get(man, "sequences"));
  static const ph_dtype dts[3] = {PH_DTYPE_F32, PH_DTYPE_F16, PH_DTYPE_BF16};
  for (int k = 0; k < 3; k++) {
    paged_session *f = open_session_rotary(m, dts[k], 0, MODEL_ROTARY_FUSED);
    paged_session *o = open_session_rotary(m, dts[k], 0, MODEL_ROTARY_OPS);
    int64_t differ = 0, total = 0;
    for (int s = 0; f && o && s < n_seq; s++) {
      int64_t toks[MAX_TOK];
      const int64_t n = golden_tokens(man, s, toks);
      float *a = calloc((size_t)((n ? n : 1) * V), sizeof *a);
      float *b = calloc((size_t)((n ? n : 1) * V), sizeof *b);
      if (n) {
        run_alone(f, c, toks, n, a);
        run_alone(o, c, toks, n, b);
      }
      for (int64_t e = 0; e < n * V; e++) differ += memcmp(&a[e], &b[e], sizeof *a) != 0;
      total += n * V;
      free(a);
      free(b);
    }
    printf("  %s packed graph, fused vs plain-op RoPE: %lld of %lld logits differ\n",
           ph_dtype_name(dts[k]), (long long)differ, (long long)total);
    CHECK(total > 0 && differ == 0);
    paged_session_free(f);
    paged_session_free(o);
  }
  /* the dense graph, with the three MRoPE planes apart (an image's T/H/W grid: text gives all
   * three the same position, which cannot tell one plane from another): sequence 0 in one step */
  int64_t toks[MAX_TOK];
  const int64_t n = golden_tokens(man, 0, toks);
  float *lg[2] = {NULL, NULL};
  for (int r = 0; r < 2 && n; r++) lg[r] = dense_planes_apart(m, toks, n, (model_rotary)r);
  CHECK(lg[0] && lg[1] && memcmp(lg[0], lg[1], (size_t)(n * V) * sizeof(float)) == 0);
  /* and the planes matter: all rows T gives other logits */
  float *t_only = n ? dense_planes_apart(m, toks, -n, MODEL_ROTARY_OPS) : NULL;
  CHECK(lg[1] && t_only && memcmp(lg[1], t_only, (size_t)(n * V) * sizeof(float)) != 0);
  free(t_only);
  free(lg[0]);
  free(lg[1]);
  json_decref(man);
  ph_model_free(m);
}

/* f32, f16 and bf16 activations on the golden f32 sequences (each alone, chunks of 64) against
 * the f64 reference: f32 within GOLDEN_F32_TOL, f16 and bf16 within the bounds above. */
static void test_io_dtype_golden(void) {
  const double S = golden_bf16_sensitivity();
  ph_model *m = open_golden();
  if (!m) return;
  const hf_config *c = model_config(m);
  const int64_t V = c->vocab_size;
  char path[1024];
  json_t *man = golden_manifest();
  st_set *ref = NULL;
  diag d;
  CHECK_STATUS(
      st_open_file(check_data(path, sizeof path, "golden/qwen35-tiny-f32/reference.safetensors"),
                   &ref, &d),
      PH_OK, d.msg);
  const json_t *seqs = json_object_get(man, "sequences");
  CHECK_EQ_INT(json_array_size(seqs), 3);
  static const ph_dtype dts[3] = {PH_DTYPE_F32, PH_DTYPE_F16, PH_DTYPE_BF16};
  for (int k = 0; k < 3 && ref; k++) {
    const double bound = dts[k] == PH_DTYPE_F32 ? GOLDEN_F32_TOL : bound_for(dts[k], S);
    paged_session *ps = open_session(m, dts[k], 0);
    double dev = 0;
    for (int s = 0; ps && s < (int)json_array_size(seqs); s++) {
      int64_t toks[MAX_TOK];
      const int64_t n = golden_tokens(man, s, toks);
      char name[32];
      snprintf(name, sizeof name, "seq%d.logits", s);
      const st_tensor *rt = st_find(ref, name);
      if (!CHECK(n >= 1 && rt && shape_numel(&rt->shape) == n * V)) continue;
      float *lg = calloc((size_t)(n * V), sizeof *lg);
      run_alone(ps, c, toks, n, lg);
      double err = 0, scale = 0;
      for (int64_t e = 0; e < n * V; e++)
        check_err_acc(lg[e], ((const float *)rt->data)[e], &err, &scale);
      if (!(err / scale <= dev)) dev = err / scale;
      free(lg);
    }
    printf("  %s activations on the golden sequences: worst %.3g of scale from the f64 reference "
           "(bound %.3g; S = %.3g)\n",
           ph_dtype_name(dts[k]), dev, bound, S);
    CHECK(dev <= bound);
    paged_session_free(ps);
  }
  st_close(ref);
  json_decref(man);
  ph_model_free(m);
}

/* prune_lm_head: logits [B, V] equal to the last row of each sequence of the full [N, V]. */
static void test_pruned_lm_head(void) {
  ph_model *m = open_golden();
  if (!m) return;
  const hf_config *c = model_config(m);
  paged_session *full = open_session(m, PH_DTYPE_F32, 0),
                *pruned = open_session(m, PH_DTYPE_F32, 1);
  if (full && pruned) {
    CHECK(paged_session_prunes_lm_head(pruned) && !paged_session_prunes_lm_head(full));
    seq a[N_SEQ], b[N_SEQ];
    init_seqs(a, c);
    init_seqs(b, c);
    worst w = {0};
    uint64_t moved = 0;
    int zc = 0;
    /* run the plan on both; compare the last row of every chunk */
    diag d;
    for (int k = 0; k < N_STEPS; k++) {
      const step_plan *p = &PLAN[k];
      for (int r = 0; r < p->n_remove; r++) {
        retire(full, &a[p->remove[r]]);
        retire(pruned, &b[p->remove[r]]);
      }
      paged_seq ba[N_SEQ], bb[N_SEQ];
      for (int i = 0; i < p->n; i++) {
        seq *qa = &a[p->who[i]], *qb = &b[p->who[i]];
        if (!qa->live) admit(full, c, qa, qa->n_total, 0);
        if (!qb->live) admit(pruned, c, qb, qb->n_total, 0);
        ba[i] = (paged_seq){qa->slot, &qa->bt, qa->done, qa->tokens + qa->done, p->len[i], 0};
        bb[i] = (paged_seq){qb->slot, &qb->bt, qb->done, qb->tokens + qb->done, p->len[i], 0};
      }
      CHECK_STATUS(paged_session_run(full, ba, p->n, &d), PH_OK, d.msg);
      CHECK_STATUS(paged_session_run(pruned, bb, p->n, &d), PH_OK, d.msg);
      int64_t rows = 0;
      paged_session_logits(pruned, &rows);
      CHECK_EQ_INT(rows, p->n);
      for (int i = 0; i < p->n; i++) {
        const float *x = paged_session_last_logits(full, i),
                    *y = paged_session_last_logits(pruned, i);
        CHECK(x && y && memcmp(x, y, (size_t)c->vocab_size * sizeof(float)) == 0);
        CHECK(paged_session_token_logits(pruned, i, p->len[i] - 1) == y);
        if (p->len[i] > 1) CHECK(paged_session_token_logits(pruned, i, 0) == NULL);
        a[p->who[i]].done += p->len[i];
        b[p->who[i]].done += p->len[i];
      }
    }
    (void)w;
    (void)moved;
    (void)zc;
    free_seqs(a, full);
    free_seqs(b, pruned);
  }
  paged_session_free(full);
  paged_session_free(pruned);
  ph_model_free(m);
}

/* logit_rows (the engine's LM head): a sequence's last row, or every row of a sequence with
 * capture > 0, bit-identical to the same rows of a whole head over the same graph (capacity 8,
 * the same verify steps: the full session is open_session(.., 3), logit_rows off); rows not
 * asked for are NULL. Every capturing sequence is committed whole, so both keep going. */
static void test_logit_rows_head(void) {
  ph_model *m = open_golden();
  if (!m) return;
  const hf_config *c = model_config(m);
  paged_session *full = open_session(m, PH_DTYPE_F32, 3), *sel = open_session(m, PH_DTYPE_F32, 2);
  int64_t compared = 0;
  if (full && sel) {
    CHECK(paged_session_all_rows(full) && !paged_session_all_rows(sel));
    seq a[N_SEQ], b[N_SEQ];
    init_seqs(a, c);
    init_seqs(b, c);
    diag d;
    for (int k = 0; k < N_STEPS; k++) {
      const step_plan *p = &PLAN[k];
      for (int r = 0; r < p->n_remove; r++) {
        retire(full, &a[p->remove[r]]);
        retire(sel, &b[p->remove[r]]);
      }
      paged_seq ba[N_SEQ], bb[N_SEQ];
      for (int i = 0; i < p->n; i++) {
        seq *qa = &a[p->who[i]], *qb = &b[p->who[i]];
        if (!qa->live) admit(full, c, qa, qa->n_total, 0);
        if (!qb->live) admit(sel, c, qb, qb->n_total, 0);
        /* every other short chunk verifies (captures all of it) */
        const int32_t cap = (k + i) % 2 && p->len[i] <= 8 ? (int32_t)p->len[i] : 0;
        ba[i] = (paged_seq){qa->slot, &qa->bt, qa->done, qa->tokens + qa->done, p->len[i], cap};
        bb[i] = (paged_seq){qb->slot, &qb->bt, qb->done, qb->tokens + qb->done, p->len[i], cap};
      }
      CHECK_STATUS(paged_session_run(full, ba, p->n, &d), PH_OK, d.msg);
      CHECK_STATUS(paged_session_run(sel, bb, p->n, &d), PH_OK, d.msg);
      int64_t kept[N_SEQ];
      for (int i = 0; i < p->n; i++) kept[i] = i == 0 ? p->len[i] + 1 : p->len[i];
      /* a bad count refuses the whole commit and publishes nothing */
      CHECK_STATUS(paged_session_commit_all(sel, kept, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
      kept[0] = p->len[0];
      for (int i = 0; i < p->n; i++) {
        for (int64_t j = 0; j < p->len[i]; j++) {
          const float *x = paged_session_token_logits(full, i, j),
                      *y = paged_session_token_logits(sel, i, j);
          if (bb[i].capture > 0 || j == p->len[i] - 1) {
            CHECK(x && y && memcmp(x, y, (size_t)c->vocab_size * sizeof(float)) == 0);
            compared++;
          } else {
            CHECK(y == NULL);
          }
        }
        CHECK(paged_session_last_logits(sel, i) ==
              paged_session_token_logits(sel, i, p->len[i] - 1));
        CHECK_STATUS(paged_session_commit(full, i, p->len[i], &d), PH_OK, d.msg);
        a[p->who[i]].done += p->len[i];
        b[p->who[i]].done += p->len[i];
      }
      /* the whole step at once (2 threads), as the engine commits */
      CHECK_STATUS(paged_session_commit_all(sel, kept, &d), PH_OK, d.msg);
      CHECK_STATUS(paged_session_commit_all(sel, kept, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
      CHECK_CONTAINS(d.msg, "committed already");
    }
    free_seqs(a, full);
    free_seqs(b, sel);
  }
  printf("  %lld logits rows compared\n", (long long)compared);
  CHECK(compared > N_STEPS);
  paged_session_free(full);
  paged_session_free(sel);
  ph_model_free(m);
}

/* Bad steps are typed errors and leave the pools as they were. */
static void test_bad_steps(void) {
  ph_model *m = open_golden();
  if (!m) return;
  const hf_config *c = model_config(m);
  paged_session *s = open_session(m, PH_DTYPE_F32, 0);
  if (s) {
    seq q;
    memset(&q, 0, sizeof q);
    block_table_init(&q.bt);
    admit(s, c, &q, 20, 0);
    int64_t toks[40] = {1, 2, 3};
    diag d;
    paged_seq one = {q.slot, &q.bt, 0, toks, 3, 0};
    toks[1] = c->vocab_size;
    CHECK_STATUS(paged_session_run(s, &one, 1, &d), PH_ERR_INVALID_ARGUMENT, "token");
    CHECK_CONTAINS(d.msg, "outside the vocabulary");
    toks[1] = 2;
    one.n = 40; /* 40 tokens need 3 pages; the table holds 2 */
    CHECK_STATUS(paged_session_run(s, &one, 1, &d), PH_ERR_INVALID_ARGUMENT, "pages");
    CHECK_CONTAINS(d.msg, "pages");
    one.n = 3;
    one.slot = q.slot + 1;
    CHECK_STATUS(paged_session_run(s, &one, 1, &d), PH_ERR_INVALID_ARGUMENT, "slot");
    one.slot = q.slot;
    paged_seq two[2] = {one, one};
    CHECK_STATUS(paged_session_run(s, two, 2, &d), PH_ERR_INVALID_ARGUMENT, "shared slot");
    one.past = 510; /* beyond the 512-token rotary context */
    CHECK_STATUS(paged_session_run(s, &one, 1, &d), PH_ERR_LIMIT, "context");
    one.past = 0;
    CHECK_STATUS(paged_session_run(s, &one, 1, &d), PH_OK, d.msg);
    CHECK_EQ_INT(state_pool_used_count(hybrid_cache_states(paged_session_cache(s))), 1);
    retire(s, &q);
  }
  paged_session_free(s);
  ph_model_free(m);
}

int main(void) {
  RUN(test_packed_vs_dense_and_alone);
  RUN(test_f16_io);
  RUN(test_bf16_io);
  RUN(test_io_dtype_golden);
  RUN(test_f16_range);
  RUN(test_rotary_forms);
  RUN(test_pruned_lm_head);
  RUN(test_logit_rows_head);
  RUN(test_bad_steps);
  return check_finish();
}
