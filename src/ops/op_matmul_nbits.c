/* op_matmul_nbits — com.microsoft MatMulNBits (ONNX Runtime 1.30's contrib schema): a linear
 * layer whose weight is block-quantized to 4 or 8 bits.
 *
 *   A [..., K] (T)   B uint8 [N, n_blocks, block*bits/8]   scales (T) [N*n_blocks] or [N, n_blocks]
 *   zero_points (optional): uint8 [N*ceil(n_blocks*bits/8)] (or [N, ceil(n_blocks*bits/8)]),
 *                           packed as B is, or T [N*n_blocks] (or [N, n_blocks]), unpacked
 *   g_idx (optional): refused, PH_ERR_UNSUPPORTED      bias (optional): T [N]
 *   -> Y [..., N] (T),   Y = A · dequant(B)ᵀ + bias
 * with n_blocks = ceil(K / block), T ∈ {f32, f16, bf16}, attributes K, N (required, >= 1), bits
 * (default 4; 4 or 8, other widths of 2..8 UNSUPPORTED), block_size (required, a power of two
 * >= 16), accuracy_level (0..4, default 0; 4: int8 activations, see below; others: f32). K, N >
 * 2^31 - 1 and block_size > 2^30 are UNSUPPORTED (no size overflows). Without zero points every
 * block's zero point is 2^(bits-1). Levels 0-3 (and 4 with float zero points or blocks above
 * NBITS_I8_MAX_BLOCK): dequantization and the f32 summation order are the reference kernel's
 * (kernels/matmul_nbits.h). Level 4: A quantized to int8 per row and per block once per call (a
 * pool task per row, into the shared scratch), then the exact integer dots and the fixed f32
 * combine of kernels/matmul_nbits.h: the AVX-512 VNNI kernels when the active variant is avx512 and
 * the CPU has avx512_vnni (the streaming one below NB_PANEL_MIN_M rows, the panel one from there),
 * else the reference nbits_dot_i8; all give the same bits. The bias is added to the finished sum
 * and Y is rounded to T once. Work is split over groups of output columns; each output element is
 * computed by one task with operations that depend on neither M nor the thread count, so neither
 * changes a result.
 */
#include <stdint.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/dispatch.h"
#include "kernels/matmul_nbits.h"
#include "ops/op.h"
#include "ops/op_util.h"
#include "tensor/dtype.h"

enum { NB_IN_A, NB_IN_B, NB_IN_SCALES, NB_IN_ZP, NB_IN_GIDX, NB_IN_BIAS };

#define NB_COLS_PER_TASK 8
/* Level 4: from this many rows on, the panel kernel (weights repacked once per call, no
 * reductions); below, the streaming one. Both give the same bits (kernels/matmul_nbits.h). */
#define NB_PANEL_MIN_M   16
#define NB_MAX_DIM       INT32_MAX          /* K and N */
#define NB_MAX_BLOCK     ((int64_t)1 << 30) /* block_size */

typedef struct nb_geom {
  ph_dtype dt;
  int rank;                     /* of A and Y */
  int64_t dims[GRAPH_MAX_DIMS]; /* of Y; -1 unknown */
  int64_t M, K, N;              /* M = rows of A (product of its leading dims); -1 unknown */
  int bits, accuracy_level;
  int64_t block, n_blocks, blob; /* blob = bytes per block of B */
  int zp_kind;                   /* 0: none (2^(bits-1)), 1: packed uint8, 2: T, unpacked */
  int64_t zp_col_bytes;          /* packed uint8 zero-point bytes per column */
  int has_bias;
  int i8;             /* 1: the level-4 int8 path (accuracy_level 4, integer zero points) */
  int64_t row_blocks; /* level 4: blocks per row of the activation tables (padded) */
} nb_geom;

/* Number of elements of a static type, or -1 when a dim or the rank is unknown; INT64_MAX when
 * the product overflows (never a legal table length, so the caller reports a mismatch). */
