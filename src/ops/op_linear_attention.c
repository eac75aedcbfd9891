/* op_linear_attention — com.microsoft LinearAttention (dense, K-major state): the contract, the
 * token loads and the split over threads; the compute is kernels/gated_delta.h.
 *
 * Shapes (letters used throughout this file): B sequences, T tokens per sequence, Hq query heads
 * (q_num_heads), Hv value heads (kv_num_heads: the state has one [Dk][Dv] matrix per value
 * head), Hk key heads (Hv, or Hq when Hq < Hv and the caller did not repeat the key), Dk key
 * width, Dv value width, C chunk length.
 *   query [B,T,Hq*Dk]  key [B,T,Hk*Dk]  value [B,T,Hv*Dv]  past_state [B,Hv,Dk,Dv] (K-major)
 *   decay [B,T,Hv] or [B,T,Hv*Dk] (log space)  beta [B,T,Hv] or [B,T,1]
 *   -> output [B,T,max(Hq,Hv)*Dv], present_state [B,Hv,Dk,Dv]; every tensor has the IO dtype.
 * The recurrence is spec/abi.md §2.4 (decay first, delta from the decayed state, write, read
 * after the write, scale on the read). Heads group contiguously: query head h reads state h/(Hq/Hv)
 * when Hq >= Hv; value head h reads query head h/(Hv/Hq) when Hv > Hq.
 *
 * Two kernels compute the same math in f32 whatever the storage dtype (outputs rounded once),
 * both the core GatedDeltaNet runs too (kernels/gated_delta.h):
 *   la_head_recurrent — token by token (gated_delta_token); used when T == 1 (decode).
 *   la_head_chunked   — C tokens at a time in the WY/UT form of spec/model-math.md §2
 *                       (gated_delta_chunk); used when T > 1, chunks anchored at the call's first
 *                       token. Exponentials are only ever taken of sums of g over (s, t] with
 *                       s <= t (see docs/ops-linear.md).
 * Work is split over (sequence, value head) pairs; each pair is one single-threaded kernel call
 * writing disjoint outputs, so results do not depend on the thread count. A pair reads its
 * whole past state before writing its present state: present_state may alias past_state.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/dispatch.h"
#include "kernels/gated_delta.h"
#include "ops/op.h"
#include "ops/op_util.h"
#include "tensor/dtype.h"

enum { LA_IN_Q, LA_IN_K, LA_IN_V, LA_IN_PAST, LA_IN_DECAY, LA_IN_BETA };

/* chunk_size is a tuning hint; larger values only grow the C^2 scratch, so they are capped. */
#define LA_MAX_CHUNK 256

/* ---- the contract ---------------------------------------------------------------------------- */

typedef struct la_geom {
  ph_dtype dt;
  int gated, delta;     /* from update_rule */
  float scale;          /* resolved once Dk is known (0 until then) */
  int64_t chunk;        /* effective chunk length (attribute capped at LA_MAX_CHUNK) */
  int64_t Hq, Hv, Hk;   /* Hk is -1 until the key width and Dk are known */
  int64_t B, T, Dk, Dv; /* -1: unknown at build time */
  int decay_per_dim;    /* -1 unknown, 0 [B,T,Hv], 1 [B,T,Hv*Dk] */
  int beta_per_head;    /* -1 unknown, 0 [B,T,1], 1 [B,T,Hv] */
  int has_past, has_decay, has_beta;
} la_geom;

/* Validates attributes, presence rules, dtypes, ranks and dims, in that order, and derives the
 * geometry. Works on static shapes (unknown dims stay -1) and on concrete ones. */
