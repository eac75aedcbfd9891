/* test_quant — the MatMulNBits weight quantizer (quant.h): sizes, the exact byte layout (nibble
 * order, zero-point packing, padding), exact round trips on representable weights, the error
 * bound on random weights for every bits/block/sym/scale-dtype combination, the edge cases
 * (all-zero block, one huge value, K not a multiple of the block, non-finite weights and scales)
 * and f16/bf16 sources. Expected bytes are written out by hand from the format of quant.h.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "base/rng.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"
#include "tensor/quant_impl.h"

static quant_params qp(int bits, int block, int sym, ph_dtype sd) {
  quant_params p = {bits, block, sym, sd};
  return p;
}

typedef struct qbuf {
  uint8_t *b, *zp;
  float *s, *dq;
  size_t nb, ns, nz;
} qbuf;

/* Quantizes and dequantizes f32 w [n, k]; returns the quantize status. */
static ph_status run(const quant_params *p, const void *w, ph_dtype wd, int64_t n, int64_t k,
                     qbuf *q, diag *d) {
  memset(q, 0, sizeof *q);
  ph_status st = quant_sizes(p, n, k, &q->nb, &q->ns, &q->nz, d);
  if (st != PH_OK) return st;
  q->b = calloc(q->nb, 1);
  q->s = calloc(q->ns, sizeof(float));
  q->zp = q->nz ? calloc(q->nz, 1) : NULL;
  q->dq = calloc((size_t)(n * k), sizeof(float));
  st = quant_quantize(p, w, wd, n, k, q->b, q->s, q->zp, "t.weight", d);
  if (st != PH_OK) return st;
  return quant_dequantize(p, q->b, q->s, q->zp, n, k, q->dq, d);
}

static void qfree(qbuf *q) {
  free(q->b);
  free(q->s);
  free(q->zp);
  free(q->dq);
}

static void test_sizes(void) {
  quant_params p = qp(4, 32, 0, PH_DTYPE_F32);
  size_t nb, ns, nz;
  CHECK_STATUS(quant_sizes(&p, 3, 100, &nb, &ns, &nz, NULL), PH_OK, NULL);
  CHECK_EQ_INT(nb, 3 * 4 * 16); /* kb = ceil(100/32) = 4 blocks of 32*4/8 = 16 bytes */
  CHECK_EQ_INT(ns, 3 * 4);
  CHECK_EQ_INT(nz, 3 * 2); /* 4 zero points of 4 bits per row: 2 bytes */
  p.block = 64;            /* kb = 2... */
  CHECK_STATUS(quant_sizes(&p, 3, 129, &nb, &ns, &nz, NULL), PH_OK, NULL);
  CHECK_EQ_INT(nb, 3 * 3 * 32); /* kb = 3: 3 blocks of 32 bytes */
  CHECK_EQ_INT(nz, 3 * 2);      /* 3 nibbles round up to 2 bytes per row */
  p.bits = 8;
  CHECK_STATUS(quant_sizes(&p, 3, 129, &nb, &ns, &nz, NULL), PH_OK, NULL);
  CHECK_EQ_INT(nb, 3 * 3 * 64);
  CHECK_EQ_INT(nz, 3 * 3);
  p.symmetric = 1;
  CHECK_STATUS(quant_sizes(&p, 3, 129, &nb, &ns, &nz, NULL), PH_OK, NULL);
  CHECK_EQ_INT(nz, 0);
  CHECK_EQ_INT(ns, 9);
}

