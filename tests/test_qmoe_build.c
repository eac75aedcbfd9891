/* test_qmoe_build — quantized routed experts in the graphs the builders make (model_options.quant;
 * models/moe.c, docs/ops-moe.md "QMoE"): every MoE layer's experts become one
 * com.microsoft::QMoE whose codes, scales and zero points are tensor/quant.h's quantization of the
 * checkpoint's expert rows, in ONNX Runtime 1.30's layout.
 *
 * Models: the Qwen3.5-MoE golden checkpoint (bf16, fused experts) and make-tiny's Qwen3.5-MoE,
 * Qwen3-Next and DeepSeek-V3 (per-expert tensors), H 64, I 32.
 *   structure  one QMoE per MoE layer, no MoE left; attributes (bits, block_size, quant_type
 *              "int", weights_prepacked 0, swiglu) and inputs in ORT's order, dtypes and shapes
 *              (scales in the io dtype: f32 dense, f16 paged; zero points [E, N, K / block * bits
 *              / 8]); the router and
 *              shared_expert_gate are no QMoE input;
 *   numbers    the dense graph's logits are bit-identical to those of the graph built over the
 *              dequantized twin: the same checkpoint with every routed expert tensor replaced by
 *              dq(q(W)) in f32 (quant_quantize then quant_dequantize, row by row, blocks along K:
 *              the rows QMoE quantizes, in another order) and the experts kept out of the
 *              quantization (quant.skip "mlp.experts"), everything else quantized alike. Why bits,
 *              not a tolerance: QMoE dequantizes each weight to the value quant_dequantize gives
 *              ((q - z) * s, one f32 rounding) and runs MoE's kernels on it (ops/op_moe.h), which
 *              is what MoE does on those f32 weights. The plain graph is checked to differ, so the
 *              comparison sees the quantization.
 *   options    skip keeps the experts it names (all of a layer's, since one node holds them); a
 *              block QMoE cannot express for these sizes takes the largest one that it can (int4
 *              zero points with blocks of 32: 16, since ORT needs 2 * block | I = 32; int8 128:
 *              32), the twin quantized with that block; none >= 16 (I = 48, int4 zero points)
 *              is PH_ERR_UNSUPPORTED naming the remedies.
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

/* ---- the dequantized twin: routed experts replaced by dq(q(W)) in f32 ---------------------- */

typedef struct dq_experts {
  model_weights w;
  const st_tensor **layer, **expert;
  st_tensor *t;
  void **bufs;
  int n, cap;
} dq_experts;

static const st_tensor *dq_one(dq_experts *m, const st_tensor *src, const quant_params *p) {
  /* rows of K = the last dim: [E, N, K] fused or [N, K] per expert */
  const int64_t K = src->shape.dims[src->shape.n_dims - 1];
  const int64_t N = shape_numel(&src->shape) / K;
  size_t bb = 0, ns = 0, zb = 0;
  diag d;
  diag_clear(&d);
  CHECK_STATUS(quant_sizes(p, N, K, &bb, &ns, &zb, &d), PH_OK, d.msg);
  uint8_t *b = malloc(bb), *zp = zb ? malloc(zb) : NULL;
  float *sc = malloc(ns * sizeof *sc), *out = malloc((size_t)(N * K) * sizeof *out);
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

static void dq_make(dq_experts *m, const model_weights *src, const quant_params *p) {
  memset(m, 0, sizeof *m);
  m->w = *src;
  const int slots = src->n_layers * W_ROLE_COUNT;
  const int eslots = src->expert ? src->n_layers * 3 * src->n_experts : 0;
  m->t = calloc((size_t)(slots + eslots) + 1, sizeof *m->t);
  m->bufs = calloc((size_t)(slots + eslots) + 1, sizeof *m->bufs);
  m->layer = malloc((size_t)slots * sizeof *m->layer);
  memcpy(m->layer, src->layer, (size_t)slots * sizeof *m->layer);
  for (int i = 0; i < slots; i++) {
    const int r = i % W_ROLE_COUNT;
    if (src->layer[i] && (r == W_MOE_GATE_UP_FUSED || r == W_MOE_DOWN_FUSED))
      m->layer[i] = dq_one(m, src->layer[i], p);
  }
  m->w.layer = m->layer;
  if (eslots) {
    m->expert = malloc((size_t)eslots * sizeof *m->expert);
    for (int i = 0; i < eslots; i++)
      m->expert[i] = src->expert[i] ? dq_one(m, src->expert[i], p) : NULL;
    m->w.expert = m->expert;
  }
}

static void dq_free(dq_experts *m) {
  for (int i = 0; i < m->n; i++) free(m->bufs[i]);
  free(m->bufs);
  free(m->t);
  free(m->layer);
  free(m->expert);
}

/* ---- building and running ------------------------------------------------------------------ */

static graph *build(const ph_model *m, const model_weights *w, const ph_quant_params *q, int paged,
                    ph_status want, diag *d) {
  model_options o = model_options_default();
  o.max_context = 256;
  if (paged) {
    o.paged = 1;
    o.io_dtype = PH_DTYPE_F16;
  }
  if (q) o.quant = *q;
  graph *g = NULL;
  diag_clear(d);
  CHECK_STATUS(model_build_graph(model_config(m), w, &o, &g, d), want, d->msg);
  return g;
}

/* Logits of a prefill of n/2 tokens and n - n/2 single steps, [n, V] (malloc'ed). Takes g. */
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

/* ---- structure ----------------------------------------------------------------------------- */

static int count_op(const graph *g, const char *op) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += strcmp(g->nodes[i].op_type, op) == 0;
  return n;
}

