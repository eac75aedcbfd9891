/* scheduler — two intrusive queues (running in admission order, waiting in FIFO order with
 * preempted requests at the front) and one pass per step over each. */
#include "engine/scheduler.h"

#include <stdlib.h>
#include <string.h>

typedef struct req_queue {
  sched_req *head, *tail;
  int32_t n;
} req_queue;

struct sched {
  sched_params p;
  hybrid_cache *cache;        /* borrowed: pages and slots */
  req_queue running;          /* oldest admitted at head */
  req_queue waiting;          /* next to admit at head */
  sched_entry *chosen;        /* [max_batch] entries in scheduling order */
  sched_entry *sorted;        /* [max_batch] the same, by ascending slot: the batch handed out */
  int32_t *slots;             /* [max_batch] slots of `sorted` */
  int32_t *order;             /* [max_batch] scratch for hybrid_cache_slot_order */
  const block_table **tables; /* [max_batch] */
  state_move *moves;          /* [max_slots] compaction moves */
  int32_t max_moves;
  uint64_t step;             /* number of the latest batch (0: none yet) */
  int step_committed;        /* the latest batch was committed */
  uint64_t work;             /* requests visited (see sched_work) */
  sched_prefix_hooks prefix; /* prefix caching (NULL functions: none) */
};

/* ---- params and the chunk rule -------------------------------------------------------------- */

sched_params sched_params_default(void) {
  sched_params p = {.max_batch = 32, .max_tokens = 2048, .prefill_chunk = 512, .block_size = 16};
  return p;
}

ph_status sched_params_validate(const sched_params *p, diag *d) {
  RETURN_ERROR_IF(!p, d, PH_ERR_INVALID_ARGUMENT, "sched_params: NULL");
  RETURN_ERROR_IF(p->max_batch < 1, d, PH_ERR_INVALID_ARGUMENT,
                  "sched_params: max_batch %d must be >= 1", (int)p->max_batch);
  RETURN_ERROR_IF(p->prefill_chunk < 1, d, PH_ERR_INVALID_ARGUMENT,
                  "sched_params: prefill_chunk %lld must be >= 1", (long long)p->prefill_chunk);
  RETURN_ERROR_IF(p->max_tokens < p->prefill_chunk, d, PH_ERR_INVALID_ARGUMENT,
                  "sched_params: max_tokens %lld must be >= prefill_chunk %lld (a prompt chunk "
                  "could never be scheduled)",
                  (long long)p->max_tokens, (long long)p->prefill_chunk);
  RETURN_ERROR_IF(p->block_size < 1, d, PH_ERR_INVALID_ARGUMENT,
                  "sched_params: block_size %d must be >= 1", (int)p->block_size);
  return PH_OK;
}

void sched_req_init(sched_req *r, int64_t id, int64_t n_prompt, int64_t max_new) {
  memset(r, 0, sizeof *r);
  r->id = id;
  r->n_prompt = n_prompt;
  r->n_total = n_prompt;
  r->max_total = n_prompt + max_new;
  block_table_init(&r->blocks);
  r->slot = -1;
  r->n_draft = 0;
  r->state = SCHED_FINISHED;
}

int64_t sched_chunk_len(int64_t prefill_chunk, int64_t n_prompt, int64_t n_total,
                        int64_t n_computed) {
  if (prefill_chunk < 1 || n_computed < 0 || n_computed >= n_total) return 0;
  if (n_computed < n_prompt) {
    int64_t to_boundary = prefill_chunk - n_computed % prefill_chunk;
    int64_t to_prompt_end = n_prompt - n_computed;
    return to_boundary < to_prompt_end ? to_boundary : to_prompt_end;
  }
  return 1;
}

static int64_t chunk_of(const sched *s, const sched_req *r) {
  return sched_chunk_len(s->p.prefill_chunk, r->n_prompt, r->n_total, r->n_computed);
}

/* ---- queues ---------------------------------------------------------------------------------- */

static void queue_unlink(req_queue *q, sched_req *r) {
  if (r->prev)
    r->prev->next = r->next;
  else
    q->head = r->next;
  if (r->next)
    r->next->prev = r->prev;
  else
    q->tail = r->prev;
  r->prev = r->next = NULL;
  q->n--;
}

static void queue_push_back(req_queue *q, sched_req *r) {
  r->next = NULL;
  r->prev = q->tail;
  if (q->tail)
    q->tail->next = r;
  else
    q->head = r;
  q->tail = r;
  q->n++;
}

