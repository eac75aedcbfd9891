/* tiny — random-weight checkpoints in HF layout. See tiny.h.
 *
 * The config is written as JSON first, then parsed back with hf_config_parse(): the parser's
 * validation and derived geometry are what the tensor list is computed from, so a tiny model is
 * always one the loader accepts (or the same typed error a real config would get).
 */
#include "models/tiny.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "base/hash.h"
#include "base/rng.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "tensor/dtype.h"

tiny_params tiny_params_default(void) {
  tiny_params p;
  memset(&p, 0, sizeof p);
  p.model_type = "qwen3_5_text";
  p.layout = LAYOUT_CAUSAL_LM;
  p.dtype = PH_DTYPE_F32;
  p.seed = 1;
  p.hidden_size = 64;
  p.n_layers = 4;
  p.vocab_size = 256;
  p.intermediate_size = 128;
  p.max_position_embeddings = 262144;
  p.n_heads = 4;
  p.n_kv_heads = 2;
  p.head_dim = 32;
  p.lin_key_heads = 2;
  p.lin_value_heads = 4;
  p.lin_key_dim = 16;
  p.lin_value_dim = 16;
  p.conv_kernel = 4;
  p.full_attention_interval = 4;
  p.partial_rotary_factor = 0.25;
  p.rope_theta = 1e7;
  p.rms_norm_eps = 1e-6;
  p.mrope_section[0] = 2;
  p.mrope_section[1] = 1;
  p.mrope_section[2] = 1;
  p.n_experts = 8;
  p.n_experts_per_tok = 2;
  p.moe_intermediate_size = 32;
  p.shared_intermediate_size = 32;
  p.decoder_sparse_step = 1;
  p.q_lora_rank = 48;
  p.kv_lora_rank = 32;
  p.qk_nope_head_dim = 16;
  p.qk_rope_head_dim = 16;
  p.v_head_dim = 16;
  p.n_shared_experts = 1;
  p.first_k_dense_replace = 1;
  return p;
}

ph_status tiny_apply_preset(tiny_params *p, const char *preset, diag *d) {
  if (strcmp(preset, "tiny") == 0) {
    tiny_params def = tiny_params_default();
    def.model_type = p->model_type;
    def.layout = p->layout;
    def.dtype = p->dtype;
    def.seed = p->seed;
    def.max_shard_bytes = p->max_shard_bytes;
    *p = def;
    return PH_OK;
  }
  if (strcmp(preset, "qwen3.5-0.8b") == 0) {
    /* ../shared/spec/model-math.md §6, Qwen3.5-0.8B */
    p->hidden_size = 1024;
    p->n_layers = 24;
    p->vocab_size = 248320;
    p->intermediate_size = 3584;
    p->n_heads = 8;
    p->n_kv_heads = 2;
    p->head_dim = 256;
    p->lin_key_heads = 16;
    p->lin_value_heads = 16;
    p->lin_key_dim = 128;
    p->lin_value_dim = 128;
    p->conv_kernel = 4;
    p->full_attention_interval = 4;
    p->partial_rotary_factor = 0.25;
    p->rope_theta = 1e7;
    p->mrope_section[0] = 11;
    p->mrope_section[1] = 11;
    p->mrope_section[2] = 10;
    p->tie_word_embeddings = 1;
    return PH_OK;
  }
  if (strcmp(preset, "qwen3.8-tiny") == 0) {
    /* Qwen3.8-27B proportions (Hq/Hkv = 6, Hv/Hk = 3, full attention every 4th layer, partial
     * rotary 1/4 with interleaved MRoPE) at a size that runs in milliseconds. */
    p->hidden_size = 128;
    p->n_layers = 8;
    p->vocab_size = 512;
    p->intermediate_size = 256;
    p->n_heads = 6;
    p->n_kv_heads = 1;
    p->head_dim = 32;
    p->lin_key_heads = 2;
    p->lin_value_heads = 6;
    p->lin_key_dim = 16;
    p->lin_value_dim = 16;
    p->conv_kernel = 4;
    p->full_attention_interval = 4;
    p->partial_rotary_factor = 0.25;
    p->rope_theta = 1e7;
    p->mrope_section[0] = 2;
    p->mrope_section[1] = 1;
    p->mrope_section[2] = 1;
    p->tie_word_embeddings = 0;
    return PH_OK;
  }
  return diag_set(d, PH_ERR_INVALID_ARGUMENT,
                  "unknown preset \"%s\" (known: tiny, qwen3.5-0.8b, qwen3.8-tiny)", preset);
}

