/* genai_config_write — genai_config.json for the dense decoder and the packed paged layout, and
 * the token ids it carries from the checkpoint. See genai_config.h; key names follow ONNX Runtime
 * GenAI (../shared/spec/abi.md §8.5 and GenAI's config reference). The reader lives in
 * genai_config_read.c.
 *
 * The file is built with jansson in one fixed key order (JSON_PRESERVE_ORDER) so the same struct
 * always gives the same bytes. The dense order is the one packages were first written in and
 * stays byte for byte; the paged order is §8.5's (model.type, then the decoder). Search options
 * are GenAI's documented defaults except max_length (the exported context) and
 * past_present_share_buffer (false for the dense layout, whose KV grows by concatenation; true
 * for the paged one, whose pages and fixed state are updated in place).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "graph/abi_names.h"
#include "io/genai_config.h"
#include "io/json_util.h"
#include "io/onnx.h"

#define GENAI_FILE "genai_config.json"

#define SET_NAME(field, value) snprintf((field), sizeof(field), "%s", (value))

/* The I/O names are GenAI's runtime defaults, which are the ABI's (graph/abi_names.h, the names
 * models/qwen35.c gives the graph; model_export checks every one against the graph). */
genai_config genai_config_dense(const hf_config *c, int64_t context_length) {
  genai_config g;
  memset(&g, 0, sizeof g);
  SET_NAME(g.model_type, c->text_model_type[0] ? c->text_model_type : c->model_type);
  g.has_decoder = 1;
  SET_NAME(g.filename, ONNX_MODEL_FILE);
  g.head_size = c->head_dim;
  g.hidden_size = c->hidden_size;
  g.num_attention_heads = c->n_heads;
  g.num_hidden_layers = c->n_layers;
  g.num_key_value_heads = c->n_kv_heads;
  g.vocab_size = c->vocab_size;
  g.context_length = context_length;
  g.bos_token_id = g.eos_token_id = g.pad_token_id = -1;
  SET_NAME(g.input_ids, ABI_INPUT_IDS);
  SET_NAME(g.attention_mask, ABI_ATTENTION_MASK);
  SET_NAME(g.position_ids, ABI_POSITION_IDS);
  SET_NAME(g.logits, ABI_LOGITS);
  if (c->geom.n_full > 0) {
    SET_NAME(g.past_key_names, ABI_PAST_KEY);
    SET_NAME(g.past_value_names, ABI_PAST_VALUE);
    SET_NAME(g.present_key_names, ABI_PRESENT_KEY);
    SET_NAME(g.present_value_names, ABI_PRESENT_VALUE);
  }
  if (c->geom.n_linear > 0) {
    SET_NAME(g.past_conv_names, ABI_PAST_CONV);
    SET_NAME(g.past_recurrent_names, ABI_PAST_RECURRENT);
    SET_NAME(g.present_conv_names, ABI_PRESENT_CONV);
    SET_NAME(g.present_recurrent_names, ABI_PRESENT_RECURRENT);
  }
  g.past_present_share_buffer = 0;
  return g;
}

const char *genai_state_kind_name(genai_state_kind k) {
  switch (k) {
  case GENAI_STATE_PAGED_KV:
    return "paged_kv";
  case GENAI_STATE_FIXED_CONV:
    return "fixed_conv";
  case GENAI_STATE_FIXED_RECURRENT:
    return "fixed_recurrent";
  }
  return "unknown";
}

static void add_layer(genai_state_group *grp, int64_t layer) {
  grp->layer_ids[grp->n_layer_ids++] = (int32_t)layer;
}

