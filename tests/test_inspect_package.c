/* `pagedhybrid inspect PKG_DIR` on an ONNX package: --json keys (format, ir_version, opsets,
 * op_counts, inputs/outputs with symbolic dims, initializers, external data, runnable,
 * genai_config with state groups), the text form, a package whose operators this build lacks
 * (described, exit 0, runnable false naming them), and typed errors (exit 1) for a malformed
 * model.onnx or genai_config.json. Runs the built binary (PH_CLI). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "check.h"
#include "onnx_testing.h"

static char g_tmp[512];
static char g_out[1024], g_err[1024];
static char *g_stdout, *g_stderr;

static int run_cli(const char *args) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' %s >'%s' 2>'%s'", check_env("PH_CLI"), args, g_out, g_err);
  int st = system(cmd);
  free(g_stdout);
  free(g_stderr);
  g_stdout = g_stderr = NULL;
  size_t n;
  diag d;
  file_read_all(g_out, 16 << 20, &g_stdout, &n, &d);
  file_read_all(g_err, 1 << 20, &g_stderr, &n, &d);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* x f32 [batch, 4] -> MatMul W -> Add b -> SkipSimplifiedLayerNormalization -> Sigmoid twice;
 * op_type of the last node replaceable (an op this build does not have). */
static graph *small_graph(void) {
  diag d;
  graph *g = NULL;
  graph_create(&g, &d);
  float w[12], b[3] = {1, 2, 3}, gamma[3] = {1, 1, 1};
  for (int i = 0; i < 12; i++) w[i] = (float)i / 8;
  int x =
      graph_add_input(g, "x", PH_DTYPE_F32, 2, (int64_t[]){-1, 4}, (const char *[]){"batch", NULL});
  int wi = graph_add_initializer_copy(g, "W", PH_DTYPE_F32, shape_2d(4, 3), w);
  int bi = graph_add_initializer_copy(g, "b", PH_DTYPE_F32, shape_1d(3), b);
  int gi = graph_add_initializer_copy(g, "gamma", PH_DTYPE_F32, shape_1d(3), gamma);
  int v[5];
  gattr eps = attr_float("epsilon", 1e-6f);
  graph_add_node(g, "MatMul", "", "mm", 2, (int[]){x, wi}, 1, (const char *[]){"y"}, &v[0], 0,
                 NULL);
  graph_add_node(g, "Add", "", "add", 2, (int[]){v[0], bi}, 1, (const char *[]){"z"}, &v[1], 0,
                 NULL);
  graph_add_node(g, "SkipSimplifiedLayerNormalization", "com.microsoft", "norm", 3,
                 (int[]){v[1], v[1], gi}, 1, (const char *[]){"n"}, &v[2], 1, &eps);
  graph_add_node(g, "Sigmoid", "", "s1", 1, &v[2], 1, (const char *[]){"s"}, &v[3], 0, NULL);
  graph_add_node(g, "Sigmoid", "", "s2", 1, &v[3], 1, (const char *[]){"out"}, &v[4], 0, NULL);
  graph_mark_output(g, v[4], NULL);
  if (graph_finalize(g, &d) != PH_OK) {
    fprintf(stderr, "  %s\n", d.msg);
    graph_free(g);
    return NULL;
  }
  return g;
}

static const char GENAI[] =
    "{\"model\": {\"type\": \"qwen3_5_text\", \"vocab_size\": 3, \"context_length\": 64,"
    " \"eos_token_id\": [2, 1], \"decoder\": {\"num_hidden_layers\": 4,"
    " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_size\": 2,"
    " \"hidden_size\": 4, \"state_groups\": [{\"kind\": \"paged_kv\", \"layer_ids\": [3]},"
    " {\"kind\": \"fixed_conv\", \"layer_ids\": [0, 1, 2]}]}}}";

/* Writes a package into g_tmp/name: model.onnx (+ data), genai_config.json when genai given. */
static void write_package(const char *name, const char *bad_op, const char *genai) {
  graph *g = small_graph();
  CHECK(g != NULL);
  if (!g) return;
  ot_buf ext = {0};
  Onnx__ModelProto *m = ot_model(g, &ext);
  if (bad_op) ot_set_str(&m->graph->node[4]->op_type, bad_op);
  char dir[1024], path[1200];
  snprintf(dir, sizeof dir, "%s/%s", g_tmp, name);
  diag d;
  CHECK_STATUS(ot_write_dir(m, &ext, dir, &d), PH_OK, d.msg);
  if (genai) {
    snprintf(path, sizeof path, "%s/genai_config.json", dir);
    CHECK_STATUS(file_write_all(path, genai, strlen(genai), &d), PH_OK, d.msg);
  }
  ot_free(m);
  free(ext.p);
  graph_free(g);
}

static json_t *inspect_json(const char *name) {
  char args[1200];
  snprintf(args, sizeof args, "inspect '%s/%s' --json", g_tmp, name);
  int rc = run_cli(args);
  CHECK_EQ_INT(rc, 0);
  if (rc) {
    fprintf(stderr, "%s", g_stderr ? g_stderr : "");
    return NULL;
  }
  json_error_t e;
  json_t *o = json_loads(g_stdout, 0, &e);
  CHECK(o != NULL);
  return o;
}

#define JINT(o, key) json_integer_value(json_object_get((o), (key)))
#define JSTR(o, key) json_string_value(json_object_get((o), (key)))