/* ---- config.json -------------------------------------------------------------------------- */

static void set_int(json_t *o, const char *k, int64_t v) {
  json_object_set_new(o, k, json_integer(v));
}
static void set_real(json_t *o, const char *k, double v) {
  json_object_set_new(o, k, json_real(v));
}
static void set_str(json_t *o, const char *k, const char *v) {
  json_object_set_new(o, k, json_string(v));
}
static void set_bool(json_t *o, const char *k, int v) {
  json_object_set_new(o, k, json_boolean(v));
}

static int is_qwen35(const char *t) {
  return strcmp(t, "qwen3_5_text") == 0 || strcmp(t, "qwen3_5_moe_text") == 0;
}

static void qwen_common(json_t *o, const tiny_params *p) {
  set_int(o, "hidden_size", p->hidden_size);
  set_int(o, "num_hidden_layers", p->n_layers);
  set_int(o, "num_attention_heads", p->n_heads);
  set_int(o, "num_key_value_heads", p->n_kv_heads);
  set_int(o, "head_dim", p->head_dim);
  set_int(o, "vocab_size", p->vocab_size);
  set_real(o, "rms_norm_eps", p->rms_norm_eps);
  set_str(o, "hidden_act", "silu");
  set_bool(o, "attention_bias", 0);
  set_bool(o, "attn_output_gate", 1);
  set_int(o, "linear_num_key_heads", p->lin_key_heads);
  set_int(o, "linear_num_value_heads", p->lin_value_heads);
  set_int(o, "linear_key_head_dim", p->lin_key_dim);
  set_int(o, "linear_value_head_dim", p->lin_value_dim);
  set_int(o, "linear_conv_kernel_dim", p->conv_kernel);
  set_int(o, "full_attention_interval", p->full_attention_interval);
  json_t *types = json_array();
  for (int64_t i = 0; i < p->n_layers; i++) {
    int full = p->full_attention_interval > 0 && (i + 1) % p->full_attention_interval == 0;
    json_array_append_new(types, json_string(full ? "full_attention" : "linear_attention"));
  }
  json_object_set_new(o, "layer_types", types);
  set_int(o, "max_position_embeddings", p->max_position_embeddings);
  set_bool(o, "tie_word_embeddings", p->tie_word_embeddings);
  set_str(o, "dtype",
          p->dtype == PH_DTYPE_BF16  ? "bfloat16"
          : p->dtype == PH_DTYPE_F16 ? "float16"
                                     : "float32");
  set_str(o, "mamba_ssm_dtype", "float32");
  set_int(o, "intermediate_size", p->intermediate_size);
  if (p->mtp_layers > 0) set_int(o, "mtp_num_hidden_layers", p->mtp_layers);
}

static void moe_fields(json_t *o, const tiny_params *p) {
  set_int(o, "num_experts", p->n_experts);
  set_int(o, "num_experts_per_tok", p->n_experts_per_tok);
  set_int(o, "moe_intermediate_size", p->moe_intermediate_size);
  set_int(o, "shared_expert_intermediate_size", p->shared_intermediate_size);
  set_bool(o, "norm_topk_prob", 1);
}

