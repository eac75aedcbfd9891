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
 * bit-identical whatever M is and whichever rows share a kernel call. Every dot product uses the
 * same summation order, a function of K only: WT_LANES partial sums, element k going to partial
 * k % WT_LANES in increasing k, then a fixed pairwise tree (lanes l and l + 8, then + 4, + 2,
 * + 1), then + bias. The kernels for every row count are generated from one body, so the
 * per-element arithmetic is the same text; W conversions to f32 are exact, so converting on the
 * fly or not cannot change a product. Floating-point contraction (FMA) would break the
 * equivalence only if applied differently per kernel: gcc in ISO C mode does not contract, and
 * clang is told not to below. Work is split over column blocks (never K) with pool_run.
 *
 * Variants (op_matmul.h): the scalar kernels are the reference and the fallback; AVX2 and
 * AVX-512 kernels keep the same lanes and tree but fuse each multiply-add. One variant is chosen
 * per process from the CPU and PH_KERNELS, never from the shapes, so the invariance above holds
 * within each variant; the variants agree with the reference to rounding (test_matmul_wt.c).
 *
 * Memory: nothing is allocated in run(). MatMul needs per-thread rows (scratch_bytes);
 * MatMulWT converts up to WT_MC rows of A to f32 at a time into scratch and, for f16 weights
 * with M > 1, WT_NW converted weight rows per thread. Tensor data may be unaligned
 * (safetensors views), so weights and bias are read with memcpy or unaligned vector loads.
 */
#include "ops/op_matmul.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/log.h"
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

static ph_status matmul_run(const gnode *n, const tensor *const *in, tensor *const *out,
                            op_ctx *ctx, diag *d) {
  (void)n;
  mm_job j;
  memset(&j, 0, sizeof j);
  j.a = in[0];
  j.b = in[1];
  j.y = out[0];
  int rank[2] = {in[0]->rank, in[1]->rank};
  const int64_t *dims[2] = {in[0]->dims, in[1]->dims};
  mm_geometry(rank, dims, &j.g);
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

const op_def op_def_matmul = {"", "MatMul", 2, 2, 1, 1, matmul_infer, matmul_run, matmul_scratch};

/* ---- MatMulWT ------------------------------------------------------------------------------ */

#define WT_LANES 16 /* partial sums per dot product: the fixed summation order */
#define WT_NW    4  /* W rows per kernel call: four concurrent weight streams */
#define WT_MC    64 /* A rows converted to f32 per pool_run: bounds scratch, keeps it in L2 */
#define WT_NB    32 /* output columns per task (a multiple of WT_NW) */

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
  memset(out, 0, sizeof *out);
  out->dtype = a->dtype;
  out->rank = a->rank;
  if (a->rank < 0) return PH_OK;
  for (int i = 0; i + 1 < a->rank; i++) out->dims[i] = a->dims[i];
  out->dims[a->rank - 1] = N;
  return PH_OK;
}

/* Element k of a row of W, as f32; p points at the row's first byte (any alignment). */
static inline float wt_ld_f32(const unsigned char *p, int64_t k) {
  float f;
  memcpy(&f, p + 4 * k, 4);
  return f;
}