static ph_status la_resolve(const gnode *n, const tinfo *in_, la_geom *g, diag *d) {
  memset(g, 0, sizeof *g);
  RETURN_ERROR_IF(n->n_inputs < 3 || n->n_inputs > 6, d, PH_ERR_INVALID_ARGUMENT,
                  "LinearAttention: takes 3 to 6 inputs, got %d", n->n_inputs);
  RETURN_ERROR_IF(n->n_outputs < 1 || n->n_outputs > 2, d, PH_ERR_INVALID_ARGUMENT,
                  "LinearAttention: has 1 or 2 outputs, got %d", n->n_outputs);

  const char *rs = NULL;
  FORWARD_IF_ERROR(op_attr_update_rule(n, &rs, &g->gated, &g->delta, d));
  /* absent reads as 0, which the >= 1 check rejects */
  FORWARD_IF_ERROR(op_attr_int(n, "q_num_heads", 0, &g->Hq, d));
  RETURN_ERROR_IF(g->Hq < 1, d, PH_ERR_INVALID_ARGUMENT,
                  "LinearAttention: attribute q_num_heads is required and must be >= 1");
  FORWARD_IF_ERROR(op_attr_int(n, "kv_num_heads", 0, &g->Hv, d));
  RETURN_ERROR_IF(g->Hv < 1, d, PH_ERR_INVALID_ARGUMENT,
                  "LinearAttention: attribute kv_num_heads is required and must be >= 1");
  RETURN_ERROR_IF(g->Hq % g->Hv != 0 && g->Hv % g->Hq != 0, d, PH_ERR_INVALID_ARGUMENT,
                  "LinearAttention: q_num_heads %lld and kv_num_heads %lld: one must divide the "
                  "other",
                  (long long)g->Hq, (long long)g->Hv);
  float scale_attr = 0.0f;
  FORWARD_IF_ERROR(op_attr_float(n, "scale", 0.0f, &scale_attr, d));
  RETURN_ERROR_IF(!isfinite(scale_attr), d, PH_ERR_INVALID_ARGUMENT,
                  "LinearAttention: attribute scale must be a finite float, got %g",
                  (double)scale_attr);
  FORWARD_IF_ERROR(op_attr_int(n, "chunk_size", 64, &g->chunk, d));
  RETURN_ERROR_IF(g->chunk < 1, d, PH_ERR_INVALID_ARGUMENT,
                  "LinearAttention: chunk_size must be >= 1, got %lld", (long long)g->chunk);
  if (g->chunk > LA_MAX_CHUNK) g->chunk = LA_MAX_CHUNK;
  int64_t window = 0;
  FORWARD_IF_ERROR(op_attr_int(n, "state_window", 0, &window, d));
  RETURN_ERROR_IF(window < 0, d, PH_ERR_INVALID_ARGUMENT,
                  "LinearAttention: state_window must be >= 0, got %lld", (long long)window);
  RETURN_ERROR_IF(window > 0, d, PH_ERR_UNSUPPORTED,
                  "LinearAttention: state_window %lld > 0 is not supported on the CPU (as in "
                  "ONNX Runtime, whose CPU kernel rejects it too)",
                  (long long)window);

  /* A local copy of all six slots, absent ones zeroed, so that reading a slot the node does not
   * have is well defined. */
  tinfo in[6];
  memset(in, 0, sizeof in);
  for (int i = 0; i < n->n_inputs; i++) in[i] = in_[i];
  const tinfo *q = &in[LA_IN_Q], *k = &in[LA_IN_K], *v = &in[LA_IN_V];
  const tinfo *past = &in[LA_IN_PAST], *decay = &in[LA_IN_DECAY], *beta = &in[LA_IN_BETA];
  RETURN_ERROR_IF(q->dtype == PH_DTYPE_INVALID || k->dtype == PH_DTYPE_INVALID ||
                      v->dtype == PH_DTYPE_INVALID,
                  d, PH_ERR_INVALID_ARGUMENT, "LinearAttention: query, key and value are required");
  g->has_past = past->dtype != PH_DTYPE_INVALID;
  g->has_decay = decay->dtype != PH_DTYPE_INVALID;
  g->has_beta = beta->dtype != PH_DTYPE_INVALID;
  /* An input the rule would ignore is rejected rather than silently dropped. */
  RETURN_ERROR_IF(g->gated && !g->has_decay, d, PH_ERR_INVALID_ARGUMENT,
                  "LinearAttention: update_rule %s requires input 4 (decay)", rs);
  RETURN_ERROR_IF(!g->gated && g->has_decay, d, PH_ERR_INVALID_ARGUMENT,
                  "LinearAttention: update_rule %s takes no decay (input 4)", rs);
  RETURN_ERROR_IF(g->delta && !g->has_beta, d, PH_ERR_INVALID_ARGUMENT,
                  "LinearAttention: update_rule %s requires input 5 (beta)", rs);
  RETURN_ERROR_IF(!g->delta && g->has_beta, d, PH_ERR_INVALID_ARGUMENT,
                  "LinearAttention: update_rule %s takes no beta (input 5)", rs);

  g->dt = q->dtype;
  RETURN_ERROR_IF(!dtype_is_compute_float(g->dt), d, PH_ERR_TENSOR_DTYPE,
                  "LinearAttention: query dtype %s is not f32, f16 or bf16", ph_dtype_name(g->dt));
  static const char *const names[6] = {"query", "key", "value", "past_state", "decay", "beta"};
  for (int i = 1; i < 6; i++)
    RETURN_ERROR_IF(in[i].dtype != PH_DTYPE_INVALID && in[i].dtype != g->dt, d, PH_ERR_TENSOR_DTYPE,
                    "LinearAttention: %s is %s but query is %s (one type T for all inputs and "
                    "the state)",
                    names[i], ph_dtype_name(in[i].dtype), ph_dtype_name(g->dt));

  FORWARD_IF_ERROR(op_check_rank(n, q, 3, "query [B,T,Hq*Dk]", d));
  FORWARD_IF_ERROR(op_check_rank(n, k, 3, "key [B,T,Hk*Dk]", d));
  FORWARD_IF_ERROR(op_check_rank(n, v, 3, "value [B,T,Hv*Dv]", d));
  if (g->has_past) FORWARD_IF_ERROR(op_check_rank(n, past, 4, "past_state [B,Hv,Dk,Dv]", d));
  if (g->has_decay) FORWARD_IF_ERROR(op_check_rank(n, decay, 3, "decay [B,T,Hv(*Dk)]", d));
  if (g->has_beta) FORWARD_IF_ERROR(op_check_rank(n, beta, 3, "beta [B,T,Hv or 1]", d));

  g->B = g->T = g->Dk = g->Dv = g->Hk = -1;
  for (int i = 0; i < 6; i++) {
    if (in[i].dtype == PH_DTYPE_INVALID) continue;
    FORWARD_IF_ERROR(op_merge_dim(n, &g->B, op_dim(&in[i], 0), "the batch dim", d));
    if (i != LA_IN_PAST)
      FORWARD_IF_ERROR(op_merge_dim(n, &g->T, op_dim(&in[i], 1), "the token dim", d));
  }
  int64_t qw = op_dim(q, 2), kw = op_dim(k, 2), vw = op_dim(v, 2);
  if (qw >= 0) {
    RETURN_ERROR_IF(qw % g->Hq != 0, d, PH_ERR_TENSOR_SHAPE,
                    "LinearAttention: query width %lld is not a multiple of q_num_heads %lld",
                    (long long)qw, (long long)g->Hq);
    g->Dk = qw / g->Hq;
  }
  if (vw >= 0) {
    RETURN_ERROR_IF(vw % g->Hv != 0, d, PH_ERR_TENSOR_SHAPE,
                    "LinearAttention: value width %lld is not a multiple of kv_num_heads %lld",
                    (long long)vw, (long long)g->Hv);
    g->Dv = vw / g->Hv;
  }
  if (g->has_past) {
    RETURN_ERROR_IF(op_dim(past, 1) >= 0 && op_dim(past, 1) != g->Hv, d, PH_ERR_TENSOR_SHAPE,
                    "LinearAttention: past_state has %lld heads, kv_num_heads is %lld",
                    (long long)op_dim(past, 1), (long long)g->Hv);
    FORWARD_IF_ERROR(op_merge_dim(n, &g->Dk, op_dim(past, 2), "Dk (query width / q_num_heads)", d));
    FORWARD_IF_ERROR(
        op_merge_dim(n, &g->Dv, op_dim(past, 3), "Dv (value width / kv_num_heads)", d));
  }
  RETURN_ERROR_IF(g->Dk == 0 || g->Dv == 0, d, PH_ERR_TENSOR_SHAPE,
                  "LinearAttention: head widths must be >= 1 (Dk %lld, Dv %lld)", (long long)g->Dk,
                  (long long)g->Dv);
  if (kw >= 0 && g->Dk > 0) {
    if (kw == g->Hv * g->Dk) {
      g->Hk = g->Hv;
    } else if (g->Hq < g->Hv && kw == g->Hq * g->Dk) {
      g->Hk = g->Hq; /* inverse GQA with the key not repeated to the value heads */
    } else {
      return diag_set(d, PH_ERR_TENSOR_SHAPE,
                      "LinearAttention: key width %lld is neither kv_num_heads*Dk = %lld nor "
                      "(inverse GQA only) q_num_heads*Dk = %lld",
                      (long long)kw, (long long)(g->Hv * g->Dk), (long long)(g->Hq * g->Dk));
    }
  }
  g->decay_per_dim = g->beta_per_head = -1;
  if (g->has_decay) {
    int64_t w = op_dim(decay, 2);
    if (w == g->Hv) {
      g->decay_per_dim = 0; /* also when Dk == 1: both readings are the same */
    } else if (w >= 0 && g->Dk > 0 && w == g->Hv * g->Dk) {
      g->decay_per_dim = 1;
    } else if (w >= 0 && g->Dk >= 0) {
      return diag_set(d, PH_ERR_TENSOR_SHAPE,
                      "LinearAttention: decay width %lld is neither kv_num_heads %lld nor "
                      "kv_num_heads*Dk %lld",
                      (long long)w, (long long)g->Hv, (long long)(g->Hv * g->Dk));
    }
  }
  if (g->has_beta) {
    int64_t w = op_dim(beta, 2);
    if (w == g->Hv) {
      g->beta_per_head = 1;
    } else if (w == 1) {
      g->beta_per_head = 0;
    } else if (w >= 0) {
      return diag_set(d, PH_ERR_TENSOR_SHAPE,
                      "LinearAttention: beta width %lld is neither kv_num_heads %lld nor 1",
                      (long long)w, (long long)g->Hv);
    }
  }
  if (g->Dk > 0) g->scale = scale_attr != 0.0f ? scale_attr : 1.0f / sqrtf((float)g->Dk);
  return PH_OK;
}

