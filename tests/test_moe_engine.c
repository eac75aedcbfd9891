/* The MoE and MLA models served by the engine (issue 14), through the public API, against the
 * float64 references in tests/data/golden (qwen35-moe-tiny: Qwen3.5-MoE hybrid, fused experts;
 * deepseek-v3-tiny-moe: MLA on LATENT pages + DeepSeekMoE). Those references were made by an
 * implementation independent of this one, so a bug the engine shares with itself still fails:
 *   - every sequence's logits at every position (PH_CAPTURE_POSITIONS) within GOLDEN_F32_TOL of
 *     the reference's scale, with all three sequences packed into the same steps, prefill in
 *     chunks that split them at different points, pages of 16 tokens;
 *   - each sequence run alone gives the same rows bit for bit (batch invariance);
 *   - under page pressure that forces preemption, the generated tokens and their logits are
 *     bit-identical to the runs without it.
 * And every family make-tiny writes in its published layout (DeepSeek-V2 and V3 with per-expert
 * tensors, Qwen3.5-MoE causal-LM and VLM with fused experts, Qwen3-Next per expert) is served by
 * the engine: two prompts packed give the rows each gives alone, bit for bit, and those rows agree
 * with the dense graph's (another graph: decomposed MLA on GroupQueryAttention, LinearAttention
 * and GQA for Qwen) within PAIR_F32_TOL.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "io/safetensors.h"
#include "models/model.h"
#include "models/tiny.h"
#include "pagedhybrid.h"
#include "runtime/dense_session.h"

#define MAX_SEQ 3
#define MAX_TOK 128

typedef struct golden_set {
  int64_t tokens[MAX_SEQ][MAX_TOK];
  int64_t n[MAX_SEQ];
  int n_seqs;
  st_set *ref;
} golden_set;

static int load(const char *set, golden_set *g) {
  memset(g, 0, sizeof *g);
  char path[1200];
  check_data(path, sizeof path, "golden/%s/manifest.json", set);
  json_error_t je;
  json_t *man = json_load_file(path, 0, &je);
  CHECK(man != NULL);
  if (!man) return 0;
  json_t *seqs = json_object_get(man, "sequences");
  g->n_seqs = (int)json_array_size(seqs);
  CHECK(g->n_seqs >= 1 && g->n_seqs <= MAX_SEQ);
  if (g->n_seqs > MAX_SEQ) g->n_seqs = MAX_SEQ;
  for (int s = 0; s < g->n_seqs; s++) {
    json_t *t = json_object_get(json_array_get(seqs, (size_t)s), "tokens");
    g->n[s] = (int64_t)json_array_size(t);
    CHECK(g->n[s] >= 1 && g->n[s] <= MAX_TOK);
    if (g->n[s] > MAX_TOK) g->n[s] = MAX_TOK;
    for (int64_t k = 0; k < g->n[s]; k++)
      g->tokens[s][k] = json_integer_value(json_array_get(t, (size_t)k));
  }
  json_decref(man);
  diag d;
  check_data(path, sizeof path, "golden/%s/reference.safetensors", set);
  CHECK_STATUS(st_open_file(path, &g->ref, &d), PH_OK, d.msg);
  return g->ref != NULL;
}

static ph_engine *open_engine(const char *set, int32_t num_blocks, int64_t chunk) {
  char dir[1200];
  check_data(dir, sizeof dir, "golden/%s/checkpoint", set);
  ph_engine_params p = ph_engine_params_default();
  p.precision = PH_PRECISION_F32; /* compared with f32 references at the golden bound */
  p.max_context = 256;
  p.block_size = 16;
  p.num_blocks = num_blocks;
  p.prefill_chunk = chunk;
  p.n_threads = 2;
  p.capture_logits = PH_CAPTURE_POSITIONS;
  ph_engine *e = NULL;
  ph_status s = ph_engine_create(dir, &p, &e);
  CHECK_STATUS(s, PH_OK, e ? ph_engine_error(e) : "no engine");
  if (s != PH_OK) {
    ph_engine_free(e);
    return NULL;
  }
  return e;
}

