/* paged_session — the packed paged graph bound to its hybrid cache. See paged_session.h.
 * N tokens, B sequences, P pages of K tokens.
 */
#include "runtime/paged_session.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/abi_names.h"
#include "graph/prepare.h"
#include "io/onnx.h"
#include "kernels/state_replay.h"
#include "models/model.h"
#include "models/package.h"
#include "models/registry.h"
#include "tensor/dtype.h"

typedef struct layer_bind {
  paged_layer_kind kind;
  int in0, in1, out0, out1; /* executor indices: key/value or conv/recurrent; LATENT: key only
                               (in1, out1 -1) */
  int su_conv, su_capsule;  /* FIXED with compact state updates: the outputs, else -1 */
} layer_bind;

struct paged_session {
  graph *g;
  executor *e;
  paged_session_params p;
  int bf16;              /* 1: some MatMulWT runs the bf16 dot (paged_session_precision) */
  int n_quant;           /* MatMulNBits nodes of the graph as built (graph_quant_summary) */
  ph_quant_params quant; /* the first one's parameters */
  hybrid_cache *cache;   /* pages, page buffers and slots (src/cache/hybrid_cache.h) */
  int n_layers;
  layer_bind layers[HF_MAX_LAYERS];
  int in_ids, in_pos, in_table, in_cu, in_past, in_meta, in_slots, out_logits; /* -1: unbound
                                                                      optional input */
  int pos_planes;            /* 3: position_ids [3, N]; 1: [N] */
  int in_capture, in_active; /* compact state updates: -1 when the graph has none */
  int out_hidden;            /* hidden_states output (MTP drafting), -1 when absent */
  int in_lrows;              /* logit_rows input (model_options.logit_rows), -1 when absent */
  int64_t *lrows;            /* [max_tokens] the step's logit rows */
  int64_t *lrow0;            /* [max_batch] sequence b's first logits row */
  int64_t *lj0;              /* [max_batch] the token index within b of that row */
  int32_t capacity;          /* the graph's state_update_capacity (0: none) */
  int64_t n_lrows;           /* rows of the last step's logit_rows */
  int64_t capsule_width;     /* C * (Hv + Hk * Dk + Hv * Dv) */
  int32_t *capture;          /* [max_batch] the step's capture counts; capture[max_batch]: active */
  uint8_t *spec;             /* [max_batch] 1: speculative row */
  uint8_t *committed;        /* [max_batch] paged_session_commit done for row b */
  int32_t *commit_seq;       /* [max_batch] paged_session_commit_all's replaying sequences */
  int pruned; /* logits [B, V] (the first dim is named batch_size) instead of [N, V] */
  int64_t block_size, vocab, max_context;
  /* packed step inputs, sized at creation (a step allocates nothing) */
  int64_t *ids, *pos;                /* [max_tokens], [3 * max_tokens] */
  int32_t *slot_map;                 /* [max_tokens] slot_mapping: flat page slot per token */
  int32_t *cu, *past, *table, *meta; /* [max_batch+1], [max_batch], [max_batch * max_blocks], [3] */
  int32_t max_blocks;                /* per sequence: pages of max_context tokens */
  const block_table **tables;        /* [max_batch] */
  int32_t *slots;                    /* [max_batch] */
  int64_t last_B, last_N;
  paged_step_stats stats;
  int64_t bytes; /* pages + slots */
};

paged_session_params paged_session_params_default(void) {
  paged_session_params p = {.n_blocks = 257, .max_slots = 8, .max_batch = 8, .max_tokens = 2048};
  return p;
}

#define SET_NAME(dst, src) snprintf((dst), PAGED_NAME, "%s", (src))

void paged_binding_for_config(const hf_config *c, paged_binding *out) {
  memset(out, 0, sizeof *out);
  /* DeepSeek's packed graph (PagedAttention LATENT): slot_mapping instead of position_ids and
   * attention_metadata, one latent page cache per layer */
  const int latent = c->family == FAMILY_DEEPSEEK;
  SET_NAME(out->input_ids, ABI_INPUT_IDS);
  SET_NAME(out->position_ids, latent ? "" : ABI_POSITION_IDS);
  SET_NAME(out->block_table, ABI_BLOCK_TABLE);
  SET_NAME(out->cu_seqlens, ABI_CU_SEQLENS);
  SET_NAME(out->past_seqlens, ABI_PAST_SEQLENS);
  SET_NAME(out->metadata, latent ? "" : ABI_ATTN_METADATA);
  SET_NAME(out->slot_mapping, latent ? ABI_SLOT_MAPPING : "");
  SET_NAME(out->logits, ABI_LOGITS);
  SET_NAME(out->past_key_fmt, ABI_PAST_KEY);
  SET_NAME(out->present_key_fmt, ABI_PRESENT_KEY);
  if (!latent) {
    SET_NAME(out->past_value_fmt, ABI_PAST_VALUE);
    SET_NAME(out->past_conv_fmt, ABI_PAST_CONV);
    SET_NAME(out->past_recurrent_fmt, ABI_PAST_RECURRENT);
    SET_NAME(out->present_value_fmt, ABI_PRESENT_VALUE);
    SET_NAME(out->present_conv_fmt, ABI_PRESENT_CONV);
    SET_NAME(out->present_recurrent_fmt, ABI_PRESENT_RECURRENT);
    SET_NAME(out->capture_count, ABI_SU_CAPTURE_COUNT);
    SET_NAME(out->update_active, ABI_SU_ACTIVE);
    SET_NAME(out->update_conv_fmt, ABI_SU_CONV_VALUE);
    SET_NAME(out->update_capsule_fmt, ABI_SU_RECURRENT_CAPSULE);
  }
  out->n_layers = (int)c->n_layers;
  for (int i = 0; i < out->n_layers; i++)
    out->kind[i] = c->layer_kind[i] == PH_LAYER_MLA              ? PAGED_LAYER_LATENT
                   : c->layer_kind[i] == PH_LAYER_FULL_ATTENTION ? PAGED_LAYER_KV
                                                                 : PAGED_LAYER_FIXED;
}

