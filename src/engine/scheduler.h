/* scheduler — continuous batching: which requests run which tokens in the next engine step.
 *
 * Pure bookkeeping, in the manner of vLLM's v1 scheduler: there are no prefill and decode
 * phases, only each request's `n_computed` catching up with its `n_total` within a per-step
 * token budget. One call per step (sched_schedule) picks the step's batch; the engine runs it,
 * calls sched_commit, samples, and grows n_total.
 *
 * The chunk rule (batch invariance): the tokens a request runs in one step depend only on the
 * request, never on what else is scheduled. Prompt tokens [0, n_prompt) run in chunks whose
 * boundaries are the multiples of prefill_chunk (the last one may be shorter); every token at
 * index >= n_prompt runs alone, one per step. A request is never given part of its chunk: if
 * the step's remaining budget cannot hold the whole chunk, it waits. The GatedDeltaNet layer's
 * result depends on how a sequence is split across steps, every other kernel is batch
 * invariant per token, so this is what makes a request's output bit-identical alone or among
 * others, and after preemption (docs/scheduler.md).
 *
 * Owns: the waiting and running queues (intrusive links inside the caller's sched_req, no
 * allocation per step), the storage of each linked request's block table, and the batch storage
 * returned by sched_schedule (allocated once at sched_create). It decides who runs and asks the
 * borrowed hybrid cache (src/cache/hybrid_cache.h) for room: hybrid_cache_reserve for a
 * request's pages and slot, hybrid_cache_release on preemption and finish, hybrid_cache_compact
 * for the slots; it allocates from no pool itself.
 * Must never: compute, touch KV or state memory (only block ids and slot numbers; slot moves
 * are done by the cache), sample, or know about tokens' values.
 * Not thread-safe: the engine loop is the only caller, and it calls sched_schedule and
 * sched_finish only while no state binding is active.
 *
 * Errors: PH_ERR_INVALID_ARGUMENT for bad params, a malformed request or a stale batch (the
 * message names the field or the request id); PH_ERR_LIMIT for a request that can never fit the
 * pools (sched_add); PH_ERR_NO_MEMORY. A failed call changes nothing unless it says otherwise.
 */
#ifndef PH_ENGINE_SCHEDULER_H
#define PH_ENGINE_SCHEDULER_H

#include <stdint.h>

#include "base/diag.h"
#include "cache/hybrid_cache.h"

typedef struct sched sched;

typedef struct sched_params {
  int32_t max_batch;     /* sequences per step, >= 1 */
  int64_t max_tokens;    /* token budget per step (sum of the chunks), >= prefill_chunk */
  int64_t prefill_chunk; /* prompt chunk length in tokens, >= 1; chunk boundaries are its
                            multiples */
  int32_t block_size;    /* tokens per KV block, >= 1; must be the cache's block size */
} sched_params;

/* max_batch 32, max_tokens 2048, prefill_chunk 512, block_size 16. block_size must be set to
 * the cache's page size (hybrid_cache_block_size) by the engine. */
sched_params sched_params_default(void);

/* PH_OK when every field is in range; otherwise PH_ERR_INVALID_ARGUMENT naming the first bad
 * field and its value (max_tokens < prefill_chunk is refused: a prompt chunk could never run). */
ph_status sched_params_validate(const sched_params *p, diag *d);

typedef enum sched_req_state {
  SCHED_FINISHED = 0, /* not linked into a scheduler (never added, or sched_finish'ed) */
  SCHED_WAITING = 1,  /* queued for admission; holds no slot and no blocks, n_computed 0 (a
                         cached prefix is taken only as it is admitted: sched_prefix_hooks) */
  SCHED_RUNNING = 2,  /* admitted; holds a slot and the blocks for its computed tokens */
} sched_req_state;

/* One request. Storage is the caller's and must stay put while linked (state != FINISHED);
 * the scheduler links it by pointer. Fields marked (caller) are written by the caller: id,
 * n_prompt, max_total before sched_add (then fixed); n_total before sched_add and then only
 * ever increased (by 1 per sampled token, never past max_total), between steps. All other
 * fields are written by the scheduler and are read-only for the caller. */
typedef struct sched_req {
  int64_t id;        /* (caller) any value; named in messages */
  int64_t n_prompt;  /* (caller) prompt tokens, >= 1 */
  int64_t n_total;   /* (caller) known tokens: prompt + generated so far, in [n_prompt,
                        max_total] */
  int64_t max_total; /* (caller) prompt + max new tokens: the most tokens it can ever hold */

  int64_t n_computed;    /* tokens whose KV and state are in cache, <= n_total */
  block_table blocks;    /* KV block ids in token order; RUNNING: >= ceil(n_computed/block_size)
                            blocks. ids storage is reserved for max_total at sched_add */
  int32_t slot;          /* state slot while RUNNING, -1 otherwise (and always -1 when the
                            cache has no fixed state: hybrid_cache_has_state); may change at
                            sched_schedule (slot compaction): read it from the batch */
  sched_req_state state; /* see sched_req_state */
  int64_t n_preemptions; /* times it was preempted (recomputed from token 0) */
  int64_t
      n_draft; /* (caller) drafted tokens known after n_total (speculative decoding),
                  offered for the next step; set between steps, cleared by
                  sched_commit for the batch's requests. Used only when the request's next chunk
                  is its one       decode token (n_computed == n_total - 1); the step then runs the
                  decode token and up to n_draft drafts (fewer when the budget, the
                  pages or max_total leave less room), see sched_entry.n_draft */

  struct sched_req *prev, *next; /* queue links (running or waiting), NULL at the ends */
  struct sched *owner;           /* the scheduler it is linked into, NULL when FINISHED */
} sched_req;

