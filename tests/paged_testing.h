/* paged_testing — the paged-cache scaffolding of the PagedAttention tests (SEPARATE in
 * src/ops/test_ops_paged.c, LATENT in src/ops/test_ops_latent.c): shuffled physical pages, the
 * block table and slot_mapping a packed call reads (spec/abi.md §1), calls on part of a packed
 * call's rows, and the float64 pieces of the references written from abi.md §1.7/§1.8 (RoPE, the
 * softmax over a sequence's cache rows read through its block table), never from the kernels.
 *
 *   int32_t cu[PT_MAXB + 1];
 *   int64_t N, NP, MB, max_pos;
 *   tensor *bt = pt_block_table(B, ql, past, BS, &r, cu, &N, &NP, &MB, &max_pos);
 *   tensor *slots = pt_slot_mapping(B, ql, past, BS, cu, bt, N);   // every third row -1
 *   tensor *in1[17];
 *   pt_sub(in, cu, past, MB, 1, seq, start, count, in1);           // one sequence alone
 *   ...
 *   pt_sub_free(in1);
 *
 * Built on op_testing.h (tensors, op_test_run).
 */
#ifndef PH_TESTS_PAGED_TESTING_H
#define PH_TESTS_PAGED_TESTING_H

#include <math.h>
#include <string.h>

#include "op_testing.h"

#define PT_MAXB 4 /* sequences in one test call */

/* RoPE tables [max_pos, half] with base 10000, rounded to the tables' dtype. */
static inline void pt_fill_rope(tensor *cs, tensor *sn, int64_t max_pos, int64_t half) {
  for (int64_t p = 0; p < max_pos; p++)
    for (int64_t i = 0; i < half; i++) {
      double th = (double)p * pow(10000.0, -2.0 * (double)i / (double)(2 * half));
      tensor_set_f32(cs, p * half + i, (float)cos(th));
      tensor_set_f32(sn, p * half + i, (float)sin(th));
    }
}

/* The pages of B sequences (sequence b: past[b] cached tokens, ql[b] new rows): each gets
 * ceil((past + ql) / BS) pages from a shuffled list of NP = that total + 2 (two stay unused); its
 * table row is padded with -1 to MB = the longest + 1. Sets cu [B + 1] (cumulative ql), N (rows),
 * NP, MB and max_pos (the longest past + ql, + 3). Returns the block table, i32 [B, MB]; draws the
 * shuffle from r (B <= PT_MAXB, NP <= 256). */
static inline tensor *pt_block_table(int B, const int32_t *ql, const int32_t *past, int BS, rng *r,
                                     int32_t *cu, int64_t *N, int64_t *NP, int64_t *MB,
                                     int64_t *max_pos) {
  int64_t need = 0, maxblk = 1;
  cu[0] = 0;
  *max_pos = 0;
  for (int b = 0; b < B; b++) {
    cu[b + 1] = cu[b] + ql[b];
    int64_t nb = (past[b] + ql[b] + BS - 1) / BS;
    need += nb;
    if (nb > maxblk) maxblk = nb;
    if (past[b] + ql[b] > *max_pos) *max_pos = past[b] + ql[b];
  }
  *max_pos += 3;
  *N = cu[B];
  *NP = need + 2;
  *MB = maxblk + 1;
  int32_t perm[256];
  for (int64_t i = 0; i < *NP; i++) perm[i] = (int32_t)i;
  for (int64_t i = *NP - 1; i > 0; i--) {
    int64_t k = (int64_t)rng_below(r, (uint64_t)(i + 1));
    int32_t t = perm[i];
    perm[i] = perm[k];
    perm[k] = t;
  }
  int64_t btd[2] = {B, *MB};
  tensor *t = tensor_new(PH_DTYPE_I32, 2, btd);
  int32_t *bt = t->data;
  int64_t used = 0;
  for (int b = 0; b < B; b++) {
    int64_t nb = (past[b] + ql[b] + BS - 1) / BS;
    for (int64_t k = 0; k < *MB; k++) bt[b * *MB + k] = k < nb ? perm[used++] : -1;
  }
  return t;
}

