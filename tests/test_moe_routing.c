/* DeepSeek's MoE routing variants in the graph (src/models/moe.c) against a float64 reference
 * written here from Hugging Face's semantics (issue 14's routing list; model-math §5.4), on a
 * make-tiny DeepSeek checkpoint whose config.json is edited for each variant:
 *   V2 greedy            softmax, top-k, x routed_scaling_factor (the op's own routing)
 *   V2 group-limited     softmax, a group scores as its largest probability, the best topk_group
 *                        groups kept (the others' scores masked to 0.0), top-k, x scale, never
 *                        renormalised (even with norm_topk_prob set)
 *   V3 noaux_tc          sigmoid; selection on score + e_score_correction_bias, a group scores as
 *                        the sum of its two largest biased scores; weights the unbiased scores,
 *                        renormalised iff norm_topk_prob, x scale; with and without norm_topk_prob
 * Only the MoE block of one layer is built (moe_block over a graph input x [N, H]), so the
 * reference is the whole block: routed experts (SwiGLU) plus the ungated shared experts. The
 * golden set covers V3 grouped with renormalisation end to end; this covers every other path.
 * Bound: 1e-5 of the output's scale — f32 rounding of a few dot products of width <= 64 and a
 * softmax (~1e-6 relative); a wrong expert or weight is off by 1e-2 or more. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "check.h"
#include "exec/exec.h"
#include "graph/prepare.h"
#include "models/builder.h"
#include "models/model.h"
#include "models/moe.h"
#include "models/tiny.h"
#include "tensor/dtype.h"

#define TOL   1e-5
#define N     9 /* tokens */
#define MAX_E 16

static char g_tmp[512];

/* rows [r0, r0+n) x cols of a checkpoint tensor as doubles */
static double *rows_f64(const st_tensor *t) {
  const int64_t n = shape_numel(&t->shape);
  float *f = malloc((size_t)n * sizeof *f);
  double *out = malloc((size_t)n * sizeof *out);
  dtype_convert(f, PH_DTYPE_F32, t->data, t->dtype, (size_t)n, NULL);
  for (int64_t i = 0; i < n; i++) out[i] = f[i];
  free(f);
  return out;
}

/* y += w * down(SiLU(gate x) * up x) for weights [I, H], [I, H], [H, I] */
static void swiglu_add(const st_tensor *g, const st_tensor *u, const st_tensor *dn, const double *x,
                       int64_t H, double w, double *y) {
  const int64_t I = g->shape.dims[0];
  double *G = rows_f64(g), *U = rows_f64(u), *D = rows_f64(dn), *h = malloc((size_t)I * sizeof *h);
  for (int64_t i = 0; i < I; i++) {
    double a = 0, b = 0;
    for (int64_t k = 0; k < H; k++) a += G[i * H + k] * x[k], b += U[i * H + k] * x[k];
    h[i] = a / (1.0 + exp(-a)) * b;
  }
  for (int64_t o = 0; o < H; o++) {
    double acc = 0;
    for (int64_t i = 0; i < I; i++) acc += D[o * I + i] * h[i];
    y[o] += w * acc;
  }
  free(G);
  free(U);
  free(D);
  free(h);
}

/* the k largest of v[0..n) (ties: lower index), indices into idx */
static void top_k(const double *v, int n, int k, int *idx) {
  int used[MAX_E] = {0};
  for (int j = 0; j < k; j++) {
    int best = -1;
    for (int e = 0; e < n; e++)
      if (!used[e] && (best < 0 || v[e] > v[best])) best = e;
    idx[j] = best;
    used[best] = 1;
  }
}

