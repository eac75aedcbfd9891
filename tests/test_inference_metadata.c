/* inference_metadata.json (io/inference_metadata.h): what `export` writes is checked against the
 * package's graph as read back from model.onnx and its genai_config.json — the tiny golden
 * checkpoint in the packed paged layout (CUDA and CPU targets, pruned logits), the dense layout,
 * and the Qwen3.8-27B config-only export — and the facts the document states are asserted here
 * from the model config, independently of the writer: which layers hold which state, the io dtype
 * of KV pages and conv state, f32 V-major recurrent state, the page size. Then the document is
 * corrupted one fact at a time (a layer id, a dtype, a tensor name, a dim, a binding, a missing
 * group, a malformed file) and the checker must refuse each with its typed status, naming the
 * key; and a genai_config that disagrees with the graph is refused too. */
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fmap.h"
#include "check.h"
#include "cli_testing.h"
#include "file_testing.h"
#include "io/genai_config.h"
#include "io/inference_metadata.h"
#include "io/onnx.h"
#include "model_testing.h"
#include "models/export.h"
#include "models/model.h"
#include "models/package.h"

static char g_tmp[512];

/* A rerun finds the last run's package (exports use force): its metadata file must not pass for
 * one this run wrote. */
static void remove_metadata(const char *pkg) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", pkg, INFERENCE_METADATA_FILE);
  unlink(path);
}

/* Exports the golden f32 checkpoint into g_tmp/name; 0 on failure. */
static int export_golden(const char *name, const export_options *o, char *pkg, size_t n) {
  char ckpt[1024];
  check_data(ckpt, sizeof ckpt, "golden/qwen35-tiny-f32/checkpoint");
  snprintf(pkg, n, "%s/%s", g_tmp, name);
  remove_metadata(pkg);
  ph_model *m = mt_open(ckpt, 1);
  if (!m) return 0;
  export_options opt = *o;
  opt.force = 1; /* a rerun in the same build directory finds the last run's package */
  diag d;
  ph_status s = model_export(m, pkg, &opt, &d);
  CHECK_STATUS(s, PH_OK, d.msg);
  ph_model_free(m);
  return s == PH_OK;
}

static json_t *load_doc(const char *pkg) {
  char path[1200];
  snprintf(path, sizeof path, "%s/%s", pkg, INFERENCE_METADATA_FILE);
  json_error_t e;
  json_t *root = json_load_file(path, 0, &e);
  if (!root) fprintf(stderr, "  %s:%d: %s\n", path, e.line, e.text);
  CHECK(root != NULL);
  return root;
}

/* The value at path: keys separated by '/', "#k" an array index. NULL when absent. */
static json_t *at(json_t *root, const char *path) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", path);
  json_t *v = root;
  for (char *save = NULL, *seg = strtok_r(buf, "/", &save); v && seg;
       seg = strtok_r(NULL, "/", &save))
    v = seg[0] == '#' ? json_array_get(v, (size_t)atoi(seg + 1)) : json_object_get(v, seg);
  return v;
}

static const char *str_at(json_t *root, const char *path) {
  const char *s = json_string_value(at(root, path));
  return s ? s : "(absent)";
}

/* The layer ids of the aliases of a state-service group, in file order, as "0,1,2". */
static void group_layers(json_t *doc, const char *group, char *out, size_t n) {
  char path[256];
  snprintf(path, sizeof path, "pipeline/workflow/serving/state_service/groups/%s/ports/decoder",
           group);
  const char *key;
  json_t *al;
  size_t at_ = 0;
  out[0] = '\0';
  json_object_foreach(at(doc, path), key, al) {
    at_ += (size_t)snprintf(out + at_, n - at_, "%s%lld", at_ ? "," : "",
                            (long long)json_integer_value(json_object_get(al, "layer")));
  }
}

