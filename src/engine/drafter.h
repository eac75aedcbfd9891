/* drafter — where speculative drafts come from, for the drafters that need no model: n-gram
 * prompt lookup and replay of a given continuation (the Qwen3.5 MTP head runs a graph and lives
 * in src/runtime/mtp_session.h).
 *
 * A draft is only a guess: the engine verifies every drafted token against the token its
 * sampler draws at that index (docs/speculative.md), so a drafter changes the speed, never the
 * output. Both drafters here are pure functions of their arguments.
 * Must never: allocate, see the model, or look beyond the tokens it is given.
 */
#ifndef PH_ENGINE_DRAFTER_H
#define PH_ENGINE_DRAFTER_H

#include <stdint.h>

/* N-gram prompt lookup: for n = max_n down to min_n (1 <= min_n <= max_n), the context's last n
 * tokens are searched for in ctx[0, n_ctx - 1), latest occurrence first; at the first match,
 * the tokens that followed it (at most k, never past the end of ctx) are the drafts. Writes
 * them to out[k] and returns how many (0: no match, or n_ctx < 2). O(n_ctx * max_n). */
int32_t draft_ngram(const int64_t *ctx, int64_t n_ctx, int32_t min_n, int32_t max_n, int32_t k,
                    int64_t *out);

/* Replay: cont[from, from + k) of a known continuation cont[n_cont] (the tokens a request is
 * expected to generate), clipped at its end; returns how many (0 when from >= n_cont). */
int32_t draft_replay(const int64_t *cont, int64_t n_cont, int64_t from, int32_t k, int64_t *out);

#endif /* PH_ENGINE_DRAFTER_H */
