/* inference_metadata.json (io/inference_metadata.h): what `export` writes is checked against the
 * package's graph as read back from model.onnx and its genai_config.json — the tiny golden
 * checkpoint in the packed paged layout (CUDA and CPU targets, pruned logits), the dense layout,
 * and the Qwen3.8-27B config-only export — and the facts the document states are asserted here
 * from the model config, independently of the writer: which layers hold which state, the io dtype
 * of KV pages and conv state, f32 V-major recurrent state, the page size. Then the document is
 * corrupted one fact at a time (a layer id, a dtype, a tensor name, a dim, a binding, a missing
 * group, a malformed file) and the checker must refuse each with its typed status, naming the
 * key; and a genai_config that disagrees with the graph is refused too.
 *
 * LATENT packages (DeepSeek MLA: slot_mapping, one key-only page cache per layer): a graph built
 * here with exactly the LATENT I/O over the tiny DeepSeek config's genai_config, the
 * config-only export of that config with dense MLPs (first_k_dense_replace = every layer), and
 * the export of the golden tiny DeepSeek-V3 MoE checkpoint, whose files are checked the same
 * way. */
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
#include "graph/graph.h"
#include "io/genai_config.h"
#include "io/hf_config.h"
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
#define CONTRACT  "pipeline/workflow/components/decoder/contract/"
#define BINDINGS  CONTRACT "bindings/"

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
      {"a SEPARATE package declared LATENT", SET, CONTRACT "parameters/kv_cache_layout",
       "\"LATENT\"", PH_ERR_CONFIG_INCONSISTENT, "expected \"SEPARATE\""},
      {"a SEPARATE package binding slot_mapping", SET, BINDINGS "slot_mapping", "\"slot_mapping\"",
       PH_ERR_CONFIG_INCONSISTENT, "\"slot_mapping\" is not a PagedAttention"},
  };
  if (g) expect_refused(doc, cases, sizeof cases / sizeof cases[0], g, &gc);
  /* SEPARATE may be said explicitly (it is PagedAttention's default, which absence means) */
  if (g) {
    json_t *copy = json_deep_copy(doc);
    json_object_set_new(at(copy, CONTRACT "parameters"), "kv_cache_layout",
                        json_string("SEPARATE"));
    char *text = json_dumps(copy, JSON_COMPACT);
    CHECK_STATUS(inference_metadata_check_text(text, strlen(text), "separate", g, &gc, &d), PH_OK,
                 d.msg);
    free(text);
    json_decref(copy);
  }

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

/* ---- LATENT packages ----------------------------------------------------------------------- */

#define DEEPSEEK_CKPT "golden/deepseek-v3-tiny-moe/checkpoint"
#define LATENT_PAGE   16

/* What a hand-built LATENT graph gets wrong on purpose (0: exactly the LATENT I/O). */
enum {
  LG_NO_SLOT_MAPPING = 1, /* no slot_mapping input */
  LG_SLOTS_PER_SEQ = 2,   /* slot_mapping [batch_size] */
  LG_VALUES = 4,          /* value pages beside the key pages, as SEPARATE has */
};

/* The LATENT packed graph I/O of c (docs/graph-io.md): input_ids i64 [N], block_table,
 * cumulative_sequence_lengths, past_sequence_lengths, slot_mapping i32 [N], per layer
 * past_key_values.{i}.key f32 [num_blocks, 16, 1, l+r]; outputs logits [N, vocab] and
 * present.{i}.key. The body only gives the outputs their types. NULL on failure (reported). */