static int64_t nb_numel(const tinfo *t) {
  if (t->rank < 0) return -1;
  int64_t n = 1;
  int over = 0;
  for (int i = 0; i < t->rank; i++) {
    if (t->dims[i] < 0) return -1;
    if (t->dims[i] > 0 && n > INT64_MAX / t->dims[i])
      over = 1;
    else
      n *= t->dims[i];
  }
  return over && n != 0 ? INT64_MAX : n;
}

/* A per-column table (scales, zero points): rank 1 [N*per] or rank 2 [N, per]. */
static ph_status nb_check_table(const gnode *n, const tinfo *t, const char *what, int64_t N,
                                int64_t per, diag *d) {
  RETURN_ERROR_IF(t->rank >= 0 && t->rank != 1 && t->rank != 2, d, PH_ERR_TENSOR_SHAPE,
                  "MatMulNBits: %s must be [N*%lld] or [N, %lld], got rank %d", what,
                  (long long)per, (long long)per, t->rank);
  if (t->rank == 2) {
    RETURN_ERROR_IF(op_dims_conflict(t->dims[0], N) || op_dims_conflict(t->dims[1], per), d,
                    PH_ERR_TENSOR_SHAPE, "MatMulNBits: %s is [%lld, %lld], expected [%lld, %lld]",
                    what, (long long)t->dims[0], (long long)t->dims[1], (long long)N,
                    (long long)per);
  }
  int64_t numel = nb_numel(t);
  RETURN_ERROR_IF(numel >= 0 && numel != N * per, d, PH_ERR_TENSOR_SHAPE,
                  "MatMulNBits: %s has %lld elements, expected N*%lld = %lld", what,
                  (long long)numel, (long long)per, (long long)(N * per));
  (void)n;
  return PH_OK;
}

