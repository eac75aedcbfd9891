/* op_matmul — MatMul (ai.onnx) and MatMulWT (pagedhybrid.internal): every linear layer.
 *
 * MatMul: numpy matmul. A [..., M, K] x B [..., K, N] -> [..., M, N]; a 1-D A is [1, K] and a
 * 1-D B is [K, 1], the added dim dropped from the result; batch dims broadcast numpy-style.
 * A and B share one dtype (f32, f16 or bf16), the output has it too. Each y element is summed
 * in f32 in increasing k, one row of A at a time (rows split over the pool), so a row's values
 * never depend on which other rows are in the batch. This is the generic path; the CPU runs
 * linear layers as MatMulWT.
 *
 * MatMulWT: y [..., N] = A [..., K] W[N, K]^T + bias[N]. W is stored as Hugging Face stores
 * Linear weights (one row per output feature), so no transpose is ever materialized. A, W and
 * bias may each be f32, f16 or bf16 (W's need not match A's); y has A's dtype.
 *
 * Batch invariance (architecture.md, numerics policy) is the contract of MatMulWT: y[m][n] is
 * bit-identical whatever M is and whichever rows share a kernel call. The dot products are the
 * kernels' (kernels/matmul_wt.h: one summation order, a function of K only, for every row count
 * and every variant); this file adds the bias (after the tree) and rounds to y's dtype. W
 * conversions to f32 are exact, so converting on the fly or not cannot change a product. Work is
 * split over column blocks (never K) with pool_run.
 *
 * bf16 mode (internal int attribute bf16_dot = 1, set by graph_prepare_cpu in the bf16 precision
 * mode, docs/precision.md): A is rounded to bf16 once per call (wt_round_bf16) into scratch, and
 * the dot products are the bf16 dot of kernels/matmul_wt.h (pairs of bf16 products summed in f32
 * in the order of vdpbf16ps, a function of K only). bf16 W is read as stored; f32 and f16 W are
 * rounded to bf16 per group of WT_NW rows into per-thread scratch, once per task and reused by
 * every row of the chunk (no prepare-time copy, so memory is not doubled; f32/f16 checkpoints
 * run f32 mode by default anyway). Chunks of more than WT_RMAX rows with K > WTB_KBLOCK run
 * K-blocked (the kbk kernels, partial sums carried per tile in per-thread scratch between
 * blocks: the same operations per lane in the same order, so the same bits); a single row runs
 * two weight groups per call (kb_w8: eight weight streams, for decode bandwidth). Bias and output
 * rounding are as in f32 mode. Every variant's
 * bf16 kernels give the same bits (kernels/dispatch.h kernel_matmul_wt_bf16), so the invariance
 * holds across variants too.
 *
 * Variants: the kernels come from the variant kernels/dispatch.h chooses once per process (the
 * CPU, PH_KERNELS, the test override), read once at the start of run(), never from the shapes,
 * so the invariance above holds within each variant; the variants agree with the scalar
 * reference to rounding (test_matmul_wt.c).
 *
 * Memory: nothing is allocated in run(). MatMul needs per-thread rows (scratch_bytes);
 * MatMulWT converts up to WT_MC rows of A to f32 at a time into scratch (bf16 mode: and to bf16)
 * and, for f16 weights with M > 1 (scalar variant) or f32/f16 weights in bf16 mode, WT_NW
 * converted weight rows per thread; K-blocked bf16 chunks add WT_NW x WT_LANES partial sums per
 * row of the chunk per thread. Tensor data may be unaligned
 * (safetensors views), so weights and bias are read with memcpy or unaligned vector loads.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/dispatch.h"
#include "kernels/matmul_wt.h"
#include "ops/op.h"
#include "ops/op_util.h"
#include "tensor/dtype.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- MatMul --------------------------------------------------------------------------------- */

