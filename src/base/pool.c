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
 * published by the release store of the word; workers read them only after their CAS. (The
 * 40-bit generation would have to wrap, 10^12 jobs, between a worker's load and its CAS to
 * fool it.)
 *
 * Tasks are claimed in chunks from an atomic counter by everyone in the job, the caller
 * included, so work that a descheduled worker never started is done by whoever is running.
 *
 * Whether to involve workers is decided per job from its cost, measured with the cycle counter:
 * the caller runs the first task alone and publishes the rest only when the projected remaining
 * work exceeds what publishing costs (POOL_PUBLISH_NS). A small table remembers each
 * (fn, n_tasks)'s last cost, so that a job of few heavy tasks is published before its first
 * task, and a job known to be small runs inline on the caller without touching a shared cache
 * line. Sleeping workers are woken only for work worth their wake-up (POOL_WAKE_NS).
 *
 * Load. When the CPUs are oversubscribed (another process busy, more threads than CPUs), extra
 * runnable threads only slow the caller: the OS time-slices it with its own workers, and a
 * worker descheduled inside a chunk stalls the job for a time slice. The pool notices from three
 * signals: a spinning worker that finds it was descheduled, involuntary context switches of the
 * caller (getrusage), and stalls waiting for workers. After a window with any of them it lets
 * fewer workers help (halving; at zero the caller works alone for a back-off period, then
 * tries again) and adds them back after clean windows. Results never depend on any of this:
 * tasks are pure functions of their index (pool.h).
 *
 * Waiting: workers spin for POOL_WORKER_SPIN_NS on the state word, then sleep on a condition
 * variable; the caller waiting for workers still inside a job spins for POOL_CALLER_SPIN_NS,
 * then sleeps. The caller's sleep avoids a lost wake-up by a Dekker pair of sequentially
 * consistent operations: it announces itself (caller_sleeping) and then re-reads active; the
 * last worker out changes active and then reads the announcement. Workers announce their sleep
 * the same way (n_sleeping), so a wake-up for a job is never lost either. All shared state is
 * C11 atomics or ordered by them, so ThreadSanitizer sees every edge.
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* RUSAGE_THREAD, sched_getaffinity */
#endif
#include "base/pool.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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
/* Sleeping workers are woken once shareable jobs that found them asleep add up to this much
 * work within POOL_WAKE_WINDOW_NS (one job this large suffices): a futex wake-up of an idle
 * vCPU took 50-150 us on the development VM, and a woken worker then stays for the jobs that
 * follow. */
#define POOL_WAKE_NS        40000
#define POOL_WAKE_WINDOW_NS 200000
/* Workers spin this long for the next job before sleeping: longer than the serial stretches
 * between the shareable kernels of a decode step, short enough that an idle server burns
 * little. Spinning costs nothing while the machine has idle CPUs; when it has none, workers
 * stop spinning at once (POOL_GAP_NS). */
#define POOL_WORKER_SPIN_NS 1000000
/* A spinning worker yields its CPU this often, so that a thread waiting for that CPU (the
 * caller, on a machine without an idle one) runs at once instead of at the end of the worker's
 * time slice; the worker then finds the time gap and stops spinning. On an idle machine
 * sched_yield returns at once. */
#define POOL_YIELD_NS       50000
/* The caller spins this long for workers still inside a closed job, then sleeps. A worker that
 * takes longer is most likely descheduled; sleeping frees this CPU so it can run there. */
#define POOL_CALLER_SPIN_NS 20000
/* A spinning worker that sees this much time pass between two looks at the clock (normally a
 * few microseconds apart) was descheduled. A wait for workers longer than POOL_STALL_NS plus
 * twice the expected chunk is a stall: a worker was descheduled holding a chunk. */
#define POOL_GAP_NS         100000
#define POOL_STALL_NS       100000
/* The caller looks back over windows of POOL_WINDOW_NS (a window that spans a long pause of the
 * pool, POOL_WINDOW_MAX windows or more, is not judged). After a window with a descheduled
 * spinner, POOL_SWITCHES involuntary switches of the caller, or stalls above 1/POOL_STALL_DIV
 * of it, half the helping workers are let go; with none left the caller works alone (the
 * behaviour of one thread) for a back-off period, doubled at each repeat up to the maximum.
 * After POOL_CLEAN_WINDOWS windows in a row that shared work without trouble, one more worker
 * may help and the back-off halves. */
