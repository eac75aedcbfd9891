/* test_dtype — dtype table, the scalar conversions and dtype_convert.
 *
 * The half-precision conversions are checked exhaustively where that is cheap (all 65536 bf16
 * and f16 patterns to f32 and back) and against an independent reference where it is not:
 * f32 -> bf16/f16 is compared with "the nearest representable value" found by binary search in
 * a table of every half-precision value computed in double from the format definition, ties
 * to the even pattern, over about two million f32 inputs: random mantissas in every exponent,
 * every midpoint between adjacent representable values (so ties with even and odd lower
 * neighbours) and the floats right beside each midpoint. The reference shares no code or bit
 * trick with dtype.c. Runs in well under a second, a few seconds under ASan.
 */
#include <float.h>
#include <stdint.h>

#include "check.h"

#include "base/rng.h"
#include "tensor/dtype.h"

/* ---- reference values from the format definitions ----------------------------------------- */

/* Positive patterns 0 .. inf: the pattern of +inf doubles as the "next value after the largest
 * finite one" (2^128 for bf16, 2^16 for f16), which is exactly where IEEE rounding puts the
 * overflow threshold: values at or beyond the midpoint to it round to inf (the tie goes to the
 * even pattern, which inf is). */
#define BF16_INF 0x7f80u
#define F16_INF  0x7c00u

static double bf16_tab[BF16_INF + 1];
static double f16_tab[F16_INF + 1];

static void build_tables(void) {
  for (unsigned i = 0; i <= BF16_INF; i++) {
    unsigned e = i >> 7, m = i & 0x7fu; /* 8 exponent bits, bias 127, 7 mantissa bits */
    bf16_tab[i] = e == 0 ? ldexp((double)m, -126 - 7) : ldexp(128.0 + m, (int)e - 127 - 7);
  }
  for (unsigned i = 0; i <= F16_INF; i++) {
    unsigned e = i >> 10, m = i & 0x3ffu; /* 5 exponent bits, bias 15, 10 mantissa bits */
    f16_tab[i] = e == 0 ? ldexp((double)m, -14 - 10) : ldexp(1024.0 + m, (int)e - 15 - 10);
  }
}

/* Round-to-nearest-even of a non-NaN float into the table's format. */
static uint16_t round_ref(float f, const double *tab, unsigned inf_pattern) {
  uint16_t sign = signbit(f) ? 0x8000u : 0;
  double a = fabs((double)f);
  if (a >= tab[inf_pattern]) return (uint16_t)(sign | inf_pattern);
  unsigned lo = 0, hi = inf_pattern; /* tab[lo] <= a < tab[hi] */
  while (hi - lo > 1) {
    unsigned mid = lo + (hi - lo) / 2;
    if (tab[mid] <= a)
      lo = mid;
    else
      hi = mid;
  }
  if (tab[lo] == a) return (uint16_t)(sign | lo);
  /* Both differences are exact in double: a and the neighbours lie on a common grid only a few
   * dozen bits wide. */
  double below = a - tab[lo], above = tab[hi] - a;
  unsigned pick = below < above ? lo : above < below ? hi : (lo % 2 == 0 ? lo : hi);
  return (uint16_t)(sign | pick);
}

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static int bf16_is_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu); }
static int f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu); }

/* ---- f32 -> bf16 / f16 against the reference ---------------------------------------------- */

typedef struct round_stats {
  long n_checked;
  long n_bad_bf16;
  long n_bad_f16;
} round_stats;

