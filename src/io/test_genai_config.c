/* genai_config: the reader on a full file, defaults for absent keys, eos as one id or a list, and
 * each bad input a typed error naming the key path (wrong types, templates without exactly one
 * %d, malformed JSON, missing model/model.type, missing file). The packed paged layout: the
 * config of a Qwen3.8-27B-shaped model (groups from its parsed layer kinds, abi.md §8.5's key
 * names, JSON types and order), round trips (write -> read gives the same struct, read -> write
 * the same bytes), generation A's groups, one failing case per validation rule; and the dense
 * writer's bytes as they were before the paged layout. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "check.h"
#include "file_testing.h"
#include "io/genai_config.h"

static char g_tmp[512];

/* Writes text as DIR/genai_config.json for a fresh dir named name; returns the dir. */
static const char *put(const char *name, const char *text) {
  static char dir[1024];
  char path[1200];
  snprintf(dir, sizeof dir, "%s/%s", g_tmp, name);
  diag d;
  path_mkdirs(dir, &d);
  snprintf(path, sizeof path, "%s/genai_config.json", dir);
  CHECK_STATUS(file_write_all(path, text, strlen(text), &d), PH_OK, d.msg);
  return dir;
}

static void expect(const char *name, const char *text, ph_status want, const char *needle) {
  genai_config g;
  diag d;
  diag_clear(&d);
  CHECK_STATUS(genai_config_read(put(name, text), &g, &d), want, d.msg);
  if (needle) CHECK_CONTAINS(d.msg, needle);
}

static const char FULL[] =
    "{\"model\": {\"bos_token_id\": 1, \"context_length\": 4096, \"decoder\": {"
    "\"session_options\": {\"log_id\": \"x\", \"provider_options\": []}, \"filename\": \"m.onnx\","
    "\"head_size\": 256, \"hidden_size\": 5120, \"inputs\": {\"input_ids\": \"ids\","
    "\"attention_mask\": \"mask\", \"position_ids\": \"pos\", \"past_key_names\": \"pk.%d\","
    "\"past_value_names\": \"pv.%d\", \"past_conv_names\": \"pc.%d\","
    "\"past_recurrent_names\": \"pr.%d\"}, \"outputs\": {\"logits\": \"lg\","
    "\"present_key_names\": \"k%%.%d\", \"present_value_names\": \"v.%d\","
    "\"present_conv_names\": \"c.%d\", \"present_recurrent_names\": \"r.%d\"},"
    "\"num_attention_heads\": 24, \"num_hidden_layers\": 64, \"num_key_value_heads\": 4,"
    "\"state_groups\": [{\"kind\": \"paged_kv\", \"layer_ids\": [3]}]},"
    "\"eos_token_id\": [151645, 151643], \"pad_token_id\": 0, \"type\": \"qwen3_5_text\","
    "\"vocab_size\": 248320}, \"search\": {\"max_length\": 4096, \"past_present_share_buffer\": "
    "true},"
    "\"engine\": {\"dynamic_batching\": {\"block_size\": 256}}}";

static void test_full(void) {
  genai_config g;
  diag d;
  CHECK_STATUS(genai_config_read(put("full", FULL), &g, &d), PH_OK, d.msg);
  CHECK_EQ_STR(g.model_type, "qwen3_5_text");
  CHECK_EQ_STR(g.filename, "m.onnx");
  CHECK_EQ_INT(g.head_size, 256);
  CHECK_EQ_INT(g.hidden_size, 5120);
  CHECK_EQ_INT(g.num_attention_heads, 24);
  CHECK_EQ_INT(g.num_hidden_layers, 64);
  CHECK_EQ_INT(g.num_key_value_heads, 4);
  CHECK_EQ_INT(g.vocab_size, 248320);
  CHECK_EQ_INT(g.context_length, 4096);
  CHECK_EQ_INT(g.bos_token_id, 1);
  CHECK_EQ_INT(g.pad_token_id, 0);
  CHECK_EQ_INT(g.eos_token_id, 151645);
  CHECK_EQ_INT(g.n_eos_token_ids, 2);
  CHECK_EQ_INT(g.eos_token_ids[1], 151643);
  CHECK_EQ_STR(g.input_ids, "ids");
  CHECK_EQ_STR(g.attention_mask, "mask");
  CHECK_EQ_STR(g.position_ids, "pos");
  CHECK_EQ_STR(g.past_key_names, "pk.%d");
  CHECK_EQ_STR(g.past_value_names, "pv.%d");
  CHECK_EQ_STR(g.past_conv_names, "pc.%d");
  CHECK_EQ_STR(g.past_recurrent_names, "pr.%d");
  CHECK_EQ_STR(g.logits, "lg");
  CHECK_EQ_STR(g.present_key_names, "k%%.%d");
  CHECK_EQ_STR(g.present_value_names, "v.%d");
  CHECK_EQ_STR(g.present_conv_names, "c.%d");
  CHECK_EQ_STR(g.present_recurrent_names, "r.%d");
  CHECK_EQ_INT(g.past_present_share_buffer, 1);
}

static void test_defaults(void) {
  genai_config g;
  diag d;
  CHECK_STATUS(
      genai_config_read(put("minimal", "{\"model\": {\"type\": \"qwen3_5_text\"}}"), &g, &d), PH_OK,
      d.msg);
  CHECK_EQ_STR(g.filename, "model.onnx");
  CHECK_EQ_INT(g.head_size, 0);
  CHECK_EQ_INT(g.num_hidden_layers, 0);
  CHECK_EQ_INT(g.vocab_size, 0);
  CHECK_EQ_INT(g.bos_token_id, -1);
  CHECK_EQ_INT(g.eos_token_id, -1);
  CHECK_EQ_INT(g.n_eos_token_ids, 0);
  CHECK_EQ_INT(g.pad_token_id, -1);
  CHECK_EQ_STR(g.input_ids, "input_ids");
  CHECK_EQ_STR(g.attention_mask, "attention_mask");
  CHECK_EQ_STR(g.position_ids, "position_ids");
  CHECK_EQ_STR(g.past_key_names, "past_key_values.%d.key");
  CHECK_EQ_STR(g.past_value_names, "past_key_values.%d.value");
  CHECK_EQ_STR(g.past_conv_names, "past_key_values.%d.conv_state");
  CHECK_EQ_STR(g.past_recurrent_names, "past_key_values.%d.recurrent_state");
  CHECK_EQ_STR(g.logits, "logits");
  CHECK_EQ_STR(g.present_key_names, "present.%d.key");
  CHECK_EQ_STR(g.present_value_names, "present.%d.value");
  CHECK_EQ_STR(g.present_conv_names, "present.%d.conv_state");
  CHECK_EQ_STR(g.present_recurrent_names, "present.%d.recurrent_state");
  CHECK_EQ_INT(g.past_present_share_buffer, 0);
  /* null reads as absent; one eos id; an empty list says nothing */
  CHECK_STATUS(genai_config_read(put("nulls", "{\"model\": {\"type\": \"t\", \"decoder\": null,"
                                              "\"eos_token_id\": 7, \"bos_token_id\": null}}"),
                                 &g, &d),
               PH_OK, d.msg);
  CHECK_EQ_INT(g.eos_token_id, 7);
  CHECK_EQ_INT(g.n_eos_token_ids, 1);
  CHECK_EQ_INT(g.bos_token_id, -1);
  CHECK_STATUS(
      genai_config_read(put("eos_empty", "{\"model\": {\"type\": \"t\", \"eos_token_id\": []}}"),
                        &g, &d),
      PH_OK, d.msg);
  CHECK_EQ_INT(g.eos_token_id, -1);
}

