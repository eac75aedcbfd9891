/* deepseek — the DeepSeek-V2 / V3 graph builder: multi-head latent attention (MLA), dense SwiGLU
 * MLPs for the first first_k_dense_replace layers and DeepSeekMoE after them (models/moe.h).
 * See deepseek.h; the math is ../shared/spec/model-math.md §5.
 *
 * Dense layout (ONNX Runtime's CPU EP runs it): MLA as Hugging Face computes it, decomposed:
 * per head k = [W_UK c | RoPE(k_pe)] and v = W_UV c, GroupQueryAttention with H kv heads and
 * the explicit MLA softmax scale. GroupQueryAttention needs v as wide as k, so kv_b_proj is
 * extended by dn + dr - dv zero rows per head (v padded with exact zeros; the output's padding
 * columns are sliced away before o_proj).
 *
 * Packed layout: absorbed MLA on PagedAttention kv_cache_layout=LATENT (abi.md §1.8, §9.1): one
 * cache row [c (l) | k_pe (r)] per token and layer, the query projection absorbs W_UK (per head
 * [W_UK^T Wq_nope ; Wq_rope], [H (l + r), in]) and the output projection absorbs W_UV
 * (W_O[:, h] W_UV[h], [hidden, H l]), both computed in float64 from the checkpoint and rounded
 * once to the stored dtype; RoPE on the row's suffix happens inside the op (do_rotary,
 * rotary_offset = l), positions come from the lengths, page slots from slot_mapping.
 *
 * RoPE pairs adjacent channels (2i, 2i+1) when the config's rope_interleave says so (HF's
 * DeepSeek default), with YaRN frequencies and attention factor; the cos/sin caches are f32
 * (dense) or the io dtype (packed: the op's T).
 */
#include "models/deepseek.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/abi_names.h"
#include "models/builder.h"
#include "models/mla.h"
#include "models/moe.h"
#include "tensor/dtype.h"

typedef struct mla_io {
  int ids, mask;
  int past[HF_MAX_LAYERS][2];
  int present[HF_MAX_LAYERS][2];
} mla_io;

int64_t deepseek_default_context(const hf_config *c) {
  const int64_t mpe = c->max_position_embeddings;
  return mpe > 0 && mpe < 32768 ? mpe : 32768;
}

/* ---- graph I/O --------------------------------------------------------------------------------
 */

static void dense_inputs(builder *b, mla_io *io) {
  const hf_config *c = b->c;
  static const char *const bs[] = {ABI_DIM_BATCH, ABI_DIM_SEQUENCE};
  static const char *const ms[] = {ABI_DIM_BATCH, ABI_DIM_TOTAL_SEQ};
  static const char *const ks[] = {ABI_DIM_BATCH, NULL, ABI_DIM_PAST_SEQ, NULL};
  io->ids = graph_add_input(b->g, ABI_INPUT_IDS, PH_DTYPE_I64, 2, (int64_t[]){-1, -1}, bs);
  io->mask = graph_add_input(b->g, ABI_ATTENTION_MASK, PH_DTYPE_I64, 2, (int64_t[]){-1, -1}, ms);
  b->positions = graph_add_input(b->g, ABI_POSITION_IDS, PH_DTYPE_I64, 2, (int64_t[]){-1, -1}, bs);
  const int64_t kd[4] = {-1, c->n_heads, -1, c->mla.qk_nope_head_dim + c->mla.qk_rope_head_dim};
  char name[128];
  for (int i = 0; i < (int)c->n_layers; i++)
    for (int k = 0; k < 2; k++) {
      abi_past_name(name, sizeof name, k ? ABI_SLOT_VALUE : ABI_SLOT_KEY, i);
      io->past[i][k] = graph_add_input(b->g, name, PH_DTYPE_F32, 4, kd, ks);
    }
}

/* COMMON I/O of the LATENT packed graph (docs/graph-io.md): no position_ids (positions come from
 * the lengths), no attention_metadata, one latent page cache per layer. */
