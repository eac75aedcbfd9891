/* test_mtp — the MTP drafter (runtime/mtp_session.h, models/mtp.h, docs/mtp.md) on a make-tiny
 * Qwen3.5 checkpoint with an MTP head, driven the way the engine drives it:
 *   the target (packed graph with output_hidden) runs each sequence's prompt and a greedy
 *   continuation, giving the kept token stream x and hidden rows h; then, round by round, each
 *   sequence's MTP catches up on its newly kept positions (tokens shifted by one, the target's
 *   hidden_states rows), drafts the argmax of its last row, and chains k-1 one-token steps on
 *   the previous draft and mtp_hidden_out.
 * Checked:
 *   (a) every MTP logits and hidden row of a packed multi-sequence flow is bit-identical to the
 *       same sequence's flow run alone (its own session, B = 1);
 *   (b) every row matches a plain double-precision C reference of the MTP math written here
 *       from the checkpoint's tensors (read by name from the safetensors, not from the graph:
 *       independent of the builder, the executor and the kernels), over the history of rows
 *       each position last held (chained rows included: their K/V are what later rows attend
 *       to until a catch-up overwrites them);
 *   (c) the typed refusals: no MTP weights, a MoE model's MTP head, bad runs;
 *   (d) output_hidden: hidden_states is the final-normed row (logits = lm_head · hidden), an
 *       output only when asked, refused by the dense layout.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/hybrid_cache.h"
#include "check.h"
#include "exec/exec.h"
#include "io/safetensors.h"
#include "models/model.h"
#include "models/registry.h"
#include "models/tiny.h"
#include "pagedhybrid.h"
#include "runtime/mtp_session.h"
#include "runtime/paged_session.h"

#define N_SEQ    3
#define MAX_T    48 /* kept stream length bound */
#define K_DRAFT  3  /* drafts per round: 1 from the catch-up, 2 chained */
#define N_ROUNDS 5
#define MAX_ROWS 2048

static char g_dir[1024];

static ph_model *open_tiny(const char *tag, const tiny_params *tp) {
  snprintf(g_dir, sizeof g_dir, "%s/%s", check_env("PH_TMP_DIR"), tag);
  diag d;
  ph_status s = tiny_write(g_dir, tp, &d);
  CHECK_STATUS(s, PH_OK, d.msg);
  if (s != PH_OK) return NULL;
  ph_model *m = NULL;
  s = ph_model_open(g_dir, NULL, &m);
  CHECK_STATUS(s, PH_OK, m ? ph_model_error(m) : "");
  if (s != PH_OK) {
    ph_model_free(m);
    return NULL;
  }
  return m;
}

/* ---- the reference: the MTP math in double, from the checkpoint's tensors ------------------ */

typedef struct ref_model {
  int64_t H, V, Hq, Hkv, D, I, rot;
  double eps, theta;
  float *embed, *head, *fc, *ne, *nh, *norm, *ln1, *ln2, *wq, *wk, *wv, *wo, *qn, *kn, *wg, *wu,
      *wd;
} ref_model;

static float *load(const ph_model *m, const char *name, int64_t numel) {
  const st_tensor *t = st_find(model_tensors(m), name);
  CHECK(t != NULL);
  if (!t) return NULL;
  CHECK(t->dtype == PH_DTYPE_F32);
  CHECK_EQ_INT(shape_numel(&t->shape), numel);
  float *p = malloc((size_t)numel * sizeof *p);
  if (p) memcpy(p, t->data, (size_t)numel * sizeof *p);
  return p;
}