static void test_errors(void) {
  expect("bad_int", "{\"model\": {\"type\": \"t\", \"decoder\": {\"head_size\": \"256\"}}}",
         PH_ERR_CONFIG_INVALID, "model.decoder.head_size is a string, expected an integer");
  expect("bad_real", "{\"model\": {\"type\": \"t\", \"vocab_size\": 1.5}}", PH_ERR_CONFIG_INVALID,
         "model.vocab_size is a real number");
  expect("negative", "{\"model\": {\"type\": \"t\", \"decoder\": {\"num_hidden_layers\": -1}}}",
         PH_ERR_CONFIG_INVALID, "model.decoder.num_hidden_layers = -1");
  expect("huge", "{\"model\": {\"type\": \"t\", \"context_length\": 4294967296}}",
         PH_ERR_CONFIG_INVALID, "model.context_length");
  expect("bad_name",
         "{\"model\": {\"type\": \"t\", \"decoder\": {\"inputs\": {\"input_ids\": 3}}}}",
         PH_ERR_CONFIG_INVALID, "model.decoder.inputs.input_ids is an integer, expected a string");
  expect("bad_obj", "{\"model\": {\"type\": \"t\", \"decoder\": {\"outputs\": []}}}",
         PH_ERR_CONFIG_INVALID, "model.decoder.outputs is an array, expected an object");
  expect("bad_bool",
         "{\"model\": {\"type\": \"t\"}, \"search\": {\"past_present_share_buffer\": 1}}",
         PH_ERR_CONFIG_INVALID, "search.past_present_share_buffer is an integer, expected true");
  expect("bad_type", "{\"model\": {\"type\": 5}}", PH_ERR_CONFIG_INVALID,
         "model.type is an integer");
  expect("bad_eos", "{\"model\": {\"type\": \"t\", \"eos_token_id\": [1, \"2\"]}}",
         PH_ERR_CONFIG_INVALID, "model.eos_token_id[1] is a string");
  expect("many_eos", "{\"model\": {\"type\": \"t\", \"eos_token_id\": [1,2,3,4,5,6,7,8,9]}}",
         PH_ERR_LIMIT, "lists 9 ids");
  /* templates: exactly one %d, no other conversion */
  expect("tmpl_none",
         "{\"model\": {\"type\": \"t\", \"decoder\": {\"inputs\": {\"past_key_names\": \"k\"}}}}",
         PH_ERR_CONFIG_INVALID,
         "model.decoder.inputs.past_key_names = \"k\" must contain exactly one %d");
  expect("tmpl_two",
         "{\"model\": {\"type\": \"t\", \"decoder\": {\"outputs\": {\"present_conv_names\": "
         "\"%d.%d\"}}}}",
         PH_ERR_CONFIG_INVALID, "model.decoder.outputs.present_conv_names = \"%d.%d\"");
  expect("tmpl_s",
         "{\"model\": {\"type\": \"t\", \"decoder\": {\"inputs\": {\"past_value_names\": "
         "\"%s.%d\"}}}}",
         PH_ERR_CONFIG_INVALID, "only %d may appear");
  expect("tmpl_width",
         "{\"model\": {\"type\": \"t\", \"decoder\": {\"inputs\": {\"past_value_names\": "
         "\"v.%5d\"}}}}",
         PH_ERR_CONFIG_INVALID, "past_value_names");
  expect("tmpl_tail",
         "{\"model\": {\"type\": \"t\", \"decoder\": {\"inputs\": {\"past_value_names\": "
         "\"v.%d%\"}}}}",
         PH_ERR_CONFIG_INVALID, "past_value_names");
  char long_name[400];
  snprintf(long_name, sizeof long_name,
           "{\"model\": {\"type\": \"t\", \"decoder\": {\"outputs\": {\"logits\": \"%0120d\"}}}}",
           0);
  expect("long", long_name, PH_ERR_CONFIG_INVALID, "model.decoder.outputs.logits is 120 bytes");
  expect("nul", "{\"model\": {\"type\": \"a\\u0000b\"}}", PH_ERR_JSON,
         "\\u0000"); /* jansson refuses NUL */
  /* structure */
  expect("no_model", "{\"search\": {}}", PH_ERR_CONFIG_MISSING_FIELD, "model is missing");
  expect("no_type", "{\"model\": {\"decoder\": {}}}", PH_ERR_CONFIG_MISSING_FIELD,
         "model.type is missing");
  expect("array", "[1, 2]", PH_ERR_CONFIG_INVALID, "top level is an array");
  expect("json", "{\"model\": {\"type\": \"t\",}", PH_ERR_JSON, "genai_config.json: line 1");
  expect("dup", "{\"model\": {\"type\": \"t\", \"type\": \"u\"}}", PH_ERR_JSON, "duplicate");
  genai_config g;
  diag d;
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/absent", g_tmp);
  CHECK_STATUS(genai_config_read(dir, &g, &d), PH_ERR_NOT_FOUND, d.msg);
  CHECK_CONTAINS(d.msg, "genai_config.json");
}

/* From memory: the label names the source; the text need not be NUL-terminated. */
static void test_parse_in_memory(void) {
  genai_config g;
  diag d;
  const char text[] = "{\"model\": {\"type\": \"qwen3_5_text\", \"vocab_size\": 9}}XXXX";
  CHECK_STATUS(genai_config_parse(text, sizeof text - 5, "mem", &g, &d), PH_OK, d.msg);
  CHECK_EQ_INT(g.vocab_size, 9);
  CHECK_STATUS(genai_config_parse(text, sizeof text - 1, "mem", &g, &d), PH_ERR_JSON, d.msg);
  CHECK_CONTAINS(d.msg, "mem: line 1");
  CHECK_STATUS(genai_config_parse("{\"model\": {}}", 13, "mem", &g, &d),
               PH_ERR_CONFIG_MISSING_FIELD, d.msg);
  CHECK_CONTAINS(d.msg, "mem: model.type is missing");
  CHECK_STATUS(genai_config_parse(NULL, 0, "mem", &g, &d), PH_ERR_JSON, d.msg);
}

/* ---- the packed paged layout ---------------------------------------------------------------- */

/* Qwen3.8-27B's text config (model-math §6): 64 layers, full attention every 4th. */
static const char QWEN38_27B[] =
    "{\"model_type\":\"qwen3_5_text\",\"hidden_size\":5120,\"num_hidden_layers\":64,"
    "\"num_attention_heads\":24,\"num_key_value_heads\":4,\"head_dim\":256,"
    "\"intermediate_size\":17408,\"linear_num_key_heads\":16,\"linear_num_value_heads\":48,"
    "\"linear_key_head_dim\":128,\"linear_value_head_dim\":128,\"linear_conv_kernel_dim\":4,"
    "\"full_attention_interval\":4,\"vocab_size\":248320,\"max_position_embeddings\":262144,"
    "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000000,"
    "\"partial_rotary_factor\":0.25,\"mrope_section\":[11,11,10],\"mrope_interleaved\":true}}";

/* A 4-layer model whose layers are all full attention: no fixed state at all. */
static const char ALL_FULL[] =
    "{\"model_type\":\"qwen3_5_text\",\"hidden_size\":64,\"num_hidden_layers\":4,"
    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":32,\"vocab_size\":256,"
    "\"intermediate_size\":128,\"linear_num_key_heads\":2,\"linear_num_value_heads\":4,"
    "\"linear_key_head_dim\":16,\"linear_value_head_dim\":16,\"layer_types\":[\"full_attention\","
    "\"full_attention\",\"full_attention\",\"full_attention\"],"
    "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000000.0,"
    "\"partial_rotary_factor\":0.25,\"mrope_section\":[2,1,1]}}";

static int parse_hf(const char *json, hf_config *c) {
  diag d;
  ph_status s = hf_config_parse(json, strlen(json), c, &d);
  CHECK_STATUS(s, PH_OK, d.msg);
  return s == PH_OK;
}

static const char *tmp_dir(const char *name) {
  static char dirs[4][1024];
  static int turn;
  char *dir = dirs[turn];
  turn = (turn + 1) % 4;
  diag d;
  snprintf(dir, sizeof dirs[0], "%s/%s", g_tmp, name);
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
  return dir;
}

/* dir/genai_config.json as text (static buffer) and as jansson's tree (caller decrefs). */
static const char *file_text(const char *dir) {
  static char text[1 << 16];
  char path[1200], *buf = NULL;
  size_t n = 0;
  diag d;
  snprintf(path, sizeof path, "%s/genai_config.json", dir);
  text[0] = '\0';
  CHECK_STATUS(file_read_all(path, sizeof text - 1, &buf, &n, &d), PH_OK, d.msg);
  if (buf) {
    memcpy(text, buf, n);
    text[n] = '\0';
  }
  free(buf);
  return text;
}

static json_t *file_json(const char *dir) {
  json_error_t e;
  json_t *root = json_loads(file_text(dir), 0, &e);
  CHECK(root != NULL);
  return root;
}

/* Walks "a.b.c" through objects; NULL where a key is missing. */
static json_t *jpath(json_t *o, const char *path) {
  char key[64];
  while (o && *path) {
    size_t n = strcspn(path, ".");
    snprintf(key, sizeof key, "%.*s", (int)n, path);
    o = json_object_get(o, key);
    path += n + (path[n] == '.');
  }
  return o;
}

static void check_same_config(const genai_config *a, const genai_config *b) {
  CHECK_EQ_STR(a->model_type, b->model_type);
  CHECK_EQ_STR(a->filename, b->filename);
  CHECK_EQ_INT(a->head_size, b->head_size);
  CHECK_EQ_INT(a->hidden_size, b->hidden_size);
  CHECK_EQ_INT(a->num_attention_heads, b->num_attention_heads);
  CHECK_EQ_INT(a->num_hidden_layers, b->num_hidden_layers);
  CHECK_EQ_INT(a->num_key_value_heads, b->num_key_value_heads);
  CHECK_EQ_INT(a->vocab_size, b->vocab_size);
  CHECK_EQ_INT(a->context_length, b->context_length);
  CHECK_EQ_INT(a->bos_token_id, b->bos_token_id);
  CHECK_EQ_INT(a->eos_token_id, b->eos_token_id);
  CHECK_EQ_INT(a->pad_token_id, b->pad_token_id);
  CHECK_EQ_INT(a->n_eos_token_ids, b->n_eos_token_ids);
  for (int i = 0; i < a->n_eos_token_ids && i < GENAI_MAX_EOS; i++)
    CHECK_EQ_INT(a->eos_token_ids[i], b->eos_token_ids[i]);
  const char *names_a[] = {a->input_ids,
                           a->attention_mask,
                           a->position_ids,
                           a->block_table,
                           a->cumulative_sequence_lengths,
                           a->past_sequence_lengths,
                           a->attention_metadata,
                           a->slot_mapping,
                           a->past_key_names,
                           a->past_value_names,
                           a->past_conv_names,
                           a->past_recurrent_names,
                           a->logits,
                           a->present_key_names,
                           a->present_value_names,
                           a->present_conv_names,
                           a->present_recurrent_names,
                           a->state_update_capture_count,
                           a->state_update_active,
                           a->state_update_conv_value_names,
                           a->state_update_recurrent_capsule_names};
  const char *names_b[] = {b->input_ids,
                           b->attention_mask,
                           b->position_ids,
                           b->block_table,
                           b->cumulative_sequence_lengths,
                           b->past_sequence_lengths,
                           b->attention_metadata,
                           b->slot_mapping,
                           b->past_key_names,
                           b->past_value_names,
                           b->past_conv_names,
                           b->past_recurrent_names,
                           b->logits,
                           b->present_key_names,
                           b->present_value_names,
                           b->present_conv_names,
                           b->present_recurrent_names,
                           b->state_update_capture_count,
                           b->state_update_active,
                           b->state_update_conv_value_names,
                           b->state_update_recurrent_capsule_names};
  for (size_t i = 0; i < sizeof names_a / sizeof names_a[0]; i++)
    CHECK_EQ_STR(names_a[i], names_b[i]);
  CHECK_EQ_INT(a->state_update_capacity, b->state_update_capacity);
  CHECK_EQ_INT(a->past_present_share_buffer, b->past_present_share_buffer);
  CHECK_EQ_INT(a->paged, b->paged);
  CHECK_EQ_INT(a->cuda_graph_disabled, b->cuda_graph_disabled);
  CHECK_EQ_INT(a->n_state_groups, b->n_state_groups);
  for (int i = 0; i < a->n_state_groups && i < GENAI_MAX_STATE_GROUPS; i++) {
    const genai_state_group *x = &a->state_groups[i], *y = &b->state_groups[i];
    CHECK_EQ_INT(x->kind, y->kind);
    CHECK_EQ_INT(x->n_layer_ids, y->n_layer_ids);
    for (int j = 0; j < x->n_layer_ids && j < GENAI_MAX_LAYERS; j++)
      CHECK_EQ_INT(x->layer_ids[j], y->layer_ids[j]);
  }
  const genai_dynamic_batching *p = &a->dynamic_batching, *q = &b->dynamic_batching;
  CHECK_EQ_INT(p->present, q->present);
  CHECK_EQ_INT(p->block_size, q->block_size);
  CHECK_EQ_INT(p->max_batch_size, q->max_batch_size);
  CHECK(p->gpu_utilization_factor == q->gpu_utilization_factor);
  CHECK_EQ_INT(p->num_blocks, q->num_blocks);
  CHECK_EQ_INT(p->max_scheduled_tokens, q->max_scheduled_tokens);
}