static int moe_layers(const hf_config *c) {
  int n = 0;
  for (int l = 0; l < c->n_layers; l++) n += c->layer_is_moe[l] != 0;
  return n;
}

/* The block the experts take: the largest power of two <= the asked one (0: 32) with block
 * (times 8 / bits with zero points) dividing H and I — ORT's QMoE cannot pad K. 0: none >= 16. */
static int expert_block(const hf_config *c, const ph_quant_params *q) {
  const int64_t H = c->hidden_size, I = c->moe.moe_intermediate_size;
  for (int b = q->block_size ? q->block_size : 32; b >= 16; b /= 2) {
    const int64_t unit = q->asymmetric ? (int64_t)b * (8 / q->bits) : b;
    if (H % unit == 0 && I % unit == 0) return b;
  }
  return 0;
}

/* Every QMoE against ORT 1.30's schema as the builder fills it. */
static void check_qmoe_nodes(const graph *g, const hf_config *c, const ph_quant_params *q,
                             ph_dtype io) {
  const int64_t E = c->moe.n_experts, H = c->hidden_size, I = c->moe.moe_intermediate_size;
  const int bits = q->bits, block = expert_block(c, q), pack = 8 / bits;
  for (int i = 0; i < g->n_nodes; i++) {
    const gnode *n = &g->nodes[i];
    if (strcmp(n->op_type, "QMoE") != 0) continue;
    CHECK_EQ_STR(n->domain, "com.microsoft");
    CHECK_EQ_INT(node_attr_int(n, "expert_weight_bits", -1), bits);
    CHECK_EQ_INT(node_attr_int(n, "block_size", -1), block);
    CHECK_EQ_INT(node_attr_int(n, "weights_prepacked", -2), 0);
    CHECK_EQ_INT(node_attr_int(n, "swiglu_fusion", -1), 1);
    CHECK_EQ_INT(node_attr_int(n, "k", -1), c->moe.n_experts_per_tok);
    CHECK_EQ_STR(node_attr_string(n, "quant_type", ""), "int");
    CHECK_EQ_STR(node_attr_string(n, "activation_type", ""), "swiglu");
    CHECK_EQ_INT(n->n_inputs, q->asymmetric ? 13 : 7);
    if (n->n_inputs < 7) continue;
    CHECK(n->inputs[4] < 0 && n->inputs[7 < n->n_inputs ? 7 : 4] < 0); /* no biases */
    const int64_t N[2] = {2 * I, H}, K[2] = {H, I};
    for (int f = 0; f < 2; f++) {
      const gvalue *w = &g->values[n->inputs[f == 0 ? 2 : 5]];
      const gvalue *s = &g->values[n->inputs[f == 0 ? 3 : 6]];
      CHECK(w->kind == VALUE_INITIALIZER && w->type.dtype == PH_DTYPE_U8 && w->type.rank == 3);
      CHECK(w->type.dims[0] == E && w->type.dims[1] == N[f] && w->type.dims[2] == K[f] / pack);
      CHECK(s->type.dtype == io && s->type.rank == 3 && s->type.dims[0] == E &&
            s->type.dims[1] == N[f] && s->type.dims[2] == K[f] / block);
      CHECK(!strstr(w->name, "gate.weight") && !strstr(w->name, "shared_expert"));
      if (q->asymmetric) {
        const gvalue *z = &g->values[n->inputs[f == 0 ? 11 : 12]];
        const int64_t zb = K[f] / block * bits / 8;
        CHECK(z->type.dtype == PH_DTYPE_U8 && z->type.dims[0] == E && z->type.dims[1] == N[f]);
        CHECK(z->type.rank == 3 && z->type.dims[2] == zb);
      }
    }
  }
}

