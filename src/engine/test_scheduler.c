/* test_scheduler — the continuous-batching scheduler driven with fake requests (no model):
 * the chunk rule, budget and batch caps, FIFO admission, preemption by recompute, refusals,
 * and a randomized run checking every pool invariant after every step. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "cache/block_pool.h"
#include "cache/hybrid_cache.h"
#include "cache/state_pool.h"
#include "check.h"
#include "engine/scheduler.h"

/* ---- fixtures -------------------------------------------------------------------------------- */

static const int32_t one_layer[1] = {0};

typedef struct env {
  hybrid_cache *cache;
  block_pool *kv; /* the cache's parts, for the checks */
  state_pool *st;
  sched *s;
} env;

/* A scheduler over a cache of n_blocks KV ids (one is the null block; no full-attention layer, so
 * no page memory) and max_slots tiny state slots. */
static int env_open(env *e, sched_params p, int32_t n_blocks, int32_t max_slots) {
  diag d;
  memset(e, 0, sizeof *e);
  state_geometry g = {.n_linear = 1,
                      .linear_layers = one_layer,
                      .conv_dim = 2,
                      .conv_kernel = 2,
                      .n_v_heads = 1,
                      .head_v = 2,
                      .head_k = 2,
                      .io_dtype = PH_DTYPE_F32,
                      .max_slots = max_slots};
  hybrid_cache_params cp = {.kv = {.n_full = 0,
                                   .n_kv_heads = 1,
                                   .head_size = 1,
                                   .block_size = p.block_size,
                                   .n_blocks = n_blocks,
                                   .dtype = PH_DTYPE_F32},
                            .state = g};
  int ok = 1;
  CHECK_STATUS(hybrid_cache_create(&cp, &e->cache, &d), PH_OK, d.msg);
  if (e->cache) {
    e->kv = hybrid_cache_blocks(e->cache);
    e->st = hybrid_cache_states(e->cache);
    ph_status s = sched_create(&p, e->cache, &e->s, &d);
    CHECK_STATUS(s, PH_OK, d.msg);
    ok = s == PH_OK;
  } else {
    ok = 0;
  }
  return ok;
}

/* The same over a cache with no fixed state (DeepSeek MLA: latent pages only): requests hold
 * no slot, whatever max_slots says (it is 1 here: a cache that still handed out slots would admit
 * one request at a time). */
static int env_open_stateless(env *e, sched_params p, int32_t n_blocks) {
  diag d;
  memset(e, 0, sizeof *e);
  hybrid_cache_params cp = {.kv = {.n_full = 0,
                                   .n_kv_heads = 1,
                                   .head_size = 1,
                                   .block_size = p.block_size,
                                   .n_blocks = n_blocks,
                                   .dtype = PH_DTYPE_F32,
                                   .key_only = 1},
                            .state = {.n_linear = 0,
                                      .conv_dim = 1,
                                      .conv_kernel = 2,
                                      .n_v_heads = 1,
                                      .head_v = 1,
                                      .head_k = 1,
                                      .io_dtype = PH_DTYPE_F32,
                                      .max_slots = 1}};
  CHECK_STATUS(hybrid_cache_create(&cp, &e->cache, &d), PH_OK, d.msg);
  if (!e->cache) return 0;
  e->kv = hybrid_cache_blocks(e->cache);
  e->st = hybrid_cache_states(e->cache);
  ph_status s = sched_create(&p, e->cache, &e->s, &d);
  CHECK_STATUS(s, PH_OK, d.msg);
  return s == PH_OK;
}

static void env_close(env *e) {
  sched_free(e->s);
  hybrid_cache_free(e->cache);
}

static sched_params params(int32_t max_batch, int64_t max_tokens, int64_t chunk, int32_t bs) {
  sched_params p = {
      .max_batch = max_batch, .max_tokens = max_tokens, .prefill_chunk = chunk, .block_size = bs};
  return p;
}

/* What the engine does after running a batch: commit, then every entry that ends at n_total
 * samples one token; a request that reached max_total is finished. */
static void engine_after_step(sched *s, const sched_batch *b) {
  diag d;
  CHECK_STATUS(sched_commit(s, b, &d), PH_OK, d.msg);
  for (int32_t i = 0; i < b->n_entries; i++) {
    sched_req *r = b->entries[i].req;
    if (r->state != SCHED_RUNNING || !b->entries[i].sample) continue;
    CHECK_EQ_INT(r->n_computed, r->n_total);
    if (r->n_total < r->max_total) r->n_total++;
    if (r->n_total == r->max_total) CHECK_STATUS(sched_finish(s, r, &d), PH_OK, d.msg);
  }
}

/* Chunk log of one request: the (start, n) it ran, restarted when it is preempted. */
#define LOG_MAX 512
typedef struct chunk_log {
  int64_t start[LOG_MAX], n[LOG_MAX];
  int32_t len;
  int64_t preemptions_seen;
} chunk_log;

static void log_batch(const sched_batch *b, const sched_req *reqs, chunk_log *logs, int n_reqs) {
  for (int32_t i = 0; i < b->n_entries; i++) {
    const sched_req *r = b->entries[i].req;
    int k = (int)(r - reqs);
    if (k < 0 || k >= n_reqs) continue;
    chunk_log *l = &logs[k];
    if (r->n_preemptions != l->preemptions_seen) { /* recomputing from 0: a new log */
      l->len = 0;
      l->preemptions_seen = r->n_preemptions;
    }
    if (l->len < LOG_MAX) {
      l->start[l->len] = b->entries[i].start;
      l->n[l->len] = b->entries[i].n_tokens;
      l->len++;
    }
  }
}

/* ---- the chunk rule -------------------------------------------------------------------------- */

static void test_chunk_rule(void) {
  /* prompt 150, chunk 64: 64, 64, 22, then single tokens */
  CHECK_EQ_INT(sched_chunk_len(64, 150, 150, 0), 64);
  CHECK_EQ_INT(sched_chunk_len(64, 150, 150, 64), 64);
  CHECK_EQ_INT(sched_chunk_len(64, 150, 150, 128), 22);
  CHECK_EQ_INT(sched_chunk_len(64, 150, 150, 150), 0); /* nothing to run until a token comes */
  CHECK_EQ_INT(sched_chunk_len(64, 150, 151, 150), 1);
  CHECK_EQ_INT(sched_chunk_len(64, 150, 170, 150), 1); /* replay after preemption: one by one */
  CHECK_EQ_INT(sched_chunk_len(64, 150, 170, 169), 1);
  /* boundaries are the multiples of the chunk, whatever n_computed is */
  CHECK_EQ_INT(sched_chunk_len(64, 150, 150, 10), 54);
  CHECK_EQ_INT(sched_chunk_len(1, 5, 5, 3), 1);
  CHECK_EQ_INT(sched_chunk_len(64, 1, 1, 0), 1);
  CHECK_EQ_INT(sched_chunk_len(0, 5, 5, 0), 0);
  CHECK_EQ_INT(sched_chunk_len(64, 5, 5, -1), 0);

  /* the same through the scheduler, alone: 64, 64, 22, then 1 per step */
  env e;
  if (!env_open(&e, params(4, 64, 64, 16), 64, 4)) return;
  diag d;
  sched_req r;
  sched_req_init(&r, 7, 150, 5);
  CHECK_STATUS(sched_add(e.s, &r, &d), PH_OK, d.msg);
  const int64_t want_start[] = {0, 64, 128, 150, 151, 152, 153};
  const int64_t want_n[] = {64, 64, 22, 1, 1, 1, 1};
  const int32_t want_sample[] = {0, 0, 1, 1, 1, 1, 1};
  for (int step = 0; step < 7; step++) {
    sched_batch b;
    CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
    CHECK_EQ_INT(b.n_entries, 1);
    if (b.n_entries != 1) break;
    CHECK_EQ_INT(b.entries[0].start, want_start[step]);
    CHECK_EQ_INT(b.entries[0].n_tokens, want_n[step]);
    CHECK_EQ_INT(b.entries[0].sample, want_sample[step]);
    CHECK_EQ_INT(b.slots[0], r.slot);
    CHECK(b.tables[0] == &r.blocks);
    CHECK_EQ_INT(b.slots_are_slice, 1);
    engine_after_step(e.s, &b);
  }
  CHECK_EQ_INT(r.state, SCHED_FINISHED); /* 150 + 5 = max_total reached */
  CHECK_EQ_INT(r.n_total, 155);
  CHECK_EQ_INT(block_pool_used_count(e.kv), 0);
  CHECK_EQ_INT(state_pool_used_count(e.st), 0);
  env_close(&e);
}

