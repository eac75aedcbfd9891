/* ort_testing — running packages on ONNX Runtime 1.30 (onnxruntime-node, CPU EP) for the
 * cross-checks test_ort and test_ort_moe (docs/ort-check.md): a node process runs
 * tests/ort/run_ort.mjs on a package; inputs and outputs travel as safetensors files under the
 * test's temporary folder.
 *
 *   int main(void) {
 *     int rc = ort_testing_init("test_ort");   // 0: ONNX Runtime is there, go on
 *     if (rc) return rc;                       // 77: skipped; 1: failed (PH_REQUIRE_ORT=1)
 *     ...
 *     st_set *out = NULL;
 *     if (ort_run(pkg, "case", entries, n, &out, NULL)) { ...; st_close(out); }
 *
 * Without onnxruntime-node (scripts/install-ort.sh writes why to <PH_ORT_DIR>/UNAVAILABLE) the
 * test is a skip (ctest's 77, with the reason), so every other test still counts, and a failure
 * where PH_REQUIRE_ORT=1 (CI), so CI can never go green without the cross-checks.
 */
#ifndef PH_TESTS_ORT_TESTING_H
#define PH_TESTS_ORT_TESTING_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "base/fmap.h"
#include "check.h"
#include "exec/exec.h"
#include "io/onnx.h"
#include "io/safetensors.h"
#include "node_testing.h"
#include "tensor/tensor.h"

/* PH_TMP_DIR (created by ort_testing_init) and the path of tests/ort/run_ort.mjs. */
static char g_tmp[1024], g_script[1200];

/* Sets g_tmp and g_script and probes ONNX Runtime where scripts/install-ort.sh puts it
 * (PH_ORT_DIR; run_ort.mjs reads the same variable). Returns 0 when the cross-checks can run,
 * else the exit code for main, having said why: 77 (skip), or 1 under PH_REQUIRE_ORT=1 or when
 * g_tmp cannot be made. */
static inline int ort_testing_init(const char *test_name) {
  snprintf(g_tmp, sizeof g_tmp, "%s", check_env("PH_TMP_DIR"));
  snprintf(g_script, sizeof g_script, "%s/tests/ort/run_ort.mjs", check_env("PH_SOURCE_DIR"));
  diag d;
  if (path_mkdirs(g_tmp, &d) != PH_OK) {
    fprintf(stderr, "  FAIL: %s\n", d.msg);
    return 1;
  }
  return node_testing_ready(test_name, check_env("PH_ORT_DIR"), "onnxruntime-node/package.json",
                            "ONNX Runtime cross-checks");
}

/* Writes in[0 .. n_in) to <g_tmp>/<tag>.in.safetensors, runs run_ort.mjs on package pkg (CPU EP)
 * and opens what it wrote, <tag>.out.safetensors, into *out (the caller closes it). Three
 * checks: the inputs written, ONNX Runtime exited 0 (its message, on our stderr, is above a
 * failure), the outputs read. seconds, when not NULL, gets node's wall time added. Returns 1
 * when *out is open. */
static inline int ort_run(const char *pkg, const char *tag, const st_write_entry *in, size_t n_in,
                          st_set **out, double *seconds) {
  char in_path[1300], out_path[1300], cmd[6000];
  snprintf(in_path, sizeof in_path, "%s/%s.in.safetensors", g_tmp, tag);
  snprintf(out_path, sizeof out_path, "%s/%s.out.safetensors", g_tmp, tag);
  *out = NULL;
  diag d;
  ph_status s = st_write_file(in_path, in, n_in, NULL, NULL, &d);
  CHECK_STATUS(s, PH_OK, d.msg);
  if (s != PH_OK) return 0;
  remove(out_path);
  /* LD_PRELOAD is dropped so a sanitizer runtime preloaded into this process never reaches
   * node. */
  snprintf(cmd, sizeof cmd, "env -u LD_PRELOAD node '%s' '%s' '%s' '%s' cpu", g_script, pkg,
           in_path, out_path);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int st = system(cmd);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (seconds)
    *seconds += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  int rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  if (!check_report(rc == 0, __FILE__, __LINE__, "ONNX Runtime ran the package")) {
    fprintf(stderr, "       %s exited %d (its message is above)\n", cmd, rc);
    return 0;
  }
  s = st_open_file(out_path, out, &d);
  CHECK_STATUS(s, PH_OK, d.msg);
  return s == PH_OK;
}

/* One-node tests (test_ort_nbits, test_ort_moe): graph gr (NULL when building it failed: d says
 * why) written as the package <g_tmp>/<name> (its path into pkg) by producer, and freed. Returns
 * 1 when the package is written. */
static inline int ort_write_package(graph *gr, const char *name, const char *producer, char *pkg,
                                    size_t pkg_size, diag *d) {
  snprintf(pkg, pkg_size, "%s/%s", g_tmp, name);
  if (!CHECK(gr != NULL)) {
    fprintf(stderr, "  %s: %s\n", name, d->msg);
    return 0;
  }
  ph_status s = path_mkdirs(pkg, d);
  if (s == PH_OK) s = onnx_write_model(gr, pkg, producer, d);
  CHECK_STATUS(s, PH_OK, d->msg);
  graph_free(gr);
  return s == PH_OK;
}

/* Ours: package pkg read back and run by the executor (2 threads) with the graph input names[i]
 * bound to in[i] (i < n); its output 0, n_out values, into y as f32. Returns 1 when it ran. */
static inline int ort_run_ours(const char *pkg, int n, const char *const *names, const tensor *in,
                               int64_t n_out, float *y) {
  diag d;
  graph *g = NULL;
  ph_status s = onnx_read_model(pkg, &g, &d);
  CHECK_STATUS(s, PH_OK, d.msg);
  if (s != PH_OK) return 0;
  executor *e = NULL;
  s = exec_create(g, 2, &e, &d);
  CHECK_STATUS(s, PH_OK, d.msg);
  for (int i = 0; i < n && s == PH_OK; i++)
    s = exec_bind_input(e, exec_input_index(e, names[i]), &in[i], &d);
  if (s == PH_OK) s = exec_run(e, &d);
  CHECK_STATUS(s, PH_OK, d.msg);
  if (s == PH_OK) tensor_load_f32(exec_output(e, 0), 0, n_out, y);
  exec_free(e);
  graph_free(g);
  return s == PH_OK;
}

#endif /* PH_TESTS_ORT_TESTING_H */