genai_config genai_config_paged(const hf_config *c, int64_t context_length, int64_t block_size,
                                int64_t max_batch_size, double gpu_utilization_factor,
                                int64_t num_blocks, int64_t max_scheduled_tokens) {
  genai_config g = genai_config_dense(c, context_length);
  g.paged = 1;
  g.attention_mask[0] = '\0'; /* the packed layout has none (abi.md §8.1) */
  SET_NAME(g.block_table, ABI_BLOCK_TABLE);
  SET_NAME(g.cumulative_sequence_lengths, ABI_CU_SEQLENS);
  SET_NAME(g.past_sequence_lengths, ABI_PAST_SEQLENS);
  SET_NAME(g.attention_metadata, ABI_ATTN_METADATA);
  g.past_present_share_buffer = 1;
  g.cuda_graph_disabled = 1;
  /* groups in the order paged_kv, fixed_conv, fixed_recurrent; empty ones are dropped */
  genai_state_group groups[3];
  memset(groups, 0, sizeof groups);
  groups[0].kind = GENAI_STATE_PAGED_KV;
  groups[1].kind = GENAI_STATE_FIXED_CONV;
  groups[2].kind = GENAI_STATE_FIXED_RECURRENT;
  int64_t n_layers = c->n_layers < GENAI_MAX_LAYERS ? c->n_layers : GENAI_MAX_LAYERS;
  for (int64_t i = 0; i < n_layers; i++) {
    if (c->layer_kind[i] == PH_LAYER_LINEAR_ATTENTION) {
      add_layer(&groups[1], i);
      add_layer(&groups[2], i);
    } else { /* full attention (and MLA): K/V in pages */
      add_layer(&groups[0], i);
    }
  }
  for (int k = 0; k < 3; k++)
    if (groups[k].n_layer_ids > 0) g.state_groups[g.n_state_groups++] = groups[k];
  if (c->geom.n_full > 0 && c->layer_kind[groups[0].layer_ids[0]] == PH_LAYER_MLA) {
    /* LATENT (docs/export.md "LATENT packages"): the page cache is the latent row [.., 1, l+r];
     * PagedAttention writes it through slot_mapping, positions come from the lengths */
    g.position_ids[0] = '\0';
    g.attention_metadata[0] = '\0';
    g.past_value_names[0] = g.present_value_names[0] = '\0';
    SET_NAME(g.slot_mapping, ABI_SLOT_MAPPING);
    g.num_key_value_heads = 1;
    g.head_size = c->mla.kv_lora_rank + c->mla.qk_rope_head_dim;
  }
  g.dynamic_batching.present = 1;
  g.dynamic_batching.block_size = block_size;
  g.dynamic_batching.max_batch_size = max_batch_size;
  /* one page budget: an explicit count, else a share of free GPU memory */
  g.dynamic_batching.gpu_utilization_factor = num_blocks > 0 ? 0 : gpu_utilization_factor;
  g.dynamic_batching.num_blocks = num_blocks;
  g.dynamic_batching.max_scheduled_tokens = max_scheduled_tokens;
  return g;
}

void genai_config_single_inputs(const genai_config *g, const char *out[GENAI_N_SINGLE_INPUTS]) {
  const char *const v[GENAI_N_SINGLE_INPUTS] = {g->input_ids,
                                                g->position_ids,
                                                g->attention_mask,
                                                g->block_table,
                                                g->cumulative_sequence_lengths,
                                                g->past_sequence_lengths,
                                                g->attention_metadata,
                                                g->slot_mapping,
                                                g->state_update_capture_count,
                                                g->state_update_active};
  memcpy(out, v, sizeof v);
}

void genai_config_set_state_updates(genai_config *g, int32_t capacity) {
  const int on = capacity > 0;
  g->state_update_capacity = on ? capacity : 0;
  SET_NAME(g->state_update_capture_count, on ? ABI_SU_CAPTURE_COUNT : "");
  SET_NAME(g->state_update_active, on ? ABI_SU_ACTIVE : "");
  SET_NAME(g->state_update_conv_value_names, on ? ABI_SU_CONV_VALUE : "");
  SET_NAME(g->state_update_recurrent_capsule_names, on ? ABI_SU_RECURRENT_CAPSULE : "");
}

/* ---- token ids from the checkpoint -------------------------------------------------------- */

static ph_status bad_id(const char *file, const char *key, diag *d) {
  return diag_set(d, PH_ERR_CONFIG_INVALID, "%s: %s must be a non-negative integer%s", file, key,
                  strcmp(key, "eos_token_id") == 0 ? " or an array of them" : "");
}