static void queue_push_front(req_queue *q, sched_req *r) {
  r->prev = NULL;
  r->next = q->head;
  if (q->head)
    q->head->prev = r;
  else
    q->tail = r;
  q->head = r;
  q->n++;
}

/* ---- create / free ----------------------------------------------------------------------------
 */

ph_status sched_create(const sched_params *p, hybrid_cache *cache, sched **out, diag *d) {
  RETURN_ERROR_IF(!out, d, PH_ERR_INVALID_ARGUMENT, "sched_create: out is NULL");
  *out = NULL;
  FORWARD_IF_ERROR(sched_params_validate(p, d));
  RETURN_ERROR_IF(!cache, d, PH_ERR_INVALID_ARGUMENT,
                  "sched_create: the cache is NULL: its block pool is NULL and it has no slots");
  RETURN_ERROR_IF(p->block_size != hybrid_cache_block_size(cache), d, PH_ERR_INVALID_ARGUMENT,
                  "sched_create: block_size %d is not the cache's page size %d", (int)p->block_size,
                  (int)hybrid_cache_block_size(cache));
  sched *s = calloc(1, sizeof *s);
  if (!s) return diag_set(d, PH_ERR_NO_MEMORY, "sched_create: scheduler struct");
  s->p = *p;
  s->cache = cache;
  size_t nb = (size_t)p->max_batch;
  s->max_moves = hybrid_cache_max_slots(cache);
  s->chosen = calloc(nb, sizeof *s->chosen);
  s->sorted = calloc(nb, sizeof *s->sorted);
  s->slots = calloc(nb, sizeof *s->slots);
  s->order = calloc(nb, sizeof *s->order);
  s->tables = calloc(nb, sizeof *s->tables);
  s->moves = calloc((size_t)(s->max_moves > 0 ? s->max_moves : 1), sizeof *s->moves);
  if (!s->chosen || !s->sorted || !s->slots || !s->order || !s->tables || !s->moves) {
    sched_free(s);
    return diag_set(d, PH_ERR_NO_MEMORY, "sched_create: batch storage for max_batch %d",
                    (int)p->max_batch);
  }
  *out = s;
  return PH_OK;
}

void sched_free(sched *s) {
  if (!s) return;
  req_queue *queues[2] = {&s->running, &s->waiting};
  for (int q = 0; q < 2; q++)
    while (queues[q]->head) {
      sched_req *r = queues[q]->head;
      if (sched_finish(s, r, NULL) == PH_OK) continue;
      /* The cache refused (a binding is still active): unlink anyway so freeing terminates. */
      queue_unlink(queues[q], r);
      r->state = SCHED_FINISHED;
      r->owner = NULL;
    }
  free(s->chosen);
  free(s->sorted);
  free(s->slots);
  free(s->order);
  free(s->tables);
  free(s->moves);
  free(s);
}

/* ---- add / finish -----------------------------------------------------------------------------
 */

void sched_set_prefix_hooks(sched *s, const sched_prefix_hooks *h) {
  if (h)
    s->prefix = *h;
  else
    memset(&s->prefix, 0, sizeof s->prefix);
}

ph_status sched_check_fits(const sched *s, int64_t id, int64_t max_total, diag *d) {
  /* Blocks for max_total, computed here without overflow for any int64 count. */
  const int32_t usable = hybrid_cache_n_blocks(s->cache) - 1;
  const int64_t need = max_total / s->p.block_size + (max_total % s->p.block_size != 0);
  RETURN_ERROR_IF(need > usable, d, PH_ERR_LIMIT,
                  "sched_add: request %lld can never fit: max_total %lld tokens need %lld "
                  "blocks of %d tokens, the pool has %d",
                  (long long)id, (long long)max_total, (long long)need, (int)s->p.block_size,
                  (int)usable);
  return PH_OK;
}