static ph_status matmul_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  RETURN_ERROR_IF(n->n_inputs != 2 || n->n_outputs != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "MatMul takes 2 inputs and 1 output, got %d and %d", n->n_inputs, n->n_outputs);
  const tinfo *a = &in[0], *b = &in[1];
  RETURN_ERROR_IF(a->dtype == PH_DTYPE_INVALID || b->dtype == PH_DTYPE_INVALID, d,
                  PH_ERR_INVALID_ARGUMENT, "MatMul: A and B are required");
  RETURN_ERROR_IF(!dtype_is_compute_float(a->dtype), d, PH_ERR_TENSOR_DTYPE,
                  "MatMul: A is %s; expected F32, F16 or BF16", op_dtype_name(a->dtype));
  RETURN_ERROR_IF(a->dtype != b->dtype, d, PH_ERR_TENSOR_DTYPE,
                  "MatMul: A is %s but B is %s; both must have one dtype", op_dtype_name(a->dtype),
                  op_dtype_name(b->dtype));
  memset(out, 0, sizeof *out);
  out->dtype = a->dtype;
  if (a->rank < 0 || b->rank < 0) {
    out->rank = -1;
    return PH_OK;
  }
  RETURN_ERROR_IF(a->rank < 1 || b->rank < 1, d, PH_ERR_TENSOR_SHAPE,
                  "MatMul: operands need rank >= 1 (A rank %d, B rank %d)", a->rank, b->rank);
  int64_t ka = a->dims[a->rank - 1];
  int64_t kb = b->rank == 1 ? b->dims[0] : b->dims[b->rank - 2];
  RETURN_ERROR_IF(ka >= 0 && kb >= 0 && ka != kb, d, PH_ERR_TENSOR_SHAPE,
                  "MatMul: A has K = %lld but B has K = %lld", (long long)ka, (long long)kb);
  int ra = a->rank > 2 ? a->rank - 2 : 0, rb = b->rank > 2 ? b->rank - 2 : 0, r = 0;
  FORWARD_IF_ERROR(op_broadcast(n, "batch dim", ra, a->dims, rb, b->dims, &r, out->dims, d));
  if (a->rank >= 2) out->dims[r++] = a->dims[a->rank - 2];
  if (b->rank >= 2) out->dims[r++] = b->dims[b->rank - 1];
  out->rank = r;
  return PH_OK;
}

/* Geometry of one MatMul call with every dim known. Batch dims are right-aligned to the output
 * batch rank; a 1-D operand has batch rank 0. */
typedef struct mm_geom {
  int64_t M, K, N;
  int rb;                     /* output batch rank */
  int64_t ob[GRAPH_MAX_DIMS]; /* output batch dims */
  int64_t ab[GRAPH_MAX_DIMS]; /* A batch dims aligned to rb (1 where absent) */
  int64_t bb[GRAPH_MAX_DIMS]; /* B batch dims aligned to rb */
  int64_t n_batch;
} mm_geom;

static void mm_geometry(const int *rank, const int64_t *const *dims, mm_geom *g) {
  int ra = rank[0], rbk = rank[1];
  const int64_t *a = dims[0], *b = dims[1];
  g->M = ra >= 2 ? a[ra - 2] : 1;
  g->K = a[ra - 1];
  g->N = rbk >= 2 ? b[rbk - 1] : 1;
  int na = ra > 2 ? ra - 2 : 0, nb = rbk > 2 ? rbk - 2 : 0;
  g->rb = na > nb ? na : nb;
  g->n_batch = 1;
  for (int i = 0; i < g->rb; i++) {
    g->ab[i] = i < g->rb - na ? 1 : a[i - (g->rb - na)];
    g->bb[i] = i < g->rb - nb ? 1 : b[i - (g->rb - nb)];
    g->ob[i] = g->ab[i] == 1 ? g->bb[i] : g->ab[i];
    g->n_batch *= g->ob[i];
  }
}

/* Index of the A (which = 0) or B matrix used by output batch index bi. */
static int64_t mm_batch_src(const mm_geom *g, int64_t bi, int which) {
  const int64_t *src = which ? g->bb : g->ab;
  int64_t idx = 0, stride = 1;
  for (int i = g->rb - 1; i >= 0; i--) {
    int64_t oi = bi % g->ob[i];
    bi /= g->ob[i];
    if (src[i] != 1) idx += oi * stride;
    stride *= src[i];
  }
  return idx;
}

typedef struct mm_job {
  const tensor *a, *b;
  tensor *y;
  mm_geom g;
  float *scratch;     /* per thread: K (A row) + N (accumulators) + N (B row) floats */
  int64_t per_thread; /* floats */
  int64_t n_rows, n_tasks;
} mm_job;

