/* bench_mtp — the MTP drafter's cost next to a target decode step, on a Qwen3.5-0.8B-shaped
 * random model with an MTP head (bf16 weights, real geometry), in the same run.
 *
 *   bench_mtp [--model DIR] [--prompt N] [--steps N] [--batch B] [--threads N]
 *
 * Without --model it writes the model once to build/bench-models/qwen3.5-0.8b-bf16-mtp and
 * reuses it. Each of B sequences is prefilled with a prompt of N tokens through the target and
 * caught up through the head; then, --steps times: one target decode step (B rows), one MTP
 * chained step (B rows) and one MTP catch-up of 4 rows per sequence. Medians, in ms, and the
 * MTP row's cost as a fraction of the target row's (docs/mtp.md, "Cost").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "cache/hybrid_cache.h"
#include "exec/exec.h"
#include "models/registry.h"
#include "models/tiny.h"
#include "roofline.h"
#include "runtime/mtp_session.h"
#include "runtime/paged_session.h"

#define MAX_B 16

static const char *arg_value(int argc, char **argv, const char *name, const char *def) {
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], name) == 0) return argv[i + 1];
  return def;
}

static int fail(const char *what, const diag *d) {
  fprintf(stderr, "bench_mtp: %s: %s: %s\n", what, ph_status_name(d->status), d->msg);
  return 1;
}

int main(int argc, char **argv) {
  const char *model_dir = arg_value(argc, argv, "--model", NULL);
  const int prompt = atoi(arg_value(argc, argv, "--prompt", "64"));
  const int steps = atoi(arg_value(argc, argv, "--steps", "8"));
  const int B = atoi(arg_value(argc, argv, "--batch", "1"));
  const int threads = atoi(arg_value(argc, argv, "--threads", "0"));
  if (prompt < 1 || steps < 1 || steps > 64 || B < 1 || B > MAX_B) {
    fprintf(stderr, "bench_mtp: bad arguments\n");
    return 2;
  }
  diag d;
  diag_clear(&d);
  char dir[1024];
  if (!model_dir) {
    snprintf(dir, sizeof dir, "build/bench-models/qwen3.5-0.8b-bf16-mtp");
    char st[1100];
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    if (!path_exists(st)) {
      fprintf(stderr,
              "bench_mtp: writing a random Qwen3.5-0.8B-shaped bf16 model with an MTP "
              "head to %s ...\n",
              dir);
      tiny_params p = tiny_params_default();
      p.dtype = PH_DTYPE_BF16;
      if (tiny_apply_preset(&p, "qwen3.5-0.8b", &d) != PH_OK) return fail("preset", &d);
      p.mtp_layers = 1;
      if (tiny_write(dir, &p, &d) != PH_OK) return fail("make-tiny", &d);
    }
    model_dir = dir;
  }
  ph_model *m = NULL;
  if (ph_model_open(model_dir, NULL, &m) != PH_OK) {
    fprintf(stderr, "bench_mtp: %s\n", m ? ph_model_error(m) : "open failed");
    ph_model_free(m);
    return 1;
  }
  const int64_t T = prompt + steps + 8, M = (int64_t)B * (T + 8);
  model_options o = model_options_default();
  o.output_hidden = 1;
  o.max_context = T + 16;
  paged_session_params pp = paged_session_params_default();
  pp.n_threads = threads;
  pp.max_slots = pp.max_batch = B;
  pp.max_tokens = M;
  pp.n_blocks = (int32_t)(B * ((T + 15) / 16 + 1) + 1);
  paged_session *ps = NULL;
  if (paged_session_create_model(m, &o, &pp, &ps, &d) != PH_OK) return fail("target", &d);
  model_options mo = model_options_default();
  mo.max_context = o.max_context;
  mtp_session *ms = NULL;
  if (mtp_session_create(m, &mo, B, M, 0, &ms, &d) != PH_OK) return fail("mtp", &d);
  const int64_t H = mtp_session_hidden_size(ms), V = mtp_session_vocab(ms);
  executor *e = paged_session_executor(ps);
  const int hid_out = exec_output_index(e, "hidden_states");
  int64_t *toks = malloc((size_t)(B * (T + 8)) * sizeof *toks);
  float *hid = malloc((size_t)M * (size_t)H * sizeof *hid);
  block_table bt[MAX_B];
  int32_t slot[MAX_B], handle[MAX_B];
  paged_seq q[MAX_B];
  mtp_seq mq[MAX_B];
  for (int b = 0; b < B; b++) {
    block_table_init(&bt[b]);
    slot[b] = -1;
    if (mtp_session_open(ms, &handle[b], &d) != PH_OK) return fail("open", &d);
    for (int64_t j = 0; j < T + 8; j++) toks[b * (T + 8) + j] = (j * 131 + b * 7 + 1) % V;
  }
  /* prefill both */
  for (int b = 0; b < B; b++) {
    if (hybrid_cache_reserve(paged_session_cache(ps), &bt[b], &slot[b], prompt, &d) != PH_OK)
      return fail("reserve", &d);
    q[b] = (paged_seq){slot[b], &bt[b], 0, toks + b * (T + 8), prompt, 0};
  }
  if (paged_session_run(ps, q, B, &d) != PH_OK) return fail("target prefill", &d);
  const tensor *ht = exec_output(e, hid_out);
  memcpy(hid, ht->data, (size_t)(B * prompt * H) * sizeof *hid);
  for (int b = 0; b < B; b++)
    mq[b] = (mtp_seq){handle[b], 0, prompt, toks + b * (T + 8) + 1, hid + b * prompt * H};
  if (mtp_session_run(ms, mq, B, &d) != PH_OK) return fail("mtp catch-up", &d);
  double t_target[64], t_chain[64], t_catch[64];
  int64_t at = prompt;
  for (int s = 0; s < steps; s++) {
    for (int b = 0; b < B; b++) {
      if (hybrid_cache_reserve(paged_session_cache(ps), &bt[b], &slot[b], at + 1, &d) != PH_OK)
        return fail("reserve", &d);
      q[b] = (paged_seq){slot[b], &bt[b], at, toks + b * (T + 8) + at, 1, 0};
    }
    double t0 = roofline_now();
    if (paged_session_run(ps, q, B, &d) != PH_OK) return fail("target step", &d);
    t_target[s] = roofline_now() - t0;
    ht = exec_output(e, hid_out);
    memcpy(hid, ht->data, (size_t)(B * H) * sizeof *hid);
    for (int b = 0; b < B; b++)
      mq[b] = (mtp_seq){handle[b], at, 1, toks + b * (T + 8) + at + 1, hid + b * H};
    t0 = roofline_now();
    if (mtp_session_run(ms, mq, B, &d) != PH_OK) return fail("mtp chain", &d);
    t_chain[s] = roofline_now() - t0;
    for (int b = 0; b < B; b++) /* a 4-row catch-up over the same positions (recomputed) */
      mq[b] = (mtp_seq){handle[b], at - 3, 4, toks + b * (T + 8) + at - 2, hid};
    t0 = roofline_now();
    if (mtp_session_run(ms, mq, B, &d) != PH_OK) return fail("mtp catch-up", &d);
    t_catch[s] = roofline_now() - t0;
    at++;
  }
  const double tt = roofline_median(t_target, steps) * 1e3,
               tc = roofline_median(t_chain, steps) * 1e3,
               tk = roofline_median(t_catch, steps) * 1e3;
  printf("bench_mtp: batch %d, prompt %d, %d steps (medians)\n", B, prompt, steps);
  printf("  target decode step   %8.2f ms  (%d rows)\n", tt, B);
  printf("  MTP chained step     %8.2f ms  (%d rows)  = %.2f of a target step\n", tc, B, tc / tt);
  printf("  MTP 4-row catch-up   %8.2f ms  (%d rows)\n", tk, 4 * B);
  for (int b = 0; b < B; b++) {
    hybrid_cache_release(paged_session_cache(ps), &bt[b], &slot[b], &d);
    free(bt[b].ids);
  }
  free(toks);
  free(hid);
  mtp_session_free(ms);
  paged_session_free(ps);
  ph_model_free(m);
  return 0;
}