static void packed_inputs(builder *b, mla_io *io) {
  const hf_config *c = b->c;
  static const char *const ns[] = {ABI_DIM_TOKENS};
  static const char *const pg[] = {ABI_DIM_BLOCKS, NULL, NULL, NULL};
  graph *g = b->g;
  io->ids = graph_add_input(g, ABI_INPUT_IDS, PH_DTYPE_I64, 1, (int64_t[]){-1}, ns);
  io->mask = -1;
  b->positions = -1;
  packed_batch_inputs(b);
  b->slot_mapping = graph_add_input(g, ABI_SLOT_MAPPING, PH_DTYPE_I32, 1, (int64_t[]){-1}, ns);
  const int64_t row = c->mla.kv_lora_rank + c->mla.qk_rope_head_dim;
  char name[128];
  for (int i = 0; i < (int)c->n_layers; i++) {
    abi_past_name(name, sizeof name, ABI_SLOT_KEY, i);
    io->past[i][0] = graph_add_input(g, name, b->io, 4, (int64_t[]){-1, b->block_size, 1, row}, pg);
    io->past[i][1] = -1;
  }
  logit_rows_input(b); /* CPU runtime only, last */
}

static void outputs(builder *b, mla_io *io, int logits) {
  static const char *const dense_logits[] = {ABI_DIM_BATCH, ABI_DIM_SEQUENCE, NULL};
  static const char *const token_logits[] = {ABI_DIM_TOKENS, NULL};
  static const char *const pruned_logits[] = {ABI_DIM_BATCH, NULL};
  static const char *const row_logits[] = {ABI_DIM_LOGIT_ROWS, NULL};
  static const char *const dense_kv[] = {ABI_DIM_BATCH, NULL, ABI_DIM_TOTAL_SEQ, NULL};
  static const char *const pages[] = {ABI_DIM_BLOCKS, NULL, NULL, NULL};
  graph *g = b->g;
  graph_rename_value(g, logits, ABI_LOGITS);
  graph_mark_output(g, logits, NULL);
  graph_name_dims(g, logits, b->paged ? 2 : 3,
                  !b->paged          ? dense_logits
                  : b->prune_lm_head ? pruned_logits
                  : b->logit_rows    ? row_logits
                                     : token_logits);
  char name[128];
  for (int i = 0; i < (int)b->c->n_layers; i++)
    for (int k = 0; k < (b->paged ? 1 : 2); k++) {
      abi_present_name(name, sizeof name, k ? ABI_SLOT_VALUE : ABI_SLOT_KEY, i);
      graph_rename_value(g, io->present[i][k], name);
      graph_mark_output(g, io->present[i][k], NULL);
      graph_name_dims(g, io->present[i][k], 4, b->paged ? pages : dense_kv);
    }
}

/* ---- MLA ------------------------------------------------------------------------------------ */

/* The query before any absorption: q_b(RMSNorm(q_a(x))) with q LoRA, else q_proj(x). */
static int query_input(builder *b, int layer, int x, const st_tensor **wq) {
  const hf_config *c = b->c;
  if (c->mla.q_lora_rank == 0) {
    *wq = lw(b, layer, W_MLA_Q);
    return x;
  }
  int qa = linear(b, "q_a_proj", x, wref_of(lw(b, layer, W_MLA_Q_A)));
  int gain = io_const(b, lw(b, layer, W_MLA_Q_A_NORM), ".io", F32_COPY);
  *wq = lw(b, layer, W_MLA_Q_B);
  return rms_norm(b, "q_a_layernorm", qa, gain, (float)c->rms_norm_eps);
}

/* kv_a_proj_with_mqa(x) split into the normed latent c [.., l] and the raw k_pe [.., r]. */
static void latent_row(builder *b, int layer, int x, int *cn, int *kpe) {
  const hf_config *c = b->c;
  const int64_t l = c->mla.kv_lora_rank, r = c->mla.qk_rope_head_dim;
  int kv = linear(b, "kv_a_proj_with_mqa", x, wref_of(lw(b, layer, W_MLA_KV_A)));
  int parts[2] = {-1, -1};
  gattr ax = attr_int("axis", -1);
  node_n(b, "Split", "", "kv_a/Split", 2,
         (int[]){kv, const_i64(b, "kv_a/split", 2, (int64_t[]){l, r})}, 2, parts, 1, &ax);
  int gain = io_const(b, lw(b, layer, W_MLA_KV_A_NORM), ".io", F32_COPY);
  *cn = rms_norm(b, "kv_a_layernorm", parts[0], gain, (float)c->rms_norm_eps);
  *kpe = parts[1];
}