ph_status paged_binding_from_genai(const genai_config *gc, paged_binding *out, diag *d) {
  memset(out, 0, sizeof *out);
  RETURN_ERROR_IF(!gc->paged, d, PH_ERR_CONFIG_INVALID,
                  "genai_config.json describes the dense layout (no engine.dynamic_batching)");
  RETURN_ERROR_IF(!gc->has_decoder, d, PH_ERR_CONFIG_MISSING_FIELD,
                  "genai_config.json: model.decoder is missing (it names the graph and its "
                  "sizes)");
  RETURN_ERROR_IF(gc->num_hidden_layers < 1 || gc->num_hidden_layers > HF_MAX_LAYERS, d,
                  PH_ERR_CONFIG_INVALID, "genai_config.json: num_hidden_layers %lld",
                  (long long)gc->num_hidden_layers);
  const struct {
    char *dst;
    const char *src, *key;
  } names[] = {
      {out->input_ids, gc->input_ids, "inputs.input_ids"},
      {out->position_ids, gc->position_ids, NULL}, /* optional: a LATENT graph has none */
      {out->block_table, gc->block_table, "inputs.block_table"},
      {out->cu_seqlens, gc->cumulative_sequence_lengths, "inputs.cumulative_sequence_lengths"},
      {out->past_seqlens, gc->past_sequence_lengths, "inputs.past_sequence_lengths"},
      {out->metadata, gc->attention_metadata, NULL}, /* optional (abi.md §1.2 input 16) */
      {out->slot_mapping, gc->slot_mapping, NULL},   /* optional (input 10); LATENT binds it */
      {out->logits, gc->logits, "outputs.logits"},
      {out->past_key_fmt, gc->past_key_names, "inputs.past_key_names"},
      {out->past_value_fmt, gc->past_value_names, NULL}, /* absent: LATENT, checked below */
      {out->present_key_fmt, gc->present_key_names, "outputs.present_key_names"},
      {out->present_value_fmt, gc->present_value_names, NULL},
      {out->past_conv_fmt, gc->past_conv_names, NULL},
      {out->past_recurrent_fmt, gc->past_recurrent_names, NULL},
      {out->present_conv_fmt, gc->present_conv_names, NULL},
      {out->present_recurrent_fmt, gc->present_recurrent_names, NULL},
      /* compact state updates: named when the package has them (capacity > 0) */
      {out->capture_count, gc->state_update_capture_count, NULL},
      {out->update_active, gc->state_update_active, NULL},
      {out->update_conv_fmt, gc->state_update_conv_value_names, NULL},
      {out->update_capsule_fmt, gc->state_update_recurrent_capsule_names, NULL},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    RETURN_ERROR_IF(names[i].key && !names[i].src[0], d, PH_ERR_CONFIG_INVALID,
                    "genai_config.json: model.decoder.%s is missing", names[i].key);
    snprintf(names[i].dst, PAGED_NAME, "%s", names[i].src);
  }
  /* paged_kv layers hold K and V pages when the config names value templates, the latent key
   * pages alone (LATENT) when it names none; LATENT writes through slot_mapping */
  RETURN_ERROR_IF(
      !out->past_value_fmt[0] != !out->present_value_fmt[0], d, PH_ERR_CONFIG_INCONSISTENT,
      "genai_config.json: model.decoder.%s is named but %s is not; paged_kv layers "
      "bind value pages through both (K and V) or neither (LATENT)",
      out->past_value_fmt[0] ? "inputs.past_value_names" : "outputs.present_value_names",
      out->past_value_fmt[0] ? "outputs.present_value_names" : "inputs.past_value_names");
  const paged_layer_kind pkv = out->past_value_fmt[0] ? PAGED_LAYER_KV : PAGED_LAYER_LATENT;
  out->n_layers = (int)gc->num_hidden_layers;
  int conv[HF_MAX_LAYERS] = {0}, rec[HF_MAX_LAYERS] = {0};
  if (gc->n_state_groups == 0) /* GenAI's legacy contract: every layer holds paged K/V */
    for (int i = 0; i < out->n_layers; i++) out->kind[i] = pkv;
  for (int g = 0; g < gc->n_state_groups; g++) {
    const genai_state_group *sg = &gc->state_groups[g];
    for (int k = 0; k < sg->n_layer_ids; k++) {
      const int32_t l = sg->layer_ids[k];
      RETURN_ERROR_IF(l < 0 || l >= out->n_layers, d, PH_ERR_CONFIG_INVALID,
                      "genai_config.json: state_groups[%d] names layer %d", g, l);
      if (sg->kind == GENAI_STATE_PAGED_KV) {
        RETURN_ERROR_IF(out->kind[l] != PAGED_LAYER_NONE || conv[l] || rec[l], d,
                        PH_ERR_CONFIG_INVALID,
                        "genai_config.json: layer %d is in a paged_kv group and another group", l);
        out->kind[l] = pkv;
      } else {
        RETURN_ERROR_IF(out->kind[l] == pkv, d, PH_ERR_CONFIG_INVALID,
                        "genai_config.json: layer %d is in a paged_kv group and a fixed group", l);
        (sg->kind == GENAI_STATE_FIXED_CONV ? conv : rec)[l] = 1;
        out->kind[l] = PAGED_LAYER_FIXED;
      }
    }
  }
  for (int l = 0; l < out->n_layers; l++) {
    RETURN_ERROR_IF(out->kind[l] == PAGED_LAYER_LATENT && !out->slot_mapping[0], d,
                    PH_ERR_CONFIG_INCONSISTENT,
                    "genai_config.json: layer %d is paged_kv with no value pages "
                    "(past_value_names absent: LATENT) but inputs.slot_mapping is absent; a "
                    "LATENT package writes its latent pages through slot_mapping",
                    l);
    RETURN_ERROR_IF(conv[l] != rec[l], d, PH_ERR_UNSUPPORTED,
                    "genai_config.json: layer %d has a %s state but no %s state; this runtime "
                    "binds conv and recurrent state together (GatedDeltaNet layers)",
                    l, conv[l] ? "fixed_conv" : "fixed_recurrent",
                    conv[l] ? "fixed_recurrent" : "fixed_conv");
    RETURN_ERROR_IF(conv[l] && (!out->past_conv_fmt[0] || !out->past_recurrent_fmt[0] ||
                                !out->present_conv_fmt[0] || !out->present_recurrent_fmt[0]),
                    d, PH_ERR_CONFIG_INVALID,
                    "genai_config.json: fixed state groups need the conv and recurrent name "
                    "templates");
  }
  return PH_OK;
}

/* ---- binding ------------------------------------------------------------------------------- */

static int find_input(const graph *g, const char *name, tinfo *t) {
  for (int i = 0; i < g->n_inputs; i++)
    if (strcmp(g->values[g->inputs[i]].name, name) == 0) {
      if (t) *t = g->values[g->inputs[i]].type;
      return i;
    }
  return -1;
}

static ph_status need_input(paged_session *s, const char *name, int *idx, diag *d) {
  *idx = exec_input_index(s->e, name);
  RETURN_ERROR_IF(*idx < 0, d, PH_ERR_INVALID_ARGUMENT, "the graph has no input \"%s\"", name);
  return PH_OK;
}

/* An optional input: bound when named and the graph has it, else *idx = -1. */
static void optional_input(paged_session *s, const char *name, int *idx) {
  *idx = name[0] ? exec_input_index(s->e, name) : -1;
}

static ph_status need_output(paged_session *s, const char *name, int *idx, diag *d) {
  *idx = exec_output_index(s->e, name);
  RETURN_ERROR_IF(*idx < 0, d, PH_ERR_INVALID_ARGUMENT, "the graph has no output \"%s\"", name);
  return PH_OK;
}