/* The slot of sequence b's position p through its table row (abi.md §1). */
static inline int32_t pt_slot(const tensor *bt, int b, int64_t p, int BS) {
  const int32_t *row = (const int32_t *)bt->data + b * bt->dims[1];
  return row[p / BS] * BS + (int32_t)(p % BS);
}

/* The slot row `row` (sequence b, position p) writes, as the reference sees it: slot_mapping's
 * entry when slots is given, else the table's; -1 (no write) or the slot, then marked in
 * written. */
static inline int64_t pt_write_slot(const tensor *slots, const tensor *bt, int b, int64_t row,
                                    int64_t p, int BS, char *written) {
  const int64_t slot = slots ? ((const int32_t *)slots->data)[row] : pt_slot(bt, b, p, BS);
  if (slot >= 0) written[slot] = 1;
  return slot;
}

/* slot_mapping i32 [N]: each row's slot from the table, except every third row of a sequence
 * (j % 3 == 1), which skips its write (-1). */
static inline tensor *pt_slot_mapping(int B, const int32_t *ql, const int32_t *past, int BS,
                                      const int32_t *cu, const tensor *bt, int64_t N) {
  tensor *t = tensor_i32(N, NULL);
  int32_t *s = t->data;
  for (int b = 0; b < B; b++)
    for (int32_t j = 0; j < ql[b]; j++)
      s[cu[b] + j] = (j % 3 == 1) ? -1 : pt_slot(bt, b, past[b] + j, BS);
  return t;
}

/* The inputs of a call on part of a packed call's rows: for k < n_seq, sequence seq[k]'s local
 * rows [start[k], start[k] + count[k]) with past = past[seq[k]] + start[k] (cu, past: the full
 * call's) and its block table row. The per-row inputs present in full (0 query, 1 key, 2 value,
 * 10 slot_mapping) are sliced, 5/6/7 (cu, past, table) made; every other slot is full's, not
 * owned: pt_sub_free frees only what this made. */
static inline void pt_sub(tensor *const *full, const int32_t *cu, const int32_t *past, int64_t MB,
                          int n_seq, const int *seq, const int *start, const int *count,
                          tensor **in) {
  static const int rows[4] = {0, 1, 2, 10};
  memcpy(in, full, 17 * sizeof *in);
  int32_t cu1[PT_MAXB + 1] = {0}, past1[PT_MAXB];
  for (int k = 0; k < n_seq; k++) {
    cu1[k + 1] = cu1[k] + count[k];
    past1[k] = past[seq[k]] + start[k];
  }
  int64_t btd[2] = {n_seq, MB};
  in[5] = tensor_i32(n_seq + 1, cu1);
  in[6] = tensor_i32(n_seq, past1);
  in[7] = tensor_new(PH_DTYPE_I32, 2, btd);
  for (int k = 0; k < n_seq; k++)
    memcpy((int32_t *)in[7]->data + k * MB, (const int32_t *)full[7]->data + seq[k] * MB,
           (size_t)MB * sizeof(int32_t));
  for (int i = 0; i < 4; i++) {
    const tensor *f = full[rows[i]];
    if (!f) continue;
    int64_t dims[TENSOR_MAX_DIMS];
    memcpy(dims, f->dims, sizeof(int64_t) * (size_t)f->rank);
    dims[0] = cu1[n_seq];
    tensor *t = in[rows[i]] = tensor_new(f->dtype, f->rank, dims);
    const size_t row = tensor_bytes(f) / (size_t)f->dims[0];
    for (int k = 0; k < n_seq; k++)
      memcpy((char *)t->data + (size_t)cu1[k] * row,
             (const char *)f->data + (size_t)(cu[seq[k]] + start[k]) * row, (size_t)count[k] * row);
  }
}

