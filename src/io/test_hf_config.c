/* test_hf_config — hf_config against the two golden checkpoints, the real model shapes of
 * model-math §6 (configs rebuilt here as JSON text), both rope spellings, and one test per typed
 * error, each checking the exact status and that the message names the field.
 *
 * The byte counts for the real rows are the spec's table values worked out exactly:
 * fixed = n_linear * (conv_dim * 3 * 4 + Hv * 128 * 128 * 4), KV = n_full * 2 * Hkv * 256 * 2.
 */
#include <stdarg.h>

#include "base/fmap.h"
#include "check.h"
#include "file_testing.h"
#include "io/hf_config.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static ph_status parse_str(const char *json, hf_config *c, diag *d) {
  diag_clear(d);
  return hf_config_parse(json, strlen(json), c, d);
}

/* Returns base with the first occurrence of from replaced by to. The result lives in one of two
 * static buffers used in turn, so edit(edit(x, ...), ...) is safe; keep at most the last two
 * results. Fails the test loudly when from is absent, so a stale edit cannot pass. */
static const char *edit(const char *base, const char *from, const char *to) {
  static char bufs[2][16384];
  static int turn;
  char *buf = bufs[turn];
  turn ^= 1;
  const char *at = strstr(base, from);
  if (!CHECK(at != NULL)) {
    fprintf(stderr, "       edit: \"%s\" not found in the base config\n", from);
    return base;
  }
  size_t head = (size_t)(at - base);
  snprintf(buf, sizeof bufs[0], "%.*s%s%s", (int)head, base, to, at + strlen(from));
  return buf;
}

static int count_kind(const hf_config *c, ph_layer_kind kind) {
  int n = 0;
  for (int64_t i = 0; i < c->n_layers; i++) n += c->layer_kind[i] == kind;
  return n;
}

/* A small valid text-only config; the error tests edit one field of it. */
static const char BASE[] =
    "{\"model_type\":\"qwen3_5_text\",\"hidden_size\":64,\"num_hidden_layers\":4,"
    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":32,\"vocab_size\":256,"
    "\"intermediate_size\":128,\"linear_num_key_heads\":2,\"linear_num_value_heads\":4,"
    "\"linear_key_head_dim\":16,\"linear_value_head_dim\":16,\"attention_bias\":false,"
    "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000000.0,"
    "\"partial_rotary_factor\":0.25,\"mrope_section\":[2,1,1]}}";

/* One row of model-math §6 for the Qwen3.5 family; the builder fills the shared fields. */
typedef struct qwen_row {
  const char *model_type; /* "qwen3_5" / "qwen3_5_moe" (VLM) or the *_text types */
  int hidden, layers, heads, kv_heads, hk, hv;
  int intermediate; /* 0: omitted (MoE) */
  int experts, topk, moe_i, shared_i;
  int tie;
  int explicit_layer_types;
} qwen_row;

static void append(char *buf, size_t cap, const char *fmt, ...) PH_PRINTF(3, 4);
static void append(char *buf, size_t cap, const char *fmt, ...) {
  size_t n = strlen(buf);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + n, cap - n, fmt, ap);
  va_end(ap);
}

/* config.json as the shipped checkpoints write it: VLM wrapper with text_config when the type is
 * a wrapper, tie_word_embeddings at the top level. */
static void build_qwen(char *buf, size_t cap, const qwen_row *r) {
  int vlm = strstr(r->model_type, "_text") == NULL;
  int moe = strstr(r->model_type, "moe") != NULL;
  buf[0] = '\0';
  if (vlm)
    append(buf, cap,
           "{\"architectures\":[\"%s\"],\"model_type\":\"%s\",\"tie_word_embeddings\":%s,"
           "\"vision_config\":{\"depth\":27,\"hidden_size\":1152},\"text_config\":{"
           "\"model_type\":\"%s\",",
           moe ? "Qwen3_5MoeForConditionalGeneration" : "Qwen3_5ForConditionalGeneration",
           r->model_type, r->tie ? "true" : "false", moe ? "qwen3_5_moe_text" : "qwen3_5_text");
  else
    append(buf, cap, "{\"model_type\":\"%s\",\"tie_word_embeddings\":%s,", r->model_type,
           r->tie ? "true" : "false");
  append(buf, cap,
         "\"hidden_size\":%d,\"num_hidden_layers\":%d,\"num_attention_heads\":%d,"
         "\"num_key_value_heads\":%d,\"head_dim\":256,\"linear_num_key_heads\":%d,"
         "\"linear_num_value_heads\":%d,\"linear_key_head_dim\":128,\"linear_value_head_dim\":128,"
         "\"linear_conv_kernel_dim\":4,\"full_attention_interval\":4,\"vocab_size\":248320,"
         "\"rms_norm_eps\":1e-06,\"max_position_embeddings\":262144,\"attn_output_gate\":true,"
         "\"mamba_ssm_dtype\":\"float32\",\"mtp_num_hidden_layers\":1,\"dtype\":\"bfloat16\","
         "\"output_gate_type\":\"swish\",",
         r->hidden, r->layers, r->heads, r->kv_heads, r->hk, r->hv);
  if (r->intermediate) append(buf, cap, "\"intermediate_size\":%d,", r->intermediate);
  if (r->experts)
    append(buf, cap,
           "\"num_experts\":%d,\"num_experts_per_tok\":%d,\"moe_intermediate_size\":%d,"
           "\"shared_expert_intermediate_size\":%d,",
           r->experts, r->topk, r->moe_i, r->shared_i);
  if (r->explicit_layer_types) {
    append(buf, cap, "\"layer_types\":[");
    for (int i = 0; i < r->layers; i++)
      append(buf, cap, "%s\"%s\"", i ? "," : "",
             (i + 1) % 4 == 0 ? "full_attention" : "linear_attention");
    append(buf, cap, "],");
  }
  append(buf, cap,
         "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000000,"
         "\"partial_rotary_factor\":0.25,\"mrope_section\":[11,11,10],"
         "\"mrope_interleaved\":true}}");
  if (vlm) append(buf, cap, "}");
}

/* Checks what every Qwen3.5 row shares: D 256, rot 64, MRoPE [11,11,10] interleaved, θ 1e7,
 * full attention exactly at 3, 7, 11, ... */
static void check_qwen_common(const hf_config *c, const qwen_row *r) {
  CHECK_EQ_INT(c->family, FAMILY_QWEN35);
  CHECK_EQ_INT(c->hidden_size, r->hidden);
  CHECK_EQ_INT(c->n_layers, r->layers);
  CHECK_EQ_INT(c->n_heads, r->heads);
  CHECK_EQ_INT(c->n_kv_heads, r->kv_heads);
  CHECK_EQ_INT(c->head_dim, 256);
  CHECK_EQ_INT(c->vocab_size, 248320);
  CHECK_EQ_INT(c->dtype, PH_DTYPE_BF16);
  CHECK_EQ_INT(c->tie_word_embeddings, r->tie);
  CHECK_EQ_INT(c->mtp_num_hidden_layers, 1);
  CHECK_EQ_STR(c->output_gate_type, "swish");
  CHECK_EQ_INT(c->rope.rotary_dim, 64);
  CHECK_EQ_INT(c->rope.has_mrope, 1);
  CHECK_EQ_INT(c->rope.mrope_interleaved, 1);
  CHECK_EQ_INT(c->rope.mrope_section[0], 11);
  CHECK_EQ_INT(c->rope.mrope_section[1], 11);
  CHECK_EQ_INT(c->rope.mrope_section[2], 10);
  CHECK_NEAR(c->rope.theta, 1e7, 0);
  CHECK_EQ_INT(c->rope.scaling, ROPE_SCALING_NONE);
  CHECK_EQ_INT(c->lin.conv_kernel, 4);
  CHECK_EQ_INT(c->geom.n_full, r->layers / 4);
  CHECK_EQ_INT(c->geom.n_linear, r->layers - r->layers / 4);
  int wrong = 0;
  for (int i = 0; i < r->layers; i++) {
    int want = (i % 4 == 3) ? PH_LAYER_FULL_ATTENTION : PH_LAYER_LINEAR_ATTENTION;
    wrong += c->layer_kind[i] != want;
  }
  CHECK_EQ_INT(wrong, 0);
}

/* ---- golden checkpoints -------------------------------------------------------------------- */

static void load_golden(const char *name, hf_config *c, diag *d) {
  char dir[1024];
  check_data(dir, sizeof dir, "golden/%s/checkpoint", name);
  diag_clear(d);
  CHECK_STATUS(hf_config_load(dir, c, d), PH_OK, d->msg);
}