static void fmt_name(char *dst, size_t n, const char *fmt, int layer) {
  const char *at = strstr(fmt, "%d");
  if (!at) {
    snprintf(dst, n, "%s", fmt);
    return;
  }
  snprintf(dst, n, "%.*s%d%s", (int)(at - fmt), fmt, layer, at + 2);
}

/* Static dims [from, from+k) of a bound graph input, each known and >= 1. */
static ph_status static_dims(const graph *g, const char *name, int rank, int from, int64_t *dims,
                             ph_dtype *dt, diag *d) {
  tinfo t;
  RETURN_ERROR_IF(find_input(g, name, &t) < 0, d, PH_ERR_INVALID_ARGUMENT,
                  "the graph has no input \"%s\"", name);
  RETURN_ERROR_IF(t.rank != rank, d, PH_ERR_INVALID_ARGUMENT, "graph input %s has rank %d, not %d",
                  name, t.rank, rank);
  for (int k = from; k < rank; k++)
    RETURN_ERROR_IF(t.dims[k] < 1, d, PH_ERR_INVALID_ARGUMENT,
                    "graph input %s: dim %d must be a fixed size (the page or state geometry)",
                    name, k);
  memcpy(dims, t.dims, (size_t)rank * sizeof *dims);
  *dt = t.dtype;
  return PH_OK;
}

/* Linear layer i's compact state-update outputs (abi.md §8.2), when the graph has the capture
 * input: conv_value [B, C, conv_dim] and recurrent_capsule f32 [B, C * (Hv + Hk * Dk + Hv * Dv)]
 * with rd the recurrent state's dims [B, Hv, Dv, Dk]; every layer must agree on C. */
static ph_status bind_updates(paged_session *s, const paged_binding *b, int i, int64_t conv_dim,
                              const int64_t *rd, diag *d) {
  if (s->in_capture < 0) return PH_OK;
  layer_bind *l = &s->layers[i];
  char name[PAGED_NAME + 16];
  fmt_name(name, sizeof name, b->update_conv_fmt, i);
  FORWARD_IF_ERROR(need_output(s, name, &l->su_conv, d));
  const gvalue *cv = &s->g->values[s->g->outputs[l->su_conv]];
  RETURN_ERROR_IF(cv->type.rank != 3 || cv->type.dims[1] < 1 || cv->type.dims[1] > 8 ||
                      cv->type.dims[2] != conv_dim,
                  d, PH_ERR_INVALID_ARGUMENT, "graph output %s must be [batch, C (1..8), %lld]",
                  name, (long long)conv_dim);
  const int32_t C = (int32_t)cv->type.dims[1];
  RETURN_ERROR_IF(s->capacity && C != s->capacity, d, PH_ERR_INVALID_ARGUMENT,
                  "graph output %s: capacity %d, other layers %d", name, (int)C, (int)s->capacity);
  s->capacity = C;
  fmt_name(name, sizeof name, b->update_capsule_fmt, i);
  FORWARD_IF_ERROR(need_output(s, name, &l->su_capsule, d));
  const gvalue *rv = &s->g->values[s->g->outputs[l->su_capsule]];
  const int64_t Hv = rd[1], Dv = rd[2], Dk = rd[3], w = rv->type.dims[1];
  /* the width names Hk (GenAI checks it the same way, abi.md §2.5) */
  const int64_t per = C ? w / C - Hv - Hv * Dv : -1;
  RETURN_ERROR_IF(rv->type.rank != 2 || rv->type.dtype != PH_DTYPE_F32 || w % C != 0 || per < Dk ||
                      per % Dk != 0,
                  d, PH_ERR_INVALID_ARGUMENT,
                  "graph output %s must be f32 [batch, C * (Hv + Hk * Dk + Hv * Dv)] with C %d, "
                  "Hv %lld, Dv %lld, Dk %lld",
                  name, (int)C, (long long)Hv, (long long)Dv, (long long)Dk);
  s->capsule_width = w;
  return PH_OK;
}

static ph_status bind_layers(paged_session *s, const paged_binding *b, diag *d) {
  int32_t full[HF_MAX_LAYERS], lin[HF_MAX_LAYERS], n_full = 0, n_lin = 0;
  int64_t kd[4] = {0}, cd[3] = {0}, rd[4] = {0};
  ph_dtype kv_dt = PH_DTYPE_INVALID, conv_dt = PH_DTYPE_INVALID;
  char name[PAGED_NAME + 16];
  int n_latent = 0, n_kv = 0;
  s->n_layers = b->n_layers;
  for (int i = 0; i < b->n_layers; i++) {
    layer_bind *l = &s->layers[i];
    l->kind = b->kind[i];
    l->in0 = l->in1 = l->out0 = l->out1 = l->su_conv = l->su_capsule = -1;
    if (l->kind == PAGED_LAYER_NONE) continue;
    const int latent = l->kind == PAGED_LAYER_LATENT;
    const int kv = l->kind == PAGED_LAYER_KV || latent;
    n_latent += latent;
    n_kv += l->kind == PAGED_LAYER_KV;
    RETURN_ERROR_IF(n_latent && n_kv, d, PH_ERR_UNSUPPORTED,
                    "paged session: layer %d mixes LATENT (key-only) and key/value page layers "
                    "in one graph; the page pool has one geometry",
                    i);
    const char *f[4] = {kv ? b->past_key_fmt : b->past_conv_fmt,
                        kv ? b->past_value_fmt : b->past_recurrent_fmt,
                        kv ? b->present_key_fmt : b->present_conv_fmt,
                        kv ? b->present_value_fmt : b->present_recurrent_fmt};
    int *idx[4] = {&l->in0, &l->in1, &l->out0, &l->out1};
    for (int k = 0; k < 4; k++) {
      if (latent && (k == 1 || k == 3)) continue; /* no value cache */
      fmt_name(name, sizeof name, f[k], i);
      FORWARD_IF_ERROR(k < 2 ? need_input(s, name, idx[k], d) : need_output(s, name, idx[k], d));
    }
    int64_t dims[4];
    ph_dtype dt;
    if (kv) {
      fmt_name(name, sizeof name, b->past_key_fmt, i);
      FORWARD_IF_ERROR(static_dims(s->g, name, 4, 1, dims, &dt, d));
      RETURN_ERROR_IF(n_full && (memcmp(dims + 1, kd + 1, 3 * sizeof *dims) || dt != kv_dt), d,
                      PH_ERR_INVALID_ARGUMENT, "graph input %s: pages differ between layers", name);
      memcpy(kd, dims, sizeof kd);
      kv_dt = dt;
      full[n_full++] = i;
    } else {
      fmt_name(name, sizeof name, b->past_conv_fmt, i);
      FORWARD_IF_ERROR(static_dims(s->g, name, 3, 1, dims, &dt, d));
      memcpy(cd, dims, sizeof cd);
      conv_dt = dt;
      fmt_name(name, sizeof name, b->past_recurrent_fmt, i);
      FORWARD_IF_ERROR(static_dims(s->g, name, 4, 1, dims, &dt, d));
      RETURN_ERROR_IF(dt != PH_DTYPE_F32, d, PH_ERR_INVALID_ARGUMENT,
                      "graph input %s is %s; the recurrent state is f32", name, ph_dtype_name(dt));
      memcpy(rd, dims, sizeof rd);
      lin[n_lin++] = i;
      FORWARD_IF_ERROR(bind_updates(s, b, i, cd[1], dims, d));
    }
  }
  s->block_size = n_full ? kd[1] : 16;
  /* the cache this graph needs; n_blocks 0 sizes the pages from the memory budget */
  hybrid_cache_params cp = {.kv = {.n_full = n_full,
                                   .full_layers = full,
                                   .n_kv_heads = n_full ? (int32_t)kd[2] : 1,
                                   .head_size = n_full ? (int32_t)kd[3] : 1,
                                   .block_size = (int32_t)s->block_size,
                                   .n_blocks = s->p.n_blocks,
                                   .dtype = n_full ? kv_dt : PH_DTYPE_F32,
                                   .key_only = n_latent > 0},
                            .state = {.n_linear = n_lin,
                                      .linear_layers = lin,
                                      .conv_dim = (int32_t)(n_lin ? cd[1] : 1),
                                      .conv_kernel = (int32_t)(n_lin ? cd[2] + 1 : 2),
                                      .n_v_heads = (int32_t)(n_lin ? rd[1] : 1),
                                      .head_v = (int32_t)(n_lin ? rd[2] : 1),
                                      .head_k = (int32_t)(n_lin ? rd[3] : 1),
                                      .io_dtype = n_lin ? conv_dt : PH_DTYPE_F32,
                                      .max_slots = s->p.max_slots},
                            .memory_bytes = s->p.memory_bytes,
                            .state_banks = s->p.state_banks};
  if (n_lin == 0) s->capacity = 0; /* nothing to capture: a verify needs no state update */
  FORWARD_IF_ERROR(hybrid_cache_create(&cp, &s->cache, d));
  s->p.n_blocks = hybrid_cache_n_blocks(s->cache);
  return PH_OK;
}