static ph_status la_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  la_geom g;
  FORWARD_IF_ERROR(la_resolve(n, in, &g, d));
  int64_t ho = g.Hq > g.Hv ? g.Hq : g.Hv;
  int64_t od[3] = {g.B, g.T, g.Dv < 0 ? -1 : ho * g.Dv};
  out[0] = tinfo_make(g.dt, 3, od);
  if (n->n_outputs > 1) {
    int64_t sd[4] = {g.B, g.Hv, g.Dk, g.Dv};
    out[1] = tinfo_make(g.dt, 4, sd);
  }
  return PH_OK;
}

/* ---- workspace ------------------------------------------------------------------------------- */

/* One thread's slice of ctx->scratch is kernels/gated_delta.h's workspace: C is the longest
 * chunk this call can see, G the number of query heads one value head serves, the decay per
 * head or per key dim. */

static int64_t la_group(const la_geom *g) { return g->Hq > g->Hv ? g->Hq / g->Hv : 1; }

static int64_t la_max_chunk(const la_geom *g) {
  if (g->T <= 1) return 1;
  return g->T < g->chunk ? g->T : g->chunk;
}

static void la_shape(const la_geom *g, gated_delta_shape *sh) {
  sh->Dk = g->Dk;
  sh->Dv = g->Dv;
  sh->G = la_group(g);
  sh->C = la_max_chunk(g);
  sh->per_dim = g->decay_per_dim == 1;
  sh->gated = g->gated;
  sh->delta = g->delta;
  sh->scale = g->scale;
}