/* "0,1,2": the ids of the layers of kind k in the model config. */
static void config_layers(const hf_config *c, ph_layer_kind k, char *out, size_t n) {
  size_t at_ = 0;
  out[0] = '\0';
  for (int i = 0; i < (int)c->n_layers; i++)
    if (c->layer_kind[i] == k)
      at_ += (size_t)snprintf(out + at_, n - at_, "%s%d", at_ ? "," : "", i);
}

/* Reads pkg's graph and genai_config as a loader would. */
static graph *read_package(const char *pkg, unsigned flags, genai_config *gc) {
  graph *g = NULL;
  diag d;
  int has = 0;
  CHECK_STATUS(package_read(pkg, flags, gc, &has, &g, NULL, &d), PH_OK, d.msg);
  CHECK(has);
  return g;
}

/* ---- corruptions ------------------------------------------------------------------------------
 */

typedef enum { SET, DEL, RENAME } edit_kind;

typedef struct corruption {
  const char *what;
  edit_kind kind;
  const char *path;  /* '/'-separated */
  const char *value; /* SET: JSON text; RENAME: the new key */
  ph_status want;
  const char *needle; /* the message must contain it */
} corruption;

#define PORTS_IN  "pipeline/workflow/components/decoder/ports/inputs/"
#define PORTS_OUT "pipeline/workflow/components/decoder/ports/outputs/"
#define GROUPS    "pipeline/workflow/serving/state_service/groups/"
#define CONV_AL   GROUPS "fixed_conv/ports/decoder/"
#define BINDINGS  "pipeline/workflow/components/decoder/contract/bindings/"

/* Applies c to a copy of doc; NULL when the path does not lead anywhere (a broken case). */
static char *corrupt(json_t *doc, const corruption *c) {
  json_t *copy = json_deep_copy(doc);
  char parent[512];
  snprintf(parent, sizeof parent, "%s", c->path);
  char *slash = strrchr(parent, '/');
  const char *last = slash ? slash + 1 : parent;
  if (slash) *slash = '\0';
  json_t *p = slash ? at(copy, parent) : copy;
  int ok = p != NULL;
  if (ok && c->kind == SET) {
    json_t *v = json_loads(c->value, JSON_DECODE_ANY, NULL);
    ok = v && (json_is_array(p) ? json_array_set_new(p, (size_t)atoi(last + 1), v)
                                : json_object_set_new(p, last, v)) == 0;
  } else if (ok && c->kind == DEL) {
    ok = json_object_del(p, last) == 0;
  } else if (ok) {
    json_t *v = json_object_get(p, last);
    ok = v && json_object_set(p, c->value, v) == 0 && json_object_del(p, last) == 0;
  }
  char *text = ok ? json_dumps(copy, JSON_COMPACT) : NULL;
  json_decref(copy);
  return text;
}

static void expect_refused(json_t *doc, const corruption *cases, size_t n, const graph *g,
                           const genai_config *gc) {
  for (size_t i = 0; i < n; i++) {
    const corruption *c = &cases[i];
    char *text = corrupt(doc, c);
    if (!text) {
      fprintf(stderr, "  case \"%s\": %s does not exist in the document\n", c->what, c->path);
      CHECK(text != NULL);
      continue;
    }
    diag d;
    diag_clear(&d);
    ph_status s = inference_metadata_check_text(text, strlen(text), "corrupt", g, gc, &d);
    if (s != c->want || !strstr(d.msg, c->needle))
      fprintf(stderr, "  case \"%s\": got %s: %s\n", c->what, ph_status_name(s), d.msg);
    CHECK_STATUS(s, c->want, d.msg);
    CHECK_CONTAINS(d.msg, c->needle);
    free(text);
  }
}

/* ---- the tests --------------------------------------------------------------------------------
 */

/* The default (CUDA-target) paged export of the golden checkpoint: the file is checked against
 * the graph read back (as built and finalized, and as declared), and what it says is the model. */