static ph_status bind_io(paged_session *s, const paged_binding *b, diag *d) {
  FORWARD_IF_ERROR(need_input(s, b->input_ids, &s->in_ids, d));
  FORWARD_IF_ERROR(need_input(s, b->block_table, &s->in_table, d));
  FORWARD_IF_ERROR(need_input(s, b->cu_seqlens, &s->in_cu, d));
  FORWARD_IF_ERROR(need_input(s, b->past_seqlens, &s->in_past, d));
  FORWARD_IF_ERROR(need_output(s, b->logits, &s->out_logits, d));
  /* optional: a LATENT graph has slot_mapping and neither position_ids nor attention_metadata */
  optional_input(s, b->position_ids, &s->in_pos);
  optional_input(s, b->metadata, &s->in_meta);
  optional_input(s, b->slot_mapping, &s->in_slots);
  optional_input(s, b->capture_count, &s->in_capture);
  s->out_hidden = exec_output_index(s->e, ABI_HIDDEN_STATES);
  s->in_lrows = exec_input_index(s->e, ABI_LOGIT_ROWS);
  optional_input(s, b->update_active, &s->in_active);
  tinfo t;
  s->pos_planes = 0;
  if (s->in_pos >= 0) {
    find_input(s->g, b->position_ids, &t);
    RETURN_ERROR_IF(!(t.rank == 1 || (t.rank == 2 && t.dims[0] == 3)), d, PH_ERR_INVALID_ARGUMENT,
                    "graph input %s must be [N] or [3, N]", b->position_ids);
    s->pos_planes = t.rank == 2 ? 3 : 1;
  }
  if (s->in_slots >= 0) {
    find_input(s->g, b->slot_mapping, &t);
    RETURN_ERROR_IF(t.rank != 1 || t.dtype != PH_DTYPE_I32, d, PH_ERR_INVALID_ARGUMENT,
                    "graph input %s must be int32 [N]", b->slot_mapping);
  }
  const gvalue *lv = &s->g->values[s->g->outputs[s->out_logits]];
  RETURN_ERROR_IF(lv->type.rank != 2 || lv->type.dims[1] < 1, d, PH_ERR_INVALID_ARGUMENT,
                  "graph output %s must be [rows, vocab] with a fixed vocab", b->logits);
  s->vocab = lv->type.dims[1];
  s->pruned = lv->sym[0] >= 0 && strcmp(s->g->symbols[lv->sym[0]], ABI_DIM_BATCH) == 0;
  /* the rotary context: rows of the cos cache when the graph has one */
  s->max_context = INT32_MAX;
  int cos = graph_find_value(s->g, ABI_COS_CACHE);
  if (cos >= 0 && s->g->values[cos].type.rank == 2) s->max_context = s->g->values[cos].type.dims[0];
  return PH_OK;
}