static ph_status nb_resolve(const gnode *n, const tinfo *in, nb_geom *g, diag *d) {
  memset(g, 0, sizeof *g);
  RETURN_ERROR_IF(n->n_inputs < 3 || n->n_inputs > 6, d, PH_ERR_INVALID_ARGUMENT,
                  "MatMulNBits: takes 3 to 6 inputs (A, B, scales, zero_points, g_idx, bias), "
                  "got %d",
                  n->n_inputs);
  RETURN_ERROR_IF(n->n_outputs != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "MatMulNBits: has 1 output, got %d", n->n_outputs);
  int64_t K = 0, N = 0, bits = 0, block = 0, acc = 0;
  FORWARD_IF_ERROR(op_attr_int(n, "K", -1, &K, d));
  FORWARD_IF_ERROR(op_attr_int(n, "N", -1, &N, d));
  FORWARD_IF_ERROR(op_attr_int(n, "bits", 4, &bits, d));
  FORWARD_IF_ERROR(op_attr_int(n, "block_size", -1, &block, d));
  FORWARD_IF_ERROR(op_attr_int(n, "accuracy_level", 0, &acc, d));
  RETURN_ERROR_IF(K < 1, d, PH_ERR_INVALID_ARGUMENT,
                  "MatMulNBits: attribute K is required and must be >= 1, got %lld", (long long)K);
  RETURN_ERROR_IF(N < 1, d, PH_ERR_INVALID_ARGUMENT,
                  "MatMulNBits: attribute N is required and must be >= 1, got %lld", (long long)N);
  RETURN_ERROR_IF(bits < 2 || bits > 8, d, PH_ERR_INVALID_ARGUMENT,
                  "MatMulNBits: attribute bits must be in [2, 8], got %lld", (long long)bits);
  RETURN_ERROR_IF(bits != 4 && bits != 8, d, PH_ERR_UNSUPPORTED,
                  "MatMulNBits: bits = %lld is not supported (4 or 8)", (long long)bits);
  RETURN_ERROR_IF(block < 16 || (block & (block - 1)) != 0, d, PH_ERR_INVALID_ARGUMENT,
                  "MatMulNBits: attribute block_size is required and must be a power of two "
                  ">= 16, got %lld",
                  (long long)block);
  /* Caps far above any real layer that keep every size below (N·n_blocks·blob, M·K) in int64. */
  RETURN_ERROR_IF(K > NB_MAX_DIM || N > NB_MAX_DIM || block > NB_MAX_BLOCK, d, PH_ERR_UNSUPPORTED,
                  "MatMulNBits: K = %lld, N = %lld, block_size = %lld: K and N above %lld or a "
                  "block above %lld are not supported",
                  (long long)K, (long long)N, (long long)block, (long long)NB_MAX_DIM,
                  (long long)NB_MAX_BLOCK);
  RETURN_ERROR_IF(acc < 0 || acc > 4, d, PH_ERR_INVALID_ARGUMENT,
                  "MatMulNBits: attribute accuracy_level must be in [0, 4], got %lld",
                  (long long)acc);
  g->K = K;
  g->N = N;
  g->bits = (int)bits;
  g->block = block;
  g->accuracy_level = (int)acc;
  g->n_blocks = (K + block - 1) / block;
  g->blob = block * bits / 8;

  const tinfo *a = &in[NB_IN_A], *b = &in[NB_IN_B], *sc = &in[NB_IN_SCALES];
  RETURN_ERROR_IF(a->dtype == PH_DTYPE_INVALID || b->dtype == PH_DTYPE_INVALID ||
                      sc->dtype == PH_DTYPE_INVALID,
                  d, PH_ERR_INVALID_ARGUMENT, "MatMulNBits: A, B and scales are required");
  RETURN_ERROR_IF(op_has_input(n, in, NB_IN_GIDX), d, PH_ERR_UNSUPPORTED,
                  "MatMulNBits: input g_idx (act-order group indices) is not supported");
  g->dt = a->dtype;
  RETURN_ERROR_IF(!dtype_is_compute_float(g->dt), d, PH_ERR_TENSOR_DTYPE,
                  "MatMulNBits: A dtype %s is not f32, f16 or bf16", ph_dtype_name(g->dt));
  RETURN_ERROR_IF(b->dtype != PH_DTYPE_U8, d, PH_ERR_TENSOR_DTYPE,
                  "MatMulNBits: B dtype %s is not U8", ph_dtype_name(b->dtype));
  RETURN_ERROR_IF(sc->dtype != g->dt, d, PH_ERR_TENSOR_DTYPE,
                  "MatMulNBits: scales dtype %s is not A's (%s)", ph_dtype_name(sc->dtype),
                  ph_dtype_name(g->dt));
  FORWARD_IF_ERROR(op_check_rank(n, b, 3, "B [N, n_blocks, block*bits/8]", d));
  if (b->rank == 3) {
    RETURN_ERROR_IF(op_dims_conflict(b->dims[0], N) || op_dims_conflict(b->dims[1], g->n_blocks) ||
                        op_dims_conflict(b->dims[2], g->blob),
                    d, PH_ERR_TENSOR_SHAPE,
                    "MatMulNBits: B is [%lld, %lld, %lld], expected [N, ceil(K/block), "
                    "block*bits/8] = [%lld, %lld, %lld]",
                    (long long)b->dims[0], (long long)b->dims[1], (long long)b->dims[2],
                    (long long)N, (long long)g->n_blocks, (long long)g->blob);
  }
  FORWARD_IF_ERROR(nb_check_table(n, sc, "scales", N, g->n_blocks, d));
  if (op_has_input(n, in, NB_IN_ZP)) {
    const tinfo *zp = &in[NB_IN_ZP];
    if (zp->dtype == PH_DTYPE_U8) {
      g->zp_kind = 1;
      g->zp_col_bytes = (g->n_blocks * bits + 7) / 8;
      FORWARD_IF_ERROR(nb_check_table(n, zp, "zero_points (U8)", N, g->zp_col_bytes, d));
    } else {
      RETURN_ERROR_IF(zp->dtype != g->dt, d, PH_ERR_TENSOR_DTYPE,
                      "MatMulNBits: zero_points dtype %s is neither U8 nor A's (%s)",
                      ph_dtype_name(zp->dtype), ph_dtype_name(g->dt));
      g->zp_kind = 2;
      FORWARD_IF_ERROR(nb_check_table(n, zp, "zero_points", N, g->n_blocks, d));
    }
  }
  if (op_has_input(n, in, NB_IN_BIAS)) {
    const tinfo *bias = &in[NB_IN_BIAS];
    RETURN_ERROR_IF(bias->dtype != g->dt, d, PH_ERR_TENSOR_DTYPE,
                    "MatMulNBits: bias dtype %s is not A's (%s)", ph_dtype_name(bias->dtype),
                    ph_dtype_name(g->dt));
    FORWARD_IF_ERROR(op_check_rank(n, bias, 1, "bias [N]", d));
    RETURN_ERROR_IF(bias->rank == 1 && op_dims_conflict(bias->dims[0], N), d, PH_ERR_TENSOR_SHAPE,
                    "MatMulNBits: bias is [%lld], expected [N] = [%lld]", (long long)bias->dims[0],
                    (long long)N);
    g->has_bias = 1;
  }

  RETURN_ERROR_IF(a->rank == 0, d, PH_ERR_TENSOR_SHAPE, "MatMulNBits: A must have rank >= 1");
  g->rank = a->rank;
  if (a->rank > 0) {
    int64_t last = a->dims[a->rank - 1];
    RETURN_ERROR_IF(op_dims_conflict(last, K), d, PH_ERR_TENSOR_SHAPE,
                    "MatMulNBits: the last dim of A is %lld, attribute K is %lld", (long long)last,
                    (long long)K);
    g->M = 1;
    for (int i = 0; i < a->rank; i++) g->dims[i] = a->dims[i];
    for (int i = 0; i + 1 < a->rank && g->M >= 0; i++)
      g->M = a->dims[i] >= 0 ? g->M * a->dims[i] : -1;
    g->dims[a->rank - 1] = N;
  } else {
    g->M = -1;
  }
  g->i8 = g->accuracy_level == 4 && g->zp_kind != 2 && g->block <= NBITS_I8_MAX_BLOCK;
  g->row_blocks = nbits_i8_row_blocks(g->bits, g->block, g->n_blocks);
  return PH_OK;
}