static void test_golden_f32(void) {
  hf_config c;
  diag d;
  load_golden("qwen35-tiny-f32", &c, &d);
  CHECK_EQ_STR(c.model_type, "qwen3_5_text");
  CHECK_EQ_STR(c.text_model_type, "qwen3_5_text");
  CHECK_EQ_STR(c.architecture, "Qwen3_5ForCausalLM");
  CHECK_EQ_STR(model_family_name(c.family), "qwen3_5");
  CHECK_EQ_INT(c.is_vlm, 0);
  CHECK_EQ_INT(c.dtype, PH_DTYPE_F32);
  CHECK_EQ_INT(c.tie_word_embeddings, 0);
  CHECK_EQ_INT(c.hidden_size, 64);
  CHECK_EQ_INT(c.n_layers, 4);
  CHECK_EQ_INT(c.vocab_size, 256);
  CHECK_EQ_INT(c.intermediate_size, 128);
  CHECK_EQ_INT(c.n_heads, 4);
  CHECK_EQ_INT(c.n_kv_heads, 2);
  CHECK_EQ_INT(c.head_dim, 32);
  CHECK_EQ_INT(c.max_position_embeddings, 262144);
  CHECK_NEAR(c.rms_norm_eps, 1e-6, 0);
  CHECK_EQ_INT(c.attention_bias, 0);
  static const uint8_t kinds[4] = {0, 0, 0, 1};
  for (int i = 0; i < 4; i++) CHECK_EQ_INT(c.layer_kind[i], kinds[i]);
  CHECK_EQ_INT(c.layer_kind[0], PH_LAYER_LINEAR_ATTENTION);
  CHECK_EQ_INT(c.layer_kind[3], PH_LAYER_FULL_ATTENTION);
  for (int i = 0; i < 4; i++) CHECK_EQ_INT(c.layer_is_moe[i], 0);
  CHECK_EQ_INT(c.lin.n_key_heads, 2);
  CHECK_EQ_INT(c.lin.n_value_heads, 4);
  CHECK_EQ_INT(c.lin.key_head_dim, 16);
  CHECK_EQ_INT(c.lin.value_head_dim, 16);
  CHECK_EQ_INT(c.lin.conv_kernel, 4);
  CHECK_EQ_INT(c.geom.key_dim, 32);
  CHECK_EQ_INT(c.geom.value_dim, 64);
  CHECK_EQ_INT(c.geom.conv_dim, 128);
  CHECK_EQ_INT(c.geom.n_full, 1);
  CHECK_EQ_INT(c.geom.n_linear, 3);
  CHECK_EQ_INT(c.rope.rotary_dim, 8);
  CHECK_NEAR(c.rope.theta, 1e7, 0);
  CHECK_NEAR(c.rope.partial_rotary_factor, 0.25, 0);
  CHECK_EQ_INT(c.rope.has_mrope, 1);
  CHECK_EQ_INT(c.rope.mrope_interleaved, 1);
  CHECK_EQ_INT(c.rope.mrope_section[0], 2);
  CHECK_EQ_INT(c.rope.mrope_section[1], 1);
  CHECK_EQ_INT(c.rope.mrope_section[2], 1);
  CHECK_EQ_INT(c.rope.scaling, ROPE_SCALING_NONE);
  /* 3 * (128*3*4 + 4*16*16*4) and 1 * 2 * 2 * 32 * 2 */
  CHECK_EQ_INT(hf_config_fixed_state_bytes(&c, PH_DTYPE_F32), 16896);
  CHECK_EQ_INT(hf_config_kv_bytes_per_token(&c, PH_DTYPE_BF16), 256);
  CHECK_EQ_INT(hf_config_kv_bytes_per_token(&c, PH_DTYPE_F32), 512);
}

static void test_golden_bf16_vlm(void) {
  hf_config c;
  diag d;
  load_golden("qwen35-tiny-bf16-vlm", &c, &d);
  CHECK_EQ_STR(c.model_type, "qwen3_5");
  CHECK_EQ_STR(c.text_model_type, "qwen3_5_text");
  CHECK_EQ_STR(c.architecture, "Qwen3_5ForConditionalGeneration");
  CHECK_EQ_INT(c.family, FAMILY_QWEN35);
  CHECK_EQ_INT(c.is_vlm, 1);
  CHECK_EQ_INT(c.dtype, PH_DTYPE_BF16);
  CHECK_EQ_INT(c.tie_word_embeddings, 1);
  CHECK_EQ_INT(c.hidden_size, 96);
  CHECK_EQ_INT(c.n_layers, 8);
  CHECK_EQ_INT(c.vocab_size, 320);
  CHECK_EQ_INT(c.intermediate_size, 160);
  CHECK_EQ_INT(c.n_heads, 6);
  CHECK_EQ_INT(c.n_kv_heads, 2);
  CHECK_EQ_INT(c.head_dim, 32);
  static const uint8_t kinds[8] = {0, 0, 0, 1, 0, 0, 0, 1};
  for (int i = 0; i < 8; i++) CHECK_EQ_INT(c.layer_kind[i], kinds[i]);
  CHECK_EQ_INT(c.lin.n_key_heads, 2);
  CHECK_EQ_INT(c.lin.n_value_heads, 6);
  CHECK_EQ_INT(c.lin.key_head_dim, 16);
  CHECK_EQ_INT(c.lin.value_head_dim, 24);
  CHECK_EQ_INT(c.geom.key_dim, 32);
  CHECK_EQ_INT(c.geom.value_dim, 144);
  CHECK_EQ_INT(c.geom.conv_dim, 208);
  CHECK_EQ_INT(c.geom.n_full, 2);
  CHECK_EQ_INT(c.geom.n_linear, 6);
  CHECK_EQ_INT(c.rope.rotary_dim, 8);
  CHECK_EQ_INT(c.rope.mrope_section[0], 2);
  CHECK_EQ_INT(c.rope.mrope_section[1], 1);
  CHECK_EQ_INT(c.rope.mrope_section[2], 1);
  CHECK_EQ_INT(c.rope.mrope_interleaved, 1);
  /* 6 * (208*3*4 + 6*24*16*4) and 2 * 2 * 2 * 32 * 2 */
  CHECK_EQ_INT(hf_config_fixed_state_bytes(&c, PH_DTYPE_F32), 70272);
  CHECK_EQ_INT(hf_config_kv_bytes_per_token(&c, PH_DTYPE_BF16), 512);
}

static void test_load_missing_dir(void) {
  hf_config c;
  diag d;
  diag_clear(&d);
  CHECK_STATUS(hf_config_load("/nonexistent/ph-model", &c, &d), PH_ERR_NOT_FOUND, d.msg);
  CHECK_CONTAINS(d.msg, "/nonexistent/ph-model/config.json");
}

/* ---- real shapes (model-math §6) ----------------------------------------------------------- */

static char big[16384];

static void test_qwen35_27b(void) {
  for (int explicit_types = 0; explicit_types < 2; explicit_types++) {
    qwen_row r = {"qwen3_5", 5120, 64, 24, 4, 16, 48, 17408, 0, 0, 0, 0, 0, explicit_types};
    build_qwen(big, sizeof big, &r);
    hf_config c;
    diag d;
    CHECK_STATUS(parse_str(big, &c, &d), PH_OK, d.msg);
    check_qwen_common(&c, &r);
    CHECK_EQ_INT(c.is_vlm, 1);
    CHECK_EQ_STR(c.text_model_type, "qwen3_5_text");
    CHECK_EQ_STR(c.architecture, "Qwen3_5ForConditionalGeneration");
    CHECK_EQ_INT(c.intermediate_size, 17408);
    CHECK_EQ_INT(c.lin.n_key_heads, 16);
    CHECK_EQ_INT(c.lin.n_value_heads, 48);
    CHECK_EQ_INT(c.geom.n_full, 16);
    CHECK_EQ_INT(c.geom.n_linear, 48);
    CHECK_EQ_INT(count_kind(&c, PH_LAYER_FULL_ATTENTION), 16);
    for (int i = 3; i < 64; i += 4) CHECK_EQ_INT(c.layer_kind[i], PH_LAYER_FULL_ATTENTION);
    CHECK_EQ_INT(c.geom.key_dim, 2048);
    CHECK_EQ_INT(c.geom.value_dim, 6144);
    CHECK_EQ_INT(c.geom.conv_dim, 10240);
    for (int i = 0; i < 64; i++) CHECK_EQ_INT(c.layer_is_moe[i], 0);
    CHECK_EQ_INT(hf_config_fixed_state_bytes(&c, PH_DTYPE_F32), 156893184); /* 149.6 MiB */
    CHECK_EQ_INT(hf_config_kv_bytes_per_token(&c, PH_DTYPE_BF16), 65536);
  }
}

