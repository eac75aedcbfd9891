/* Checkpoint loading end to end: the golden checkpoints bind with every tensor at the predicted
 * shape; make-tiny writes exactly what binding expects for every family and layout; a missing,
 * misshapen or mistyped tensor is a typed error naming it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "check.h"
#include "models/model.h"
#include "models/tiny.h"
#include "tensor/dtype.h"

static char g_tmp[512];

static const char *golden(const char *name, char *buf, size_t n) {
  check_data(buf, n, "golden/%s/checkpoint", name);
  return buf;
}

static const char *tmp_dir(const char *name, char *buf, size_t n) {
  snprintf(buf, n, "%s/%s", g_tmp, name);
  return buf;
}

static ph_model *open_ok(const char *dir, int load_weights) {
  ph_model_params p = ph_model_params_default();
  p.load_weights = load_weights;
  ph_model *m = NULL;
  ph_status s = ph_model_open(dir, &p, &m);
  CHECK_STATUS(s, PH_OK, m ? ph_model_error(m) : "no object");
  if (s != PH_OK) {
    ph_model_free(m);
    return NULL;
  }
  return m;
}

static void test_golden_f32(void) {
  char dir[1024];
  ph_model *m = open_ok(golden("qwen35-tiny-f32", dir, sizeof dir), 1);
  if (!m) return;
  ph_model_info in;
  CHECK_STATUS(ph_model_get_info(m, &in), PH_OK, NULL);
  CHECK_EQ_STR(in.model_type, "qwen3_5_text");
  CHECK_EQ_INT(in.n_layers, 4);
  CHECK_EQ_INT(in.n_full_attention_layers, 1);
  CHECK_EQ_INT(in.weights_loaded, 1);
  /* the file holds exactly the model's tensors: data section = parameters * 4 bytes */
  CHECK_EQ_INT(in.parameters, 216776);
  CHECK_EQ_INT(in.weight_bytes, 216776 * 4);
  const model_weights *w = model_weights_of(m);
  CHECK_EQ_INT(w->layout, LAYOUT_CAUSAL_LM);
  CHECK_EQ_INT(w->n_unused, 0);
  CHECK(w->global[W_LM_HEAD] != NULL);
  CHECK(weights_layer(w, 3, W_ATTN_Q) != NULL);
  CHECK(weights_layer(w, 3, W_LIN_QKV) == NULL);
  CHECK(weights_layer(w, 0, W_LIN_QKV) != NULL);
  CHECK_EQ_INT(weights_layer(w, 3, W_ATTN_Q)->shape.dims[0], 4 * 2 * 32);
  ph_layer_kind k;
  CHECK_STATUS(ph_model_layer_kind(m, 3, &k), PH_OK, NULL);
  CHECK_EQ_INT(k, PH_LAYER_FULL_ATTENTION);
  CHECK_STATUS(ph_model_layer_kind(m, 4, &k), PH_ERR_INVALID_ARGUMENT, NULL);
  /* 3 linear layers x (conv 128*3 + recurrent 4*16*16 f32) */
  CHECK_EQ_INT(ph_model_fixed_state_bytes(m, PH_DTYPE_F32), 3 * (128 * 3 * 4 + 4 * 16 * 16 * 4));
  CHECK_EQ_INT(ph_model_kv_bytes_per_token(m, PH_DTYPE_BF16), 1 * 2 * 2 * 32 * 2);
  ph_model_free(m);
}

static void test_golden_bf16_vlm(void) {
  char dir[1024];
  ph_model *m = open_ok(golden("qwen35-tiny-bf16-vlm", dir, sizeof dir), 1);
  if (!m) return;
  ph_model_info in;
  ph_model_get_info(m, &in);
  CHECK_EQ_STR(in.model_type, "qwen3_5");
  CHECK_EQ_STR(in.text_model_type, "qwen3_5_text");
  CHECK_EQ_INT(in.dtype, PH_DTYPE_BF16);
  CHECK_EQ_INT(in.n_layers, 8);
  CHECK_EQ_INT(in.n_full_attention_layers, 2);
  const model_weights *w = model_weights_of(m);
  CHECK_EQ_INT(w->layout, LAYOUT_VLM);
  CHECK(w->global[W_LM_HEAD] == NULL); /* tied */
  CHECK_EQ_INT(w->n_unused, 0);
  CHECK_EQ_INT(in.weight_bytes, 1668208);
  CHECK_EQ_INT(in.parameters, 1668208 / 2);
  ph_model_free(m);
}

