/* weights — checkpoint name tables and binding. See weights.h.
 *
 * The per-family rules below are the single source of tensor names and shapes: binding checks
 * a checkpoint against them and make-tiny writes checkpoints from them, so the two cannot drift.
 */
#include "models/weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/dtype.h"

static const char *const ROLE_TEMPLATES[W_ROLE_COUNT] = {
#define WEIGHT_ROLE_TMPL_(role, tmpl) tmpl,
    WEIGHT_ROLE_TABLE(WEIGHT_ROLE_TMPL_)
#undef WEIGHT_ROLE_TMPL_
};

static const char *const ROLE_NAMES[W_ROLE_COUNT] = {
#define WEIGHT_ROLE_NAME_(role, tmpl) #role,
    WEIGHT_ROLE_TABLE(WEIGHT_ROLE_NAME_)
#undef WEIGHT_ROLE_NAME_
};

const char *weight_role_name(weight_role role) {
  return (unsigned)role < W_ROLE_COUNT ? ROLE_NAMES[role] : "UNKNOWN";
}

int weight_role_quantizable(weight_role role) {
  switch (role) {
  case W_LM_HEAD:
  case W_LIN_QKV:
  case W_LIN_Z:
  case W_LIN_QKVZ:
  case W_LIN_OUT:
  case W_ATTN_Q:
  case W_ATTN_K:
  case W_ATTN_V:
  case W_ATTN_O:
  case W_MLA_Q:
  case W_MLA_Q_A:
  case W_MLA_Q_B:
  case W_MLA_KV_A:
  case W_MLA_KV_B:
  case W_MLA_O:
  case W_MLP_GATE:
  case W_MLP_UP:
  case W_MLP_DOWN:
  case W_MOE_GATE_UP_FUSED:
  case W_MOE_DOWN_FUSED:
  case W_EXPERT_GATE:
  case W_EXPERT_UP:
  case W_EXPERT_DOWN:
  case W_SHARED_GATE:
  case W_SHARED_UP:
  case W_SHARED_DOWN:
  case W_DS_SHARED_GATE:
  case W_DS_SHARED_UP:
  case W_DS_SHARED_DOWN:
  case W_MTP_FC:
    return 1;
  default:
    return 0;
  }
}

const char *weight_layout_prefix(weight_layout layout) {
  return layout == LAYOUT_VLM ? "model.language_model." : "model.";
}

weight_layout weights_default_layout(const hf_config *c) {
  return c->is_vlm ? LAYOUT_VLM : LAYOUT_CAUSAL_LM;
}

/* ---- building the expected list ---------------------------------------------------------- */

typedef struct expect_list {
  expected_tensor *items;
  size_t n, cap;
  weight_layout layout;
  int mtp; /* names under "mtp." (weights_expected_mtp) */
  ph_status status;
} expect_list;

static void push(expect_list *l, weight_role role, int layer, int expert, shape s,
                 weight_init init) {
  if (l->status != PH_OK) return;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 256;
    expected_tensor *p = realloc(l->items, cap * sizeof *p);
    if (!p) {
      l->status = PH_ERR_NO_MEMORY;
      return;
    }
    l->items = p;
    l->cap = cap;
  }
  expected_tensor *e = &l->items[l->n++];
  memset(e, 0, sizeof *e);
  e->role = role;
  e->layer = layer;
  e->expert = expert;
  e->shape = s;
  e->init = init;
  const char *prefix = l->mtp ? "mtp." : weight_layout_prefix(l->layout);
  const char *tmpl = ROLE_TEMPLATES[role];
  char suffix[128];
  if (expert >= 0)
    snprintf(suffix, sizeof suffix, tmpl, expert);
  else
    snprintf(suffix, sizeof suffix, "%s", tmpl);
  if (role == W_LM_HEAD)
    snprintf(e->name, sizeof e->name, "%s", suffix); /* always top level */
  else if (layer < 0)
    snprintf(e->name, sizeof e->name, "%s%s", prefix, suffix);
  else
    snprintf(e->name, sizeof e->name, "%slayers.%d.%s", prefix, layer, suffix);
}