static ph_status take_id(const json_t *o, const char *key, const char *file, int64_t *out,
                         diag *d) {
  json_t *v = json_object_get(o, key);
  if (!v || json_is_null(v)) return PH_OK;
  if (!json_is_integer(v) || json_integer_value(v) < 0) return bad_id(file, key, d);
  *out = json_integer_value(v);
  return PH_OK;
}

static ph_status take_eos(const json_t *o, const char *file, genai_config *g, diag *d) {
  json_t *v = json_object_get(o, "eos_token_id");
  if (!v || json_is_null(v)) return PH_OK;
  int64_t ids[GENAI_MAX_EOS];
  int n = 0;
  if (json_is_integer(v) && json_integer_value(v) >= 0) {
    ids[n++] = json_integer_value(v);
  } else if (json_is_array(v)) {
    RETURN_ERROR_IF(json_array_size(v) > GENAI_MAX_EOS, d, PH_ERR_LIMIT,
                    "%s: eos_token_id lists %zu ids, at most %d are kept", file, json_array_size(v),
                    GENAI_MAX_EOS);
    for (size_t i = 0; i < json_array_size(v); i++) {
      json_t *e = json_array_get(v, i);
      if (!json_is_integer(e) || json_integer_value(e) < 0) return bad_id(file, "eos_token_id", d);
      ids[n++] = json_integer_value(e);
    }
    if (n == 0) return PH_OK; /* [] says nothing */
  } else {
    return bad_id(file, "eos_token_id", d);
  }
  memcpy(g->eos_token_ids, ids, (size_t)n * sizeof ids[0]);
  g->n_eos_token_ids = n;
  g->eos_token_id = ids[0];
  return PH_OK;
}

static ph_status take_ids(const json_t *o, const char *file, genai_config *g, diag *d) {
  if (!json_is_object(o)) return PH_OK;
  FORWARD_IF_ERROR(take_id(o, "bos_token_id", file, &g->bos_token_id, d));
  FORWARD_IF_ERROR(take_id(o, "pad_token_id", file, &g->pad_token_id, d));
  return take_eos(o, file, g, d);
}

/* Loads dir/name as a JSON object; *out stays NULL when the file does not exist. */
static ph_status load_optional(const char *dir, const char *name, json_t **out, diag *d) {
  *out = NULL;
  char path[4096];
  FORWARD_IF_ERROR(path_join(path, sizeof path, dir, name, d));
  if (!path_exists(path)) return PH_OK;
  char *text = NULL;
  size_t len = 0;
  FORWARD_IF_ERROR(file_read_all(path, HF_CONFIG_MAX_BYTES, &text, &len, d));
  json_error_t e;
  json_t *o = json_loadb(text, len, 0, &e);
  free(text);
  RETURN_ERROR_IF(!o, d, PH_ERR_JSON, "%s: line %d: %s", path, e.line, e.text);
  if (!json_is_object(o)) {
    json_decref(o);
    return diag_set(d, PH_ERR_JSON, "%s: not a JSON object", path);
  }
  *out = o;
  return PH_OK;
}

ph_status genai_config_token_ids(genai_config *g, const char *checkpoint_dir, diag *d) {
  json_t *cfg = NULL, *gen = NULL;
  FORWARD_IF_ERROR(load_optional(checkpoint_dir, "config.json", &cfg, d));
  ph_status s = take_ids(cfg, "config.json", g, d);
  if (s == PH_OK)
    s = take_ids(json_object_get(cfg, "text_config"), "config.json text_config", g, d);
  json_decref(cfg);
  if (s != PH_OK) return s;
  FORWARD_IF_ERROR(load_optional(checkpoint_dir, "generation_config.json", &gen, d));
  s = take_ids(gen, "generation_config.json", g, d);
  json_decref(gen);
  return s;
}

/* ---- writing ------------------------------------------------------------------------------ */

