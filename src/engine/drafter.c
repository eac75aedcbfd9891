/* drafter — n-gram prompt lookup and replay drafts (drafter.h). */
#include "engine/drafter.h"

#include <string.h>

int32_t draft_ngram(const int64_t *ctx, int64_t n_ctx, int32_t min_n, int32_t max_n, int32_t k,
                    int64_t *out) {
  if (!ctx || !out || k < 1 || min_n < 1 || max_n < min_n || n_ctx < 2) return 0;
  for (int32_t n = max_n; n >= min_n; n--) {
    if (n >= n_ctx) continue;
    const int64_t *tail = ctx + n_ctx - n;
    /* a match ending at e (exclusive) with e < n_ctx: the pattern's own place is excluded, and
     * at least one token follows every match */
    for (int64_t e = n_ctx - 1; e >= n; e--) {
      if (ctx[e - 1] != tail[n - 1] || memcmp(ctx + e - n, tail, (size_t)n * sizeof *ctx) != 0)
        continue;
      int64_t m = n_ctx - e < k ? n_ctx - e : k;
      memcpy(out, ctx + e, (size_t)m * sizeof *ctx);
      return (int32_t)m;
    }
  }
  return 0;
}

int32_t draft_replay(const int64_t *cont, int64_t n_cont, int64_t from, int32_t k, int64_t *out) {
  if (!cont || !out || k < 1 || from < 0 || from >= n_cont) return 0;
  int64_t m = n_cont - from < k ? n_cont - from : k;
  memcpy(out, cont + from, (size_t)m * sizeof *cont);
  return (int32_t)m;
}