/* The default make-tiny geometry is the golden f32 model's: same names, shapes, order. */
static void test_tiny_matches_golden_layout(void) {
  char dir[1024], gdir[1024];
  tiny_params p = tiny_params_default();
  diag d;
  diag_clear(&d);
  CHECK_STATUS(tiny_write(tmp_dir("tiny-f32", dir, sizeof dir), &p, &d), PH_OK, d.msg);
  st_set *a = NULL, *b = NULL;
  CHECK_STATUS(st_open_dir(dir, &a, &d), PH_OK, d.msg);
  CHECK_STATUS(st_open_dir(golden("qwen35-tiny-f32", gdir, sizeof gdir), &b, &d), PH_OK, d.msg);
  if (a && b) {
    CHECK_EQ_INT(st_count(a), st_count(b));
    for (size_t i = 0; i < st_count(a) && i < st_count(b); i++) {
      const st_tensor *x = st_at(a, i), *y = st_at(b, i);
      CHECK_EQ_STR(x->name, y->name);
      CHECK(shape_equal(&x->shape, &y->shape));
      CHECK_EQ_INT(x->dtype, y->dtype);
      CHECK_EQ_INT(x->data_begin, y->data_begin);
    }
  }
  st_close(a);
  st_close(b);
}

static void test_tiny_deterministic(void) {
  char d1[1024], d2[1024], d3[1024];
  tiny_params p = tiny_params_default();
  p.dtype = PH_DTYPE_BF16;
  p.seed = 7;
  diag d;
  CHECK_STATUS(tiny_write(tmp_dir("det1", d1, sizeof d1), &p, &d), PH_OK, d.msg);
  CHECK_STATUS(tiny_write(tmp_dir("det2", d2, sizeof d2), &p, &d), PH_OK, d.msg);
  p.seed = 8;
  CHECK_STATUS(tiny_write(tmp_dir("det3", d3, sizeof d3), &p, &d), PH_OK, d.msg);
  char f1[1100], f2[1100], f3[1100];
  snprintf(f1, sizeof f1, "%s/model.safetensors", d1);
  snprintf(f2, sizeof f2, "%s/model.safetensors", d2);
  snprintf(f3, sizeof f3, "%s/model.safetensors", d3);
  fmap a, b, c;
  CHECK_STATUS(fmap_open(f1, &a, &d), PH_OK, d.msg);
  CHECK_STATUS(fmap_open(f2, &b, &d), PH_OK, d.msg);
  CHECK_STATUS(fmap_open(f3, &c, &d), PH_OK, d.msg);
  CHECK(a.size == b.size && a.size > 0 && memcmp(a.data, b.data, a.size) == 0);
  CHECK(a.size == c.size && memcmp(a.data, c.data, a.size) != 0);
  fmap_close(&a);
  fmap_close(&b);
  fmap_close(&c);
}

/* Every family and layout make-tiny can write binds back with nothing missing or unused, and
 * the count predicted from config.json alone equals the count bound. */
static void roundtrip(const char *name, tiny_params p) {
  char dir[1024];
  diag d;
  diag_clear(&d);
  ph_status s = tiny_write(tmp_dir(name, dir, sizeof dir), &p, &d);
  CHECK_STATUS(s, PH_OK, d.msg);
  if (s != PH_OK) return;
  ph_model *m = open_ok(dir, 1);
  ph_model *c = open_ok(dir, 0);
  if (m && c) {
    ph_model_info a, b;
    ph_model_get_info(m, &a);
    ph_model_get_info(c, &b);
    CHECK_EQ_INT(a.parameters, b.parameters);
    CHECK_EQ_INT(a.weight_bytes, b.weight_bytes);
    CHECK_EQ_INT(b.weights_loaded, 0);
    CHECK_EQ_INT(model_weights_of(m)->n_unused, 0);
    CHECK_EQ_INT(model_weights_of(m)->layout, p.layout);
  }
  ph_model_free(m);
  ph_model_free(c);
}