static void test_paged_package(void) {
  export_options o = export_options_default();
  o.layout = EXPORT_LAYOUT_PAGED;
  char pkg[600], ckpt[1024];
  if (!export_golden("paged-cuda", &o, pkg, sizeof pkg)) return;
  genai_config gc;
  diag d;
  for (int finalize = 0; finalize < 2; finalize++) {
    graph *g = read_package(pkg, finalize ? PACKAGE_FINALIZE | PACKAGE_CHECK : 0, &gc);
    if (g) CHECK_STATUS(inference_metadata_check(pkg, g, &gc, &d), PH_OK, d.msg);
    graph_free(g);
  }
  json_t *doc = load_doc(pkg);
  ph_model *m = mt_open(check_data(ckpt, sizeof ckpt, "golden/qwen35-tiny-f32/checkpoint"), 0);
  if (!doc || !m) {
    json_decref(doc);
    ph_model_free(m);
    return;
  }
  const hf_config *c = model_config(m);
  char want[256], got[256];
  config_layers(c, PH_LAYER_LINEAR_ATTENTION, want, sizeof want);
  group_layers(doc, "fixed_conv", got, sizeof got);
  CHECK_EQ_STR(got, want);
  group_layers(doc, "fixed_recurrent", got, sizeof got);
  CHECK_EQ_STR(got, want);
  CHECK(at(doc, GROUPS "paged_kv") == NULL); /* paged KV is the decoder's contract */
  CHECK_EQ_STR(str_at(doc, "pipeline/workflow/components/decoder/contract/id"),
               INFERENCE_METADATA_PAGED_KV_CONTRACT);
  for (int i = 0; i < (int)c->n_layers; i++) {
    char path[256];
    snprintf(path, sizeof path, BINDINGS "layer.%d.key_cache", i);
    CHECK((at(doc, path) != NULL) == (c->layer_kind[i] == PH_LAYER_FULL_ATTENTION));
  }
  CHECK_EQ_INT(
      json_integer_value(at(doc, "pipeline/workflow/components/decoder/contract/parameters/"
                                 "block_size")),
      256);
  /* io dtype: KV pages and conv state share the half dtype of the CUDA target; the recurrent
   * state is f32 and V-major */
  const char *kv = str_at(doc, PORTS_IN "past_key_values.3.key/dtype");
  CHECK(strcmp(kv, "float16") == 0 || strcmp(kv, "bfloat16") == 0);
  CHECK_EQ_STR(str_at(doc, PORTS_IN "past_key_values.0.conv_state/dtype"), kv);
  CHECK_EQ_STR(str_at(doc, PORTS_IN "past_key_values.0.recurrent_state/dtype"), "float32");
  CHECK_EQ_STR(str_at(doc, GROUPS "fixed_recurrent/layout"), "bhvk");
  CHECK_EQ_STR(str_at(doc, PORTS_IN "past_key_values.3.key/batch_layout/kind"),
               "runtime_sequence_state");
  CHECK_EQ_INT(json_integer_value(at(doc, PORTS_IN "past_key_values.3.key/shape/#1")), 256);
  CHECK_EQ_STR(str_at(doc, "pipeline/workflow/outputs/logits/contract/dtype"), "float32");
  ph_model_free(m);

  graph *g = read_package(pkg, PACKAGE_FINALIZE, &gc);
  /* the names of the graph's own dtypes (read back from model.onnx), mapped here, not by the
   * writer's table */
  if (g) {
    const ph_dtype io = g->values[graph_find_value(g, "past_key_values.3.key")].type.dtype;
    CHECK_EQ_STR(kv, io == PH_DTYPE_F16 ? "float16" : io == PH_DTYPE_BF16 ? "bfloat16" : "?");
  }
  const char *other = strcmp(kv, "float16") == 0 ? "\"bfloat16\"" : "\"float16\"";
  const corruption cases[] = {
      {"an alias's layer id", SET, CONV_AL "layer.1.conv_state/layer", "2",
       PH_ERR_CONFIG_INCONSISTENT, "layer: expected 1"},
      {"a state cell of a layer without conv state", RENAME, CONV_AL "layer.1.conv_state",
       "layer.3.conv_state", PH_ERR_CONFIG_INCONSISTENT, "fixed_conv [0, 1, 2]"},
      {"a KV binding's layer id", RENAME, BINDINGS "layer.3.key_cache", "layer.2.key_cache",
       PH_ERR_CONFIG_INCONSISTENT, "paged_kv layers [3]"},
      {"a page dtype", SET, PORTS_IN "past_key_values.3.key/dtype", other,
       PH_ERR_CONFIG_INCONSISTENT, "past_key_values.3.key"},
      {"the recurrent state cell's dtype", SET,
       "pipeline/workflow/state/layer.0.recurrent_state/contract/dtype", "\"bfloat16\"",
       PH_ERR_CONFIG_INCONSISTENT, "expected \"float32\""},
      {"an unknown dtype", SET, PORTS_IN "input_ids/dtype", "\"float17\"", PH_ERR_CONFIG_INVALID,
       "float17"},
      {"an alias naming another layer's tensor", SET, CONV_AL "layer.0.conv_state/input",
       "\"past_key_values.1.conv_state\"", PH_ERR_CONFIG_INCONSISTENT,
       "expected \"past_key_values.0.conv_state\""},
      {"an alias naming a tensor the graph lacks", SET, CONV_AL "layer.0.conv_state/output",
       "\"present.0.conv\"", PH_ERR_CONFIG_INCONSISTENT, "present.0.conv_state"},
      {"a port the graph does not have", RENAME, PORTS_OUT "present.3.key", "present.3.keys",
       PH_ERR_CONFIG_INCONSISTENT, "no output \"present.3.keys\""},
      {"a KV binding to the wrong tensor", SET, BINDINGS "layer.3.key_cache",
       "\"past_key_values.3.value\"", PH_ERR_CONFIG_INCONSISTENT,
       "expected \"past_key_values.3.key\""},
      {"a page size dim", SET, PORTS_IN "past_key_values.3.key/shape/#1", "128",
       PH_ERR_CONFIG_INCONSISTENT, "expected 256"},
      {"a symbolic dim", SET, PORTS_IN "input_ids/shape/#0", "\"tokens\"",
       PH_ERR_CONFIG_INCONSISTENT, "expected \"num_tokens\""},
      {"the contract's block size", SET,
       "pipeline/workflow/components/decoder/contract/parameters/block_size", "512",
       PH_ERR_CONFIG_INCONSISTENT, "block_size"},
      {"pages declared request-aligned", SET, PORTS_IN "past_key_values.3.key/batch_layout",
       "{\"kind\": \"request_aligned\", \"axis\": 0}", PH_ERR_CONFIG_INCONSISTENT,
       "runtime_sequence_state"},
      {"a missing state group", DEL, GROUPS "fixed_recurrent", NULL, PH_ERR_CONFIG_MISSING_FIELD,
       "fixed_recurrent is missing"},
      {"a missing port", DEL, PORTS_IN "block_table", NULL, PH_ERR_CONFIG_MISSING_FIELD,
       "inputs.block_table is missing"},
      {"a rank of the wrong type", SET, PORTS_IN "input_ids/rank", "\"1\"", PH_ERR_CONFIG_INVALID,
       "expected an integer"},
      {"an unknown key", SET, CONV_AL "layer.0.conv_state/extra", "1", PH_ERR_CONFIG_INVALID,
       "extra is not a key"},
      {"another schema version", SET, "schema_version", "\"v2\"", PH_ERR_CONFIG_INCONSISTENT,
       "expected \"v1\""},
      {"another artifact", SET, "pipeline/workflow/components/decoder/implementation/artifact",
       "\"other.onnx\"", PH_ERR_CONFIG_INCONSISTENT, "decoder.filename"},
      {"another vocabulary", SET, "model/vocab_size", "255", PH_ERR_CONFIG_INCONSISTENT,
       "vocab_size"},
      {"a step input bound elsewhere", SET, "pipeline/workflow/steps/#0/inputs/block_table",
       "\"request.past_sequence_lengths\"", PH_ERR_CONFIG_INCONSISTENT,
       "expected \"request.block_table\""},
      {"a workflow input's contract", SET,
       "pipeline/workflow/inputs/request.past_key_values.3.value/contract/dtype", "\"float32\"",
       PH_ERR_CONFIG_INCONSISTENT, "past_key_values.3.value"},
  };
  if (g) expect_refused(doc, cases, sizeof cases / sizeof cases[0], g, &gc);

  /* malformed or missing file */
  diag_clear(&d);
  CHECK_STATUS(inference_metadata_check_text("{\"schema_version\": ", 19, "cut", g, &gc, &d),
               PH_ERR_JSON, d.msg);
  CHECK_CONTAINS(d.msg, "cut");
  CHECK_STATUS(inference_metadata_check(g_tmp, g, &gc, &d), PH_ERR_NOT_FOUND, d.msg);

  /* a genai_config that disagrees with the graph is refused before the document is read */
  genai_config bad = gc;
  for (int i = 0; i < bad.n_state_groups; i++)
    if (bad.state_groups[i].kind == GENAI_STATE_FIXED_CONV) bad.state_groups[i].n_layer_ids--;
  CHECK_STATUS(inference_metadata_check(pkg, g, &bad, &d), PH_ERR_CONFIG_INCONSISTENT, d.msg);
  CHECK_CONTAINS(d.msg, "fixed_conv hold layers [0, 1]");
  bad = gc;
  snprintf(bad.past_conv_names, sizeof bad.past_conv_names, "past.%%d.conv");
  CHECK_STATUS(inference_metadata_check(pkg, g, &bad, &d), PH_ERR_CONFIG_INCONSISTENT, d.msg);
  CHECK_CONTAINS(d.msg, "past_key_values.0.conv_state\" is not named");
  graph_free(g);
  json_decref(doc);
}