static ph_status nb_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  nb_geom g;
  FORWARD_IF_ERROR(nb_resolve(n, in, &g, d));
  out[0] = tinfo_make(g.dt, g.rank, g.dims);
  return PH_OK;
}

/* ---- scratch ----------------------------------------------------------------------------------
 * Level 1 (f32): shared A in f32 [M*K]; per thread one dequantized column [K], its scales and
 * zero points [n_blocks] each.
 * Level 4 (int8): shared, per row of A: its codes [q_stride bytes: row_blocks * block codes],
 * s_a [row_blocks] and Σâ [row_blocks] (kernels/matmul_nbits.h), quantized once per call; per
 * thread: one row of A in f32 [K] (while quantizing), the NBITS_COLS columns' scales and zero
 * points transposed [row_blocks * NBITS_COLS] each, one column's [n_blocks] each, and the
 * kernel's outputs [M * NBITS_COLS]. Each slice 64-byte aligned. */
static size_t nb_align(size_t b) { return (b + 63) & ~(size_t)63; }
static int64_t nb_q_stride(const nb_geom *g) {
  return (int64_t)nb_align((size_t)(g->row_blocks * g->block));
}
static size_t nb_shared_bytes(const nb_geom *g) {
  if (!g->i8) return nb_align((size_t)g->M * (size_t)g->K * sizeof(float));
  return (size_t)g->M * ((size_t)nb_q_stride(g) + 2 * nb_align((size_t)g->row_blocks * 4));
}
static size_t nb_ws_bytes(const nb_geom *g) {
  size_t nb = nb_align((size_t)g->n_blocks * 4);
  if (!g->i8) return nb_align((size_t)g->K * sizeof(float)) + 2 * nb;
  size_t gemv = nb_align((size_t)g->row_blocks * NBITS_COLS * 4) +
                nb_align((size_t)g->n_blocks * NBITS_COLS * 4) + nb +
                nb_align((size_t)g->M * NBITS_COLS * sizeof(float));
  size_t panel = nb_align((size_t)(g->n_blocks * g->block) * NBITS_PANEL) +
                 2 * nb_align((size_t)g->n_blocks * NBITS_PANEL * 4) + nb +
                 nb_align((size_t)g->M * NBITS_PANEL * sizeof(float));
  return nb_align((size_t)g->K * sizeof(float)) + (gemv > panel ? gemv : panel);
}

