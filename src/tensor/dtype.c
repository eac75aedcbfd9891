/* dtype — element types and exact conversions. See dtype.h. */
#include "tensor/dtype.h"

#include <math.h>
#include <string.h>

typedef struct dtype_row {
  ph_dtype dtype;
  int onnx; /* TensorProto.DataType */
  size_t size;
  int is_float;
  const char *name;       /* ours */
  const char *st_name;    /* safetensors */
  const char *torch_name; /* config.json "dtype"/"torch_dtype" */
} dtype_row;

/* One table for sizes and every spelling. */
static const dtype_row DTYPES[] = {
    {PH_DTYPE_F32, 1, 4, 1, "f32", "F32", "float32"},
    {PH_DTYPE_F16, 10, 2, 1, "f16", "F16", "float16"},
    {PH_DTYPE_BF16, 16, 2, 1, "bf16", "BF16", "bfloat16"},
    {PH_DTYPE_I64, 7, 8, 0, "i64", "I64", "int64"},
    {PH_DTYPE_I32, 6, 4, 0, "i32", "I32", "int32"},
    {PH_DTYPE_I8, 3, 1, 0, "i8", "I8", "int8"},
    {PH_DTYPE_U8, 2, 1, 0, "u8", "U8", "uint8"},
    {PH_DTYPE_F8E4M3, 17, 1, 1, "f8e4m3", "F8_E4M3", "float8_e4m3fn"},
};
#define N_DTYPES (sizeof DTYPES / sizeof DTYPES[0])

static const dtype_row *row_of(ph_dtype dt) {
  for (size_t i = 0; i < N_DTYPES; i++)
    if (DTYPES[i].dtype == dt) return &DTYPES[i];
  return NULL;
}

size_t dtype_size(ph_dtype dt) {
  const dtype_row *r = row_of(dt);
  return r ? r->size : 0;
}

int dtype_is_float(ph_dtype dt) {
  const dtype_row *r = row_of(dt);
  return r ? r->is_float : 0;
}

int dtype_is_compute_float(ph_dtype dt) {
  return dt == PH_DTYPE_F32 || dt == PH_DTYPE_F16 || dt == PH_DTYPE_BF16;
}

const char *ph_dtype_name(ph_dtype dt) {
  const dtype_row *r = row_of(dt);
  return r ? r->name : "invalid";
}

const char *dtype_safetensors_name(ph_dtype dt) {
  const dtype_row *r = row_of(dt);
  return r ? r->st_name : NULL;
}

ph_dtype dtype_from_safetensors_name(const char *name) {
  if (!name) return PH_DTYPE_INVALID;
  for (size_t i = 0; i < N_DTYPES; i++)
    if (strcmp(DTYPES[i].st_name, name) == 0) return DTYPES[i].dtype;
  return PH_DTYPE_INVALID;
}

ph_dtype dtype_from_name(const char *name) {
  if (!name) return PH_DTYPE_INVALID;
  for (size_t i = 0; i < N_DTYPES; i++)
    if (strcmp(DTYPES[i].name, name) == 0 || strcmp(DTYPES[i].torch_name, name) == 0)
      return DTYPES[i].dtype;
  return PH_DTYPE_INVALID;
}

ph_dtype dtype_from_onnx(int64_t code) {
  for (size_t i = 0; i < N_DTYPES; i++)
    if (DTYPES[i].onnx == code) return DTYPES[i].dtype;
  return PH_DTYPE_INVALID;
}

int dtype_to_onnx(ph_dtype dt) {
  const dtype_row *r = row_of(dt);
  return r ? r->onnx : 0;
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

float bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb; /* round to nearest, ties to even; overflows to inf correctly */
  return (uint16_t)(u >> 16);
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13)); /* inf / NaN */
  if (exp == 0) {
    /* zero or subnormal: man * 2^-24, exact in f32 */
    float v = (float)man * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
  if (a < 0x38800000u) {
    /* f16 subnormal or zero: value = a_float; scale to units of 2^-24 and round to even */
    if (a < 0x33000000u) return sign; /* < 2^-25: rounds to zero (tie at 2^-25 goes to even 0) */
    uint32_t exp = a >> 23;
    uint32_t man = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exp; /* value = man * 2^(exp-150); units of 2^-24 => shift 126-exp */
    uint32_t q = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
  }
  /* normal: rebias exponent, round mantissa 23 -> 10 bits to nearest even */
  uint32_t r = a - 0x38000000u; /* exponent -112 */
  uint32_t lsb = (r >> 13) & 1u;
  r += 0xfffu + lsb;
  return (uint16_t)(sign | (r >> 13));
}

