/* qwen35 — the Qwen3.5 / Qwen3-Next graph builder: the node helpers, the rotary forms, the
 * layers, and the forward pass (forward: embed, decoder_layer × n_layers, lm_head) between the
 * graph I/O of each layout (qwen35_io.c). See qwen35.h; the math is
 * ../shared/spec/model-math.md §1–§3 and each step below names the item of its §7
 * easy-to-get-wrong list it gets right.
 */
#include "models/qwen35.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/abi_names.h"
#include "models/moe.h"
#include "models/qwen35_builder.h"
#include "tensor/dtype.h"

/* ---- rotary caches and attention lengths (shared by all full-attention layers) ----------- */

/* ---- layers ------------------------------------------------------------------------------- */

/* The fused op on x [.., n_heads * D] in f32: MRotaryEmbedding with Qwen's interleaved sections,
 * or RotaryEmbedding for a model without them. The dense graph applies it to [B, S, HD] with
 * position_ids [3, B, S] / [B, S] as they come. The packed graph wraps it as GenAI's builder does
 * (docs/genai-builder.md §1.3): Cast to f32 (io below f32), Unsqueeze to one batch [1, N, HD],
 * positions Unsqueezed to [3, 1, N] / [1, N], is_packed_batching=1, Squeeze, Cast back to the io
 * dtype. */
static int rotary_fused(builder *b, const char *name, int x, int64_t n_heads) {
  const hf_config *c = b->c;
  char nm[128];
  const int mrope = c->rope.has_mrope;
  snprintf(nm, sizeof nm, "%s/%s", name, mrope ? "MRotaryEmbedding" : "RotaryEmbedding");
  int pos = b->positions;
  if (b->paged) {
    char sub[160];
    if (b->io != PH_DTYPE_F32) {
      snprintf(sub, sizeof sub, "%s/root_input/Cast", nm);
      x = cast_to(b, sub, x, ONNX_FLOAT);
    }
    snprintf(sub, sizeof sub, "%s/input/Unsqueeze", nm);
    int axis0 = shared_i64(b, 1, (int64_t[]){0});
    x = NODE1(b, "Unsqueeze", sub, 0, NULL, x, axis0);
    snprintf(sub, sizeof sub, "%s/position_ids/Unsqueeze", nm);
    pos =
        NODE1(b, "Unsqueeze", sub, 0, NULL, pos, mrope ? shared_i64(b, 1, (int64_t[]){1}) : axis0);
  }
  int y;
  if (mrope) {
    gattr a[6] = {attr_int("interleaved", 0),
                  attr_int("rotary_embedding_dim", c->rope.rotary_dim),
                  attr_int("num_heads", n_heads),
                  attr_ints("mrope_section", c->rope.mrope_section, 3),
                  attr_int("mrope_layout", c->rope.mrope_interleaved ? 1 : 0),
                  attr_int("is_packed_batching", 1)};
    y = node1(b, "MRotaryEmbedding", "com.microsoft", b->paged ? nm : name, 4,
              (int[]){x, pos, b->cos, b->sin}, b->paged ? 6 : 5, a);
  } else {
    gattr a[4] = {attr_int("interleaved", 0), attr_int("rotary_embedding_dim", c->rope.rotary_dim),
                  attr_int("num_heads", n_heads), attr_int("is_packed_batching", 1)};
    y = node1(b, "RotaryEmbedding", "com.microsoft", b->paged ? nm : name, 4,
              (int[]){x, pos, b->cos, b->sin}, b->paged ? 4 : 3, a);
  }
  if (!b->paged) return y;
  char sub[160];
  snprintf(sub, sizeof sub, "%s/output/Squeeze", nm);
  y = NODE1(b, "Squeeze", sub, 0, NULL, y, shared_i64(b, 1, (int64_t[]){0}));
  if (b->io != PH_DTYPE_F32) {
    snprintf(sub, sizeof sub, "%s/output_0/Cast", nm);
    y = cast_to(b, sub, y, dtype_to_onnx(b->io));
  }
  return y;
}

/* The per-token cos / sin tables of the plain-op form, built once for every layer under
 * /model/rotary_emb: [.., 1, rot/2] f32 (one row per token, broadcast over the heads).
 * Interleaved MRoPE reads frequency slot j at the position of plane s(j) (T, H or W; the rule
 * of op_rotary.c's mrope_slot_row): the positions are gathered per slot, [rot/2, ..] ->
 * [.., rot/2], turned into flat indices p * rot/2 + j and gathered from the flattened caches —
 * integer arithmetic and byte moves only, so each entry is the fused op's cache entry exactly. */
