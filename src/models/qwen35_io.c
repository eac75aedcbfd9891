/* qwen35_io — the graph inputs and outputs of the qwen35 builder, one function per layout: the
 * dense layout of docs/graph-io.md and the packed paged one of ../shared/spec/abi.md §8.1/§8.2.
 * Names and symbolic dims come from graph/abi_names.h. The order of the calls is the order of
 * the graph's inputs and outputs in an exported package: do not reorder.
 */
#include <stdio.h>

#include "graph/abi_names.h"
#include "models/qwen35_builder.h"

/* The two cache inputs of every layer, in layer order: key and value [kv_dims] of a
 * full-attention layer; conv state [B, conv_dim, K-1] in the io dtype and recurrent state
 * [rec_dims] in f32 of a linear one. */
static void cache_inputs(builder *b, graph_io *io, const int64_t kv_dims[4],
                         const char *const kv_syms[4], const int64_t rec_dims[4]) {
  const hf_config *c = b->c;
  static const char *const state_syms[] = {ABI_DIM_BATCH, NULL, NULL, NULL};
  const int64_t conv_dims[3] = {-1, c->geom.conv_dim, c->lin.conv_kernel - 1};
  char name[128];
  for (int i = 0; i < (int)c->n_layers; i++) {
    const int full = c->layer_kind[i] == PH_LAYER_FULL_ATTENTION;
    for (int k = 0; k < 2; k++) {
      abi_past_name(name, sizeof name, abi_layer_slot(full, k), i);
      io->past[i][k] = full ? graph_add_input(b->g, name, b->io, 4, kv_dims, kv_syms)
                       : k  ? graph_add_input(b->g, name, PH_DTYPE_F32, 4, rec_dims, state_syms)
                            : graph_add_input(b->g, name, b->io, 3, conv_dims, state_syms);
    }
  }
}

/* Dense (docs/graph-io.md): input_ids [B, S], attention_mask [B, P+S], position_ids [3, B, S]
 * (MRoPE) or [B, S], KV [B, Hkv, P, D], recurrent state K-major [B, Hv, Dk, Dv] (abi §5), or
 * V-major [B, Hv, Dv, Dk] when GatedDeltaNet runs the linear layers (abi §2.2). */
void qwen35_dense_inputs(builder *b, graph_io *io) {
  const hf_config *c = b->c;
  static const char *const bs[] = {ABI_DIM_BATCH, ABI_DIM_SEQUENCE};
  static const char *const ms[] = {ABI_DIM_BATCH, ABI_DIM_TOTAL_SEQ};
  static const char *const ps[] = {NULL, ABI_DIM_BATCH, ABI_DIM_SEQUENCE};
  static const char *const ks[] = {ABI_DIM_BATCH, NULL, ABI_DIM_PAST_SEQ, NULL};
  io->ids = graph_add_input(b->g, ABI_INPUT_IDS, PH_DTYPE_I64, 2, (int64_t[]){-1, -1}, bs);
  io->mask = graph_add_input(b->g, ABI_ATTENTION_MASK, PH_DTYPE_I64, 2, (int64_t[]){-1, -1}, ms);
  b->positions =
      c->rope.has_mrope
          ? graph_add_input(b->g, ABI_POSITION_IDS, PH_DTYPE_I64, 3, (int64_t[]){3, -1, -1}, ps)
          : graph_add_input(b->g, ABI_POSITION_IDS, PH_DTYPE_I64, 2, (int64_t[]){-1, -1}, bs);
  const int64_t Hv = c->lin.n_value_heads, Dk = c->lin.key_head_dim, Dv = c->lin.value_head_dim;
  cache_inputs(b, io, (int64_t[]){-1, c->n_kv_heads, -1, c->head_dim}, ks,
               b->dense_gdn ? (int64_t[]){-1, Hv, Dv, Dk} : (int64_t[]){-1, Hv, Dk, Dv});
}

/* Packed paged (abi §8.1): input_ids [N], position_ids [3, N] (MRoPE) or [N], block_table,
 * cumulative_sequence_lengths, past_sequence_lengths, attention_metadata, KV pages
 * [num_blocks, block_size, Hkv, D], recurrent state V-major [B, Hv, Dv, Dk]. */
