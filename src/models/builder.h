/* builder — the node helpers every graph builder of src/models shares (qwen35.c, deepseek.c,
 * moe.c): one build's state (struct builder), value naming ("<scope>/<node>/output_<k>", the
 * scope set by the caller), constants, reshapes, Linear layers over lazily transposed
 * checkpoint weights, RMSNorms, the rotary caches, the embedding, the LM head, and the layout
 * options every family shares (builder_init) and the finalize step (builder_finish).
 * Internal to src/models: nothing outside the model builders includes it.
 *
 * Every helper is sticky-error like the graph API: after a failure it returns -1 and
 * graph_status() reports the first error.
 */
#ifndef PH_MODELS_BUILDER_H
#define PH_MODELS_BUILDER_H

#include <stdint.h>

#include "graph/graph.h"
#include "io/hf_config.h"
#include "models/registry.h"
#include "models/weights.h"

#define ONNX_FLOAT 1
#define ONNX_INT32 6
#define ONNX_INT64 7

/* The state of one build: the graph, the model, the layout options and the value ids every layer
 * reads (graph inputs, rotary caches and tables, GQA lengths). */
typedef struct builder {
  graph *g;
  const hf_config *c;
  const model_weights *w;
  char scope[96];
  int64_t max_context;
  int cos, sin;           /* rotary caches [ctx, rot/2] f32 */
  ph_dtype weight_dtype;  /* PH_DTYPE_INVALID: as stored */
  int positions;          /* position_ids, the graph input ([3,B,S] / [B,S] dense, [3,N] / [N]
                             packed) */
  int rotary_ops;         /* RoPE as plain ONNX ops (model_rotary) instead of the fused op */
  int rope_cos, rope_sin; /* rotary_ops: the shared per-token tables [.., 1, rot/2] f32, or -1 */
  int seqlens_k, total;   /* GQA lengths derived from attention_mask */
  int paged;              /* packed layout: activations [N, ...] instead of [B, S, ...] */
  ph_dtype io;            /* activation, cache and conv-state dtype (f32 for the dense layout) */
  int prune_lm_head;      /* packed: logits only for each sequence's last row */
  int logit_rows;         /* packed: logits for the rows the logit_rows input names */
  int logit_rows_in;      /* that input, or -1 */
  int cu, past_lens, block_table, metadata; /* packed layout graph inputs */
  int64_t block_size;                       /* packed: tokens per KV page */
  int slot_mapping;                         /* packed LATENT graphs: slot_mapping [N], else -1 */
  int layer;                                /* the layer being built (for per-layer weights) */
  int dense_gdn;           /* dense: linear layers run GatedDeltaNet (model_linear_op) */
  int64_t su_capacity;     /* packed: state_update_capacity C (0: no capture inputs/outputs) */
  int su_count, su_active; /* C > 0: the graph inputs state_update_capture_count [B] and
                              state_update_active [1], else -1 */
  int hidden; /* lm_head: the final-normed hidden state [N, H] (io dtype, before pruning), or -1 */
  ph_quant_params quant; /* model_options.quant with defaults applied (block 32, accuracy_level 4
                            for 0); bits 0: no layer quantized */
} builder;

/* The value ids of the graph's inputs and outputs the forward pass reads and writes; the
 * positions and the packed controls live in the builder, which the layers read them from. */
typedef struct graph_io {
  int ids, mask;              /* input_ids; attention_mask (dense only, else -1) */
  int past[HF_MAX_LAYERS][2]; /* per layer: key/value (full attention) or conv/recurrent */
  int present[HF_MAX_LAYERS][2];
  int su[HF_MAX_LAYERS][2]; /* C > 0, linear layers: the conv value and recurrent capsule
                               outputs (state_update.{i}.*), else -1 */
  int logits;
} graph_io;

/* A 2-D weight [rows, cols] = [out, in] as Hugging Face stores Linear weights. */
typedef struct wref {
  const char *name;
  ph_dtype dtype;
  int64_t rows, cols;
  const void *data;
} wref;

#define NODE1(b, op, name, attrs_n, attrs, ...)                                                    \
  node1(b, op, "", name, (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), (int[]){__VA_ARGS__},  \
        attrs_n, attrs)

typedef enum f32_transform { F32_COPY, F32_ONE_PLUS, F32_NEG_EXP } f32_transform;

wref wref_of(const st_tensor *t);
/* The bound tensor of (layer, role), or NULL. */
const st_tensor *lw(const builder *b, int layer, weight_role role);

/* A node with n_out outputs named "<scope>/<name>/output_<k>" (out[k] == -2 on entry: leave
 * that optional output absent); returns the node index, the output ids in out. */
int node_n(builder *b, const char *op, const char *domain, const char *name, int n_in,
           const int *in, int n_out, int *out, int n_attrs, const gattr *attrs);
/* A one-output node: the output's value id. */
int node1(builder *b, const char *op, const char *domain, const char *name, int n_in, const int *in,
          int n_attrs, const gattr *attrs);

/* int64 constants: "<scope>/<name>" (n < 0: a scalar), and graph-wide shared ones named as
 * GenAI's builder names them ("/model/constants/INT64/[v0, ...]"). */
