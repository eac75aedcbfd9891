/* node_testing — whether the npm packages a cross-check runs against are there (node on PATH and
 * the package under <dir>/node_modules, where scripts/install-ort.sh installs every pinned test
 * package: onnxruntime-node, the tokenizer and Jinja references, the OpenAI SDK).
 *
 *   int rc = node_testing_ready("test_x", node_dir, "@huggingface/jinja/package.json",
 *                               "the @huggingface/jinja cross-check");
 *   if (rc) return rc;   // 77: skipped (ctest's skip code), 1: failed under PH_REQUIRE_ORT=1
 *
 * Without them (the install script writes why to <dir>/UNAVAILABLE) the test is a skip with that
 * reason, so every other test still counts, and a failure where PH_REQUIRE_ORT=1 (CI, `make test
 * CI=true`), so CI can never go green without the cross-checks.
 */
#ifndef PH_TESTS_NODE_TESTING_H
#define PH_TESTS_NODE_TESTING_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fmap.h"

/* 0 when node runs and <dir>/node_modules/<probe> exists; else says why on stderr (what: the
 * checks that will not run) and on stdout (the test's closing line), and returns 77, or 1 when
 * PH_REQUIRE_ORT=1. */
static inline int node_testing_ready(const char *test_name, const char *dir, const char *probe,
                                     const char *what) {
  char path[1400], reason[2048] = "";
  snprintf(path, sizeof path, "%s/node_modules/%s", dir, probe);
  struct stat sb;
  if (stat(path, &sb) == 0 && system("node --version >/dev/null 2>&1") == 0) return 0;
  char unavailable[1300], *text = NULL;
  size_t len = 0;
  diag d;
  snprintf(unavailable, sizeof unavailable, "%s/UNAVAILABLE", dir);
  if (file_read_all(unavailable, sizeof reason - 1, &text, &len, &d) == PH_OK) {
    while (len && (text[len - 1] == '\n' || text[len - 1] == '\r')) text[--len] = '\0';
    snprintf(reason, sizeof reason, "%s", text);
  } else {
    snprintf(reason, sizeof reason, "node or %s is missing: run make ort", path);
  }
  free(text);
  const char *require = getenv("PH_REQUIRE_ORT");
  const int required = require && strcmp(require, "1") == 0;
  fprintf(stderr, "  %s: %s did not run: %s\n",
          required ? "FAIL (PH_REQUIRE_ORT=1, as under CI=true)" : "SKIPPED", what, reason);
  printf("%s %s: the npm packages it checks against are not installed\n",
         required ? "FAIL" : "skip", test_name);
  return required ? 1 : 77;
}

#endif /* PH_TESTS_NODE_TESTING_H */
