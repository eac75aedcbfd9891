/* engine — continuous batching over the packed paged graph: requests in, tokens out.
 *
 * Modelled on ONNX Runtime GenAI's Engine/Request (../shared/spec/abi.md §8.6) and vLLM's
 * scheduler. An engine owns one paged_session (graph, executor, KV pages, state slots), the
 * scheduler over its pools, and the requests. engine_step() is one iteration:
 *   schedule (scheduler.h: token budget, running first, request-only chunk boundaries, admission
 *   of pages + slot together, preemption by recompute) → bind the packed inputs and the state
 *   slots → run → sample the requests whose chunk reached their last known token → commit
 *   (append tokens, finish on a stop token or max_new_tokens, release pages and slot).
 * Requests are added and removed from any thread (a mutex-guarded inbox drained at the start
 * of a step); new tokens are read by polling (engine_poll) or a callback run on the stepping
 * thread. A bad request (empty prompt, token outside the vocabulary, a prompt that fills the
 * context, impossible sampling parameters, a request that can never fit the pages) finishes
 * with ENGINE_FINISH_ERROR and its typed status without touching the others; a max_new that
 * runs past the context is clipped there (finish "length"). A logits row holding NaN or an
 * infinity (non-finite weights) ends that request with PH_ERR_NON_FINITE, the others go on.
 *
 * Cost: adding, looking up, removing and releasing a request are O(1) amortized, and a step
 * costs O(running + max_batch) bookkeeping whatever the number of queued requests (a hash map
 * by id; the scheduler looks only at the head of its queue). A queued request holds its record
 * (~450 bytes), its prompt plus room for the tokens it may generate (8 bytes each, capped by
 * the context) and its block-table storage; one refused when added holds its record and
 * message only.
 *
 * Batch invariance: each request's tokens and logits are bit-identical to running it alone
 * (the chunk rule in scheduler.h, batch-invariant kernels, sampling a pure function of
 * (seed, token index)); preempted requests resume with identical output.
 * After warm-up a step allocates nothing (tests/test_engine.c counts).
 * Must never: decide pages or slots itself (the scheduler does), or touch KV memory.
 */
#ifndef PH_ENGINE_ENGINE_H
#define PH_ENGINE_ENGINE_H

#include <stdint.h>

#include "base/diag.h"
#include "engine/sampler.h"
#include "runtime/paged_session.h"

typedef struct engine engine;

typedef struct engine_params {
  int32_t max_batch;     /* sequences per step; 0: genai_config's max_batch_size, capped at
                            64 (a CUDA figure), else 16 */
  int64_t max_tokens;    /* token budget per step; 0: genai_config's max_scheduled_tokens or
                            2048 */
  int64_t prefill_chunk; /* prompt chunk in tokens; 0: min(256, max_tokens) */
  int32_t n_blocks;      /* KV pages incl. the null page; 0: from memory_bytes */
  int64_t memory_bytes;  /* budget for KV pages + state slots when n_blocks is 0; 0: 1 GiB */
  int32_t max_slots;     /* concurrent requests holding state; 0: max_batch */
  int n_threads;         /* <= 0: all CPUs */
  /* checkpoints only (a package fixes these in its graph): */
  int64_t block_size;  /* 0: 16 */
  int64_t max_context; /* rotary rows; 0: min(max_position_embeddings, 32768) */
  ph_dtype io_dtype;   /* PH_DTYPE_INVALID: f32 */
  int capture_logits;  /* keep every sampled position's logits per request (tests, demo) */
} engine_params;

engine_params engine_params_default(void);

/* Opens dir: an exported package (model.onnx + genai_config.json with the paged layout; the
 * binding and dynamic batching defaults come from genai_config.json) or a Hugging Face
 * checkpoint (the paged graph is built). Errors: whatever opening, reading or building reports;
 * PH_ERR_UNSUPPORTED for a dense package; PH_ERR_INVALID_ARGUMENT for bad params. */
ph_status engine_create(const char *dir, const engine_params *p, engine **out, diag *d);
/* Over an already built paged session (taken over, freed with the engine, also on failure). */
ph_status engine_create_session(paged_session *s, const engine_params *p, int64_t eos_id,
                                engine **out, diag *d);
void engine_free(engine *e); /* NULL-safe */