/* ---- tests --------------------------------------------------------------------------------- */

typedef struct model_src {
  const char *label;
  const char *model_type; /* make-tiny's, or NULL for the golden checkpoint */
} model_src;

static const model_src MODELS[] = {{"qwen35-moe-tiny golden (bf16, fused)", NULL},
                                   {"make-tiny qwen3_5_moe_text", "qwen3_5_moe_text"},
                                   {"make-tiny qwen3_next", "qwen3_next"},
                                   {"make-tiny deepseek_v3", "deepseek_v3"}};

static ph_model *open_model(const model_src *s) {
  char dir[900];
  if (!s->model_type) {
    check_data(dir, sizeof dir, "golden/qwen35-moe-tiny/checkpoint");
  } else {
    tiny_params p = tiny_params_default();
    p.model_type = s->model_type;
    snprintf(dir, sizeof dir, "%s/%s", g_tmp, s->model_type);
    diag d;
    diag_clear(&d);
    CHECK_STATUS(tiny_write(dir, &p, &d), PH_OK, d.msg);
  }
  return mt_open(dir, 1);
}

/* Structure in both layouts and the dense logits bit for bit against the dequantized twin. */
static void test_models_match_dequantized(void) {
  static const int64_t tokens[] = {3, 17, 200, 5, 42, 99, 7, 1, 250, 64};
  const int64_t n = (int64_t)(sizeof tokens / sizeof tokens[0]);
  static const struct {
    int bits, block, asym;
  } modes[] = {{4, 32, 0}, {8, 16, 1}, {4, 16, 1}, {8, 32, 1}, {8, 32, 0}, {4, 32, 1}, {8, 128, 0}};
  for (size_t mi = 0; mi < sizeof MODELS / sizeof MODELS[0]; mi++) {
    ph_model *m = open_model(&MODELS[mi]);
    if (!m) continue;
    const model_weights *w = model_weights_of(m);
    const hf_config *c = model_config(m);
    diag d;
    int64_t V = 0;
    float *plain = run_graph(build(m, w, NULL, 0, PH_OK, &d), tokens, n, &V);
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
      ph_quant_params q = {modes[k].bits, modes[k].block, modes[k].asym, 1, NULL};
      graph *g = build(m, w, &q, 0, PH_OK, &d);
      if (!g) continue;
      CHECK_EQ_INT(count_op(g, "QMoE"), moe_layers(c));
      CHECK_EQ_INT(count_op(g, "MoE"), 0);
      check_qmoe_nodes(g, c, &q, PH_DTYPE_F32);
      graph *gp = build(m, w, &q, 1, PH_OK, &d);
      if (gp) {
        CHECK_EQ_INT(count_op(gp, "QMoE"), moe_layers(c));
        check_qmoe_nodes(gp, c, &q, PH_DTYPE_F16);
      }
      graph_free(gp);
      float *quant = run_graph(g, tokens, n, &V);
      const int eb = expert_block(c, &q); /* 16 for int4 32 asym, 32 for int8 128 (I = 32) */
      CHECK(eb >= 16);
      const quant_params qp = {q.bits, eb, !q.asymmetric, PH_DTYPE_F32};
      dq_experts dq;
      dq_make(&dq, w, &qp);
      ph_quant_params q_ref = q;
      q_ref.skip = "mlp.experts";
      graph *gr = build(m, &dq.w, &q_ref, 0, PH_OK, &d);
      if (gr) CHECK_EQ_INT(count_op(gr, "QMoE"), 0);
      float *ref = run_graph(gr, tokens, n, &V);
      if (quant && ref && plain) {
        double err = 0, scale = 0, qerr = 0, qscale = 0;
        for (int64_t i = 0; i < n * V; i++) {
          check_err_acc(quant[i], ref[i], &err, &scale);
          check_err_acc(quant[i], plain[i], &qerr, &qscale);
        }
        printf("  %-38s int%d block %3d (experts %2d) %s: |QMoE - dequantized twin| %.1e (bits: "
               "%s), |QMoE - unquantized| %.2e of scale %.2f\n",
               MODELS[mi].label, q.bits, q.block_size, eb, q.asymmetric ? "asym" : "sym ",
               err / scale, memcmp(quant, ref, (size_t)(n * V) * sizeof *quant) ? "differ" : "same",
               qerr / qscale, qscale);
        CHECK(memcmp(quant, ref, (size_t)(n * V) * sizeof *quant) == 0);
        CHECK(qerr > 0); /* the experts really are quantized */
      }
      free(quant);
      free(ref);
      dq_free(&dq);
    }
    free(plain);
    ph_model_free(m);
  }
}