/* write -> read gives the same struct; read -> write gives the same bytes. */
static void check_round_trip(const genai_config *g, const char *name) {
  char name2[128];
  snprintf(name2, sizeof name2, "%s-again", name);
  const char *dir = tmp_dir(name), *dir2 = tmp_dir(name2);
  genai_config back;
  diag d;
  CHECK_STATUS(genai_config_write(g, dir, &d), PH_OK, d.msg);
  CHECK_STATUS(genai_config_read(dir, &back, &d), PH_OK, d.msg);
  check_same_config(g, &back);
  CHECK_STATUS(genai_config_write(&back, dir2, &d), PH_OK, d.msg);
  static char first[1 << 16];
  snprintf(first, sizeof first, "%s", file_text(dir));
  if (!CHECK(strcmp(first, file_text(dir2)) == 0))
    fprintf(stderr, "       %s: rewriting what was read changed the bytes\n", name);
}

/* Position of "key": in text (after from), for checking the written key order. */
static long key_at(const char *text, const char *key, long from) {
  char quoted[80];
  snprintf(quoted, sizeof quoted, "\"%s\":", key);
  const char *p = strstr(text + from, quoted);
  if (!CHECK(p != NULL)) fprintf(stderr, "       key %s not found after offset %ld\n", key, from);
  return p ? (long)(p - text) : from;
}

static void check_key_order(const char *text, const char *const *keys, size_t n) {
  long at = 0;
  for (size_t i = 0; i < n; i++) at = key_at(text, keys[i], at);
}

static void test_paged_qwen38(void) {
  hf_config c;
  if (!parse_hf(QWEN38_27B, &c)) return;
  genai_config g = genai_config_paged(&c, 4096, 256, 100, 0.6, 0, 2048);
  CHECK_EQ_INT(g.paged, 1);
  CHECK_EQ_INT(g.cuda_graph_disabled, 1);
  CHECK_EQ_INT(g.past_present_share_buffer, 1);
  CHECK_EQ_STR(g.attention_mask, "");
  /* the groups follow the layer kinds of the parsed config */
  int32_t full[64], linear[64];
  int n_full = 0, n_linear = 0;
  for (int i = 0; i < 64; i++) {
    if (c.layer_kind[i] == PH_LAYER_FULL_ATTENTION)
      full[n_full++] = i;
    else
      linear[n_linear++] = i;
  }
  CHECK_EQ_INT(n_full, 16);
  CHECK_EQ_INT(n_linear, 48);
  CHECK_EQ_INT(full[0], 3);
  CHECK_EQ_INT(full[15], 63);
  CHECK_EQ_INT(g.n_state_groups, 3);
  CHECK_EQ_INT(g.state_groups[0].kind, GENAI_STATE_PAGED_KV);
  CHECK_EQ_INT(g.state_groups[1].kind, GENAI_STATE_FIXED_CONV);
  CHECK_EQ_INT(g.state_groups[2].kind, GENAI_STATE_FIXED_RECURRENT);
  CHECK_EQ_INT(g.state_groups[0].n_layer_ids, n_full);
  CHECK_EQ_INT(g.state_groups[1].n_layer_ids, n_linear);
  CHECK_EQ_INT(g.state_groups[2].n_layer_ids, n_linear);
  for (int i = 0; i < n_full; i++) CHECK_EQ_INT(g.state_groups[0].layer_ids[i], full[i]);
  for (int i = 0; i < n_linear; i++) {
    CHECK_EQ_INT(g.state_groups[1].layer_ids[i], linear[i]);
    CHECK_EQ_INT(g.state_groups[2].layer_ids[i], linear[i]);
  }

  const char *dir = tmp_dir("paged-27b");
  diag d;
  CHECK_STATUS(genai_config_write(&g, dir, &d), PH_OK, d.msg);
  json_t *root = file_json(dir);
  if (root) {
    CHECK_EQ_STR(json_string_value(jpath(root, "model.type")), "qwen3_5_text");
    json_t *dec = jpath(root, "model.decoder");
    CHECK_EQ_STR(json_string_value(jpath(dec, "filename")), "model.onnx");
    CHECK_EQ_INT(json_integer_value(jpath(dec, "head_size")), 256);
    CHECK_EQ_INT(json_integer_value(jpath(dec, "hidden_size")), 5120);
    CHECK_EQ_INT(json_integer_value(jpath(dec, "num_attention_heads")), 24);
    CHECK_EQ_INT(json_integer_value(jpath(dec, "num_hidden_layers")), 64);
    CHECK_EQ_INT(json_integer_value(jpath(dec, "num_key_value_heads")), 4);
    json_t *po = jpath(dec, "session_options.provider_options");
    CHECK(json_is_array(po) && json_array_size(po) == 1);
    json_t *cg = jpath(json_array_get(po, 0), "cuda.enable_cuda_graph");
    CHECK(json_is_string(cg)); /* the STRING "0", as GenAI's provider options are */
    CHECK_EQ_STR(json_string_value(cg), "0");
    static const char *const in_keys[][2] = {
        {"input_ids", "input_ids"},
        {"position_ids", "position_ids"},
        {"block_table", "block_table"},
        {"cumulative_sequence_lengths", "cumulative_sequence_lengths"},
        {"past_sequence_lengths", "past_sequence_lengths"},
        {"attention_metadata", "attention_metadata"},
        {"past_key_names", "past_key_values.%d.key"},
        {"past_value_names", "past_key_values.%d.value"},
        {"past_conv_names", "past_key_values.%d.conv_state"},
        {"past_recurrent_names", "past_key_values.%d.recurrent_state"},
    };
    static const char *const out_keys[][2] = {
        {"logits", "logits"},
        {"present_key_names", "present.%d.key"},
        {"present_value_names", "present.%d.value"},
        {"present_conv_names", "present.%d.conv_state"},
        {"present_recurrent_names", "present.%d.recurrent_state"},
    };
    json_t *in = jpath(dec, "inputs"), *out = jpath(dec, "outputs");
    for (size_t i = 0; i < sizeof in_keys / sizeof in_keys[0]; i++)
      CHECK_EQ_STR(json_string_value(json_object_get(in, in_keys[i][0])), in_keys[i][1]);
    for (size_t i = 0; i < sizeof out_keys / sizeof out_keys[0]; i++)
      CHECK_EQ_STR(json_string_value(json_object_get(out, out_keys[i][0])), out_keys[i][1]);
    CHECK_EQ_INT(json_object_size(in), 10); /* no attention_mask, no state_update_* */
    CHECK_EQ_INT(json_object_size(out), 5);
    CHECK(json_object_get(dec, "state_update_capacity") == NULL);
    json_t *groups = jpath(dec, "state_groups");
    CHECK(json_is_array(groups) && json_array_size(groups) == 3);
    static const char *const kinds[] = {"paged_kv", "fixed_conv", "fixed_recurrent"};
    for (size_t i = 0; i < 3; i++) {
      json_t *grp = json_array_get(groups, i), *ids = jpath(grp, "layer_ids");
      CHECK_EQ_INT(json_object_size(grp), 2); /* {"kind", "layer_ids"} only */
      CHECK_EQ_STR(json_string_value(jpath(grp, "kind")), kinds[i]);
      const int32_t *want = i == 0 ? full : linear;
      int n = i == 0 ? n_full : n_linear;
      CHECK(json_is_array(ids) && (int)json_array_size(ids) == n);
      for (int j = 0; j < n && j < (int)json_array_size(ids); j++) {
        CHECK(json_is_integer(json_array_get(ids, (size_t)j)));
        CHECK_EQ_INT(json_integer_value(json_array_get(ids, (size_t)j)), want[j]);
      }
    }
    CHECK(json_is_true(jpath(root, "search.past_present_share_buffer")));
    CHECK_EQ_INT(json_integer_value(jpath(root, "search.max_length")), 4096);
    json_t *db = jpath(root, "engine.dynamic_batching");
    CHECK(json_is_integer(jpath(db, "block_size")));
    CHECK_EQ_INT(json_integer_value(jpath(db, "block_size")), 256);
    CHECK(json_is_real(jpath(db, "gpu_utilization_factor")));
    CHECK_NEAR(json_real_value(jpath(db, "gpu_utilization_factor")), 0.6, 0);
    CHECK(json_is_integer(jpath(db, "max_batch_size")));
    CHECK_EQ_INT(json_integer_value(jpath(db, "max_batch_size")), 100);
    CHECK_EQ_INT(json_integer_value(jpath(db, "max_scheduled_tokens")), 2048);
    CHECK(jpath(db, "num_blocks") == NULL); /* exactly one of num_blocks / the factor */
    CHECK(jpath(root, "model.attention_mask") == NULL);
    json_decref(root);
  }
  /* abi.md §8.5's key order, and the factor printed as written */
  const char *text = file_text(dir);
  static const char *const order[] = {"model",
                                      "type",
                                      "decoder",
                                      "filename",
                                      "session_options",
                                      "head_size",
                                      "hidden_size",
                                      "num_attention_heads",
                                      "num_hidden_layers",
                                      "num_key_value_heads",
                                      "inputs",
                                      "input_ids",
                                      "position_ids",
                                      "block_table",
                                      "cumulative_sequence_lengths",
                                      "past_sequence_lengths",
                                      "attention_metadata",
                                      "past_key_names",
                                      "past_value_names",
                                      "past_conv_names",
                                      "past_recurrent_names",
                                      "outputs",
                                      "logits",
                                      "present_key_names",
                                      "present_value_names",
                                      "present_conv_names",
                                      "present_recurrent_names",
                                      "state_groups",
                                      "context_length",
                                      "vocab_size",
                                      "search",
                                      "engine",
                                      "dynamic_batching",
                                      "block_size",
                                      "gpu_utilization_factor",
                                      "max_batch_size",
                                      "max_scheduled_tokens"};
  check_key_order(text, order, sizeof order / sizeof order[0]);
  CHECK_CONTAINS(text, "\"gpu_utilization_factor\": 0.6,");
  CHECK_CONTAINS(text, "\"enable_cuda_graph\": \"0\"");

  /* with token ids too */
  g.bos_token_id = 1;
  g.pad_token_id = 0;
  g.n_eos_token_ids = 2;
  g.eos_token_ids[0] = g.eos_token_id = 151645;
  g.eos_token_ids[1] = 151643;
  check_round_trip(&g, "paged-27b-rt");
}