static void check_rounding(float f, round_stats *s) {
  s->n_checked++;
  uint16_t b = f32_to_bf16(f), h = f32_to_f16(f);
  if (isnan(f)) {
    /* NaN stays NaN, quiet, with its sign. */
    uint16_t sign = signbit(f) ? 0x8000u : 0;
    if (!bf16_is_nan(b) || !(b & 0x40u) || (b & 0x8000u) != sign) {
      if (s->n_bad_bf16++ < 8)
        fprintf(stderr, "       bf16 of NaN 0x%08" PRIx32 ": got 0x%04x\n", bits_of(f), b);
    }
    if (!f16_is_nan(h) || !(h & 0x200u) || (h & 0x8000u) != sign) {
      if (s->n_bad_f16++ < 8)
        fprintf(stderr, "       f16 of NaN 0x%08" PRIx32 ": got 0x%04x\n", bits_of(f), h);
    }
    return;
  }
  uint16_t want_b = round_ref(f, bf16_tab, BF16_INF), want_h = round_ref(f, f16_tab, F16_INF);
  if (b != want_b && s->n_bad_bf16++ < 8)
    fprintf(stderr, "       f32_to_bf16(%.9g = 0x%08" PRIx32 "): got 0x%04x, expected 0x%04x\n",
            (double)f, bits_of(f), b, want_b);
  if (h != want_h && s->n_bad_f16++ < 8)
    fprintf(stderr, "       f32_to_f16(%.9g = 0x%08" PRIx32 "): got 0x%04x, expected 0x%04x\n",
            (double)f, bits_of(f), h, want_h);
}

/* Checks a tie point and the floats on either side of it, both signs. */
static void check_around(double mid, round_stats *s, long *inexact) {
  float f = (float)mid;
  if ((double)f != mid) {
    (*inexact)++;
    return;
  }
  float around[3] = {nextafterf(f, 0.0f), f, nextafterf(f, INFINITY)};
  for (int i = 0; i < 3; i++) {
    check_rounding(around[i], s);
    check_rounding(-around[i], s);
  }
}

static void test_rounding_random_every_exponent(void) {
  round_stats s = {0, 0, 0};
  rng r = rng_seed(0x5eed);
  /* 256 exponents x 2 signs x 3500 mantissas ~ 1.8 million; exponent 255 gives NaNs. */
  for (uint32_t e = 0; e < 256; e++)
    for (uint32_t sign = 0; sign < 2; sign++) {
      check_rounding(float_of(sign << 31 | e << 23), &s); /* mantissa 0: powers of two, inf */
      check_rounding(float_of(sign << 31 | e << 23 | 0x7fffffu), &s);
      for (int i = 0; i < 3500; i++) {
        uint32_t m = (uint32_t)rng_next(&r) & 0x7fffffu;
        /* Half the samples keep only the top mantissa bits: those sit on or near the bf16 and
         * f16 rounding boundaries far more often than uniform ones. */
        if (i & 1) m &= ~((1u << (uint32_t)rng_below(&r, 23)) - 1u);
        check_rounding(float_of(sign << 31 | e << 23 | m), &s);
      }
    }
  printf("     %ld values\n", s.n_checked);
  CHECK(s.n_checked > 1700000);
  CHECK_EQ_INT(s.n_bad_bf16, 0);
  CHECK_EQ_INT(s.n_bad_f16, 0);
}

static void test_rounding_ties(void) {
  round_stats s = {0, 0, 0};
  long inexact = 0;
  /* Every pair of adjacent representable values, the last finite one with the overflow
   * threshold included: lower neighbours alternate even and odd. */
  for (unsigned i = 0; i < BF16_INF; i++)
    check_around((bf16_tab[i] + bf16_tab[i + 1]) / 2, &s, &inexact);
  for (unsigned i = 0; i < F16_INF; i++)
    check_around((f16_tab[i] + f16_tab[i + 1]) / 2, &s, &inexact);
  printf("     %ld values\n", s.n_checked);
  CHECK_EQ_INT(inexact, 0); /* every midpoint is an f32 */
  CHECK_EQ_INT(s.n_bad_bf16, 0);
  CHECK_EQ_INT(s.n_bad_f16, 0);
}

