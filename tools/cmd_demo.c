/* pagedhybrid demo — the main job on an embedded default (make demo runs it).
 *
 * Today: make a small random-weight Qwen3.8-shaped checkpoint and inspect it, which exercises
 * config parsing, the name tables, safetensors writing and validated loading end to end. The
 * serving demo (packed batch, paged KV, requests arriving and leaving) replaces this when the
 * engine lands.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "models/tiny.h"

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
                   "Make a small random-weight Qwen3.8-shaped checkpoint and inspect it.");
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
  printf("2. inspect loads it back (config parsed, every tensor checked by name, shape, dtype):\n\n");
  fflush(stdout);
  char *inspect_argv[] = {dir, "--max-seqs", "8", "--max-tokens", "4096", "--block-size", "16"};
  rc = cmd_inspect((int)(sizeof inspect_argv / sizeof inspect_argv[0]), inspect_argv);
  if (rc) return rc;
  printf("\nServing (packed batch, paged KV, continuous batching) arrives with the engine; see\n"
         "README.md for what works today.\n");
  return CLI_EXIT_OK;
}
