/* attend — the softmax attention of one query row over a run of key/value rows: the one compute
 * core of PagedAttention (rows read through a sequence's block table) and GroupQueryAttention
 * (rows contiguous in present_key/present_value).
 *
 * Single-threaded and pure: a function of pointers, strides and sizes. The op owns everything
 * around it: validating, preparing the query (fused RMSNorm, RoPE), writing the new keys and
 * values, which rows a query sees (causal, local window), where the output goes and its
 * rounding, and the split over (sequence, head) tasks.
 *
 * Numerics: f32 throughout (keys and values converted to f32 exactly as they are read); every
 * sum runs in increasing row or element order, so a row's result depends on its inputs only,
 * never on the batch, the thread or the addressing (paged and contiguous give the same bits).
 */
#ifndef PH_KERNELS_ATTEND_H
#define PH_KERNELS_ATTEND_H

#include <stdint.h>

#include "tensor/dtype.h"

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

/* Softmax attention of one query row q[D] (already normalised and rotated; scale is applied
 * here) over key rows t in [lo, hi] (lo <= hi), values Dv = kv->v_width (or D) wide:
 *   s_t = (Σ_e q_e k_te, in increasing e) * scale, then softcap * tanh(s_t / softcap) when
 *         softcap > 0;
 *   m   = max_t s_t, and *sink when sink is not NULL and larger;
 *   acc = Σ_t e^{s_t - m} v_t / (Σ_t e^{s_t - m} + e^{*sink - m}), sums in increasing t, the
 *         sink term (when given) joining the denominator only.
 * Work buffers: scores[hi - lo + 1], row[D]; acc[Dv] receives the result. */
void attend_row(const float *q, int64_t D, int64_t lo, int64_t hi, float scale, float softcap,
                const float *sink, const attend_kv *kv, float *scores, float *row, float *acc);

#endif /* PH_KERNELS_ATTEND_H */
