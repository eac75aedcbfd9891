/* test_prefix_index — the prefix cache's page index, the block pool's LRU of cached pages and the
 * snapshot pool, driven directly (no model): what a lookup finds, what it takes, what eviction
 * drops, and every invariant (prefix_cache_check) after every operation. The engine-level
 * exactness tests are tests/test_prefix_cache.c and tests/test_engine.c. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache/hybrid_cache.h"
#include "cache/prefix_cache.h"
#include "check.h"

#define BS 4 /* tokens per page */

static const int32_t full_layers[2] = {1, 3};
static const int32_t lin_layers[2] = {0, 2};

/* 4-token pages, two attention layers; two linear layers with a small state; n_pages pages. */
static hybrid_cache *make_cache(int32_t n_pages, int32_t max_slots) {
  hybrid_cache_params hp = {.kv = {.n_full = 2,
                                   .full_layers = full_layers,
                                   .n_kv_heads = 1,
                                   .head_size = 4,
                                   .block_size = BS,
                                   .n_blocks = n_pages + 1,
                                   .dtype = PH_DTYPE_F32},
                            .state = {.n_linear = 2,
                                      .linear_layers = lin_layers,
                                      .conv_dim = 8,
                                      .conv_kernel = 4,
                                      .n_v_heads = 1,
                                      .head_v = 4,
                                      .head_k = 4,
                                      .io_dtype = PH_DTYPE_F32,
                                      .max_slots = max_slots}};
  hybrid_cache *c = NULL;
  diag d;
  CHECK_STATUS(hybrid_cache_create(&hp, &c, &d), PH_OK, d.msg);
  return c;
}

static prefix_cache *make_prefix(hybrid_cache *c, int64_t boundary, int32_t n_snapshots) {
  prefix_cache_params pp = {.boundary = boundary};
  pp.snapshot_bytes = n_snapshots * state_pool_slot_bytes(hybrid_cache_states(c));
  prefix_cache *pc = NULL;
  diag d;
  CHECK_STATUS(prefix_cache_create(c, &pp, &pc, &d), PH_OK, d.msg);
  return pc;
}

static void check_ok(const prefix_cache *pc) {
  diag d;
  CHECK_STATUS(prefix_cache_check(pc, &d), PH_OK, d.msg);
}

/* Fills a slot's state with `tag` (every float of every layer). */
static void stamp(hybrid_cache *c, int32_t slot, float tag) {
  state_pool *sp = hybrid_cache_states(c);
  const int64_t n = state_pool_slot_bytes(sp) / (int64_t)sizeof(float);
  float *buf = malloc((size_t)n * sizeof *buf);
  for (int64_t i = 0; i < n; i++) buf[i] = tag + (float)i;
  diag d;
  CHECK_STATUS(state_pool_load_slot(sp, slot, buf, &d), PH_OK, d.msg);
  free(buf);
}

static int slot_is(hybrid_cache *c, int32_t slot, float tag) {
  state_pool *sp = hybrid_cache_states(c);
  const int64_t n = state_pool_slot_bytes(sp) / (int64_t)sizeof(float);
  float *buf = malloc((size_t)n * sizeof *buf);
  diag d;
  int same = state_pool_save_slot(sp, slot, buf, &d) == PH_OK;
  for (int64_t i = 0; same && i < n; i++) same = buf[i] == tag + (float)i;
  free(buf);
  return same;
}

/* A sequence that computed tokens[0, n) into its own pages and slot, publishing at every
 * boundary it reached and snapshotting where asked. */
typedef struct seq {
  block_table bt;
  int32_t slot;
} seq;

