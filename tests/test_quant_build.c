/* test_quant_build — quantized linear layers in the graphs the builders make (model_options.quant,
 * docs/quantization.md "What is quantized").
 *
 * For every family make-tiny writes (Qwen3.5 dense and MoE, Qwen3-Next, DeepSeek-V2 without and
 * DeepSeek-V3 with q LoRA), int8 and int4, symmetric and asymmetric, blocks 16..128 (K = 48, 64,
 * 128: blocks that split K, fill it exactly and pad it):
 *   structure  every linear layer whose role weight_role_quantizable accepts (MoE experts aside:
 *              they are QMoE's) is one com.microsoft::MatMulNBits with the schema's attributes and
 *              inputs, and nothing else is: the GatedDeltaNet a/b projections, the router and
 *              shared_expert_gate stay MatMul; quant.skip keeps the names it matches;
 *   numbers    the dense graph at accuracy_level 1 runs in the dense session, and its logits match
 *              the unquantized graph built over the dequantized weights (tensor/quant.h
 *              quant_dequantize, f32) within PAIR_F32_TOL of the logits' scale. Why that bound:
 *              at accuracy_level 1 MatMulNBits dequantizes each weight to the very f32 value
 *              quant_dequantize gives ((code - zp) * scale, one rounding) and sums in f32; the
 *              reference graph's MatMulWT sums the same f32 products in another order. Two f32
 *              evaluations of one function differing only in summation order are, like the two
 *              runtimes of test_ort, each within GOLDEN_F32_TOL of the f64 result, so within twice
 *              it of each other. The plain (unquantized) graph is checked to be far outside that
 *              bound, so the comparison would see a wrong weight.
 *   options    bad bits, block sizes, accuracy levels and asymmetric flags are
 *              PH_ERR_INVALID_ARGUMENT naming the field; accuracy_level 0 is written as 4.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "check.h"
#include "model_testing.h"
#include "models/model.h"
#include "models/registry.h"
#include "models/tiny.h"
#include "runtime/dense_session.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

static char g_tmp[512];

/* The roles linear() reads (experts are the MoE op's, never a Linear). */
static int linear_role(weight_role r) {
  return weight_role_quantizable(r) && r != W_MOE_GATE_UP_FUSED && r != W_MOE_DOWN_FUSED &&
         r != W_EXPERT_GATE && r != W_EXPERT_UP && r != W_EXPERT_DOWN && r != W_MTP_FC;
}

static int skipped(const char *skip, const char *name) {
  if (!skip) return 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", skip);
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ","))
    if (strstr(name, tok)) return 1;
  return 0;
}

/* Linear layers the quantization selects, counted from the bound weights: Qwen3-Next's
 * in_proj_qkvz feeds two (qkv and z). The LM head counts when untied (tied: the embedding). */
static int expected_nbits(const model_weights *w, const char *skip) {
  int n = 0;
  for (int l = 0; l < w->n_layers; l++)
    for (int r = 0; r < W_ROLE_COUNT; r++) {
      const st_tensor *t = w->layer[l * W_ROLE_COUNT + r];
      if (!t || !linear_role((weight_role)r) || skipped(skip, t->name)) continue;
      n += r == W_LIN_QKVZ ? 2 : 1;
    }
  const st_tensor *head = w->global[W_LM_HEAD] ? w->global[W_LM_HEAD] : w->global[W_EMBED];
  if (!skipped(skip, head->name) && !skipped(skip, "lm_head.weight")) n++;
  return n;
}

/* ---- the dequantized twin ------------------------------------------------------------------ */

/* A copy of a model's bound weights in which every weight the quantization selects is replaced by
 * dq(q(W)) in f32: the weights a quantized graph computes with. */
typedef struct dq_model {
  model_weights w;
  const st_tensor **layer;
  st_tensor *t; /* replaced tensors */
  void **bufs;
  int n;
} dq_model;

static const st_tensor *dq_tensor(dq_model *m, const st_tensor *src, const quant_params *p) {
  const int64_t N = src->shape.dims[0], K = src->shape.dims[1];
  size_t bb = 0, ns = 0, zb = 0;
  diag d;
  diag_clear(&d);
  CHECK_STATUS(quant_sizes(p, N, K, &bb, &ns, &zb, &d), PH_OK, d.msg);
  uint8_t *b = malloc(bb);
  float *sc = malloc(ns * sizeof *sc);
  uint8_t *zp = zb ? malloc(zb) : NULL;
  float *out = malloc((size_t)(N * K) * sizeof *out);
  CHECK(b && sc && out && (!zb || zp));
  CHECK_STATUS(quant_quantize(p, src->data, src->dtype, N, K, b, sc, zp, src->name, &d), PH_OK,
               d.msg);
  CHECK_STATUS(quant_dequantize(p, b, sc, zp, N, K, out, &d), PH_OK, d.msg);
  free(b);
  free(sc);
  free(zp);
  st_tensor *t = &m->t[m->n];
  *t = *src;
  t->dtype = PH_DTYPE_F32;
  t->data = (const uint8_t *)out;
  m->bufs[m->n++] = out;
  return t;
}

