/* graph: the value-name index (graph.name_slots). Every graph_add_* looks a name up to refuse a
 * duplicate; that lookup was a scan over every value, so reading a model of n nodes took O(n^2)
 * (a 1.8 MB model.onnx of 80,000 nodes: 9 s; 1,000,000 nodes would take about 25 minutes). The
 * index must find every value by its current name across growth and renames, and refuse every
 * duplicate, whatever the order of operations. (Speed is measured, not tested: docs/testing.md.)
 *
 * Lazy quantized initializers (graph_add_initializer_quant): any element range of B, scales and
 * zero points reads the bytes tensor/quant.h gives for the whole weight (ranges that start and end
 * inside a row included), and so do rows of all parts at once (graph_quant_read_rows); the CPU
 * prepare pass copies them into its resident weights through several chunks of source rows, keeping
 * MatMulNBits as it is; bad params, a zero-point part of a symmetric quantization and a NaN weight
 * are typed errors.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "graph/graph.h"
#include "graph/prepare.h"
#include "tensor/dtype.h"

#define N_VALUES 20000

static void test_names_found_across_growth_and_renames(void) {
  graph *g = NULL;
  diag d;
  CHECK_STATUS(graph_create(&g, &d), PH_OK, d.msg);
  if (!g) return;
  char name[64];
  int x = graph_add_input(g, "x", PH_DTYPE_F32, 1, (int64_t[]){4}, NULL);
  int prev = x, ok = 1;
  for (int i = 0; i < N_VALUES; i++) {
    snprintf(name, sizeof name, "v%d", i);
    int out = -1;
    graph_add_node(g, "Neg", "", "", 1, &prev, 1, (const char *[]){name}, &out, 0, NULL);
    ok &= out == i + 1;
    prev = out;
  }
  CHECK(ok);
  CHECK_STATUS(graph_status(g), PH_OK, g->err.msg);
  /* lookups go through the index (load at most 1/2), not a scan of every value */
  CHECK(g->name_cap >= 2 * g->n_values && g->name_used >= g->n_values);
  /* every value by name, and names that are not there */
  ok = graph_find_value(g, "x") == x;
  for (int i = 0; i < N_VALUES; i++) {
    snprintf(name, sizeof name, "v%d", i);
    ok &= graph_find_value(g, name) == i + 1;
  }
  CHECK(ok);
  CHECK_EQ_INT(graph_find_value(g, "v-1"), -1);
  CHECK_EQ_INT(graph_find_value(g, "v20000"), -1);
  /* renames: the old name is gone, the new one found, others untouched; a renamed-away name may
   * be taken again */
  for (int i = 0; i < N_VALUES; i += 3) {
    snprintf(name, sizeof name, "renamed.%d", i);
    CHECK_EQ_INT(graph_rename_value(g, i + 1, name), i + 1);
  }
  ok = 1;
  for (int i = 0; i < N_VALUES; i++) {
    snprintf(name, sizeof name, i % 3 ? "v%d" : "renamed.%d", i);
    ok &= graph_find_value(g, name) == i + 1;
    snprintf(name, sizeof name, i % 3 ? "renamed.%d" : "v%d", i);
    ok &= graph_find_value(g, name) == -1;
  }
  CHECK(ok);
  CHECK_EQ_INT(graph_rename_value(g, 2, "v1"), 2); /* v1 was renamed away: free again */
  CHECK_EQ_INT(graph_find_value(g, "v1"), 2);
  CHECK_EQ_INT(graph_rename_value(g, 2, "v1"), 2); /* to its own name */
  CHECK_STATUS(graph_status(g), PH_OK, g->err.msg);
  /* a duplicate is refused, sticky */
  int dup = graph_add_initializer_copy(g, "v7", PH_DTYPE_F32, shape_1d(1), (float[]){1});
  CHECK_EQ_INT(dup, -1);
  CHECK_STATUS(graph_status(g), PH_ERR_INVALID_ARGUMENT, g->err.msg);
  CHECK_CONTAINS(g->err.msg, "\"v7\" is defined twice");
  graph_free(g);

  /* a rename onto a taken name is refused too */
  CHECK_STATUS(graph_create(&g, &d), PH_OK, d.msg);
  if (!g) return;
  int a = graph_add_input(g, "a", PH_DTYPE_F32, 1, (int64_t[]){1}, NULL);
  graph_add_input(g, "b", PH_DTYPE_F32, 1, (int64_t[]){1}, NULL);
  CHECK_EQ_INT(graph_rename_value(g, a, "b"), -1);
  CHECK_CONTAINS(g->err.msg, "\"b\" is defined twice");
  graph_free(g);
}