static int ref_load(const ph_model *m, ref_model *r) {
  const hf_config *c = model_config(m);
  memset(r, 0, sizeof *r);
  r->H = c->hidden_size;
  r->V = c->vocab_size;
  r->Hq = c->n_heads;
  r->Hkv = c->n_kv_heads;
  r->D = c->head_dim;
  r->I = c->intermediate_size;
  r->rot = c->rope.rotary_dim;
  r->eps = c->rms_norm_eps;
  r->theta = c->rope.theta;
  const int64_t H = r->H, V = r->V, q = r->Hq * r->D, kv = r->Hkv * r->D, I = r->I;
  r->embed = load(m, "model.embed_tokens.weight", V * H);
  r->head = c->tie_word_embeddings ? load(m, "model.embed_tokens.weight", V * H)
                                   : load(m, "lm_head.weight", V * H);
  r->fc = load(m, "mtp.fc.weight", H * 2 * H);
  r->ne = load(m, "mtp.pre_fc_norm_embedding.weight", H);
  r->nh = load(m, "mtp.pre_fc_norm_hidden.weight", H);
  r->norm = load(m, "mtp.norm.weight", H);
  r->ln1 = load(m, "mtp.layers.0.input_layernorm.weight", H);
  r->ln2 = load(m, "mtp.layers.0.post_attention_layernorm.weight", H);
  r->wq = load(m, "mtp.layers.0.self_attn.q_proj.weight", 2 * q * H);
  r->wk = load(m, "mtp.layers.0.self_attn.k_proj.weight", kv * H);
  r->wv = load(m, "mtp.layers.0.self_attn.v_proj.weight", kv * H);
  r->wo = load(m, "mtp.layers.0.self_attn.o_proj.weight", H * q);
  r->qn = load(m, "mtp.layers.0.self_attn.q_norm.weight", r->D);
  r->kn = load(m, "mtp.layers.0.self_attn.k_norm.weight", r->D);
  r->wg = load(m, "mtp.layers.0.mlp.gate_proj.weight", I * H);
  r->wu = load(m, "mtp.layers.0.mlp.up_proj.weight", I * H);
  r->wd = load(m, "mtp.layers.0.mlp.down_proj.weight", H * I);
  return r->embed && r->head && r->fc && r->ne && r->nh && r->norm && r->ln1 && r->ln2 && r->wq &&
         r->wk && r->wv && r->wo && r->qn && r->kn && r->wg && r->wu && r->wd;
}

static void ref_free(ref_model *r) {
  float *p[] = {r->embed, r->head, r->fc, r->ne, r->nh, r->norm, r->ln1, r->ln2, r->wq,
                r->wk,    r->wv,   r->wo, r->qn, r->kn, r->wg,   r->wu,  r->wd};
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
}

/* y[n] = x[n] / rms(x) * (1 + w) (Qwen's zero-centred gain) */
static void rms1p(const double *x, const float *w, int64_t n, double eps, double *y) {
  double ss = 0;
  for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
  const double inv = 1.0 / sqrt(ss / (double)n + eps);
  for (int64_t i = 0; i < n; i++) y[i] = x[i] * inv * (1.0 + (double)w[i]);
}

/* y[rows] = W[rows, cols] x */
static void matvec(const float *W, const double *x, int64_t rows, int64_t cols, double *y) {
  for (int64_t r = 0; r < rows; r++) {
    double s = 0;
    for (int64_t k = 0; k < cols; k++) s += (double)W[r * cols + k] * x[k];
    y[r] = s;
  }
}

/* NeoX rotation of the first rot channels of one head at position p (every MRoPE plane reads
 * the text position p, so the interleaved sections all rotate by p). */
static void rope(double *x, int64_t rot, double theta, int64_t p) {
  const int64_t half = rot / 2;
  for (int64_t i = 0; i < half; i++) {
    const double a = (double)p * pow(theta, -2.0 * (double)i / (double)rot);
    const double x1 = x[i], x2 = x[i + half];
    x[i] = x1 * cos(a) - x2 * sin(a);
    x[i + half] = x2 * cos(a) + x1 * sin(a);
  }
}

/* The layer input of one row: fc(concat(norm_e(embed(tok)), norm_h(hid))). */
static void ref_input(const ref_model *r, int64_t tok, const float *hid, double *x) {
  const int64_t H = r->H;
  double cat[256] = {0}, tmp[128] = {0}; /* H <= 128 */
  for (int64_t i = 0; i < H; i++) tmp[i] = r->embed[tok * H + i];
  rms1p(tmp, r->ne, H, r->eps, cat);
  for (int64_t i = 0; i < H; i++) tmp[i] = hid[i];
  rms1p(tmp, r->nh, H, r->eps, cat + H);
  matvec(r->fc, cat, H, 2 * H, x);
}