static size_t nb_scratch_bytes(const gnode *n, const tinfo *in, int n_threads) {
  nb_geom g;
  if (nb_resolve(n, in, &g, NULL) != PH_OK || g.M < 0) return 0;
  return nb_shared_bytes(&g) + nb_ws_bytes(&g) * (size_t)(n_threads > 0 ? n_threads : 1);
}

typedef struct nb_job {
  const nb_geom *g;
  const tensor *a_in;
  const float *a; /* level 1: [M, K] f32 */
  int8_t *q;      /* level 4: [M, q_stride] codes */
  float *sa;      /* level 4: [M, row_blocks] */
  int32_t *asum;  /* level 4: [M, row_blocks] */
  int64_t q_stride;
  const nbits_f32_kernels *f32; /* levels 0-3: the AVX-512 ones, or NULL: the reference */
  nbits_i8_kernel_fn kernel;    /* level 4: NULL runs the reference nbits_dot_i8 */
  nbits_i8_panel_fn panel;      /* level 4, M >= NB_PANEL_MIN_M: the panel kernel, else NULL */
  const uint8_t *b;
  const tensor *scales, *zp, *bias;
  tensor *y;
  char *ws;
  size_t ws_bytes;
} nb_job;

/* Column c's zero points as floats (level 1) or integers (level 4), zp[n_blocks]. */
static void nb_col_zp(const nb_job *j, int64_t c, float *zf, int32_t *zi) {
  const nb_geom *g = j->g;
  int64_t nb = g->n_blocks;
  if (g->zp_kind == 2) {
    tensor_load_f32(j->zp, c * nb, nb, zf);
    return;
  }
  for (int64_t b = 0; b < nb; b++) {
    float z = (float)(1 << (g->bits - 1));
    if (g->zp_kind == 1)
      z = nbits_zero_point_u8((const uint8_t *)j->zp->data + c * g->zp_col_bytes, g->bits, b);
    if (zf) zf[b] = z;
    if (zi) zi[b] = (int32_t)z;
  }
}

static void nb_task(void *ctx, size_t task, int thread) {
  const nb_job *j = ctx;
  const nb_geom *g = j->g;
  int64_t K = g->K, N = g->N, nb = g->n_blocks;
  char *ws = j->ws + (size_t)thread * j->ws_bytes;
  float *w = (float *)(void *)ws;
  float *sc = (float *)(void *)(ws + nb_align((size_t)K * sizeof(float)));
  float *zp = (float *)(void *)((char *)sc + nb_align((size_t)nb * sizeof(float)));
  int64_t n0 = (int64_t)task * NB_COLS_PER_TASK;
  int64_t n1 = n0 + NB_COLS_PER_TASK < N ? n0 + NB_COLS_PER_TASK : N;
  for (int64_t c = n0; c < n1; c++) {
    tensor_load_f32(j->scales, c * nb, nb, sc);
    nb_col_zp(j, c, zp, NULL);
    const uint8_t *col = j->b + c * nb * g->blob;
    if (j->f32)
      j->f32->dequant(col, sc, zp, g->bits, g->block, K, w);
    else
      nbits_dequant_col(col, sc, zp, g->bits, g->block, K, w);
    float bias = 0.0f;
    if (g->has_bias) tensor_load_f32(j->bias, c, 1, &bias);
    for (int64_t m = 0; m < g->M; m++) {
      float y = j->f32 ? j->f32->dot(j->a + m * K, w, K) : nbits_dot(j->a + m * K, w, K);
      if (g->has_bias) y += bias;
      tensor_store_f32(j->y, m * N + c, 1, &y);
    }
  }
}