static void test_qwen35_0_8b(void) {
  qwen_row r = {"qwen3_5", 1024, 24, 8, 2, 16, 16, 3584, 0, 0, 0, 0, 1, 1};
  build_qwen(big, sizeof big, &r);
  hf_config c;
  diag d;
  CHECK_STATUS(parse_str(big, &c, &d), PH_OK, d.msg);
  check_qwen_common(&c, &r);
  CHECK_EQ_INT(c.geom.conv_dim, 6144);
  CHECK_EQ_INT(c.geom.n_full, 6);
  CHECK_EQ_INT(hf_config_fixed_state_bytes(&c, PH_DTYPE_F32), 20201472); /* 19.3 MiB */
  CHECK_EQ_INT(hf_config_kv_bytes_per_token(&c, PH_DTYPE_BF16), 12288);
  /* bf16 conv state: 18 * (6144*3*2 + 16*128*128*4) */
  CHECK_EQ_INT(hf_config_fixed_state_bytes(&c, PH_DTYPE_BF16), 19537920);
}

static void test_qwen35_35b_a3b_moe(void) {
  qwen_row r = {"qwen3_5_moe", 2048, 40, 16, 2, 16, 32, 0, 256, 8, 512, 512, 0, 0};
  build_qwen(big, sizeof big, &r);
  hf_config c;
  diag d;
  CHECK_STATUS(parse_str(big, &c, &d), PH_OK, d.msg);
  check_qwen_common(&c, &r);
  CHECK_EQ_STR(c.model_type, "qwen3_5_moe");
  CHECK_EQ_STR(c.text_model_type, "qwen3_5_moe_text");
  CHECK_EQ_INT(c.is_vlm, 1);
  CHECK_EQ_INT(c.intermediate_size, 0);
  CHECK_EQ_INT(c.moe.n_experts, 256);
  CHECK_EQ_INT(c.moe.n_experts_per_tok, 8);
  CHECK_EQ_INT(c.moe.moe_intermediate_size, 512);
  CHECK_EQ_INT(c.moe.shared_intermediate_size, 512);
  CHECK_EQ_INT(c.moe.norm_topk_prob, 1);
  CHECK_EQ_STR(c.moe.scoring_func, "softmax");
  int n_moe = 0;
  for (int i = 0; i < 40; i++) n_moe += c.layer_is_moe[i];
  CHECK_EQ_INT(n_moe, 40);
  CHECK_EQ_INT(c.geom.conv_dim, 8192);
  CHECK_EQ_INT(hf_config_fixed_state_bytes(&c, PH_DTYPE_F32), 65863680); /* 62.8 MiB */
  CHECK_EQ_INT(hf_config_kv_bytes_per_token(&c, PH_DTYPE_BF16), 20480);
}

static const char NEXT_80B[] =
    "{\"architectures\":[\"Qwen3NextForCausalLM\"],\"model_type\":\"qwen3_next\","
    "\"hidden_size\":2048,\"num_hidden_layers\":48,\"num_attention_heads\":16,"
    "\"num_key_value_heads\":2,\"head_dim\":256,\"vocab_size\":151936,\"intermediate_size\":5120,"
    "\"linear_num_key_heads\":16,\"linear_num_value_heads\":32,\"linear_key_head_dim\":128,"
    "\"linear_value_head_dim\":128,\"linear_conv_kernel_dim\":4,\"full_attention_interval\":4,"
    "\"num_experts\":512,\"num_experts_per_tok\":10,\"moe_intermediate_size\":512,"
    "\"shared_expert_intermediate_size\":512,\"decoder_sparse_step\":1,\"mlp_only_layers\":[],"
    "\"norm_topk_prob\":true,\"rope_theta\":5000000,\"partial_rotary_factor\":0.25,"
    "\"rope_scaling\":null,\"rms_norm_eps\":1e-06,\"max_position_embeddings\":262144,"
    "\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\"}";

static void test_qwen3_next_80b(void) {
  hf_config c;
  diag d;
  CHECK_STATUS(parse_str(NEXT_80B, &c, &d), PH_OK, d.msg);
  CHECK_EQ_INT(c.family, FAMILY_QWEN3_NEXT);
  CHECK_EQ_STR(model_family_name(c.family), "qwen3_next");
  CHECK_EQ_INT(c.is_vlm, 0);
  CHECK_EQ_INT(c.dtype, PH_DTYPE_BF16);
  CHECK_NEAR(c.rope.theta, 5e6, 0);
  CHECK_EQ_INT(c.rope.rotary_dim, 64);
  CHECK_EQ_INT(c.rope.has_mrope, 0);
  CHECK_EQ_INT(c.geom.n_full, 12);
  CHECK_EQ_INT(c.geom.n_linear, 36);
  CHECK_EQ_INT(c.layer_kind[3], PH_LAYER_FULL_ATTENTION);
  CHECK_EQ_INT(c.layer_kind[4], PH_LAYER_LINEAR_ATTENTION);
  CHECK_EQ_INT(c.geom.conv_dim, 8192);
  CHECK_EQ_INT(c.intermediate_size, 5120);
  CHECK_EQ_INT(c.moe.n_experts, 512);
  CHECK_EQ_INT(c.moe.n_experts_per_tok, 10);
  int n_moe = 0;
  for (int i = 0; i < 48; i++) n_moe += c.layer_is_moe[i];
  CHECK_EQ_INT(n_moe, 48);
  CHECK_EQ_INT(hf_config_fixed_state_bytes(&c, PH_DTYPE_F32), 79036416); /* 75.4 MiB */
  CHECK_EQ_INT(hf_config_kv_bytes_per_token(&c, PH_DTYPE_BF16), 24576);

  /* decoder_sparse_step 2 and mlp_only_layers: MoE at odd i, except 5. */
  const char *j = edit(NEXT_80B, "\"decoder_sparse_step\":1,\"mlp_only_layers\":[]",
                       "\"decoder_sparse_step\":2,\"mlp_only_layers\":[5]");
  CHECK_STATUS(parse_str(j, &c, &d), PH_OK, d.msg);
  CHECK_EQ_INT(c.layer_is_moe[0], 0);
  CHECK_EQ_INT(c.layer_is_moe[1], 1);
  CHECK_EQ_INT(c.layer_is_moe[5], 0);
  CHECK_EQ_INT(c.layer_is_moe[7], 1);
  j = edit(NEXT_80B, "\"mlp_only_layers\":[]", "\"mlp_only_layers\":[48]");
  CHECK_STATUS(parse_str(j, &c, &d), PH_ERR_CONFIG_INVALID, d.msg);
  CHECK_CONTAINS(d.msg, "mlp_only_layers[0]");
  /* Some layer dense: intermediate_size becomes required. */
  j = edit(NEXT_80B, "\"intermediate_size\":5120,", "");
  CHECK_STATUS(parse_str(j, &c, &d), PH_OK, d.msg);
  j = edit(j, "\"mlp_only_layers\":[]", "\"mlp_only_layers\":[0]");
  CHECK_STATUS(parse_str(j, &c, &d), PH_ERR_CONFIG_MISSING_FIELD, d.msg);
  CHECK_CONTAINS(d.msg, "intermediate_size");
}

static const char DEEPSEEK_V3[] =
    "{\"architectures\":[\"DeepseekV3ForCausalLM\"],\"model_type\":\"deepseek_v3\","
    "\"hidden_size\":7168,\"num_hidden_layers\":61,\"num_attention_heads\":128,"
    "\"num_key_value_heads\":128,\"vocab_size\":129280,\"intermediate_size\":18432,"
    "\"moe_intermediate_size\":2048,\"n_routed_experts\":256,\"n_shared_experts\":1,"
    "\"num_experts_per_tok\":8,\"n_group\":8,\"topk_group\":4,\"topk_method\":\"noaux_tc\","
    "\"scoring_func\":\"sigmoid\",\"norm_topk_prob\":true,\"routed_scaling_factor\":2.5,"
    "\"first_k_dense_replace\":3,\"moe_layer_freq\":1,\"q_lora_rank\":1536,\"kv_lora_rank\":512,"
    "\"qk_nope_head_dim\":128,\"qk_rope_head_dim\":64,\"v_head_dim\":128,\"rope_theta\":10000,"
    "\"rope_scaling\":{\"type\":\"yarn\",\"factor\":40,\"original_max_position_embeddings\":4096,"
    "\"beta_fast\":32,\"beta_slow\":1,\"mscale\":1.0,\"mscale_all_dim\":1.0},"
    "\"max_position_embeddings\":163840,\"rms_norm_eps\":1e-06,\"tie_word_embeddings\":false,"
    "\"torch_dtype\":\"bfloat16\"}";

