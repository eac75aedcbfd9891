/* moe — the sparse MoE MLP of Qwen3.5-MoE / Qwen3-Next and DeepSeek-V2/V3 as ONNX nodes. See
 * moe.h; the math is ../shared/spec/model-math.md §4.2 and §5.4, and docs/moe.md says why the
 * graph has this form.
 *
 * The experts are one com.microsoft::MoE node (ONNX Runtime 1.30 has a CPU kernel for it; our
 * executor runs it as grouped matmuls over the routed tokens): router logits in, the op applies a
 * softmax over all experts, takes the top k and optionally renormalises their weights; experts are
 * SwiGLU with fc1 rows interleaved (gate_i, up_i), the only SwiGLU form ONNX Runtime's CPU kernel
 * takes (swiglu_fusion=1), activation_alpha 1 and activation_beta 0 (SiLU(gate) * up exactly).
 *
 * Qwen's routing is exactly that op's (softmax, top-k, renormalise: always for Qwen3.5-MoE, as
 * norm_topk_prob says for Qwen3-Next). DeepSeek's is not (sigmoid scores, a selection bias,
 * group-limited selection, no renormalisation in V2, routed_scaling_factor), so it is built from
 * standard ops that select exactly as Hugging Face does, and the op is handed
 * log(w) on the selected experts and log(w) - 60000 elsewhere with normalize 0: its softmax then
 * weighs expert i by w_i / sum(w_selected), and one Mul by sum(w_selected) * scale (or scale alone
 * when norm_topk_prob renormalises) restores HF's weights up to f32 rounding.
 *
 * Quantized (model_options.quant): the same node as com.microsoft::QMoE over tensor/quant.h's
 * blocks of the same interleaved rows (expert_weights_quant; docs/ops-moe.md "QMoE").
 */
#include "models/moe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

/* Penalty added to log(w) of an unselected expert: exp(-60000) is 0 in every float type, and it
 * stays finite when the router is rounded to f16 (max 65504). */
#define MOE_UNSELECTED_PENALTY 60000.0f

/* One expert tensor's [rows, H] block for expert e as a (data, dtype) pair. */
typedef struct expert_src {
  const uint8_t *data;
  ph_dtype dtype;
} expert_src;

/* Copies rows [r0, r0 + n) of src (row width cols, dtype src.dtype) into dst (dtype dt). */
static int copy_rows(void *dst, ph_dtype dt, expert_src src, int64_t r0, int64_t n, int64_t cols) {
  const size_t es = dtype_size(src.dtype);
  return dtype_convert(dst, dt, src.data + (size_t)(r0 * cols) * es, src.dtype, (size_t)(n * cols),
                       NULL) == PH_OK
             ? 0
             : -1;
}

/* Expert e's weights: gate and up rows (fc1's sources; up's rows start at row u0 of u) and down
 * (fc2's), with the checkpoint names errors cite. */
typedef struct expert_srcs {
  expert_src g, u, dn;
  int64_t u0;           /* I in the fused tensor (gate rows, then up rows), 0 per expert */
  const char *names[2]; /* fc1's and fc2's source tensors */
} expert_srcs;

/* Expert e's sources in the fused checkpoint tensors (gate_up [E, 2I, H]: gate rows then up
 * rows; down [E, H, I]) when gate_up is given, else in its own tensors. -1 when one of those is
 * missing. */
static int expert_sources(const builder *b, int layer, int64_t e, const st_tensor *gate_up,
                          const st_tensor *down, int64_t I, int64_t H, expert_srcs *s) {
  if (gate_up) {
    const size_t sz = dtype_size(gate_up->dtype);
    s->g = s->u =
        (expert_src){(const uint8_t *)gate_up->data + (size_t)(e * 2 * I * H) * sz, gate_up->dtype};
    s->u0 = I;
    s->dn = (expert_src){
        (const uint8_t *)down->data + (size_t)(e * H * I) * dtype_size(down->dtype), down->dtype};
    s->names[0] = gate_up->name;
    s->names[1] = down->name;
    return 0;
  }
  const st_tensor *tg = weights_expert(b->w, layer, (int)e, 0),
                  *tu = weights_expert(b->w, layer, (int)e, 1),
                  *td = weights_expert(b->w, layer, (int)e, 2);
  if (!tg || !tu || !td) return -1;
  s->g = (expert_src){tg->data, tg->dtype};
  s->u = (expert_src){tu->data, tu->dtype};
  s->dn = (expert_src){td->data, td->dtype};
  s->u0 = 0;
  s->names[0] = tg->name;
  s->names[1] = td->name;
  return 0;
}

