/* Graph IR and executor: static contract checks name the node; runs match hand computation;
 * outputs bound in place of inputs; no allocation once sized; the CPU prepare pass keeps results.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/fmap.h"
#include "check.h"
#include "exec/exec.h"
#include "graph/prepare.h"
#include "tensor/dtype.h"

static tensor tens(ph_dtype dt, int rank, const int64_t *dims, void *data) {
  tensor t;
  memset(&t, 0, sizeof t);
  t.dtype = dt;
  t.rank = rank;
  memcpy(t.dims, dims, (size_t)rank * sizeof *dims);
  t.data = data;
  return t;
}

/* y = a W + b with W [4,3] given transposed (rows = outputs) to exercise lazy transposes. */
static const float W_ROWS[3][4] = {{1, 2, 3, 4}, {-1, 0.5f, 0, 2}, {0.25f, -2, 1, 1}};
static const float BIAS[3] = {0.5f, -1, 2};

static graph *affine_graph(ph_dtype wdt, diag *d) {
  graph *g = NULL;
  if (graph_create(&g, d) != PH_OK) return NULL;
  const char *syms[] = {"batch", NULL};
  int a = graph_add_input(g, "a", PH_DTYPE_F32, 2, (int64_t[]){-1, 4}, syms);
  static uint16_t w16[12];
  const void *wsrc = W_ROWS;
  if (wdt == PH_DTYPE_BF16) {
    dtype_convert(w16, PH_DTYPE_BF16, W_ROWS, PH_DTYPE_F32, 12, NULL);
    wsrc = w16;
  }
  int w = graph_add_initializer_transposed(g, "W", wdt, 3, 4, wsrc);
  if (wdt != PH_DTYPE_F32) {
    gattr to = attr_int("to", 1);
    int cw = -1;
    graph_add_node(g, "Cast", "", "cast_w", 1, &w, 1, (const char *[]){"W_f32"}, &cw, 1, &to);
    w = cw;
  }
  int b = graph_add_initializer_copy(g, "b", PH_DTYPE_F32, shape_1d(3), BIAS);
  int y = -1, z = -1;
  graph_add_node(g, "MatMul", "", "mm", 2, (int[]){a, w}, 1, (const char *[]){"y"}, &y, 0, NULL);
  graph_add_node(g, "Add", "", "add", 2, (int[]){y, b}, 1, (const char *[]){"z"}, &z, 0, NULL);
  graph_mark_output(g, z, NULL);
  if (graph_finalize(g, d) != PH_OK) {
    graph_free(g);
    return NULL;
  }
  return g;
}

static void run_affine(graph *g, int rows, float *out) {
  diag d;
  executor *e = NULL;
  CHECK_STATUS(exec_create(g, 2, &e, &d), PH_OK, d.msg);
  if (!e) return;
  float a[8 * 4];
  for (int i = 0; i < rows * 4; i++) a[i] = (float)(i % 7) - 3.0f;
  tensor ta = tens(PH_DTYPE_F32, 2, (int64_t[]){rows, 4}, a);
  CHECK_STATUS(exec_bind_input(e, 0, &ta, &d), PH_OK, d.msg);
  CHECK_STATUS(exec_run(e, &d), PH_OK, d.msg);
  const tensor *z = exec_output(e, 0);
  CHECK_EQ_INT(z->dims[0], rows);
  CHECK_EQ_INT(z->dims[1], 3);
  memcpy(out, z->data, (size_t)rows * 3 * sizeof(float));
  for (int r = 0; r < rows; r++)
    for (int n = 0; n < 3; n++) {
      double want = BIAS[n];
      for (int k = 0; k < 4; k++) want += (double)a[r * 4 + k] * W_ROWS[n][k];
      /* inputs, weights and bias are multiples of 1/4 below 2^8 (exact in bf16 too): every
       * product and partial sum is exact in f32, so the result is exact in any order */
      CHECK_NEAR(out[r * 3 + n], want, 0);
    }
  exec_free(e);
}