ph_status paged_session_create(graph *g, const paged_binding *bind, const paged_session_params *p,
                               paged_session **out, diag *d) {
  *out = NULL;
  paged_session *s = calloc(1, sizeof *s);
  if (!s) {
    graph_free(g);
    return diag_set(d, PH_ERR_NO_MEMORY, "paged session: out of memory");
  }
  s->g = g;
  s->p = p ? *p : paged_session_params_default();
  ph_status st = PH_OK;
  if ((s->p.n_blocks < 2 && !(s->p.n_blocks == 0 && s->p.memory_bytes > 0)) || s->p.max_slots < 1 ||
      s->p.max_batch < 1 || s->p.max_batch > s->p.max_slots || s->p.max_tokens < 1) {
    st = diag_set(d, PH_ERR_INVALID_ARGUMENT,
                  "paged session: n_blocks %d (>= 2), max_slots %d (>= 1), max_batch %d (1.."
                  "max_slots), max_tokens %lld (>= 1)",
                  s->p.n_blocks, s->p.max_slots, s->p.max_batch, (long long)s->p.max_tokens);
    goto fail;
  }
  if (!bind || bind->n_layers < 0 || bind->n_layers > HF_MAX_LAYERS) {
    st = diag_set(d, PH_ERR_INVALID_ARGUMENT, "paged session: no layer binding");
    goto fail;
  }
  s->n_quant = graph_quant_summary(g, &s->quant);
  {
    const prepare_options po = {s->p.map_weights ? WEIGHTS_MAP : WEIGHTS_COPY, s->p.weights_store,
                                s->p.matmul_bf16, s->p.n_threads > 0 ? s->p.n_threads : 0};
    if ((st = graph_prepare_cpu_opts(g, &po, &s->bf16, d)) != PH_OK) goto fail;
  }
  if ((st = exec_create(g, s->p.n_threads, &s->e, d)) != PH_OK) goto fail;
  if ((st = bind_io(s, bind, d)) != PH_OK) goto fail;
  if ((st = bind_layers(s, bind, d)) != PH_OK) goto fail;
  s->bytes = hybrid_cache_bytes(s->cache);
  int64_t mb = s->max_context < INT32_MAX ? (s->max_context + s->block_size - 1) / s->block_size
                                          : s->p.n_blocks - 1;
  if (mb > s->p.n_blocks - 1) mb = s->p.n_blocks - 1;
  s->max_blocks = (int32_t)(mb > 0 ? mb : 1);
  const size_t T = (size_t)s->p.max_tokens, B = (size_t)s->p.max_batch;
  s->ids = malloc(T * sizeof *s->ids);
  s->pos = malloc(3 * T * sizeof *s->pos);
  s->slot_map = malloc(T * sizeof *s->slot_map);
  s->cu = malloc((B + 1) * sizeof *s->cu);
  s->past = malloc(B * sizeof *s->past);
  s->table = malloc(B * (size_t)s->max_blocks * sizeof *s->table);
  s->meta = malloc(3 * sizeof *s->meta);
  s->tables = malloc(B * sizeof *s->tables);
  s->slots = malloc(B * sizeof *s->slots);
  s->capture = calloc(B + 1, sizeof *s->capture);
  s->spec = calloc(B, sizeof *s->spec);
  s->committed = calloc(B, sizeof *s->committed);
  s->commit_seq = malloc(B * sizeof *s->commit_seq);
  s->lrows = malloc(T * sizeof *s->lrows);
  s->lrow0 = malloc(B * sizeof *s->lrow0);
  s->lj0 = malloc(B * sizeof *s->lj0);
  if (!s->ids || !s->pos || !s->slot_map || !s->cu || !s->past || !s->table || !s->meta ||
      !s->tables || !s->slots || !s->capture || !s->spec || !s->committed || !s->commit_seq ||
      !s->lrows || !s->lrow0 || !s->lj0) {
    st = diag_set(d, PH_ERR_NO_MEMORY, "paged session: out of memory");
    goto fail;
  }
  *out = s;
  return PH_OK;
fail:
  paged_session_free(s);
  return st;
}

void paged_session_free(paged_session *s) {
  if (!s) return;
  exec_free(s->e);
  graph_free(s->g);
  hybrid_cache_free(s->cache);
  free(s->ids);
  free(s->pos);
  free(s->slot_map);
  free(s->cu);
  free(s->past);
  free(s->table);
  free(s->meta);
  free(s->tables);
  free(s->slots);
  free(s->capture);
  free(s->lrows);
  free(s->lrow0);
  free(s->lj0);
  free(s->spec);
  free(s->committed);
  free(s->commit_seq);
  free(s);
}

/* ---- a step -------------------------------------------------------------------------------- */

static ph_status check_step(const paged_session *s, const paged_seq *seqs, int32_t B, int64_t *N,
                            diag *d) {
  RETURN_ERROR_IF(B < 1 || B > s->p.max_batch, d, PH_ERR_INVALID_ARGUMENT,
                  "a step runs 1..%d sequences, got %d", s->p.max_batch, B);
  int64_t total = 0;
  for (int32_t b = 0; b < B; b++) {
    const paged_seq *q = &seqs[b];
    RETURN_ERROR_IF(q->n < 1 || !q->tokens || q->past < 0, d, PH_ERR_INVALID_ARGUMENT,
                    "sequence %d: %lld new tokens after %lld (need >= 1 after >= 0)", b,
                    (long long)q->n, (long long)q->past);
    if (hybrid_cache_has_state(s->cache)) { /* without fixed state sequences hold no slot */
      RETURN_ERROR_IF(!hybrid_cache_slot_in_use(s->cache, q->slot), d, PH_ERR_INVALID_ARGUMENT,
                      "sequence %d: state slot %d is not allocated", b, q->slot);
      for (int32_t c = 0; c < b; c++)
        RETURN_ERROR_IF(seqs[c].slot == q->slot, d, PH_ERR_INVALID_ARGUMENT,
                        "sequences %d and %d share state slot %d", c, b, q->slot);
    }
    RETURN_ERROR_IF(q->past + q->n > s->max_context, d, PH_ERR_LIMIT,
                    "sequence %d: %lld tokens exceed the model's context of %lld", b,
                    (long long)(q->past + q->n), (long long)s->max_context);
    const int32_t need = block_table_blocks_for(q->past + q->n, (int32_t)s->block_size);
    RETURN_ERROR_IF(!q->blocks || q->blocks->n_blocks < need, d, PH_ERR_INVALID_ARGUMENT,
                    "sequence %d: its block table holds %d pages, %d needed for %lld tokens", b,
                    q->blocks ? q->blocks->n_blocks : 0, need, (long long)(q->past + q->n));
    const int has_state = hybrid_cache_has_state(s->cache);
    RETURN_ERROR_IF(q->capture < 0 || (q->capture > 0 && has_state &&
                                       (q->capture > s->capacity || s->p.state_banks != 2)),
                    d, PH_ERR_INVALID_ARGUMENT,
                    "sequence %d: capture %d needs a graph with state_update_capacity >= it (this "
                    "one: %d) and a double-banked state pool (state_banks %d)",
                    b, (int)q->capture, (int)s->capacity, s->p.state_banks);
    for (int64_t j = 0; j < q->n; j++)
      RETURN_ERROR_IF(q->tokens[j] < 0 || q->tokens[j] >= s->vocab, d, PH_ERR_INVALID_ARGUMENT,
                      "sequence %d: token %lld at %lld is outside the vocabulary [0, %lld)", b,
                      (long long)q->tokens[j], (long long)j, (long long)s->vocab);
    total += q->n;
  }
  RETURN_ERROR_IF(total > s->p.max_tokens, d, PH_ERR_LIMIT,
                  "a step of %lld tokens exceeds max_tokens %lld", (long long)total,
                  (long long)s->p.max_tokens);
  *N = total;
  return PH_OK;
}

