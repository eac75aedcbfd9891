/* test_ops_latent — PagedAttention with kv_cache_layout LATENT (absorbed multi-head latent
 * attention, spec/abi.md §1.8 and the node of §9.1), its in-op RoPE and slot_mapping.
 *
 * - A grid (query heads 1/4, latent width l 16/32, rope width r 0/16, block size 16/32, both
 *   rotary pairings, slot_mapping with -1 rows or derived slots; f32, plus f16/bf16 and f32 cos/sin
 *   tables under f16) against a float64 loop written here from abi.md §1.7/§1.8, never from the
 *   kernel, over three sequences on shuffled physical pages prefilled with garbage: untouched slots
 *   stay bit-identical, written ones hold the rotated key. Then the same rows split into a prefill
 *   and a continuation call give the one-call bits (outputs and cache), every sequence alone gives
 *   its packed bits (batch invariance), 3 threads and a non-aliased cache output give 1 thread's.
 * - Absorption: decomposed MLA (per-head k_nope = W_UK c, v = W_UV c) against the absorbed form
 *   (q_lat = W_UK^T q_nope, attention over the latent rows, then W_UV o_lat) in float64, then the
 * op in f32 on the absorbed inputs against the decomposed float64 result.
 * - do_rotary = 1 against RotaryEmbedding on the rope channels followed by do_rotary = 0.
 * - Every LATENT refusal: status and a message naming the input or attribute.
 *
 * Tolerances (u = 2^-24; inputs in [-1, 1], so |q.k| <= D and values |v| <= 1):
 *  - the output against the float64 reference (la_tol): f32: a sum of n f32 terms is within n u of
 *    exact relative to its terms' magnitudes (Higham §3.1); the longest chains are the D <= 48 term
 *    scores, scaled (scale <= 0.25, so scores <= 12 and e^{s - m} carries at most 12 u of absolute
 *    score error relative), the rotation (3 u) and the softmax sums over <= 60 keys: about
 *    (48 + 3) x 0.25 x 48 u + 2 x 60 u = 730 u = 4.4e-5 relative; 1e-4. f16/bf16: the reference
 *    reads the same stored inputs and rounds the rotated key to the dtype as the op does, so what
 *    remains is the output's one rounding (half an ulp), one ulp of a key element where the f32
 *    and float64 values straddle a rounding boundary (a score moves by ulp x |q_e| x scale, far
 *    below an output ulp) and the f32 part: 4 ulps of the output scale, f16 4 x 2^-11 = 2e-3,
 *    bf16 4 x 2^-8 = 1.6e-2. The worst error / tolerance is printed at the end.
 *  - a written key element: the rotation's two products and one sum (3 u of max |a c|, |b s| <= 1)
 *    in f32; in f16/bf16 plus one ulp of the element (the f32 value and the float64 one may
 *    straddle a rounding boundary). The latent part is copied: exact.
 *  - absorption: the float64 forms agree to 1e-12 relative (the bound the seed asks for is 1e-6);
 *    the f32 op's bound is derived per head in test_latent_absorption.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "kernels/attend.h"
#include "paged_testing.h"

static double worst_out = 0.0, worst_absorb_f64 = 0.0, worst_absorb_f32 = 0.0;

/* ================================ the LATENT node and its inputs ============================== */

typedef struct la_case {
  ph_dtype dt;
  int Hq, l, r, BS, B;
  int32_t ql[PT_MAXB], past[PT_MAXB];
  int interleaved, slots, cos_f32;
  float scale; /* 0: (l + r)^-0.5 */
} la_case;

typedef struct la_io {
  tensor *in[17], *out[2];
  tensor *kc0; /* the cache before the call */
  gattr attrs[10];
  gnode node;
  int32_t cu[PT_MAXB + 1];
  int64_t D, N, NP, MB, max_pos;
  float scale;
} la_io;

/* The node as abi.md §9.1 emits it: 17 input slots (2, 4, 11-16 empty; 8/9 empty when r = 0),
 * 2 outputs, the attributes of the Mobius emitter. */
static void la_node(const la_case *c, la_io *io, int n_outputs) {
  int na = 0;
  io->attrs[na++] = attr_int("num_heads", c->Hq);
  io->attrs[na++] = attr_int("kv_num_heads", 1);
  io->attrs[na++] = attr_float("scale", io->scale);
  io->attrs[na++] = attr_string("kv_cache_layout", "LATENT");
  io->attrs[na++] = attr_int("v_head_size", c->l);
  io->attrs[na++] = attr_int("rotary_offset", c->l);
  io->attrs[na++] = attr_int("do_rotary", c->r > 0);
  io->attrs[na++] = attr_int("rotary_interleaved", c->interleaved);
  io->node = op_test_node("PagedAttention", "com.microsoft", 17, n_outputs, io->attrs, na);
}

/* Pages: each sequence gets ceil((past+ql)/BS) pages from a shuffled list, two stay unused; table
 * rows padded with -1. The cache is garbage everywhere (the "past" keys are that garbage). With
 * slots, every third row of a sequence skips its write (-1); the others write where the table
 * says. */