/* Expert s's fc1 rows [2I, H] interleaved (gate_0, up_0, gate_1, up_1, ...) into dst in dtype dt.
 */
static int interleave_fc1(uint8_t *dst, ph_dtype dt, const expert_srcs *s, int64_t I, int64_t H) {
  const size_t es = dtype_size(dt);
  for (int64_t i = 0; i < I; i++)
    if (copy_rows(dst + (size_t)(2 * i * H) * es, dt, s->g, i, 1, H) < 0 ||
        copy_rows(dst + (size_t)((2 * i + 1) * H) * es, dt, s->u, s->u0 + i, 1, H) < 0)
      return -1;
  return 0;
}

/* fc1 [E, 2I, H] with rows interleaved per expert (gate_0, up_0, gate_1, up_1, ...) and fc2
 * [E, H, I], in the stored dtype, from the fused checkpoint tensors (gate_up [E, 2I, H]: gate
 * rows then up rows; down [E, H, I]) or the per-expert ones. */
static int expert_weights(builder *b, int layer, int *fc1, int *fc2) {
  const hf_config *c = b->c;
  const int64_t E = c->moe.n_experts, I = c->moe.moe_intermediate_size, H = c->hidden_size;
  const st_tensor *gate_up = lw(b, layer, W_MOE_GATE_UP_FUSED);
  const st_tensor *down = lw(b, layer, W_MOE_DOWN_FUSED);
  const st_tensor *first = b->w->placeholder ? lw(b, layer, W_MOE_ROUTER)
                           : gate_up         ? gate_up
                                             : weights_expert(b->w, layer, 0, 0);
  if (!first) return -1;
  const ph_dtype dt = stored_as(b, first->dtype);
  char name[192];
  snprintf(name, sizeof name, "%slayers.%d.mlp.experts.fc1_swiglu_interleaved",
           weight_layout_prefix(b->w->layout), layer);
  if (b->w->placeholder) { /* zeros, repacked or not: lazy views of the zero mapping */
    *fc1 = graph_add_initializer_lazy(b->g, name, dt, shape_3d(E, 2 * I, H), first->data,
                                      first->dtype, 0);
    snprintf(name, sizeof name, "%slayers.%d.mlp.experts.fc2", weight_layout_prefix(b->w->layout),
             layer);
    *fc2 =
        graph_add_initializer_lazy(b->g, name, dt, shape_3d(E, H, I), first->data, first->dtype, 0);
    goto cast;
  }
  void *p1 = NULL, *p2 = NULL;
  *fc1 = graph_add_initializer_alloc(b->g, name, dt, shape_3d(E, 2 * I, H), &p1);
  snprintf(name, sizeof name, "%slayers.%d.mlp.experts.fc2", weight_layout_prefix(b->w->layout),
           layer);
  *fc2 = graph_add_initializer_alloc(b->g, name, dt, shape_3d(E, H, I), &p2);
  if (*fc1 < 0 || *fc2 < 0) return -1;
  const size_t es = dtype_size(dt);
  uint8_t *d1 = p1, *d2 = p2;
  for (int64_t e = 0; e < E; e++) {
    expert_srcs x;
    if (expert_sources(b, layer, e, gate_up, down, I, H, &x) < 0 ||
        interleave_fc1(d1 + (size_t)(e * 2 * I * H) * es, dt, &x, I, H) < 0 ||
        copy_rows(d2 + (size_t)(e * H * I) * es, dt, x.dn, 0, H, I) < 0)
      return -1;
  }
cast:
  if (dt != b->io) { /* ONNX's MoE takes T weights; our prepare pass reads the stored ones */
    *fc1 = cast_to(b, "experts/fc1/Cast", *fc1, dtype_to_onnx(b->io));
    *fc2 = cast_to(b, "experts/fc2/Cast", *fc2, dtype_to_onnx(b->io));
  }
  return 0;
}

