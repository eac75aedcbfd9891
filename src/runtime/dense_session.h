/* dense_session — one sequence run through the dense graph: the runner behind
 * `pagedhybrid generate` and the golden tests until the paged engine exists.
 *
 * Owns the graph (built, prepared for the CPU), the executor, and the sequence's caches:
 * conv and recurrent states are bound as both past input and present output (updated in place);
 * K/V of full-attention layers live in two buffers per layer sized for max_context tokens, the
 * present of one step becoming the past of the next (the dense ABI's KV grows by S each step).
 * Batch size 1. Not thread-safe.
 */
#ifndef PH_MODELS_DENSE_SESSION_H
#define PH_MODELS_DENSE_SESSION_H

#include <stdint.h>

#include "base/diag.h"
#include "graph/graph.h"
#include "pagedhybrid.h"

typedef struct executor executor; /* exec/exec.h */

typedef struct dense_session dense_session;

/* Builds the dense graph from an opened checkpoint (which must outlive the session: weights are
 * views of its mapping). max_context 0 = the builder's default. n_threads <= 0: all CPUs. */
ph_status dense_session_create(const ph_model *m, int64_t max_context, int n_threads,
                               dense_session **out, diag *d);

/* Runs a finalized dense graph from anywhere (an imported package): the session takes
 * ownership of g (freed with the session, also on failure), prepares it for the CPU and binds it
 * by the names and static shapes of its inputs and outputs (docs/graph-io.md):
 * past_key_values.{i}.key/value [B,Hkv,P,D], .conv_state [B,C,K-1], .recurrent_state
 * [B,Hv,Dk,Dv], logits [B,S,V]. The context bound is the rows of its cos_cache initializer, or
 * max_context when it has none (0 → 4096). */
ph_status dense_session_create_graph(graph *g, int64_t max_context, int n_threads,
                                     dense_session **out, diag *d);
/* The two above with the linear layers' precision (docs/precision.md; the plain ones run f32):
 * PH_PRECISION_AUTO runs bf16 where the weights are stored bf16. PH_ERR_INVALID_ARGUMENT for a
 * value outside the enum. */
ph_status dense_session_create_ex(const ph_model *m, int64_t max_context, int n_threads,
                                  ph_precision precision, dense_session **out, diag *d);
ph_status dense_session_create_graph_ex(graph *g, int64_t max_context, int n_threads,
                                        ph_precision precision, dense_session **out, diag *d);
/* dense_session_create_ex with the linear weights quantized as they are built (quant NULL or
 * bits 0: none; docs/quantization.md): the dense twin of an engine created with
 * ph_engine_params.quant, and the reference the quantized engine is tested against. The fields
 * are checked and resolved as the engine does (runtime/runtime.h runtime_quant_resolve:
 * PH_ERR_INVALID_ARGUMENT naming the field); quant->skip must outlive the call only. */
ph_status dense_session_create_quant(const ph_model *m, int64_t max_context, int n_threads,
                                     ph_precision precision, const ph_quant_params *quant,
                                     dense_session **out, diag *d);
/* graph_quant_summary (runtime/paged_session.h) of the session's graph as built: how many linear
 * layers are MatMulNBits, the first one's parameters in *out (may be NULL). */
int dense_session_quant(const dense_session *s, ph_quant_params *out);
/* The precision resolved at creation: PH_PRECISION_BF16 or PH_PRECISION_F32. */
ph_precision dense_session_precision(const dense_session *s);
void dense_session_free(dense_session *s); /* NULL-safe */

/* Appends n tokens (n >= 1) and runs them; logits (may be NULL) receives [n, vocab] f32. */
ph_status dense_session_step(dense_session *s, const int64_t *tokens, int64_t n, float *logits,
                             diag *d);

/* Forgets the sequence (zero state, empty KV). */
void dense_session_reset(dense_session *s);

int64_t dense_session_length(const dense_session *s);
int64_t dense_session_vocab(const dense_session *s);
/* Most tokens the sequence may hold (positions < this): the rotary cache rows. */
int64_t dense_session_max_context(const dense_session *s);

/* The present state of layer `layer` after the last step, or NULL:
 * which 0: conv_state [conv_dim, K-1] or key [Hkv, P, D]; which 1: recurrent_state
 * [Hv, Dk, Dv] or value [Hkv, P, D]. dims receives the shape (rank in *rank). */
const float *dense_session_state(const dense_session *s, int layer, int which, int *rank,
                                 int64_t *dims);

executor *dense_session_executor(dense_session *s);

#endif /* PH_MODELS_DENSE_SESSION_H */