static void rope_tables(builder *b) {
  const hf_config *c = b->c;
  const int64_t half = c->rope.rotary_dim / 2;
  char saved[96];
  snprintf(saved, sizeof saved, "%s", b->scope);
  snprintf(b->scope, sizeof b->scope, "/model/rotary_emb");
  int idx = -1, table[2] = {b->cos, b->sin};
  if (c->rope.has_mrope) {
    int64_t *plane = malloc((size_t)half * sizeof *plane),
            *col = malloc((size_t)half * sizeof *col);
    if (!plane || !col) {
      free(plane);
      free(col);
      if (b->g->err.status == PH_OK)
        diag_set(&b->g->err, PH_ERR_NO_MEMORY, "rotary tables: out of memory");
      snprintf(b->scope, sizeof b->scope, "%s", saved);
      return;
    }
    const int64_t *sec = c->rope.mrope_section;
    for (int64_t j = 0; j < half; j++) {
      col[j] = j;
      plane[j] = !c->rope.mrope_interleaved     ? (j < sec[0]            ? 0
                                                   : j < sec[0] + sec[1] ? 1
                                                                         : 2)
                 : j % 3 == 1 && j / 3 < sec[1] ? 1
                 : j % 3 == 2 && j / 3 < sec[2] ? 2
                                                : 0;
    }
    gattr ax0 = attr_int("axis", 0);
    int pos = node1(b, "Gather", "", "positions/Gather", 2,
                    (int[]){b->positions, const_i64(b, "planes", (int)half, plane)}, 1, &ax0);
    gattr perm = b->paged ? attr_ints("perm", (int64_t[]){1, 0}, 2)
                          : attr_ints("perm", (int64_t[]){1, 2, 0}, 3);
    pos = NODE1(b, "Transpose", "positions/Transpose", 1, &perm, pos);
    pos = NODE1(b, "Mul", "index/Mul", 0, NULL, pos, const_i64(b, "half", -1, &half));
    idx = NODE1(b, "Add", "index/Add", 0, NULL, pos, const_i64(b, "columns", (int)half, col));
    free(plane);
    free(col);
    for (int k = 0; k < 2; k++)
      table[k] = reshape(b, k ? "sin/Reshape" : "cos/Reshape", table[k], 1, (int64_t[]){-1});
  } else {
    idx = b->positions;
  }
  int *dst[2] = {&b->rope_cos, &b->rope_sin};
  for (int k = 0; k < 2; k++) {
    char nm[64];
    gattr ax0 = attr_int("axis", 0);
    snprintf(nm, sizeof nm, "%s/Gather", k ? "sin" : "cos");
    int t = node1(b, "Gather", "", nm, 2, (int[]){table[k], idx}, 1, &ax0);
    snprintf(nm, sizeof nm, "%s/Unsqueeze", k ? "sin" : "cos");
    *dst[k] = NODE1(b, "Unsqueeze", nm, 0, NULL, t, shared_i64(b, 1, (int64_t[]){-2}));
  }
  snprintf(b->scope, sizeof b->scope, "%s", saved);
}

/* RoPE as plain ONNX ops, the same arithmetic as the fused kernel: in f32, per head, NeoX pairs
 * (i, i + rot/2) of the first rot channels, y1 = x1 cos - x2 sin and y2 = x2 cos + x1 sin (each
 * product and the sum rounded once to f32, as op_rotary.c computes them), channels rot..D-1
 * passed through, then rounded once to the io dtype. */
static int rotary_ops(builder *b, const char *name, int x, int64_t n_heads) {
  const hf_config *c = b->c;
  const int64_t D = c->head_dim, rot = c->rope.rotary_dim, half = rot / 2;
  if (b->rope_cos < 0) rope_tables(b);
  char nm[160];
  if (b->io != PH_DTYPE_F32) {
    snprintf(nm, sizeof nm, "%s/root_input/Cast", name);
    x = cast_to(b, nm, x, ONNX_FLOAT);
  }
  snprintf(nm, sizeof nm, "%s/heads/Reshape", name);
  x = split_heads(b, nm, x, n_heads, D);
  int parts[3] = {-1, -1, -1};
  const int n_parts = rot < D ? 3 : 2;
  gattr ax = attr_int("axis", -1);
  snprintf(nm, sizeof nm, "%s/Split", name);
  char sname[160];
  snprintf(sname, sizeof sname, "%s/split", name);
  node_n(b, "Split", "", nm, 2,
         (int[]){x, const_i64(b, sname, n_parts, (int64_t[]){half, half, D - rot})}, n_parts, parts,
         1, &ax);
  int t[4];
  const char *const tn[4] = {"x1cos", "x2sin", "x2cos", "x1sin"};
  const int tx[4] = {parts[0], parts[1], parts[1], parts[0]};
  const int tt[4] = {b->rope_cos, b->rope_sin, b->rope_cos, b->rope_sin};
  for (int k = 0; k < 4; k++) {
    snprintf(nm, sizeof nm, "%s/%s/Mul", name, tn[k]);
    t[k] = NODE1(b, "Mul", nm, 0, NULL, tx[k], tt[k]);
  }
  snprintf(nm, sizeof nm, "%s/y1/Sub", name);
  int y1 = NODE1(b, "Sub", nm, 0, NULL, t[0], t[1]);
  snprintf(nm, sizeof nm, "%s/y2/Add", name);
  int y2 = NODE1(b, "Add", nm, 0, NULL, t[2], t[3]);
  snprintf(nm, sizeof nm, "%s/Concat", name);
  int y = node1(b, "Concat", "", nm, n_parts, (int[]){y1, y2, parts[2]}, 1, &ax);
  snprintf(nm, sizeof nm, "%s/merge/Reshape", name);
  y = merge_heads(b, nm, y, n_heads * D);
  if (b->io != PH_DTYPE_F32) {
    snprintf(nm, sizeof nm, "%s/output_0/Cast", name);
    y = cast_to(b, nm, y, dtype_to_onnx(b->io));
  }
  return y;
}