static void mm_task(void *ctx, size_t task, int thread) {
  const mm_job *j = ctx;
  const mm_geom *g = &j->g;
  float *arow = j->scratch + (int64_t)thread * j->per_thread;
  float *acc = arow + g->K, *brow = acc + g->N;
  int64_t r0 = (int64_t)task * j->n_rows / j->n_tasks;
  int64_t r1 = ((int64_t)task + 1) * j->n_rows / j->n_tasks;
  for (int64_t r = r0; r < r1; r++) {
    int64_t bi = r / g->M, m = r % g->M;
    int64_t a_off = (mm_batch_src(g, bi, 0) * g->M + m) * g->K;
    int64_t b_off = mm_batch_src(g, bi, 1) * g->K * g->N;
    tensor_load_f32(j->a, a_off, g->K, arow);
    for (int64_t c = 0; c < g->N; c++) acc[c] = 0.0f;
    for (int64_t k = 0; k < g->K; k++) {
      tensor_load_f32(j->b, b_off + k * g->N, g->N, brow);
      float av = arow[k];
      for (int64_t c = 0; c < g->N; c++) acc[c] += av * brow[c];
    }
    tensor_store_f32(j->y, r * g->N, g->N, acc);
  }
}

static size_t matmul_scratch(const gnode *n, const tinfo *in, int n_threads) {
  (void)n;
  if (in[0].rank < 1 || in[1].rank < 1) return 0;
  int rank[2] = {in[0].rank, in[1].rank};
  const int64_t *dims[2] = {in[0].dims, in[1].dims};
  mm_geom g;
  mm_geometry(rank, dims, &g);
  if (g.K < 0 || g.N < 0) return 0;
  return (size_t)(n_threads > 0 ? n_threads : 1) * (size_t)(g.K + 2 * g.N) * sizeof(float);
}

/* The broadcast geometry of these shapes (infer has checked them). */
static ph_status matmul_plan(const gnode *n, const tinfo *in, void *plan, diag *d) {
  (void)n;
  (void)d;
  int rank[2] = {in[0].rank, in[1].rank};
  const int64_t *dims[2] = {in[0].dims, in[1].dims};
  mm_geometry(rank, dims, plan);
  return PH_OK;
}

static ph_status matmul_run(const gnode *n, const tensor *const *in, tensor *const *out,
                            op_ctx *ctx, diag *d) {
  (void)n;
  RETURN_ERROR_IF(!ctx->plan, d, PH_ERR_INTERNAL, "MatMul: run without a plan");
  mm_job j;
  memset(&j, 0, sizeof j);
  j.a = in[0];
  j.b = in[1];
  j.y = out[0];
  j.g = *(const mm_geom *)ctx->plan;
  j.n_rows = j.g.n_batch * j.g.M;
  if (j.n_rows == 0 || j.g.N == 0) return PH_OK;
  int T = pool_threads(ctx->pool);
  j.per_thread = j.g.K + 2 * j.g.N;
  RETURN_ERROR_IF(ctx->scratch_bytes < (size_t)T * (size_t)j.per_thread * sizeof(float), d,
                  PH_ERR_INTERNAL, "MatMul: scratch of %zu bytes is too small", ctx->scratch_bytes);
  j.scratch = ctx->scratch;
  j.n_tasks = min64(j.n_rows, (int64_t)T * 4);
  pool_run(ctx->pool, (size_t)j.n_tasks, mm_task, &j);
  return PH_OK;
}

const op_def op_def_matmul = {
    "",         "MatMul", 2, 2, 1, 1, matmul_infer, matmul_run, matmul_scratch, sizeof(mm_geom),
    matmul_plan};

/* ---- MatMulWT ------------------------------------------------------------------------------ */

#define WT_MC           64 /* A rows converted to f32 per pool_run: bounds scratch, keeps it in L2 */
#define WT_MC_BF16      256 /* bf16 mode: at most this many rows per pool_run ... */
#define WT_A_BF16_BYTES ((int64_t)512 << 10) /* ... and at most this many bytes of bf16 A */