#define POOL_WINDOW_NS      4000000
#define POOL_WINDOW_MAX     4
#define POOL_SWITCHES       2
#define POOL_STALL_DIV      20
#define POOL_BACKOFF_MIN_NS 4000000
#define POOL_BACKOFF_MAX_NS 256000000
#define POOL_CLEAN_WINDOWS  8

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
  atomic_int helpers; /* most workers that may be inside a job; set by the caller */
  pool_task_fn fn;
  void *ctx;
  size_t n_tasks;
  size_t chunk;

  /* Line 2: the claim counter, the only line everyone in a job writes. */
  _Alignas(64) atomic_size_t next;

  /* Line 3, cold: written when a thread goes to sleep, is descheduled, or at shutdown. */
  _Alignas(64) atomic_int n_sleeping;
  atomic_int caller_sleeping;
  atomic_uint preemptions; /* times a spinning worker found it had been descheduled */
  atomic_int stop;
  pool_test_hook_fn test_hook; /* set at create; read by workers */
  void *test_hook_ctx;
  int share_always;

  /* The caller's own state (pool_run is never concurrent): no sharing. */
  _Alignas(64) int n_threads;
  int n_started;   /* workers actually running, for cleanup after a failed create */
  worker *workers; /* [n_threads - 1] */
  uint64_t missed_ticks, missed_at; /* shareable work that found the workers asleep */
  uint64_t win_start, win_stall;    /* this window: its start, time stalled */
  int win_published;                /* jobs published in this window */
  int clean_windows;                /* windows in a row that shared work without trouble */
  unsigned preemptions_seen;
  long switches_seen;    /* the caller's involuntary context switches */
  pthread_t caller_seen; /* the thread they were counted on */
  uint64_t solo_until, backoff;
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

/* A cheap monotonic tick count: the TSC on x86 (~20 ns to read against ~50 for clock_gettime
 * here), nanoseconds elsewhere. Only the scheduling decisions use it, never results: a TSC that
 * drifts or differs between CPUs makes the pool choose worse, not compute differently. */
static inline uint64_t ticks(void) {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  return clock_ns();
#endif
}

/* Thresholds in ticks, computed once per process. */
static uint64_t t_publish, t_wake, t_wake_window, t_worker_spin, t_yield, t_caller_spin, t_gap,
    t_stall, t_window, t_backoff_min, t_backoff_max;
static pthread_once_t thresholds_once = PTHREAD_ONCE_INIT;

static void thresholds_init(void) {
  double per_ns = 1.0;
#if defined(__x86_64__) || defined(__i386__)
  uint64_t n0 = clock_ns(), k0 = ticks(), n1, k1;
  do {
    n1 = clock_ns();
    k1 = ticks();
  } while (n1 - n0 < 200000); /* 0.2 ms: two clock reads of error are well under 1 % */
  double r = (double)(k1 - k0) / (double)(n1 - n0);
  if (r > 0.01 && r < 100.0) per_ns = r;
#endif
#define TICKS(ns) ((uint64_t)((double)(ns)*per_ns))
  t_publish = TICKS(POOL_PUBLISH_NS);
  t_wake = TICKS(POOL_WAKE_NS);
  t_wake_window = TICKS(POOL_WAKE_WINDOW_NS);
  t_worker_spin = TICKS(POOL_WORKER_SPIN_NS);
  t_yield = TICKS(POOL_YIELD_NS);
  t_caller_spin = TICKS(POOL_CALLER_SPIN_NS);
  t_gap = TICKS(POOL_GAP_NS);
  t_stall = TICKS(POOL_STALL_NS);
  t_window = TICKS(POOL_WINDOW_NS);
  t_backoff_min = TICKS(POOL_BACKOFF_MIN_NS);
  t_backoff_max = TICKS(POOL_BACKOFF_MAX_NS);
#undef TICKS
}

/* ---- workers ------------------------------------------------------------------------------ */

int cpu_count_online(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
#if defined(__linux__) && defined(CPU_COUNT)
  /* taskset, cpusets, a container's --cpuset-cpus: the CPUs this process may run on */
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) >= 1 &&
      (n < 1 || CPU_COUNT(&set) < n))
    n = CPU_COUNT(&set);
#endif
  if (n < 1) return 1;
  if (n > POOL_MAX_THREADS) return POOL_MAX_THREADS;
  return (int)n;
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

/* Returns the state word once its generation differs from `seen` (or stop is set): spins for up
 * to `spin` ticks, then sleeps. */
