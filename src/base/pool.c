/* pool — persistent workers that help the calling thread through one parallel-for at a time.
 *
 * The job and its state word. A job is published by storing one 64-bit atomic `state` that
 * packs the job's generation, an "open" bit and the number of workers inside the job (active):
 *   bits 24..63 generation | bit 16 open | bits 0..15 active
 * A worker enters a job by a compare-and-swap that adds 1 to active only while the word still
 * shows the same generation, open; it leaves by subtracting 1. The caller closes the job with
 * one fetch-and that clears the open bit and returns active at that instant: from then on no
 * worker can enter, so the caller waits only for the workers already inside (usually none, or
 * one finishing its last chunk). A worker that wakes late, however late, finds the word changed
 * (closed, or a later generation) and its CAS fails: it can never run a stale job's tasks nor
 * the next job's tasks with the old fn/ctx. The job fields (fn, ctx, n_tasks, chunk, the claim
 * counter) are written by the caller only while the job is closed with active == 0, and are
 * published by the release store of the word; workers read them only after their CAS.
 *
 * Tasks are claimed in chunks from an atomic counter by everyone in the job, the caller
 * included, so work that a descheduled worker never started is done by whoever is running.
 *
 * Whether to involve the workers at all is decided per job from its cost, measured with the
 * cycle counter (ticks converted once per process): the caller runs the first task alone and
 * publishes the rest only when the projected remaining work exceeds what publishing costs
 * (POOL_PUBLISH_NS); a small table remembers each (fn, n_tasks)'s last cost, so that a job with
 * few heavy tasks is published before its first task, and a job known to be small runs inline
 * on the caller without touching a shared cache line. Sleeping workers are woken only for work
 * worth their wake-up latency (POOL_WAKE_NS, accumulated over recent jobs that found them
 * asleep). Results never depend on any of this: tasks are pure functions of their index.
 *
 * Waiting: workers spin for POOL_WORKER_SPIN_NS on the state word, then sleep on a condition
 * variable; the caller waiting for workers still inside a job spins for POOL_CALLER_SPIN_NS,
 * then sleeps. The sleep paths avoid lost wake-ups by a Dekker pair of sequentially consistent
 * operations: a sleeper announces itself (n_sleeping, caller_sleeping) and then re-reads the
 * condition; the waker changes the condition and then reads the announcement. All shared state
 * is C11 atomics or ordered by them, so ThreadSanitizer sees every edge.
 */
#include "base/pool.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

/* Far more than any machine we target; a larger request is a bug upstream, not a wish. Also
 * bounded by the 16-bit active count of the state word. */
#define POOL_MAX_THREADS 1024

/* Publishing a job to spinning workers and closing it costs the caller a few cache-line
 * transfers (~0.5-1 us here); a job whose remaining work is projected below this runs inline. */
#define POOL_PUBLISH_NS     2000
/* A futex wake-up of an idle vCPU took 50-150 us on the development VM; sleeping workers are
 * woken once jobs that could have used them add up to this much work. */
#define POOL_WAKE_NS        40000
/* Work that found the workers asleep is forgotten after this long without such a job. */
#define POOL_WAKE_WINDOW_NS 200000
/* Workers spin this long for the next job before sleeping: longer than the gap between the
 * kernels of one decode step, short enough that an idle server burns almost nothing. */
#define POOL_WORKER_SPIN_NS 50000
/* The caller spins this long for workers still inside a closed job, then sleeps. A worker that
 * takes longer is most likely descheduled; sleeping frees this CPU so it can run there. */
#define POOL_CALLER_SPIN_NS 20000

#define ST_ACTIVE_MASK ((uint64_t)0xFFFF)
#define ST_OPEN        ((uint64_t)1 << 16)
#define ST_GEN_SHIFT   24
#define ST_GEN(s)      ((s) >> ST_GEN_SHIFT)

#define HIST_SIZE 64 /* remembered (fn, n_tasks) costs; a power of two */

typedef struct worker {
  struct pool *pool;
  int index; /* 1..n_threads-1; the caller is 0 */
  pthread_t tid;
} worker;

typedef struct hist_entry {
  pool_task_fn fn;
  size_t n_tasks;
  uint64_t work_ticks; /* serial cost of the whole job, last measured */
} hist_entry;

struct pool {
  /* Line 1, what a worker reads to join: the state word and the job it publishes. */
  _Alignas(64) _Atomic uint64_t state;
  pool_task_fn fn;
  void *ctx;
  size_t n_tasks;
  size_t chunk;

  /* Line 2: the claim counter, the only line everyone in a job writes. */
  _Alignas(64) atomic_size_t next;

