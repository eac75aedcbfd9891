/* serve_engine — the engine thread of `pagedhybrid serve`: one thread steps the engine while any
 * request is live and sleeps on a condition variable when none is; HTTP threads submit requests
 * and wait for their tokens.
 *
 * A serve_req is shared by the HTTP thread that submitted it and the engine thread: the engine's
 * per-token callback (on the stepping thread) appends each token to the request's buffer and
 * wakes its waiter; when a request finishes, the engine thread reads its ph_request_info,
 * releases it in the engine (its pages and slot were freed by the finish) and marks it finished.
 * The HTTP thread reads tokens with serve_req_wait, cancels with serve_req_cancel (a client that
 * went away, a stop string) and lets go with serve_req_put; the record is freed when both sides
 * are done with it. Tokens are buffered in memory allocated at submit (max_new_tokens of them),
 * so the callback never allocates.
 *
 * If a step fails (the graph run: the engine is then only fit to be freed), every live request
 * finishes PH_FINISH_ERROR with that status and message, later submits are refused, and
 * serve_engine_failed says so (GET /health reports it).
 */
#ifndef PH_TOOLS_SERVE_ENGINE_H
#define PH_TOOLS_SERVE_ENGINE_H

#include <stdint.h>

#include "pagedhybrid.h"
#include "serve_metrics.h"
#include "tools_api.h"

typedef struct serve_engine serve_engine;
typedef struct serve_req serve_req;

/* Starts the engine thread over e (not owned; it must outlive serve_engine_stop) and installs the
 * engine's token callback. metrics (not owned) receive every finish and step, and the prefix
 * cache's stats at the start and after every step. */
ph_status serve_engine_start(ph_engine *e, serve_metrics *metrics, serve_engine **out, diag *d);
/* Aborts every live request, lets the thread step until the engine is idle, joins it and frees
 * se (NULL-safe). Requests still held by HTTP threads stay valid until they are put. */
void serve_engine_stop(serve_engine *se);
/* Aborts every live request (shutdown past its timeout): their waiters see PH_FINISH_ABORTED. */
void serve_engine_abort_all(serve_engine *se);
/* 1 after a failed step; msg (cap bytes) receives why. */
int serve_engine_failed(serve_engine *se, char *msg, size_t cap);
/* Requests submitted and not yet put by their HTTP thread. */
int64_t serve_engine_n_live(serve_engine *se);

/* Queues a request (prompt copied). sp->max_new_tokens bounds the token buffer. The caller holds
 * one reference (serve_req_put). Errors: PH_ERR_NO_MEMORY, PH_ERR_INTERNAL after a failed step,
 * what ph_engine_add_request returns. */
ph_status serve_engine_submit(serve_engine *se, const int64_t *prompt, int64_t n_prompt,
                              const ph_sampling_params *sp, serve_req **out, diag *d);

/* What serve_req_wait saw. */
typedef struct serve_req_state {
  int64_t n_tokens;     /* tokens generated so far (all of them, not only the new ones) */
  int finished;         /* 1: the engine is done with the request; info is valid */
  ph_request_info info; /* when finished: reason, status, counts, timings */
} serve_req_state;

/* Waits up to timeout_ms (0: no wait) until the request has more than `seen` tokens or has
 * finished; copies tokens [seen, min(n_tokens, seen + cap)) into out and returns how many it
 * copied. *st describes the request at that moment. */
int64_t serve_req_wait(serve_req *r, int64_t seen, int64_t *out, int64_t cap, int timeout_ms,
                       serve_req_state *st);
/* Asks the engine to abort the request (no-op once finished); the finish arrives as usual. */
void serve_req_cancel(serve_req *r);
/* The HTTP thread is done with r: cancels it when it has not finished, and drops the reference.
 * NULL-safe. */
void serve_req_put(serve_req *r);

#endif /* PH_TOOLS_SERVE_ENGINE_H */