static void test_build_and_run(void) {
  diag d;
  graph *g = affine_graph(PH_DTYPE_F32, &d);
  CHECK(g != NULL);
  if (!g) return;
  /* static inference: the batch dim stays unknown, the feature dim is known */
  int z = graph_find_value(g, "z");
  CHECK_EQ_INT(g->values[z].type.rank, 2);
  CHECK_EQ_INT(g->values[z].type.dims[0], -1);
  CHECK_EQ_INT(g->values[z].type.dims[1], 3);
  float out[24];
  run_affine(g, 5, out);
  /* the lazy transpose materializes to the canonical [4, 3] */
  const float *w = graph_initializer_data(g, graph_find_value(g, "W"), &d);
  CHECK(w != NULL);
  if (w) CHECK(w[0 * 3 + 1] == W_ROWS[1][0] && w[3 * 3 + 2] == W_ROWS[2][3]);
  graph_free(g);
}

static void test_prepare_matches(void) {
  diag d;
  float plain[24], prepared[24];
  for (int bf = 0; bf < 2; bf++) {
    ph_dtype dt = bf ? PH_DTYPE_BF16 : PH_DTYPE_F32;
    graph *g = affine_graph(dt, &d);
    CHECK(g != NULL);
    if (!g) return;
    run_affine(g, 7, plain);
    CHECK_STATUS(graph_prepare_cpu(g, &d), PH_OK, d.msg);
    int n_wt = 0, n_live_cast = 0;
    for (int i = 0; i < g->n_nodes; i++) {
      if (strcmp(g->nodes[i].op_type, "MatMulWT") == 0 && !g->nodes[i].dead) n_wt++;
      if (strcmp(g->nodes[i].op_type, "Cast") == 0 && !g->nodes[i].dead) n_live_cast++;
    }
    CHECK_EQ_INT(n_wt, 1);
    CHECK_EQ_INT(n_live_cast, 0); /* fused away */
    run_affine(g, 7, prepared);
    for (int i = 0; i < 21; i++) CHECK_NEAR(prepared[i], plain[i], 0); /* exact: see run_affine */
    graph_free(g);
  }
}

/* A weight that the graph narrows (Cast f32 -> f16 or bf16 in front of the MatMul, as a half
 * precision graph over an f32 checkpoint has it) must reach the prepared MatMulWT rounded, as the
 * canonical graph means: prepared and unprepared logits are bit-identical. The weights here are
 * not representable in f16 or bf16 (k/3 + 1/7), so dropping the rounding changes the result.
 * Both kinds of weight: a lazy transposed checkpoint view and a plain initializer. */
static graph *narrowing_graph(ph_dtype half, int lazy, const float *w_rows, diag *d) {
  graph *g = NULL;
  if (graph_create(&g, d) != PH_OK) return NULL;
  int a = graph_add_input(g, "a", PH_DTYPE_F32, 2, (int64_t[]){5, 8}, NULL);
  static float w_kn[8 * 6];
  for (int k = 0; k < 8; k++)
    for (int n = 0; n < 6; n++) w_kn[k * 6 + n] = w_rows[n * 8 + k];
  int w = lazy ? graph_add_initializer_transposed(g, "W", PH_DTYPE_F32, 6, 8, w_rows)
               : graph_add_initializer_view(g, "W", PH_DTYPE_F32, shape_2d(8, 6), w_kn);
  gattr to_half = attr_int("to", dtype_to_onnx(half)), to_f32 = attr_int("to", 1);
  int wh = -1, ah = -1, y = -1, z = -1;
  graph_add_node(g, "Cast", "", "cast_w", 1, &w, 1, (const char *[]){"W_half"}, &wh, 1, &to_half);
  graph_add_node(g, "Cast", "", "cast_a", 1, &a, 1, (const char *[]){"a_half"}, &ah, 1, &to_half);
  graph_add_node(g, "MatMul", "", "mm", 2, (int[]){ah, wh}, 1, (const char *[]){"y"}, &y, 0, NULL);
  graph_add_node(g, "Cast", "", "cast_y", 1, &y, 1, (const char *[]){"z"}, &z, 1, &to_f32);
  graph_mark_output(g, z, NULL);
  if (graph_finalize(g, d) != PH_OK) {
    graph_free(g);
    return NULL;
  }
  return g;
}