static inline float wt_ld_bf16(const unsigned char *p, int64_t k) {
  uint16_t h;
  memcpy(&h, p + 2 * k, 2);
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* f16 -> f32, exact for every input including subnormals, inf and NaN (the test checks all
 * 65536). Written without branches and without floating-point arithmetic on subnormals (which
 * costs a microcode assist per element on x86) so the kernels' loops vectorize. */
static inline float wt_ld_f16(const unsigned char *p, int64_t k) {
  uint16_t h;
  memcpy(&h, p + 2 * k, 2);
  uint32_t em = h & 0x7fffu;
  uint32_t normal = (em << 13) + ((uint32_t)(127 - 15) << 23);
  uint32_t special = (em << 13) | 0x7f800000u;
  float sub = (float)(int32_t)em * 0x1p-24f; /* exact: em < 2^10 when used */
  uint32_t sub_bits;
  memcpy(&sub_bits, &sub, 4);
  /* selects as masks: a conditional here kept gcc from vectorizing the loops */
  uint32_t is_sub = 0u - (uint32_t)(em < 0x0400u);
  uint32_t is_special = 0u - (uint32_t)(em >= 0x7c00u);
  uint32_t bits = (sub_bits & is_sub) | (special & is_special) | (normal & ~(is_sub | is_special));
  bits |= (uint32_t)(h & 0x8000u) << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* The fixed combine of one dot product's partial sums. */
static inline float wt_tree(const float *acc) {
  float s[WT_LANES];
  for (int l = 0; l < WT_LANES; l++) s[l] = acc[l];
  for (int w = WT_LANES / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; l++) s[l] += s[l + w];
  return s[0];
}

/* sums[r * WT_NW + c] = dot(A row r, W row c) for R rows of A (f32, contiguous, K apart) and
 * WT_NW rows of W. One body for every R and every W dtype: the summation order above. */
#define WT_KERNEL(NAME, LOAD, R)                                                                   \
  static void NAME(const float *a, int64_t K, const unsigned char *const *w, float *sums) {        \
    const unsigned char *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];                            \
    float acc[R][WT_NW][WT_LANES];                                                                 \
    memset(acc, 0, sizeof acc);                                                                    \
    int64_t k = 0;                                                                                 \
    for (; k + WT_LANES <= K; k += WT_LANES)                                                       \
      for (int r = 0; r < (R); r++) {                                                              \
        const float *ar = a + r * K + k;                                                           \
        for (int l = 0; l < WT_LANES; l++) {                                                       \
          float av = ar[l];                                                                        \
          acc[r][0][l] += av * LOAD(w0, k + l);                                                    \
          acc[r][1][l] += av * LOAD(w1, k + l);                                                    \
          acc[r][2][l] += av * LOAD(w2, k + l);                                                    \
          acc[r][3][l] += av * LOAD(w3, k + l);                                                    \
        }                                                                                          \
      }                                                                                            \
    for (int r = 0; r < (R); r++) {                                                                \
      for (int64_t l = 0; k + l < K; l++) {                                                        \
        float av = a[r * K + k + l];                                                               \
        acc[r][0][l] += av * LOAD(w0, k + l);                                                      \
        acc[r][1][l] += av * LOAD(w1, k + l);                                                      \
        acc[r][2][l] += av * LOAD(w2, k + l);                                                      \
        acc[r][3][l] += av * LOAD(w3, k + l);                                                      \
      }                                                                                            \
      for (int c = 0; c < WT_NW; c++) sums[r * WT_NW + c] = wt_tree(acc[r][c]);                    \
    }                                                                                              \
  }

WT_KERNEL(wt_f32_r1, wt_ld_f32, 1)
WT_KERNEL(wt_f32_r4, wt_ld_f32, 4)
WT_KERNEL(wt_bf16_r1, wt_ld_bf16, 1)
WT_KERNEL(wt_bf16_r4, wt_ld_bf16, 4)
WT_KERNEL(wt_f16_r1, wt_ld_f16, 1)
WT_KERNEL(wt_f16_r4, wt_ld_f16, 4)

/* ---- MatMulWT: SIMD variants ----------------------------------------------------------------
 * Same summation order as the scalar kernels above, lane for lane: partial l of a dot product is
 * SIMD lane l (AVX-512: one zmm per dot product; AVX2: two ymm, lanes 0-7 and 8-15), the K % 16
 * tail goes to lanes 0 .. K % 16 - 1 with the other lanes left untouched (masked), and the tree
 * adds the upper half onto the lower half four times, which is the reference's l + 8, + 4, + 2,
 * + 1. The one difference is the fused multiply-add: each step rounds a * w + acc once instead
 * of twice. AVX2 and AVX-512 perform the same operations on the same lanes, so they agree bit
 * for bit. Every function that uses intrinsics carries the target attribute; the rest of the
 * library stays baseline x86-64, and other architectures get the scalar kernels only. */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define WT_X86 1
#include <immintrin.h>
#else
#define WT_X86 0
#endif

/* Most A rows per kernel call: AVX-512 keeps 6 x WT_NW accumulators, WT_NW weight vectors and
 * one A vector in its 32 registers. */
#define WT_RMAX 6

typedef void (*wt_kernel_fn)(const float *a, int64_t K, const unsigned char *const *w, float *sums);

/* One variant: kernels indexed [W dtype: f32, bf16, f16][rows per call], NULL where a variant
 * has no kernel for that row count (rows are then split into smaller calls; every call of a
 * variant computes each row with the same operations, so the split cannot change a bit). */
typedef struct wt_variant {
  const char *name;
  wt_kernel_fn k[3][WT_RMAX + 1];
} wt_variant;

#if WT_X86

#define WT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define WT_AVX2   __attribute__((target("avx2,fma,f16c")))
#define WT_INLINE __attribute__((always_inline)) inline
/* Fully unrolls the short register-tile loops (trip counts <= WT_RMAX, WT_NW) so that the
 * accumulator arrays live in registers; clang ignores the GCC spelling. */
#if defined(__clang__)
#define WT_UNROLL _Pragma("unroll")
#else
#define WT_UNROLL _Pragma("GCC unroll 8")
#endif

/* An address `bytes` past p for a prefetch only: computed as an integer, since it may lie past
 * the end of W where pointer arithmetic would be undefined (the prefetch itself never faults). */
static inline const char *wt_ahead(const unsigned char *p, int64_t bytes) {
  return (const char *)(uintptr_t)((uintptr_t)p + (uintptr_t)bytes);
}

/* -- AVX-512 -- */

/* 16 W elements at p (any alignment) as f32. bf16 and f16 conversions are exact. */
static WT_INLINE WT_AVX512 __m512 wt512_ld(const unsigned char *p, int wdt) {
  if (wdt == PH_DTYPE_BF16) {
    __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i_u *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
  }
  if (wdt == PH_DTYPE_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i_u *)p));
  return _mm512_loadu_ps(p);
}

