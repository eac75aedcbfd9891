/* test_speculative — speculative decoding in the engine (docs/speculative.md) on the golden tiny
 * checkpoints: the product guarantee is that speculation never changes an output, so every
 * request run with drafts is compared with the same request run without them:
 *  - the same tokens and the same captured logits rows, bit for bit (memcmp), greedy and
 *    sampled, with every drafter of this file (n-gram; replay at acceptance rates from 0 to 1)
 *    and k from 1 to 8; and, as a reference the engine did not produce, the dense session
 *    teacher-forced over prompt + output (dense_ref_check, tests/engine_testing.h);
 *  - a randomized schedule: arrivals, removals in any state, speculative and plain requests in
 *    one batch, a page pool small enough to preempt, the pools checked after every step; every
 *    request against its plain run alone;
 *  - bf16 activations (the conv state replays bf16 bytes) and a model without fixed state
 *    (DeepSeek MLA: a verify is an ordinary chunk);
 *  - the typed refusals: no compact state updates, more drafts than the capacity, an MTP request
 *    on a checkpoint without an MTP head, bad speculative parameters.
 * A "plain" run is an engine built without compact state updates (state_update_capacity 0, the
 * pruned LM head): so these checks also cover that capacity > 0 changes no bits.
 */
#include <sys/stat.h>

#include "engine_testing.h"
#include "models/registry.h"
#include "models/tiny.h"
#include "runtime/mtp_session.h"

#define N_SPEC   10
#define SPEC_CAP 8

static ph_engine_params spec_params(int32_t cap, int32_t n_blocks) {
  ph_engine_params p = small_params(6, 96, 32, n_blocks);
  p.state_update_capacity = cap;
  p.n_threads = 1;
  return p;
}

static engine *open_engine_at(const char *dir, const ph_engine_params *p) {
  engine *e = NULL;
  diag d;
  CHECK_STATUS(engine_create(dir, p, &e, &d), PH_OK, d.msg);
  if (e) engine_set_capture_logits(e, 1);
  return e;
}

/* Prompts with repeats (the n-gram drafter finds matches) and without. */
static void spec_prompt(rng *r, req_spec *q, int64_t vocab) {
  const int64_t n = 4 + (int64_t)rng_below(r, 60);
  fill_prompt(r, q, n, vocab);
  if (rng_below(r, 2)) /* a repeated phrase */
    for (int64_t j = n / 2; j < n; j++) q->prompt[j] = q->prompt[j - n / 2];
}

/* The replay continuation: the plain output with a fraction `wrong` of its tokens changed. */
static int64_t *replay_of(rng *r, const outcome *plain, double wrong, int64_t vocab) {
  int64_t *t = malloc((size_t)(plain->n_generated + 1) * sizeof *t);
  if (!t) return NULL;
  for (int64_t j = 0; j < plain->n_generated; j++) {
    const int bad = (double)rng_below(r, 1000) < wrong * 1000.0;
    t[j] = bad ? (plain->tokens[j] + 1) % vocab : plain->tokens[j];
  }
  return t;
}

/* Adds every request of qs to e at once and steps it idle; outcomes into out. */
static void run_together(engine *e, const req_spec *qs, int n, outcome *out, run_stats *rs) {
  uint64_t ids[N_SPEC];
  diag d;
  for (int i = 0; i < n; i++)
    CHECK_STATUS(engine_add(e, qs[i].prompt, qs[i].n_prompt, &qs[i].sp, &ids[i], &d), PH_OK, d.msg);
  drain(e, rs);
  for (int i = 0; i < n; i++) take_outcome(e, ids[i], &out[i]);
}

/* Speculative runs of a fixed set against plain runs alone, for the checkpoint at dir; half the
 * requests draft with `even` (n-gram or the MTP head), half replay. */
