/* pagedhybrid export HF_DIR -o PKG_DIR — a checkpoint as an ONNX Runtime GenAI package.
 *
 * Writes model.onnx, model.onnx.data, genai_config.json and the checkpoint's tokenizer files
 * (models/export.h, docs/export.md). --dtype picks the weights' storage dtype (activations stay
 * f32); without it each weight keeps its checkpoint dtype. Only --layout dense exists until the
 * paged layout (issue 5). Prints one summary line per file written.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/fmap.h"
#include "cli.h"
#include "models/export.h"
#include "tensor/dtype.h"

static const cli_option OPTIONS[] = {
    {"out", "DIR", "package directory to write (also -o; created; must be empty unless --force)"},
    {"layout", "L", "graph layout: dense (default; the paged layout arrives with issue 5)"},
    {"dtype", "DT", "weight storage dtype f32|f16|bf16 (default: as stored in the checkpoint)"},
    {"max-context", "N",
     "context length = rotary cache rows (default min(max_position_embeddings, 32768))"},
    {"force", NULL, "write into a non-empty --out directory, replacing package files"},
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void print_file(const char *dir, const char *name) {
  char path[4096];
  struct stat st;
  if (path_join(path, sizeof path, dir, name, NULL) != PH_OK || stat(path, &st) != 0) return;
  double b = (double)st.st_size;
  if (b >= (double)(1 << 20))
    printf("  %-24s %.1f MiB\n", name, b / (double)(1 << 20));
  else
    printf("  %-24s %lld bytes\n", name, (long long)st.st_size);
}

int cmd_export(int argc, char **argv) {
  cli_args a;
  int rc = cli_parse(&a, "export", OPTIONS, N_OPTIONS, argc, argv);
  if (rc) return rc;
  if (a.help) {
    cli_print_help(
        &a, "HF_DIR -o PKG_DIR [options]",
        "Export a Hugging Face checkpoint as an ONNX Runtime GenAI package: model.onnx\n"
        "(IR 8, opsets ai.onnx 17 + com.microsoft 1), model.onnx.data (every weight as\n"
        "external data, 64-byte aligned), genai_config.json and the tokenizer files.\n"
        "Activations, inputs, outputs and caches are f32 (ONNX Runtime's CPU kernels for\n"
        "LinearAttention and CausalConvWithState are float-only); --dtype sets how the\n"
        "weights are stored. See docs/export.md.");
    return CLI_EXIT_OK;
  }
  if (a.n_positional != 1) return cli_usage_error(&a, "expects exactly one checkpoint directory");
  const char *out = cli_get(&a, "out");
  if (!out || !out[0]) return cli_usage_error(&a, "-o/--out DIR is required");
  const char *layout = cli_get(&a, "layout");
  if (layout && strcmp(layout, "dense") != 0) {
    if (strcmp(layout, "paged") == 0)
      return cli_usage_error(
          &a, "--layout paged is not available yet: the paged layout arrives with issue 5");
    return cli_usage_error(&a, "--layout must be dense, got \"%s\"", layout);
  }
  export_options o = export_options_default();
  o.force = cli_flag(&a, "force");
  if ((rc = cli_get_dtype(&a, "dtype", &o.dtype)) ||
      (rc = cli_get_int(&a, "max-context", 1, (int64_t)1 << 31, &o.max_context)))
    return rc;

  ph_model *m = NULL;
  ph_status s = ph_model_open(a.positional[0], NULL, &m);
  if (s != PH_OK) {
    rc = cli_lib_error(s, m ? ph_model_error(m) : NULL);
    ph_model_free(m);
    return rc;
  }
  diag d;
  diag_clear(&d);
  double t0 = now_s();
  s = model_export_dense(m, out, &o, &d);
  double t1 = now_s();
  ph_model_free(m);
  if (s != PH_OK) return cli_lib_error(s, d.msg);
  printf("exported %s -> %s (dense layout, weights %s) in %.2f s\n", a.positional[0], out,
         o.dtype == PH_DTYPE_INVALID ? "as stored" : ph_dtype_name(o.dtype), t1 - t0);
  print_file(out, "model.onnx");
  print_file(out, "model.onnx.data");
  print_file(out, "genai_config.json");
  for (int i = 0; EXPORT_TOKENIZER_FILES[i]; i++) print_file(out, EXPORT_TOKENIZER_FILES[i]);
  return CLI_EXIT_OK;
}