static void test_paged_variants(void) {
  hf_config c;
  if (!parse_hf(ALL_FULL, &c)) return;
  /* no linear layers: only the paged_kv group and no conv/recurrent templates, both ways */
  genai_config g = genai_config_paged(&c, 512, 256, 8, 0.9, 0, 1024);
  CHECK_EQ_INT(g.n_state_groups, 1);
  CHECK_EQ_INT(g.state_groups[0].kind, GENAI_STATE_PAGED_KV);
  CHECK_EQ_INT(g.state_groups[0].n_layer_ids, 4);
  CHECK_EQ_STR(g.past_conv_names, "");
  CHECK_EQ_STR(g.present_recurrent_names, "");
  check_round_trip(&g, "paged-all-full");
  const char *text = file_text(tmp_dir("paged-all-full"));
  CHECK(strstr(text, "conv_state") == NULL && strstr(text, "recurrent_state") == NULL);
  CHECK(strstr(text, "fixed_") == NULL);
  /* num_blocks wins over the factor; neither when both are absent */
  g = genai_config_paged(&c, 512, 512, 4, 0.9, 1000, 64);
  check_round_trip(&g, "paged-num-blocks");
  text = file_text(tmp_dir("paged-num-blocks"));
  CHECK_CONTAINS(text, "\"num_blocks\": 1000");
  CHECK(strstr(text, "gpu_utilization_factor") == NULL);
  g = genai_config_paged(&c, 512, 256, 16, 0, 0, 2048);
  check_round_trip(&g, "paged-no-budget");
  text = file_text(tmp_dir("paged-no-budget"));
  CHECK(strstr(text, "gpu_utilization_factor") == NULL && strstr(text, "num_blocks") == NULL);
  /* a factor with no short decimal still reads back as the same double */
  g = genai_config_paged(&c, 512, 256, 16, 0.1 + 0.2, 0, 2048);
  check_round_trip(&g, "paged-odd-factor");
  /* the hybrid model with a dense config is unchanged by the new fields */
  if (!parse_hf(QWEN38_27B, &c)) return;
  g = genai_config_dense(&c, 4096);
  CHECK_EQ_INT(g.paged, 0);
  CHECK_EQ_INT(g.n_state_groups, 0);
  CHECK_EQ_INT(g.dynamic_batching.present, 0);
  CHECK_EQ_INT(g.cuda_graph_disabled, 0);
  check_round_trip(&g, "dense-27b");
  CHECK_EQ_STR(genai_state_kind_name(GENAI_STATE_FIXED_RECURRENT), "fixed_recurrent");
  CHECK_EQ_STR(genai_state_kind_name((genai_state_kind)7), "unknown");
}

/* DeepSeek-V2-Lite (27 MLA layers, kv_lora_rank 512, qk_rope_head_dim 64). */
static const char DEEPSEEK_V2_LITE[] =
    "{\"architectures\":[\"DeepseekV2ForCausalLM\"],\"model_type\":\"deepseek_v2\","
    "\"hidden_size\":2048,\"num_hidden_layers\":27,\"num_attention_heads\":16,"
    "\"num_key_value_heads\":16,\"vocab_size\":102400,\"intermediate_size\":10944,"
    "\"moe_intermediate_size\":1408,\"n_routed_experts\":64,\"n_shared_experts\":2,"
    "\"num_experts_per_tok\":6,\"n_group\":1,\"topk_group\":1,\"topk_method\":\"greedy\","
    "\"scoring_func\":\"softmax\",\"norm_topk_prob\":false,\"routed_scaling_factor\":1.0,"
    "\"first_k_dense_replace\":1,\"moe_layer_freq\":1,\"q_lora_rank\":null,\"kv_lora_rank\":512,"
    "\"qk_nope_head_dim\":128,\"qk_rope_head_dim\":64,\"v_head_dim\":128,\"rope_theta\":10000,"
    "\"max_position_embeddings\":163840,\"rms_norm_eps\":1e-06,\"tie_word_embeddings\":false,"
    "\"torch_dtype\":\"bfloat16\"}";

/* The LATENT package (DeepSeek MLA, docs/export.md "LATENT packages"): slot_mapping, no
 * position_ids, attention_metadata or value templates, one paged_kv group of every layer, the
 * latent cache's geometry; written, read back the same, and rewritten byte for byte. */