/* ---- quantized experts: com.microsoft::QMoE ------------------------------------------------ */

/* The routed experts of `layer` are quantized: quant.bits is set and no expert tensor's checkpoint
 * name contains a quant.skip entry. One node holds every expert, so a skip entry matching any of
 * them keeps the whole layer's experts in their dtype (MoE). */
static int experts_quantized(const builder *b, int layer) {
  if (!b->quant.bits) return 0;
  const st_tensor *fused[2] = {lw(b, layer, W_MOE_GATE_UP_FUSED), lw(b, layer, W_MOE_DOWN_FUSED)};
  for (int i = 0; i < 2; i++)
    if (fused[i] && builder_skips(b, fused[i]->name)) return 0;
  if (!fused[0] && !b->w->placeholder)
    for (int e = 0; e < b->c->moe.n_experts; e++)
      for (int part = 0; part < 3; part++) {
        const st_tensor *t = weights_expert(b->w, layer, e, part);
        if (t && builder_skips(b, t->name)) return 0;
      }
  return 1;
}

/* QMoE's inputs for one layer: codes, scales and (asymmetric) zero points of fc1 and fc2. */
typedef struct qmoe_inputs {
  int codes[2], scales[2], zp[2]; /* zp -1 when symmetric */
  int64_t block;                  /* the block used (see expert_weights_quant) */
} qmoe_inputs;

static int graph_fail(builder *b, ph_status s, const char *msg) {
  if (graph_status(b->g) == PH_OK) diag_set(&b->g->err, s, "%s", msg);
  return -1;
}

/* The experts of `layer` quantized with tensor/quant.h (ORT's MatMulNBits rules: symmetric or
 * asymmetric blocks of quant.block_size along K, scales rounded to the io dtype) into QMoE's
 * layout (ops/op_moe.h): fc1's interleaved gate/up rows [E, 2I, H / pack], fc2 [E, H, I / pack],
 * scales [E, N, K / block] in the io dtype, zero points [E, N, K / block * bits / 8] (ORT 1.30's
 * CPU kernel refuses that shape when H is one block, docs/ops-moe.md). Quantized once here, one
 * expert at a time: no f32 copy of the layer is ever held. QMoE cannot pad K as MatMulNBits does:
 * its block must divide H and I (with zero points, block * 8 / bits must), so the experts take the
 * largest block <= quant.block_size that does (finer than asked: said once in the log, and in the
 * node's block_size; llama.cpp likewise requantizes rows its block does not fit); none >= 16:
 * PH_ERR_UNSUPPORTED naming the remedies. */