static void la_build(const la_case *c, la_io *io, uint64_t seed) {
  memset(io, 0, sizeof *io);
  rng r = rng_seed(seed);
  io->D = c->l + c->r;
  io->scale = c->scale != 0.0f ? c->scale : (float)(1.0 / sqrt((double)io->D));
  tensor *bt = pt_block_table(c->B, c->ql, c->past, c->BS, &r, io->cu, &io->N, &io->NP, &io->MB,
                              &io->max_pos);
  int64_t qd[2] = {io->N, c->Hq * io->D}, kd[2] = {io->N, io->D};
  int64_t cd[4] = {io->NP, c->BS, 1, io->D};
  io->in[0] = tensor_new(c->dt, 2, qd);
  tensor_fill_uniform(io->in[0], &r, -1.0f, 1.0f);
  io->in[1] = tensor_new(c->dt, 2, kd);
  tensor_fill_uniform(io->in[1], &r, -1.0f, 1.0f);
  io->in[3] = tensor_new(c->dt, 4, cd);
  tensor_fill_uniform(io->in[3], &r, -1.0f, 1.0f);
  io->in[5] = tensor_i32(c->B + 1, io->cu);
  io->in[6] = tensor_i32(c->B, c->past);
  io->in[7] = bt;
  if (c->r > 0) {
    int64_t rd[2] = {io->max_pos, c->r / 2};
    const ph_dtype cdt = c->cos_f32 ? PH_DTYPE_F32 : c->dt;
    io->in[8] = tensor_new(cdt, 2, rd);
    io->in[9] = tensor_new(cdt, 2, rd);
    pt_fill_rope(io->in[8], io->in[9], io->max_pos, c->r / 2);
  }
  if (c->slots) io->in[10] = pt_slot_mapping(c->B, c->ql, c->past, c->BS, io->cu, bt, io->N);
  io->kc0 = tensor_clone(io->in[3]);
  la_node(c, io, 2);
}

static void la_free(la_io *io) {
  tensors_free(io->in, 17);
  tensors_free(io->out, 2);
  tensor_free(io->kc0);
  io->kc0 = NULL;
}

/* The inputs of a call on part of io's rows (pt_sub): cache, cos and sin are io's. */
static void la_sub(const la_case *c, const la_io *io, int n_seq, const int *seq, const int *start,
                   const int *count, tensor **in) {
  pt_sub(io->in, io->cu, c->past, io->MB, n_seq, seq, start, count, in);
}

/* ==================================== float64 reference ===================================== */

/* RoPE (abi.md §1.7 step 1) on x[l .. l + r) at position p, in double. */
static void ref_rope(const la_case *c, const la_io *io, double *x, int64_t p) {
  pt_rope_f64(x + c->l, c->r, c->interleaved, io->in[8], io->in[9], p);
}

/* abi.md §1.8: the key rows (rotated suffix, rounded to the dtype) go to their slots; then every
 * query head attends its sequence's cache rows read through the block table, values = the rows'
 * first l elements. kc: the cache as doubles (from io->kc0); written[slot] marks writes. */
static void la_reference(const la_case *c, const la_io *io, double *out, double *kc,
                         char *written) {
  const int64_t D = io->D, l = c->l, Hq = c->Hq, BS = c->BS;
  const int32_t *bt = io->in[7]->data;
  for (int64_t i = 0; i < io->NP * BS * D; i++) kc[i] = tensor_at(io->kc0, i);
  double x[128];
  for (int b = 0; b < c->B; b++)
    for (int32_t j = 0; j < c->ql[b]; j++) {
      const int64_t row = io->cu[b] + j, p = c->past[b] + j;
      const int64_t slot =
          pt_write_slot(c->slots ? io->in[10] : NULL, io->in[7], b, row, p, c->BS, written);
      if (slot < 0) continue;
      for (int64_t e = 0; e < D; e++) x[e] = tensor_at(io->in[1], row * D + e);
      if (c->r > 0) ref_rope(c, io, x, p);
      for (int64_t e = 0; e < D; e++) kc[slot * D + e] = round_to_dtype(c->dt, x[e]);
    }
  double *sc = calloc((size_t)(io->MB * BS), sizeof(double));
  for (int b = 0; b < c->B; b++)
    for (int32_t j = 0; j < c->ql[b]; j++) {
      const int64_t row = io->cu[b] + j, p = c->past[b] + j;
      for (int64_t h = 0; h < Hq; h++) {
        for (int64_t e = 0; e < D; e++) x[e] = tensor_at(io->in[0], (row * Hq + h) * D + e);
        if (c->r > 0) ref_rope(c, io, x, p);
        pt_attend_f64(x, D, kc, kc, D, l, bt + b * io->MB, BS, 0, p, (double)io->scale, 0.0, NULL,
                      sc, out + (row * Hq + h) * l);
      }
    }
  free(sc);
}

static double la_tol(ph_dtype dt) {
  return dt == PH_DTYPE_F32 ? 1e-4 : dt == PH_DTYPE_F16 ? 2e-3 : 1.6e-2; /* see the top */
}

/* One written key element whose float64 value is ref (see the top): the rotation's 3 u. */
static double key_tol(ph_dtype dt, double ref) { return pt_key_tol(dt, ref, 3.0 * 0x1p-24); }

