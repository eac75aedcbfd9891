/* act — elementwise activations on f32 rows (Sigmoid, SiLU, Exp): one exponential, written out
 * as IEEE operations, that every variant performs lane for lane, so every variant gives the
 * scalar reference's bits (kernels/dispatch.h column `act`).
 *
 * act_expf(x), the reference exponential (no libm exp; the operations below, in this order):
 *   NaN: x + x (the quieted input). Otherwise x is clamped to [-104, 89] (exp(-104) < 2^-150
 *   rounds to +0; exp(89) > FLT_MAX rounds to +inf), then
 *     n = rint(x · log2e)                       (round to nearest even; n in [-150, 128])
 *     r = fma(n, -ln2_hi, x); r = fma(n, -ln2_lo, r)    (Cody-Waite, ln2_hi has 17 bits)
 *     p = 1 + r(1 + r(1/2 + r(1/6 + r(1/24 + r(1/120 + r(1/720 + r/5040))))))  (fma Horner,
 *         coefficients rounded to f32; |r| <= 0.3466)
 *     exp = (p · 2^n1) · 2^n2 with n1 = trunc(n/2), n2 = n - n1 (both in [-75, 64]): the first
 *         product is exact, the second rounds once (to a subnormal, or to +inf, as IEEE says).
 *   Error against the exact exp: at most ACT_EXP_ULP ulp of the result over every float
 *   (derived in docs/performance.md "Vector exp"; measured exhaustively: 0.0 / 1.0 / ... see
 *   there). exp(±0) and exp(subnormal) are exactly 1, exp(-inf) = +0, exp(+inf) = +inf.
 * act_sigmoidf(x): e = act_expf(-|x|); x >= 0 (and -0): 1 / (1 + e), else e / (1 + e). No
 *   overflow on either side; NaN gives NaN.
 * act_siluf(x) = x / (1 + act_expf(-x)) (the causal conv's and GatedRMSNorm's SiLU; -inf gives
 *   NaN, as x / (1 + e^-x) does in IEEE arithmetic).
 *
 * Row kernels y[i] = f(x[i]) for i in [0, n): y may equal x (in place); nothing else may
 * overlap. Each element is a function of its own input alone, so a row gives the same bits
 * however it is split. Single-threaded, allocation-free.
 */
#ifndef PH_KERNELS_ACT_H
#define PH_KERNELS_ACT_H

#include <stdint.h>

#define ACT_EXP_ULP 2.0 /* the derived bound on act_expf's error, in ulps of the result */

float act_expf(float x);
float act_sigmoidf(float x);
float act_siluf(float x);

typedef void (*act_row_fn)(const float *x, float *y, int64_t n);

typedef struct act_kernels {
  act_row_fn exp;     /* y = act_expf(x) */
  act_row_fn sigmoid; /* y = act_sigmoidf(x) */
  act_row_fn silu;    /* y = act_siluf(x) */
} act_kernels;

extern const act_kernels act_scalar_kernels;
extern const act_kernels act_avx2_kernels;   /* entries NULL off x86 */
extern const act_kernels act_avx512_kernels; /* entries NULL off x86 */

#endif /* PH_KERNELS_ACT_H */
