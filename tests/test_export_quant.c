/* test_export_quant — quantized packages (export --quant, docs/export.md "Quantized packages"):
 * exported, read back and run without quantizing again.
 *
 *   dense        int8 and int4 (sym and asym, accuracy_level 1 and 4) packages of a make-tiny
 *                Qwen3.5 and DeepSeek-V3: the graph read back holds every MatMulNBits of the
 *                graph built in memory with the same options, with the same B / scales / zero
 *                point bytes, as plain initializers (nothing lazy, nothing quantized at load), and
 *                its logits in the dense session are bit-identical to the in-memory graph's (the
 *                same bytes through the same kernels);
 *   paged        the same for CPU-target packages (f32 and f16 activations: scales in the io
 *                dtype) through the paged session, and for a CUDA-target one (f16, 256-token
 *                pages) of Qwen3.5-MoE; DeepSeek's absorbed projections included;
 *   CLI          export --quant's summary line and usage errors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "check.h"
#include "cli_testing.h"
#include "io/genai_config.h"
#include "io/onnx.h"
#include "model_testing.h"
#include "models/export.h"
#include "models/model.h"
#include "models/registry.h"
#include "models/tiny.h"
#include "runtime/dense_session.h"
#include "runtime/paged_session.h"
#include "tensor/dtype.h"

static char g_tmp[512];

static ph_model *tiny_model(const char *model_type, const char *name) {
  tiny_params p = tiny_params_default();
  p.model_type = model_type;
  char dir[700];
  snprintf(dir, sizeof dir, "%s/%s", g_tmp, name);
  diag d;
  diag_clear(&d);
  CHECK_STATUS(tiny_write(dir, &p, &d), PH_OK, d.msg);
  return mt_open(dir, 1);
}

/* Every MatMulNBits initializer of `built` is in `read` under the same name, a plain initializer
 * with the same bytes; no value of `read` is a lazy quantized one. Returns the number compared. */
static int same_quantized_bytes(graph *built, graph *read) {
  int n = 0;
  for (int v = 0; v < read->n_values; v++)
    if (!CHECK(read->values[v].quant_part == GRAPH_QUANT_NONE)) break;
  for (int i = 0; i < built->n_nodes; i++) {
    const gnode *nd = &built->nodes[i];
    if (strcmp(nd->op_type, "MatMulNBits") != 0) continue;
    for (int k = 1; k < nd->n_inputs; k++) {
      const gvalue *a = &built->values[nd->inputs[k]];
      int id = graph_find_value(read, a->name);
      if (!CHECK(id >= 0)) {
        fprintf(stderr, "    %s missing from the package\n", a->name);
        continue;
      }
      const gvalue *b = &read->values[id];
      CHECK(b->kind == VALUE_INITIALIZER && !b->lazy && b->type.dtype == a->type.dtype);
      CHECK(b->n_bytes == a->n_bytes);
      diag d;
      diag_clear(&d);
      const void *x = graph_initializer_data(built, nd->inputs[k], &d);
      const void *y = graph_initializer_data(read, id, &d);
      if (CHECK(x && y && b->n_bytes == a->n_bytes)) CHECK(memcmp(x, y, (size_t)a->n_bytes) == 0);
      n++;
    }
  }
  return n;
}

static int count_nbits(const graph *g) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += strcmp(g->nodes[i].op_type, "MatMulNBits") == 0;
  return n;
}

