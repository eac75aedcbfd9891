/* paged_session — the packed paged graph bound to its memory: the runner under the engine
 * (src/engine; `generate`'s paged layout runs through the engine too) and the tests.
 *
 * Owns the graph (prepared for the CPU), the executor, and the hybrid cache of the ABI's memory
 * (../shared/spec/abi.md §8.1; src/cache/hybrid_cache.h), created from the geometry the graph's
 * inputs declare: the KV block pool and the page buffers of the attention layers (K and V per
 * full-attention layer, or the key cache alone per LATENT layer: DeepSeek MLA's latent row,
 * abi.md §1.8), and the fixed-state slot pool for the conv and recurrent states of the linear
 * layers (none when there are no linear layers: sequences then hold no slot). A step receives B
 * sequences, each with its state slot, its block table, how many tokens are already cached and
 * its new tokens; the session packs input_ids [N], cumulative_sequence_lengths,
 * past_sequence_lengths, block_table [B, max_blocks], and when the graph has them position_ids,
 * attention_metadata and slot_mapping [N] (the flat page slot of each token: block_table[b][p /
 * block_size] * block_size + p % block_size at position p = past_b + j), binds every page buffer
 * as both past and present (written in place by PagedAttention) and the slots' states as the
 * [B, ...] state inputs and outputs (zero copies when the slots are consecutive, counted
 * otherwise), and runs. It never decides which sequences run or which pages/slots they get: the
 * engine's scheduler asks the cache (paged_session_cache) for room; the session binds what the
 * cache holds, and checks each step's sequences against it (a caller may hand any paged_seq).
 *
 * Bindings come from a paged_binding: graph names and which layers hold KV pages, latent pages
 * or fixed state — what genai_config.json's inputs/outputs and state_groups say
 * (paged_binding_from_genai), so a package with the same ABI exported by another tool binds the
 * same way.
 * Not thread-safe: one caller drives it.
 */
#ifndef PH_MODELS_PAGED_SESSION_H
#define PH_MODELS_PAGED_SESSION_H

#include <stdint.h>

#include "base/diag.h"
#include "cache/hybrid_cache.h"
#include "exec/exec.h"
#include "graph/graph.h"
#include "io/genai_config.h"
#include "pagedhybrid.h"

#define PAGED_NAME 96

typedef enum paged_layer_kind {
  PAGED_LAYER_NONE,
  PAGED_LAYER_KV,    /* key and value pages (PagedAttention SEPARATE): past_key/value_fmt */
  PAGED_LAYER_FIXED, /* conv and recurrent state in a slot: past_conv/recurrent_fmt */
  PAGED_LAYER_LATENT /* key pages only (PagedAttention LATENT, MLA): past_key_fmt */
} paged_layer_kind;

/* Graph names and layer roles. The *_fmt templates contain one %d (the layer index).
 * position_ids, metadata (attention_metadata) and slot_mapping are optional: "" binds nothing,
 * and a name the graph has no input for is skipped too (a LATENT graph has no position_ids and
 * no attention_metadata; a SEPARATE one no slot_mapping). A binding holds LATENT layers or KV
 * layers, not both (one page geometry). */
typedef struct paged_binding {
  char input_ids[PAGED_NAME], position_ids[PAGED_NAME], block_table[PAGED_NAME];
  char cu_seqlens[PAGED_NAME], past_seqlens[PAGED_NAME], metadata[PAGED_NAME], logits[PAGED_NAME];
  char slot_mapping[PAGED_NAME];
  char past_key_fmt[PAGED_NAME], past_value_fmt[PAGED_NAME];
  char past_conv_fmt[PAGED_NAME], past_recurrent_fmt[PAGED_NAME];
  char present_key_fmt[PAGED_NAME], present_value_fmt[PAGED_NAME];
  char present_conv_fmt[PAGED_NAME], present_recurrent_fmt[PAGED_NAME];
  /* compact state updates (abi.md §8.1/§8.2; optional: "" or a graph without them binds none) */
  char capture_count[PAGED_NAME], update_active[PAGED_NAME];
  char update_conv_fmt[PAGED_NAME], update_capsule_fmt[PAGED_NAME];
  int n_layers;
  paged_layer_kind kind[HF_MAX_LAYERS];
} paged_binding;

/* From a paged genai_config (its names and state_groups): paged_kv layers are KV when the config
 * names value templates (past_ and present_value_names), LATENT when it names neither (key pages
 * only; the config must then name inputs.slot_mapping); layers in fixed_conv (and
 * fixed_recurrent) are FIXED. PH_ERR_CONFIG_INVALID when the config is not the paged layout;
 * PH_ERR_UNSUPPORTED when a layer is in fixed_conv but not fixed_recurrent (or the reverse);
 * PH_ERR_CONFIG_INCONSISTENT when one value template is named without the other, or paged_kv
 * layers have no value templates and the config has no slot_mapping. */