  /* Line 3, cold: written when a thread goes to sleep or at shutdown. */
  _Alignas(64) atomic_int n_sleeping;
  atomic_int caller_sleeping;
  atomic_int stop;
  pool_test_hook_fn test_hook; /* set at create; read by workers */
  void *test_hook_ctx;
  int share_always;

  /* The caller's own state (pool_run is never concurrent): no sharing. */
  _Alignas(64) int n_threads;
  int n_started;   /* workers actually running, for cleanup after a failed create */
  worker *workers; /* [n_threads - 1] */
  uint64_t missed_ticks, missed_at;
  hist_entry hist[HIST_SIZE];
  pthread_mutex_t mu;
  pthread_cond_t wake; /* workers sleep here for a new generation */
  pthread_cond_t done; /* the caller sleeps here for active == 0 */
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

/* ---- time --------------------------------------------------------------------------------- */

static uint64_t clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A cheap monotonic tick count: the TSC on x86 (~20 ns to read against ~50 for
 * clock_gettime here), nanoseconds elsewhere. Only thresholds use it, never results: a TSC that
 * drifts or differs between CPUs makes the pool choose worse, not compute differently. */
static inline uint64_t ticks(void) {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  return clock_ns();
#endif
}

static double ticks_per_ns = 1.0;
static pthread_once_t ticks_once = PTHREAD_ONCE_INIT;

static void ticks_calibrate(void) {
#if defined(__x86_64__) || defined(__i386__)
  uint64_t n0 = clock_ns(), t0 = ticks(), n1, t1;
  do {
    n1 = clock_ns();
    t1 = ticks();
  } while (n1 - n0 < 200000); /* 0.2 ms: two clock reads of error are well under 1 % */
  double r = (double)(t1 - t0) / (double)(n1 - n0);
  if (r > 0.01 && r < 100.0) ticks_per_ns = r;
#endif
}

static uint64_t ns_to_ticks(uint64_t ns) { return (uint64_t)((double)ns * ticks_per_ns); }

/* ---- threads ------------------------------------------------------------------------------ */

int cpu_count_online(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) return 1;
  if (n > POOL_MAX_THREADS) return POOL_MAX_THREADS;
  return (int)n;
}

/* Thresholds in ticks, computed once per process. */
static uint64_t t_publish, t_wake, t_wake_window, t_worker_spin, t_caller_spin;
static pthread_once_t thresholds_once = PTHREAD_ONCE_INIT;

static void thresholds_init(void) {
  pthread_once(&ticks_once, ticks_calibrate);
  t_publish = ns_to_ticks(POOL_PUBLISH_NS);
  t_wake = ns_to_ticks(POOL_WAKE_NS);
  t_wake_window = ns_to_ticks(POOL_WAKE_WINDOW_NS);
  t_worker_spin = ns_to_ticks(POOL_WORKER_SPIN_NS);
  t_caller_spin = ns_to_ticks(POOL_CALLER_SPIN_NS);
}

/* Claims chunks of the current job until none is left; returns the number of tasks run. */
static size_t run_claims(pool *p, pool_task_fn fn, void *ctx, size_t n, size_t chunk, int t) {
  size_t ran = 0;
  for (;;) {
    size_t b = atomic_fetch_add_explicit(&p->next, chunk, memory_order_relaxed);
    if (b >= n) return ran;
    size_t e = n - b < chunk ? n : b + chunk;
    for (size_t i = b; i < e; i++) fn(ctx, i, t);
    ran += e - b;
  }
}

/* Returns the state word once its generation differs from `seen` (or stop is set). */
static uint64_t wait_new_state(pool *p, uint64_t seen) {
  uint64_t start = ticks();
  for (unsigned i = 0;; i++) {
    uint64_t s = atomic_load_explicit(&p->state, memory_order_acquire);
    if (ST_GEN(s) != seen) return s;
    cpu_relax();
    if ((i & 63) == 63 && ticks() - start > t_worker_spin) break;
  }
  pthread_mutex_lock(&p->mu);
  atomic_fetch_add(&p->n_sleeping, 1); /* announce, then re-read (seq_cst: see the top) */
  uint64_t s;
  while (ST_GEN(s = atomic_load(&p->state)) == seen) pthread_cond_wait(&p->wake, &p->mu);
  atomic_fetch_sub(&p->n_sleeping, 1);
  pthread_mutex_unlock(&p->mu);
  return s;
}

static void leave(pool *p) {
  uint64_t old = atomic_fetch_sub(&p->state, 1); /* seq_cst: releases this worker's writes */
  if ((old & ST_ACTIVE_MASK) == 1 && !(old & ST_OPEN) && atomic_load(&p->caller_sleeping)) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_signal(&p->done);
    pthread_mutex_unlock(&p->mu);
  }
}

