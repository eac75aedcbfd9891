/* test_tensor — shapes (overflow-checked), the run-time tensor and its element access.
 *
 * tensor_load_f32 / tensor_store_f32 are what every op reads and writes through; here they are
 * checked against the scalar conversions of dtype.h (tested exhaustively in test_dtype.c), at an
 * offset, with the neighbours of the written range left untouched.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"

#include "tensor/dtype.h"
#include "tensor/tensor.h"

static void test_shape(void) {
  shape s = shape_3d(2, 3, 4);
  CHECK_EQ_INT(s.n_dims, 3);
  CHECK_EQ_INT(shape_numel(&s), 24);
  CHECK_EQ_INT(shape_bytes(&s, PH_DTYPE_BF16), 48);
  CHECK_EQ_INT(shape_bytes(&s, PH_DTYPE_INVALID), -1);
  char buf[64];
  CHECK_EQ_STR(shape_format(&s, buf, sizeof buf), "[2, 3, 4]");
  CHECK_EQ_STR(shape_format(&s, buf, 5), "[2, ");
  shape t = shape_make(3, (int64_t[]){2, 3, 4});
  CHECK(shape_equal(&s, &t));
  t.dims[2] = 5;
  CHECK(!shape_equal(&s, &t));
  shape scalar = shape_make(0, NULL);
  CHECK_EQ_INT(shape_numel(&scalar), 1);
  CHECK_EQ_STR(shape_format(&scalar, buf, sizeof buf), "[]");
  /* untrusted dims: a negative dim or an int64 overflow is -1, never a wrapped count */
  shape neg = shape_2d(3, -1);
  CHECK_EQ_INT(shape_numel(&neg), -1);
  shape big = shape_3d(INT64_C(1) << 32, INT64_C(1) << 31, 2);
  CHECK_EQ_INT(shape_numel(&big), -1);
  shape edge = shape_2d(INT64_C(1) << 32, INT64_C(1) << 30); /* 2^62 elements: fits */
  CHECK_EQ_INT(shape_numel(&edge), INT64_C(1) << 62);
  CHECK_EQ_INT(shape_bytes(&edge, PH_DTYPE_F32), -1); /* 2^64 bytes do not */
  shape clamp = shape_make(TENSOR_MAX_DIMS + 3, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  CHECK_EQ_INT(clamp.n_dims, TENSOR_MAX_DIMS);
}

static void test_tensor_make(void) {
  float buf[24];
  tensor t = tensor_make(PH_DTYPE_F32, 3, (int64_t[]){2, 3, 4}, buf);
  CHECK_EQ_INT(t.dtype, PH_DTYPE_F32);
  CHECK_EQ_INT(t.rank, 3);
  CHECK_EQ_INT(t.dims[0], 2);
  CHECK_EQ_INT(t.dims[1], 3);
  CHECK_EQ_INT(t.dims[2], 4);
  for (int i = 3; i < TENSOR_MAX_DIMS; i++) CHECK_EQ_INT(t.dims[i], 0);
  CHECK(t.data == buf);
  CHECK_EQ_INT(tensor_numel(&t), 24);
  tensor s = tensor_make(PH_DTYPE_I64, 0, NULL, buf);
  CHECK_EQ_INT(s.rank, 0);
  CHECK_EQ_INT(tensor_numel(&s), 1);
  tensor e = tensor_make(PH_DTYPE_F32, 2, (int64_t[]){5, 0}, NULL);
  CHECK_EQ_INT(tensor_numel(&e), 0);
  int64_t many[TENSOR_MAX_DIMS + 2];
  for (int i = 0; i < TENSOR_MAX_DIMS + 2; i++) many[i] = 2;
  tensor c = tensor_make(PH_DTYPE_F32, TENSOR_MAX_DIMS + 2, many, NULL);
  CHECK_EQ_INT(c.rank, TENSOR_MAX_DIMS);
  CHECK_EQ_INT(tensor_numel(&c), 1 << TENSOR_MAX_DIMS);
  tensor n = tensor_make(PH_DTYPE_F32, -1, many, NULL);
  CHECK_EQ_INT(n.rank, 0);
}

