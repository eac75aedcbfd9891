/* mtp_session — the MTP drafter: a checkpoint's multi-token-prediction head (models/mtp.h,
 * docs/mtp.md) bound to its own KV pages, run over packed batches of sequences the caller names
 * by handle.
 *
 * Owns: the MTP graph (its one attention layer's pages in a hybrid cache of one KV layer and no
 * fixed state, through a paged_session), the page table of every open handle, and the packed
 * hidden-state input. The engine owns everything else: which positions are committed, which
 * tokens and hidden rows go in, what is drafted. Drafts only affect speed: the engine verifies
 * every draft with the target.
 *
 * The engine's flow per speculative step (each sequence, its committed MTP length `past`):
 *   1. catch up: after a target step that kept positions [past, t], run n = t - past + 1 rows at
 *      past: tokens[j] = the token at position past+j+1 (the target's input shifted by one; the
 *      last one the token just sampled) and hidden[j] = the target's hidden_states row at
 *      position past+j (model_options.output_hidden). Draft 1 = argmax of the last row's logits;
 *      past becomes t + 1.
 *   2. chain: k-1 one-token runs at positions t+1, t+2, ...: token = the previous draft, hidden =
 *      mtp_session_hidden of the previous run's row. These rows are not committed: the next
 *      catch-up starts at the committed past again and overwrites them.
 * Positions >= past are always recomputed (their pages are overwritten), so a rejected draft
 * leaves nothing behind; `past` may go back to any length the handle has computed before.
 *
 * Exactness: rows are computed per sequence (attention per sequence, row-independent matmuls),
 * so a sequence's logits are bit-identical whether it runs alone or packed with others.
 * Not thread-safe: one caller drives it.
 */
#ifndef PH_RUNTIME_MTP_SESSION_H
#define PH_RUNTIME_MTP_SESSION_H

#include <stdint.h>

#include "base/diag.h"
#include "pagedhybrid.h"

typedef struct model_options model_options; /* models/registry.h */
typedef struct mtp_session mtp_session;

/* One sequence of a run. */
typedef struct mtp_seq {
  int32_t handle;        /* from mtp_session_open; distinct within a run */
  int64_t past;          /* positions kept before this run: 0 ..= the handle's computed length */
  int64_t n;             /* rows, >= 1; positions past .. past+n-1 */
  const int64_t *tokens; /* [n] token t+1 for position t, in [0, vocab) */
  const float *hidden;   /* [n][H] f32: h_t for position t */
} mtp_seq;

/* Builds the MTP graph of m (models/mtp.h; o as for the target: io dtype, block size, weight
 * dtype, rotary form, context; NULL = defaults; paged forced on, prune_lm_head and output_hidden
 * must be 0) and its cache: pages for memory_bytes (<= 0: 257 pages), at most max_seqs open
 * handles (>= 1, also the most sequences in one run) and max_tokens rows per run (>= 1).
 * m must outlive the session (weights are views of its mapping). PH_ERR_UNSUPPORTED when the
 * checkpoint has no MTP weights (or a MoE / multi-layer MTP head: see mtp_build);
 * PH_ERR_INVALID_ARGUMENT for bad sizes or a model opened without weights; PH_ERR_LIMIT when
 * memory_bytes holds fewer than two pages. */
ph_status mtp_session_create(const ph_model *m, const model_options *o, int32_t max_seqs,
                             int64_t max_tokens, int64_t memory_bytes, mtp_session **out, diag *d);
void mtp_session_free(mtp_session *s); /* NULL-safe */

/* A new sequence with no positions computed: *handle in [0, max_seqs). PH_ERR_LIMIT when
 * max_seqs handles are open. */
ph_status mtp_session_open(mtp_session *s, int32_t *handle, diag *d);
/* Releases the handle's pages; a handle not open is ignored. */
void mtp_session_close(mtp_session *s, int32_t handle);

/* One packed run over seqs[B] (1 <= B <= max_seqs, total rows <= max_tokens). Grows each
 * handle's pages to past + n positions first. Errors (nothing computed, pages possibly grown):
 * PH_ERR_INVALID_ARGUMENT (a handle not open or repeated, past beyond what the handle has
 * computed, n < 1, a token outside the vocabulary, NULL rows), PH_ERR_LIMIT (rows beyond
 * max_tokens or the rotary context; no free pages). */
ph_status mtp_session_run(mtp_session *s, const mtp_seq *seqs, int32_t B, diag *d);

/* Row j (0 <= j < seqs[b].n) of sequence b of the last run: logits f32 [vocab] and the
 * mtp_hidden_out row f32 [H] for chaining; NULL when out of range. Valid until the next run. */
const float *mtp_session_logits(const mtp_session *s, int32_t b, int64_t j);
const float *mtp_session_hidden(const mtp_session *s, int32_t b, int64_t j);

int64_t mtp_session_vocab(const mtp_session *s);
int64_t mtp_session_hidden_size(const mtp_session *s);
/* Positions the handle has computed (its pages' valid rows), 0 for a handle not open. */
int64_t mtp_session_computed(const mtp_session *s, int32_t handle);
int64_t mtp_session_cache_bytes(const mtp_session *s); /* the MTP layer's KV pages */
/* The drafter's MatMulNBits layers (paged_session_quant of its graph; o->quant builds them). */
int mtp_session_quant(const mtp_session *s, ph_quant_params *out);

#endif /* PH_RUNTIME_MTP_SESSION_H */