static void seq_compute(hybrid_cache *c, prefix_cache *pc, seq *s, const int64_t *tok, int64_t n,
                        int64_t snap_at, float tag) {
  diag d;
  s->slot = -1;
  block_table_init(&s->bt);
  CHECK_STATUS(hybrid_cache_reserve(c, &s->bt, &s->slot, n, &d), PH_OK, d.msg);
  stamp(c, s->slot, tag);
  if (snap_at > 0)
    CHECK_STATUS(prefix_cache_publish(pc, tok, snap_at, &s->bt, s->slot, 1, &d), PH_OK, d.msg);
  CHECK_STATUS(prefix_cache_publish(pc, tok, n, &s->bt, s->slot, 0, &d), PH_OK, d.msg);
  check_ok(pc);
}

static void seq_release(hybrid_cache *c, prefix_cache *pc, seq *s) {
  diag d;
  CHECK_STATUS(hybrid_cache_release(c, &s->bt, &s->slot, &d), PH_OK, d.msg);
  free(s->bt.ids);
  block_table_init(&s->bt);
  check_ok(pc);
}

static void fill(int64_t *t, int64_t n, int64_t base) {
  for (int64_t i = 0; i < n; i++) t[i] = base + i;
}

/* A lookup takes the longest prefix that ends at a snapshot below the prompt's end, by
 * reference; the snapshot lands in the new slot bit for bit. */
static void test_hit_and_restore(void) {
  hybrid_cache *c = make_cache(16, 4);
  prefix_cache *pc = make_prefix(c, 8, 4); /* boundary: 2 pages */
  if (!c || !pc) return;
  int64_t tok[40];
  fill(tok, 40, 100);
  seq a;
  seq_compute(c, pc, &a, tok, 20, 16, 3.0f); /* pages for 20 tokens, snapshot at 16 */
  ph_prefix_cache_stats k;
  prefix_cache_get_stats(pc, &k);
  CHECK_EQ_INT(k.pages_cached, 5); /* 20 tokens: 5 full pages published */
  CHECK_EQ_INT(k.snapshots, 1);
  diag d;
  /* a longer prompt with the same first 30 tokens: hit at 16 (the snapshot), matched 20 */
  int64_t b_tok[30];
  memcpy(b_tok, tok, sizeof b_tok);
  block_table bt;
  block_table_init(&bt);
  prefix_match m;
  CHECK_STATUS(prefix_cache_acquire(pc, b_tok, 30, &bt, &m, &d), PH_OK, d.msg);
  CHECK_EQ_INT(m.n_tokens, 16);
  CHECK_EQ_INT(m.n_pages, 4);
  CHECK_EQ_INT(m.n_matched, 20);
  CHECK_EQ_INT(m.branch, 16);
  CHECK_EQ_INT(bt.n_blocks, 4);
  for (int j = 0; j < 4; j++) {
    CHECK_EQ_INT(bt.ids[j], a.bt.ids[j]);
    CHECK_EQ_INT(block_pool_refcount(hybrid_cache_blocks(c), bt.ids[j]), 2);
  }
  int32_t slot = -1;
  CHECK_STATUS(hybrid_cache_reserve(c, &bt, &slot, 30, &d), PH_OK, d.msg);
  CHECK(!slot_is(c, slot, 3.0f)); /* zeroed when taken */
  CHECK_STATUS(prefix_cache_restore(pc, &m, slot, &d), PH_OK, d.msg);
  CHECK(slot_is(c, slot, 3.0f));
  check_ok(pc);
  /* the hit stays below the prompt's end: a 16-token prompt cannot hit at 16 */
  block_table bt2;
  block_table_init(&bt2);
  CHECK_STATUS(prefix_cache_acquire(pc, tok, 16, &bt2, &m, &d), PH_OK, d.msg);
  CHECK_EQ_INT(m.n_tokens, 0);
  CHECK_EQ_INT(bt2.n_blocks, 0);
  /* but a 17-token one can */
  CHECK_STATUS(prefix_cache_acquire(pc, tok, 17, &bt2, &m, &d), PH_OK, d.msg);
  CHECK_EQ_INT(m.n_tokens, 16);
  int32_t none = -1; /* bt2 holds pages only */
  CHECK_STATUS(hybrid_cache_release(c, &bt2, &none, &d), PH_OK, d.msg);
  free(bt2.ids);
  CHECK_STATUS(hybrid_cache_release(c, &bt, &slot, &d), PH_OK, d.msg);
  free(bt.ids);
  /* one token different in page 2: the chain breaks there, no snapshot before it */
  b_tok[9] = 7;
  block_table_init(&bt);
  CHECK_STATUS(prefix_cache_acquire(pc, b_tok, 30, &bt, &m, &d), PH_OK, d.msg);
  CHECK_EQ_INT(m.n_tokens, 0);
  CHECK_EQ_INT(m.n_matched, 8);
  CHECK_EQ_INT(m.branch, 8); /* a snapshot at 8 would serve this prompt */
  CHECK_EQ_INT(bt.n_blocks, 0);
  free(bt.ids);
  seq_release(c, pc, &a);
  prefix_cache_free(pc);
  hybrid_cache_free(c);
}