ph_status paged_binding_from_genai(const genai_config *gc, paged_binding *out, diag *d);

/* The names our builders (models/qwen35, models/deepseek) give the paged graph, layers by the
 * config's kinds: full attention KV, GatedDeltaNet FIXED, MLA LATENT. A DeepSeek (MLA) binding
 * names slot_mapping and no position_ids, attention_metadata or value templates (the LATENT
 * graph I/O of docs/graph-io.md); a Qwen one the reverse. */
void paged_binding_for_config(const hf_config *c, paged_binding *out);

typedef struct paged_session_params {
  int32_t n_blocks;     /* KV pages including the null page 0 (>= 2); 0: as many as fit in
                           memory_bytes after the state slots */
  int64_t memory_bytes; /* the budget used when n_blocks is 0 */
  int32_t max_slots;    /* fixed-state slots = most sequences alive at once (>= 1); a graph
                           without linear layers has none, whatever this says */
  int32_t max_batch;    /* most sequences in one step (>= 1; <= max_slots) */
  int64_t max_tokens;   /* most tokens in one step (>= 1) */
  int n_threads;        /* <= 0: all CPUs */
  int state_banks;      /* 2: double-banked fixed state, what a speculative step (paged_seq.capture)
                           needs; 0 or 1: one bank */
  struct weight_store *weights_store; /* NULL, or where the graph's weight copies are shared
                                         with other graphs of the same checkpoint (it must
                                         outlive the session: graph/prepare.h) */
  int map_weights; /* 1: the graph reads its weights where they are mapped (WEIGHTS_MAP);
                      0: copied at creation into huge-page-advised memory, the mapping's
                      pages released (WEIGHTS_COPY, graph/prepare.h) */
  int matmul_bf16; /* the linear layers' precision (graph/prepare.h prepare_options):
                      0 f32 (the default), 1 bf16, -1 auto (bf16 for bf16-stored weights) */
} paged_session_params;

paged_session_params paged_session_params_default(void); /* 257 pages, 8 slots, 8, 2048 */

typedef struct paged_session paged_session;

/* Takes ownership of the finalized graph g (freed with the session, also on failure), prepares
 * it for the CPU and binds it. The page geometry (block size, Hkv, D, io dtype) and state shapes
 * are read from the graph inputs' static dims. Errors: PH_ERR_INVALID_ARGUMENT (a missing or
 * mis-shaped input/output named in the message, bad params), PH_ERR_NO_MEMORY. */
ph_status paged_session_create(graph *g, const paged_binding *bind, const paged_session_params *p,
                               paged_session **out, diag *d);
void paged_session_free(paged_session *s); /* NULL-safe */

/* Reads the package in dir (the graph file gc's decoder.filename names + its data), checks gc
 * against the graph (models/package.h) and binds it with gc, its genai_config.json already read
 * (paged_binding_from_genai). Errors: those of package_read_graph and of the binding. */
ph_status paged_session_create_package(const char *dir, const genai_config *gc,
                                       const paged_session_params *p, paged_session **out, diag *d);

/* Builds the paged graph of an opened checkpoint (models/registry.h, with o->paged forced on) and
 * binds it with paged_binding_for_config. The checkpoint must outlive the session: its weights are
 * copied out of the mapping at creation (p->map_weights 0, the default; the mapping's pages are
 * released, graph_note_checkpoint) or read from it (map_weights 1). */
typedef struct model_options model_options; /* models/registry.h */
ph_status paged_session_create_model(const ph_model *m, const model_options *o,
                                     const paged_session_params *p, paged_session **out, diag *d);

/* Names the file mappings of m's checkpoint on g (graph_note_file_mapping), so the CPU prepare
 * pass drops each weight's file pages once it has copied them (graph/prepare.h): what every
 * session built from a checkpoint (paged, dense, MTP) does before preparing its graph. */
ph_status graph_note_checkpoint(graph *g, const ph_model *m, diag *d);

/* The quantized linear layers of g (com.microsoft::MatMulNBits nodes; docs/quantization.md):
 * returns how many, and describes the first in *out (may be NULL): bits, block_size and
 * accuracy_level from its attributes (the schema's defaults where absent: 4 bits, level 0),
 * asymmetric 1 when it has a zero_points input, skip NULL; all 0 when there is none. What
 * sessions report as the quantization in effect (a package's as exported, a checkpoint's as built
 * at load). */
int graph_quant_summary(const graph *g, ph_quant_params *out);

/* One sequence of a step. */
typedef struct paged_seq {
  int32_t slot;              /* its allocated state slot (ignored without fixed state) */
  const block_table *blocks; /* pages covering tokens [0, past + n) */
  int64_t past;              /* tokens already in the cache (= position of tokens[0]) */
  const int64_t *tokens;     /* [n] new token ids in [0, vocab) */
  int64_t n;                 /* >= 1 */
  int32_t capture;           /* > 0: a speculative verify (needs a graph with compact state
                                updates and two state banks): the linear layers capture the state
                                updates of its first min(capture, n) tokens and write its state to
                                the slot's inactive bank; paged_session_commit publishes it. 0: an
                                ordinary step, state updated in place */
} paged_seq;