/* Runs the requests (prompt s of g, max_new new tokens, greedy) that `which` selects together
 * until all finish; copies each one's captured rows into rows[s] (malloc'ed) and its tokens. */
static void run(ph_engine *e, const golden_set *g, unsigned which, int64_t max_new, float **rows,
                int64_t *n_rows, int64_t toks[MAX_SEQ][64], int64_t *n_toks, int *preempted) {
  uint64_t id[MAX_SEQ] = {0};
  ph_sampling_params sp = ph_sampling_params_default();
  sp.max_new_tokens = max_new;
  sp.ignore_eos = 1;
  for (int s = 0; s < g->n_seqs; s++)
    if (which & (1u << s))
      CHECK_STATUS(ph_engine_add_request(e, g->tokens[s], g->n[s], &sp, &id[s]), PH_OK,
                   ph_engine_error(e));
  int guard = 0;
  while (ph_engine_busy(e) && guard++ < 10000) {
    ph_step_info info;
    ph_status st = ph_engine_step(e, &info);
    CHECK_STATUS(st, PH_OK, ph_engine_error(e));
    if (st != PH_OK) break;
    if (preempted) *preempted += info.n_preempted;
  }
  for (int s = 0; s < g->n_seqs; s++) {
    if (!(which & (1u << s))) continue;
    ph_request_info ri;
    CHECK_STATUS(ph_engine_request_info(e, id[s], &ri), PH_OK, "request info");
    CHECK_EQ_INT(ri.status, PH_OK);
    if (ri.status != PH_OK) fprintf(stderr, "       request %d: %s\n", s, ri.message);
    int64_t n = 0, V = 0;
    const float *r = ph_engine_request_logits(e, id[s], &n);
    ph_engine_info in;
    ph_engine_get_info(e, &in);
    V = in.vocab_size;
    rows[s] = malloc((size_t)(n * V + 1) * sizeof(float));
    if (r) memcpy(rows[s], r, (size_t)(n * V) * sizeof(float));
    n_rows[s] = r ? n : 0;
    int64_t nt = 0;
    const int64_t *t = ph_engine_request_tokens(e, id[s], &nt);
    n_toks[s] = nt < 64 ? nt : 64;
    if (t) memcpy(toks[s], t, (size_t)n_toks[s] * sizeof *t);
    ph_engine_release_request(e, id[s]);
  }
}

