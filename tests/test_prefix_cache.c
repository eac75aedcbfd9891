/* test_prefix_cache — the prefix cache (issue 19, docs/prefix-cache.md) end to end on the golden
 * tiny checkpoint (4 layers: 3 GatedDeltaNet + 1 full attention, vocab 256, pages of 16 tokens):
 *  - a randomized workload of shared prefixes over PC_SEEDS: prompts cut from a few random stems
 *    at, around (+-1) and between page, prefill-chunk and snapshot boundaries, with random
 *    suffixes, exact repeats and multi-turn continuations (an earlier request's prompt and
 *    output plus more); random arrivals and removals, greedy and seeded-temperature sampling,
 *    prefill chunks 16, 24, 32, 48 and 64; roomy pools, and tight ones where pages and snapshots
 *    are evicted and the opening burst preempts;
 *  - a hand-built sequence whose numbers (which prefix each request is served, every counter)
 *    follow from the snapshot rule, written out beside it; requests capturing every position
 *    never take a hit;
 *  - off means off: the same sequence with the cache off caches nothing and gives the same bits.
 * Exact: every request's tokens and captured logits (the PH_CAPTURE_SAMPLED rows) are compared
 * bit for bit (memcmp) with the same request computed alone with the cache OFF (one after another
 * in a cache-off engine, which is alone: nothing carries over between requests there, and the
 * first ones of each seed also in a fresh engine each), and with the dense session
 * (engine_testing.h: dense_ref_check, a reference with no pages, slots, chunks or cache) within
 * DENSE_TOL, whose derivation is written there: a bug that the cached run and the run alone
 * share cannot hide from it.
 * After every step engine_prefix_check (every pool, index and snapshot invariant against the
 * requests' block tables) must pass and the counters must be consistent (pc_stats_consistent);
 * at the end nothing is held, and after engine_prefix_clear nothing is cached.
 * Run one test: test_prefix_cache <part of its name>. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "cache/hybrid_cache.h"
#include "check.h"
#include "engine/engine.h"
#include "engine_testing.h"
#include "runtime/paged_session.h"

#define PAGE 16 /* small_params' block_size */

static int64_t gcd64(int64_t a, int64_t b) { return b ? gcd64(b, a % b) : a; }

/* The snapshot boundaries: multiples of both the prefill chunk and the page size (docs/
 * prefix-cache.md). A request can be served a cached prefix only up to one of them. */
static int64_t snapshot_unit(int64_t chunk) { return chunk / gcd64(chunk, PAGE) * PAGE; }

/* ---- stepping with the cache's checks ---------------------------------------------------------
 * Like engine_testing.h's checked_step, the engine's own check (engine_prefix_check: reference
 * counts equal the block tables holding each page, evictable pages are exactly the cached ones
 * nobody holds, index and snapshots consistent) runs after every step; pc_step adds the rules
 * of the counters and stops stepping once a check fails (a corrupt pool could loop forever). */

typedef struct pc_steps {
  int64_t steps, bad, preempted;
  int broken; /* a step or engine_prefix_check failed: stepping (and clearing) stops */
  char first_bad[640];
  ph_step_info last;          /* the last step's info */
  ph_prefix_cache_stats prev; /* the counters after the previous step */
} pc_steps;

/* Rules the counters and gauges keep at every step: 1 when they hold, else why. prev: the same
 * engine's stats one step earlier (counters never go back). */
static int pc_stats_consistent(const ph_prefix_cache_stats *s, const ph_prefix_cache_stats *prev,
                               const ph_step_info *si, int enabled, char *why, size_t why_n) {
#define RULE(cond, ...)                                                                            \
  if (!(cond)) {                                                                                   \
    snprintf(why, why_n, __VA_ARGS__);                                                             \
    return 0;                                                                                      \
  }
  RULE(s->enabled == enabled, "enabled %d, expected %d", s->enabled, enabled);
  RULE(s->lookups == s->hits + s->misses, "lookups %lld != hits %lld + misses %lld",
       (long long)s->lookups, (long long)s->hits, (long long)s->misses);
  RULE(s->tokens_saved <= s->tokens_looked_up, "tokens saved %lld > looked up %lld",
       (long long)s->tokens_saved, (long long)s->tokens_looked_up);
  RULE((s->hits == 0) == (s->tokens_saved == 0), "%lld hits saved %lld tokens", (long long)s->hits,
       (long long)s->tokens_saved);
  RULE(s->pages_evictable >= 0 && s->pages_evictable <= s->pages_cached,
       "evictable pages %d, cached %d", s->pages_evictable, s->pages_cached);
  RULE(s->pages_cached <= si->pages_total, "cached pages %d > pool %d", s->pages_cached,
       si->pages_total);
  RULE(si->pages_used + s->pages_evictable <= si->pages_total,
       "pages used %d + evictable %d > pool %d", si->pages_used, s->pages_evictable,
       si->pages_total);
  RULE((s->page_bytes_held == 0) == (s->pages_evictable == 0), "%d evictable pages hold %lld bytes",
       s->pages_evictable, (long long)s->page_bytes_held);
  RULE(s->snapshots >= 0 && s->snapshots <= s->snapshots_max, "snapshots %d, max %d", s->snapshots,
       s->snapshots_max);
  RULE(s->snapshot_bytes <= s->snapshot_budget_bytes, "snapshot bytes %lld > budget %lld",
       (long long)s->snapshot_bytes, (long long)s->snapshot_budget_bytes);
  RULE((s->snapshot_bytes == 0) == (s->snapshots == 0), "%d snapshots hold %lld bytes",
       s->snapshots, (long long)s->snapshot_bytes);
  RULE(s->snapshots <= s->snapshots_taken - s->snapshots_evicted,
       "%d snapshots held, %lld taken, %lld evicted", s->snapshots, (long long)s->snapshots_taken,
       (long long)s->snapshots_evicted);
  RULE(s->lookups >= prev->lookups && s->hits >= prev->hits && s->misses >= prev->misses &&
           s->tokens_looked_up >= prev->tokens_looked_up && s->tokens_saved >= prev->tokens_saved &&
           s->pages_evicted >= prev->pages_evicted && s->snapshots_taken >= prev->snapshots_taken &&
           s->snapshots_evicted >= prev->snapshots_evicted,
       "a counter went back");
  RULE(si->slots_used == si->n_running, "slots used %d, running %d", si->slots_used, si->n_running);
  RULE(si->n_running > 0 || si->pages_used == 0, "%d pages held with nothing running",
       si->pages_used);
#undef RULE
  return 1;
}

