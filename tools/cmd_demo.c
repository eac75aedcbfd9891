/* pagedhybrid demo — the main job on an embedded default (make demo runs it).
 *
 * Today: make a small random-weight Qwen3.8-shaped checkpoint, inspect it (config parsing, name
 * tables, validated loading), then generate greedily through the dense graph on the CPU. The
 * serving demo (packed batch, paged KV, requests arriving and leaving) replaces this when the
 * engine lands.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "models/dense_session.h"
#include "models/tiny.h"

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Greedy generation from a fixed prompt; prints the ids and the speed. */
static int generate(const char *dir) {
  ph_model *m = NULL;
  ph_status s = ph_model_open(dir, NULL, &m);
  if (s != PH_OK) {
    int rc = cli_lib_error(s, ph_model_error(m));
    ph_model_free(m);
    return rc;
  }
  diag d;
  diag_clear(&d);
  dense_session *sess = NULL;
  s = dense_session_create(m, 256, 0, &sess, &d);
  enum { PROMPT = 12, NEW = 24 };
  int64_t ids[PROMPT + NEW];
  static float logits[PROMPT * 512];
  for (int i = 0; i < PROMPT; i++) ids[i] = (i * 41 + 7) % 512;
  double t0 = seconds(), t1 = t0;
  int64_t V = s == PH_OK ? dense_session_vocab(sess) : 0;
  if (s == PH_OK && V > 512)
    s = diag_set(&d, PH_ERR_INTERNAL, "demo model vocab %lld > 512", (long long)V);
  if (s == PH_OK) s = dense_session_step(sess, ids, PROMPT, logits, &d);
  const float *last = logits + (PROMPT - 1) * V;
  for (int i = 0; s == PH_OK && i < NEW; i++) {
    if (i == 0) t1 = seconds();
    int64_t best = 0;
    for (int64_t k = 1; k < V; k++)
      if (last[k] > last[best]) best = k;
    ids[PROMPT + i] = best;
    s = dense_session_step(sess, &ids[PROMPT + i], 1, logits, &d);
    last = logits;
  }
  double t2 = seconds();
  if (s == PH_OK) {
    printf("   prompt    ");
    for (int i = 0; i < PROMPT; i++) printf("%lld ", (long long)ids[i]);
    printf("\n   generated ");
    for (int i = 0; i < NEW; i++) printf("%lld ", (long long)ids[PROMPT + i]);
    printf("\n   prefill %d tokens in %.1f ms; decode %.0f tokens/s\n", PROMPT, (t1 - t0) * 1e3,
           NEW / (t2 - t1));
  }
  dense_session_free(sess);
  ph_model_free(m);
  return s == PH_OK ? CLI_EXIT_OK : cli_lib_error(s, d.msg);
}

static const cli_option OPTIONS[] = {
    {"work-dir", "DIR", "where to write the demo model (default build/demo)"},
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

int cmd_demo(int argc, char **argv) {
  cli_args a;
  int rc = cli_parse(&a, "demo", OPTIONS, N_OPTIONS, argc, argv);
  if (rc) return rc;
  if (a.help) {
    cli_print_help(&a, "[--work-dir DIR]",
                   "Make a small random-weight Qwen3.8-shaped checkpoint, inspect it and generate\n"
                   "greedily from it on the CPU.");
    return CLI_EXIT_OK;
  }
  if (a.n_positional) return cli_usage_error(&a, "unexpected argument \"%s\"", a.positional[0]);
  const char *work = cli_get(&a, "work-dir") ? cli_get(&a, "work-dir") : "build/demo";
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/qwen3.8-tiny-bf16", work);

  printf("== pagedhybrid demo ==\n");
  printf("The weights below are RANDOM (a deterministic seed): the model's outputs are noise.\n\n");
  tiny_params p = tiny_params_default();
  diag d;
  diag_clear(&d);
  ph_status s = tiny_apply_preset(&p, "qwen3.8-tiny", &d);
  if (s == PH_OK) {
    p.dtype = PH_DTYPE_BF16;
    p.layout = LAYOUT_VLM; /* the shipped Qwen3.5/3.6/3.8 layout */
    s = tiny_write(dir, &p, &d);
  }
  if (s != PH_OK) return cli_lib_error(s, d.msg);
  printf("1. make-tiny wrote a Qwen3.8-shaped checkpoint (VLM layout, bf16) to %s\n\n", dir);
  printf(
      "2. inspect loads it back (config parsed, every tensor checked by name, shape, dtype):\n\n");
  fflush(stdout);
  char *inspect_argv[] = {dir, "--max-seqs", "8", "--max-tokens", "4096", "--block-size", "16"};
  rc = cmd_inspect((int)(sizeof inspect_argv / sizeof inspect_argv[0]), inspect_argv);
  if (rc) return rc;
  printf("\n3. generate: greedy decoding through the dense graph on the CPU (random weights, so\n"
         "   the ids are noise; the golden tests check the math):\n\n");
  fflush(stdout);
  rc = generate(dir);
  if (rc) return rc;
  printf("\nServing (packed batch, paged KV, continuous batching) arrives with the engine; see\n"
         "README.md for what works today.\n");
  return CLI_EXIT_OK;
}