static void test_tiny_families(void) {
  tiny_params p = tiny_params_default();
  roundtrip("qwen35-causal", p);
  p.layout = LAYOUT_VLM;
  p.dtype = PH_DTYPE_BF16;
  p.tie_word_embeddings = 1;
  roundtrip("qwen35-vlm", p);
  p = tiny_params_default();
  p.model_type = "qwen3_5_moe_text";
  roundtrip("qwen35-moe", p);
  p.layout = LAYOUT_VLM;
  p.dtype = PH_DTYPE_F16;
  roundtrip("qwen35-moe-vlm", p);
  p = tiny_params_default();
  p.model_type = "qwen3_next";
  roundtrip("qwen3-next", p);
  p = tiny_params_default();
  p.model_type = "deepseek_v3";
  p.n_heads = 4;
  roundtrip("deepseek-v3", p);
  p.model_type = "deepseek_v2";
  roundtrip("deepseek-v2", p);
  p = tiny_params_default();
  p.max_shard_bytes = 200000; /* several shards + index */
  roundtrip("qwen35-sharded", p);
  diag d;
  diag_clear(&d);
  CHECK_STATUS(tiny_apply_preset(&p, "qwen3.8-tiny", &d), PH_OK, d.msg);
  roundtrip("qwen38-tiny", p);
}

static void test_qwen3_next_fused_names(void) {
  char dir[1024];
  tmp_dir("qwen3-next", dir, sizeof dir); /* written by test_tiny_families */
  ph_model *m = open_ok(dir, 1);
  if (!m) return;
  const model_weights *w = model_weights_of(m);
  const hf_config *c = model_config(m);
  const st_tensor *qkvz = weights_layer(w, 0, W_LIN_QKVZ);
  CHECK(qkvz != NULL);
  CHECK(weights_layer(w, 0, W_LIN_QKV) == NULL);
  if (qkvz) CHECK_EQ_INT(qkvz->shape.dims[0], 2 * c->geom.key_dim + 2 * c->geom.value_dim);
  CHECK(weights_layer(w, 0, W_LIN_BA) != NULL);
  CHECK(weights_expert(w, 0, 7, 2) != NULL); /* per-expert down_proj of expert 7 */
  CHECK(weights_expert(w, 0, 8, 2) == NULL);
  ph_model_free(m);
}

/* One tensor the published layout has: its exact name, shape and dtype (n_dims 0: must be
 * absent). */
typedef struct published {
  const char *name;
  int n_dims;
  int64_t d0, d1, d2;
  ph_dtype dtype;
} published;

/* Writes p into g_tmp/name and checks the file against `want` by literal name, independently
 * of the weights table make-tiny writes from; then that it binds (weights_bind, every tensor
 * used) and what the config says about the experts. */