/* Values that round differently in f16 and bf16, a tie, a subnormal, overflow and NaN. */
static const float VALUES[] = {1.0f,  -2.5f, 0.1f, 3.14159265f, 1.00048828125f /* f16 tie */,
                               1e-6f, 7e4f,  -0.0f};
#define N_VALUES ((int64_t)(sizeof VALUES / sizeof VALUES[0]))

static float rounded(ph_dtype dt, float v) {
  switch (dt) {
  case PH_DTYPE_F16:
    return f16_to_f32(f32_to_f16(v));
  case PH_DTYPE_BF16:
    return bf16_to_f32(f32_to_bf16(v));
  default:
    return v;
  }
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static void test_load_store(void) {
  const ph_dtype dts[] = {PH_DTYPE_F32, PH_DTYPE_F16, PH_DTYPE_BF16};
  for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
    const ph_dtype dt = dts[k];
    CHECK(dtype_is_compute_float(dt));
    const size_t es = dtype_size(dt);
    unsigned char mem[4 * (N_VALUES + 4)];
    memset(mem, 0xa5, sizeof mem);
    tensor t = tensor_make(dt, 1, (int64_t[]){N_VALUES + 4}, mem);
    tensor_store_f32(&t, 2, N_VALUES, VALUES); /* at an offset */
    float back[N_VALUES];
    tensor_load_f32(&t, 2, N_VALUES, back);
    for (int64_t i = 0; i < N_VALUES; i++) {
      CHECK(same_bits(back[i], rounded(dt, VALUES[i])));
      CHECK(same_bits(tensor_get_f32(&t, 2 + i), back[i]));
    }
    /* the neighbours of [2, 2 + N) are untouched */
    for (size_t b = 0; b < 2 * es; b++) CHECK_EQ_INT(mem[b], 0xa5);
    for (size_t b = (size_t)(2 + N_VALUES) * es; b < (size_t)(N_VALUES + 4) * es; b++)
      CHECK_EQ_INT(mem[b], 0xa5);
    tensor_set_f32(&t, 0, NAN);
    CHECK(isnan(tensor_get_f32(&t, 0)));
    tensor_set_f32(&t, 1, 1e30f); /* overflows f16 to inf, fits bf16 and f32 */
    CHECK(same_bits(tensor_get_f32(&t, 1), rounded(dt, 1e30f)));
  }
}

static void test_other_dtypes(void) {
  CHECK(!dtype_is_compute_float(PH_DTYPE_F8E4M3));
  CHECK(!dtype_is_compute_float(PH_DTYPE_I32));
  CHECK(!dtype_is_compute_float(PH_DTYPE_INVALID));
  /* integer tensors load as f32; a float store leaves them untouched (ops write ints directly) */
  int32_t ints[3] = {-7, 0, 123456};
  tensor t = tensor_make(PH_DTYPE_I32, 1, (int64_t[]){3}, ints);
  float f[3];
  tensor_load_f32(&t, 0, 3, f);
  CHECK_NEAR(f[0], -7.0f, 0);
  CHECK_NEAR(f[2], 123456.0f, 0);
  CHECK_NEAR(tensor_get_f32(&t, 1), 0.0f, 0);
  tensor_store_f32(&t, 0, 3, (const float[]){1.0f, 2.0f, 3.0f});
  CHECK_EQ_INT(ints[0], -7);
  CHECK_EQ_INT(ints[2], 123456);
  uint8_t e4[2] = {0x38 /* 1.0 */, 0x7f /* NaN */};
  tensor q = tensor_make(PH_DTYPE_F8E4M3, 1, (int64_t[]){2}, e4);
  CHECK_NEAR(tensor_get_f32(&q, 0), 1.0f, 0);
  CHECK(isnan(tensor_get_f32(&q, 1)));
}

int main(void) {
  RUN(test_shape);
  RUN(test_tensor_make);
  RUN(test_load_store);
  RUN(test_other_dtypes);
  return check_finish();
}