/* A weight of `rows` x `cols` computed here (f64, rounded once to dt) as a wref the Linear
 * helper can read; the bytes live in the graph's arena. */
static wref computed_weight(builder *b, const char *name, ph_dtype dt, int64_t rows, int64_t cols,
                            const double *v) {
  wref w = {NULL, dt, rows, cols, NULL};
  const size_t n = (size_t)(rows * cols);
  char *nm = arena_strdup(&b->g->arena, name);
  void *dst = arena_alloc(&b->g->arena, n * dtype_size(dt) + 64);
  float *tmp = malloc(n * sizeof *tmp);
  if (!nm || !dst || !tmp) {
    free(tmp);
    if (graph_status(b->g) == PH_OK)
      diag_set(&b->g->err, PH_ERR_NO_MEMORY, "%s: out of memory", name);
    return w;
  }
  for (size_t i = 0; i < n; i++) tmp[i] = (float)v[i];
  /* f64 -> f32 -> dt: one rounding for f32; for f16/bf16 the f32 step is exact enough (its
   * error is 2^-24 relative, far below the target's 2^-11 / 2^-8) */
  if (dtype_convert(dst, dt, tmp, PH_DTYPE_F32, n, NULL) != PH_OK && graph_status(b->g) == PH_OK)
    diag_set(&b->g->err, PH_ERR_INTERNAL, "%s: conversion to %s failed", name, ph_dtype_name(dt));
  free(tmp);
  w.name = nm;
  w.data = dst;
  return w;
}

/* Rows [r0, r0 + n) of a checkpoint matrix [rows, cols] as doubles (dst [n, cols]). */
static int rows_f64(const st_tensor *t, int64_t r0, int64_t n, double *dst) {
  const int64_t cols = t->shape.dims[1];
  float *tmp = malloc((size_t)(n * cols) * sizeof *tmp);
  if (!tmp) return -1;
  const size_t es = dtype_size(t->dtype);
  int rc = dtype_convert(tmp, PH_DTYPE_F32, (const char *)t->data + (size_t)(r0 * cols) * es,
                         t->dtype, (size_t)(n * cols), NULL) == PH_OK
               ? 0
               : -1;
  for (int64_t i = 0; rc == 0 && i < n * cols; i++) dst[i] = tmp[i];
  free(tmp);
  return rc;
}

/* Absorbed query [H (l + r), in] and output [hidden, H l] projections (abi §9.1), in f64. */
static int absorbed_weights(builder *b, int layer, const st_tensor *wq, wref *q_abs, wref *o_abs) {
  const hf_config *c = b->c;
  const int64_t H = c->n_heads, l = c->mla.kv_lora_rank, r = c->mla.qk_rope_head_dim;
  const int64_t dn = c->mla.qk_nope_head_dim, dv = c->mla.v_head_dim, hid = c->hidden_size;
  const int64_t in = wq->shape.dims[1];
  const st_tensor *kvb = lw(b, layer, W_MLA_KV_B), *wo = lw(b, layer, W_MLA_O);
  char qn[192], on[192];
  snprintf(qn, sizeof qn, "%slayers.%d.self_attn.q_absorbed.weight",
           weight_layout_prefix(b->w->layout), layer);
  snprintf(on, sizeof on, "%slayers.%d.self_attn.o_absorbed.weight",
           weight_layout_prefix(b->w->layout), layer);
  if (b->w->placeholder) { /* zeros absorb to zeros: views of the zero mapping */
    *q_abs = (wref){arena_strdup(&b->g->arena, qn), wq->dtype, H * (l + r), in, wq->data};
    *o_abs = (wref){arena_strdup(&b->g->arena, on), wo->dtype, hid, H * l, wo->data};
    return 0;
  }
  double *q = calloc((size_t)(H * (l + r) * in), sizeof *q);
  double *o = calloc((size_t)(hid * H * l), sizeof *o);
  double *uk = malloc((size_t)((dn + dv) * l) * sizeof *uk);
  double *qh = malloc((size_t)((dn + r) * in) * sizeof *qh);
  double *woh = malloc((size_t)(hid * H * dv) * sizeof *woh);
  int rc = q && o && uk && qh && woh && rows_f64(wo, 0, hid, woh) == 0 ? 0 : -1;
  for (int64_t h = 0; rc == 0 && h < H; h++) {
    if (rows_f64(kvb, h * (dn + dv), dn + dv, uk) < 0 ||
        rows_f64(wq, h * (dn + r), dn + r, qh) < 0) {
      rc = -1;
      break;
    }
    /* q rows of head h: [W_UK^T Wq_nope (l x in) ; Wq_rope (r x in)] */
    double *qdst = q + (size_t)(h * (l + r) * in);
    for (int64_t d = 0; d < dn; d++)
      for (int64_t a = 0; a < l; a++) {
        const double u = uk[d * l + a];
        if (u == 0.0) continue;
        const double *src = qh + d * in;
        double *dst = qdst + a * in;
        for (int64_t k = 0; k < in; k++) dst[k] += u * src[k];
      }
    memcpy(qdst + l * in, qh + dn * in, (size_t)(r * in) * sizeof *q);
    /* o columns of head h: W_O[:, h dv:(h+1) dv] W_UV[h] (hidden x l) */
    const double *uv = uk + dn * l;
    for (int64_t row = 0; row < hid; row++) {
      double *dst = o + row * H * l + h * l;
      const double *w = woh + row * H * dv + h * dv;
      for (int64_t e = 0; e < dv; e++)
        for (int64_t a = 0; a < l; a++) dst[a] += w[e] * uv[e * l + a];
    }
  }
  if (rc == 0) {
    *q_abs = computed_weight(b, qn, stored_as(b, wq->dtype), H * (l + r), in, q);
    *o_abs = computed_weight(b, on, stored_as(b, wo->dtype), hid, H * l, o);
  }
  free(q);
  free(o);
  free(uk);
  free(qh);
  free(woh);
  return rc == 0 && q_abs->data && o_abs->data ? 0 : -1;
}