/* Sets key to a new value; a NULL value (jansson out of memory) is remembered in *ok. */
static void put(json_t *o, const char *key, json_t *v, int *ok) {
  if (!v || json_object_set_new(o, key, v) != 0) *ok = 0;
}

static void put_name(json_t *o, const char *key, const char *name, int *ok) {
  if (name[0]) put(o, key, json_string(name), ok);
}

/* [{"cuda": {"enable_cuda_graph": "0"}}] when CUDA graphs are off, else [] (no provider:
 * GenAI then runs the CPU EP, which is the only one that runs the dense layout's LinearAttention /
 * CausalConvWithState besides CUDA; users append their own). */
static json_t *provider_options_json(const genai_config *g, int *ok) {
  json_t *a = json_array();
  if (!a || !g->cuda_graph_disabled) return a;
  json_t *opt = json_object(), *cuda = json_object();
  put(cuda, "enable_cuda_graph", json_string("0"), ok); /* GenAI's provider options are strings */
  put(opt, "cuda", cuda, ok);
  if (!opt || json_array_append_new(a, opt) != 0) *ok = 0;
  return a;
}

static json_t *session_options_json(const genai_config *g, int *ok) {
  json_t *so = json_object();
  put(so, "log_id", json_string("onnxruntime-genai"), ok);
  put(so, "provider_options", provider_options_json(g, ok), ok);
  return so;
}

/* One order serves both layouts: the paged names are empty in a dense config, attention_mask
 * is empty in a paged one. */
static json_t *inputs_json(const genai_config *g, int *ok) {
  json_t *in = json_object();
  if (!in) return NULL;
  put_name(in, "input_ids", g->input_ids, ok);
  put_name(in, "attention_mask", g->attention_mask, ok);
  put_name(in, "position_ids", g->position_ids, ok);
  put_name(in, "block_table", g->block_table, ok);
  put_name(in, "cumulative_sequence_lengths", g->cumulative_sequence_lengths, ok);
  put_name(in, "past_sequence_lengths", g->past_sequence_lengths, ok);
  put_name(in, "attention_metadata", g->attention_metadata, ok);
  put_name(in, "slot_mapping", g->slot_mapping, ok);
  put_name(in, "past_key_names", g->past_key_names, ok);
  put_name(in, "past_value_names", g->past_value_names, ok);
  put_name(in, "past_conv_names", g->past_conv_names, ok);
  put_name(in, "past_recurrent_names", g->past_recurrent_names, ok);
  put_name(in, "state_update_capture_count", g->state_update_capture_count, ok);
  put_name(in, "state_update_active", g->state_update_active, ok);
  return in;
}

static json_t *outputs_json(const genai_config *g, int *ok) {
  json_t *out = json_object();
  if (!out) return NULL;
  put_name(out, "logits", g->logits, ok);
  put_name(out, "present_key_names", g->present_key_names, ok);
  put_name(out, "present_value_names", g->present_value_names, ok);
  put_name(out, "present_conv_names", g->present_conv_names, ok);
  put_name(out, "present_recurrent_names", g->present_recurrent_names, ok);
  put_name(out, "state_update_conv_value_names", g->state_update_conv_value_names, ok);
  put_name(out, "state_update_recurrent_capsule_names", g->state_update_recurrent_capsule_names,
           ok);
  return out;
}

/* [{"kind": ..., "layer_ids": [...]}, ...] in struct order. */
static json_t *state_groups_json(const genai_config *g, int *ok) {
  json_t *a = json_array();
  for (int i = 0; a && i < g->n_state_groups; i++) {
    const genai_state_group *grp = &g->state_groups[i];
    json_t *o = json_object(), *ids = json_array();
    for (int j = 0; ids && j < grp->n_layer_ids; j++)
      if (json_array_append_new(ids, json_integer(grp->layer_ids[j])) != 0) *ok = 0;
    put(o, "kind", json_string(genai_state_kind_name(grp->kind)), ok);
    put(o, "layer_ids", ids, ok);
    if (!o || json_array_append_new(a, o) != 0) *ok = 0;
  }
  if (!a) *ok = 0;
  return a;
}

