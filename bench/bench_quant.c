/* bench_quant — the MatMulNBits weight quantizer (tensor/quant.h), each variant this CPU runs, in
 * ns per weight on one thread, over a bf16 weight of the shape of Qwen3.5-0.8B's MLP projection
 * ([3584, 1024]) filled with random values: int8 and int4, symmetric and asymmetric, block 32.
 * The best of --repeats runs (the VM is shared). Correctness is test_quant's: this only times.
 *
 *   bench_quant [--repeats N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/rng.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"
#include "tensor/quant_impl.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  int repeats = 5;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--repeats") && i + 1 < argc) {
      repeats = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: bench_quant [--repeats N]\n");
      return 2;
    }
  }
  if (repeats < 1) repeats = 1;
  const int64_t n = 3584, k = 1024;
  uint16_t *w = malloc((size_t)(n * k) * 2);
  uint8_t *b = malloc((size_t)(n * k)), *zp = malloc((size_t)(n * k / 16));
  float *s = malloc((size_t)(n * k / 16) * sizeof(float));
  if (!w || !b || !zp || !s) return 1;
  rng g = rng_seed(1);
  for (int64_t i = 0; i < n * k; i++) w[i] = f32_to_bf16(rng_range(&g, -0.05f, 0.05f));
  printf("%-8s %-5s %-5s %12s\n", "variant", "bits", "zp", "ns/weight");
  for (int v = QUANT_SCALAR; v < QUANT_N_VARIANTS; v++) {
    if (!quant_variant_available((quant_variant)v)) continue;
    for (int bits = 8; bits >= 4; bits -= 4)
      for (int sym = 1; sym >= 0; sym--) {
        const quant_params p = {bits, 32, sym, PH_DTYPE_BF16};
        double best = 1e30;
        for (int r = 0; r < repeats; r++) {
          diag d;
          double t0 = now_s();
          if (quant_quantize_with((quant_variant)v, &p, w, PH_DTYPE_BF16, n, k, b, s, zp, "w",
                                  &d) != PH_OK) {
            fprintf(stderr, "quantize: %s\n", d.msg);
            return 1;
          }
          double t = now_s() - t0;
          if (t < best) best = t;
        }
        printf("%-8s %-5d %-5s %12.2f\n",
               v == QUANT_SCALAR ? "scalar"
               : v == QUANT_AVX2 ? "avx2"
                                 : "avx512",
               bits, sym ? "sym" : "asym", 1e9 * best / (double)(n * k));
      }
  }
  free(w);
  free(b);
  free(zp);
  free(s);
  return 0;
}