float f8e4m3_to_f32(uint8_t v) {
  uint32_t sign = v & 0x80u;
  uint32_t exp = (v >> 3) & 0xfu;
  uint32_t man = v & 0x7u;
  float r;
  if (exp == 0xf && man == 0x7) return bits_f32(0x7fc00000u | (sign << 24)); /* NaN */
  if (exp == 0)
    r = (float)man * (1.0f / 512.0f); /* subnormal: man * 2^-9 */
  else
    r = ldexpf(1.0f + (float)man / 8.0f, (int)exp - 7);
  return sign ? -r : r;
}

/* Reads element i of a buffer of dtype s as f32 (memcpy: no alignment needed). */
static int load_as_f32(const void *src, ph_dtype s, size_t i, float *out) {
  const unsigned char *p = (const unsigned char *)src + i * dtype_size(s);
  switch (s) {
  case PH_DTYPE_F32:
    memcpy(out, p, 4);
    return 1;
  case PH_DTYPE_F16: {
    uint16_t h;
    memcpy(&h, p, 2);
    *out = f16_to_f32(h);
    return 1;
  }
  case PH_DTYPE_BF16: {
    uint16_t h;
    memcpy(&h, p, 2);
    *out = bf16_to_f32(h);
    return 1;
  }
  case PH_DTYPE_F8E4M3:
    *out = f8e4m3_to_f32(*p);
    return 1;
  case PH_DTYPE_I64: {
    int64_t v;
    memcpy(&v, p, 8);
    *out = (float)v;
    return 1;
  }
  case PH_DTYPE_I32: {
    int32_t v;
    memcpy(&v, p, 4);
    *out = (float)v;
    return 1;
  }
  case PH_DTYPE_I8:
    *out = (float)(int8_t)*p;
    return 1;
  case PH_DTYPE_U8:
    *out = (float)*p;
    return 1;
  default:
    return 0;
  }
}

ph_status dtype_convert(void *dst, ph_dtype t, const void *src, ph_dtype s, size_t n, diag *d) {
  RETURN_ERROR_IF(!dtype_size(t) || !dtype_size(s), d, PH_ERR_INVALID_ARGUMENT,
                  "convert: invalid dtype");
  if (t == s) {
    if (dst != src && n) memmove(dst, src, n * dtype_size(s));
    return PH_OK;
  }
  int t_ok = t == PH_DTYPE_F32 || t == PH_DTYPE_F16 || t == PH_DTYPE_BF16;
  int s_ok = t == PH_DTYPE_F32 || dtype_is_float(s);
  RETURN_ERROR_IF(!t_ok || !s_ok, d, PH_ERR_UNSUPPORTED, "convert %s to %s is not supported",
                  ph_dtype_name(s), ph_dtype_name(t));
  unsigned char *o = dst;
  for (size_t i = 0; i < n; i++) {
    float v;
    load_as_f32(src, s, i, &v);
    if (t == PH_DTYPE_F32) {
      memcpy(o + 4 * i, &v, 4);
    } else {
      uint16_t h = t == PH_DTYPE_F16 ? f32_to_f16(v) : f32_to_bf16(v);
      memcpy(o + 2 * i, &h, 2);
    }
  }
  return PH_OK;
}

/* Counts elements whose exponent bits (mask) are all set, first index in *first. */
#define COUNT_ALL_ONES(T, mask)                                                                    \
  do {                                                                                             \
    const unsigned char *p_ = data;                                                                \
    for (int64_t i_ = 0; i_ < n; i_++) {                                                           \
      T u_;                                                                                        \
      memcpy(&u_, p_ + (size_t)i_ * sizeof u_, sizeof u_);                                         \
      if ((u_ & (mask)) == (mask)) {                                                               \
        if (count == 0 && first) *first = i_;                                                      \
        count++;                                                                                   \
      }                                                                                            \
    }                                                                                              \
  } while (0)

int64_t dtype_count_nonfinite(ph_dtype dt, const void *data, int64_t n, int64_t *first) {
  int64_t count = 0;
  if (!data || n <= 0) return 0;
  switch (dt) {
  case PH_DTYPE_F32:
    COUNT_ALL_ONES(uint32_t, 0x7f800000u);
    break;
  case PH_DTYPE_F16:
    COUNT_ALL_ONES(uint16_t, 0x7c00u);
    break;
  case PH_DTYPE_BF16:
    COUNT_ALL_ONES(uint16_t, 0x7f80u);
    break;
  case PH_DTYPE_F8E4M3:
    COUNT_ALL_ONES(uint8_t, 0x7fu);
    break;
  default:
    break;
  }
  return count;
}
