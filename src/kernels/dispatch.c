/* dispatch — the table of kernel variants and the once-per-process choice (kernels/dispatch.h). */
#include "kernels/dispatch.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/log.h"

#if WT_X86
#define GD_DECODE_AVX2   gated_delta_decode_f32_avx2
#define GD_DECODE_AVX512 gated_delta_decode_f32_avx512
#define REPLAY_AVX2      state_replay_recurrent_avx2
#define GD_CHUNK_AVX512  gated_delta_chunk_avx512
#define ACT_AVX2         (&act_avx2_kernels)
#define ACT_AVX512       (&act_avx512_kernels)
#else
#define GD_DECODE_AVX2   NULL
#define GD_DECODE_AVX512 NULL
#define REPLAY_AVX2      NULL
#define GD_CHUNK_AVX512  NULL
#define ACT_AVX2         (&act_scalar_kernels)
#define ACT_AVX512       (&act_scalar_kernels)
#endif

/* Every kernel variant, registered once. avx512 has no replay of its own and runs the AVX2 one
 * (bit-identical to the reference either way); its gated-delta decode is bit-identical to the
 * reference too; its gated-delta chunk is the blocked one (another summation order: within
 * test_kernels' derived bound of the reference); the activations of every row give the scalar
 * bits. */
static const kernel_set KERNEL_SETS[KERNEL_N_VARIANTS] = {
    [KERNEL_SCALAR] = {"scalar", &matmul_wt_scalar_kernels, NULL, NULL, NULL, &act_scalar_kernels},
    [KERNEL_AVX2] = {"avx2", &matmul_wt_avx2_kernels, GD_DECODE_AVX2, REPLAY_AVX2, NULL, ACT_AVX2},
    [KERNEL_AVX512] = {"avx512", &matmul_wt_avx512_kernels, GD_DECODE_AVX512, REPLAY_AVX2,
                       GD_CHUNK_AVX512, ACT_AVX512},
};

const char *kernel_variant_name(kernel_variant v) {
  return (unsigned)v < KERNEL_N_VARIANTS ? KERNEL_SETS[v].name : "?";
}

const kernel_set *kernel_set_of(kernel_variant v) {
  return &KERNEL_SETS[(unsigned)v < KERNEL_N_VARIANTS ? v : KERNEL_SCALAR];
}

int kernel_variant_available(kernel_variant v) {
  if (v == KERNEL_SCALAR) return 1;
  if (!WT_X86 || (unsigned)v >= KERNEL_N_VARIANTS) return 0;
  const ph_cpu_features *f = cpu_features();
  int avx2 = f->avx2 && f->fma && f->f16c;
  if (v == KERNEL_AVX2) return avx2;
  return avx2 && f->avx512f && f->avx512bw && f->avx512vl;
}

/* The best available variant not above want. */
static kernel_variant best_up_to(kernel_variant want) {
  int v = (int)want;
  while (v > KERNEL_SCALAR && !kernel_variant_available((kernel_variant)v)) v--;
  return (kernel_variant)v;
}

const wt_bf16_kernel_fn *kernel_matmul_wt_bf16(kernel_variant v) {
  if (v == KERNEL_AVX512 && kernel_variant_available(v) && cpu_features()->avx512_bf16 &&
      matmul_wt_avx512bf16_kernels.kb[1])
    return matmul_wt_avx512bf16_kernels.kb;
  const matmul_wt_kernels *ks = kernel_set_of(v)->matmul_wt;
  return ks->kb[1] ? ks->kb : matmul_wt_scalar_kernels.kb;
}

static pthread_once_t choice_once = PTHREAD_ONCE_INIT;
static kernel_variant choice;
static _Atomic int forced = -1; /* kernel_force_variant's choice, -1 while none */

/* Reads PH_KERNELS once (see dispatch.h). */
static void choose(void) {
  const char *env = getenv("PH_KERNELS");
  kernel_variant want = KERNEL_AVX512;
  if (env && *env && strcmp(env, "auto") != 0) {
    int known = 0;
    for (int v = 0; v < KERNEL_N_VARIANTS; v++)
      if (strcmp(env, KERNEL_SETS[v].name) == 0) {
        want = (kernel_variant)v;
        known = 1;
      }
    if (!known)
      LOG_WARN("PH_KERNELS=%s is not one of scalar, avx2, avx512, auto; choosing from the CPU",
               env);
  }
  choice = best_up_to(want);
  if (env && choice != want && strcmp(env, KERNEL_SETS[want].name) == 0)
    LOG_WARN("PH_KERNELS=%s: this CPU cannot run it; the kernels use %s", env,
             KERNEL_SETS[choice].name);
}

kernel_variant kernel_variant_active(void) {
  int f = atomic_load(&forced);
  if (f >= 0) return (kernel_variant)f;
  pthread_once(&choice_once, choose);
  return choice;
}

ph_status kernel_force_variant(kernel_variant v, diag *d) {
  RETURN_ERROR_IF(!kernel_variant_available(v), d, PH_ERR_UNSUPPORTED,
                  "kernels: the %s variant cannot run on this CPU or build",
                  kernel_variant_name(v));
  atomic_store(&forced, (int)v);
  return PH_OK;
}