/* Each request's chunk list is the same alone and among many others under a tight budget (and a
 * small pool that preempts: then the list after the last preemption is compared). */
#define CROWD 24
static void run_crowd(sched_params p, int32_t n_blocks, int32_t slots, int only, sched_req *reqs,
                      chunk_log *logs, int64_t *n_preempt) {
  env e;
  if (!env_open(&e, p, n_blocks, slots)) return;
  diag d;
  rng g = rng_seed(11);
  memset(logs, 0, sizeof(chunk_log) * CROWD);
  for (int i = 0; i < CROWD; i++) {
    int64_t prompt = 1 + (int64_t)rng_below(&g, 200), max_new = 1 + (int64_t)rng_below(&g, 30);
    sched_req_init(&reqs[i], i, prompt, max_new);
    if (only < 0 || only == i) CHECK_STATUS(sched_add(e.s, &reqs[i], &d), PH_OK, d.msg);
  }
  *n_preempt = 0;
  for (int step = 0; step < 20000 && sched_n_running(e.s) + sched_n_waiting(e.s) > 0; step++) {
    sched_batch b;
    CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
    *n_preempt += b.n_preempted;
    log_batch(&b, reqs, logs, CROWD);
    engine_after_step(e.s, &b);
  }
  CHECK_EQ_INT(sched_n_running(e.s) + sched_n_waiting(e.s), 0);
  env_close(&e);
}

static void test_chunks_alone_vs_crowd(void) {
  static sched_req alone_reqs[CROWD], crowd_reqs[CROWD];
  static chunk_log alone[CROWD], one[CROWD], crowd[CROWD];
  int64_t np = 0;
  for (int i = 0; i < CROWD; i++) {
    run_crowd(params(8, 1000, 64, 16), 512, 8, i, alone_reqs, one, &np);
    alone[i] = one[i];
    CHECK_EQ_INT(np, 0);
  }
  /* tight: 3 sequences, 70 tokens a step, roomy pool */
  run_crowd(params(3, 70, 64, 16), 512, 8, -1, crowd_reqs, crowd, &np);
  CHECK_EQ_INT(np, 0);
  for (int i = 0; i < CROWD; i++) {
    CHECK_EQ_INT(crowd[i].len, alone[i].len);
    for (int32_t j = 0; j < crowd[i].len && j < alone[i].len; j++) {
      CHECK_EQ_INT(crowd[i].start[j], alone[i].start[j]);
      CHECK_EQ_INT(crowd[i].n[j], alone[i].n[j]);
    }
  }
  /* tight and a small pool: preemptions happen, resumed runs follow the same rule (the log
   * after a preemption holds the recompute from 0: prompt chunks, then the replay one by one,
   * then new tokens, which is the alone list exactly) */
  run_crowd(params(6, 100, 64, 16), 1 + 20, 6, -1, crowd_reqs, crowd, &np);
  CHECK(np > 0);
  for (int i = 0; i < CROWD; i++) {
    CHECK_EQ_INT(crowd[i].len, alone[i].len);
    for (int32_t j = 0; j < crowd[i].len && j < alone[i].len; j++) {
      CHECK_EQ_INT(crowd[i].start[j], alone[i].start[j]);
      CHECK_EQ_INT(crowd[i].n[j], alone[i].n[j]);
    }
  }
}

/* ---- caps, order, FIFO ----------------------------------------------------------------------- */