/* Level 4, task = one row of A: quantized into the shared tables. */
static void nb_quant_task(void *ctx, size_t task, int thread) {
  const nb_job *j = ctx;
  const nb_geom *g = j->g;
  int64_t m = (int64_t)task, rb = g->row_blocks;
  float *a = (float *)(void *)(j->ws + (size_t)thread * j->ws_bytes);
  int8_t *q = j->q + m * j->q_stride;
  float *sa = j->sa + m * rb;
  int32_t *asum = j->asum + m * rb;
  tensor_load_f32(j->a_in, m * g->K, g->K, a);
  nbits_quantize_fn quant = j->kernel ? nbits_i8_avx512_quantizer() : NULL;
  (quant ? quant : nbits_quantize_row_i8)(a, g->K, g->block, q, sa, asum);
  int64_t used = g->n_blocks * g->block;
  memset(q + used, 0, (size_t)(j->q_stride - used));
  for (int64_t b = g->n_blocks; b < rb; b++) {
    sa[b] = 0.0f;
    asum[b] = 0;
  }
  if (j->kernel && !j->panel && g->bits == 4) nbits_i8_avx512_layout(q, rb * g->block);
}

/* Level 4: Y[m, n0 + i] = out[m * stride + i] (+ bias), i < n_cols. */
static void nb_i8_store(const nb_job *j, const float *out, int stride, int64_t n0, int n_cols) {
  const nb_geom *g = j->g;
  int64_t N = g->N, M = g->M;
  if (j->y->dtype == PH_DTYPE_F32 && !g->has_bias) {
    float *y = (float *)j->y->data;
    for (int64_t m = 0; m < M; m++)
      for (int i = 0; i < n_cols; i++) y[m * N + n0 + i] = out[m * stride + i];
    return;
  }
  for (int i = 0; i < n_cols; i++) {
    float bias = 0.0f;
    if (g->has_bias) tensor_load_f32(j->bias, n0 + i, 1, &bias);
    for (int64_t m = 0; m < M; m++) {
      float y = out[m * stride + i];
      if (g->has_bias) y += bias;
      tensor_store_f32(j->y, m * N + n0 + i, 1, &y);
    }
  }
}

static void nb_prefetch(const void *p) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p);
#else
  (void)p;
#endif
}

/* Level 4, task = NBITS_COLS columns against every row. A group past N repeats column N - 1
 * (read, never stored). */
static void nb_i8_task(void *ctx, size_t task, int thread) {
  const nb_job *j = ctx;
  const nb_geom *g = j->g;
  int64_t N = g->N, M = g->M, nb = g->n_blocks, rb = g->row_blocks;
  char *ws = j->ws + (size_t)thread * j->ws_bytes + nb_align((size_t)g->K * sizeof(float));
  int32_t *zt = (int32_t *)(void *)ws;
  float *sc = (float *)(void *)((char *)zt + nb_align((size_t)rb * NBITS_COLS * 4));
  int32_t *zc = (int32_t *)(void *)((char *)sc + nb_align((size_t)nb * NBITS_COLS * 4));
  float *out = (float *)(void *)((char *)zc + nb_align((size_t)nb * 4));
  int64_t n0 = (int64_t)task * NBITS_COLS;
  int n_cols = N - n0 < NBITS_COLS ? (int)(N - n0) : NBITS_COLS;
  {
    /* the scales (and packed zero points) of the group the kernel prefetches B for (matmul_nbits
     * _avx512.c): each group's are a few lines, missed in DRAM otherwise */
    int64_t gb = NBITS_COLS * nb * g->blob, ahead = n0 + NBITS_COLS * ((8192 + gb - 1) / gb);
    if (ahead < N) {
      size_t es = dtype_size(j->scales->dtype);
      const char *sp = (const char *)j->scales->data + (size_t)(ahead * nb) * es;
      for (size_t o = 0; o < (size_t)(NBITS_COLS * nb) * es; o += 64) nb_prefetch(sp + o);
      if (g->zp_kind == 1) nb_prefetch((const uint8_t *)j->zp->data + ahead * g->zp_col_bytes);
    }
  }
  const uint8_t *cols[NBITS_COLS];
  const float *scol[NBITS_COLS];
  int64_t cidx[NBITS_COLS];
  for (int i = 0; i < NBITS_COLS; i++) {
    cidx[i] = n0 + i < N ? n0 + i : N - 1;
    cols[i] = j->b + cidx[i] * nb * g->blob;
    if (j->scales->dtype == PH_DTYPE_F32) {
      scol[i] = (const float *)j->scales->data + cidx[i] * nb;
    } else {
      tensor_load_f32(j->scales, cidx[i] * nb, nb, sc + i * nb);
      scol[i] = sc + i * nb;
    }
  }
  if (!j->kernel) {
    for (int i = 0; i < n_cols; i++) {
      nb_col_zp(j, cidx[i], NULL, zc);
      for (int64_t m = 0; m < M; m++)
        out[m * NBITS_COLS + i] =
            nbits_dot_i8(j->q + m * j->q_stride, j->sa + m * rb, j->asum + m * rb, cols[i], scol[i],
                         zc, g->bits, g->block, g->K);
    }
  } else {
    /* asymmetric: the columns' zero points side by side, zeros past n_blocks */
    if (g->zp_kind == 1) {
      for (int i = 0; i < NBITS_COLS; i++) {
        const uint8_t *z = (const uint8_t *)j->zp->data + cidx[i] * g->zp_col_bytes;
        if (g->bits == 8)
          for (int64_t b = 0; b < nb; b++) zt[b * NBITS_COLS + i] = z[b];
        else
          for (int64_t b = 0; b < nb; b++)
            zt[b * NBITS_COLS + i] = (z[b / 2] >> ((b & 1) * 4)) & 0x0F;
      }
      for (int64_t e = nb * NBITS_COLS; e < rb * NBITS_COLS; e++) zt[e] = 0;
    }
    j->kernel(j->q, j->q_stride, j->sa, j->asum, rb, M, cols, scol, g->zp_kind == 1 ? zt : NULL,
              g->bits, g->block, nb, out);
  }
  nb_i8_store(j, out, NBITS_COLS, n0, n_cols);
}

