/* bench_threads — the thread pool (src/base/pool.c) under the engine's real workload, with and
 * without a competing busy process, and the cost of one parallel-for against OpenMP.
 *
 *   ./build/release/bench_threads [--repeats N] [--load N] [--only engine|dispatch] [--json]
 *                                 [--models DIR] [--target-ms MS] [--case NAME]
 *
 * engine    decode steps through the continuous-batching engine (src/engine/engine.h) on
 *           make-tiny checkpoints written once to --models (default build/bench-models):
 *             tiny b1      the default tiny geometry (hidden 64, 4 layers), batch 1
 *             q38tiny b1   the qwen3.8-tiny preset (hidden 128, 8 layers), batch 1
 *             q38tiny b64  the same, 64 sequences decoding together
 *           for threads = 1, 2 and the default (engine n_threads 0), each with no competing load
 *           and with --load busy processes (default 1) that this program forks, each spinning on
 *           a core, and kills at the end. One measurement is K steady decode steps (K chosen so
 *           that 1 thread takes about --target-ms), reported as wall time / K: the mean, so
 *           that a step stalled for a scheduler time slice counts as it does for a server. Every
 *           setting runs the same K steps from the same context; the settings alternate within a
 *           repeat, and the table gives the median over --repeats (default 5) and the spread.
 *           "default/best" is the default's median over the best setting's; above 1.20 the row
 *           is flagged (docs/threading.md states the bound).
 * dispatch  back-to-back loops with an empty task or a tiny one (one cache line of FMAs per
 *           task), n_tasks = threads and 64, ns per loop; one loop after 2 ms idle (workers have
 *           gone to sleep, or are still spinning); CPU time burnt during a 20 ms idle gap. The
 *           OpenMP side is built only when CMake found OpenMP (PH_BENCH_OPENMP) and uses
 *           `parallel for schedule(static)`.
 * The 1-minute load average is printed before and after: on a shared machine, rerun before
 * believing a difference under ~20 %.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "base/fmap.h"
#include "base/pool.h"
#include "engine/engine.h"
#include "engine_steps.h"
#include "models/tiny.h"

#if defined(PH_BENCH_OPENMP) && PH_BENCH_OPENMP
#include <omp.h>
#define HAVE_OPENMP 1
#else
#define HAVE_OPENMP 0
#endif

/* ---- common ---------------------------------------------------------------------------------- */

static double now_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Sorts v. */
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void sleep_ns(long ns) {
  struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* The 1-minute load average, or -1. */
static double loadavg_1min(void) {
  FILE *f = fopen("/proc/loadavg", "r");
  double x = -1.0;
  if (!f) return -1.0;
  if (fscanf(f, "%lf", &x) != 1) x = -1.0;
  fclose(f);
  return x;
}

/* ---- competing load -------------------------------------------------------------------------- */

#define MAX_LOAD 16

typedef struct load {
  pid_t pid[MAX_LOAD];
  int n;
} load;

/* Forks n children that spin until killed (and die with this process on Linux). */
static int load_start(load *l, int n) {
  l->n = 0;
  pid_t parent = getpid();
  fflush(stdout);
  fflush(stderr);
  for (int i = 0; i < n; i++) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
#if defined(__linux__)
      prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
      if (getppid() != parent) _exit(0);
      volatile unsigned long spin = 0;
      for (;;) spin++;
    }
    l->pid[l->n++] = pid;
  }
  sleep_ns(50 * 1000 * 1000); /* let the scheduler place them */
  return 0;
}

static void load_stop(load *l) {
  for (int i = 0; i < l->n; i++) kill(l->pid[i], SIGKILL);
  for (int i = 0; i < l->n; i++) waitpid(l->pid[i], NULL, 0);
  l->n = 0;
}

/* ---- engine decode ------------------------------------------------------------------------- */

#define DECODE_PROMPT 16
#define N_SETTINGS    3
#define MAX_REPEATS   31
#define MAX_STEPS     500
#define MIN_STEPS     10

