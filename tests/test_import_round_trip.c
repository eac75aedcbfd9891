/* Import round trip: a golden checkpoint exported as a package (model_export), read back
 * (onnx_read_model) and written again (onnx_write_model) gives byte-identical model.onnx and
 * model.onnx.data; genai_config.json read and written again is byte-identical too; and the
 * package run through the dense session gives bit-identical logits to the checkpoint run
 * directly, over a prefill and decode steps. For the f32 golden model (weights kept), the bf16
 * VLM one (weights kept in bf16 behind Casts) and an f16 export of the f32 one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "check.h"
#include "io/genai_config.h"
#include "io/onnx.h"
#include "models/export.h"
#include "runtime/dense_session.h"

#define MAX_CONTEXT 64

static char g_tmp[512];

static void check_same_file(const char *a_dir, const char *b_dir, const char *name) {
  char a[1200], b[1200];
  snprintf(a, sizeof a, "%s/%s", a_dir, name);
  snprintf(b, sizeof b, "%s/%s", b_dir, name);
  fmap fa, fb;
  diag d;
  CHECK_STATUS(fmap_open(a, &fa, &d), PH_OK, d.msg);
  CHECK_STATUS(fmap_open(b, &fb, &d), PH_OK, d.msg);
  CHECK_EQ_INT(fb.size, fa.size);
  if (fa.size == fb.size && fa.size) {
    size_t i = 0;
    while (i < fa.size && fa.data[i] == fb.data[i]) i++;
    if (!CHECK(i == fa.size)) fprintf(stderr, "       %s: first difference at byte %zu\n", name, i);
  }
  fmap_close(&fa);
  fmap_close(&fb);
}

/* Runs tokens as a prefill of n_prefill, then one token at a time; logits [n, vocab]. */
static int run_session(dense_session *s, const int64_t *tokens, int n, int n_prefill,
                       float *logits) {
  diag d;
  int64_t vocab = dense_session_vocab(s);
  ph_status st = dense_session_step(s, tokens, n_prefill, logits, &d);
  for (int i = n_prefill; st == PH_OK && i < n; i++)
    st = dense_session_step(s, tokens + i, 1, logits + (size_t)i * (size_t)vocab, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  return st == PH_OK;
}

static void round_trip(const char *golden, const char *tag, ph_dtype dtype) {
  char ckpt[1024], pkg[1024], again[1024];
  check_data(ckpt, sizeof ckpt, "golden/%s/checkpoint", golden);
  snprintf(pkg, sizeof pkg, "%s/%s/pkg", g_tmp, tag);
  snprintf(again, sizeof again, "%s/%s/again", g_tmp, tag);
  diag d;
  ph_model *m = NULL;
  ph_status s = ph_model_open(ckpt, NULL, &m);
  CHECK_STATUS(s, PH_OK, m ? ph_model_error(m) : NULL);
  if (s != PH_OK) {
    ph_model_free(m);
    return;
  }
  export_options o = export_options_default();
  o.dtype = dtype;
  o.force = 1;
  o.max_context = MAX_CONTEXT;
  CHECK_STATUS(model_export(m, pkg, &o, &d), PH_OK, d.msg);

  /* read, write again: the same bytes */
  graph *g = NULL;
  CHECK_STATUS(onnx_read_model(pkg, &g, &d), PH_OK, d.msg);
  if (g) {
    CHECK_STATUS(path_mkdirs(again, &d), PH_OK, d.msg);
    CHECK_STATUS(onnx_write_model(g, again, EXPORT_PRODUCER, &d), PH_OK, d.msg);
    check_same_file(pkg, again, ONNX_MODEL_FILE);
    check_same_file(pkg, again, ONNX_DATA_FILE);
  }
  genai_config gc;
  CHECK_STATUS(genai_config_read(pkg, &gc, &d), PH_OK, d.msg);
  CHECK_STATUS(genai_config_write(&gc, again, &d), PH_OK, d.msg);
  check_same_file(pkg, again, "genai_config.json");
  CHECK_EQ_INT(gc.context_length, MAX_CONTEXT);

  /* the package and the checkpoint compute the same logits, bit for bit */
  dense_session *a = NULL, *b = NULL;
  CHECK_STATUS(dense_session_create(m, MAX_CONTEXT, 2, &a, &d), PH_OK, d.msg);
  if (g) {
    CHECK_STATUS(dense_session_create_graph(g, MAX_CONTEXT, 2, &b, &d), PH_OK, d.msg);
    g = NULL; /* the session owns it now, also on failure */
  }
  if (a && b && dtype == PH_DTYPE_INVALID) {
    const int64_t tokens[] = {11, 3, 250, 7, 7, 42, 0, 199, 5, 64};
    const int n = (int)(sizeof tokens / sizeof tokens[0]);
    int64_t vocab = dense_session_vocab(a);
    CHECK_EQ_INT(dense_session_vocab(b), vocab);
    float *la = calloc((size_t)(n * vocab), sizeof *la),
          *lb = calloc((size_t)(n * vocab), sizeof *lb);
    if (run_session(a, tokens, n, 6, la) && run_session(b, tokens, n, 6, lb)) {
      size_t i = 0, total = (size_t)(n * vocab);
      while (i < total && memcmp(&la[i], &lb[i], sizeof *la) == 0) i++;
      if (!CHECK(i == total))
        fprintf(stderr, "       logits differ first at row %zu col %zu: %.9g vs %.9g\n",
                i / (size_t)vocab, i % (size_t)vocab, (double)la[i], (double)lb[i]);
    }
    free(la);
    free(lb);
  }
  graph_free(g);
  dense_session_free(a);
  dense_session_free(b);
  ph_model_free(m);
}

static void test_f32(void) { round_trip("qwen35-tiny-f32", "f32", PH_DTYPE_INVALID); }
static void test_bf16_vlm(void) { round_trip("qwen35-tiny-bf16-vlm", "bf16", PH_DTYPE_INVALID); }
static void test_f16_export(void) { round_trip("qwen35-tiny-f32", "f16", PH_DTYPE_F16); }

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "%s", check_env("PH_TMP_DIR"));
  diag d;
  if (path_mkdirs(g_tmp, &d) != PH_OK) return 1;
  RUN(test_f32);
  RUN(test_bf16_vlm);
  RUN(test_f16_export);
  return check_finish();
}