#define S1(a)       shape_1d(a)
#define S2(a, b)    shape_2d(a, b)
#define S3(a, b, c) shape_3d(a, b, c)

/* Layer i of kind `kind`, its MLP a MoE block when moe (the MTP layer: full attention, dense). */
static void expect_qwen_layer(expect_list *l, const hf_config *c, int i, ph_layer_kind kind,
                              int moe, expert_form experts) {
  const int64_t H = c->hidden_size, D = c->head_dim;
  const int64_t Hq = c->n_heads, Hkv = c->n_kv_heads;
  const int64_t Hv = c->lin.n_value_heads, Dv = c->lin.value_head_dim;
  const int64_t kd = c->geom.key_dim, vd = c->geom.value_dim, cd = c->geom.conv_dim;
  push(l, W_INPUT_NORM, i, -1, S1(H), INIT_NORM_OFFSET);
  if (kind == PH_LAYER_LINEAR_ATTENTION) {
    if (c->family == FAMILY_QWEN3_NEXT) {
      push(l, W_LIN_QKVZ, i, -1, S2(2 * kd + 2 * vd, H), INIT_LINEAR);
      push(l, W_LIN_BA, i, -1, S2(2 * Hv, H), INIT_LINEAR);
    } else {
      push(l, W_LIN_QKV, i, -1, S2(cd, H), INIT_LINEAR);
      push(l, W_LIN_Z, i, -1, S2(vd, H), INIT_LINEAR);
      push(l, W_LIN_B, i, -1, S2(Hv, H), INIT_LINEAR);
      push(l, W_LIN_A, i, -1, S2(Hv, H), INIT_LINEAR);
    }
    push(l, W_LIN_CONV, i, -1, S3(cd, 1, c->lin.conv_kernel), INIT_CONV);
    push(l, W_LIN_DT_BIAS, i, -1, S1(Hv), INIT_DT_BIAS);
    push(l, W_LIN_A_LOG, i, -1, S1(Hv), INIT_A_LOG);
    push(l, W_LIN_NORM, i, -1, S1(Dv), INIT_NORM_PLAIN);
    push(l, W_LIN_OUT, i, -1, S2(H, vd), INIT_LINEAR);
  } else {
    /* q_proj holds [query_h | gate_h] per head: 2*D rows per head (attention output gate). */
    push(l, W_ATTN_Q, i, -1, S2(Hq * 2 * D, H), INIT_LINEAR);
    push(l, W_ATTN_K, i, -1, S2(Hkv * D, H), INIT_LINEAR);
    push(l, W_ATTN_V, i, -1, S2(Hkv * D, H), INIT_LINEAR);
    push(l, W_ATTN_O, i, -1, S2(H, Hq * D), INIT_LINEAR);
    if (c->attention_bias) {
      push(l, W_ATTN_Q_BIAS, i, -1, S1(Hq * 2 * D), INIT_BIAS);
      push(l, W_ATTN_K_BIAS, i, -1, S1(Hkv * D), INIT_BIAS);
      push(l, W_ATTN_V_BIAS, i, -1, S1(Hkv * D), INIT_BIAS);
    }
    push(l, W_ATTN_Q_NORM, i, -1, S1(D), INIT_NORM_OFFSET);
    push(l, W_ATTN_K_NORM, i, -1, S1(D), INIT_NORM_OFFSET);
  }
  push(l, W_POST_NORM, i, -1, S1(H), INIT_NORM_OFFSET);
  if (moe) {
    const int64_t E = c->moe.n_experts, I = c->moe.moe_intermediate_size;
    const int64_t Ish = c->moe.shared_intermediate_size;
    push(l, W_MOE_ROUTER, i, -1, S2(E, H), INIT_LINEAR);
    /* Only Qwen3.5-MoE has the fused expert tensors; Qwen3-Next stores them per expert. */
    if (experts == EXPERTS_FUSED && c->family == FAMILY_QWEN35) {
      push(l, W_MOE_GATE_UP_FUSED, i, -1, S3(E, 2 * I, H), INIT_LINEAR);
      push(l, W_MOE_DOWN_FUSED, i, -1, S3(E, H, I), INIT_LINEAR);
    } else {
      for (int e = 0; e < (int)E; e++) {
        push(l, W_EXPERT_GATE, i, e, S2(I, H), INIT_LINEAR);
        push(l, W_EXPERT_UP, i, e, S2(I, H), INIT_LINEAR);
        push(l, W_EXPERT_DOWN, i, e, S2(H, I), INIT_LINEAR);
      }
    }
    if (Ish > 0) {
      push(l, W_SHARED_GATE, i, -1, S2(Ish, H), INIT_LINEAR);
      push(l, W_SHARED_UP, i, -1, S2(Ish, H), INIT_LINEAR);
      push(l, W_SHARED_DOWN, i, -1, S2(H, Ish), INIT_LINEAR);
      push(l, W_SHARED_EXPERT_GATE, i, -1, S2(1, H), INIT_LINEAR);
    }
  } else {
    const int64_t I = c->intermediate_size;
    push(l, W_MLP_GATE, i, -1, S2(I, H), INIT_LINEAR);
    push(l, W_MLP_UP, i, -1, S2(I, H), INIT_LINEAR);
    push(l, W_MLP_DOWN, i, -1, S2(H, I), INIT_LINEAR);
  }
}