/* out and the cache after the call (kcache) against the reference. */
static void la_check(const la_case *c, const la_io *io, const tensor *out, const tensor *kcache,
                     const char *name) {
  const int64_t D = io->D, nslot = io->NP * c->BS, nout = io->N * c->Hq * c->l;
  double *kc = calloc((size_t)(nslot * D), sizeof(double));
  double *ro = calloc((size_t)nout + 1, sizeof(double));
  char *written = calloc((size_t)nslot, 1);
  la_reference(c, io, ro, kc, written);
  CHECK_EQ_INT(tensor_numel(out), nout);
  double scale = 0.0, err = tensor_max_abs_diff(out, ro, nout, &scale);
  const double tol = la_tol(c->dt) * (scale > 1.0 ? scale : 1.0);
  CHECK(err <= tol);
  if (!(err <= tol)) fprintf(stderr, "       %s: output err %g tol %g\n", name, err, tol);
  if (err / tol > worst_out) worst_out = err / tol;
  int untouched_ok = 1;
  int64_t key_bad = 0, copy_bad = 0;
  const size_t es = dtype_size(c->dt);
  for (int64_t s = 0; s < nslot; s++) {
    if (!written[s]) {
      if (memcmp((char *)kcache->data + (size_t)(s * D) * es,
                 (char *)io->kc0->data + (size_t)(s * D) * es, (size_t)D * es) != 0)
        untouched_ok = 0;
      continue;
    }
    for (int64_t e = 0; e < D; e++) {
      const double kv = tensor_at(kcache, s * D + e), ref = kc[s * D + e];
      if (e < c->l && kv != ref) copy_bad++; /* the latent part is a copy */
      if (!(fabs(kv - ref) <= key_tol(c->dt, ref))) key_bad++;
    }
  }
  CHECK(untouched_ok);
  CHECK_EQ_INT(copy_bad, 0);
  CHECK_EQ_INT(key_bad, 0);
  free(kc);
  free(ro);
  free(written);
}

/* One case: the whole call in place against the reference; 3 threads + a non-aliased cache
 * output; each sequence alone; prefill + continuation split of every sequence. */
static void la_run_case(const la_case *c, uint64_t seed) {
  char name[160];
  snprintf(name, sizeof name, "LATENT %s Hq=%d l=%d r=%d BS=%d interleaved=%d slots=%d cos_f32=%d",
           ph_dtype_name(c->dt), c->Hq, c->l, c->r, c->BS, c->interleaved, c->slots, c->cos_f32);
  la_io io;
  la_build(c, &io, seed);
  diag d = {0};
  tensor *kc = io.in[3];
  io.out[1] = kc; /* aliased, as the executor binds it */
  CHECK_STATUS(op_test_run(&io.node, io.in, io.out, 1, &d), PH_OK, d.msg);
  io.out[1] = NULL;
  if (!io.out[0]) {
    fprintf(stderr, "       %s\n", name);
    la_free(&io);
    return;
  }
  tensor *after = tensor_clone(kc);
  memcpy(kc->data, io.kc0->data, tensor_bytes(kc));
  la_check(c, &io, io.out[0], after, name);

  /* non-aliased cache output and 3 threads: the same bits; the input cache untouched */
  tensor *o3[2] = {NULL, NULL};
  CHECK_STATUS(op_test_run(&io.node, io.in, o3, 3, &d), PH_OK, d.msg);
  CHECK(tensor_same_bits(o3[0], io.out[0]) && tensor_same_bits(o3[1], after));
  CHECK(tensor_same_bits(kc, io.kc0));
  tensors_free(o3, 2);

  /* each sequence alone: its rows of the packed output, bit for bit */
  const size_t es = dtype_size(c->dt), orow = (size_t)(c->Hq * c->l) * es;
  for (int b = 0; b < c->B; b++) {
    if (c->ql[b] == 0) continue;
    tensor *in1[17], *o1[2] = {NULL, NULL};
    const int seq[1] = {b}, st[1] = {0}, cnt[1] = {c->ql[b]};
    la_sub(c, &io, 1, seq, st, cnt, in1);
    in1[3] = tensor_clone(io.kc0);
    CHECK_STATUS(op_test_run(&io.node, in1, o1, 2, &d), PH_OK, d.msg);
    if (o1[0]) {
      const int ok = memcmp(o1[0]->data, (char *)io.out[0]->data + (size_t)io.cu[b] * orow,
                            (size_t)c->ql[b] * orow) == 0;
      CHECK(ok); /* batch invariance */
      if (!ok) fprintf(stderr, "       %s: sequence %d alone differs\n", name, b);
    }
    tensors_free(o1, 2);
    tensor_free(in1[3]);
    pt_sub_free(in1);
  }

  /* prefill + continuation: the first half of every sequence's rows, then the rest on the cache
   * the first call left: the one-call output rows and final cache, bit for bit */
  {
    int seq[PT_MAXB], st1[PT_MAXB], n1[PT_MAXB], st2[PT_MAXB], n2[PT_MAXB];
    for (int b = 0; b < c->B; b++) {
      seq[b] = b;
      st1[b] = 0;
      n1[b] = c->ql[b] / 2;
      st2[b] = n1[b];
      n2[b] = c->ql[b] - n1[b];
    }
    tensor *a[17], *bb[17], *oa[2] = {NULL, NULL}, *ob[2] = {NULL, NULL};
    la_sub(c, &io, c->B, seq, st1, n1, a);
    la_sub(c, &io, c->B, seq, st2, n2, bb);
    tensor *cache = tensor_clone(io.kc0);
    a[3] = bb[3] = oa[1] = ob[1] = cache;
    CHECK_STATUS(op_test_run(&io.node, a, oa, 1, &d), PH_OK, d.msg);
    CHECK_STATUS(op_test_run(&io.node, bb, ob, 2, &d), PH_OK, d.msg);
    CHECK(tensor_same_bits(cache, after));
    int ok = oa[0] && ob[0];
    for (int b = 0; ok && b < c->B; b++) {
      const char *full = (const char *)io.out[0]->data + (size_t)io.cu[b] * orow;
      const int32_t *cua = a[5]->data, *cub = bb[5]->data;
      ok = memcmp((char *)oa[0]->data + (size_t)cua[b] * orow, full, (size_t)n1[b] * orow) == 0 &&
           memcmp((char *)ob[0]->data + (size_t)cub[b] * orow, full + (size_t)n1[b] * orow,
                  (size_t)n2[b] * orow) == 0;
    }
    CHECK(ok);
    if (!ok) fprintf(stderr, "       %s: prefill + continuation differs from one call\n", name);
    tensor_free(oa[0]);
    tensor_free(ob[0]);
    tensor_free(cache);
    pt_sub_free(a);
    pt_sub_free(bb);
  }
  tensor_free(after);
  la_free(&io);
}