static int expert_weights_quant(builder *b, int layer, qmoe_inputs *q) {
  const hf_config *c = b->c;
  const int64_t E = c->moe.n_experts, I = c->moe.moe_intermediate_size, H = c->hidden_size;
  const int bits = b->quant.bits, asym = b->quant.asymmetric;
  const int64_t pack = 8 / bits;
  /* the largest block <= quant.block_size that ORT's QMoE accepts for these sizes */
  int64_t block = b->quant.block_size;
  while (block >= 16 && (H % (asym ? block * pack : block) || I % (asym ? block * pack : block)))
    block /= 2;
  if (block < 16) {
    char msg[512];
    snprintf(msg, sizeof msg,
             "layer %d: the routed experts cannot be com.microsoft::QMoE with int%d%s: ONNX "
             "Runtime's QMoE needs a block of at least 16 (times %lld with zero points) dividing "
             "the hidden size %lld and the expert size %lld (it cannot pad K); use symmetric "
             "quantization or keep the experts unquantized with quant.skip \"mlp.experts\"",
             layer, bits, asym ? " with zero points" : "", (long long)pack, (long long)H,
             (long long)I);
    return graph_fail(b, PH_ERR_UNSUPPORTED, msg);
  }
  int first_moe = 1; /* say it once per graph: at the first MoE layer */
  for (int l = 0; l < layer; l++) first_moe &= !b->c->layer_is_moe[l];
  if (block != b->quant.block_size && first_moe)
    LOG_WARN("routed experts: blocks of %lld, not %d: ONNX Runtime's QMoE needs the block%s to "
             "divide the hidden size %lld and the expert size %lld (docs/ops-moe.md)",
             (long long)block, (int)b->quant.block_size, asym ? " times 8/bits" : "", (long long)H,
             (long long)I);
  q->block = block;
  const quant_params p = {bits, (int)block, !asym, b->io};
  const size_t es = dtype_size(b->io);
  const int64_t N[2] = {2 * I, H}, K[2] = {H, I};
  uint8_t *codes[2] = {NULL, NULL}, *zp[2] = {NULL, NULL};
  unsigned char *scales[2] = {NULL, NULL};
  const st_tensor *first = lw(b, layer, W_MOE_GATE_UP_FUSED);
  if (!first)
    first = b->w->placeholder ? lw(b, layer, W_MOE_ROUTER) : weights_expert(b->w, layer, 0, 0);
  if (!first) return -1;
  for (int f = 0; f < 2; f++) {
    const int64_t nb = K[f] / block, zpb = nb * bits / 8;
    char name[224];
    const char *base = f == 0 ? "fc1_swiglu_interleaved" : "fc2";
    const shape sc = shape_3d(E, N[f], K[f] / pack), ss = shape_3d(E, N[f], nb),
                sz = shape_3d(E, N[f], zpb);
    const char *pre = weight_layout_prefix(b->w->layout);
    void *pc = NULL, *ps = NULL, *pz = NULL;
    snprintf(name, sizeof name, "%slayers.%d.mlp.experts.%s_Q%d", pre, layer, base, bits);
    if (b->w->placeholder) { /* zeros: views of the zero mapping (larger than any of these) */
      q->codes[f] = graph_add_initializer_view(b->g, name, PH_DTYPE_U8, sc, first->data);
      snprintf(name, sizeof name, "%slayers.%d.mlp.experts.%s_scales", pre, layer, base);
      q->scales[f] = graph_add_initializer_view(b->g, name, b->io, ss, first->data);
      q->zp[f] = -1;
      if (asym) {
        snprintf(name, sizeof name, "%slayers.%d.mlp.experts.%s_zero_points", pre, layer, base);
        q->zp[f] = graph_add_initializer_view(b->g, name, PH_DTYPE_U8, sz, first->data);
      }
      if (q->codes[f] < 0 || q->scales[f] < 0 || (asym && q->zp[f] < 0)) return -1;
      continue;
    }
    q->codes[f] = graph_add_initializer_alloc(b->g, name, PH_DTYPE_U8, sc, &pc);
    snprintf(name, sizeof name, "%slayers.%d.mlp.experts.%s_scales", pre, layer, base);
    q->scales[f] = graph_add_initializer_alloc(b->g, name, b->io, ss, &ps);
    q->zp[f] = -1;
    if (asym) {
      snprintf(name, sizeof name, "%slayers.%d.mlp.experts.%s_zero_points", pre, layer, base);
      q->zp[f] = graph_add_initializer_alloc(b->g, name, PH_DTYPE_U8, sz, &pz);
    }
    if (q->codes[f] < 0 || q->scales[f] < 0 || (asym && q->zp[f] < 0)) return -1;
    codes[f] = pc;
    scales[f] = ps;
    zp[f] = pz;
  }
  if (b->w->placeholder) return 0;
  const st_tensor *gate_up = lw(b, layer, W_MOE_GATE_UP_FUSED);
  const st_tensor *down = lw(b, layer, W_MOE_DOWN_FUSED);
  float *rows = malloc((size_t)(2 * I * H) * sizeof *rows); /* one expert's fc1, interleaved */
  float *sc = malloc((size_t)(2 * I * (H / block) + H * (I / block)) * sizeof *sc);
  int rc = rows && sc ? 0 : graph_fail(b, PH_ERR_NO_MEMORY, "quantizing the experts: no memory");
  diag d;
  diag_clear(&d);
  ph_status st = PH_OK;
  for (int64_t e = 0; e < E && rc == 0 && st == PH_OK; e++) {
    expert_srcs x;
    if (expert_sources(b, layer, e, gate_up, down, I, H, &x) < 0) {
      rc = -1;
      break;
    }
    if (interleave_fc1((uint8_t *)rows, PH_DTYPE_F32, &x, I, H) < 0)
      rc = graph_fail(b, PH_ERR_INTERNAL, "repacking the expert weights failed");
    for (int f = 0; f < 2 && rc == 0 && st == PH_OK; f++) {
      const int64_t nb = K[f] / block, n_sc = N[f] * nb;
      const void *w = f == 0 ? (const void *)rows : (const void *)x.dn.data;
      const ph_dtype wdt = f == 0 ? PH_DTYPE_F32 : x.dn.dtype;
      st = quant_quantize(&p, w, wdt, N[f], K[f], codes[f] + e * N[f] * (K[f] / pack), sc,
                          zp[f] ? zp[f] + e * N[f] * (nb * bits / 8) : NULL, x.names[f], &d);
      if (st == PH_OK)
        st = quant_scales_to(b->io, sc, (size_t)n_sc, scales[f] + (size_t)(e * n_sc) * es, &d);
    }
  }
  if (st != PH_OK) rc = graph_fail(b, st, d.msg);
  free(rows);
  free(sc);
  return rc;
}