/* Packs the step's inputs and binds them. */
static ph_status bind_step(paged_session *s, const paged_seq *seqs, int32_t B, int64_t N, diag *d) {
  int32_t max_q = 0, max_kv = 0, max_blocks = 1;
  s->cu[0] = 0;
  for (int32_t b = 0; b < B; b++) {
    const paged_seq *q = &seqs[b];
    const int64_t at = s->cu[b];
    memcpy(s->ids + at, q->tokens, (size_t)q->n * sizeof *s->ids);
    const int64_t K = s->block_size;
    for (int64_t j = 0; j < q->n; j++) {
      const int64_t p = q->past + j;
      for (int r = 0; r < s->pos_planes; r++) s->pos[r * N + at + j] = p;
      /* the flat page slot PagedAttention writes token p to (abi.md §1.2 input 10) */
      s->slot_map[at + j] = (int32_t)(q->blocks->ids[p / K] * K + p % K);
    }
    s->cu[b + 1] = (int32_t)(at + q->n);
    s->past[b] = (int32_t)q->past;
    s->tables[b] = q->blocks;
    if (q->n > max_q) max_q = (int32_t)q->n;
    if (q->past + q->n > max_kv) max_kv = (int32_t)(q->past + q->n);
    const int32_t need = block_table_blocks_for(q->past + q->n, (int32_t)s->block_size);
    if (need > max_blocks) max_blocks = need;
  }
  /* only the pages covering each sequence's tokens are passed: a table may hold more (reserved
   * ahead), which the kernel never reads */
  for (int32_t b = 0; b < B; b++) {
    int32_t *row = s->table + (size_t)b * (size_t)max_blocks;
    const int32_t need = block_table_blocks_for(seqs[b].past + seqs[b].n, (int32_t)s->block_size);
    for (int32_t j = 0; j < max_blocks; j++)
      row[j] = j < need ? seqs[b].blocks->ids[j] : BLOCK_POOL_NULL_ID;
  }
  s->meta[0] = max_q;
  s->meta[1] = max_kv;
  s->meta[2] = 0;
  tensor t;
  t = tensor_make(PH_DTYPE_I64, 1, (int64_t[]){N}, s->ids);
  FORWARD_IF_ERROR(exec_bind_input(s->e, s->in_ids, &t, d));
  if (s->in_pos >= 0) {
    t = s->pos_planes == 3 ? tensor_make(PH_DTYPE_I64, 2, (int64_t[]){3, N}, s->pos)
                           : tensor_make(PH_DTYPE_I64, 1, (int64_t[]){N}, s->pos);
    FORWARD_IF_ERROR(exec_bind_input(s->e, s->in_pos, &t, d));
  }
  if (s->in_slots >= 0) {
    t = tensor_make(PH_DTYPE_I32, 1, (int64_t[]){N}, s->slot_map);
    FORWARD_IF_ERROR(exec_bind_input(s->e, s->in_slots, &t, d));
  }
  t = tensor_make(PH_DTYPE_I32, 2, (int64_t[]){B, max_blocks}, s->table);
  FORWARD_IF_ERROR(exec_bind_input(s->e, s->in_table, &t, d));
  t = tensor_make(PH_DTYPE_I32, 1, (int64_t[]){B + 1}, s->cu);
  FORWARD_IF_ERROR(exec_bind_input(s->e, s->in_cu, &t, d));
  t = tensor_make(PH_DTYPE_I32, 1, (int64_t[]){B}, s->past);
  FORWARD_IF_ERROR(exec_bind_input(s->e, s->in_past, &t, d));
  if (s->in_meta >= 0) {
    t = tensor_make(PH_DTYPE_I32, 1, (int64_t[]){3}, s->meta);
    FORWARD_IF_ERROR(exec_bind_input(s->e, s->in_meta, &t, d));
  }
  if (s->in_lrows >= 0) { /* each sequence's last row; every row of a verify (capture > 0) */
    int64_t R = 0;
    for (int32_t b = 0; b < B; b++) {
      const int64_t j0 = seqs[b].capture > 0 ? 0 : seqs[b].n - 1;
      s->lrow0[b] = R;
      s->lj0[b] = j0;
      for (int64_t j = j0; j < seqs[b].n; j++) s->lrows[R++] = s->cu[b] + j;
    }
    s->n_lrows = R;
    t = tensor_make(PH_DTYPE_I64, 1, (int64_t[]){R}, s->lrows);
    FORWARD_IF_ERROR(exec_bind_input(s->e, s->in_lrows, &t, d));
  }
  if (s->in_capture >= 0) { /* capture[B]: state_update_active, 1 when any row captures */
    int32_t active = 0;
    for (int32_t b = 0; b < B; b++) active |= s->capture[b] > 0;
    s->capture[s->p.max_batch] = active;
    t = tensor_make(PH_DTYPE_I32, 1, (int64_t[]){B}, s->capture);
    FORWARD_IF_ERROR(exec_bind_input(s->e, s->in_capture, &t, d));
    if (s->in_active >= 0) {
      t = tensor_make(PH_DTYPE_I32, 1, (int64_t[]){1}, s->capture + s->p.max_batch);
      FORWARD_IF_ERROR(exec_bind_input(s->e, s->in_active, &t, d));
    }
  }
  for (int i = 0; i < s->n_layers; i++) {
    const layer_bind *l = &s->layers[i];
    if (l->kind == PAGED_LAYER_NONE) continue;
    tensor t0, t1;
    memset(&t1, 0, sizeof t1);         /* LATENT layers have no second view */
    if (l->kind == PAGED_LAYER_LATENT) /* the latent pages alone */
      FORWARD_IF_ERROR(hybrid_cache_kv_views(s->cache, i, &t0, NULL, d));
    else if (l->kind == PAGED_LAYER_KV)
      FORWARD_IF_ERROR(hybrid_cache_kv_views(s->cache, i, &t0, &t1, d));
    else
      FORWARD_IF_ERROR(hybrid_cache_state_views(s->cache, i, &t0, &t1, d));
    /* the present outputs are the past buffers, updated in place; a speculative step's fixed
     * state goes to the inactive bank instead (hybrid_cache_bind_spec) */
    tensor o0 = t0, o1 = t1;
    if (l->kind == PAGED_LAYER_FIXED)
      FORWARD_IF_ERROR(hybrid_cache_state_views_out(s->cache, i, &o0, &o1, d));
    FORWARD_IF_ERROR(exec_bind_input(s->e, l->in0, &t0, d));
    FORWARD_IF_ERROR(exec_bind_output(s->e, l->out0, &o0, d));
    if (l->kind == PAGED_LAYER_LATENT) continue;
    FORWARD_IF_ERROR(exec_bind_input(s->e, l->in1, &t1, d));
    FORWARD_IF_ERROR(exec_bind_output(s->e, l->out1, &o1, d));
  }
  return PH_OK;
}