static void dq_make(dq_model *m, const model_weights *src, const quant_params *p,
                    const char *skip) {
  memset(m, 0, sizeof *m);
  m->w = *src;
  const int slots = src->n_layers * W_ROLE_COUNT;
  m->layer = malloc((size_t)slots * sizeof *m->layer);
  m->t = calloc((size_t)slots + 1, sizeof *m->t);
  m->bufs = calloc((size_t)slots + 1, sizeof *m->bufs);
  memcpy(m->layer, src->layer, (size_t)slots * sizeof *m->layer);
  for (int i = 0; i < slots; i++) {
    const st_tensor *t = src->layer[i];
    if (t && linear_role((weight_role)(i % W_ROLE_COUNT)) && !skipped(skip, t->name))
      m->layer[i] = dq_tensor(m, t, p);
  }
  m->w.layer = m->layer;
  const st_tensor *head = src->global[W_LM_HEAD];
  if (head && !skipped(skip, head->name) && !skipped(skip, "lm_head.weight"))
    m->w.global[W_LM_HEAD] = dq_tensor(m, head, p);
}

static void dq_free(dq_model *m) {
  for (int i = 0; i < m->n; i++) free(m->bufs[i]);
  free(m->bufs);
  free(m->t);
  free(m->layer);
}

/* ---- running a graph ----------------------------------------------------------------------- */