/* W [N, K] f32 with N rows spanning several of prepare's 4 MiB copy steps (K * 4 bytes a row). */
#define QN 1100
#define QK 2048

/* A graph of one MatMulNBits over the three lazy quantized parts of w [QN, QK] under p, prepared
 * with n_threads; returns the graph (NULL after a failed prepare, whose status goes to *st). */
static graph *prepared_quant_graph(const float *w, const quant_params *p, int n_threads, int *ids,
                                   ph_status *st, diag *d) {
  graph *g = NULL;
  if (graph_create(&g, d) != PH_OK) return NULL;
  for (int part = 0; part < 3; part++) {
    char name[32];
    snprintf(name, sizeof name, "w.part%d", part);
    ids[part] = graph_add_initializer_quant(g, name, (graph_quant_part)(GRAPH_QUANT_B + part), p,
                                            QN, QK, w, PH_DTYPE_F32);
  }
  int a = graph_add_input(g, "a", PH_DTYPE_F32, 2, (int64_t[]){1, QK}, NULL);
  gattr at[5] = {attr_int("K", QK), attr_int("N", QN), attr_int("bits", p->bits),
                 attr_int("block_size", p->block), attr_int("accuracy_level", 1)};
  int y = -1;
  graph_add_node(g, "MatMulNBits", "com.microsoft", "mm", 4, (int[]){a, ids[0], ids[1], ids[2]}, 1,
                 (const char *[]){"y"}, &y, 5, at);
  graph_mark_output(g, y, NULL);
  *st = graph_finalize(g, d);
  if (*st == PH_OK)
    *st = graph_prepare_cpu_opts(g, &(prepare_options){WEIGHTS_COPY, NULL, 0, n_threads}, NULL, d);
  if (*st != PH_OK) {
    graph_free(g);
    return NULL;
  }
  return g;
}

/* The prepare pass quantizes the resident copy on 1, 2, 3 or 7 threads: the same bytes as
 * tensor/quant.h on the whole weight; a NaN is reported naming its rows whatever the split. */
static void test_quant_prepare_threads(void) {
  float *w = malloc((size_t)QN * QK * sizeof *w);
  if (!CHECK(w)) return;
  for (int64_t i = 0; i < (int64_t)QN * QK; i++) w[i] = cosf((float)i * 0.13f) * (float)(1 + i % 5);
  const quant_params p = {8, 64, 0, PH_DTYPE_F32};
  size_t bb = 0, ns = 0, zb = 0;
  diag d;
  diag_clear(&d);
  CHECK_STATUS(quant_sizes(&p, QN, QK, &bb, &ns, &zb, &d), PH_OK, d.msg);
  uint8_t *b = malloc(bb), *zp = malloc(zb);
  float *sc = malloc(ns * sizeof *sc);
  CHECK_STATUS(quant_quantize(&p, w, PH_DTYPE_F32, QN, QK, b, sc, zp, "w", &d), PH_OK, d.msg);
  const void *want[3] = {b, sc, zp};
  const size_t want_bytes[3] = {bb, ns * sizeof(float), zb};
  const int threads[4] = {1, 2, 3, 7};
  for (int t = 0; t < 4; t++) {
    int ids[3];
    ph_status st = PH_OK;
    graph *g = prepared_quant_graph(w, &p, threads[t], ids, &st, &d);
    CHECK_STATUS(st, PH_OK, d.msg);
    if (!g) continue;
    for (int part = 0; part < 3; part++) {
      const gvalue *v = &g->values[ids[part]];
      if (!CHECK(v->owned && v->type.data)) continue;
      if (!CHECK(memcmp(v->type.data, want[part], want_bytes[part]) == 0))
        fprintf(stderr, "    part %d, %d threads\n", part, threads[t]);
    }
    graph_free(g);
  }
  /* NaNs in rows 600 and 1000: the lowest is named, on any number of threads */
  w[600 * QK + 9] = NAN;
  w[1000 * QK + 3] = NAN;
  char first[sizeof d.msg];
  for (int t = 0; t < 4; t++) {
    int ids[3];
    ph_status st = PH_OK;
    graph *g = prepared_quant_graph(w, &p, threads[t], ids, &st, &d);
    CHECK(!g);
    CHECK_STATUS(st, PH_ERR_NON_FINITE, d.msg);
    if (t == 0) snprintf(first, sizeof first, "%s", d.msg);
    CHECK_EQ_STR(d.msg, first);
    graph_free(g);
  }
  CHECK_CONTAINS(first, "rows 512..1023"); /* the 4 MiB chunk of 512 rows */
  CHECK_CONTAINS(first, "at [88, 9]");
  printf("  NaN weight in prepare: %s\n", d.msg);
  diag_clear(&d);
  graph *g = NULL;
  int ids[3];
  ph_status st = PH_OK;
  w[600 * QK + 9] = 0.0f;
  w[1000 * QK + 3] = 0.0f;
  g = prepared_quant_graph(w, &p, -1, ids, &st, &d);
  CHECK(!g);
  CHECK_STATUS(st, PH_ERR_INVALID_ARGUMENT, d.msg);
  free(w);
  free(b);
  free(sc);
  free(zp);
}