/* Released pages stay findable; allocations drain the free stack first, then evict cached pages
 * deepest first, dropping the snapshot anchored on them; children of an evicted page are
 * unreachable even while still indexed. */
static void test_lru_eviction(void) {
  hybrid_cache *c = make_cache(8, 2);
  prefix_cache *pc = make_prefix(c, 8, 4);
  if (!c || !pc) return;
  int64_t tok[32];
  fill(tok, 32, 5);
  seq a;
  seq_compute(c, pc, &a, tok, 24, 16, 1.0f); /* 6 pages, snapshots at 16 */
  int32_t a_ids[6];
  memcpy(a_ids, a.bt.ids, sizeof a_ids);
  seq_release(c, pc, &a);
  block_pool *bp = hybrid_cache_blocks(c);
  CHECK_EQ_INT(block_pool_evictable_count(bp), 6);
  CHECK_EQ_INT(block_pool_free_count(bp), 8);
  CHECK_EQ_INT(block_pool_used_count(bp), 0);
  /* the deepest page of the released chain is first to go */
  CHECK_EQ_INT(block_pool_lru_first(bp), a_ids[5]);
  CHECK_EQ_INT(block_pool_lru_next(bp, a_ids[5]), a_ids[4]);
  diag d;
  block_table x;
  block_table_init(&x);
  int32_t sx = -1;
  /* 2 free pages, then 1 evicted: the page holding tokens [20, 24) */
  CHECK_STATUS(hybrid_cache_reserve(c, &x, &sx, 12, &d), PH_OK, d.msg);
  check_ok(pc);
  ph_prefix_cache_stats k;
  prefix_cache_get_stats(pc, &k);
  CHECK_EQ_INT(k.pages_evicted, 1);
  CHECK_EQ_INT(k.pages_cached, 5);
  CHECK_EQ_INT(k.snapshots, 1);
  block_table bt;
  block_table_init(&bt);
  prefix_match m;
  CHECK_STATUS(prefix_cache_acquire(pc, tok, 30, &bt, &m, &d), PH_OK, d.msg);
  CHECK_EQ_INT(m.n_tokens, 16);
  CHECK_EQ_INT(m.n_matched, 20);
  int32_t sb = -1;
  CHECK_STATUS(hybrid_cache_release(c, &bt, &sb, &d), PH_OK, d.msg);
  free(bt.ids);
  /* two more evictions reach the snapshot's page ([12, 16)): it and its snapshot go */
  CHECK_STATUS(hybrid_cache_reserve(c, &x, &sx, 20, &d), PH_OK, d.msg);
  check_ok(pc);
  prefix_cache_get_stats(pc, &k);
  CHECK_EQ_INT(k.snapshots, 0);
  CHECK_EQ_INT(k.snapshots_evicted, 1);
  block_table_init(&bt);
  CHECK_STATUS(prefix_cache_acquire(pc, tok, 30, &bt, &m, &d), PH_OK, d.msg);
  CHECK_EQ_INT(m.n_tokens, 0);
  CHECK(m.n_matched <= 12);
  free(bt.ids);
  CHECK_STATUS(hybrid_cache_release(c, &x, &sx, &d), PH_OK, d.msg);
  free(x.ids);
  /* clear: nothing findable, every page on the free stack */
  prefix_cache_clear(pc);
  check_ok(pc);
  prefix_cache_get_stats(pc, &k);
  CHECK_EQ_INT(k.pages_cached, 0);
  CHECK_EQ_INT(block_pool_evictable_count(bp), 0);
  CHECK_EQ_INT(block_pool_free_count(bp), 8);
  prefix_cache_free(pc);
  hybrid_cache_free(c);
}