/* Logits of a prefill of n/2 tokens and n - n/2 single-token steps, [n, V] (malloc'ed). Takes g. */
static float *run_graph(graph *g, const int64_t *tokens, int64_t n, int64_t *vocab) {
  if (!g) return NULL;
  diag d;
  diag_clear(&d);
  dense_session *s = NULL;
  ph_status st = dense_session_create_graph(g, 256, 2, &s, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  if (st != PH_OK) return NULL;
  *vocab = dense_session_vocab(s);
  float *out = malloc((size_t)(n * *vocab) * sizeof *out);
  CHECK_STATUS(dense_session_step(s, tokens, n / 2, out, &d), PH_OK, d.msg);
  for (int64_t i = n / 2; i < n; i++)
    CHECK_STATUS(dense_session_step(s, tokens + i, 1, out + i * *vocab, &d), PH_OK, d.msg);
  dense_session_free(s);
  return out;
}

static graph *build(const ph_model *m, const model_weights *w, const ph_quant_params *q) {
  model_options o = model_options_default();
  o.max_context = 256;
  if (q) o.quant = *q;
  graph *g = NULL;
  diag d;
  diag_clear(&d);
  CHECK_STATUS(model_build_graph(model_config(m), w, &o, &g, &d), PH_OK, d.msg);
  return g;
}

/* max |a - b| and max |b| over n values; NaN anywhere is an infinite error */
static void max_err(const float *a, const float *b, int64_t n, double *err, double *scale) {
  *err = 0;
  *scale = 0;
  for (int64_t i = 0; i < n; i++) check_err_acc(a[i], b[i], err, scale);
}

/* ---- structure ----------------------------------------------------------------------------- */

/* Counts MatMulNBits nodes and checks each against the schema: attributes, B/scales/zero points
 * dtypes and shapes; no MatMulNBits reads a never-quantized weight. */
static int check_nbits_nodes(const graph *g, const ph_quant_params *q, ph_dtype io) {
  int n = 0;
  const int block = q->block_size ? q->block_size : 32;
  for (int i = 0; i < g->n_nodes; i++) {
    const gnode *nd = &g->nodes[i];
    if (strcmp(nd->op_type, "MatMulNBits") != 0) continue;
    n++;
    CHECK_EQ_STR(nd->domain, "com.microsoft");
    const int64_t K = node_attr_int(nd, "K", -1), N = node_attr_int(nd, "N", -1);
    CHECK_EQ_INT(node_attr_int(nd, "bits", -1), q->bits);
    CHECK_EQ_INT(node_attr_int(nd, "block_size", -1), block);
    CHECK_EQ_INT(node_attr_int(nd, "accuracy_level", -1),
                 q->accuracy_level ? q->accuracy_level : 4);
    CHECK_EQ_INT(nd->n_inputs, q->asymmetric ? 4 : 3);
    const int64_t kb = (K + block - 1) / block;
    const gvalue *b = &g->values[nd->inputs[1]], *s = &g->values[nd->inputs[2]];
    CHECK(b->kind == VALUE_INITIALIZER && b->type.dtype == PH_DTYPE_U8 && b->type.rank == 3);
    CHECK(b->type.dims[0] == N && b->type.dims[1] == kb && b->type.dims[2] == block * q->bits / 8);
    CHECK(s->type.dtype == io && s->type.rank == 1 && s->type.dims[0] == N * kb);
    if (q->asymmetric) {
      const gvalue *z = &g->values[nd->inputs[3]];
      CHECK(z->type.dtype == PH_DTYPE_U8 && z->type.rank == 1 &&
            z->type.dims[0] == N * ((kb * q->bits + 7) / 8));
    }
    static const char *const never[] = {"in_proj_a", "in_proj_b",          "in_proj_ba",
                                        "mlp.gate.", "shared_expert_gate", "conv1d"};
    for (size_t k = 0; k < sizeof never / sizeof never[0]; k++)
      if (!CHECK(!strstr(b->name, never[k]))) fprintf(stderr, "    quantized: %s\n", b->name);
  }
  return n;
}

typedef struct family {
  const char *model_type;
  int64_t q_lora_rank; /* deepseek: 0 = no q LoRA */
} family;

static const family FAMILIES[] = {
    {"qwen3_5_text", 0}, {"qwen3_5_moe_text", 0}, {"qwen3_next", 0},
    {"deepseek_v2", 0},  {"deepseek_v3", 48},
};

static void write_family(const family *f, char *dir, size_t n) {
  tiny_params p = tiny_params_default();
  p.model_type = f->model_type;
  p.q_lora_rank = f->q_lora_rank;
  snprintf(dir, n, "%s/%s%s", g_tmp, f->model_type, f->q_lora_rank ? "_qlora" : "");
  diag d;
  diag_clear(&d);
  CHECK_STATUS(tiny_write(dir, &p, &d), PH_OK, d.msg);
}

/* Every family, int8 and int4, sym and asym, blocks 16..128: structure, and the dense graph at
 * accuracy_level 1 against the dequantized twin. */
static void test_families_match_dequantized(void) {
  static const int64_t tokens[] = {3, 17, 200, 5, 42, 99, 7, 1, 250, 64};
  const int64_t n = (int64_t)(sizeof tokens / sizeof tokens[0]);
  static const struct {
    int bits, block, asym;
  } modes[] = {{8, 32, 0}, {4, 32, 0}, {4, 16, 1}, {8, 128, 1}, {4, 64, 0}};
  for (size_t f = 0; f < sizeof FAMILIES / sizeof FAMILIES[0]; f++) {
    char dir[600];
    write_family(&FAMILIES[f], dir, sizeof dir);
    ph_model *m = mt_open(dir, 1);
    if (!m) continue;
    const model_weights *w = model_weights_of(m);
    int64_t V = 0;
    float *plain = run_graph(build(m, w, NULL), tokens, n, &V);
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
      /* the routed experts are QMoE's (tests/test_qmoe_build.c): kept out here, so this checks
       * the linear layers alone (no linear layer's name contains "mlp.experts") */
      ph_quant_params q = {modes[k].bits, modes[k].block, modes[k].asym, 1, "mlp.experts"};
      graph *g = build(m, w, &q);
      if (!g) continue;
      CHECK_EQ_INT(check_nbits_nodes(g, &q, PH_DTYPE_F32), expected_nbits(w, NULL));
      int64_t V2 = 0;
      float *quant = run_graph(g, tokens, n, &V2);
      const quant_params qp = {q.bits, q.block_size, !q.asymmetric, PH_DTYPE_F32};
      dq_model dq;
      dq_make(&dq, w, &qp, NULL);
      float *ref = run_graph(build(m, &dq.w, NULL), tokens, n, &V2);
      if (quant && ref && plain) {
        double err = 0, scale = 0, qerr = 0, qscale = 0;
        max_err(quant, ref, n * V, &err, &scale);
        max_err(quant, plain, n * V, &qerr, &qscale);
        printf("  %-18s int%d block %3d %s: |quant - dequantized| %.2e, |quant - f32| %.2e "
               "(scale %.2f)\n",
               dir + strlen(g_tmp) + 1, q.bits, q.block_size, q.asymmetric ? "asym" : "sym ",
               err / scale, qerr / qscale, scale);
        CHECK(err <= PAIR_F32_TOL * scale);
        /* the quantization error itself is far above the bound: the comparison has teeth */
        CHECK(qerr > 10 * PAIR_F32_TOL * qscale);
      }
      free(quant);
      free(ref);
      dq_free(&dq);
    }
    free(plain);
    ph_model_free(m);
  }
}