static void test_rounding_named_cases(void) {
  /* Overflow of f16: 65520 is the midpoint between 65504 (odd mantissa) and 2^16. */
  CHECK_EQ_INT(f32_to_f16(65520.0f), 0x7c00);
  CHECK_EQ_INT(f32_to_f16(-65520.0f), 0xfc00);
  CHECK_EQ_INT(f32_to_f16(65519.99f), 0x7bff);
  CHECK_EQ_INT(f32_to_f16(65504.0f), 0x7bff);
  CHECK_EQ_INT(f32_to_f16(1e10f), 0x7c00);
  CHECK_EQ_INT(f32_to_f16(FLT_MAX), 0x7c00);
  CHECK_EQ_INT(f32_to_f16(INFINITY), 0x7c00);
  CHECK_EQ_INT(f32_to_f16(-INFINITY), 0xfc00);
  CHECK_EQ_INT(f32_to_f16(0.0f), 0x0000);
  CHECK_EQ_INT(f32_to_f16(-0.0f), 0x8000);
  CHECK_EQ_INT(f32_to_f16(1.0f), 0x3c00);
  /* f16 subnormals: 2^-24 is the smallest; 2^-25 ties to 0 (even), above it goes to 1. */
  CHECK_EQ_INT(f32_to_f16(ldexpf(1.0f, -24)), 0x0001);
  CHECK_EQ_INT(f32_to_f16(ldexpf(1.0f, -25)), 0x0000);
  CHECK_EQ_INT(f32_to_f16(-ldexpf(1.0f, -25)), 0x8000);
  CHECK_EQ_INT(f32_to_f16(nextafterf(ldexpf(1.0f, -25), 1.0f)), 0x0001);
  CHECK_EQ_INT(f32_to_f16(ldexpf(3.0f, -25)), 0x0002); /* 1.5 units: tie to even 2 */
  CHECK_EQ_INT(f32_to_f16(ldexpf(5.0f, -25)), 0x0002); /* 2.5 units: tie to even 2 */
  CHECK_EQ_INT(f32_to_f16(ldexpf(1.0f, -14)), 0x0400); /* smallest normal */
  CHECK_EQ_INT(f32_to_f16(nextafterf(ldexpf(1.0f, -14), 0.0f)), 0x0400);
  CHECK_EQ_INT(f32_to_f16(FLT_TRUE_MIN), 0x0000);
  CHECK_EQ_INT(f32_to_f16(-FLT_TRUE_MIN), 0x8000);
  /* bf16: 1 + 2^-8 ties to 1 (even), 1 + 3*2^-8 ties to 1 + 2^-6 (even). */
  CHECK_EQ_INT(f32_to_bf16(1.0f + ldexpf(1.0f, -8)), 0x3f80);
  CHECK_EQ_INT(f32_to_bf16(1.0f + ldexpf(3.0f, -8)), 0x3f82);
  CHECK_EQ_INT(f32_to_bf16(FLT_MAX), 0x7f80);
  CHECK_EQ_INT(f32_to_bf16(-FLT_MAX), 0xff80);
  CHECK_EQ_INT(f32_to_bf16(-0.0f), 0x8000);
  CHECK_EQ_INT(f32_to_bf16(FLT_TRUE_MIN), 0x0000);
  CHECK_EQ_INT(f32_to_bf16(INFINITY), 0x7f80);
  CHECK_EQ_INT(f32_to_bf16(-INFINITY), 0xff80);
  /* NaNs, quiet or signalling, any payload, either sign. */
  static const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u,
                                  0x7fbfffffu, 0x7f80ffffu, 0x7fffffffu, 0xffffffffu};
  for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
    uint16_t b = f32_to_bf16(float_of(nans[i])), h = f32_to_f16(float_of(nans[i]));
    CHECK(bf16_is_nan(b));
    CHECK(f16_is_nan(h));
    CHECK((b >> 15) == (nans[i] >> 31));
    CHECK((h >> 15) == (nans[i] >> 31));
  }
}

/* ---- exhaustive half-precision -> f32 -> back ---------------------------------------------- */

static void test_bf16_exhaustive(void) {
  long bad_value = 0, bad_back = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = bf16_to_f32((uint16_t)h);
    unsigned mag = h & 0x7fffu;
    int neg = (h & 0x8000u) != 0;
    int value_ok;
    if (mag > BF16_INF)
      value_ok = isnan(f);
    else if (mag == BF16_INF)
      value_ok = isinf(f) && (signbit(f) != 0) == neg;
    else
      value_ok = fabs((double)f) == bf16_tab[mag] && (signbit(f) != 0) == neg;
    if (!value_ok && bad_value++ < 8)
      fprintf(stderr, "       bf16_to_f32(0x%04x) = %.9g\n", (unsigned)h, (double)f);
    uint16_t back = f32_to_bf16(f);
    int back_ok = mag > BF16_INF ? bf16_is_nan(back) : back == h;
    if (!back_ok && bad_back++ < 8)
      fprintf(stderr, "       bf16 0x%04x -> f32 -> 0x%04x\n", (unsigned)h, back);
  }
  CHECK_EQ_INT(bad_value, 0);
  CHECK_EQ_INT(bad_back, 0);
}