/* Two sequences computing the same prefix: the first's pages stay canonical, the second's are
 * not published, and its snapshot anchors on the canonical chain. A full snapshot budget evicts
 * the least recently used snapshot. */
static void test_duplicates_and_snapshot_budget(void) {
  hybrid_cache *c = make_cache(32, 4);
  prefix_cache *pc = make_prefix(c, 4, 2); /* boundary: every page; 2 snapshots */
  if (!c || !pc) return;
  int64_t tok[16];
  fill(tok, 16, 40);
  seq a, b;
  seq_compute(c, pc, &a, tok, 12, 8, 1.0f);
  seq_compute(c, pc, &b, tok, 12, 4, 2.0f);
  ph_prefix_cache_stats k;
  prefix_cache_get_stats(pc, &k);
  CHECK_EQ_INT(k.pages_cached, 3); /* b's three pages duplicate a's */
  CHECK_EQ_INT(k.snapshots, 2);
  block_pool *bp = hybrid_cache_blocks(c);
  for (int j = 0; j < 3; j++) {
    CHECK(block_pool_is_cached(bp, a.bt.ids[j]));
    CHECK(!block_pool_is_cached(bp, b.bt.ids[j]));
  }
  /* a third snapshot evicts the least recently used (a's at 8; b's at 4 is newer) */
  int64_t t2[16];
  fill(t2, 16, 900);
  seq x;
  seq_compute(c, pc, &x, t2, 8, 8, 5.0f);
  prefix_cache_get_stats(pc, &k);
  CHECK_EQ_INT(k.snapshots, 2);
  CHECK_EQ_INT(k.snapshots_evicted, 1);
  diag d;
  block_table bt;
  block_table_init(&bt);
  prefix_match m;
  CHECK_STATUS(prefix_cache_acquire(pc, tok, 16, &bt, &m, &d), PH_OK, d.msg);
  CHECK_EQ_INT(m.n_tokens, 4); /* b's snapshot at 4 on a's page */
  CHECK_EQ_INT(bt.ids[0], a.bt.ids[0]);
  int32_t s = -1;
  CHECK_STATUS(hybrid_cache_reserve(c, &bt, &s, 16, &d), PH_OK, d.msg);
  CHECK_STATUS(prefix_cache_restore(pc, &m, s, &d), PH_OK, d.msg);
  CHECK(slot_is(c, s, 2.0f)); /* b's state */
  CHECK_STATUS(hybrid_cache_release(c, &bt, &s, &d), PH_OK, d.msg);
  free(bt.ids);
  seq_release(c, pc, &a);
  seq_release(c, pc, &b);
  seq_release(c, pc, &x);
  /* a's pages are cached and nobody holds them; b's were plain and went to the free stack */
  CHECK_EQ_INT(block_pool_evictable_count(bp), 5);
  /* publishing again after a's first page left the index re-keys the chain under the new one */
  prefix_cache_free(pc);
  CHECK_EQ_INT(block_pool_evictable_count(bp), 0); /* freed: every page back on the stack */
  CHECK_EQ_INT(block_pool_free_count(bp), 32);
  hybrid_cache_free(c);
}