/* A rows per pool_run (a function of K only): every W row is read from memory once per chunk,
 * and for every group of WT_NW W rows the chunk's A rows are read from cache, so the chunk
 * should be large but stay in L2. bf16 mode: up to WT_MC_BF16 rows within WT_A_BF16_BYTES
 * (K = 1024: 256 rows, K = 3584: 73), never fewer than f32 mode's WT_MC. */
static int64_t wt_chunk(int bf16, int64_t K) {
  if (!bf16) return WT_MC;
  int64_t rows = K > 0 ? WT_A_BF16_BYTES / (2 * K) : WT_MC_BF16;
  return rows < WT_MC ? WT_MC : rows > WT_MC_BF16 ? WT_MC_BF16 : rows;
}
#define WT_NB      32 /* output columns per task (a multiple of WT_NW) */
/* bf16 mode: a chunk of more than WT_RMAX rows with K above this runs K-blocked (kbk kernels),
 * this many elements at a time (a multiple of 2 * WT_LANES): a weight group's block (8 KB) and
 * a register tile's A block (12 KB) then stay in L1 while the chunk's tiles pass over them,
 * where whole rows of K = 3584 (28 KB of W + 42 KB of A per tile) do not. */
#define WTB_KBLOCK 1024

/* Whether a chunk of `rows` rows runs K-blocked in bf16 mode (shapes only, never the variant). */
static int wtb_kblocked(int64_t rows, int64_t K) { return rows > WT_RMAX && K > WTB_KBLOCK; }

static ph_status wt_bf16_attr(const gnode *n, int *bf16, diag *d);

static ph_status matmul_wt_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  RETURN_ERROR_IF(n->n_inputs < 2 || n->n_inputs > 3 || n->n_outputs != 1, d,
                  PH_ERR_INVALID_ARGUMENT, "MatMulWT takes 2-3 inputs and 1 output, got %d and %d",
                  n->n_inputs, n->n_outputs);
  const tinfo *a = &in[0], *w = &in[1];
  const tinfo *bias = op_has_input(n, in, 2) ? &in[2] : NULL;
  RETURN_ERROR_IF(a->dtype == PH_DTYPE_INVALID || w->dtype == PH_DTYPE_INVALID, d,
                  PH_ERR_INVALID_ARGUMENT, "MatMulWT: A and W are required");
  RETURN_ERROR_IF(!dtype_is_compute_float(a->dtype), d, PH_ERR_TENSOR_DTYPE,
                  "MatMulWT: A is %s; expected F32, F16 or BF16", op_dtype_name(a->dtype));
  RETURN_ERROR_IF(!dtype_is_compute_float(w->dtype), d, PH_ERR_TENSOR_DTYPE,
                  "MatMulWT: W is %s; expected F32, F16 or BF16", op_dtype_name(w->dtype));
  RETURN_ERROR_IF(bias && !dtype_is_compute_float(bias->dtype), d, PH_ERR_TENSOR_DTYPE,
                  "MatMulWT: bias is %s; expected F32, F16 or BF16", op_dtype_name(bias->dtype));
  RETURN_ERROR_IF(a->rank == 0, d, PH_ERR_TENSOR_SHAPE, "MatMulWT: A must have rank >= 1");
  RETURN_ERROR_IF(w->rank >= 0 && w->rank != 2, d, PH_ERR_TENSOR_SHAPE,
                  "MatMulWT: W must be [N, K], got rank %d", w->rank);
  RETURN_ERROR_IF(bias && bias->rank >= 0 && bias->rank != 1, d, PH_ERR_TENSOR_SHAPE,
                  "MatMulWT: bias must be [N], got rank %d", bias->rank);
  int64_t N = w->rank == 2 ? w->dims[0] : -1, Kw = w->rank == 2 ? w->dims[1] : -1;
  int64_t Ka = a->rank > 0 ? a->dims[a->rank - 1] : -1;
  RETURN_ERROR_IF(Ka >= 0 && Kw >= 0 && Ka != Kw, d, PH_ERR_TENSOR_SHAPE,
                  "MatMulWT: A has K = %lld but W is [%lld, %lld]", (long long)Ka, (long long)N,
                  (long long)Kw);
  if (bias && bias->rank == 1) {
    int64_t nb = bias->dims[0];
    RETURN_ERROR_IF(nb >= 0 && N >= 0 && nb != N, d, PH_ERR_TENSOR_SHAPE,
                    "MatMulWT: bias has %lld elements but W has N = %lld rows", (long long)nb,
                    (long long)N);
    if (N < 0) N = nb;
  }
  int bf16 = 0;
  FORWARD_IF_ERROR(wt_bf16_attr(n, &bf16, d));
  memset(out, 0, sizeof *out);
  out->dtype = a->dtype;
  out->rank = a->rank;
  if (a->rank < 0) return PH_OK;
  for (int i = 0; i + 1 < a->rank; i++) out->dims[i] = a->dims[i];
  out->dims[a->rank - 1] = N;
  return PH_OK;
}

