/* test_mla — LATENT eligibility (every refusal: status and a message naming the field), the
 * softmax scale and the RoPE frequencies of models/mla.h, over configs rebuilt here as JSON
 * text: the tiny golden DeepSeek-V3 (l 32, r 16), real DeepSeek-V3 and V2-Lite (l 512, r 64),
 * GLM-5 (glm_moe_dsa) and a Qwen3.5 config.
 *
 * The expected frequencies are worked out by hand from the closed form of model-math §5.2 (see
 * test_yarn_v3): below the ramp the frequency is theta^(-2j/r) exactly, above it that over the
 * factor, and inside it a blend whose weights are simple fractions; the ramp bounds follow from
 * r ln(4096 / (beta 2 pi)) / (2 ln 10000). A Python transcription of HF's
 * _compute_yarn_parameters gave the same values to the last digit.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "io/hf_config.h"
#include "models/mla.h"

/* ---- configs ------------------------------------------------------------------------------ */

/* ../shared/golden/deepseek-v3-tiny-moe/checkpoint/config.json, as written there. */
static const char TINY_V3[] =
    "{\"architectures\":[\"DeepseekV3ForCausalLM\"],\"model_type\":\"deepseek_v3\","
    "\"hidden_size\":64,\"num_hidden_layers\":3,\"num_attention_heads\":4,"
    "\"num_key_value_heads\":4,\"q_lora_rank\":48,\"kv_lora_rank\":32,\"qk_nope_head_dim\":16,"
    "\"qk_rope_head_dim\":16,\"v_head_dim\":16,\"intermediate_size\":128,\"n_routed_experts\":8,"
    "\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,\"n_shared_experts\":1,"
    "\"first_k_dense_replace\":1,\"moe_layer_freq\":1,\"routed_scaling_factor\":2.5,"
    "\"norm_topk_prob\":true,\"topk_method\":\"noaux_tc\",\"scoring_func\":\"sigmoid\","
    "\"n_group\":4,\"topk_group\":2,\"vocab_size\":256,\"rms_norm_eps\":1e-06,"
    "\"hidden_act\":\"silu\",\"rope_theta\":10000.0,\"rope_scaling\":{\"beta_fast\":32,"
    "\"beta_slow\":1,\"factor\":40.0,\"mscale\":1.0,\"mscale_all_dim\":1.0,"
    "\"original_max_position_embeddings\":4096,\"type\":\"yarn\"},"
    "\"max_position_embeddings\":163840,\"tie_word_embeddings\":false,\"attention_bias\":false,"
    "\"dtype\":\"float32\"}";

/* DeepSeek-V3 as published (model-math §6), with its MTP layer. */
static const char V3[] =
    "{\"architectures\":[\"DeepseekV3ForCausalLM\"],\"model_type\":\"deepseek_v3\","
    "\"hidden_size\":7168,\"num_hidden_layers\":61,\"num_attention_heads\":128,"
    "\"num_key_value_heads\":128,\"vocab_size\":129280,\"intermediate_size\":18432,"
    "\"moe_intermediate_size\":2048,\"n_routed_experts\":256,\"n_shared_experts\":1,"
    "\"num_experts_per_tok\":8,\"n_group\":8,\"topk_group\":4,\"topk_method\":\"noaux_tc\","
    "\"scoring_func\":\"sigmoid\",\"norm_topk_prob\":true,\"routed_scaling_factor\":2.5,"
    "\"first_k_dense_replace\":3,\"moe_layer_freq\":1,\"q_lora_rank\":1536,\"kv_lora_rank\":512,"
    "\"qk_nope_head_dim\":128,\"qk_rope_head_dim\":64,\"v_head_dim\":128,\"rope_theta\":10000,"
    "\"num_nextn_predict_layers\":1,"
    "\"rope_scaling\":{\"type\":\"yarn\",\"factor\":40,\"original_max_position_embeddings\":4096,"
    "\"beta_fast\":32,\"beta_slow\":1,\"mscale\":1.0,\"mscale_all_dim\":1.0},"
    "\"max_position_embeddings\":163840,\"rms_norm_eps\":1e-06,\"tie_word_embeddings\":false,"
    "\"torch_dtype\":\"bfloat16\"}";

