/* op_rotary — rotary position embedding: com.microsoft RotaryEmbedding and MRotaryEmbedding
 * (Qwen3.5's partial, interleaved multimodal RoPE).
 *
 * RotaryEmbedding
 *   in 0 input        T in {f32, f16, bf16}: [B,S,N*H] (BSD; then num_heads or the cache width
 *                     gives H) or [B,N,S,H] (BNSH)
 *   in 1 position_ids int64: [B,S], or one element ([1] or scalar) = p0, positions p0 + s
 *   in 2 cos_cache    T, [max_pos, rot/2]
 *   in 3 sin_cache    T, [max_pos, rot/2]
 *   out 0             T, shape of input
 *   attrs interleaved (0: NeoX pairs (i, i+rot/2); 1: adjacent pairs (2i, 2i+1)),
 *         rotary_embedding_dim (0: rot = H; else rot, even, <= H, and num_heads is required),
 *         num_heads (0: derived; for BSD input with rot < H it is required to find H),
 *         scale (must be 1.0: ORT ignores it in RotaryEmbedding but applies it to cos/sin in
 *         MRotaryEmbedding; we refuse rather than pick one), is_packed_batching (0, or 1 with
 *         a batch of 1: all tokens packed as [1, N, ...] with their own positions, how GenAI's
 *         builder wraps it in packed graphs, where the two mean the same).
 *   For every head: y[i] = x[i]*cos[p][i] - x[i+h]*sin[p][i], y[i+h] = x[i+h]*cos[p][i] +
 *   x[i]*sin[p][i] for i < h = rot/2 (NeoX; adjacent pairs likewise with 2i, 2i+1); channels
 *   rot..H-1 are copied bit-exactly. A position outside [0, max_pos) is PH_ERR_INVALID_ARGUMENT
 *   at run time (checked for every row before anything is written).
 * MRotaryEmbedding: the same, but position_ids is int64 [3,B,S] (rows T, H, W) and frequency
 *   slot j < rot/2 takes its position from one row chosen by the required attribute
 *   mrope_section (3 ints >= 0 summing to rot/2) and mrope_layout:
 *     0 sectioned (Qwen2-VL): the first sec[0] slots from T, the next sec[1] from H, then W;
 *     1 interleaved (Qwen3-VL, Qwen3.5): H if j%3 == 1 and j/3 < sec[1], W if j%3 == 2 and
 *       j/3 < sec[2], else T.
 *
 * Numerics: cos/sin and x are loaded as f32, each output is computed with two f32 products and
 * one f32 add and rounded once. One task per (batch, position) row covers all of its heads, so a
 * row's result never depends on the thread count or on its neighbours.
 * Scratch: 3*rot floats per thread (cos row, sin row, rotated channels).
 */
#include <string.h>

#include "kernels/rope.h"
#include "ops/op.h"
#include "ops/op_util.h"
#include "tensor/dtype.h"

/* ---- geometry: resolved by infer, scratch_bytes and plan; run() reads the plan ---- */

typedef struct rope_geom {
  int64_t B, S, N, H;  /* batch, positions, heads, head size; -1 = unknown */
  int transposed;      /* input is [B,N,S,H] */
  int64_t rot;         /* rotated channels; -1 = unknown */
  int64_t max_pos;     /* cos/sin rows; -1 = unknown */
  int pos_offset_form; /* position_ids holds one start offset */
  int interleaved;
  int mrope, layout;
  int64_t sec[3];
  int packed; /* is_packed_batching=1: only as one packed batch [1, N, ...] */
} rope_geom;

