/* exec — runs a finalized graph on the CPU.
 *
 * The caller binds every graph input (tensors it owns) and may bind graph outputs to its own
 * buffers — including the buffer of an input, which is how cache and state outputs are updated
 * in place as the ABI requires (present.* aliasing past_key_values.*). Unbound outputs live in
 * the executor's arena and stay valid until the next run.
 *
 * Planning: from the bound input shapes the executor infers every value's concrete shape (the
 * ops' infer functions, the same contract checks as at build time), lets each op with a plan
 * hook compute its node's run-time geometry once into storage the executor owns (op.h: sized
 * per op, allocated once at exec_create, handed to run() as ctx->plan), gives each intermediate an
 * offset in one arena by value lifetime (greedy, largest first, 64-byte aligned), and sizes one
 * scratch region for the largest op workspace. A plan is reused while input shapes repeat; when
 * they change it is recomputed, and memory is reallocated only when the new plan needs more
 * than the arena holds (it then grows by half again). So once buffers are sized for a shape, a
 * run allocates nothing: exec_alloc_count() counts every allocation for tests.
 *
 * Threads: the executor owns a pool; ops split independent work over it. Results never depend
 * on the thread count (op.h). Never decides scheduling; never touches requests.
 */
#ifndef PH_EXEC_EXEC_H
#define PH_EXEC_EXEC_H

#include <stddef.h>

#include "base/diag.h"
#include "graph/graph.h"
#include "ops/op.h"

typedef struct executor executor;

/* g must be finalized and outlive the executor. n_threads <= 0: all online CPUs. */
ph_status exec_create(graph *g, int n_threads, executor **out, diag *d);
void exec_free(executor *e); /* NULL-safe */

/* Index of a graph input / output by name, -1 if absent. */
int exec_input_index(const executor *e, const char *name);
int exec_output_index(const executor *e, const char *name);

/* Binds graph input i to t (shape and dtype are checked at run). The tensor struct is copied;
 * its data must stay valid until the run. A zero-element tensor may have data == NULL. */
ph_status exec_bind_input(executor *e, int i, const tensor *t, diag *d);

/* Binds graph output i to a caller buffer (its dims must equal the inferred shape at run).
 * Passing NULL unbinds it (the executor provides the buffer). */
ph_status exec_bind_output(executor *e, int i, const tensor *t, diag *d);

ph_status exec_run(executor *e, diag *d);

/* Output i of the last run (the caller's buffer if bound). */
const tensor *exec_output(const executor *e, int i);

/* The executor's thread pool, for work a session splits between runs (a speculative commit's
 * replays); never while exec_run is running. */
pool *exec_pool(executor *e);

/* Called after every node of a run with the graph, the node and its outputs (NULL for an absent
 * optional output), valid until the next node: for tools and tests that look at intermediates (the
 * range of activations an f16 package would hold, a value dump). It must not write them. fn NULL
 * removes it. */
typedef void (*exec_observer)(void *ctx, const graph *g, const gnode *n, const tensor *const *out);
void exec_set_observer(executor *e, exec_observer fn, void *ctx);

/* System allocations made by this executor since creation (arena, scratch, plan tables). */
size_t exec_alloc_count(const executor *e);

/* Time spent outside kernels in the last run (planning, binding, dispatch), in nanoseconds,
 * and the number of nodes run: the executor's own overhead. */
typedef struct exec_stats {
  double plan_ns;
  double dispatch_ns;
  double kernel_ns;
  int n_nodes;
  size_t arena_bytes;
} exec_stats;
exec_stats exec_last_stats(const executor *e);

#endif /* PH_EXEC_EXEC_H */
