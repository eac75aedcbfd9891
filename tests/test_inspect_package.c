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
#include <unistd.h>

#include "check.h"
#include "models/package.h"
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

/* Writes a package into g_tmp/name: model.onnx with every initializer external, its data file
 * when with_data, genai_config.json when genai given; metadata_props carries the config-only
 * marker (io/onnx.h) with value config_only when that is not NULL. A data file left by an
 * earlier run is removed first. */
static void write_package_ex(const char *name, const char *bad_op, const char *genai,
                             const char *config_only, int with_data) {
  graph *g = small_graph();
  CHECK(g != NULL);
  if (!g) return;
  ot_buf ext = {0};
  Onnx__ModelProto *m = ot_model(g, &ext);
  if (bad_op) ot_set_str(&m->graph->node[4]->op_type, bad_op);
  if (config_only)
    OT_APPEND(m->n_metadata_props, m->metadata_props, ot_entry(ONNX_META_CONFIG_ONLY, config_only));
  char dir[1024], path[1200];
  snprintf(dir, sizeof dir, "%s/%s", g_tmp, name);
  snprintf(path, sizeof path, "%s/%s", dir, ONNX_DATA_FILE);
  remove(path);
  diag d;
  CHECK_STATUS(ot_write_dir(m, with_data ? &ext : NULL, dir, &d), PH_OK, d.msg);
  if (genai) {
    snprintf(path, sizeof path, "%s/genai_config.json", dir);
    CHECK_STATUS(file_write_all(path, genai, strlen(genai), &d), PH_OK, d.msg);
  }
  ot_free(m);
  free(ext.p);
  graph_free(g);
}

static void write_package(const char *name, const char *bad_op, const char *genai) {
  write_package_ex(name, bad_op, genai, NULL, 1);
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
  CHECK_EQ_INT(JINT(o, "parameters"), 12 + 3 + 3);
  CHECK_EQ_INT(JINT(o, "external_data_bytes"), 48 + 12 + 12);
  CHECK(json_is_false(json_object_get(o, "config_only")));
  CHECK(json_is_true(json_object_get(o, "weights_present")));
  /* the graph runs, but this genai_config.json does not describe it (no input_ids, no logits):
   * the package as a whole does not run, and says why (models/package.h) */
  CHECK(json_is_false(json_object_get(o, "runnable")));
  CHECK_CONTAINS(JSTR(o, "runnable_error"), "PH_ERR_CONFIG_INCONSISTENT");
  CHECK_CONTAINS(JSTR(o, "runnable_error"), "model.decoder.inputs.input_ids");
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
  CHECK_CONTAINS(g_stdout, "runs here     no: PH_ERR_CONFIG_INCONSISTENT");
  CHECK_CONTAINS(g_stdout, "qwen3_5_text, 4 layers");
  CHECK_CONTAINS(g_stdout, "state group paged_kv");
}