static void test_deepseek_v3(void) {
  hf_config c;
  diag d;
  CHECK_STATUS(parse_str(DEEPSEEK_V3, &c, &d), PH_OK, d.msg);
  CHECK_EQ_INT(c.family, FAMILY_DEEPSEEK);
  CHECK_EQ_STR(model_family_name(c.family), "deepseek");
  CHECK_EQ_INT(c.n_layers, 61);
  CHECK_EQ_INT(c.n_kv_heads, 128);
  CHECK_EQ_INT(count_kind(&c, PH_LAYER_MLA), 61);
  CHECK_EQ_INT(c.geom.n_full, 61);
  CHECK_EQ_INT(c.geom.n_linear, 0);
  CHECK_EQ_INT(c.full_attention_interval, 0);
  CHECK_EQ_INT(c.head_dim, 192);
  CHECK_EQ_INT(c.rope.rotary_dim, 64);
  CHECK_EQ_INT(c.rope.scaling, ROPE_SCALING_YARN);
  CHECK_NEAR(c.rope.factor, 40, 0);
  CHECK_EQ_INT(c.rope.original_max_position_embeddings, 4096);
  CHECK_EQ_INT(c.rope.interleave, 1);
  CHECK_EQ_INT(c.rope.has_mrope, 0);
  CHECK_EQ_INT(c.mla.q_lora_rank, 1536);
  CHECK_EQ_INT(c.mla.kv_lora_rank, 512);
  /* the literal is the value rounded to 6 significant digits (off by <= 5e-7); 1e-6 */
  CHECK_NEAR(c.mla.softmax_scale, 0.135234, 1e-6);
  CHECK_EQ_INT(c.layer_is_moe[2], 0);
  CHECK_EQ_INT(c.layer_is_moe[3], 1);
  CHECK_EQ_INT(c.layer_is_moe[60], 1);
  CHECK_EQ_INT(c.moe.n_experts, 256);
  CHECK_EQ_INT(c.moe.n_group, 8);
  CHECK_EQ_INT(c.moe.topk_group, 4);
  CHECK_NEAR(c.moe.routed_scaling_factor, 2.5, 0);
  CHECK_EQ_STR(c.moe.topk_method, "noaux_tc");
  CHECK_EQ_INT(hf_config_fixed_state_bytes(&c, PH_DTYPE_F32), 0);
  CHECK_EQ_INT(hf_config_kv_bytes_per_token(&c, PH_DTYPE_BF16), 61 * 576 * 2);
}

static const char DEEPSEEK_V2_LITE[] =
    "{\"architectures\":[\"DeepseekV2ForCausalLM\"],\"model_type\":\"deepseek_v2\","
    "\"hidden_size\":2048,\"num_hidden_layers\":27,\"num_attention_heads\":16,"
    "\"num_key_value_heads\":16,\"vocab_size\":102400,\"intermediate_size\":10944,"
    "\"moe_intermediate_size\":1408,\"n_routed_experts\":64,\"n_shared_experts\":2,"
    "\"num_experts_per_tok\":6,\"n_group\":1,\"topk_group\":1,\"topk_method\":\"greedy\","
    "\"scoring_func\":\"softmax\",\"norm_topk_prob\":false,\"routed_scaling_factor\":1.0,"
    "\"first_k_dense_replace\":1,\"moe_layer_freq\":1,\"q_lora_rank\":null,\"kv_lora_rank\":512,"
    "\"qk_nope_head_dim\":128,\"qk_rope_head_dim\":64,\"v_head_dim\":128,\"rope_theta\":10000,"
    "\"rope_scaling\":{\"type\":\"yarn\",\"factor\":40,\"original_max_position_embeddings\":4096,"
    "\"beta_fast\":32,\"beta_slow\":1,\"mscale\":0.707,\"mscale_all_dim\":0.707},"
    "\"max_position_embeddings\":163840,\"rms_norm_eps\":1e-06,\"tie_word_embeddings\":false,"
    "\"torch_dtype\":\"bfloat16\"}";

static void test_deepseek_v2_lite(void) {
  hf_config c;
  diag d;
  CHECK_STATUS(parse_str(DEEPSEEK_V2_LITE, &c, &d), PH_OK, d.msg);
  CHECK_EQ_INT(c.family, FAMILY_DEEPSEEK);
  CHECK_EQ_INT(count_kind(&c, PH_LAYER_MLA), 27);
  CHECK_EQ_INT(c.mla.q_lora_rank, 0);
  CHECK_EQ_INT(c.mla.v_head_dim, 128);
  /* HF's deepseek_v2 rotates adjacent pairs (2i, 2i+1) as complex numbers: interleaved, with
   * no config key; a rope_interleave written anyway is ignored, as HF ignores it. */
  CHECK_EQ_INT(c.rope.interleave, 1);
  CHECK_NEAR(c.rope.mscale_all_dim, 0.707, 0);
  CHECK_NEAR(c.mla.softmax_scale, 0.114721, 1e-6); /* 6 digits: <= 5e-7 off */
  CHECK_EQ_INT(c.layer_is_moe[0], 0);
  CHECK_EQ_INT(c.layer_is_moe[1], 1);
  CHECK_EQ_INT(c.moe.n_shared_experts, 2);
  CHECK_EQ_INT(c.moe.norm_topk_prob, 0);
  CHECK_EQ_INT(hf_config_kv_bytes_per_token(&c, PH_DTYPE_BF16), 27 * 576 * 2);

  const char *j = edit(DEEPSEEK_V2_LITE, "\"rope_theta\":10000,",
                       "\"rope_theta\":10000,\"rope_interleave\":false,");
  CHECK_STATUS(parse_str(j, &c, &d), PH_OK, d.msg);
  CHECK_EQ_INT(c.rope.interleave, 1);
  /* Without YaRN the scale is plain (dn+dr)^-1/2. */
  j = edit(DEEPSEEK_V2_LITE, "\"type\":\"yarn\"", "\"type\":\"default\"");
  CHECK_STATUS(parse_str(j, &c, &d), PH_OK, d.msg);
  /* the same double expression: a few ulps (~1e-16) apart at most */
  CHECK_NEAR(c.mla.softmax_scale, 1.0 / sqrt(192.0), 1e-12);
  /* The new spelling gives the same scale. */
  j = edit(DEEPSEEK_V2_LITE, "\"rope_scaling\"", "\"rope_parameters\"");
  j = edit(j, "\"type\":\"yarn\"", "\"rope_type\":\"yarn\"");
  CHECK_STATUS(parse_str(j, &c, &d), PH_OK, d.msg);
  CHECK_NEAR(c.mla.softmax_scale, 0.114721, 1e-6); /* 6 digits: <= 5e-7 off */
  /* DeepSeek needs the MLA sizes. */
  j = edit(DEEPSEEK_V2_LITE, "\"kv_lora_rank\":512,", "");
  CHECK_STATUS(parse_str(j, &c, &d), PH_ERR_CONFIG_MISSING_FIELD, d.msg);
  CHECK_CONTAINS(d.msg, "kv_lora_rank");
}

/* ---- MLA features the LATENT export refuses, glm_moe_dsa ----------------------------------- */