/* The W elements at p that m selects (the first K % 16), zeros elsewhere; reads nothing else. */
static WT_INLINE WT_AVX512 __m512 wt512_ld_part(const unsigned char *p, int wdt, __mmask16 m) {
  if (wdt == PH_DTYPE_BF16) {
    __m512i u = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
  }
  if (wdt == PH_DTYPE_F16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  return _mm512_maskz_loadu_ps(m, p);
}

/* The reference tree over 16 lanes: (l, l + 8), then (l, l + 4), (l, l + 2), (l, l + 1). */
static WT_INLINE WT_AVX512 float wt512_tree(__m512 v) {
  __m256 lo = _mm512_castps512_ps256(v);
  __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  __m256 s8 = _mm256_add_ps(lo, hi);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

/* sums[r * WT_NW + c] = dot(A row r, W row c) for R rows of A (f32, K apart) and WT_NW W rows.
 * R and wdt are constants in every caller, so the loops unroll and acc stays in registers. */
static WT_INLINE WT_AVX512 void wt512_body(const float *a, int64_t K, const unsigned char *const *w,
                                           float *sums, int R, int wdt) {
  const int64_t es = wdt == PH_DTYPE_F32 ? 4 : 2;
  __m512 acc[WT_RMAX][WT_NW];
  WT_UNROLL
  for (int r = 0; r < R; r++) {
    WT_UNROLL
    for (int c = 0; c < WT_NW; c++) acc[r][c] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    __m512 wv[WT_NW];
    WT_UNROLL
    for (int c = 0; c < WT_NW; c++) wv[c] = wt512_ld(w[c] + k * es, wdt);
    /* W rows are consecutive in memory and a task walks them in groups of WT_NW: fetch the
     * same place in the next group, one line per stream per 64 bytes. A row of 2-4 KB is too
     * short a stream for the hardware prefetcher to ramp up on (measured: decode +20-25 %
     * bandwidth). */
    if (es == 4 || !(k & 16)) {
      WT_UNROLL
      for (int c = 0; c < WT_NW; c++)
        _mm_prefetch(wt_ahead(w[c], (k + WT_NW * K) * es), _MM_HINT_T0);
    }
    WT_UNROLL
    for (int r = 0; r < R; r++) {
      __m512 av = _mm512_loadu_ps(a + r * K + k);
      WT_UNROLL
      for (int c = 0; c < WT_NW; c++) acc[r][c] = _mm512_fmadd_ps(av, wv[c], acc[r][c]);
    }
  }
  if (k < K) {
    __mmask16 m = (__mmask16)((1u << (unsigned)(K - k)) - 1u);
    __m512 wv[WT_NW];
    WT_UNROLL
    for (int c = 0; c < WT_NW; c++) wv[c] = wt512_ld_part(w[c] + k * es, wdt, m);
    WT_UNROLL
    for (int r = 0; r < R; r++) {
      __m512 av = _mm512_maskz_loadu_ps(m, a + r * K + k);
      WT_UNROLL
      for (int c = 0; c < WT_NW; c++) acc[r][c] = _mm512_mask3_fmadd_ps(av, wv[c], acc[r][c], m);
    }
  }
  WT_UNROLL
  for (int r = 0; r < R; r++) {
    WT_UNROLL
    for (int c = 0; c < WT_NW; c++) sums[r * WT_NW + c] = wt512_tree(acc[r][c]);
  }
}

#define WT512_KERNEL(NAME, DT, R)                                                                  \
  static WT_AVX512 void NAME(const float *a, int64_t K, const unsigned char *const *w,             \
                             float *sums) {                                                        \
    wt512_body(a, K, w, sums, R, DT);                                                              \
  }
#define WT512_KERNELS(DTN, DT)                                                                     \
  WT512_KERNEL(wt_##DTN##_avx512_r1, DT, 1)                                                        \
  WT512_KERNEL(wt_##DTN##_avx512_r2, DT, 2)                                                        \
  WT512_KERNEL(wt_##DTN##_avx512_r3, DT, 3)                                                        \
  WT512_KERNEL(wt_##DTN##_avx512_r4, DT, 4)                                                        \
  WT512_KERNEL(wt_##DTN##_avx512_r5, DT, 5)                                                        \
  WT512_KERNEL(wt_##DTN##_avx512_r6, DT, 6)

WT512_KERNELS(f32, PH_DTYPE_F32)
WT512_KERNELS(bf16, PH_DTYPE_BF16)
WT512_KERNELS(f16, PH_DTYPE_F16)

/* -- AVX2 (16 ymm registers: one A row per call keeps 8 accumulators and 4 W vectors live) -- */

/* 8 W elements at p (any alignment) as f32, exactly. */
static WT_INLINE WT_AVX2 __m256 wt256_ld(const unsigned char *p, int wdt) {
  if (wdt == PH_DTYPE_BF16) {
    __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i_u *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
  }
  if (wdt == PH_DTYPE_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i_u *)p));
  return _mm256_loadu_ps((const float *)(const void *)p);
}

/* The reference tree over lanes lo (0-7) and hi (8-15). */
static WT_INLINE WT_AVX2 float wt256_tree(__m256 lo, __m256 hi) {
  __m256 s8 = _mm256_add_ps(lo, hi);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

static WT_INLINE WT_AVX2 void wt256_body(const float *a, int64_t K, const unsigned char *const *w,
                                         float *sums, int wdt) {
  const int64_t es = wdt == PH_DTYPE_F32 ? 4 : 2;
  __m256 lo[WT_NW], hi[WT_NW];
  WT_UNROLL
  for (int c = 0; c < WT_NW; c++) lo[c] = hi[c] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    if (es == 4 || !(k & 16)) { /* the next group's rows, one line per 64 bytes: see wt512_body */
      WT_UNROLL
      for (int c = 0; c < WT_NW; c++)
        _mm_prefetch(wt_ahead(w[c], (k + WT_NW * K) * es), _MM_HINT_T0);
    }
    __m256 av = _mm256_loadu_ps(a + k);
    WT_UNROLL
    for (int c = 0; c < WT_NW; c++)
      lo[c] = _mm256_fmadd_ps(av, wt256_ld(w[c] + k * es, wdt), lo[c]);
    av = _mm256_loadu_ps(a + k + 8);
    WT_UNROLL
    for (int c = 0; c < WT_NW; c++)
      hi[c] = _mm256_fmadd_ps(av, wt256_ld(w[c] + (k + 8) * es, wdt), hi[c]);
  }
  if (k < K) {
    /* the tail through zero-padded copies (no masked 16-bit loads in AVX2); the blend keeps the
     * lanes past the tail untouched, as the AVX-512 masked FMA does (-0 stays -0) */
    int n = (int)(K - k);
    float at[16] = {0}, wt[WT_NW][16] = {{0}};
    int32_t keep[16];
    for (int l = 0; l < 16; l++) keep[l] = l < n ? -1 : 0;
    for (int l = 0; l < n; l++) at[l] = a[k + l];
    for (int c = 0; c < WT_NW; c++)
      for (int l = 0; l < n; l++)
        wt[c][l] = wdt == PH_DTYPE_BF16  ? wt_ld_bf16(w[c], k + l)
                   : wdt == PH_DTYPE_F16 ? wt_ld_f16(w[c], k + l)
                                         : wt_ld_f32(w[c], k + l);
    __m256 mlo = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i_u *)keep));
    __m256 mhi = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i_u *)(keep + 8)));
    __m256 alo = _mm256_loadu_ps(at), ahi = _mm256_loadu_ps(at + 8);
    for (int c = 0; c < WT_NW; c++) {
      __m256 flo = _mm256_fmadd_ps(alo, _mm256_loadu_ps(wt[c]), lo[c]);
      __m256 fhi = _mm256_fmadd_ps(ahi, _mm256_loadu_ps(wt[c] + 8), hi[c]);
      lo[c] = _mm256_blendv_ps(lo[c], flo, mlo);
      hi[c] = _mm256_blendv_ps(hi[c], fhi, mhi);
    }
  }
  WT_UNROLL
  for (int c = 0; c < WT_NW; c++) sums[c] = wt256_tree(lo[c], hi[c]);
}