void qwen35_packed_inputs(builder *b, graph_io *io) {
  const hf_config *c = b->c;
  static const char *const ns[] = {ABI_DIM_TOKENS};
  static const char *const ps[] = {NULL, ABI_DIM_TOKENS};
  static const char *const pg[] = {ABI_DIM_BLOCKS, NULL, NULL, NULL};
  graph *g = b->g;
  io->ids = graph_add_input(g, ABI_INPUT_IDS, PH_DTYPE_I64, 1, (int64_t[]){-1}, ns);
  io->mask = -1;
  b->positions = c->rope.has_mrope
                     ? graph_add_input(g, ABI_POSITION_IDS, PH_DTYPE_I64, 2, (int64_t[]){3, -1}, ps)
                     : graph_add_input(g, ABI_POSITION_IDS, PH_DTYPE_I64, 1, (int64_t[]){-1}, ns);
  packed_batch_inputs(b);
  b->metadata = graph_add_input(g, ABI_ATTN_METADATA, PH_DTYPE_I32, 1, (int64_t[]){3}, NULL);
  const int64_t Hv = c->lin.n_value_heads, Dk = c->lin.key_head_dim, Dv = c->lin.value_head_dim;
  cache_inputs(b, io, (int64_t[]){-1, b->block_size, c->n_kv_heads, c->head_dim}, pg,
               (int64_t[]){-1, Hv, Dv, Dk});
  /* compact state updates (abi §8.1): after every other input, only when C > 0 */
  if (b->su_capacity > 0) {
    static const char *const bs[] = {ABI_DIM_BATCH};
    b->su_count = graph_add_input(g, ABI_SU_CAPTURE_COUNT, PH_DTYPE_I32, 1, (int64_t[]){-1}, bs);
    b->su_active = graph_add_input(g, ABI_SU_ACTIVE, PH_DTYPE_I32, 1, (int64_t[]){1}, NULL);
  }
  logit_rows_input(b); /* CPU runtime only, last */
}

/* Renames the computed values to the ABI's output names and marks them, in order: logits
 * [logit_syms] of rank n_logit, then each layer's two present caches (KV [kv_syms], states
 * [B, ..]) — the same buffers as the pasts for the fixed state and the pages. */
static void graph_outputs(builder *b, graph_io *io, int n_logit, const char *const *logit_syms,
                          const char *const kv_syms[4]) {
  static const char *const state_syms[] = {ABI_DIM_BATCH, NULL, NULL, NULL};
  graph *g = b->g;
  graph_rename_value(g, io->logits, ABI_LOGITS);
  graph_mark_output(g, io->logits, NULL);
  graph_name_dims(g, io->logits, n_logit, logit_syms);
  char name[128];
  for (int i = 0; i < (int)b->c->n_layers; i++) {
    const int full = b->c->layer_kind[i] == PH_LAYER_FULL_ATTENTION;
    for (int k = 0; k < 2; k++) {
      abi_present_name(name, sizeof name, abi_layer_slot(full, k), i);
      graph_rename_value(g, io->present[i][k], name);
      graph_mark_output(g, io->present[i][k], NULL);
      graph_name_dims(g, io->present[i][k], full || k ? 4 : 3, full ? kv_syms : state_syms);
    }
  }
}

/* Dense: logits [B, S, V]; present KV [B, Hkv, P+S, D]. */
void qwen35_dense_outputs(builder *b, graph_io *io) {
  static const char *const logit_syms[] = {ABI_DIM_BATCH, ABI_DIM_SEQUENCE, NULL};
  static const char *const kv_syms[] = {ABI_DIM_BATCH, NULL, ABI_DIM_TOTAL_SEQ, NULL};
  graph_outputs(b, io, 3, logit_syms, kv_syms);
}

/* Packed (abi §8.2): logits [N, V], or [B, V] with prune_lm_head; present pages alias the past. */
void qwen35_packed_outputs(builder *b, graph_io *io) {
  static const char *const token_syms[] = {ABI_DIM_TOKENS, NULL};
  static const char *const pruned_syms[] = {ABI_DIM_BATCH, NULL};
  static const char *const row_syms[] = {ABI_DIM_LOGIT_ROWS, NULL};
  static const char *const page_syms[] = {ABI_DIM_BLOCKS, NULL, NULL, NULL};
  graph_outputs(b, io, 2,
                b->prune_lm_head ? pruned_syms
                : b->logit_rows  ? row_syms
                                 : token_syms,
                page_syms);
  /* C > 0 (abi §8.2): each linear layer's conv value [B, C, conv_dim] (io dtype) and recurrent
   * capsule [B, C*(Hv + Hk*Dk + Hv*Dv)] (f32), layers ascending, after every other output */
  static const char *const su_syms[] = {ABI_DIM_BATCH, NULL, NULL};
  static const char *const tmpl[2] = {ABI_SU_CONV_VALUE, ABI_SU_RECURRENT_CAPSULE};
  char name[128];
  for (int i = 0; i < (int)b->c->n_layers && b->su_capacity > 0; i++) {
    if (b->c->layer_kind[i] != PH_LAYER_LINEAR_ATTENTION) continue;
    for (int k = 0; k < 2; k++) {
      abi_layer_name(name, sizeof name, tmpl[k], i);
      graph_rename_value(b->g, io->su[i][k], name);
      graph_mark_output(b->g, io->su[i][k], NULL);
      graph_name_dims(b->g, io->su[i][k], k ? 2 : 3, su_syms);
    }
  }
}

void qwen35_hidden_output(builder *b, int hidden, const char *name) {
  static const char *const syms[] = {ABI_DIM_TOKENS, NULL};
  if (b->io != PH_DTYPE_F32) {
    snprintf(b->scope, sizeof b->scope, "/model/%s", name);
    hidden = cast_to(b, "Cast", hidden, ONNX_FLOAT);
  }
  graph_rename_value(b->g, hidden, name);
  graph_mark_output(b->g, hidden, NULL);
  graph_name_dims(b->g, hidden, 2, syms);
}