static void put_sizes(json_t *dec, const genai_config *g, int *ok) {
  put(dec, "num_attention_heads", json_integer(g->num_attention_heads), ok);
  put(dec, "num_hidden_layers", json_integer(g->num_hidden_layers), ok);
  put(dec, "num_key_value_heads", json_integer(g->num_key_value_heads), ok);
}

static json_t *decoder_json(const genai_config *g, int *ok) {
  json_t *dec = json_object();
  if (!dec) {
    *ok = 0;
    return NULL;
  }
  if (g->paged) { /* abi.md §8.5's order */
    put(dec, "filename", json_string(g->filename), ok);
    put(dec, "session_options", session_options_json(g, ok), ok);
    put(dec, "head_size", json_integer(g->head_size), ok);
    put(dec, "hidden_size", json_integer(g->hidden_size), ok);
    put_sizes(dec, g, ok);
    put(dec, "inputs", inputs_json(g, ok), ok);
    put(dec, "outputs", outputs_json(g, ok), ok);
  } else { /* the order dense packages have always had */
    put(dec, "session_options", session_options_json(g, ok), ok);
    put(dec, "filename", json_string(g->filename), ok);
    put(dec, "head_size", json_integer(g->head_size), ok);
    put(dec, "hidden_size", json_integer(g->hidden_size), ok);
    put(dec, "inputs", inputs_json(g, ok), ok);
    put(dec, "outputs", outputs_json(g, ok), ok);
    put_sizes(dec, g, ok);
  }
  if (g->state_update_capacity > 0)
    put(dec, "state_update_capacity", json_integer(g->state_update_capacity), ok);
  if (g->n_state_groups > 0) put(dec, "state_groups", state_groups_json(g, ok), ok);
  return dec;
}

static json_t *eos_json(const genai_config *g) {
  if (g->n_eos_token_ids <= 1) return json_integer(g->eos_token_id);
  json_t *a = json_array();
  for (int i = 0; a && i < g->n_eos_token_ids; i++)
    if (json_array_append_new(a, json_integer(g->eos_token_ids[i])) != 0) {
      json_decref(a);
      return NULL;
    }
  return a;
}

static json_t *search_json(const genai_config *g, int *ok) {
  json_t *s = json_object();
  if (!s) {
    *ok = 0;
    return NULL;
  }
  put(s, "diversity_penalty", json_real(0.0), ok);
  put(s, "do_sample", json_false(), ok);
  put(s, "early_stopping", json_true(), ok);
  put(s, "length_penalty", json_real(1.0), ok);
  put(s, "max_length", json_integer(g->context_length), ok);
  put(s, "min_length", json_integer(0), ok);
  put(s, "no_repeat_ngram_size", json_integer(0), ok);
  put(s, "num_beams", json_integer(1), ok);
  put(s, "num_return_sequences", json_integer(1), ok);
  put(s, "past_present_share_buffer", json_boolean(g->past_present_share_buffer), ok);
  put(s, "repetition_penalty", json_real(1.0), ok);
  put(s, "temperature", json_real(1.0), ok);
  put(s, "top_k", json_integer(50), ok);
  put(s, "top_p", json_real(1.0), ok);
  return s;
}

/* engine.dynamic_batching: keys in alphabetical order; at most one of num_blocks (when > 0)
 * and gpu_utilization_factor (when > 0), num_blocks first. */
static json_t *engine_json(const genai_config *g, int *ok) {
  const genai_dynamic_batching *b = &g->dynamic_batching;
  json_t *e = json_object(), *db = json_object();
  put(db, "block_size", json_integer(b->block_size), ok);
  if (b->num_blocks <= 0 && b->gpu_utilization_factor > 0)
    put(db, "gpu_utilization_factor", json_real(b->gpu_utilization_factor), ok);
  put(db, "max_batch_size", json_integer(b->max_batch_size), ok);
  put(db, "max_scheduled_tokens", json_integer(b->max_scheduled_tokens), ok);
  if (b->num_blocks > 0) put(db, "num_blocks", json_integer(b->num_blocks), ok);
  put(e, "dynamic_batching", db, ok);
  return e;
}

