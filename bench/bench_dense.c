/* bench_dense — prefill and decode throughput of the dense graph on a Qwen3.5-0.8B-shaped
 * random model (BF16, real geometry from ../shared/spec/model-math.md §6), next to this
 * machine's memory bandwidth and fp32 FMA peak measured in the same run.
 *
 *   bench_dense [--model DIR] [--prompt N] [--decode N] [--repeats N] [--threads N] [--json]
 *
 * Without --model it writes the model once to build/bench-models/qwen3.5-0.8b-bf16 (1.6 GB) and
 * reuses it. Reports medians over --repeats. Decode is bandwidth-bound: its ratio is the weight
 * bytes read per token / time vs the measured DRAM bandwidth. Prefill is compute-bound: its
 * ratio is 2 x parameters FLOPs per token / time vs the fp32 FMA peak (the reference kernels
 * compute in fp32). Also reports the executor's own overhead per node (planning + dispatch).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "base/rng.h"
#include "exec/exec.h"
#include "runtime/dense_session.h"
#include "models/model.h"
#include "models/tiny.h"
#include "roofline.h"

static const char *arg_value(int argc, char **argv, const char *name, const char *def) {
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], name) == 0) return argv[i + 1];
  return def;
}

static int arg_flag(int argc, char **argv, const char *name) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], name) == 0) return 1;
  return 0;
}

int main(int argc, char **argv) {
  const char *model_dir = arg_value(argc, argv, "--model", NULL);
  int prompt = atoi(arg_value(argc, argv, "--prompt", "512"));
  int decode = atoi(arg_value(argc, argv, "--decode", "16"));
  int repeats = atoi(arg_value(argc, argv, "--repeats", "3"));
  int threads = atoi(arg_value(argc, argv, "--threads", "0"));
  int json = arg_flag(argc, argv, "--json");
  if (prompt < 1 || decode < 1 || repeats < 1 || repeats > 15) {
    fprintf(stderr, "bench_dense: bad arguments\n");
    return 2;
  }
  diag d;
  diag_clear(&d);
  char dir[1024];
  if (!model_dir) {
    snprintf(dir, sizeof dir, "build/bench-models/qwen3.5-0.8b-bf16");
    char cfg[1100];
    snprintf(cfg, sizeof cfg, "%s/model.safetensors", dir);
    if (!path_exists(cfg)) {
      fprintf(stderr, "bench_dense: writing a random Qwen3.5-0.8B-shaped bf16 model to %s ...\n",
              dir);
      tiny_params p = tiny_params_default();
      p.dtype = PH_DTYPE_BF16;
      if (tiny_apply_preset(&p, "qwen3.5-0.8b", &d) != PH_OK || tiny_write(dir, &p, &d) != PH_OK) {
        fprintf(stderr, "bench_dense: %s: %s\n", ph_status_name(d.status), d.msg);
        return 1;
      }
    }
    model_dir = dir;
  }

  fprintf(stderr, "bench_dense: measuring this machine's limits ...\n");
  int n_threads = threads > 0 ? threads : 2;
  double bw = roofline_bandwidth(n_threads), fma = roofline_fma(n_threads);

  ph_model *m = NULL;
  ph_status s = ph_model_open(model_dir, NULL, &m);
  if (s != PH_OK) {
    fprintf(stderr, "bench_dense: %s: %s\n", ph_status_name(s), ph_model_error(m));
    ph_model_free(m);
    return 1;
  }
  ph_model_info info;
  ph_model_get_info(m, &info);
  dense_session *sess = NULL;
  double t0 = roofline_now();
  s = dense_session_create(m, prompt + decode + 8, threads, &sess, &d);
  double build_s = roofline_now() - t0;
  if (s != PH_OK) {
    fprintf(stderr, "bench_dense: %s: %s\n", ph_status_name(s), d.msg);
    ph_model_free(m);
    return 1;
  }
  int64_t V = dense_session_vocab(sess);
  int64_t *ids = malloc((size_t)(prompt + decode) * sizeof *ids);
  float *logits = malloc((size_t)prompt * (size_t)V * sizeof(float));
  rng r = rng_seed(42);
  for (int i = 0; i < prompt + decode; i++) ids[i] = (int64_t)rng_below(&r, (uint64_t)V);

  double pre[15], dec[15], ttft[15], overhead_ns = 0;
  int nodes = 0;
  for (int rep = 0; rep < repeats; rep++) {
    dense_session_reset(sess);
    double a = roofline_now();
    s = dense_session_step(sess, ids, prompt, logits, &d);
    double b = roofline_now();
    for (int i = 0; s == PH_OK && i < decode; i++)
      s = dense_session_step(sess, ids + prompt + i, 1, logits, &d);
    double c = roofline_now();
    if (s != PH_OK) {
      fprintf(stderr, "bench_dense: %s: %s\n", ph_status_name(s), d.msg);
      return 1;
    }
    pre[rep] = prompt / (b - a);
    ttft[rep] = b - a;
    dec[rep] = decode / (c - b);
    exec_stats st = exec_last_stats(dense_session_executor(sess));
    overhead_ns = st.plan_ns + st.dispatch_ns;
    nodes = st.n_nodes;
  }
  double prefill = roofline_median(pre, repeats), decode_tps = roofline_median(dec, repeats);
  double first = roofline_median(ttft, repeats);
  /* decode reads every weight once per token (the tied embedding as the LM head included) */
  double bytes_per_token = (double)info.weight_bytes;
  double flops_per_token = 2.0 * (double)info.parameters;
  double decode_gbs = decode_tps * bytes_per_token / 1e9;
  double prefill_gflops = prefill * flops_per_token / 1e9;
  if (json) {
    printf("{\"model\": \"%s\", \"parameters\": %lld, \"weight_bytes\": %lld, \"threads\": %d,\n"
           " \"bandwidth_gbs\": %.1f, \"fma_gflops\": %.1f,\n"
           " \"prefill_tokens\": %d, \"prefill_tok_s\": %.2f, \"prefill_gflops\": %.1f, "
           "\"prefill_vs_fma\": %.4f,\n"
           " \"time_to_first_token_s\": %.3f,\n"
           " \"decode_tok_s\": %.3f, \"decode_gbs\": %.2f, \"decode_vs_bandwidth\": %.4f,\n"
           " \"executor_overhead_us_per_step\": %.1f, \"nodes\": %d, \"graph_build_s\": %.2f}\n",
           model_dir, (long long)info.parameters, (long long)info.weight_bytes, n_threads, bw, fma,
           prompt, prefill, prefill_gflops, prefill_gflops / fma, first, decode_tps, decode_gbs,
           decode_gbs / bw, overhead_ns / 1e3, nodes, build_s);
  } else {
    printf("model           %s (%lld parameters, %.2f GB as stored)\n", model_dir,
           (long long)info.parameters, (double)info.weight_bytes / 1e9);
    printf(
        "machine         %d threads: DRAM read %.1f GB/s, fp32 FMA %.1f GFLOP/s (measured now)\n",
        n_threads, bw, fma);
    printf(
        "prefill         %d tokens: %.2f tok/s = %.1f GFLOP/s = %.3f of FMA peak (TTFT %.2f s)\n",
        prompt, prefill, prefill_gflops, prefill_gflops / fma, first);
    printf("decode          %.3f tok/s = %.2f GB/s of weights = %.3f of bandwidth\n", decode_tps,
           decode_gbs, decode_gbs / bw);
    printf("executor        %.1f us planning + dispatch for %d nodes in the last decode step "
           "(%.2f us/node); graph build + prepare %.2f s\n",
           overhead_ns / 1e3, nodes, nodes ? overhead_ns / 1e3 / nodes : 0.0, build_s);
    printf("(medians of %d repeats)\n", repeats);
  }
  free(ids);
  free(logits);
  dense_session_free(sess);
  ph_model_free(m);
  return 0;
}
