/* engine_steps — what `pagedhybrid bench` (tools/cmd_bench.c, tools/bench_prefix.c) and
 * bench/bench_threads.c share when they drive the engine: the benchmark prompts, the test for a
 * steady decode step and the median every figure is reported as.
 * Header-only, over the public API (pagedhybrid.h: ph_step_info). */
#ifndef PH_BENCH_ENGINE_STEPS_H
#define PH_BENCH_ENGINE_STEPS_H

#include <stdint.h>
#include <stdlib.h>

#include "pagedhybrid.h"

/* A fixed hash of (request, position) in [0, vocab): the same prompts in every run, and no two
 * requests (or repeats, given distinct request numbers) sharing one. */
static inline int64_t bench_prompt_token(uint64_t request, uint64_t pos, int64_t vocab) {
  uint64_t h = (request + 1) * 0x9E3779B97F4A7C15ull ^ (pos + 1) * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 29;
  return (int64_t)(h % (uint64_t)vocab);
}

/* A step is a steady decode step of a batch of B when it ran B sequences of one token each,
 * sampled B tokens and preempted nothing. */
static inline int bench_steady_step(const ph_step_info *si, int64_t B) {
  return si->batch_size == B && si->n_tokens == B && si->n_generated == B && si->n_preempted == 0;
}

static inline int bench_cmp_double(const void *x, const void *y) {
  const double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

/* The median of v[0..n) (sorted in place); 0 when n is 0. */
static inline double bench_median(double *v, int64_t n) {
  if (n <= 0) return 0.0;
  qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif /* PH_BENCH_ENGINE_STEPS_H */