/* ========================================== tests =========================================== */

static void test_latent_grid(void) {
  static const int heads[2] = {1, 4}, ls[2] = {16, 32}, rs[2] = {0, 16}, bss[2] = {16, 32};
  uint64_t seed = 1000;
  for (int hi = 0; hi < 2; hi++)
    for (int li = 0; li < 2; li++)
      for (int ri = 0; ri < 2; ri++)
        for (int bi = 0; bi < 2; bi++)
          for (int il = 0; il < (rs[ri] > 0 ? 2 : 1); il++)
            for (int sl = 0; sl < 2; sl++) {
              la_case c = {.dt = PH_DTYPE_F32,
                           .Hq = heads[hi],
                           .l = ls[li],
                           .r = rs[ri],
                           .BS = bss[bi],
                           .B = 3,
                           .ql = {5, 1, 37},
                           .past = {0, 3, 20},
                           .interleaved = il,
                           .slots = sl};
              la_run_case(&c, seed++);
            }
}

static void test_latent_dtypes(void) {
  /* clang-format off */
  /* dtype, query heads, latent width l, rope width r, block size, sequences, new rows,
   * cached rows */
  la_case cs[] = {
      {.dt = PH_DTYPE_F16,  4, 32, 16, 16, 3, {7, 0, 19},    {9, 2, 0}, .interleaved = 1,
       .slots = 1},
      {.dt = PH_DTYPE_BF16, 2, 16, 16, 32, 2, {12, 30},      {40, 0}, .interleaved = 0},
      /* f32 cos/sin tables under f16 activations */
      {.dt = PH_DTYPE_F16,  4, 16, 16, 16, 2, {3, 21},       {5, 17}, .interleaved = 0,
       .cos_f32 = 1},
      /* an explicit scale, and one more sequence */
      {.dt = PH_DTYPE_F32,  3, 16, 16, 16, 4, {2, 9, 1, 16}, {30, 0, 47, 16}, .interleaved = 1,
       .slots = 1, .scale = 0.11f},
  };
  /* clang-format on */
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) la_run_case(&cs[i], 2000 + i);
}

/* ---- absorption ---- */

/* Absorbed vs decomposed MLA in float64, then the op in f32 on the absorbed inputs.
 * Per head h: W_UK[h] [dn, l] (key "nope" rows), W_UV[h] [dv, l]; per token: q_nope[h] [dn],
 * q_pe[h] [r], latent c [l], k_pe [r] (q_pe and k_pe before RoPE, which both forms apply at the
 * token's position); scale = (dn + r)^-0.5, the decomposed head's.
 *   decomposed: k_t = [W_UK c_t ; rope(k_pe_t)], q = [q_nope ; rope(q_pe)], v_t = W_UV c_t,
 *               out = Σ_t softmax_t(q.k_t scale) v_t;
 *   absorbed:   q_lat = W_UK^T q_nope, score_t = (q_lat.c_t + rope(q_pe).rope(k_pe_t)) scale,
 *               o_lat = Σ_t softmax_t c_t, out = W_UV o_lat. */