/* Packed: absorbed MLA on LATENT PagedAttention. */
static int mla_latent(builder *b, int layer, int x, int past, int *present) {
  const hf_config *c = b->c;
  const int64_t H = c->n_heads, l = c->mla.kv_lora_rank;
  const st_tensor *wq = NULL;
  int qin = query_input(b, layer, x, &wq);
  int cn = -1, kpe = -1;
  latent_row(b, layer, x, &cn, &kpe);
  wref q_abs, o_abs;
  if (absorbed_weights(b, layer, wq, &q_abs, &o_abs) < 0) {
    if (graph_status(b->g) == PH_OK)
      diag_set(&b->g->err, PH_ERR_NO_MEMORY, "layer %d: absorbing kv_b_proj failed", layer);
    return -1;
  }
  int q = linear(b, "q_absorbed", qin, q_abs);
  gattr ax = attr_int("axis", -1);
  int key = node1(b, "Concat", "", "latent/Concat", 2, (int[]){cn, kpe}, 1, &ax);
  gattr pa[8] = {attr_int("num_heads", H),
                 attr_int("kv_num_heads", 1),
                 attr_float("scale", (float)mla_softmax_scale(c)),
                 attr_string("kv_cache_layout", "LATENT"),
                 attr_int("v_head_size", l),
                 attr_int("rotary_offset", l),
                 attr_int("do_rotary", 1),
                 attr_int("rotary_interleaved", c->rope.interleave)};
  int in[17];
  for (int i = 0; i < 17; i++) in[i] = -1;
  in[0] = q;
  in[1] = key;
  in[3] = past;
  in[5] = b->cu;
  in[6] = b->past_lens;
  in[7] = b->block_table;
  in[8] = b->cos;
  in[9] = b->sin;
  in[10] = b->slot_mapping;
  int out[2] = {-1, -1};
  node_n(b, "PagedAttention", "com.microsoft", "PagedAttention", 17, in, 2, out, 8, pa);
  *present = out[1];
  return linear(b, "o_absorbed", out[0], o_abs);
}

/* kv_b_proj with dn + dr - dv zero rows after each head's value rows: per head [k_nope (dn) |
 * v (dv) | 0 (dn + dr - dv)], so that v comes out as wide as k. */