/* ---- MatMulWT: run ------------------------------------------------------------------------- */

typedef struct wt_job {
  const float *a; /* [rows, K] f32: this chunk of A */
  int64_t rows, K, N;
  int64_t row0;           /* output row of the chunk's first row */
  const unsigned char *w; /* [N, K] in w_dtype */
  size_t w_size;
  const unsigned char *bias; /* [N] or NULL */
  ph_dtype bias_dtype;
  unsigned char *y; /* [M, N] in y_dtype */
  ph_dtype y_dtype;
  const wt_kernel_fn *k;     /* the variant's kernels for W's dtype, by rows per call */
  const wt_kernel_fn *k_f32; /* the variant's f32 kernels (scalar f16 pre-conversion) */
  float *w_f32; /* scalar variant, f16 W only: per thread WT_NW * K floats, else NULL */
  /* bf16 mode (attribute bf16_dot = 1): the bf16-dot kernels, A rounded to bf16, and for f32/f16
   * W per thread WT_NW * K bf16 elements the task rounds each group of W rows into (else NULL) */
  const wt_bf16_kernel_fn *kb;
  const wt_bf16_kblock_fn *kbk; /* kb's K-blocked form, NULL where the table has none */
  wt_bf16_kernel_fn kb_w8;      /* kb[1] against 8 W rows (M = 1), NULL where none */
  float *acc_bf16; /* K-blocked chunks: per thread rows * WT_NW * WT_LANES partial sums */
  const uint16_t *ab;
  uint16_t *w_bf16;
  ph_dtype w_dtype;
} wt_job;

static float wt_bias(const wt_job *j, int64_t c) {
  if (!j->bias) return 0.0f;
  uint16_t h;
  switch (j->bias_dtype) {
  case PH_DTYPE_F16:
    memcpy(&h, j->bias + 2 * c, 2);
    return f16_to_f32(h);
  case PH_DTYPE_BF16:
    memcpy(&h, j->bias + 2 * c, 2);
    return bf16_to_f32(h);
  default:
    return wt_ld_f32(j->bias, c);
  }
}

/* Adds bias and stores a [n_rows, nc] block of sums (row stride WT_NW) at (row, col). */
static void wt_emit(const wt_job *j, int64_t row, int n_rows, int64_t col, int nc,
                    const float *sums, const float *bias) {
  for (int r = 0; r < n_rows; r++) {
    int64_t base = (j->row0 + row + r) * j->N + col;
    for (int c = 0; c < nc; c++) {
      float v = sums[r * WT_NW + c] + bias[c];
      uint16_t h;
      switch (j->y_dtype) {
      case PH_DTYPE_F16:
        h = f32_to_f16(v);
        memcpy(j->y + 2 * (base + c), &h, 2);
        break;
      case PH_DTYPE_BF16:
        h = f32_to_bf16(v);
        memcpy(j->y + 2 * (base + c), &h, 2);
        break;
      default:
        memcpy(j->y + 4 * (base + c), &v, 4);
        break;
      }
    }
  }
}

/* Task = WT_NB output columns for every row of the chunk. For each group of WT_NW weight rows
 * the chunk's rows go through the variant's widest kernel, then narrower ones for the rest, so
 * those weight rows are read from memory once and then from cache. */
/* wt_task in bf16 mode: the same tiling over the bf16-dot kernels; f32 and f16 weight rows are
 * rounded to bf16 once per group of WT_NW rows, then read from that copy by every row of the
 * chunk (no prepare-time copy: the model's weight bytes are not doubled). */