static void test_f16_exhaustive(void) {
  long bad_value = 0, bad_back = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = f16_to_f32((uint16_t)h);
    unsigned mag = h & 0x7fffu;
    int neg = (h & 0x8000u) != 0;
    int value_ok;
    if (mag > F16_INF)
      value_ok = isnan(f);
    else if (mag == F16_INF)
      value_ok = isinf(f) && (signbit(f) != 0) == neg;
    else
      value_ok = fabs((double)f) == f16_tab[mag] && (signbit(f) != 0) == neg;
    if (!value_ok && bad_value++ < 8)
      fprintf(stderr, "       f16_to_f32(0x%04x) = %.9g\n", (unsigned)h, (double)f);
    uint16_t back = f32_to_f16(f);
    int back_ok = mag > F16_INF ? f16_is_nan(back) && (back & 0x8000u) == (h & 0x8000u) : back == h;
    if (!back_ok && bad_back++ < 8)
      fprintf(stderr, "       f16 0x%04x -> f32 -> 0x%04x\n", (unsigned)h, back);
  }
  CHECK_EQ_INT(bad_value, 0);
  CHECK_EQ_INT(bad_back, 0);
}

/* ---- f8e4m3 -------------------------------------------------------------------------------- */

/* e4m3fn: 1 sign, 4 exponent bits with bias 7, 3 mantissa bits; exponent 0 is subnormal
 * (m/8 * 2^-6); no infinities; only S.1111.111 is NaN, so the largest value is 1.75 * 2^8. */
static double f8e4m3_ref(unsigned v, int *is_nan) {
  unsigned s = v >> 7, e = (v >> 3) & 0xfu, m = v & 0x7u;
  *is_nan = e == 15 && m == 7;
  double mag = e == 0 ? (m / 8.0) * ldexp(1.0, 1 - 7) : (1.0 + m / 8.0) * ldexp(1.0, (int)e - 7);
  return s ? -mag : mag;
}

static void test_f8e4m3(void) {
  long bad = 0;
  double max_seen = 0;
  for (unsigned v = 0; v < 256; v++) {
    int is_nan;
    double want = f8e4m3_ref(v, &is_nan);
    float got = f8e4m3_to_f32((uint8_t)v);
    int ok = is_nan ? isnan(got) : (double)got == want && !signbit(got) == !signbit(want);
    if (!ok && bad++ < 8)
      fprintf(stderr, "       f8e4m3 0x%02x: got %.9g, want %.9g\n", v, (double)got, want);
    if (!is_nan && fabs(want) > max_seen) max_seen = fabs(want);
  }
  CHECK_EQ_INT(bad, 0);
  CHECK_NEAR(max_seen, 448.0, 0.0);
  CHECK_NEAR(f8e4m3_to_f32(0x7e), 448.0, 0.0);
  CHECK_NEAR(f8e4m3_to_f32(0xfe), -448.0, 0.0);
  CHECK_NEAR(f8e4m3_to_f32(0x38), 1.0, 0.0);
  CHECK_NEAR(f8e4m3_to_f32(0x01), ldexp(1.0, -9), 0.0);
  CHECK_NEAR(f8e4m3_to_f32(0x08), ldexp(1.0, -6), 0.0);
  CHECK(isnan(f8e4m3_to_f32(0x7f)));
  CHECK(isnan(f8e4m3_to_f32(0xff)));
  CHECK(!isnan(f8e4m3_to_f32(0x78))); /* S.1111.000 is 256, not infinity */
  CHECK(signbit(f8e4m3_to_f32(0x80)) && f8e4m3_to_f32(0x80) == 0.0f);
}

/* ---- the dtype table ---------------------------------------------------------------------- */

typedef struct dtype_expect {
  ph_dtype dtype;
  size_t size;
  int is_float;
  const char *name, *st_name, *torch_name; /* torch_name NULL: none documented */
} dtype_expect;

