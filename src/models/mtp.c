/* mtp — the MTP head's packed graph. See mtp.h; the math and its sources are docs/mtp.md. */
#include "models/mtp.h"

#include <stdio.h>
#include <string.h>

#include "graph/abi_names.h"
#include "models/builder.h"
#include "models/qwen35.h"
#include "models/qwen35_builder.h"
#include "tensor/dtype.h"

/* The MTP head's inputs, in the order mtp.h lists them: the packed target graph's names (one
 * full-attention layer's pages, layer 0) plus mtp_hidden_in after input_ids. */
static void mtp_inputs(builder *b, int *ids, int *hidden_in, int past[2]) {
  const hf_config *c = b->c;
  static const char *const ns[] = {ABI_DIM_TOKENS};
  static const char *const nh[] = {ABI_DIM_TOKENS, NULL};
  static const char *const ps[] = {NULL, ABI_DIM_TOKENS};
  static const char *const pg[] = {ABI_DIM_BLOCKS, NULL, NULL, NULL};
  graph *g = b->g;
  *ids = graph_add_input(g, ABI_INPUT_IDS, PH_DTYPE_I64, 1, (int64_t[]){-1}, ns);
  *hidden_in =
      graph_add_input(g, ABI_MTP_HIDDEN_IN, PH_DTYPE_F32, 2, (int64_t[]){-1, c->hidden_size}, nh);
  b->positions = c->rope.has_mrope
                     ? graph_add_input(g, ABI_POSITION_IDS, PH_DTYPE_I64, 2, (int64_t[]){3, -1}, ps)
                     : graph_add_input(g, ABI_POSITION_IDS, PH_DTYPE_I64, 1, (int64_t[]){-1}, ns);
  packed_batch_inputs(b);
  b->metadata = graph_add_input(g, ABI_ATTN_METADATA, PH_DTYPE_I32, 1, (int64_t[]){3}, NULL);
  const int64_t kv[4] = {-1, b->block_size, c->n_kv_heads, c->head_dim};
  char name[64];
  for (int k = 0; k < 2; k++)
    past[k] = graph_add_input(g, abi_past_name(name, sizeof name, abi_layer_slot(1, k), 0), b->io,
                              4, kv, pg);
}

static void mtp_outputs(builder *b, int logits, const int present[2]) {
  static const char *const token_syms[] = {ABI_DIM_TOKENS, NULL};
  static const char *const page_syms[] = {ABI_DIM_BLOCKS, NULL, NULL, NULL};
  graph *g = b->g;
  graph_rename_value(g, logits, ABI_LOGITS);
  graph_mark_output(g, logits, NULL);
  graph_name_dims(g, logits, 2, token_syms);
  char name[64];
  for (int k = 0; k < 2; k++) {
    graph_rename_value(g, present[k], abi_present_name(name, sizeof name, abi_layer_slot(1, k), 0));
    graph_mark_output(g, present[k], NULL);
    graph_name_dims(g, present[k], 4, page_syms);
  }
}