static void *worker_main(void *arg) {
  worker *w = arg;
  pool *p = w->pool;
  uint64_t seen = 0; /* generation 0 is never a job */
  for (;;) {
    uint64_t s = wait_new_state(p, seen);
    if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
    uint64_t gen = ST_GEN(s);
    seen = gen;
    if (p->test_hook) p->test_hook(p->test_hook_ctx, w->index);
    /* Enter only the job this state describes, while it is open. */
    int entered = 0;
    while ((s & ST_OPEN) && ST_GEN(s) == gen) {
      if (atomic_compare_exchange_weak_explicit(&p->state, &s, s + 1, memory_order_acquire,
                                                memory_order_acquire)) {
        entered = 1;
        break;
      }
    }
    if (!entered) continue;
    run_claims(p, p->fn, p->ctx, p->n_tasks, p->chunk, w->index);
    leave(p);
  }
  return NULL;
}

/* ---- the caller --------------------------------------------------------------------------- */

static hist_entry *hist_slot(pool *p, pool_task_fn fn, size_t n) {
  uintptr_t h = (uintptr_t)fn ^ ((uintptr_t)n * 0x9E3779B97F4A7C15ull);
  h ^= h >> 17;
  h *= 0xBF58476D1CE4E5B9ull;
  return &p->hist[(h >> 29) & (HIST_SIZE - 1)];
}

/* Whether to publish the rest of a job, and whether to wake sleeping workers for it: they are
 * woken when the work they would help with, summed over recent jobs that found them asleep, is
 * worth their wake-up. n_sleeping is read before publishing: a worker falling asleep meanwhile
 * misses this job only (nothing ever waits for a worker that did not enter). */
enum { RUN_INLINE, PUBLISH, PUBLISH_AND_WAKE };

static int plan_job(pool *p, uint64_t remaining, uint64_t now) {
  int sleeping = atomic_load(&p->n_sleeping);
  if (sleeping == 0) return PUBLISH;
  if (p->share_always) return PUBLISH_AND_WAKE;
  if (now - p->missed_at > t_wake_window) p->missed_ticks = 0;
  p->missed_ticks += remaining;
  p->missed_at = now;
  if (p->missed_ticks < t_wake) return sleeping < p->n_threads - 1 ? PUBLISH : RUN_INLINE;
  p->missed_ticks = 0;
  return PUBLISH_AND_WAKE;
}

static void wait_workers(pool *p) {
  uint64_t start = ticks();
  for (unsigned i = 0;; i++) {
    if ((atomic_load_explicit(&p->state, memory_order_acquire) & ST_ACTIVE_MASK) == 0) return;
    cpu_relax();
    if ((i & 63) == 63 && ticks() - start > t_caller_spin) break;
  }
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->caller_sleeping, 1);
  while ((atomic_load(&p->state) & ST_ACTIVE_MASK) != 0) pthread_cond_wait(&p->done, &p->mu);
  atomic_store(&p->caller_sleeping, 0);
  pthread_mutex_unlock(&p->mu);
}

void pool_run(pool *p, size_t n_tasks, pool_task_fn fn, void *ctx) {
  if (n_tasks == 0) return;
  /* A NULL pool runs inline, so single-threaded callers need no pool object. */
  if (!p || p->n_threads == 1 || n_tasks == 1) {
    for (size_t i = 0; i < n_tasks; i++) fn(ctx, i, 0);
    return;
  }
  hist_entry *h = hist_slot(p, fn, n_tasks);
  uint64_t known = h->fn == fn && h->n_tasks == n_tasks ? h->work_ticks : 0;
  if (p->share_always) known = UINT64_MAX / 4;
  uint64_t t0 = ticks(), now = t0;
  size_t done = 0;
  /* Run tasks alone while the rest is projected too small to share. The projection is checked
   * after 1, 2, 4, ... tasks, so its cost is a few cycle-counter reads per job. */
  if (known < t_publish) {
    size_t check = 1;
    while (done < n_tasks) {
      fn(ctx, done, 0);
      if (++done < check) continue;
      check *= 2;
      now = ticks();
      if (n_tasks - done >= 2 && (now - t0) / done * (n_tasks - done) >= t_publish) break;
    }
  }
  size_t ran = done;
  uint64_t t_work = 0;
  if (done < n_tasks) {
    size_t rest = n_tasks - done;
    uint64_t remaining = known >= t_publish ? known : (now - t0) / done * rest;
    int plan = plan_job(p, remaining, now);
    if (plan == RUN_INLINE) {
      for (; done < n_tasks; done++) fn(ctx, done, 0);
      ran = n_tasks;
      t_work = ticks() - t0;
    } else {
      size_t chunk = rest / (size_t)(8 * p->n_threads);
      p->fn = fn;
      p->ctx = ctx;
      p->n_tasks = n_tasks;
      p->chunk = chunk ? chunk : 1;
      atomic_store_explicit(&p->next, done, memory_order_relaxed);
      uint64_t s = atomic_load_explicit(&p->state, memory_order_relaxed);
      atomic_store(&p->state, ((ST_GEN(s) + 1) << ST_GEN_SHIFT) | ST_OPEN); /* publish */
      if (plan == PUBLISH_AND_WAKE) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
      }
      ran += run_claims(p, fn, ctx, n_tasks, p->chunk, 0);
      t_work = ticks() - t0;
      uint64_t old = atomic_fetch_and(&p->state, ~ST_OPEN); /* close */
      if (old & ST_ACTIVE_MASK) wait_workers(p);
    }
  } else {
    t_work = ticks() - t0;
  }
  /* The caller's time per task (its waits excluded), scaled to the job: its serial cost. */
  if (ran == 0) return;
  uint64_t work = t_work / ran * n_tasks;
  h->fn = fn;
  h->n_tasks = n_tasks;
  h->work_ticks = known ? (known + work) / 2 : work;
}