static const dtype_expect DTYPE_EXPECT[] = {
    {PH_DTYPE_F32, 4, 1, "f32", "F32", "float32"},
    {PH_DTYPE_F16, 2, 1, "f16", "F16", "float16"},
    {PH_DTYPE_BF16, 2, 1, "bf16", "BF16", "bfloat16"},
    {PH_DTYPE_I64, 8, 0, "i64", "I64", NULL},
    {PH_DTYPE_I32, 4, 0, "i32", "I32", NULL},
    {PH_DTYPE_I8, 1, 0, "i8", "I8", NULL},
    {PH_DTYPE_U8, 1, 0, "u8", "U8", NULL},
    {PH_DTYPE_F8E4M3, 1, 1, "f8e4m3", "F8_E4M3", "float8_e4m3fn"},
};
#define N_DTYPE_EXPECT (sizeof DTYPE_EXPECT / sizeof DTYPE_EXPECT[0])

static void test_dtype_table(void) {
  for (size_t i = 0; i < N_DTYPE_EXPECT; i++) {
    const dtype_expect *e = &DTYPE_EXPECT[i];
    CHECK_EQ_INT(dtype_size(e->dtype), e->size);
    CHECK_EQ_INT(dtype_is_float(e->dtype), e->is_float);
    CHECK_EQ_STR(ph_dtype_name(e->dtype), e->name);
    CHECK_EQ_STR(dtype_safetensors_name(e->dtype), e->st_name);
    CHECK_EQ_INT(dtype_from_name(e->name), e->dtype);
    CHECK_EQ_INT(dtype_from_safetensors_name(e->st_name), e->dtype);
    if (e->torch_name) CHECK_EQ_INT(dtype_from_name(e->torch_name), e->dtype);
    /* The two spellings are not interchangeable. */
    CHECK_EQ_INT(dtype_from_name(e->st_name), PH_DTYPE_INVALID);
    CHECK_EQ_INT(dtype_from_safetensors_name(e->name), PH_DTYPE_INVALID);
  }
  CHECK_EQ_INT(dtype_size(PH_DTYPE_INVALID), 0);
  CHECK_EQ_INT(dtype_size((ph_dtype)99), 0);
  CHECK_EQ_INT(dtype_is_float(PH_DTYPE_INVALID), 0);
  CHECK_EQ_STR(ph_dtype_name(PH_DTYPE_INVALID), "invalid");
  CHECK_EQ_STR(ph_dtype_name((ph_dtype)99), "invalid");
  CHECK(dtype_safetensors_name(PH_DTYPE_INVALID) == NULL);
  static const char *rejected[] = {"BOOL", "F64", "U16", "I16", "F8_E5M2", "", "f32 ", "Float32"};
  for (size_t i = 0; i < sizeof rejected / sizeof rejected[0]; i++) {
    CHECK_EQ_INT(dtype_from_safetensors_name(rejected[i]), PH_DTYPE_INVALID);
    CHECK_EQ_INT(dtype_from_name(rejected[i]), PH_DTYPE_INVALID);
  }
  CHECK_EQ_INT(dtype_from_name(NULL), PH_DTYPE_INVALID);
  CHECK_EQ_INT(dtype_from_safetensors_name(NULL), PH_DTYPE_INVALID);
}

/* ---- dtype_convert ------------------------------------------------------------------------ */

#define CONV_N 37 /* odd, so nothing lines up by accident */

/* Fills CONV_N elements of dtype dt at an arbitrary (unaligned) address with varied values. */
static void fill_source(unsigned char *p, ph_dtype dt, rng *r) {
  for (size_t i = 0; i < CONV_N; i++) {
    unsigned char *q = p + i * dtype_size(dt);
    uint64_t x = rng_next(r);
    switch (dt) {
    case PH_DTYPE_F32: {
      float f = i == 0 ? NAN : i == 1 ? -INFINITY : i == 2 ? -0.0f : rng_range(r, -70000, 70000);
      memcpy(q, &f, 4);
      break;
    }
    case PH_DTYPE_I64: {
      int64_t v = i == 0 ? INT64_MIN : i == 1 ? ((int64_t)1 << 40) + 1 : (int64_t)x;
      memcpy(q, &v, 8);
      break;
    }
    default:
      memcpy(q, &x, dtype_size(dt));
      break; /* any bit pattern is a value */
    }
  }
}