static const char V2_LITE[] =
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

/* GLM-5 (glm_moe_dsa): DSA unless use_dsa is false; one MTP layer. */
static const char GLM[] =
    "{\"model_type\":\"glm_moe_dsa\",\"hidden_size\":6144,\"num_hidden_layers\":78,"
    "\"num_attention_heads\":64,\"num_key_value_heads\":64,\"vocab_size\":154880,"
    "\"intermediate_size\":12288,\"moe_intermediate_size\":2048,\"n_routed_experts\":256,"
    "\"n_shared_experts\":1,\"num_experts_per_tok\":8,\"kv_lora_rank\":512,\"q_lora_rank\":2048,"
    "\"qk_rope_head_dim\":64,\"v_head_dim\":256,\"qk_nope_head_dim\":192,\"index_topk\":2048,"
    "\"num_nextn_predict_layers\":1,\"rope_parameters\":{\"rope_theta\":8000000,"
    "\"rope_type\":\"default\"},\"dtype\":\"bfloat16\"}";

static const char QWEN[] =
    "{\"model_type\":\"qwen3_5_text\",\"hidden_size\":64,\"num_hidden_layers\":4,"
    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":32,\"vocab_size\":256,"
    "\"intermediate_size\":128,\"linear_num_key_heads\":2,\"linear_num_value_heads\":4,"
    "\"linear_key_head_dim\":16,\"linear_value_head_dim\":16,"
    "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000000.0,"
    "\"partial_rotary_factor\":0.25,\"mrope_section\":[2,1,1]}}";

/* Parses json into *c; the test fails loudly when it does not parse. */
static int parse(const char *json, hf_config *c) {
  diag d;
  diag_clear(&d);
  ph_status st = hf_config_parse(json, strlen(json), c, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  return st == PH_OK;
}

/* json with the first occurrence of from replaced by to, in a static buffer: one result at a
 * time, and json must not be a previous result. */
static const char *edit(const char *json, const char *from, const char *to) {
  static char buf[8192];
  const char *at = strstr(json, from);
  if (!CHECK(at != NULL)) return json;
  snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - json), json, to, at + strlen(from));
  return buf;
}

/* V3 with `insert` added at the top level. */
static const char *v3_with(const char *insert) {
  char to[512];
  snprintf(to, sizeof to, "\"rope_theta\":10000,%s", insert);
  return edit(V3, "\"rope_theta\":10000,", to);
}

/* Checks that the check refuses c with PH_ERR_UNSUPPORTED and a message naming `names`. */
static void expect_refused(const hf_config *c, int64_t bs, ph_dtype dt, unsigned flags,
                           const char *names, const char *what) {
  diag d;
  diag_clear(&d);
  CHECK_STATUS(mla_latent_check(c, bs, dt, flags, &d), PH_ERR_UNSUPPORTED, what);
  CHECK_CONTAINS(d.msg, names);
}

/* ---- eligibility -------------------------------------------------------------------------- */