#define WT256_KERNEL(NAME, DT)                                                                     \
  static WT_AVX2 void NAME(const float *a, int64_t K, const unsigned char *const *w,               \
                           float *sums) {                                                          \
    wt256_body(a, K, w, sums, DT);                                                                 \
  }
WT256_KERNEL(wt_f32_avx2_r1, PH_DTYPE_F32)
WT256_KERNEL(wt_bf16_avx2_r1, PH_DTYPE_BF16)
WT256_KERNEL(wt_f16_avx2_r1, PH_DTYPE_F16)

#endif /* WT_X86 */

/* ---- MatMulWT: variant table and choice ---------------------------------------------------- */

static const wt_variant WT_VARIANTS[MATMUL_WT_N_VARIANTS] = {
    [MATMUL_WT_SCALAR] = {"scalar",
                          {{NULL, wt_f32_r1, NULL, NULL, wt_f32_r4},
                           {NULL, wt_bf16_r1, NULL, NULL, wt_bf16_r4},
                           {NULL, wt_f16_r1, NULL, NULL, wt_f16_r4}}},
#if WT_X86
    [MATMUL_WT_AVX2] = {"avx2",
                        {{NULL, wt_f32_avx2_r1}, {NULL, wt_bf16_avx2_r1}, {NULL, wt_f16_avx2_r1}}},
    [MATMUL_WT_AVX512] = {"avx512",
                          {{NULL, wt_f32_avx512_r1, wt_f32_avx512_r2, wt_f32_avx512_r3,
                            wt_f32_avx512_r4, wt_f32_avx512_r5, wt_f32_avx512_r6},
                           {NULL, wt_bf16_avx512_r1, wt_bf16_avx512_r2, wt_bf16_avx512_r3,
                            wt_bf16_avx512_r4, wt_bf16_avx512_r5, wt_bf16_avx512_r6},
                           {NULL, wt_f16_avx512_r1, wt_f16_avx512_r2, wt_f16_avx512_r3,
                            wt_f16_avx512_r4, wt_f16_avx512_r5, wt_f16_avx512_r6}}},
#else
    [MATMUL_WT_AVX2] = {"avx2", {{NULL}}},
    [MATMUL_WT_AVX512] = {"avx512", {{NULL}}},
#endif
};

