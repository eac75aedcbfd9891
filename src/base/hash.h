/* hash — FNV-1a 64 of a NUL-terminated string, for the name tables (graph values, ONNX reader,
 * request ids) and make-tiny's per-tensor seeds.
 *
 * Not collision-resistant: hostile names can only make a lookup probe longer, never wrong (every
 * table compares the key itself). make-tiny's weights depend on the exact value, so the constants
 * are the standard FNV-1a 64 ones and must not change.
 */
#ifndef PH_BASE_HASH_H
#define PH_BASE_HASH_H

#include <stdint.h>

static inline uint64_t hash_str(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 offset basis */
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
  return h;
}

#endif /* PH_BASE_HASH_H */
