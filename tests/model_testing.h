/* model_testing — opening models in tests: a checkpoint directory with or without its weights,
 * and the Qwen3.8-27B geometry from its config alone (fuzz/corpus/hf_config/qwen35_27b_vlm.json,
 * 16 full-attention and 48 linear layers), which tests export --config-only to check structure
 * at real size without the weights.
 *
 *   ph_model *m = mt_open(dir, 1);                  // weights mapped
 *   ph_model *big = mt_open_27b_config(g_tmp);      // config only, from <tmp>/qwen38-27b
 */
#ifndef PH_TESTS_MODEL_TESTING_H
#define PH_TESTS_MODEL_TESTING_H

#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "models/model.h"

/* Opens dir (weights mapped when weights is 1); NULL, and a failed check, on error. */
static inline ph_model *mt_open(const char *dir, int weights) {
  ph_model_params p = ph_model_params_default();
  p.load_weights = weights;
  ph_model *m = NULL;
  CHECK_STATUS(ph_model_open(dir, &p, &m), PH_OK, ph_model_error(m));
  return m;
}

/* The 27B config copied into <tmp>/qwen38-27b/config.json and opened without weights. */
static inline ph_model *mt_open_27b_config(const char *tmp) {
  char src[600], dir[600], cmd[2300];
  snprintf(src, sizeof src, "%s/fuzz/corpus/hf_config/qwen35_27b_vlm.json",
           check_env("PH_SOURCE_DIR"));
  snprintf(dir, sizeof dir, "%s/qwen38-27b", tmp);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s' '%s/config.json'", dir, src, dir);
  if (!CHECK(system(cmd) == 0)) return NULL;
  return mt_open(dir, 0);
}

#endif /* PH_TESTS_MODEL_TESTING_H */
