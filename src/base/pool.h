/* pool — a fixed set of worker threads that help the calling thread through one parallel-for at
 * a time.
 *
 * Why our own pool and not OpenMP, and why it schedules dynamically: see docs/threading.md.
 *
 * pool_run(p, n_tasks, fn, ctx) calls fn(ctx, task, thread) exactly once for every task in
 * [0, n_tasks) and returns when all are done (their writes visible to the caller). The calling
 * thread takes part as thread 0; workers are threads 1..T-1. Which thread runs which task is
 * NOT fixed: tasks are claimed in chunks at run time by whoever is running, so a worker that the
 * OS has descheduled never holds the loop hostage with tasks it has not started. A job too small
 * to pay for the workers runs entirely on the caller; sleeping workers are woken only for enough
 * work; and when the CPUs are oversubscribed (another busy process, more threads than CPUs)
 * fewer workers help, down to none for a while (pool.c and docs/threading.md give the measured
 * costs behind each rule). `thread` is unique among the threads running tasks of one pool_run
 * at the same time, so it may index per-thread scratch ([T] slices); a thread runs one task at
 * a time.
 *
 * Contract for task functions, relied on by every kernel in src/ops (each task writes only
 * its own outputs, keeps any reduction inside the task, and uses `thread` only to pick its
 * scratch slice, which it writes before reading): the result of a task must not depend on the
 * thread that runs it, on the order of tasks, or on which other tasks one thread ran before.
 * Results are then bit-identical for any thread count and any schedule; test_base and the ops
 * tests check it (build with -DPH_POOL_FORCE_SHARE to share every job of the ops tests).
 *
 * A pool with 1 thread, a NULL pool, or n_tasks == 1 runs everything inline. pool_run must not
 * be called concurrently on the same pool, nor from inside a task. n_tasks < SIZE_MAX / 2.
 */
#ifndef PH_BASE_POOL_H
#define PH_BASE_POOL_H

#include <stddef.h>

#include "base/diag.h"

typedef struct pool pool;

typedef void (*pool_task_fn)(void *ctx, size_t task, int thread);

/* n_threads <= 0 means the number of online CPUs (cpu_count_online). */
ph_status pool_create(int n_threads, pool **out, diag *d);
void pool_free(pool *p); /* NULL-safe; joins the workers */
int pool_threads(const pool *p);
void pool_run(pool *p, size_t n_tasks, pool_task_fn fn, void *ctx);

/* Number of online CPUs this process may run on (its affinity mask: taskset, cpusets), >= 1. */
int cpu_count_online(void);

/* For tests. hook (may be NULL) runs on worker `worker` (1..T-1) each time it has seen a new
 * job and before it tries to join it, so a test can make a worker arrive late (sleep there).
 * share_always publishes every job of two or more tasks at once and wakes sleeping workers for
 * it, whatever it costs, so that tests exercise the concurrent paths with tiny tasks. */
typedef void (*pool_test_hook_fn)(void *ctx, int worker);
typedef struct pool_test_options {
  pool_test_hook_fn hook;
  void *hook_ctx;
  int share_always;
} pool_test_options;
ph_status pool_create_for_test(int n_threads, const pool_test_options *o, pool **out, diag *d);

#endif /* PH_BASE_POOL_H */
