/* fuzz_hf_config — libFuzzer target for the config.json parser.
 *
 * Feeds the raw input to hf_config_parse and, when it parses, runs the byte-count helpers and
 * touches every layer entry, so a config that validates but carries geometry the helpers cannot
 * handle (overflow, out-of-range layer count) shows up under UBSan/ASan. Seeds in
 * fuzz/corpus/hf_config/.
 */
#include <stddef.h>
#include <stdint.h>

#include "io/hf_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  hf_config c;
  diag d;
  diag_clear(&d);
  ph_status st = hf_config_parse((const char *)data, size, &c, &d);
  if (st != PH_OK) {
    /* Every failure must carry a message. */
    if (d.status != st || d.msg[0] == '\0') __builtin_trap();
    return 0;
  }
  if (c.n_layers < 1 || c.n_layers > HF_MAX_LAYERS) __builtin_trap();
  if (c.geom.n_full + c.geom.n_linear != c.n_layers) __builtin_trap();
  unsigned sum = 0;
  for (int64_t i = 0; i < c.n_layers; i++) sum += c.layer_kind[i] + c.layer_is_moe[i];
  volatile int64_t sink = hf_config_fixed_state_bytes(&c, PH_DTYPE_F32) +
                          hf_config_kv_bytes_per_token(&c, PH_DTYPE_BF16) + (int64_t)sum;
  (void)sink;
  (void)model_family_name(c.family);
  return 0;
}
