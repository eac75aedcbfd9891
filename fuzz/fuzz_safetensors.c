/* Fuzz target for the safetensors reader: st_parse on arbitrary bytes must return a typed status
 * and never read outside the input. On success every tensor's first and last byte is read, so
 * a range the validator let through but that leaves the buffer shows up under ASan (libFuzzer
 * and the replay driver both hand over a heap buffer of exactly `size` bytes).
 */
#include <stdint.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  st_set *s = NULL;
  diag d;
  if (st_parse(data, size, "fuzz", &s, &d) == PH_OK) {
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < st_count(s); i++) {
      const st_tensor *t = st_at(s, i);
      uint64_t bytes = t->data_end - t->data_begin;
      if (bytes == 0) continue;
      sink ^= t->data[0];
      sink ^= t->data[bytes - 1];
    }
    (void)sink;
    (void)st_find(s, "a");
    (void)st_metadata(s, "format");
  }
  st_close(s);
  return 0;
}