static void test_latent_absorption(void) {
  enum { NH = 4, DN = 24, DV = 20, L = 32, R = 16, D = L + R, BS = 16, B = 2 };
  const int32_t ql[B] = {9, 21};
  rng r = rng_seed(0xab50);
  double wuk[NH][DN][L], wuv[NH][DV][L];
  for (int h = 0; h < NH; h++) {
    for (int i = 0; i < DN; i++)
      for (int e = 0; e < L; e++) wuk[h][i][e] = rng_range(&r, -1.0f, 1.0f) / sqrt((double)L);
    for (int i = 0; i < DV; i++)
      for (int e = 0; e < L; e++) wuv[h][i][e] = rng_range(&r, -1.0f, 1.0f) / sqrt((double)L);
  }
  la_case c = {.dt = PH_DTYPE_F32,
               .Hq = NH,
               .l = L,
               .r = R,
               .BS = BS,
               .B = B,
               .ql = {ql[0], ql[1]},
               .interleaved = 0,
               .scale = (float)(1.0 / sqrt((double)(DN + R)))};
  la_io io;
  la_build(&c, &io, 0xab51); /* pages, cos/sin, node; query and key are replaced below */
  const double scale = 1.0 / sqrt((double)(DN + R));
  io.scale = (float)scale;
  la_node(&c, &io, 2);
  const int64_t N = io.N;
  double *qn = malloc(sizeof(double) * (size_t)(N * NH * DN));
  double *qp = malloc(sizeof(double) * (size_t)(N * NH * R));
  double *cl = malloc(sizeof(double) * (size_t)(N * L)),
         *kp = malloc(sizeof(double) * (size_t)(N * R));
  double *qlat = malloc(sizeof(double) * (size_t)(N * NH * L));
  for (int64_t i = 0; i < N * NH * DN; i++) qn[i] = rng_range(&r, -1.0f, 1.0f);
  for (int64_t i = 0; i < N * NH * R; i++) qp[i] = rng_range(&r, -1.0f, 1.0f);
  for (int64_t i = 0; i < N * L; i++) cl[i] = rng_range(&r, -1.0f, 1.0f);
  for (int64_t i = 0; i < N * R; i++) kp[i] = rng_range(&r, -1.0f, 1.0f);
  for (int64_t t = 0; t < N; t++)
    for (int h = 0; h < NH; h++)
      for (int e = 0; e < L; e++) {
        double s = 0.0;
        for (int i = 0; i < DN; i++) s += wuk[h][i][e] * qn[(t * NH + h) * DN + i];
        qlat[(t * NH + h) * L + e] = s;
      }
  /* the op's inputs: query [N, NH*(L+R)] = [q_lat ; q_pe] per head, key [N, L+R] = [c ; k_pe] */
  for (int64_t t = 0; t < N; t++) {
    for (int h = 0; h < NH; h++) {
      for (int e = 0; e < L; e++)
        tensor_set_f32(io.in[0], (t * NH + h) * D + e, (float)qlat[(t * NH + h) * L + e]);
      for (int e = 0; e < R; e++)
        tensor_set_f32(io.in[0], (t * NH + h) * D + L + e, (float)qp[(t * NH + h) * R + e]);
    }
    for (int e = 0; e < L; e++) tensor_set_f32(io.in[1], t * D + e, (float)cl[t * L + e]);
    for (int e = 0; e < R; e++) tensor_set_f32(io.in[1], t * D + L + e, (float)kp[t * R + e]);
  }
  diag d = {0};
  CHECK_STATUS(op_test_run(&io.node, io.in, io.out, 1, &d), PH_OK, d.msg);

  /* rotated q_pe / k_pe in double from exact cos/sin (the f32 tables' values, as the op sees) */
  const int H2 = R / 2;
  double *qpr = malloc(sizeof(double) * (size_t)(N * NH * R)),
         *kpr = malloc(sizeof(double) * (size_t)(N * R));
  int64_t pos[256];
  for (int b = 0; b < B; b++)
    for (int j = 0; j < ql[b]; j++) pos[io.cu[b] + j] = j;
  for (int64_t t = 0; t < N; t++)
    for (int h = 0; h <= NH; h++) {
      const double *x = h < NH ? qp + (t * NH + h) * R : kp + t * R;
      double *y = h < NH ? qpr + (t * NH + h) * R : kpr + t * R;
      for (int i = 0; i < H2; i++) {
        const double cs = tensor_at(io.in[8], pos[t] * H2 + i),
                     sn = tensor_at(io.in[9], pos[t] * H2 + i);
        y[i] = x[i] * cs - x[i + H2] * sn;
        y[i + H2] = x[i + H2] * cs + x[i] * sn;
      }
    }
  double max_rel64 = 0.0, worst32 = 0.0;
  int bad32 = 0;
  double sc[64], kn[64][DN], vv[64][DV];
  for (int b = 0; b < B; b++)
    for (int j = 0; j < ql[b]; j++) {
      const int64_t row = io.cu[b] + j, t0 = io.cu[b];
      for (int h = 0; h < NH; h++) {
        /* decomposed */
        for (int t = 0; t <= j; t++) {
          for (int i = 0; i < DN; i++) {
            double s = 0.0;
            for (int e = 0; e < L; e++) s += wuk[h][i][e] * cl[(t0 + t) * L + e];
            kn[t][i] = s;
          }
          for (int i = 0; i < DV; i++) {
            double s = 0.0;
            for (int e = 0; e < L; e++) s += wuv[h][i][e] * cl[(t0 + t) * L + e];
            vv[t][i] = s;
          }
        }
        double m = -INFINITY, den = 0.0, dec[DV];
        for (int t = 0; t <= j; t++) {
          double s = 0.0;
          for (int i = 0; i < DN; i++) s += qn[(row * NH + h) * DN + i] * kn[t][i];
          for (int i = 0; i < R; i++) s += qpr[(row * NH + h) * R + i] * kpr[(t0 + t) * R + i];
          sc[t] = s * scale;
          if (sc[t] > m) m = sc[t];
        }
        for (int t = 0; t <= j; t++) den += exp(sc[t] - m);
        for (int i = 0; i < DV; i++) {
          double s = 0.0;
          for (int t = 0; t <= j; t++) s += exp(sc[t] - m) * vv[t][i];
          dec[i] = s / den;
        }
        /* absorbed; A = max_t Σ_e |q_e k_te| and R = max_t (m - s_t) for the f32 bound */
        double ma = -INFINITY, dena = 0.0, olat[L], A = 0.0, Rg = 0.0;
        for (int t = 0; t <= j; t++) {
          double s = 0.0, a = 0.0;
          for (int e = 0; e < L; e++) {
            s += qlat[(row * NH + h) * L + e] * cl[(t0 + t) * L + e];
            a += fabs(qlat[(row * NH + h) * L + e] * cl[(t0 + t) * L + e]);
          }
          for (int i = 0; i < R; i++) {
            s += qpr[(row * NH + h) * R + i] * kpr[(t0 + t) * R + i];
            a += fabs(qpr[(row * NH + h) * R + i] * kpr[(t0 + t) * R + i]);
          }
          sc[t] = s * scale;
          if (a > A) A = a;
          if (sc[t] > ma) ma = sc[t];
        }
        for (int t = 0; t <= j; t++) {
          dena += exp(sc[t] - ma);
          if (ma - sc[t] > Rg) Rg = ma - sc[t];
        }
        for (int e = 0; e < L; e++) {
          double s = 0.0;
          for (int t = 0; t <= j; t++) s += exp(sc[t] - ma) * cl[(t0 + t) * L + e];
          olat[e] = s / dena;
        }
        double num = 0.0, nrm = 0.0;
        for (int i = 0; i < DV; i++) {
          double s = 0.0;
          for (int e = 0; e < L; e++) s += wuv[h][i][e] * olat[e];
          num = fmax(num, fabs(s - dec[i]));
          nrm = fmax(nrm, fabs(dec[i]));
        }
        const double rel = num / (nrm > 0 ? nrm : 1.0);
        if (rel > max_rel64) max_rel64 = rel;
        /* the op's f32 output, through W_UV in double. Its error bound, first order (u = 2^-24,
         * n = j + 1 keys, V = max |c| <= 1):
         *   inputs rounded to f32: q_lat, c, q_pe, k_pe, cos, sin: each relative u; a score moves
         *     by <= (2 + 4) u scale A (two factors, the rotation's table entries and its two
         *     products and sum) and the value rows by u V;
         *   the op's f32 arithmetic (kernels/attend.h): the D-term dot, the scale: (D + 1) u
         *     scale A; the exponentials: the subtraction u R and attend_expf 4 u (2 ulp); the
         *     online softmax's rescale at each of the nb key blocks: its exponential and two
         *     products, 6 u, plus its subtraction, u R over all blocks; the two sums of n terms
         *     and the division (2n + 3) u of V;
         *   so |o_lat - ref| <= V (2 e_w + (2n + 4) u) with
         *   e_w = (D + 7) u scale A + 2 u R + 4 u + 6 nb u, doubled for the second-order terms,
         *   and out = W_UV o_lat turns it into Σ_e |W_UV[i][e]| times that. */
        if (!io.out[0]) continue;
        const double u = 0x1p-24, n = (double)(j + 1), nb = (double)(j / ATTEND_KB + 1);
        const double e_w = (double)(D + 7) * u * scale * A + 2.0 * u * Rg + 4.0 * u + 6.0 * nb * u;
        const double tol_lat = 2.0 * 1.0 * (2.0 * e_w + (2.0 * n + 4.0) * u);
        for (int i = 0; i < DV; i++) {
          double s = 0.0, w1 = 0.0;
          for (int e = 0; e < L; e++) {
            s += wuv[h][i][e] * tensor_at(io.out[0], (row * NH + h) * L + e);
            w1 += fabs(wuv[h][i][e]);
          }
          const double err = fabs(s - dec[i]), tol = w1 * tol_lat;
          if (!(err <= tol)) bad32++;
          if (err / tol > worst32) worst32 = err / tol;
        }
      }
    }
  CHECK(max_rel64 < 1e-12); /* the seed's parity bound is 1e-6; float64 gives far better */
  CHECK_EQ_INT(bad32, 0);
  if (max_rel64 > worst_absorb_f64) worst_absorb_f64 = max_rel64;
  if (worst32 > worst_absorb_f32) worst_absorb_f32 = worst32;
  free(qn);
  free(qp);
  free(cl);
  free(kp);
  free(qlat);
  free(qpr);
  free(kpr);
  la_free(&io);
}