int const_i64(builder *b, const char *name, int n, const int64_t *v);
int shared_i64(builder *b, int n, const int64_t *v);
int reshape(builder *b, const char *name, int x, int n, const int64_t *dims);
/* [.., heads, dim] / [.., width] views of an activation in either layout. */
int split_heads(builder *b, const char *name, int x, int64_t heads, int64_t dim);
int merge_heads(builder *b, const char *name, int x, int64_t width);
int cast_to(builder *b, const char *name, int x, int onnx_type);
/* A weight as an initializer view (copied only when misaligned or converted). */
int weight_view(builder *b, const char *name, ph_dtype dt, shape s, const void *data);
/* The dtype a checkpoint tensor is stored as in the graph (model_options.weight_dtype). */
ph_dtype stored_as(const builder *b, ph_dtype checkpoint);
/* y = x W^T (W [out, in] as Hugging Face stores it). With b->quant.bits 4 or 8 and a weight the
 * quantization selects (builder_quantizes), com.microsoft::MatMulNBits over lazily quantized
 * initializers "<weight name>_Q<bits>", "_scales" (io dtype) and, asymmetric, "_zero_points"
 * instead of the MatMul. */
int linear(builder *b, const char *name, int x, wref w);

/* 1 when linear() quantizes the weight named `name` (a checkpoint tensor, or a weight derived
 * from some: Qwen3-Next's regrouped "<in_proj_qkvz>.qkv"/".z" and "<in_proj_ba>.b"/".a",
 * DeepSeek's "<kv_b_proj>.v_padded" and absorbed "...self_attn.q_absorbed.weight" /
 * "o_absorbed.weight"): quant.bits is set, every checkpoint tensor it comes from has a role
 * weight_role_quantizable accepts, and none of their names (nor the derived name) contains a
 * quant.skip entry. lm_head: the LM head, whatever tensor holds it (a tied embedding is quantized
 * as the LM head, matched by skip as "lm_head.weight" too, while the embedding gather keeps the
 * original). */
int builder_quantizes(const builder *b, const char *name, int lm_head);
/* 1 when `name` contains an entry of b->quant.skip (moe.c: the routed experts of a layer become
 * com.microsoft::QMoE when none of their tensors' names does). */
int builder_skips(const builder *b, const char *name);

/* Initializers computed in f32 from a small checkpoint tensor (transform tf) and rounded once
 * to dt: named exactly, or "<tensor name><suffix>"; f32_const / io_const pick f32 / the io
 * dtype. */
int const_named(builder *b, const st_tensor *t, const char *name, f32_transform tf, ph_dtype dt);
int const_as(builder *b, const st_tensor *t, const char *suffix, f32_transform tf, ph_dtype dt);
int f32_const(builder *b, const st_tensor *t, const char *suffix, f32_transform tf);
int io_const(builder *b, const st_tensor *t, const char *suffix, f32_transform tf);
/* [n] filled with v in dt, named full / "<scope>/<name>" (f32). */
int fill_named(builder *b, const char *full, int64_t n, float v, ph_dtype dt);
int f32_fill(builder *b, const char *name, int64_t n, float v);

/* SimplifiedLayerNormalization over the last axis; the skip form returns the normalized
 * output and *sum = input + skip (the new residual stream). */
int rms_norm(builder *b, const char *name, int x, int gain, float eps);
int skip_rms_norm(builder *b, const char *name, int x, int skip, int gain, float eps, int *sum);

/* cos_cache / sin_cache [max_context, rot/2] in dt (ABI names), angle p * inv_freq[j] (NULL:
 * theta^(-2j/rot)), each multiplied by attention_factor (YaRN's; 1 otherwise). */
void rotary_caches(builder *b, const double *inv_freq, double attention_factor, ph_dtype dt);

/* Dense GroupQueryAttention lengths from attention_mask: b->seqlens_k, b->total. */
void attention_lengths(builder *b, int mask);

/* The packed layout's batch description, in the ABI's order: block_table [B, max_blocks],
 * cumulative_sequence_lengths [B+1], past_sequence_lengths [B] (all i32), into b. */
void packed_batch_inputs(builder *b);

/* The embedding gather of ids, cast to the io dtype. */
int embed_tokens(builder *b, int ids);
/* model_options.logit_rows: the input logit_rows i64 [R] (after every other input; call it
 * last), when asked for. */
void logit_rows_input(builder *b);

/* Packed prune_lm_head: rows cu[1:] - 1 of x [N, H] -> [B, H]. */
int last_rows(builder *b, int x);
/* Final norm (gain transformed by final_norm: F32_ONE_PLUS for Qwen, F32_COPY for DeepSeek)
 * closing the last residual add, the LM head, logits in f32. The normed rows (all N, before the
 * prune) are left in b->hidden. */
int lm_head(builder *b, int branch, int residual, f32_transform final_norm);

/* The builder for opt (NULL: the defaults), its layout options checked; default_context is the
 * family's rotary cache rows when opt gives none. */
ph_status builder_init(builder *b, graph *g, const hf_config *c, const model_weights *w,
                       const model_options *opt, int64_t default_context, diag *d);
/* Checks the graph's sticky status and finalizes it into *out (freeing it on error). */
ph_status builder_finish(builder *b, graph **out, diag *d);

#endif /* PH_MODELS_BUILDER_H */