static ph_status rope_attrs(const gnode *n, int mrope, rope_geom *g, int64_t *rot_attr,
                            int64_t *heads_attr, diag *d) {
  int64_t v;
  FORWARD_IF_ERROR(op_attr_int(n, "interleaved", 0, &v, d));
  RETURN_ERROR_IF(v != 0 && v != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "attribute interleaved must be 0 or 1, got %lld", (long long)v);
  g->interleaved = (int)v;
  FORWARD_IF_ERROR(op_attr_int(n, "rotary_embedding_dim", 0, rot_attr, d));
  RETURN_ERROR_IF(*rot_attr < 0 || *rot_attr % 2 != 0, d, PH_ERR_INVALID_ARGUMENT,
                  "attribute rotary_embedding_dim must be even and >= 0, got %lld",
                  (long long)*rot_attr);
  FORWARD_IF_ERROR(op_attr_int(n, "num_heads", 0, heads_attr, d));
  RETURN_ERROR_IF(*heads_attr < 0, d, PH_ERR_INVALID_ARGUMENT,
                  "attribute num_heads must be >= 0, got %lld", (long long)*heads_attr);
  RETURN_ERROR_IF(*rot_attr > 0 && *heads_attr == 0, d, PH_ERR_INVALID_ARGUMENT,
                  "attribute num_heads is required when rotary_embedding_dim is set");
  FORWARD_IF_ERROR(op_attr_int(n, "is_packed_batching", 0, &v, d));
  RETURN_ERROR_IF(v != 0 && v != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "attribute is_packed_batching must be 0 or 1, got %lld", (long long)v);
  g->packed = (int)v;
  float scale = 1.0f;
  FORWARD_IF_ERROR(op_attr_float(n, "scale", 1.0f, &scale, d));
  RETURN_ERROR_IF(scale != 1.0f, d, PH_ERR_UNSUPPORTED,
                  "attribute scale=%g is not supported (only 1.0)", (double)scale);
  if (!mrope) return PH_OK;
  g->mrope = 1;
  const int64_t *sec = NULL;
  int n_sec = 0;
  FORWARD_IF_ERROR(op_attr_ints(n, "mrope_section", &sec, &n_sec, d));
  RETURN_ERROR_IF(n_sec < 0, d, PH_ERR_INVALID_ARGUMENT, "attribute mrope_section is required");
  RETURN_ERROR_IF(n_sec != 3 || !sec, d, PH_ERR_INVALID_ARGUMENT,
                  "attribute mrope_section must be 3 ints, got %d", n_sec);
  for (int k = 0; k < 3; k++) {
    RETURN_ERROR_IF(sec[k] < 0 || sec[k] > (int64_t)1 << 30, d, PH_ERR_INVALID_ARGUMENT,
                    "mrope_section[%d] = %lld is out of range", k, (long long)sec[k]);
    g->sec[k] = sec[k];
  }
  FORWARD_IF_ERROR(op_attr_int(n, "mrope_layout", 0, &v, d));
  RETURN_ERROR_IF(v != 0 && v != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "attribute mrope_layout must be 0 (sectioned) or 1 (interleaved), got %lld",
                  (long long)v);
  g->layout = (int)v;
  return PH_OK;
}