static void wt_task_bf16(const wt_job *j, int64_t c0, int64_t c1, int thread) {
  float sums[WT_RMAX * WT_NW];
  uint16_t *wbuf = j->w_bf16 ? j->w_bf16 + (int64_t)thread * WT_NW * j->K : NULL;
  const int kblocked = j->kbk && wtb_kblocked(j->rows, j->K);
  float *acc = kblocked ? j->acc_bf16 + (int64_t)thread * j->rows * WT_NW * WT_LANES : NULL;
  for (int64_t col = c0; col < c1; col += WT_NW) {
    int nc = (int)min64(WT_NW, c1 - col);
    const unsigned char *wr[WT_NW];
    float bias[WT_NW];
    for (int c = 0; c < WT_NW; c++) {
      int cc = c < nc ? c : nc - 1; /* a short last group repeats its last row */
      wr[c] = j->w + (size_t)(col + cc) * (size_t)j->K * j->w_size;
      bias[c] = wt_bias(j, col + cc);
    }
    if (wbuf)
      for (int c = 0; c < WT_NW; c++) {
        uint16_t *dst = wbuf + c * j->K;
        if (j->w_dtype == PH_DTYPE_F16)
          for (int64_t kk = 0; kk < j->K; kk++) dst[kk] = wt_round_bf16(wt_ld_f16(wr[c], kk));
        else
          for (int64_t kk = 0; kk < j->K; kk++) dst[kk] = wt_round_bf16(wt_ld_f32(wr[c], kk));
        wr[c] = (const unsigned char *)dst;
      }
    if (kblocked) {
      /* every block walks the chunk's rows in the same tiles, each tile's partial sums kept in
       * acc at its first row, so each dot sees its lanes' operations in the whole-row order */
      for (int64_t k0 = 0; k0 < j->K; k0 += WTB_KBLOCK) {
        int64_t k1 = min64(j->K, k0 + WTB_KBLOCK);
        for (int64_t m = 0; m < j->rows;) {
          int R = (int)min64(WT_RMAX, j->rows - m);
          while (!j->kbk[R]) R--;
          j->kbk[R](j->ab + m * j->K, j->K, k0, k1, wr, acc + m * WT_NW * WT_LANES, sums);
          if (k1 == j->K) wt_emit(j, m, R, col, nc, sums, bias);
          m += R;
        }
      }
      continue;
    }
    if (j->kb_w8 && j->rows == 1 && !wbuf && col + 2 * WT_NW <= c1) {
      /* one row: two full groups at once, eight weight streams (the same dot products) */
      const unsigned char *w8[2 * WT_NW];
      float bias2[WT_NW];
      for (int c = 0; c < 2 * WT_NW; c++)
        w8[c] = j->w + (size_t)(col + c) * (size_t)j->K * j->w_size;
      for (int c = 0; c < WT_NW; c++) bias2[c] = wt_bias(j, col + WT_NW + c);
      j->kb_w8(j->ab, j->K, w8, sums);
      wt_emit(j, 0, 1, col, WT_NW, sums, bias);
      wt_emit(j, 0, 1, col + WT_NW, WT_NW, sums + WT_NW, bias2);
      col += WT_NW;
      continue;
    }
    for (int64_t m = 0; m < j->rows;) {
      int R = (int)min64(WT_RMAX, j->rows - m);
      while (!j->kb[R]) R--; /* kb[1] exists (kernel_matmul_wt_bf16) */
      j->kb[R](j->ab + m * j->K, j->K, wr, sums);
      wt_emit(j, m, R, col, nc, sums, bias);
      m += R;
    }
  }
}