static int rotary(builder *b, const char *name, int x, int64_t n_heads) {
  return b->rotary_ops ? rotary_ops(b, name, x, n_heads) : rotary_fused(b, name, x, n_heads);
}

static int full_attention(builder *b, int layer, int x, int past_k, int past_v, int *present_k,
                          int *present_v) {
  const hf_config *c = b->c;
  const int64_t Hq = c->n_heads, Hkv = c->n_kv_heads, D = c->head_dim;
  const float eps = (float)c->rms_norm_eps;
  snprintf(b->scope, sizeof b->scope, "/model/layers.%d/attn", layer);
  /* §7.1: q_proj rows are [query_h | gate_h] per head: view [.., Hq, 2D] and split the last axis */
  int qg = linear(b, "q_proj", x, wref_of(lw(b, layer, W_ATTN_Q)));
  int qg4 = split_heads(b, "q_proj/Reshape", qg, Hq, 2 * D);
  int halves[2] = {-1, -1};
  gattr ax = attr_int("axis", -1);
  node_n(b, "Split", "", "q_gate/Split", 2,
         (int[]){qg4, const_i64(b, "q_gate/split", 2, (int64_t[]){D, D})}, 2, halves, 1, &ax);
  /* §7.3/§7.4: (1+w) RMSNorm per head over D, before RoPE */
  int q = rms_norm(b, "q_norm", halves[0],
                   io_const(b, lw(b, layer, W_ATTN_Q_NORM), ".1p", F32_ONE_PLUS), eps);
  int k4 = split_heads(b, "k_proj/Reshape", linear(b, "k_proj", x, wref_of(lw(b, layer, W_ATTN_K))),
                       Hkv, D);
  int k =
      rms_norm(b, "k_norm", k4, io_const(b, lw(b, layer, W_ATTN_K_NORM), ".1p", F32_ONE_PLUS), eps);
  int v = linear(b, "v_proj", x, wref_of(lw(b, layer, W_ATTN_V)));
  /* §7.4/§7.5: partial rotary on the first rot dims, NeoX pairing, interleaved MRoPE slots.
   * The rotary ops take [B, S, hidden]: the packed rows are one batch of N. */
  int out[3] = {-1, -1, -1};
  if (!b->paged) {
    q = reshape(b, "q_norm/Reshape", q, 3, (int64_t[]){0, 0, Hq * D});
    k = reshape(b, "k_norm/Reshape", k, 3, (int64_t[]){0, 0, Hkv * D});
    q = rotary(b, "q_rotary", q, Hq);
    k = rotary(b, "k_rotary", k, Hkv);
    gattr ga[3] = {attr_int("num_heads", Hq), attr_int("kv_num_heads", Hkv),
                   attr_float("scale", (float)(1.0 / sqrt((double)D)))};
    node_n(b, "GroupQueryAttention", "com.microsoft", "GroupQueryAttention", 7,
           (int[]){q, k, v, past_k, past_v, b->seqlens_k, b->total}, 3, out, 3, ga);
  } else {
    q = merge_heads(b, "q_norm/Reshape", q, Hq * D);
    k = merge_heads(b, "k_norm/Reshape", k, Hkv * D);
    q = rotary(b, "q_rotary", q, Hq);
    k = rotary(b, "k_rotary", k, Hkv);
    /* abi §8.3: inputs 0-7, slots 8-15 empty (RoPE and q/k norm done above), metadata at 16;
     * the cache outputs alias the cache inputs */
    /* the attributes GenAI's builder writes, in its order, defaulted values included
     * (docs/genai-builder.md §3): scale is given explicitly as 1/sqrt(D) */
    gattr pa[7] = {attr_int("num_heads", Hq),
                   attr_int("kv_num_heads", Hkv),
                   attr_float("scale", (float)(1.0 / sqrt((double)D))),
                   attr_int("local_window_size", -1),
                   attr_float("softcap", 0.0f),
                   attr_int("do_rotary", 0),
                   attr_int("rotary_interleaved", 0)};
    int in[17];
    for (int i = 0; i < 17; i++) in[i] = -1;
    in[0] = q;
    in[1] = k;
    in[2] = v;
    in[3] = past_k;
    in[4] = past_v;
    in[5] = b->cu;
    in[6] = b->past_lens;
    in[7] = b->block_table;
    in[16] = b->metadata;
    node_n(b, "PagedAttention", "com.microsoft", "PagedAttention", 17, in, 3, out, 7, pa);
  }
  *present_k = out[1];
  *present_v = out[2];
  /* §7.2: the attention output gate is sigmoid */
  int gate = merge_heads(b, "gate/Reshape", halves[1], Hq * D);
  int gated = NODE1(b, "Mul", "gate/Mul", 0, NULL, out[0],
                    NODE1(b, "Sigmoid", "gate/Sigmoid", 0, NULL, gate));
  return linear(b, "o_proj", gated, wref_of(lw(b, layer, W_ATTN_O)));
}

