/* state_replay — rebuilds a linear-attention layer's state after the first a tokens of a call
 * from the state at the call's start and the compact state updates the ops captured
 * (spec/abi.md §2.5 and §3): the commit step of speculative decoding, where a verify pass ran
 * k+1 tokens and only a prefix of them is kept.
 *
 * Exactness: each replay is the arithmetic the op's one-token step used, so the result is the
 * bits of the state the op writes after those a tokens run one per call (test_gdn_capture
 * checks it with memcmp, every a in 0..C):
 *   conv       VarlenCausalConvWithState's final state is the last K-1 raw input samples; the
 *              captured values are the raw input rows; a replay shifts them in as bytes.
 *   recurrent  GatedDeltaNet's one-token step writes S' = fmaf(k, δ, S·α) (kernels/gated_delta.h:
 *              gated_delta_decode_cols_ref); the capsule holds α, the key as used and δ.
 *
 * Pure functions of pointers and sizes: no allocation, no threads, no status (the caller has
 * the shapes from the op's contract). dst may equal src in both.
 */
#ifndef PH_KERNELS_STATE_REPLAY_H
#define PH_KERNELS_STATE_REPLAY_H

#include <stdint.h>

#include "tensor/dtype.h"

/* One sequence's conv state: src/dst [conv_dim][width] in dtype dt (width = K-1, dilation 1);
 * values = that batch row of VarlenCausalConvWithState's output 2, [C][conv_dim] in dt.
 * dst[c] = src[c] shifted left by a columns with values[0..a)[c] appended, 0 <= a <= C (a beyond
 * width keeps only the last width values). Bytes are moved, never converted. */
void state_replay_conv(const void *src, void *dst, const void *values, int64_t conv_dim,
                       int64_t width, int64_t a, ph_dtype dt);

/* One sequence's recurrent state: src/dst f32 [Hv][Dv][Dk] V-major; capsule = that batch row of
 * GatedDeltaNet's output 2, f32 [C*(Hv + Hk*Dk + Hv*Dv)] in the §2.5 layout (decay [C][Hv], key
 * [C][Hk][Dk], delta [C][Hv][Dv]). Replays slots 0..a-1 in order, per value head hv with
 * hk = hv / (Hv/Hk): state[c][r] = fmaf(key[r], delta[c], state[c][r] * decay). 0 <= a <= C. */
void state_replay_recurrent(const float *src, float *dst, const float *capsule, int64_t C,
                            int64_t Hv, int64_t Hk, int64_t Dk, int64_t Dv, int64_t a);

/* The variants state_replay_recurrent dispatches to (kernels/dispatch.h: the replay_recurrent
 * column; the scalar row runs the reference). Each reads every state element once and applies
 * the a updates to it in registers, in slot order: the same fmaf chain per element as replaying
 * slot by slot, so the bits are the same. The reference calls fmaf (a libm call in the baseline
 * build); the AVX2 one is _mm256_fmadd_ps over eight key columns. */
typedef void (*state_replay_recurrent_fn)(const float *src, float *dst, const float *capsule,
                                          int64_t C, int64_t Hv, int64_t Hk, int64_t Dk, int64_t Dv,
                                          int64_t a);
void state_replay_recurrent_ref(const float *src, float *dst, const float *capsule, int64_t C,
                                int64_t Hv, int64_t Hk, int64_t Dk, int64_t Dv, int64_t a);
void state_replay_recurrent_avx2(const float *src, float *dst, const float *capsule, int64_t C,
                                 int64_t Hv, int64_t Hk, int64_t Dk, int64_t Dv, int64_t a);

#endif /* PH_KERNELS_STATE_REPLAY_H */