static void wt_task(void *ctx, size_t task, int thread) {
  const wt_job *j = ctx;
  int64_t c0 = (int64_t)task * WT_NB, c1 = min64(j->N, c0 + WT_NB);
  if (j->kb) {
    wt_task_bf16(j, c0, c1, thread);
    return;
  }
  float sums[WT_RMAX * WT_NW];
  /* f16 -> f32 costs more than a multiply-add in portable C: with several rows, the scalar
   * variant converts the weight rows once and runs its f32 kernels (conversions are exact:
   * same products) */
  int pre = j->w_f32 && j->rows > 1;
  const wt_kernel_fn *k = pre ? j->k_f32 : j->k;
  float *wbuf = pre ? j->w_f32 + (int64_t)thread * WT_NW * j->K : NULL;
  for (int64_t col = c0; col < c1; col += WT_NW) {
    int nc = (int)min64(WT_NW, c1 - col);
    const unsigned char *wr[WT_NW];
    float bias[WT_NW];
    for (int c = 0; c < WT_NW; c++) {
      /* a short last group repeats its last row; those sums are dropped */
      int cc = c < nc ? c : nc - 1;
      wr[c] = j->w + (size_t)(col + cc) * (size_t)j->K * j->w_size;
      bias[c] = wt_bias(j, col + cc);
    }
    if (pre)
      for (int c = 0; c < WT_NW; c++) {
        float *dst = wbuf + c * j->K;
        for (int64_t kk = 0; kk < j->K; kk++) dst[kk] = wt_ld_f16(wr[c], kk);
        wr[c] = (const unsigned char *)dst;
      }
    for (int64_t m = 0; m < j->rows;) {
      int R = (int)min64(WT_RMAX, j->rows - m);
      while (!k[R]) R--; /* k[1] exists in every variant */
      k[R](j->a + m * j->K, j->K, wr, sums);
      wt_emit(j, m, R, col, nc, sums, bias);
      m += R;
    }
  }
}

/* Scratch: up to WT_MC rows of A in f32; in bf16 mode the same rows rounded to bf16 (K / 2
 * floats a row, rounded up); then WT_NW converted weight rows per thread when a task converts
 * W (f16 W with M > 1 on the scalar variant, or f32/f16 W in bf16 mode); then, for K-blocked
 * bf16 chunks (wtb_kblocked), WT_NW x WT_LANES partial sums per chunk row per thread. The same
 * size for every variant (only the scalar one uses the f16 part, only the AVX-512 ones the
 * partial sums), so the plan does not depend on the variant. */
static size_t wt_scratch_floats(int64_t M, int64_t K, ph_dtype w_dtype, int bf16, int n_threads) {
  if (K <= 0 || M <= 0) return 0;
  size_t rows = (size_t)min64(M, wt_chunk(bf16, K));
  size_t n = rows * (size_t)K;
  if (bf16) n += (rows * (size_t)K + 1) / 2;
  size_t T = (size_t)(n_threads > 0 ? n_threads : 1);
  if ((w_dtype == PH_DTYPE_F16 && M > 1) || (bf16 && w_dtype != PH_DTYPE_BF16))
    n += T * WT_NW * (size_t)K;
  if (bf16 && wtb_kblocked((int64_t)rows, K)) n += T * rows * WT_NW * WT_LANES;
  return n;
}

/* The bf16_dot attribute: 1 = bf16 mode, 0 or absent = f32 (docs/precision.md). */
static ph_status wt_bf16_attr(const gnode *n, int *bf16, diag *d) {
  int64_t v = 0;
  FORWARD_IF_ERROR(op_attr_int(n, "bf16_dot", 0, &v, d));
  RETURN_ERROR_IF(v != 0 && v != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "MatMulWT: attribute bf16_dot must be 0 or 1, got %lld", (long long)v);
  *bf16 = (int)v;
  return PH_OK;
}

static size_t matmul_wt_scratch(const gnode *n, const tinfo *in, int n_threads) {
  if (in[0].rank < 1) return 0;
  int bf16 = 0;
  if (wt_bf16_attr(n, &bf16, NULL) != PH_OK) bf16 = 1; /* the larger; run() reports the error */
  int64_t K = in[0].dims[in[0].rank - 1], M = 1;
  for (int i = 0; i + 1 < in[0].rank; i++) M *= in[0].dims[i];
  return wt_scratch_floats(M, K, in[1].dtype, bf16, n_threads) * sizeof(float);
}