/* The expected f32 for element i, from the scalar functions (tested above). */
static float source_as_f32(const unsigned char *p, ph_dtype dt, size_t i) {
  const unsigned char *q = p + i * dtype_size(dt);
  uint16_t h;
  switch (dt) {
  case PH_DTYPE_F32: {
    float f;
    memcpy(&f, q, 4);
    return f;
  }
  case PH_DTYPE_F16:
    memcpy(&h, q, 2);
    return f16_to_f32(h);
  case PH_DTYPE_BF16:
    memcpy(&h, q, 2);
    return bf16_to_f32(h);
  case PH_DTYPE_F8E4M3:
    return f8e4m3_to_f32(*q);
  case PH_DTYPE_I64: {
    int64_t v;
    memcpy(&v, q, 8);
    return (float)v;
  }
  case PH_DTYPE_I32: {
    int32_t v;
    memcpy(&v, q, 4);
    return (float)v;
  }
  case PH_DTYPE_I8:
    return (float)(int8_t)*q;
  case PH_DTYPE_U8:
    return (float)*q;
  default:
    return 0;
  }
}

/* 1 when the pair must convert (dtype.h, plus float -> f16/bf16 from any float: see below). */
static int convert_supported(ph_dtype t, ph_dtype s) {
  if (t == s) return 1;
  if (t == PH_DTYPE_F32) return 1;
  return (t == PH_DTYPE_F16 || t == PH_DTYPE_BF16) && dtype_is_float(s);
}

static void test_convert_pairs(void) {
  rng r = rng_seed(77);
  unsigned char src_buf[CONV_N * 8 + 1], dst_buf[CONV_N * 8 + 2], want[CONV_N * 8];
  long bad = 0;
  for (size_t a = 0; a < N_DTYPE_EXPECT; a++)
    for (size_t b = 0; b < N_DTYPE_EXPECT; b++) {
      ph_dtype s = DTYPE_EXPECT[a].dtype, t = DTYPE_EXPECT[b].dtype;
      /* Odd offsets: neither side is aligned for its type. */
      unsigned char *src = src_buf + 1, *dst = dst_buf + 1;
      fill_source(src, s, &r);
      memset(dst_buf, 0xcd, sizeof dst_buf);
      diag d;
      diag_clear(&d);
      ph_status st = dtype_convert(dst, t, src, s, CONV_N, &d);
      if (!convert_supported(t, s)) {
        CHECK_STATUS(st, PH_ERR_UNSUPPORTED, d.msg);
        CHECK_CONTAINS(d.msg, ph_dtype_name(s));
        CHECK_CONTAINS(d.msg, ph_dtype_name(t));
        continue;
      }
      CHECK_STATUS(st, PH_OK, d.msg);
      size_t tb = dtype_size(t);
      if (t == s) {
        memcpy(want, src, CONV_N * tb);
      } else {
        for (size_t i = 0; i < CONV_N; i++) {
          float v = source_as_f32(src, s, i);
          uint16_t h;
          switch (t) {
          case PH_DTYPE_F32:
            memcpy(want + 4 * i, &v, 4);
            break;
          case PH_DTYPE_F16:
            h = f32_to_f16(v);
            memcpy(want + 2 * i, &h, 2);
            break;
          default:
            h = f32_to_bf16(v);
            memcpy(want + 2 * i, &h, 2);
            break;
          }
        }
      }
      if (memcmp(dst, want, CONV_N * tb) != 0 && bad++ < 8)
        fprintf(stderr, "       convert %s -> %s: wrong bytes\n", ph_dtype_name(s),
                ph_dtype_name(t));
      /* Nothing written past the end. */
      CHECK(dst[CONV_N * tb] == 0xcd);
    }
  CHECK_EQ_INT(bad, 0);
}

