/* moe — the MLP of a decoder layer as ONNX nodes: the dense SwiGLU MLP, and the sparse
 * Mixture-of-Experts block of Qwen3.5-MoE / Qwen3-Next (softmax routing, shared expert behind a
 * sigmoid gate) and DeepSeek-V2/V3 (softmax or sigmoid scores, greedy or group-limited selection,
 * the V3 selection bias, routed_scaling_factor, ungated shared experts), exactly as Hugging Face
 * computes them (../shared/spec/model-math.md §4.1, §4.2, §5.4; docs/moe.md).
 *
 * Internal to the model builders. The experts are one com.microsoft::MoE node whose fc1/fc2
 * weights are repacked once at build time from the checkpoint's fused or per-expert tensors
 * into the op's layout (interleaved gate/up rows), in the stored dtype: that copy is the one
 * place a MoE model's expert weights are held in memory (the mapped originals are not read
 * again). With model_options.quant (bits 4|8) the experts are one com.microsoft::QMoE instead,
 * quantized once at build time into ONNX Runtime's QMoE layout (docs/ops-moe.md "QMoE"), unless
 * a quant.skip entry names one of the layer's expert tensors; the block is the largest <= the
 * asked one that QMoE can express for the layer's sizes (none >= 16: PH_ERR_UNSUPPORTED).
 */
#ifndef PH_MODELS_MOE_H
#define PH_MODELS_MOE_H

#include "models/builder.h"

/* The MoE MLP of layer (c->layer_is_moe[layer]) on x ([B, S, H] dense, [N, H] packed):
 * the value id of its output, same shape. */
int moe_block(builder *b, int layer, int x);

/* down(SiLU(gate x) * up x) with the layer's mlp.{gate,up,down}_proj. */
int dense_mlp(builder *b, int layer, int x);

#endif /* PH_MODELS_MOE_H */