/* Bytes of one thread's workspace; carves it from base when base is not NULL. */
static size_t la_ws_layout(const la_geom *g, char *base, gated_delta_ws *ws) {
  gated_delta_shape sh;
  la_shape(g, &sh);
  return gated_delta_ws_layout(&sh, 1, base, ws);
}

static size_t la_scratch_bytes(const gnode *n, const tinfo *in, int n_threads) {
  la_geom g;
  if (la_resolve(n, in, &g, NULL) != PH_OK || g.B < 0 || g.T < 0 || g.Dk < 0 || g.Dv < 0) return 0;
  return la_ws_layout(&g, NULL, NULL) * (size_t)(n_threads > 0 ? n_threads : 1);
}

/* ---- kernels --------------------------------------------------------------------------------- */

typedef struct la_job {
  const la_geom *g;
  const tensor *q, *k, *v, *past, *decay, *beta;
  tensor *out, *present;
  char *scratch;
  size_t ws_bytes;
  gated_delta_shape sh;
  gated_delta_chunk_fn
      chunk; /* the variant's chunk kernel (kernels/dispatch.h), or the reference */
} la_job;

/* Where head vectors of token t of sequence b start (elements). */
static int64_t la_row(const la_geom *g, int64_t b, int64_t t, int64_t H, int64_t head,
                      int64_t width) {
  return ((b * g->T + t) * H + head) * width;
}