static wref kv_b_padded(builder *b, int layer) {
  const hf_config *c = b->c;
  const int64_t H = c->n_heads, l = c->mla.kv_lora_rank, dn = c->mla.qk_nope_head_dim;
  const int64_t dr = c->mla.qk_rope_head_dim, dv = c->mla.v_head_dim;
  const st_tensor *kvb = lw(b, layer, W_MLA_KV_B);
  const ph_dtype dt = stored_as(b, kvb->dtype);
  const size_t es = dtype_size(dt), se = dtype_size(kvb->dtype);
  const int64_t rows = H * (dn + dn + dr);
  wref w = {NULL, dt, rows, l, NULL};
  if (b->w->placeholder) return (wref){kvb->name, kvb->dtype, rows, l, kvb->data};
  char name[192];
  snprintf(name, sizeof name, "%s.v_padded", kvb->name);
  w.name = arena_strdup(&b->g->arena, name);
  uint8_t *dst = arena_alloc(&b->g->arena, (size_t)(rows * l) * es + 64);
  int ok = w.name && dst;
  if (ok) memset(dst, 0, (size_t)(rows * l) * es);
  for (int64_t h = 0; ok && h < H; h++)
    ok = dtype_convert(dst + (size_t)(h * (2 * dn + dr) * l) * es, dt,
                       (const uint8_t *)kvb->data + (size_t)(h * (dn + dv) * l) * se, kvb->dtype,
                       (size_t)((dn + dv) * l), NULL) == PH_OK;
  /* a failure makes the graph's error sticky: the Linear over it is then a no-op */
  if (!ok && graph_status(b->g) == PH_OK)
    diag_set(&b->g->err, PH_ERR_NO_MEMORY, "%s: padding kv_b_proj failed", kvb->name);
  w.data = ok ? dst : NULL;
  return w;
}

/* RotaryEmbedding over [B, S, heads * r] (every channel rotated). */
static int rope(builder *b, const char *name, int x, int64_t heads) {
  const hf_config *c = b->c;
  gattr a[3] = {attr_int("interleaved", c->rope.interleave),
                attr_int("rotary_embedding_dim", c->mla.qk_rope_head_dim),
                attr_int("num_heads", heads)};
  return node1(b, "RotaryEmbedding", "com.microsoft", name, 4,
               (int[]){x, b->positions, b->cos, b->sin}, 3, a);
}

/* Dense: MLA decomposed as HF computes it, on GroupQueryAttention. */
static int mla_dense(builder *b, int layer, int x, int past_k, int past_v, int *present_k,
                     int *present_v) {
  const hf_config *c = b->c;
  const int64_t H = c->n_heads, dn = c->mla.qk_nope_head_dim, dr = c->mla.qk_rope_head_dim;
  const int64_t dv = c->mla.v_head_dim, D = dn + dr;
  const st_tensor *wq = NULL;
  int qin = query_input(b, layer, x, &wq);
  int q = split_heads(b, "q/Reshape", linear(b, "q_proj", qin, wref_of(wq)), H, D);
  int qs[2] = {-1, -1};
  gattr ax = attr_int("axis", -1);
  node_n(b, "Split", "", "q/Split", 2, (int[]){q, const_i64(b, "q/split", 2, (int64_t[]){dn, dr})},
         2, qs, 1, &ax);
  int qpe = rope(b, "q_rotary", merge_heads(b, "q_pe/Reshape", qs[1], H * dr), H);
  qpe = split_heads(b, "q_pe/heads", qpe, H, dr);
  int qfull = merge_heads(
      b, "q/merge", node1(b, "Concat", "", "q/Concat", 2, (int[]){qs[0], qpe}, 1, &ax), H * D);
  int cn = -1, kpe = -1;
  latent_row(b, layer, x, &cn, &kpe);
  kpe = rope(b, "k_rotary", kpe, 1);
  /* k_pe is shared by every head: broadcast [.., 1, dr] x ones [H, 1] (exact) */
  kpe = split_heads(b, "k_pe/heads", kpe, 1, dr);
  char on[192];
  snprintf(on, sizeof on, "%s/k_pe/ones", b->scope);
  int ones = graph_find_value(b->g, on);
  if (ones < 0) {
    void *p = NULL;
    ones = graph_add_initializer_alloc(b->g, on, PH_DTYPE_F32, shape_2d(H, 1), &p);
    for (int64_t h = 0; p && h < H; h++) ((float *)p)[h] = 1.0f;
  }
  kpe = NODE1(b, "Mul", "k_pe/broadcast", 0, NULL, kpe, ones);
  int kv = split_heads(b, "kv/heads", linear(b, "kv_b_proj", cn, kv_b_padded(b, layer)), H, dn + D);
  int kvs[2] = {-1, -1};
  node_n(b, "Split", "", "kv/Split", 2,
         (int[]){kv, const_i64(b, "kv/split", 2, (int64_t[]){dn, D})}, 2, kvs, 1, &ax);
  int k = merge_heads(b, "k/merge",
                      node1(b, "Concat", "", "k/Concat", 2, (int[]){kvs[0], kpe}, 1, &ax), H * D);
  int v = merge_heads(b, "v/merge", kvs[1], H * D);
  gattr ga[3] = {attr_int("num_heads", H), attr_int("kv_num_heads", H),
                 attr_float("scale", (float)mla_softmax_scale(c))};
  int out[3] = {-1, -1, -1};
  node_n(b, "GroupQueryAttention", "com.microsoft", "GroupQueryAttention", 7,
         (int[]){qfull, k, v, past_k, past_v, b->seqlens_k, b->total}, 3, out, 3, ga);
  *present_k = out[1];
  *present_v = out[2];
  /* the first dv columns of each head's output are o_h; the rest is the zero padding's */
  int oh = split_heads(b, "attn/heads", out[0], H, D);
  int os[2] = {-1, -1};
  node_n(b, "Split", "", "attn/Split", 2,
         (int[]){oh, const_i64(b, "attn/split", 2, (int64_t[]){dv, D - dv})}, 2, os, 1, &ax);
  int o = merge_heads(b, "attn/merge", os[0], H * dv);
  return linear(b, "o_proj", o, wref_of(lw(b, layer, W_MLA_O)));
}