static void check_published(const char *name, tiny_params p, const published *want, size_t n) {
  char dir[1024];
  diag d;
  diag_clear(&d);
  ph_status s = tiny_write(tmp_dir(name, dir, sizeof dir), &p, &d);
  CHECK_STATUS(s, PH_OK, d.msg);
  if (s != PH_OK) return;
  st_set *set = NULL;
  CHECK_STATUS(st_open_dir(dir, &set, &d), PH_OK, d.msg);
  if (!set) return;
  for (size_t i = 0; i < n; i++) {
    const st_tensor *t = st_find(set, want[i].name);
    if (want[i].n_dims == 0) {
      if (!CHECK(t == NULL)) fprintf(stderr, "       %s: %s must be absent\n", name, want[i].name);
      continue;
    }
    if (!CHECK(t != NULL)) {
      fprintf(stderr, "       %s: %s missing\n", name, want[i].name);
      continue;
    }
    const int64_t dims[3] = {want[i].d0, want[i].d1, want[i].d2};
    int ok = t->shape.n_dims == want[i].n_dims && t->dtype == want[i].dtype;
    for (int k = 0; ok && k < want[i].n_dims; k++) ok = t->shape.dims[k] == dims[k];
    if (!CHECK(ok)) fprintf(stderr, "       %s: %s has the wrong shape or dtype\n", name, t->name);
  }
  st_close(set);
  ph_model *m = open_ok(dir, 1);
  if (m) CHECK_EQ_INT(model_weights_of(m)->n_unused, 0);
  ph_model_free(m);
}

/* make-tiny against the published layouts, by literal tensor name (tiny defaults: hidden 64,
 * vocab 256, 4 layers, 8 experts of width 32, shared width 32; DeepSeek 4 heads, q_lora 48,
 * kv_lora 32, nope/rope/v 16, first layer dense):
 *   DeepSeek-V3: per-expert mlp.experts.{e}.{gate,up,down}_proj.weight, the router
 *     mlp.gate.weight and its noaux_tc bias mlp.gate.e_score_correction_bias in f32 (also in a
 *     bf16 checkpoint), mlp.shared_experts.*, q_a/q_b with the q LoRA;
 *   DeepSeek-V2: the same experts, no bias (greedy), q_proj (q_lora_rank null);
 *   Qwen3.5-MoE causal LM and VLM: fused mlp.experts.gate_up_proj [E, 2I, H] and
 *     mlp.experts.down_proj [E, H, I] with no .weight suffix, mlp.shared_expert.* and
 *     mlp.shared_expert_gate.weight [1, H]; the VLM under model.language_model.;
 *   Qwen3-Next: per-expert tensors, fused in_proj_qkvz / in_proj_ba. */