static void test_package_without_config(void) {
  write_package("pkg_nocfg", NULL, NULL);
  json_t *o = inspect_json("pkg_nocfg");
  if (!o) return;
  CHECK(json_is_true(json_object_get(o, "runnable")));
  CHECK(json_is_null(json_object_get(o, "genai_config")));
  json_decref(o);
  char args[1200];
  snprintf(args, sizeof args, "inspect '%s/pkg_nocfg'", g_tmp);
  CHECK_EQ_INT(run_cli(args), 0);
  CHECK_CONTAINS(g_stdout, "runs here     yes");
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

/* A package marked config-only (export --config-only: model.onnx, no model.onnx.data) is
 * described from model.onnx alone, says it has no weights (JSON config_only / weights_present,
 * a text line) and what they would take, and does not run; --check-weights refuses it. */
static void test_config_only_package(void) {
  write_package_ex("pkg_co", NULL, NULL, "true", 0);
  json_t *o = inspect_json("pkg_co");
  if (!o) return;
  CHECK(json_is_true(json_object_get(o, "config_only")));
  CHECK(json_is_false(json_object_get(o, "weights_present")));
  CHECK_EQ_INT(JINT(json_object_get(o, "op_counts"), "Sigmoid"), 2);
  CHECK_EQ_INT(json_array_size(json_object_get(o, "inputs")), 1);
  CHECK_EQ_INT(JINT(o, "initializers"), 3);
  CHECK_EQ_INT(JINT(o, "parameters"), 12 + 3 + 3);
  CHECK_EQ_INT(JINT(o, "initializer_bytes"), 48 + 12 + 12);
  CHECK_EQ_INT(JINT(o, "external_data_bytes"), 48 + 12 + 12);
  CHECK(json_is_false(json_object_get(o, "runnable")));
  CHECK_CONTAINS(JSTR(o, "runnable_error"), "PH_ERR_INVALID_ARGUMENT");
  CHECK_CONTAINS(JSTR(o, "runnable_error"), "no weights");
  json_decref(o);
  char args[1200];
  snprintf(args, sizeof args, "inspect '%s/pkg_co'", g_tmp);
  CHECK_EQ_INT(run_cli(args), 0);
  CHECK_CONTAINS(g_stdout, "72 B external data, not written)");
  CHECK_CONTAINS(g_stdout, "parameters    18\n");
  CHECK_CONTAINS(g_stdout, "weights       none: a config-only package");
  CHECK_CONTAINS(g_stdout, "runs here     no: PH_ERR_INVALID_ARGUMENT: no weights");
  snprintf(args, sizeof args, "inspect '%s/pkg_co' --check-weights", g_tmp);
  CHECK_EQ_INT(run_cli(args), 1);
  CHECK_CONTAINS(g_stderr, "error: PH_ERR_INVALID_ARGUMENT");
  CHECK_CONTAINS(g_stderr, "no weights to check");
  CHECK(!g_stdout || !g_stdout[0]);
  /* a structure that does not check is reported before the missing weights */
  write_package_ex("pkg_co_cfg", NULL, GENAI, "true", 0);
  o = inspect_json("pkg_co_cfg");
  if (o) {
    CHECK(json_is_true(json_object_get(o, "config_only")));
    CHECK_CONTAINS(JSTR(o, "runnable_error"), "PH_ERR_CONFIG_INCONSISTENT");
  }
  json_decref(o);
  /* the library: read for running, refused as config-only; read to describe, no data */
  char dir[1100];
  snprintf(dir, sizeof dir, "%s/pkg_co", g_tmp);
  graph *g = NULL;
  diag d;
  onnx_model_info info;
  CHECK_STATUS(package_read(dir, PACKAGE_FINALIZE | PACKAGE_CHECK, NULL, NULL, &g, NULL, &d),
               PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "config-only package");
  CHECK(g == NULL);
  CHECK_STATUS(package_read(dir, PACKAGE_FINALIZE | PACKAGE_CONFIG_ONLY, NULL, NULL, &g, &info, &d),
               PH_OK, d.msg);
  CHECK_EQ_INT(info.config_only, 1);
  const int w = g ? graph_find_value(g, "W") : -1;
  CHECK(w >= 0 && g->values[w].type.data == NULL);
  graph_free(g);
}

/* A package that is not marked config-only and lacks its data file, or holds a short one, is
 * damaged: a typed error naming the file, never a description without weights. */
static void test_damaged_package(void) {
  char args[1200];
  write_package_ex("pkg_nodata", NULL, GENAI, NULL, 0);
  write_package_ex("pkg_nodata_false", NULL, NULL, "false", 0);
  static const char *const names[] = {"pkg_nodata", "pkg_nodata_false"};
  for (int i = 0; i < 2; i++) {
    snprintf(args, sizeof args, "inspect '%s/%s' --json", g_tmp, names[i]);
    CHECK_EQ_INT(run_cli(args), 1);
    CHECK_CONTAINS(g_stderr, "error: PH_ERR_NOT_FOUND");
    CHECK_CONTAINS(g_stderr, "model.onnx.data");
    CHECK(!g_stdout || !g_stdout[0]);
  }
  write_package("pkg_short", NULL, NULL);
  char path[1200];
  snprintf(path, sizeof path, "%s/pkg_short/%s", g_tmp, ONNX_DATA_FILE);
  CHECK(truncate(path, 40) == 0);
  snprintf(args, sizeof args, "inspect '%s/pkg_short'", g_tmp);
  CHECK_EQ_INT(run_cli(args), 1);
  CHECK_CONTAINS(g_stderr, "error: PH_ERR_ONNX");
  CHECK_CONTAINS(g_stderr, "lies outside model.onnx.data (40 bytes)");
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

/* ---- genai_config.json against its graph (issue 10 defect 10) -----------------------------------
 * A real package (make-tiny, export --layout paged --target cpu), copied with one key of its
 * genai_config.json changed. Before, every case below was accepted: block sizes PagedAttention
 * cannot take, a decoder.filename naming a file outside the package (or ignored: model.onnx was
 * always read), and sizes that disagree with the graph; a missing decoder was reported as
 * "num_hidden_layers 0". Now: the file's own errors and a filename that cannot be read fail every
 * command (exit 1); a config that contradicts the graph fails generate and run (exit 1) and
 * inspect describes the package with runnable false and the reason. */

static char g_base[1024], g_requests[1024];

static int copy_into(const char *from_dir, const char *to_dir, const char *name, const char *as) {
  char a[1200], b[1200];
  snprintf(a, sizeof a, "%s/%s", from_dir, name);
  snprintf(b, sizeof b, "%s/%s", to_dir, as ? as : name);
  char *text = NULL;
  size_t n = 0;
  diag d;
  ph_status s = file_read_all(a, 64 << 20, &text, &n, &d);
  if (s == PH_OK) s = file_write_all(b, text, n, &d);
  free(text);
  CHECK_STATUS(s, PH_OK, d.msg);
  return s == PH_OK;
}

/* root's value at a dotted path set to v (stolen), or removed when v is NULL. */
static void jset(json_t *root, const char *path, json_t *v) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", path);
  json_t *o = root;
  char *key = buf, *dot;
  while ((dot = strchr(key, '.')) != NULL) {
    *dot = '\0';
    o = json_object_get(o, key);
    key = dot + 1;
  }
  if (v)
    json_object_set_new(o, key, v);
  else
    json_object_del(o, key);
}

/* g_tmp/name: the package in base with path set to v (NULL: removed); model as model_name. */
static const char *variant_of(const char *base, const char *name, const char *path, json_t *v,
                              const char *model_name) {
  static char dir[1024];
  snprintf(dir, sizeof dir, "%s/%s", g_tmp, name);
  diag d;
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
  copy_into(base, dir, "model.onnx", model_name);
  copy_into(base, dir, "model.onnx.data", NULL);
  char cfg[1200];
  snprintf(cfg, sizeof cfg, "%s/genai_config.json", base);
  json_error_t e;
  json_t *root = json_load_file(cfg, 0, &e);
  CHECK(root != NULL);
  if (!root) return dir;
  if (path) jset(root, path, v);
  snprintf(cfg, sizeof cfg, "%s/genai_config.json", dir);
  char *text = json_dumps(root, JSON_INDENT(2));
  CHECK_STATUS(file_write_all(cfg, text, strlen(text), &d), PH_OK, d.msg);
  free(text);
  json_decref(root);
  return dir;
}

static const char *variant(const char *name, const char *path, json_t *v, const char *model_name) {
  return variant_of(g_base, name, path, v, model_name);
}

/* generate and run both refuse dir with status (its name) and needle in the message. */
static void expect_refused(const char *dir, const char *status, const char *needle) {
  char args[4096];
  snprintf(args, sizeof args, "generate --model '%s' --tokens 1,2 --max-new 1", dir);
  CHECK_EQ_INT(run_cli(args), 1);
  CHECK_CONTAINS(g_stderr, status);
  CHECK_CONTAINS(g_stderr, needle);
  snprintf(args, sizeof args, "run --model '%s' --requests '%s'", dir, g_requests);
  CHECK_EQ_INT(run_cli(args), 1);
  CHECK_CONTAINS(g_stderr, status);
  CHECK_CONTAINS(g_stderr, needle);
}

/* A file error: inspect refuses too. */
static void expect_file_error(const char *dir, const char *status, const char *needle) {
  char args[4096];
  snprintf(args, sizeof args, "inspect '%s'", dir);
  CHECK_EQ_INT(run_cli(args), 1);
  CHECK_CONTAINS(g_stderr, status);
  CHECK_CONTAINS(g_stderr, needle);
  expect_refused(dir, status, needle);
}

/* A contradiction with the graph: inspect describes the package, not runnable, and says why. */
static void expect_mismatch(const char *dir, const char *status, const char *needle) {
  char args[4096];
  snprintf(args, sizeof args, "inspect '%s' --json", dir);
  CHECK_EQ_INT(run_cli(args), 0);
  json_error_t e;
  json_t *o = g_stdout ? json_loads(g_stdout, 0, &e) : NULL;
  CHECK(o && json_is_false(json_object_get(o, "runnable")));
  CHECK_CONTAINS(o ? JSTR(o, "runnable_error") : "", status);
  CHECK_CONTAINS(o ? JSTR(o, "runnable_error") : "", needle);
  json_decref(o);
  expect_refused(dir, status, needle);
  /* the library call every command goes through */
  graph *g = NULL;
  diag d;
  CHECK(package_read(dir, PACKAGE_FINALIZE | PACKAGE_CHECK, NULL, NULL, &g, NULL, &d) != PH_OK);
  CHECK_CONTAINS(d.msg, needle);
  CHECK(g == NULL);
}

static void test_genai_against_graph(void) {
  char args[4096], ckpt[1024];
  snprintf(ckpt, sizeof ckpt, "%s/tiny-ckpt", g_tmp);
  snprintf(g_base, sizeof g_base, "%s/tiny-pkg", g_tmp);
  snprintf(args, sizeof args, "make-tiny --out '%s' --force", ckpt);
  CHECK_EQ_INT(run_cli(args), 0);
  snprintf(args, sizeof args, "export '%s' -o '%s' --layout paged --target cpu --force", ckpt,
           g_base);
  CHECK_EQ_INT(run_cli(args), 0);
  snprintf(g_requests, sizeof g_requests, "%s/requests.jsonl", g_tmp);
  diag d;
  const char *req = "{\"id\": \"a\", \"prompt_tokens\": [1, 2], \"max_new_tokens\": 1}\n";
  CHECK_STATUS(file_write_all(g_requests, req, strlen(req), &d), PH_OK, d.msg);
  /* the base package is consistent: every command accepts it */
  const char *dir = variant("gc_same", NULL, NULL, NULL);
  snprintf(args, sizeof args, "generate --model '%s' --tokens 1,2 --max-new 2", dir);
  CHECK_EQ_INT(run_cli(args), 0);
  char base_out[256];
  snprintf(base_out, sizeof base_out, "%s", g_stdout ? g_stdout : "");
  snprintf(args, sizeof args, "run --model '%s' --requests '%s'", dir, g_requests);
  CHECK_EQ_INT(run_cli(args), 0);
  json_t *o = inspect_json("gc_same");
  CHECK(o && json_is_true(json_object_get(o, "runnable")));
  json_decref(o);

  /* page sizes PagedAttention cannot take */
  static const int bad_blocks[] = {1, 8, 15, 17, 100};
  for (size_t i = 0; i < sizeof bad_blocks / sizeof bad_blocks[0]; i++) {
    char name[32], needle[64];
    snprintf(name, sizeof name, "gc_block_%d", bad_blocks[i]);
    snprintf(needle, sizeof needle, "block_size = %d: expected a power of two", bad_blocks[i]);
    dir = variant(name, "engine.dynamic_batching.block_size", json_integer(bad_blocks[i]), NULL);
    expect_file_error(dir, "error: PH_ERR_CONFIG_INVALID", needle);
  }
  /* decoder.filename: confined to the package, and honoured */
  dir = variant("gc_file_dotdot", "model.decoder.filename", json_string("../../etc/passwd"), NULL);
  expect_file_error(dir, "error: PH_ERR_CONFIG_INVALID", "filename = \"../../etc/passwd\"");
  dir = variant("gc_file_abs", "model.decoder.filename", json_string("/etc/passwd"), NULL);
  expect_file_error(dir, "error: PH_ERR_CONFIG_INVALID", "filename = \"/etc/passwd\"");
  dir = variant("gc_file_missing", "model.decoder.filename", json_string("missing.onnx"), NULL);
  expect_file_error(dir, "error: PH_ERR_NOT_FOUND", "missing.onnx");
  dir = variant("gc_file_link", "model.decoder.filename", json_string("escape.onnx"), NULL);
  char link[1200], target[1200];
  snprintf(link, sizeof link, "%s/escape.onnx", dir);
  snprintf(target, sizeof target, "%s/model.onnx", g_base);
  unlink(link);
  CHECK(symlink(target, link) == 0);
  expect_file_error(dir, "error: PH_ERR_CONFIG_INVALID", "resolves outside the package");
  dir = variant("gc_file_other", "model.decoder.filename", json_string("decoder.onnx"),
                "decoder.onnx");
  snprintf(args, sizeof args, "generate --model '%s' --tokens 1,2 --max-new 2", dir);
  CHECK_EQ_INT(run_cli(args), 0);
  CHECK_EQ_STR(g_stdout ? g_stdout : "", base_out);
  snprintf(args, sizeof args, "run --model '%s' --requests '%s'", dir, g_requests);
  CHECK_EQ_INT(run_cli(args), 0);
  o = inspect_json("gc_file_other");
  CHECK(o && json_is_true(json_object_get(o, "runnable")));
  json_decref(o);

  /* sizes that disagree with the graph */
  static const struct {
    const char *name, *path;
    int64_t value;
    const char *needle;
  } sizes[] = {
      {"gc_vocab", "model.vocab_size", 257, "model.vocab_size = 257, but the graph has 256"},
      {"gc_layers", "model.decoder.num_hidden_layers", 5,
       "num_hidden_layers = 5, but the graph has state inputs for 4 layers"},
      {"gc_heads", "model.decoder.num_attention_heads", 2,
       "num_attention_heads = 2, but the graph has 4"},
      {"gc_kv_heads", "model.decoder.num_key_value_heads", 1,
       "num_key_value_heads = 1, but the graph has 2"},
      {"gc_head_size", "model.decoder.head_size", 16, "head_size = 16, but the graph has 32"},
      {"gc_hidden", "model.decoder.hidden_size", 32, "hidden_size = 32, but the graph has 64"},
      {"gc_block_32", "engine.dynamic_batching.block_size", 32,
       "block_size = 32, but the graph has 16"},
      {"gc_context", "model.context_length", 40000,
       "context_length = 40000, but the graph's rotary cache (cos_cache) has 32768"},
  };
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    dir = variant(sizes[i].name, sizes[i].path, json_integer(sizes[i].value), NULL);
    expect_mismatch(dir, "PH_ERR_CONFIG_INCONSISTENT", sizes[i].needle);
  }
  /* a missing decoder says so (it read "num_hidden_layers 0") */
  dir = variant("gc_no_decoder", "model.decoder", NULL, NULL);
  expect_mismatch(dir, "PH_ERR_CONFIG_MISSING_FIELD", "model.decoder is missing");

  /* the dense layout is checked the same way by generate (run takes paged packages only) */
  char dense[1024];
  snprintf(dense, sizeof dense, "%s/tiny-dense", g_tmp);
  snprintf(args, sizeof args, "export '%s' -o '%s' --force", ckpt, dense);
  CHECK_EQ_INT(run_cli(args), 0);
  static const struct {
    const char *name, *path;
    int64_t value;
    const char *needle;
  } dense_sizes[] = {
      {"gcd_vocab", "model.vocab_size", 300, "model.vocab_size = 300, but the graph has 256"},
      {"gcd_layers", "model.decoder.num_hidden_layers", 3,
       "num_hidden_layers = 3, but the graph has state inputs for 4 layers"},
      {"gcd_kv_heads", "model.decoder.num_key_value_heads", 4,
       "num_key_value_heads = 4, but the graph has 2"},
  };
  for (size_t i = 0; i < sizeof dense_sizes / sizeof dense_sizes[0]; i++) {
    dir = variant_of(dense, dense_sizes[i].name, dense_sizes[i].path,
                     json_integer(dense_sizes[i].value), NULL);
    snprintf(args, sizeof args, "generate --model '%s' --tokens 1,2 --max-new 1", dir);
    CHECK_EQ_INT(run_cli(args), 1);
    CHECK_CONTAINS(g_stderr, "error: PH_ERR_CONFIG_INCONSISTENT");
    CHECK_CONTAINS(g_stderr, dense_sizes[i].needle);
  }
  dir = variant_of(dense, "gcd_same", NULL, NULL, NULL);
  snprintf(args, sizeof args, "generate --model '%s' --tokens 1,2 --max-new 2", dir);
  CHECK_EQ_INT(run_cli(args), 0);
  CHECK_EQ_STR(g_stdout ? g_stdout : "", base_out); /* the same model, either layout */
}

