/* test_paged_session — the session's LATENT binding (DeepSeek MLA's packed graph I/O) on a small
 * hand-made graph: input_ids, block_table, cumulative_sequence_lengths, past_sequence_lengths,
 * slot_mapping and one key-only page cache per layer; no position_ids, no attention_metadata,
 * no value caches, no fixed state.
 *
 * The graph shows what the session bound: its logits row r is [slot_mapping[r], slot_mapping[r]]
 * (so the test reads back every slot the session computed) and present.{i}.key = past + 1 (so
 * the page buffer is bound in place, as past and present both, and is the cache's own memory).
 * The expected slots are computed here from the block tables: block_table[b][p / K] * K + p % K
 * for p = past_b + j. The sessions are driven both directly and by the scheduler through
 * preemption, and paged_binding_from_genai turns a LATENT genai_config into this binding. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/hybrid_cache.h"
#include "check.h"
#include "engine/scheduler.h"
#include "graph/graph.h"
#include "runtime/paged_session.h"

#define K_PAGE   16 /* tokens per page */
#define LATENT_D 8  /* l + r */
#define VOCAB    2

/* The LATENT I/O graph of n_layers layers. NULL on a build failure (reported). */
static graph *latent_graph(int n_layers) {
  graph *g = NULL;
  diag d;
  CHECK_STATUS(graph_create(&g, &d), PH_OK, d.msg);
  if (!g) return NULL;
  const char *tok[1] = {"num_tokens"};
  const char *bt[2] = {"batch_size", "max_num_blocks"};
  const char *b1[1] = {"batch_size_plus_1"};
  const char *bs[1] = {"batch_size"};
  const char *kv[4] = {"num_blocks", NULL, NULL, NULL};
  graph_add_input(g, "input_ids", PH_DTYPE_I64, 1, (int64_t[]){-1}, tok);
  graph_add_input(g, "block_table", PH_DTYPE_I32, 2, (int64_t[]){-1, -1}, bt);
  graph_add_input(g, "cumulative_sequence_lengths", PH_DTYPE_I32, 1, (int64_t[]){-1}, b1);
  graph_add_input(g, "past_sequence_lengths", PH_DTYPE_I32, 1, (int64_t[]){-1}, bs);
  const int slots = graph_add_input(g, "slot_mapping", PH_DTYPE_I32, 1, (int64_t[]){-1}, tok);
  const float one_v = 1.0f;
  const int one =
      graph_add_initializer_copy(g, "one", PH_DTYPE_F32, shape_make(1, (int64_t[]){1}), &one_v);
  const int64_t ax = 1;
  const int axes =
      graph_add_initializer_copy(g, "axes", PH_DTYPE_I64, shape_make(1, (int64_t[]){1}), &ax);
  char name[64], out[64];
  for (int i = 0; i < n_layers; i++) {
    snprintf(name, sizeof name, "past_key_values.%d.key", i);
    const int past =
        graph_add_input(g, name, PH_DTYPE_F32, 4, (int64_t[]){-1, K_PAGE, 1, LATENT_D}, kv);
    snprintf(out, sizeof out, "present.%d.key", i);
    int present = -1;
    graph_add_node(g, "Add", "", out, 2, (int[]){past, one}, 1, (const char *[]){out}, &present, 0,
                   NULL);
    graph_mark_output(g, present, NULL);
  }
  gattr to = attr_int("to", 1); /* FLOAT */
  int f = -1, col = -1, logits = -1;
  graph_add_node(g, "Cast", "", "slots_f32", 1, (int[]){slots}, 1, (const char *[]){"slots_f32"},
                 &f, 1, &to);
  graph_add_node(g, "Unsqueeze", "", "slots_col", 2, (int[]){f, axes}, 1,
                 (const char *[]){"slots_col"}, &col, 0, NULL);
  gattr axis = attr_int("axis", 1);
  graph_add_node(g, "Concat", "", "logits", 2, (int[]){col, col}, 1, (const char *[]){"logits"},
                 &logits, 1, &axis);
  graph_mark_output(g, logits, NULL);
  ph_status st = graph_finalize(g, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  if (st != PH_OK) {
    graph_free(g);
    return NULL;
  }
  return g;
}

/* A DeepSeek config as far as the binding reads it. */
static void deepseek_config(hf_config *c, int n_layers) {
  memset(c, 0, sizeof *c);
  c->family = FAMILY_DEEPSEEK;
  c->n_layers = n_layers;
  for (int i = 0; i < n_layers; i++) c->layer_kind[i] = PH_LAYER_MLA;
}

static paged_session *latent_session(int n_layers, int32_t n_blocks, int32_t max_batch) {
  hf_config c;
  deepseek_config(&c, n_layers);
  paged_binding b;
  paged_binding_for_config(&c, &b);
  paged_session_params p = paged_session_params_default();
  p.n_blocks = n_blocks;
  p.max_slots = max_batch;
  p.max_batch = max_batch;
  p.max_tokens = 128;
  p.n_threads = 1;
  graph *g = latent_graph(n_layers);
  if (!g) return NULL;
  paged_session *s = NULL;
  diag d;
  CHECK_STATUS(paged_session_create(g, &b, &p, &s, &d), PH_OK, d.msg);
  return s;
}

/* Every logits row of the last step against the slot of its token, from the tables. */
static void check_slots(paged_session *s, const paged_seq *seqs, int32_t B) {
  int64_t rows = 0;
  const float *l = paged_session_logits(s, &rows);
  CHECK(l != NULL);
  if (!l) return;
  int64_t r = 0;
  for (int32_t b = 0; b < B; b++)
    for (int64_t j = 0; j < seqs[b].n; j++, r++) {
      const int64_t p = seqs[b].past + j;
      const int64_t want = (int64_t)seqs[b].blocks->ids[p / K_PAGE] * K_PAGE + p % K_PAGE;
      if (r >= rows) break;
      if ((int64_t)l[r * VOCAB] != want)
        fprintf(stderr, "    sequence %d token %lld (position %lld)\n", (int)b, (long long)j,
                (long long)p);
      CHECK_EQ_INT((int64_t)l[r * VOCAB], want);
      CHECK_EQ_INT((int64_t)l[r * VOCAB + 1], want);
    }
  CHECK_EQ_INT(rows, r);
}

/* Three sequences in one packed step, each crossing page boundaries, over pages that are not
 * consecutive; then a continuation step. Sequences hold no state slot. */
static void test_latent_slot_mapping(void) {
  diag d;
  paged_session *s = latent_session(2, 1 + 12, 3);
  if (!s) return;
  hybrid_cache *c = paged_session_cache(s);
  CHECK(!hybrid_cache_has_state(c));
  CHECK(hybrid_cache_key_only(c));
  CHECK_EQ_INT(hybrid_cache_max_slots(c), 0);
  /* latent KV bytes: one (l+r) row per token per layer, f32 */
  CHECK_EQ_INT(kv_buffers_bytes_per_block(hybrid_cache_kv(c)), 2 * K_PAGE * LATENT_D * 4);
  CHECK_EQ_INT(paged_session_cache_bytes(s), 2 * 13 * K_PAGE * LATENT_D * 4);
  block_table t[3];
  int32_t slot[3] = {-1, -1, -1};
  /* interleaved reservations: each table's pages are scattered over the pool */
  const int64_t grow[][2] = {{0, 1}, {1, 1}, {2, 1}, {0, 20}, {1, 40}, {2, 17}, {0, 40}, {1, 50}};
  for (int i = 0; i < 3; i++) block_table_init(&t[i]);
  for (size_t k = 0; k < sizeof grow / sizeof grow[0]; k++)
    CHECK_STATUS(hybrid_cache_reserve(c, &t[grow[k][0]], &slot[grow[k][0]], grow[k][1], &d), PH_OK,
                 d.msg);
  for (int i = 0; i < 3; i++) CHECK_EQ_INT(slot[i], -1);
  int64_t toks[64];
  for (int i = 0; i < 64; i++) toks[i] = i % VOCAB;
  /* step 1: 14 | 20 (crosses 16) | 17 (crosses 16) new tokens from position 0 */
  paged_seq q[3] = {
      {-1, &t[0], 0, toks, 14, 0}, {-1, &t[1], 0, toks, 20, 0}, {-1, &t[2], 0, toks, 17, 0}};
  CHECK_STATUS(paged_session_run(s, q, 3, &d), PH_OK, d.msg);
  check_slots(s, q, 3);
  /* step 2: continuations crossing 16 and 32 */
  paged_seq q2[3] = {
      {-1, &t[0], 14, toks, 26, 0}, {-1, &t[1], 20, toks, 30, 0}, {-1, &t[2], 17, toks, 1, 0}};
  CHECK_STATUS(paged_session_run(s, q2, 3, &d), PH_OK, d.msg);
  check_slots(s, q2, 3);
  CHECK(paged_session_last_stats(s).state_zero_copy);
  CHECK_EQ_INT(paged_session_last_stats(s).state_bytes_moved, 0);
  /* the key pages were bound in place as past and present: two steps added 2 everywhere */
  for (int layer = 0; layer < 2; layer++) {
    tensor k;
    CHECK_STATUS(hybrid_cache_kv_views(c, layer, &k, NULL, &d), PH_OK, d.msg);
    const float *kp = k.data;
    const int64_t n = 13 * K_PAGE * LATENT_D;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += kp[i] != 2.0f;
    CHECK_EQ_INT(bad, 0);
  }
  /* the page coverage is still checked */
  paged_seq over = {-1, &t[2], 18, toks, 32, 0};
  CHECK_STATUS(paged_session_run(s, &over, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "pages");
  for (int i = 0; i < 3; i++) {
    CHECK_STATUS(hybrid_cache_release(c, &t[i], &slot[i], &d), PH_OK, d.msg);
    free(t[i].ids);
  }
  paged_session_free(s);
}

/* The engine's loop (schedule, run, commit, one token per sampled request) over a latent
 * session whose pool is too small for every request at once: requests hold no slot, the
 * scheduler preempts (pages only) and readmits, and every step's slot_mapping follows the
 * tables the scheduler reserved. */
static void test_latent_scheduler_preemption(void) {
  diag d;
  paged_session *s = latent_session(1, 1 + 6, 4);
  if (!s) return;
  sched_params sp = {.max_batch = 4, .max_tokens = 64, .prefill_chunk = 16, .block_size = K_PAGE};
  sched *sc = NULL;
  CHECK_STATUS(sched_create(&sp, paged_session_cache(s), &sc, &d), PH_OK, d.msg);
  if (!sc) {
    paged_session_free(s);
    return;
  }
  enum { NR = 4 };
  sched_req r[NR];
  const int64_t prompt[NR] = {20, 30, 12, 33}, new_tokens[NR] = {30, 20, 25, 10};
  for (int i = 0; i < NR; i++) {
    sched_req_init(&r[i], i, prompt[i], new_tokens[i]);
    CHECK_STATUS(sched_add(sc, &r[i], &d), PH_OK, d.msg);
  }
  int64_t toks[128];
  for (int i = 0; i < 128; i++) toks[i] = (i * 7) % VOCAB;
  paged_seq q[4];
  int64_t preempted = 0, steps = 0;
  for (; steps < 1000 && (sched_n_running(sc) || sched_n_waiting(sc)); steps++) {
    sched_batch b;
    CHECK_STATUS(sched_schedule(sc, &b, &d), PH_OK, d.msg);
    preempted += b.n_preempted;
    if (b.n_entries == 0) break;
    for (int32_t k = 0; k < b.n_entries; k++) {
      const sched_entry *e = &b.entries[k];
      CHECK_EQ_INT(e->req->slot, -1);
      q[k] = (paged_seq){e->req->slot, &e->req->blocks, e->start, toks + e->start, e->n_tokens, 0};
    }
    ph_status st = paged_session_run(s, q, b.n_entries, &d);
    CHECK_STATUS(st, PH_OK, d.msg);
    if (st != PH_OK) break;
    check_slots(s, q, b.n_entries);
    CHECK_STATUS(sched_commit(sc, &b, &d), PH_OK, d.msg);
    for (int32_t k = 0; k < b.n_entries; k++) {
      sched_req *rq = b.entries[k].req;
      if (!b.entries[k].sample) continue;
      if (rq->n_total < rq->max_total) rq->n_total++;
      if (rq->n_total == rq->max_total) CHECK_STATUS(sched_finish(sc, rq, &d), PH_OK, d.msg);
    }
  }
  CHECK(preempted > 0);
  for (int i = 0; i < NR; i++) {
    CHECK_EQ_INT(r[i].state, SCHED_FINISHED);
    CHECK_EQ_INT(r[i].n_total, prompt[i] + new_tokens[i]);
  }
  CHECK_EQ_INT(hybrid_cache_pages_used(paged_session_cache(s)), 0);
  CHECK_EQ_INT(hybrid_cache_slots_used(paged_session_cache(s)), 0);
  sched_free(sc);
  paged_session_free(s);
}

/* Binding refusals: LATENT and key/value layers in one graph; a latent layer whose cache input
 * the graph lacks. */
static void test_latent_binding_errors(void) {
  diag d;
  hf_config c;
  deepseek_config(&c, 2);
  paged_binding b;
  paged_binding_for_config(&c, &b);
  CHECK_EQ_STR(b.slot_mapping, "slot_mapping");
  CHECK_EQ_STR(b.position_ids, "");
  CHECK_EQ_STR(b.metadata, "");
  CHECK_EQ_STR(b.past_value_fmt, "");
  CHECK_EQ_STR(b.present_value_fmt, "");
  CHECK_EQ_STR(b.past_key_fmt, "past_key_values.%d.key");
  CHECK_EQ_INT(b.kind[0], PAGED_LAYER_LATENT);
  CHECK_EQ_INT(b.kind[1], PAGED_LAYER_LATENT);
  paged_session_params p = paged_session_params_default();
  p.n_blocks = 5;
  p.n_threads = 1;
  paged_session *s = NULL;
  b.kind[1] = PAGED_LAYER_KV;
  snprintf(b.past_value_fmt, PAGED_NAME, "past_key_values.%%d.key");
  snprintf(b.present_value_fmt, PAGED_NAME, "present.%%d.key");
  CHECK_STATUS(paged_session_create(latent_graph(2), &b, &p, &s, &d), PH_ERR_UNSUPPORTED, d.msg);
  CHECK_CONTAINS(d.msg, "mixes LATENT");
  CHECK(s == NULL);
  paged_binding_for_config(&c, &b);
  b.n_layers = 3;
  b.kind[2] = PAGED_LAYER_LATENT;
  CHECK_STATUS(paged_session_create(latent_graph(2), &b, &p, &s, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  CHECK_CONTAINS(d.msg, "past_key_values.2.key");
  /* a Qwen binding asks for position_ids and value pages by name, and binds no slot_mapping */
  hf_config qc;
  memset(&qc, 0, sizeof qc);
  qc.family = FAMILY_QWEN35;
  qc.n_layers = 2;
  qc.layer_kind[0] = PH_LAYER_LINEAR_ATTENTION;
  qc.layer_kind[1] = PH_LAYER_FULL_ATTENTION;
  paged_binding_for_config(&qc, &b);
  CHECK_EQ_STR(b.slot_mapping, "");
  CHECK_EQ_STR(b.position_ids, "position_ids");
  CHECK_EQ_STR(b.metadata, "attention_metadata");
  CHECK_EQ_STR(b.past_value_fmt, "past_key_values.%d.value");
  CHECK_EQ_INT(b.kind[0], PAGED_LAYER_FIXED);
  CHECK_EQ_INT(b.kind[1], PAGED_LAYER_KV);
}

/* A LATENT genai_config (what genai_config_paged writes for DeepSeek) into the binding, and the
 * configs that cannot be bound. */
static void latent_genai(genai_config *gc, int n_layers) {
  memset(gc, 0, sizeof *gc);
  gc->paged = 1;
  gc->has_decoder = 1;
  gc->num_hidden_layers = n_layers;
  snprintf(gc->input_ids, GENAI_MAX_NAME, "input_ids");
  snprintf(gc->block_table, GENAI_MAX_NAME, "block_table");
  snprintf(gc->cumulative_sequence_lengths, GENAI_MAX_NAME, "cumulative_sequence_lengths");
  snprintf(gc->past_sequence_lengths, GENAI_MAX_NAME, "past_sequence_lengths");
  snprintf(gc->slot_mapping, GENAI_MAX_NAME, "slot_mapping");
  snprintf(gc->logits, GENAI_MAX_NAME, "logits");
  snprintf(gc->past_key_names, GENAI_MAX_NAME, "past_key_values.%%d.key");
  snprintf(gc->present_key_names, GENAI_MAX_NAME, "present.%%d.key");
  gc->n_state_groups = 1;
  gc->state_groups[0].kind = GENAI_STATE_PAGED_KV;
  gc->state_groups[0].n_layer_ids = n_layers;
  for (int i = 0; i < n_layers; i++) gc->state_groups[0].layer_ids[i] = i;
}

static void test_latent_from_genai(void) {
  diag d;
  genai_config gc;
  paged_binding b;
  latent_genai(&gc, 3);
  CHECK_STATUS(paged_binding_from_genai(&gc, &b, &d), PH_OK, d.msg);
  CHECK_EQ_INT(b.n_layers, 3);
  for (int i = 0; i < 3; i++) CHECK_EQ_INT(b.kind[i], PAGED_LAYER_LATENT);
  CHECK_EQ_STR(b.slot_mapping, "slot_mapping");
  CHECK_EQ_STR(b.position_ids, "");
  CHECK_EQ_STR(b.metadata, "");
  /* it binds the hand-made LATENT graph and runs it */
  paged_session_params p = paged_session_params_default();
  p.n_blocks = 5;
  p.n_threads = 1;
  paged_session *s = NULL;
  CHECK_STATUS(paged_session_create(latent_graph(3), &b, &p, &s, &d), PH_OK, d.msg);
  if (s) {
    block_table t;
    block_table_init(&t);
    int32_t slot = -1;
    CHECK_STATUS(hybrid_cache_reserve(paged_session_cache(s), &t, &slot, 18, &d), PH_OK, d.msg);
    const int64_t toks[18] = {0};
    paged_seq q = {slot, &t, 0, toks, 18, 0};
    CHECK_STATUS(paged_session_run(s, &q, 1, &d), PH_OK, d.msg);
    check_slots(s, &q, 1);
    free(t.ids);
  }
  paged_session_free(s);
  /* the legacy all-paged contract (no state_groups) with slot_mapping: every layer LATENT */
  gc.n_state_groups = 0;
  CHECK_STATUS(paged_binding_from_genai(&gc, &b, &d), PH_OK, d.msg);
  CHECK_EQ_INT(b.kind[2], PAGED_LAYER_LATENT);
  /* paged_kv layers with no value pages and no slot_mapping */
  latent_genai(&gc, 3);
  gc.slot_mapping[0] = '\0';
  CHECK_STATUS(paged_binding_from_genai(&gc, &b, &d), PH_ERR_CONFIG_INCONSISTENT, d.msg);
  CHECK_CONTAINS(d.msg, "slot_mapping");
  CHECK_CONTAINS(d.msg, "layer 0");
  /* one value template without the other */
  latent_genai(&gc, 3);
  snprintf(gc.past_value_names, GENAI_MAX_NAME, "past_key_values.%%d.value");
  CHECK_STATUS(paged_binding_from_genai(&gc, &b, &d), PH_ERR_CONFIG_INCONSISTENT, d.msg);
  CHECK_CONTAINS(d.msg, "present_value_names");
  /* both value templates: key/value layers, slot_mapping still bound */
  snprintf(gc.present_value_names, GENAI_MAX_NAME, "present.%%d.value");
  CHECK_STATUS(paged_binding_from_genai(&gc, &b, &d), PH_OK, d.msg);
  CHECK_EQ_INT(b.kind[0], PAGED_LAYER_KV);
  CHECK_EQ_STR(b.slot_mapping, "slot_mapping");
}

int main(void) {
  RUN(test_latent_slot_mapping);
  RUN(test_latent_scheduler_preemption);
  RUN(test_latent_binding_errors);
  RUN(test_latent_from_genai);
  return check_finish();
}
