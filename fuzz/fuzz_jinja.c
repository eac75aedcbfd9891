/* fuzz_jinja — libFuzzer target for the Jinja interpreter (src/text/jinja*.c).
 *
 * Input: a template source, optionally followed by a NUL byte and a JSON object used as the
 * render context (without one, a fixed chat-like context: messages with tool calls, tools,
 * special tokens). The template is parsed and, when it parses, rendered under small limits
 * (1 MiB output, 64 MiB memory, 100,000 iterations) so hostile loops end quickly. Every failure
 * must be PH_ERR_TEMPLATE (or PH_ERR_NO_MEMORY) with a message; a success must return
 * NUL-terminated text of the length reported. Seeds in fuzz/corpus/jinja/.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "text/jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char k_context[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", "
    "\"content\": \"hi \\u00e9\"}, {\"role\": \"assistant\", \"content\": \"<think>r</think>ok\", "
    "\"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": "
    "{\"a\": [1, 2.5, null, true]}}}]}, {\"role\": \"tool\", \"content\": \"out\"}], \"tools\": "
    "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}], "
    "\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"add_generation_prompt\": true}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *src = (const char *)data;
  size_t src_len = size;
  const uint8_t *nul = memchr(data, 0, size);
  json_t *ctx = NULL;
  json_error_t err;
  if (nul) {
    src_len = (size_t)(nul - data);
    ctx = json_loadb((const char *)nul + 1, size - src_len - 1, 0, &err);
    if (!json_is_object(ctx)) {
      json_decref(ctx);
      return 0;
    }
  } else {
    ctx = json_loads(k_context, 0, &err);
  }
  diag d;
  jinja_template *t = NULL;
  ph_status s = jinja_parse(src, src_len, "fuzz", &t, &d);
  if (s != PH_OK) {
    if ((s != PH_ERR_TEMPLATE && s != PH_ERR_NO_MEMORY) || d.status != s || d.msg[0] == '\0')
      __builtin_trap();
    json_decref(ctx);
    return 0;
  }
  jinja_limits lim;
  jinja_limits_default(&lim);
  lim.max_output_bytes = 1 << 20;
  lim.max_memory_bytes = 64 << 20;
  lim.max_loop_iterations = 100000;
  char *text = NULL;
  size_t len = 0;
  s = jinja_render(t, ctx, &lim, &text, &len, &d);
  if (s == PH_OK) {
    if (!text || text[len] != '\0' || len > lim.max_output_bytes) __builtin_trap();
  } else if ((s != PH_ERR_TEMPLATE && s != PH_ERR_NO_MEMORY) || d.msg[0] == '\0' || text) {
    __builtin_trap();
  }
  free(text);
  jinja_free(t);
  json_decref(ctx);
  return 0;
}