static void check_set(const char *set) {
  golden_set g;
  if (!load(set, &g)) {
    st_close(g.ref);
    return;
  }
  /* (a) all sequences packed, prefill chunks of 16 (70 = 16 + 16 + 16 + 16 + 6 interleaved with
   * the others) against the reference; (b) each alone: the same bits */
  ph_engine *e = open_engine(set, 64, 16);
  if (!e) {
    st_close(g.ref);
    return;
  }
  float *packed[MAX_SEQ] = {0}, *alone[MAX_SEQ] = {0};
  int64_t np[MAX_SEQ], na[MAX_SEQ], tp[MAX_SEQ][64], ta[MAX_SEQ][64], ntp[MAX_SEQ], nta[MAX_SEQ];
  run(e, &g, (1u << g.n_seqs) - 1, 1, packed, np, tp, ntp, NULL);
  for (int s = 0; s < g.n_seqs; s++) run(e, &g, 1u << s, 1, alone, na, ta, nta, NULL);
  ph_engine_info in;
  ph_engine_get_info(e, &in);
  const int64_t V = in.vocab_size;
  double worst = 0;
  for (int s = 0; s < g.n_seqs; s++) {
    char name[64];
    snprintf(name, sizeof name, "seq%d.logits", s);
    const st_tensor *rt = st_find(g.ref, name);
    CHECK(rt && shape_numel(&rt->shape) == g.n[s] * V);
    CHECK_EQ_INT(np[s], g.n[s]); /* n_prompt + 1 generated - 1 rows */
    if (!rt || np[s] != g.n[s]) continue;
    const float *ref = (const float *)rt->data;
    double err = 0, scale = 0;
    for (int64_t k = 0; k < g.n[s] * V; k++) check_err_acc(packed[s][k], ref[k], &err, &scale);
    CHECK(err <= GOLDEN_F32_TOL * scale); /* the golden bound (tests/check.h) */
    if (scale > 0 && err / scale > worst) worst = err / scale;
    CHECK_EQ_INT(na[s], np[s]);
    if (na[s] == np[s])
      CHECK(memcmp(packed[s], alone[s], (size_t)(np[s] * V) * sizeof(float)) == 0);
  }
  printf("  %s: packed engine logits worst error %.2e of scale (bound %.0e), batch-invariant\n",
         set, worst, GOLDEN_F32_TOL);
  for (int s = 0; s < g.n_seqs; s++) {
    free(packed[s]);
    free(alone[s]);
    packed[s] = alone[s] = NULL;
  }
  /* (c) 12 new tokens each, all at once with ample pages vs with few pages (preemption) */
  run(e, &g, (1u << g.n_seqs) - 1, 12, packed, np, tp, ntp, NULL);
  ph_engine_free(e);
  int64_t longest = 0;
  for (int s = 0; s < g.n_seqs; s++)
    if (g.n[s] + 12 > longest) longest = g.n[s] + 12;
  /* pages for the longest request and a little more: the others must wait or be preempted */
  ph_engine *tight = open_engine(set, (int32_t)((longest + 15) / 16 + 2), 16);
  if (tight) {
    int preempted = 0;
    run(tight, &g, (1u << g.n_seqs) - 1, 12, alone, na, ta, nta, &preempted);
    for (int s = 0; s < g.n_seqs; s++) {
      CHECK_EQ_INT(nta[s], ntp[s]);
      CHECK(memcmp(ta[s], tp[s], (size_t)ntp[s] * sizeof(int64_t)) == 0);
      CHECK_EQ_INT(na[s], np[s]);
      if (na[s] == np[s])
        CHECK(memcmp(packed[s], alone[s], (size_t)(np[s] * V) * sizeof(float)) == 0);
    }
    printf("  %s: under page pressure (%d preemptions) tokens and logits bit-identical\n", set,
           preempted);
    ph_engine_free(tight);
  }
  for (int s = 0; s < g.n_seqs; s++) {
    free(packed[s]);
    free(alone[s]);
  }
  st_close(g.ref);
}