static void test_quant_initializers(void) {
  float *w = malloc((size_t)QN * QK * sizeof *w);
  if (!CHECK(w)) return;
  for (int64_t i = 0; i < (int64_t)QN * QK; i++) w[i] = sinf((float)i * 0.37f) * (float)(1 + i % 7);
  const quant_params p = {4, 32, 0, PH_DTYPE_F32};
  size_t bb = 0, ns = 0, zb = 0;
  diag d;
  diag_clear(&d);
  CHECK_STATUS(quant_sizes(&p, QN, QK, &bb, &ns, &zb, &d), PH_OK, d.msg);
  uint8_t *b = malloc(bb), *zp = malloc(zb);
  float *sc = malloc(ns * sizeof *sc);
  CHECK_STATUS(quant_quantize(&p, w, PH_DTYPE_F32, QN, QK, b, sc, zp, "w", &d), PH_OK, d.msg);
  const void *want[3] = {b, sc, zp};
  const size_t want_bytes[3] = {bb, ns * sizeof(float), zb};
  graph *g = NULL;
  CHECK_STATUS(graph_create(&g, &d), PH_OK, d.msg);
  int ids[3];
  for (int part = 0; part < 3; part++) {
    char name[32];
    snprintf(name, sizeof name, "w.part%d", part);
    ids[part] = graph_add_initializer_quant(g, name, (graph_quant_part)(GRAPH_QUANT_B + part), &p,
                                            QN, QK, w, PH_DTYPE_F32);
    CHECK(ids[part] >= 0);
  }
  CHECK_EQ_INT(graph_status(g), PH_OK);
  /* ranges: whole, inside one row, across rows, ending mid-row */
  uint8_t *got = malloc(bb);
  for (int part = 0; part < 3 && graph_status(g) == PH_OK; part++) {
    const gvalue *v = &g->values[ids[part]];
    const int64_t n = tinfo_numel(&v->type);
    const size_t es = dtype_size(v->type.dtype);
    CHECK_EQ_INT((int64_t)(n * (int64_t)es), (int64_t)want_bytes[part]);
    const int64_t ranges[4][2] = {{0, n}, {3, 5}, {7, n / 3 + 11}, {n / 2 + 1, n - 3}};
    for (int r = 0; r < 4; r++) {
      const int64_t lo = ranges[r][0], hi = ranges[r][1];
      CHECK_STATUS(graph_initializer_read(g, ids[part], lo, hi, got, &d), PH_OK, d.msg);
      if (!CHECK(memcmp(got, (const uint8_t *)want[part] + lo * (int64_t)es,
                        (size_t)(hi - lo) * es) == 0))
        fprintf(stderr, "    part %d range [%lld, %lld)\n", part, (long long)lo, (long long)hi);
    }
  }
  free(got);
  /* all parts of rows [5, 700) at once, in any order of parts */
  {
    const int order[3] = {ids[2], ids[0], ids[1]};
    const int64_t r0 = 5, r1 = 700;
    const size_t row_bytes[3] = {zb / QN, bb / QN, ns * sizeof(float) / QN};
    const int part_of[3] = {2, 0, 1};
    void *dst[3];
    for (int i = 0; i < 3; i++) dst[i] = malloc((size_t)(r1 - r0) * row_bytes[i]);
    CHECK_STATUS(graph_quant_read_rows(g, order, 3, r0, r1, dst, &d), PH_OK, d.msg);
    for (int i = 0; i < 3; i++)
      CHECK(memcmp(dst[i], (const uint8_t *)want[part_of[i]] + (size_t)r0 * row_bytes[i],
                   (size_t)(r1 - r0) * row_bytes[i]) == 0);
    /* one part alone, and refusals: a part twice, rows out of range */
    CHECK_STATUS(graph_quant_read_rows(g, &ids[1], 1, r0, r1, &dst[2], &d), PH_OK, d.msg);
    CHECK(memcmp(dst[2], sc + r0 * (QK / 32), (size_t)(r1 - r0) * (QK / 32) * sizeof(float)) == 0);
    const int twice[2] = {ids[0], ids[0]};
    CHECK_STATUS(graph_quant_read_rows(g, twice, 2, r0, r1, dst, &d), PH_ERR_INVALID_ARGUMENT,
                 d.msg);
    CHECK_STATUS(graph_quant_read_rows(g, ids, 1, 0, QN + 1, dst, &d), PH_ERR_INVALID_ARGUMENT,
                 d.msg);
    for (int i = 0; i < 3; i++) free(dst[i]);
  }
  /* a MatMulNBits over them, prepared: kept, and its weights resident with the same bytes */
  int a = graph_add_input(g, "a", PH_DTYPE_F32, 2, (int64_t[]){1, QK}, NULL);
  gattr at[5] = {attr_int("K", QK), attr_int("N", QN), attr_int("bits", 4),
                 attr_int("block_size", 32), attr_int("accuracy_level", 1)};
  int y = -1;
  graph_add_node(g, "MatMulNBits", "com.microsoft", "mm", 4, (int[]){a, ids[0], ids[1], ids[2]}, 1,
                 (const char *[]){"y"}, &y, 5, at);
  graph_mark_output(g, y, NULL);
  CHECK_STATUS(graph_finalize(g, &d), PH_OK, d.msg);
  CHECK_STATUS(graph_prepare_cpu(g, &d), PH_OK, d.msg);
  CHECK_EQ_STR(g->nodes[0].op_type, "MatMulNBits");
  for (int part = 0; part < 3; part++) {
    const gvalue *v = &g->values[ids[part]];
    CHECK(v->owned && v->type.data);
    if (v->type.data) CHECK(memcmp(v->type.data, want[part], want_bytes[part]) == 0);
  }
  graph_free(g);
  /* errors: bad params and a zero-point part of a symmetric quantization (sticky), a NaN */
  const quant_params bad = {3, 32, 1, PH_DTYPE_F32}, sym = {8, 32, 1, PH_DTYPE_F32};
  CHECK_STATUS(graph_create(&g, &d), PH_OK, d.msg);
  CHECK_EQ_INT(graph_add_initializer_quant(g, "x", GRAPH_QUANT_B, &bad, 4, 64, w, PH_DTYPE_F32),
               -1);
  CHECK_EQ_INT(graph_status(g), PH_ERR_INVALID_ARGUMENT);
  graph_free(g);
  CHECK_STATUS(graph_create(&g, &d), PH_OK, d.msg);
  CHECK_EQ_INT(graph_add_initializer_quant(g, "x", GRAPH_QUANT_ZP, &sym, 4, 64, w, PH_DTYPE_F32),
               -1);
  CHECK_CONTAINS(g->err.msg, "no zero points");
  graph_free(g);
  w[3 * 64 + 5] = NAN;
  CHECK_STATUS(graph_create(&g, &d), PH_OK, d.msg);
  int id = graph_add_initializer_quant(g, "nan", GRAPH_QUANT_SCALES, &sym, 4, 64, w, PH_DTYPE_F32);
  float out[8];
  CHECK_STATUS(graph_initializer_read(g, id, 0, 8, out, &d), PH_ERR_NON_FINITE, d.msg);
  printf("  NaN weight: %s\n", d.msg);
  CHECK_CONTAINS(d.msg, "row 3");
  CHECK_CONTAINS(d.msg, "nan");
  graph_free(g);
  free(w);
  free(b);
  free(sc);
  free(zp);
}

int main(void) {
  RUN(test_names_found_across_growth_and_renames);
  RUN(test_quant_initializers);
  RUN(test_quant_prepare_threads);
  return check_finish();
}