/* The attributes MoE and QMoE share (the SwiGLU experts, k, the routing normalization) into
 * a[0..6); returns 6. */
static int moe_common_attrs(const builder *b, int normalize, gattr *a) {
  a[0] = attr_string("activation_type", "swiglu");
  a[1] = attr_int("k", b->c->moe.n_experts_per_tok);
  a[2] = attr_int("normalize_routing_weights", normalize);
  a[3] = attr_int("swiglu_fusion", 1);
  a[4] = attr_float("activation_alpha", 1.0f);
  a[5] = attr_float("activation_beta", 0.0f);
  return 6;
}

static int qmoe_node(builder *b, int x, int router, int normalize) {
  qmoe_inputs q;
  if (expert_weights_quant(b, b->layer, &q) < 0) {
    if (graph_status(b->g) == PH_OK)
      diag_set(&b->g->err, PH_ERR_NO_MEMORY, "layer %d: quantizing the expert weights failed",
               b->layer);
    return -1;
  }
  gattr a[10];
  const int n = moe_common_attrs(b, normalize, a);
  a[n] = attr_int("expert_weight_bits", b->quant.bits);
  a[n + 1] = attr_int("block_size", q.block);
  a[n + 2] = attr_string("quant_type", "int");
  a[n + 3] = attr_int("weights_prepacked", 0);
  /* ORT's order: input, router_probs, fc1 weights, scales, bias, fc2 weights, scales, bias, fc3
   * weights, scales, bias, fc1 / fc2 zero points */
  const int in[13] = {x,  router, q.codes[0], q.scales[0], -1,      q.codes[1], q.scales[1],
                      -1, -1,     -1,         -1,          q.zp[0], q.zp[1]};
  return node1(b, "QMoE", "com.microsoft", "QMoE", q.zp[0] >= 0 ? 13 : 7, in, 10, a);
}

static int moe_node(builder *b, int x, int router, int normalize) {
  if (experts_quantized(b, b->layer)) return qmoe_node(b, x, router, normalize);
  int fc1 = -1, fc2 = -1;
  if (expert_weights(b, b->layer, &fc1, &fc2) < 0) {
    if (graph_status(b->g) == PH_OK)
      diag_set(&b->g->err, PH_ERR_NO_MEMORY, "layer %d: repacking the expert weights failed",
               b->layer);
    return -1;
  }
  gattr a[6];
  const int n = moe_common_attrs(b, normalize, a);
  return node1(b, "MoE", "com.microsoft", "MoE", 5, (int[]){x, router, fc1, -1, fc2}, n, a);
}

/* down(SiLU(gate x) * up x) over the given three weights, under "<scope>/<name>/". */
static int swiglu(builder *b, const char *name, int x, weight_role gate, weight_role up,
                  weight_role down) {
  char nm[128];
  snprintf(nm, sizeof nm, "%s/gate_proj", name);
  int g = linear(b, nm, x, wref_of(lw(b, b->layer, gate)));
  snprintf(nm, sizeof nm, "%s/up_proj", name);
  int u = linear(b, nm, x, wref_of(lw(b, b->layer, up)));
  snprintf(nm, sizeof nm, "%s/act/Sigmoid", name);
  int sg = NODE1(b, "Sigmoid", nm, 0, NULL, g);
  snprintf(nm, sizeof nm, "%s/act/Mul", name);
  int silu = NODE1(b, "Mul", nm, 0, NULL, g, sg);
  snprintf(nm, sizeof nm, "%s/Mul", name);
  int h = NODE1(b, "Mul", nm, 0, NULL, silu, u);
  snprintf(nm, sizeof nm, "%s/down_proj", name);
  return linear(b, nm, h, wref_of(lw(b, b->layer, down)));
}

