/* attend — softmax attention of a tile of query rows over runs of key/value rows of one kv head:
 * the one compute core of PagedAttention (rows read through a sequence's block table) and
 * GroupQueryAttention (rows contiguous in present_key/present_value).
 *
 * Single-threaded and pure: a function of pointers, strides and sizes. The op owns everything
 * around it: validating, preparing the query (fused RMSNorm, RoPE), writing the new keys and
 * values, which rows a query sees (causal, local window), which rows share a tile, where the
 * output goes and its rounding, and the split over tasks.
 *
 * Blocked, online softmax. Every query row takes its keys lo..hi in key blocks anchored at key
 * 0: block j is keys [j * ATTEND_KB, (j + 1) * ATTEND_KB) clipped to lo..hi, in increasing j.
 * Per row (m = -inf, l = 0, acc = 0 at the start), for each of its blocks:
 *   s_t   = (fma chain Σ_e q_e k_te in increasing e, from 0) * scale, then
 *           softcap * tanhf(s_t / softcap) when softcap > 0;
 *   m'    = max(m, max_t s_t);  α = 1 when m' == m, else attend_expf(m - m');
 *   l     = l * α, then l = l + p_t in increasing t, p_t = attend_expf(s_t - m');
 *   acc_e = acc_e * α, then acc_e = fma(p_t, v_te, acc_e) in increasing t;  m = m'.
 * At the end, with a sink: m2 = max(m, sink), a = (m2 == m ? 1 : attend_expf(m - m2)),
 * l = l * a + attend_expf(sink - m2), out_e = (acc_e * a) / l; without one out_e = acc_e / l.
 *
 * That sequence of IEEE operations is a function of the row alone (its q, lo, hi, sink and the
 * key/value rows), never of the other rows in the tile, the tile size, the row's place in it,
 * the batch, the thread or the addressing (paged and contiguous give the same bits). Every
 * variant performs exactly these operations, so every variant gives the same bits as the scalar
 * one (test_kernels checks it, and that a row alone gives the bits it gets in any tile).
 *
 * Keys and values are converted to f32 exactly as they are read (f32, f16 or bf16). Only rows
 * in [min lo, max hi] of a tile are read, so a tile never touches a page none of its rows sees.
 */
#ifndef PH_KERNELS_ATTEND_H
#define PH_KERNELS_ATTEND_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dispatch.h"
#include "tensor/dtype.h"

enum {
  ATTEND_KB = 32,      /* keys per block (a multiple of 16) */
  ATTEND_MAX_ROWS = 16 /* query rows per call (one 16-lane vector of rows) */
};

/* Where key row t and value row t of one kv head lie (D key elements, Dv value elements, dtype
 * dt).
 *   contiguous (pages NULL): element t * row_stride from k (and from v);
 *   paged: row t is row t % page_rows of page pages[t / page_rows], at element
 *          (pages[t / page_rows] * page_rows + t % page_rows) * row_stride from k (and v).
 * k and v point at the head's first element (row 0, or page 0's row 0). They may be the same
 * pointer: absorbed multi-head latent attention (PagedAttention LATENT) reads each value as the
 * first Dv elements of its key row. */
typedef struct attend_kv {
  const void *k, *v;
  int64_t v_width;      /* Dv, elements of each value row (1 <= Dv <= D); 0 means D */
  ph_dtype dt;          /* f32, f16 or bf16 */
  int64_t row_stride;   /* elements from one row to the next (within a page) */
  const int32_t *pages; /* NULL: contiguous; else the page of each block of page_rows rows */
  int64_t page_rows;    /* rows per page (paged only, >= 1) */
} attend_kv;

/* One query row of a tile: q[D] already normalised and rotated (scale is applied here), keys
 * lo..hi (0 <= lo <= hi), the head's sink logit or NULL, and where its Dv outputs go. */
typedef struct attend_query {
  const float *q;
  int64_t lo, hi;
  const float *sink;
  float *out;
} attend_query;

/* Attention of rows[0 .. n_rows) (1 <= n_rows <= ATTEND_MAX_ROWS) over the keys/values of kv,
 * as the top of this file writes it. work: attend_work_floats(D, Dv) floats, any alignment. */
typedef void (*attend_rows_fn)(const attend_kv *kv, int64_t D, float scale, float softcap,
                               const attend_query *rows, int n_rows, float *work);

/* Floats of work one call needs for head size D and value width Dv. */
size_t attend_work_floats(int64_t D, int64_t Dv);

/* The implementation variant v runs (the scalar one where v has none of its own). */
attend_rows_fn attend_rows_for(kernel_variant v);

/* The portable variant: one row at a time, in plain C. */
void attend_rows_scalar(const attend_kv *kv, int64_t D, float scale, float softcap,
                        const attend_query *rows, int n_rows, float *work);

/* e^x as every variant computes it (exactly these operations, so all agree bit for bit):
 * 0 for x < -80 (and -inf); NaN stays NaN; else n = rint(x * log2 e), r = x - n ln2 (two fmas,
 * ln2 split hi/lo), the degree-7 Taylor polynomial of e^r in Horner form with fmas, times 2^n.
 * Within 2 ulp of e^x for x in [-80, 0] (test_kernels measures it). */
float attend_expf(float x);

#define ATTEND_EXP_MIN (-80.0f)
#define ATTEND_LOG2E   1.44269504088896341f
#define ATTEND_LN2_HI  0.693145751953125f
#define ATTEND_LN2_LO  1.42860682030941723212e-6f
#define ATTEND_EXP_C7  (1.0f / 5040.0f)
#define ATTEND_EXP_C6  (1.0f / 720.0f)
#define ATTEND_EXP_C5  (1.0f / 120.0f)
#define ATTEND_EXP_C4  (1.0f / 24.0f)
#define ATTEND_EXP_C3  (1.0f / 6.0f)
#define ATTEND_EXP_C2  0.5f

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* The avx2 variant: the portable code built for AVX2+FMA (same operations, same bits). */
void attend_rows_avx2(const attend_kv *kv, int64_t D, float scale, float softcap,
                      const attend_query *rows, int n_rows, float *work);
/* The AVX-512 F/BW/VL variant: the rows of a tile in the lanes of one vector. */
void attend_rows_avx512(const attend_kv *kv, int64_t D, float scale, float softcap,
                        const attend_query *rows, int n_rows, float *work);
#endif

#endif /* PH_KERNELS_ATTEND_H */