static void spec_vs_plain(const char *dir, ph_dtype io, ph_draft_method even, const char *what) {
  ph_engine_params pp = spec_params(0, 0), sp = spec_params(SPEC_CAP, 0);
  pp.io_dtype = sp.io_dtype = io;
  engine *plain = open_engine_at(dir, &pp), *spec = open_engine_at(dir, &sp);
  dense_ref dr;
  const int dense = io == PH_DTYPE_INVALID && dense_ref_open(&dr, dir);
  if (!plain || !spec) goto out;
  const int64_t V = engine_vocab(plain);
  rng r = rng_seed(2026);
  static req_spec qs[N_SPEC];
  outcome alone[N_SPEC], got[N_SPEC];
  int64_t *replay[N_SPEC] = {0};
  for (int i = 0; i < N_SPEC; i++) {
    spec_prompt(&r, &qs[i], V);
    qs[i].sp = i % 3 == 1 ? sampled(24 + i, 0.9f, 0, 0.95f, 77 + (uint64_t)i) : greedy(24 + i);
    qs[i].sp.ignore_eos = 1;
    run_alone_in(plain, &qs[i], &alone[i]);
  }
  /* drafters: n-gram (k 1..8), replay at acceptance 1, 0.7, 0.3 and 0 */
  for (int i = 0; i < N_SPEC; i++) {
    ph_speculative_params *s = &qs[i].sp.speculative;
    s->num_draft_tokens = 1 + i % SPEC_CAP;
    if (i % 2 == 0) {
      s->method = even;
    } else {
      static const double wrong[] = {0.0, 0.3, 0.7, 1.0};
      replay[i] = replay_of(&r, &alone[i], wrong[(i / 2) % 4], V);
      s->method = PH_DRAFT_REPLAY;
      s->replay_tokens = replay[i];
      s->n_replay_tokens = alone[i].n_generated;
    }
  }
  run_stats rs;
  memset(&rs, 0, sizeof rs);
  run_together(spec, qs, N_SPEC, got, &rs);
  CHECK_EQ_INT(rs.bad_steps, 0);
  if (rs.bad_steps) printf("  %s\n", rs.first_bad);
  int64_t drafted = 0, accepted = 0;
  for (int i = 0; i < N_SPEC; i++) {
    char label[64];
    snprintf(label, sizeof label, "%s request %d (%s, k %d)", what, i,
             ph_draft_method_name(qs[i].sp.speculative.method),
             (int)qs[i].sp.speculative.num_draft_tokens);
    CHECK(same_as_alone(&got[i], &alone[i], V, label));
    if (dense) CHECK(dense_ref_check(&dr, &qs[i], &got[i], label));
    drafted += got[i].n_drafted;
    accepted += got[i].n_accepted;
    if (qs[i].sp.speculative.method == PH_DRAFT_REPLAY && replay[i] && got[i].n_drafted > 0) {
      /* an exact continuation is accepted whole; an all-wrong one never */
      if ((i / 2) % 4 == 0) CHECK_EQ_INT(got[i].n_accepted, got[i].n_drafted);
      if ((i / 2) % 4 == 3) CHECK_EQ_INT(got[i].n_accepted, 0);
    }
  }
  printf("  %s: %d requests, %lld drafts verified, %lld accepted, %lld steps (plain alone: "
         "bit-identical)\n",
         what, N_SPEC, (long long)drafted, (long long)accepted, (long long)rs.steps);
  CHECK(drafted > 0);
  CHECK(accepted > 0 && accepted < drafted);
  if (dense) dense_ref_report(&dr, what);
  for (int i = 0; i < N_SPEC; i++) {
    outcome_free(&alone[i]);
    outcome_free(&got[i]);
    free(replay[i]);
  }
out:
  if (dense) dense_ref_close(&dr);
  engine_free(plain);
  engine_free(spec);
}

static void test_spec_f32(void) {
  spec_vs_plain(golden_dir(), PH_DTYPE_INVALID, PH_DRAFT_NGRAM, "f32");
}
static void test_spec_bf16(void) {
  spec_vs_plain(golden_dir(), PH_DTYPE_BF16, PH_DRAFT_NGRAM, "bf16 io");
}

/* The MTP head as the drafter: a make-tiny checkpoint with a head (--mtp-layers 1). */
static void test_spec_mtp(void) {
  static char dir[1024];
  snprintf(dir, sizeof dir, "%s/tiny-mtp", check_env("PH_TMP_DIR"));
  mkdir(check_env("PH_TMP_DIR"), 0755);
  tiny_params tp = tiny_params_default();
  tp.mtp_layers = 1;
  tp.seed = 15;
  diag d;
  CHECK_STATUS(tiny_write(dir, &tp, &d), PH_OK, d.msg);
  spec_vs_plain(dir, PH_DTYPE_INVALID, PH_DRAFT_MTP, "mtp");
}