/* Issue 10 defect 1 at the command line: the 3,000-deep model (the fuzz seed) crashed inspect,
 * generate and run with a stack overflow; each now exits 1 with PH_ERR_LIMIT. Runs after
 * test_genai_against_graph, whose package supplies a genai_config.json. */
/* A package exported with compact state updates says so, in the text and in the JSON. */
static void test_state_update_package(void) {
  char args[4096], ckpt[1024], pkg[1024];
  snprintf(ckpt, sizeof ckpt, "%s/tiny-ckpt-su", g_tmp);
  snprintf(pkg, sizeof pkg, "%s/tiny-pkg-su", g_tmp);
  snprintf(args, sizeof args, "make-tiny --out '%s' --force", ckpt);
  CHECK_EQ_INT(run_cli(args), 0);
  snprintf(args, sizeof args,
           "export '%s' -o '%s' --layout paged --target cpu --state-update-capacity 6 --force",
           ckpt, pkg);
  CHECK_EQ_INT(run_cli(args), 0);
  snprintf(args, sizeof args, "inspect '%s'", pkg);
  CHECK_EQ_INT(run_cli(args), 0);
  CHECK_CONTAINS(g_stdout, "state updates:    capacity 6");
  json_t *o = inspect_json("tiny-pkg-su");
  if (!o) return;
  CHECK_EQ_INT(JINT(json_object_get(o, "genai_config"), "state_update_capacity"), 6);
  json_decref(o);
}