/* Qwen3-Next stores in_proj_qkvz / in_proj_ba grouped per key head (§7.12); regroup the rows
 * into Qwen3.5's split layout once, at build time (a pure row permutation). */
static int next_regroup(builder *b, int layer, wref *qkv, wref *z, wref *bw, wref *aw) {
  const hf_config *c = b->c;
  const st_tensor *qkvz = lw(b, layer, W_LIN_QKVZ), *ba = lw(b, layer, W_LIN_BA);
  const int64_t H = c->hidden_size, Hk = c->lin.n_key_heads, Dk = c->lin.key_head_dim;
  const int64_t Hv = c->lin.n_value_heads, Dv = c->lin.value_head_dim, r = Hv / Hk;
  const int64_t kd = c->geom.key_dim, vd = c->geom.value_dim;
  const size_t row = (size_t)H * dtype_size(qkvz->dtype);
  char name[224];
  void *p_qkv = NULL, *p_z = NULL, *p_b = NULL, *p_a = NULL;
  int ids[4];
  snprintf(name, sizeof name, "%s.qkv", qkvz->name);
  ids[0] = graph_add_initializer_alloc(b->g, name, qkvz->dtype, shape_2d(2 * kd + vd, H), &p_qkv);
  snprintf(name, sizeof name, "%s.z", qkvz->name);
  ids[1] = graph_add_initializer_alloc(b->g, name, qkvz->dtype, shape_2d(vd, H), &p_z);
  snprintf(name, sizeof name, "%s.b", ba->name);
  ids[2] = graph_add_initializer_alloc(b->g, name, ba->dtype, shape_2d(Hv, H), &p_b);
  snprintf(name, sizeof name, "%s.a", ba->name);
  ids[3] = graph_add_initializer_alloc(b->g, name, ba->dtype, shape_2d(Hv, H), &p_a);
  if (ids[0] < 0 || ids[1] < 0 || ids[2] < 0 || ids[3] < 0) return -1;
  const char *src = (const char *)qkvz->data;
  const int64_t group = 2 * Dk + 2 * r * Dv;
  for (int64_t g = 0; g < Hk; g++) {
    const char *s = src + (size_t)(g * group) * row;
    memcpy((char *)p_qkv + (size_t)(g * Dk) * row, s, (size_t)Dk * row); /* q_g */
    memcpy((char *)p_qkv + (size_t)(kd + g * Dk) * row, s + (size_t)Dk * row,
           (size_t)Dk * row); /* k_g */
    memcpy((char *)p_qkv + (size_t)(2 * kd + g * r * Dv) * row, s + (size_t)(2 * Dk) * row,
           (size_t)(r * Dv) * row); /* v_g */
    memcpy((char *)p_z + (size_t)(g * r * Dv) * row, s + (size_t)(2 * Dk + r * Dv) * row,
           (size_t)(r * Dv) * row); /* z_g */
    const char *sb = (const char *)ba->data + (size_t)(g * 2 * r) * row;
    memcpy((char *)p_b + (size_t)(g * r) * row, sb, (size_t)r * row);
    memcpy((char *)p_a + (size_t)(g * r) * row, sb + (size_t)r * row, (size_t)r * row);
  }
  *qkv = (wref){b->g->values[ids[0]].name, qkvz->dtype, 2 * kd + vd, H, p_qkv};
  *z = (wref){b->g->values[ids[1]].name, qkvz->dtype, vd, H, p_z};
  *bw = (wref){b->g->values[ids[2]].name, ba->dtype, Hv, H, p_b};
  *aw = (wref){b->g->values[ids[3]].name, ba->dtype, Hv, H, p_a};
  return 0;
}