static json_t *qwen35_text(const tiny_params *p) {
  json_t *o = json_object();
  int moe = strcmp(p->model_type, "qwen3_5_moe_text") == 0;
  if (p->layout != LAYOUT_VLM) {
    json_t *arch = json_array();
    json_array_append_new(arch, json_string(moe ? "Qwen3_5MoeForCausalLM" : "Qwen3_5ForCausalLM"));
    json_object_set_new(o, "architectures", arch);
  }
  qwen_common(o, p);
  if (moe) moe_fields(o, p);
  json_t *rope = json_object();
  set_str(rope, "rope_type", "default");
  set_real(rope, "rope_theta", p->rope_theta);
  set_real(rope, "partial_rotary_factor", p->partial_rotary_factor);
  json_t *sec = json_array();
  for (int i = 0; i < 3; i++) json_array_append_new(sec, json_integer(p->mrope_section[i]));
  json_object_set_new(rope, "mrope_section", sec);
  set_bool(rope, "mrope_interleaved", 1);
  json_object_set_new(o, "rope_parameters", rope);
  set_str(o, "model_type", p->model_type);
  return o;
}

static json_t *qwen3_next(const tiny_params *p) {
  json_t *o = json_object();
  json_t *arch = json_array();
  json_array_append_new(arch, json_string("Qwen3NextForCausalLM"));
  json_object_set_new(o, "architectures", arch);
  set_str(o, "model_type", "qwen3_next");
  qwen_common(o, p);
  moe_fields(o, p);
  set_int(o, "decoder_sparse_step", p->decoder_sparse_step);
  json_object_set_new(o, "mlp_only_layers", json_array());
  set_real(o, "rope_theta", p->rope_theta);
  set_real(o, "partial_rotary_factor", p->partial_rotary_factor);
  json_object_set_new(o, "rope_scaling", json_null());
  return o;
}

