/* pool — persistent workers running one statically partitioned parallel-for at a time.
 *
 * Dispatch is a generation counter: the caller publishes the job (fn, ctx, n_tasks), sets the
 * pending count and bumps the generation; workers spin briefly on the generation and then
 * sleep on a condition variable, so a back-to-back sequence of small jobs (a decode step is
 * hundreds of them) never pays a futex wake, while an idle pool burns no CPU. Completion is
 * the mirror image: workers decrement `pending`, the caller spins and then sleeps.
 *
 * The sleep paths avoid lost wake-ups without taking the mutex on every dispatch by a Dekker
 * pair of sequentially consistent operations: a sleeper announces itself (n_sleeping or
 * caller_sleeping) and then re-reads the condition; the waker changes the condition and then
 * reads the announcement. One of the two always sees the other's write, so either the sleeper
 * does not sleep or the waker takes the mutex and signals. All shared state is C11 atomics or
 * ordered by them, so ThreadSanitizer sees every edge.
 */
#include "base/pool.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Far more than any machine we target; a larger request is a bug upstream, not a wish. */
#define POOL_MAX_THREADS 1024

/* Pause iterations before sleeping. At roughly 10-40 ns per pause this is tens of
 * microseconds: longer than the gap between two kernels of one step, short enough that an
 * idle server does not keep cores busy (see docs/threading.md). When threads outnumber CPUs a
 * spinning waiter only steals time from the thread it waits for, so it barely spins. */
#define POOL_SPIN_ITERS                (1 << 12)
#define POOL_SPIN_ITERS_OVERSUBSCRIBED 16
/* After waking sleeping workers the caller spins this many times longer for completion: a
 * futex wake of an idle vCPU took 50-150 us on the development VM, longer than the normal
 * spin, and letting the caller fall asleep as well doubled the latency (docs/threading.md). */
#define POOL_SPIN_AFTER_WAKE           64

typedef struct worker {
  struct pool *pool;
  int index; /* 1..n_threads-1; the caller is 0 */
  pthread_t tid;
} worker;

struct pool {
  /* Line 1, what a worker needs to start: the generation it polls and the job it publishes.
   * The job fields are written by the caller only while no worker is running (after the
   * previous pending count reached zero) and published by the generation bump; sharing the
   * line means a woken worker fetches one cache line, not two. */
  _Alignas(64) atomic_uint generation;
  atomic_int stop;
  pool_task_fn fn;
  void *ctx;
  size_t n_tasks;
  int n_threads;
  int spin_iters;

  /* Line 2, completion: decremented by workers, polled by the caller. */
  _Alignas(64) atomic_int pending;
  atomic_int caller_sleeping;

  /* Cold: read on every dispatch but written only when a worker goes to sleep, so it stays
   * in the caller's cache while the pool is busy. */
  _Alignas(64) atomic_int n_sleeping;
  int n_started;   /* workers actually running, for cleanup after a failed create */
  worker *workers; /* [n_threads - 1] */
  pthread_mutex_t mu;
  pthread_cond_t wake; /* workers sleep here for a new generation */
  pthread_cond_t done; /* the caller sleeps here for pending == 0 */
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

int cpu_count_online(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) return 1;
  if (n > POOL_MAX_THREADS) return POOL_MAX_THREADS;
  return (int)n;
}

/* First task of thread t: floor(t * n / T), computed without overflowing t * n. */
static size_t share_begin(size_t n, int n_threads, int t) {
  size_t T = (size_t)n_threads, q = n / T, r = n % T;
  return q * (size_t)t + r * (size_t)t / T;
}

static void run_share(pool *p, int t) {
  size_t begin = share_begin(p->n_tasks, p->n_threads, t);
  size_t end = share_begin(p->n_tasks, p->n_threads, t + 1);
  pool_task_fn fn = p->fn;
  void *ctx = p->ctx;
  for (size_t i = begin; i < end; i++) fn(ctx, i, t);
}