static void test_tiny_published_layouts(void) {
  const ph_dtype f32 = PH_DTYPE_F32, bf16 = PH_DTYPE_BF16;
  tiny_params p = tiny_params_default();
  p.model_type = "deepseek_v3";
  p.dtype = PH_DTYPE_BF16;
  const published v3[] = {
      {"model.layers.1.mlp.experts.0.gate_proj.weight", 2, 32, 64, 0, bf16},
      {"model.layers.1.mlp.experts.7.up_proj.weight", 2, 32, 64, 0, bf16},
      {"model.layers.3.mlp.experts.7.down_proj.weight", 2, 64, 32, 0, bf16},
      {"model.layers.1.mlp.gate.weight", 2, 8, 64, 0, bf16},
      {"model.layers.1.mlp.gate.e_score_correction_bias", 1, 8, 0, 0, f32},
      {"model.layers.1.mlp.shared_experts.gate_proj.weight", 2, 32, 64, 0, bf16},
      {"model.layers.1.mlp.shared_experts.down_proj.weight", 2, 64, 32, 0, bf16},
      {"model.layers.0.mlp.gate_proj.weight", 2, 128, 64, 0, bf16}, /* dense first layer */
      {"model.layers.0.mlp.gate.weight", 0, 0, 0, 0, bf16},
      {"model.layers.1.mlp.experts.gate_up_proj", 0, 0, 0, 0, bf16},
      {"model.layers.0.self_attn.q_a_proj.weight", 2, 48, 64, 0, bf16},
      {"model.layers.0.self_attn.q_a_layernorm.weight", 1, 48, 0, 0, bf16},
      {"model.layers.0.self_attn.q_b_proj.weight", 2, 4 * 32, 48, 0, bf16},
      {"model.layers.0.self_attn.kv_a_proj_with_mqa.weight", 2, 48, 64, 0, bf16},
      {"model.layers.0.self_attn.kv_a_layernorm.weight", 1, 32, 0, 0, bf16},
      {"model.layers.0.self_attn.kv_b_proj.weight", 2, 4 * 32, 32, 0, bf16},
      {"model.layers.0.self_attn.o_proj.weight", 2, 64, 4 * 16, 0, bf16},
      {"lm_head.weight", 2, 256, 64, 0, bf16},
  };
  check_published("pub-deepseek-v3", p, v3, sizeof v3 / sizeof v3[0]);
  p.model_type = "deepseek_v2";
  p.dtype = PH_DTYPE_F32;
  const published v2[] = {
      {"model.layers.2.mlp.experts.5.down_proj.weight", 2, 64, 32, 0, f32},
      {"model.layers.2.mlp.gate.weight", 2, 8, 64, 0, f32},
      {"model.layers.2.mlp.gate.e_score_correction_bias", 0, 0, 0, 0, f32},
      {"model.layers.0.self_attn.q_proj.weight", 2, 4 * 32, 64, 0, f32},
      {"model.layers.0.self_attn.q_a_proj.weight", 0, 0, 0, 0, f32},
  };
  check_published("pub-deepseek-v2", p, v2, sizeof v2 / sizeof v2[0]);

  p = tiny_params_default();
  p.model_type = "qwen3_5_moe_text";
  p.dtype = PH_DTYPE_BF16;
  const published moe[] = {
      {"model.layers.0.mlp.experts.gate_up_proj", 3, 8, 64, 64, bf16},
      {"model.layers.3.mlp.experts.down_proj", 3, 8, 64, 32, bf16},
      {"model.layers.0.mlp.experts.gate_up_proj.weight", 0, 0, 0, 0, bf16},
      {"model.layers.0.mlp.experts.0.gate_proj.weight", 0, 0, 0, 0, bf16},
      {"model.layers.0.mlp.gate.weight", 2, 8, 64, 0, bf16},
      {"model.layers.0.mlp.shared_expert.gate_proj.weight", 2, 32, 64, 0, bf16},
      {"model.layers.0.mlp.shared_expert.down_proj.weight", 2, 64, 32, 0, bf16},
      {"model.layers.0.mlp.shared_expert_gate.weight", 2, 1, 64, 0, bf16},
      {"model.layers.0.linear_attn.in_proj_qkv.weight", 2, 2 * 32 + 64, 64, 0, bf16},
  };
  check_published("pub-qwen35-moe", p, moe, sizeof moe / sizeof moe[0]);
  p.layout = LAYOUT_VLM;
  const published moe_vlm[] = {
      {"model.language_model.layers.1.mlp.experts.gate_up_proj", 3, 8, 64, 64, bf16},
      {"model.language_model.layers.1.mlp.experts.down_proj", 3, 8, 64, 32, bf16},
      {"model.language_model.layers.1.mlp.shared_expert_gate.weight", 2, 1, 64, 0, bf16},
      {"model.layers.1.mlp.experts.gate_up_proj", 0, 0, 0, 0, bf16},
      {"model.language_model.embed_tokens.weight", 2, 256, 64, 0, bf16},
      {"lm_head.weight", 2, 256, 64, 0, bf16},
  };
  check_published("pub-qwen35-moe-vlm", p, moe_vlm, sizeof moe_vlm / sizeof moe_vlm[0]);

  p = tiny_params_default();
  p.model_type = "qwen3_next";
  const published next[] = {
      {"model.layers.0.mlp.experts.7.gate_proj.weight", 2, 32, 64, 0, f32},
      {"model.layers.0.mlp.experts.7.down_proj.weight", 2, 64, 32, 0, f32},
      {"model.layers.0.mlp.experts.gate_up_proj", 0, 0, 0, 0, f32},
      {"model.layers.0.mlp.gate.weight", 2, 8, 64, 0, f32},
      {"model.layers.0.mlp.shared_expert_gate.weight", 2, 1, 64, 0, f32},
      {"model.layers.0.linear_attn.in_proj_qkvz.weight", 2, 2 * 32 + 2 * 64, 64, 0, f32},
      {"model.layers.0.linear_attn.in_proj_ba.weight", 2, 2 * 4, 64, 0, f32},
  };
  check_published("pub-qwen3-next", p, next, sizeof next / sizeof next[0]);
}