/* The same bytes for the same export, in two processes (jansson seeds its hash per process, so
 * this fails if any object's key order depended on hashing). */
static void test_deterministic(void) {
  char ckpt[1024], args[2600], pa[1200], pb[1200];
  check_data(ckpt, sizeof ckpt, "golden/qwen35-tiny-f32/checkpoint");
  for (int i = 0; i < 2; i++) {
    snprintf(pa, sizeof pa, "%s/det-%d", g_tmp, i);
    remove_metadata(pa);
    snprintf(args, sizeof args, "export '%s' -o '%s/det-%d' --layout paged --force", ckpt, g_tmp,
             i);
    CHECK_EQ_INT(cli_run(args), 0);
    CHECK_CONTAINS(g_stdout, "  " INFERENCE_METADATA_FILE " "); /* the file is listed */
  }
  snprintf(pa, sizeof pa, "%s/det-0/%s", g_tmp, INFERENCE_METADATA_FILE);
  snprintf(pb, sizeof pb, "%s/det-1/%s", g_tmp, INFERENCE_METADATA_FILE);
  char *x = NULL, *y = NULL;
  size_t nx = 0, ny = 0;
  diag d;
  CHECK_STATUS(file_read_all(pa, 1 << 24, &x, &nx, &d), PH_OK, d.msg);
  CHECK_STATUS(file_read_all(pb, 1 << 24, &y, &ny, &d), PH_OK, d.msg);
  CHECK(x && y && nx == ny && memcmp(x, y, nx) == 0);
  free(x);
  free(y);
}