/* Returns the first generation different from `seen`. */
static unsigned wait_generation(pool *p, unsigned seen) {
  for (int i = 0; i < p->spin_iters; i++) {
    unsigned g = atomic_load_explicit(&p->generation, memory_order_acquire);
    if (g != seen) return g;
    cpu_relax();
  }
  pthread_mutex_lock(&p->mu);
  atomic_fetch_add(&p->n_sleeping, 1); /* announce, then re-read (seq_cst: see the top) */
  unsigned g;
  while ((g = atomic_load(&p->generation)) == seen) pthread_cond_wait(&p->wake, &p->mu);
  atomic_fetch_sub(&p->n_sleeping, 1);
  pthread_mutex_unlock(&p->mu);
  return g;
}

static void *worker_main(void *arg) {
  worker *w = arg;
  pool *p = w->pool;
  unsigned seen = 0; /* the generation is 0 when workers start and only the caller bumps it */
  for (;;) {
    seen = wait_generation(p, seen);
    if (atomic_load(&p->stop)) break;
    run_share(p, w->index);
    if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_sleeping)) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_signal(&p->done);
      pthread_mutex_unlock(&p->mu);
    }
  }
  return NULL;
}

/* Publishes a new generation and wakes sleeping workers if there are any; returns 1 when it
 * had to wake someone. */
static int bump_generation(pool *p) {
  atomic_fetch_add(&p->generation, 1u);
  if (atomic_load(&p->n_sleeping) > 0) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    return 1;
  }
  return 0;
}

static void wait_done(pool *p, int woke_workers) {
  int spin = woke_workers ? p->spin_iters * POOL_SPIN_AFTER_WAKE : p->spin_iters;
  for (int i = 0; i < spin; i++) {
    if (atomic_load_explicit(&p->pending, memory_order_acquire) == 0) return;
    cpu_relax();
  }
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->caller_sleeping, 1);
  while (atomic_load(&p->pending) != 0) pthread_cond_wait(&p->done, &p->mu);
  atomic_store(&p->caller_sleeping, 0);
  pthread_mutex_unlock(&p->mu);
}

/* Stops and joins the started workers, destroys the sync objects and frees p. */
static void destroy(pool *p) {
  if (p->n_started > 0) {
    atomic_store(&p->stop, 1);
    atomic_fetch_add(&p->generation, 1u);
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
  *out = NULL;
  if (n_threads <= 0) n_threads = cpu_count_online();
  RETURN_ERROR_IF(n_threads > POOL_MAX_THREADS, d, PH_ERR_LIMIT,
                  "pool: %d threads requested, at most %d supported", n_threads, POOL_MAX_THREADS);

  /* aligned_alloc wants a size that is a multiple of the alignment. */
  size_t bytes = (sizeof(pool) + 63) & ~(size_t)63;
  pool *p = aligned_alloc(64, bytes);
  RETURN_ERROR_IF(!p, d, PH_ERR_NO_MEMORY, "pool: cannot allocate %zu bytes", bytes);
  memset(p, 0, bytes);
  p->n_threads = n_threads;
  p->spin_iters = n_threads > cpu_count_online() ? POOL_SPIN_ITERS_OVERSUBSCRIBED : POOL_SPIN_ITERS;
  atomic_init(&p->generation, 0u);
  atomic_init(&p->stop, 0);
  atomic_init(&p->n_sleeping, 0);
  atomic_init(&p->pending, 0);
  atomic_init(&p->caller_sleeping, 0);

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

void pool_run(pool *p, size_t n_tasks, pool_task_fn fn, void *ctx) {
  if (n_tasks == 0) return;
  /* A NULL pool runs inline, so single-threaded callers need no pool object. */
  if (!p || p->n_threads == 1) {
    for (size_t i = 0; i < n_tasks; i++) fn(ctx, i, 0);
    return;
  }
  p->fn = fn;
  p->ctx = ctx;
  p->n_tasks = n_tasks;
  atomic_store_explicit(&p->pending, p->n_threads - 1, memory_order_relaxed);
  int woke = bump_generation(p); /* seq_cst: also releases the job fields above */
  run_share(p, 0);
  wait_done(p, woke);
}