/* Rewrites the golden f32 checkpoint with one tensor changed by `edit` into a temp dir. */
typedef void (*edit_fn)(st_write_entry *entries, size_t *n);

static const char *rewrite_golden(const char *name, edit_fn edit, char *dir, size_t dir_n) {
  char gdir[1024], path[1200];
  diag d;
  st_set *g = NULL;
  CHECK_STATUS(st_open_dir(golden("qwen35-tiny-f32", gdir, sizeof gdir), &g, &d), PH_OK, d.msg);
  if (!g) return NULL;
  size_t n = st_count(g);
  st_write_entry *e = calloc(n + 1, sizeof *e);
  float *scratch = calloc(256 * 64 * 2, sizeof *scratch);
  for (size_t i = 0; i < n; i++) {
    const st_tensor *t = st_at(g, i);
    e[i].name = t->name;
    e[i].dtype = t->dtype;
    e[i].shape = t->shape;
    e[i].data = t->data;
  }
  edit(e, &n);
  for (size_t i = 0; i < n; i++)
    if (!e[i].data) e[i].data = scratch;
  tmp_dir(name, dir, dir_n);
  path_mkdirs(dir, &d);
  snprintf(path, sizeof path, "%s/config.json", gdir);
  char *cfg = NULL;
  size_t cfg_n = 0;
  file_read_all(path, 1 << 20, &cfg, &cfg_n, &d);
  snprintf(path, sizeof path, "%s/config.json", dir);
  file_write_all(path, cfg, cfg_n, &d);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  CHECK_STATUS(st_write_file(path, e, n, NULL, NULL, &d), PH_OK, d.msg);
  free(cfg);
  free(scratch);
  free(e);
  st_close(g);
  return dir;
}

static size_t find_entry(st_write_entry *e, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(e[i].name, name) == 0) return i;
  return n;
}

static void drop_a_log(st_write_entry *e, size_t *n) {
  size_t i = find_entry(e, *n, "model.layers.1.linear_attn.A_log");
  memmove(&e[i], &e[i + 1], (*n - i - 1) * sizeof *e);
  (*n)--;
}

static void reshape_q_proj(st_write_entry *e, size_t *n) {
  /* first-half/second-half confusion would give [128, 64]: a wrong shape must be caught */
  size_t i = find_entry(e, *n, "model.layers.3.self_attn.q_proj.weight");
  e[i].shape = shape_2d(128, 64);
}

static void int_norm(st_write_entry *e, size_t *n) {
  size_t i = find_entry(e, *n, "model.norm.weight");
  e[i].dtype = PH_DTYPE_I32; /* same byte size as f32 */
}