/* quant.skip keeps what it names (the LM head, a whole layer), in the graph and in the numbers. */
static void test_skip(void) {
  char dir[600];
  write_family(&FAMILIES[0], dir, sizeof dir);
  ph_model *m = mt_open(dir, 1);
  if (!m) return;
  const model_weights *w = model_weights_of(m);
  const char *skip = "lm_head,layers.0.,mlp.down_proj";
  ph_quant_params q = {4, 32, 0, 1, skip};
  graph *g = build(m, w, &q);
  if (g) {
    const int n = check_nbits_nodes(g, &q, PH_DTYPE_F32);
    CHECK_EQ_INT(n, expected_nbits(w, skip));
    CHECK(n < expected_nbits(w, NULL) - 4);
    for (int i = 0; i < g->n_nodes; i++)
      if (strcmp(g->nodes[i].op_type, "MatMulNBits") == 0) {
        const char *b = g->values[g->nodes[i].inputs[1]].name;
        CHECK(!strstr(b, "lm_head") && !strstr(b, "layers.0.") && !strstr(b, "down_proj"));
      }
  }
  static const int64_t tokens[] = {9, 8, 7, 6, 5, 4};
  int64_t V = 0;
  float *quant = run_graph(g, tokens, 6, &V);
  dq_model dq;
  const quant_params qp = {4, 32, 1, PH_DTYPE_F32};
  dq_make(&dq, w, &qp, skip);
  float *ref = run_graph(build(m, &dq.w, NULL), tokens, 6, &V);
  if (quant && ref) {
    double err = 0, scale = 0;
    max_err(quant, ref, 6 * V, &err, &scale);
    CHECK(err <= PAIR_F32_TOL * scale);
  }
  free(quant);
  free(ref);
  dq_free(&dq);
  ph_model_free(m);
}

/* A tied embedding: the gather keeps the f32 table, the LM head is quantized (by its own
 * initializers) unless skipped as "lm_head". */
static void test_tied_lm_head(void) {
  tiny_params p = tiny_params_default();
  p.tie_word_embeddings = 1;
  char dir[600];
  snprintf(dir, sizeof dir, "%s/tied", g_tmp);
  diag d;
  diag_clear(&d);
  CHECK_STATUS(tiny_write(dir, &p, &d), PH_OK, d.msg);
  ph_model *m = mt_open(dir, 1);
  if (!m) return;
  const model_weights *w = model_weights_of(m);
  CHECK(w->global[W_LM_HEAD] == NULL);
  for (int skip = 0; skip < 2; skip++) {
    ph_quant_params q = {8, 32, 0, 0, skip ? "lm_head" : NULL};
    graph *g = build(m, w, &q);
    if (!g) continue;
    int head_nbits = 0, gather_f32 = 0;
    for (int i = 0; i < g->n_nodes; i++) {
      const gnode *nd = &g->nodes[i];
      if (strcmp(nd->op_type, "MatMulNBits") == 0 &&
          strcmp(g->values[nd->inputs[1]].name, "model.embed_tokens.weight_Q8") == 0)
        head_nbits++;
      if (strcmp(nd->op_type, "Gather") == 0 &&
          strcmp(g->values[nd->inputs[0]].name, "model.embed_tokens.weight") == 0)
        gather_f32 = g->values[nd->inputs[0]].type.dtype == PH_DTYPE_F32;
    }
    CHECK_EQ_INT(head_nbits, skip ? 0 : 1);
    CHECK(gather_f32);
    CHECK_EQ_INT(check_nbits_nodes(g, &q, PH_DTYPE_F32), expected_nbits(w, q.skip));
    graph_free(g);
  }
  ph_model_free(m);
}

/* The paged layout: every family builds with f16 activations (scales in f16); DeepSeek's LATENT
 * graph quantizes its absorbed projections, and a skip of one source (kv_b_proj, or o_proj) keeps
 * the products made from it. */
