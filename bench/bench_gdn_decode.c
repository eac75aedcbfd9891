/* bench_gdn_decode — GatedDeltaNet's one-token (decode) step (kernels/gated_delta.h:
 * gated_delta_decode_ref and the dispatch table's gated_delta_decode variants) on one layer of a
 * decode batch at the Qwen3.5-0.8B geometry, one thread, next to this machine's DRAM read
 * bandwidth of one thread and an in-place scale of the same state bytes, both measured in the same
 * run (roofline.h).
 *
 *   bench_gdn_decode [--repeats N] [--batch B]
 *
 * Geometry: Dk = Dv = 128, 16 value heads, gated delta rule, the state updated in place (dst ==
 * src, as the engine's bound state slots are). One timed unit is one layer of a decode step: B
 * sequences x 16 heads, each head's 64 KiB V-major state read once and written once (B = 64:
 * 64 MiB each way, more than the last-level cache, as in the engine where 18 layers' states lie
 * between two visits of a head). Reported per unit: milliseconds (median of --repeats) and GB/s
 * of state moved (read + written), for the reference and every variant with its own decode
 * kernel, and for `scale` (x *= a in place over the same bytes: the floor a kernel reading and
 * writing the state once can reach). Timing only: the arithmetic is tested in test_kernels.
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
#define HEADS 16

static uint64_t bench_rng = 0x9e3779b97f4a7c15u;
static float frand(float lo, float hi) {
  bench_rng ^= bench_rng << 13;
  bench_rng ^= bench_rng >> 7;
  bench_rng ^= bench_rng << 17;
  return lo + (hi - lo) * (float)(bench_rng >> 40) / (float)(1u << 24);
}

typedef struct unit {
  float *state; /* [n_heads][DV][DK] */
  int64_t n_heads;
  float k[DK], q[DK], v[DV], o[DV];
  _Alignas(64) float tile[DK * 8];
} unit;

static void run_decode(unit *u, gated_delta_decode_fn fn) {
  for (int64_t h = 0; h < u->n_heads; h++) {
    float *s = u->state + h * DK * DV;
    gated_delta_dec p = {.src = s,
                         .dst = s,
                         .k = u->k,
                         .q = u->q,
                         .v = u->v,
                         .o = u->o,
                         .tile = u->tile,
                         /* a and beta keep the state bounded over many repeats */
                         .a = 0.999f,
                         .beta = 0.01f,
                         .scale = 0.088f,
                         .gated = 1,
                         .delta = 1,
                         .Dk = DK,
                         .Dv = DV};
    fn(&p);
  }
}

static void run_scale(unit *u) {
  size_t n = (size_t)(u->n_heads * DK * DV);
  float *s = u->state;
  for (size_t i = 0; i < n; i++) s[i] *= 0.999f;
}

static double time_unit(unit *u, gated_delta_decode_fn fn, int repeats) {
  double *t = malloc((size_t)repeats * sizeof *t);
  for (int r = 0; r < repeats + 1; r++) {
    double t0 = roofline_now();
    if (fn)
      run_decode(u, fn);
    else
      run_scale(u);
    if (r > 0) t[r - 1] = roofline_now() - t0; /* the first is a warm-up */
  }
  double m = roofline_median(t, repeats);
  free(t);
  return m;
}

int main(int argc, char **argv) {
  int repeats = atoi(kernel_lab_arg(argc, argv, "--repeats", "9"));
  int64_t batch = atoll(kernel_lab_arg(argc, argv, "--batch", "64"));
  if (repeats < 1 || batch < 1) {
    fprintf(stderr, "usage: bench_gdn_decode [--repeats N >= 1] [--batch B >= 1]\n");
    return 2;
  }
  unit u;
  u.n_heads = batch * HEADS;
  size_t bytes = (size_t)(u.n_heads * DK * DV) * sizeof(float);
  u.state = aligned_alloc(64, bytes);
  if (!u.state) {
    fprintf(stderr, "bench_gdn_decode: out of memory for %zu bytes\n", bytes);
    return 1;
  }
  for (size_t i = 0; i < bytes / sizeof(float); i++) u.state[i] = frand(-1.0f, 1.0f);
  float kn = 0;
  for (int i = 0; i < DK; i++) {
    u.k[i] = frand(-1.0f, 1.0f);
    kn += u.k[i] * u.k[i];
    u.q[i] = frand(-1.0f, 1.0f);
  }
  for (int i = 0; i < DK; i++) u.k[i] /= sqrtf(kn);
  for (int i = 0; i < DV; i++) u.v[i] = frand(-1.0f, 1.0f);

  double bw = roofline_bandwidth(1);
  double moved = 2.0 * (double)bytes; /* read + written */
  printf("GatedDeltaNet decode, one layer: %lld sequences x %d heads, Dk = Dv = %d, state %.1f MiB "
         "in place; one thread, DRAM read %.1f GB/s (measured now)\n",
         (long long)batch, HEADS, DK, (double)bytes / 1048576.0, bw);
  printf("%-10s %10s %10s %12s\n", "kernel", "ms", "GB/s", "of DRAM read");
  double ts = time_unit(&u, NULL, repeats);
  printf("%-10s %10.3f %10.2f %12.3f\n", "scale", ts * 1e3, moved / ts / 1e9,
         moved / ts / 1e9 / bw);
  double tr = time_unit(&u, gated_delta_decode_ref, repeats);
  printf("%-10s %10.3f %10.2f %12.3f\n", "reference", tr * 1e3, moved / tr / 1e9,
         moved / tr / 1e9 / bw);
  for (int v = 0; v < KERNEL_N_VARIANTS; v++) {
    const kernel_set *ks = kernel_set_of((kernel_variant)v);
    if (!ks || !ks->gated_delta_decode || !kernel_variant_available((kernel_variant)v)) continue;
    double tv = time_unit(&u, ks->gated_delta_decode, repeats);
    printf("%-10s %10.3f %10.2f %12.3f\n", kernel_variant_name((kernel_variant)v), tv * 1e3,
           moved / tv / 1e9, moved / tv / 1e9 / bw);
  }
  free(u.state);
  return 0;
}