static void test_spec_stateless(void) {
  static char dir[1024];
  check_data(dir, sizeof dir, "golden/deepseek-v3-tiny-moe/checkpoint");
  spec_vs_plain(dir, PH_DTYPE_INVALID, PH_DRAFT_NGRAM, "deepseek (no fixed state)");
}

static int64_t argmax_of(const float *row, int64_t n) {
  int64_t best = 0;
  for (int64_t v = 1; v < n; v++)
    if (row[v] > row[best]) best = v;
  return best;
}

/* The engine's MTP drafts against the drafter's documented flow (runtime/mtp_session.h) run by
 * the test on its own session of the same head: after every step of one request, catch up on
 * the positions the step kept (the engine's target hidden rows, the tokens shifted by one),
 * then chain; the drafts must be the engine's, token for token. Catches a wrong position, a
 * token off by one, a chain fed the wrong hidden row, a rejected draft's row kept. */
static void test_spec_mtp_flow(void) {
  static char dir[1024];
  snprintf(dir, sizeof dir, "%s/tiny-mtp-flow", check_env("PH_TMP_DIR"));
  mkdir(check_env("PH_TMP_DIR"), 0755);
  tiny_params tp = tiny_params_default();
  tp.mtp_layers = 1;
  tp.seed = 16;
  diag d;
  CHECK_STATUS(tiny_write(dir, &tp, &d), PH_OK, d.msg);
  ph_engine_params p = spec_params(SPEC_CAP, 0);
  engine *e = open_engine_at(dir, &p);
  ph_model *m = NULL;
  CHECK_STATUS(ph_model_open(dir, NULL, &m), PH_OK, ph_model_error(m));
  mtp_session *ref = NULL;
  model_options o = model_options_default();
  o.max_context = p.max_context;
  if (e && m) CHECK_STATUS(mtp_session_create(m, &o, 1, 512, 0, &ref, &d), PH_OK, d.msg);
  if (!e || !ref) goto out;
  const int64_t V = engine_vocab(e);
  int32_t h = -1;
  CHECK_STATUS(mtp_session_open(ref, &h, &d), PH_OK, d.msg);
  rng r = rng_seed(17);
  req_spec q;
  fill_prompt(&r, &q, 20, V);
  q.sp = greedy(40);
  q.sp.ignore_eos = 1;
  q.sp.speculative.method = PH_DRAFT_MTP;
  q.sp.speculative.num_draft_tokens = 3;
  uint64_t id = 0;
  CHECK_STATUS(engine_add(e, q.prompt, q.n_prompt, &q.sp, &id, &d), PH_OK, d.msg);
  int64_t computed = 0, checked = 0, ctx[128];
  memcpy(ctx, q.prompt, (size_t)q.n_prompt * sizeof *ctx);
  static float hid[64 * 1024], chain[1024];
  for (int step = 0; step < 64 && engine_busy(e); step++) {
    ph_step_info si;
    CHECK_STATUS(engine_step(e, &si, &d), PH_OK, d.msg);
    ph_request_info info;
    CHECK_STATUS(engine_request_info_get(e, id, &info, &d), PH_OK, d.msg);
    if (info.finish != PH_FINISH_NONE) break;
    int64_t n_gen = 0;
    const int64_t *gen = engine_tokens(e, id, &n_gen);
    memcpy(ctx + q.n_prompt, gen, (size_t)n_gen * sizeof *ctx);
    const int64_t now = q.n_prompt + n_gen - 1; /* positions computed: all but the last token */
    const int64_t kept = now - computed;
    int64_t H = 0;
    const float *rows = paged_session_hidden(engine_session(e), 0, 0, &H);
    CHECK(rows != NULL && kept >= 1 && kept * H <= (int64_t)(sizeof hid / sizeof *hid));
    if (!rows || kept < 1) break;
    memcpy(hid, rows, (size_t)(kept * H) * sizeof *hid);
    mtp_seq ms = {h, computed, kept, ctx + computed + 1, hid};
    CHECK_STATUS(mtp_session_run(ref, &ms, 1, &d), PH_OK, d.msg);
    int64_t want[SPEC_CAP];
    want[0] = argmax_of(mtp_session_logits(ref, 0, kept - 1), V);
    memcpy(chain, mtp_session_hidden(ref, 0, kept - 1), (size_t)H * sizeof *chain);
    for (int j = 1; j < 3; j++) {
      mtp_seq c = {h, now + j - 1, 1, &want[j - 1], chain};
      CHECK_STATUS(mtp_session_run(ref, &c, 1, &d), PH_OK, d.msg);
      want[j] = argmax_of(mtp_session_logits(ref, 0, 0), V);
      memcpy(chain, mtp_session_hidden(ref, 0, 0), (size_t)H * sizeof *chain);
    }
    int64_t got[SPEC_CAP];
    const int32_t n = engine_mtp_drafts(e, id, got, SPEC_CAP);
    CHECK_EQ_INT(n, 3);
    for (int j = 0; j < 3 && j < n; j++) CHECK_EQ_INT(got[j], want[j]);
    checked++;
    computed = now;
  }
  printf("  %lld steps' drafts equal to the test's own run of the MTP flow\n", (long long)checked);
  CHECK(checked >= 8);
out:
  mtp_session_free(ref);
  ph_model_free(m);
  engine_free(e);
}

