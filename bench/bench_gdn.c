/* bench_gdn — GatedDeltaNet's chunked prefill kernel (kernels/gated_delta.h: gated_delta_chunk
 * and the dispatch table's gated_delta_chunk variants) at the Qwen3.5-0.8B head geometry, one
 * thread, next to this machine's f32 FMA peak of one thread measured in the same run
 * (roofline.h).
 *
 *   bench_gdn [--repeats N] [--L N]
 *
 * Geometry: Dk = Dv = 128, chunk C = 64, G = 1, per-head decay, gated delta rule (what
 * GatedDeltaNet runs on the 0.8B model: 16 value heads, 18 linear layers). One timed unit is one
 * chunk of L tokens (default 64) for each of the 16 heads of one layer, each head with its own
 * workspace and state, as one (sequence, head) task of the op; the rows are reloaded before each
 * chunk (the kernel consumes them), and that reload is timed alone and subtracted. Reported per
 * chunk: microseconds (median of --repeats), GFLOP/s of the chunk's useful flops (below) and the
 * ratio to the FMA peak, for the reference and every variant whose table row has its own chunk
 * kernel; and the 512-token prefill's GDN time this implies (8 chunks x 16 heads x 18 layers, one
 * thread). Useful flops of one chunk (2 per multiply-add): the pairwise products over the lower
 * triangle (A: Dk L(L-1), QK: Dk L(L+1)), the right-hand side (2 L Dk Dv), the solve
 * (Dv L(L-1)), the outputs (2 L Dk Dv + Dv L(L+1)) and the end state (2 Dk Dv L). Timing only:
 * the arithmetic is tested in test_kernels.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_lab.h"
#include "kernels/dispatch.h"
#include "kernels/gated_delta.h"
#include "roofline.h"

#define DK    128
#define DV    128
#define CHUNK 64
#define HEADS 16

typedef struct head {
  gated_delta_ws ws;
  char *base;
  float *k, *q, *v, *beta, *g; /* the chunk's rows, reloaded before each call */
} head;

static uint64_t bench_rng = 0x9e3779b97f4a7c15u;
static float frand(float lo, float hi) {
  bench_rng ^= bench_rng << 13;
  bench_rng ^= bench_rng >> 7;
  bench_rng ^= bench_rng << 17;
  return lo + (hi - lo) * (float)(bench_rng >> 40) / (float)(1u << 24);
}

static void sink_store(void *ctx, int64_t jq, int64_t t, const float *o) {
  (void)jq;
  (void)t;
  float *acc = ctx;
  *acc += o[0];
}

static void load_rows(const head *h, int64_t L) {
  memcpy(h->ws.K, h->k, (size_t)(L * DK) * sizeof(float));
  memcpy(h->ws.Q, h->q, (size_t)(L * DK) * sizeof(float));
  memcpy(h->ws.V, h->v, (size_t)(L * DV) * sizeof(float));
  memcpy(h->ws.beta, h->beta, (size_t)L * sizeof(float));
  memcpy(h->ws.gl, h->g, (size_t)L * sizeof(float));
}

/* Seconds for one chunk on each head (fn NULL: the reload alone). */
static double time_layer(head *hs, const gated_delta_shape *sh, int64_t L, gated_delta_chunk_fn fn,
                         float *sink) {
  double t0 = roofline_now();
  for (int h = 0; h < HEADS; h++) {
    load_rows(&hs[h], L);
    if (fn) fn(sh, &hs[h].ws, L, sink_store, sink);
  }
  return roofline_now() - t0;
}