static void test_paged_latent(void) {
  hf_config c;
  if (!parse_hf(DEEPSEEK_V2_LITE, &c)) return;
  genai_config g = genai_config_paged(&c, 4096, 16, 8, 0, 0, 2048);
  CHECK_EQ_STR(g.slot_mapping, "slot_mapping");
  CHECK_EQ_STR(g.position_ids, "");
  CHECK_EQ_STR(g.attention_metadata, "");
  CHECK_EQ_STR(g.past_value_names, "");
  CHECK_EQ_STR(g.present_value_names, "");
  CHECK_EQ_STR(g.past_conv_names, "");
  CHECK_EQ_STR(g.past_key_names, "past_key_values.%d.key");
  CHECK_EQ_STR(g.present_key_names, "present.%d.key");
  CHECK_EQ_INT(g.num_key_value_heads, 1);
  CHECK_EQ_INT(g.head_size, 512 + 64);
  CHECK_EQ_INT(g.num_attention_heads, 16);
  CHECK_EQ_INT(g.n_state_groups, 1);
  CHECK_EQ_INT(g.state_groups[0].kind, GENAI_STATE_PAGED_KV);
  CHECK_EQ_INT(g.state_groups[0].n_layer_ids, 27);
  CHECK_EQ_INT(g.state_groups[0].layer_ids[26], 26);
  check_round_trip(&g, "paged-latent");
  const char *dir = tmp_dir("paged-latent");
  const char *text = file_text(dir);
  CHECK(strstr(text, "position_ids") == NULL);
  CHECK(strstr(text, "attention_metadata") == NULL);
  CHECK(strstr(text, ".value") == NULL && strstr(text, "value_names") == NULL);
  CHECK(strstr(text, "conv_state") == NULL && strstr(text, "fixed_") == NULL);
  static const char *const order[] = {"input_ids",
                                      "block_table",
                                      "cumulative_sequence_lengths",
                                      "past_sequence_lengths",
                                      "slot_mapping",
                                      "past_key_names",
                                      "outputs",
                                      "logits",
                                      "present_key_names",
                                      "state_groups"};
  check_key_order(text, order, sizeof order / sizeof order[0]);
  json_t *root = file_json(dir);
  CHECK_EQ_STR(json_string_value(jpath(root, "model.decoder.inputs.slot_mapping")), "slot_mapping");
  json_decref(root);

  /* a file written by hand: the keys GenAI would default are absent and stay absent */
  static const char HAND[] =
      "{\"model\": {\"type\": \"deepseek_v2\", \"decoder\": {\"num_hidden_layers\": 2, "
      "\"inputs\": {\"slot_mapping\": \"slots\"}, \"state_groups\": [{\"kind\": \"paged_kv\", "
      "\"layer_ids\": [0, 1]}]}}, \"engine\": {\"dynamic_batching\": {\"block_size\": 16}}}";
  genai_config r;
  diag d;
  CHECK_STATUS(genai_config_read(put("latent-hand", HAND), &r, &d), PH_OK, d.msg);
  CHECK_EQ_STR(r.slot_mapping, "slots");
  CHECK_EQ_STR(r.position_ids, "");
  CHECK_EQ_STR(r.attention_metadata, "");
  CHECK_EQ_STR(r.past_value_names, "");
  CHECK_EQ_STR(r.present_value_names, "");
  CHECK_EQ_STR(r.past_key_names, "past_key_values.%d.key");
  CHECK_EQ_STR(r.block_table, "block_table");
  /* without slot_mapping the same file takes GenAI's defaults (K/V pages, position_ids) */
  static const char NO_SLOTS[] =
      "{\"model\": {\"type\": \"deepseek_v2\", \"decoder\": {\"num_hidden_layers\": 2}}, "
      "\"engine\": {\"dynamic_batching\": {}}}";
  CHECK_STATUS(genai_config_read(put("latent-none", NO_SLOTS), &r, &d), PH_OK, d.msg);
  CHECK_EQ_STR(r.slot_mapping, "");
  CHECK_EQ_STR(r.position_ids, "position_ids");
  CHECK_EQ_STR(r.attention_metadata, "attention_metadata");
  CHECK_EQ_STR(r.past_value_names, "past_key_values.%d.value");

  /* typed errors */
  expect("latent-dense",
         "{\"model\": {\"type\": \"deepseek_v2\", \"decoder\": {\"inputs\": "
         "{\"slot_mapping\": \"slot_mapping\"}}}}",
         PH_ERR_CONFIG_INVALID, "model.decoder.inputs.slot_mapping = \"slot_mapping\" in a dense");
  expect("latent-half-value",
         "{\"model\": {\"type\": \"deepseek_v2\", \"decoder\": {\"num_hidden_layers\": 2, "
         "\"inputs\": {\"slot_mapping\": \"slot_mapping\", \"past_value_names\": "
         "\"past_key_values.%d.value\"}}}, \"engine\": {\"dynamic_batching\": {}}}",
         PH_ERR_CONFIG_INCONSISTENT,
         "model.decoder.inputs.past_value_names is given but outputs.present_value_names is not");
  expect("latent-half-value-out",
         "{\"model\": {\"type\": \"deepseek_v2\", \"decoder\": {\"num_hidden_layers\": 2, "
         "\"inputs\": {\"slot_mapping\": \"slot_mapping\"}, \"outputs\": "
         "{\"present_value_names\": \"present.%d.value\"}}}, \"engine\": "
         "{\"dynamic_batching\": {}}}",
         PH_ERR_CONFIG_INCONSISTENT,
         "model.decoder.outputs.present_value_names is given but inputs.past_value_names is not");
  expect("latent-slot-int",
         "{\"model\": {\"type\": \"deepseek_v2\", \"decoder\": {\"inputs\": "
         "{\"slot_mapping\": 3}}}, \"engine\": {\"dynamic_batching\": {}}}",
         PH_ERR_CONFIG_INVALID, "model.decoder.inputs.slot_mapping is an integer");
  expect("latent-bad-value-template",
         "{\"model\": {\"type\": \"deepseek_v2\", \"decoder\": {\"inputs\": "
         "{\"slot_mapping\": \"s\", \"past_value_names\": \"v\"}}}, \"engine\": "
         "{\"dynamic_batching\": {}}}",
         PH_ERR_CONFIG_INVALID, "must contain exactly one %d");
}

/* The dense writer's bytes, as packages have been written before the paged layout existed. */
static const char DENSE_TINY[] =
    "{\n"
    "  \"model\": {\n"
    "    \"bos_token_id\": 1,\n"
    "    \"context_length\": 512,\n"
    "    \"decoder\": {\n"
    "      \"session_options\": {\n"
    "        \"log_id\": \"onnxruntime-genai\",\n"
    "        \"provider_options\": []\n"
    "      },\n"
    "      \"filename\": \"model.onnx\",\n"
    "      \"head_size\": 32,\n"
    "      \"hidden_size\": 64,\n"
    "      \"inputs\": {\n"
    "        \"input_ids\": \"input_ids\",\n"
    "        \"attention_mask\": \"attention_mask\",\n"
    "        \"position_ids\": \"position_ids\",\n"
    "        \"past_key_names\": \"past_key_values.%d.key\",\n"
    "        \"past_value_names\": \"past_key_values.%d.value\",\n"
    "        \"past_conv_names\": \"past_key_values.%d.conv_state\",\n"
    "        \"past_recurrent_names\": \"past_key_values.%d.recurrent_state\"\n"
    "      },\n"
    "      \"outputs\": {\n"
    "        \"logits\": \"logits\",\n"
    "        \"present_key_names\": \"present.%d.key\",\n"
    "        \"present_value_names\": \"present.%d.value\",\n"
    "        \"present_conv_names\": \"present.%d.conv_state\",\n"
    "        \"present_recurrent_names\": \"present.%d.recurrent_state\"\n"
    "      },\n"
    "      \"num_attention_heads\": 4,\n"
    "      \"num_hidden_layers\": 4,\n"
    "      \"num_key_value_heads\": 2\n"
    "    },\n"
    "    \"eos_token_id\": [\n"
    "      7,\n"
    "      8\n"
    "    ],\n"
    "    \"pad_token_id\": 0,\n"
    "    \"type\": \"qwen3_5_text\",\n"
    "    \"vocab_size\": 256\n"
    "  },\n"
    "  \"search\": {\n"
    "    \"diversity_penalty\": 0.0,\n"
    "    \"do_sample\": false,\n"
    "    \"early_stopping\": true,\n"
    "    \"length_penalty\": 1.0,\n"
    "    \"max_length\": 512,\n"
    "    \"min_length\": 0,\n"
    "    \"no_repeat_ngram_size\": 0,\n"
    "    \"num_beams\": 1,\n"
    "    \"num_return_sequences\": 1,\n"
    "    \"past_present_share_buffer\": false,\n"
    "    \"repetition_penalty\": 1.0,\n"
    "    \"temperature\": 1.0,\n"
    "    \"top_k\": 50,\n"
    "    \"top_p\": 1.0\n"
    "  }\n"
    "}\n";

static void test_dense_unchanged(void) {
  hf_config c;
  if (!parse_hf("{\"model_type\":\"qwen3_5_text\",\"hidden_size\":64,\"num_hidden_layers\":4,"
                "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":32,"
                "\"vocab_size\":256,\"intermediate_size\":128,\"linear_num_key_heads\":2,"
                "\"linear_num_value_heads\":4,\"linear_key_head_dim\":16,"
                "\"linear_value_head_dim\":16,\"attention_bias\":false,"
                "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000000.0,"
                "\"partial_rotary_factor\":0.25,\"mrope_section\":[2,1,1]}}",
                &c))
    return;
  genai_config g = genai_config_dense(&c, 512);
  g.bos_token_id = 1;
  g.pad_token_id = 0;
  g.n_eos_token_ids = 2;
  g.eos_token_ids[0] = g.eos_token_id = 7;
  g.eos_token_ids[1] = 8;
  const char *dir = tmp_dir("dense-tiny");
  diag d;
  CHECK_STATUS(genai_config_write(&g, dir, &d), PH_OK, d.msg);
  CHECK_EQ_STR(file_text(dir), DENSE_TINY);
  check_round_trip(&g, "dense-tiny-rt");
  genai_config back;
  CHECK_STATUS(genai_config_read(dir, &back, &d), PH_OK, d.msg);
  CHECK_EQ_INT(back.paged, 0);
  CHECK_EQ_STR(back.attention_mask, "attention_mask");
  CHECK_EQ_STR(back.block_table, "");
  CHECK_EQ_STR(back.attention_metadata, "");
}