/* Level 4 with the panel kernel, task = NBITS_PANEL columns (a panel past N repeats column
 * N - 1, never stored): the panel packed once, then every row against it. */
static void nb_i8_panel_task(void *ctx, size_t task, int thread) {
  const nb_job *j = ctx;
  const nb_geom *g = j->g;
  int64_t N = g->N, nb = g->n_blocks;
  char *ws = j->ws + (size_t)thread * j->ws_bytes + nb_align((size_t)g->K * sizeof(float));
  uint8_t *wp = (uint8_t *)ws;
  float *swp = (float *)(void *)(ws + nb_align((size_t)(nb * g->block) * NBITS_PANEL));
  int32_t *zpp = (int32_t *)(void *)((char *)swp + nb_align((size_t)nb * NBITS_PANEL * 4));
  float *sc = (float *)(void *)((char *)zpp + nb_align((size_t)nb * NBITS_PANEL * 4));
  float *out = (float *)(void *)((char *)sc + nb_align((size_t)nb * 4));
  int64_t n0 = (int64_t)task * NBITS_PANEL;
  int n_cols = N - n0 < NBITS_PANEL ? (int)(N - n0) : NBITS_PANEL;
  const uint8_t *cols[NBITS_PANEL];
  for (int i = 0; i < NBITS_PANEL; i++) {
    int64_t c = n0 + i < N ? n0 + i : N - 1;
    cols[i] = j->b + c * nb * g->blob;
    const float *src = sc;
    if (j->scales->dtype == PH_DTYPE_F32)
      src = (const float *)j->scales->data + c * nb;
    else
      tensor_load_f32(j->scales, c * nb, nb, sc);
    for (int64_t b = 0; b < nb; b++) swp[b * NBITS_PANEL + i] = src[b];
    if (g->zp_kind == 1) {
      const uint8_t *z = (const uint8_t *)j->zp->data + c * g->zp_col_bytes;
      for (int64_t b = 0; b < nb; b++)
        zpp[b * NBITS_PANEL + i] = g->bits == 8 ? z[b] : (z[b / 2] >> ((b & 1) * 4)) & 0x0F;
    }
  }
  nbits_i8_pack_fn pack = nbits_i8_avx512_pack_panel(); /* the panel kernel implies AVX-512 */
  (pack ? pack : nbits_i8_pack_panel)(cols, g->bits, g->block, nb, wp);
  j->panel(j->q, j->q_stride, j->sa, j->asum, g->row_blocks, g->M, wp, swp,
           g->zp_kind == 1 ? zpp : NULL, g->bits, g->block, nb, out);
  nb_i8_store(j, out, NBITS_PANEL, n0, n_cols);
}