/* Loads token t's key, value, queries, beta and log decay into row i of the workspace. */
static void la_load_token(const la_job *j, const gated_delta_ws *ws, int64_t b, int64_t h,
                          int64_t t, int64_t i, int64_t C) {
  const la_geom *g = j->g;
  int64_t G = la_group(g), Dk = g->Dk, Dv = g->Dv;
  int64_t hk = g->Hk == g->Hv ? h : h / (g->Hv / g->Hk);
  int64_t hq0 = g->Hq > g->Hv ? h * G : h / (g->Hv / g->Hq);
  tensor_load_f32(j->k, la_row(g, b, t, g->Hk, hk, Dk), Dk, ws->K + i * Dk);
  tensor_load_f32(j->v, la_row(g, b, t, g->Hv, h, Dv), Dv, ws->V + i * Dv);
  for (int64_t jq = 0; jq < G; jq++)
    tensor_load_f32(j->q, la_row(g, b, t, g->Hq, hq0 + jq, Dk), Dk, ws->Q + (jq * C + i) * Dk);
  ws->beta[i] = 1.0f;
  if (g->has_beta)
    ws->beta[i] = tensor_get_f32(
        j->beta, la_row(g, b, t, g->beta_per_head ? g->Hv : 1, g->beta_per_head ? h : 0, 1));
  int64_t Dg = g->decay_per_dim == 1 ? Dk : 1;
  if (g->has_decay)
    tensor_load_f32(j->decay, la_row(g, b, t, g->Hv, h, Dg), Dg, ws->gl + i * Dg);
  else
    ws->gl[i] = 0.0f;
}

/* Output head that query row jq of value head h writes. */
static int64_t la_out_head(const la_geom *g, int64_t h, int64_t jq) {
  return g->Hq > g->Hv ? h * la_group(g) + jq : h;
}

static void la_store_out(const la_job *j, int64_t b, int64_t t, int64_t oh, const float *o) {
  const la_geom *g = j->g;
  int64_t ho = g->Hq > g->Hv ? g->Hq : g->Hv;
  tensor_store_f32(j->out, la_row(g, b, t, ho, oh, g->Dv), g->Dv, o);
}

/* Where the core's output rows go: token t0 + t of sequence b, the heads of value head h. */
typedef struct la_out {
  const la_job *j;
  int64_t b, h, t0;
} la_out;

static void la_store_row(void *ctx, int64_t jq, int64_t t, const float *o) {
  const la_out *w = ctx;
  la_store_out(w->j, w->b, w->t0 + t, la_out_head(w->j->g, w->h, jq), o);
}

/* Token by token, exactly the order of spec/abi.md §2.4 (kernels/gated_delta.h). */
static void la_head_recurrent(const la_job *j, const gated_delta_ws *ws, int64_t b, int64_t h) {
  for (int64_t t = 0; t < j->g->T; t++) {
    la_load_token(j, ws, b, h, t, 0, 1);
    la_out w = {j, b, h, t};
    gated_delta_token(&j->sh, ws, la_store_row, &w);
  }
}