static void test_paged_and_absorbed(void) {
  for (size_t f = 0; f < sizeof FAMILIES / sizeof FAMILIES[0]; f++) {
    char dir[600];
    write_family(&FAMILIES[f], dir, sizeof dir);
    ph_model *m = mt_open(dir, 1);
    if (!m) continue;
    const int ds = strncmp(FAMILIES[f].model_type, "deepseek", 8) == 0;
    static const char *const skips[3] = {NULL, "kv_b_proj", "o_proj"};
    for (int k = 0; k < (ds ? 3 : 1); k++) {
      model_options o = model_options_default();
      o.max_context = 256;
      o.paged = 1;
      o.io_dtype = PH_DTYPE_F16;
      o.quant = (ph_quant_params){4, 32, 1, 4, skips[k]};
      graph *g = NULL;
      diag d;
      diag_clear(&d);
      CHECK_STATUS(model_build_graph(model_config(m), model_weights_of(m), &o, &g, &d), PH_OK,
                   d.msg);
      if (!g) continue;
      const int n = check_nbits_nodes(g, &o.quant, PH_DTYPE_F16);
      int q_abs = 0, o_abs = 0;
      for (int i = 0; i < g->n_nodes; i++)
        if (strcmp(g->nodes[i].op_type, "MatMulNBits") == 0) {
          const char *b = g->values[g->nodes[i].inputs[1]].name;
          q_abs += strstr(b, "q_absorbed") != NULL;
          o_abs += strstr(b, "o_absorbed") != NULL;
        }
      const int L = (int)model_config(m)->n_layers;
      if (ds) {
        CHECK_EQ_INT(q_abs, k == 1 ? 0 : L);
        CHECK_EQ_INT(o_abs, k == 0 ? L : 0);
      } else {
        CHECK_EQ_INT(n, expected_nbits(model_weights_of(m), NULL));
      }
      CHECK(n > 0);
      graph_free(g);
    }
    ph_model_free(m);
  }
}

/* Bad options: PH_ERR_INVALID_ARGUMENT naming the field, from every family's builder. */
static void test_bad_options(void) {
  char dir[600];
  write_family(&FAMILIES[0], dir, sizeof dir);
  ph_model *m = mt_open(dir, 1);
  if (!m) return;
  static const struct {
    ph_quant_params q;
    const char *msg;
  } bad[] = {
      {{3, 32, 0, 4, NULL}, "bits 3"},          {{16, 32, 0, 4, NULL}, "bits 16"},
      {{-4, 32, 0, 4, NULL}, "bits -4"},        {{4, 8, 0, 4, NULL}, "block_size 8"},
      {{4, 48, 0, 4, NULL}, "block_size 48"},   {{8, 512, 0, 4, NULL}, "block_size 512"},
      {{4, -32, 0, 4, NULL}, "block_size"},     {{4, 32, 0, 5, NULL}, "accuracy_level 5"},
      {{4, 32, 0, -1, NULL}, "accuracy_level"}, {{4, 32, 2, 4, NULL}, "asymmetric 2"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    model_options o = model_options_default();
    o.quant = bad[i].q;
    graph *g = NULL;
    diag d;
    diag_clear(&d);
    CHECK_STATUS(model_build_graph(model_config(m), model_weights_of(m), &o, &g, &d),
                 PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, bad[i].msg);
    CHECK(g == NULL);
  }
  /* bits 0 ignores the rest (zero-initialized = none); the defaults fill block and level */
  model_options o = model_options_default();
  o.quant = (ph_quant_params){0, 7, 0, 9, "x"};
  graph *g = NULL;
  diag d;
  diag_clear(&d);
  CHECK_STATUS(model_build_graph(model_config(m), model_weights_of(m), &o, &g, &d), PH_OK, d.msg);
  int nbits = 0;
  for (int i = 0; g && i < g->n_nodes; i++)
    nbits += strcmp(g->nodes[i].op_type, "MatMulNBits") == 0;
  CHECK_EQ_INT(nbits, 0);
  graph_free(g);
  ph_quant_params q = {8, 0, 0, 0, NULL};
  g = build(m, model_weights_of(m), &q);
  if (g) CHECK(check_nbits_nodes(g, &(ph_quant_params){8, 32, 0, 4, NULL}, PH_DTYPE_F32) > 0);
  graph_free(g);
  ph_model_free(m);
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "%s", check_env("PH_TMP_DIR"));
  diag d;
  diag_clear(&d);
  if (path_mkdirs(g_tmp, &d) != PH_OK) return 1;
  RUN(test_bad_options);
  RUN(test_families_match_dequantized);
  RUN(test_skip);
  RUN(test_tied_lm_head);
  RUN(test_paged_and_absorbed);
  return check_finish();
}