/* ---- create / free ------------------------------------------------------------------------ */

/* Stops and joins the started workers, destroys the sync objects and frees p. */
static void destroy(pool *p) {
  if (p->n_started > 0) {
    atomic_store(&p->stop, 1);
    uint64_t s = atomic_load(&p->state);
    atomic_store(&p->state, (ST_GEN(s) + 1) << ST_GEN_SHIFT); /* closed: nobody enters */
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->workers[i].tid, NULL);
  }
  pthread_cond_destroy(&p->done);
  pthread_cond_destroy(&p->wake);
  pthread_mutex_destroy(&p->mu);
  free(p->workers);
  free(p);
}

ph_status pool_create(int n_threads, pool **out, diag *d) {
  return pool_create_for_test(n_threads, NULL, out, d);
}

ph_status pool_create_for_test(int n_threads, const pool_test_options *o, pool **out, diag *d) {
  *out = NULL;
  if (n_threads <= 0) n_threads = cpu_count_online();
  RETURN_ERROR_IF(n_threads > POOL_MAX_THREADS, d, PH_ERR_LIMIT,
                  "pool: %d threads requested, at most %d supported", n_threads, POOL_MAX_THREADS);
  pthread_once(&thresholds_once, thresholds_init);

  /* aligned_alloc wants a size that is a multiple of the alignment. */
  size_t bytes = (sizeof(pool) + 63) & ~(size_t)63;
  pool *p = aligned_alloc(64, bytes);
  RETURN_ERROR_IF(!p, d, PH_ERR_NO_MEMORY, "pool: cannot allocate %zu bytes", bytes);
  memset(p, 0, bytes);
  p->n_threads = n_threads;
  if (o) {
    p->test_hook = o->hook;
    p->test_hook_ctx = o->hook_ctx;
    p->share_always = o->share_always;
  }
  atomic_init(&p->state, 0);
  atomic_init(&p->next, 0);
  atomic_init(&p->n_sleeping, 0);
  atomic_init(&p->caller_sleeping, 0);
  atomic_init(&p->stop, 0);

  if (pthread_mutex_init(&p->mu, NULL) != 0) {
    free(p);
    return diag_set(d, PH_ERR_INTERNAL, "pool: pthread_mutex_init failed");
  }
  if (pthread_cond_init(&p->wake, NULL) != 0) {
    pthread_mutex_destroy(&p->mu);
    free(p);
    return diag_set(d, PH_ERR_INTERNAL, "pool: pthread_cond_init failed");
  }
  if (pthread_cond_init(&p->done, NULL) != 0) {
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p);
    return diag_set(d, PH_ERR_INTERNAL, "pool: pthread_cond_init failed");
  }
  /* From here destroy() cleans up whatever exists. */
  if (n_threads > 1) {
    p->workers = calloc((size_t)(n_threads - 1), sizeof(worker));
    if (!p->workers) {
      destroy(p);
      return diag_set(d, PH_ERR_NO_MEMORY, "pool: cannot allocate %d workers", n_threads - 1);
    }
  }

  /* Workers block every signal so that a host application's handlers keep running on its own
   * threads, as they would without the library. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int err = 0;
  for (int i = 0; i < n_threads - 1; i++) {
    worker *w = &p->workers[i];
    w->pool = p;
    w->index = i + 1;
    err = pthread_create(&w->tid, NULL, worker_main, w);
    if (err != 0) break;
    p->n_started++;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (err != 0) {
    int started = p->n_started;
    destroy(p);
    return diag_set(d, PH_ERR_INTERNAL, "pool: pthread_create failed after %d of %d workers: %s",
                    started, n_threads - 1, strerror(err));
  }
  *out = p;
  return PH_OK;
}

void pool_free(pool *p) {
  if (p) destroy(p);
}

int pool_threads(const pool *p) { return p ? p->n_threads : 1; }
