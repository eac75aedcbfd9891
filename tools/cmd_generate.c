/* pagedhybrid generate --model DIR --tokens 1,2,3 — greedy generation through the dense graph.
 *
 * Prints the prompt and the generated token ids. --logits-out FILE writes an F32 safetensors
 * file with one tensor "logits" [T, vocab]: row t holds the logits computed at position t of
 * the sequence prompt + generated tokens (so row t predicts token t+1). Every generated token
 * is run once too, so T = prompt length + max-new. This format is stable: others check us
 * with it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "cli.h"
#include "io/onnx.h"
#include "io/safetensors.h"
#include "models/dense_session.h"
#include "models/model.h"

static const cli_option OPTIONS[] = {
    {"model", "DIR", "Hugging Face checkpoint directory, or an exported package (model.onnx)"},
    {"tokens", "LIST", "prompt token ids, comma-separated (e.g. 1,2,3)"},
    {"max-new", "N", "tokens to generate greedily (default 16)"},
    {"logits-out", "FILE",
     "write every position's logits as F32 safetensors tensor \"logits\" [T, vocab]"},
    {"threads", "N", "worker threads (default: all CPUs)"},
    {"max-context", "N", "context bound (default min(max_position_embeddings, 32768))"},
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

static int parse_tokens(cli_args *a, const char *s, int64_t **out, int64_t *n_out) {
  int64_t n = 1;
  for (const char *p = s; *p; p++) n += *p == ',';
  int64_t *t = calloc((size_t)n, sizeof *t);
  if (!t) return cli_lib_error(PH_ERR_NO_MEMORY, "out of memory");
  const char *p = s;
  for (int64_t i = 0; i < n; i++) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (errno || end == p || (*end != ',' && *end != '\0') || v < 0) {
      free(t);
      return cli_usage_error(
          a, "--tokens expects non-negative integers separated by commas, got \"%s\"", s);
    }
    t[i] = v;
    p = *end ? end + 1 : end;
  }
  *out = t;
  *n_out = n;
  return CLI_EXIT_OK;
}

static int64_t argmax(const float *row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; i++)
    if (row[i] > row[best]) best = i;
  return best;
}

int cmd_generate(int argc, char **argv) {
  cli_args a;
  int rc = cli_parse(&a, "generate", OPTIONS, N_OPTIONS, argc, argv);
  if (rc) return rc;
  if (a.help) {
    cli_print_help(
        &a, "--model DIR --tokens LIST [options]",
        "Greedy generation from token ids (no tokenizer yet), printing the prompt and the\n"
        "generated ids. Runs the dense graph on the CPU.");
    return CLI_EXIT_OK;
  }
  if (a.n_positional) return cli_usage_error(&a, "unexpected argument \"%s\"", a.positional[0]);
  const char *dir = cli_get(&a, "model"), *toks = cli_get(&a, "tokens");
  if (!dir) return cli_usage_error(&a, "--model DIR is required");
  if (!toks) return cli_usage_error(&a, "--tokens LIST is required");
  int64_t max_new = 16, threads = 0, max_ctx = 0;
  if ((rc = cli_get_int(&a, "max-new", 0, 1 << 20, &max_new)) ||
      (rc = cli_get_int(&a, "threads", 0, 1024, &threads)) ||
      (rc = cli_get_int(&a, "max-context", 0, (int64_t)1 << 24, &max_ctx)))
    return rc;
  int64_t *prompt = NULL, n_prompt = 0;
  if ((rc = parse_tokens(&a, toks, &prompt, &n_prompt))) return rc;

  /* A package directory (model.onnx) runs its graph; anything else is a checkpoint. */
  char onnx_path[4096];
  snprintf(onnx_path, sizeof onnx_path, "%s/%s", dir, ONNX_MODEL_FILE);
  ph_model *m = NULL;
  ph_status s = PH_OK;
  diag d;
  diag_clear(&d);
  dense_session *sess = NULL;
  if (path_exists(onnx_path)) {
    graph *g = NULL;
    s = onnx_read_model(dir, &g, &d);
    if (s == PH_OK) s = dense_session_create_graph(g, max_ctx, (int)threads, &sess, &d);
  } else {
    s = ph_model_open(dir, NULL, &m);
    if (s != PH_OK) {
      rc = cli_lib_error(s, m ? ph_model_error(m) : NULL);
      ph_model_free(m);
      free(prompt);
      return rc;
    }
    s = dense_session_create(m, max_ctx, (int)threads, &sess, &d);
  }
  float *logits = NULL;
  int64_t *seq = NULL;
  const int64_t V = sess ? dense_session_vocab(sess) : 0, T = n_prompt + max_new;
  if (s == PH_OK) {
    logits = calloc((size_t)(T * V), sizeof(float));
    seq = calloc((size_t)T, sizeof(int64_t));
    if (!logits || !seq)
      s = diag_set(&d, PH_ERR_NO_MEMORY, "out of memory for %lld logits rows", (long long)T);
  }
  if (s == PH_OK) {
    memcpy(seq, prompt, (size_t)n_prompt * sizeof(int64_t));
    s = dense_session_step(sess, prompt, n_prompt, logits, &d);
  }
  for (int64_t i = 0; s == PH_OK && i < max_new; i++) {
    int64_t pos = n_prompt + i;
    seq[pos] = argmax(logits + (pos - 1) * V, V);
    s = dense_session_step(sess, &seq[pos], 1, logits + pos * V, &d);
  }
  if (s == PH_OK) {
    printf("prompt:");
    for (int64_t i = 0; i < n_prompt; i++) printf("%s%lld", i ? "," : " ", (long long)seq[i]);
    printf("\ngenerated:");
    for (int64_t i = n_prompt; i < T; i++)
      printf("%s%lld", i > n_prompt ? "," : " ", (long long)seq[i]);
    printf("\n");
    const char *out = cli_get(&a, "logits-out");
    if (out) {
      st_write_entry e = {"logits", PH_DTYPE_F32, shape_2d(T, V), logits};
      s = st_write_file(out, &e, 1, NULL, NULL, &d);
    }
  }
  rc = s == PH_OK ? CLI_EXIT_OK : cli_lib_error(s, d.msg);
  free(seq);
  free(logits);
  free(prompt);
  dense_session_free(sess);
  ph_model_free(m);
  return rc;
}
