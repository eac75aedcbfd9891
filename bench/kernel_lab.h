/* kernel_lab — the scaffolding of the one-op kernel labs (bench_matmul, bench_moe): their
 * command line, the kernel variants to time, the pool, this machine's limits measured in the
 * same run (roofline.h), and the timing loop.
 *
 *   bench_x [--threads N] [--repeats N] [--variant scalar|avx2|avx512] [--case NAME]
 *
 *   kernel_lab lab;
 *   int rc = kernel_lab_init(&lab, "bench_x", argc, argv);   // 0: go on, else main's exit code
 *   if (rc) return rc;
 *   for each variant lab.vars[0 .. lab.nv): kernel_force_variant, then
 *     double sec = kernel_lab_time(run_fn, &setup, n_rot, lab.repeats);
 *   pool_free(lab.pool);
 *
 * Header-only, for bench/ programs. Not part of the library.
 */
#ifndef PH_BENCH_KERNEL_LAB_H
#define PH_BENCH_KERNEL_LAB_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool.h"
#include "kernels/dispatch.h"
#include "ops/op.h"
#include "roofline.h"

typedef struct kernel_lab {
  int threads, repeats;                   /* --threads (1..16, default 2), --repeats (1..31, 7) */
  const char *only_case;                  /* --case, or NULL for every case */
  kernel_variant vars[KERNEL_N_VARIANTS]; /* the variants to time: available and --variant's */
  int nv;
  pool *pool;     /* threads workers */
  double bw, fma; /* DRAM read GB/s and fp32 FMA GFLOP/s, measured now */
} kernel_lab;

static inline const char *kernel_lab_arg(int argc, char **argv, const char *name, const char *def) {
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], name) == 0) return argv[i + 1];
  return def;
}

/* Parses the command line (2 on a usage error), lists the variants (an unavailable one is
 * printed as such), creates the pool (1 when it cannot), measures and prints the machine's
 * limits. Returns 0 to go on, else main's exit code. */
static inline int kernel_lab_init(kernel_lab *l, const char *prog, int argc, char **argv) {
  memset(l, 0, sizeof *l);
  l->threads = atoi(kernel_lab_arg(argc, argv, "--threads", "2"));
  l->repeats = atoi(kernel_lab_arg(argc, argv, "--repeats", "7"));
  const char *only_variant = kernel_lab_arg(argc, argv, "--variant", NULL);
  l->only_case = kernel_lab_arg(argc, argv, "--case", NULL);
  if (l->threads < 1 || l->threads > 16 || l->repeats < 1 || l->repeats > 31) {
    fprintf(stderr,
            "usage: %s [--threads 1..16] [--repeats 1..31] [--variant scalar|avx2|avx512] "
            "[--case NAME]\n",
            prog);
    return 2;
  }
  for (int v = 0; v < KERNEL_N_VARIANTS; v++) {
    const char *name = kernel_variant_name((kernel_variant)v);
    if (only_variant && strcmp(only_variant, name) != 0) continue;
    if (kernel_variant_available((kernel_variant)v))
      l->vars[l->nv++] = (kernel_variant)v;
    else
      printf("%-16s %-7s not available on this CPU\n", "", name);
  }
  diag d;
  if (pool_create(l->threads, &l->pool, &d) != PH_OK) {
    fprintf(stderr, "%s: %s\n", prog, d.msg);
    return 1;
  }
  fprintf(stderr, "%s: measuring this machine's limits ...\n", prog);
  l->bw = roofline_bandwidth(l->threads);
  l->fma = roofline_fma(l->threads);
  printf("machine   %d threads: DRAM read %.1f GB/s, fp32 FMA %.1f GFLOP/s (measured now; "
         "the VM is shared: medians of %d)\n",
         l->threads, l->bw, l->fma, l->repeats);
  return 0;
}

/* The node of one registered op as the executor holds it (name "bench", op resolved); NULL op
 * when the registry has none. */
static inline gnode kernel_lab_node(const char *domain, const char *op_type, int n_inputs,
                                    gattr *attrs, int n_attrs) {
  gnode n = {.name = "bench",
             .op_type = op_type,
             .domain = domain,
             .n_inputs = n_inputs,
             .n_outputs = 1,
             .attrs = attrs,
             .n_attrs = n_attrs,
             .op = op_lookup(domain, op_type)};
  return n;
}

/* Median seconds per call of run(s, i) over `repeats` samples (<= 31); each sample runs at least
 * 0.05 s and passes i over 0 .. n_rot - 1 (copies of the data a call reads) at least once, after
 * one warm-up pass that also sizes a sample. */
static inline double kernel_lab_time(int (*run)(void *s, int i), void *s, int n_rot, int repeats) {
  double t[31];
  int calls = n_rot;
  double t0 = roofline_now();
  for (int i = 0; i < calls; i++) run(s, i);
  double one = (roofline_now() - t0) / calls;
  while (calls * one < 0.05) calls *= 2;
  for (int rep = 0; rep < repeats; rep++) {
    double a = roofline_now();
    for (int i = 0; i < calls; i++) run(s, i);
    t[rep] = (roofline_now() - a) / calls;
  }
  return roofline_median(t, repeats);
}

#endif /* PH_BENCH_KERNEL_LAB_H */