/* ---- do_rotary = 1 against RotaryEmbedding then do_rotary = 0 ---- */

/* The rope channels [l, l + r) of every head of x [N, H*D] through RotaryEmbedding (input
 * [1, N, H*r], position_ids [1, N]) and back into a copy of x. */
static tensor *rotate_with_op(const la_case *c, const la_io *io, const tensor *x, int64_t H,
                              const int64_t *pos) {
  const int64_t N = io->N, D = io->D, r = c->r;
  int64_t sd[3] = {1, N, H * r}, pd[2] = {1, N};
  tensor *in[4] = {tensor_new(c->dt, 3, sd), tensor_new(PH_DTYPE_I64, 2, pd), io->in[8], io->in[9]};
  for (int64_t t = 0; t < N; t++) {
    ((int64_t *)in[1]->data)[t] = pos[t];
    for (int64_t h = 0; h < H; h++)
      for (int64_t e = 0; e < r; e++)
        tensor_set_f32(in[0], (t * H + h) * r + e, tensor_get_f32(x, (t * H + h) * D + c->l + e));
  }
  gattr a[2] = {attr_int("interleaved", c->interleaved), attr_int("num_heads", H)};
  gnode n = op_test_node("RotaryEmbedding", "com.microsoft", 4, 1, a, 2);
  tensor *o[1] = {NULL};
  diag d = {0};
  CHECK_STATUS(op_test_run(&n, in, o, 1, &d), PH_OK, d.msg);
  tensor *y = tensor_clone(x);
  for (int64_t t = 0; t < N && o[0]; t++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t e = 0; e < r; e++)
        tensor_set_f32(y, (t * H + h) * D + c->l + e, tensor_get_f32(o[0], (t * H + h) * r + e));
  tensors_free(o, 1);
  tensor_free(in[0]);
  tensor_free(in[1]);
  return y;
}