/* The packed layout's GatedDeltaNet layer (abi §8.3): VarlenCausalConvWithState (silu, bias slot
 * held by a zero bias), q/k/v heads, GatedDeltaNet doing all the Qwen gate arithmetic itself
 * (raw f32 a and b, qwen gate, sigmoid beta, in-op L2 norm, V-major f32 state), then the gated
 * norm. The gates are not applied twice. */
static int packed_gated_delta_net(builder *b, int layer, int mixed, int z, int a_raw, int beta_raw,
                                  int past_conv, int past_rec, int *present_conv, int *present_rec,
                                  int su[2]) {
  const hf_config *c = b->c;
  const int64_t Hk = c->lin.n_key_heads, Dk = c->lin.key_head_dim;
  const int64_t Hv = c->lin.n_value_heads, Dv = c->lin.value_head_dim;
  const int64_t kd = c->geom.key_dim, vd = c->geom.value_dim;
  /* initializers under the builder's names (docs/genai-builder.md §4.1), whatever the checkpoint's
   * prefix (model.language_model. in the VLM wrapper) */
  char nm[160];
  snprintf(nm, sizeof nm, "model.layers.%d.linear_attn.conv1d.weight", layer);
  int conv_w = const_named(b, lw(b, layer, W_LIN_CONV), nm, F32_COPY, b->io);
  snprintf(nm, sizeof nm, "model.layers.%d.linear_attn.conv1d.bias", layer);
  int zero_bias = fill_named(b, nm, c->geom.conv_dim, 0.0f, b->io);
  /* abi §8.3 step 4: the raw a/b projections enter GatedDeltaNet in f32 (node names as the
   * builder's, docs/genai-builder.md §4.1) */
  if (b->io != PH_DTYPE_F32) {
    a_raw = cast_to(b, "GatedDeltaNet/decay_fp32/Cast", a_raw, ONNX_FLOAT);
    beta_raw = cast_to(b, "GatedDeltaNet/beta_fp32/Cast", beta_raw, ONNX_FLOAT);
  }
  /* C > 0 (abi §8.3): the capacity attribute, capture_count as input 5 and the value output 2;
   * C = 0 leaves the node exactly as without compact updates */
  const int cap = b->su_capacity > 0;
  gattr ca[3] = {attr_string("activation", "silu"), attr_int("dilation", 1),
                 attr_int("state_update_capacity", b->su_capacity)};
  int conv[3] = {-1, -1, -1};
  node_n(b, "VarlenCausalConvWithState", "com.microsoft", "VarlenCausalConvWithState", 5 + cap,
         (int[]){mixed, conv_w, b->cu, zero_bias, past_conv, b->su_count}, 2 + cap, conv, 2 + cap,
         ca);
  *present_conv = conv[1];
  su[0] = cap ? conv[2] : -1;
  int qkv[3] = {-1, -1, -1};
  gattr ax = attr_int("axis", -1);
  node_n(b, "Split", "", "split_qkv/Split", 2,
         (int[]){conv[0], const_i64(b, "split_qkv/split", 3, (int64_t[]){kd, kd, vd})}, 3, qkv, 1,
         &ax);
  int q = reshape(b, "q_heads/Reshape", qkv[0], 3, (int64_t[]){0, Hk, Dk});
  int k = reshape(b, "k_heads/Reshape", qkv[1], 3, (int64_t[]){0, Hk, Dk});
  int v = reshape(b, "v_heads/Reshape", qkv[2], 3, (int64_t[]){0, Hv, Dv});
  gattr ga[7] = {attr_string("update_rule", "gated_delta"),
                 attr_float("scale", 0.0f),
                 attr_string("gate_activation", "qwen"),
                 attr_string("beta_activation", "sigmoid"),
                 attr_int("qk_l2_norm", 1),
                 attr_int("chunk_size", 64),
                 attr_int("state_update_capacity", b->su_capacity)};
  int out[3] = {-1, -1, -1};
  char an[160], dn[160];
  snprintf(an, sizeof an, "model.layers.%d.linear_attn.A_log", layer);
  snprintf(dn, sizeof dn, "model.layers.%d.linear_attn.dt_bias", layer);
  /* C > 0: capture_count as input 9, state_update_active as input 10, the capsule as output 2 */
  node_n(b, "GatedDeltaNet", "com.microsoft", "GatedDeltaNet", cap ? 11 : 9,
         (int[]){q, k, v, b->cu, a_raw, beta_raw, past_rec,
                 const_named(b, lw(b, layer, W_LIN_A_LOG), an, F32_COPY, PH_DTYPE_F32),
                 const_named(b, lw(b, layer, W_LIN_DT_BIAS), dn, F32_COPY, PH_DTYPE_F32),
                 b->su_count, b->su_active},
         2 + cap, out, 6 + cap, ga);
  *present_rec = out[1];
  su[1] = cap ? out[2] : -1;
  int o = reshape(b, "gdn_out/Reshape", out[0], 2, (int64_t[]){0, vd});
  snprintf(nm, sizeof nm, "model.layers.%d.linear_attn.norm.weight", layer);
  gattr eps = attr_float("epsilon", (float)c->rms_norm_eps);
  int normed =
      node1(b, "GatedRMSNorm", "com.microsoft", "GatedRMSNorm", 3,
            (int[]){o, const_named(b, lw(b, layer, W_LIN_NORM), nm, F32_COPY, b->io), z}, 1, &eps);
  return linear(b, "out_proj", normed, wref_of(lw(b, layer, W_LIN_OUT)));
}