static void test_package_json(void) {
  write_package("pkg", NULL, GENAI);
  json_t *o = inspect_json("pkg");
  if (!o) return;
  CHECK_EQ_STR(JSTR(o, "format"), "onnx");
  CHECK_EQ_INT(JINT(o, "ir_version"), 8);
  json_t *opsets = json_object_get(o, "opsets");
  CHECK_EQ_INT(JINT(opsets, "ai.onnx"), 17);
  CHECK_EQ_INT(JINT(opsets, "com.microsoft"), 1);
  json_t *ops = json_object_get(o, "op_counts");
  CHECK_EQ_INT(json_object_size(ops), 4);
  CHECK_EQ_INT(JINT(ops, "Sigmoid"), 2);
  CHECK_EQ_INT(JINT(ops, "MatMul"), 1);
  CHECK_EQ_INT(JINT(ops, "com.microsoft.SkipSimplifiedLayerNormalization"), 1);
  json_t *in = json_array_get(json_object_get(o, "inputs"), 0);
  CHECK_EQ_STR(JSTR(in, "name"), "x");
  CHECK_EQ_STR(JSTR(in, "dtype"), "f32");
  json_t *dims = json_object_get(in, "shape");
  CHECK_EQ_STR(json_string_value(json_array_get(dims, 0)), "batch");
  CHECK_EQ_INT(json_integer_value(json_array_get(dims, 1)), 4);
  json_t *out = json_array_get(json_object_get(o, "outputs"), 0);
  CHECK_EQ_STR(JSTR(out, "name"), "out");
  dims = json_object_get(out, "shape");
  CHECK(json_is_null(json_array_get(dims, 0))); /* anonymous unknown */
  CHECK_EQ_INT(json_integer_value(json_array_get(dims, 1)), 3);
  CHECK_EQ_INT(JINT(o, "initializers"), 3);
  CHECK_EQ_INT(JINT(o, "external_data_bytes"), 48 + 12 + 12);
  CHECK(json_is_true(json_object_get(o, "runnable")));
  json_t *gc = json_object_get(o, "genai_config");
  CHECK_EQ_STR(JSTR(gc, "type"), "qwen3_5_text");
  CHECK_EQ_INT(JINT(gc, "num_hidden_layers"), 4);
  CHECK_EQ_INT(JINT(gc, "num_key_value_heads"), 1);
  CHECK_EQ_INT(json_array_size(json_object_get(gc, "eos_token_ids")), 2);
  json_t *groups = json_object_get(gc, "state_groups");
  CHECK_EQ_INT(json_array_size(groups), 2);
  CHECK_EQ_STR(JSTR(json_array_get(groups, 1), "kind"), "fixed_conv");
  CHECK_EQ_INT(json_array_size(json_object_get(json_array_get(groups, 1), "layer_ids")), 3);
  json_decref(o);

  char args[1200];
  snprintf(args, sizeof args, "inspect '%s/pkg'", g_tmp);
  CHECK_EQ_INT(run_cli(args), 0);
  CHECK_CONTAINS(g_stdout, "IR version 8, opsets ai.onnx 17, com.microsoft 1");
  CHECK_CONTAINS(g_stdout, "com.microsoft.SkipSimplifiedLayerNormalization");
  CHECK_CONTAINS(g_stdout, "f32[batch, 4]");
  CHECK_CONTAINS(g_stdout, "f32[?, 3]");
  CHECK_CONTAINS(g_stdout, "runs here     yes");
  CHECK_CONTAINS(g_stdout, "qwen3_5_text, 4 layers");
  CHECK_CONTAINS(g_stdout, "state group paged_kv");
}

static void test_package_unsupported_op(void) {
  write_package("pkg_frob", "Frobnicate", NULL);
  json_t *o = inspect_json("pkg_frob");
  if (!o) return;
  CHECK(json_is_false(json_object_get(o, "runnable")));
  CHECK_CONTAINS(JSTR(o, "runnable_error"), "PH_ERR_UNSUPPORTED");
  CHECK_CONTAINS(JSTR(o, "runnable_error"), "Frobnicate");
  CHECK_EQ_INT(JINT(json_object_get(o, "op_counts"), "Frobnicate"), 1);
  CHECK(json_is_null(json_object_get(o, "genai_config")));
  json_decref(o);
}

static void test_package_errors(void) {
  write_package("pkg_badcfg", NULL,
                "{\"model\": {\"type\": \"t\", \"decoder\": {\"head_size\": []}}}");
  char args[1200], path[1200];
  snprintf(args, sizeof args, "inspect '%s/pkg_badcfg'", g_tmp);
  CHECK_EQ_INT(run_cli(args), 1);
  CHECK_CONTAINS(g_stderr, "error: PH_ERR_CONFIG_INVALID");
  CHECK_CONTAINS(g_stderr, "model.decoder.head_size");

  write_package("pkg_garbage", NULL, NULL);
  snprintf(path, sizeof path, "%s/pkg_garbage/model.onnx", g_tmp);
  diag d;
  CHECK_STATUS(file_write_all(path, "\xff\xff\xff", 3, &d), PH_OK, d.msg);
  snprintf(args, sizeof args, "inspect '%s/pkg_garbage' --json", g_tmp);
  CHECK_EQ_INT(run_cli(args), 1);
  CHECK_CONTAINS(g_stderr, "error: PH_ERR_ONNX");
  CHECK_CONTAINS(g_stderr, "model.onnx");
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "%s", check_env("PH_TMP_DIR"));
  diag d;
  if (path_mkdirs(g_tmp, &d) != PH_OK) return 1;
  snprintf(g_out, sizeof g_out, "%s/stdout.txt", g_tmp);
  snprintf(g_err, sizeof g_err, "%s/stderr.txt", g_tmp);
  RUN(test_package_json);
  RUN(test_package_unsupported_op);
  RUN(test_package_errors);
  free(g_stdout);
  free(g_stderr);
  return check_finish();
}