static void test_latent_rotary_vs_op(void) {
  for (int k = 0; k < 4; k++) {
    la_case c = {.dt = k < 2 ? PH_DTYPE_F32 : PH_DTYPE_BF16,
                 .Hq = 4,
                 .l = 16,
                 .r = 16,
                 .BS = 16,
                 .B = 2,
                 .ql = {6, 19},
                 .past = {11, 0},
                 .interleaved = k % 2,
                 .slots = 1};
    la_io io;
    la_build(&c, &io, 3000 + (uint64_t)k);
    int64_t pos[64];
    for (int b = 0; b < c.B; b++)
      for (int j = 0; j < c.ql[b]; j++) pos[io.cu[b] + j] = c.past[b] + j;
    diag d = {0};
    tensor *fused[2] = {NULL, NULL}, *plain[2] = {NULL, NULL};
    CHECK_STATUS(op_test_run(&io.node, io.in, fused, 1, &d), PH_OK, d.msg);
    tensor *in2[17];
    memcpy(in2, io.in, sizeof in2);
    in2[0] = rotate_with_op(&c, &io, io.in[0], c.Hq, pos);
    in2[1] = rotate_with_op(&c, &io, io.in[1], 1, pos);
    in2[8] = in2[9] = NULL;
    gattr a[10];
    memcpy(a, io.attrs, sizeof a);
    for (int i = 0; i < io.node.n_attrs; i++)
      if (strcmp(a[i].name, "do_rotary") == 0) a[i] = attr_int("do_rotary", 0);
    gnode n = op_test_node("PagedAttention", "com.microsoft", 17, 2, a, io.node.n_attrs);
    CHECK_STATUS(op_test_run(&n, in2, plain, 1, &d), PH_OK, d.msg);
    /* the cache: bit-identical in every dtype (the rotated key is rounded once, as the op's
     * output rounds it); the output: bit-identical in f32, where the query RotaryEmbedding
     * gives is the f32 query the fused op rotates; in bf16 the fused op keeps the rotated query
     * in f32, RotaryEmbedding rounds it, so there the output is within the bf16 bound */
    CHECK(tensor_same_bits(fused[1], plain[1]));
    if (c.dt == PH_DTYPE_F32) {
      CHECK(tensor_same_bits(fused[0], plain[0]));
    } else if (fused[0] && plain[0]) {
      /* RotaryEmbedding rounds each of the query's r rotated channels (|q_e| <= sqrt 2) to bf16,
       * half an ulp, 2^-9 relative: a score moves by <= scale r 2 2^-9 (|k_e| <= sqrt 2), each
       * softmax weight by twice that relative, the output (a convex combination of |v| <= 1) by
       * as much; plus both outputs' roundings, 2 x 2^-8 */
      const double tol = 2.0 * io.scale * c.r * 2.0 * 0x1p-9 + 2.0 * 0x1p-8;
      const int64_t n_out = tensor_numel(fused[0]);
      double *ref = malloc(sizeof(double) * (size_t)n_out), s = 0.0;
      for (int64_t i = 0; i < n_out; i++) ref[i] = tensor_at(plain[0], i);
      const double err = tensor_max_abs_diff(fused[0], ref, n_out, &s);
      CHECK(err <= tol);
      if (!(err <= tol))
        fprintf(stderr, "       bf16 fused vs RotaryEmbedding: %g > %g\n", err, tol);
      free(ref);
    }
    tensors_free(fused, 2);
    tensors_free(plain, 2);
    tensor_free(in2[0]);
    tensor_free(in2[1]);
    la_free(&io);
  }
}

/* ---- refusals ---- */

/* A node with io's attributes, attribute `name` replaced by (or added as) `v`. */
static gnode with_attr(la_io *io, gattr *a, gattr v, int n_outputs) {
  int na = io->node.n_attrs, found = 0;
  memcpy(a, io->attrs, sizeof(gattr) * (size_t)na);
  for (int i = 0; i < na; i++)
    if (strcmp(a[i].name, v.name) == 0) {
      a[i] = v;
      found = 1;
    }
  if (!found) a[na++] = v;
  return op_test_node("PagedAttention", "com.microsoft", 17, n_outputs, a, na);
}