static void expect_deepseek_layer(expect_list *l, const hf_config *c, int i) {
  const int64_t H = c->hidden_size, Hq = c->n_heads;
  const int64_t dn = c->mla.qk_nope_head_dim, dr = c->mla.qk_rope_head_dim;
  const int64_t dv = c->mla.v_head_dim, r = c->mla.kv_lora_rank, ql = c->mla.q_lora_rank;
  push(l, W_INPUT_NORM, i, -1, S1(H), INIT_NORM_PLAIN);
  if (ql == 0) {
    push(l, W_MLA_Q, i, -1, S2(Hq * (dn + dr), H), INIT_LINEAR);
  } else {
    push(l, W_MLA_Q_A, i, -1, S2(ql, H), INIT_LINEAR);
    push(l, W_MLA_Q_A_NORM, i, -1, S1(ql), INIT_NORM_PLAIN);
    push(l, W_MLA_Q_B, i, -1, S2(Hq * (dn + dr), ql), INIT_LINEAR);
  }
  push(l, W_MLA_KV_A, i, -1, S2(r + dr, H), INIT_LINEAR);
  push(l, W_MLA_KV_A_NORM, i, -1, S1(r), INIT_NORM_PLAIN);
  push(l, W_MLA_KV_B, i, -1, S2(Hq * (dn + dv), r), INIT_LINEAR);
  push(l, W_MLA_O, i, -1, S2(H, Hq * dv), INIT_LINEAR);
  push(l, W_POST_NORM, i, -1, S1(H), INIT_NORM_PLAIN);
  if (c->layer_is_moe[i]) {
    const int64_t E = c->moe.n_experts, I = c->moe.moe_intermediate_size;
    push(l, W_MOE_ROUTER, i, -1, S2(E, H), INIT_LINEAR);
    if (strcmp(c->moe.topk_method, "noaux_tc") == 0)
      push(l, W_MOE_ROUTER_BIAS, i, -1, S1(E), INIT_BIAS);
    for (int e = 0; e < (int)E; e++) {
      push(l, W_EXPERT_GATE, i, e, S2(I, H), INIT_LINEAR);
      push(l, W_EXPERT_UP, i, e, S2(I, H), INIT_LINEAR);
      push(l, W_EXPERT_DOWN, i, e, S2(H, I), INIT_LINEAR);
    }
    if (c->moe.n_shared_experts > 0) {
      const int64_t Ish = I * c->moe.n_shared_experts;
      push(l, W_DS_SHARED_GATE, i, -1, S2(Ish, H), INIT_LINEAR);
      push(l, W_DS_SHARED_UP, i, -1, S2(Ish, H), INIT_LINEAR);
      push(l, W_DS_SHARED_DOWN, i, -1, S2(H, Ish), INIT_LINEAR);
    }
  } else {
    const int64_t I = c->intermediate_size;
    push(l, W_MLP_GATE, i, -1, S2(I, H), INIT_LINEAR);
    push(l, W_MLP_UP, i, -1, S2(I, H), INIT_LINEAR);
    push(l, W_MLP_DOWN, i, -1, S2(H, I), INIT_LINEAR);
  }
}