static ph_status pc_step(engine *e, int enabled, pc_steps *ps) {
  if (ps->broken) return PH_ERR_INTERNAL; /* a step on corrupt pools could loop forever */
  diag d;
  ph_step_info si;
  const ph_status st = engine_step(e, &si, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  if (st != PH_OK) { /* the engine is only to be freed now (engine.h) */
    ps->broken = 1;
    return st;
  }
  ps->steps++;
  ps->preempted += si.n_preempted;
  ps->last = si;
  char why[600] = "";
  const ph_status ck = engine_prefix_check(e, &d);
  ph_prefix_cache_stats s;
  engine_prefix_stats(e, &s);
  if (ck != PH_OK)
    snprintf(why, sizeof why, "engine_prefix_check: %s: %s", ph_status_name(ck), d.msg);
  else
    pc_stats_consistent(&s, &ps->prev, &si, enabled, why, sizeof why);
  if (why[0] && ps->bad++ == 0)
    snprintf(ps->first_bad, sizeof ps->first_bad, "step %llu: %s", (unsigned long long)si.step,
             why);
  ps->prev = s;
  if (ck != PH_OK) { /* reported; the engine is not stepped again */
    ps->broken = 1;
    return ck;
  }
  return st;
}

static void pc_drain(engine *e, int enabled, pc_steps *ps) {
  for (int k = 0; k < MAX_STEPS && engine_busy(e); k++)
    if (pc_step(e, enabled, ps) != PH_OK) return;
  CHECK(!engine_busy(e));
}

static void pc_report_bad(const pc_steps *ps, const char *what) {
  if (ps->bad)
    printf("  %s: checks failed at %lld of %lld steps, first: %s\n", what, (long long)ps->bad,
           (long long)ps->steps, ps->first_bad);
  CHECK_EQ_INT(ps->bad, 0);
}

/* Idle, every request finished: nothing held (the last step's info), then after
 * engine_prefix_clear nothing cached either, and the invariants still hold. */
static void pc_check_idle_and_clear(engine *e, const pc_steps *ps, const char *what) {
  CHECK(!engine_busy(e));
  if (ps->broken) return; /* reported; nothing more to learn from corrupt pools */
  CHECK_EQ_INT(ps->last.pages_used, 0);
  CHECK_EQ_INT(ps->last.slots_used, 0);
  CHECK_EQ_INT(ps->last.n_running, 0);
  diag d;
  CHECK_STATUS(engine_prefix_clear(e, &d), PH_OK, d.msg);
  CHECK_STATUS(engine_prefix_check(e, &d), PH_OK, d.msg);
  ph_prefix_cache_stats s;
  engine_prefix_stats(e, &s);
  const int ok = s.pages_cached == 0 && s.snapshots == 0 && s.pages_evictable == 0 &&
                 s.page_bytes_held == 0 && s.snapshot_bytes == 0;
  if (!ok)
    printf("  %s after engine_prefix_clear: %d pages cached, %d evictable (%lld bytes), %d "
           "snapshots (%lld bytes)\n",
           what, s.pages_cached, s.pages_evictable, (long long)s.page_bytes_held, s.snapshots,
           (long long)s.snapshot_bytes);
  CHECK(ok);
  check_idle_pools(e);
}

/* The bytes of one snapshot: one sequence's conv + recurrent state (one bank of a slot). */
static int64_t snapshot_bytes_of(engine *e) {
  hybrid_cache *c = paged_session_cache(engine_session(e));
  return hybrid_cache_slot_cost(c) / hybrid_cache_state_banks(c);
}

/* Every field 0: what a cache that is off reports. */
static int stats_all_zero(const ph_prefix_cache_stats *s) {
  ph_prefix_cache_stats zero;
  memset(&zero, 0, sizeof zero);
  return memcmp(s, &zero, sizeof zero) == 0;
}

/* ---- 1. randomized workload with shared prefixes ----------------------------------------------
 */

#define PC_MAX_REQ     200
#define PC_FRESH_ALONE 2 /* requests per seed also run in a fresh cache-off engine each */
/* Debug and sanitizer builds run the model tens of times slower: there shorter stems and
 * prompts, fewer arrival steps and every other seed (3 of 6: chunks 32, 24 and 48) keep the test
 * within a minute; the release build runs them all (~160 requests, ~14 k prompt tokens served
 * from the cache). */
#if SANITIZED || !defined(__OPTIMIZE__)
#define PC_STEMS         2
#define PC_STEM_MAX      128 /* tokens of a stem; prompts are cut from stems */
#define PC_SUFFIX_MAX    24
#define PC_PROMPT_MAX    176
#define PC_MAX_NEW       6
#define PC_ARRIVAL_STEPS 20
#define PC_SEED_STRIDE   2
#else
#define PC_STEMS         3
#define PC_STEM_MAX      320
#define PC_SUFFIX_MAX    40
#define PC_PROMPT_MAX    440 /* + PC_MAX_NEW: within the context of 512 */
#define PC_MAX_NEW       12
#define PC_ARRIVAL_STEPS 90
#define PC_SEED_STRIDE   1
#endif

typedef enum pc_kind {
  PC_ROOMY, /* pages for every request at once and the default snapshot budget: nothing evicted
               while there is room, no preemption */
  PC_TIGHT, /* a pool a few pages above the longest request and room for 3 snapshots: pages and
               snapshots evicted, the opening burst preempts */
} pc_kind;

/* The seeds test_shared_prefixes runs: chunks of 16, 24, 32, 48, 64 and 17, roomy and tight.
 * 24: snapshot boundaries at multiples of 48, which no page size alone gives; 17 (odd): at 272,
 * and a prompt's last chunk can be one token that completes a page (256 tokens), run by the
 * one-token step instead of the chunked form (test_partial_chunk_pages). */
static const struct {
  uint64_t seed;
  pc_kind kind;
  int64_t chunk;
  int n_threads;
} PC_SEEDS[] = {
    {11, PC_ROOMY, 16, 1}, {12, PC_TIGHT, 32, 2}, {13, PC_ROOMY, 64, 2}, {14, PC_TIGHT, 24, 1},
    {15, PC_TIGHT, 64, 1}, {16, PC_ROOMY, 48, 1}, {17, PC_ROOMY, 17, 2},
};
#define N_PC_SEEDS ((int)(sizeof PC_SEEDS / sizeof PC_SEEDS[0]))

typedef struct pc_req {
  req_spec spec;
  uint64_t id;
  int removed; /* engine_remove called while unfinished */
  outcome got;
} pc_req;

typedef struct pc_world {
  int64_t stems[PC_STEMS][PC_STEM_MAX];
  int64_t chunk, unit; /* prefill chunk, snapshot_unit */
  pc_req *reqs;        /* [PC_MAX_REQ] */
  int n;
} pc_world;

static sampling_params pc_sampling(rng *r) {
  sampling_params sp = greedy(1 + (int64_t)rng_below(r, PC_MAX_NEW));
  if (rng_below(r, 2)) {
    sp.temperature = rng_range(r, 0.4f, 1.4f);
    sp.top_k = rng_below(r, 3) ? 0 : 20;
    sp.top_p = rng_below(r, 2) ? 1.0f : 0.9f;
    sp.seed = rng_next(r);
  }
  return sp;
}

/* Where a prompt leaves its stem: at, one before or one after a multiple of the snapshot unit,
 * the page or the chunk, or anywhere. */
static int64_t pc_cut(rng *r, const pc_world *w) {
  const uint64_t how = rng_below(r, 4);
  if (how == 3) return 1 + (int64_t)rng_below(r, PC_STEM_MAX);
  const int64_t unit = how == 0 ? w->unit : how == 1 ? PAGE : w->chunk;
  const int64_t k = 1 + (int64_t)rng_below(r, (uint64_t)(PC_STEM_MAX / unit));
  int64_t cut = k * unit + (int64_t)rng_below(r, 3) - 1;
  if (cut > PC_STEM_MAX) cut = PC_STEM_MAX;
  return cut;
}

static void pc_append_random(rng *r, req_spec *q, int64_t n, int64_t V) {
  for (int64_t j = 0; j < n && q->n_prompt < PC_PROMPT_MAX; j++)
    q->prompt[q->n_prompt++] = (int64_t)rng_below(r, (uint64_t)V);
}

/* A new prompt: an exact repeat of an earlier one (1 in 8), a continuation of a finished one —
 * its prompt, its output and a new turn (1 in 8) — or a stem cut plus a suffix (none in 3). */
static void pc_prompt(engine *e, rng *r, const pc_world *w, int64_t V, req_spec *q) {
  const uint64_t how = rng_below(r, 8);
  q->n_prompt = 0;
  if (how == 0 && w->n > 0) {
    const req_spec *o = &w->reqs[rng_below(r, (uint64_t)w->n)].spec;
    memcpy(q->prompt, o->prompt, (size_t)o->n_prompt * sizeof *q->prompt);
    q->n_prompt = o->n_prompt;
    return;
  }
  if (how == 1 && w->n > 0) {
    const pc_req *o = &w->reqs[rng_below(r, (uint64_t)w->n)];
    ph_request_info info;
    diag d;
    int64_t n_out = 0;
    const int64_t *out = NULL;
    if (engine_request_info_get(e, o->id, &info, &d) == PH_OK && info.finish != PH_FINISH_NONE)
      out = engine_tokens(e, o->id, &n_out);
    if (out && n_out > 0) {
      memcpy(q->prompt, o->spec.prompt, (size_t)o->spec.n_prompt * sizeof *q->prompt);
      q->n_prompt = o->spec.n_prompt;
      for (int64_t j = 0; j < n_out && q->n_prompt < PC_PROMPT_MAX; j++)
        q->prompt[q->n_prompt++] = out[j];
      pc_append_random(r, q, 1 + (int64_t)rng_below(r, PC_SUFFIX_MAX), V);
      return;
    }
  }
  const int64_t *stem = w->stems[rng_below(r, PC_STEMS)];
  const int64_t cut = pc_cut(r, w);
  memcpy(q->prompt, stem, (size_t)cut * sizeof *q->prompt);
  q->n_prompt = cut;
  if (rng_below(r, 3)) pc_append_random(r, q, 1 + (int64_t)rng_below(r, PC_SUFFIX_MAX), V);
}

static int pc_add(engine *e, pc_world *w, const req_spec *q) {
  pc_req *x = &w->reqs[w->n];
  x->spec = *q;
  diag d;
  const ph_status st = engine_add(e, q->prompt, q->n_prompt, &q->sp, &x->id, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  if (st != PH_OK) return 0;
  w->n++;
  return 1;
}

/* An opening burst of max_batch prompts of a whole stem plus a suffix (more pages together than a
 * tight pool holds, so it preempts), then random arrivals and removals for arrival_steps steps,
 * then steps until idle, each one checked (pc_step). */
static void pc_traffic(engine *e, rng *r, pc_world *w, int arrival_steps, pc_steps *ps) {
  const ph_engine_params *p = engine_params_of(e);
  const int64_t V = engine_vocab(e);
  req_spec *q = calloc(1, sizeof *q);
  for (int a = 0; a < p->max_batch_size && w->n < PC_MAX_REQ; a++) {
    const int64_t *stem = w->stems[a % PC_STEMS];
    q->n_prompt = PC_STEM_MAX - (int64_t)rng_below(r, 8);
    memcpy(q->prompt, stem, (size_t)q->n_prompt * sizeof *q->prompt);
    pc_append_random(r, q, 1 + (int64_t)rng_below(r, PC_SUFFIX_MAX), V);
    q->sp = pc_sampling(r);
    if (!pc_add(e, w, q)) break;
  }
  const int active_cap = 2 * p->max_batch_size + 3;
  for (int k = 0; k < MAX_STEPS && (k < arrival_steps || engine_busy(e)); k++) {
    int active = ps->last.n_running + ps->last.n_waiting;
    const int arrivals = k >= arrival_steps || rng_below(r, 100) >= 30 ? 0
                         : rng_below(r, 10) == 0                       ? 2
                                                                       : 1;
    for (int a = 0; a < arrivals && active < active_cap && w->n < PC_MAX_REQ; a++, active++) {
      pc_prompt(e, r, w, V, q);
      q->sp = pc_sampling(r);
      if (!pc_add(e, w, q)) break;
    }
    if (w->n > 0 && rng_below(r, 100) < 3) {
      pc_req *x = &w->reqs[rng_below(r, (uint64_t)w->n)];
      ph_request_info info;
      diag d;
      CHECK_STATUS(engine_request_info_get(e, x->id, &info, &d), PH_OK, d.msg);
      CHECK_STATUS(engine_remove(e, x->id, &d), PH_OK, d.msg);
      if (info.finish == PH_FINISH_NONE) x->removed = 1;
    }
    if (pc_step(e, 1, ps) != PH_OK) break;
  }
  CHECK(!engine_busy(e));
  free(q);
}

static int64_t common_prefix(const req_spec *a, const req_spec *b) {
  int64_t n = 0;
  while (n < a->n_prompt && n < b->n_prompt && a->prompt[n] == b->prompt[n]) n++;
  return n;
}

typedef struct pc_totals {
  int64_t steps, requests, hits, tokens_saved, preemptions, pages_evicted, snapshots_evicted;
  int64_t identical, fresh_identical, dense;
} pc_totals;

static ph_engine_params pc_params(rng *r, pc_kind kind, int64_t chunk, int n_threads) {
  /* drawn one per statement: argument order is unspecified */
  const int64_t budget = chunk * (2 + (int64_t)rng_below(r, 2));
  const int32_t batch = 3 + (int32_t)rng_below(r, 3);
  /* the longest request: PC_PROMPT_MAX + PC_MAX_NEW tokens (29 pages; 12 in Debug); tight: up to
   * 4 more (the burst, batch x a whole stem and a suffix, needs 3 x 21+ pages; 3 x 9+), roomy:
   * every running request's longest at once */
  const int32_t longest = (PC_PROMPT_MAX + PC_MAX_NEW + PAGE - 1) / PAGE;
  const int32_t pages = kind == PC_TIGHT ? longest + 1 + (int32_t)rng_below(r, 4) : batch * longest;
  ph_engine_params p = small_params(batch, budget, chunk, pages + 1);
  p.n_threads = n_threads;
  p.prefix_cache = PH_PREFIX_CACHE_ON;
  return p;
}

/* One seed: the traffic with the cache on, then every request alone with it off and against the
 * dense session. */
static void pc_seed_run(int which, dense_ref *dr, pc_totals *tot) {
  const uint64_t seed = PC_SEEDS[which].seed;
  const pc_kind kind = PC_SEEDS[which].kind;
  rng r = rng_seed(seed);
  ph_engine_params p = pc_params(&r, kind, PC_SEEDS[which].chunk, PC_SEEDS[which].n_threads);
  ph_engine_params p_off = p;
  p_off.prefix_cache = PH_PREFIX_CACHE_OFF;
  engine *off = open_engine(&p_off); /* the references; first, for the snapshot size */
  if (!off) return;
  const int64_t snap = snapshot_bytes_of(off);
  if (kind == PC_TIGHT) p.prefix_cache_bytes = 3 * snap;
  engine *e = open_engine(&p);
  if (!e) {
    engine_free(off);
    return;
  }
  const int64_t V = engine_vocab(e);
  pc_world *w = calloc(1, sizeof *w);
  w->chunk = p.prefill_chunk;
  w->unit = snapshot_unit(p.prefill_chunk);
  w->reqs = calloc(PC_MAX_REQ, sizeof *w->reqs);
  for (int s = 0; s < PC_STEMS; s++)
    for (int64_t j = 0; j < PC_STEM_MAX; j++) w->stems[s][j] = (int64_t)rng_below(&r, (uint64_t)V);
  char what[48];
  snprintf(what, sizeof what, "seed %llu", (unsigned long long)seed);
  pc_steps ps;
  memset(&ps, 0, sizeof ps);
  ps.prev.enabled = 1;
  pc_traffic(e, &r, w, PC_ARRIVAL_STEPS, &ps);
  pc_report_bad(&ps, what);
  ph_prefix_cache_stats st;
  engine_prefix_stats(e, &st);
  if (kind == PC_TIGHT) {
    CHECK_EQ_INT(st.snapshot_budget_bytes, 3 * snap);
    CHECK(st.snapshots_max >= 1 && st.snapshots_max <= 3);
  }
  int64_t cached_sum = 0, n_cached_reqs = 0, preemptions = 0, bad_cached = 0;
  for (int i = 0; i < w->n; i++) {
    pc_req *x = &w->reqs[i];
    take_outcome(e, x->id, &x->got);
    CHECK_EQ_INT(x->got.status, PH_OK);
    preemptions += x->got.n_preemptions;
    cached_sum += x->got.n_cached;
    n_cached_reqs += x->got.n_cached > 0;
    /* served a prefix ending at a snapshot boundary, short of the prompt, that another request's
     * prompt had (or its own, computed before it was preempted) */
    int64_t shared = 0;
    for (int j = 0; j < w->n; j++)
      if (j != i || x->got.n_preemptions > 0) {
        const int64_t c = common_prefix(&x->spec, &w->reqs[j].spec);
        if (c > shared) shared = c;
      }
    const int64_t c = x->got.n_cached;
    const int ok = c >= 0 && c % w->unit == 0 && c < x->spec.n_prompt && c <= shared;
    if (!ok && bad_cached++ < 3)
      printf("  %s request %d: %lld tokens cached of a %lld-token prompt sharing at most %lld "
             "(snapshot unit %lld)\n",
             what, i, (long long)c, (long long)x->spec.n_prompt, (long long)shared,
             (long long)w->unit);
  }
  CHECK_EQ_INT(bad_cached, 0);
  pc_check_idle_and_clear(e, &ps, what);
  engine_free(e);

  /* what the counters must say: hits served prompts, and in a roomy pool (no preemption, so one
   * admission a request) the requests' own figures add up to them */
  CHECK(st.hits > 0);
  CHECK(st.tokens_saved > 0);
  CHECK(cached_sum <= st.tokens_saved);
  if (kind == PC_ROOMY) {
    CHECK_EQ_INT(preemptions, 0);
    CHECK_EQ_INT(cached_sum, st.tokens_saved);
    CHECK_EQ_INT(n_cached_reqs, st.hits);
  } else {
    CHECK(preemptions > 0);
    CHECK(st.pages_evicted > 0);
    CHECK(st.snapshots_evicted > 0);
  }

  int identical = 0, fresh_identical = 0, with_tokens = 0;
  const int64_t dense_before = dr->n_requests, bad_before = dr->n_bad;
  for (int i = 0; i < w->n; i++) {
    pc_req *x = &w->reqs[i];
    outcome alone;
    run_alone_in(off, &x->spec, &alone);
    CHECK_EQ_INT(alone.n_cached, 0);
    char label[96];
    snprintf(label, sizeof label, "%s request %d", what, i);
    const int same = same_as_alone(&x->got, &alone, V, label);
    if (!same)
      printf("  %s: prompt %lld tokens, %lld cached, %lld preemptions, removed %d\n", label,
             (long long)x->spec.n_prompt, (long long)x->got.n_cached,
             (long long)x->got.n_preemptions, x->removed);
    identical += same;
    if (i < PC_FRESH_ALONE) {
      outcome fresh;
      run_alone(&p_off, &x->spec, &fresh);
      fresh_identical += same_as_alone(&alone, &fresh, V, "a cache-off run after others");
      outcome_free(&fresh);
    }
    with_tokens += x->got.n_generated > 0;
    dense_ref_check(dr, &x->spec, &x->got, label);
    outcome_free(&alone);
  }
  /* off means off: the reference engine ran requests sharing prefixes and cached nothing */
  ph_prefix_cache_stats off_st;
  engine_prefix_stats(off, &off_st);
  CHECK(stats_all_zero(&off_st));
  check_idle_pools(off);
  engine_free(off);
  const int64_t dense = dr->n_requests - dense_before;
  CHECK_EQ_INT(identical, w->n);
  CHECK_EQ_INT(fresh_identical, w->n < PC_FRESH_ALONE ? w->n : PC_FRESH_ALONE);
  CHECK_EQ_INT(dense, with_tokens);
  CHECK_EQ_INT(dr->n_bad - bad_before, 0);
  printf("  %s: %s, chunk %lld (snapshots every %lld), batch %d, budget %lld, %d pages, %d "
         "snapshots max, %d thread(s): %lld steps, %d requests, %lld lookups, %lld hits, %lld of "
         "%lld prompt tokens saved, %lld pages and %lld snapshots evicted, %lld preemptions; "
         "%d/%d identical alone with the cache off, %lld/%d vs dense\n",
         what, kind == PC_TIGHT ? "tight" : "roomy", (long long)p.prefill_chunk, (long long)w->unit,
         p.max_batch_size, (long long)p.max_scheduled_tokens, p.num_blocks - 1, st.snapshots_max,
         p.n_threads, (long long)ps.steps, w->n, (long long)st.lookups, (long long)st.hits,
         (long long)st.tokens_saved, (long long)st.tokens_looked_up, (long long)st.pages_evicted,
         (long long)st.snapshots_evicted, (long long)preemptions, identical, w->n, (long long)dense,
         with_tokens);
  tot->steps += ps.steps;
  tot->requests += w->n;
  tot->hits += st.hits;
  tot->tokens_saved += st.tokens_saved;
  tot->preemptions += preemptions;
  tot->pages_evicted += st.pages_evicted;
  tot->snapshots_evicted += st.snapshots_evicted;
  tot->identical += identical;
  tot->fresh_identical += fresh_identical;
  tot->dense += dense;
  for (int i = 0; i < w->n; i++) outcome_free(&w->reqs[i].got);
  free(w->reqs);
  free(w);
}

static void test_shared_prefixes(void) {
  pc_totals tot;
  memset(&tot, 0, sizeof tot);
  dense_ref dr;
  dense_ref_open(&dr, golden_dir());
  const double t0 = now_ms();
  int n_seeds = 0;
  for (int i = PC_SEED_STRIDE - 1; i < N_PC_SEEDS; i += PC_SEED_STRIDE, n_seeds++)
    pc_seed_run(i, &dr, &tot);
  printf("  total: %d seeds, %lld steps, %lld requests, %lld hits, %lld prompt tokens saved, %lld "
         "pages and %lld snapshots evicted, %lld preemptions, %.1f s with the references\n",
         n_seeds, (long long)tot.steps, (long long)tot.requests, (long long)tot.hits,
         (long long)tot.tokens_saved, (long long)tot.pages_evicted,
         (long long)tot.snapshots_evicted, (long long)tot.preemptions, 1e-3 * (now_ms() - t0));
  dense_ref_report(&dr, "every request with tokens");
  CHECK_EQ_INT(tot.identical, tot.requests);
  CHECK(tot.requests >= n_seeds * 8);
  dense_ref_close(&dr);
}

/* ---- 2. the numbers of a hand-built sequence -------------------------------------------------
 * prefill_chunk 32, pages of 16: snapshot boundaries at the multiples of 32. The rule
 * (docs/prefix-cache.md): a request snapshots at boundaries S < n_prompt its own full prompt
 * chunks reach — its deepest one, floor((n_prompt - 1) / 32) * 32, and the one where its prompt
 * leaves a chain of cached pages another request computed, floor(shared full pages * 16 / 32) *
 * 32 — and is admitted with the longest cached prefix that ends at a snapshot, S < n_prompt.
 * Run one after another, each to its end, in a pool with room for all (nothing evicted):
 *   A  100 tokens                   miss; snapshots at 96 (its deepest)
 *   B  A[0:80] + 20 new             miss: A's only snapshot, 96, is past the 80 shared tokens;
 *                                   B leaves A's chain of 5 full pages (80 tokens) in page 6, so
 *                                   it snapshots at 64 (the boundary there) and 96 (its deepest)
 *   C  = A                          hit 96 (A's snapshot; S < 100)
 *   D  A[0:80] + 20 others          hit 64 (B's snapshot on A's first 4 pages); computes 64..100
 *                                   and snapshots at 96, its own deepest (its branch, 64, is
 *                                   there already)
 *   E  A[0:96]                      hit 64: 96 is not < n_prompt (a request computes at least
 *                                   its last token)
 *   F  A[0:97]                      hit 96, computes 1 token
 *   G  A[0:63] + 17 new             miss: no snapshot at 32; it snapshots at 32 (its branch:
 *                                   3 shared full pages, 48 tokens; and its deepest, 64 < 80,
 *                                   whose chain is its own: 2 snapshots)
 *   H  A[0:40] + 10 new             hit 32 (G's)
 * Counters: 8 lookups, 5 hits (C, D, E, F, H), 3 misses, 96 + 64 + 64 + 96 + 32 = 352 tokens
 * saved of 100 * 4 + 96 + 97 + 80 + 50 = 723 looked up; snapshots taken: A 1, B 2, D 1, G 2 = 6,
 * none evicted (the budget holds 8). */

#define SEQ_N 8

typedef struct seq_case {
  const char *name;
  int64_t from_a;   /* tokens of A it starts with */
  int64_t n_new;    /* then this many tokens of its own */
  int64_t n_cached; /* what it must be served */
} seq_case;

static const seq_case SEQ[SEQ_N] = {
    {"A", 100, 0, 0}, {"B", 80, 20, 0}, {"C", 100, 0, 96}, {"D", 80, 20, 64},
    {"E", 96, 0, 64}, {"F", 97, 0, 96}, {"G", 63, 17, 0},  {"H", 40, 10, 32},
};

static void seq_specs(int64_t V, req_spec *q) {
  rng r = rng_seed(2026);
  req_spec a;
  fill_prompt(&r, &a, 100, V);
  for (int i = 0; i < SEQ_N; i++) {
    memcpy(q[i].prompt, a.prompt, (size_t)SEQ[i].from_a * sizeof *q[i].prompt);
    q[i].n_prompt = SEQ[i].from_a;
    /* the new tokens differ from A's at the first one, so the shared prefix is exactly from_a */
    for (int64_t j = 0; j < SEQ[i].n_new; j++) {
      int64_t t = (int64_t)rng_below(&r, (uint64_t)V);
      if (j == 0 && t == a.prompt[SEQ[i].from_a]) t = (t + 1) % V;
      q[i].prompt[q[i].n_prompt++] = t;
    }
    q[i].sp = i % 2 ? sampled(6, 0.9f, 0, 1.0f, 70 + (uint64_t)i) : greedy(6);
  }
}

/* Runs SEQ one after another in an engine with the cache in mode; got[i] its outcomes, after[i]
 * the stats after request i. */
static void seq_run(ph_prefix_cache_mode mode, const req_spec *q, outcome *got,
                    ph_prefix_cache_stats *after) {
  ph_engine_params p = small_params(4, 128, 32, 64);
  p.prefix_cache = mode;
  const int on = mode != PH_PREFIX_CACHE_OFF;
  engine *e = open_engine(&p);
  if (e && on) { /* room for 8 snapshots: nothing evicted */
    p.prefix_cache_bytes = 8 * snapshot_bytes_of(e);
    engine_free(e);
    e = open_engine(&p);
  }
  if (!e) return;
  pc_steps ps;
  memset(&ps, 0, sizeof ps);
  ps.prev.enabled = on;
  for (int i = 0; i < SEQ_N; i++) {
    diag d;
    uint64_t id = 0;
    CHECK_STATUS(engine_add(e, q[i].prompt, q[i].n_prompt, &q[i].sp, &id, &d), PH_OK, d.msg);
    pc_drain(e, on, &ps);
    take_outcome(e, id, &got[i]);
    engine_prefix_stats(e, &after[i]);
  }
  pc_report_bad(&ps, on ? "the sequence, cache on" : "the sequence, cache off");
  pc_check_idle_and_clear(e, &ps, "the sequence");
  engine_free(e);
}

static void test_sequence_numbers(void) {
  req_spec *q = calloc(SEQ_N, sizeof *q);
  outcome got[SEQ_N], off[SEQ_N];
  ph_prefix_cache_stats after[SEQ_N], after_off[SEQ_N];
  memset(got, 0, sizeof got);
  memset(off, 0, sizeof off);
  seq_specs(256, q);
  seq_run(PH_PREFIX_CACHE_AUTO, q, got, after); /* AUTO: on */
  int64_t looked_up = 0, saved = 0, hits = 0;
  for (int i = 0; i < SEQ_N; i++) {
    looked_up += q[i].n_prompt;
    saved += SEQ[i].n_cached;
    hits += SEQ[i].n_cached > 0;
    if (got[i].n_cached != SEQ[i].n_cached)
      printf("  %s (%lld tokens): %lld cached, expected %lld\n", SEQ[i].name,
             (long long)q[i].n_prompt, (long long)got[i].n_cached, (long long)SEQ[i].n_cached);
    CHECK_EQ_INT(got[i].n_cached, SEQ[i].n_cached);
    CHECK_EQ_INT(after[i].lookups, i + 1);
    CHECK_EQ_INT(after[i].hits, hits);
    CHECK_EQ_INT(after[i].tokens_saved, saved);
    CHECK_EQ_INT(after[i].tokens_looked_up, looked_up);
  }
  const ph_prefix_cache_stats *s = &after[SEQ_N - 1];
  CHECK_EQ_INT(s->enabled, 1);
  CHECK_EQ_INT(s->lookups, 8);
  CHECK_EQ_INT(s->hits, 5);
  CHECK_EQ_INT(s->misses, 3);
  CHECK_EQ_INT(s->tokens_saved, 352);
  CHECK_EQ_INT(s->tokens_looked_up, 723);
  CHECK_EQ_INT(s->snapshots_taken, 6);
  CHECK_EQ_INT(s->snapshots, 6);
  CHECK_EQ_INT(s->snapshots_evicted, 0);
  CHECK_EQ_INT(s->pages_evicted, 0);
  CHECK_EQ_INT(s->pages_evictable, s->pages_cached); /* nothing runs */
  printf("  on: %lld lookups, %lld hits, %lld of %lld tokens saved, %d snapshots (%lld taken), %d "
         "pages cached\n",
         (long long)s->lookups, (long long)s->hits, (long long)s->tokens_saved,
         (long long)s->tokens_looked_up, s->snapshots, (long long)s->snapshots_taken,
         s->pages_cached);

  /* off means off: nothing looked up or cached, the same bits */
  seq_run(PH_PREFIX_CACHE_OFF, q, off, after_off);
  dense_ref dr;
  dense_ref_open(&dr, golden_dir());
  for (int i = 0; i < SEQ_N; i++) {
    CHECK_EQ_INT(off[i].n_cached, 0);
    CHECK(stats_all_zero(&after_off[i]));
    char label[48];
    snprintf(label, sizeof label, "%s, cache on vs off", SEQ[i].name);
    CHECK(same_as_alone(&got[i], &off[i], 256, label));
    CHECK(dense_ref_check(&dr, &q[i], &got[i], SEQ[i].name));
    outcome_free(&got[i]);
    outcome_free(&off[i]);
  }
  dense_ref_report(&dr, "the sequence");
  dense_ref_close(&dr);
  free(q);
}

/* ---- 3. pages that a partial chunk completed ---------------------------------------------------
 * Only pages computed by full prompt chunks are published: a prompt's last chunk is shorter than
 * prefill_chunk when the prompt does not end on the chunk grid, and a page it completes was
 * computed with another split than a longer prompt's. With an odd chunk the split differs inside
 * a page: at prefill_chunk 9 a 64-token prompt's last chunk is token 63 alone, which the one-token
 * step runs (op_gated_delta_net.c: a sequence of one token in a call), and it completes page
 * [48, 64); a longer prompt runs token 63 in the chunked form, in chunk [63, 72). Snapshot
 * boundaries: lcm(9, 16) = 144. One after another:
 *   P1  S[0:64]    miss; its full chunks end at 9, 18, ..., 63: pages [0, 48) published, page
 *                  [48, 64) not (the chunk [63, 64) is not full); no boundary below 64
 *   P2  S[0:200]   miss (48 tokens matched: branch 0); snapshots at 144, its deepest
 *   P3  S[0:180]   hit 144: P2's pages and state
 * Had P1 published page [48, 64), P2's equal page would have stayed unpublished (the first one
 * is canonical) and P3 would read P1's row 63. Every request bit-identical to its run alone with
 * the cache off. */
static void test_partial_chunk_pages(void) {
  enum { N = 3 };
  static const int64_t lens[N] = {64, 200, 180}, want[N] = {0, 0, 144};
  req_spec *q = calloc(N, sizeof *q);
  rng r = rng_seed(909);
  req_spec *stem = calloc(1, sizeof *stem);
  fill_prompt(&r, stem, 200, 256);
  for (int i = 0; i < N; i++) {
    memcpy(q[i].prompt, stem->prompt, (size_t)lens[i] * sizeof *q[i].prompt);
    q[i].n_prompt = lens[i];
    q[i].sp = greedy(4);
  }
  ph_engine_params p = small_params(4, 36, 9, 64);
  ph_engine_params p_off = p;
  p_off.prefix_cache = PH_PREFIX_CACHE_OFF;
  engine *e = open_engine(&p), *off = open_engine(&p_off);
  pc_steps ps;
  memset(&ps, 0, sizeof ps);
  ps.prev.enabled = 1;
  dense_ref dr;
  dense_ref_open(&dr, golden_dir());
  for (int i = 0; e && off && i < N; i++) {
    diag d;
    uint64_t id = 0;
    outcome got, alone;
    CHECK_STATUS(engine_add(e, q[i].prompt, q[i].n_prompt, &q[i].sp, &id, &d), PH_OK, d.msg);
    pc_drain(e, 1, &ps);
    take_outcome(e, id, &got);
    run_alone_in(off, &q[i], &alone);
    char label[32];
    snprintf(label, sizeof label, "P%d (%lld tokens)", i + 1, (long long)lens[i]);
    CHECK_EQ_INT(got.n_cached, want[i]);
    CHECK(same_as_alone(&got, &alone, 256, label));
    CHECK(dense_ref_check(&dr, &q[i], &got, label));
    outcome_free(&got);
    outcome_free(&alone);
  }
  pc_report_bad(&ps, "partial chunks");
  if (e) pc_check_idle_and_clear(e, &ps, "partial chunks");
  dense_ref_report(&dr, "P1-P3");
  dense_ref_close(&dr);
  engine_free(e);
  engine_free(off);
  free(stem);
  free(q);
}

/* A request capturing every position's logits needs every prompt position computed: it takes no
 * hit though a snapshot covers its prompt, and its rows equal those of the same request in an
 * engine with the cache off; the same prompt captured as sampled rows is served the prefix. */
static void test_positions_never_hit(void) {
  req_spec *q = calloc(SEQ_N, sizeof *q);
  seq_specs(256, q); /* q[0] = A, q[2] = C = A */
  ph_engine_params p = small_params(4, 128, 32, 64);
  p.capture_logits = PH_CAPTURE_POSITIONS;
  ph_engine_params p_off = p;
  p_off.prefix_cache = PH_PREFIX_CACHE_OFF;
  engine *e = open_engine(&p), *off = open_engine(&p_off);
  if (!e || !off) {
    engine_free(e);
    engine_free(off);
    free(q);
    return;
  }
  diag d;
  pc_steps ps;
  memset(&ps, 0, sizeof ps);
  ps.prev.enabled = 1;
  uint64_t id[3], id_off = 0;
  /* A with sampled rows: snapshots at 96 */
  CHECK_STATUS(engine_add(e, q[0].prompt, q[0].n_prompt, &q[0].sp, &id[0], &d), PH_OK, d.msg);
  pc_drain(e, 1, &ps);
  /* C capturing positions: no hit */
  CHECK_STATUS(engine_set_capture(e, PH_CAPTURE_POSITIONS, &d), PH_OK, d.msg);
  CHECK_STATUS(engine_add(e, q[2].prompt, q[2].n_prompt, &q[2].sp, &id[1], &d), PH_OK, d.msg);
  pc_drain(e, 1, &ps);
  /* C again with sampled rows: 96 */
  CHECK_STATUS(engine_set_capture(e, PH_CAPTURE_SAMPLED, &d), PH_OK, d.msg);
  CHECK_STATUS(engine_add(e, q[2].prompt, q[2].n_prompt, &q[2].sp, &id[2], &d), PH_OK, d.msg);
  pc_drain(e, 1, &ps);
  pc_report_bad(&ps, "positions");
  static const int64_t want[3] = {0, 0, 96};
  ph_request_info info;
  for (int i = 0; i < 3; i++) {
    CHECK_STATUS(engine_request_info_get(e, id[i], &info, &d), PH_OK, d.msg);
    CHECK_EQ_INT(info.n_cached_tokens, want[i]);
  }
  /* the positions run's rows against the same request in a cache-off engine */
  CHECK_STATUS(engine_set_capture(off, PH_CAPTURE_POSITIONS, &d), PH_OK, d.msg);
  CHECK_STATUS(engine_add(off, q[2].prompt, q[2].n_prompt, &q[2].sp, &id_off, &d), PH_OK, d.msg);
  pc_steps ps_off;
  memset(&ps_off, 0, sizeof ps_off);
  pc_drain(off, 0, &ps_off);
  pc_report_bad(&ps_off, "positions, cache off");
  int64_t n_rows = 0, n_rows_off = 0;
  const float *rows = engine_captured(e, id[1], &n_rows);
  const float *rows_off = engine_captured(off, id_off, &n_rows_off);
  CHECK(rows && rows_off);
  CHECK_EQ_INT(n_rows, q[2].n_prompt + 6 - 1);
  CHECK_EQ_INT(n_rows, n_rows_off);
  if (rows && rows_off && n_rows == n_rows_off)
    CHECK(memcmp(rows, rows_off, (size_t)(n_rows * 256) * sizeof *rows) == 0);
  for (int i = 0; i < 3; i++) CHECK_STATUS(engine_release(e, id[i], &d), PH_OK, d.msg);
  CHECK_STATUS(engine_release(off, id_off, &d), PH_OK, d.msg);
  pc_check_idle_and_clear(e, &ps, "positions");
  engine_free(e);
  engine_free(off);
  free(q);
}

int main(int argc, char **argv) {
  check_select(argc, argv); /* test_prefix_cache sequence: that test only */
  RUN_SELECTED(test_sequence_numbers);
  RUN_SELECTED(test_partial_chunk_pages);
  RUN_SELECTED(test_positions_never_hit);
  RUN_SELECTED(test_shared_prefixes);
  return check_finish();
}