static void test_latent_errors(void) {
  la_case c = {.dt = PH_DTYPE_F32,
               .Hq = 4,
               .l = 16,
               .r = 16,
               .BS = 16,
               .B = 2,
               .ql = {3, 20},
               .past = {0, 5},
               .slots = 1};
  la_io io;
  la_build(&c, &io, 77);
  diag d = {0};
  CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_OK, d.msg);
  gattr a[12];

  /* attributes */
  static const struct {
    const char *name, *sval;
    int64_t ival;
    ph_status want;
    const char *says;
  } bad[] = {
      {"kv_num_heads", NULL, 2, PH_ERR_INVALID_ARGUMENT, "kv_num_heads = 1"},
      {"v_head_size", NULL, 40, PH_ERR_INVALID_ARGUMENT, "v_head_size 40"},
      {"v_head_size", NULL, -1, PH_ERR_INVALID_ARGUMENT, "v_head_size"},
      {"rotary_offset", NULL, 12, PH_ERR_INVALID_ARGUMENT, "rotary_offset"},
      {"rotary_offset", NULL, 24, PH_ERR_TENSOR_SHAPE, "rotary_offset 24"},
      {"v_quant_type", "PER_TENSOR", 0, PH_ERR_INVALID_ARGUMENT, "v_quant_type"},
      {"v_cache_dtype", "float16", 0, PH_ERR_INVALID_ARGUMENT, "v_cache_dtype"},
      {"kv_cache_layout", "LATENTS", 0, PH_ERR_INVALID_ARGUMENT, "kv_cache_layout"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gattr v =
        bad[i].sval ? attr_string(bad[i].name, bad[i].sval) : attr_int(bad[i].name, bad[i].ival);
    gnode n = with_attr(&io, a, v, 2);
    CHECK_STATUS(pt_try(&n, io.in, &d), bad[i].want, d.msg);
    CHECK_CONTAINS(d.msg, bad[i].says);
  }
  /* no scale while v_head_size (16) != head_size (32) */
  {
    int na = 0;
    for (int i = 0; i < io.node.n_attrs; i++)
      if (strcmp(io.attrs[i].name, "scale") != 0) a[na++] = io.attrs[i];
    gnode n = op_test_node("PagedAttention", "com.microsoft", 17, 2, a, na);
    CHECK_STATUS(pt_try(&n, io.in, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, "scale must be given");
    gnode z = with_attr(&io, a, attr_float("scale", 0.0f), 2);
    CHECK_STATUS(pt_try(&z, io.in, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, "scale must be given");
  }
  /* a third output (value_cache_out), as ORT's shape inference refuses */
  {
    gnode n = with_attr(&io, a, attr_int("num_heads", 4), 3);
    CHECK_STATUS(pt_try(&n, io.in, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, "value_cache_out");
  }

  /* inputs: the key is required; nothing of a value path, no sink, no norms, no v_scale */
  {
    tensor *key = io.in[1];
    io.in[1] = NULL;
    CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, "key (the latent row");
    io.in[1] = key;
    int64_t kd[2] = {io.N, io.D}, cd[4] = {io.NP, c.BS, 1, io.D}, hd[1] = {c.Hq}, nd[1] = {io.D},
            one[1] = {1};
    static const int slot[6] = {2, 4, 11, 12, 13, 15};
    static const char *const names[6] = {
        "value must be absent",         "value_cache must be absent",   "head_sink must be absent",
        "q_norm_weight must be absent", "k_norm_weight must be absent", "v_scale must be absent"};
    tensor *extra[6] = {tensor_new(PH_DTYPE_F32, 2, kd), tensor_new(PH_DTYPE_F32, 4, cd),
                        tensor_new(PH_DTYPE_F32, 1, hd), tensor_new(PH_DTYPE_F32, 1, nd),
                        tensor_new(PH_DTYPE_F32, 1, nd), tensor_new(PH_DTYPE_F32, 1, one)};
    for (int i = 0; i < 6; i++) {
      io.in[slot[i]] = extra[i];
      CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
      CHECK_CONTAINS(d.msg, names[i]);
      io.in[slot[i]] = NULL;
    }
    tensors_free(extra, 6);
  }
  /* head_size 20 (not a multiple of 8); cos/sin dtype */
  {
    la_case c20 = c;
    c20.l = 20;
    c20.r = 0;
    la_io o;
    la_build(&c20, &o, 78);
    gnode n = with_attr(&o, a, attr_int("rotary_offset", 0), 2);
    CHECK_STATUS(pt_try(&n, o.in, &d), PH_ERR_TENSOR_SHAPE, d.msg);
    CHECK_CONTAINS(d.msg, "multiple of 8");
    la_free(&o);
    tensor *cs = io.in[8];
    io.in[8] = tensor_new(PH_DTYPE_F16, 2, cs->dims);
    CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_ERR_TENSOR_DTYPE, d.msg);
    CHECK_CONTAINS(d.msg, "cos_cache");
    tensor_free(io.in[8]);
    io.in[8] = cs;
  }

  /* data, checked before any write: the cache stays untouched */
  {
    int32_t *past = io.in[6]->data, *slots = io.in[10]->data;
    const int32_t save = past[1];
    past[1] = (int32_t)io.max_pos - c.ql[1] + 1; /* the last row at max_pos: beyond cos/sin */
    tensor *bt0 = tensor_clone(io.in[7]);
    int32_t *bt = io.in[7]->data;
    for (int64_t k = 0; k < io.MB; k++) bt[io.MB + k] = (int32_t)(k % io.NP); /* valid ids */
    CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, "cos/sin cache");
    past[1] = save;
    memcpy(io.in[7]->data, bt0->data, tensor_bytes(bt0));
    tensor_free(bt0);
    CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_OK, d.msg);
    const int32_t s5 = slots[5];
    slots[5] = (int32_t)(io.NP * c.BS);
    CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, "slot_mapping[5]");
    slots[5] = -2;
    CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, "slot_mapping[5]");
    slots[5] = s5;
    CHECK(tensor_same_bits(io.in[3], io.kc0));
  }
  la_free(&io);
}

int main(void) {
  RUN(test_latent_grid);
  RUN(test_latent_dtypes);
  RUN(test_latent_absorption);
  RUN(test_latent_rotary_vs_op);
  RUN(test_latent_errors);
  printf("worst: output error / tolerance %.3g; absorption float64 relative %.3g, f32 op error / "
         "tolerance %.3g\n",
         worst_out, worst_absorb_f64, worst_absorb_f32);
  return check_finish();
}