ph_status sched_add(sched *s, sched_req *r, diag *d) {
  RETURN_ERROR_IF(!s || !r, d, PH_ERR_INVALID_ARGUMENT, "sched_add: NULL %s",
                  !s ? "scheduler" : "request");
  RETURN_ERROR_IF(r->state != SCHED_FINISHED && r->owner, d, PH_ERR_INVALID_ARGUMENT,
                  "sched_add: request %lld is already queued (state %d)", (long long)r->id,
                  (int)r->state);
  RETURN_ERROR_IF(r->n_prompt < 1, d, PH_ERR_INVALID_ARGUMENT,
                  "sched_add: request %lld: n_prompt %lld must be >= 1", (long long)r->id,
                  (long long)r->n_prompt);
  RETURN_ERROR_IF(r->n_total < r->n_prompt, d, PH_ERR_INVALID_ARGUMENT,
                  "sched_add: request %lld: n_total %lld is below n_prompt %lld", (long long)r->id,
                  (long long)r->n_total, (long long)r->n_prompt);
  RETURN_ERROR_IF(r->max_total < r->n_total, d, PH_ERR_INVALID_ARGUMENT,
                  "sched_add: request %lld: max_total %lld is below n_total %lld", (long long)r->id,
                  (long long)r->max_total, (long long)r->n_total);
  FORWARD_IF_ERROR(sched_check_fits(s, r->id, r->max_total, d));
  const int64_t need = r->max_total / s->p.block_size + (r->max_total % s->p.block_size != 0);
  /* The table's ids storage is sized for max_total now so that hybrid_cache_reserve never grows
   * it inside sched_schedule (block_table storage is plain heap: see block_pool.h).
   * Storage the caller put there already (large enough, holding no blocks) is taken over
   * instead, so an engine can allocate it outside its step loop. */
  if (!(r->blocks.ids && r->blocks.n_blocks == 0 && r->blocks.capacity >= need)) {
    int32_t *ids = malloc((size_t)(need > 0 ? need : 1) * sizeof *ids);
    RETURN_ERROR_IF(!ids, d, PH_ERR_NO_MEMORY, "sched_add: request %lld: table of %d blocks",
                    (long long)r->id, (int)need);
    free(r->blocks.ids); /* too small: replaced (r holds no blocks) */
    r->blocks.ids = ids;
    r->blocks.capacity = need > 0 ? (int32_t)need : 1;
  }
  r->blocks.n_blocks = 0;
  r->n_computed = 0;
  r->slot = -1;
  r->n_preemptions = 0;
  r->state = SCHED_WAITING;
  r->owner = s;
  queue_push_back(&s->waiting, r);
  s->work++;
  return PH_OK;
}

ph_status sched_finish(sched *s, sched_req *r, diag *d) {
  RETURN_ERROR_IF(!s || !r, d, PH_ERR_INVALID_ARGUMENT, "sched_finish: NULL %s",
                  !s ? "scheduler" : "request");
  if (r->state == SCHED_FINISHED) return PH_OK;
  RETURN_ERROR_IF(r->owner != s, d, PH_ERR_INVALID_ARGUMENT,
                  "sched_finish: request %lld is not queued in this scheduler", (long long)r->id);
  FORWARD_IF_ERROR(hybrid_cache_release(s->cache, &r->blocks, &r->slot, d));
  free(r->blocks.ids); /* the storage sched_add gave it, or took over */
  block_table_init(&r->blocks);
  queue_unlink(r->state == SCHED_RUNNING ? &s->running : &s->waiting, r);
  r->state = SCHED_FINISHED;
  r->owner = NULL;
  s->work++;
  return PH_OK;
}

/* ---- schedule ----------------------------------------------------------------------------------
 */

/* Preemption by recompute: pages and slot go back, the table keeps its storage (no allocation
 * when it runs again), and the request waits at the front of the queue. */
static ph_status preempt(sched *s, sched_req *r, diag *d) {
  FORWARD_IF_ERROR(hybrid_cache_release(s->cache, &r->blocks, &r->slot, d));
  r->n_computed = 0;
  r->n_preemptions++;
  queue_unlink(&s->running, r);
  r->state = SCHED_WAITING;
  queue_push_front(&s->waiting, r);
  return PH_OK;
}

/* Moves live slots down to [0, used) and re-points the running requests that moved. */
static ph_status compact_slots(sched *s, diag *d) {
  int32_t n_moves = 0;
  FORWARD_IF_ERROR(hybrid_cache_compact(s->cache, s->moves, s->max_moves, &n_moves, d));
  for (int32_t m = 0; m < n_moves; m++)
    for (sched_req *r = s->running.head; r; r = r->next) {
      s->work++;
      if (r->slot == s->moves[m].from) {
        r->slot = s->moves[m].to;
        break;
      }
    }
  return PH_OK;
}