/* Router logits x W^T over x's own leading dims ([B, S, E] dense, [N, E] packed), in f32 when
 * f32 is asked for. Keeping the leading dims lets every routing tensor broadcast against the
 * MoE's output without a shape computed at run time. */
static int router_logits(builder *b, int x, int f32) {
  if (!f32 || b->io == PH_DTYPE_F32)
    return linear(b, "router", x, wref_of(lw(b, b->layer, W_MOE_ROUTER)));
  int xf = cast_to(b, "router/input/Cast", x, ONNX_FLOAT);
  ph_dtype io = b->io;
  b->io = PH_DTYPE_F32; /* the router's weight is cast to f32, not the io dtype */
  int y = linear(b, "router", xf, wref_of(lw(b, b->layer, W_MOE_ROUTER)));
  b->io = io;
  return y;
}

/* [.., E] -> the MoE op's router_probs [T, E] */
static int router_rows(builder *b, int r) {
  return reshape(b, "router/Reshape", r, 2, (int64_t[]){-1, b->c->moe.n_experts});
}

/* A reshape of the last axis keeping the leading ones (dense [B, S, ..], packed [N, ..]):
 * ONNX Reshape's 0 copies a dim. */
static int reshape_last(builder *b, const char *name, int x, int n, const int64_t *tail) {
  int64_t dims[4] = {0, 0, 0, 0};
  const int lead = b->paged ? 1 : 2;
  for (int i = 0; i < n; i++) dims[lead + i] = tail[i];
  return reshape(b, name, x, lead + n, dims);
}

/* Qwen3.5-MoE / Qwen3-Next (§4.2): the op's own routing, plus the shared expert scaled by
 * sigmoid(x w_gate). */
static int qwen_moe(builder *b, int x) {
  const hf_config *c = b->c;
  const int normalize = c->family == FAMILY_QWEN35 ? 1 : c->moe.norm_topk_prob;
  /* the shared expert first: nothing reads x after the MoE node (ONNX Runtime 1.30's CPU MoE
   * computes wrong values when its input is read after it; docs/moe.md) */
  int shared = -1;
  if (c->moe.shared_intermediate_size > 0) {
    shared = swiglu(b, "shared_expert", x, W_SHARED_GATE, W_SHARED_UP, W_SHARED_DOWN);
    int sg = linear(b, "shared_expert_gate", x, wref_of(lw(b, b->layer, W_SHARED_EXPERT_GATE)));
    sg = NODE1(b, "Sigmoid", "shared_expert_gate/Sigmoid", 0, NULL, sg);
    shared = NODE1(b, "Mul", "shared_expert/gate/Mul", 0, NULL, shared, sg);
  }
  int y = moe_node(b, x, router_rows(b, router_logits(b, x, 0)), normalize);
  return shared < 0 ? y : NODE1(b, "Add", "Add", 0, NULL, y, shared);
}

static int f32_scalar(builder *b, const char *name, float v) {
  char full[192];
  snprintf(full, sizeof full, "%s/%s", b->scope, name);
  return graph_add_initializer_copy(b->g, full, PH_DTYPE_F32, shape_1d(1), &v);
}

/* A [.., n] mask with 1 at the k indices [.., k] (i64) of each row: ReduceSum over OneHot's
 * [.., k, n]. */