static ph_status rope_resolve(const gnode *n, const tinfo *in, int mrope, rope_geom *g, diag *d) {
  memset(g, 0, sizeof *g);
  const char *op = mrope ? "MRotaryEmbedding" : "RotaryEmbedding";
  RETURN_ERROR_IF(n->n_inputs != 4, d, PH_ERR_INVALID_ARGUMENT, "%s takes 4 inputs, got %d", op,
                  n->n_inputs);
  RETURN_ERROR_IF(n->n_outputs != 1, d, PH_ERR_INVALID_ARGUMENT, "%s has 1 output, got %d", op,
                  n->n_outputs);
  static const char *const names[4] = {"input", "position_ids", "cos_cache", "sin_cache"};
  for (int i = 0; i < 4; i++)
    RETURN_ERROR_IF(in[i].dtype == PH_DTYPE_INVALID, d, PH_ERR_INVALID_ARGUMENT,
                    "input %s is required", names[i]);
  int64_t rot_attr = 0, heads_attr = 0;
  FORWARD_IF_ERROR(rope_attrs(n, mrope, g, &rot_attr, &heads_attr, d));

  const tinfo *x = &in[0], *pos = &in[1], *cs = &in[2], *sn = &in[3];
  RETURN_ERROR_IF(!dtype_is_compute_float(x->dtype), d, PH_ERR_TENSOR_DTYPE,
                  "input must be f32, f16 or bf16, got %s", ph_dtype_name(x->dtype));
  RETURN_ERROR_IF(pos->dtype != PH_DTYPE_I64, d, PH_ERR_TENSOR_DTYPE,
                  "position_ids must be int64, got %s", ph_dtype_name(pos->dtype));
  for (int i = 2; i < 4; i++)
    RETURN_ERROR_IF(in[i].dtype != x->dtype, d, PH_ERR_TENSOR_DTYPE, "%s is %s but input is %s",
                    names[i], ph_dtype_name(in[i].dtype), ph_dtype_name(x->dtype));

  g->B = g->S = g->N = g->H = g->rot = g->max_pos = -1;
  /* caches: [max_pos, rot/2], equal shapes */
  int64_t half = -1;
  for (int i = 2; i < 4; i++) FORWARD_IF_ERROR(op_check_rank(n, &in[i], 2, names[i], d));
  if (cs->rank == 2 && sn->rank == 2)
    for (int k = 0; k < 2; k++)
      RETURN_ERROR_IF(op_dims_conflict(cs->dims[k], sn->dims[k]), d, PH_ERR_TENSOR_SHAPE,
                      "cos_cache and sin_cache differ in dim %d (%lld vs %lld)", k,
                      (long long)cs->dims[k], (long long)sn->dims[k]);
  const tinfo *c = cs->rank == 2 ? cs : sn->rank == 2 ? sn : NULL;
  if (c) {
    g->max_pos = c->dims[0];
    half = c->dims[1];
  }

  if (x->rank >= 0) {
    RETURN_ERROR_IF(x->rank != 3 && x->rank != 4, d, PH_ERR_TENSOR_SHAPE,
                    "input must have rank 3 [B,S,N*H] or 4 [B,N,S,H], got %d", x->rank);
    g->B = x->dims[0];
    if (x->rank == 4) {
      g->transposed = 1;
      g->N = x->dims[1];
      g->S = x->dims[2];
      g->H = x->dims[3];
      RETURN_ERROR_IF(heads_attr > 0 && op_dims_conflict(heads_attr, g->N), d, PH_ERR_TENSOR_SHAPE,
                      "num_heads is %lld but input has %lld heads", (long long)heads_attr,
                      (long long)g->N);
    } else {
      int64_t hidden = x->dims[2];
      g->S = x->dims[1];
      if (heads_attr > 0) {
        g->N = heads_attr;
        if (hidden >= 0) {
          RETURN_ERROR_IF(hidden % heads_attr != 0, d, PH_ERR_TENSOR_SHAPE,
                          "hidden size %lld is not a multiple of num_heads %lld", (long long)hidden,
                          (long long)heads_attr);
          g->H = hidden / heads_attr;
        }
      } else if (half >= 0) {
        /* no num_heads: the whole head rotates, so the cache width gives H */
        RETURN_ERROR_IF(half == 0, d, PH_ERR_TENSOR_SHAPE,
                        "cos_cache has 0 columns and num_heads is not given");
        g->H = 2 * half;
        if (hidden >= 0) {
          RETURN_ERROR_IF(hidden % g->H != 0, d, PH_ERR_TENSOR_SHAPE,
                          "hidden size %lld is not a multiple of the head size %lld (2 x "
                          "cos_cache columns)",
                          (long long)hidden, (long long)g->H);
          g->N = hidden / g->H;
        }
      }
    }
  }
  g->rot = rot_attr > 0 ? rot_attr : g->H;
  if (g->H >= 0 && g->rot >= 0) {
    RETURN_ERROR_IF(g->rot > g->H, d, PH_ERR_INVALID_ARGUMENT,
                    "rotary_embedding_dim %lld exceeds the head size %lld", (long long)g->rot,
                    (long long)g->H);
    RETURN_ERROR_IF(g->rot % 2 != 0, d, PH_ERR_TENSOR_SHAPE,
                    "head size %lld is odd: the whole head cannot rotate in pairs",
                    (long long)g->H);
  }
  RETURN_ERROR_IF(g->rot >= 0 && op_dims_conflict(half, g->rot / 2), d, PH_ERR_TENSOR_SHAPE,
                  "cos_cache has %lld columns, expected rot/2 = %lld", (long long)half,
                  (long long)(g->rot / 2));
  if (g->rot < 0 && half >= 0) g->rot = 2 * half;
  if (mrope && g->rot >= 0)
    RETURN_ERROR_IF(g->sec[0] + g->sec[1] + g->sec[2] != g->rot / 2, d, PH_ERR_INVALID_ARGUMENT,
                    "mrope_section [%lld, %lld, %lld] sums to %lld, expected rot/2 = %lld",
                    (long long)g->sec[0], (long long)g->sec[1], (long long)g->sec[2],
                    (long long)(g->sec[0] + g->sec[1] + g->sec[2]), (long long)(g->rot / 2));

  if (pos->rank >= 0) {
    if (mrope) {
      RETURN_ERROR_IF(pos->rank != 3, d, PH_ERR_TENSOR_SHAPE,
                      "position_ids must be [3, B, S], got rank %d", pos->rank);
      RETURN_ERROR_IF(op_dims_conflict(pos->dims[0], 3), d, PH_ERR_TENSOR_SHAPE,
                      "position_ids dim 0 must be 3 (T, H, W rows), got %lld",
                      (long long)pos->dims[0]);
      RETURN_ERROR_IF(
          op_dims_conflict(pos->dims[1], g->B) || op_dims_conflict(pos->dims[2], g->S), d,
          PH_ERR_TENSOR_SHAPE, "position_ids is [3, %lld, %lld] but input has B=%lld, S=%lld",
          (long long)pos->dims[1], (long long)pos->dims[2], (long long)g->B, (long long)g->S);
    } else if (pos->rank == 0 || (pos->rank == 1 && (pos->dims[0] == 1 || pos->dims[0] < 0))) {
      /* a rank-1 position_ids of unknown length is taken as the offset form until run time */
      g->pos_offset_form = 1;
    } else {
      RETURN_ERROR_IF(pos->rank != 2, d, PH_ERR_TENSOR_SHAPE,
                      "position_ids must be [B, S] or hold one start offset, got rank %d",
                      pos->rank);
      RETURN_ERROR_IF(
          op_dims_conflict(pos->dims[0], g->B) || op_dims_conflict(pos->dims[1], g->S), d,
          PH_ERR_TENSOR_SHAPE, "position_ids is [%lld, %lld] but input has B=%lld, S=%lld",
          (long long)pos->dims[0], (long long)pos->dims[1], (long long)g->B, (long long)g->S);
    }
  }
  /* GenAI's packed graphs give all tokens as one batch [1, N, ...] with their own positions,
   * where is_packed_batching changes nothing; other packings are not implemented. */
  RETURN_ERROR_IF(g->packed && g->B >= 0 && g->B != 1, d, PH_ERR_UNSUPPORTED,
                  "is_packed_batching=1 with batch %lld: only one packed batch [1, N, ...] is "
                  "supported",
                  (long long)g->B);
  return PH_OK;
}