ph_status paged_session_run(paged_session *s, const paged_seq *seqs, int32_t B, diag *d) {
  int64_t N = 0;
  FORWARD_IF_ERROR(check_step(s, seqs, B, &N, d));
  int any_spec = 0;
  for (int32_t b = 0; b < B; b++) {
    s->slots[b] = seqs[b].slot;
    /* without fixed state a verify is an ordinary step: nothing to capture or publish */
    s->spec[b] = seqs[b].capture > 0 && s->capacity > 0;
    s->capture[b] = s->spec[b] ? seqs[b].capture : 0;
    s->committed[b] = 0;
    any_spec |= s->spec[b];
  }
  s->last_B = 0; /* no results until this run succeeds */
  const uint64_t moved0 = hybrid_cache_bytes_moved(s->cache);
  FORWARD_IF_ERROR(hybrid_cache_bind_spec(s->cache, s->slots, any_spec ? s->spec : NULL, B, d));
  const int zero_copy = hybrid_cache_bound_is_slice(s->cache);
  ph_status st = bind_step(s, seqs, B, N, d);
  if (st == PH_OK) st = exec_run(s->e, d);
  diag ud;
  ph_status su = hybrid_cache_unbind(s->cache, &ud); /* scatters back even after a failure */
  if (st == PH_OK && su != PH_OK) {
    diag_copy(d, &ud);
    st = su;
  }
  if (st != PH_OK) return st;
  int64_t rows = 0;
  paged_session_logits(s, &rows);
  const int64_t want = s->pruned ? B : s->in_lrows >= 0 ? s->n_lrows : N;
  RETURN_ERROR_IF(rows != want, d, PH_ERR_INVALID_ARGUMENT,
                  "graph output logits has %lld rows; expected %lld", (long long)rows,
                  (long long)want);
  s->last_B = B;
  s->last_N = N;
  s->stats = (paged_step_stats){.n_tokens = N,
                                .n_seqs = B,
                                .state_bytes_moved = hybrid_cache_bytes_moved(s->cache) - moved0,
                                .state_zero_copy = zero_copy};
  return PH_OK;
}

/* ---- results and accessors ------------------------------------------------------------------ */

const float *paged_session_logits(const paged_session *s, int64_t *rows) {
  const tensor *t = exec_output(s->e, s->out_logits);
  if (!t || !t->data || t->dtype != PH_DTYPE_F32) {
    if (rows) *rows = 0;
    return NULL;
  }
  if (rows) *rows = t->dims[0];
  return t->data;
}

int paged_session_prunes_lm_head(const paged_session *s) { return s->pruned; }
int paged_session_all_rows(const paged_session *s) { return !s->pruned && s->in_lrows < 0; }

int32_t paged_session_state_capacity(const paged_session *s) { return s->capacity; }

const float *paged_session_hidden(const paged_session *s, int32_t b, int64_t j, int64_t *H) {
  const tensor *t = s->out_hidden >= 0 ? exec_output(s->e, s->out_hidden) : NULL;
  if (!t || !t->data || t->dtype != PH_DTYPE_F32 || t->rank != 2 || b < 0 || b >= s->last_B ||
      j < 0 || j >= s->cu[b + 1] - s->cu[b])
    return NULL;
  if (H) *H = t->dims[1];
  return (const float *)t->data + ((int64_t)s->cu[b] + j) * t->dims[1];
}

/* The replay of linear layer i of sequence b of the last run: its first `kept` captured updates
 * from the published rows into the inactive bank (kernels/state_replay.h). */
static ph_status replay_layer(paged_session *s, int32_t b, int i, int64_t kept, diag *d) {
  const layer_bind *l = &s->layers[i];
  const int32_t slot = s->slots[b];
  const state_pool *sp = hybrid_cache_states(s->cache);
  tensor pc, pr, qc, qr;
  FORWARD_IF_ERROR(state_pool_slot_conv(sp, i, slot, &pc, d));
  FORWARD_IF_ERROR(state_pool_slot_recurrent(sp, i, slot, &pr, d));
  FORWARD_IF_ERROR(hybrid_cache_state_views_staged(s->cache, i, slot, &qc, &qr, d));
  const tensor *cv = exec_output(s->e, l->su_conv), *cap = exec_output(s->e, l->su_capsule);
  RETURN_ERROR_IF(!cv || !cap || !cv->data || !cap->data, d, PH_ERR_INTERNAL,
                  "paged_session_commit: layer %d has no state-update outputs", i);
  const int64_t conv_dim = pc.dims[0], width = pc.dims[1];
  const int64_t Hv = pr.dims[0], Dv = pr.dims[1], Dk = pr.dims[2], C = s->capacity;
  const int64_t Hk = (s->capsule_width / C - Hv - Hv * Dv) / Dk;
  const size_t es = dtype_size(pc.dtype);
  state_replay_conv(pc.data, qc.data, (const char *)cv->data + (size_t)(b * C * conv_dim) * es,
                    conv_dim, width, kept, pc.dtype);
  state_replay_recurrent(pr.data, qr.data, (const float *)cap->data + b * s->capsule_width, C, Hv,
                         Hk, Dk, Dv, kept);
  return PH_OK;
}

/* Checks sequence b's commit of `kept` tokens. *replay = 1 when it needs one. */
static ph_status check_commit(const paged_session *s, int32_t b, int64_t kept, int *replay,
                              diag *d) {
  RETURN_ERROR_IF(b < 0 || b >= s->last_B, d, PH_ERR_INVALID_ARGUMENT,
                  "paged_session_commit: sequence %d of a run of %lld", (int)b,
                  (long long)s->last_B);
  const int64_t n = (int64_t)s->cu[b + 1] - s->cu[b];
  RETURN_ERROR_IF(kept < 1 || kept > n || s->committed[b], d, PH_ERR_INVALID_ARGUMENT,
                  "paged_session_commit: sequence %d keeps %lld of %lld tokens%s", (int)b,
                  (long long)kept, (long long)n, s->committed[b] ? " (committed already)" : "");
  *replay = s->spec[b] && kept < n; /* else: in place, or the op's final state as is */
  RETURN_ERROR_IF(*replay && kept > s->capture[b], d, PH_ERR_INVALID_ARGUMENT,
                  "paged_session_commit: sequence %d keeps %lld tokens, only %d were captured",
                  (int)b, (long long)kept, (int)s->capture[b]);
  return PH_OK;
}

ph_status paged_session_commit(paged_session *s, int32_t b, int64_t kept, diag *d) {
  int replay = 0;
  FORWARD_IF_ERROR(check_commit(s, b, kept, &replay, d));
  s->committed[b] = 1;
  if (!s->spec[b]) return PH_OK; /* updated in place */
  for (int i = 0; replay && i < s->n_layers; i++)
    if (s->layers[i].kind == PAGED_LAYER_FIXED) FORWARD_IF_ERROR(replay_layer(s, b, i, kept, d));
  return hybrid_cache_publish(s->cache, s->slots[b], d);
}

/* The commit's replays over the pool: task t is (sequence seq[t / n_fixed], layer
 * fixed[t % n_fixed]). */
typedef struct commit_job {
  paged_session *s;
  const int64_t *kept;
  const int32_t *seq;   /* the sequences that replay */
  const int32_t *fixed; /* the linear layers */
  int32_t n_fixed;
  _Atomic int failed;
  diag first; /* the first failure's message (written once, by the task that set failed) */
} commit_job;