static void test_eligible(void) {
  hf_config c;
  diag d;
  const char *names[] = {"tiny V3", "V3", "V2-Lite"};
  const char *jsons[] = {TINY_V3, V3, V2_LITE};
  for (int i = 0; i < 3; i++) {
    if (!parse(jsons[i], &c)) continue;
    /* Every power of two from 16, both ORT dtypes; f32 on the CPU target. */
    for (int64_t bs = 16; bs <= 4096; bs *= 2) {
      diag_clear(&d);
      CHECK_STATUS(mla_latent_check(&c, bs, PH_DTYPE_BF16, 0, &d), PH_OK, names[i]);
      CHECK_STATUS(mla_latent_check(&c, bs, PH_DTYPE_F16, 0, &d), PH_OK, names[i]);
      CHECK_STATUS(mla_latent_check(&c, bs, PH_DTYPE_F32, MLA_CHECK_CPU, &d), PH_OK, names[i]);
    }
  }
  /* GLM-4.7-Flash (glm4_moe_lite): l 512, r 64, no DSA. */
  if (parse("{\"model_type\":\"glm4_moe_lite\",\"hidden_size\":2048,\"num_hidden_layers\":47,"
            "\"num_attention_heads\":20,\"vocab_size\":154880,\"intermediate_size\":10240,"
            "\"moe_intermediate_size\":1536,\"n_routed_experts\":64,\"num_experts_per_tok\":4,"
            "\"kv_lora_rank\":512,\"q_lora_rank\":768,\"qk_rope_head_dim\":64,"
            "\"v_head_dim\":256,\"qk_nope_head_dim\":192,\"num_nextn_predict_layers\":1}",
            &c)) {
    diag_clear(&d);
    CHECK_STATUS(mla_latent_check(&c, 256, PH_DTYPE_BF16, 0, &d), PH_OK, d.msg);
  }
  /* Real V3 carries num_nextn_predict_layers = 1: a plain export is eligible. */
  if (parse(V3, &c)) CHECK_EQ_INT(c.mla_feat.num_nextn_predict_layers, 1);
  /* GLM with use_dsa false: the vestigial indexer (index_topk 2048) is not refused. */
  if (parse(edit(GLM, "\"index_topk\":2048,", "\"index_topk\":2048,\"use_dsa\":false,"), &c)) {
    diag_clear(&d);
    CHECK_STATUS(mla_latent_check(&c, 64, PH_DTYPE_BF16, 0, &d), PH_OK, d.msg);
  }
  /* The caller may clear use_dsa for a full-attention export of a GLM config. */
  if (parse(GLM, &c)) {
    c.mla_feat.use_dsa = 0;
    diag_clear(&d);
    CHECK_STATUS(mla_latent_check(&c, 64, PH_DTYPE_BF16, 0, &d), PH_OK, d.msg);
  }
  /* use_dsa true without any indexer: nothing sparse to express. */
  if (parse(v3_with("\"use_dsa\":true,"), &c)) {
    diag_clear(&d);
    CHECK_STATUS(mla_latent_check(&c, 16, PH_DTYPE_BF16, 0, &d), PH_OK, d.msg);
  }
  /* o_groups 0 or 1 and hc_mult 0 or 1 are the plain model. */
  if (parse(v3_with("\"o_groups\":0,\"hc_mult\":0,\"compress_ratios\":null,"), &c)) {
    diag_clear(&d);
    CHECK_STATUS(mla_latent_check(&c, 16, PH_DTYPE_BF16, 0, &d), PH_OK, d.msg);
  }
}