ph_status weights_expected(const hf_config *c, weight_layout layout, expert_form experts,
                           expected_tensor **out, size_t *n_out, diag *d) {
  *out = NULL;
  *n_out = 0;
  RETURN_ERROR_IF(layout == LAYOUT_VLM && c->family != FAMILY_QWEN35, d, PH_ERR_UNSUPPORTED,
                  "the VLM tensor layout exists only for the qwen3_5 family, not %s",
                  c->model_type);
  expect_list l = {.layout = layout, .status = PH_OK};
  const int64_t V = c->vocab_size, H = c->hidden_size;
  const int deepseek = c->family == FAMILY_DEEPSEEK;
  push(&l, W_EMBED, -1, -1, S2(V, H), INIT_EMBED);
  for (int i = 0; i < (int)c->n_layers; i++) {
    if (deepseek)
      expect_deepseek_layer(&l, c, i);
    else
      expect_qwen_layer(&l, c, i, (ph_layer_kind)c->layer_kind[i], c->layer_is_moe[i], experts);
  }
  push(&l, W_FINAL_NORM, -1, -1, S1(H), deepseek ? INIT_NORM_PLAIN : INIT_NORM_OFFSET);
  if (!c->tie_word_embeddings) push(&l, W_LM_HEAD, -1, -1, S2(V, H), INIT_LINEAR);
  if (l.status != PH_OK) {
    free(l.items);
    return diag_set(d, l.status, "out of memory listing expected tensors");
  }
  *out = l.items;
  *n_out = l.n;
  return PH_OK;
}

/* The MTP layer's MLP is a MoE block whenever the model's layers are (vLLM's Qwen3.5 MTP builds
 * its one decoder layer from the same config): any MoE layer means a MoE MTP layer. */
static int mtp_is_moe(const hf_config *c) {
  for (int i = 0; i < (int)c->n_layers; i++)
    if (c->layer_is_moe[i]) return 1;
  return 0;
}

ph_status weights_expected_mtp(const hf_config *c, expected_tensor **out, size_t *n_out, diag *d) {
  *out = NULL;
  *n_out = 0;
  if (c->mtp_num_hidden_layers == 0) return PH_OK;
  RETURN_ERROR_IF(c->family != FAMILY_QWEN35 && c->family != FAMILY_QWEN3_NEXT, d,
                  PH_ERR_UNSUPPORTED, "MTP head: %s is not a Qwen3.5 / Qwen3-Next model",
                  c->model_type);
  RETURN_ERROR_IF(mtp_is_moe(c), d, PH_ERR_UNSUPPORTED,
                  "MTP head of a MoE model (%s): its layer's MLP is a MoE block, which the MTP "
                  "drafter does not support (dense-MLP MTP only)",
                  c->model_type);
  expect_list l = {.layout = LAYOUT_CAUSAL_LM, .mtp = 1, .status = PH_OK};
  const int64_t H = c->hidden_size;
  push(&l, W_MTP_FC, -1, -1, S2(H, 2 * H), INIT_LINEAR);
  push(&l, W_MTP_NORM_EMBED, -1, -1, S1(H), INIT_NORM_OFFSET);
  push(&l, W_MTP_NORM_HIDDEN, -1, -1, S1(H), INIT_NORM_OFFSET);
  push(&l, W_FINAL_NORM, -1, -1, S1(H), INIT_NORM_OFFSET);
  for (int i = 0; i < (int)c->mtp_num_hidden_layers; i++)
    expect_qwen_layer(&l, c, i, PH_LAYER_FULL_ATTENTION, 0, EXPERTS_FUSED);
  if (l.status != PH_OK) {
    free(l.items);
    return diag_set(d, l.status, "out of memory listing MTP tensors");
  }
  *out = l.items;
  *n_out = l.n;
  return PH_OK;
}