/* ---- the forward pass ----------------------------------------------------------------------- */

static int decoder_layer(builder *b, int i, int branch, int *residual, mla_io *io) {
  const hf_config *c = b->c;
  const float eps = (float)c->rms_norm_eps;
  snprintf(b->scope, sizeof b->scope, "/model/layers.%d", i);
  b->layer = i;
  int ln1 = io_const(b, lw(b, i, W_INPUT_NORM), ".io", F32_COPY);
  int h = i == 0 ? rms_norm(b, "input_layernorm", *residual, ln1, eps)
                 : skip_rms_norm(b, "input_layernorm", branch, *residual, ln1, eps, residual);
  snprintf(b->scope, sizeof b->scope, "/model/layers.%d/attn", i);
  int *past = io->past[i], *present = io->present[i];
  int mixed = b->paged ? mla_latent(b, i, h, past[0], &present[0])
                       : mla_dense(b, i, h, past[0], past[1], &present[0], &present[1]);
  snprintf(b->scope, sizeof b->scope, "/model/layers.%d", i);
  int ln2 = io_const(b, lw(b, i, W_POST_NORM), ".io", F32_COPY);
  int h2 = skip_rms_norm(b, "post_attention_layernorm", mixed, *residual, ln2, eps, residual);
  return c->layer_is_moe[i] ? moe_block(b, i, h2) : dense_mlp(b, i, h2);
}

