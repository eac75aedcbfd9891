/* conv — the depthwise causal convolution of one channel: the one compute core of
 * CausalConvWithState (dense) and VarlenCausalConvWithState (packed varlen), so a sequence gives
 * the same bits through either op.
 *
 * Single-threaded and pure: a function of pointers and sizes. The op owns everything around it:
 * validating, gathering each channel's carried state and new inputs into one f32 row (x_full),
 * the channel layout, writing the outputs and the next state, and the split over (sequence,
 * block of channels) tasks.
 */
#ifndef PH_KERNELS_CONV_H
#define PH_KERNELS_CONV_H

#include <stdint.h>

/* One channel over L tokens, x = x_full = concat(carried state, inputs), (K-1)*dil + L values:
 *   y[t] = act(bias + Σ_k w[k] x[t + k*dil]), the sum from bias in increasing k, t in [0, L);
 *   act is the identity, or act_siluf(a) = a / (1 + act_expf(-a)) (kernels/act.h) when silu is
 *   1. The ops run it with silu 0 and apply the dispatch table's act->silu row kernel to their
 *   block of outputs: the same bits. */
void conv_causal_channel(const float *x, const float *w, int64_t K, int64_t dil, float bias,
                         int silu, int64_t L, float *y);

#endif /* PH_KERNELS_CONV_H */