static ph_status matmul_wt_run(const gnode *n, const tensor *const *in, tensor *const *out,
                               op_ctx *ctx, diag *d) {
  const tensor *a = in[0], *w = in[1];
  const tensor *bias = n->n_inputs > 2 ? in[2] : NULL;
  wt_job j;
  memset(&j, 0, sizeof j);
  j.K = a->dims[a->rank - 1];
  j.N = w->dims[0];
  int64_t M = 1;
  for (int i = 0; i + 1 < a->rank; i++) M *= a->dims[i];
  if (M == 0 || j.N == 0) return PH_OK;
  j.w = w->data;
  j.w_size = dtype_size(w->dtype);
  j.bias = bias ? bias->data : NULL;
  j.bias_dtype = bias ? bias->dtype : PH_DTYPE_INVALID;
  j.y = out[0]->data;
  j.y_dtype = out[0]->dtype;
  int bf16 = 0;
  FORWARD_IF_ERROR(wt_bf16_attr(n, &bf16, d));
  kernel_variant v = kernel_variant_active();
  const matmul_wt_kernels *ks = kernel_set_of(v)->matmul_wt;
  j.k = ks->k[w->dtype == PH_DTYPE_BF16 ? 1 : w->dtype == PH_DTYPE_F16 ? 2 : 0];
  j.k_f32 = ks->k[0];
  j.w_dtype = w->dtype;
  size_t need = wt_scratch_floats(M, j.K, w->dtype, bf16, pool_threads(ctx->pool)) * sizeof(float);
  RETURN_ERROR_IF(ctx->scratch_bytes < need, d, PH_ERR_INTERNAL,
                  "MatMulWT: scratch of %zu bytes, need %zu", ctx->scratch_bytes, need);
  const int64_t MC = wt_chunk(bf16, j.K);
  int64_t a_floats = min64(M, MC) * j.K;
  /* no scratch (need is 0: no rows or K == 0) leaves every carved pointer NULL, never an offset
   * of NULL (undefined) */
  float *after = ctx->scratch ? (float *)ctx->scratch + a_floats : NULL;
  uint16_t *ab = NULL;
  if (bf16 && j.K > 0 && after) {
    j.kb = kernel_matmul_wt_bf16(v);
    ab = (uint16_t *)after;
    after += (a_floats + 1) / 2;
    if (w->dtype != PH_DTYPE_BF16) {
      j.w_bf16 = (uint16_t *)after;
      after += (int64_t)pool_threads(ctx->pool) * WT_NW * j.K;
    }
    /* the K-blocked forms of the table kernel_matmul_wt_bf16 chose (same bits as kb) */
    const matmul_wt_kernels *kt = j.kb == matmul_wt_avx512bf16_kernels.kb
                                      ? &matmul_wt_avx512bf16_kernels
                                  : j.kb == ks->kb ? ks
                                                   : NULL;
    if (kt) j.kb_w8 = kt->kb_w8;
    if (kt && kt->kbk[1] && wtb_kblocked(min64(M, MC), j.K)) {
      j.kbk = kt->kbk;
      j.acc_bf16 = after;
    }
  }
  if (!bf16 && v == KERNEL_SCALAR && w->dtype == PH_DTYPE_F16 && M > 1 && j.K > 0) j.w_f32 = after;
  /* with K == 0 the kernels read nothing, but still offset this pointer */
  static const float no_rows[1] = {0.0f};
  const float *abuf = j.K > 0 ? (const float *)ctx->scratch : no_rows;
  size_t n_tasks = (size_t)((j.N + WT_NB - 1) / WT_NB);
  for (int64_t m0 = 0; m0 < M; m0 += MC) {
    j.rows = min64(MC, M - m0);
    j.row0 = m0;
    if (j.K > 0) tensor_load_f32(a, m0 * j.K, j.rows * j.K, (float *)ctx->scratch);
    if (ab) /* bf16 mode: A rounded once per call, before any kernel reads it */
      for (int64_t i = 0; i < j.rows * j.K; i++) ab[i] = wt_round_bf16(abuf[i]);
    j.a = abuf;
    j.ab = ab;
    pool_run(ctx->pool, n_tasks, wt_task, &j);
  }
  return PH_OK;
}

const op_def op_def_matmul_wt = {
    "pagedhybrid.internal", "MatMulWT",        2, 3,   1, 1, matmul_wt_infer,
    matmul_wt_run,          matmul_wt_scratch, 0, NULL};
