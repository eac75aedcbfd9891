/* pool — a fixed set of worker threads that run one parallel-for at a time.
 *
 * Why our own pool and not OpenMP: see docs/threading.md (measured dispatch cost, per-object
 * thread counts, no interference with a host application's OpenMP runtime).
 *
 * pool_run(p, n_tasks, fn, ctx) calls fn(ctx, task, thread) for every task in [0, n_tasks) and
 * returns when all are done. Tasks are assigned statically: thread t runs tasks
 * [t*n/T, (t+1)*n/T), so which thread computes which task depends only on (n_tasks, T), never on
 * timing. Kernels are single-threaded and pure; determinism of results must not depend on the
 * assignment anyway (each task writes its own outputs, reductions stay inside one task).
 * The calling thread is worker 0. A pool with 1 thread runs everything inline.
 * pool_run must not be called concurrently on the same pool, nor from inside a task.
 */
#ifndef PH_BASE_POOL_H
#define PH_BASE_POOL_H

#include <stddef.h>

#include "base/diag.h"

typedef struct pool pool;

typedef void (*pool_task_fn)(void *ctx, size_t task, int thread);

/* n_threads <= 0 means the number of online CPUs. */
ph_status pool_create(int n_threads, pool **out, diag *d);
void pool_free(pool *p); /* NULL-safe; joins the workers */
int pool_threads(const pool *p);
void pool_run(pool *p, size_t n_tasks, pool_task_fn fn, void *ctx);

/* Number of online CPUs (>= 1). */
int cpu_count_online(void);

#endif /* PH_BASE_POOL_H */