/* has_state: the cache holds fixed state, so a running request holds a slot. */
static ph_status check_request(const sched_req *r, int has_state, diag *d) {
  const char *why = NULL;
  if (r->n_total > r->max_total)
    why = "n_total is above max_total";
  else if (r->n_total < r->n_prompt)
    why = "n_total is below n_prompt";
  else if (r->n_computed > r->n_total)
    why = "n_computed is above n_total";
  else if (r->state == SCHED_RUNNING && has_state && r->slot < 0)
    why = "running without a state slot";
  if (!why) return PH_OK;
  return diag_set(d, PH_ERR_INVALID_ARGUMENT,
                  "sched_schedule: request %lld: %s (n_prompt %lld, n_computed %lld, n_total "
                  "%lld, max_total %lld)",
                  (long long)r->id, why, (long long)r->n_prompt, (long long)r->n_computed,
                  (long long)r->n_total, (long long)r->max_total);
}

static void add_entry(sched *s, int32_t *n, sched_req *r, int64_t len, int64_t n_draft) {
  sched_entry *e = &s->chosen[(*n)++];
  e->req = r;
  e->start = r->n_computed;
  e->n_tokens = len + n_draft;
  e->n_draft = n_draft;
  e->sample = r->n_computed + len == r->n_total;
}

/* The drafts r may verify in a step with `budget` tokens left for its chunk of len tokens: only
 * after its decode token, never past max_total or the budget. */
static int64_t drafts_of(const sched_req *r, int64_t len, int64_t budget) {
  if (r->n_draft <= 0 || len != 1 || r->n_computed + 1 != r->n_total) return 0;
  int64_t k = r->n_draft;
  if (k > r->max_total - r->n_total) k = r->max_total - r->n_total;
  if (k > budget - len) k = budget - len;
  return k > 0 ? k : 0;
}

ph_status sched_schedule(sched *s, sched_batch *out, diag *d) {
  RETURN_ERROR_IF(!s || !out, d, PH_ERR_INVALID_ARGUMENT, "sched_schedule: NULL %s",
                  !s ? "scheduler" : "batch");
  memset(out, 0, sizeof *out);
  /* Every request this call may touch: the running ones and the first max_batch waiting ones
   * (admission takes at most that many). The rest of the queue is checked as it comes within
   * max_batch of its head, so a step costs O(running + max_batch), not O(queued). */
  const int has_state = hybrid_cache_has_state(s->cache);
  for (const sched_req *r = s->running.head; r; r = r->next) {
    s->work++;
    FORWARD_IF_ERROR(check_request(r, has_state, d));
  }
  int32_t n_checked = 0;
  for (const sched_req *r = s->waiting.head; r && n_checked < s->p.max_batch; r = r->next) {
    s->work++;
    n_checked++;
    FORWARD_IF_ERROR(check_request(r, has_state, d));
  }
  /* Holes left by finished requests; also refuses (changing nothing) while a step is bound. */
  FORWARD_IF_ERROR(compact_slots(s, d));

  int64_t budget = s->p.max_tokens;
  int32_t n = 0, n_preempted = 0, n_admitted = 0;
  diag local; /* a reservation refused for lack of room is handled here, not reported */

  /* 1. running requests, oldest first; victims are taken from the tail (newest), which is never
   * a request scheduled earlier in this pass (those precede r). */
  for (sched_req *r = s->running.head; r && n < s->p.max_batch;) {
    s->work++;
    int64_t len = chunk_of(s, r);
    if (len == 0 || len > budget) {
      r = r->next;
      continue;
    }
    int64_t k = drafts_of(r, len, budget);
    for (;;) {
      ph_status st =
          hybrid_cache_reserve(s->cache, &r->blocks, &r->slot, r->n_computed + len + k, &local);
      if (st == PH_OK) break;
      if (st != PH_ERR_LIMIT) {
        diag_copy(d, &local);
        return st;
      }
      if (k > 0) { /* drafts are optional: drop them before preempting anyone */
        k = 0;
        continue;
      }
      sched_req *victim = s->running.tail;
      FORWARD_IF_ERROR(preempt(s, victim, d));
      n_preempted++;
      if (victim == r) break;
    }
    if (r->state != SCHED_RUNNING) break; /* r was the newest: nothing runs after it */
    add_entry(s, &n, r, len, k);
    budget -= len + k;
    r = r->next;
  }

  /* 2. admissions, FIFO, none when this step had to preempt (the pool is short). */
  while (n_preempted == 0 && s->waiting.head && n < s->p.max_batch) {
    sched_req *w = s->waiting.head;
    s->work++;
    if (s->prefix.acquire) w->n_computed = s->prefix.acquire(s->prefix.ctx, w);
    int64_t len = chunk_of(s, w);
    /* a slot and the blocks of the first chunk, together or not at all */
    ph_status st = len == 0 || len > budget ? PH_ERR_LIMIT
                                            : hybrid_cache_reserve(s->cache, &w->blocks, &w->slot,
                                                                   w->n_computed + len, &local);
    if (st == PH_ERR_LIMIT) { /* no room: the cached prefix goes back, w waits */
      if (w->blocks.n_blocks > 0)
        FORWARD_IF_ERROR(hybrid_cache_release(s->cache, &w->blocks, &w->slot, d));
      w->n_computed = 0;
      break;
    }
    if (st != PH_OK) {
      diag_copy(d, &local);
      return st;
    }
    if (s->prefix.admitted) FORWARD_IF_ERROR(s->prefix.admitted(s->prefix.ctx, w, d));
    queue_unlink(&s->waiting, w);
    w->state = SCHED_RUNNING;
    queue_push_back(&s->running, w);
    add_entry(s, &n, w, len, 0);
    budget -= len;
    n_admitted++;
  }

  /* 3. holes left by preemption, then the batch by ascending slot. */
  FORWARD_IF_ERROR(compact_slots(s, d));
  for (int32_t i = 0; i < n; i++) s->slots[i] = s->chosen[i].req->slot;
  hybrid_cache_slot_order(s->slots, n, s->order);
  for (int32_t i = 0; i < n; i++) {
    s->sorted[i] = s->chosen[s->order[i]];
    s->slots[i] = s->sorted[i].req->slot;
    s->tables[i] = &s->sorted[i].req->blocks;
  }

  s->step++;
  s->step_committed = 0;
  out->entries = s->sorted;
  out->slots = s->slots;
  out->tables = s->tables;
  out->n_entries = n;
  out->slots_are_slice = n > 0 && hybrid_cache_slots_are_slice(s->slots, n);
  out->n_tokens = s->p.max_tokens - budget;
  out->n_preempted = n_preempted;
  out->n_admitted = n_admitted;
  out->step = s->step;
  return PH_OK;
}