/* A FIFO (or any non-file) where inference_metadata.json goes is refused before the first file is
 * written, as for every other package file, and never opened (it would block). */
static void test_fifo_refused(void) {
  char ckpt[1024], pkg[600], fifo[4096], onnx[1200];
  check_data(ckpt, sizeof ckpt, "golden/qwen35-tiny-f32/checkpoint");
  snprintf(pkg, sizeof pkg, "%s/fifo-pkg", g_tmp);
  diag d;
  CHECK_STATUS(path_mkdirs(pkg, &d), PH_OK, d.msg);
  snprintf(onnx, sizeof onnx, "%s/%s", pkg, ONNX_MODEL_FILE);
  unlink(onnx);
  if (!CHECK(ft_fifo(fifo, pkg, INFERENCE_METADATA_FILE))) return;
  ph_model *m = mt_open(ckpt, 1);
  if (m) {
    export_options o = export_options_default();
    o.layout = EXPORT_LAYOUT_PAGED;
    o.force = 1;
    ft_watchdog(10);
    CHECK_STATUS(model_export(m, pkg, &o, &d), PH_ERR_IO, d.msg);
    ft_watchdog(0);
    CHECK_CONTAINS(d.msg, INFERENCE_METADATA_FILE);
    CHECK(!path_exists(onnx)); /* refused before anything was written */
    CHECK(ft_is_fifo(fifo));
  }
  ph_model_free(m);
  unlink(fifo);
}