/* The dense layout's recurrent op as GatedDeltaNet (model_linear_op, abi §8.4 linear_attn_op):
 * the uniform rank-4 spelling without cu_seqlens (abi §2.2): q, k [B, S, Hk, Dk] and v
 * [B, S, Hv, Dv] from the conv's split, the raw a/b projections [B, S, Hv] (f32: the dense
 * layout is f32) as decay and beta, and every Qwen gate inside the op exactly as the packed path
 * asks for it (qwen gate, sigmoid beta, in-op L2 norm, V-major f32 state [B, Hv, Dv, Dk]); then
 * the gated norm. */
static int dense_gated_delta_net(builder *b, int layer, const int qkv[3], int z, int a_raw,
                                 int beta_raw, int past_rec, int *present_rec) {
  const hf_config *c = b->c;
  const int64_t Hk = c->lin.n_key_heads, Dk = c->lin.key_head_dim;
  const int64_t Hv = c->lin.n_value_heads, Dv = c->lin.value_head_dim, vd = c->geom.value_dim;
  int q = reshape(b, "q/Reshape", qkv[0], 4, (int64_t[]){0, 0, Hk, Dk});
  int k = reshape(b, "k/Reshape", qkv[1], 4, (int64_t[]){0, 0, Hk, Dk});
  int v = reshape(b, "v/Reshape", qkv[2], 4, (int64_t[]){0, 0, Hv, Dv});
  gattr ga[6] = {attr_string("update_rule", "gated_delta"),
                 attr_float("scale", 0.0f),
                 attr_string("gate_activation", "qwen"),
                 attr_string("beta_activation", "sigmoid"),
                 attr_int("qk_l2_norm", 1),
                 attr_int("chunk_size", 64)};
  int out[2] = {-1, -1};
  node_n(b, "GatedDeltaNet", "com.microsoft", "GatedDeltaNet", 9,
         (int[]){q, k, v, -1, a_raw, beta_raw, past_rec,
                 f32_const(b, lw(b, layer, W_LIN_A_LOG), ".f32", F32_COPY),
                 f32_const(b, lw(b, layer, W_LIN_DT_BIAS), ".f32", F32_COPY)},
         2, out, 6, ga);
  *present_rec = out[1];
  int o = reshape(b, "gdn_out/Reshape", out[0], 3, (int64_t[]){0, 0, vd});
  gattr eps = attr_float("epsilon", (float)c->rms_norm_eps);
  int normed =
      node1(b, "GatedRMSNorm", "com.microsoft", "norm", 3,
            (int[]){o, f32_const(b, lw(b, layer, W_LIN_NORM), ".f32", F32_COPY), z}, 1, &eps);
  return linear(b, "out_proj", normed, wref_of(lw(b, layer, W_LIN_OUT)));
}