static int run_narrowing(graph *g, float *out) {
  diag d;
  executor *e = NULL;
  CHECK_STATUS(exec_create(g, 1, &e, &d), PH_OK, d.msg);
  if (!e) return 0;
  float a[5 * 8];
  for (int i = 0; i < 40; i++) a[i] = (float)(i % 5) - 2.0f;
  tensor ta = tens(PH_DTYPE_F32, 2, (int64_t[]){5, 8}, a);
  CHECK_STATUS(exec_bind_input(e, 0, &ta, &d), PH_OK, d.msg);
  ph_status st = exec_run(e, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  if (st == PH_OK) memcpy(out, exec_output(e, 0)->data, 30 * sizeof(float));
  exec_free(e);
  return st == PH_OK;
}

static void test_prepare_keeps_narrowing_casts(void) {
  static float w_rows[6 * 8];
  for (int i = 0; i < 48; i++) w_rows[i] = (float)(i % 9) / 3.0f + 1.0f / 7.0f;
  for (int half = 0; half < 2; half++)
    for (int lazy = 0; lazy < 2; lazy++) {
      const ph_dtype dt = half ? PH_DTYPE_BF16 : PH_DTYPE_F16;
      diag d;
      float plain[30], prepared[30];
      graph *g = narrowing_graph(dt, lazy, w_rows, &d);
      CHECK(g != NULL);
      if (!g) continue;
      CHECK(run_narrowing(g, plain));
      CHECK_STATUS(graph_prepare_cpu(g, &d), PH_OK, d.msg);
      int n_wt = 0;
      for (int i = 0; i < g->n_nodes; i++)
        n_wt += strcmp(g->nodes[i].op_type, "MatMulWT") == 0 && !g->nodes[i].dead;
      CHECK_EQ_INT(n_wt, 1);
      CHECK(run_narrowing(g, prepared));
      if (!CHECK(memcmp(plain, prepared, sizeof plain) == 0))
        printf("  %s %s weight: prepared %.9g, canonical %.9g\n", ph_dtype_name(dt),
               lazy ? "lazy" : "plain", (double)prepared[0], (double)plain[0]);
      graph_free(g);
    }
}

static void test_contract_errors(void) {
  diag d;
  graph *g = NULL;
  /* K mismatch: [*, 4] x [5, 3] */
  graph_create(&g, &d);
  int a = graph_add_input(g, "a", PH_DTYPE_F32, 2, (int64_t[]){2, 4}, NULL);
  static float w[15];
  int w5 = graph_add_initializer_view(g, "W", PH_DTYPE_F32, shape_2d(5, 3), w);
  graph_add_node(g, "MatMul", "", "bad_matmul", 2, (int[]){a, w5}, 1, (const char *[]){"y"}, NULL,
                 0, NULL);
  CHECK(graph_finalize(g, &d) != PH_OK);
  CHECK_CONTAINS(d.msg, "bad_matmul");
  graph_free(g);
  /* wrong arity */
  graph_create(&g, &d);
  a = graph_add_input(g, "a", PH_DTYPE_F32, 1, (int64_t[]){3}, NULL);
  graph_add_node(g, "Add", "", "lonely_add", 1, &a, 1, (const char *[]){"y"}, NULL, 0, NULL);
  CHECK_STATUS(graph_finalize(g, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "lonely_add");
  graph_free(g);
  /* dtype mismatch */
  graph_create(&g, &d);
  a = graph_add_input(g, "a", PH_DTYPE_F32, 1, (int64_t[]){3}, NULL);
  int i64 = graph_add_input(g, "i", PH_DTYPE_I64, 1, (int64_t[]){3}, NULL);
  graph_add_node(g, "Add", "", "mixed_add", 2, (int[]){a, i64}, 1, (const char *[]){"y"}, NULL, 0,
                 NULL);
  CHECK(graph_finalize(g, &d) != PH_OK);
  CHECK_CONTAINS(d.msg, "mixed_add");
  graph_free(g);
  /* unknown ops: all listed at once */
  graph_create(&g, &d);
  a = graph_add_input(g, "a", PH_DTYPE_F32, 1, (int64_t[]){3}, NULL);
  int y = -1;
  graph_add_node(g, "Frobnicate", "", "f", 1, &a, 1, (const char *[]){"y"}, &y, 0, NULL);
  graph_add_node(g, "Quux", "com.example", "q", 1, &y, 1, (const char *[]){"z"}, NULL, 0, NULL);
  graph_add_node(g, "Frobnicate", "", "f2", 1, &a, 1, (const char *[]){"w"}, NULL, 0, NULL);
  CHECK_STATUS(graph_finalize(g, &d), PH_ERR_UNSUPPORTED, d.msg);
  CHECK_CONTAINS(d.msg, "2 unsupported operator types: Frobnicate, com.example.Quux");
  graph_free(g);
  /* duplicate value names are a sticky builder error */
  graph_create(&g, &d);
  graph_add_input(g, "a", PH_DTYPE_F32, 1, (int64_t[]){3}, NULL);
  CHECK_EQ_INT(graph_add_input(g, "a", PH_DTYPE_F32, 1, (int64_t[]){3}, NULL), -1);
  CHECK_STATUS(graph_status(g), PH_ERR_INVALID_ARGUMENT, g->err.msg);
  CHECK_STATUS(graph_finalize(g, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  graph_free(g);
}

/* conv state updated in place: present bound to the past buffer equals a separate run */
static void test_in_place_state(void) {
  diag d;
  graph *g = NULL;
  graph_create(&g, &d);
  int x = graph_add_input(g, "x", PH_DTYPE_F32, 3, (int64_t[]){1, 2, -1}, NULL);
  int st = graph_add_input(g, "past", PH_DTYPE_F32, 3, (int64_t[]){1, 2, 2}, NULL);
  static const float w[6] = {0.5f, -1, 2, 1, 1, -0.5f};
  int wi = graph_add_initializer_view(g, "w", PH_DTYPE_F32, shape_3d(2, 1, 3), w);
  gattr act = attr_string("activation", "silu");
  int out[2] = {-1, -1};
  graph_add_node(g, "CausalConvWithState", "com.microsoft", "conv", 4, (int[]){x, wi, -1, st}, 2,
                 (const char *[]){"y", "present"}, out, 1, &act);
  graph_mark_output(g, out[0], NULL);
  graph_mark_output(g, out[1], NULL);
  CHECK_STATUS(graph_finalize(g, &d), PH_OK, d.msg);
  executor *e = NULL;
  CHECK_STATUS(exec_create(g, 1, &e, &d), PH_OK, d.msg);
  if (!e) {
    graph_free(g);
    return;
  }
  float xs[10] = {1, 2, 3, 4, 5, -1, -2, -3, -4, -5};
  float sep_state[4] = {0}, in_state[4] = {0}, y_sep[10], y_in[10];
  for (int step = 0; step < 3; step++) {
    /* separate buffers */
    float next[4];
    tensor tx = tens(PH_DTYPE_F32, 3, (int64_t[]){1, 2, 5}, xs);
    tensor tp = tens(PH_DTYPE_F32, 3, (int64_t[]){1, 2, 2}, sep_state);
    tensor tn = tens(PH_DTYPE_F32, 3, (int64_t[]){1, 2, 2}, next);
    exec_bind_input(e, 0, &tx, &d);
    exec_bind_input(e, 1, &tp, &d);
    exec_bind_output(e, 1, &tn, &d);
    CHECK_STATUS(exec_run(e, &d), PH_OK, d.msg);
    memcpy(y_sep, exec_output(e, 0)->data, sizeof y_sep);
    memcpy(sep_state, next, sizeof next);
    /* in place */
    tensor ti = tens(PH_DTYPE_F32, 3, (int64_t[]){1, 2, 2}, in_state);
    exec_bind_input(e, 1, &ti, &d);
    exec_bind_output(e, 1, &ti, &d);
    CHECK_STATUS(exec_run(e, &d), PH_OK, d.msg);
    memcpy(y_in, exec_output(e, 0)->data, sizeof y_in);
    CHECK(memcmp(y_sep, y_in, sizeof y_in) == 0);
    CHECK(memcmp(sep_state, in_state, sizeof in_state) == 0);
  }
  exec_free(e);
  graph_free(g);
}

static void test_no_allocation_once_sized(void) {
  diag d;
  graph *g = affine_graph(PH_DTYPE_F32, &d);
  CHECK(g != NULL);
  if (!g) return;
  executor *e = NULL;
  CHECK_STATUS(exec_create(g, 2, &e, &d), PH_OK, d.msg);
  float a[64 * 4] = {0};
  tensor t = tens(PH_DTYPE_F32, 2, (int64_t[]){64, 4}, a);
  exec_bind_input(e, 0, &t, &d);
  CHECK_STATUS(exec_run(e, &d), PH_OK, d.msg);
  size_t after_warmup = exec_alloc_count(e);
  for (int i = 0; i < 20; i++) {
    t.dims[0] = 1 + i % 64; /* any shape up to the warm-up's */
    exec_bind_input(e, 0, &t, &d);
    CHECK_STATUS(exec_run(e, &d), PH_OK, d.msg);
  }
  CHECK_EQ_INT(exec_alloc_count(e), after_warmup);
  /* missing binding and mismatched output buffers are typed errors */
  float small[3];
  tensor wrong = tens(PH_DTYPE_F32, 2, (int64_t[]){1, 3}, small);
  t.dims[0] = 2;
  exec_bind_input(e, 0, &t, &d);
  exec_bind_output(e, 0, &wrong, &d);
  CHECK_STATUS(exec_run(e, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "z");
  exec_free(e);
  CHECK_STATUS(exec_create(g, 1, &e, &d), PH_OK, d.msg);
  CHECK_STATUS(exec_run(e, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "not bound");
  exec_free(e);
  graph_free(g);
}

/* Node plans (op.h) follow the shapes: one executor run on 5, 2, 8 and again 5 rows gives the
 * hand-computed result each time (MatMul's plan holds the row count: a plan kept from the
 * previous shape would compute the wrong rows), and repeating a shape reuses the plan. */
static void test_plan_follows_shapes(void) {
  diag d;
  graph *g = affine_graph(PH_DTYPE_F32, &d);
  CHECK(g != NULL);
  if (!g) return;
  executor *e = NULL;
  CHECK_STATUS(exec_create(g, 2, &e, &d), PH_OK, d.msg);
  static const int rows[] = {5, 2, 8, 8, 5};
  for (size_t c = 0; c < sizeof rows / sizeof rows[0]; c++) {
    float a[8 * 4];
    for (int i = 0; i < rows[c] * 4; i++) a[i] = (float)((i + (int)c) % 7) - 3.0f;
    tensor ta = tens(PH_DTYPE_F32, 2, (int64_t[]){rows[c], 4}, a);
    CHECK_STATUS(exec_bind_input(e, 0, &ta, &d), PH_OK, d.msg);
    CHECK_STATUS(exec_run(e, &d), PH_OK, d.msg);
    const tensor *z = exec_output(e, 0);
    CHECK_EQ_INT(z->dims[0], rows[c]);
    const float *out = z->data;
    for (int r = 0; r < rows[c]; r++)
      for (int n = 0; n < 3; n++) {
        double want = BIAS[n];
        for (int k = 0; k < 4; k++) want += (double)a[r * 4 + k] * W_ROWS[n][k];
        CHECK_NEAR(out[r * 3 + n], want, 0); /* exact: see run_affine */
      }
  }
  exec_free(e);
  graph_free(g);
}

/* ---- where the prepared graph's weights live (graph/prepare.h: weight_residency) ------------ */

/* A graph over a weights file as a package or checkpoint has it: an embedding E [10, 8] read by
 * a Gather and, transposed, by the LM head MatMul (a tied embedding: one source, two readers), a
 * package's plain [K, N] = [8, 6] bf16 MatMul weight W (prepare transposes it into rows) and a
 * bias in caller memory (not a file mapping: never released). ids -> h = E[ids] -> y = h W + b,
 * logits = h E^T. */
enum { RW_V = 10, RW_H = 8, RW_N = 6 };
#define RW_E_OFF 0
#define RW_W_OFF (RW_V * RW_H * 4)
#define RW_BYTES (RW_W_OFF + RW_H * RW_N * 2)

static graph *resident_graph(const fmap *m, const float *bias, diag *d) {
  graph *g = NULL;
  if (graph_create(&g, d) != PH_OK) return NULL;
  fmap own = *m; /* the graph unmaps what it adopts: each graph maps the file itself */
  int ids = graph_add_input(g, "ids", PH_DTYPE_I64, 1, (int64_t[]){3}, NULL);
  int e =
      graph_add_initializer_view(g, "E", PH_DTYPE_F32, shape_2d(RW_V, RW_H), own.data + RW_E_OFF);
  int et = graph_add_initializer_transposed(g, "E.T", PH_DTYPE_F32, RW_V, RW_H, own.data);
  int w =
      graph_add_initializer_view(g, "W", PH_DTYPE_BF16, shape_2d(RW_H, RW_N), own.data + RW_W_OFF);
  int b = graph_add_initializer_view(g, "b", PH_DTYPE_F32, shape_1d(RW_N), bias);
  gattr to = attr_int("to", 1);
  int h = -1, wf = -1, y = -1, z = -1, logits = -1;
  graph_add_node(g, "Gather", "", "embed", 2, (int[]){e, ids}, 1, (const char *[]){"h"}, &h, 0,
                 NULL);
  graph_add_node(g, "Cast", "", "cast_w", 1, &w, 1, (const char *[]){"W_f32"}, &wf, 1, &to);
  graph_add_node(g, "MatMul", "", "mm", 2, (int[]){h, wf}, 1, (const char *[]){"y"}, &y, 0, NULL);
  graph_add_node(g, "Add", "", "add", 2, (int[]){y, b}, 1, (const char *[]){"z"}, &z, 0, NULL);
  graph_add_node(g, "MatMul", "", "head", 2, (int[]){h, et}, 1, (const char *[]){"logits"}, &logits,
                 0, NULL);
  graph_mark_output(g, z, NULL);
  graph_mark_output(g, logits, NULL);
  if (graph_status(g) != PH_OK || graph_adopt_mapping(g, &own, d) != PH_OK ||
      graph_finalize(g, d) != PH_OK) {
    graph_free(g);
    return NULL;
  }
  return g;
}

static int run_resident(graph *g, float *z, float *logits) {
  diag d;
  executor *e = NULL;
  CHECK_STATUS(exec_create(g, 1, &e, &d), PH_OK, d.msg);
  if (!e) return 0;
  int64_t ids[3] = {7, 0, 9};
  tensor t = tens(PH_DTYPE_I64, 1, (int64_t[]){3}, ids);
  CHECK_STATUS(exec_bind_input(e, 0, &t, &d), PH_OK, d.msg);
  ph_status st = exec_run(e, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  if (st == PH_OK) {
    memcpy(z, exec_output(e, 0)->data, 3 * RW_N * sizeof(float));
    memcpy(logits, exec_output(e, 1)->data, 3 * RW_V * sizeof(float));
  }
  exec_free(e);
  return st == PH_OK;
}

/* Resident kB of the mapping holding p, from /proc/self/smaps; -1 when not found. */
static long mapping_rss_kb(const void *p) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[512];
  long rss = -1;
  int in = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
      in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
      continue;
    }
    if (in && sscanf(line, "Rss: %ld kB", &rss) == 1) break;
  }
  fclose(f);
  return in ? rss : -1;
}

/* Every weight the prepared graph reads is a copy in its resident region (64-byte aligned, the
 * same bytes as the file's, a tied source copied once), the results are the bits of the mapped
 * graph's, the file pages the copy replaced are no longer resident, and caller memory is left
 * as it was. */
static void test_prepare_resident_weights(void) {
  char path[512];
  diag d;
  CHECK_STATUS(path_mkdirs(check_env("PH_TMP_DIR"), &d), PH_OK, d.msg);
  snprintf(path, sizeof path, "%s/resident-weights.bin", check_env("PH_TMP_DIR"));
  static unsigned char file[RW_BYTES];
  float ef[RW_V * RW_H], wf[RW_H * RW_N];
  uint16_t wb[RW_H * RW_N];
  for (int i = 0; i < RW_V * RW_H; i++) ef[i] = (float)((i * 37) % 23) / 8.0f - 1.0f;
  for (int i = 0; i < RW_H * RW_N; i++) wf[i] = (float)((i * 11) % 13) / 4.0f - 1.5f;
  dtype_convert(wb, PH_DTYPE_BF16, wf, PH_DTYPE_F32, RW_H * RW_N, NULL);
  memcpy(file + RW_E_OFF, ef, sizeof ef);
  memcpy(file + RW_W_OFF, wb, sizeof wb);
  CHECK_STATUS(file_write_all(path, file, sizeof file, &d), PH_OK, d.msg);
  float bias[RW_N] = {0.5f, -1, 2, 0.25f, 3, -0.75f};
  float z_map[3 * RW_N], l_map[3 * RW_V], z_copy[3 * RW_N], l_copy[3 * RW_V];
  graph *gm = NULL, *gc = NULL;
  fmap m1, m2;
  ph_status s1 = fmap_open(path, &m1, &d);
  CHECK_STATUS(s1, PH_OK, d.msg);
  ph_status s2 = fmap_open(path, &m2, &d);
  CHECK_STATUS(s2, PH_OK, d.msg);
  if (s1 != PH_OK || s2 != PH_OK) {
    fmap_close(&m1);
    fmap_close(&m2);
    return;
  }
  gm = resident_graph(&m1, bias, &d);
  gc = resident_graph(&m2, bias, &d);
  if (!CHECK(gm && gc)) {
    graph_free(gm);
    graph_free(gc);
    return;
  }
  CHECK_STATUS(graph_prepare_cpu_opts(gm, &(prepare_options){WEIGHTS_MAP, NULL, 0, 0}, NULL, &d),
               PH_OK, d.msg);
  CHECK_STATUS(graph_prepare_cpu(gc, &d), PH_OK, d.msg);
  CHECK(gm->resident == NULL);
  CHECK(gc->resident != NULL && ((uintptr_t)gc->resident & ((2u << 20) - 1)) == 0);
  CHECK(run_resident(gm, z_map, l_map));
  CHECK(run_resident(gc, z_copy, l_copy));
  CHECK(memcmp(z_map, z_copy, sizeof z_map) == 0);
  CHECK(memcmp(l_map, l_copy, sizeof l_map) == 0);
  /* every initializer a live node reads: in the region, aligned, the mapped graph's bytes */
  const uint8_t *lo = gc->resident, *hi = lo + gc->resident_bytes;
  int n_weights = 0;
  const void *embed = NULL, *head = NULL;
  for (int i = 0; i < gc->n_nodes; i++) {
    const gnode *n = &gc->nodes[i];
    if (n->dead) continue;
    for (int k = 0; k < n->n_inputs; k++) {
      int v = n->inputs[k];
      if (v < 0 || gc->values[v].kind != VALUE_INITIALIZER) continue;
      const gvalue *val = &gc->values[v];
      const uint8_t *p = val->type.data;
      n_weights++;
      CHECK(p >= lo && p + val->n_bytes <= hi && ((uintptr_t)p & 63) == 0);
      int twin = graph_find_value(gm, val->name);
      unsigned char want[RW_V * RW_H * 4];
      if (!CHECK(twin >= 0 && gm->values[twin].n_bytes == val->n_bytes &&
                 (size_t)val->n_bytes <= sizeof want))
        continue;
      CHECK_STATUS(
          graph_initializer_read(gm, twin, 0, tinfo_numel(&gm->values[twin].type), want, &d), PH_OK,
          d.msg);
      if (!CHECK(memcmp(p, want, (size_t)val->n_bytes) == 0))
        fprintf(stderr, "  %s: the copy differs from the file\n", val->name);
      if (strcmp(n->name, "embed") == 0 && k == 0) embed = p;
      if (strcmp(n->name, "head") == 0 && k == 1) head = p;
    }
  }
  CHECK_EQ_INT(n_weights, 4);            /* E, W's rows, b, E's rows */
  CHECK(embed != NULL && embed == head); /* the tied embedding: one copy */
  CHECK(memcmp(bias, (float[RW_N]){0.5f, -1, 2, 0.25f, 3, -0.75f}, sizeof bias) == 0);
  /* the mapped graph's file pages are resident (it read them); the copied graph's are not */
  CHECK(mapping_rss_kb(gm->mappings[0].data) > 0);
  CHECK_EQ_INT(mapping_rss_kb(gc->mappings[0].data), 0);
  graph_free(gm);
  graph_free(gc);
}

int main(void) {
  RUN(test_build_and_run);
  RUN(test_prepare_matches);
  RUN(test_prepare_keeps_narrowing_casts);
  RUN(test_prepare_resident_weights);
  RUN(test_contract_errors);
  RUN(test_in_place_state);
  RUN(test_no_allocation_once_sized);
  RUN(test_plan_follows_shapes);
  return check_finish();
}
