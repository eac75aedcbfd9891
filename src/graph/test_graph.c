/* graph: the value-name index (graph.name_slots). Every graph_add_* looks a name up to refuse a
 * duplicate; that lookup was a scan over every value, so reading a model of n nodes took O(n^2)
 * (a 1.8 MB model.onnx of 80,000 nodes: 9 s; 1,000,000 nodes would take about 25 minutes). The
 * index must find every value by its current name across growth and renames, and refuse every
 * duplicate, whatever the order of operations. (Speed is measured, not tested: docs/testing.md.)
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "graph/graph.h"

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

int main(void) {
  RUN(test_names_found_across_growth_and_renames);
  return check_finish();
}