static int index_mask(builder *b, const char *name, int idx, int64_t n) {
  char nm[128], cn[128];
  snprintf(cn, sizeof cn, "%s/depth", name);
  int depth = const_i64(b, cn, 1, &n);
  snprintf(cn, sizeof cn, "%s/values", name);
  float ov[2] = {0.0f, 1.0f};
  char full[256];
  snprintf(full, sizeof full, "%s/%s", b->scope, cn);
  int values = graph_add_initializer_copy(b->g, full, PH_DTYPE_F32, shape_1d(2), ov);
  snprintf(nm, sizeof nm, "%s/OneHot", name);
  gattr ax = attr_int("axis", -1);
  int oh = node1(b, "OneHot", "", nm, 3, (int[]){idx, depth, values}, 1, &ax);
  snprintf(nm, sizeof nm, "%s/ReduceSum", name);
  snprintf(cn, sizeof cn, "%s/axes", name);
  gattr keep = attr_int("keepdims", 0);
  return NODE1(b, "ReduceSum", nm, 1, &keep, oh, const_i64(b, cn, 1, (int64_t[]){-2}));
}

/* TopK(x, k) along the last axis: output 0 values, 1 indices (i64). */
static void top_k(builder *b, const char *name, int x, int64_t k, int *values, int *indices) {
  char cn[128];
  snprintf(cn, sizeof cn, "%s/k", name);
  int out[2] = {-1, -1};
  gattr a[3] = {attr_int("axis", -1), attr_int("largest", 1), attr_int("sorted", 1)};
  node_n(b, "TopK", "", name, 2, (int[]){x, const_i64(b, cn, 1, &k)}, 2, out, 3, a);
  if (values) *values = out[0];
  if (indices) *indices = out[1];
}

/* DeepSeek-V2/V3 (§5.4): scores, the selection HF makes (greedy, or group-limited with a group
 * scored by its largest score (V2) or the sum of its two largest biased scores (V3), dropped
 * groups' scores masked to 0.0 as HF masks them), then the MoE op over log(w), rescaled. */
static int deepseek_routed(builder *b, int x) {
  const hf_config *c = b->c;
  const int64_t E = c->moe.n_experts, K = c->moe.n_experts_per_tok, G = c->moe.n_group;
  const int sigmoid = strcmp(c->moe.scoring_func, "sigmoid") == 0;
  const int noaux = strcmp(c->moe.topk_method, "noaux_tc") == 0;
  const int grouped = (noaux || strcmp(c->moe.topk_method, "group_limited_greedy") == 0) && G > 1;
  const float scale = (float)c->moe.routed_scaling_factor;
  /* DeepSeek-V2 never renormalises (HF's DeepseekV2 ignores norm_topk_prob); V3 does iff
   * norm_topk_prob */
  const int renorm = c->moe.norm_topk_prob && strcmp(c->model_type, "deepseek_v2") != 0;
  if (!sigmoid && !grouped && !renorm) {
    /* softmax + greedy top-k, unnormalised: the op's own routing; then the scaling factor */
    int y = moe_node(b, x, router_rows(b, router_logits(b, x, 0)), 0);
    if (scale == 1.0f) return y;
    int s = f32_scalar(b, "routed_scaling_factor", scale);
    if (b->io != PH_DTYPE_F32)
      s = cast_to(b, "routed_scaling_factor/Cast", s, dtype_to_onnx(b->io));
    return NODE1(b, "Mul", "routed_scaling/Mul", 0, NULL, y, s);
  }
  int logits = router_logits(b, x, 1); /* [.., E] f32 */
  int s;
  if (sigmoid) {
    s = NODE1(b, "Sigmoid", "router/Sigmoid", 0, NULL, logits);
  } else {
    gattr ax = attr_int("axis", -1);
    s = node1(b, "Softmax", "", "router/Softmax", 1, (int[]){logits}, 1, &ax);
  }
  int choice = s;
  if (noaux) {
    char bn[192];
    snprintf(bn, sizeof bn, "%s.f32", lw(b, b->layer, W_MOE_ROUTER_BIAS)->name);
    choice = NODE1(b, "Add", "router/bias/Add", 0, NULL, s,
                   const_named(b, lw(b, b->layer, W_MOE_ROUTER_BIAS), bn, F32_COPY, PH_DTYPE_F32));
  }
  if (grouped) {
    int g3 = reshape_last(b, "groups/Reshape", choice, 2, (int64_t[]){G, E / G});
    int top = -1;
    top_k(b, "groups/TopK", g3, noaux ? 2 : 1, &top, NULL);
    gattr keep = attr_int("keepdims", 0);
    int gscore = NODE1(b, "ReduceSum", "groups/score", 1, &keep, top,
                       const_i64(b, "groups/score/axes", 1, (int64_t[]){-1}));
    int gidx = -1;
    top_k(b, "groups/keep/TopK", gscore, c->moe.topk_group, NULL, &gidx);
    int gmask = index_mask(b, "groups/keep/mask", gidx, G);
    gmask = NODE1(b, "Unsqueeze", "groups/keep/Unsqueeze", 0, NULL, gmask,
                  const_i64(b, "groups/keep/axes", 1, (int64_t[]){-1}));
    int masked = NODE1(b, "Mul", "groups/mask/Mul", 0, NULL, g3, gmask);
    choice = reshape_last(b, "groups/mask/Reshape", masked, 1, (int64_t[]){E});
  }
  int eidx = -1;
  top_k(b, "experts/TopK", choice, K, NULL, &eidx);
  int emask = index_mask(b, "experts/mask", eidx, E);
  /* router = log(s) + (mask - 1) * 60000: finite log-weights on the k chosen experts */
  int one = f32_scalar(b, "one", 1.0f), pen = f32_scalar(b, "penalty", MOE_UNSELECTED_PENALTY);
  int off = NODE1(b, "Sub", "experts/mask/Sub", 0, NULL, emask, one);
  off = NODE1(b, "Mul", "experts/penalty/Mul", 0, NULL, off, pen);
  int router = NODE1(b, "Add", "experts/router/Add", 0, NULL,
                     NODE1(b, "Log", "experts/Log", 0, NULL, s), off);
  if (b->io != PH_DTYPE_F32)
    router = cast_to(b, "experts/router/Cast", router, dtype_to_onnx(b->io));
  /* the op weighs expert i by w_i / sum(w_sel): its output times sum(w_sel) * scale, or scale
   * alone when HF renormalises (w_i / (sum + 1e-20) * scale) */
  int factor = f32_scalar(b, "routed_scaling_factor", scale);
  if (!renorm) {
    int wsel = NODE1(b, "Mul", "weights/Mul", 0, NULL, s, emask);
    gattr keep = attr_int("keepdims", 1);
    int sum = NODE1(b, "ReduceSum", "weights/ReduceSum", 1, &keep, wsel,
                    const_i64(b, "weights/axes", 1, (int64_t[]){-1}));
    factor = NODE1(b, "Mul", "weights/scale/Mul", 0, NULL, sum, factor); /* [.., 1] */
  }
  if (b->io != PH_DTYPE_F32) factor = cast_to(b, "weights/Cast", factor, dtype_to_onnx(b->io));
  /* the MoE node last: nothing after it reads x (qwen_moe says why) */
  int y = moe_node(b, x, router_rows(b, router), 0);
  return NODE1(b, "Mul", "routed_scaling/Mul", 0, NULL, y, factor);
}