static void test_deep_model(void) {
  char seed[1024], args[4096];
  snprintf(seed, sizeof seed, "%s/fuzz/corpus/onnx/deep_subgraphs_3000_crasher",
           check_env("PH_SOURCE_DIR"));
  const char *dir = variant("deep_model", NULL, NULL, NULL);
  char *bytes = NULL;
  size_t n = 0;
  diag d;
  CHECK_STATUS(file_read_all(seed, 1 << 20, &bytes, &n, &d), PH_OK, d.msg);
  char path[1200];
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  CHECK_STATUS(file_write_all(path, bytes, n, &d), PH_OK, d.msg);
  free(bytes);
  snprintf(args, sizeof args, "inspect '%s'", dir);
  CHECK_EQ_INT(run_cli(args), 1);
  CHECK_CONTAINS(g_stderr, "error: PH_ERR_LIMIT");
  CHECK_CONTAINS(g_stderr, "nest more than 100 deep");
  expect_refused(dir, "error: PH_ERR_LIMIT", "nest more than 100 deep");
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "%s", check_env("PH_TMP_DIR"));
  diag d;
  if (path_mkdirs(g_tmp, &d) != PH_OK) return 1;
  snprintf(g_out, sizeof g_out, "%s/stdout.txt", g_tmp);
  snprintf(g_err, sizeof g_err, "%s/stderr.txt", g_tmp);
  RUN(test_package_json);
  RUN(test_package_without_config);
  RUN(test_package_unsupported_op);
  RUN(test_genai_against_graph);
  RUN(test_deep_model);
  RUN(test_state_update_package);
  RUN(test_package_errors);
  RUN(test_config_only_package);
  RUN(test_damaged_package);
  free(g_stdout);
  free(g_stderr);
  return check_finish();
}