/* The CPU target with pruned logits: f32 io, 16-token pages, logits one row per sequence. */
static void test_cpu_pruned(void) {
  export_options o = export_options_default();
  o.layout = EXPORT_LAYOUT_PAGED;
  o.target = EXPORT_TARGET_CPU;
  o.prune_lm_head = 1;
  char pkg[600];
  if (!export_golden("paged-cpu-pruned", &o, pkg, sizeof pkg)) return;
  genai_config gc;
  diag d;
  graph *g = read_package(pkg, PACKAGE_FINALIZE | PACKAGE_CHECK, &gc);
  if (g) CHECK_STATUS(inference_metadata_check(pkg, g, &gc, &d), PH_OK, d.msg);
  json_t *doc = load_doc(pkg);
  if (doc) {
    CHECK_EQ_STR(str_at(doc, PORTS_IN "past_key_values.3.key/dtype"), "float32");
    CHECK_EQ_INT(json_integer_value(at(doc, PORTS_IN "past_key_values.3.key/shape/#1")), 16);
    CHECK_EQ_STR(str_at(doc, PORTS_OUT "logits/batch_layout/kind"), "request_aligned");
    CHECK_EQ_STR(str_at(doc, PORTS_OUT "logits/shape/#0"), "batch_size");
  }
  json_decref(doc);
  graph_free(g);
}

/* The dense layout has the catalogue's own form (example 20): KV is a full_attention group. */
static void test_dense_package(void) {
  export_options o = export_options_default();
  char pkg[600];
  if (!export_golden("dense", &o, pkg, sizeof pkg)) return;
  genai_config gc;
  diag d;
  graph *g = read_package(pkg, PACKAGE_FINALIZE | PACKAGE_CHECK, &gc);
  if (g) CHECK_STATUS(inference_metadata_check(pkg, g, &gc, &d), PH_OK, d.msg);
  json_t *doc = load_doc(pkg);
  if (doc && g) {
    char got[64];
    group_layers(doc, "dense_kv", got, sizeof got);
    CHECK_EQ_STR(got, "3,3");
    CHECK_EQ_STR(str_at(doc, GROUPS "dense_kv/update/kind"), "append");
    CHECK_EQ_STR(str_at(doc, GROUPS "fixed_recurrent/layout"), "bhkv");
    CHECK(at(doc, "pipeline/workflow/components/decoder/contract") == NULL);
    CHECK_EQ_STR(str_at(doc, "pipeline/workflow/components/decoder/ports/roles/attention_mask"),
                 "attention_mask");
    const corruption cases[] = {
        {"a KV alias's role", SET, GROUPS "dense_kv/ports/decoder/layer.3.value/role", "\"key\"",
         PH_ERR_CONFIG_INCONSISTENT, "expected \"value\""},
        {"a paged contract on a dense graph", SET, "pipeline/workflow/components/decoder/contract",
         "{}", PH_ERR_CONFIG_INCONSISTENT, "no paged KV"},
        {"the dense recurrent layout", SET, GROUPS "fixed_recurrent/layout", "\"bhvk\"",
         PH_ERR_CONFIG_INCONSISTENT, "K-major"},
    };
    expect_refused(doc, cases, sizeof cases / sizeof cases[0], g, &gc);
  }
  json_decref(doc);
  graph_free(g);
}