static ph_status rope_infer_common(const gnode *n, const tinfo *in, tinfo *out, int mrope,
                                   diag *d) {
  rope_geom g;
  FORWARD_IF_ERROR(rope_resolve(n, in, mrope, &g, d));
  out[0] = tinfo_make(in[0].dtype, in[0].rank, in[0].dims);
  return PH_OK;
}

static ph_status rope_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  return rope_infer_common(n, in, out, 0, d);
}

static ph_status mrope_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  return rope_infer_common(n, in, out, 1, d);
}

static size_t rope_slice_floats(const rope_geom *g) {
  return (size_t)(3 * (g->rot > 0 ? g->rot : 0));
}

static size_t rope_scratch_common(const gnode *n, const tinfo *in, int n_threads, int mrope) {
  rope_geom g;
  if (rope_resolve(n, in, mrope, &g, NULL) != PH_OK || g.rot < 0) return 0;
  return rope_slice_floats(&g) * sizeof(float) * (size_t)(n_threads > 0 ? n_threads : 1);
}

static size_t rope_scratch(const gnode *n, const tinfo *in, int n_threads) {
  return rope_scratch_common(n, in, n_threads, 0);
}

static size_t mrope_scratch(const gnode *n, const tinfo *in, int n_threads) {
  return rope_scratch_common(n, in, n_threads, 1);
}