static void commit_task(void *ctx, size_t t, int thread) {
  (void)thread;
  commit_job *j = ctx;
  const int32_t b = j->seq[t / (size_t)j->n_fixed], i = j->fixed[t % (size_t)j->n_fixed];
  diag local;
  if (replay_layer(j->s, b, i, j->kept[b], &local) != PH_OK) {
    int expected = 0;
    if (atomic_compare_exchange_strong(&j->failed, &expected, 1)) j->first = local;
  }
}

ph_status paged_session_commit_all(paged_session *s, const int64_t *kept, diag *d) {
  const int32_t B = (int32_t)s->last_B;
  int32_t n_seq = 0, n_fixed = 0, fixed[HF_MAX_LAYERS];
  for (int32_t b = 0; b < B; b++) { /* every count checked before anything changes */
    int replay = 0;
    FORWARD_IF_ERROR(check_commit(s, b, kept[b], &replay, d));
    if (replay) s->commit_seq[n_seq++] = b;
  }
  for (int i = 0; i < s->n_layers; i++)
    if (s->layers[i].kind == PAGED_LAYER_FIXED) fixed[n_fixed++] = i;
  if (n_seq > 0 && n_fixed > 0) {
    commit_job j = {.s = s, .kept = kept, .seq = s->commit_seq, .fixed = fixed, .n_fixed = n_fixed};
    atomic_init(&j.failed, 0);
    pool_run(exec_pool(s->e), (size_t)n_seq * (size_t)n_fixed, commit_task, &j);
    if (atomic_load(&j.failed)) {
      diag_copy(d, &j.first);
      return j.first.status;
    }
  }
  for (int32_t b = 0; b < B; b++) {
    s->committed[b] = 1;
    if (s->spec[b]) FORWARD_IF_ERROR(hybrid_cache_publish(s->cache, s->slots[b], d));
  }
  return PH_OK;
}

const float *paged_session_last_logits(const paged_session *s, int32_t b) {
  int64_t rows = 0;
  const float *l = paged_session_logits(s, &rows);
  if (!l || b < 0 || b >= s->last_B) return NULL;
  const int64_t n = (int64_t)s->cu[b + 1] - s->cu[b];
  const int64_t r = s->pruned          ? b
                    : s->in_lrows >= 0 ? s->lrow0[b] + n - 1 - s->lj0[b]
                                       : s->cu[b] + n - 1;
  return r < rows ? l + r * s->vocab : NULL;
}

const float *paged_session_token_logits(const paged_session *s, int32_t b, int64_t j) {
  int64_t rows = 0;
  const float *l = paged_session_logits(s, &rows);
  if (!l || b < 0 || b >= s->last_B || j < 0 || j >= s->cu[b + 1] - s->cu[b]) return NULL;
  if (s->pruned) return j == s->cu[b + 1] - s->cu[b] - 1 ? l + (int64_t)b * s->vocab : NULL;
  if (s->in_lrows >= 0) return j >= s->lj0[b] ? l + (s->lrow0[b] + j - s->lj0[b]) * s->vocab : NULL;
  return l + ((int64_t)s->cu[b] + j) * s->vocab;
}

ph_precision paged_session_precision(const paged_session *s) {
  return s->bf16 ? PH_PRECISION_BF16 : PH_PRECISION_F32;
}

int64_t paged_session_vocab(const paged_session *s) { return s->vocab; }
int paged_session_quant(const paged_session *s, ph_quant_params *out) {
  if (out) *out = s->quant;
  return s->n_quant;
}

int graph_quant_summary(const graph *g, ph_quant_params *out) {
  int n = 0;
  ph_quant_params q;
  memset(&q, 0, sizeof q);
  for (int i = 0; i < g->n_nodes; i++) {
    const gnode *nd = &g->nodes[i];
    if (nd->dead || strcmp(nd->op_type, "MatMulNBits") != 0 ||
        strcmp(nd->domain, "com.microsoft") != 0)
      continue;
    if (n++ == 0) {
      q.bits = (int32_t)node_attr_int(nd, "bits", 4); /* the schema's defaults */
      q.block_size = (int32_t)node_attr_int(nd, "block_size", 0);
      q.accuracy_level = (int32_t)node_attr_int(nd, "accuracy_level", 0);
      q.asymmetric = nd->n_inputs > 3 && nd->inputs[3] >= 0;
    }
  }
  if (out) *out = q;
  return n;
}

int64_t paged_session_cache_bytes(const paged_session *s) { return s->bytes; }
int64_t paged_session_block_size(const paged_session *s) { return s->block_size; }
int64_t paged_session_max_context(const paged_session *s) { return s->max_context; }
hybrid_cache *paged_session_cache(paged_session *s) { return s->cache; }
executor *paged_session_executor(paged_session *s) { return s->e; }
const paged_session_params *paged_session_params_of(const paged_session *s) { return &s->p; }
paged_step_stats paged_session_last_stats(const paged_session *s) { return s->stats; }

ph_status paged_session_create_model(const ph_model *m, const model_options *o,
                                     const paged_session_params *p, paged_session **out, diag *d) {
  *out = NULL;
  const hf_config *c = model_config(m);
  const model_weights *w = model_weights_of(m);
  RETURN_ERROR_IF(!c || !w, d, PH_ERR_INVALID_ARGUMENT, "the model was opened without weights");
  model_options opt = o ? *o : model_options_default();
  opt.paged = 1;
  graph *g = NULL;
  FORWARD_IF_ERROR(model_build_graph(c, w, &opt, &g, d));
  ph_status st = graph_note_checkpoint(g, m, d);
  if (st != PH_OK) {
    graph_free(g);
    return st;
  }
  paged_binding bind;
  paged_binding_for_config(c, &bind);
  paged_session_params sp = p ? *p : paged_session_params_default();
  if (!sp.weights_store) sp.weights_store = model_weight_store(m); /* shared with its MTP head */
  return paged_session_create(g, &bind, &sp, out, d);
}

ph_status graph_note_checkpoint(graph *g, const ph_model *m, diag *d) {
  const st_set *set = model_tensors(m);
  for (size_t i = 0; i < st_file_count(set); i++)
    FORWARD_IF_ERROR(graph_note_file_mapping(g, st_file_map(set, i), d));
  return PH_OK;
}

ph_status paged_session_create_package(const char *dir, const genai_config *gc,
                                       const paged_session_params *p, paged_session **out,
                                       diag *d) {
  *out = NULL;
  paged_binding bind;
  graph *g = NULL;
  /* the graph gc names, checked against gc (models/package.h), then bound by it */
  FORWARD_IF_ERROR(package_read_graph(dir, gc, PACKAGE_FINALIZE | PACKAGE_CHECK, &g, NULL, d));
  ph_status s = paged_binding_from_genai(gc, &bind, d);
  if (s != PH_OK) {
    graph_free(g);
    return s;
  }
  return paged_session_create(g, &bind, p, out, d);
}