static graph *latent_graph(const hf_config *c, unsigned flags) {
  graph *g = NULL;
  diag d;
  CHECK_STATUS(graph_create(&g, &d), PH_OK, d.msg);
  if (!g) return NULL;
  const char *tok[1] = {"num_tokens"}, *bt[2] = {"batch_size", "max_num_blocks"};
  const char *b1[1] = {"batch_size_plus_1"}, *bs[1] = {"batch_size"};
  const char *kv[4] = {"num_blocks", NULL, NULL, NULL}, *lg[2] = {"num_tokens", NULL};
  const int64_t row = c->mla.kv_lora_rank + c->mla.qk_rope_head_dim;
  const int ids = graph_add_input(g, "input_ids", PH_DTYPE_I64, 1, (int64_t[]){-1}, tok);
  graph_add_input(g, "block_table", PH_DTYPE_I32, 2, (int64_t[]){-1, -1}, bt);
  graph_add_input(g, "cumulative_sequence_lengths", PH_DTYPE_I32, 1, (int64_t[]){-1}, b1);
  graph_add_input(g, "past_sequence_lengths", PH_DTYPE_I32, 1, (int64_t[]){-1}, bs);
  if (!(flags & LG_NO_SLOT_MAPPING))
    graph_add_input(g, "slot_mapping", PH_DTYPE_I32, 1, (int64_t[]){-1},
                    flags & LG_SLOTS_PER_SEQ ? bs : tok);
  const float one_v = 1.0f;
  const int one =
      graph_add_initializer_copy(g, "one", PH_DTYPE_F32, shape_make(1, (int64_t[]){1}), &one_v);
  char name[64];
  for (int i = 0; i < (int)c->n_layers; i++)
    for (int v = 0; v < ((flags & LG_VALUES) ? 2 : 1); v++) {
      snprintf(name, sizeof name, "past_key_values.%d.%s", i, v ? "value" : "key");
      const int past =
          graph_add_input(g, name, PH_DTYPE_F32, 4, (int64_t[]){-1, LATENT_PAGE, 1, row}, kv);
      snprintf(name, sizeof name, "present.%d.%s", i, v ? "value" : "key");
      int present = -1;
      graph_add_node(g, "Add", "", name, 2, (int[]){past, one}, 1, (const char *[]){name}, &present,
                     0, NULL);
      graph_mark_output(g, present, NULL);
      graph_name_dims(g, present, 4, kv);
    }
  void *lm = NULL;
  const int table = graph_add_initializer_alloc(
      g, "lm_table", PH_DTYPE_F32, shape_make(2, (int64_t[]){c->vocab_size, c->vocab_size}), &lm);
  int logits = -1;
  graph_add_node(g, "Gather", "", "logits", 2, (int[]){table, ids}, 1, (const char *[]){"logits"},
                 &logits, 0, NULL);
  graph_mark_output(g, logits, NULL);
  graph_name_dims(g, logits, 2, lg);
  ph_status st = graph_finalize(g, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  if (st != PH_OK) {
    graph_free(g);
    return NULL;
  }
  return g;
}

/* The tiny DeepSeek config and its LATENT genai_config (16-token pages); 0 on failure. */
static int latent_config(hf_config *c, genai_config *gc) {
  char ckpt[1024];
  diag d;
  ph_status s = hf_config_load(check_data(ckpt, sizeof ckpt, DEEPSEEK_CKPT), c, &d);
  CHECK_STATUS(s, PH_OK, d.msg);
  if (s != PH_OK) return 0;
  *gc = genai_config_paged(c, 4096, LATENT_PAGE, 8, 0, 0, 2048);
  return 1;
}

/* The document says what a LATENT graph is, checked here from the model config: the bindings
 * are the controls, slot_mapping and each MLA layer's key pages (no value pages, no
 * attention_metadata), the contract says LATENT, slot_mapping is packed like input_ids, the
 * attention is multi_latent over the latent row, and there is no state service. */
static void check_latent_doc(json_t *doc, const hf_config *c) {
  char path[256];
  int n_mla = 0;
  for (int i = 0; i < (int)c->n_layers; i++) {
    CHECK(c->layer_kind[i] == PH_LAYER_MLA);
    n_mla += c->layer_kind[i] == PH_LAYER_MLA;
    snprintf(path, sizeof path, BINDINGS "layer.%d.key_cache", i);
    char want[64];
    snprintf(want, sizeof want, "past_key_values.%d.key", i);
    CHECK_EQ_STR(str_at(doc, path), want);
    snprintf(path, sizeof path, BINDINGS "layer.%d.key_cache_out", i);
    snprintf(want, sizeof want, "present.%d.key", i);
    CHECK_EQ_STR(str_at(doc, path), want);
  }
  const char *key;
  json_t *v;
  json_object_foreach(at(doc, CONTRACT "bindings"), key, v) {
    if (strstr(key, "value") || strstr(key, "attention_metadata"))
      fprintf(stderr, "  LATENT binding %s\n", key);
    CHECK(!strstr(key, "value") && !strstr(key, "attention_metadata"));
  }
  CHECK_EQ_INT(json_object_size(at(doc, CONTRACT "bindings")), 4 + 2 * n_mla);
  CHECK_EQ_STR(str_at(doc, BINDINGS "slot_mapping"), "slot_mapping");
  CHECK_EQ_STR(str_at(doc, BINDINGS "past_seqlens"), "past_sequence_lengths");
  CHECK_EQ_STR(str_at(doc, CONTRACT "parameters/kv_cache_layout"), "LATENT");
  CHECK_EQ_INT(json_integer_value(at(doc, CONTRACT "parameters/block_size")), LATENT_PAGE);
  CHECK_EQ_STR(str_at(doc, PORTS_IN "slot_mapping/dtype"), "int32");
  CHECK_EQ_STR(str_at(doc, PORTS_IN "slot_mapping/batch_layout/kind"), "token_packed");
  CHECK_EQ_STR(str_at(doc, PORTS_IN "slot_mapping/batch_layout/offsets"),
               "request.cumulative_sequence_lengths");
  CHECK_EQ_INT(json_integer_value(at(doc, PORTS_IN "slot_mapping/batch_layout/axis")), 0);
  CHECK_EQ_STR(str_at(doc, PORTS_IN "past_key_values.0.key/batch_layout/kind"),
               "runtime_sequence_state");
  CHECK_EQ_INT(json_integer_value(at(doc, PORTS_IN "past_key_values.0.key/shape/#3")),
               c->mla.kv_lora_rank + c->mla.qk_rope_head_dim);
  CHECK(at(doc, PORTS_IN "position_ids") == NULL);
  CHECK(at(doc, PORTS_IN "attention_metadata") == NULL);
  CHECK(at(doc, PORTS_IN "past_key_values.0.value") == NULL);
  CHECK_EQ_STR(str_at(doc, "pipeline/workflow/inputs/request.slot_mapping/source/name"),
               "slot_mapping");
  CHECK_EQ_STR(str_at(doc, "pipeline/workflow/steps/#0/inputs/slot_mapping"),
               "request.slot_mapping");
  CHECK_EQ_STR(str_at(doc, "model/attention/type"), "multi_latent");
  CHECK_EQ_INT(json_integer_value(at(doc, "model/attention/num_kv_heads")), 1);
  CHECK_EQ_INT(json_integer_value(at(doc, "model/attention/head_dim")),
               c->mla.kv_lora_rank + c->mla.qk_rope_head_dim);
  CHECK_EQ_INT(json_integer_value(at(doc, "model/attention/num_attention_heads")), c->n_heads);
  CHECK_EQ_INT(json_object_size(at(doc, "pipeline/workflow/state")), 0);
  CHECK(at(doc, "pipeline/workflow/serving") == NULL);
  CHECK_EQ_INT(json_array_size(at(doc, "pipeline/workflow/manifest/capabilities")), 2);
}

/* A graph with exactly the LATENT I/O: written, checked, read; every LATENT fact corrupted is
 * refused with its typed status; and graphs or genai_configs that disagree on LATENT are
 * refused before any document is read. */
static void test_latent_graph(void) {
  hf_config c;
  genai_config gc;
  if (!latent_config(&c, &gc)) return;
  CHECK(gc.slot_mapping[0] && !gc.past_value_names[0] && !gc.present_value_names[0]);
  graph *g = latent_graph(&c, 0);
  if (!g) return;
  char pkg[600];
  diag d;
  snprintf(pkg, sizeof pkg, "%s/latent-graph", g_tmp);
  CHECK_STATUS(path_mkdirs(pkg, &d), PH_OK, d.msg);
  remove_metadata(pkg);
  CHECK_STATUS(inference_metadata_write(g, &gc, pkg, &d), PH_OK, d.msg);
  CHECK_STATUS(inference_metadata_check(pkg, g, &gc, &d), PH_OK, d.msg);
  json_t *doc = load_doc(pkg);
  if (!doc) {
    graph_free(g);
    return;
  }
  check_latent_doc(doc, &c);
  const corruption cases[] = {
      {"a value cache bound on a LATENT package", SET, BINDINGS "layer.0.value_cache",
       "\"past_key_values.0.value\"", PH_ERR_CONFIG_INCONSISTENT,
       "\"layer.0.value_cache\" is not a PagedAttention slot"},
      {"attention_metadata bound", SET, BINDINGS "attention_metadata", "\"attention_metadata\"",
       PH_ERR_CONFIG_INCONSISTENT, "\"attention_metadata\" is not a PagedAttention slot"},
      {"slot_mapping unbound", DEL, BINDINGS "slot_mapping", NULL, PH_ERR_CONFIG_MISSING_FIELD,
       "bindings.slot_mapping is missing"},
      {"slot_mapping bound to another input", SET, BINDINGS "slot_mapping",
       "\"past_sequence_lengths\"", PH_ERR_CONFIG_INCONSISTENT, "expected \"slot_mapping\""},
      {"a key page output bound to the past", SET, BINDINGS "layer.1.key_cache_out",
       "\"past_key_values.1.key\"", PH_ERR_CONFIG_INCONSISTENT, "expected \"present.1.key\""},
      {"no kv_cache_layout", DEL, CONTRACT "parameters/kv_cache_layout", NULL,
       PH_ERR_CONFIG_MISSING_FIELD, "kv_cache_layout is missing"},
      {"kv_cache_layout SEPARATE", SET, CONTRACT "parameters/kv_cache_layout", "\"SEPARATE\"",
       PH_ERR_CONFIG_INCONSISTENT, "expected \"LATENT\""},
      {"kv_cache_layout of the wrong type", SET, CONTRACT "parameters/kv_cache_layout", "1",
       PH_ERR_CONFIG_INVALID, "expected a string"},
      {"grouped_query attention", SET, "model/attention/type", "\"grouped_query\"",
       PH_ERR_CONFIG_INCONSISTENT, "expected \"multi_latent\""},
      {"the latent heads", SET, "model/attention/num_kv_heads", "4", PH_ERR_CONFIG_INCONSISTENT,
       "num_kv_heads: expected 1"},
      {"slot_mapping without batch layout", DEL, PORTS_IN "slot_mapping/batch_layout", NULL,
       PH_ERR_CONFIG_MISSING_FIELD, "missing (expected token_packed"},
      {"slot_mapping request-aligned", SET, PORTS_IN "slot_mapping/batch_layout",
       "{\"kind\": \"request_aligned\", \"axis\": 0}", PH_ERR_CONFIG_INCONSISTENT,
       "expected \"token_packed\""},
      {"slot_mapping int64", SET, "pipeline/workflow/inputs/request.slot_mapping/contract/dtype",
       "\"int64\"", PH_ERR_CONFIG_INCONSISTENT, "expected \"int32\""},
      {"a value page port", SET, PORTS_IN "past_key_values.0.value", "{}",
       PH_ERR_CONFIG_INCONSISTENT, "no input \"past_key_values.0.value\""},
      {"slot_mapping missing from the invoke", DEL,
       "pipeline/workflow/steps/#0/inputs/slot_mapping", NULL, PH_ERR_CONFIG_MISSING_FIELD,
       "slot_mapping is missing"},
      {"a state service on a LATENT package", SET, "pipeline/workflow/serving", "{}",
       PH_ERR_CONFIG_INCONSISTENT, "no state a state service would hold"},
      {"a dense KV cell", SET, "pipeline/workflow/state/layer.0.key", "{}",
       PH_ERR_CONFIG_INCONSISTENT, "\"layer.0.key\" is not the state cell"},
  };
  expect_refused(doc, cases, sizeof cases / sizeof cases[0], g, &gc);

  /* genai_config and graph disagreeing on LATENT, refused before the document is read */
  genai_config bad = gc;
  bad.slot_mapping[0] = '\0'; /* key pages alone without slot_mapping */
  CHECK_STATUS(inference_metadata_check(pkg, g, &bad, &d), PH_ERR_CONFIG_INCONSISTENT, d.msg);
  CHECK_CONTAINS(d.msg, "\"slot_mapping\" is not named by genai_config.json");
  bad = gc;
  snprintf(bad.past_value_names, sizeof bad.past_value_names, "past_key_values.%%d.value");
  snprintf(bad.present_value_names, sizeof bad.present_value_names, "present.%%d.value");
  CHECK_STATUS(inference_metadata_check(pkg, g, &bad, &d), PH_ERR_CONFIG_INCONSISTENT, d.msg);
  CHECK_CONTAINS(d.msg, "layer 0 has some paged_kv tensors but no input value");
  struct {
    unsigned flags;
    int drop_slot_mapping;
    const char *needle;
  } graphs[] = {
      {LG_NO_SLOT_MAPPING, 0, "names input \"slot_mapping\", which the graph does not have"},
      {LG_NO_SLOT_MAPPING, 1, "no past_value_names template, and no inputs.slot_mapping"},
      {LG_SLOTS_PER_SEQ, 0, "is not one slot per packed token"},
      {LG_VALUES, 0, "\"past_key_values.0.value\" is not named by genai_config.json"},
  };
  for (size_t i = 0; i < sizeof graphs / sizeof graphs[0]; i++) {
    graph *other = latent_graph(&c, graphs[i].flags);
    if (!other) continue;
    bad = gc;
    if (graphs[i].drop_slot_mapping) bad.slot_mapping[0] = '\0';
    diag_clear(&d);
    CHECK_STATUS(inference_metadata_check(pkg, other, &bad, &d), PH_ERR_CONFIG_INCONSISTENT, d.msg);
    CHECK_CONTAINS(d.msg, graphs[i].needle);
    /* the writer refuses the same, and writes nothing */
    char dir[700];
    snprintf(dir, sizeof dir, "%s/latent-bad-%zu", g_tmp, i);
    CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
    remove_metadata(dir);
    CHECK_STATUS(inference_metadata_write(other, &bad, dir, &d), PH_ERR_CONFIG_INCONSISTENT, d.msg);
    CHECK_CONTAINS(d.msg, graphs[i].needle);
    char path[900];
    snprintf(path, sizeof path, "%s/%s", dir, INFERENCE_METADATA_FILE);
    CHECK(!path_exists(path));
    graph_free(other);
  }
  json_decref(doc);
  graph_free(g);
}

/* The export of a LATENT package (--config-only: the tiny DeepSeek config with dense MLPs, so no
 * MoE operator is needed) names slot_mapping and key pages only in genai_config.json, and its
 * inference_metadata.json is the LATENT document, checked against the graph read back. */
static void test_latent_export(void) {
  char ckpt[1024], dir[600], path[700], pkg[600];
  check_data(ckpt, sizeof ckpt, DEEPSEEK_CKPT "/config.json");
  snprintf(dir, sizeof dir, "%s/deepseek-dense-mlp", g_tmp);
  snprintf(pkg, sizeof pkg, "%s/deepseek-latent-pkg", g_tmp);
  snprintf(path, sizeof path, "%s/config.json", dir);
  char *text = NULL;
  size_t n = 0;
  diag d;
  CHECK_STATUS(file_read_all(ckpt, 1 << 20, &text, &n, &d), PH_OK, d.msg);
  if (!text) return;
  /* every layer dense: "first_k_dense_replace": 1 -> 3 (the config has 3 layers) */
  char *k = strstr(text, "\"first_k_dense_replace\": 1,");
  CHECK(k != NULL && strstr(text, "\"num_hidden_layers\": 3,") != NULL);
  if (k) k[strlen("\"first_k_dense_replace\": ")] = '3';
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
  FILE *f = fopen(path, "wb");
  CHECK(f && fwrite(text, 1, n, f) == n);
  if (f) fclose(f);
  free(text);
  ph_model *m = mt_open(dir, 0);
  if (!m) return;
  export_options o = export_options_default();
  o.layout = EXPORT_LAYOUT_PAGED;
  o.target = EXPORT_TARGET_CPU;
  o.config_only = 1;
  o.force = 1;
  remove_metadata(pkg);
  CHECK_STATUS(model_export(m, pkg, &o, &d), PH_OK, d.msg);
  genai_config gc;
  graph *g = read_package(pkg, PACKAGE_CONFIG_ONLY, &gc);
  if (g) {
    CHECK_STATUS(inference_metadata_check(pkg, g, &gc, &d), PH_OK, d.msg);
    CHECK_EQ_STR(gc.slot_mapping, "slot_mapping");
    CHECK_EQ_STR(gc.past_value_names, "");
    CHECK(graph_find_value(g, "past_key_values.0.value") < 0);
  }
  json_t *doc = load_doc(pkg);
  const hf_config *c = model_config(m);
  if (doc && c->n_layers == 3) {
    int dense = 1;
    for (int i = 0; i < (int)c->n_layers; i++) dense &= c->layer_kind[i] == PH_LAYER_MLA;
    CHECK(dense);
    check_latent_doc(doc, c);
    CHECK_EQ_STR(str_at(doc, PORTS_IN "past_key_values.2.key/dtype"), "float32");
  }
  json_decref(doc);
  graph_free(g);
  ph_model_free(m);
}

/* The golden tiny DeepSeek-V3 checkpoint (MLA, DeepSeekMoE from layer 1) exported with its
 * weights, packed paged for the CPU: the LATENT document, checked against the graph read back as
 * a loader reads it (finalized and checked), and byte-identical from a second export. */
static void test_latent_moe_export(void) {
  char ckpt[1024], pkg[2][600];
  check_data(ckpt, sizeof ckpt, DEEPSEEK_CKPT);
  ph_model *m = mt_open(ckpt, 1);
  if (!m) return;
  export_options o = export_options_default();
  o.layout = EXPORT_LAYOUT_PAGED;
  o.target = EXPORT_TARGET_CPU;
  o.force = 1;
  diag d;
  for (int i = 0; i < 2; i++) {
    snprintf(pkg[i], sizeof pkg[i], "%s/deepseek-moe-latent-%d", g_tmp, i);
    remove_metadata(pkg[i]);
    CHECK_STATUS(model_export(m, pkg[i], &o, &d), PH_OK, d.msg);
  }
  genai_config gc;
  graph *g = read_package(pkg[0], PACKAGE_FINALIZE | PACKAGE_CHECK, &gc);
  if (g) CHECK_STATUS(inference_metadata_check(pkg[0], g, &gc, &d), PH_OK, d.msg);
  json_t *doc = load_doc(pkg[0]);
  if (doc) check_latent_doc(doc, model_config(m));
  char pa[1200], pb[1200];
  snprintf(pa, sizeof pa, "%s/%s", pkg[0], INFERENCE_METADATA_FILE);
  snprintf(pb, sizeof pb, "%s/%s", pkg[1], INFERENCE_METADATA_FILE);
  char *x = NULL, *y = NULL;
  size_t nx = 0, ny = 0;
  CHECK_STATUS(file_read_all(pa, 1 << 24, &x, &nx, &d), PH_OK, d.msg);
  CHECK_STATUS(file_read_all(pb, 1 << 24, &y, &ny, &d), PH_OK, d.msg);
  CHECK(x && y && nx == ny && memcmp(x, y, nx) == 0);
  free(x);
  free(y);
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
  RUN(test_latent_graph);
  RUN(test_latent_export);
  RUN(test_latent_moe_export);
  cli_testing_done();
  return check_finish();
}