/* Paged defaults; the legacy all-paged form; generation A's groups. */
static void test_paged_read(void) {
  genai_config g;
  diag d;
  CHECK_STATUS(genai_config_read(put("paged-min", "{\"model\": {\"type\": \"t\"}, \"engine\": "
                                                  "{\"dynamic_batching\": {}}}"),
                                 &g, &d),
               PH_OK, d.msg);
  CHECK_EQ_INT(g.paged, 1); /* no state_groups: GenAI's legacy all-paged contract */
  CHECK_EQ_INT(g.n_state_groups, 0);
  CHECK_EQ_INT(g.dynamic_batching.present, 1);
  CHECK_EQ_INT(g.dynamic_batching.block_size, 256);
  CHECK_EQ_INT(g.dynamic_batching.max_batch_size, 16);
  CHECK(g.dynamic_batching.gpu_utilization_factor <= 0);
  CHECK_EQ_INT(g.dynamic_batching.num_blocks, 0);
  CHECK_EQ_INT(g.dynamic_batching.max_scheduled_tokens, 2048);
  CHECK_EQ_INT(g.cuda_graph_disabled, 0);
  CHECK_EQ_STR(g.attention_mask, "");
  CHECK_EQ_STR(g.block_table, "block_table");
  CHECK_EQ_STR(g.cumulative_sequence_lengths, "cumulative_sequence_lengths");
  CHECK_EQ_STR(g.past_sequence_lengths, "past_sequence_lengths");
  CHECK_EQ_STR(g.attention_metadata, "attention_metadata");
  CHECK_EQ_STR(g.past_conv_names, "past_key_values.%d.conv_state"); /* legacy: defaults */
  /* the full paged example of the older tests: one paged_kv group, its names as given */
  CHECK_STATUS(genai_config_read(put("paged-full", FULL), &g, &d), PH_OK, d.msg);
  CHECK_EQ_INT(g.paged, 1);
  CHECK_EQ_INT(g.n_state_groups, 1);
  CHECK_EQ_INT(g.state_groups[0].layer_ids[0], 3);
  CHECK_EQ_STR(g.past_conv_names, "pc.%d"); /* given, so kept though no group uses it */
  /* with state_groups, an absent template of a kind no group uses is "" */
  CHECK_STATUS(genai_config_read(put("paged-kv-only",
                                     "{\"model\": {\"type\": \"t\", \"decoder\": "
                                     "{\"num_hidden_layers\": 4, \"state_groups\": [{\"kind\": "
                                     "\"paged_kv\", \"layer_ids\": [0, 1, 2, 3]}]}}, \"engine\": "
                                     "{\"dynamic_batching\": {}}}"),
                                 &g, &d),
               PH_OK, d.msg);
  CHECK_EQ_STR(g.past_key_names, "past_key_values.%d.key");
  CHECK_EQ_STR(g.past_conv_names, "");
  CHECK_EQ_STR(g.present_recurrent_names, "");
  /* state_groups without dynamic batching: kept, but not the paged layout */
  CHECK_STATUS(genai_config_read(put("groups-no-engine",
                                     "{\"model\": {\"type\": \"t\", \"decoder\": "
                                     "{\"num_hidden_layers\": 4, \"state_groups\": [{\"kind\": "
                                     "\"fixed_conv\", \"layer_ids\": [0]}]}}}"),
                                 &g, &d),
               PH_OK, d.msg);
  CHECK_EQ_INT(g.paged, 0);
  CHECK_EQ_INT(g.n_state_groups, 1);
  CHECK_EQ_STR(g.attention_mask, "attention_mask");
  /* fixed_conv and fixed_recurrent may share layers; provider options other than cuda pass */
  CHECK_STATUS(
      genai_config_read(
          put("shared-fixed",
              "{\"model\": {\"type\": \"t\", \"decoder\": {\"num_hidden_layers\": 8, "
              "\"session_options\": {\"provider_options\": [{\"dml\": {}}, {\"cuda\": "
              "{\"enable_cuda_graph\": \"1\"}}]}, \"state_groups\": [{\"kind\": \"paged_kv\", "
              "\"layer_ids\": [3]}, {\"kind\": \"paged_kv\", \"layer_ids\": [7]}, {\"kind\": "
              "\"fixed_conv\", \"layer_ids\": [0, 1, 2]}, {\"kind\": \"fixed_recurrent\", "
              "\"layer_ids\": [2, 1, 0]}]}}, \"engine\": {\"dynamic_batching\": "
              "{\"gpu_utilization_factor\": 1, \"num_blocks\": 0}}}"),
          &g, &d),
      PH_OK, d.msg);
  CHECK_EQ_INT(g.n_state_groups, 4);
  CHECK_EQ_INT(g.state_groups[3].layer_ids[0], 2);
  CHECK_EQ_INT(g.cuda_graph_disabled, 0);
  CHECK(g.dynamic_batching.gpu_utilization_factor == 1.0);

  /* generation A: "fixed" groups named by their binding's input template */
  static const char GEN_A[] =
      "{\"model\": {\"type\": \"qwen3_5_text\", \"decoder\": {\"num_hidden_layers\": 8, "
      "\"state_groups\": [{\"kind\": \"paged_kv\", \"layer_ids\": [3, 7], \"bindings\": "
      "{\"key\": {\"input\": \"past_key_values.%d.key\", \"output\": \"present.%d.key\"}, "
      "\"value\": {\"input\": \"past_key_values.%d.value\", \"output\": "
      "\"present.%d.value\"}}}, "
      "{\"kind\": \"fixed\", \"layer_ids\": [0, 1, 2, 4, 5, 6], \"bindings\": {\"state\": "
      "{\"input\": \"past_key_values.%d.conv_state\", \"output\": "
      "\"present.%d.conv_state\"}}}, {\"kind\": \"fixed\", \"layer_ids\": [0, 1, 2, 4, 5, 6], "
      "\"bindings\": {\"state\": {\"input\": \"past_key_values.%d.recurrent_state\", "
      "\"output\": \"present.%d.recurrent_state\"}}}]}}, \"search\": "
      "{\"past_present_share_buffer\": true}, \"engine\": {\"dynamic_batching\": "
      "{\"block_size\": 256, \"gpu_utilization_factor\": 0.6, \"max_batch_size\": 100}}}";
  CHECK_STATUS(genai_config_read(put("gen-a", GEN_A), &g, &d), PH_OK, d.msg);
  CHECK_EQ_INT(g.n_state_groups, 3);
  CHECK_EQ_INT(g.state_groups[0].kind, GENAI_STATE_PAGED_KV);
  CHECK_EQ_INT(g.state_groups[1].kind, GENAI_STATE_FIXED_CONV);
  CHECK_EQ_INT(g.state_groups[2].kind, GENAI_STATE_FIXED_RECURRENT);
  CHECK_EQ_INT(g.state_groups[2].n_layer_ids, 6);
  CHECK_EQ_INT(g.state_groups[2].layer_ids[5], 6);
  CHECK_EQ_INT(g.dynamic_batching.max_batch_size, 100);
  /* and it is written back in generation C's form */
  const char *dir = tmp_dir("gen-a-as-c");
  CHECK_STATUS(genai_config_write(&g, dir, &d), PH_OK, d.msg);
  const char *text = file_text(dir);
  CHECK_CONTAINS(text, "\"kind\": \"fixed_recurrent\"");
  CHECK(strstr(text, "bindings") == NULL);
}

/* A paged config with the given decoder extras (after num_hidden_layers 64) and top-level
 * extras (after model; default: dynamic batching). */
static const char *paged_doc(const char *decoder_extra, const char *top_extra) {
  static char buf[2][4096];
  static int turn;
  char *b = buf[turn];
  turn ^= 1;
  snprintf(b, sizeof buf[0],
           "{\"model\": {\"type\": \"qwen3_5_text\", \"decoder\": {\"num_hidden_layers\": "
           "64%s}}%s}",
           decoder_extra, top_extra ? top_extra : ", \"engine\": {\"dynamic_batching\": {}}");
  return b;
}

static const char *groups_doc(const char *groups) {
  static char buf[2048];
  snprintf(buf, sizeof buf, ", \"state_groups\": %s", groups);
  return paged_doc(buf, NULL);
}

static const char *engine_doc(const char *dynamic_batching) {
  static char buf[1024];
  snprintf(buf, sizeof buf, ", \"engine\": {\"dynamic_batching\": %s}", dynamic_batching);
  return paged_doc("", buf);
}

/* decoder extras: capacity C with the four names (abi.md §8.5) */
#define SU_NAMES(C)                                                                                \
  ", \"state_update_capacity\": " #C ", \"inputs\": {\"state_update_capture_count\": "             \
  "\"state_update_capture_count\", \"state_update_active\": \"state_update_active\"}, "            \
  "\"outputs\": {\"state_update_conv_value_names\": \"state_update.%d.conv_value\", "              \
  "\"state_update_recurrent_capsule_names\": \"state_update.%d.recurrent_capsule\"}"

/* Compact state updates (abi.md §8.5): written only when the capacity is above 0, with exactly
 * the spec's keys in its order (inputs after the recurrent template, outputs after theirs, the
 * capacity after outputs), no per-group state_update; read back the same, rewritten byte for
 * byte; capacity 0 writes none of them. */
static void test_paged_state_updates(void) {
  hf_config c;
  if (!parse_hf(QWEN38_27B, &c)) return;
  genai_config g = genai_config_paged(&c, 4096, 256, 100, 0.6, 0, 2048);
  genai_config_set_state_updates(&g, 7);
  CHECK_EQ_INT(g.state_update_capacity, 7);
  CHECK_EQ_STR(g.state_update_capture_count, "state_update_capture_count");
  CHECK_EQ_STR(g.state_update_active, "state_update_active");
  CHECK_EQ_STR(g.state_update_conv_value_names, "state_update.%d.conv_value");
  CHECK_EQ_STR(g.state_update_recurrent_capsule_names, "state_update.%d.recurrent_capsule");
  check_round_trip(&g, "paged-state-updates");
  const char *text = file_text(tmp_dir("paged-state-updates"));
  static const char *const order[] = {
      "past_recurrent_names",          "state_update_capture_count",
      "state_update_active",           "present_recurrent_names",
      "state_update_conv_value_names", "state_update_recurrent_capsule_names",
      "state_update_capacity",         "state_groups"};
  check_key_order(text, order, sizeof order / sizeof order[0]);
  CHECK_CONTAINS(text, "\"state_update_capacity\": 7");
  CHECK_CONTAINS(text, "\"state_update_active\": \"state_update_active\"");
  CHECK_CONTAINS(text, "\"state_update_recurrent_capsule_names\": "
                       "\"state_update.%d.recurrent_capsule\"");
  CHECK(strstr(text, "\"state_update\":") == NULL); /* no per-group object (UNCONFIRMED) */
  genai_config back;
  diag d;
  CHECK_STATUS(genai_config_read(tmp_dir("paged-state-updates"), &back, &d), PH_OK, d.msg);
  CHECK_EQ_INT(back.state_update_capacity, 7);
  /* capacity 0 clears the names again: nothing of them is written */
  genai_config_set_state_updates(&g, 0);
  CHECK_EQ_STR(g.state_update_capture_count, "");
  check_round_trip(&g, "paged-state-updates-0");
  text = file_text(tmp_dir("paged-state-updates-0"));
  CHECK(strstr(text, "state_update") == NULL);
  /* the largest capacity reads back too */
  genai_config_set_state_updates(&g, 8);
  check_round_trip(&g, "paged-state-updates-8");
}