/* ---- binding ------------------------------------------------------------------------------ */

static int expert_part_of(weight_role role) {
  return role == W_EXPERT_GATE ? 0 : role == W_EXPERT_UP ? 1 : role == W_EXPERT_DOWN ? 2 : -1;
}

ph_status weights_param_counts(const hf_config *c, int64_t *total, int64_t *active, diag *d) {
  RETURN_ERROR_IF(!c, d, PH_ERR_INVALID_ARGUMENT, "weights_param_counts: NULL config");
  expected_tensor *t = NULL;
  size_t n = 0;
  FORWARD_IF_ERROR(weights_expected(c, weights_default_layout(c), EXPERTS_FUSED, &t, &n, d));
  int64_t all = 0, routed = 0;
  for (size_t i = 0; i < n; i++) {
    const int64_t e = shape_numel(&t[i].shape);
    const weight_role r = t[i].role;
    all += e;
    if (r == W_MOE_GATE_UP_FUSED || r == W_MOE_DOWN_FUSED || expert_part_of(r) >= 0) routed += e;
  }
  free(t);
  /* Every MoE layer holds E equal experts: routed / E is one expert in each MoE layer. */
  const int64_t per_expert = c->moe.n_experts > 0 ? routed / c->moe.n_experts : 0;
  if (total) *total = all;
  if (active) *active = all - routed + per_expert * c->moe.n_experts_per_tok;
  return PH_OK;
}

static int first_moe_layer(const hf_config *c) {
  for (int i = 0; i < (int)c->n_layers; i++)
    if (c->layer_is_moe[i]) return i;
  return -1;
}

static ph_status detect_layout(const hf_config *c, const st_set *set, weight_layout *layout,
                               diag *d) {
  weight_layout preferred = weights_default_layout(c);
  weight_layout other = preferred == LAYOUT_VLM ? LAYOUT_CAUSAL_LM : LAYOUT_VLM;
  char name[192];
  snprintf(name, sizeof name, "%sembed_tokens.weight", weight_layout_prefix(preferred));
  if (st_find(set, name)) {
    *layout = preferred;
    return PH_OK;
  }
  char alt[192];
  snprintf(alt, sizeof alt, "%sembed_tokens.weight", weight_layout_prefix(other));
  if (c->family == FAMILY_QWEN35 && st_find(set, alt)) {
    *layout = other;
    return PH_OK;
  }
  return diag_set(d, PH_ERR_TENSOR_MISSING, "tensor %s is missing (layout %s)", name,
                  preferred == LAYOUT_VLM ? "Qwen3.5 VLM" : "causal LM");
}

static expert_form detect_experts(const hf_config *c, const st_set *set, weight_layout layout) {
  if (c->family != FAMILY_QWEN35) return EXPERTS_PER_EXPERT;
  int i = first_moe_layer(c);
  if (i < 0) return EXPERTS_FUSED;
  char name[192];
  snprintf(name, sizeof name, "%slayers.%d.%s", weight_layout_prefix(layout), i,
           ROLE_TEMPLATES[W_MOE_GATE_UP_FUSED]);
  return st_find(set, name) ? EXPERTS_FUSED : EXPERTS_PER_EXPERT;
}