static void test_caps_and_fifo(void) {
  diag d;
  sched_batch b;
  /* batch cap: 5 waiting, max_batch 3 */
  env e;
  if (!env_open(&e, params(3, 100, 16, 4), 64, 8)) return;
  sched_req r[5];
  for (int i = 0; i < 5; i++) {
    sched_req_init(&r[i], i, 4, 3);
    CHECK_STATUS(sched_add(e.s, &r[i], &d), PH_OK, d.msg);
  }
  CHECK_EQ_INT(sched_n_waiting(e.s), 5);
  CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
  CHECK_EQ_INT(b.n_entries, 3);
  CHECK_EQ_INT(b.n_admitted, 3);
  CHECK_EQ_INT(b.n_tokens, 12);
  CHECK_EQ_INT(r[0].state, SCHED_RUNNING);
  CHECK_EQ_INT(r[2].state, SCHED_RUNNING);
  CHECK_EQ_INT(r[3].state, SCHED_WAITING);
  CHECK(sched_waiting_first(e.s) == &r[3]);
  CHECK(sched_running_first(e.s) == &r[0]);
  CHECK_EQ_INT(b.slots_are_slice, 1);
  for (int32_t i = 0; i < b.n_entries; i++) CHECK_EQ_INT(b.slots[i], i);
  engine_after_step(e.s, &b);
  /* the three running ones decode first; the batch is full, nobody is admitted */
  CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
  CHECK_EQ_INT(b.n_entries, 3);
  CHECK_EQ_INT(b.n_admitted, 0);
  CHECK_EQ_INT(b.n_tokens, 3);
  engine_after_step(e.s, &b);
  env_close(&e);

  /* budget and no overtaking: A (50) runs; B (20) does not fit the 14 left, so C (10), which
   * would fit, must not overtake B */
  if (!env_open(&e, params(8, 64, 64, 4), 128, 8)) return;
  sched_req a, bb, c;
  sched_req_init(&a, 1, 50, 4);
  sched_req_init(&bb, 2, 20, 4);
  sched_req_init(&c, 3, 10, 4);
  CHECK_STATUS(sched_add(e.s, &a, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_add(e.s, &bb, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_add(e.s, &c, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
  CHECK_EQ_INT(b.n_entries, 1);
  CHECK(b.entries[0].req == &a);
  CHECK_EQ_INT(b.n_tokens, 50);
  CHECK_EQ_INT(bb.state, SCHED_WAITING);
  CHECK_EQ_INT(c.state, SCHED_WAITING);
  CHECK_EQ_INT(c.slot, -1);
  engine_after_step(e.s, &b);
  /* running first (A's decode), then B and C in order: 1 + 20 + 10 */
  CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
  CHECK_EQ_INT(b.n_entries, 3);
  CHECK_EQ_INT(b.n_tokens, 31);
  CHECK_EQ_INT(b.n_admitted, 2);
  CHECK(sched_running_first(e.s) == &a);
  CHECK(a.next == &bb && bb.next == &c);
  engine_after_step(e.s, &b);
  env_close(&e);

  /* running before waiting: a running prompt chunk takes the budget even though a short
   * request waits */
  if (!env_open(&e, params(8, 64, 64, 4), 128, 8)) return;
  sched_req big, small;
  sched_req_init(&big, 1, 200, 2);
  sched_req_init(&small, 2, 1, 2);
  CHECK_STATUS(sched_add(e.s, &big, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg); /* big: [0, 64) */
  engine_after_step(e.s, &b);
  CHECK_STATUS(sched_add(e.s, &small, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg); /* big: [64, 128); 0 left */
  CHECK_EQ_INT(b.n_entries, 1);
  CHECK(b.entries[0].req == &big);
  CHECK_EQ_INT(b.entries[0].start, 64);
  CHECK_EQ_INT(small.state, SCHED_WAITING);
  engine_after_step(e.s, &b);
  CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg); /* big: [128, 192); again */
  CHECK_EQ_INT(b.n_entries, 1);
  CHECK_EQ_INT(small.state, SCHED_WAITING);
  engine_after_step(e.s, &b);
  CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg); /* big: [192, 200); small fits */
  CHECK_EQ_INT(b.n_entries, 2);
  CHECK_EQ_INT(b.n_tokens, 9);
  CHECK_EQ_INT(small.state, SCHED_RUNNING);
  engine_after_step(e.s, &b);
  env_close(&e);
}

/* ---- preemption ------------------------------------------------------------------------------ */

static void test_preemption(void) {
  diag d;
  sched_batch b;
  env e;
  /* 6 usable blocks of 4 tokens; A and B (prompt 8 = 2 blocks each, growing by one token a step);
   * C waits behind them. */
  if (!env_open(&e, params(4, 16, 8, 4), 1 + 6, 4)) return;
  sched_req a, bq, c;
  sched_req_init(&a, 1, 8, 8); /* grows to 4 blocks, then finishes */
  sched_req_init(&bq, 2, 8, 12);
  sched_req_init(&c, 3, 4, 2);
  CHECK_STATUS(sched_add(e.s, &a, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_add(e.s, &bq, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
  CHECK_EQ_INT(b.n_admitted, 2);
  engine_after_step(e.s, &b);
  CHECK_STATUS(sched_add(e.s, &c, &d), PH_OK, d.msg);
  int64_t b_total_at_preemption = -1;
  int step = 0;
  for (; step < 100 && bq.n_preemptions == 0; step++) {
    CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
    if (b.n_preempted) {
      /* the victim is the most recently admitted (B, not A), and it let go of everything */
      CHECK_EQ_INT(b.n_preempted, 1);
      CHECK_EQ_INT(bq.n_preemptions, 1);
      CHECK_EQ_INT(a.n_preemptions, 0);
      CHECK_EQ_INT(bq.state, SCHED_WAITING);
      CHECK_EQ_INT(bq.slot, -1);
      CHECK_EQ_INT(bq.blocks.n_blocks, 0);
      CHECK_EQ_INT(bq.n_computed, 0);
      CHECK_EQ_INT(bq.n_prompt, 8);
      CHECK(bq.n_total > 8); /* keeps its generated tokens */
      b_total_at_preemption = bq.n_total;
      CHECK(sched_waiting_first(e.s) == &bq); /* ahead of C, which waited before */
      CHECK(bq.next == &c);
      CHECK_EQ_INT(b.n_admitted, 0); /* never admit in a step that had to preempt */
      CHECK_EQ_INT(block_pool_used_count(e.kv), a.blocks.n_blocks);
      CHECK_EQ_INT(state_pool_used_count(e.st), 1);
      CHECK_EQ_INT(b.n_entries, 1);
      CHECK(b.entries[0].req == &a);
    }
    engine_after_step(e.s, &b);
  }
  CHECK_EQ_INT(bq.n_preemptions, 1);
  CHECK_EQ_INT(b_total_at_preemption, 13);
  /* B resumes first (before C), recomputing from 0: its prompt chunk, then its generated tokens
   * one per step without sampling, then sampling again from token 13 on. Right after resuming,
   * A still holds 4 blocks, so B (again the newest) is preempted once more when it needs its
   * third: the log restarts at each preemption and the last one must be the whole rule. */
  chunk_log lb;
  memset(&lb, 0, sizeof lb);
  lb.preemptions_seen = bq.n_preemptions;
  int b_admitted_step = -1, c_admitted_step = -1;
  for (step = 0; step < 500 && (bq.state != SCHED_FINISHED || c.state != SCHED_FINISHED); step++) {
    CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
    for (int32_t i = 0; i < b.n_entries; i++) {
      const sched_entry *en = &b.entries[i];
      if (en->req == &bq) {
        if (b_admitted_step < 0) b_admitted_step = step;
        CHECK_EQ_INT(en->sample, en->start + en->n_tokens >= b_total_at_preemption);
      }
      if (en->req == &c && c_admitted_step < 0) c_admitted_step = step;
    }
    log_batch(&b, &bq, &lb, 1);
    engine_after_step(e.s, &b);
  }
  CHECK(b_admitted_step >= 0);
  CHECK(c_admitted_step >= b_admitted_step);
  CHECK_EQ_INT(bq.n_preemptions, 2);
  CHECK_EQ_INT(lb.len, 1 + 11); /* [0, 8), then 8..18 singly; token 19 is sampled, not run */
  if (lb.len == 12) {
    CHECK_EQ_INT(lb.start[0], 0);
    CHECK_EQ_INT(lb.n[0], 8);
    for (int32_t j = 1; j < lb.len; j++) {
      CHECK_EQ_INT(lb.start[j], 8 + (j - 1));
      CHECK_EQ_INT(lb.n[j], 1);
    }
  }
  CHECK_EQ_INT(bq.state, SCHED_FINISHED);
  CHECK_EQ_INT(bq.n_total, 20);
  if (a.state != SCHED_FINISHED) CHECK_STATUS(sched_finish(e.s, &a, &d), PH_OK, d.msg);
  CHECK_EQ_INT(block_pool_used_count(e.kv), 0);
  CHECK_EQ_INT(state_pool_used_count(e.st), 0);
  env_close(&e);

  /* the victim can be the request being scheduled: A (older) fits, B (the newest) needs a block
   * and no newer request is left, so B preempts itself and A still runs */
  if (!env_open(&e, params(4, 16, 8, 4), 1 + 3, 4)) return;
  sched_req_init(&a, 1, 6, 4);  /* 2 blocks; tokens 6 and 7 still fit */
  sched_req_init(&bq, 2, 4, 4); /* 1 block; token 4 needs a second */
  CHECK_STATUS(sched_add(e.s, &a, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_add(e.s, &bq, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
  CHECK_EQ_INT(b.n_admitted, 2);
  CHECK_EQ_INT(block_pool_free_count(e.kv), 0);
  engine_after_step(e.s, &b);
  CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
  CHECK_EQ_INT(b.n_preempted, 1);
  CHECK_EQ_INT(b.n_entries, 1);
  CHECK(b.entries[0].req == &a);
  CHECK_EQ_INT(bq.state, SCHED_WAITING);
  CHECK_EQ_INT(a.n_preemptions, 0);
  CHECK_EQ_INT(block_pool_used_count(e.kv), 2);
  engine_after_step(e.s, &b);
  env_close(&e); /* frees with requests still linked: everything goes back */
}

/* A model without fixed state: requests run holding pages and no slot; preemption frees pages
 * only and the victim is readmitted and recomputed, as with slots. */
static void test_stateless_cache(void) {
  diag d;
  sched_batch b;
  env e;
  if (!env_open_stateless(&e, params(4, 16, 8, 4), 1 + 6)) return;
  CHECK_EQ_INT(hybrid_cache_max_slots(e.cache), 0);
  sched_req a, bq, c;
  sched_req_init(&a, 1, 8, 8);
  sched_req_init(&bq, 2, 8, 12);
  sched_req_init(&c, 3, 4, 2);
  CHECK_STATUS(sched_add(e.s, &a, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_add(e.s, &bq, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
  CHECK_EQ_INT(b.n_admitted, 2); /* no slot needed: both at once */
  CHECK_EQ_INT(b.n_entries, 2);
  CHECK_EQ_INT(a.slot, -1);
  CHECK_EQ_INT(bq.slot, -1);
  engine_after_step(e.s, &b);
  CHECK_STATUS(sched_add(e.s, &c, &d), PH_OK, d.msg);
  int preempted_steps = 0, max_running = 0;
  for (int step = 0; step < 500 && (a.state != SCHED_FINISHED || bq.state != SCHED_FINISHED ||
                                    c.state != SCHED_FINISHED);
       step++) {
    CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
    preempted_steps += b.n_preempted > 0;
    for (int32_t i = 0; i < b.n_entries; i++) CHECK_EQ_INT(b.slots[i], -1);
    if (sched_n_running(e.s) > max_running) max_running = sched_n_running(e.s);
    CHECK_EQ_INT(hybrid_cache_slots_used(e.cache), 0);
    engine_after_step(e.s, &b);
  }
  CHECK(preempted_steps > 0);
  CHECK(bq.n_preemptions > 0);
  CHECK(max_running >= 2);
  CHECK_EQ_INT(a.state, SCHED_FINISHED);
  CHECK_EQ_INT(bq.state, SCHED_FINISHED);
  CHECK_EQ_INT(c.state, SCHED_FINISHED);
  CHECK_EQ_INT(bq.n_total, 20); /* recomputed after preemption, then ran to the end */
  CHECK_EQ_INT(block_pool_used_count(e.kv), 0);
  env_close(&e);
}

/* ---- refusals, finish, commit, compaction -----------------------------------------------------
 */

static void test_params_and_refusals(void) {
  diag d;
  sched_params p = params(0, 64, 64, 16);
  CHECK_STATUS(sched_params_validate(&p, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "max_batch 0");
  p = params(4, 64, 0, 16);
  CHECK_STATUS(sched_params_validate(&p, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "prefill_chunk 0");
  p = params(4, 32, 64, 16);
  CHECK_STATUS(sched_params_validate(&p, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "max_tokens 32 must be >= prefill_chunk 64");
  p = params(4, 64, 64, 0);
  CHECK_STATUS(sched_params_validate(&p, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "block_size 0");
  p = sched_params_default();
  CHECK_STATUS(sched_params_validate(&p, &d), PH_OK, d.msg);
  sched *s = NULL;
  CHECK_STATUS(sched_create(&p, NULL, &s, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "block pool is NULL");
  CHECK(s == NULL);
  sched_free(NULL);

  env e;
  if (!env_open(&e, params(4, 64, 64, 16), 1 + 4, 2)) return; /* 4 blocks = 64 tokens */
  p = params(4, 64, 64, 8); /* pages of 8 tokens over a cache of 16-token pages */
  CHECK_STATUS(sched_create(&p, e.cache, &s, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "block_size 8 is not the cache's page size 16");
  CHECK(s == NULL);
  sched_req r;
  sched_req_init(&r, 41, 0, 5);
  CHECK_STATUS(sched_add(e.s, &r, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "request 41: n_prompt 0 must be >= 1");
  CHECK_EQ_INT(r.state, SCHED_FINISHED);
  sched_req_init(&r, 42, 10, 5);
  r.n_total = 9;
  CHECK_STATUS(sched_add(e.s, &r, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "request 42: n_total 9 is below n_prompt 10");
  sched_req_init(&r, 43, 10, 5);
  r.n_total = 16;
  CHECK_STATUS(sched_add(e.s, &r, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "max_total 15 is below n_total 16");
  sched_req_init(&r, 44, 60, 5); /* 65 tokens: 5 blocks, the pool has 4 */
  CHECK_STATUS(sched_add(e.s, &r, &d), PH_ERR_LIMIT, d.msg);
  CHECK_CONTAINS(d.msg, "request 44 can never fit");
  CHECK_CONTAINS(d.msg, "need 5 blocks of 16 tokens, the pool has 4");
  CHECK_EQ_INT(r.state, SCHED_FINISHED);
  CHECK(r.blocks.ids == NULL);
  sched_req_init(&r, 45, INT64_MAX - 1, 1);
  CHECK_STATUS(sched_add(e.s, &r, &d), PH_ERR_LIMIT, d.msg);
  sched_req_init(&r, 46, 60, 4); /* exactly 64: fits */
  CHECK_STATUS(sched_add(e.s, &r, &d), PH_OK, d.msg);
  CHECK_EQ_INT(r.blocks.capacity, 4);
  CHECK_STATUS(sched_add(e.s, &r, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "request 46 is already queued");
  CHECK_EQ_INT(sched_n_waiting(e.s), 1);
  /* another scheduler cannot finish it */
  env e2;
  if (env_open(&e2, params(4, 64, 64, 16), 8, 2)) {
    CHECK_STATUS(sched_finish(e2.s, &r, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, "request 46 is not queued in this scheduler");
    env_close(&e2);
  }
  /* a request whose n_total ran past max_total is refused before anything changes */
  sched_batch b;
  r.n_total = r.max_total + 1;
  CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "request 46: n_total is above max_total");
  CHECK_EQ_INT(r.state, SCHED_WAITING);
  r.n_total = r.n_prompt;
  env_close(&e);
}

static void test_finish_and_commit(void) {
  diag d;
  sched_batch b, old;
  env e;
  if (!env_open(&e, params(4, 64, 16, 4), 64, 4)) return;
  sched_req w, r1, r2;
  sched_req_init(&r1, 1, 10, 5);
  sched_req_init(&r2, 2, 10, 5);
  sched_req_init(&w, 3, 60, 5);
  CHECK_STATUS(sched_add(e.s, &r1, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_add(e.s, &r2, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_add(e.s, &w, &d), PH_OK, d.msg);
  /* finishing a waiting request */
  CHECK_STATUS(sched_finish(e.s, &w, &d), PH_OK, d.msg);
  CHECK_EQ_INT(w.state, SCHED_FINISHED);
  CHECK(w.blocks.ids == NULL);
  CHECK_EQ_INT(sched_n_waiting(e.s), 0);
  CHECK_STATUS(sched_finish(e.s, &w, &d), PH_OK, d.msg); /* idempotent */
  /* finishing a running request between schedule and commit: commit skips it */
  CHECK_STATUS(sched_finish(e.s, &r1, &d), PH_OK, d.msg);
  CHECK_EQ_INT(state_pool_used_count(e.st), 1);
  CHECK_EQ_INT(block_pool_used_count(e.kv), r2.blocks.n_blocks);
  CHECK_STATUS(sched_commit(e.s, &b, &d), PH_OK, d.msg);
  CHECK_EQ_INT(r1.n_computed, 0);
  CHECK_EQ_INT(r2.n_computed, 10);
  /* twice, or a stale batch: refused */
  CHECK_STATUS(sched_commit(e.s, &b, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "already committed");
  old = b;
  r2.n_total++;
  CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_commit(e.s, &old, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "is not the latest");
  CHECK_EQ_INT(r2.n_computed, 10);
  CHECK_STATUS(sched_commit(e.s, &b, &d), PH_OK, d.msg);
  CHECK_EQ_INT(r2.n_computed, 11);
  /* a finished request can be added again */
  sched_req_init(&r1, 1, 3, 1);
  CHECK_STATUS(sched_add(e.s, &r1, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_finish(e.s, &r1, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_finish(e.s, &r2, &d), PH_OK, d.msg);
  CHECK_EQ_INT(block_pool_used_count(e.kv), 0);
  CHECK_EQ_INT(state_pool_used_count(e.st), 0);
  /* an idle step: empty batch */
  CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
  CHECK_EQ_INT(b.n_entries, 0);
  CHECK_EQ_INT(b.slots_are_slice, 0);
  CHECK_STATUS(sched_commit(e.s, &b, &d), PH_OK, d.msg);
  env_close(&e);
}

/* Prefix hooks: a fake cache that hands every request the donor's first `give` pages. The
 * scheduler starts the request there (n_computed), runs its chunks on the grid from token 0,
 * calls admitted once it holds a slot, and gives the pages back when there is no room. */
typedef struct fake_prefix {
  block_pool *kv;
  const block_table *donor;
  int64_t give; /* tokens, a multiple of the chunk */
  int32_t block_size;
  int n_acquired, n_admitted;
} fake_prefix;

static int64_t fake_acquire(void *ctx, sched_req *w) {
  fake_prefix *f = ctx;
  f->n_acquired++;
  diag d;
  const int32_t n = (int32_t)(f->give / f->block_size);
  if (block_table_share(&w->blocks, f->kv, n, f->donor->ids, &d) != PH_OK) return 0;
  return f->give;
}

static ph_status fake_admitted(void *ctx, sched_req *w, diag *d) {
  fake_prefix *f = ctx;
  f->n_admitted++;
  RETURN_ERROR_IF(w->slot < 0, d, PH_ERR_INTERNAL, "admitted without a slot");
  return PH_OK;
}

static void test_prefix_hooks(void) {
  diag d;
  sched_batch b;
  env e;
  /* chunk 8, 4-token pages; 9 pages */
  if (!env_open(&e, params(4, 16, 8, 4), 10, 3)) return;
  sched_req donor, w;
  sched_req_init(&donor, 1, 16, 1);
  CHECK_STATUS(sched_add(e.s, &donor, &d), PH_OK, d.msg);
  for (int k = 0; k < 2; k++) {
    CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
    CHECK_STATUS(sched_commit(e.s, &b, &d), PH_OK, d.msg);
  }
  CHECK_EQ_INT(donor.n_computed, 16);
  fake_prefix f = {e.kv, &donor.blocks, 8, 4, 0, 0};
  const sched_prefix_hooks h = {&f, fake_acquire, fake_admitted};
  sched_set_prefix_hooks(e.s, &h);
  sched_req_init(&w, 2, 21, 1);
  CHECK_STATUS(sched_add(e.s, &w, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
  CHECK_EQ_INT(f.n_acquired, 1);
  CHECK_EQ_INT(f.n_admitted, 1);
  CHECK_EQ_INT(b.n_admitted, 1);
  const sched_entry *en = NULL;
  for (int32_t i = 0; i < b.n_entries; i++)
    if (b.entries[i].req == &w) en = &b.entries[i];
  CHECK(en != NULL);
  if (en) {
    CHECK_EQ_INT(en->start, 8);    /* after the cached prefix */
    CHECK_EQ_INT(en->n_tokens, 8); /* [8, 16): the chunk it would run from token 0 */
  }
  CHECK_EQ_INT(w.blocks.ids[0], donor.blocks.ids[0]); /* shared, one reference each */
  CHECK_EQ_INT(block_pool_refcount(e.kv, donor.blocks.ids[0]), 2);
  CHECK_EQ_INT(w.blocks.n_blocks, 4); /* 2 shared + 2 for [8, 16) */
  CHECK_STATUS(sched_commit(e.s, &b, &d), PH_OK, d.msg);
  CHECK_EQ_INT(w.n_computed, 16);
  CHECK_STATUS(sched_finish(e.s, &w, &d), PH_OK, d.msg);
  CHECK_EQ_INT(block_pool_refcount(e.kv, donor.blocks.ids[0]), 1);
  /* no room: of 9 pages the donor holds 4 and `big` (16 tokens from token 0) takes 4, so the
   * next request's [8, 16) after its 2 shared pages (2 more) does not fit */
  sched_req big;
  sched_req_init(&big, 3, 16, 0);
  CHECK_STATUS(sched_add(e.s, &big, &d), PH_OK, d.msg);
  f.give = 0; /* big starts from token 0 */
  CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_commit(e.s, &b, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_commit(e.s, &b, &d), PH_OK, d.msg);
  const int32_t free_before = block_pool_free_count(e.kv);
  CHECK(free_before < 2); /* the donor and big hold all but at most one page */
  f.give = 8;
  sched_req_init(&w, 4, 21, 1);
  CHECK_STATUS(sched_add(e.s, &w, &d), PH_OK, d.msg);
  const int acquired = f.n_acquired, admitted = f.n_admitted;
  CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
  CHECK_EQ_INT(f.n_acquired, acquired + 1);
  CHECK_EQ_INT(f.n_admitted, admitted); /* not admitted */
  CHECK_EQ_INT(w.state, SCHED_WAITING);
  CHECK_EQ_INT(w.n_computed, 0);
  CHECK_EQ_INT(w.blocks.n_blocks, 0); /* the shared pages went back */
  CHECK_EQ_INT(block_pool_refcount(e.kv, donor.blocks.ids[0]), 1);
  CHECK_EQ_INT(block_pool_free_count(e.kv), free_before);
  CHECK_STATUS(sched_commit(e.s, &b, &d), PH_OK, d.msg);
  sched_set_prefix_hooks(e.s, NULL);
  env_close(&e);
}

static void test_slot_compaction(void) {
  diag d;
  sched_batch b;
  env e;
  if (!env_open(&e, params(4, 64, 16, 4), 64, 4)) return;
  sched_req r[3];
  for (int i = 0; i < 3; i++) {
    sched_req_init(&r[i], i, 4, 8);
    CHECK_STATUS(sched_add(e.s, &r[i], &d), PH_OK, d.msg);
  }
  CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
  CHECK_EQ_INT(r[0].slot, 0);
  CHECK_EQ_INT(r[2].slot, 2);
  engine_after_step(e.s, &b);
  CHECK_STATUS(sched_finish(e.s, &r[0], &d), PH_OK, d.msg); /* hole at slot 0 */
  state_pool_reset_bytes_moved(e.st);
  CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
  CHECK_EQ_INT(r[2].slot, 0); /* the highest moved into the hole */
  CHECK_EQ_INT(r[1].slot, 1);
  CHECK_EQ_INT((int64_t)state_pool_bytes_moved(e.st), state_pool_slot_bytes(e.st));
  CHECK_EQ_INT(b.n_entries, 2);
  CHECK(b.entries[0].req == &r[2]); /* by ascending slot, not admission order */
  CHECK(b.entries[1].req == &r[1]);
  CHECK_EQ_INT(b.slots[0], 0);
  CHECK_EQ_INT(b.slots[1], 1);
  CHECK_EQ_INT(b.slots_are_slice, 1);
  /* while a step is bound, scheduling is refused and changes nothing */
  CHECK_STATUS(state_pool_bind(e.st, b.slots, b.n_entries, &d), PH_OK, d.msg);
  sched_batch b2;
  CHECK_STATUS(sched_schedule(e.s, &b2, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "bound");
  CHECK_STATUS(sched_finish(e.s, &r[1], &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_EQ_INT(r[1].state, SCHED_RUNNING);
  CHECK_STATUS(state_pool_unbind(e.st, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_commit(e.s, &b, &d), PH_OK, d.msg); /* b is still the latest batch */
  env_close(&e);
}

/* ---- randomized ------------------------------------------------------------------------------ */

#define RQ 96

typedef struct rand_run {
  sched_params p;
  int32_t n_blocks, slots;
  int steps_with_arrivals;
} rand_run;

/* Pool and queue invariants; returns the number of failed checks. */
static int check_invariants(const env *e, sched_req *reqs, int32_t *const *ids_at_add) {
  int before = check_n_failed;
  int32_t nb = block_pool_n_blocks(e->kv);
  int32_t ns = state_pool_max_slots(e->st);
  static uint8_t block_seen[1 << 16], slot_seen[1 << 10];
  memset(block_seen, 0, (size_t)nb);
  memset(slot_seen, 0, (size_t)ns);
  int64_t held_blocks = 0;
  int32_t held_slots = 0, n_run = 0, n_wait = 0;
  const int32_t bs = sched_get_params(e->s)->block_size;
  for (int i = 0; i < RQ; i++) {
    sched_req *r = &reqs[i];
    if (r->state == SCHED_FINISHED) {
      CHECK(r->blocks.n_blocks == 0 && r->blocks.ids == NULL && r->slot == -1);
      continue;
    }
    CHECK(r->blocks.ids == ids_at_add[i]); /* the table never grew: no allocation per step */
    held_blocks += r->blocks.n_blocks;
    for (int32_t j = 0; j < r->blocks.n_blocks; j++) {
      int32_t id = r->blocks.ids[j];
      CHECK(id > 0 && id < nb);
      if (id <= 0 || id >= nb) continue;
      CHECK(!block_seen[id]);
      block_seen[id] = 1;
      CHECK_EQ_INT(block_pool_refcount(e->kv, id), 1);
    }
    if (r->state == SCHED_RUNNING) {
      n_run++;
      CHECK(r->slot >= 0 && r->slot < ns);
      if (r->slot < 0 || r->slot >= ns) continue;
      CHECK(!slot_seen[r->slot]);
      slot_seen[r->slot] = 1;
      held_slots++;
      CHECK(state_pool_slot_in_use(e->st, r->slot));
      CHECK(r->blocks.n_blocks >= block_table_blocks_for(r->n_computed, bs));
    } else {
      n_wait++;
      CHECK_EQ_INT(r->state, SCHED_WAITING);
      CHECK_EQ_INT(r->slot, -1);
      CHECK_EQ_INT(r->blocks.n_blocks, 0);
      CHECK_EQ_INT(r->n_computed, 0);
    }
  }
  CHECK_EQ_INT(block_pool_used_count(e->kv), held_blocks);
  CHECK_EQ_INT(state_pool_used_count(e->st), held_slots);
  CHECK_EQ_INT(sched_n_running(e->s), n_run);
  CHECK_EQ_INT(sched_n_waiting(e->s), n_wait);
  return check_n_failed - before;
}

/* Checks one step's batch against the queues as they were before it. */
static int check_step(const env *e, const sched_batch *b, sched_req *const *run_before,
                      int32_t n_run_before, sched_req *const *wait_before, int32_t n_wait_before) {
  int before = check_n_failed;
  const sched_params *p = sched_get_params(e->s);
  CHECK(b->n_entries >= 0 && b->n_entries <= p->max_batch);
  int64_t sum = 0;
  for (int32_t i = 0; i < b->n_entries; i++) {
    const sched_entry *en = &b->entries[i];
    const sched_req *r = en->req;
    sum += en->n_tokens;
    CHECK_EQ_INT(r->state, SCHED_RUNNING);
    CHECK_EQ_INT(en->start, r->n_computed);
    CHECK(en->n_tokens >= 1);
    CHECK_EQ_INT(en->n_tokens,
                 sched_chunk_len(p->prefill_chunk, r->n_prompt, r->n_total, r->n_computed));
    CHECK_EQ_INT(en->sample, en->start + en->n_tokens == r->n_total);
    CHECK(r->blocks.n_blocks >= block_table_blocks_for(en->start + en->n_tokens, p->block_size));
    CHECK_EQ_INT(b->slots[i], r->slot);
    CHECK(b->tables[i] == &r->blocks);
    if (i > 0) CHECK(b->slots[i] > b->slots[i - 1]); /* ascending, hence distinct requests */
    CHECK(r->slot < state_pool_used_count(e->st));   /* compacted: live slots are [0, used) */
  }
  CHECK_EQ_INT(sum, b->n_tokens);
  CHECK(sum <= p->max_tokens);
  CHECK_EQ_INT(b->slots_are_slice,
               b->n_entries > 0 && state_pool_slots_are_slice(b->slots, b->n_entries));

  /* preempted: a suffix of the old running list, now at the front of waiting in old order */
  int32_t n_pre = 0, first_pre = n_run_before;
  for (int32_t i = 0; i < n_run_before; i++)
    if (run_before[i]->state == SCHED_WAITING) {
      if (!n_pre) first_pre = i;
      n_pre++;
    }
  CHECK_EQ_INT(n_pre, b->n_preempted);
  CHECK_EQ_INT(first_pre + n_pre, n_run_before);
  sched_req *w = sched_waiting_first(e->s);
  for (int32_t i = first_pre; i < n_run_before; i++) {
    CHECK(w == run_before[i]);
    if (w) w = w->next;
  }
  if (n_pre) CHECK_EQ_INT(b->n_admitted, 0);
  /* admitted: a prefix of the old waiting list, now at the back of running */
  for (int32_t i = 0; i < n_wait_before; i++) {
    int admitted = wait_before[i]->state == SCHED_RUNNING;
    CHECK_EQ_INT(admitted, i < b->n_admitted);
  }
  /* progress: the oldest running request with work is always in the batch */
  for (int32_t i = 0; i < n_run_before; i++) {
    const sched_req *r = run_before[i];
    if (r->state != SCHED_RUNNING || r->n_total == r->n_computed) continue;
    int found = 0;
    for (int32_t j = 0; j < b->n_entries; j++) found |= b->entries[j].req == r;
    CHECK(found);
    break;
  }
  if (n_run_before == 0 && n_wait_before > 0) CHECK(b->n_admitted >= 1);
  return check_n_failed - before;
}

static void random_run(uint64_t seed, rand_run cfg, int64_t *n_preempted_total) {
  static sched_req reqs[RQ];
  static int32_t *ids_at_add[RQ];
  static sched_req *run_before[RQ], *wait_before[RQ];
  env e;
  if (!env_open(&e, cfg.p, cfg.n_blocks, cfg.slots)) return;
  rng g = rng_seed(seed);
  diag d;
  for (int i = 0; i < RQ; i++) sched_req_init(&reqs[i], -1, 1, 0);
  const int32_t usable = cfg.n_blocks - 1;
  int64_t next_id = 0, n_added = 0, n_refused = 0, n_removed = 0, n_done = 0;
  *n_preempted_total = 0;
  int failed = 0, step = 0;
  const int max_steps = cfg.steps_with_arrivals + 200000;
  for (; step < max_steps && !failed; step++) {
    int arriving = step < cfg.steps_with_arrivals;
    /* arrivals: 0..2 per step */
    int n_arrive = arriving ? (int)rng_below(&g, 3) : 0;
    for (int a = 0; a < n_arrive; a++) {
      int k = (int)rng_below(&g, RQ);
      if (reqs[k].state != SCHED_FINISHED) continue;
      int64_t prompt = 1 + (int64_t)rng_below(&g, 300), max_new = 1 + (int64_t)rng_below(&g, 40);
      sched_req_init(&reqs[k], next_id++, prompt, max_new);
      ph_status st = sched_add(e.s, &reqs[k], &d);
      int fits = block_table_blocks_for(prompt + max_new, cfg.p.block_size) <= usable;
      CHECK_STATUS(st, fits ? PH_OK : PH_ERR_LIMIT, d.msg);
      if (st == PH_OK) {
        ids_at_add[k] = reqs[k].blocks.ids;
        n_added++;
      } else {
        n_refused++;
      }
    }
    /* random removals, in any state */
    if (arriving && rng_below(&g, 10) == 0) {
      int k = (int)rng_below(&g, RQ);
      if (reqs[k].state != SCHED_FINISHED) n_removed++;
      CHECK_STATUS(sched_finish(e.s, &reqs[k], &d), PH_OK, d.msg);
    }
    int32_t n_run = 0, n_wait = 0;
    for (sched_req *r = sched_running_first(e.s); r; r = r->next) run_before[n_run++] = r;
    for (sched_req *r = sched_waiting_first(e.s); r; r = r->next) wait_before[n_wait++] = r;
    if (!arriving && n_run + n_wait == 0) break;
    sched_batch b;
    ph_status st = sched_schedule(e.s, &b, &d);
    CHECK_STATUS(st, PH_OK, d.msg);
    if (st != PH_OK) break;
    *n_preempted_total += b.n_preempted;
    failed |= check_step(&e, &b, run_before, n_run, wait_before, n_wait);
    failed |= check_invariants(&e, reqs, ids_at_add);
    /* sometimes a request is removed between schedule and commit */
    if (arriving && rng_below(&g, 20) == 0 && b.n_entries > 0) {
      sched_req *r = b.entries[rng_below(&g, (uint64_t)b.n_entries)].req;
      CHECK_STATUS(sched_finish(e.s, r, &d), PH_OK, d.msg);
      n_removed++;
    }
    int32_t live_before = sched_n_running(e.s) + sched_n_waiting(e.s);
    engine_after_step(e.s, &b);
    n_done += live_before - (sched_n_running(e.s) + sched_n_waiting(e.s));
    failed |= check_invariants(&e, reqs, ids_at_add);
  }
  if (failed) fprintf(stderr, "  seed %llu failed at step %d\n", (unsigned long long)seed, step);
  /* everything finished (no starvation, no livelock) and went back to the pools */
  CHECK_EQ_INT(sched_n_running(e.s) + sched_n_waiting(e.s), 0);
  CHECK_EQ_INT(n_done + n_removed, n_added);
  CHECK_EQ_INT(block_pool_free_count(e.kv), usable);
  CHECK_EQ_INT(state_pool_used_count(e.st), 0);
  printf("  seed %llu: batch %d, budget %lld, chunk %lld, block %d, %d blocks, %d slots: "
         "%d steps, %lld requests (%lld refused, %lld removed), %lld preemptions\n",
         (unsigned long long)seed, (int)cfg.p.max_batch, (long long)cfg.p.max_tokens,
         (long long)cfg.p.prefill_chunk, (int)cfg.p.block_size, (int)usable, (int)cfg.slots, step,
         (long long)n_added, (long long)n_refused, (long long)n_removed,
         (long long)*n_preempted_total);
  env_close(&e);
}

/* A long waiting queue costs nothing per step: each step visits the running requests and the
 * head of the queue (sched_work), so draining N queued requests is O(N), not O(N^2) (every
 * step used to check every waiting request: 12.5 M visits here). */
static void test_work_is_linear(void) {
  enum { N = 10000 };
  env e;
  if (!env_open(&e, params(8, 64, 16, 4), 64, 8)) return;
  diag d;
  sched_req *reqs = calloc(N, sizeof *reqs);
  for (int i = 0; i < N; i++) {
    sched_req_init(&reqs[i], i, 1 + i % 5, 2);
    CHECK_STATUS(sched_add(e.s, &reqs[i], &d), PH_OK, d.msg);
  }
  const uint64_t w0 = sched_work(e.s);
  int64_t steps = 0;
  while (sched_n_waiting(e.s) + sched_n_running(e.s) > 0 && steps < 100000) {
    sched_batch b;
    CHECK_STATUS(sched_schedule(e.s, &b, &d), PH_OK, d.msg);
    engine_after_step(e.s, &b);
    steps++;
  }
  CHECK_EQ_INT(sched_n_waiting(e.s) + sched_n_running(e.s), 0);
  const uint64_t work = sched_work(e.s) - w0;
  /* a request is visited a bounded number of times (added, admitted, finished, and once as the
   * queue's head: 4); a step visits at most max_batch (8) running and 8 waiting ones, checked,
   * scheduled and compacted (4 visits each at most). The scans this replaced: ~N^2 / 2. */
  const uint64_t bound = 4u * N + 4u * (uint64_t)steps * 8u;
  printf("  %d requests, %lld steps: %llu requests visited (bound %llu)\n", N, (long long)steps,
         (unsigned long long)work, (unsigned long long)bound);
  CHECK(work <= bound);
  free(reqs);
  env_close(&e);
}

static void test_randomized(void) {
  int64_t total_preempted = 0;
  for (uint64_t seed = 1; seed <= 8; seed++) {
    rng g = rng_seed(seed * 7919);
    static const int64_t chunks[] = {1, 7, 32, 64, 100};
    static const int32_t block_sizes[] = {1, 4, 16};
    rand_run cfg;
    cfg.p.prefill_chunk = chunks[rng_below(&g, 5)];
    cfg.p.block_size = block_sizes[rng_below(&g, 3)];
    cfg.p.max_tokens =
        cfg.p.prefill_chunk * (1 + (int64_t)rng_below(&g, 4)) + (int64_t)rng_below(&g, 20);
    cfg.p.max_batch = 1 + (int32_t)rng_below(&g, 16);
    cfg.slots = 1 + (int32_t)rng_below(&g, 24);
    /* the largest request holds 340 tokens; odd seeds squeeze the pool near that (forcing
     * preemption; some requests are refused), even seeds give 1-4x room */
    int32_t biggest = block_table_blocks_for(340, cfg.p.block_size);
    if (seed % 2)
      cfg.n_blocks = 1 + biggest * 3 / 4 + (int32_t)rng_below(&g, (uint64_t)biggest / 2 + 1);
    else
      cfg.n_blocks = 1 + biggest * (1 + (int32_t)rng_below(&g, 4));
    cfg.steps_with_arrivals = 5000;
    int64_t np = 0;
    random_run(seed, cfg, &np);
    total_preempted += np;
  }
  CHECK(total_preempted > 0); /* page pressure did force preemption somewhere */
}

/* Speculative drafts: a decode-ready request with n_draft verifies 1 + n_draft tokens (fewer
 * when max_total, the budget or the pages leave less room, never by preempting anyone); prompt
 * chunks and replayed tokens ignore drafts; sched_commit_kept keeps the accepted prefix and
 * clears the drafts; bad kept counts change nothing. */
static const sched_entry *entry_of(const sched_batch *b, const sched_req *r) {
  for (int32_t i = 0; i < b->n_entries; i++)
    if (b->entries[i].req == r) return &b->entries[i];
  return NULL;
}

static void test_drafts(void) {
  diag d;
  env e;
  /* block size 4, 10 usable blocks, budget 16, prompt chunks of 8 */
  if (!env_open(&e, params(4, 16, 8, 4), 11, 4)) return;
  sched_req a, b;
  sched_batch bt;
  sched_req_init(&a, 1, 6, 34);
  sched_req_init(&b, 2, 5, 3);
  a.n_draft = 5; /* ignored while the prompt runs */
  CHECK_STATUS(sched_add(e.s, &a, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_add(e.s, &b, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_schedule(e.s, &bt, &d), PH_OK, d.msg);
  CHECK_EQ_INT(bt.n_entries, 2);
  if (bt.n_entries != 2) goto out;
  CHECK_EQ_INT(entry_of(&bt, &a)->n_tokens, 6);
  CHECK_EQ_INT(entry_of(&bt, &a)->n_draft, 0);
  CHECK_STATUS(sched_commit(e.s, &bt, &d), PH_OK, d.msg);
  CHECK_EQ_INT(a.n_draft, 0); /* cleared by the commit */
  /* both sampled a token; a offers 3 drafts */
  a.n_total = 7;
  b.n_total = 6;
  a.n_draft = 3;
  CHECK_STATUS(sched_schedule(e.s, &bt, &d), PH_OK, d.msg);
  CHECK_EQ_INT(bt.n_entries, 2);
  if (bt.n_entries != 2) goto out;
  const sched_entry *ea = entry_of(&bt, &a), *eb = entry_of(&bt, &b);
  CHECK_EQ_INT(ea->n_tokens, 4);
  CHECK_EQ_INT(ea->n_draft, 3);
  CHECK_EQ_INT(ea->sample, 1);
  CHECK_EQ_INT(eb->n_tokens, 1);
  CHECK_EQ_INT(bt.n_tokens, 5);
  CHECK_EQ_INT(a.blocks.n_blocks, 3); /* 6 + 4 rows */
  int64_t kept[2];
  kept[ea - bt.entries] = 5; /* more than it ran */
  kept[eb - bt.entries] = 1;
  CHECK_STATUS(sched_commit_kept(e.s, &bt, kept, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "keeps 5 of its 4 tokens");
  CHECK_EQ_INT(a.n_computed, 6);
  kept[ea - bt.entries] = 2; /* the decode token and one accepted draft */
  CHECK_STATUS(sched_commit_kept(e.s, &bt, kept, &d), PH_OK, d.msg);
  CHECK_EQ_INT(a.n_computed, 8);
  CHECK_EQ_INT(b.n_computed, 6);
  CHECK_EQ_INT(a.n_draft, 0);
  /* the budget trims drafts: 16 - a's decode token */
  a.n_total = 9;
  b.n_total = 7;
  a.n_draft = 20;
  CHECK_STATUS(sched_schedule(e.s, &bt, &d), PH_OK, d.msg);
  CHECK_EQ_INT(bt.n_entries, 1); /* b's decode token no longer fits the budget */
  CHECK_EQ_INT(entry_of(&bt, &a)->n_draft, 15);
  CHECK_STATUS(sched_commit_kept(e.s, &bt, NULL, &d), PH_OK, d.msg);
  CHECK_EQ_INT(a.n_computed, 24);
  /* pages short: a's 15 drafts need 40 rows, 10 blocks, and only 8 are free to it: they are
   * dropped, nobody is preempted; b may verify one draft only (max_total 8) */
  a.n_total = 25;
  a.n_draft = 30;
  b.n_draft = 5;
  CHECK_STATUS(sched_schedule(e.s, &bt, &d), PH_OK, d.msg);
  CHECK_EQ_INT(bt.n_preempted, 0);
  CHECK_EQ_INT(bt.n_entries, 2);
  if (bt.n_entries != 2) goto out;
  CHECK_EQ_INT(entry_of(&bt, &a)->n_draft, 0);
  CHECK_EQ_INT(entry_of(&bt, &a)->n_tokens, 1);
  CHECK_EQ_INT(entry_of(&bt, &b)->n_draft, 1);
  CHECK_STATUS(sched_commit_kept(e.s, &bt, NULL, &d), PH_OK, d.msg);
  CHECK_EQ_INT(b.n_computed, 8);
out:
  CHECK_STATUS(sched_finish(e.s, &a, &d), PH_OK, d.msg);
  CHECK_STATUS(sched_finish(e.s, &b, &d), PH_OK, d.msg);
  CHECK_EQ_INT(block_pool_used_count(e.kv), 0);
  env_close(&e);
}

int main(void) {
  RUN(test_chunk_rule);
  RUN(test_chunks_alone_vs_crowd);
  RUN(test_caps_and_fifo);
  RUN(test_preemption);
  RUN(test_stateless_cache);
  RUN(test_params_and_refusals);
  RUN(test_finish_and_commit);
  RUN(test_drafts);
  RUN(test_prefix_hooks);
  RUN(test_slot_compaction);
  RUN(test_work_is_linear);
  RUN(test_randomized);
  return check_finish();
}