const char *matmul_wt_variant_name(matmul_wt_variant v) {
  return (unsigned)v < MATMUL_WT_N_VARIANTS ? WT_VARIANTS[v].name : "?";
}

int matmul_wt_variant_available(matmul_wt_variant v) {
  if (v == MATMUL_WT_SCALAR) return 1;
  if (!WT_X86 || (unsigned)v >= MATMUL_WT_N_VARIANTS) return 0;
  const ph_cpu_features *f = cpu_features();
  int avx2 = f->avx2 && f->fma && f->f16c;
  if (v == MATMUL_WT_AVX2) return avx2;
  return avx2 && f->avx512f && f->avx512bw && f->avx512vl;
}

/* The best available variant not above want. */
static matmul_wt_variant wt_best_up_to(matmul_wt_variant want) {
  int v = (int)want;
  while (v > MATMUL_WT_SCALAR && !matmul_wt_variant_available((matmul_wt_variant)v)) v--;
  return (matmul_wt_variant)v;
}

static pthread_once_t wt_choice_once = PTHREAD_ONCE_INIT;
static matmul_wt_variant wt_choice;
static _Atomic int wt_forced = -1; /* matmul_wt_force_variant's choice, -1 while none */

/* Reads PH_KERNELS once (see op_matmul.h). */
static void wt_choose(void) {
  const char *env = getenv("PH_KERNELS");
  matmul_wt_variant want = MATMUL_WT_AVX512;
  if (env && *env && strcmp(env, "auto") != 0) {
    int known = 0;
    for (int v = 0; v < MATMUL_WT_N_VARIANTS; v++)
      if (strcmp(env, WT_VARIANTS[v].name) == 0) {
        want = (matmul_wt_variant)v;
        known = 1;
      }
    if (!known)
      LOG_WARN("PH_KERNELS=%s is not one of scalar, avx2, avx512, auto; choosing from the CPU",
               env);
  }
  wt_choice = wt_best_up_to(want);
  if (env && wt_choice != want && strcmp(env, WT_VARIANTS[want].name) == 0)
    LOG_WARN("PH_KERNELS=%s: this CPU cannot run it; MatMulWT uses %s", env,
             WT_VARIANTS[wt_choice].name);
}