/* FP8 (e4m3) weights carry a block scale "<name>_scale_inv" [ceil(out/128), ceil(in/128)]. */
static ph_status check_fp8_scale(const st_set *set, const st_tensor *t, int64_t *bytes, size_t *n,
                                 diag *d) {
  char name[224];
  snprintf(name, sizeof name, "%s_scale_inv", t->name);
  const st_tensor *s = st_find(set, name);
  RETURN_ERROR_IF(!s, d, PH_ERR_TENSOR_MISSING, "tensor %s is missing (FP8 weight %s needs it)",
                  name, t->name);
  RETURN_ERROR_IF(t->shape.n_dims != 2, d, PH_ERR_TENSOR_SHAPE, "FP8 tensor %s must be 2-D",
                  t->name);
  shape want = S2((t->shape.dims[0] + 127) / 128, (t->shape.dims[1] + 127) / 128);
  char a[64], b[64];
  RETURN_ERROR_IF(!shape_equal(&want, &s->shape), d, PH_ERR_TENSOR_SHAPE,
                  "tensor %s has shape %s, expected %s", name, shape_format(&s->shape, a, sizeof a),
                  shape_format(&want, b, sizeof b));
  RETURN_ERROR_IF(s->dtype != PH_DTYPE_F32 && s->dtype != PH_DTYPE_BF16, d, PH_ERR_TENSOR_DTYPE,
                  "tensor %s has dtype %s, expected f32 or bf16", name, ph_dtype_name(s->dtype));
  *bytes += (int64_t)(s->data_end - s->data_begin);
  (*n)++;
  return PH_OK;
}

static ph_status check_dtype(const hf_config *c, const st_tensor *t, diag *d) {
  switch (t->dtype) {
  case PH_DTYPE_F32:
  case PH_DTYPE_F16:
  case PH_DTYPE_BF16:
    return PH_OK;
  case PH_DTYPE_F8E4M3:
    if (c->family == FAMILY_DEEPSEEK && t->shape.n_dims == 2) return PH_OK;
    break;
  default:
    break;
  }
  return diag_set(d, PH_ERR_TENSOR_DTYPE, "tensor %s has dtype %s, expected f32, f16 or bf16%s",
                  t->name, ph_dtype_name(t->dtype),
                  c->family == FAMILY_DEEPSEEK ? " (or f8e4m3 with a block scale)" : "");
}

/* The tensor e names, at e's shape and a dtype binding accepts. */
static ph_status find_checked(const hf_config *c, const st_set *set, const expected_tensor *e,
                              const st_tensor **out, diag *d) {
  const st_tensor *t = st_find(set, e->name);
  RETURN_ERROR_IF(!t, d, PH_ERR_TENSOR_MISSING, "tensor %s is missing", e->name);
  if (!shape_equal(&t->shape, &e->shape)) {
    char got[96], want[96];
    return diag_set(d, PH_ERR_TENSOR_SHAPE, "tensor %s has shape %s, expected %s", e->name,
                    shape_format(&t->shape, got, sizeof got),
                    shape_format(&e->shape, want, sizeof want));
  }
  FORWARD_IF_ERROR(check_dtype(c, t, d));
  *out = t;
  return PH_OK;
}

/* The MTP head into w when the config names one, the model is dense and the checkpoint has
 * mtp.fc.weight (a checkpoint without it simply has no drafter); every other MTP tensor is then
 * required. */
static ph_status bind_mtp(const hf_config *c, const st_set *set, model_weights *w, diag *d) {
  if (c->mtp_num_hidden_layers == 0 || mtp_is_moe(c) ||
      (c->family != FAMILY_QWEN35 && c->family != FAMILY_QWEN3_NEXT) ||
      !st_find(set, "mtp.fc.weight"))
    return PH_OK;
  expected_tensor *exp = NULL;
  size_t n = 0;
  FORWARD_IF_ERROR(weights_expected_mtp(c, &exp, &n, d));
  const int L = (int)c->mtp_num_hidden_layers;
  w->mtp_layer = calloc((size_t)L * W_ROLE_COUNT, sizeof *w->mtp_layer);
  ph_status s = w->mtp_layer ? PH_OK : diag_set(d, PH_ERR_NO_MEMORY, "out of memory binding MTP");
  for (size_t k = 0; k < n && s == PH_OK; k++) {
    const st_tensor *t = NULL;
    if ((s = find_checked(c, set, &exp[k], &t, d)) != PH_OK) break;
    if (t->dtype == PH_DTYPE_F8E4M3) {
      s = diag_set(d, PH_ERR_TENSOR_DTYPE, "tensor %s: an FP8 MTP head is not supported", t->name);
      break;
    }
    if (exp[k].layer < 0)
      w->mtp_global[exp[k].role] = t;
    else
      w->mtp_layer[(size_t)exp[k].layer * W_ROLE_COUNT + exp[k].role] = t;
  }
  free(exp);
  if (s != PH_OK) return diag_prefix(d, "binding the MTP head");
  w->n_mtp_layers = L;
  return PH_OK;
}