typedef enum engine_finish {
  ENGINE_RUNNING = 0,        /* not finished */
  ENGINE_FINISH_LENGTH = 1,  /* max_new_tokens generated, or the context is full */
  ENGINE_FINISH_STOP = 2,    /* a stop token or eos (included in the output) */
  ENGINE_FINISH_ABORTED = 3, /* removed by the caller */
  ENGINE_FINISH_ERROR = 4,   /* refused: see engine_request_info.status/message */
} engine_finish;
const char *engine_finish_name(engine_finish f); /* "length", "stop", "aborted", "error" */

/* Called on the stepping thread for each new token (token >= 0), and once when a request
 * finishes (token -1, reason set). Must not call engine_step. */
typedef void (*engine_token_fn)(void *user, uint64_t request_id, int64_t token,
                                engine_finish reason);
void engine_set_callback(engine *e, engine_token_fn fn, void *user);

/* Queues a request (thread-safe; it joins at the next step). The prompt is copied. Returns its
 * id (>= 1, unique, increasing from one thread) in *out_id. API misuse (NULL prompt, n < 0) is
 * PH_ERR_INVALID_ARGUMENT here; a request the model cannot serve (empty prompt, a prompt that
 * fills the context, a token outside the vocabulary, bad sampling parameters, more pages than
 * the pool has, checked here in this order) is accepted, keeps no copy of its prompt, and
 * finishes ENGINE_FINISH_ERROR with the status and message at the next step. Everything the
 * request will need is allocated here, so that a step allocates nothing. PH_ERR_NO_MEMORY. */
ph_status engine_add(engine *e, const int64_t *prompt, int64_t n_prompt, const sampling_params *sp,
                     uint64_t *out_id, diag *d);
/* Aborts a request at any time (thread-safe; effective at the next step). Unknown or finished
 * ids are PH_ERR_NOT_FOUND / a no-op. */
ph_status engine_remove(engine *e, uint64_t id, diag *d);

typedef struct engine_step_info {
  uint64_t step;     /* steps run so far (this one included) */
  int32_t n_seqs;    /* sequences in this step's batch (0: idle) */
  int64_t n_tokens;  /* tokens run */
  int64_t n_sampled; /* tokens generated */
  int32_t n_running, n_waiting, n_preempted, n_admitted, n_finished;
  int32_t pages_used, pages_total, slots_used, slots_total;
  uint64_t state_bytes_moved; /* by this step's binding (and slot compaction) */
  double seconds;             /* wall time of the step */
} engine_step_info;

/* One step. *info (may be NULL) describes it. Returns PH_OK with info->n_seqs == 0 when there is
 * nothing to run. A failure of the graph run is returned and leaves the engine usable for
 * other calls only to be freed. */
ph_status engine_step(engine *e, engine_step_info *info, diag *d);
/* 1 while any request is queued, waiting or running. */
int engine_busy(engine *e);

typedef struct engine_request_info {
  engine_finish finish;
  ph_status status;  /* PH_OK unless finish == ENGINE_FINISH_ERROR */
  char message[256]; /* the error, for ENGINE_FINISH_ERROR; "" otherwise */
  int64_t n_prompt, n_generated, n_preemptions;
  double queue_ms; /* add → first scheduled */
  double ttft_ms;  /* add → first token */
  double total_ms; /* add → finished (or now) */
} engine_request_info;

/* Thread-safe. PH_ERR_NOT_FOUND for an unknown or released id. */
ph_status engine_request_info_get(engine *e, uint64_t id, engine_request_info *out, diag *d);
/* Copies up to max tokens generated since the last poll into out (thread-safe); returns the
 * count, or -1 for an unknown id. */
int64_t engine_poll(engine *e, uint64_t id, int64_t *out, int64_t max);
/* All tokens generated so far (not consuming), and with capture_logits their logits rows
 * [n_generated, vocab] (row j produced token j); NULL for an unknown id. Valid until the request
 * is released; read them between steps. */
const int64_t *engine_tokens(engine *e, uint64_t id, int64_t *n);
const float *engine_logits(engine *e, uint64_t id);
/* Forgets a finished request (its record and buffers). PH_ERR_INVALID_ARGUMENT if it has not
 * finished, PH_ERR_NOT_FOUND if unknown. */
ph_status engine_release(engine *e, uint64_t id, diag *d);

/* Request records visited so far by the engine's table and queues and by its scheduler
 * (sched_work): a work counter for tests, which bound it by a constant per request and per
 * step to catch a return to scans of every request (thread-safe). */
uint64_t engine_work(engine *e);

int64_t engine_vocab(const engine *e);
int64_t engine_max_context(const engine *e);
paged_session *engine_session(engine *e);
const engine_params *engine_params_of(const engine *e);

#endif /* PH_ENGINE_ENGINE_H */
