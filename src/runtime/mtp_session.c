/* mtp_session — the MTP drafter over a paged_session of the MTP graph. See mtp_session.h.
 * N rows, B sequences, H hidden size, V vocabulary.
 */
#include "runtime/mtp_session.h"

#include <stdlib.h>
#include <string.h>

#include "graph/abi_names.h"
#include "models/model.h"
#include "models/mtp.h"
#include "models/registry.h"
#include "runtime/paged_session.h"

struct mtp_session {
  paged_session *ps;         /* the MTP graph, its executor and its one-layer KV cache */
  int in_hidden, out_hidden; /* executor indices of mtp_hidden_in / mtp_hidden_out */
  int64_t H, V, max_tokens;
  int32_t max_seqs;
  /* per handle [max_seqs] */
  block_table *tables;
  int64_t *computed; /* positions with K/V written, -1: handle closed */
  /* per run, sized at creation */
  float *hidden;   /* [max_tokens * H] packed mtp_hidden_in */
  paged_seq *seqs; /* [max_seqs] */
  int64_t *cu;     /* [max_seqs + 1] row offsets of the last run */
  int32_t last_B;
};

ph_status mtp_session_create(const ph_model *m, const model_options *o, int32_t max_seqs,
                             int64_t max_tokens, int64_t memory_bytes, mtp_session **out, diag *d) {
  *out = NULL;
  const hf_config *c = m ? model_config(m) : NULL;
  const model_weights *w = m ? model_weights_of(m) : NULL;
  RETURN_ERROR_IF(!c || !w, d, PH_ERR_INVALID_ARGUMENT, "the model was opened without weights");
  RETURN_ERROR_IF(max_seqs < 1 || max_tokens < 1, d, PH_ERR_INVALID_ARGUMENT,
                  "MTP session: max_seqs %d and max_tokens %lld must be >= 1", max_seqs,
                  (long long)max_tokens);
  graph *g = NULL;
  FORWARD_IF_ERROR(mtp_build(c, w, o, &g, d));
  ph_status nst = graph_note_checkpoint(g, m, d);
  if (nst != PH_OK) {
    graph_free(g);
    return nst;
  }
  /* the target's packed names, one KV layer (index 0), no fixed state */
  paged_binding bind;
  paged_binding_for_config(c, &bind);
  bind.n_layers = 1;
  bind.kind[0] = PAGED_LAYER_KV;
  paged_session_params p = paged_session_params_default();
  p.n_blocks = memory_bytes > 0 ? 0 : p.n_blocks;
  p.memory_bytes = memory_bytes > 0 ? memory_bytes : 0;
  p.max_slots = max_seqs;
  p.max_batch = max_seqs;
  p.max_tokens = max_tokens;
  p.weights_store = model_weight_store(m); /* the target's embedding copy, not a second one */
  mtp_session *s = calloc(1, sizeof *s);
  if (!s) {
    graph_free(g);
    return diag_set(d, PH_ERR_NO_MEMORY, "MTP session: out of memory");
  }
  ph_status st = paged_session_create(g, &bind, &p, &s->ps, d); /* owns g from here */
  if (st != PH_OK) goto fail;
  executor *e = paged_session_executor(s->ps);
  s->in_hidden = exec_input_index(e, ABI_MTP_HIDDEN_IN);
  s->out_hidden = exec_output_index(e, ABI_MTP_HIDDEN_OUT);
  if (s->in_hidden < 0 || s->out_hidden < 0) {
    st = diag_set(d, PH_ERR_INVALID_ARGUMENT, "MTP graph: no %s / %s", ABI_MTP_HIDDEN_IN,
                  ABI_MTP_HIDDEN_OUT);
    goto fail;
  }
  s->H = c->hidden_size;
  s->V = paged_session_vocab(s->ps);
  s->max_tokens = max_tokens;
  s->tables = calloc((size_t)max_seqs, sizeof *s->tables);
  s->computed = malloc((size_t)max_seqs * sizeof *s->computed);
  s->hidden = malloc((size_t)max_tokens * (size_t)s->H * sizeof *s->hidden);
  s->seqs = calloc((size_t)max_seqs, sizeof *s->seqs);
  s->cu = calloc((size_t)max_seqs + 1, sizeof *s->cu);
  if (!s->tables || !s->computed || !s->hidden || !s->seqs || !s->cu) {
    st = diag_set(d, PH_ERR_NO_MEMORY, "MTP session: out of memory");
    goto fail;
  }
  /* every handle's page table sized for the whole context now, so that a run never grows one
   * (the engine's steps allocate nothing after warm-up, docs/engine.md) */
  const int64_t ctx =
      paged_session_max_context(s->ps) < INT32_MAX ? paged_session_max_context(s->ps) : max_tokens;
  const int32_t n_ids = block_table_blocks_for(ctx, (int32_t)paged_session_block_size(s->ps));
  for (int32_t h = 0; h < max_seqs; h++) {
    block_table_init(&s->tables[h]);
    s->computed[h] = -1;
    s->tables[h].ids = malloc((size_t)(n_ids > 0 ? n_ids : 1) * sizeof *s->tables[h].ids);
    s->tables[h].capacity = n_ids > 0 ? n_ids : 1;
    if (!s->tables[h].ids) {
      s->max_seqs = h + 1;
      st = diag_set(d, PH_ERR_NO_MEMORY, "MTP session: out of memory");
      goto fail;
    }
  }
  s->max_seqs = max_seqs; /* set last: mtp_session_free closes handles [0, max_seqs) */
  *out = s;
  return PH_OK;
fail:
  mtp_session_free(s);
  return st;
}

