/* fuzz_genai_config — libFuzzer target for the genai_config.json reader (io/genai_config.h).
 *
 * Feeds the raw input to genai_config_parse. Every failure must carry a message; a parsed config
 * must hold NUL-terminated names within their buffers, templates that format one index without
 * reading past their bytes (snprintf with an index checks the "exactly one %d" rule under ASan
 * and UBSan), at most GENAI_MAX_EOS eos ids, a paged block size that is a power of two >= 16, a
 * decoder filename that is a plain file name, and eos ids inside the vocabulary. Seeds in
 * fuzz/corpus/genai_config/.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "io/genai_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_name(const char *s, size_t cap) {
  if (!memchr(s, 0, cap)) __builtin_trap();
}

static void check_template(const char *t) {
  char buf[2 * GENAI_MAX_NAME];
  check_name(t, GENAI_MAX_NAME);
  /* a template that passed the reader is a printf format with one int conversion */
  int n = snprintf(buf, sizeof buf, t, 12345);
  if (n < 0) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  genai_config g;
  diag d;
  diag_clear(&d);
  ph_status st = genai_config_parse((const char *)data, size, "fuzz", &g, &d);
  if (st != PH_OK) {
    if (d.status != st || d.msg[0] == '\0') __builtin_trap();
    return 0;
  }
  check_name(g.model_type, sizeof g.model_type);
  check_name(g.filename, sizeof g.filename);
  check_name(g.input_ids, sizeof g.input_ids);
  check_name(g.logits, sizeof g.logits);
  const char *templates[] = {
      g.past_key_names,    g.past_value_names,    g.past_conv_names,    g.past_recurrent_names,
      g.present_key_names, g.present_value_names, g.present_conv_names, g.present_recurrent_names};
  for (size_t i = 0; i < sizeof templates / sizeof templates[0]; i++) check_template(templates[i]);
  if (g.n_eos_token_ids < 0 || g.n_eos_token_ids > GENAI_MAX_EOS) __builtin_trap();
  if (g.n_eos_token_ids && g.eos_token_id != g.eos_token_ids[0]) __builtin_trap();
  /* the file's own rules (issue 10): a page size PagedAttention takes, a graph file name that
   * cannot leave the package directory, token ids inside the vocabulary */
  const int64_t K = g.dynamic_batching.block_size;
  if (g.paged && (K < 16 || (K & (K - 1)))) __builtin_trap();
  if (!g.filename[0] || strchr(g.filename, '/') || strchr(g.filename, '\\') ||
      strcmp(g.filename, "..") == 0 || strcmp(g.filename, ".") == 0)
    __builtin_trap();
  for (int i = 0; g.vocab_size > 0 && i < g.n_eos_token_ids; i++)
    if (g.eos_token_ids[i] >= g.vocab_size) __builtin_trap();
  return 0;
}