ph_status sched_commit(sched *s, const sched_batch *b, diag *d) {
  return sched_commit_kept(s, b, NULL, d);
}

ph_status sched_commit_kept(sched *s, const sched_batch *b, const int64_t *n_kept, diag *d) {
  RETURN_ERROR_IF(!s || !b, d, PH_ERR_INVALID_ARGUMENT, "sched_commit: NULL %s",
                  !s ? "scheduler" : "batch");
  RETURN_ERROR_IF(b->step == 0 || b->step != s->step, d, PH_ERR_INVALID_ARGUMENT,
                  "sched_commit: batch of step %llu is not the latest (step %llu)",
                  (unsigned long long)b->step, (unsigned long long)s->step);
  RETURN_ERROR_IF(s->step_committed, d, PH_ERR_INVALID_ARGUMENT,
                  "sched_commit: batch of step %llu was already committed",
                  (unsigned long long)b->step);
  for (int32_t i = 0; n_kept && i < b->n_entries; i++)
    RETURN_ERROR_IF(n_kept[i] < 1 || n_kept[i] > b->entries[i].n_tokens, d, PH_ERR_INVALID_ARGUMENT,
                    "sched_commit: entry %d (request %lld) keeps %lld of its %lld tokens", (int)i,
                    (long long)b->entries[i].req->id, (long long)n_kept[i],
                    (long long)b->entries[i].n_tokens);
  for (int32_t i = 0; i < b->n_entries; i++) {
    const sched_entry *e = &b->entries[i];
    sched_req *r = e->req;
    if (r->state != SCHED_RUNNING || r->owner != s || r->n_computed != e->start) continue;
    r->n_computed += n_kept ? n_kept[i] : e->n_tokens;
  }
  for (int32_t i = 0; i < b->n_entries; i++) b->entries[i].req->n_draft = 0;
  s->step_committed = 1;
  return PH_OK;
}

/* ---- inspection -------------------------------------------------------------------------------
 */

int32_t sched_n_waiting(const sched *s) { return s->waiting.n; }
uint64_t sched_work(const sched *s) { return s->work; }
int32_t sched_n_running(const sched *s) { return s->running.n; }
sched_req *sched_running_first(const sched *s) { return s->running.head; }
sched_req *sched_waiting_first(const sched *s) { return s->waiting.head; }
const sched_params *sched_get_params(const sched *s) { return &s->p; }