static void test_bad_checkpoints(void) {
  char dir[1024];
  ph_model *m = NULL;
  if (rewrite_golden("missing", drop_a_log, dir, sizeof dir)) {
    CHECK_STATUS(ph_model_open(dir, NULL, &m), PH_ERR_TENSOR_MISSING, ph_model_error(m));
    CHECK_CONTAINS(ph_model_error(m), "model.layers.1.linear_attn.A_log");
    ph_model_free(m);
  }
  if (rewrite_golden("misshapen", reshape_q_proj, dir, sizeof dir)) {
    CHECK_STATUS(ph_model_open(dir, NULL, &m), PH_ERR_TENSOR_SHAPE, ph_model_error(m));
    CHECK_CONTAINS(ph_model_error(m), "model.layers.3.self_attn.q_proj.weight");
    CHECK_CONTAINS(ph_model_error(m), "[128, 64]");
    CHECK_CONTAINS(ph_model_error(m), "expected [256, 64]");
    ph_model_free(m);
  }
  if (rewrite_golden("mistyped", int_norm, dir, sizeof dir)) {
    CHECK_STATUS(ph_model_open(dir, NULL, &m), PH_ERR_TENSOR_DTYPE, ph_model_error(m));
    CHECK_CONTAINS(ph_model_error(m), "model.norm.weight");
    ph_model_free(m);
  }
  /* no weights at all */
  char empty[1024], path[1100], gdir[1024], gpath[1100];
  tmp_dir("config-only", empty, sizeof empty);
  diag d;
  path_mkdirs(empty, &d);
  snprintf(gpath, sizeof gpath, "%s/config.json", golden("qwen35-tiny-f32", gdir, sizeof gdir));
  char *cfg = NULL;
  size_t cfg_n = 0;
  file_read_all(gpath, 1 << 20, &cfg, &cfg_n, &d);
  snprintf(path, sizeof path, "%s/config.json", empty);
  file_write_all(path, cfg, cfg_n, &d);
  free(cfg);
  CHECK_STATUS(ph_model_open(empty, NULL, &m), PH_ERR_NOT_FOUND, ph_model_error(m));
  CHECK_CONTAINS(ph_model_error(m), "model.safetensors");
  ph_model_free(m);
  m = open_ok(empty, 0); /* config alone is enough without weights */
  ph_model_free(m);
  /* no directory */
  CHECK_STATUS(ph_model_open("/nonexistent/dir", NULL, &m), PH_ERR_NOT_FOUND, ph_model_error(m));
  CHECK_CONTAINS(ph_model_error(m), "/nonexistent/dir");
  ph_model_free(m);
  ph_model_free(NULL);
}

/* Qwen3.5-MoE experts stored per expert (as some loaders report) bind like the fused form. */
static void test_moe_per_expert_form(void) {
  tiny_params p = tiny_params_default();
  p.model_type = "qwen3_5_moe_text";
  char dir[1024], path[1100];
  diag d;
  diag_clear(&d);
  tmp_dir("moe-per-expert", dir, sizeof dir);
  CHECK_STATUS(tiny_write(dir, &p, &d), PH_OK, d.msg); /* config.json (+ fused weights) */
  ph_model *c = open_ok(dir, 0);
  if (!c) return;
  expected_tensor *exp = NULL;
  size_t n = 0;
  CHECK_STATUS(
      weights_expected(model_config(c), LAYOUT_CAUSAL_LM, EXPERTS_PER_EXPERT, &exp, &n, &d), PH_OK,
      d.msg);
  st_write_entry *e = calloc(n, sizeof *e);
  float *zeros = calloc(256 * 64, sizeof *zeros);
  for (size_t i = 0; i < n; i++) {
    e[i].name = exp[i].name;
    e[i].dtype = PH_DTYPE_F32;
    e[i].shape = exp[i].shape;
    e[i].data = zeros;
  }
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  CHECK_STATUS(st_write_file(path, e, n, NULL, NULL, &d), PH_OK, d.msg);
  ph_model *m = open_ok(dir, 1);
  if (m) {
    const model_weights *w = model_weights_of(m);
    CHECK_EQ_INT(w->experts, EXPERTS_PER_EXPERT);
    CHECK(weights_expert(w, 2, 5, 1) != NULL);
    ph_model_info a, b;
    ph_model_get_info(m, &a);
    ph_model_get_info(c, &b);
    CHECK_EQ_INT(a.parameters, b.parameters);
  }
  ph_model_free(m);
  ph_model_free(c);
  free(zeros);
  free(e);
  free(exp);
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "%s", check_env("PH_TMP_DIR"));
  diag d;
  if (path_mkdirs(g_tmp, &d) != PH_OK) {
    fprintf(stderr, "%s\n", d.msg);
    return 1;
  }
  RUN(test_golden_f32);
  RUN(test_golden_bf16_vlm);
  RUN(test_tiny_matches_golden_layout);
  RUN(test_tiny_deterministic);
  RUN(test_tiny_families);
  RUN(test_qwen3_next_fused_names);
  RUN(test_bad_checkpoints);
  RUN(test_moe_per_expert_form);
  RUN(test_tiny_published_layouts);
  return check_finish();
}