matmul_wt_variant matmul_wt_variant_active(void) {
  int forced = atomic_load(&wt_forced);
  if (forced >= 0) return (matmul_wt_variant)forced;
  pthread_once(&wt_choice_once, wt_choose);
  return wt_choice;
}

ph_status matmul_wt_force_variant(matmul_wt_variant v, diag *d) {
  RETURN_ERROR_IF(!matmul_wt_variant_available(v), d, PH_ERR_UNSUPPORTED,
                  "MatMulWT: the %s kernels cannot run on this CPU or build",
                  matmul_wt_variant_name(v));
  atomic_store(&wt_forced, (int)v);
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
static void wt_task(void *ctx, size_t task, int thread) {
  const wt_job *j = ctx;
  int64_t c0 = (int64_t)task * WT_NB, c1 = min64(j->N, c0 + WT_NB);
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

/* Scratch: up to WT_MC rows of A in f32, then (f16 W with M > 1) WT_NW converted weight rows
 * per thread. The same size for every variant (only the scalar one uses the second part), so
 * the plan does not depend on the variant. */
static size_t wt_scratch_floats(int64_t M, int64_t K, ph_dtype w_dtype, int n_threads) {
  if (K <= 0 || M <= 0) return 0;
  size_t n = (size_t)min64(M, WT_MC) * (size_t)K;
  if (w_dtype == PH_DTYPE_F16 && M > 1)
    n += (size_t)(n_threads > 0 ? n_threads : 1) * WT_NW * (size_t)K;
  return n;
}

static size_t matmul_wt_scratch(const gnode *n, const tinfo *in, int n_threads) {
  (void)n;
  if (in[0].rank < 1) return 0;
  int64_t K = in[0].dims[in[0].rank - 1], M = 1;
  for (int i = 0; i + 1 < in[0].rank; i++) M *= in[0].dims[i];
  return wt_scratch_floats(M, K, in[1].dtype, n_threads) * sizeof(float);
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
  matmul_wt_variant v = matmul_wt_variant_active();
  const wt_variant *var = &WT_VARIANTS[v];
  j.k = var->k[w->dtype == PH_DTYPE_BF16 ? 1 : w->dtype == PH_DTYPE_F16 ? 2 : 0];
  j.k_f32 = var->k[0];
  size_t need = wt_scratch_floats(M, j.K, w->dtype, pool_threads(ctx->pool)) * sizeof(float);
  RETURN_ERROR_IF(ctx->scratch_bytes < need, d, PH_ERR_INTERNAL,
                  "MatMulWT: scratch of %zu bytes, need %zu", ctx->scratch_bytes, need);
  if (v == MATMUL_WT_SCALAR && w->dtype == PH_DTYPE_F16 && M > 1 && j.K > 0)
    j.w_f32 = (float *)ctx->scratch + min64(M, WT_MC) * j.K;
  /* with K == 0 the kernels read nothing, but still offset this pointer */
  static const float no_rows[1] = {0.0f};
  const float *abuf = j.K > 0 ? (const float *)ctx->scratch : no_rows;
  size_t n_tasks = (size_t)((j.N + WT_NB - 1) / WT_NB);
  for (int64_t m0 = 0; m0 < M; m0 += WT_MC) {
    j.rows = min64(WT_MC, M - m0);
    j.row0 = m0;
    if (j.K > 0) tensor_load_f32(a, m0 * j.K, j.rows * j.K, (float *)ctx->scratch);
    j.a = abuf;
    pool_run(ctx->pool, n_tasks, wt_task, &j);
  }
  return PH_OK;
}

const op_def op_def_matmul_wt = {
    "pagedhybrid.internal", "MatMulWT",       2, 3, 1, 1, matmul_wt_infer,
    matmul_wt_run,          matmul_wt_scratch};