/* The MTP outputs of position p, attending over positions 0..p whose rows are toks / hids. */
static void ref_row(const ref_model *r, const int64_t *toks, const float *hids, int64_t p,
                    double *logits, double *out) {
  const int64_t H = r->H, D = r->D, Hq = r->Hq, Hkv = r->Hkv, I = r->I;
  const int64_t n = p + 1;
  double *x = malloc((size_t)H * sizeof *x), *h = malloc((size_t)H * sizeof *h);
  double *K = malloc((size_t)(n * Hkv * D) * sizeof *K), *Vv = malloc((size_t)(n * Hkv * D) * 8);
  double *qg = malloc((size_t)(2 * Hq * D) * sizeof *qg), *att = malloc((size_t)(Hq * D) * 8);
  double *sc = malloc((size_t)n * sizeof *sc), *tmp = malloc((size_t)(2 * I + 2 * H) * 8);
  for (int64_t t = 0; t < n; t++) { /* keys and values of every position */
    ref_input(r, toks[t], hids + t * H, x);
    rms1p(x, r->ln1, H, r->eps, h);
    matvec(r->wk, h, Hkv * D, H, tmp);
    for (int64_t g = 0; g < Hkv; g++) {
      rms1p(tmp + g * D, r->kn, D, r->eps, K + (t * Hkv + g) * D);
      rope(K + (t * Hkv + g) * D, r->rot, r->theta, t);
    }
    matvec(r->wv, h, Hkv * D, H, Vv + t * Hkv * D);
  }
  ref_input(r, toks[p], hids + p * H, x); /* the query row: residual stream x */
  rms1p(x, r->ln1, H, r->eps, h);
  matvec(r->wq, h, 2 * Hq * D, H, qg);
  for (int64_t hh = 0; hh < Hq; hh++) {
    double q[512];
    rms1p(qg + hh * 2 * D, r->qn, D, r->eps, q);
    rope(q, r->rot, r->theta, p);
    const int64_t g = hh / (Hq / Hkv);
    double mx = -INFINITY, sum = 0;
    for (int64_t t = 0; t < n; t++) {
      double s = 0;
      for (int64_t i = 0; i < D; i++) s += q[i] * K[(t * Hkv + g) * D + i];
      sc[t] = s / sqrt((double)D);
      if (sc[t] > mx) mx = sc[t];
    }
    for (int64_t t = 0; t < n; t++) sum += (sc[t] = exp(sc[t] - mx));
    for (int64_t i = 0; i < D; i++) {
      double o = 0;
      for (int64_t t = 0; t < n; t++) o += sc[t] / sum * Vv[(t * Hkv + g) * D + i];
      const double gate = qg[hh * 2 * D + D + i];
      att[hh * D + i] = o / (1.0 + exp(-gate));
    }
  }
  matvec(r->wo, att, H, Hq * D, tmp);
  for (int64_t i = 0; i < H; i++) x[i] += tmp[i];
  rms1p(x, r->ln2, H, r->eps, h);
  double *gt = tmp, *up = tmp + I;
  matvec(r->wg, h, I, H, gt);
  matvec(r->wu, h, I, H, up);
  for (int64_t i = 0; i < I; i++) gt[i] = gt[i] / (1.0 + exp(-gt[i])) * up[i];
  matvec(r->wd, gt, H, I, h);
  for (int64_t i = 0; i < H; i++) x[i] += h[i];
  rms1p(x, r->norm, H, r->eps, out);
  matvec(r->head, out, r->V, H, logits);
  free(x);
  free(h);
  free(K);
  free(Vv);
  free(qg);
  free(att);
  free(sc);
  free(tmp);
}

/* ---- the target: kept streams ------------------------------------------------------------ */

typedef struct stream {
  int64_t T;            /* kept positions with a hidden row */
  int64_t x[MAX_T + 1]; /* tokens x_0..x_T */
  float h[MAX_T * 128]; /* hidden rows [T][H] (H <= 128) */
} stream;

static int argmax(const float *v, int64_t n) {
  int best = 0;
  for (int64_t i = 1; i < n; i++)
    if (v[i] > v[best]) best = (int)i;
  return best;
}

/* Runs the prompt x[0..L) and greedy steps through the target (alone), filling s->x and s->h
 * for T positions; also checks logits = lm_head · hidden_states (the hidden is post-norm). */
