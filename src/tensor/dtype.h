/* dtype — element types, their sizes and names, and exact conversions between them.
 *
 * Storage types: f32, f16, bf16, i64, i32, i8, u8; f8e4m3 (e4m3fn, as in DeepSeek-V3 and
 * safetensors "F8_E4M3") is recognised and converts to f32, but is never a compute type.
 * Conversions to f32 are exact. Conversions from f32 round to nearest, ties to even (bf16 and
 * f16), keep NaN a NaN (quiet), and keep infinities and signed zero. Pure functions, no state.
 */
#ifndef PH_TENSOR_DTYPE_H
#define PH_TENSOR_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "base/diag.h"

/* Bytes per element; 0 for PH_DTYPE_INVALID or an out-of-range value. */
size_t dtype_size(ph_dtype dt);

/* 1 for f32, f16, bf16, f8e4m3. */
int dtype_is_float(ph_dtype dt);

/* 1 for the compute floats f32, f16, bf16 (what ops read and write; f8e4m3 is storage only). */
int dtype_is_compute_float(ph_dtype dt);

/* Safetensors header names: "F32", "F16", "BF16", "I64", "I32", "I8", "U8", "F8_E4M3".
 * NULL for an invalid dtype. */
const char *dtype_safetensors_name(ph_dtype dt);

/* Parses a safetensors dtype string (exact, case-sensitive). Returns PH_DTYPE_INVALID for any
 * other string, including real safetensors types we do not support (BOOL, F64, U16, ...). */
ph_dtype dtype_from_safetensors_name(const char *name);

/* Parses our short names as used on the command line and in docs: "f32", "f16", "bf16", "i64",
 * "i32", "i8", "u8", "f8e4m3"; also accepts the torch spellings that appear in config.json
 * ("float32", "float16", "bfloat16", "float8_e4m3fn"). PH_DTYPE_INVALID otherwise. */
ph_dtype dtype_from_name(const char *name);

/* ONNX TensorProto.DataType codes (FLOAT=1, UINT8=2, INT8=3, INT32=6, INT64=7, FLOAT16=10,
 * BFLOAT16=16, FLOAT8E4M3FN=17). dtype_from_onnx returns PH_DTYPE_INVALID for other codes;
 * dtype_to_onnx returns 0 (UNDEFINED) for an invalid dtype. */
ph_dtype dtype_from_onnx(int64_t code);
int dtype_to_onnx(ph_dtype dt);

float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);  /* round to nearest even */
float f16_to_f32(uint16_t h);   /* exact, subnormals included */
uint16_t f32_to_f16(float f);   /* round to nearest even; overflow -> inf */
float f8e4m3_to_f32(uint8_t v); /* e4m3fn: no infinities, 0x7f/0xff are NaN */

/* Non-finite elements (NaN, +inf, -inf) among n elements of a float dtype at data (read with
 * memcpy: no alignment needed). Returns their count and, when there is one, the flat index of
 * the first in *first (untouched otherwise). f8e4m3 has no infinities: its NaN (0x7f/0xff)
 * counts. Integer dtypes have none: 0. Bit tests only, so a scan of a 50 GB checkpoint runs at
 * memory speed and never traps. */
int64_t dtype_count_nonfinite(ph_dtype dt, const void *data, int64_t n, int64_t *first);

/* Converts n elements from src (dtype s) to dst (dtype t). Supported: identical-type copy; any
 * float type (f32, f16, bf16, f8e4m3) or integer type to f32; any float type to f16 or bf16
 * (through f32, exactly, then rounded to nearest even). Anything else (to an integer or to
 * f8e4m3) is
 * PH_ERR_UNSUPPORTED with a message naming the pair. src and dst must not overlap unless they
 * are identical. Reads src with memcpy, so src needs no alignment. */
ph_status dtype_convert(void *dst, ph_dtype t, const void *src, ph_dtype s, size_t n, diag *d);

#endif /* PH_TENSOR_DTYPE_H */