static void test_refuse_non_mla(void) {
  hf_config c;
  if (parse(QWEN, &c)) expect_refused(&c, 16, PH_DTYPE_BF16, 0, "qwen3_5_text", "qwen");
  /* An MLA family with a zero size (hand-built) names the size. */
  if (parse(V3, &c)) {
    c.mla.v_head_dim = 0;
    expect_refused(&c, 16, PH_DTYPE_BF16, 0, "v_head_dim = 0", "v_head_dim 0");
  }
  if (parse(V3, &c)) {
    c.mla.kv_lora_rank = 0;
    expect_refused(&c, 16, PH_DTYPE_BF16, 0, "kv_lora_rank = 0", "kv_lora_rank 0");
  }
  hf_config zero;
  memset(&zero, 0, sizeof zero);
  expect_refused(&zero, 16, PH_DTYPE_BF16, 0, "MLA", "zeroed config");
  diag d;
  diag_clear(&d);
  CHECK_STATUS(mla_latent_check(NULL, 16, PH_DTYPE_BF16, 0, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
}

static void test_refuse_features(void) {
  static const struct {
    const char *insert, *names;
  } cases[] = {
      {"\"use_dsa\":true,\"index_topk\":2048,", "index_topk = 2048"},
      {"\"use_dsa\":true,\"index_n_heads\":64,", "index_n_heads = 64"},
      {"\"use_dsa\":true,\"index_head_dim\":128,", "index_head_dim = 128"},
      {"\"compress_ratios\":[0,4,128],", "compress_ratios has 3 entries"},
      {"\"compress_ratios\":[],", ""}, /* empty: not refused (checked below) */
      {"\"o_lora_rank\":1024,", "o_lora_rank = 1024"},
      {"\"o_groups\":8,", "o_groups = 8"},
      {"\"hc_mult\":4,", "hc_mult = 4"},
      {"\"attn_qk_norm\":true,", "attn_qk_norm = true"},
      {"\"attn_qk_norm_full\":true,", "attn_qk_norm_full = true"},
      {"\"use_qk_norm\":true,", "use_qk_norm = true"},
      {"\"qk_layernorm\":true,", "qk_layernorm = true"},
      {"\"sliding_window\":4096,", "sliding_window = 4096"},
      {"\"attention_sink\":true,", "attention_sink"},
      {"\"head_sink\":true,", "head_sink"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    hf_config c;
    if (!parse(v3_with(cases[i].insert), &c)) continue;
    if (!cases[i].names[0]) {
      diag d;
      diag_clear(&d);
      CHECK_STATUS(mla_latent_check(&c, 16, PH_DTYPE_BF16, 0, &d), PH_OK, cases[i].insert);
      continue;
    }
    expect_refused(&c, 16, PH_DTYPE_BF16, 0, cases[i].names, cases[i].insert);
    /* the CPU target refuses the same features */
    expect_refused(&c, 16, PH_DTYPE_F32, MLA_CHECK_CPU, cases[i].names, cases[i].insert);
  }
  hf_config c;
  /* GLM as published: DSA on (use_dsa absent means on for glm_moe_dsa), and explicit true. */
  if (parse(GLM, &c)) expect_refused(&c, 64, PH_DTYPE_BF16, 0, "use_dsa = true", "glm");
  if (parse(edit(GLM, "\"index_topk\":2048,", "\"index_topk\":2048,\"use_dsa\":true,"), &c))
    expect_refused(&c, 64, PH_DTYPE_BF16, 0, "index_topk = 2048", "glm use_dsa true");
  /* The first refusal wins: DSA before q/k norm. */
  if (parse(v3_with("\"use_qk_norm\":true,\"use_dsa\":true,\"index_topk\":8,"), &c))
    expect_refused(&c, 16, PH_DTYPE_BF16, 0, "Sparse Attention", "order");
}

static void test_refuse_mtp(void) {
  hf_config c;
  if (!parse(V3, &c)) return;
  expect_refused(&c, 16, PH_DTYPE_BF16, MLA_CHECK_MTP, "num_nextn_predict_layers = 1", "mtp");
  expect_refused(&c, 16, PH_DTYPE_F32, MLA_CHECK_MTP | MLA_CHECK_CPU,
                 "num_nextn_predict_layers = 1", "mtp cpu");
}

static void test_refuse_cache_dtype(void) {
  hf_config c;
  if (!parse(TINY_V3, &c)) return;
  /* f32: the ORT schema's T has no float32; only the CPU executor takes it. */
  expect_refused(&c, 16, PH_DTYPE_F32, 0, "float32", "f32 ort");
  expect_refused(&c, 16, PH_DTYPE_I8, 0, "quantized cache", "int8");
  expect_refused(&c, 16, PH_DTYPE_U8, MLA_CHECK_CPU, "quantized cache", "uint8");
  expect_refused(&c, 16, PH_DTYPE_F8E4M3, 0, "quantized cache", "f8");
  expect_refused(&c, 16, PH_DTYPE_I32, 0, "cache dtype", "i32");
  expect_refused(&c, 16, PH_DTYPE_INVALID, 0, "cache dtype", "invalid");
}

static void test_refuse_geometry(void) {
  hf_config c;
  /* l 40 (+ r 24 = 64: the head size alone would pass): kv_lora_rank named. */
  if (parse(edit(TINY_V3, "\"kv_lora_rank\":32", "\"kv_lora_rank\":40"), &c)) {
    expect_refused(&c, 16, PH_DTYPE_BF16, 0, "kv_lora_rank = 40", "l 40");
    c.mla.qk_rope_head_dim = 24;
    expect_refused(&c, 16, PH_DTYPE_BF16, 0, "kv_lora_rank = 40", "l 40 r 24");
  }
  /* r 8: qk_rope_head_dim named, with the head size 40 it spoils. */
  if (parse(edit(TINY_V3, "\"qk_rope_head_dim\":16", "\"qk_rope_head_dim\":8"), &c))
    expect_refused(&c, 16, PH_DTYPE_BF16, 0, "qk_rope_head_dim = 8", "r 8");
  if (parse(edit(V3, "\"qk_rope_head_dim\":64", "\"qk_rope_head_dim\":72"), &c))
    expect_refused(&c, 16, PH_DTYPE_BF16, 0, "= 584", "r 72");
  /* l 8 (the smallest % 8 rotary_offset) is still refused by the %16 gate. */
  if (parse(edit(TINY_V3, "\"kv_lora_rank\":32", "\"kv_lora_rank\":8"), &c))
    expect_refused(&c, 16, PH_DTYPE_BF16, 0, "kv_lora_rank = 8", "l 8");
  /* r 48 is eligible; r 0 (hand-set: the parser wants a rope dim) is not MLA, as in Mobius. */
  if (parse(TINY_V3, &c)) {
    diag d;
    diag_clear(&d);
    c.mla.qk_rope_head_dim = 0;
    expect_refused(&c, 16, PH_DTYPE_BF16, 0, "qk_rope_head_dim = 0", "r 0");
    c.mla.qk_rope_head_dim = 48;
    CHECK_STATUS(mla_latent_check(&c, 16, PH_DTYPE_BF16, 0, &d), PH_OK, d.msg);
  }
  /* Block sizes. */
  if (parse(TINY_V3, &c)) {
    const int64_t bad[] = {0, -16, 1, 8, 15, 24, 48, 100, 3 << 10};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      char what[64];
      snprintf(what, sizeof what, "block_size %lld", (long long)bad[i]);
      char names[64];
      snprintf(names, sizeof names, "block_size = %lld", (long long)bad[i]);
      expect_refused(&c, bad[i], PH_DTYPE_BF16, 0, names, what);
    }
  }
}

/* ---- scale and frequencies ---------------------------------------------------------------- */

static void test_softmax_scale(void) {
  hf_config c;
  /* model-math §5.2: m = 0.1 * mscale_all_dim * ln 40 + 1, scale = m^2 / sqrt(192). The
   * literals are 6 significant digits (off by <= 5e-7). */
  if (parse(V3, &c)) CHECK_NEAR(mla_softmax_scale(&c), 0.135234, 1e-6);
  if (parse(V2_LITE, &c)) CHECK_NEAR(mla_softmax_scale(&c), 0.114721, 1e-6);
  /* Tiny golden: dn + dr = 32, same m as V3 (1.3688879454...): m^2 / sqrt(32). */
  if (parse(TINY_V3, &c)) {
    const double m = 0.1 * log(40.0) + 1.0;
    CHECK_NEAR(mla_softmax_scale(&c), m * m / sqrt(32.0), 1e-15);
    CHECK_NEAR(m, 1.36889, 5e-6);
  }
  /* GLM: no YaRN, 256^-1/2 exactly. Non-MLA: 0. */
  if (parse(GLM, &c)) CHECK_NEAR(mla_softmax_scale(&c), 0.0625, 0);
  if (parse(QWEN, &c)) CHECK_NEAR(mla_softmax_scale(&c), 0.0, 0);
  CHECK_NEAR(mla_softmax_scale(NULL), 0.0, 0);
}

/* DeepSeek-V3 (r 64, theta 1e4, factor 40, orig 4096, beta 32 / 1): the correction dims are
 * 64 ln(4096 / 64 pi) / (2 ln 1e4) = 10.47 and 64 ln(4096 / 2 pi) / (2 ln 1e4) = 22.51, so
 * low = 10, high = 23. For j <= 10 the frequency is theta^(-2j/64); for j >= 23 that / 40;
 * between, ramp = (j - 10) / 13 weights the interpolated part. */
static void test_yarn_v3(void) {
  hf_config c;
  if (!parse(V3, &c)) return;
  double inv[32], af = 0;
  mla_rope_inv_freq(&c, inv, &af);
  CHECK_NEAR(af, 1.0, 0); /* mscale 1 / mscale_all_dim 1 */
  int bad = 0;
  for (int j = 0; j < 32; j++) {
    const double extrap = pow(10000.0, -2.0 * j / 64.0);
    double want;
    if (j <= 10)
      want = extrap;
    else if (j >= 23)
      want = extrap / 40.0;
    else
      want = extrap * ((j - 10) / 13.0 / 40.0 + (23 - j) / 13.0);
    if (fabs(inv[j] - want) > 1e-15 * want + 1e-300) {
      bad++;
      fprintf(stderr, "       inv_freq[%d] = %.17g, expected %.17g\n", j, inv[j], want);
    }
  }
  CHECK_EQ_INT(bad, 0);
  /* Spot values in decimal: j 8 = 1e4^-1/4 = 0.1; j 16 = 0.01 * (6/13/40 + 7/13) = 0.0055;
   * j 24 = 1e4^-3/4 / 40 = 2.5e-5. */
  CHECK_NEAR(inv[8], 0.1, 1e-16);
  CHECK_NEAR(inv[16], 0.0055, 1e-17);
  CHECK_NEAR(inv[24], 2.5e-5, 1e-19);
  /* NULL outputs are allowed. */
  mla_rope_inv_freq(&c, NULL, &af);
  mla_rope_inv_freq(&c, inv, NULL);
  mla_rope_inv_freq(NULL, inv, &af);
}

/* The tiny golden (r 16): low = floor(16 ln(4096 / 64 pi) / 18.42) = 2, high = ceil(5.63) = 6. */
static void test_yarn_tiny(void) {
  hf_config c;
  if (!parse(TINY_V3, &c)) return;
  double inv[8], af = 0;
  mla_rope_inv_freq(&c, inv, &af);
  CHECK_NEAR(af, 1.0, 0);
  CHECK_NEAR(inv[0], 1.0, 0);
  CHECK_NEAR(inv[1], pow(1e4, -1.0 / 8), 1e-16);
  CHECK_NEAR(inv[2], 0.1, 1e-16);
  CHECK_NEAR(inv[4], 0.01 * (0.5 / 40 + 0.5), 1e-17); /* 0.005125 */
  CHECK_NEAR(inv[5], pow(1e4, -5.0 / 8) * (0.75 / 40 + 0.25), 1e-17);
  CHECK_NEAR(inv[6], 1e-3 / 40, 1e-19);
  CHECK_NEAR(inv[7], pow(1e4, -7.0 / 8) / 40, 1e-20);
}

static void test_yarn_attention_factor(void) {
  hf_config c;
  double af = 0;
  /* V2-Lite: mscale 0.707 / mscale_all_dim 0.707 = 1. */
  if (parse(V2_LITE, &c)) {
    mla_rope_inv_freq(&c, NULL, &af);
    CHECK_NEAR(af, 1.0, 0);
  }
  /* mscale 1 / mscale_all_dim 0.707: (0.1 ln 40 + 1) / (0.0707 ln 40 + 1). */
  const double l40 = log(40.0);
  if (parse(edit(V2_LITE, "\"mscale\":0.707", "\"mscale\":1"), &c)) {
    mla_rope_inv_freq(&c, NULL, &af);
    CHECK_NEAR(af, (0.1 * l40 + 1) / (0.0707 * l40 + 1), 1e-15);
    CHECK_NEAR(af, 1.0857264, 1e-7);
  }
  /* Only mscale_all_dim given: HF's `if mscale and mscale_all_dim` is false, so the factor is
   * mscale(40, 1) = 1.36889 (not 1 / 1.2608). */
  if (parse(edit(V2_LITE, "\"mscale\":0.707,", ""), &c)) {
    mla_rope_inv_freq(&c, NULL, &af);
    CHECK_NEAR(af, 0.1 * l40 + 1, 1e-15);
  }
  /* attention_factor given wins. */
  if (parse(edit(V2_LITE, "\"mscale\":0.707,", "\"attention_factor\":1.25,"), &c)) {
    mla_rope_inv_freq(&c, NULL, &af);
    CHECK_NEAR(af, 1.25, 0);
  }
  /* factor <= 1: mscale is 1, and the frequencies blend x with x: unchanged. */
  if (parse(edit(V2_LITE, "\"factor\":40", "\"factor\":1"), &c)) {
    double inv[32];
    mla_rope_inv_freq(&c, inv, &af);
    CHECK_NEAR(af, 1.0, 0);
    CHECK_NEAR(inv[31], pow(1e4, -62.0 / 64), 1e-18);
  }
}

static void test_yarn_truncate_and_fallbacks(void) {
  hf_config c;
  double inv[32], af;
  /* truncate false: low = 10.4722..., high = 22.5134... (unrounded); j 16 blends with
   * ramp = (16 - low) / (high - low). */
  if (parse(edit(V3, "\"mscale_all_dim\":1.0", "\"mscale_all_dim\":1.0,\"truncate\":false"), &c)) {
    mla_rope_inv_freq(&c, inv, &af);
    const double lo = 64 * log(4096 / (32 * 2 * M_PI)) / (2 * log(1e4));
    const double hi = 64 * log(4096 / (1 * 2 * M_PI)) / (2 * log(1e4));
    const double ramp = (16 - lo) / (hi - lo);
    CHECK_NEAR(inv[16], 0.01 * (ramp / 40 + (1 - ramp)), 1e-17);
    CHECK_NEAR(lo, 10.4722, 1e-4);
    CHECK_NEAR(hi, 22.5134, 1e-4);
  }
  /* No original_max_position_embeddings: max_position_embeddings (163840) is used; then
   * low = floor(64 ln(163840 / 64 pi) / 18.42) = floor(23.2) = 23, high = min(ceil(35.3), 63). */
  if (parse(edit(V3, "\"original_max_position_embeddings\":4096,", ""), &c)) {
    mla_rope_inv_freq(&c, inv, &af);
    CHECK_NEAR(inv[23], pow(1e4, -46.0 / 64), 1e-18);
    CHECK_NEAR(inv[24], pow(1e4, -48.0 / 64) * (1.0 / 13 / 40 + 12.0 / 13), 1e-18);
    CHECK_NEAR(inv[31], pow(1e4, -62.0 / 64) * (8.0 / 13 / 40 + 5.0 / 13), 1e-19);
  }
  /* Neither: frequencies unscaled, the attention factor still derived. */
  char no_orig[8192];
  snprintf(no_orig, sizeof no_orig, "%s",
           edit(V3, "\"original_max_position_embeddings\":4096,", ""));
  if (parse(edit(no_orig, "\"max_position_embeddings\":163840,", ""), &c)) {
    mla_rope_inv_freq(&c, inv, &af);
    CHECK_NEAR(inv[31], pow(1e4, -62.0 / 64), 1e-20);
    CHECK_NEAR(af, 1.0, 0);
  }
}

static void test_plain_and_linear(void) {
  hf_config c;
  double inv[32], af = 0;
  /* No scaling: theta^(-2j/r), factor 1 (GLM, theta 8e6). */
  if (parse(GLM, &c)) {
    mla_rope_inv_freq(&c, inv, &af);
    CHECK_NEAR(af, 1.0, 0);
    int bad = 0;
    for (int j = 0; j < 32; j++) bad += fabs(inv[j] - pow(8e6, -2.0 * j / 64)) > 1e-16;
    CHECK_EQ_INT(bad, 0);
  }
  /* Linear: divided by the factor. */
  if (parse(edit(V2_LITE, "\"type\":\"yarn\"", "\"type\":\"linear\""), &c)) {
    mla_rope_inv_freq(&c, inv, &af);
    CHECK_NEAR(af, 1.0, 0);
    CHECK_NEAR(inv[0], 1.0 / 40, 0);
    CHECK_NEAR(inv[16], 0.01 / 40, 1e-18);
  }
}

int main(void) {
  RUN(test_eligible);
  RUN(test_refuse_non_mla);
  RUN(test_refuse_features);
  RUN(test_refuse_mtp);
  RUN(test_refuse_cache_dtype);
  RUN(test_refuse_geometry);
  RUN(test_softmax_scale);
  RUN(test_yarn_v3);
  RUN(test_yarn_tiny);
  RUN(test_yarn_attention_factor);
  RUN(test_yarn_truncate_and_fallbacks);
  RUN(test_plain_and_linear);
  return check_finish();
}