int main(int argc, char **argv) {
  int repeats = atoi(kernel_lab_arg(argc, argv, "--repeats", "15"));
  int64_t L = atoll(kernel_lab_arg(argc, argv, "--L", "64"));
  if (repeats < 1 || L < 1 || L > CHUNK) {
    fprintf(stderr, "usage: bench_gdn [--repeats N >= 1] [--L 1..%d]\n", CHUNK);
    return 2;
  }
  gated_delta_shape sh = {DK, DV, 1, CHUNK, 0, 1, 1, 1.0f / sqrtf((float)DK)};
  head hs[HEADS];
  size_t bytes = gated_delta_ws_layout(&sh, 8, NULL, NULL);
  for (int h = 0; h < HEADS; h++) {
    hs[h].base = aligned_alloc(64, (bytes + 63) / 64 * 64);
    gated_delta_ws_layout(&sh, 8, hs[h].base, &hs[h].ws);
    hs[h].k = malloc((size_t)(L * DK) * sizeof(float));
    hs[h].q = malloc((size_t)(L * DK) * sizeof(float));
    hs[h].v = malloc((size_t)(L * DV) * sizeof(float));
    hs[h].beta = malloc((size_t)L * sizeof(float));
    hs[h].g = malloc((size_t)L * sizeof(float));
    for (int64_t t = 0; t < L; t++) { /* unit keys and queries, as after the op's l2 norm */
      double nk = 0, nq = 0;
      for (int r = 0; r < DK; r++) {
        hs[h].k[t * DK + r] = frand(-1, 1);
        hs[h].q[t * DK + r] = frand(-1, 1);
        nk += hs[h].k[t * DK + r] * hs[h].k[t * DK + r];
        nq += hs[h].q[t * DK + r] * hs[h].q[t * DK + r];
      }
      for (int r = 0; r < DK; r++) {
        hs[h].k[t * DK + r] /= (float)sqrt(nk);
        hs[h].q[t * DK + r] /= (float)sqrt(nq);
      }
      for (int c = 0; c < DV; c++) hs[h].v[t * DV + c] = frand(-1, 1);
      hs[h].beta[t] = frand(0.1f, 0.9f);
      hs[h].g[t] = frand(-0.5f, 0.0f);
    }
    for (int i = 0; i < DK * DV; i++) hs[h].ws.S[i] = frand(-0.1f, 0.1f);
  }
  double flops = (double)DK * (double)(L * (L - 1)) + (double)DK * (double)(L * (L + 1)) +
                 2.0 * (double)(L * DK * DV) + (double)DV * (double)(L * (L - 1)) +
                 2.0 * (double)(L * DK * DV) + (double)DV * (double)(L * (L + 1)) +
                 2.0 * (double)(DK * DV * L);
  double peak = roofline_fma(1);
  printf("machine   1 thread: fp32 FMA %.1f GFLOP/s (measured in this run)\n", peak);
  printf("shape     Dk %d, Dv %d, C %d, L %lld, G 1, per-head decay, gated delta; %d heads; "
         "%.2f MFLOP a chunk\n",
         DK, DV, CHUNK, (long long)L, HEADS, flops * 1e-6);
  float sink = 0.0f;
  double *tv = malloc((size_t)repeats * sizeof(double));
  for (int r = 0; r < repeats; r++) tv[r] = time_layer(hs, &sh, L, NULL, &sink);
  double t_load = roofline_median(tv, repeats);
  printf("%-10s %12s %10s %10s %16s\n", "kernel", "us/chunk", "GFLOP/s", "of peak",
         "prefill 512 (s)");
  double ref_us = 0.0;
  for (int v = -1; v < KERNEL_N_VARIANTS; v++) {
    gated_delta_chunk_fn fn = gated_delta_chunk;
    const char *name = "reference";
    if (v >= 0) {
      if (!kernel_variant_available((kernel_variant)v)) continue;
      fn = kernel_set_of((kernel_variant)v)->gated_delta_chunk;
      if (!fn) continue; /* that variant runs the reference */
      name = kernel_variant_name((kernel_variant)v);
    }
    time_layer(hs, &sh, L, fn, &sink); /* warm */
    for (int r = 0; r < repeats; r++) tv[r] = time_layer(hs, &sh, L, fn, &sink);
    double us = (roofline_median(tv, repeats) - t_load) / HEADS * 1e6;
    double gf = flops / (us * 1e-6) * 1e-9;
    if (v < 0) ref_us = us;
    printf("%-10s %12.1f %10.2f %10.4f %16.3f", name, us, gf, gf / peak,
           us * 1e-6 * (512.0 / (double)L) * HEADS * 18);
    if (v >= 0) printf("   %.2fx the reference", ref_us / us);
    printf("\n");
  }
  printf("(medians of %d repeats of %d heads; reload %.1f us a chunk subtracted; sink %g)\n",
         repeats, HEADS, t_load / HEADS * 1e6, (double)sink);
  free(tv);
  for (int h = 0; h < HEADS; h++) {
    free(hs[h].base);
    free(hs[h].k);
    free(hs[h].q);
    free(hs[h].v);
    free(hs[h].beta);
    free(hs[h].g);
  }
  return 0;
}