void mtp_session_free(mtp_session *s) {
  if (!s) return;
  if (s->tables && s->computed)
    for (int32_t h = 0; h < s->max_seqs; h++) {
      mtp_session_close(s, h);
      free(s->tables[h].ids);
    }
  paged_session_free(s->ps);
  free(s->tables);
  free(s->computed);
  free(s->hidden);
  free(s->seqs);
  free(s->cu);
  free(s);
}

ph_status mtp_session_open(mtp_session *s, int32_t *handle, diag *d) {
  for (int32_t h = 0; h < s->max_seqs; h++)
    if (s->computed[h] < 0) {
      s->computed[h] = 0;
      *handle = h;
      return PH_OK;
    }
  return diag_set(d, PH_ERR_LIMIT, "MTP session: all %d handles are open", s->max_seqs);
}

void mtp_session_close(mtp_session *s, int32_t handle) {
  if (handle < 0 || handle >= s->max_seqs || s->computed[handle] < 0) return;
  int32_t slot = -1;
  diag ignored;
  /* only refused while a run is bound, which never holds between calls */
  hybrid_cache_release(paged_session_cache(s->ps), &s->tables[handle], &slot, &ignored);
  s->tables[handle].n_blocks = 0; /* the storage stays for the handle's next sequence */
  s->computed[handle] = -1;
}

static ph_status check_run(const mtp_session *s, const mtp_seq *seqs, int32_t B, diag *d) {
  RETURN_ERROR_IF(!seqs || B < 1 || B > s->max_seqs, d, PH_ERR_INVALID_ARGUMENT,
                  "an MTP run takes 1..%d sequences, got %d", s->max_seqs, B);
  int64_t rows = 0;
  for (int32_t b = 0; b < B; b++) {
    const mtp_seq *q = &seqs[b];
    RETURN_ERROR_IF(q->handle < 0 || q->handle >= s->max_seqs || s->computed[q->handle] < 0, d,
                    PH_ERR_INVALID_ARGUMENT, "MTP sequence %d: handle %d is not open", b,
                    q->handle);
    for (int32_t c = 0; c < b; c++)
      RETURN_ERROR_IF(seqs[c].handle == q->handle, d, PH_ERR_INVALID_ARGUMENT,
                      "MTP sequences %d and %d share handle %d", c, b, q->handle);
    RETURN_ERROR_IF(q->n < 1 || !q->tokens || !q->hidden, d, PH_ERR_INVALID_ARGUMENT,
                    "MTP sequence %d: %lld rows (need >= 1, with tokens and hidden rows)", b,
                    (long long)q->n);
    /* attention reads positions [0, past): each must have been computed by an earlier run */
    RETURN_ERROR_IF(q->past < 0 || q->past > s->computed[q->handle], d, PH_ERR_INVALID_ARGUMENT,
                    "MTP sequence %d: past %lld, but handle %d has computed %lld positions", b,
                    (long long)q->past, q->handle, (long long)s->computed[q->handle]);
    rows += q->n;
  }
  RETURN_ERROR_IF(rows > s->max_tokens, d, PH_ERR_LIMIT,
                  "an MTP run of %lld rows exceeds max_tokens %lld", (long long)rows,
                  (long long)s->max_tokens);
  return PH_OK;
}

