/* fuzz_onnx — libFuzzer target for the ONNX model reader (io/onnx.h).
 *
 * Feeds the raw input to onnx_parse_model twice: with no data file (the reader's contract: any
 * external data is then an error), and with the input itself standing in for model.onnx.data,
 * so external offsets and lengths that a mutation lands inside the buffer reach the range checks
 * and the copy. A parsed graph must be finalized, have outputs, and every initializer's bytes
 * must be readable (ASan sees a view that escaped its buffer). Every failure must carry a
 * message. Seeds in fuzz/corpus/onnx/.
 */
#include <stddef.h>
#include <stdint.h>

#include "io/onnx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_graph(graph *g) {
  if (!g->finalized || g->n_outputs < 1) __builtin_trap();
  unsigned sum = 0;
  for (int i = 0; i < g->n_values; i++) {
    const gvalue *v = &g->values[i];
    if (v->kind != VALUE_INITIALIZER) continue;
    const uint8_t *p = v->type.data;
    if (v->n_bytes && !p) __builtin_trap();
    for (int64_t k = 0; k < v->n_bytes; k++) sum += p[k];
  }
  for (int i = 0; i < g->n_nodes; i++)
    if (!g->nodes[i].op) __builtin_trap(); /* finalize resolved every op */
  volatile unsigned sink = sum;
  (void)sink;
}

static void parse_once(const uint8_t *data, size_t size, const uint8_t *ext, size_t ext_size) {
  graph *g = NULL;
  diag d;
  diag_clear(&d);
  ph_status st = onnx_parse_model(data, size, ext, ext_size, &g, &d);
  if (st != PH_OK) {
    if (g || d.status != st || d.msg[0] == '\0') __builtin_trap();
    return;
  }
  if (!g) __builtin_trap();
  check_graph(g);
  graph_free(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  parse_once(data, size, NULL, 0);
  parse_once(data, size, data, size);
  return 0;
}