/* quant.skip keeps the experts it names: all of a layer's (one node holds them). */
static void test_skip(void) {
  ph_model *m = open_model(&MODELS[3]); /* DeepSeek-V3: per-expert tensors */
  if (!m) return;
  const model_weights *w = model_weights_of(m);
  const hf_config *c = model_config(m);
  int first = -1;
  for (int l = 0; l < c->n_layers && first < 0; l++)
    if (c->layer_is_moe[l]) first = l;
  CHECK(first >= 0 && moe_layers(c) >= 2);
  diag d;
  ph_quant_params q = {4, 32, 0, 1, "mlp.experts"};
  graph *g = build(m, w, &q, 0, PH_OK, &d);
  if (g) {
    CHECK_EQ_INT(count_op(g, "QMoE"), 0);
    CHECK_EQ_INT(count_op(g, "MoE"), moe_layers(c));
  }
  graph_free(g);
  /* one expert of the first MoE layer named: that layer stays MoE, the others are QMoE */
  char skip[96];
  snprintf(skip, sizeof skip, "layers.%d.mlp.experts.3.", first);
  q.skip = skip;
  g = build(m, w, &q, 0, PH_OK, &d);
  if (g) {
    CHECK_EQ_INT(count_op(g, "QMoE"), moe_layers(c) - 1);
    CHECK_EQ_INT(count_op(g, "MoE"), 1);
  }
  graph_free(g);
  ph_model_free(m);
}

/* No block >= 16 QMoE can express: int4 zero points need 32 | I, and I = 48 here. A typed
 * error naming why and what to do; the remedy it names builds. */
static void test_unsupported_block(void) {
  tiny_params p = tiny_params_default();
  p.model_type = "qwen3_5_moe_text";
  p.moe_intermediate_size = 48;
  char dir[900];
  snprintf(dir, sizeof dir, "%s/moe-i48", g_tmp);
  diag d;
  diag_clear(&d);
  CHECK_STATUS(tiny_write(dir, &p, &d), PH_OK, d.msg);
  ph_model *m = mt_open(dir, 1);
  if (!m) return;
  ph_quant_params q = {4, 32, 1, 1, NULL};
  graph *g = build(m, model_weights_of(m), &q, 0, PH_ERR_UNSUPPORTED, &d);
  CHECK(g == NULL);
  CHECK_CONTAINS(d.msg, "QMoE");
  CHECK_CONTAINS(d.msg, "mlp.experts");
  graph_free(g);
  q.skip = "mlp.experts"; /* the remedies it names */
  g = build(m, model_weights_of(m), &q, 0, PH_OK, &d);
  CHECK(g != NULL);
  graph_free(g);
  q.skip = NULL;
  q.asymmetric = 0; /* symmetric: block 16 divides 48 */
  g = build(m, model_weights_of(m), &q, 0, PH_OK, &d);
  CHECK(g != NULL && count_op(g, "QMoE") > 0);
  graph_free(g);
  ph_model_free(m);
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "%s", check_env("PH_TMP_DIR"));
  diag d;
  if (path_mkdirs(g_tmp, &d) != PH_OK) return 1;
  RUN(test_models_match_dequantized);
  RUN(test_skip);
  RUN(test_unsupported_block);
  return check_finish();
}