/* A publish whose chain parent left the index re-keys its own pages under the new chain, so a
 * later lookup finds them again. */
static void test_rekey_after_parent_eviction(void) {
  hybrid_cache *c = make_cache(6, 4);
  prefix_cache *pc = make_prefix(c, 4, 4);
  if (!c || !pc) return;
  int64_t tok[24];
  fill(tok, 24, 1);
  seq a;
  seq_compute(c, pc, &a, tok, 4, 0, 1.0f); /* a publishes page 0 */
  diag d;
  /* b takes a's page 0 by reference and computes page 1 */
  block_table bt;
  block_table_init(&bt);
  prefix_match m;
  int32_t sb = -1;
  CHECK_STATUS(prefix_cache_acquire(pc, tok, 9, &bt, &m, &d), PH_OK, d.msg);
  CHECK_EQ_INT(m.n_tokens, 0); /* no snapshot at 4 */
  CHECK_STATUS(hybrid_cache_reserve(c, &bt, &sb, 8, &d), PH_OK, d.msg);
  CHECK_STATUS(prefix_cache_publish(pc, tok, 8, &bt, sb, 1, &d), PH_OK, d.msg);
  check_ok(pc);
  /* b's page 0 duplicates a's: b's page 1 hangs under a's page 0 */
  const int32_t x_id = a.bt.ids[0];
  seq_release(c, pc, &a); /* a's page 0 evictable */
  /* take the 3 free pages, then one more: a's page 0 is evicted and handed out (b's page 1 is
   * held, so it stays, keyed under a parent that is gone) */
  block_table f3, y;
  block_table_init(&f3);
  block_table_init(&y);
  int32_t sf = -1, sy = -1;
  CHECK_STATUS(hybrid_cache_reserve(c, &f3, &sf, 12, &d), PH_OK, d.msg);
  CHECK_STATUS(hybrid_cache_reserve(c, &y, &sy, 4, &d), PH_OK, d.msg);
  CHECK_EQ_INT(y.ids[0], x_id);
  check_ok(pc);
  /* the same id now holds other tokens at the root: b's page 1 must not be reachable through
   * it (its KV rows follow a's tokens, not these) */
  int64_t other[24];
  fill(other, 24, 7000);
  memcpy(other + 4, tok + 4, 4 * sizeof *other); /* the same second page as b's */
  CHECK_STATUS(prefix_cache_publish(pc, other, 4, &y, sy, 0, &d), PH_OK, d.msg);
  check_ok(pc);
  block_table z;
  block_table_init(&z);
  CHECK_STATUS(prefix_cache_acquire(pc, other, 20, &z, &m, &d), PH_OK, d.msg);
  CHECK_EQ_INT(m.n_matched, 4); /* the new page 0 only */
  CHECK_EQ_INT(m.n_tokens, 0);
  free(z.ids);
  CHECK_STATUS(hybrid_cache_release(c, &y, &sy, &d), PH_OK, d.msg);
  free(y.ids);
  CHECK_STATUS(hybrid_cache_release(c, &f3, &sf, &d), PH_OK, d.msg);
  free(f3.ids);
  block_table_init(&z);
  CHECK_STATUS(prefix_cache_acquire(pc, tok, 20, &z, &m, &d), PH_OK, d.msg);
  CHECK_EQ_INT(m.n_matched, 0); /* page 0 gone: nothing reachable */
  free(z.ids);
  /* b publishes again: its own page 0 becomes canonical, page 1 is re-keyed under it */
  CHECK_STATUS(prefix_cache_publish(pc, tok, 8, &bt, sb, 1, &d), PH_OK, d.msg);
  check_ok(pc);
  block_table_init(&z);
  CHECK_STATUS(prefix_cache_acquire(pc, tok, 20, &z, &m, &d), PH_OK, d.msg);
  CHECK_EQ_INT(m.n_tokens, 8);
  CHECK_EQ_INT(z.ids[0], bt.ids[0]);
  CHECK_EQ_INT(z.ids[1], bt.ids[1]);
  int32_t sz = -1;
  CHECK_STATUS(hybrid_cache_release(c, &z, &sz, &d), PH_OK, d.msg);
  free(z.ids);
  CHECK_STATUS(hybrid_cache_release(c, &bt, &sb, &d), PH_OK, d.msg);
  free(bt.ids);
  check_ok(pc);
  prefix_cache_free(pc);
  hybrid_cache_free(c);
}