/* Runs one packed step over seqs[B] (distinct slots when the cache has fixed state). Text
 * positions: all position planes read past + j; slot_mapping row cu[b] + j reads
 * blocks->ids[p / block_size] * block_size + p % block_size, p = past + j. Errors leave the cache's
 * bookkeeping unchanged (state is scattered back even when the graph fails):
 * PH_ERR_INVALID_ARGUMENT (B, n, slot, token id or page coverage, naming the sequence),
 * PH_ERR_LIMIT (tokens beyond max_tokens or the rotary context). */
ph_status paged_session_run(paged_session *s, const paged_seq *seqs, int32_t B, diag *d);

/* After a run, sequence b of it keeps its first `kept` tokens (1 <= kept <= n): for a
 * speculative sequence (capture > 0) the state after those tokens becomes its published state —
 * the op's final state when kept == n, else the published state with the first kept captured
 * updates replayed (kernels/state_replay.h; kept <= capture) — in the inactive bank, then
 * published. The caller advances the KV length in the same operation (the engine's
 * sched_commit_kept): the rows past it are left unreachable. An ordinary sequence was updated
 * in place and needs nothing (PH_OK). Call once per sequence, before the next run, while its
 * slot is allocated. PH_ERR_INVALID_ARGUMENT: b or kept out of range, a second commit. */
ph_status paged_session_commit(paged_session *s, int32_t b, int64_t kept, diag *d);

/* Row j of sequence b of the last run of the graph's hidden_states output (f32 [N, H]: what an
 * MTP head reads, model_options.output_hidden); the rows of a sequence are contiguous. NULL when
 * the graph has no such output or (b, j) is out of range. *H receives the width when not NULL. */
const float *paged_session_hidden(const paged_session *s, int32_t b, int64_t j, int64_t *H);

/* paged_session_commit for every sequence of the last run (kept[B], B = the run's sequences),
 * the replays split over the executor's threads as (sequence, layer) tasks — each its own
 * slot's rows: the same bits as one after another. Validates every kept count first; on an
 * error nothing is published. */
ph_status paged_session_commit_all(paged_session *s, const int64_t *kept, diag *d);

/* The graph's state_update_capacity (the most tokens a verify may capture), 0 without compact
 * state updates or without linear layers. */
int32_t paged_session_state_capacity(const paged_session *s);

/* Logits of the last run: row r of [rows, vocab] f32, valid until the next run. rows is N, B
 * for a graph with a pruned LM head, or the rows the session asked for when the graph has the
 * logit_rows input (model_options.logit_rows: each sequence's last row, every row of a sequence
 * with capture > 0; paged_session_token_logits maps them). paged_session_last_logits gives sequence
 * b's last row in either case. */
const float *paged_session_logits(const paged_session *s, int64_t *rows);
const float *paged_session_last_logits(const paged_session *s, int32_t b);
/* Row of token j of sequence b, or NULL when the graph prunes the LM head (only j = n-1). */
const float *paged_session_token_logits(const paged_session *s, int32_t b, int64_t j);

int64_t paged_session_vocab(const paged_session *s);
/* The linear layers' precision resolved at creation: PH_PRECISION_BF16 when any MatMulWT runs the
 * bf16 dot, else PH_PRECISION_F32. */
ph_precision paged_session_precision(const paged_session *s);
/* graph_quant_summary of the session's graph, taken before the CPU prepare pass. */
int paged_session_quant(const paged_session *s, ph_quant_params *out);
int64_t paged_session_cache_bytes(const paged_session *s); /* KV pages + state slots */
int64_t paged_session_block_size(const paged_session *s);
int64_t paged_session_max_context(const paged_session *s); /* rotary rows: positions < this */
int paged_session_prunes_lm_head(const paged_session *s);
/* 1 when every run computes every token's logits row (no pruned head, no logit_rows input). */
int paged_session_all_rows(const paged_session *s);
/* The cache the session binds: callers reserve and release pages and slots through it. */
hybrid_cache *paged_session_cache(paged_session *s);
executor *paged_session_executor(paged_session *s);
const paged_session_params *paged_session_params_of(const paged_session *s);

typedef struct paged_step_stats {
  int64_t n_tokens, n_seqs;
  uint64_t state_bytes_moved; /* gathered/scattered by this step's state binding */
  int state_zero_copy;        /* 1 when the slots were bound as one slice */
} paged_step_stats;
paged_step_stats paged_session_last_stats(const paged_session *s);

#endif /* PH_MODELS_PAGED_SESSION_H */
