/* engine_impl — the engine's private records, shared by the files that implement engine.h
 * (engine.c: requests and the step; engine_prefix.c: the prefix cache's side of the step).
 * Nothing outside src/engine/engine*.c includes this.
 */
#ifndef PH_ENGINE_ENGINE_IMPL_H
#define PH_ENGINE_ENGINE_IMPL_H

#include <pthread.h>
#include <stddef.h>

#include "cache/prefix_cache.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "runtime/mtp_session.h"
#include "runtime/runtime.h"

typedef struct request {
  uint64_t id;
  sched_req sr;     /* sr.n_total counts prompt + generated tokens */
  int64_t *tokens;  /* [capacity]: prompt, then generated; NULL when refused at add */
  int64_t capacity; /* min(n_prompt + max_new_tokens, max_context + 1) */
  int64_t n_prompt;
  sampling_params sp;
  ph_finish_reason finish;
  ph_status status;
  ph_status refusal; /* decided by engine_add, reported at the next step; PH_OK: admissible */
  char *message;     /* heap, the refusal's message (NULL otherwise) */
  int64_t n_generated, n_polled;
  float *logits; /* PH_CAPTURE_SAMPLED: [capacity - n_prompt, vocab]; PH_CAPTURE_POSITIONS:
                    [capacity - 1, vocab] (the last token is never run) */
  ph_logits_capture capture; /* the engine's capture mode when it was added */
  int admitted;              /* passed sched_add */
  int remove_pending;
  ph_finish_reason finish_next; /* decided during a step, published after it */
  /* non-finite logits (status PH_ERR_NON_FINITE): what the message names, formatted when read
   * so that a step never allocates */
  uint64_t bad_step;
  int64_t bad_index;
  float bad_value;
  double t_add, t_sched, t_first, t_done; /* seconds, monotonic; 0 = not yet */
  /* speculative decoding: sp.speculative resolved (its replay tokens point into spec), and the
   * drafter's state, allocated for speculative requests only (a plain record stays small) */
  struct spec_state *spec;
  int64_t n_drafted, n_accepted; /* drafts verified, and kept */
  /* prefix caching (engine_prefix.c), written on the stepping thread under mu */
  prefix_match pm;    /* what its last admission found */
  int looked_up;      /* its last admission looked (0: a request that never takes a hit) */
  int64_t n_cached;   /* prompt tokens served from the cache at its last admission */
  int64_t snap_at[2]; /* where its prompt chunks end at a position worth a snapshot (0: none):
                         its deepest boundary below the prompt's end, and where its prompt leaves
                         the chain other requests computed */
} request;

/* The record holding a scheduler request. */
#define REQUEST_OF(sr_ptr) ((request *)((char *)(sr_ptr)-offsetof(request, sr)))

/* A speculative request's drafter state: the MTP head's sequence (-1: none yet), the drafts it
 * made for the next step, whether it lost track (its positions could not be computed: no more
 * drafts, same output), and the replay continuation copied at add. */
typedef struct spec_state {
  int32_t mtp_handle;
  int32_t n_mtp_drafts;
  int mtp_lost;
  int64_t mtp_drafts[PH_MAX_DRAFT_TOKENS];
  int64_t replay[]; /* [n_replay_tokens] */
} spec_state;

/* id -> request: open addressing, linear probing, a power-of-two table at most half full;
 * removal shifts the entries behind back (no tombstones). Ids are consecutive and id * odd
 * constant is a bijection modulo the table size, so live ids rarely collide. */
typedef struct req_map {
  request **slot; /* [cap], NULL = empty */
  uint64_t cap, n;
} req_map;

struct engine {
  ph_engine_params p;               /* as resolved at creation */
  char *quant_skip;                 /* the engine's copy of p.quant.skip (NULL: none) */
  ph_logits_capture capture_logits; /* what requests added now keep of their logits */
  paged_session *s;
  runtime_source src; /* the package or checkpoint (its mapping: the graph's weights point in) */
  sched *sch;
  int64_t vocab, max_context;
  int64_t eos[GENAI_MAX_EOS];
  int n_eos;
  ph_token_fn cb;
  void *cb_user;

  pthread_mutex_t mu;
  req_map reqs;    /* every known request (unreleased) */
  request **inbox; /* queued by engine_add */
  int64_t n_inbox, cap_inbox;
  uint64_t *removals; /* ids queued by engine_remove (a finished or released one is skipped) */
  int64_t n_removals, cap_removals;
  /* the stepping thread's copies of both queues, grown (under mu) only when a queue outgrew
   * them: after warm-up a step allocates nothing */
  request **draining;
  int64_t cap_draining;
  uint64_t *draining_ids;
  int64_t cap_draining_ids;
  uint64_t work;       /* request records visited by the table and the queues (engine_work) */
  request **finishing; /* [max_batch_size]: finishes decided while the batch is live */
  uint64_t next_id;

  /* speculative decoding: the most drafts a verify may hold (0: none) */
  int32_t spec_max;
  /* the MTP drafter (a checkpoint with an MTP head and state_update_capacity > 0), else NULL;
   * per step storage for its runs, sized at creation */
  mtp_session *mtp;
  mtp_seq *mseq;  /* [max_batch_size] */
  request **mreq; /* [max_batch_size] */
  float *mhidden; /* [max_batch_size, H]: the chained hidden rows */
  int64_t *mtok;  /* [max_batch_size]: the chained draft tokens */
  int64_t mtp_H;
  /* step storage, sized at creation */
  paged_seq *seqs; /* [max_batch_size] */
  int64_t *kept;   /* [max_batch_size]: tokens each entry keeps (sched_commit_kept) */
  void *scratch;   /* sampler */
  size_t scratch_bytes;
  uint64_t steps;
  int32_t n_admitted; /* by the last step (engine_step_admitted) */
  int64_t n_live;     /* admitted and not finished */
  /* the prefix cache (NULL: off) and its figures as of the last step (read under mu) */
  prefix_cache *pc;
  ph_prefix_cache_stats pc_stats;
  int32_t *page_holders; /* [pages incl. the null one]: engine_prefix_check's count (allocated at
                            creation: the check runs inside tests' allocation-counted steps) */
};

/* engine_prefix.c: the prefix cache's side of the engine. _open creates it (unless
 * p.prefix_cache is OFF) and installs the scheduler's hooks, resolving p.prefix_cache and
 * p.prefix_cache_bytes; _close frees it (after the scheduler gave every page back, before the
 * session). _after_step publishes the pages (and snapshots) the batch's prompt chunks completed;
 * _publish_stats refreshes e->pc_stats (call under mu). */
ph_status engine_prefix_open(engine *e, diag *d);
void engine_prefix_close(engine *e);
ph_status engine_prefix_after_step(engine *e, const sched_batch *b, diag *d);
void engine_prefix_publish_stats(engine *e);

#endif /* PH_ENGINE_ENGINE_IMPL_H */