static ph_status check_mtp(const hf_config *c, const model_weights *w, const model_options *opt,
                           diag *d) {
  RETURN_ERROR_IF(c->family != FAMILY_QWEN35 && c->family != FAMILY_QWEN3_NEXT, d,
                  PH_ERR_UNSUPPORTED, "MTP head: %s is not a Qwen3.5 / Qwen3-Next model",
                  c->model_type);
  for (int i = 0; i < (int)c->n_layers; i++)
    RETURN_ERROR_IF(c->layer_is_moe[i], d, PH_ERR_UNSUPPORTED,
                    "MTP head of a MoE model (%s): its layer's MLP is a MoE block, which the MTP "
                    "drafter does not support (dense-MLP MTP only)",
                    c->model_type);
  RETURN_ERROR_IF(c->mtp_num_hidden_layers == 0 || w->n_mtp_layers == 0, d, PH_ERR_UNSUPPORTED,
                  "the checkpoint has no MTP head (mtp_num_hidden_layers %lld, mtp.* tensors %s)",
                  (long long)c->mtp_num_hidden_layers, w->n_mtp_layers ? "bound" : "absent");
  RETURN_ERROR_IF(w->n_mtp_layers != 1, d, PH_ERR_UNSUPPORTED,
                  "MTP head with %d layers: only one MTP layer is supported", w->n_mtp_layers);
  RETURN_ERROR_IF(w->placeholder, d, PH_ERR_UNSUPPORTED, "MTP head of placeholder weights");
  RETURN_ERROR_IF(c->attention_bias, d, PH_ERR_UNSUPPORTED, "attention_bias=true is not supported");
  RETURN_ERROR_IF(opt && (opt->prune_lm_head || opt->output_hidden), d, PH_ERR_INVALID_ARGUMENT,
                  "MTP graph: %s does not apply (every row's logits and hidden state are outputs)",
                  opt->prune_lm_head ? "prune_lm_head" : "output_hidden");
  return PH_OK;
}

ph_status mtp_build(const hf_config *c, const model_weights *w, const model_options *opt,
                    graph **out, diag *d) {
  *out = NULL;
  FORWARD_IF_ERROR(check_mtp(c, w, opt, d));
  /* the MTP layer as "layer 0" of a weights view: the builder's lw() and lm_head() then read
   * mtp.layers.0.* and mtp.norm, the embedding and the LM head stay the target's */
  model_weights view = *w;
  view.n_layers = w->n_mtp_layers;
  view.layer = w->mtp_layer;
  view.expert = NULL;
  view.global[W_FINAL_NORM] = w->mtp_global[W_FINAL_NORM];
  model_options o = opt ? *opt : model_options_default();
  o.paged = 1;
  graph *g = NULL;
  FORWARD_IF_ERROR(graph_create(&g, d));
  builder b;
  ph_status s = builder_init(&b, g, c, &view, &o, qwen35_default_context(c), d);
  if (s != PH_OK) {
    graph_free(g);
    return s;
  }
  int ids = -1, hidden_in = -1, past[2] = {-1, -1}, present[2] = {-1, -1};
  mtp_inputs(&b, &ids, &hidden_in, past);
  rotary_caches(&b, NULL, 1.0, PH_DTYPE_F32);
  const float eps = (float)c->rms_norm_eps;
  int e = embed_tokens(&b, ids);
  snprintf(b.scope, sizeof b.scope, "/mtp");
  int h = b.io != PH_DTYPE_F32 ? cast_to(&b, "hidden_in/Cast", hidden_in, dtype_to_onnx(b.io))
                               : hidden_in;
  /* both halves normed by their own (1+w) gains, the embedding half first (vLLM's
   * Qwen3_5MultiTokenPredictor.forward: cat([embeds, hidden])) */
  int en = rms_norm(&b, "pre_fc_norm_embedding", e,
                    io_const(&b, w->mtp_global[W_MTP_NORM_EMBED], ".1p", F32_ONE_PLUS), eps);
  int hn = rms_norm(&b, "pre_fc_norm_hidden", h,
                    io_const(&b, w->mtp_global[W_MTP_NORM_HIDDEN], ".1p", F32_ONE_PLUS), eps);
  gattr ax = attr_int("axis", -1);
  int cat = node1(&b, "Concat", "", "Concat", 2, (int[]){en, hn}, 1, &ax);
  int residual = linear(&b, "fc", cat, wref_of(w->mtp_global[W_MTP_FC]));
  int branch =
      qwen35_decoder_layer(&b, 0, PH_LAYER_FULL_ATTENTION, 0, -1, &residual, past, present,
                           (int[2]){-1, -1});
  int logits = lm_head(&b, branch, residual, F32_ONE_PLUS);
  mtp_outputs(&b, logits, present);
  qwen35_hidden_output(&b, b.hidden, ABI_MTP_HIDDEN_OUT);
  return builder_finish(&b, out, d);
}