static void test_mla_feature_defaults(void) {
  hf_config c;
  diag d;
  CHECK_STATUS(parse_str(DEEPSEEK_V3, &c, &d), PH_OK, d.msg);
  CHECK_EQ_INT(c.mla_feat.use_dsa, 0);
  CHECK_EQ_INT(c.mla_feat.index_topk, 0);
  CHECK_EQ_INT(c.mla_feat.index_n_heads, 0);
  CHECK_EQ_INT(c.mla_feat.index_head_dim, 0);
  CHECK_EQ_INT(c.mla_feat.n_compress_ratios, 0);
  CHECK_EQ_INT(c.mla_feat.o_lora_rank, 0);
  CHECK_EQ_INT(c.mla_feat.o_groups, 1);
  CHECK_EQ_INT(c.mla_feat.hc_mult, 1);
  CHECK_EQ_INT(c.mla_feat.num_nextn_predict_layers, 0);
  CHECK_EQ_INT(c.mla_feat.qk_norm, 0);
  CHECK_EQ_INT(c.mla_feat.sliding_window, 0);
  CHECK_EQ_INT(c.mla_feat.head_sink, 0);
  CHECK_EQ_INT(c.rope.truncate, 1);
  CHECK_NEAR(c.rope.attention_factor, 0, 0);

  /* Every field read when written (values as a DeepSeek-V3.2 / V4 / GLM config would have
   * them). */
  const char *j = edit(DEEPSEEK_V3, "\"rope_theta\":10000,",
                       "\"rope_theta\":10000,\"use_dsa\":true,\"index_topk\":2048,"
                       "\"index_n_heads\":64,\"index_head_dim\":128,\"compress_ratios\":[0,4,128],"
                       "\"o_lora_rank\":1024,\"o_groups\":8,\"hc_mult\":4,"
                       "\"num_nextn_predict_layers\":1,\"use_qk_norm\":true,\"attn_qk_norm\":false,"
                       "\"sliding_window\":4096,\"head_sink\":true,\"rope_interleave\":false,");
  CHECK_STATUS(parse_str(j, &c, &d), PH_OK, d.msg);
  CHECK_EQ_INT(c.mla_feat.use_dsa, 1);
  CHECK_EQ_INT(c.mla_feat.index_topk, 2048);
  CHECK_EQ_INT(c.mla_feat.index_n_heads, 64);
  CHECK_EQ_INT(c.mla_feat.index_head_dim, 128);
  CHECK_EQ_INT(c.mla_feat.n_compress_ratios, 3);
  CHECK_EQ_INT(c.mla_feat.o_lora_rank, 1024);
  CHECK_EQ_INT(c.mla_feat.o_groups, 8);
  CHECK_EQ_INT(c.mla_feat.hc_mult, 4);
  CHECK_EQ_INT(c.mla_feat.num_nextn_predict_layers, 1);
  CHECK_EQ_INT(c.mla_feat.qk_norm, 1);
  CHECK_EQ_STR(c.mla_feat.qk_norm_key, "use_qk_norm");
  CHECK_EQ_INT(c.mla_feat.sliding_window, 4096);
  CHECK_EQ_INT(c.mla_feat.head_sink, 1);
  CHECK_EQ_INT(c.rope.interleave, 0); /* deepseek_v3 honours rope_interleave */
  /* A window written with use_sliding_window false is off (Qwen2 style); null is absent. */
  j = edit(DEEPSEEK_V3, "\"rope_theta\":10000,",
           "\"rope_theta\":10000,\"sliding_window\":4096,\"use_sliding_window\":false,"
           "\"attention_sink\":true,\"index_topk\":null,");
  CHECK_STATUS(parse_str(j, &c, &d), PH_OK, d.msg);
  CHECK_EQ_INT(c.mla_feat.sliding_window, 0);
  CHECK_EQ_INT(c.mla_feat.head_sink, 1);
  CHECK_EQ_INT(c.mla_feat.index_topk, 0);
  /* YaRN attention_factor and truncate. */
  j = edit(DEEPSEEK_V3, "\"mscale_all_dim\":1.0",
           "\"mscale_all_dim\":1.0,\"attention_factor\":1.5,"
           "\"truncate\":false");
  CHECK_STATUS(parse_str(j, &c, &d), PH_OK, d.msg);
  CHECK_NEAR(c.rope.attention_factor, 1.5, 0);
  CHECK_EQ_INT(c.rope.truncate, 0);
  /* Qwen configs never read them. */
  CHECK_STATUS(
      parse_str(edit(BASE, "\"attention_bias\":false,",
                     "\"attention_bias\":false,\"use_qk_norm\":\"x\",\"sliding_window\":4,"),
                &c, &d),
      PH_OK, d.msg);
  CHECK_EQ_INT(c.mla_feat.sliding_window, 0);
}