static void test_paged_errors(void) {
  /* state groups */
  expect("sg-no-kind", groups_doc("[{\"layer_ids\": [3]}]"), PH_ERR_CONFIG_MISSING_FIELD,
         "model.decoder.state_groups[0].kind is missing");
  expect("sg-bad-kind", groups_doc("[{\"kind\": \"paged_kv\"}, {\"kind\": \"fixed_conf\"}]"),
         PH_ERR_CONFIG_INVALID,
         "model.decoder.state_groups[1].kind = \"fixed_conf\": expected paged_kv, fixed_conv or "
         "fixed_recurrent");
  expect("sg-kind-int", groups_doc("[{\"kind\": 1}]"), PH_ERR_CONFIG_INVALID,
         "model.decoder.state_groups[0].kind is an integer, expected a string");
  expect("sg-not-array", groups_doc("{\"kind\": \"paged_kv\"}"), PH_ERR_CONFIG_INVALID,
         "model.decoder.state_groups is an object, expected an array");
  expect("sg-not-object", groups_doc("[[3]]"), PH_ERR_CONFIG_INVALID,
         "model.decoder.state_groups[0] is an array, expected an object");
  expect("sg-too-many",
         groups_doc("[{\"kind\": \"fixed_conv\"}, {\"kind\": \"fixed_conv\"}, "
                    "{\"kind\": \"fixed_conv\"}, {\"kind\": \"fixed_conv\"}, "
                    "{\"kind\": \"fixed_conv\"}, {\"kind\": \"fixed_conv\"}, "
                    "{\"kind\": \"fixed_conv\"}, {\"kind\": \"fixed_conv\"}, "
                    "{\"kind\": \"fixed_conv\"}]"),
         PH_ERR_LIMIT, "model.decoder.state_groups lists 9 groups, at most 8");
  expect("sg-ids-not-array", groups_doc("[{\"kind\": \"paged_kv\", \"layer_ids\": 3}]"),
         PH_ERR_CONFIG_INVALID, "model.decoder.state_groups[0].layer_ids is an integer");
  expect("sg-id-range",
         groups_doc("[{\"kind\": \"paged_kv\", \"layer_ids\": [3]}, {\"kind\": \"fixed_conv\", "
                    "\"layer_ids\": [0, 1, 2, 64]}]"),
         PH_ERR_CONFIG_INVALID,
         "model.decoder.state_groups[1].layer_ids[3] = 64 is outside [0, num_hidden_layers = "
         "64)");
  expect("sg-id-negative", groups_doc("[{\"kind\": \"fixed_recurrent\", \"layer_ids\": [-1]}]"),
         PH_ERR_CONFIG_INVALID, "model.decoder.state_groups[0].layer_ids[0] = -1 is outside");
  expect("sg-id-type", groups_doc("[{\"kind\": \"fixed_recurrent\", \"layer_ids\": [0, 1.0]}]"),
         PH_ERR_CONFIG_INVALID,
         "model.decoder.state_groups[0].layer_ids[1] is a real number, expected an integer");
  expect("sg-id-dup", groups_doc("[{\"kind\": \"paged_kv\", \"layer_ids\": [5, 9, 5]}]"),
         PH_ERR_CONFIG_INVALID,
         "model.decoder.state_groups[0].layer_ids[2] = 5 repeats layer_ids[0]");
  expect("sg-kv-overlap",
         groups_doc("[{\"kind\": \"paged_kv\", \"layer_ids\": [3, 7]}, {\"kind\": \"fixed_conv\", "
                    "\"layer_ids\": [7]}, {\"kind\": \"paged_kv\", \"layer_ids\": [11, 7]}]"),
         PH_ERR_CONFIG_INVALID,
         "model.decoder.state_groups[2].layer_ids[1] = 7 is also in state_groups[0]: paged_kv "
         "groups may not overlap");
  expect("sg-no-layers",
         "{\"model\": {\"type\": \"t\", \"decoder\": {\"state_groups\": [{\"kind\": "
         "\"paged_kv\", \"layer_ids\": [0]}]}}}",
         PH_ERR_CONFIG_INVALID, "layer_ids[0] = 0 is outside [0, num_hidden_layers = 0)");
  expect("sg-same-tensor",
         paged_doc(", \"inputs\": {\"past_conv_names\": \"s.%d\", \"past_recurrent_names\": "
                   "\"s.%d\"}, \"state_groups\": [{\"kind\": \"fixed_conv\", \"layer_ids\": [0, "
                   "1]}, {\"kind\": \"fixed_recurrent\", \"layer_ids\": [1]}]",
                   NULL),
         PH_ERR_CONFIG_INVALID,
         "layer 1: model.decoder.inputs.past_conv_names and inputs.past_recurrent_names both "
         "bind \"s.1\"");
  expect("sg-fixed-only", groups_doc("[{\"kind\": \"fixed_conv\", \"layer_ids\": [0]}]"), PH_OK,
         NULL);
  expect("sg-paged-template",
         paged_doc(", \"outputs\": {\"present_key_names\": \"present.key\"}", NULL),
         PH_ERR_CONFIG_INVALID,
         "model.decoder.outputs.present_key_names = \"present.key\" must contain exactly one %d");
  /* generation A */
  expect("gen-a-unknown",
         groups_doc("[{\"kind\": \"fixed\", \"layer_ids\": [0], \"bindings\": {\"state\": "
                    "{\"input\": \"past.%d.ssm\"}}}]"),
         PH_ERR_CONFIG_INVALID,
         "model.decoder.state_groups[0].bindings.state.input = \"past.%d.ssm\" is neither "
         "past_conv_names");
  expect("gen-a-no-binding", groups_doc("[{\"kind\": \"fixed\", \"layer_ids\": [0]}]"),
         PH_ERR_CONFIG_MISSING_FIELD,
         "model.decoder.state_groups[0].bindings.state.input is missing");
  expect("gen-a-bad-bindings", groups_doc("[{\"kind\": \"fixed\", \"bindings\": []}]"),
         PH_ERR_CONFIG_INVALID, "model.decoder.state_groups[0].bindings is an array");
  /* compact state updates: a capacity 0..8, in a paged config, with exactly its four names */
  expect("capacity-no-names", paged_doc(", \"state_update_capacity\": 7", NULL),
         PH_ERR_CONFIG_INCONSISTENT,
         "model.decoder.inputs.state_update_capture_count is missing; "
         "model.decoder.state_update_capacity = 7 needs it");
  expect("capacity-zero", paged_doc(", \"state_update_capacity\": 0", NULL), PH_OK, NULL);
  expect("capacity-9", paged_doc(SU_NAMES(9), NULL), PH_ERR_CONFIG_INVALID,
         "model.decoder.state_update_capacity = 9: expected 0..8");
  expect("capacity-negative", paged_doc(SU_NAMES(-1), NULL), PH_ERR_CONFIG_INVALID,
         "model.decoder.state_update_capacity");
  expect("capacity-8", paged_doc(SU_NAMES(8), NULL), PH_OK, NULL);
  expect("capacity-dense",
         "{\"model\": {\"type\": \"qwen3_5_text\", \"decoder\": {\"num_hidden_layers\": 64"
         ", \"state_update_capacity\": 2}}}",
         PH_ERR_CONFIG_INCONSISTENT,
         "model.decoder.state_update_capacity = 2 in a dense config: compact state updates need "
         "the packed paged layout");
  expect("names-without-capacity",
         paged_doc(", \"outputs\": {\"state_update_conv_value_names\": \"su.%d.conv\"}", NULL),
         PH_ERR_CONFIG_INCONSISTENT,
         "model.decoder.outputs.state_update_conv_value_names is given but "
         "model.decoder.state_update_capacity is 0");
  expect("active-without-capacity",
         paged_doc(", \"inputs\": {\"state_update_active\": \"on\"}", NULL),
         PH_ERR_CONFIG_INCONSISTENT, "model.decoder.inputs.state_update_active is given but");
  expect("capacity-no-capsule",
         paged_doc(", \"state_update_capacity\": 2, \"inputs\": {\"state_update_capture_count\": "
                   "\"cc\", \"state_update_active\": \"on\"}, \"outputs\": "
                   "{\"state_update_conv_value_names\": \"su.%d.conv\"}",
                   NULL),
         PH_ERR_CONFIG_INCONSISTENT,
         "model.decoder.outputs.state_update_recurrent_capsule_names is missing");
  expect("capacity-template-no-d",
         paged_doc(", \"state_update_capacity\": 2, \"inputs\": {\"state_update_capture_count\": "
                   "\"cc\", \"state_update_active\": \"on\"}, \"outputs\": "
                   "{\"state_update_conv_value_names\": \"su.conv\", "
                   "\"state_update_recurrent_capsule_names\": \"su.%d.cap\"}",
                   NULL),
         PH_ERR_CONFIG_INVALID,
         "model.decoder.outputs.state_update_conv_value_names = \"su.conv\" must contain exactly "
         "one %d");
  expect("capacity-template-two-d",
         paged_doc(", \"state_update_capacity\": 2, \"inputs\": {\"state_update_capture_count\": "
                   "\"cc\", \"state_update_active\": \"on\"}, \"outputs\": "
                   "{\"state_update_conv_value_names\": \"su.%d.conv\", "
                   "\"state_update_recurrent_capsule_names\": \"su.%d.%d\"}",
                   NULL),
         PH_ERR_CONFIG_INVALID,
         "model.decoder.outputs.state_update_recurrent_capsule_names = \"su.%d.%d\" must contain "
         "exactly one %d");
  expect("capacity-empty-input",
         paged_doc(", \"state_update_capacity\": 2, \"inputs\": {\"state_update_capture_count\": "
                   "\"\", \"state_update_active\": \"on\"}, \"outputs\": "
                   "{\"state_update_conv_value_names\": \"su.%d.conv\", "
                   "\"state_update_recurrent_capsule_names\": \"su.%d.cap\"}",
                   NULL),
         PH_ERR_CONFIG_INVALID, "model.decoder.inputs.state_update_capture_count is empty");
  expect("group-capacity",
         groups_doc("[{\"kind\": \"fixed\", \"layer_ids\": [0], \"bindings\": {\"state\": "
                    "{\"input\": \"past_key_values.%d.conv_state\"}}, \"state_update\": "
                    "{\"kind\": \"causal_conv\", \"capacity\": 3}}]"),
         PH_ERR_UNSUPPORTED,
         "model.decoder.state_groups[0].state_update.capacity 3: per-group state updates are not "
         "supported (use model.decoder.state_update_capacity)");
  /* dynamic batching */
  expect("db-block", engine_doc("{\"block_size\": 0}"), PH_ERR_CONFIG_INVALID,
         "engine.dynamic_batching.block_size = 0 is outside [1, 2^31)");
  expect("db-batch", engine_doc("{\"max_batch_size\": 0}"), PH_ERR_CONFIG_INVALID,
         "engine.dynamic_batching.max_batch_size = 0 is outside [1, 2^31)");
  expect("db-factor-zero", engine_doc("{\"gpu_utilization_factor\": 0}"), PH_ERR_CONFIG_INVALID,
         "engine.dynamic_batching.gpu_utilization_factor = 0 is outside (0, 1]");
  expect("db-factor-big", engine_doc("{\"gpu_utilization_factor\": 1.5}"), PH_ERR_CONFIG_INVALID,
         "engine.dynamic_batching.gpu_utilization_factor = 1.5 is outside (0, 1]");
  expect("db-factor-type", engine_doc("{\"gpu_utilization_factor\": \"0.6\"}"),
         PH_ERR_CONFIG_INVALID,
         "engine.dynamic_batching.gpu_utilization_factor is a string, expected a number");
  expect("db-blocks", engine_doc("{\"num_blocks\": -1}"), PH_ERR_CONFIG_INVALID,
         "engine.dynamic_batching.num_blocks = -1 is outside [0, 2^31)");
  expect("db-tokens", engine_doc("{\"max_scheduled_tokens\": 0}"), PH_ERR_CONFIG_INVALID,
         "engine.dynamic_batching.max_scheduled_tokens = 0 is outside [1, 2^31)");
  expect("db-type", engine_doc("[]"), PH_ERR_CONFIG_INVALID,
         "engine.dynamic_batching is an array, expected an object");
  expect("engine-type", paged_doc("", ", \"engine\": 1"), PH_ERR_CONFIG_INVALID,
         "engine is an integer, expected an object");
  expect("static-and-dynamic",
         paged_doc("", ", \"engine\": {\"static_batching\": {\"max_batch_size\": 4}, "
                       "\"dynamic_batching\": {}}"),
         PH_ERR_CONFIG_INVALID,
         "engine.static_batching and engine.dynamic_batching are mutually exclusive");
  expect("static-only", paged_doc("", ", \"engine\": {\"static_batching\": {}}"), PH_OK, NULL);
  /* session options */
  expect("po-type", paged_doc(", \"session_options\": {\"provider_options\": {}}", NULL),
         PH_ERR_CONFIG_INVALID,
         "model.decoder.session_options.provider_options is an object, expected an array");
  expect("po-entry", paged_doc(", \"session_options\": {\"provider_options\": [\"cuda\"]}", NULL),
         PH_ERR_CONFIG_INVALID,
         "model.decoder.session_options.provider_options[0] is a string, expected an object");
  expect("po-graph",
         paged_doc(", \"session_options\": {\"provider_options\": [{\"cuda\": "
                   "{\"enable_cuda_graph\": 0}}]}",
                   NULL),
         PH_ERR_CONFIG_INVALID,
         "model.decoder.session_options.provider_options[0].cuda.enable_cuda_graph is an "
         "integer, expected a string");
  /* the writer refuses arrays it would overrun */
  genai_config g;
  memset(&g, 0, sizeof g);
  g.n_state_groups = GENAI_MAX_STATE_GROUPS + 1;
  diag d;
  CHECK_STATUS(genai_config_write(&g, tmp_dir("write-too-many"), &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  CHECK_CONTAINS(d.msg, "9 state groups");
  g.n_state_groups = 1;
  g.state_groups[0].n_layer_ids = -1;
  CHECK_STATUS(genai_config_write(&g, tmp_dir("write-bad-ids"), &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  g.n_state_groups = 0;
  g.dynamic_batching.present = 1;
  g.dynamic_batching.gpu_utilization_factor = INFINITY;
  CHECK_STATUS(genai_config_write(&g, tmp_dir("write-bad-factor"), &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  CHECK_CONTAINS(d.msg, "gpu_utilization_factor inf is outside (0, 1]");
}

/* Issue 10 defect 10, the file alone (models/package.h checks it against the graph): page sizes
 * PagedAttention cannot take, decoder.filename values that name a file outside the package, and
 * sizes that contradict each other were all accepted. */
static void test_validation(void) {
  static const int bad_blocks[] = {1, 8, 15, 17, 100, 24, 768};
  for (size_t i = 0; i < sizeof bad_blocks / sizeof bad_blocks[0]; i++) {
    char db[64], name[32], needle[96];
    snprintf(db, sizeof db, "{\"block_size\": %d}", bad_blocks[i]);
    snprintf(name, sizeof name, "block-%d", bad_blocks[i]);
    snprintf(needle, sizeof needle,
             "engine.dynamic_batching.block_size = %d: expected a power of two >= 16",
             bad_blocks[i]);
    expect(name, engine_doc(db), PH_ERR_CONFIG_INVALID, needle);
  }
  expect("block-16", engine_doc("{\"block_size\": 16}"), PH_OK, NULL);
  expect("block-1024", engine_doc("{\"block_size\": 1024}"), PH_OK, NULL);

  static const char *const bad_names[] = {
      "../../etc/passwd", "/etc/passwd", "sub/model.onnx", "..", ".", "", "a\\\\b.onnx"};
  for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
    char doc[512], name[32];
    snprintf(doc, sizeof doc, "{\"model\": {\"type\": \"t\", \"decoder\": {\"filename\": \"%s\"}}}",
             bad_names[i]);
    snprintf(name, sizeof name, "filename-%zu", i);
    expect(name, doc, PH_ERR_CONFIG_INVALID, "model.decoder.filename");
  }
  genai_config g;
  diag d;
  CHECK_STATUS(genai_config_read(put("filename-ok", "{\"model\": {\"type\": \"t\", \"decoder\": "
                                                    "{\"filename\": \"decoder.onnx\"}}}"),
                                 &g, &d),
               PH_OK, d.msg);
  CHECK_EQ_STR(g.filename, "decoder.onnx");
  CHECK_EQ_INT(g.has_decoder, 1);
  CHECK_STATUS(genai_config_read(put("no-decoder", "{\"model\": {\"type\": \"t\"}}"), &g, &d),
               PH_OK, d.msg);
  CHECK_EQ_INT(g.has_decoder, 0); /* the binding says so by name (models/package.h) */
  CHECK_EQ_STR(g.filename, "model.onnx");

  expect("eos-past-vocab",
         "{\"model\": {\"type\": \"t\", \"vocab_size\": 100, \"eos_token_id\": [5, 100]}}",
         PH_ERR_CONFIG_INCONSISTENT, "model.eos_token_id 100 is outside model.vocab_size = 100");
  expect("bos-past-vocab",
         "{\"model\": {\"type\": \"t\", \"vocab_size\": 10, \"bos_token_id\": 10}}",
         PH_ERR_CONFIG_INCONSISTENT, "model.bos_token_id = 10 is outside model.vocab_size = 10");
  expect("heads-not-multiple",
         "{\"model\": {\"type\": \"t\", \"decoder\": {\"num_attention_heads\": 6, "
         "\"num_key_value_heads\": 4}}}",
         PH_ERR_CONFIG_INCONSISTENT, "num_attention_heads = 6 is not a multiple of");
}

/* Issue 10 defect 6: a FIFO given as genai_config.json blocked open() forever. */
static void test_fifo_genai_config(void) {
  char dir[1024], path[4096];
  snprintf(dir, sizeof dir, "%s/fifo", g_tmp);
  diag d;
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
  CHECK(ft_fifo(path, dir, "genai_config.json"));
  genai_config g;
  ft_watchdog(10);
  CHECK_STATUS(genai_config_read(dir, &g, &d), PH_ERR_IO, d.msg);
  ft_watchdog(0);
  CHECK_CONTAINS(d.msg, "genai_config.json: is a FIFO, not a regular file");
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "%s", check_env("PH_TMP_DIR"));
  diag d;
  if (path_mkdirs(g_tmp, &d) != PH_OK) return 1;
  RUN(test_full);
  RUN(test_defaults);
  RUN(test_errors);
  RUN(test_parse_in_memory);
  RUN(test_paged_qwen38);
  RUN(test_paged_variants);
  RUN(test_paged_latent);
  RUN(test_dense_unchanged);
  RUN(test_paged_read);
  RUN(test_paged_errors);
  RUN(test_paged_state_updates);
  RUN(test_validation);
  RUN(test_fifo_genai_config);
  return check_finish();
}