ph_status mtp_session_run(mtp_session *s, const mtp_seq *seqs, int32_t B, diag *d) {
  s->last_B = 0;
  FORWARD_IF_ERROR(check_run(s, seqs, B, d));
  hybrid_cache *cache = paged_session_cache(s->ps);
  s->cu[0] = 0;
  for (int32_t b = 0; b < B; b++) {
    const mtp_seq *q = &seqs[b];
    int32_t slot = -1; /* no fixed state: the cache hands out pages only */
    FORWARD_IF_ERROR(hybrid_cache_reserve(cache, &s->tables[q->handle], &slot, q->past + q->n, d));
    memcpy(s->hidden + s->cu[b] * s->H, q->hidden, (size_t)(q->n * s->H) * sizeof *s->hidden);
    s->seqs[b] = (paged_seq){.slot = -1,
                             .blocks = &s->tables[q->handle],
                             .past = q->past,
                             .tokens = q->tokens,
                             .n = q->n};
    s->cu[b + 1] = s->cu[b] + q->n;
  }
  const int64_t N = s->cu[B];
  tensor t = tensor_make(PH_DTYPE_F32, 2, (int64_t[]){N, s->H}, s->hidden);
  FORWARD_IF_ERROR(exec_bind_input(paged_session_executor(s->ps), s->in_hidden, &t, d));
  FORWARD_IF_ERROR(paged_session_run(s->ps, s->seqs, B, d));
  for (int32_t b = 0; b < B; b++) s->computed[seqs[b].handle] = seqs[b].past + seqs[b].n;
  s->last_B = B;
  return PH_OK;
}

static int64_t row_of(const mtp_session *s, int32_t b, int64_t j) {
  if (b < 0 || b >= s->last_B || j < 0 || j >= s->cu[b + 1] - s->cu[b]) return -1;
  return s->cu[b] + j;
}

const float *mtp_session_logits(const mtp_session *s, int32_t b, int64_t j) {
  return row_of(s, b, j) < 0 ? NULL : paged_session_token_logits(s->ps, b, j);
}

const float *mtp_session_hidden(const mtp_session *s, int32_t b, int64_t j) {
  const int64_t r = row_of(s, b, j);
  const tensor *t = r < 0 ? NULL : exec_output(paged_session_executor(s->ps), s->out_hidden);
  if (!t || !t->data || t->dtype != PH_DTYPE_F32 || t->dims[0] <= r) return NULL;
  return (const float *)t->data + r * s->H;
}

int64_t mtp_session_vocab(const mtp_session *s) { return s->V; }
int64_t mtp_session_hidden_size(const mtp_session *s) { return s->H; }
int64_t mtp_session_computed(const mtp_session *s, int32_t handle) {
  return handle < 0 || handle >= s->max_seqs || s->computed[handle] < 0 ? 0 : s->computed[handle];
}
int64_t mtp_session_cache_bytes(const mtp_session *s) { return paged_session_cache_bytes(s->ps); }
int mtp_session_quant(const mtp_session *s, ph_quant_params *out) {
  return paged_session_quant(s->ps, out);
}
