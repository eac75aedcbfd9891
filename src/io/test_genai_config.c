/* genai_config reader: a full file, defaults for absent keys, eos as one id or a list, and each
 * bad input a typed error naming the key path (wrong types, templates without exactly one %d,
 * malformed JSON, missing model/model.type, missing file). */
#include <stdio.h>
#include <string.h>

#include "base/fmap.h"
#include "check.h"
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

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "%s", check_env("PH_TMP_DIR"));
  diag d;
  if (path_mkdirs(g_tmp, &d) != PH_OK) return 1;
  RUN(test_full);
  RUN(test_defaults);
  RUN(test_errors);
  RUN(test_parse_in_memory);
  return check_finish();
}