static int linear_attention(builder *b, int layer, int x, int past_conv, int past_rec,
                            int *present_conv, int *present_rec, int su[2]) {
  const hf_config *c = b->c;
  const int64_t Hk = c->lin.n_key_heads, Dk = c->lin.key_head_dim;
  const int64_t Hv = c->lin.n_value_heads, r = Hv / Hk;
  const int64_t kd = c->geom.key_dim, vd = c->geom.value_dim;
  snprintf(b->scope, sizeof b->scope, "/model/layers.%d/linear_attn", layer);
  wref wqkv, wz, wb, wa;
  if (c->family == FAMILY_QWEN3_NEXT) {
    if (next_regroup(b, layer, &wqkv, &wz, &wb, &wa) < 0) return -1;
  } else {
    wqkv = wref_of(lw(b, layer, W_LIN_QKV));
    wz = wref_of(lw(b, layer, W_LIN_Z));
    wb = wref_of(lw(b, layer, W_LIN_B));
    wa = wref_of(lw(b, layer, W_LIN_A));
  }
  int mixed = linear(b, "qkv_proj", x, wqkv);
  int z = linear(b, "z_proj", x, wz);
  int beta_raw = linear(b, "b_proj", x, wb);
  int a_raw = linear(b, "a_proj", x, wa);
  if (b->paged)
    return packed_gated_delta_net(b, layer, mixed, z, a_raw, beta_raw, past_conv, past_rec,
                                  present_conv, present_rec, su);
  /* §7.6: the depthwise conv covers q, k and v channels, SiLU after it, no bias; its state holds
   * the pre-conv inputs. CausalConvWithState is channels-first. */
  gattr perm = attr_ints("perm", (int64_t[]){0, 2, 1}, 3);
  int mixed_t = NODE1(b, "Transpose", "conv/Transpose_in", 1, &perm, mixed);
  int conv_w = f32_const(b, lw(b, layer, W_LIN_CONV), ".f32", F32_COPY);
  gattr act = attr_string("activation", "silu");
  int conv[2] = {-1, -1};
  node_n(b, "CausalConvWithState", "com.microsoft", "conv/CausalConvWithState", 4,
         (int[]){mixed_t, conv_w, -1, past_conv}, 2, conv, 1, &act);
  *present_conv = conv[1];
  int y = NODE1(b, "Transpose", "conv/Transpose_out", 1, &perm, conv[0]);
  int qkv[3] = {-1, -1, -1};
  gattr ax = attr_int("axis", -1);
  node_n(b, "Split", "", "qkv/Split", 2,
         (int[]){y, const_i64(b, "qkv/split", 3, (int64_t[]){kd, kd, vd})}, 3, qkv, 1, &ax);
  if (b->dense_gdn)
    return dense_gated_delta_net(b, layer, qkv, z, a_raw, beta_raw, past_rec, present_rec);
  /* §7.7: q and k L2-normalised with eps 1e-6 inside the sqrt: x/sqrt(Σx²+eps) is RMSNorm with
   * eps/Dk and gain 1/sqrt(Dk); the Dk^-1/2 query scale is LinearAttention's default scale. */
  const float l2_eps = 1e-6f / (float)Dk;
  int l2_gain = f32_fill(b, "l2norm_gain", Dk, (float)(1.0 / sqrt((double)Dk)));
  int q = reshape(b, "q/Reshape", qkv[0], 4, (int64_t[]){0, 0, Hk, Dk});
  q = rms_norm(b, "q/l2norm", q, l2_gain, l2_eps);
  q = reshape(b, "q/Reshape_out", q, 3, (int64_t[]){0, 0, Hk * Dk});
  int k = reshape(b, "k/Reshape", qkv[1], 4, (int64_t[]){0, 0, Hk, Dk});
  k = rms_norm(b, "k/l2norm", k, l2_gain, l2_eps);
  /* §7.8: value head h reads key head h / (Hv/Hk): repeat each key head r times, contiguously */
  if (r > 1) {
    int k5 =
        NODE1(b, "Unsqueeze", "k/Unsqueeze", 0, NULL, k, const_i64(b, "k/axes", 1, (int64_t[]){3}));
    int reps[GRAPH_MAX_IO];
    for (int i = 0; i < r && i < GRAPH_MAX_IO; i++) reps[i] = k5;
    gattr cax = attr_int("axis", 3);
    k = node1(b, "Concat", "", "k/repeat", (int)r, reps, 1, &cax);
  }
  k = reshape(b, "k/Reshape_out", k, 3, (int64_t[]){0, 0, Hv * Dk});
  /* §7.10: g = -exp(A_log) softplus(a + dt_bias) and beta = sigmoid(b), in f32 */
  int gates[2] = {-1, -1};
  node_n(b, "LinearAttentionGate", "com.microsoft", "gates", 4,
         (int[]){a_raw, f32_const(b, lw(b, layer, W_LIN_DT_BIAS), ".f32", F32_COPY),
                 f32_const(b, lw(b, layer, W_LIN_A_LOG), ".neg_exp", F32_NEG_EXP), beta_raw},
         2, gates, 0, NULL);
  /* §7.9/§7.11: gated delta rule, K-major state [B, Hv, Dk, Dv] */
  gattr la[4] = {attr_int("q_num_heads", Hk), attr_int("kv_num_heads", Hv),
                 attr_string("update_rule", "gated_delta"),
                 attr_float("scale", (float)(1.0 / sqrt((double)Dk)))};
  int lo[2] = {-1, -1};
  node_n(b, "LinearAttention", "com.microsoft", "LinearAttention", 6,
         (int[]){q, k, qkv[2], past_rec, gates[0], gates[1]}, 2, lo, 4, la);
  *present_rec = lo[1];
  /* §7.2: GDN output: RMSNorm with a plain gain first, then the SiLU(z) gate */
  gattr eps = attr_float("epsilon", (float)c->rms_norm_eps);
  int normed =
      node1(b, "GatedRMSNorm", "com.microsoft", "norm", 3,
            (int[]){lo[0], f32_const(b, lw(b, layer, W_LIN_NORM), ".f32", F32_COPY), z}, 1, &eps);
  return linear(b, "out_proj", normed, wref_of(lw(b, layer, W_LIN_OUT)));
}