/* Every position's logits row (PH_CAPTURE_POSITIONS): a verify keeps the rows of its accepted
 * prefix only; a rejected draft's row is never a position of the request. Both engines have
 * compact state updates (the whole LM head); one speculates. */
static void test_spec_positions(void) {
  ph_engine_params p = spec_params(SPEC_CAP, 0);
  p.capture_logits = PH_CAPTURE_POSITIONS; /* the graph computes every row */
  engine *a = open_engine(&p), *b = open_engine(&p);
  diag d;
  if (!a || !b) goto out;
  CHECK_STATUS(engine_set_capture(a, PH_CAPTURE_POSITIONS, &d), PH_OK, d.msg);
  CHECK_STATUS(engine_set_capture(b, PH_CAPTURE_POSITIONS, &d), PH_OK, d.msg);
  const int64_t V = engine_vocab(a);
  rng r = rng_seed(99);
  for (int i = 0; i < 4; i++) {
    req_spec q;
    spec_prompt(&r, &q, V);
    q.sp = greedy(20);
    q.sp.ignore_eos = 1;
    uint64_t ia = 0, ib = 0;
    CHECK_STATUS(engine_add(a, q.prompt, q.n_prompt, &q.sp, &ia, &d), PH_OK, d.msg);
    q.sp.speculative.method = PH_DRAFT_NGRAM;
    q.sp.speculative.num_draft_tokens = 1 + 2 * i;
    CHECK_STATUS(engine_add(b, q.prompt, q.n_prompt, &q.sp, &ib, &d), PH_OK, d.msg);
    run_stats rs;
    memset(&rs, 0, sizeof rs);
    drain(a, &rs);
    drain(b, &rs);
    const float *la = engine_logits(a, ia), *lb = engine_logits(b, ib);
    const int64_t rows = q.n_prompt + 20 - 1;
    CHECK(la && lb && memcmp(la, lb, (size_t)(rows * V) * sizeof *la) == 0);
    ph_request_info info;
    CHECK_STATUS(engine_request_info_get(b, ib, &info, &d), PH_OK, d.msg);
    CHECK(info.n_drafted > info.n_accepted); /* some rows were rejected */
    CHECK_STATUS(engine_release(a, ia, &d), PH_OK, d.msg);
    CHECK_STATUS(engine_release(b, ib, &d), PH_OK, d.msg);
  }
out:
  engine_free(a);
  engine_free(b);
}

/* ---- randomized ------------------------------------------------------------------------------ */

#define R_REQS 24

typedef struct rand_req {
  req_spec q;
  int64_t arrive, remove; /* steps; remove -1: never */
  uint64_t id;
  int added, done;
  outcome got, alone;
  int64_t *replay;
} rand_req;

