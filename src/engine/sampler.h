/* sampler — picks the next token of one request from its logits row (docs/sampling.md).
 *
 * Owns: the sampling parameters of a request (sampling_params), their validation, and the rule
 * that turns one logits row into one token id: temperature, then top-k, then top-p, then min-p,
 * then an inverse-CDF draw. The random number behind a request's t-th generated token is a pure
 * function of (seed, t): no stream is carried between calls, so the same request yields the same
 * tokens whatever it was batched with and however often it was preempted and recomputed.
 * Must never: allocate (the engine calls sampler_sample once per request per step and hands it
 * scratch memory), keep state between calls, or exit/abort on bad input.
 *
 * Ids are int64_t; a vocabulary has at most SAMPLER_MAX_VOCAB entries (ids fit int32 internally).
 */
#ifndef PH_ENGINE_SAMPLER_H
#define PH_ENGINE_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "base/diag.h"
#include "pagedhybrid.h"

#define SAMPLING_MAX_STOP PH_MAX_STOP_TOKENS
#define SAMPLER_MAX_VOCAB INT32_MAX

/* A request's sampling parameters are the public ph_sampling_params (include/pagedhybrid.h);
 * the engine and the public API pass the same struct. What sampling_params_validate allows:
 *   temperature       >= 0, finite; 0 = greedy
 *   top_k             >= 0; 0 = off; 1 = greedy
 *   top_p             (0, 1]; 1 = off
 *   min_p             [0, 1); 0 = off; relative to the most probable token
 *   seed              with the token index, the only source of randomness
 *   max_new_tokens    >= 1; the engine stops the request after this many tokens
 *   n_stop_token_ids  [0, SAMPLING_MAX_STOP]; the first n of stop_token_ids are used, each in
 *                     [0, vocab)
 *   ignore_eos        1: the model's eos id does not stop the request
 *   speculative       method a ph_draft_method; num_draft_tokens 0 (4) or 1..8; ngram_min/max
 *                     both 0 (1, 4) or 1 <= min <= max <= 16; replay needs 1..2^24 tokens, each
 *                     in [0, vocab); the engine checks what depends on the model (capacity, an
 *                     MTP head) */
typedef ph_sampling_params sampling_params;

/* Greedy (temperature 0, top_k 0, top_p 1, min_p 0), seed 0, max_new_tokens 16, no stop ids,
 * ignore_eos 0, no speculation. Start from this and change fields, so new fields never break callers. */
sampling_params sampling_params_default(void);

/* Checks every field of p. vocab > 0: stop ids must lie in [0, vocab) and vocab must be at most
 * SAMPLER_MAX_VOCAB; vocab <= 0 means "not known yet" and skips those two checks (the request
 * file reader validates before a model is loaded). Returns PH_OK, or PH_ERR_INVALID_ARGUMENT with
 * a message naming the field, its value and the allowed range (p NULL is also an error). */
ph_status sampling_params_validate(const sampling_params *p, int64_t vocab, diag *d);

#define SPEC_DEFAULT_DRAFTS  4
#define SPEC_MAX_NGRAM       16
#define SPEC_MAX_REPLAY      (1 << 24)
/* The speculative parameters with their defaults applied (num_draft_tokens 0 -> 4, ngram 0,0 ->
 * 1,4); call after validation. */
ph_speculative_params speculative_params_resolved(const ph_speculative_params *p);

/* Greedy: the highest of x[n], ties to the lowest id, NaN skipped; 0 if every entry is NaN.
 * One pass. (The MTP drafter's drafts are this of its rows.) */
int64_t sampler_argmax(const float *x, int64_t n);

/* Bytes of scratch sampler_sample needs for a vocabulary of vocab entries (32 per entry: 7.6 MiB
 * for 248,320); 0 when vocab is outside [1, SAMPLER_MAX_VOCAB]. Allocate once per engine and
 * reuse for every call (calls on different threads need their own). */
size_t sampler_scratch_bytes(int64_t vocab);

/* The token for a request's token_index-th generated token (0 for the first generated token).
 *   logits   f32 [vocab], read only; NaN entries are never chosen, -inf entries have probability 0
 *   p        parameters that passed sampling_params_validate (vocab checks included)
 *   scratch  >= sampler_scratch_bytes(vocab) bytes, 8-byte aligned, overwritten; may be NULL
 *            when the call is greedy (temperature 0 or top_k 1), which touches no scratch
 * Greedy: one pass, the highest logit, ties to the lowest id; all NaN returns 0.
 * Otherwise: a draw from softmax(logits / temperature) restricted by top-k, top-p and min-p, with
 * a double uniform in [0, 1) that depends only on (p->seed, token_index). Rows whose largest
 * non-NaN logit is +inf or -inf have no usable distribution and return the greedy token.
 * Result is a pure function of (logits, vocab, p, token_index). Uses about 24 KiB of stack
 * (radix counts) and no heap memory. Returns an id in [0, vocab), or -1 when an argument breaks
 * the contract above (NULL logits or p, vocab out of range, scratch too small or misaligned,
 * invalid parameters): the caller validates, this is only a backstop. */
int64_t sampler_sample(const float *logits, int64_t vocab, const sampling_params *p,
                       int64_t token_index, void *scratch, size_t scratch_bytes);

/* The index of the first entry of logits[vocab] that is NaN or +-inf, or -1 when all are
 * finite (and for vocab <= 0 or NULL logits). One branch-free pass over the row (the engine
 * checks each row before sampling it: a model with non-finite weights must not yield tokens). */
int64_t sampler_first_nonfinite(const float *logits, int64_t vocab);

/* 1 when token ends the request: it is one of p's stop ids, or it equals eos_id (>= 0; -1 means
 * the model has none) and p->ignore_eos is 0; else 0. p NULL reads as no stop ids. */
int sampler_is_stop(const sampling_params *p, int64_t token, int64_t eos_id);

#endif /* PH_ENGINE_SAMPLER_H */