static uint64_t wait_new_state(pool *p, uint64_t seen, uint64_t spin) {
  uint64_t start = ticks(), last = start, yielded = start;
  for (unsigned i = 0; spin > 0; i++) {
    uint64_t s = atomic_load_explicit(&p->state, memory_order_acquire);
    if (ST_GEN(s) != seen) return s;
    cpu_relax();
    if ((i & 63) != 63) continue;
    uint64_t now = ticks();
    if (now - last > t_gap) { /* descheduled while spinning: someone else wants this CPU */
      atomic_fetch_add_explicit(&p->preemptions, 1, memory_order_relaxed);
      break;
    }
    if (now - start > spin) break;
    if (now - yielded > t_yield) { /* a thread waiting for this CPU gets it (then: a gap) */
      sched_yield();
      yielded = now;
    }
    last = now;
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
  uint64_t seen = 0, spin = t_worker_spin; /* generation 0 is never a job */
  for (;;) {
    uint64_t s = wait_new_state(p, seen, spin);
    if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
    uint64_t gen = ST_GEN(s);
    seen = gen;
    spin = t_worker_spin;
    if (p->test_hook) p->test_hook(p->test_hook_ctx, w->index);
    /* Enter only the job this state describes, while it is open and has room. */
    int entered = 0, full = 0;
    while ((s & ST_OPEN) && ST_GEN(s) == gen) {
      if ((int)(s & ST_ACTIVE_MASK) >= atomic_load_explicit(&p->helpers, memory_order_relaxed)) {
        full = 1;
        break;
      }
      if (atomic_compare_exchange_weak_explicit(&p->state, &s, s + 1, memory_order_acquire,
                                                memory_order_acquire)) {
        entered = 1;
        break;
      }
    }
    if (full) spin = 0; /* not wanted now: sleep rather than take a CPU from those who are */
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

/* Involuntary context switches of the calling thread so far (0 where unknown). */
static long involuntary_switches(void) {
#if defined(RUSAGE_THREAD)
  struct rusage ru;
  if (getrusage(RUSAGE_THREAD, &ru) == 0) return ru.ru_nivcsw;
#endif
  return 0;
}

/* Closes the window that began at win_start once it is long enough: lets workers go after
 * trouble, takes one back after enough clean windows. */
static void close_window(pool *p, uint64_t now) {
  uint64_t span = now - p->win_start;
  if (span < t_window || p->share_always) return;
  unsigned pre = atomic_load_explicit(&p->preemptions, memory_order_relaxed);
  long sw = involuntary_switches();
  int helpers = atomic_load_explicit(&p->helpers, memory_order_relaxed);
  int trouble = pre != p->preemptions_seen || sw - p->switches_seen >= POOL_SWITCHES ||
                p->win_stall * POOL_STALL_DIV >= span;
  pthread_t self = pthread_self();
  if (span >= POOL_WINDOW_MAX * t_window || !pthread_equal(self, p->caller_seen)) {
    /* the pool sat idle, or another thread calls it now: nothing to judge */
    if (helpers == 0 && now >= p->solo_until) helpers = 1;
  } else if (helpers == 0) {
    /* alone: whatever happened was not the workers' doing; try again after the back-off */
    if (now >= p->solo_until) helpers = 1;
  } else if (trouble) {
    helpers /= 2;
    p->clean_windows = 0;
    if (helpers == 0) {
      p->solo_until = now + p->backoff;
      p->backoff = p->backoff * 2 < t_backoff_max ? p->backoff * 2 : t_backoff_max;
    }
  } else if (p->win_published && ++p->clean_windows >= POOL_CLEAN_WINDOWS) {
    p->clean_windows = 0;
    if (helpers < p->n_threads - 1) helpers++;
    if (p->backoff / 2 >= t_backoff_min) p->backoff /= 2;
  }
  atomic_store_explicit(&p->helpers, helpers, memory_order_relaxed);
  p->preemptions_seen = pre;
  p->switches_seen = sw;
  p->caller_seen = self;
  p->win_start = now;
  p->win_stall = 0;
  p->win_published = 0;
}

/* How many workers to wake for a job with `remaining` shareable work (0: publish to those
 * awake; -1: run it inline). n_sleeping is read before publishing: a worker falling asleep
 * meanwhile misses this job only (nothing ever waits for a worker that did not enter). */
static int plan_job(pool *p, uint64_t remaining, uint64_t now) {
  int helpers = atomic_load_explicit(&p->helpers, memory_order_relaxed);
  int sleeping = atomic_load(&p->n_sleeping), awake = p->n_threads - 1 - sleeping;
  if (p->share_always) return sleeping;
  if (helpers == 0) return -1;
  if (awake >= helpers) return 0;
  if (now - p->missed_at > t_wake_window) p->missed_ticks = 0;
  p->missed_ticks += remaining;
  p->missed_at = now;
  if (p->missed_ticks < t_wake) return awake > 0 ? 0 : -1;
  p->missed_ticks = 0;
  return helpers - awake;
}

/* Waits until no worker is inside the closed job; returns how long a stall that was (0 when the
 * wait was not longer than the last chunks should take). */
static uint64_t wait_workers(pool *p, uint64_t chunk_ticks) {
  uint64_t start = ticks();
  for (unsigned i = 0;; i++) {
    if ((atomic_load_explicit(&p->state, memory_order_acquire) & ST_ACTIVE_MASK) == 0) return 0;
    cpu_relax();
    if ((i & 63) == 63 && ticks() - start > t_caller_spin) break;
  }
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->caller_sleeping, 1);
  while ((atomic_load(&p->state) & ST_ACTIVE_MASK) != 0) pthread_cond_wait(&p->done, &p->mu);
  atomic_store(&p->caller_sleeping, 0);
  pthread_mutex_unlock(&p->mu);
  uint64_t waited = ticks() - start;
  return waited > t_stall + 2 * chunk_ticks ? waited : 0;
}

/* Publishes tasks [done, n) of the job, wakes `wake` workers, takes part, closes the job and
 * waits for the workers inside it. Returns the tasks the caller ran; *t_work is its time until
 * the last claim (ticks since t0). */
static size_t share_job(pool *p, size_t n, pool_task_fn fn, void *ctx, size_t done,
                        uint64_t per_task, int wake, uint64_t t0, uint64_t *t_work) {
  size_t chunk = (n - done) / (size_t)(8 * p->n_threads);
  p->fn = fn;
  p->ctx = ctx;
  p->n_tasks = n;
  p->chunk = chunk ? chunk : 1;
  atomic_store_explicit(&p->next, done, memory_order_relaxed);
  uint64_t s = atomic_load_explicit(&p->state, memory_order_relaxed);
  atomic_store(&p->state, ((ST_GEN(s) + 1) << ST_GEN_SHIFT) | ST_OPEN); /* publish */
  p->win_published++;
  if (wake > 0) {
    pthread_mutex_lock(&p->mu);
    if (wake >= p->n_threads - 1)
      pthread_cond_broadcast(&p->wake);
    else
      for (int i = 0; i < wake; i++) pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->mu);
  }
  size_t ran = run_claims(p, fn, ctx, n, p->chunk, 0);
  *t_work = ticks() - t0;
  uint64_t old = atomic_fetch_and(&p->state, ~ST_OPEN); /* close */
  if (old & ST_ACTIVE_MASK) p->win_stall += wait_workers(p, per_task * p->chunk);
  return ran;
}

void pool_run(pool *p, size_t n_tasks, pool_task_fn fn, void *ctx) {
  if (n_tasks == 0) return;
  /* A NULL pool runs inline, so single-threaded callers need no pool object. */
  if (!p || p->n_threads == 1 || n_tasks == 1) {
    for (size_t i = 0; i < n_tasks; i++) fn(ctx, i, 0);
    return;
  }
  uint64_t t0 = ticks(), now = t0;
  close_window(p, t0);
  hist_entry *h = hist_slot(p, fn, n_tasks);
  uint64_t known = h->fn == fn && h->n_tasks == n_tasks ? h->work_ticks : 0;
  if (p->share_always) known = UINT64_MAX / 4;
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
    int wake = plan_job(p, remaining, now);
    if (wake < 0) {
      for (; done < n_tasks; done++) fn(ctx, done, 0);
      ran = n_tasks;
      t_work = ticks() - t0;
    } else {
      ran += share_job(p, n_tasks, fn, ctx, done, remaining / rest, wake, t0, &t_work);
    }
  } else {
    t_work = ticks() - t0;
  }
  /* The caller's time per task (its waits excluded), scaled to the job: its serial cost. */
  if (ran == 0) return;
  uint64_t work = t_work / ran * n_tasks;
  h->fn = fn;
  h->n_tasks = n_tasks;
  h->work_ticks = known && known < UINT64_MAX / 4 ? (known + work) / 2 : work;
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
#ifdef PH_POOL_FORCE_SHARE
  /* a test build: every job shared, so the kernels' tests run their tasks concurrently */
  p->share_always = 1;
#endif
  atomic_init(&p->state, 0);
  atomic_init(&p->helpers, n_threads - 1);
  atomic_init(&p->next, 0);
  atomic_init(&p->n_sleeping, 0);
  atomic_init(&p->caller_sleeping, 0);
  atomic_init(&p->preemptions, 0);
  atomic_init(&p->stop, 0);
  p->backoff = t_backoff_min;
  p->win_start = ticks();
  p->switches_seen = involuntary_switches();
  p->caller_seen = pthread_self();

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