static ph_status nb_plan(const gnode *n, const tinfo *in, void *plan, diag *d) {
  return nb_resolve(n, in, plan, d);
}

static ph_status nb_run(const gnode *n, const tensor *const *in, tensor *const *out, op_ctx *ctx,
                        diag *d) {
  (void)n;
  const nb_geom *gp = ctx->plan; /* nb_resolve on these shapes, once per plan */
  RETURN_ERROR_IF(!gp, d, PH_ERR_INTERNAL, "MatMulNBits: run without a plan");
  const nb_geom g = *gp;
  RETURN_ERROR_IF(!out[0], d, PH_ERR_INTERNAL, "MatMulNBits: output 0 is required");
  if (g.M == 0) return PH_OK;
  int n_threads = pool_threads(ctx->pool);
  size_t need = nb_shared_bytes(&g) + nb_ws_bytes(&g) * (size_t)n_threads;
  RETURN_ERROR_IF(ctx->scratch_bytes < need || !ctx->scratch, d, PH_ERR_INTERNAL,
                  "MatMulNBits: scratch is %zu bytes, %d threads need %zu", ctx->scratch_bytes,
                  n_threads, need);
  nb_job j;
  memset(&j, 0, sizeof j);
  j.g = &g;
  j.a_in = in[NB_IN_A];
  j.b = in[NB_IN_B]->data;
  j.scales = in[NB_IN_SCALES];
  j.zp = g.zp_kind ? in[NB_IN_ZP] : NULL;
  j.bias = g.has_bias ? in[NB_IN_BIAS] : NULL;
  j.y = out[0];
  j.ws = (char *)ctx->scratch + nb_shared_bytes(&g);
  j.ws_bytes = nb_ws_bytes(&g);
  if (g.i8) {
    j.q_stride = nb_q_stride(&g);
    j.q = ctx->scratch;
    j.sa = (float *)(void *)((char *)ctx->scratch + (size_t)(g.M * j.q_stride));
    j.asum = (int32_t *)(void *)((char *)j.sa + (size_t)g.M * nb_align((size_t)g.row_blocks * 4));
    /* the VNNI kernel where the active variant is avx512 and the CPU has VNNI; the reference
     * (same bits) otherwise */
    if (kernel_variant_active() == KERNEL_AVX512 && cpu_features()->avx512_vnni)
      j.kernel = nbits_i8_avx512_kernel(g.bits, g.block);
    if (j.kernel && g.M >= NB_PANEL_MIN_M) j.panel = nbits_i8_avx512_panel_kernel();
    pool_run(ctx->pool, (size_t)g.M, nb_quant_task, &j);
    if (j.panel)
      pool_run(ctx->pool, (size_t)((g.N + NBITS_PANEL - 1) / NBITS_PANEL), nb_i8_panel_task, &j);
    else
      pool_run(ctx->pool, (size_t)((g.N + NBITS_COLS - 1) / NBITS_COLS), nb_i8_task, &j);
    return PH_OK;
  }
  float *a = ctx->scratch;
  tensor_load_f32(in[NB_IN_A], 0, g.M * g.K, a);
  if (kernel_variant_active() == KERNEL_AVX512) j.f32 = nbits_f32_avx512_kernels();
  j.a = a;
  pool_run(ctx->pool, (size_t)((g.N + NB_COLS_PER_TASK - 1) / NB_COLS_PER_TASK), nb_task, &j);
  return PH_OK;
}

const op_def op_def_matmul_nbits = {
    "com.microsoft",  "MatMulNBits",   3,      6, 1, 1, nb_infer, nb_run,
    nb_scratch_bytes, sizeof(nb_geom), nb_plan};