/* HF's DeepSeek MoE block on one token x [H]: into y [H]. */
static void reference(const hf_config *c, const model_weights *w, int layer, const double *x,
                      double *y) {
  const int64_t H = c->hidden_size;
  const int E = (int)c->moe.n_experts, K = (int)c->moe.n_experts_per_tok;
  const int G = (int)c->moe.n_group, TG = (int)c->moe.topk_group;
  const int v3 = strcmp(c->model_type, "deepseek_v3") == 0;
  double *Wg = rows_f64(weights_layer(w, layer, W_MOE_ROUTER));
  double s[MAX_E], choice[MAX_E];
  double mx = -INFINITY, sum = 0;
  for (int e = 0; e < E; e++) {
    double l = 0;
    for (int64_t k = 0; k < H; k++) l += Wg[e * H + k] * x[k];
    s[e] = l;
    if (l > mx) mx = l;
  }
  free(Wg);
  if (v3) {
    for (int e = 0; e < E; e++) s[e] = 1.0 / (1.0 + exp(-s[e]));
  } else {
    for (int e = 0; e < E; e++) sum += (s[e] = exp(s[e] - mx));
    for (int e = 0; e < E; e++) s[e] /= sum;
  }
  double *bias = v3 ? rows_f64(weights_layer(w, layer, W_MOE_ROUTER_BIAS)) : NULL;
  for (int e = 0; e < E; e++) choice[e] = s[e] + (bias ? bias[e] : 0.0);
  free(bias);
  const int grouped = strcmp(c->moe.topk_method, "greedy") != 0 && G > 1;
  if (grouped) {
    const int per = E / G;
    double gs[MAX_E];
    for (int g = 0; g < G; g++) {
      int two[2];
      top_k(choice + g * per, per, v3 ? 2 : 1, two);
      gs[g] = choice[g * per + two[0]] + (v3 ? choice[g * per + two[1]] : 0.0);
    }
    int keep[MAX_E], kept[MAX_E] = {0};
    top_k(gs, G, TG, keep);
    for (int j = 0; j < TG; j++) kept[keep[j]] = 1;
    for (int e = 0; e < E; e++)
      if (!kept[e / per]) choice[e] = 0.0;
  }
  int sel[MAX_E];
  top_k(choice, E, K, sel);
  double wsum = 0;
  for (int j = 0; j < K; j++) wsum += s[sel[j]];
  const int renorm = v3 && c->moe.norm_topk_prob;
  memset(y, 0, (size_t)H * sizeof *y);
  for (int j = 0; j < K; j++) {
    const double wt =
        (renorm ? s[sel[j]] / (wsum + 1e-20) : s[sel[j]]) * c->moe.routed_scaling_factor;
    swiglu_add(weights_expert(w, layer, sel[j], 0), weights_expert(w, layer, sel[j], 1),
               weights_expert(w, layer, sel[j], 2), x, H, wt, y);
  }
  if (c->moe.n_shared_experts > 0)
    swiglu_add(weights_layer(w, layer, W_DS_SHARED_GATE), weights_layer(w, layer, W_DS_SHARED_UP),
               weights_layer(w, layer, W_DS_SHARED_DOWN), x, H, 1.0, y);
}

/* config.json of dir with the keys of the JSON object text `extra` set (replaced when present) */
static void edit_config(const char *dir, const char *extra) {
  char path[800];
  snprintf(path, sizeof path, "%s/config.json", dir);
  json_error_t je;
  json_t *cfg = json_load_file(path, 0, &je), *add = json_loads(extra, 0, &je);
  CHECK(cfg && add);
  if (cfg && add) {
    json_object_update(cfg, add);
    CHECK(json_dump_file(cfg, path, JSON_INDENT(1)) == 0);
  }
  json_decref(cfg);
  json_decref(add);
}

static void run_block(const char *tag, const hf_config *c, const model_weights *w, int layer,
                      int paged);

static void check_variant(const char *tag, const char *type, const char *extra) {
  char dir[700];
  snprintf(dir, sizeof dir, "%s/%s", g_tmp, tag);
  tiny_params p = tiny_params_default();
  p.model_type = type;
  p.seed = 7;
  diag d;
  CHECK_STATUS(tiny_write(dir, &p, &d), PH_OK, d.msg);
  edit_config(dir, extra);
  ph_model *m = NULL;
  ph_status ms = ph_model_open(dir, NULL, &m);
  CHECK_STATUS(ms, PH_OK, m ? ph_model_error(m) : "no model");
  if (ms != PH_OK) {
    ph_model_free(m);
    return;
  }
  const hf_config *c = model_config(m);
  const model_weights *w = model_weights_of(m);
  const int layer = (int)c->n_layers - 1; /* past first_k_dense_replace: a MoE layer */
  CHECK(c->layer_is_moe[layer] && c->moe.n_experts <= MAX_E);
  for (int paged = 0; paged < 2; paged++) run_block(tag, c, w, layer, paged);
  ph_model_free(m);
}

