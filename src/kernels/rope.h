/* rope — the rotation of rotary position embedding on one head's rot channels: the one core of
 * RotaryEmbedding/MRotaryEmbedding, of PagedAttention's query and key prep and of
 * GroupQueryAttention's.
 *
 * Single-threaded and pure. The op owns the positions, the cos/sin rows it loads for them (one
 * per slot, MRoPE's per-section choice included), where the rotated channels start and the
 * rounding of what it stores.
 */
#ifndef PH_KERNELS_ROPE_H
#define PH_KERNELS_ROPE_H

#include <stdint.h>

/* y[0..rot) from x[0..rot) with cos/sin c, s (rot/2 each), pairs (a, b) = (x[i], x[i + rot/2])
 * (interleaved 0, NeoX halves) or (x[2i], x[2i+1]) (interleaved 1):
 *   y_a = a c_i - b s_i,   y_b = b c_i + a s_i,
 * each product rounded on its own, never fused (so the plain-op form Mul, Mul, Sub gives the same
 * bits). y may equal x (in place): each pair is read before it is written. */
void rope_rotate_f32(const float *x, const float *c, const float *s, int64_t rot, int interleaved,
                     float *y);

#endif /* PH_KERNELS_ROPE_H */