static void target_stream(const ph_model *m, const ref_model *r, ph_dtype io, int64_t L, int seed,
                          stream *s) {
  model_options o = model_options_default();
  o.output_hidden = 1;
  o.io_dtype = io;
  paged_session_params pp = paged_session_params_default();
  paged_session *ps = NULL;
  diag d;
  ph_status st = paged_session_create_model(m, &o, &pp, &ps, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  if (st != PH_OK) return;
  executor *e = paged_session_executor(ps);
  const int hid = exec_output_index(e, "hidden_states");
  CHECK(hid >= 0);
  const int64_t H = r->H, V = r->V;
  block_table bt;
  block_table_init(&bt);
  int32_t slot = -1;
  for (int64_t j = 0; j < L; j++) s->x[j] = (j * 31 + seed * 17 + 3) % V;
  s->T = MAX_T;
  double worst = 0;
  for (int64_t at = 0; at < s->T;) {
    const int64_t n = at == 0 ? L : 1;
    CHECK_STATUS(hybrid_cache_reserve(paged_session_cache(ps), &bt, &slot, at + n, &d), PH_OK,
                 d.msg);
    paged_seq q = {.slot = slot, .blocks = &bt, .past = at, .tokens = s->x + at, .n = n};
    st = paged_session_run(ps, &q, 1, &d);
    CHECK_STATUS(st, PH_OK, d.msg);
    if (st != PH_OK) break;
    const tensor *ht = exec_output(e, hid);
    CHECK(ht && ht->dtype == PH_DTYPE_F32 && ht->dims[0] == n && ht->dims[1] == H);
    for (int64_t j = 0; j < n; j++) {
      const float *row = (const float *)ht->data + j * H,
                  *lg = paged_session_token_logits(ps, 0, j);
      memcpy(s->h + (at + j) * H, row, (size_t)H * sizeof *row);
      double hd[128], ref[512];
      for (int64_t i = 0; i < H; i++) hd[i] = row[i];
      matvec(r->head, hd, V, H, ref);
      for (int64_t v = 0; v < V; v++) {
        const double e_ = fabs(ref[v] - lg[v]) / (1.0 + fabs(ref[v]));
        if (!(e_ <= worst)) worst = e_; /* NaN propagates as failure */
      }
    }
    s->x[at + n] = argmax(paged_session_last_logits(ps, 0), V);
    at += n;
  }
  /* f32: summation order only; bf16: the LM head's output rounded once to bf16 (2^-8) */
  const double bound = io == PH_DTYPE_BF16 ? 1e-2 : 1e-4;
  CHECK(worst < bound);
  if (!(worst < bound)) fprintf(stderr, "       logits vs lm_head(hidden_states): %g\n", worst);
  hybrid_cache_release(paged_session_cache(ps), &bt, &slot, &d);
  free(bt.ids);
  paged_session_free(ps);
}

/* ---- the drafting flow ------------------------------------------------------------------ */

/* Positions kept after each round: the prompt, then 1..3 accepted per round. */
static int64_t kept_after(int s, int round, int64_t L) {
  static const int64_t acc[N_SEQ][N_ROUNDS] = {{0, 2, 1, 3, 1}, {0, 1, 3, 2, 2}, {0, 3, 3, 1, 1}};
  int64_t k = L;
  for (int i = 0; i <= round; i++) k += acc[s][i];
  return k;
}

typedef struct flow_rec {
  int64_t n_rows;
  float *logits; /* [MAX_ROWS][V] */
  float *hidden; /* [MAX_ROWS][H] */
} flow_rec;

typedef struct ref_hist { /* the row each position last held */
  int64_t tok[MAX_T + K_DRAFT + 1];
  float hid[(MAX_T + K_DRAFT + 1) * 128]; /* [position][H] */
} ref_hist;

/* Checks the run's rows against the reference and appends them to rec[seq]. */
static void take_rows(const mtp_session *ms, const mtp_seq *q, const int *which, int32_t B,
                      flow_rec *rec, ref_hist *hist, const ref_model *r, double *worst) {
  const int64_t H = mtp_session_hidden_size(ms), V = mtp_session_vocab(ms);
  for (int32_t b = 0; b < B; b++) {
    ref_hist *hs = &hist[which[b]];
    for (int64_t j = 0; j < q[b].n; j++) { /* record the rows the run wrote */
      hs->tok[q[b].past + j] = q[b].tokens[j];
      memcpy(hs->hid + (q[b].past + j) * H, q[b].hidden + j * H, (size_t)H * sizeof(float));
    }
    for (int64_t j = 0; j < q[b].n; j++) {
      const float *lg = mtp_session_logits(ms, b, j), *hd = mtp_session_hidden(ms, b, j);
      CHECK(lg && hd);
      if (!lg || !hd) return;
      flow_rec *fr = &rec[which[b]];
      if (fr->n_rows < MAX_ROWS) {
        memcpy(fr->logits + fr->n_rows * V, lg, (size_t)V * sizeof *lg);
        memcpy(fr->hidden + fr->n_rows * H, hd, (size_t)H * sizeof *hd);
        fr->n_rows++;
      }
      if (!r) continue;
      double ref_l[512], ref_h[128];
      ref_row(r, hs->tok, hs->hid, q[b].past + j, ref_l, ref_h);
      for (int64_t v = 0; v < V; v++) {
        const double e_ = fabs(ref_l[v] - lg[v]) / (1.0 + fabs(ref_l[v]));
        if (!(e_ <= *worst)) *worst = e_;
      }
      for (int64_t i = 0; i < H; i++) {
        const double e_ = fabs(ref_h[i] - hd[i]) / (1.0 + fabs(ref_h[i]));
        if (!(e_ <= *worst)) *worst = e_;
      }
    }
  }
}

/* The engine's MTP flow for the sequences `which[nw]`, all in one session (packed runs). */
static void mtp_flow(const ph_model *m, ph_dtype io, const stream *st, const int64_t *L,
                     const int *which, int nw, flow_rec *rec, const ref_model *r, double *worst) {
  mtp_session *ms = NULL;
  diag d;
  model_options o = model_options_default();
  o.io_dtype = io;
  ph_status s = mtp_session_create(m, &o, N_SEQ, 256, 0, &ms, &d);
  CHECK_STATUS(s, PH_OK, d.msg);
  if (s != PH_OK) return;
  const int64_t H = mtp_session_hidden_size(ms), V = mtp_session_vocab(ms);
  ref_hist *hist = calloc(N_SEQ, sizeof *hist);
  int32_t handle[N_SEQ];
  int64_t past[N_SEQ] = {0}, draft[N_SEQ][K_DRAFT];
  float chain_h[N_SEQ][128];
  for (int i = 0; i < nw; i++) CHECK_STATUS(mtp_session_open(ms, &handle[i], &d), PH_OK, d.msg);
  for (int round = 0; round < N_ROUNDS && hist; round++) {
    mtp_seq q[N_SEQ];
    for (int i = 0; i < nw; i++) { /* catch up on the kept positions [past, kept) */
      const stream *ss = &st[which[i]];
      const int64_t kept = kept_after(which[i], round, L[which[i]]);
      q[i] = (mtp_seq){.handle = handle[i],
                       .past = past[i],
                       .n = kept - past[i],
                       .tokens = ss->x + past[i] + 1,
                       .hidden = ss->h + past[i] * H};
    }
    s = mtp_session_run(ms, q, nw, &d);
    CHECK_STATUS(s, PH_OK, d.msg);
    if (s != PH_OK) break;
    take_rows(ms, q, which, nw, rec, hist, r, worst);
    for (int i = 0; i < nw; i++) {
      draft[i][0] = argmax(mtp_session_logits(ms, i, q[i].n - 1), V);
      memcpy(chain_h[i], mtp_session_hidden(ms, i, q[i].n - 1), (size_t)H * sizeof(float));
      past[i] += q[i].n;
    }
    for (int k = 1; k < K_DRAFT; k++) { /* chained one-token steps, never committed */
      for (int i = 0; i < nw; i++)
        q[i] = (mtp_seq){.handle = handle[i],
                         .past = past[i] + k - 1,
                         .n = 1,
                         .tokens = &draft[i][k - 1],
                         .hidden = chain_h[i]};
      s = mtp_session_run(ms, q, nw, &d);
      CHECK_STATUS(s, PH_OK, d.msg);
      if (s != PH_OK) break;
      take_rows(ms, q, which, nw, rec, hist, r, worst);
      for (int i = 0; i < nw; i++) {
        draft[i][k] = argmax(mtp_session_logits(ms, i, 0), V);
        memcpy(chain_h[i], mtp_session_hidden(ms, i, 0), (size_t)H * sizeof(float));
      }
    }
  }
  free(hist);
  mtp_session_free(ms);
}

/* The flow with activations (and the head's pages) in io: packed == alone always; against the
 * f64 reference when io is f32 (bf16 rounds every op boundary: no tight bound to hold it to). */
static void mtp_flow_in(ph_dtype io) {
  tiny_params tp = tiny_params_default();
  tp.mtp_layers = 1;
  ph_model *m = open_tiny(io == PH_DTYPE_F32 ? "tiny-mtp" : "tiny-mtp-io", &tp);
  if (!m) return;
  CHECK_EQ_INT(model_weights_of(m)->n_mtp_layers, 1);
  ref_model r;
  if (!ref_load(m, &r)) {
    ref_free(&r);
    ph_model_free(m);
    return;
  }
  static stream st[N_SEQ];
  const int64_t L[N_SEQ] = {5, 17, 1};
  for (int s = 0; s < N_SEQ; s++) target_stream(m, &r, io, L[s], s, &st[s]);
  const int64_t V = r.V, H = r.H;
  flow_rec packed[N_SEQ], alone[N_SEQ];
  for (int s = 0; s < N_SEQ; s++) {
    packed[s] =
        (flow_rec){0, malloc((size_t)(MAX_ROWS * V) * 4), malloc((size_t)(MAX_ROWS * H) * 4)};
    alone[s] =
        (flow_rec){0, malloc((size_t)(MAX_ROWS * V) * 4), malloc((size_t)(MAX_ROWS * H) * 4)};
  }
  double worst = 0;
  const int all[N_SEQ] = {0, 1, 2};
  const ref_model *check_ref = io == PH_DTYPE_F32 ? &r : NULL;
  mtp_flow(m, io, st, L, all, N_SEQ, packed, check_ref, &worst);
  for (int s = 0; s < N_SEQ; s++) mtp_flow(m, io, st, L, &all[s], 1, alone, NULL, &worst);
  /* (b) the reference */
  CHECK(worst < 2e-4);
  if (check_ref) printf("  MTP vs reference: worst scaled error %.3g (bound 2e-4)\n", worst);
  /* (a) packed == alone, bit for bit */
  for (int s = 0; s < N_SEQ; s++) {
    CHECK(packed[s].n_rows > 0);
    CHECK_EQ_INT(packed[s].n_rows, alone[s].n_rows);
    if (packed[s].n_rows != alone[s].n_rows) continue;
    CHECK(memcmp(packed[s].logits, alone[s].logits, (size_t)(packed[s].n_rows * V) * 4) == 0);
    CHECK(memcmp(packed[s].hidden, alone[s].hidden, (size_t)(packed[s].n_rows * H) * 4) == 0);
    int finite = 1;
    for (int64_t i = 0; i < packed[s].n_rows * V; i++) finite &= isfinite(packed[s].logits[i]);
    CHECK(finite);
  }
  for (int s = 0; s < N_SEQ; s++) {
    free(packed[s].logits);
    free(packed[s].hidden);
    free(alone[s].logits);
    free(alone[s].hidden);
  }
  ref_free(&r);
  ph_model_free(m);
}

/* ---- refusals and bad runs ---------------------------------------------------------------- */

static void test_refusals(void) {
  diag d;
  /* (c) no MTP weights: the typed refusal */
  tiny_params tp = tiny_params_default();
  ph_model *m = open_tiny("tiny-no-mtp", &tp);
  mtp_session *ms = NULL;
  if (m) {
    CHECK_STATUS(mtp_session_create(m, NULL, 2, 64, 0, &ms, &d), PH_ERR_UNSUPPORTED, d.msg);
    CHECK(ms == NULL);
    CHECK_CONTAINS(d.msg, "no MTP head");
    /* output_hidden: absent unless asked; the dense layout refuses it */
    model_options o = model_options_default();
    paged_session *ps = NULL;
    CHECK_STATUS(paged_session_create_model(m, &o, NULL, &ps, &d), PH_OK, d.msg);
    if (ps) CHECK(exec_output_index(paged_session_executor(ps), "hidden_states") < 0);
    paged_session_free(ps);
    ps = NULL;
    /* with a pruned LM head: logits [B, V], hidden_states still every row [N, H] */
    o.output_hidden = 1;
    o.prune_lm_head = 1;
    CHECK_STATUS(paged_session_create_model(m, &o, NULL, &ps, &d), PH_OK, d.msg);
    if (ps) {
      block_table bt;
      block_table_init(&bt);
      int32_t slot = -1;
      const int64_t toks[3] = {3, 1, 4};
      CHECK_STATUS(hybrid_cache_reserve(paged_session_cache(ps), &bt, &slot, 3, &d), PH_OK, d.msg);
      paged_seq q = {.slot = slot, .blocks = &bt, .past = 0, .tokens = toks, .n = 3};
      CHECK_STATUS(paged_session_run(ps, &q, 1, &d), PH_OK, d.msg);
      executor *e = paged_session_executor(ps);
      const tensor *ht = exec_output(e, exec_output_index(e, "hidden_states"));
      CHECK(ht && ht->dims[0] == 3 && ht->dims[1] == tp.hidden_size);
      int64_t rows = 0;
      CHECK(paged_session_logits(ps, &rows) && rows == 1);
      hybrid_cache_release(paged_session_cache(ps), &bt, &slot, &d);
      free(bt.ids);
    }
    paged_session_free(ps);
    o.prune_lm_head = 0;
    graph *g = NULL;
    CHECK_STATUS(model_build_graph(model_config(m), model_weights_of(m), &o, &g, &d),
                 PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, "output_hidden");
    ph_model_free(m);
  }
  /* a MoE model's MTP head: make-tiny refuses to write one, the binder leaves one unbound */
  tp = tiny_params_default();
  tp.model_type = "qwen3_5_moe_text";
  tp.mtp_layers = 1;
  snprintf(g_dir, sizeof g_dir, "%s/tiny-moe-mtp", check_env("PH_TMP_DIR"));
  CHECK_STATUS(tiny_write(g_dir, &tp, &d), PH_ERR_UNSUPPORTED, d.msg);
  CHECK_CONTAINS(d.msg, "MoE");
  /* bad runs on a model with an MTP head */
  tp = tiny_params_default();
  tp.mtp_layers = 1;
  m = open_tiny("tiny-mtp-bad", &tp);
  if (!m) return;
  CHECK_STATUS(mtp_session_create(m, NULL, 0, 64, 0, &ms, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(mtp_session_create(m, NULL, 1, 8, 0, &ms, &d), PH_OK, d.msg);
  if (ms) {
    int32_t h = -1, h2 = -1;
    CHECK_STATUS(mtp_session_open(ms, &h, &d), PH_OK, d.msg);
    CHECK_STATUS(mtp_session_open(ms, &h2, &d), PH_ERR_LIMIT, d.msg);
    const int64_t H = mtp_session_hidden_size(ms);
    float *hid = calloc((size_t)(16 * H), sizeof *hid);
    int64_t toks[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    mtp_seq q = {.handle = h, .past = 1, .n = 2, .tokens = toks, .hidden = hid};
    CHECK_STATUS(mtp_session_run(ms, &q, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg); /* past > 0 */
    CHECK_CONTAINS(d.msg, "computed 0 positions");
    q.past = 0;
    q.n = 9;
    CHECK_STATUS(mtp_session_run(ms, &q, 1, &d), PH_ERR_LIMIT, d.msg); /* > max_tokens */
    q.n = 2;
    toks[1] = 1 << 20;
    CHECK_STATUS(mtp_session_run(ms, &q, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    toks[1] = 2;
    CHECK_STATUS(mtp_session_run(ms, &q, 1, &d), PH_OK, d.msg);
    CHECK_EQ_INT(mtp_session_computed(ms, h), 2);
    CHECK(mtp_session_logits(ms, 0, 2) == NULL);
    CHECK(mtp_session_hidden(ms, 1, 0) == NULL);
    q.handle = 5;
    CHECK_STATUS(mtp_session_run(ms, &q, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    mtp_session_close(ms, h);
    CHECK_EQ_INT(mtp_session_computed(ms, h), 0);
    free(hid);
  }
  mtp_session_free(ms);
  ph_model_free(m);
}

static void test_mtp_flow(void) { mtp_flow_in(PH_DTYPE_F32); }
static void test_mtp_flow_bf16(void) { mtp_flow_in(PH_DTYPE_BF16); }

int main(void) {
  RUN(test_mtp_flow);
  RUN(test_mtp_flow_bf16);
  RUN(test_refusals);
  return check_finish();
}