/* Fills r for sched_add: the caller fields from the arguments (n_total = n_prompt, max_total =
 * n_prompt + max_new), everything else empty (state FINISHED, slot -1, no blocks). Values are
 * checked by sched_add, not here. Never call it on a linked request (it clears the links). */
void sched_req_init(sched_req *r, int64_t id, int64_t n_prompt, int64_t max_new);

/* The chunk a request at (n_prompt, n_total, n_computed) runs next, in tokens: while
 * n_computed < n_prompt, up to the next multiple of prefill_chunk (capped at n_prompt); after
 * that 1 while n_total > n_computed, else 0. A pure function: the whole chunk rule. Returns 0 for
 * inconsistent arguments (n_computed < 0, n_computed >= n_total, prefill_chunk < 1). */
int64_t sched_chunk_len(int64_t prefill_chunk, int64_t n_prompt, int64_t n_total,
                        int64_t n_computed);

/* One scheduled chunk: tokens [start, start + n_tokens) of req. */
typedef struct sched_entry {
  sched_req *req;
  int64_t start;    /* == req->n_computed at schedule time */
  int64_t n_tokens; /* == sched_chunk_len(...) of req at schedule time, >= 1 */
  int32_t sample;   /* 1 when the chunk ends at req->n_total: its last logits give the next
                       token. 0 for inner prompt chunks and for replayed tokens after a
                       preemption (their logits are discarded). */
  int64_t n_draft;  /* drafts verified by this chunk (speculative decoding): n_tokens is then
                       1 + n_draft, tokens [n_total, n_total + n_draft) of the request are its
                       drafts and every row of the chunk gives a next token. 0 otherwise. */
} sched_entry;

/* A step's batch. Arrays are owned by the scheduler (allocated at sched_create) and valid until
 * the next sched_schedule, sched_free, or a sched_finish of a request in it. Entries are ordered
 * by ascending slot (batch order never changes results: batch invariance), so slots[] is the
 * hybrid_cache_bind argument and, when slots_are_slice, the binding is zero-copy. */
typedef struct sched_batch {
  const sched_entry *entries; /* [n_entries] */
  const int32_t *slots;       /* [n_entries] entries[b].req->slot, ascending */
  const block_table **tables; /* [n_entries] &entries[b].req->blocks, for block_tables_pack */
  int32_t n_entries;          /* <= max_batch; 0 when nothing can run */
  int32_t slots_are_slice;    /* 1 when slots are consecutive and ascending (n_entries >= 1) */
  int64_t n_tokens;           /* sum of entries' n_tokens, <= max_tokens */
  int32_t n_preempted;        /* requests preempted (sent back to waiting) by this step */
  int32_t n_admitted;         /* waiting requests admitted by this step */
  uint64_t step;              /* step number, checked by sched_commit */
} sched_batch;

/* Prefix reuse at admission (prefix caching, src/cache/prefix_cache.h): optional hooks through
 * which the engine, which knows the tokens, gives a request admitted from the waiting queue a
 * cached prefix. For the request w at the head of the queue (holding nothing):
 *   acquire(ctx, w) may append cached pages to w->blocks (one reference each) and returns the
 *     tokens they cover: 0, or a multiple of prefill_chunk and block_size below w->n_prompt.
 *     The scheduler sets w->n_computed to it, so w's chunks go on at the same boundaries as
 *     from token 0 (the chunk rule); then it reserves w's slot and first chunk as usual;
 *   admitted(ctx, w, d), once the reservation succeeded (w holds its slot): fill the slot's
 *     state for the prefix. An error fails sched_schedule;
 *   when the reservation fails (no room), the scheduler gives the acquired pages back itself
 *     (w->n_computed back to 0) and w waits; acquire is called again at the next attempt.
 * Without hooks (the default) every request starts at token 0. */
typedef struct sched_prefix_hooks {
  void *ctx;
  int64_t (*acquire)(void *ctx, sched_req *w);
  ph_status (*admitted)(void *ctx, sched_req *w, diag *d);
} sched_prefix_hooks;

/* Creates a scheduler over cache (pages and slots); it is borrowed and must outlive the
 * scheduler, and the scheduler must be the only one asking it for room. *out owned by the caller
 * (sched_free). PH_ERR_INVALID_ARGUMENT (params, a NULL cache, block_size other than the
 * cache's), PH_ERR_NO_MEMORY. */
ph_status sched_create(const sched_params *p, hybrid_cache *cache, sched **out, diag *d);