/* The Qwen3.8-27B --config-only export: the metadata covers all 64 layers. Its graph is read back
 * as a structure-only package (PACKAGE_CONFIG_ONLY: no data file, initializers without bytes). */
static void test_config_only_27b(void) {
  char pkg[600];
  snprintf(pkg, sizeof pkg, "%s/qwen38-27b-pkg", g_tmp);
  ph_model *m = mt_open_27b_config(g_tmp);
  if (!m) return;
  export_options o = export_options_default();
  o.layout = EXPORT_LAYOUT_PAGED;
  o.config_only = 1;
  o.force = 1;
  diag d;
  remove_metadata(pkg);
  CHECK_STATUS(model_export(m, pkg, &o, &d), PH_OK, d.msg);
  genai_config gc;
  graph *g = read_package(pkg, PACKAGE_CONFIG_ONLY, &gc);
  if (g) CHECK_STATUS(inference_metadata_check(pkg, g, &gc, &d), PH_OK, d.msg);
  json_t *doc = load_doc(pkg);
  if (doc && g) {
    const hf_config *c = model_config(m);
    char want[512], got[512];
    config_layers(c, PH_LAYER_LINEAR_ATTENTION, want, sizeof want);
    group_layers(doc, "fixed_conv", got, sizeof got);
    CHECK_EQ_STR(got, want);
    group_layers(doc, "fixed_recurrent", got, sizeof got);
    CHECK_EQ_STR(got, want);
    int n_kv = 0, n_bind = 0;
    const char *key;
    json_t *v;
    json_object_foreach(at(doc, "pipeline/workflow/components/decoder/contract/bindings"), key, v) {
      n_bind++;
      int layer = -1;
      if (sscanf(key, "layer.%d.key_cache", &layer) == 1 && strstr(key, "key_cache") &&
          !strstr(key, "_out")) {
        n_kv++;
        CHECK(layer >= 0 && layer < (int)c->n_layers &&
              c->layer_kind[layer] == PH_LAYER_FULL_ATTENTION);
      }
    }
    CHECK_EQ_INT(n_kv, 16);
    CHECK_EQ_INT(n_bind, 4 + 4 * 16);
    CHECK_EQ_INT(json_object_size(at(doc, "pipeline/workflow/state")), 2 * 48);
    CHECK_EQ_STR(str_at(doc, "pipeline/workflow/state/layer.0.recurrent_state/contract/dtype"),
                 "float32");
    /* V-major [B, Hv, Dv, Dk] (Dv = Dk = 128 here, so the shape alone cannot tell) */
    CHECK_EQ_STR(str_at(doc, GROUPS "fixed_recurrent/layout"), "bhvk");
    CHECK_EQ_INT(json_integer_value(at(doc, "model/vocab_size")), c->vocab_size);
    /* a layer id that is a full-attention layer of this model */
    const corruption cases[] = {
        {"a recurrent alias on an attention layer", SET,
         GROUPS "fixed_recurrent/ports/decoder/layer.0.recurrent_state/layer", "3",
         PH_ERR_CONFIG_INCONSISTENT, "layer: expected 0"},
    };
    expect_refused(doc, cases, 1, g, &gc);
  }
  json_decref(doc);
  graph_free(g);
  ph_model_free(m);
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "%s", check_env("PH_TMP_DIR"));
  diag d;
  if (path_mkdirs(g_tmp, &d) != PH_OK) return 1;
  cli_testing_init(g_tmp);
  RUN(test_paged_package);
  RUN(test_deterministic);
  RUN(test_fifo_refused);
  RUN(test_cpu_pruned);
  RUN(test_dense_package);
  RUN(test_config_only_27b);
  cli_testing_done();
  return check_finish();
}