static void test_spec_randomized(void) {
  const int64_t seeds = 3;
  int64_t total_pre = 0, total_drafted = 0, total_accepted = 0, total_removed = 0;
  static rand_req rq[R_REQS];
  for (int64_t seed = 1; seed <= seeds; seed++) {
    rng r = rng_seed((uint64_t)seed * 9001);
    /* pages for about 3 long requests: preemption */
    ph_engine_params pp = spec_params(0, 12), sp = spec_params(SPEC_CAP, 12);
    sp.max_batch_size = pp.max_batch_size = 3 + (int32_t)rng_below(&r, 4);
    /* odd seeds: 2 kernel threads for the speculative engine (its commits split over them),
     * its references alone on 1 */
    sp.n_threads = seed % 2 ? 2 : 1;
    engine *plain = open_engine(&pp), *spec = open_engine(&sp);
    if (!plain || !spec) {
      engine_free(plain);
      engine_free(spec);
      return;
    }
    const int64_t V = engine_vocab(plain);
    for (int i = 0; i < R_REQS; i++) {
      rand_req *x = &rq[i];
      memset(x, 0, sizeof *x);
      spec_prompt(&r, &x->q, V);
      x->q.sp = rng_below(&r, 2)
                    ? greedy(8 + (int64_t)rng_below(&r, 40))
                    : sampled(8 + (int64_t)rng_below(&r, 40), 0.8f, 20, 0.9f, rng_below(&r, 1000));
      x->q.sp.ignore_eos = rng_below(&r, 4) != 0;
      x->arrive = (int64_t)rng_below(&r, 40);
      x->remove = rng_below(&r, 6) == 0 ? x->arrive + (int64_t)rng_below(&r, 30) : -1;
      run_alone_in(plain, &x->q, &x->alone);
      const uint64_t m = rng_below(&r, 4);
      ph_speculative_params *s = &x->q.sp.speculative;
      s->num_draft_tokens = 1 + (int32_t)rng_below(&r, SPEC_CAP);
      if (m == 1) {
        s->method = PH_DRAFT_NGRAM;
        s->ngram_min = 1;
        s->ngram_max = 1 + (int32_t)rng_below(&r, 4);
      } else if (m >= 2 && x->alone.n_generated > 0) {
        x->replay = replay_of(&r, &x->alone, 0.1 * (double)rng_below(&r, 8), V);
        s->method = PH_DRAFT_REPLAY;
        s->replay_tokens = x->replay;
        s->n_replay_tokens = x->alone.n_generated;
      } /* else plain, in the same batches */
    }
    run_stats rs;
    memset(&rs, 0, sizeof rs);
    diag d;
    int n_done = 0;
    for (int64_t step = 0; step < MAX_STEPS && n_done < R_REQS; step++) {
      for (int i = 0; i < R_REQS; i++) {
        rand_req *x = &rq[i];
        if (!x->added && x->arrive <= step) {
          CHECK_STATUS(engine_add(spec, x->q.prompt, x->q.n_prompt, &x->q.sp, &x->id, &d), PH_OK,
                       d.msg);
          x->added = 1;
        }
        if (x->added && !x->done && x->remove == step)
          CHECK_STATUS(engine_remove(spec, x->id, &d), PH_OK, d.msg);
      }
      ph_step_info si;
      if (checked_step(spec, &si, &rs) != PH_OK) break;
      total_drafted += si.n_drafted;
      total_accepted += si.n_accepted;
      for (int i = 0; i < R_REQS; i++) {
        rand_req *x = &rq[i];
        ph_request_info info;
        if (!x->added || x->done || engine_request_info_get(spec, x->id, &info, &d) != PH_OK ||
            info.finish == PH_FINISH_NONE)
          continue;
        take_outcome(spec, x->id, &x->got);
        x->done = 1;
        n_done++;
        total_removed += x->got.finish == PH_FINISH_ABORTED;
      }
    }
    CHECK_EQ_INT(n_done, R_REQS);
    CHECK_EQ_INT(rs.bad_steps, 0);
    if (rs.bad_steps) printf("  %s\n", rs.first_bad);
    check_idle_pools(spec);
    total_pre += rs.preemptions;
    for (int i = 0; i < R_REQS; i++) {
      char label[64];
      snprintf(label, sizeof label, "seed %lld request %d (%s)", (long long)seed, i,
               ph_draft_method_name(rq[i].q.sp.speculative.method));
      CHECK(same_as_alone(&rq[i].got, &rq[i].alone, V, label));
      outcome_free(&rq[i].got);
      outcome_free(&rq[i].alone);
      free(rq[i].replay);
    }
    engine_free(plain);
    engine_free(spec);
  }
  printf("  %lld seeds x %d requests: %lld drafts, %lld accepted, %lld preemptions, %lld "
         "removed; all bit-identical to their plain runs alone\n",
         (long long)seeds, R_REQS, (long long)total_drafted, (long long)total_accepted,
         (long long)total_pre, (long long)total_removed);
  CHECK(total_pre > 0);
  CHECK(total_accepted > 0);
}