static inline void pt_sub_free(tensor **in) {
  static const int made[7] = {0, 1, 2, 5, 6, 7, 10};
  for (int i = 0; i < 7; i++) {
    tensor_free(in[made[i]]);
    in[made[i]] = NULL;
  }
}

/* Runs node n on in (outputs allocated and freed here): its status. */
static inline ph_status pt_try(const gnode *n, tensor **in, diag *d) {
  tensor *o[3] = {NULL, NULL, NULL};
  ph_status s = op_test_run(n, in, o, 1, d);
  tensors_free(o, 3);
  return s;
}

/* RoPE (abi.md §1.7 step 1) in double on the r channels y[0 .. r) at position p: pairs (i, i + r/2)
 * or, interleaved, (2i, 2i + 1), rotated by the tables' entry p. */
static inline void pt_rope_f64(double *y, int64_t r, int interleaved, const tensor *cs,
                               const tensor *sn, int64_t p) {
  const int64_t h = r / 2;
  for (int64_t i = 0; i < h; i++) {
    int64_t ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + h;
    double c = tensor_at(cs, p * h + i), s = tensor_at(sn, p * h + i);
    double a = y[ia], b = y[ib];
    y[ia] = a * c - b * s;
    y[ib] = b * c + a * s;
  }
}

/* One query row attending its sequence's positions [lo, p] in double (abi.md §1.7 step 3):
 * position t's key is kc[slot * stride .. + dk), its value vc[slot * stride .. + dv), slot from
 * table row bt_row; scores q.k scale, through softcap c tanh(s / c) when softcap > 0, an optional
 * sink logit in the denominator; out[0 .. dv). sc: scratch of p - lo + 1 doubles. */
static inline void pt_attend_f64(const double *q, int64_t dk, const double *kc, const double *vc,
                                 int64_t stride, int64_t dv, const int32_t *bt_row, int64_t BS,
                                 int64_t lo, int64_t p, double scale, double softcap,
                                 const double *sink, double *sc, double *out) {
  double m = -INFINITY;
  for (int64_t t = lo; t <= p; t++) {
    const int64_t slot = (int64_t)bt_row[t / BS] * BS + t % BS;
    double dot = 0.0;
    for (int64_t e = 0; e < dk; e++) dot += q[e] * kc[slot * stride + e];
    double s = dot * scale;
    if (softcap > 0.0) s = softcap * tanh(s / softcap);
    sc[t - lo] = s;
    if (s > m) m = s;
  }
  if (sink && *sink > m) m = *sink;
  double den = sink ? exp(*sink - m) : 0.0;
  for (int64_t t = lo; t <= p; t++) den += exp(sc[t - lo] - m);
  for (int64_t e = 0; e < dv; e++) {
    double acc = 0.0;
    for (int64_t t = lo; t <= p; t++) {
      const int64_t slot = (int64_t)bt_row[t / BS] * BS + t % BS;
      acc += exp(sc[t - lo] - m) * vc[slot * stride + e];
    }
    out[e] = acc / den;
  }
}

/* The tolerance of one written key element whose float64 value is ref: f32_part (the f32
 * arithmetic before the store) in f32; in f16/bf16 plus one ulp of the element (the f32 value
 * and the float64 one may straddle a rounding boundary). */
static inline double pt_key_tol(ph_dtype dt, double ref, double f32_part) {
  if (dt == PH_DTYPE_F32) return f32_part;
  int e;
  frexp(fabs(ref), &e); /* |ref| in [2^(e-1), 2^e) */
  const int mant = dt == PH_DTYPE_F16 ? 10 : 7, emin = dt == PH_DTYPE_F16 ? -14 : -126;
  return ldexp(1.0, (e - 1 < emin ? emin : e - 1) - mant) + f32_part;
}

#endif /* PH_TESTS_PAGED_TESTING_H */