static ph_status check_supported(const hf_config *c, diag *d) {
  RETURN_ERROR_IF(c->family != FAMILY_DEEPSEEK, d, PH_ERR_UNSUPPORTED,
                  "the deepseek builder does not build %s models", c->model_type);
  RETURN_ERROR_IF(c->attention_bias, d, PH_ERR_UNSUPPORTED,
                  "attention_bias=true is not supported (%s)", c->model_type);
  RETURN_ERROR_IF(
      c->mla.v_head_dim > c->mla.qk_nope_head_dim + c->mla.qk_rope_head_dim, d, PH_ERR_UNSUPPORTED,
      "v_head_dim %lld is wider than qk_nope_head_dim + qk_rope_head_dim = %lld",
      (long long)c->mla.v_head_dim, (long long)(c->mla.qk_nope_head_dim + c->mla.qk_rope_head_dim));
  /* what neither layout's graph computes: refused rather than run as plain dense MLA */
  RETURN_ERROR_IF(
      c->mla_feat.use_dsa && (c->mla_feat.index_topk > 0 || c->mla_feat.index_n_heads > 0 ||
                              c->mla_feat.index_head_dim > 0),
      d, PH_ERR_UNSUPPORTED,
      "%s: DeepSeek Sparse Attention (use_dsa = true with an indexer, index_topk = %lld) "
      "is not implemented; the graph would attend to every key (use_dsa = false runs "
      "full attention)",
      c->model_type, (long long)c->mla_feat.index_topk);
  RETURN_ERROR_IF(c->mla_feat.n_compress_ratios > 0 || c->mla_feat.o_lora_rank > 0 ||
                      c->mla_feat.o_groups > 1 || c->mla_feat.hc_mult > 1,
                  d, PH_ERR_UNSUPPORTED,
                  "%s: DeepSeek-V4 attention (compress_ratios, o_lora_rank, o_groups, hc_mult) is "
                  "not implemented",
                  c->model_type);
  RETURN_ERROR_IF(c->mla_feat.qk_norm, d, PH_ERR_UNSUPPORTED,
                  "%s: MLA with q/k norm (%s) is not implemented", c->model_type,
                  c->mla_feat.qk_norm_key);
  RETURN_ERROR_IF(c->mla_feat.sliding_window > 0, d, PH_ERR_UNSUPPORTED,
                  "%s: sliding_window = %lld is not implemented for MLA", c->model_type,
                  (long long)c->mla_feat.sliding_window);
  RETURN_ERROR_IF(c->mla_feat.head_sink, d, PH_ERR_UNSUPPORTED,
                  "%s: attention sinks (head_sink) are not implemented for MLA", c->model_type);
  RETURN_ERROR_IF(c->mla.qk_rope_head_dim % 2 != 0 || c->mla.qk_rope_head_dim < 2, d,
                  PH_ERR_UNSUPPORTED, "qk_rope_head_dim %lld: RoPE needs an even width >= 2",
                  (long long)c->mla.qk_rope_head_dim);
  return PH_OK;
}

ph_status deepseek_build(const hf_config *c, const model_weights *w, const model_options *opt,
                         graph **out, diag *d) {
  *out = NULL;
  RETURN_ERROR_IF(c->family != FAMILY_DEEPSEEK, d, PH_ERR_UNSUPPORTED,
                  "the deepseek builder does not build %s models", c->model_type);
  graph *g = NULL;
  FORWARD_IF_ERROR(graph_create(&g, d));
  builder b;
  ph_status s = builder_init(&b, g, c, w, opt, deepseek_default_context(c), d);
  /* paged: LATENT's own refusals first (models/mla.h); our executor runs LATENT over any float
   * cache, an export for CUDA refuses f32 before it builds */
  if (s == PH_OK && b.paged) s = mla_latent_check(c, b.block_size, b.io, MLA_CHECK_CPU, d);
  if (s == PH_OK) s = check_supported(c, d);
  if (s == PH_OK && opt && opt->output_hidden)
    s = diag_set(d, PH_ERR_UNSUPPORTED, "output_hidden: %s has no MTP drafter", c->model_type);
  if (s != PH_OK) {
    graph_free(g);
    return s;
  }
  mla_io io;
  memset(&io, 0, sizeof io);
  b.slot_mapping = -1;
  if (b.paged)
    packed_inputs(&b, &io);
  else
    dense_inputs(&b, &io);
  const int64_t half = c->mla.qk_rope_head_dim / 2;
  double *inv = malloc((size_t)half * sizeof *inv);
  double attention_factor = 1.0;
  if (!inv) {
    graph_free(g);
    return diag_set(d, PH_ERR_NO_MEMORY, "rotary frequencies: out of memory");
  }
  mla_rope_inv_freq(c, inv, &attention_factor);
  rotary_caches(&b, inv, attention_factor, b.paged ? b.io : PH_DTYPE_F32);
  free(inv);
  if (!b.paged) attention_lengths(&b, io.mask);
  int residual = embed_tokens(&b, io.ids), branch = -1;
  for (int i = 0; i < (int)c->n_layers; i++) branch = decoder_layer(&b, i, branch, &residual, &io);
  int logits = lm_head(&b, branch, residual, F32_COPY);
  outputs(&b, &io, logits);
  return builder_finish(&b, out, d);
}