/* The block alone: x ([1, N, H] dense, [N, H] packed: the routing keeps the leading dims) ->
 * moe_block -> y, against the reference token by token. */
static void run_block(const char *tag, const hf_config *c, const model_weights *w, int layer,
                      int paged) {
  const int64_t H = c->hidden_size;
  diag d;
  graph *g = NULL;
  CHECK_STATUS(graph_create(&g, &d), PH_OK, d.msg);
  builder b;
  model_options o = model_options_default();
  o.paged = paged;
  CHECK_STATUS(builder_init(&b, g, c, w, &o, 64, &d), PH_OK, d.msg);
  int x = paged ? graph_add_input(g, "x", PH_DTYPE_F32, 2, (int64_t[]){-1, H}, NULL)
                : graph_add_input(g, "x", PH_DTYPE_F32, 3, (int64_t[]){-1, -1, H}, NULL);
  int y = moe_block(&b, layer, x);
  graph_rename_value(g, y, "y");
  graph_mark_output(g, y, NULL);
  graph *built = NULL;
  CHECK_STATUS(builder_finish(&b, &built, &d), PH_OK, d.msg);
  executor *e = NULL;
  if (built) {
    CHECK_STATUS(graph_prepare_cpu(built, &d), PH_OK, d.msg);
    CHECK_STATUS(exec_create(built, 2, &e, &d), PH_OK, d.msg);
  }
  float xs[N * 64];
  double xd[64], ref[64];
  for (int i = 0; i < N * H; i++) xs[i] = (float)sin(0.37 * i + 0.1) * 1.5f;
  tensor t;
  memset(&t, 0, sizeof t);
  t.dtype = PH_DTYPE_F32;
  t.rank = paged ? 2 : 3;
  t.dims[0] = paged ? N : 1;
  t.dims[1] = paged ? H : N;
  t.dims[2] = H;
  t.data = xs;
  ph_status st = e ? exec_bind_input(e, exec_input_index(e, "x"), &t, &d) : PH_ERR_INTERNAL;
  if (st == PH_OK) st = exec_run(e, &d);
  if (e) CHECK_STATUS(st, PH_OK, d.msg);
  if (st == PH_OK) {
    const float *got = exec_output(e, exec_output_index(e, "y"))->data;
    double err = 0, scale = 0;
    for (int n = 0; n < N; n++) {
      for (int64_t k = 0; k < H; k++) xd[k] = xs[n * H + k];
      reference(c, w, layer, xd, ref);
      for (int64_t k = 0; k < H; k++) check_err_acc(got[n * H + k], ref[k], &err, &scale);
    }
    CHECK(err <= TOL * scale);
    printf("  %-20s %-6s MoE block vs float64 HF routing: %.2e of scale (bound %.0e)\n", tag,
           paged ? "packed" : "dense", scale > 0 ? err / scale : err, TOL);
  }
  exec_free(e);
  graph_free(built);
}

static void test_routing_variants(void) {
  check_variant("v2-greedy", "deepseek_v2", "{\"routed_scaling_factor\": 16.0}");
  check_variant("v2-group-limited", "deepseek_v2",
                "{\"topk_method\": \"group_limited_greedy\", \"n_group\": 4, \"topk_group\": 2, "
                "\"routed_scaling_factor\": 16.0, \"norm_topk_prob\": true}");
  check_variant("v3-grouped-norm", "deepseek_v3",
                "{\"n_group\": 4, \"topk_group\": 2, \"norm_topk_prob\": true}");
  check_variant("v3-grouped-no-norm", "deepseek_v3",
                "{\"n_group\": 4, \"topk_group\": 2, \"norm_topk_prob\": false}");
  check_variant("v3-ungrouped-no-norm", "deepseek_v3", "{\"norm_topk_prob\": false}");
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "%s", check_env("PH_TMP_DIR"));
  diag d;
  if (path_mkdirs(g_tmp, &d) != PH_OK) return 1;
  RUN(test_routing_variants);
  return check_finish();
}