/* The engine's rows for prompts a, b (packed, then alone) against the dense session's. */
static void check_tiny(const char *tag, const tiny_params *tp) {
  char dir[1200];
  snprintf(dir, sizeof dir, "%s/tiny-%s", check_env("PH_TMP_DIR"), tag);
  diag d;
  CHECK_STATUS(tiny_write(dir, tp, &d), PH_OK, d.msg);
  golden_set g;
  memset(&g, 0, sizeof g);
  g.n_seqs = 2;
  g.n[0] = 9;
  g.n[1] = 37;
  for (int s = 0; s < 2; s++)
    for (int64_t k = 0; k < g.n[s]; k++) g.tokens[s][k] = (k * 37 + s * 11 + 5) % tp->vocab_size;
  ph_engine_params p = ph_engine_params_default();
  p.precision = PH_PRECISION_F32; /* compared with f32 references at the golden bound */
  p.max_context = 128;
  p.block_size = 16;
  p.num_blocks = 16;
  p.prefill_chunk = 16;
  p.n_threads = 2;
  p.capture_logits = PH_CAPTURE_POSITIONS;
  ph_engine *e = NULL;
  ph_status st = ph_engine_create(dir, &p, &e);
  CHECK_STATUS(st, PH_OK, e ? ph_engine_error(e) : "no engine");
  ph_model *m = NULL;
  CHECK_STATUS(ph_model_open(dir, NULL, &m), PH_OK, m ? ph_model_error(m) : "");
  dense_session *ds = NULL;
  if (m) CHECK_STATUS(dense_session_create(m, 128, 2, &ds, &d), PH_OK, d.msg);
  if (st != PH_OK || !ds) {
    ph_engine_free(e);
    dense_session_free(ds);
    ph_model_free(m);
    return;
  }
  float *packed[MAX_SEQ] = {0}, *alone[MAX_SEQ] = {0};
  int64_t np[MAX_SEQ], na[MAX_SEQ], tp_[MAX_SEQ][64], ta[MAX_SEQ][64], ntp[MAX_SEQ], nta[MAX_SEQ];
  run(e, &g, 3u, 1, packed, np, tp_, ntp, NULL);
  for (int s = 0; s < 2; s++) run(e, &g, 1u << s, 1, alone, na, ta, nta, NULL);
  const int64_t V = tp->vocab_size;
  double worst = 0;
  for (int s = 0; s < 2; s++) {
    CHECK_EQ_INT(np[s], g.n[s]);
    CHECK_EQ_INT(na[s], g.n[s]);
    if (np[s] != g.n[s] || na[s] != g.n[s]) continue;
    CHECK(memcmp(packed[s], alone[s], (size_t)(np[s] * V) * sizeof(float)) == 0);
    float *dense = malloc((size_t)(g.n[s] * V) * sizeof(float));
    dense_session_reset(ds);
    CHECK_STATUS(dense_session_step(ds, g.tokens[s], g.n[s], dense, &d), PH_OK, d.msg);
    double err = 0, scale = 0;
    for (int64_t k = 0; k < g.n[s] * V; k++) check_err_acc(packed[s][k], dense[k], &err, &scale);
    CHECK(err <= PAIR_F32_TOL * scale); /* two f32 graphs of the same math (tests/check.h) */
    if (scale > 0 && err / scale > worst) worst = err / scale;
    free(dense);
  }
  printf("  make-tiny %-22s engine vs dense graph %.2e of scale (bound %.0e), batch-invariant\n",
         tag, worst, PAIR_F32_TOL);
  for (int s = 0; s < 2; s++) {
    free(packed[s]);
    free(alone[s]);
  }
  dense_session_free(ds);
  ph_model_free(m);
  ph_engine_free(e);
}

static void test_tiny_families(void) {
  static const struct {
    const char *type;
    weight_layout layout;
  } fams[] = {{"deepseek_v2", LAYOUT_CAUSAL_LM},
              {"deepseek_v3", LAYOUT_CAUSAL_LM},
              {"qwen3_5_moe_text", LAYOUT_CAUSAL_LM},
              {"qwen3_5_moe_text", LAYOUT_VLM},
              {"qwen3_next", LAYOUT_CAUSAL_LM}};
  for (size_t i = 0; i < sizeof fams / sizeof fams[0]; i++) {
    tiny_params tp = tiny_params_default();
    tp.model_type = fams[i].type;
    tp.layout = fams[i].layout;
    tp.seed = 14;
    char tag[64];
    snprintf(tag, sizeof tag, "%s%s", fams[i].type, fams[i].layout == LAYOUT_VLM ? "-vlm" : "");
    check_tiny(tag, &tp);
  }
}

static void test_qwen35_moe(void) { check_set("qwen35-moe-tiny"); }
static void test_deepseek_v3_moe(void) { check_set("deepseek-v3-tiny-moe"); }

int main(void) {
  RUN(test_qwen35_moe);
  RUN(test_deepseek_v3_moe);
  RUN(test_tiny_families);
  return check_finish();
}