ph_status weights_bind(const hf_config *c, const st_set *set, model_weights *out, diag *d) {
  memset(out, 0, sizeof *out);
  weight_layout layout = LAYOUT_CAUSAL_LM;
  FORWARD_IF_ERROR(detect_layout(c, set, &layout, d));
  expert_form experts = detect_experts(c, set, layout);
  expected_tensor *exp = NULL;
  size_t n_exp = 0;
  FORWARD_IF_ERROR(weights_expected(c, layout, experts, &exp, &n_exp, d));

  ph_status s = PH_OK;
  model_weights w;
  memset(&w, 0, sizeof w);
  w.layout = layout;
  w.experts = experts;
  w.n_layers = (int)c->n_layers;
  w.n_experts = (int)c->moe.n_experts;
  w.layer = calloc((size_t)w.n_layers * W_ROLE_COUNT, sizeof *w.layer);
  int per_expert = experts == EXPERTS_PER_EXPERT && w.n_experts > 0;
  if (per_expert) w.expert = calloc((size_t)w.n_layers * 3 * (size_t)w.n_experts, sizeof *w.expert);
  if (!w.layer || (per_expert && !w.expert)) {
    s = diag_set(d, PH_ERR_NO_MEMORY, "out of memory binding %zu tensors", n_exp);
    goto fail;
  }
  size_t n_bound = 0;
  for (size_t k = 0; k < n_exp; k++) {
    const expected_tensor *e = &exp[k];
    const st_tensor *t = NULL;
    if ((s = find_checked(c, set, e, &t, d)) != PH_OK) goto fail;
    if (t->dtype == PH_DTYPE_F8E4M3 &&
        (s = check_fp8_scale(set, t, &w.n_bytes, &n_bound, d)) != PH_OK)
      goto fail;
    int part = expert_part_of(e->role);
    if (e->layer < 0)
      w.global[e->role] = t;
    else if (part >= 0)
      w.expert[((size_t)e->layer * 3 + (size_t)part) * (size_t)w.n_experts + (size_t)e->expert] = t;
    else
      w.layer[(size_t)e->layer * W_ROLE_COUNT + e->role] = t;
    w.n_parameters += shape_numel(&t->shape);
    w.n_bytes += (int64_t)(t->data_end - t->data_begin);
    n_bound++;
  }
  w.n_unused = st_count(set) - n_bound;
  if ((s = bind_mtp(c, set, &w, d)) != PH_OK) goto fail;
  free(exp);
  *out = w;
  return PH_OK;
fail:
  free(exp);
  weights_free(&w);
  return s;
}

void weights_free(model_weights *w) {
  if (!w) return;
  free(w->layer);
  free(w->expert);
  free(w->mtp_layer);
  memset(w, 0, sizeof *w);
}

const st_tensor *weights_layer(const model_weights *w, int layer, weight_role role) {
  if (!w->layer || layer < 0 || layer >= w->n_layers || (unsigned)role >= W_ROLE_COUNT) return NULL;
  return w->layer[(size_t)layer * W_ROLE_COUNT + role];
}

const st_tensor *weights_expert(const model_weights *w, int layer, int expert, int expert_part) {
  if (!w->expert || layer < 0 || layer >= w->n_layers || expert < 0 || expert >= w->n_experts ||
      expert_part < 0 || expert_part > 2)
    return NULL;
  return w
      ->expert[((size_t)layer * 3 + (size_t)expert_part) * (size_t)w->n_experts + (size_t)expert];
}