/* jansson prints reals with 17 significant digits (0.6 as 0.59999999999999998). The fewest
 * digits that read back as the same double give "0.6" and still round-trip exactly; the other
 * reals we write (0.0, 1.0) print the same at any precision. */
static int real_precision(double v) {
  char buf[40];
  for (int p = 1; p < 17; p++) {
    snprintf(buf, sizeof buf, "%.*g", p, v);
    if (strtod(buf, NULL) == v) return p;
  }
  return 17;
}

/* What the reader would refuse, or what would not fit the arrays, is not written. */
static ph_status check_writable(const genai_config *g, diag *d) {
  double f = g->dynamic_batching.gpu_utilization_factor;
  RETURN_ERROR_IF(g->dynamic_batching.present && f > 1, d, PH_ERR_INVALID_ARGUMENT,
                  "genai_config_write: gpu_utilization_factor %g is outside (0, 1]", f);
  RETURN_ERROR_IF(g->n_state_groups < 0 || g->n_state_groups > GENAI_MAX_STATE_GROUPS, d,
                  PH_ERR_INVALID_ARGUMENT, "genai_config_write: %d state groups, at most %d",
                  g->n_state_groups, GENAI_MAX_STATE_GROUPS);
  for (int i = 0; i < g->n_state_groups; i++)
    RETURN_ERROR_IF(
        g->state_groups[i].n_layer_ids < 0 || g->state_groups[i].n_layer_ids > GENAI_MAX_LAYERS, d,
        PH_ERR_INVALID_ARGUMENT, "genai_config_write: state group %d has %d layer ids, at most %d",
        i, g->state_groups[i].n_layer_ids, GENAI_MAX_LAYERS);
  return PH_OK;
}

ph_status genai_config_write(const genai_config *g, const char *dir, diag *d) {
  RETURN_ERROR_IF(!g || !dir, d, PH_ERR_INVALID_ARGUMENT, "genai_config_write: NULL argument");
  FORWARD_IF_ERROR(check_writable(g, d));
  char path[4096];
  FORWARD_IF_ERROR(path_join(path, sizeof path, dir, GENAI_FILE, d));
  int ok = 1;
  json_t *root = json_object(), *model = json_object();
  if (!root || !model) {
    json_decref(root);
    json_decref(model);
    return diag_set(d, PH_ERR_NO_MEMORY, "out of memory building %s", path);
  }
  /* dense: alphabetical, as dense packages have always been written; paged: abi.md §8.5's
   * type and decoder first, the rest in the same order */
  if (g->paged) {
    put(model, "type", json_string(g->model_type), &ok);
    put(model, "decoder", decoder_json(g, &ok), &ok);
  }
  if (g->bos_token_id >= 0) put(model, "bos_token_id", json_integer(g->bos_token_id), &ok);
  put(model, "context_length", json_integer(g->context_length), &ok);
  if (!g->paged) put(model, "decoder", decoder_json(g, &ok), &ok);
  if (g->eos_token_id >= 0) put(model, "eos_token_id", eos_json(g), &ok);
  if (g->pad_token_id >= 0) put(model, "pad_token_id", json_integer(g->pad_token_id), &ok);
  if (!g->paged) put(model, "type", json_string(g->model_type), &ok);
  put(model, "vocab_size", json_integer(g->vocab_size), &ok);
  put(root, "model", model, &ok);
  put(root, "search", search_json(g, &ok), &ok);
  size_t flags = JSON_INDENT(2) | JSON_PRESERVE_ORDER;
  if (g->dynamic_batching.present) {
    put(root, "engine", engine_json(g, &ok), &ok);
    if (g->dynamic_batching.num_blocks <= 0 && g->dynamic_batching.gpu_utilization_factor > 0)
      flags |= JSON_REAL_PRECISION(real_precision(g->dynamic_batching.gpu_utilization_factor));
  }
  char *text = ok ? json_dumps(root, flags) : NULL;
  json_decref(root);
  return json_text_write(path, text, d);
}