static const int SETTING_THREADS[N_SETTINGS] = {1, 2, 0}; /* 0: the default */

typedef struct engine_case {
  const char *name, *preset;
  int batch;
} engine_case;

static const engine_case CASES[] = {
    {"tiny b1", "tiny", 1},
    {"q38tiny b1", "qwen3.8-tiny", 1},
    {"q38tiny b64", "qwen3.8-tiny", 64},
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

typedef struct engine_result {
  double ms[2][N_SETTINGS][MAX_REPEATS]; /* [load?][setting][repeat], ms per step */
  double med[2][N_SETTINGS], lo[2][N_SETTINGS], hi[2][N_SETTINGS];
  int steps;
  int ok;
} engine_result;

typedef struct bench_opts {
  int repeats, dispatch_repeats, load, json, engine, dispatch;
  double target_ms;
  const char *models, *only_case;
} bench_opts;

/* B requests decode together: after their prompts and one steady warm-up step, `steps` steps
 * are timed as one block. Returns seconds per step, or -1 with d set. */
static double decode_block(engine *e, int B, int steps, diag *d) {
  const int64_t V = engine_vocab(e);
  uint64_t ids[64];
  sampling_params sp = sampling_params_default();
  sp.max_new_tokens = steps + 8;
  sp.ignore_eos = 1;
  ph_status s = PH_OK;
  for (int b = 0; s == PH_OK && b < B; b++) {
    int64_t prompt[DECODE_PROMPT];
    for (int j = 0; j < DECODE_PROMPT; j++)
      prompt[j] = bench_prompt_token((uint64_t)b, (uint64_t)j, V);
    s = engine_add(e, prompt, DECODE_PROMPT, &sp, &ids[b], d);
  }
  ph_step_info si;
  memset(&si, 0, sizeof si);
  for (int k = 0; s == PH_OK && !bench_steady_step(&si, B); k++) {
    if (k == 1000) s = diag_set(d, PH_ERR_INTERNAL, "batch %d never reached a steady step", B);
    if (s == PH_OK) s = engine_step(e, &si, d);
  }
  double t0 = now_ns(CLOCK_MONOTONIC), t = -1.0;
  for (int k = 0; s == PH_OK && k < steps; k++) {
    s = engine_step(e, &si, d);
    if (s == PH_OK && !bench_steady_step(&si, B))
      s = diag_set(d, PH_ERR_INTERNAL, "batch %d: step %d was not a steady decode step", B, k);
  }
  if (s == PH_OK) t = (now_ns(CLOCK_MONOTONIC) - t0) * 1e-9 / steps;
  for (int b = 0; s == PH_OK && b < B; b++) s = engine_remove(e, ids[b], d);
  for (int k = 0; s == PH_OK && engine_busy(e); k++) {
    if (k == 1000) s = diag_set(d, PH_ERR_INTERNAL, "the engine did not go idle");
    if (s == PH_OK) s = engine_step(e, NULL, d);
  }
  for (int b = 0; s == PH_OK && b < B; b++) s = engine_release(e, ids[b], d);
  return s == PH_OK ? t : -1.0;
}

static ph_status ensure_model(const char *models, const char *preset, char *dir, size_t cap,
                              diag *d) {
  snprintf(dir, cap, "%s/%s-f32", models, preset);
  char cfg[1200];
  snprintf(cfg, sizeof cfg, "%s/model.safetensors", dir);
  if (path_exists(cfg)) return PH_OK;
  fprintf(stderr, "bench_threads: writing the make-tiny preset %s to %s\n", preset, dir);
  tiny_params p = tiny_params_default();
  FORWARD_IF_ERROR(tiny_apply_preset(&p, preset, d));
  return tiny_write(dir, &p, d);
}

static ph_status bench_engine_case(const bench_opts *o, const engine_case *c, engine_result *r,
                                   diag *d) {
  char dir[1100];
  FORWARD_IF_ERROR(ensure_model(o->models, c->preset, dir, sizeof dir, d));
  engine *e[N_SETTINGS] = {NULL, NULL, NULL};
  ph_status s = PH_OK;
  for (int k = 0; s == PH_OK && k < N_SETTINGS; k++) {
    ph_engine_params p = ph_engine_params_default();
    p.max_batch_size = c->batch;
    p.n_threads = SETTING_THREADS[k];
    p.num_blocks = 1 + c->batch * ((DECODE_PROMPT + MAX_STEPS + 16 + 15) / 16);
    s = engine_create(dir, &p, &e[k], d);
  }
  /* K from one calibration block with 1 thread and no load, after a warm-up block. */
  double t = s == PH_OK ? decode_block(e[0], c->batch, MIN_STEPS, d) : -1.0;
  if (t > 0) t = decode_block(e[0], c->batch, MIN_STEPS, d);
  if (t <= 0) s = d->status != PH_OK ? d->status : PH_ERR_INTERNAL;
  if (s == PH_OK) {
    double k = o->target_ms * 1e-3 / t;
    r->steps = k < MIN_STEPS ? MIN_STEPS : k > MAX_STEPS ? MAX_STEPS : (int)k;
  }
  for (int k = 1; s == PH_OK && k < N_SETTINGS; k++) /* warm-up of the others */
    if (decode_block(e[k], c->batch, MIN_STEPS, d) < 0) s = d->status;
  for (int with_load = 0; s == PH_OK && with_load < 2; with_load++) {
    if (with_load && o->load == 0) break;
    load l = {{0}, 0};
    if (with_load && load_start(&l, o->load) != 0) {
      load_stop(&l);
      s = diag_set(d, PH_ERR_INTERNAL, "cannot fork the competing load: %s", strerror(errno));
      break;
    }
    for (int rep = 0; s == PH_OK && rep < o->repeats; rep++)
      for (int i = 0; s == PH_OK && i < N_SETTINGS; i++) {
        int k = (i + rep) % N_SETTINGS; /* rotate the order: no setting always runs first */
        double x = decode_block(e[k], c->batch, r->steps, d);
        if (x < 0) s = d->status;
        r->ms[with_load][k][rep] = x * 1e3;
      }
    load_stop(&l);
    for (int k = 0; s == PH_OK && k < N_SETTINGS; k++) {
      double v[MAX_REPEATS];
      memcpy(v, r->ms[with_load][k], sizeof(double) * (size_t)o->repeats);
      r->med[with_load][k] = median(v, o->repeats);
      r->lo[with_load][k] = v[0];
      r->hi[with_load][k] = v[o->repeats - 1];
    }
  }
  for (int k = 0; k < N_SETTINGS; k++) engine_free(e[k]);
  r->ok = s == PH_OK;
  return s;
}

static int best_setting(const engine_result *r, int with_load) {
  int best = 0;
  for (int k = 1; k < N_SETTINGS; k++)
    if (r->med[with_load][k] < r->med[with_load][best]) best = k;
  return best;
}

/* ---- dispatch micro-benchmarks --------------------------------------------------------------- */

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

static int run_dispatch(int repeats) {
  for (int i = 0; i < MAX_TASKS * LINE_FLOATS; i++) work_data[i] = (float)i;
  for (int threads = 1; threads <= 2; threads++) {
    /* "pool" decides by cost as in the engine (these tiny loops run inline); "pool-sh" shares
     * every loop with the workers, the cost of a parallel-for that is actually shared. */
    for (int shared = 0; shared <= (threads > 1); shared++) {
      impl m = {shared ? "pool-sh" : "pool", threads, NULL};
      pool_test_options po = {NULL, NULL, shared};
      diag d;
      diag_clear(&d);
      if (pool_create_for_test(threads, &po, &m.pool, &d) != PH_OK) {
        fprintf(stderr, "bench_threads: %s\n", d.msg);
        return 1;
      }
      bench_impl(&m, repeats);
      pool_free(m.pool);
    }
#if HAVE_OPENMP
    impl o = {"openmp", threads, NULL};
    bench_impl(&o, repeats);
#endif
  }
  return 0;
}

/* ---- report ---------------------------------------------------------------------------------- */

static const char *setting_name(int k, char *buf, size_t cap, int default_threads) {
  if (SETTING_THREADS[k] > 0)
    snprintf(buf, cap, "%d", SETTING_THREADS[k]);
  else
    snprintf(buf, cap, "default(%d)", default_threads);
  return buf;
}

static void print_table(const bench_opts *o, const engine_result *er, int default_threads,
                        double load0, double load1) {
  if (o->engine) {
    printf("\nengine decode, ms per step: median of %d repeats (min-max); competing load: %d busy "
           "process%s\n",
           o->repeats, o->load, o->load == 1 ? "" : "es");
    printf("%-12s %-5s %6s %17s %17s %17s  %-10s %s\n", "case", "load", "steps", "threads=1",
           "threads=2", "default", "best", "default/best");
    for (int c = 0; c < N_CASES; c++) {
      const engine_result *r = &er[c];
      if (o->only_case && strcmp(o->only_case, CASES[c].name) != 0) continue;
      if (!r->ok) {
        printf("%-12s failed\n", CASES[c].name);
        continue;
      }
      for (int w = 0; w < 2; w++) {
        if (w && o->load == 0) break;
        printf("%-12s %-5s %6d", CASES[c].name, w ? "busy" : "none", r->steps);
        for (int k = 0; k < N_SETTINGS; k++) {
          char cell[48];
          snprintf(cell, sizeof cell, "%.3f (%.3f-%.3f)", r->med[w][k], r->lo[w][k], r->hi[w][k]);
          printf(" %17s", cell);
        }
        int b = best_setting(r, w);
        char name[32];
        double ratio = r->med[w][2] / r->med[w][b];
        printf("  %-10s %.2f%s\n", setting_name(b, name, sizeof name, default_threads), ratio,
               ratio > 1.2 ? "  > 1.20 !" : "");
      }
    }
  }
  if (o->dispatch) {
    printf("\ndispatch: %d repeats, OpenMP %s\n", o->dispatch_repeats,
           HAVE_OPENMP ? "built in" : "not built (CMake found no OpenMP)");
    printf("%-7s %-7s %-15s %5s %12s %12s  %s\n", "impl", "threads", "what", "tasks", "median",
           "min", "unit");
    for (int i = 0; i < n_results; i++) {
      const result *r = &results[i];
      printf("%-7s %-7d %-15s %5d %12.1f %12.1f  %s\n", r->impl, r->threads, r->what, r->tasks,
             r->median, r->min, r->unit);
    }
  }
  printf("\nmachine: %d online CPUs, default threads %d; 1-minute load average %.2f before, "
         "%.2f after\n",
         cpu_count_online(), default_threads, load0, load1);
}

static void print_json(const bench_opts *o, const engine_result *er, int default_threads,
                       double load0, double load1) {
  printf("{\"online_cpus\": %d, \"default_threads\": %d, \"loadavg_before\": %.2f, "
         "\"loadavg_after\": %.2f, \"repeats\": %d, \"competing_load\": %d,\n",
         cpu_count_online(), default_threads, load0, load1, o->repeats, o->load);
  printf(" \"engine\": [");
  int first = 1;
  for (int c = 0; o->engine && c < N_CASES; c++) {
    const engine_result *r = &er[c];
    for (int w = 0; r->ok && w < 2; w++) {
      if (w && o->load == 0) break;
      int b = best_setting(r, w);
      printf("%s\n  {\"case\": \"%s\", \"batch\": %d, \"load\": %d, \"steps\": %d, ",
             first ? "" : ",", CASES[c].name, CASES[c].batch, w ? o->load : 0, r->steps);
      printf("\"ms_per_step\": {\"1\": %.4f, \"2\": %.4f, \"default\": %.4f}, ", r->med[w][0],
             r->med[w][1], r->med[w][2]);
      printf("\"best\": \"%s\", \"default_over_best\": %.3f}",
             SETTING_THREADS[b] ? (SETTING_THREADS[b] == 1 ? "1" : "2") : "default",
             r->med[w][2] / r->med[w][b]);
      first = 0;
    }
  }
  printf("],\n \"dispatch\": [");
  for (int i = 0; o->dispatch && i < n_results; i++) {
    const result *r = &results[i];
    printf("%s\n  {\"impl\": \"%s\", \"threads\": %d, \"what\": \"%s\", \"tasks\": %d, "
           "\"median\": %.1f, \"min\": %.1f, \"unit\": \"%s\"}",
           i ? "," : "", r->impl, r->threads, r->what, r->tasks, r->median, r->min, r->unit);
  }
  printf("]}\n");
}

static int usage(void) {
  fprintf(stderr, "usage: bench_threads [--repeats N] [--load N] [--only engine|dispatch] [--json] "
                  "[--models DIR] [--target-ms MS] [--case NAME]\n");
  return 2;
}

int main(int argc, char **argv) {
  bench_opts o = {5, 15, 1, 0, 1, 1, 100.0, "build/bench-models", NULL};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--json") == 0) {
      o.json = 1;
      continue;
    }
    if (!v) return usage();
    i++;
    if (strcmp(a, "--repeats") == 0) {
      o.repeats = atoi(v);
      if (o.repeats < 1 || o.repeats > MAX_REPEATS) return usage();
      o.dispatch_repeats = o.repeats * 3 > 100 ? 100 : o.repeats * 3;
    } else if (strcmp(a, "--load") == 0) {
      o.load = atoi(v);
      if (o.load < 0 || o.load > MAX_LOAD) return usage();
    } else if (strcmp(a, "--only") == 0) {
      o.engine = strcmp(v, "engine") == 0;
      o.dispatch = strcmp(v, "dispatch") == 0;
      if (!o.engine && !o.dispatch) return usage();
    } else if (strcmp(a, "--case") == 0) {
      o.only_case = v;
    } else if (strcmp(a, "--models") == 0) {
      o.models = v;
    } else if (strcmp(a, "--target-ms") == 0) {
      o.target_ms = atof(v);
      if (!(o.target_ms >= 1.0 && o.target_ms <= 10000.0)) return usage();
    } else {
      return usage();
    }
  }

  pool *probe = NULL;
  diag d;
  diag_clear(&d);
  if (pool_create(0, &probe, &d) != PH_OK) {
    fprintf(stderr, "bench_threads: %s\n", d.msg);
    return 1;
  }
  int default_threads = pool_threads(probe);
  pool_free(probe);

  double load0 = loadavg_1min();
  fprintf(stderr, "bench_threads: %d online CPUs, default threads %d, load average %.2f\n",
          cpu_count_online(), default_threads, load0);
  static engine_result er[N_CASES];
  int rc = 0;
  for (int c = 0; o.engine && c < N_CASES; c++) {
    if (o.only_case && strcmp(o.only_case, CASES[c].name) != 0) continue;
    fprintf(stderr, "bench_threads: engine %s ...\n", CASES[c].name);
    diag_clear(&d);
    if (bench_engine_case(&o, &CASES[c], &er[c], &d) != PH_OK) {
      fprintf(stderr, "bench_threads: %s: %s: %s\n", CASES[c].name, ph_status_name(d.status),
              d.msg);
      rc = 1;
    }
  }
  if (o.dispatch) {
    fprintf(stderr, "bench_threads: dispatch ...\n");
    if (run_dispatch(o.dispatch_repeats) != 0) rc = 1;
  }
  double load1 = loadavg_1min();
  if (o.json)
    print_json(&o, er, default_threads, load0, load1);
  else
    print_table(&o, er, default_threads, load0, load1);
  return rc;
}