/* One chunk of L tokens starting at token t0, from the state in ws->S to the state after the
 * chunk, in place: the WY/UT form of kernels/gated_delta.h. */
static void la_chunk(const la_job *j, const gated_delta_ws *ws, int64_t b, int64_t h, int64_t t0,
                     int64_t L, int64_t C) {
  for (int64_t i = 0; i < L; i++) la_load_token(j, ws, b, h, t0 + i, i, C);
  la_out w = {j, b, h, t0};
  j->chunk(&j->sh, ws, L, la_store_row, &w);
}

static void la_head_chunked(const la_job *j, const gated_delta_ws *ws, int64_t b, int64_t h) {
  int64_t C = la_max_chunk(j->g);
  for (int64_t t0 = 0; t0 < j->g->T; t0 += C) {
    int64_t L = j->g->T - t0 < C ? j->g->T - t0 : C;
    la_chunk(j, ws, b, h, t0, L, C);
  }
}

static void la_task(void *ctx, size_t task, int thread) {
  const la_job *j = ctx;
  const la_geom *g = j->g;
  gated_delta_ws ws;
  la_ws_layout(g, j->scratch + (size_t)thread * j->ws_bytes, &ws);
  int64_t b = (int64_t)task / g->Hv, h = (int64_t)task % g->Hv;
  int64_t off = (b * g->Hv + h) * g->Dk * g->Dv;
  /* The whole head is read before anything is written: present may alias past. */
  if (g->has_past)
    tensor_load_f32(j->past, off, g->Dk * g->Dv, ws.S);
  else
    memset(ws.S, 0, (size_t)(g->Dk * g->Dv) * sizeof(float));
  if (g->T == 1)
    la_head_recurrent(j, &ws, b, h);
  else
    la_head_chunked(j, &ws, b, h);
  if (j->present) tensor_store_f32(j->present, off, g->Dk * g->Dv, ws.S);
}

static ph_status la_plan(const gnode *n, const tinfo *in, void *plan, diag *d) {
  return la_resolve(n, in, plan, d);
}

static ph_status la_run(const gnode *n, const tensor *const *in, tensor *const *out, op_ctx *ctx,
                        diag *d) {
  const la_geom *gp = ctx->plan; /* la_resolve on these shapes, once per plan */
  RETURN_ERROR_IF(!gp, d, PH_ERR_INTERNAL, "LinearAttention: run without a plan");
  const la_geom g = *gp;
  RETURN_ERROR_IF(!out[0], d, PH_ERR_INTERNAL, "LinearAttention: output 0 is required");
  tensor *present = n->n_outputs > 1 ? out[1] : NULL;

  la_job j;
  memset(&j, 0, sizeof j);
  j.g = &g;
  j.q = in[LA_IN_Q];
  j.k = in[LA_IN_K];
  j.v = in[LA_IN_V];
  j.past = g.has_past ? in[LA_IN_PAST] : NULL;
  j.decay = g.has_decay ? in[LA_IN_DECAY] : NULL;
  j.beta = g.has_beta ? in[LA_IN_BETA] : NULL;
  j.out = out[0];
  j.present = present;
  j.ws_bytes = la_ws_layout(&g, NULL, NULL);
  la_shape(&g, &j.sh);
  j.chunk = kernel_set_of(kernel_variant_active())->gated_delta_chunk;
  if (!j.chunk) j.chunk = gated_delta_chunk;
  int n_threads = pool_threads(ctx->pool);
  RETURN_ERROR_IF(ctx->scratch_bytes < j.ws_bytes * (size_t)n_threads || !ctx->scratch, d,
                  PH_ERR_INTERNAL, "LinearAttention: scratch is %zu bytes, %d threads need %zu",
                  ctx->scratch_bytes, n_threads, j.ws_bytes * (size_t)n_threads);
  j.scratch = ctx->scratch;
  pool_run(ctx->pool, (size_t)(g.B * g.Hv), la_task, &j);
  return PH_OK;
}

const op_def op_def_linear_attention = {
    "com.microsoft",  "LinearAttention", 3,      6, 1, 2, la_infer, la_run,
    la_scratch_bytes, sizeof(la_geom),   la_plan};