/* ---- kernel ---- */

/* Which position row (0 T, 1 H, 2 W) frequency slot j reads. */
static int mrope_slot_row(const rope_geom *g, int64_t j) {
  if (g->layout == 0) return j < g->sec[0] ? 0 : j < g->sec[0] + g->sec[1] ? 1 : 2;
  if (j % 3 == 1 && j / 3 < g->sec[1]) return 1;
  if (j % 3 == 2 && j / 3 < g->sec[2]) return 2;
  return 0;
}

typedef struct rope_job {
  const rope_geom *g;
  const tensor *x, *pos, *cos, *sin;
  tensor *y;
  float *scratch; /* rope_slice_floats per thread */
  size_t esize;
} rope_job;

/* position of (b, s) in row r (r = 0 for RotaryEmbedding) */
static int64_t rope_pos(const rope_job *j, int r, int64_t b, int64_t s) {
  const int64_t *p = j->pos->data;
  const rope_geom *g = j->g;
  if (g->mrope) return p[((int64_t)r * g->B + b) * g->S + s];
  return g->pos_offset_form ? p[0] + s : p[b * g->S + s];
}

static void rope_row(void *ctx, size_t task, int thread) {
  const rope_job *j = ctx;
  const rope_geom *g = j->g;
  const int64_t b = (int64_t)task / g->S, s = (int64_t)task % g->S, h = g->rot / 2;
  float *c = j->scratch + (size_t)thread * rope_slice_floats(g);
  float *sn = c + h, *xb = sn + h, *yb = xb + g->rot;
  if (g->mrope) {
    int64_t p3[3];
    for (int r = 0; r < 3; r++) p3[r] = rope_pos(j, r, b, s);
    for (int64_t i = 0; i < h; i++) {
      int64_t p = p3[mrope_slot_row(g, i)];
      c[i] = tensor_get_f32(j->cos, p * h + i);
      sn[i] = tensor_get_f32(j->sin, p * h + i);
    }
  } else {
    int64_t p = rope_pos(j, 0, b, s);
    tensor_load_f32(j->cos, p * h, h, c);
    tensor_load_f32(j->sin, p * h, h, sn);
  }
  for (int64_t n = 0; n < g->N; n++) {
    int64_t off =
        g->transposed ? ((b * g->N + n) * g->S + s) * g->H : ((b * g->S + s) * g->N + n) * g->H;
    tensor_load_f32(j->x, off, g->rot, xb);
    rope_rotate_f32(xb, c, sn, g->rot, g->interleaved, yb);
    tensor_store_f32(j->y, off, g->rot, yb);
    if (g->H > g->rot && j->y->data != j->x->data)
      memcpy((char *)j->y->data + (size_t)(off + g->rot) * j->esize,
             (const char *)j->x->data + (size_t)(off + g->rot) * j->esize,
             (size_t)(g->H - g->rot) * j->esize);
  }
}