/* ---- the forward pass (model-math §1) ------------------------------------------------------ */

int qwen35_decoder_layer(builder *b, int i, ph_layer_kind kind, int moe, int branch, int *residual,
                         const int past[2], int present[2], int su[2]) {
  const hf_config *c = b->c;
  const float eps = (float)c->rms_norm_eps;
  snprintf(b->scope, sizeof b->scope, "/model/layers.%d", i);
  int ln1 = io_const(b, lw(b, i, W_INPUT_NORM), ".1p", F32_ONE_PLUS);
  int h = branch < 0 ? rms_norm(b, "input_layernorm", *residual, ln1, eps)
                     : skip_rms_norm(b, "input_layernorm", branch, *residual, ln1, eps, residual);
  int mixed = kind == PH_LAYER_FULL_ATTENTION
                  ? full_attention(b, i, h, past[0], past[1], &present[0], &present[1])
                  : linear_attention(b, i, h, past[0], past[1], &present[0], &present[1], su);
  snprintf(b->scope, sizeof b->scope, "/model/layers.%d", i);
  int ln2 = io_const(b, lw(b, i, W_POST_NORM), ".1p", F32_ONE_PLUS);
  int h2 = skip_rms_norm(b, "post_attention_layernorm", mixed, *residual, ln2, eps, residual);
  return moe ? moe_block(b, i, h2) : dense_mlp(b, i, h2);
}

/* Embed, n_layers decoder layers, the head: the logits' value id; the presents into io. */
static int forward(builder *b, graph_io *io) {
  const hf_config *c = b->c;
  int residual = embed_tokens(b, io->ids), branch = -1;
  for (int i = 0; i < (int)c->n_layers; i++)
    branch = qwen35_decoder_layer(b, i, (ph_layer_kind)c->layer_kind[i], c->layer_is_moe[i], branch,
                                  &residual, io->past[i], io->present[i], io->su[i]);
  return lm_head(b, branch, residual, F32_ONE_PLUS);
}

/* ---- the whole model ------------------------------------------------------------------------ */

int64_t qwen35_default_context(const hf_config *c) {
  const int64_t mpe = c->max_position_embeddings;
  return mpe > 0 && mpe < 32768 ? mpe : 32768;
}

static ph_status check_supported(const hf_config *c, diag *d) {
  RETURN_ERROR_IF(c->family != FAMILY_QWEN35 && c->family != FAMILY_QWEN3_NEXT, d,
                  PH_ERR_UNSUPPORTED, "the qwen35 builder does not build %s models", c->model_type);
  RETURN_ERROR_IF(c->attention_bias, d, PH_ERR_UNSUPPORTED, "attention_bias=true is not supported");
  RETURN_ERROR_IF(
      c->lin.n_key_heads > 0 && c->lin.n_value_heads / c->lin.n_key_heads > GRAPH_MAX_IO, d,
      PH_ERR_UNSUPPORTED, "linear_num_value_heads / linear_num_key_heads above %d", GRAPH_MAX_IO);
  return PH_OK;
}

ph_status qwen35_build(const hf_config *c, const model_weights *w, const model_options *opt,
                       graph **out, diag *d) {
  *out = NULL;
  FORWARD_IF_ERROR(check_supported(c, d));
  graph *g = NULL;
  FORWARD_IF_ERROR(graph_create(&g, d));
  builder b;
  ph_status s = builder_init(&b, g, c, w, opt, qwen35_default_context(c), d);
  if (s != PH_OK) {
    graph_free(g);
    return s;
  }
  graph_io io;
  for (int i = 0; i < HF_MAX_LAYERS; i++) io.su[i][0] = io.su[i][1] = -1;
  if (b.paged)
    qwen35_packed_inputs(&b, &io);
  else
    qwen35_dense_inputs(&b, &io);
  rotary_caches(&b, NULL, 1.0, PH_DTYPE_F32);
  if (!b.paged) attention_lengths(&b, io.mask);
  io.logits = forward(&b, &io);
  if (b.paged)
    qwen35_packed_outputs(&b, &io);
  else
    qwen35_dense_outputs(&b, &io);
  if (opt && opt->output_hidden) qwen35_hidden_output(&b, b.hidden, ABI_HIDDEN_STATES);
  return builder_finish(&b, out, d);
}