/* ---- refusals -------------------------------------------------------------------------------- */

static void expect_refused(engine *e, const req_spec *q, ph_status want, const char *needle) {
  diag d;
  uint64_t id = 0;
  CHECK_STATUS(engine_add(e, q->prompt, q->n_prompt, &q->sp, &id, &d), PH_OK, d.msg);
  run_stats rs;
  memset(&rs, 0, sizeof rs);
  drain(e, &rs);
  ph_request_info info;
  CHECK_STATUS(engine_request_info_get(e, id, &info, &d), PH_OK, d.msg);
  CHECK_EQ_INT(info.finish, PH_FINISH_ERROR);
  CHECK_STATUS(info.status, want, info.message);
  CHECK_CONTAINS(info.message, needle);
  CHECK_STATUS(engine_release(e, id, &d), PH_OK, d.msg);
}

static void test_spec_refusals(void) {
  ph_engine_params p0 = spec_params(0, 0), p2 = spec_params(2, 0);
  engine *e0 = open_engine(&p0), *e2 = open_engine(&p2);
  if (!e0 || !e2) goto out;
  req_spec q;
  rng r = rng_seed(5);
  fill_prompt(&r, &q, 8, 256);
  q.sp = greedy(4);
  q.sp.speculative.method = PH_DRAFT_NGRAM;
  expect_refused(e0, &q, PH_ERR_UNSUPPORTED, "state_update_capacity");
  q.sp.speculative.num_draft_tokens = 4;
  expect_refused(e2, &q, PH_ERR_INVALID_ARGUMENT, "more than the model's state_update_capacity 2");
  q.sp.speculative.num_draft_tokens = 2;
  q.sp.speculative.method = PH_DRAFT_MTP;
  expect_refused(e2, &q, PH_ERR_UNSUPPORTED, "no MTP head");
  q.sp.speculative.method = PH_DRAFT_NGRAM;
  q.sp.speculative.num_draft_tokens = 9;
  expect_refused(e2, &q, PH_ERR_INVALID_ARGUMENT, "num_draft_tokens = 9");
  q.sp.speculative.num_draft_tokens = 2;
  q.sp.speculative.ngram_min = 3;
  q.sp.speculative.ngram_max = 2;
  expect_refused(e2, &q, PH_ERR_INVALID_ARGUMENT, "ngram_min = 3");
  q.sp.speculative.ngram_min = q.sp.speculative.ngram_max = 0;
  q.sp.speculative.method = PH_DRAFT_REPLAY;
  expect_refused(e2, &q, PH_ERR_INVALID_ARGUMENT, "replay tokens");
  const int64_t bad[2] = {3, 999};
  q.sp.speculative.replay_tokens = bad;
  q.sp.speculative.n_replay_tokens = 2;
  expect_refused(e2, &q, PH_ERR_INVALID_ARGUMENT, "outside the vocabulary");
  q.sp.speculative.method = (ph_draft_method)7;
  expect_refused(e2, &q, PH_ERR_INVALID_ARGUMENT, "speculative.method = 7");
  /* the engine still serves a good speculative request afterwards */
  q.sp.speculative.method = PH_DRAFT_NGRAM;
  outcome o;
  run_alone_in(e2, &q, &o);
  CHECK_EQ_INT(o.finish, PH_FINISH_LENGTH);
  outcome_free(&o);
out:
  engine_free(e0);
  engine_free(e2);
}

static const char *only;
#define RUN_IF(fn)                                                                                 \
  do {                                                                                             \
    if (!only || strstr(#fn, only)) RUN(fn);                                                       \
  } while (0)

int main(int argc, char **argv) {
  only = argc > 1 ? argv[1] : NULL;
  RUN_IF(test_spec_refusals);
  RUN_IF(test_spec_f32);
  RUN_IF(test_spec_bf16);
  RUN_IF(test_spec_stateless);
  RUN_IF(test_spec_mtp);
  RUN_IF(test_spec_mtp_flow);
  RUN_IF(test_spec_positions);
  RUN_IF(test_spec_randomized);
  return check_finish();
}