/* Finishes every linked request (pages and slots back to the cache, which must still exist)
 * and frees the scheduler. NULL is a no-op. */
void sched_free(sched *s);

/* Installs the prefix hooks (NULL: none). Between steps. */
void sched_set_prefix_hooks(sched *s, const sched_prefix_hooks *h);

/* PH_OK when a request of max_total tokens fits the cache's pages at all; else PH_ERR_LIMIT with
 * sched_add's message (naming id). Reads only fixed fields: callable from any thread while the
 * scheduler lives (the engine refuses such a request when it is added). */
ph_status sched_check_fits(const sched *s, int64_t id, int64_t max_total, diag *d);

/* Queues r at the back of the waiting queue. Reads id, n_prompt, n_total, max_total; sets
 * n_computed 0, slot -1, state WAITING, n_preemptions 0, and gives r->blocks storage for
 * blocks_for(max_total) ids (so block tables never grow inside sched_schedule); r->blocks must
 * not hold blocks (sched_req_init, or a finished request). Storage already in r->blocks (ids
 * with capacity >= blocks_for(max_total), n_blocks 0) is taken over instead of allocating: the
 * scheduler frees it when the request finishes.
 * PH_ERR_INVALID_ARGUMENT: n_prompt < 1, n_total < n_prompt, max_total < n_total, r already
 * linked. PH_ERR_LIMIT: max_total tokens need more blocks than the pool has in all (it could
 * never run to the end). PH_ERR_NO_MEMORY. r is untouched on failure. */
ph_status sched_add(sched *s, sched_req *r, diag *d);

/* Chooses the next step's batch into *out (zeroed first, also on failure) (see docs/scheduler.md
 * for the order):
 *  1. slot compaction (hybrid_cache_compact; moved requests are re-pointed);
 *  2. running requests, oldest admitted first: each gets its whole chunk if the batch and budget
 *     have room, after reserving its KV blocks (hybrid_cache_reserve). When the cache has no
 *     room, the most recently
 *     admitted running request not yet scheduled this step (possibly this one) is preempted:
 *     its blocks and slot go back, n_computed = 0, n_preemptions++, and it goes to the FRONT of
 *     the waiting queue. Repeats until the reservation succeeds or this request was preempted;
 *  3. only when nothing was preempted: waiting requests in FIFO order while batch, budget, a
 *     free slot and the blocks of the first chunk allow; the first that does not fit stops
 *     admission (no overtaking); it never preempts to admit;
 *  4. slot compaction again, then entries sorted by slot.
 * Allocates nothing. Costs O(running requests + max_batch), whatever the length of the waiting
 * queue. PH_ERR_INVALID_ARGUMENT when a request it may touch (every running one, the first
 * max_batch waiting ones) is inconsistent (n_total outside [max(n_prompt, n_computed),
 * max_total], checked before anything changes) or a state binding is active; other cache
 * errors are forwarded. */
ph_status sched_schedule(sched *s, sched_batch *out, diag *d);

/* After the engine ran batch b: n_computed += n_tokens for every entry whose request is still
 * RUNNING in s (one finished in between is skipped), and the n_draft of every entry's request = 0.
 * PH_ERR_INVALID_ARGUMENT when b is not the latest batch of s or was already committed; nothing
 * changes then. */
ph_status sched_commit(sched *s, const sched_batch *b, diag *d);

/* sched_commit where entry i keeps only its first n_kept[i] tokens (1 <= n_kept[i] <=
 * n_tokens; n_kept NULL keeps all): a verify chunk keeps the decode token and the drafts that
 * were accepted, and the rejected drafts' KV rows are left beyond n_computed, unreachable (their
 * pages stay with the request, for its next steps). A value out of range is
 * PH_ERR_INVALID_ARGUMENT and nothing changes. */
ph_status sched_commit_kept(sched *s, const sched_batch *b, const int64_t *n_kept, diag *d);

/* Removes r at any time and in any state: releases its slot and blocks (hybrid_cache_release)
 * and frees the table's storage, unlinks it, state = FINISHED. A no-op for an already finished
 * request. PH_ERR_INVALID_ARGUMENT when r is linked into another scheduler, or the cache refuses
 * (a binding is active: nothing changes). */
ph_status sched_finish(sched *s, sched_req *r, diag *d);

int32_t sched_n_waiting(const sched *s);
/* Requests visited so far by sched_add, sched_finish and sched_schedule (queue walks, checks,
 * slot re-pointing): a work counter for tests, which bound it to catch a return to scans of
 * every queued request per step (O(1) per add/finish, O(running + max_batch) per step). */
uint64_t sched_work(const sched *s);
int32_t sched_n_running(const sched *s);

/* The queues, for inspection: the oldest running (admission order) or the first waiting
 * request (next to admit); follow ->next. NULL when empty. Do not relink. */
sched_req *sched_running_first(const sched *s);
sched_req *sched_waiting_first(const sched *s);

const sched_params *sched_get_params(const sched *s);

#endif /* PH_ENGINE_SCHEDULER_H */