/* Logits [n, V] of a prefill of n - 2 tokens and two single steps. Takes g. */
static float *dense_logits(graph *g, const int64_t *tokens, int64_t n, int64_t *V) {
  diag d;
  diag_clear(&d);
  dense_session *s = NULL;
  ph_status st = dense_session_create_graph(g, 512, 2, &s, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  if (st != PH_OK) return NULL;
  *V = dense_session_vocab(s);
  float *out = calloc((size_t)(n * *V), sizeof *out);
  CHECK_STATUS(dense_session_step(s, tokens, n - 2, out, &d), PH_OK, d.msg);
  for (int64_t i = n - 2; i < n; i++)
    CHECK_STATUS(dense_session_step(s, tokens + i, 1, out + i * *V, &d), PH_OK, d.msg);
  dense_session_free(s);
  return out;
}

static export_options quant_export(export_layout layout, export_target target,
                                   const ph_quant_params *q) {
  export_options o = export_options_default();
  o.layout = layout;
  o.target = target;
  o.max_context = 512;
  o.force = 1;
  o.quant = *q;
  return o;
}

static void test_dense_packages(void) {
  static const int64_t tokens[] = {5, 9, 100, 31, 7, 250, 64, 2};
  const int64_t n = (int64_t)(sizeof tokens / sizeof tokens[0]);
  static const struct {
    const char *model_type;
    ph_quant_params q;
  } cases[] = {
      {"qwen3_5_text", {8, 32, 0, 1, NULL}}, {"qwen3_5_text", {4, 32, 1, 4, NULL}},
      {"qwen3_5_text", {4, 64, 0, 0, NULL}}, {"deepseek_v3", {8, 16, 1, 4, NULL}},
      {"deepseek_v3", {4, 32, 0, 1, NULL}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    ph_model *m = tiny_model(cases[c].model_type, cases[c].model_type);
    if (!m) continue;
    char pkg[700];
    snprintf(pkg, sizeof pkg, "%s/dense-%zu", g_tmp, c);
    export_options o = quant_export(EXPORT_LAYOUT_DENSE, EXPORT_TARGET_CUDA, &cases[c].q);
    diag d;
    diag_clear(&d);
    CHECK_STATUS(model_export(m, pkg, &o, &d), PH_OK, d.msg);
    export_built built;
    CHECK_STATUS(export_build(m, &o, &built, &d), PH_OK, d.msg);
    graph *g = NULL;
    CHECK_STATUS(onnx_read_model(pkg, &g, &d), PH_OK, d.msg);
    if (g && built.g) {
      CHECK(count_nbits(built.g) > 0);
      CHECK_EQ_INT(count_nbits(g), count_nbits(built.g));
      CHECK(same_quantized_bytes(built.g, g) >= 2 * count_nbits(built.g));
      int64_t V = 0, V2 = 0;
      float *x = dense_logits(g, tokens, n, &V);
      g = NULL; /* the session took it */
      float *y = dense_logits(built.g, tokens, n, &V2);
      built.g = NULL;
      if (CHECK(x && y && V == V2)) CHECK(memcmp(x, y, (size_t)(n * V) * sizeof *x) == 0);
      free(x);
      free(y);
    }
    graph_free(g);
    export_built_free(&built);
    ph_model_free(m);
  }
}

/* Logits of one packed step of two sequences (5 and 3 tokens), [8, V]. */
static int run_two(paged_session *s, float *out, int64_t V) {
  static const int64_t a[5] = {1, 2, 3, 4, 5}, b[3] = {9, 8, 7};
  diag d;
  diag_clear(&d);
  int32_t slot[2];
  block_table bt[2];
  int ok = 1;
  for (int i = 0; i < 2; i++) {
    block_table_init(&bt[i]);
    slot[i] = -1;
    ok &= hybrid_cache_reserve(paged_session_cache(s), &bt[i], &slot[i], 8, &d) == PH_OK;
  }
  paged_seq seqs[2] = {{slot[0], &bt[0], 0, a, 5, 0}, {slot[1], &bt[1], 0, b, 3, 0}};
  ok = ok && paged_session_run(s, seqs, 2, &d) == PH_OK;
  int64_t rows = 0;
  const float *l = ok ? paged_session_logits(s, &rows) : NULL;
  if (l && rows == 8) memcpy(out, l, (size_t)(8 * V) * sizeof *out);
  for (int i = 0; i < 2; i++) {
    hybrid_cache_release(paged_session_cache(s), &bt[i], &slot[i], &d);
    free(bt[i].ids);
  }
  return ok && rows == 8;
}

static void test_paged_packages(void) {
  static const struct {
    const char *model_type;
    export_target target;
    ph_dtype io;
    ph_quant_params q;
  } cases[] = {
      {"qwen3_5_text", EXPORT_TARGET_CPU, PH_DTYPE_F32, {8, 32, 0, 1, NULL}},
      {"qwen3_5_text", EXPORT_TARGET_CPU, PH_DTYPE_F16, {4, 32, 1, 4, NULL}},
      {"deepseek_v3", EXPORT_TARGET_CPU, PH_DTYPE_F32, {4, 16, 0, 1, NULL}},
      {"deepseek_v3", EXPORT_TARGET_CPU, PH_DTYPE_BF16, {8, 64, 1, 4, NULL}},
      {"qwen3_5_moe_text", EXPORT_TARGET_CUDA, PH_DTYPE_INVALID, {4, 128, 0, 4, NULL}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    ph_model *m = tiny_model(cases[c].model_type, cases[c].model_type);
    if (!m) continue;
    char pkg[700];
    snprintf(pkg, sizeof pkg, "%s/paged-%zu", g_tmp, c);
    export_options o = quant_export(EXPORT_LAYOUT_PAGED, cases[c].target, &cases[c].q);
    o.io_dtype = cases[c].io;
    diag d;
    diag_clear(&d);
    CHECK_STATUS(model_export(m, pkg, &o, &d), PH_OK, d.msg);
    export_built built;
    CHECK_STATUS(export_build(m, &o, &built, &d), PH_OK, d.msg);
    genai_config gc;
    CHECK_STATUS(genai_config_read(pkg, &gc, &d), PH_OK, d.msg);
    paged_binding b;
    CHECK_STATUS(paged_binding_from_genai(&gc, &b, &d), PH_OK, d.msg);
    graph *g = NULL;
    CHECK_STATUS(onnx_read_model(pkg, &g, &d), PH_OK, d.msg);
    if (g && built.g) {
      CHECK(count_nbits(built.g) > 0);
      CHECK_EQ_INT(count_nbits(g), count_nbits(built.g));
      CHECK(same_quantized_bytes(built.g, g) >= 2 * count_nbits(built.g));
    }
    paged_session_params p = paged_session_params_default();
    p.n_blocks = 8;
    p.n_threads = 2;
    paged_session *from_pkg = NULL, *from_ckpt = NULL;
    if (g) CHECK_STATUS(paged_session_create(g, &b, &p, &from_pkg, &d), PH_OK, d.msg);
    model_options qo = model_options_default();
    qo.max_context = 512;
    qo.paged = 1;
    qo.io_dtype = built.io_dtype;
    qo.block_size = built.block_size;
    qo.rotary = built.rotary == EXPORT_ROTARY_OPS ? MODEL_ROTARY_OPS : MODEL_ROTARY_FUSED;
    qo.quant = cases[c].q;
    if (cases[c].io != PH_DTYPE_F32) qo.weight_dtype = built.io_dtype; /* as the export stores */
    CHECK_STATUS(paged_session_create_model(m, &qo, &p, &from_ckpt, &d), PH_OK, d.msg);
    if (from_pkg && from_ckpt) {
      const int64_t V = paged_session_vocab(from_ckpt);
      float *x = calloc((size_t)(8 * V), sizeof *x), *y = calloc((size_t)(8 * V), sizeof *y);
      CHECK(run_two(from_pkg, x, V) && run_two(from_ckpt, y, V));
      int finite = 1;
      for (int64_t i = 0; i < 8 * V; i++) finite &= x[i] == x[i];
      CHECK(finite);
      if (!CHECK(memcmp(x, y, (size_t)(8 * V) * sizeof *x) == 0))
        fprintf(stderr, "    case %zu: the package's logits differ from the checkpoint's\n", c);
      free(x);
      free(y);
    }
    paged_session_free(from_pkg);
    paged_session_free(from_ckpt);
    export_built_free(&built);
    ph_model_free(m);
  }
}

static void test_cli(void) {
  cli_testing_init(g_tmp);
  char dir[700], args[2200];
  snprintf(dir, sizeof dir, "%s/qwen3_5_text", g_tmp); /* written by test_dense_packages */
  snprintf(args, sizeof args,
           "export '%s' -o '%s/cli4' --force --quant int4 --quant-asym "
           "--quant-block 64 --quant-accuracy-level 1 --quant-skip lm_head",
           dir, g_tmp);
  CHECK_EQ_INT(cli_run(args), 0);
  if (g_stdout) CHECK_CONTAINS(g_stdout, "linear layers int4 block 64 asym accuracy_level 1");
  char pkg[720];
  snprintf(pkg, sizeof pkg, "%s/cli4", g_tmp);
  graph *g = NULL;
  diag d;
  diag_clear(&d);
  CHECK_STATUS(onnx_read_model(pkg, &g, &d), PH_OK, d.msg);
  if (g) {
    int n = 0, head = 0;
    for (int i = 0; i < g->n_nodes; i++) {
      const gnode *nd = &g->nodes[i];
      if (strcmp(nd->op_type, "MatMulNBits") != 0) continue;
      n++;
      CHECK_EQ_INT(nd->n_inputs, 4);
      CHECK_EQ_INT(node_attr_int(nd, "block_size", 0), 64);
      CHECK_EQ_INT(node_attr_int(nd, "accuracy_level", 0), 1);
      head += strstr(g->values[nd->inputs[1]].name, "lm_head") != NULL;
    }
    CHECK(n > 0);
    CHECK_EQ_INT(head, 0);
  }
  graph_free(g);
  static const char *const usage[] = {
      "--quant int3", "--quant-block 64", "--quant int4 --quant-block 48",
      "--quant int8 --quant-sym --quant-asym", "--quant int8 --quant-accuracy-level 2"};
  for (size_t i = 0; i < sizeof usage / sizeof usage[0]; i++) {
    snprintf(args, sizeof args, "export '%s' -o '%s/cli-bad' %s", dir, g_tmp, usage[i]);
    CHECK_EQ_INT(cli_run(args), 2);
  }
  cli_testing_done();
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "%s", check_env("PH_TMP_DIR"));
  diag d;
  diag_clear(&d);
  if (path_mkdirs(g_tmp, &d) != PH_OK) return 1;
  RUN(test_dense_packages);
  RUN(test_paged_packages);
  RUN(test_cli);
  return check_finish();
}