static ph_status rope_plan_common(const gnode *n, const tinfo *in, void *plan, int mrope, diag *d) {
  return rope_resolve(n, in, mrope, plan, d);
}

static ph_status rope_plan(const gnode *n, const tinfo *in, void *plan, diag *d) {
  return rope_plan_common(n, in, plan, 0, d);
}

static ph_status mrope_plan(const gnode *n, const tinfo *in, void *plan, diag *d) {
  return rope_plan_common(n, in, plan, 1, d);
}

static ph_status rope_run_common(const gnode *n, const tensor *const *in, tensor *const *out,
                                 op_ctx *ctx, int mrope, diag *d) {
  (void)n;
  const rope_geom *g = ctx->plan; /* rope_resolve on these shapes, once per plan */
  RETURN_ERROR_IF(!g, d, PH_ERR_INTERNAL, "run without a plan");
  RETURN_ERROR_IF(!out[0], d, PH_ERR_INVALID_ARGUMENT, "output 0 is required");
  const int n_threads = pool_threads(ctx->pool);
  const size_t need = rope_slice_floats(g) * sizeof(float) * (size_t)n_threads;
  RETURN_ERROR_IF(ctx->scratch_bytes < need, d, PH_ERR_INTERNAL,
                  "scratch is %zu bytes, %zu needed for %d threads", ctx->scratch_bytes, need,
                  n_threads);
  /* every position is checked before anything is written */
  const int64_t *p = in[1]->data;
  if (!mrope && g->pos_offset_form) {
    RETURN_ERROR_IF(g->B * g->S > 0 && (p[0] < 0 || p[0] > g->max_pos - g->S), d,
                    PH_ERR_INVALID_ARGUMENT,
                    "position offset %lld + %lld positions exceeds the %lld cos/sin rows",
                    (long long)p[0], (long long)g->S, (long long)g->max_pos);
  } else {
    const int64_t count = (mrope ? 3 : 1) * g->B * g->S;
    for (int64_t i = 0; i < count; i++)
      RETURN_ERROR_IF(p[i] < 0 || p[i] >= g->max_pos, d, PH_ERR_INVALID_ARGUMENT,
                      "position_ids[%lld] = %lld is outside the cos/sin cache [0, %lld)",
                      (long long)i, (long long)p[i], (long long)g->max_pos);
  }
  rope_job j = {g, in[0], in[1], in[2], in[3], out[0], ctx->scratch, dtype_size(in[0]->dtype)};
  if (g->rot == 0) { /* nothing rotates (a zero head size): a copy */
    if (out[0]->data != in[0]->data)
      memcpy(out[0]->data, in[0]->data, (size_t)tensor_numel(in[0]) * j.esize);
    return PH_OK;
  }
  pool_run(ctx->pool, (size_t)(g->B * g->S), rope_row, &j);
  return PH_OK;
}

static ph_status rope_run(const gnode *n, const tensor *const *in, tensor *const *out, op_ctx *ctx,
                          diag *d) {
  return rope_run_common(n, in, out, ctx, 0, d);
}

static ph_status mrope_run(const gnode *n, const tensor *const *in, tensor *const *out, op_ctx *ctx,
                           diag *d) {
  return rope_run_common(n, in, out, ctx, 1, d);
}

const op_def op_def_rotary_embedding = {
    "com.microsoft", "RotaryEmbedding", 4,        4, 1, 1, rope_infer, rope_run,
    rope_scratch,    sizeof(rope_geom), rope_plan};
const op_def op_def_mrotary_embedding = {
    "com.microsoft", "MRotaryEmbedding", 4,         4, 1, 1, mrope_infer, mrope_run,
    mrope_scratch,   sizeof(rope_geom),  mrope_plan};