static json_t *deepseek(const tiny_params *p) {
  int v3 = strcmp(p->model_type, "deepseek_v3") == 0;
  json_t *o = json_object();
  json_t *arch = json_array();
  json_array_append_new(arch, json_string(v3 ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM"));
  json_object_set_new(o, "architectures", arch);
  set_str(o, "model_type", p->model_type);
  set_int(o, "hidden_size", p->hidden_size);
  set_int(o, "intermediate_size", p->intermediate_size);
  set_int(o, "moe_intermediate_size", p->moe_intermediate_size);
  set_int(o, "num_hidden_layers", p->n_layers);
  set_int(o, "num_attention_heads", p->n_heads);
  set_int(o, "num_key_value_heads", p->n_heads);
  set_int(o, "n_shared_experts", p->n_shared_experts);
  set_int(o, "n_routed_experts", p->n_experts);
  set_int(o, "num_experts_per_tok", p->n_experts_per_tok);
  set_real(o, "routed_scaling_factor", v3 ? 2.5 : 1.0);
  if (p->q_lora_rank > 0 && v3)
    set_int(o, "q_lora_rank", p->q_lora_rank);
  else
    json_object_set_new(o, "q_lora_rank", json_null());
  set_int(o, "kv_lora_rank", p->kv_lora_rank);
  set_int(o, "qk_nope_head_dim", p->qk_nope_head_dim);
  set_int(o, "qk_rope_head_dim", p->qk_rope_head_dim);
  set_int(o, "v_head_dim", p->v_head_dim);
  set_str(o, "topk_method", v3 ? "noaux_tc" : "greedy");
  set_str(o, "scoring_func", v3 ? "sigmoid" : "softmax");
  set_int(o, "n_group", 1);
  set_int(o, "topk_group", 1);
  set_int(o, "first_k_dense_replace", p->first_k_dense_replace);
  set_int(o, "moe_layer_freq", 1);
  set_bool(o, "norm_topk_prob", v3);
  set_int(o, "vocab_size", p->vocab_size);
  set_int(o, "max_position_embeddings", 163840);
  set_real(o, "rms_norm_eps", p->rms_norm_eps);
  set_bool(o, "tie_word_embeddings", p->tie_word_embeddings);
  set_bool(o, "attention_bias", 0);
  set_real(o, "rope_theta", 10000.0);
  json_t *ys = json_object();
  set_str(ys, "type", "yarn");
  set_real(ys, "factor", 40.0);
  set_int(ys, "original_max_position_embeddings", 4096);
  set_real(ys, "beta_fast", 32.0);
  set_real(ys, "beta_slow", 1.0);
  set_real(ys, "mscale", v3 ? 1.0 : 0.707);
  set_real(ys, "mscale_all_dim", v3 ? 1.0 : 0.707);
  json_object_set_new(o, "rope_scaling", ys);
  if (v3) set_bool(o, "rope_interleave", 1);
  set_str(o, "torch_dtype",
          p->dtype == PH_DTYPE_BF16  ? "bfloat16"
          : p->dtype == PH_DTYPE_F16 ? "float16"
                                     : "float32");
  return o;
}

ph_status tiny_config_json(const tiny_params *p, char **out, diag *d) {
  *out = NULL;
  const char *t = p->model_type ? p->model_type : "qwen3_5_text";
  json_t *root = NULL;
  if (is_qwen35(t)) {
    json_t *text = qwen35_text(p);
    if (p->layout == LAYOUT_VLM) {
      int moe = strcmp(t, "qwen3_5_moe_text") == 0;
      root = json_object();
      json_t *arch = json_array();
      json_array_append_new(arch, json_string(moe ? "Qwen3_5MoeForConditionalGeneration"
                                                  : "Qwen3_5ForConditionalGeneration"));
      json_object_set_new(root, "architectures", arch);
      set_str(root, "model_type", moe ? "qwen3_5_moe" : "qwen3_5");
      json_object_set_new(root, "text_config", text);
      set_bool(root, "tie_word_embeddings", p->tie_word_embeddings);
    } else {
      root = text;
    }
  } else if (p->layout == LAYOUT_VLM) {
    return diag_set(d, PH_ERR_INVALID_ARGUMENT,
                    "the vlm layout exists only for qwen3_5_text and qwen3_5_moe_text, not %s", t);
  } else if (strcmp(t, "qwen3_next") == 0) {
    root = qwen3_next(p);
  } else if (strcmp(t, "deepseek_v2") == 0 || strcmp(t, "deepseek_v3") == 0) {
    RETURN_ERROR_IF(p->mtp_layers > 0, d, PH_ERR_INVALID_ARGUMENT,
                    "make-tiny writes MTP layers for Qwen models only, not %s", t);
    root = deepseek(p);
  } else {
    return diag_set(d, PH_ERR_UNKNOWN_MODEL_TYPE,
                    "make-tiny cannot make model type \"%s\" (known: qwen3_5_text, "
                    "qwen3_5_moe_text, qwen3_next, deepseek_v2, deepseek_v3)",
                    t);
  }
  RETURN_ERROR_IF(!root, d, PH_ERR_NO_MEMORY, "out of memory building config.json");
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
  json_decref(root);
  RETURN_ERROR_IF(!text, d, PH_ERR_NO_MEMORY, "out of memory writing config.json");
  *out = text;
  return PH_OK;
}

/* ---- weights -------------------------------------------------------------------------------- */

typedef struct fill_ctx {
  const expected_tensor *tensors;
  uint64_t seed;
  ph_dtype dtype;
} fill_ctx;

static float init_value(rng *r, weight_init init, const shape *s) {
  switch (init) {
  case INIT_LINEAR: {
    int64_t fan_in = s->dims[s->n_dims - 1];
    float a = sqrtf(3.0f / (float)(fan_in > 0 ? fan_in : 1));
    return rng_range(r, -a, a);
  }
  case INIT_EMBED:
    return rng_range(r, -1.0f, 1.0f);
  case INIT_NORM_OFFSET:
    return rng_range(r, -0.1f, 0.1f);
  case INIT_NORM_PLAIN:
    return rng_range(r, 0.9f, 1.1f);
  case INIT_A_LOG:
    return logf(rng_range(r, 1.0f, 16.0f));
  case INIT_DT_BIAS:
    return rng_range(r, 0.5f, 1.5f);
  case INIT_CONV: {
    float a = 1.0f / sqrtf((float)s->dims[s->n_dims - 1]);
    return rng_range(r, -a, a);
  }
  case INIT_BIAS:
    return rng_range(r, -0.1f, 0.1f);
  }
  return 0.0f;
}

/* The dtype a tensor is stored in: the checkpoint's, except DeepSeek's router bias
 * (mlp.gate.e_score_correction_bias), which the published checkpoints keep in f32 next to bf16
 * (or fp8) weights, as HF keeps the buffer in f32. */
static ph_dtype tensor_dtype(const expected_tensor *e, ph_dtype dtype) {
  return e->role == W_MOE_ROUTER_BIAS ? PH_DTYPE_F32 : dtype;
}

static ph_status fill_tensor(void *user, size_t index, void *dst, diag *d) {
  const fill_ctx *ctx = user;
  const expected_tensor *e = &ctx->tensors[index];
  rng r = rng_seed(ctx->seed ^ hash_str(e->name));
  int64_t n = shape_numel(&e->shape);
  const ph_dtype dt = tensor_dtype(e, ctx->dtype);
  size_t es = dtype_size(dt);
  float chunk[1024];
  for (int64_t i = 0; i < n; i += 1024) {
    int64_t m = n - i < 1024 ? n - i : 1024;
    for (int64_t j = 0; j < m; j++) chunk[j] = init_value(&r, e->init, &e->shape);
    FORWARD_IF_ERROR(
        dtype_convert((char *)dst + (size_t)i * es, dt, chunk, PH_DTYPE_F32, (size_t)m, d));
  }
  return PH_OK;
}

static int compare_names(const void *a, const void *b) {
  return strcmp(((const expected_tensor *)a)->name, ((const expected_tensor *)b)->name);
}

ph_status tiny_write(const char *dir, const tiny_params *p, diag *d) {
  RETURN_ERROR_IF(p->dtype != PH_DTYPE_F32 && p->dtype != PH_DTYPE_BF16 && p->dtype != PH_DTYPE_F16,
                  d, PH_ERR_INVALID_ARGUMENT, "make-tiny dtype must be f32, bf16 or f16, not %s",
                  ph_dtype_name(p->dtype));
  char *json = NULL;
  FORWARD_IF_ERROR(tiny_config_json(p, &json, d));
  hf_config cfg;
  ph_status s = hf_config_parse(json, strlen(json), &cfg, d);
  if (s != PH_OK) {
    free(json);
    return diag_prefix(d, "make-tiny geometry");
  }
  char path[4096];
  if ((s = path_mkdirs(dir, d)) != PH_OK ||
      (s = path_join(path, sizeof path, dir, "config.json", d)) != PH_OK ||
      (s = file_write_all(path, json, strlen(json), d)) != PH_OK) {
    free(json);
    return s;
  }
  free(json);

  expected_tensor *tensors = NULL, *mtp = NULL;
  size_t n = 0, n_mtp = 0;
  FORWARD_IF_ERROR(weights_expected_mtp(&cfg, &mtp, &n_mtp, d));
  if ((s = weights_expected(&cfg, p->layout, EXPERTS_FUSED, &tensors, &n, d)) != PH_OK) {
    free(mtp);
    return s;
  }
  if (n_mtp) { /* the MTP head after the model's tensors (sorted below with them) */
    expected_tensor *all = realloc(tensors, (n + n_mtp) * sizeof *all);
    if (!all) {
      free(tensors);
      free(mtp);
      return diag_set(d, PH_ERR_NO_MEMORY, "out of memory");
    }
    memcpy(all + n, mtp, n_mtp * sizeof *all);
    tensors = all;
    n += n_mtp;
  }
  free(mtp);
  /* The order the safetensors library writes in: by name. */
  qsort(tensors, n, sizeof *tensors, compare_names);
  st_write_entry *entries = calloc(n, sizeof *entries);
  if (!entries) {
    free(tensors);
    return diag_set(d, PH_ERR_NO_MEMORY, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    entries[i].name = tensors[i].name;
    entries[i].dtype = tensor_dtype(&tensors[i], p->dtype);
    entries[i].shape = tensors[i].shape;
  }
  fill_ctx ctx = {tensors, p->seed, p->dtype};
  if (p->max_shard_bytes) {
    s = st_write_sharded(dir, entries, n, p->max_shard_bytes, fill_tensor, &ctx, d);
  } else if ((s = path_join(path, sizeof path, dir, "model.safetensors", d)) == PH_OK) {
    s = st_write_file(path, entries, n, fill_tensor, &ctx, d);
  }
  free(entries);
  free(tensors);
  return s;
}