/* Wrong JSON types are PH_ERR_CONFIG_INVALID naming the field. */
static void test_err_mla_feature_types(void) {
  static const struct {
    const char *insert, *field;
  } cases[] = {
      {"\"use_dsa\":1,", "use_dsa"},
      {"\"index_topk\":\"2048\",", "index_topk"},
      {"\"index_n_heads\":2.5,", "index_n_heads"},
      {"\"index_head_dim\":-1,", "index_head_dim"},
      {"\"compress_ratios\":4,", "compress_ratios"},
      {"\"o_lora_rank\":true,", "o_lora_rank"},
      {"\"o_groups\":[1],", "o_groups"},
      {"\"hc_mult\":\"4\",", "hc_mult"},
      {"\"num_nextn_predict_layers\":-1,", "num_nextn_predict_layers"},
      {"\"attn_qk_norm\":1,", "attn_qk_norm"},
      {"\"attn_qk_norm_full\":\"true\",", "attn_qk_norm_full"},
      {"\"use_qk_norm\":0,", "use_qk_norm"},
      {"\"qk_layernorm\":{},", "qk_layernorm"},
      {"\"sliding_window\":\"4096\",", "sliding_window"},
      {"\"use_sliding_window\":1,", "use_sliding_window"},
      {"\"attention_sink\":1,", "attention_sink"},
      {"\"head_sink\":\"yes\",", "head_sink"},
      {"\"rope_interleave\":1,", "rope_interleave"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    hf_config c;
    diag d;
    char to[256];
    snprintf(to, sizeof to, "\"rope_theta\":10000,%s", cases[i].insert);
    CHECK_STATUS(parse_str(edit(DEEPSEEK_V3, "\"rope_theta\":10000,", to), &c, &d),
                 PH_ERR_CONFIG_INVALID, cases[i].insert);
    CHECK_CONTAINS(d.msg, cases[i].field);
  }
  /* Also in V2 and GLM configs, where HF ignores rope_interleave: still type-checked. */
  hf_config c;
  diag d;
  CHECK_STATUS(parse_str(edit(DEEPSEEK_V2_LITE, "\"rope_theta\":10000,",
                              "\"rope_theta\":10000,\"rope_interleave\":\"no\","),
                         &c, &d),
               PH_ERR_CONFIG_INVALID, d.msg);
  CHECK_CONTAINS(d.msg, "rope_interleave");
}

/* A GLM-5 config as published (GlmMoeDsaConfig's defaults written out): MLA, V3 routing, the
 * DSA indexer on unless use_dsa is false. */
static const char GLM_MOE_DSA[] =
    "{\"architectures\":[\"GlmMoeDsaForCausalLM\"],\"model_type\":\"glm_moe_dsa\","
    "\"hidden_size\":6144,\"num_hidden_layers\":78,\"num_attention_heads\":64,"
    "\"num_key_value_heads\":64,\"vocab_size\":154880,\"intermediate_size\":12288,"
    "\"moe_intermediate_size\":2048,\"n_routed_experts\":256,\"n_shared_experts\":1,"
    "\"num_experts_per_tok\":8,\"routed_scaling_factor\":2.5,\"kv_lora_rank\":512,"
    "\"q_lora_rank\":2048,\"qk_rope_head_dim\":64,\"v_head_dim\":256,\"qk_nope_head_dim\":192,"
    "\"index_topk\":2048,\"num_nextn_predict_layers\":1,\"max_position_embeddings\":202752,"
    "\"rope_parameters\":{\"rope_theta\":8000000,\"rope_type\":\"default\"},"
    "\"tie_word_embeddings\":false,\"dtype\":\"bfloat16\"}";

static void test_glm_moe_dsa(void) {
  hf_config c;
  diag d;
  CHECK_STATUS(parse_str(GLM_MOE_DSA, &c, &d), PH_OK, d.msg);
  CHECK_EQ_INT(c.family, FAMILY_DEEPSEEK);
  CHECK_EQ_STR(c.model_type, "glm_moe_dsa");
  CHECK_EQ_INT(count_kind(&c, PH_LAYER_MLA), 78);
  CHECK_EQ_INT(c.head_dim, 256);
  CHECK_EQ_INT(c.rope.rotary_dim, 64);
  CHECK_EQ_INT(c.rope.interleave, 0); /* HF: rotate_half on q_pe / k_pe */
  CHECK_NEAR(c.rope.theta, 8e6, 0);
  CHECK_NEAR(c.mla.softmax_scale, 0.0625, 0); /* 256^-1/2, no YaRN */
  CHECK_NEAR(c.rms_norm_eps, 1e-5, 0);        /* GlmMoeDsaConfig default */
  CHECK_EQ_INT(c.mla_feat.use_dsa, 1);        /* absent: HF runs DSA on every layer */
  CHECK_EQ_INT(c.mla_feat.index_topk, 2048);
  CHECK_EQ_INT(c.mla_feat.index_n_heads, 32); /* defaults */
  CHECK_EQ_INT(c.mla_feat.index_head_dim, 128);
  CHECK_EQ_INT(c.mla_feat.num_nextn_predict_layers, 1);
  CHECK_EQ_INT(c.moe.first_k_dense_replace, 3);
  CHECK_EQ_INT(c.layer_is_moe[2], 0);
  CHECK_EQ_INT(c.layer_is_moe[3], 1);
  CHECK_EQ_INT(c.layer_is_moe[77], 1);
  CHECK_EQ_INT(c.moe.n_group, 1);
  CHECK_EQ_INT(c.moe.topk_group, 1);
  CHECK_EQ_INT(c.moe.norm_topk_prob, 1);
  CHECK_EQ_STR(c.moe.scoring_func, "sigmoid");
  CHECK_EQ_STR(c.moe.topk_method, "noaux_tc");
  CHECK_EQ_INT(hf_config_kv_bytes_per_token(&c, PH_DTYPE_BF16), 78 * 576 * 2);

  /* use_dsa false: the full-attention export (the indexer fields stay, vestigial). HF's
   * router ignores scoring_func / topk_method; so do we, after the type check. */
  const char *j = edit(GLM_MOE_DSA, "\"index_topk\":2048,",
                       "\"index_topk\":2048,\"use_dsa\":false,\"scoring_func\":\"softmax\","
                       "\"topk_method\":\"greedy\",\"rope_interleave\":true,");
  CHECK_STATUS(parse_str(j, &c, &d), PH_OK, d.msg);
  CHECK_EQ_INT(c.mla_feat.use_dsa, 0);
  CHECK_EQ_INT(c.mla_feat.index_topk, 2048);
  CHECK_EQ_STR(c.moe.scoring_func, "sigmoid");
  CHECK_EQ_STR(c.moe.topk_method, "noaux_tc");
  CHECK_EQ_INT(c.rope.interleave, 0);

  /* mlp_layer_types overrides first_k_dense_replace. */
  char buf[4096];
  snprintf(buf, sizeof buf, "%s",
           edit(GLM_MOE_DSA, "\"num_hidden_layers\":78", "\"num_hidden_layers\":4"));
  j = edit(buf, "\"index_topk\":2048,",
           "\"index_topk\":2048,\"mlp_layer_types\":[\"dense\",\"sparse\",\"dense\",\"sparse\"],");
  CHECK_STATUS(parse_str(j, &c, &d), PH_OK, d.msg);
  CHECK_EQ_INT(c.layer_is_moe[0], 0);
  CHECK_EQ_INT(c.layer_is_moe[1], 1);
  CHECK_EQ_INT(c.layer_is_moe[2], 0);
  CHECK_EQ_INT(c.layer_is_moe[3], 1);
  j = edit(buf, "\"index_topk\":2048,", "\"index_topk\":2048,\"mlp_layer_types\":[\"dense\"],");
  CHECK_STATUS(parse_str(j, &c, &d), PH_ERR_CONFIG_INCONSISTENT, d.msg);
  CHECK_CONTAINS(d.msg, "mlp_layer_types");
  j = edit(buf, "\"index_topk\":2048,",
           "\"index_topk\":2048,\"mlp_layer_types\":[\"dense\",\"moe\",\"dense\",\"dense\"],");
  CHECK_STATUS(parse_str(j, &c, &d), PH_ERR_CONFIG_INVALID, d.msg);
  CHECK_CONTAINS(d.msg, "mlp_layer_types[1]");
  j = edit(buf, "\"index_topk\":2048,", "\"index_topk\":2048,\"mlp_layer_types\":\"dense\",");
  CHECK_STATUS(parse_str(j, &c, &d), PH_ERR_CONFIG_INVALID, d.msg);
  CHECK_CONTAINS(d.msg, "mlp_layer_types");
  j = edit(buf, "\"n_routed_experts\":256,", "");
  j = edit(j, "\"index_topk\":2048,",
           "\"index_topk\":2048,\"mlp_layer_types\":[\"dense\",\"sparse\",\"dense\",\"dense\"],");
  CHECK_STATUS(parse_str(j, &c, &d), PH_ERR_CONFIG_INCONSISTENT, d.msg);
  CHECK_CONTAINS(d.msg, "n_routed_experts");
  /* The unknown-type message lists glm_moe_dsa. */
  CHECK_STATUS(parse_str(edit(GLM_MOE_DSA, "glm_moe_dsa", "glm4_moe"), &c, &d),
               PH_ERR_UNKNOWN_MODEL_TYPE, d.msg);
  CHECK_CONTAINS(d.msg, "glm_moe_dsa");
}

/* GLM-4.7-Flash (glm4_moe_lite): Glm4MoeLiteConfig's defaults written out. DeepSeek-V3's model
 * with GLM defaults; no DSA. */
static const char GLM4_MOE_LITE[] =
    "{\"architectures\":[\"Glm4MoeLiteForCausalLM\"],\"model_type\":\"glm4_moe_lite\","
    "\"hidden_size\":2048,\"num_hidden_layers\":47,\"num_attention_heads\":20,"
    "\"num_key_value_heads\":20,\"vocab_size\":154880,\"intermediate_size\":10240,"
    "\"moe_intermediate_size\":1536,\"n_routed_experts\":64,\"n_shared_experts\":1,"
    "\"num_experts_per_tok\":4,\"kv_lora_rank\":512,\"q_lora_rank\":768,"
    "\"qk_rope_head_dim\":64,\"v_head_dim\":256,\"qk_nope_head_dim\":192,"
    "\"rope_parameters\":{\"rope_theta\":1000000,\"rope_type\":\"default\"},"
    "\"dtype\":\"bfloat16\"}";

static void test_glm4_moe_lite(void) {
  hf_config c;
  diag d;
  CHECK_STATUS(parse_str(GLM4_MOE_LITE, &c, &d), PH_OK, d.msg);
  CHECK_EQ_INT(c.family, FAMILY_DEEPSEEK);
  CHECK_EQ_INT(count_kind(&c, PH_LAYER_MLA), 47);
  CHECK_EQ_INT(c.head_dim, 256);
  CHECK_EQ_INT(c.mla.q_lora_rank, 768);
  CHECK_EQ_INT(c.rope.interleave, 1); /* rope_interleave default true */
  CHECK_NEAR(c.rms_norm_eps, 1e-5, 0);
  CHECK_NEAR(c.moe.routed_scaling_factor, 1.8, 0);
  CHECK_EQ_INT(c.moe.n_group, 1);
  CHECK_EQ_INT(c.moe.topk_group, 1);
  CHECK_EQ_INT(c.moe.norm_topk_prob, 1);
  CHECK_EQ_INT(c.moe.n_shared_experts, 1);
  CHECK_EQ_STR(c.moe.scoring_func, "sigmoid");
  CHECK_EQ_STR(c.moe.topk_method, "noaux_tc");
  CHECK_EQ_INT(c.layer_is_moe[0], 0); /* [dense] + [sparse] * 46 */
  CHECK_EQ_INT(c.layer_is_moe[1], 1);
  CHECK_EQ_INT(c.layer_is_moe[46], 1);
  CHECK_EQ_INT(c.mla_feat.use_dsa, 0);
  CHECK_EQ_INT(c.mla_feat.index_topk, 0);
  CHECK_NEAR(c.mla.softmax_scale, 0.0625, 0);
  const char *j =
      edit(GLM4_MOE_LITE, "\"kv_lora_rank\":512,",
           "\"kv_lora_rank\":512,\"rope_interleave\":false,\"first_k_dense_replace\":2,");
  CHECK_STATUS(parse_str(j, &c, &d), PH_OK, d.msg);
  CHECK_EQ_INT(c.rope.interleave, 0); /* read, as in V3 */
  CHECK_EQ_INT(c.layer_is_moe[1], 0);
  CHECK_EQ_INT(c.layer_is_moe[2], 1);
}

/* ---- rope spellings, dtype and wrapper fallbacks ------------------------------------------- */

static void test_rope_parameters_win(void) {
  hf_config c;
  diag d;
  /* Both spellings: rope_parameters (θ 1e7, factor 0.25) beats top-level θ 5000 / 0.5, and its
   * "default" beats rope_scaling's yarn. */
  const char *j = edit(BASE, "\"attention_bias\":false,",
                       "\"attention_bias\":false,\"rope_theta\":5000,\"partial_rotary_factor\":0.5,"
                       "\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4},");
  CHECK_STATUS(parse_str(j, &c, &d), PH_OK, d.msg);
  CHECK_NEAR(c.rope.theta, 1e7, 0);
  CHECK_NEAR(c.rope.partial_rotary_factor, 0.25, 0);
  CHECK_EQ_INT(c.rope.rotary_dim, 8);
  CHECK_EQ_INT(c.rope.scaling, ROPE_SCALING_NONE);
  CHECK_NEAR(c.rope.factor, 4, 0); /* only rope_scaling gives it */

  /* Older spelling alone: top-level values and rope_scaling are used. */
  char old[2048];
  snprintf(old, sizeof old, "%s",
           edit(BASE,
                "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000000.0,"
                "\"partial_rotary_factor\":0.25,\"mrope_section\":[2,1,1]}",
                "\"rope_theta\":5000,\"partial_rotary_factor\":0.5,\"rope_scaling\":{"
                "\"rope_type\":\"linear\",\"factor\":2.0,\"mrope_section\":[4,2,2],"
                "\"mrope_interleaved\":false}"));
  CHECK_STATUS(parse_str(old, &c, &d), PH_OK, d.msg);
  CHECK_NEAR(c.rope.theta, 5000, 0);
  CHECK_EQ_INT(c.rope.rotary_dim, 16);
  CHECK_EQ_INT(c.rope.scaling, ROPE_SCALING_LINEAR);
  CHECK_NEAR(c.rope.factor, 2, 0);
  CHECK_EQ_INT(c.rope.mrope_section[0], 4);
  CHECK_EQ_INT(c.rope.mrope_interleaved, 0);

  /* Nothing given: θ 10000, factor 0.25 (rot 8 of 32), but [11,11,10] would need rot 64. */
  j = edit(BASE,
           ",\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000000.0,"
           "\"partial_rotary_factor\":0.25,\"mrope_section\":[2,1,1]}",
           "");
  CHECK_STATUS(parse_str(j, &c, &d), PH_ERR_CONFIG_INCONSISTENT, d.msg);
  CHECK_CONTAINS(d.msg, "mrope_section");
  j = edit(j, "\"head_dim\":32", "\"head_dim\":256");
  CHECK_STATUS(parse_str(j, &c, &d), PH_OK, d.msg);
  CHECK_NEAR(c.rope.theta, 10000, 0);
  CHECK_EQ_INT(c.rope.rotary_dim, 64);
  CHECK_EQ_INT(c.rope.has_mrope, 1);
  CHECK_EQ_INT(c.rope.mrope_interleaved, 1);
  CHECK_EQ_INT(c.lin.conv_kernel, 4);
  CHECK_NEAR(c.rms_norm_eps, 1e-6, 0);
  CHECK_EQ_INT(c.full_attention_interval, 4);
  CHECK_EQ_INT(c.max_position_embeddings, 0);
  CHECK_EQ_INT(c.dtype, PH_DTYPE_F32);
  /* rope_scaling null is allowed. */
  j = edit(BASE, "\"attention_bias\":false,", "\"attention_bias\":false,\"rope_scaling\":null,");
  CHECK_STATUS(parse_str(j, &c, &d), PH_OK, d.msg);
}

static void test_dtype_and_wrapper_fallbacks(void) {
  hf_config c;
  diag d;
  const char *j = edit(BASE, "{", "{\"torch_dtype\":\"float16\",");
  CHECK_STATUS(parse_str(j, &c, &d), PH_OK, d.msg);
  CHECK_EQ_INT(c.dtype, PH_DTYPE_F16);
  j = edit(BASE, "{", "{\"torch_dtype\":\"float16\",\"dtype\":\"bfloat16\",");
  CHECK_STATUS(parse_str(j, &c, &d), PH_OK, d.msg);
  CHECK_EQ_INT(c.dtype, PH_DTYPE_BF16);
  j = edit(BASE, "{", "{\"dtype\":\"float64\",");
  CHECK_STATUS(parse_str(j, &c, &d), PH_ERR_CONFIG_INVALID, d.msg);
  CHECK_CONTAINS(d.msg, "dtype");
  CHECK_CONTAINS(d.msg, "float64");

  /* Wrapper: text_config wins, the top level is the fallback. */
  char wrapped[4096];
  snprintf(wrapped, sizeof wrapped,
           "{\"model_type\":\"qwen3_5\",\"tie_word_embeddings\":true,\"dtype\":\"float16\","
           "\"text_config\":%s}",
           BASE);
  CHECK_STATUS(parse_str(wrapped, &c, &d), PH_OK, d.msg);
  CHECK_EQ_INT(c.is_vlm, 1);
  CHECK_EQ_STR(c.text_model_type, "qwen3_5_text");
  CHECK_EQ_INT(c.tie_word_embeddings, 1);
  CHECK_EQ_INT(c.dtype, PH_DTYPE_F16);
  j = edit(wrapped, "\"attention_bias\"",
           "\"dtype\":\"bfloat16\",\"tie_word_embeddings\":false,"
           "\"attention_bias\"");
  CHECK_STATUS(parse_str(j, &c, &d), PH_OK, d.msg);
  CHECK_EQ_INT(c.tie_word_embeddings, 0);
  CHECK_EQ_INT(c.dtype, PH_DTYPE_BF16);
  /* Errors inside text_config carry its path. */
  j = edit(wrapped, "\"hidden_size\":64,", "");
  CHECK_STATUS(parse_str(j, &c, &d), PH_ERR_CONFIG_MISSING_FIELD, d.msg);
  CHECK_CONTAINS(d.msg, "text_config.hidden_size");
  /* The text model type must match the wrapper. */
  j = edit(wrapped, "\"qwen3_5_text\"", "\"qwen3_5_moe_text\"");
  CHECK_STATUS(parse_str(j, &c, &d), PH_ERR_CONFIG_INCONSISTENT, d.msg);
  CHECK_CONTAINS(d.msg, "text_config.model_type");
}

/* ---- one test per typed error ------------------------------------------------------------- */

/* Parses json and checks the status and that the message names `needle`. */
static void expect_error(const char *json, ph_status want, const char *needle) {
  hf_config c;
  diag d;
  CHECK_STATUS(parse_str(json, &c, &d), want, d.msg);
  CHECK_EQ_INT(d.status, want);
  CHECK_CONTAINS(d.msg, needle);
  CHECK_EQ_INT(c.n_layers, 0); /* nothing half-filled is left behind */
}

static void test_base_is_valid(void) {
  hf_config c;
  diag d;
  CHECK_STATUS(parse_str(BASE, &c, &d), PH_OK, d.msg);
  CHECK_EQ_STR(d.msg, "");
}

static void test_err_unknown_model_type(void) {
  const char *j = edit(BASE, "\"qwen3_5_text\"", "\"llama\"");
  expect_error(j, PH_ERR_UNKNOWN_MODEL_TYPE, "llama");
  expect_error(j, PH_ERR_UNKNOWN_MODEL_TYPE, "model_type");
  expect_error(j, PH_ERR_UNKNOWN_MODEL_TYPE, "qwen3_5_moe_text"); /* the supported list */
  expect_error(edit(BASE, "\"model_type\":\"qwen3_5_text\",", ""), PH_ERR_CONFIG_MISSING_FIELD,
               "model_type");
  expect_error(edit(BASE, "\"qwen3_5_text\"", "35"), PH_ERR_CONFIG_INVALID, "model_type");
}

static void test_err_missing_hidden_size(void) {
  expect_error(edit(BASE, "\"hidden_size\":64,", ""), PH_ERR_CONFIG_MISSING_FIELD, "hidden_size");
  expect_error(edit(BASE, "\"hidden_size\":64,", "\"hidden_size\":null,"),
               PH_ERR_CONFIG_MISSING_FIELD, "hidden_size");
  expect_error(edit(BASE, "\"linear_key_head_dim\":16,", ""), PH_ERR_CONFIG_MISSING_FIELD,
               "linear_key_head_dim");
  expect_error(edit(BASE, "\"num_key_value_heads\":2,", ""), PH_ERR_CONFIG_MISSING_FIELD,
               "num_key_value_heads");
  expect_error(edit(BASE, "\"intermediate_size\":128,", ""), PH_ERR_CONFIG_MISSING_FIELD,
               "intermediate_size");
}

static void test_err_missing_text_config(void) {
  expect_error(edit(BASE, "\"qwen3_5_text\"", "\"qwen3_5\""), PH_ERR_CONFIG_MISSING_FIELD,
               "text_config");
  expect_error(edit(BASE, "\"qwen3_5_text\",", "\"qwen3_5_moe\",\"text_config\":[],"),
               PH_ERR_CONFIG_INVALID, "text_config");
}

static void test_err_heads_not_divisible(void) {
  const char *j = edit(BASE, "\"num_attention_heads\":4,\"num_key_value_heads\":2",
                       "\"num_attention_heads\":6,\"num_key_value_heads\":4");
  expect_error(j, PH_ERR_CONFIG_INCONSISTENT, "num_attention_heads = 6");
  expect_error(j, PH_ERR_CONFIG_INCONSISTENT, "num_key_value_heads = 4");
}

static void test_err_linear_heads_not_divisible(void) {
  const char *j = edit(BASE, "\"linear_num_value_heads\":4", "\"linear_num_value_heads\":3");
  expect_error(j, PH_ERR_CONFIG_INCONSISTENT, "linear_num_value_heads = 3");
  expect_error(j, PH_ERR_CONFIG_INCONSISTENT, "linear_num_key_heads = 2");
}

static void test_err_mrope_sum(void) {
  const char *j = edit(BASE, "[2,1,1]", "[2,2,1]");
  expect_error(j, PH_ERR_CONFIG_INCONSISTENT, "mrope_section");
  expect_error(edit(BASE, "[2,1,1]", "[3,1]"), PH_ERR_CONFIG_INVALID, "mrope_section");
  expect_error(edit(BASE, "[2,1,1]", "[2,1,-1]"), PH_ERR_CONFIG_INVALID, "mrope_section[2]");
}

static void test_err_layer_types_length(void) {
  const char *j = edit(BASE, "\"attention_bias\"",
                       "\"layer_types\":[\"linear_attention\",\"full_attention\"],"
                       "\"attention_bias\"");
  expect_error(j, PH_ERR_CONFIG_INCONSISTENT, "layer_types");
  expect_error(j, PH_ERR_CONFIG_INCONSISTENT, "num_hidden_layers = 4");
}

static void test_err_layer_types_entry(void) {
  const char *j = edit(BASE, "\"attention_bias\"",
                       "\"layer_types\":[\"linear_attention\",\"linear_attention\","
                       "\"sliding_attention\",\"full_attention\"],\"attention_bias\"");
  expect_error(j, PH_ERR_CONFIG_INVALID, "layer_types[2]");
  expect_error(j, PH_ERR_CONFIG_INVALID, "sliding_attention");
  j = edit(BASE, "\"attention_bias\"",
           "\"layer_types\":[\"linear_attention\",1,\"linear_attention\",\"full_attention\"],"
           "\"attention_bias\"");
  expect_error(j, PH_ERR_CONFIG_INVALID, "layer_types[1]");
}

static void test_err_hidden_size_string(void) {
  expect_error(edit(BASE, "\"hidden_size\":64", "\"hidden_size\":\"64\""), PH_ERR_CONFIG_INVALID,
               "hidden_size");
  expect_error(edit(BASE, "\"hidden_size\":64", "\"hidden_size\":true"), PH_ERR_CONFIG_INVALID,
               "hidden_size");
  expect_error(edit(BASE, "\"attention_bias\":false", "\"attention_bias\":0"),
               PH_ERR_CONFIG_INVALID, "attention_bias");
  expect_error(edit(BASE, "\"rope_theta\":10000000.0", "\"rope_theta\":\"1e7\""),
               PH_ERR_CONFIG_INVALID, "rope_parameters.rope_theta");
}

static void test_err_hidden_size_fraction(void) {
  expect_error(edit(BASE, "\"hidden_size\":64", "\"hidden_size\":96.5"), PH_ERR_CONFIG_INVALID,
               "hidden_size");
  /* An integral real is still an integer. */
  hf_config c;
  diag d;
  CHECK_STATUS(parse_str(edit(BASE, "\"hidden_size\":64", "\"hidden_size\":64.0"), &c, &d), PH_OK,
               d.msg);
  CHECK_EQ_INT(c.hidden_size, 64);
}

static void test_err_malformed_json(void) {
  static const char bad[] = "{\n  \"model_type\": \"qwen3_5_text\",\n  \"hidden_size\": 64,,\n}";
  expect_error(bad, PH_ERR_JSON, "line 3");
  expect_error("", PH_ERR_JSON, "line");
  expect_error("{\"model_type\":\"qwen3_5_text\",\"model_type\":\"qwen3_5\"}", PH_ERR_JSON,
               "duplicate");
  expect_error("[1,2]", PH_ERR_CONFIG_INVALID, "top level");
  /* Every prefix of a valid config fails cleanly. */
  hf_config c;
  diag d;
  int bad_status = 0;
  for (size_t n = 0; n + 1 < sizeof BASE; n++) {
    diag_clear(&d);
    bad_status += hf_config_parse(BASE, n, &c, &d) != PH_ERR_JSON;
  }
  CHECK_EQ_INT(bad_status, 0);
}

static void test_err_unsupported_rope(void) {
  const char *j = edit(BASE, "\"rope_type\":\"default\"", "\"rope_type\":\"dynamic\"");
  expect_error(j, PH_ERR_UNSUPPORTED, "dynamic");
  expect_error(j, PH_ERR_UNSUPPORTED, "rope_parameters.rope_type");
  j = edit(DEEPSEEK_V3, "\"type\":\"yarn\"", "\"type\":\"llama3\"");
  expect_error(j, PH_ERR_UNSUPPORTED, "rope_scaling.type");
}

static void test_err_negative_size(void) {
  expect_error(edit(BASE, "\"intermediate_size\":128", "\"intermediate_size\":-128"),
               PH_ERR_CONFIG_INVALID, "intermediate_size");
  expect_error(edit(BASE, "\"num_hidden_layers\":4", "\"num_hidden_layers\":0"),
               PH_ERR_CONFIG_INVALID, "num_hidden_layers");
  expect_error(edit(BASE, "\"rope_theta\":10000000.0", "\"rope_theta\":-1"), PH_ERR_CONFIG_INVALID,
               "rope_theta");
}

static void test_err_limits(void) {
  expect_error(edit(BASE, "\"hidden_size\":64", "\"hidden_size\":2000000"), PH_ERR_LIMIT,
               "hidden_size");
  expect_error(edit(BASE, "\"vocab_size\":256", "\"vocab_size\":33554432"), PH_ERR_LIMIT,
               "vocab_size");
  expect_error(edit(BASE, "\"num_hidden_layers\":4", "\"num_hidden_layers\":513"), PH_ERR_LIMIT,
               "num_hidden_layers");
  expect_error(edit(BASE, "\"hidden_size\":64", "\"hidden_size\":1e300"), PH_ERR_CONFIG_INVALID,
               "hidden_size");
}

static void test_err_other_inconsistencies(void) {
  /* int(32 * 0.1) = 3: odd rotary dim. */
  expect_error(edit(BASE, "\"partial_rotary_factor\":0.25", "\"partial_rotary_factor\":0.1"),
               PH_ERR_CONFIG_INCONSISTENT, "partial_rotary_factor");
  expect_error(edit(BASE, "\"partial_rotary_factor\":0.25", "\"partial_rotary_factor\":1e300"),
               PH_ERR_CONFIG_INCONSISTENT, "head_dim");
  const char *j = edit(NEXT_80B, "\"num_experts_per_tok\":10", "\"num_experts_per_tok\":600");
  expect_error(j, PH_ERR_CONFIG_INCONSISTENT, "num_experts_per_tok = 600");
  j = edit(NEXT_80B, "\"shared_expert_intermediate_size\":512,", "");
  expect_error(j, PH_ERR_CONFIG_MISSING_FIELD, "shared_expert_intermediate_size");
  expect_error(edit(BASE, "\"attention_bias\"", "\"output_gate_type\":\"gelu\",\"attention_bias\""),
               PH_ERR_UNSUPPORTED, "output_gate_type");
}

/* Issue 10 defect 6: a FIFO given as config.json blocked open() forever. */
static void test_fifo_config(void) {
  char dir[2048], path[4096];
  snprintf(dir, sizeof dir, "%s/fifo_config", check_env("PH_TMP_DIR"));
  diag d;
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
  CHECK(ft_fifo(path, dir, "config.json"));
  hf_config c;
  ft_watchdog(10);
  CHECK_STATUS(hf_config_load(dir, &c, &d), PH_ERR_IO, d.msg);
  ft_watchdog(0);
  CHECK_CONTAINS(d.msg, "config.json: is a FIFO, not a regular file");
}

int main(void) {
  RUN(test_golden_f32);
  RUN(test_golden_bf16_vlm);
  RUN(test_load_missing_dir);
  RUN(test_qwen35_27b);
  RUN(test_qwen35_0_8b);
  RUN(test_qwen35_35b_a3b_moe);
  RUN(test_qwen3_next_80b);
  RUN(test_deepseek_v3);
  RUN(test_deepseek_v2_lite);
  RUN(test_mla_feature_defaults);
  RUN(test_err_mla_feature_types);
  RUN(test_glm_moe_dsa);
  RUN(test_glm4_moe_lite);
  RUN(test_rope_parameters_win);
  RUN(test_dtype_and_wrapper_fallbacks);
  RUN(test_base_is_valid);
  RUN(test_err_unknown_model_type);
  RUN(test_err_missing_hidden_size);
  RUN(test_err_missing_text_config);
  RUN(test_err_heads_not_divisible);
  RUN(test_err_linear_heads_not_divisible);
  RUN(test_err_mrope_sum);
  RUN(test_err_layer_types_length);
  RUN(test_err_layer_types_entry);
  RUN(test_err_hidden_size_string);
  RUN(test_err_hidden_size_fraction);
  RUN(test_err_malformed_json);
  RUN(test_err_unsupported_rope);
  RUN(test_err_negative_size);
  RUN(test_err_limits);
  RUN(test_err_other_inconsistencies);
  RUN(test_fifo_config);
  return check_finish();
}