/* Random publishes, lookups, releases and allocations over a small pool: the invariants hold
 * after every operation, and whatever a lookup returns is exactly a chain of the tokens asked
 * (checked against the tokens each page was published with). */
static void test_randomized(void) {
  hybrid_cache *c = make_cache(24, 6);
  prefix_cache *pc = make_prefix(c, 8, 3);
  if (!c || !pc) return;
  uint64_t r = 12345;
#define RND(n) ((r = r * 6364136223846793005ull + 1442695040888963407ull), (int)((r >> 33) % (n)))
  int64_t stems[3][40];
  for (int s = 0; s < 3; s++) fill(stems[s], 40, 1000 * s);
  seq live[6];
  int64_t live_tok[6][40];
  int n_live = 0, hits = 0;
  diag d;
  for (int op = 0; op < 600; op++) {
    if (n_live > 0 && (n_live == 6 || RND(3) == 0)) { /* release one */
      const int i = RND(n_live);
      seq_release(c, pc, &live[i]);
      live[i] = live[n_live - 1];
      memcpy(live_tok[i], live_tok[n_live - 1], sizeof live_tok[i]);
      n_live--;
      continue;
    }
    /* a prompt: a stem's first k tokens, then its own tail */
    int64_t *t = live_tok[n_live];
    const int s = RND(3), k = RND(40), n = 1 + RND(32);
    memcpy(t, stems[s], sizeof stems[s]);
    for (int i = k; i < 40; i++) t[i] = 50000 + RND(3);
    seq *q = &live[n_live];
    block_table_init(&q->bt);
    q->slot = -1;
    prefix_match m;
    CHECK_STATUS(prefix_cache_acquire(pc, t, n, &q->bt, &m, &d), PH_OK, d.msg);
    CHECK(m.n_tokens < n && m.n_tokens % 8 == 0 && m.n_tokens <= m.n_matched);
    if (hybrid_cache_reserve(c, &q->bt, &q->slot, n, &d) != PH_OK) {
      CHECK_STATUS(hybrid_cache_release(c, &q->bt, &q->slot, &d), PH_OK, d.msg);
      free(q->bt.ids);
      check_ok(pc);
      continue;
    }
    hits += m.n_tokens > 0;
    CHECK_STATUS(prefix_cache_restore(pc, &m, q->slot, &d), PH_OK, d.msg);
    const int64_t snap = (n - 1) / 8 * 8;
    if (snap > m.n_tokens)
      CHECK_STATUS(prefix_cache_publish(pc, t, snap, &q->bt, q->slot, 1, &d), PH_OK, d.msg);
    CHECK_STATUS(prefix_cache_publish(pc, t, n, &q->bt, q->slot, 0, &d), PH_OK, d.msg);
    check_ok(pc);
    n_live++;
  }
  while (n_live > 0) seq_release(c, pc, &live[--n_live]);
  CHECK(hits > 20);
  CHECK_EQ_INT(block_pool_used_count(hybrid_cache_blocks(c)), 0);
  prefix_cache_free(pc);
  hybrid_cache_free(c);
#undef RND
}

int main(void) {
  RUN(test_hit_and_restore);
  RUN(test_lru_eviction);
  RUN(test_duplicates_and_snapshot_budget);
  RUN(test_rekey_after_parent_eviction);
  RUN(test_randomized);
  return check_finish();
}