static int deepseek_moe(builder *b, int x) {
  /* the shared experts first, as in qwen_moe */
  int shared = b->c->moe.n_shared_experts > 0 ? swiglu(b, "shared_experts", x, W_DS_SHARED_GATE,
                                                       W_DS_SHARED_UP, W_DS_SHARED_DOWN)
                                              : -1;
  int y = deepseek_routed(b, x);
  return shared < 0 ? y : NODE1(b, "Add", "Add", 0, NULL, y, shared);
}

int moe_block(builder *b, int layer, int x) {
  snprintf(b->scope, sizeof b->scope, "/model/layers.%d/mlp", layer);
  b->layer = layer;
  return b->c->family == FAMILY_DEEPSEEK ? deepseek_moe(b, x) : qwen_moe(b, x);
}

int dense_mlp(builder *b, int layer, int x) {
  snprintf(b->scope, sizeof b->scope, "/model/layers.%d/mlp", layer);
  b->layer = layer;
  int g = linear(b, "gate_proj", x, wref_of(lw(b, layer, W_MLP_GATE)));
  int u = linear(b, "up_proj", x, wref_of(lw(b, layer, W_MLP_UP)));
  int silu = NODE1(b, "Mul", "act/Mul", 0, NULL, g, NODE1(b, "Sigmoid", "act/Sigmoid", 0, NULL, g));
  int h = NODE1(b, "Mul", "Mul", 0, NULL, silu, u);
  return linear(b, "down_proj", h, wref_of(lw(b, layer, W_MLP_DOWN)));
}