static void test_bad_params(void) {
  diag d;
  int bad[][2] = {{3, 32}, {2, 32}, {4, 48}, {4, 8}, {8, 0}, {16, 32}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    quant_params p = qp(bad[i][0], bad[i][1], 1, PH_DTYPE_F32);
    CHECK_STATUS(quant_sizes(&p, 2, 64, NULL, NULL, NULL, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  }
  quant_params p = qp(4, 16, 1, PH_DTYPE_I8);
  CHECK_STATUS(quant_sizes(&p, 2, 64, NULL, NULL, NULL, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  p = qp(4, 16, 1, PH_DTYPE_F32);
  CHECK_STATUS(quant_sizes(&p, 0, 64, NULL, NULL, NULL, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  float w[16] = {0};
  uint8_t b[8];
  float s[1];
  CHECK_STATUS(quant_quantize(&p, w, PH_DTYPE_I32, 1, 16, b, s, NULL, "x", &d), PH_ERR_TENSOR_DTYPE,
               d.msg);
  CHECK_CONTAINS(d.msg, "x has dtype I32");
}

/* 4-bit symmetric, one block of 16: w[k] = (k - 8) / 2 spans -4 .. 3.5; the element of largest
 * magnitude is -4, so scale = -4 / -8 = 0.5 and code = round(w/0.5 + 8) = k. Byte j holds codes
 * 2j (low nibble) and 2j+1 (high nibble): 0x10, 0x32, ... 0xfe. The round trip is exact. */
static void test_layout_int4_nibbles(void) {
  float w[16];
  for (int k = 0; k < 16; k++) w[k] = (float)(k - 8) * 0.5f;
  quant_params p = qp(4, 16, 1, PH_DTYPE_F32);
  qbuf q;
  CHECK_STATUS(run(&p, w, PH_DTYPE_F32, 1, 16, &q, NULL), PH_OK, NULL);
  CHECK_EQ_INT(q.nb, 8);
  for (int j = 0; j < 8; j++) CHECK_EQ_INT(q.b[j], (2 * j) | ((2 * j + 1) << 4));
  CHECK(q.s[0] == 0.5f);
  for (int k = 0; k < 16; k++) CHECK(q.dq[k] == w[k]);
  qfree(&q);

  /* The same values negated: now +4 is the extreme, the scale is negative (-0.5, ORT keeps the
   * sign of the extreme), +4 encodes as 0 and -3.5 as 15. */
  for (int k = 0; k < 16; k++) w[k] = -w[k];
  CHECK_STATUS(run(&p, w, PH_DTYPE_F32, 1, 16, &q, NULL), PH_OK, NULL);
  CHECK(q.s[0] == -0.5f);
  CHECK_EQ_INT(q.b[0], 0x10);
  CHECK_EQ_INT(q.b[7], 0xfe);
  for (int k = 0; k < 16; k++) CHECK(q.dq[k] == w[k]);
  qfree(&q);
}

/* 8-bit symmetric: w[k] = k/4 - 2 (-2 .. 1.75), extreme -2, scale = -2/-128 = 1/64, code =
 * w*64 + 128 = 16k: one code per byte, in k order. */
static void test_layout_int8(void) {
  float w[16];
  for (int k = 0; k < 16; k++) w[k] = (float)k * 0.25f - 2.0f;
  quant_params p = qp(8, 16, 1, PH_DTYPE_F32);
  qbuf q;
  CHECK_STATUS(run(&p, w, PH_DTYPE_F32, 1, 16, &q, NULL), PH_OK, NULL);
  CHECK_EQ_INT(q.nb, 16);
  for (int k = 0; k < 16; k++) CHECK_EQ_INT(q.b[k], 16 * k);
  CHECK(q.s[0] == 1.0f / 64);
  for (int k = 0; k < 16; k++) CHECK(q.dq[k] == w[k]);
  qfree(&q);
}

/* Asymmetric zero points: block b of row r holds (c - z) for c = 0..15, so lo = -z, hi = 15 - z,
 * scale = 15/15 = 1, zp = z and code = c. Three blocks per row (odd): the zero points pack two
 * per byte, low nibble = even block, and the last byte's high nibble is ORT's fill value 8. */
static void test_zero_point_packing(void) {
  const int z[2][3] = {{3, 12, 5}, {0, 15, 9}};
  float w[2 * 48];
  for (int r = 0; r < 2; r++)
    for (int c = 0; c < 48; c++) w[r * 48 + c] = (float)(c % 16 - z[r][c / 16]);
  quant_params p = qp(4, 16, 0, PH_DTYPE_F32);
  qbuf q;
  CHECK_STATUS(run(&p, w, PH_DTYPE_F32, 2, 48, &q, NULL), PH_OK, NULL);
  CHECK_EQ_INT(q.nz, 4);
  CHECK_EQ_INT(q.zp[0], 0xc3);
  CHECK_EQ_INT(q.zp[1], 0x85);
  CHECK_EQ_INT(q.zp[2], 0xf0);
  CHECK_EQ_INT(q.zp[3], 0x89);
  for (int i = 0; i < 6; i++) CHECK(q.s[i] == 1.0f);
  for (int r = 0; r < 2; r++)
    for (int blk = 0; blk < 3; blk++)
      for (int j = 0; j < 8; j++)
        CHECK_EQ_INT(q.b[(r * 3 + blk) * 8 + j], (2 * j) | (2 * j + 1) << 4);
  for (int i = 0; i < 96; i++) CHECK(q.dq[i] == w[i]);
  qfree(&q);

  /* 8 bits: one zero point per byte. Block values (c - z) * 15/255... use lo = -z, hi = 255 - z
   * over 256 elements: scale 1, zp z. */
  static float w8[2 * 256];
  const int z8[2] = {7, 200};
  for (int blk = 0; blk < 2; blk++)
    for (int c = 0; c < 256; c++) w8[blk * 256 + c] = (float)(c - z8[blk]);
  p = qp(8, 256, 0, PH_DTYPE_F32);
  CHECK_STATUS(run(&p, w8, PH_DTYPE_F32, 1, 512, &q, NULL), PH_OK, NULL);
  CHECK_EQ_INT(q.nz, 2);
  CHECK_EQ_INT(q.zp[0], 7);
  CHECK_EQ_INT(q.zp[1], 200);
  for (int c = 0; c < 512; c++) CHECK_EQ_INT(q.b[c], c % 256);
  for (int i = 0; i < 512; i++) CHECK(q.dq[i] == w8[i]);
  qfree(&q);
}

/* A tie |max| == |min| takes min as the extreme (ORT: max only when |max| > |min|): with -1 and
 * 1, scale = -1/-8 = 0.125, -1 -> code 0, and 1 would need 16: it clamps to 15 (0.875 back). */
static void test_symmetric_tie(void) {
  float w[16] = {-1.0f, 1.0f, 0.5f};
  quant_params p = qp(4, 16, 1, PH_DTYPE_F32);
  qbuf q;
  CHECK_STATUS(run(&p, w, PH_DTYPE_F32, 1, 16, &q, NULL), PH_OK, NULL);
  CHECK(q.s[0] == 0.125f);
  CHECK_EQ_INT(q.b[0], 0 | 15 << 4);
  CHECK(q.dq[0] == -1.0f && q.dq[1] == 0.875f && q.dq[2] == 0.5f);
  qfree(&q);
}

/* ORT rounds codes with roundf: halves away from zero. Scale 1 (extreme -8): 2.5 + 8 = 10.5 ->
 * 11 (round-to-even would give 10); -2.5 + 8 = 5.5 -> 6 (to even: 6 too); 0.5 + 8 -> 9. */
static void test_rounding_halves_away(void) {
  float w[16] = {-8.0f, 2.5f, -2.5f, 0.5f};
  quant_params p = qp(4, 16, 1, PH_DTYPE_F32);
  qbuf q;
  CHECK_STATUS(run(&p, w, PH_DTYPE_F32, 1, 16, &q, NULL), PH_OK, NULL);
  CHECK(q.s[0] == 1.0f);
  CHECK_EQ_INT(q.b[0], 0 | 11 << 4);
  CHECK_EQ_INT(q.b[1], 6 | 9 << 4);
  qfree(&q);
}

/* K = 20 with blocks of 16: the second block has 4 real values and 12 of zero padding, which
 * encode as the zero point (sym: 8; asym: that block's zp) and dequantize to nothing (only K
 * columns come back). All-positive values: the padding's zero does not move the scale. */
static void test_k_not_multiple(void) {
  float w[2 * 20];
  for (int i = 0; i < 40; i++) w[i] = 1.0f + (float)(i % 20) / 8.0f; /* 1 .. 3.375 */
  quant_params p = qp(4, 16, 1, PH_DTYPE_F32);
  qbuf q;
  CHECK_STATUS(run(&p, w, PH_DTYPE_F32, 2, 20, &q, NULL), PH_OK, NULL);
  CHECK_EQ_INT(q.nb, 2 * 2 * 8);
  for (int r = 0; r < 2; r++) {
    /* block 1 holds w[16..19] = 3, 3.125, 3.25, 3.375: scale = 3.375/-8 */
    CHECK(q.s[r * 2 + 1] == 3.375f / -8.0f);
    const uint8_t *blk = q.b + (r * 2 + 1) * 8;
    CHECK_EQ_INT(blk[0] & 0xf, 8 - (int)roundf(3.0f / 3.375f * 8.0f) + 0); /* 3/s + 8 */
    for (int j = 2; j < 8; j++) CHECK_EQ_INT(blk[j], 0x88);
  }
  for (int i = 0; i < 40; i++)
    CHECK(fabsf(q.dq[i] - w[i]) <= fabsf(q.s[(i / 20) * 2 + (i % 20) / 16]) * 0.5f * 1.0001f);
  qfree(&q);

  p.symmetric = 0; /* asym: range [0, 3.375], zp 0; padding codes are 0 = zp */
  CHECK_STATUS(run(&p, w, PH_DTYPE_F32, 2, 20, &q, NULL), PH_OK, NULL);
  CHECK(q.s[1] == 3.375f / 15.0f);
  CHECK_EQ_INT(q.zp[0], 0x00); /* both blocks' zp 0 (ranges clamp to include 0) */
  for (int j = 2; j < 8; j++) CHECK_EQ_INT(q.b[8 + j], 0x00);
  qfree(&q);
}

static void test_all_zero_block(void) {
  float w[32] = {0};
  for (int k = 16; k < 32; k++) w[k] = (float)k; /* block 1 nonzero, block 0 all zero */
  for (int sym = 0; sym <= 1; sym++) {
    quant_params p = qp(4, 16, sym, PH_DTYPE_F16);
    qbuf q;
    CHECK_STATUS(run(&p, w, PH_DTYPE_F32, 1, 32, &q, NULL), PH_OK, NULL);
    CHECK(q.s[0] == 0.0f);
    for (int j = 0; j < 8; j++) CHECK_EQ_INT(q.b[j], sym ? 0x88 : 0x00);
    if (!sym) CHECK_EQ_INT(q.zp[0] & 0xf, 0);
    for (int k = 0; k < 16; k++) CHECK(q.dq[k] == 0.0f);
    qfree(&q);
  }
}

/* One huge value in a block: the scale is set by it, every small value encodes as the zero
 * point (error = the small value itself, below scale/2) and the huge one comes back exactly. */
static void test_one_huge_value(void) {
  float w[32];
  for (int k = 0; k < 32; k++) w[k] = 0.01f * (float)(k % 5 - 2);
  w[5] = 1000.0f;
  quant_params p = qp(4, 32, 1, PH_DTYPE_F32);
  qbuf q;
  CHECK_STATUS(run(&p, w, PH_DTYPE_F32, 1, 32, &q, NULL), PH_OK, NULL);
  CHECK(q.s[0] == -125.0f);
  CHECK(q.dq[5] == 1000.0f);
  for (int k = 0; k < 32; k++)
    if (k != 5) CHECK(q.dq[k] == 0.0f);
  qfree(&q);

  /* A range whose width overflows f32 gives an infinite scale: a typed error, not NaNs. */
  w[6] = -3e38f;
  w[5] = 3e38f;
  p.symmetric = 0;
  diag d;
  CHECK_STATUS(run(&p, w, PH_DTYPE_F32, 1, 32, &q, &d), PH_ERR_NON_FINITE, d.msg);
  CHECK_CONTAINS(d.msg, "t.weight row 0 block 0");
  qfree(&q);
  /* A scale beyond f16's range (1e6/8 > 65504) when the scales are f16. */
  w[6] = 0.0f;
  w[5] = 1e6f;
  p = qp(4, 32, 1, PH_DTYPE_F16);
  CHECK_STATUS(run(&p, w, PH_DTYPE_F32, 1, 32, &q, &d), PH_ERR_NON_FINITE, d.msg);
  CHECK_CONTAINS(d.msg, "F16");
  qfree(&q);
}

static void test_non_finite(void) {
  float w[3 * 20];
  for (int i = 0; i < 60; i++) w[i] = (float)i / 60.0f;
  w[1 * 20 + 5] = NAN;
  w[2 * 20 + 7] = INFINITY;
  quant_params p = qp(8, 16, 0, PH_DTYPE_F32);
  qbuf q;
  diag d;
  CHECK_STATUS(run(&p, w, PH_DTYPE_F32, 3, 20, &q, &d), PH_ERR_NON_FINITE, d.msg);
  CHECK_CONTAINS(d.msg, "t.weight");
  CHECK_CONTAINS(d.msg, "2 non-finite values");
  CHECK_CONTAINS(d.msg, "at [1, 5]");
  qfree(&q);
  uint16_t h[60];
  for (int i = 0; i < 60; i++) h[i] = f32_to_bf16(0.5f);
  h[2 * 20 + 19] = 0xff80; /* bf16 -inf */
  CHECK_STATUS(run(&p, h, PH_DTYPE_BF16, 3, 20, &q, &d), PH_ERR_NON_FINITE, d.msg);
  CHECK_CONTAINS(d.msg, "at [2, 19]");
  CHECK_CONTAINS(d.msg, "-inf");
  qfree(&q);
}

/* Random weights, every combination: each element within the derived bound (quant.h).
 * s is the stored scale. Unclamped codes: |w - dq| <= |s|/2 (rounding to the nearest code).
 * Symmetric, the side opposite the extreme m may need code 2^bits and clamps: <= |s|. With an
 * f16/bf16 scale (relative rounding u = 2^-11, 2^-8) the grid is stretched by up to u, which
 * moves codes near the ends by up to 2^bits * u * |s|: that is added. Plus float slack. */
static void test_error_bound_random(void) {
  const int64_t n = 7, k = 300; /* 300 = no block size's multiple */
  float *w = malloc(sizeof(float) * (size_t)(n * k));
  rng g = rng_seed(18);
  for (int64_t i = 0; i < n * k; i++) {
    float a = rng_range(&g, -1, 1), b2 = rng_range(&g, -1, 1);
    w[i] = a * b2 * (i % 97 == 0 ? 20.0f : 1.0f) +
           (i / k == 3 ? 0.3f : 0.0f); /* outliers, a biased row */
  }
  const int bits_[2] = {4, 8}, blocks[4] = {16, 32, 64, 128};
  const ph_dtype sds[3] = {PH_DTYPE_F32, PH_DTYPE_F16, PH_DTYPE_BF16};
  const float us[3] = {0.0f, 1.0f / 2048, 1.0f / 256};
  for (int bi = 0; bi < 2; bi++)
    for (int bl = 0; bl < 4; bl++)
      for (int sym = 0; sym <= 1; sym++)
        for (int sd = 0; sd < 3; sd++) {
          quant_params p = qp(bits_[bi], blocks[bl], sym, sds[sd]);
          qbuf q;
          diag d;
          CHECK_STATUS(run(&p, w, PH_DTYPE_F32, n, k, &q, &d), PH_OK, d.msg);
          int64_t kb = (k + blocks[bl] - 1) / blocks[bl];
          int worst_ok = 1;
          double sum_e = 0, sum_w = 0;
          for (int64_t r = 0; r < n; r++)
            for (int64_t c = 0; c < k; c++) {
              float s = fabsf(q.s[r * kb + c / blocks[bl]]);
              float v = w[r * k + c], e = fabsf(v - q.dq[r * k + c]);
              float bound = s * ((sym ? 1.0f : 0.5f) + (float)(1 << bits_[bi]) * us[sd]) +
                            1e-6f * fabsf(v) + 1e-30f;
              if (!(e <= bound)) worst_ok = 0;
              sum_e += (double)e * e;
              sum_w += (double)v * v;
              /* the signed scale is representable in the scale dtype */
              float sv = q.s[r * kb + c / blocks[bl]];
              if (sds[sd] == PH_DTYPE_F16 && f16_to_f32(f32_to_f16(sv)) != sv) worst_ok = 0;
              if (sds[sd] == PH_DTYPE_BF16 && bf16_to_f32(f32_to_bf16(sv)) != sv) worst_ok = 0;
            }
          CHECK(worst_ok);
          double rel = sqrt(sum_e / sum_w), rel2 = -1;
          CHECK_STATUS(quant_rms_rel_error(&p, w, PH_DTYPE_F32, n, k, "t", &rel2, &d), PH_OK,
                       d.msg);
          CHECK_NEAR(rel2, rel, 1e-9);
          /* Measured 0.005-0.021 (int8) and 0.07-0.23 (int4), growing with the block: every 97th
           * element is a 20x outlier that sets its block's scale. A step of 2^bits levels gives
           * int4 about 16x int8's error; the bounds leave ~40% headroom over the measurement. */
          CHECK(rel < (bits_[bi] == 8 ? 0.03 : 0.32));
          qfree(&q);
        }
  free(w);
}

/* A bf16 or f16 source quantizes exactly as its f32 widening does. Scales convert to the io
 * dtype without change. */
static void test_half_sources(void) {
  const int64_t n = 4, k = 96;
  float w[4 * 96];
  uint16_t hb[4 * 96], hf[4 * 96];
  rng g = rng_seed(7);
  for (int i = 0; i < n * k; i++) {
    float v = rng_range(&g, -2, 2);
    hb[i] = f32_to_bf16(v);
    hf[i] = f32_to_f16(v);
  }
  const ph_dtype src[2] = {PH_DTYPE_BF16, PH_DTYPE_F16};
  for (int si = 0; si < 2; si++) {
    const uint16_t *h = si == 0 ? hb : hf;
    for (int i = 0; i < n * k; i++) w[i] = si == 0 ? bf16_to_f32(h[i]) : f16_to_f32(h[i]);
    quant_params p = qp(4, 32, 0, si == 0 ? PH_DTYPE_BF16 : PH_DTYPE_F16);
    qbuf a, b;
    CHECK_STATUS(run(&p, h, src[si], n, k, &a, NULL), PH_OK, NULL);
    CHECK_STATUS(run(&p, w, PH_DTYPE_F32, n, k, &b, NULL), PH_OK, NULL);
    CHECK(memcmp(a.b, b.b, a.nb) == 0);
    CHECK(memcmp(a.s, b.s, a.ns * sizeof(float)) == 0);
    CHECK(memcmp(a.zp, b.zp, a.nz) == 0);
    uint16_t sh[12];
    CHECK_STATUS(quant_scales_to(p.scale_dtype, a.s, a.ns, sh, NULL), PH_OK, NULL);
    for (size_t i = 0; i < a.ns; i++)
      CHECK((si == 0 ? bf16_to_f32(sh[i]) : f16_to_f32(sh[i])) == a.s[i]);
    qfree(&a);
    qfree(&b);
  }
}

static void test_rms_representable_is_zero(void) {
  float w[2 * 32];
  for (int i = 0; i < 64; i++) w[i] = (float)(i % 16) - 8.0f; /* integers -8..7: scale 1 */
  quant_params p = qp(4, 32, 1, PH_DTYPE_BF16);
  double rel = -1;
  CHECK_STATUS(quant_rms_rel_error(&p, w, PH_DTYPE_F32, 2, 32, "t", &rel, NULL), PH_OK, NULL);
  CHECK(rel == 0.0);
  memset(w, 0, sizeof w);
  CHECK_STATUS(quant_rms_rel_error(&p, w, PH_DTYPE_F32, 2, 32, "t", &rel, NULL), PH_OK, NULL);
  CHECK(rel == 0.0);
}

/* ---- variants: the AVX-512 quantizer gives the scalar one's bytes, over a grid ----------------
 */

/* Row r of a weight [n, k] in f32, of kind r % 9: random, ties at .5 against a scale of 1, zeros
 * (a -0.0 first), all equal, subnormals, tiny subnormals (the scale's reciprocal overflows:
 * codes of 0 * inf), huge values, mixed magnitudes, zeros with one negative. */
static void fill_row(float *row, int64_t k, int kind, int bits, int sym, rng *g) {
  const int mid = 1 << (bits - 1), qmax = (1 << bits) - 1;
  for (int64_t c = 0; c < k; c++) {
    float u = rng_range(g, -1.0f, 1.0f);
    switch (kind) {
    case 0:
      row[c] = u;
      break;
    case 1: /* sym: m = -mid gives s = 1, codes v + mid; asym: [0, qmax] gives s = 1, zp 0 */
      row[c] = sym ? (float)((int)(rng_uniform(g) * (float)(2 * mid - 1)) - mid + 1) - 0.5f
                   : (float)(int)(rng_uniform(g) * (float)qmax) + 0.5f;
      if (c % 16 == 0) row[c] = sym ? (float)-mid : (float)qmax;
      if (c % 16 == 1) row[c] = sym ? 0.5f : 0.0f;
      break;
    case 2:
      row[c] = c % 3 == 0 ? -0.0f : 0.0f;
      break;
    case 3:
      row[c] = c % 2 ? -0.375f : 0.375f;
      if ((c / 32) % 2) row[c] = 2.5f;
      break;
    case 4:
      row[c] = u * 1e-39f;
      break;
    case 5:
      row[c] = c % 5 == 0 ? 1.4e-45f : 0.0f;
      break;
    case 6:
      row[c] = u * 3e38f;
      break;
    case 7:
      row[c] = u * powf(10.0f, (float)(c % 13) - 6.0f);
      break;
    default:
      row[c] = c % 7 == 3 ? -1.0f : 0.0f;
      break;
    }
  }
}

/* The variant variants_agree compares with the scalar one. */
static quant_variant g_simd = QUANT_AVX512;

static int variants_agree(const quant_params *p, const void *w, ph_dtype wd, int64_t n, int64_t k) {
  size_t nb, ns, nz;
  if (quant_sizes(p, n, k, &nb, &ns, &nz, NULL) != PH_OK) return 0;
  uint8_t *b[2] = {malloc(nb), malloc(nb)}, *z[2] = {malloc(nz + 1), malloc(nz + 1)};
  float *s[2] = {malloc(ns * 4), malloc(ns * 4)};
  diag d[2];
  ph_status st[2];
  for (int v = 0; v < 2; v++) {
    memset(b[v], v ? 0xa5 : 0x5a, nb);
    memset(s[v], v ? 0xa5 : 0x5a, ns * 4);
    memset(z[v], v ? 0xa5 : 0x5a, nz + 1);
    diag_clear(&d[v]);
    st[v] = quant_quantize_with(v ? g_simd : QUANT_SCALAR, p, w, wd, n, k, b[v], s[v],
                                p->symmetric ? NULL : z[v], "t.weight", &d[v]);
  }
  int ok = st[0] == st[1];
  if (ok && st[0] == PH_OK)
    ok = !memcmp(b[0], b[1], nb) && !memcmp(s[0], s[1], ns * 4) && !memcmp(z[0], z[1], nz);
  else if (ok)
    ok = !strcmp(d[0].msg, d[1].msg);
  if (!ok)
    fprintf(stderr,
            "variant %d differs: bits %d block %d sym %d scale %d src %d [%lld, %lld]: %s | %s\n",
            (int)g_simd, p->bits, p->block, p->symmetric, (int)p->scale_dtype, (int)wd,
            (long long)n, (long long)k, d[0].msg, d[1].msg);
  for (int v = 0; v < 2; v++) free(b[v]), free(z[v]), free(s[v]);
  return ok;
}

/* The grid for variant g_simd. */
static void variant_grid(void) {
  const ph_dtype dts[3] = {PH_DTYPE_F32, PH_DTYPE_F16, PH_DTYPE_BF16};
  rng g = rng_seed(18);
  int cases = 0, bad = 0;
  for (int bits = 4; bits <= 8; bits += 4)
    for (int block = 16; block <= 256; block *= 2)
      for (int sym = 0; sym < 2; sym++) {
        const int64_t ks[4] = {1, 15 + block / 16, block, 3 * block + 5};
        for (int ki = 0; ki < 4; ki++) {
          const int64_t n = 9, k = ks[ki];
          float *w = malloc((size_t)(n * k) * sizeof(float));
          uint16_t *h = malloc((size_t)(n * k) * sizeof(uint16_t));
          for (int64_t r = 0; r < n; r++) fill_row(w + r * k, k, (int)r, bits, sym, &g);
          for (int sd = 0; sd < 3; sd++)
            for (int src = 0; src < 3; src++) {
              const quant_params p = qp(bits, block, sym, dts[sd]);
              const void *wp = w;
              if (dts[src] != PH_DTYPE_F32) {
                CHECK_STATUS(dtype_convert(h, dts[src], w, PH_DTYPE_F32, (size_t)(n * k), NULL),
                             PH_OK, NULL);
                wp = h;
              }
              /* every row, then each row alone (a failing row fails the whole call) */
              bad += !variants_agree(&p, wp, dts[src], n, k);
              for (int64_t r = 0; r < n; r++)
                bad += !variants_agree(&p, (const char *)wp + r * k * dtype_size(dts[src]),
                                       dts[src], 1, k);
              cases += 1 + (int)n;
            }
          free(w);
          free(h);
        }
      }
  if (bad)
    fprintf(stderr, "       %d of %d quantizations differ between the variants\n", bad, cases);
  CHECK(bad == 0 && cases > 0);
  /* a non-finite weight: the same error from both, wherever it is */
  float w[3 * 40];
  for (int i = 0; i < 120; i++) w[i] = (float)i / 7.0f;
  for (int at = 0; at < 120; at += 17) {
    float keep = w[at];
    w[at] = at % 2 ? NAN : -INFINITY;
    const quant_params p = qp(8, 16, at % 3 == 0, PH_DTYPE_BF16);
    CHECK(variants_agree(&p, w, PH_DTYPE_F32, 3, 40));
    w[at] = keep;
  }
}

/* Every SIMD variant this CPU runs gives the scalar bytes over the grid. */
static void test_variants_bit_identical(void) {
  const quant_variant simd[2] = {QUANT_AVX2, QUANT_AVX512};
  for (int i = 0; i < 2; i++) {
    if (!quant_variant_available(simd[i])) {
      fprintf(stderr, "  (variant %d does not run on this CPU: not compared)\n", (int)simd[i]);
      continue;
    }
    g_simd = simd[i];
    variant_grid();
  }
  diag d;
  const quant_params p = {8, 32, 1, PH_DTYPE_F32};
  const float w[32] = {1.0f};
  uint8_t b[32];
  float s[1];
  if (!quant_variant_available(QUANT_AVX512))
    CHECK_STATUS(quant_quantize_with(QUANT_AVX512, &p, w, PH_DTYPE_F32, 1, 32, b, s, NULL, "w", &d),
                 PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(quant_quantize_with(QUANT_SCALAR, &p, w, PH_DTYPE_F32, 1, 32, b, s, NULL, "w", &d),
               PH_OK, d.msg);
}

int main(void) {
  RUN(test_sizes);
  RUN(test_bad_params);
  RUN(test_layout_int4_nibbles);
  RUN(test_layout_int8);
  RUN(test_zero_point_packing);
  RUN(test_rounding_halves_away);
  RUN(test_symmetric_tie);
  RUN(test_k_not_multiple);
  RUN(test_all_zero_block);
  RUN(test_one_huge_value);
  RUN(test_non_finite);
  RUN(test_error_bound_random);
  RUN(test_half_sources);
  RUN(test_rms_representable_is_zero);
  RUN(test_variants_bit_identical);
  return check_finish();
}
