/* bench_threads — what one parallel-for costs: our pool (src/base/pool.c) against OpenMP.
 *
 *   ./build/release/bench_threads [repeats]
 *
 * A decode step runs a few hundred small parallel loops, so the fixed cost of starting and
 * joining one loop matters as much as the kernels. Three measurements per implementation:
 *   dispatch  back-to-back loops with an empty task or a tiny one (one cache line of FMAs per
 *             task), n_tasks = threads and 64; ns per loop, median over repeats
 *   wake      one loop after 2 ms idle (workers have gone to sleep, or are still spinning)
 *   idle cpu  CPU time the process burns during a 20 ms idle gap after a loop
 * The OpenMP side is built only when CMake found OpenMP (PH_BENCH_OPENMP); it uses
 * `parallel for schedule(static)`, the same static split the pool uses. The machine is a shared
 * VM: read medians, and rerun before believing a difference under ~20 %.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/pool.h"

#if defined(PH_BENCH_OPENMP) && PH_BENCH_OPENMP
#include <omp.h>
#define HAVE_OPENMP 1
#else
#define HAVE_OPENMP 0
#endif

#define MAX_TASKS   64
#define LINE_FLOATS 16 /* one 64-byte line per task: tasks never share a line */

static _Alignas(64) float work_data[MAX_TASKS * LINE_FLOATS];

static void empty_task(void *ctx, size_t task, int thread) {
  (void)ctx;
  (void)task;
  (void)thread;
}

static void tiny_task(void *ctx, size_t task, int thread) {
  (void)ctx;
  (void)thread;
  float *x = work_data + task * LINE_FLOATS;
  for (int k = 0; k < 8; k++)
    for (int i = 0; i < LINE_FLOATS; i++) x[i] = x[i] * 0.999f + 0.001f;
}

typedef struct impl {
  const char *name;
  int threads;
  pool *pool; /* NULL for OpenMP */
} impl;

#if HAVE_OPENMP
/* Read through a volatile so the compiler cannot inline the task into the OpenMP loop, which
 * the pool cannot do either: both sides pay one indirect call per task. */
static pool_task_fn volatile omp_task_fn;
#endif

static void dispatch(const impl *m, size_t n_tasks, pool_task_fn fn) {
  if (m->pool) {
    pool_run(m->pool, n_tasks, fn, NULL);
    return;
  }
#if HAVE_OPENMP
  omp_task_fn = fn;
  long n = (long)n_tasks;
#pragma omp parallel for schedule(static) num_threads(m->threads)
  for (long i = 0; i < n; i++) omp_task_fn(NULL, (size_t)i, omp_get_thread_num());
#endif
}

static double now_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void sleep_ns(long ns) {
  struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
  nanosleep(&ts, NULL);
}

typedef struct result {
  const char *impl;
  const char *what;
  int threads;
  int tasks;
  double median, min;
  const char *unit;
} result;

#define MAX_RESULTS 64
static result results[MAX_RESULTS];
static int n_results;

static void record(const impl *m, const char *what, int tasks, double *samples, int n,
                   const char *unit) {
  double med = median(samples, n);
  if (n_results < MAX_RESULTS)
    results[n_results++] = (result){m->name, what, m->threads, tasks, med, samples[0], unit};
  printf("measure impl=%s threads=%d what=%s tasks=%d median=%.1f min=%.1f unit=%s\n", m->name,
         m->threads, what, tasks, med, samples[0], unit);
  fflush(stdout);
}

/* ns per loop for back-to-back loops: `repeats` timings of `iters` loops each. */
static void bench_dispatch(const impl *m, int tasks, pool_task_fn fn, const char *what,
                           int repeats) {
  const int iters = 20000;
  double samples[101];
  for (int i = 0; i < iters; i++) dispatch(m, (size_t)tasks, fn); /* warm up */
  for (int r = 0; r < repeats; r++) {
    double t0 = now_ns(CLOCK_MONOTONIC);
    for (int i = 0; i < iters; i++) dispatch(m, (size_t)tasks, fn);
    samples[r] = (now_ns(CLOCK_MONOTONIC) - t0) / iters;
  }
  record(m, what, tasks, samples, repeats, "ns/loop");
}

/* Latency of one loop after the workers have been idle for 2 ms. */
static void bench_wake(const impl *m, int repeats) {
  double samples[401];
  int n = repeats * 4 < 400 ? repeats * 4 : 400;
  for (int r = 0; r < n; r++) {
    dispatch(m, (size_t)m->threads, empty_task);
    sleep_ns(2 * 1000 * 1000);
    double t0 = now_ns(CLOCK_MONOTONIC);
    dispatch(m, (size_t)m->threads, empty_task);
    samples[r] = now_ns(CLOCK_MONOTONIC) - t0;
  }
  record(m, "wake_after_2ms", m->threads, samples, n, "ns/loop");
}

/* Process CPU time spent while the caller sleeps 20 ms after a loop: the cost of spinning. */
static void bench_idle_cpu(const impl *m, int repeats) {
  double samples[101];
  for (int r = 0; r < repeats; r++) {
    dispatch(m, (size_t)m->threads, empty_task);
    double c0 = now_ns(CLOCK_PROCESS_CPUTIME_ID);
    sleep_ns(20 * 1000 * 1000);
    samples[r] = (now_ns(CLOCK_PROCESS_CPUTIME_ID) - c0) / 1000.0;
  }
  record(m, "idle_cpu_20ms", m->threads, samples, repeats, "us_cpu");
}

static void bench_impl(const impl *m, int repeats) {
  int counts[2] = {m->threads, MAX_TASKS};
  for (int c = 0; c < 2; c++) {
    if (c == 1 && counts[1] == counts[0]) break;
    bench_dispatch(m, counts[c], empty_task, "dispatch_empty", repeats);
    bench_dispatch(m, counts[c], tiny_task, "dispatch_tiny", repeats);
  }
  if (m->threads > 1) {
    bench_wake(m, repeats);
    bench_idle_cpu(m, repeats);
  }
}

int main(int argc, char **argv) {
  int repeats = argc > 1 ? atoi(argv[1]) : 15;
  if (repeats < 1) repeats = 1;
  if (repeats > 100) repeats = 100;
  for (int i = 0; i < MAX_TASKS * LINE_FLOATS; i++) work_data[i] = (float)i;

  printf("bench_threads: %d online CPUs, %d repeats, OpenMP %s\n", cpu_count_online(), repeats,
         HAVE_OPENMP ? "built in" : "not built (CMake found no OpenMP)");
  for (int threads = 1; threads <= 2; threads++) {
    impl m = {"pool", threads, NULL};
    diag d;
    diag_clear(&d);
    if (pool_create(threads, &m.pool, &d) != PH_OK) {
      fprintf(stderr, "bench_threads: %s\n", d.msg);
      return 1;
    }
    bench_impl(&m, repeats);
    pool_free(m.pool);
#if HAVE_OPENMP
    impl o = {"openmp", threads, NULL};
    bench_impl(&o, repeats);
#endif
  }

  printf("\n%-7s %-7s %-15s %5s %12s %12s  %s\n", "impl", "threads", "what", "tasks", "median",
         "min", "unit");
  for (int i = 0; i < n_results; i++) {
    const result *r = &results[i];
    printf("%-7s %-7d %-15s %5d %12.1f %12.1f  %s\n", r->impl, r->threads, r->what, r->tasks,
           r->median, r->min, r->unit);
  }
  return 0;
}