static void test_convert_edges(void) {
  diag d;
  diag_clear(&d);
  float f[3] = {1.5f, -2.0f, 65520.0f};
  uint16_t h[3];
  CHECK_STATUS(dtype_convert(h, PH_DTYPE_F16, f, PH_DTYPE_F32, 3, &d), PH_OK, d.msg);
  CHECK_EQ_INT(h[0], 0x3e00);
  CHECK_EQ_INT(h[1], 0xc000);
  CHECK_EQ_INT(h[2], 0x7c00);
  CHECK_STATUS(dtype_convert(h, PH_DTYPE_F16, f, PH_DTYPE_F32, 0, &d), PH_OK, d.msg);
  CHECK_STATUS(dtype_convert(f, PH_DTYPE_F32, f, PH_DTYPE_F32, 3, &d), PH_OK, d.msg); /* in place */
  CHECK_NEAR(f[0], 1.5, 0.0);
  CHECK_STATUS(dtype_convert(h, PH_DTYPE_INVALID, f, PH_DTYPE_F32, 3, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  CHECK_STATUS(dtype_convert(h, PH_DTYPE_F16, f, (ph_dtype)42, 3, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  CHECK_STATUS(dtype_convert(h, PH_DTYPE_I32, f, PH_DTYPE_F32, 3, NULL), PH_ERR_UNSUPPORTED, NULL);
  CHECK_STATUS(dtype_convert(h, PH_DTYPE_F8E4M3, f, PH_DTYPE_F32, 3, &d), PH_ERR_UNSUPPORTED,
               d.msg);
  CHECK_CONTAINS(d.msg, "f8e4m3");
}

/* NaN and infinities found by bits in every float dtype, at any alignment; finite extremes,
 * subnormals and integers are not counted. */
static void test_count_nonfinite(void) {
  unsigned char buf[1 + 8 * 4];
  const float f[8] = {1.0f, -0.0f, 3.4e38f, 1e-45f, 0.0f, 0.0f, 0.0f, 2.0f};
  const uint32_t inf = 0x7f800000u, ninf = 0xff800000u, nan = 0x7fc00001u;
  memcpy(buf + 1, f, sizeof f); /* unaligned on purpose */
  int64_t first = -7;
  CHECK_EQ_INT(dtype_count_nonfinite(PH_DTYPE_F32, buf + 1, 8, &first), 0);
  CHECK_EQ_INT(first, -7); /* untouched */
  memcpy(buf + 1 + 4 * 4, &nan, 4);
  memcpy(buf + 1 + 5 * 4, &inf, 4);
  memcpy(buf + 1 + 6 * 4, &ninf, 4);
  CHECK_EQ_INT(dtype_count_nonfinite(PH_DTYPE_F32, buf + 1, 8, &first), 3);
  CHECK_EQ_INT(first, 4);
  CHECK_EQ_INT(dtype_count_nonfinite(PH_DTYPE_F32, buf + 1, 4, NULL), 0);
  const uint16_t h[6] = {0x7bff /* f16 max */, 0x0001, 0x7c00, 0xfc00, 0x7e00, 0x3c00};
  CHECK_EQ_INT(dtype_count_nonfinite(PH_DTYPE_F16, h, 6, &first), 3);
  CHECK_EQ_INT(first, 2);
  const uint16_t b[5] = {0x7f7f /* bf16 max */, 0x0001, 0x3f80, 0xff80, 0x7fc1};
  CHECK_EQ_INT(dtype_count_nonfinite(PH_DTYPE_BF16, b, 5, &first), 2);
  CHECK_EQ_INT(first, 3);
  const uint8_t e4[4] = {0x7e /* 448 */, 0x7f, 0xff, 0x00};
  CHECK_EQ_INT(dtype_count_nonfinite(PH_DTYPE_F8E4M3, e4, 4, &first), 2);
  CHECK_EQ_INT(first, 1);
  const int32_t ints[2] = {0x7f800000, -1};
  CHECK_EQ_INT(dtype_count_nonfinite(PH_DTYPE_I32, ints, 2, &first), 0);
  CHECK_EQ_INT(dtype_count_nonfinite(PH_DTYPE_F32, NULL, 8, &first), 0);
  CHECK_EQ_INT(dtype_count_nonfinite(PH_DTYPE_F32, buf + 1, 0, &first), 0);
}

int main(void) {
  build_tables();
  RUN(test_rounding_random_every_exponent);
  RUN(test_rounding_ties);
  RUN(test_rounding_named_cases);
  RUN(test_bf16_exhaustive);
  RUN(test_f16_exhaustive);
  RUN(test_f8e4m3);
  RUN(test_dtype_table);
  RUN(test_convert_pairs);
  RUN(test_convert_edges);
  RUN(test_count_nonfinite);
  return check_finish();
}
