/* op_paged_attention — com.microsoft PagedAttention: causal attention of packed (varlen) query
 * rows over a paged KV cache (spec/abi.md §1), kv_cache_layout SEPARATE (a key and a value
 * cache) or LATENT (absorbed multi-head latent attention, abi.md §1.8: one latent cache).
 *
 * Letters: N packed rows, B sequences, Hq query heads, Hkv kv heads, D head size, Dv value width
 * (v_head_size; D in SEPARATE), NP pages, BS block_size (tokens per page), MB
 * max_blocks_per_sequence. F is the IO dtype.
 *   in 0  query        F [N,Hq*D], or packed [N,(Hq+2*Hkv)*D] (q | k | v) when key/value absent
 *   in 1  key          F [N,Hkv*D] (optional, with value)      in 2 value  F [N,Hkv*D]
 *   in 3  key_cache    F [NP,BS,Hkv,D]                         in 4 value_cache (same)
 *   in 5  cumulative_sequence_length int32 [B+1]   in 6 past_seqlens int32 [B]
 *   in 7  block_table  int32 [B,MB]
 *   in 8  cos_cache, in 9 sin_cache  F or f32 [max_pos, rot/2] (both iff do_rotary; rot/2 % 8
 *         == 0)
 *   in 10 slot_mapping int32 [N] (optional; -1 skips the row's write)
 *   in 11 head_sink    F [Hq]    in 12 q_norm_weight, in 13 k_norm_weight  F [D] (paired)
 *   in 14 k_scale, in 15 v_scale: only with quantized caches -> PH_ERR_UNSUPPORTED
 *   in 16 attention_metadata int32 [2] or [3]: validated (non-negative, lower <= max_kv when
 *         max_kv is known), never used: the CPU kernel derives every length from the inputs, so
 *         the bounds cannot change a result.
 *   out 0 output F [N,Hq*Dv]; out 1/2 key_cache_out/value_cache_out (SEPARATE: both or neither;
 *         LATENT: key_cache_out only, a third output is INVALID_ARGUMENT as in ORT's inference).
 * F is f32, f16 or bf16 and the caches have F's dtype. ONNX Runtime's schema accepts only
 * f16/bf16; f32 is accepted here as well (CPU tests, f32 graphs).
 *
 * LATENT (Hkv = 1, key required): each cache row [l + r] = [latent c (l) ; k_pe (r)] is the key
 * of every query head, and its first Dv (= l) elements are the value; the output per head is Dv
 * wide. value, value_cache, head_sink, q/k_norm_weight and v_scale must be absent and
 * v_quant_type/v_cache_dtype unset; Dv = v_head_size in [1, D] (0: D); scale must be non-zero
 * whenever Dv != D (either layout). RoPE (do_rotary, rotary_offset = l) then turns only the k_pe
 * suffix of the key and the matching channels of each query head.
 *
 * Cache outputs alias the cache inputs: the executor binds the same buffer and the op updates
 * it in place. When an output buffer differs from its input the whole input cache is copied into
 * it first and the copy is updated (the input is left untouched). When the cache outputs are not
 * requested the input caches are updated in place, as the schema describes.
 *
 * Semantics (abi.md §1.7, §1.8) for sequence b, rows [cu[b], cu[b+1]), local index j, position
 * p = past_seqlens[b] + j:
 *   1. Q and K heads: optional fused RMSNorm (f32: x * w / sqrt(mean(x^2) + qk_norm_epsilon)),
 *      then optional RoPE at position p on channels [rotary_offset, rotary_offset + rot) with
 *      rope_rotate_f32 (kernels/rope.h, RotaryEmbedding's own rotation: the key stored in the
 *      cache has the bits RotaryEmbedding gives the same row; the rotated query stays f32).
 *   2. K (rounded to F) and V (SEPARATE) go to slot slot_mapping[row] if given (skipped for -1),
 *      else to block_table[b][p / BS] * BS + p % BS. All writes happen before any attention;
 *      reads always go through the block table.
 *   3. Query p attends keys max(0, p-W+1)..p of sequence b (W = local_window_size > 0: the W
 *      newest keys including itself), read through the block table; head h reads kv head
 *      h / (Hq/Hkv). Scores q.k * scale (scale 0 -> 1/sqrt(D)), then softcap*tanh(s/softcap)
 *      when softcap > 0; softmax in f32 with the max subtracted; exp(head_sink[h]) joins the
 *      denominator only. Output rounded once to F.
 * Validation before any write (typed errors): block_size a power of two >= 16, D % 8 == 0,
 * table dims, cu starts at 0 / ends at N / non-decreasing, past >= 0, past + q_len - 1 <
 * MB*BS, every block id read or written in [0, NP), slot_mapping in [-1, NP*BS), rotary
 * positions below max_pos (else INVALID_ARGUMENT). Unsupported: is_causal = 0, quantized caches.
 *
 * Work: phase 1 writes K/V over kv-head tasks (rows in order, so duplicate slots resolve the same
 * way for every thread count); phase 2 runs one task per (sequence, kv head, chunk of PA_CHUNK
 * query positions), the chunk's rows of every query head of the kv head's group going through
 * attend_rows (kernels/attend.h, GroupQueryAttention's core too) in tiles of positions x heads
 * over the sequence's pages. A row's bits never depend on its tile (attend.h), so every output
 * element is the same whatever the batch, the chunking or the thread count.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/attend.h"
#include "kernels/rope.h"
#include "ops/op.h"
#include "ops/op_util.h"
#include "tensor/dtype.h"

enum {
  PA_IN_QUERY,
  PA_IN_KEY,
  PA_IN_VALUE,
  PA_IN_KEY_CACHE,
  PA_IN_VALUE_CACHE,
  PA_IN_CU,
  PA_IN_PAST,
  PA_IN_BLOCK_TABLE,
  PA_IN_COS,
  PA_IN_SIN,
  PA_IN_SLOT_MAPPING,
  PA_IN_HEAD_SINK,
  PA_IN_Q_NORM,
  PA_IN_K_NORM,
  PA_IN_K_SCALE,
  PA_IN_V_SCALE,
  PA_IN_METADATA,
  PA_N_IN
};

static const char *const PA_IN_NAMES[PA_N_IN] = {"query",
                                                 "key",
                                                 "value",
                                                 "key_cache",
                                                 "value_cache",
                                                 "cumulative_sequence_length",
                                                 "past_seqlens",
                                                 "block_table",
                                                 "cos_cache",
                                                 "sin_cache",
                                                 "slot_mapping",
                                                 "head_sink",
                                                 "q_norm_weight",
                                                 "k_norm_weight",
                                                 "k_scale",
                                                 "v_scale",
                                                 "attention_metadata"};

typedef struct pa_geom {
  ph_dtype dt;
  int64_t Hq, Hkv, D, Dv, N, B, NP, BS, MB; /* Dv: value/output width per head */
  int64_t window, rot, rot_off, max_pos;
  float scale, softcap, eps;
  int packed, rotary, interleaved, has_slots, has_sink, has_norm, has_meta;
  int latent; /* kv_cache_layout LATENT: one cache, values = each key row's first Dv elements */
} pa_geom;

static int64_t pa_mul(int64_t a, int64_t b) { return a < 0 || b < 0 ? -1 : a * b; }

static ph_status pa_attrs(const gnode *n, pa_geom *g, diag *d) {
  FORWARD_IF_ERROR(op_attr_int(n, "num_heads", -1, &g->Hq, d));
  FORWARD_IF_ERROR(op_attr_int(n, "kv_num_heads", -1, &g->Hkv, d));
  RETURN_ERROR_IF(g->Hq <= 0 || g->Hkv <= 0, d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: num_heads and kv_num_heads are required and > 0, got %lld "
                  "and %lld",
                  (long long)g->Hq, (long long)g->Hkv);
  RETURN_ERROR_IF(g->Hq % g->Hkv != 0, d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: num_heads %lld is not a multiple of kv_num_heads %lld",
                  (long long)g->Hq, (long long)g->Hkv);
  const char *layout = NULL;
  FORWARD_IF_ERROR(op_attr_string(n, "kv_cache_layout", "SEPARATE", &layout, d));
  RETURN_ERROR_IF(strcmp(layout, "SEPARATE") != 0 && strcmp(layout, "LATENT") != 0, d,
                  PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: kv_cache_layout \"%s\" is not SEPARATE or LATENT", layout);
  g->latent = strcmp(layout, "LATENT") == 0;
  RETURN_ERROR_IF(g->latent && g->Hkv != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: kv_cache_layout LATENT needs kv_num_heads = 1 (one latent row "
                  "per token), got %lld",
                  (long long)g->Hkv);
  RETURN_ERROR_IF(g->latent && n->n_outputs > 2, d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: kv_cache_layout LATENT has at most 2 outputs (output, "
                  "key_cache_out; value_cache_out must be absent), got %d",
                  n->n_outputs);
  RETURN_ERROR_IF(!g->latent && n->n_outputs == 2, d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: has 1 or 3 outputs in SEPARATE (the cache outputs come "
                  "together), got %d",
                  n->n_outputs);
  FORWARD_IF_ERROR(op_attr_float(n, "scale", 0.0f, &g->scale, d));
  RETURN_ERROR_IF(!(g->scale >= 0.0f) || isinf(g->scale), d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: scale must be finite and >= 0, got %g", (double)g->scale);
  FORWARD_IF_ERROR(op_attr_float(n, "softcap", 0.0f, &g->softcap, d));
  RETURN_ERROR_IF(!(g->softcap >= 0.0f) || isinf(g->softcap), d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: softcap must be finite and >= 0, got %g", (double)g->softcap);
  FORWARD_IF_ERROR(op_attr_int(n, "local_window_size", -1, &g->window, d));
  RETURN_ERROR_IF(g->window != -1 && g->window < 1, d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: local_window_size must be -1 (off) or >= 1, got %lld",
                  (long long)g->window);
  int64_t v = 0;
  FORWARD_IF_ERROR(op_attr_int(n, "is_causal", 1, &v, d));
  RETURN_ERROR_IF(v != 0 && v != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: is_causal must be 0 or 1, got %lld", (long long)v);
  RETURN_ERROR_IF(v == 0, d, PH_ERR_UNSUPPORTED,
                  "PagedAttention: is_causal = 0 (bidirectional query blocks) is not supported "
                  "yet");
  FORWARD_IF_ERROR(op_attr_int(n, "do_rotary", 0, &v, d));
  RETURN_ERROR_IF(v != 0 && v != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: do_rotary must be 0 or 1, got %lld", (long long)v);
  g->rotary = (int)v;
  FORWARD_IF_ERROR(op_attr_int(n, "rotary_interleaved", 0, &v, d));
  RETURN_ERROR_IF(v != 0 && v != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: rotary_interleaved must be 0 or 1, got %lld", (long long)v);
  g->interleaved = (int)v;
  FORWARD_IF_ERROR(op_attr_float(n, "qk_norm_epsilon", 1e-6f, &g->eps, d));
  RETURN_ERROR_IF(!(g->eps > 0.0f), d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: qk_norm_epsilon must be > 0, got %g", (double)g->eps);
  FORWARD_IF_ERROR(op_attr_int(n, "rotary_offset", 0, &g->rot_off, d));
  RETURN_ERROR_IF(g->rot_off < 0 || g->rot_off % 8 != 0, d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: rotary_offset must be >= 0 and a multiple of 8, got %lld",
                  (long long)g->rot_off);
  static const char *const quant[2] = {"k_quant_type", "v_quant_type"};
  for (int i = 0; i < 2; i++) {
    const char *q = NULL;
    FORWARD_IF_ERROR(op_attr_string(n, quant[i], "NONE", &q, d));
    RETURN_ERROR_IF(g->latent && i == 1 && strcmp(q, "NONE") != 0, d, PH_ERR_INVALID_ARGUMENT,
                    "PagedAttention: v_quant_type must be NONE in LATENT (there is no value "
                    "cache), got \"%s\"",
                    q);
    RETURN_ERROR_IF(
        strcmp(q, "NONE") != 0 && strcmp(q, "PER_TENSOR") != 0 && strcmp(q, "PER_CHANNEL") != 0, d,
        PH_ERR_INVALID_ARGUMENT, "PagedAttention: %s \"%s\" is not NONE, PER_TENSOR or PER_CHANNEL",
        quant[i], q);
    RETURN_ERROR_IF(strcmp(q, "NONE") != 0, d, PH_ERR_UNSUPPORTED,
                    "PagedAttention: %s %s (quantized KV cache) is not supported", quant[i], q);
  }
  static const char *const cdt[2] = {"k_cache_dtype", "v_cache_dtype"};
  for (int i = 0; i < 2; i++) {
    const char *c = NULL;
    FORWARD_IF_ERROR(op_attr_string(n, cdt[i], "", &c, d));
    RETURN_ERROR_IF(g->latent && i == 1 && c[0] != '\0', d, PH_ERR_INVALID_ARGUMENT,
                    "PagedAttention: v_cache_dtype must be unset in LATENT (there is no value "
                    "cache), got \"%s\"",
                    c);
    RETURN_ERROR_IF(c[0] != '\0' && strcmp(c, "float16") != 0 && strcmp(c, "bfloat16") != 0, d,
                    PH_ERR_UNSUPPORTED,
                    "PagedAttention: %s \"%s\" is not supported (the cache has the query dtype)",
                    cdt[i], c);
  }
  return PH_OK;
}

/* A rank-2/1 int32 input's dtype and rank. */
static ph_status pa_check_i32(const gnode *n, const tinfo *t, int idx, int rank, const char *what,
                              diag *d) {
  RETURN_ERROR_IF(t->dtype != PH_DTYPE_I32, d, PH_ERR_TENSOR_DTYPE,
                  "PagedAttention: %s must be I32, got %s", PA_IN_NAMES[idx],
                  op_dtype_name(t->dtype));
  return op_check_rank(n, t, rank, what, d);
}

/* attention_metadata's m entries (data only: at run time, or when a constant at build time). */
static ph_status pa_check_metadata(const int32_t *md, int64_t m, diag *d) {
  for (int64_t i = 0; i < m; i++)
    RETURN_ERROR_IF(md[i] < 0, d, PH_ERR_INVALID_ARGUMENT,
                    "PagedAttention: attention_metadata[%lld] = %d is negative", (long long)i,
                    (int)md[i]);
  RETURN_ERROR_IF(m == 3 && md[1] > 0 && md[2] > md[1], d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: attention_metadata max_kv_len_lower_bound %d exceeds "
                  "max_kv_len_bound %d",
                  (int)md[2], (int)md[1]);
  return PH_OK;
}

static ph_status pa_resolve(const gnode *n, const tinfo *in_, pa_geom *g, diag *d) {
  memset(g, 0, sizeof *g);
  RETURN_ERROR_IF(n->n_inputs < 8 || n->n_inputs > PA_N_IN, d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: takes 8 to 17 inputs, got %d", n->n_inputs);
  RETURN_ERROR_IF(n->n_outputs < 1 || n->n_outputs > 3, d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: has 1 to 3 outputs, got %d", n->n_outputs);
  FORWARD_IF_ERROR(pa_attrs(n, g, d)); /* and the output count of the layout */
  tinfo in[PA_N_IN];
  memset(in, 0, sizeof in);
  for (int i = 0; i < n->n_inputs; i++) in[i] = in_[i];
#define PA_HAS(i) (in[i].dtype != PH_DTYPE_INVALID)
  if (g->latent) {
    /* abi.md §1.6: the latent row is the key; nothing of a value path may be bound */
    RETURN_ERROR_IF(!PA_HAS(PA_IN_KEY), d, PH_ERR_INVALID_ARGUMENT,
                    "PagedAttention: key (the latent row [N, head_size]) is required in LATENT");
    static const int none[] = {PA_IN_VALUE,  PA_IN_VALUE_CACHE, PA_IN_HEAD_SINK,
                               PA_IN_Q_NORM, PA_IN_K_NORM,      PA_IN_V_SCALE};
    for (size_t k = 0; k < sizeof none / sizeof none[0]; k++)
      RETURN_ERROR_IF(PA_HAS(none[k]), d, PH_ERR_INVALID_ARGUMENT,
                      "PagedAttention: %s must be absent in LATENT", PA_IN_NAMES[none[k]]);
  }
  for (int i = 0; i < 8; i++)
    if (i != PA_IN_KEY && i != PA_IN_VALUE && (i != PA_IN_VALUE_CACHE || !g->latent))
      RETURN_ERROR_IF(!PA_HAS(i), d, PH_ERR_INVALID_ARGUMENT, "PagedAttention: %s is required",
                      PA_IN_NAMES[i]);
  RETURN_ERROR_IF(!g->latent && PA_HAS(PA_IN_KEY) != PA_HAS(PA_IN_VALUE), d,
                  PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: key and value come together (both absent: packed QKV)");
  g->packed = !PA_HAS(PA_IN_KEY);
  RETURN_ERROR_IF(PA_HAS(PA_IN_COS) != PA_HAS(PA_IN_SIN), d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: cos_cache and sin_cache come together");
  RETURN_ERROR_IF(PA_HAS(PA_IN_COS) != g->rotary, d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: cos_cache/sin_cache are required exactly when do_rotary = 1");
  RETURN_ERROR_IF(PA_HAS(PA_IN_Q_NORM) != PA_HAS(PA_IN_K_NORM), d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: q_norm_weight and k_norm_weight come together");
  RETURN_ERROR_IF(PA_HAS(PA_IN_K_SCALE) || PA_HAS(PA_IN_V_SCALE), d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: k_scale/v_scale need a quantized cache (k/v_quant_type NONE)");
  g->has_norm = PA_HAS(PA_IN_Q_NORM);
  g->has_slots = PA_HAS(PA_IN_SLOT_MAPPING);
  g->has_sink = PA_HAS(PA_IN_HEAD_SINK);
  g->has_meta = PA_HAS(PA_IN_METADATA);

  /* dtypes */
  g->dt = in[PA_IN_QUERY].dtype;
  RETURN_ERROR_IF(!dtype_is_compute_float(g->dt), d, PH_ERR_TENSOR_DTYPE,
                  "PagedAttention: query dtype %s is not f32, f16 or bf16", ph_dtype_name(g->dt));
  static const int fl[] = {PA_IN_KEY,       PA_IN_VALUE,  PA_IN_KEY_CACHE, PA_IN_VALUE_CACHE,
                           PA_IN_HEAD_SINK, PA_IN_Q_NORM, PA_IN_K_NORM};
  for (size_t k = 0; k < sizeof fl / sizeof fl[0]; k++)
    RETURN_ERROR_IF(PA_HAS(fl[k]) && in[fl[k]].dtype != g->dt, d, PH_ERR_TENSOR_DTYPE,
                    "PagedAttention: %s is %s but query is %s", PA_IN_NAMES[fl[k]],
                    ph_dtype_name(in[fl[k]].dtype), ph_dtype_name(g->dt));
  /* cos/sin: the query's dtype, or f32 (tables kept exact in f32 for f16/bf16 activations) */
  for (int k = PA_IN_COS; k <= PA_IN_SIN; k++)
    RETURN_ERROR_IF(PA_HAS(k) && in[k].dtype != g->dt && in[k].dtype != PH_DTYPE_F32, d,
                    PH_ERR_TENSOR_DTYPE,
                    "PagedAttention: %s is %s; it must have the query's dtype %s, or be F32",
                    PA_IN_NAMES[k], ph_dtype_name(in[k].dtype), ph_dtype_name(g->dt));

  /* query / key / value */
  const tinfo *q = &in[PA_IN_QUERY];
  FORWARD_IF_ERROR(op_check_rank(n, q, 2, "query [N, num_heads*head_size]", d));
  g->N = op_dim(q, 0);
  g->D = -1;
  const int64_t heads = g->packed ? g->Hq + 2 * g->Hkv : g->Hq;
  if (op_dim(q, 1) >= 0) {
    RETURN_ERROR_IF(op_dim(q, 1) % heads != 0, d, PH_ERR_TENSOR_SHAPE,
                    "PagedAttention: query width %lld is not a multiple of %lld heads%s",
                    (long long)op_dim(q, 1), (long long)heads,
                    g->packed ? " (packed: num_heads + 2 * kv_num_heads)" : "");
    g->D = op_dim(q, 1) / heads;
  }
  for (int k = PA_IN_KEY; k <= (g->latent ? PA_IN_KEY : PA_IN_VALUE) && !g->packed; k++) {
    const tinfo *t = &in[k];
    FORWARD_IF_ERROR(op_check_rank(n, t, 2,
                                   k == PA_IN_KEY ? "key [N, kv_num_heads*head_size]"
                                                  : "value [N, kv_num_heads*head_size]",
                                   d));
    FORWARD_IF_ERROR(op_merge_dim(n, &g->N, op_dim(t, 0), "the row count N", d));
    RETURN_ERROR_IF(op_dims_conflict(op_dim(t, 1), pa_mul(g->Hkv, g->D)), d, PH_ERR_TENSOR_SHAPE,
                    "PagedAttention: %s width is %lld, expected kv_num_heads * head_size = %lld",
                    PA_IN_NAMES[k], (long long)op_dim(t, 1), (long long)pa_mul(g->Hkv, g->D));
    if (g->D < 0 && op_dim(t, 1) >= 0) {
      RETURN_ERROR_IF(op_dim(t, 1) % g->Hkv != 0, d, PH_ERR_TENSOR_SHAPE,
                      "PagedAttention: %s width %lld is not a multiple of kv_num_heads %lld",
                      PA_IN_NAMES[k], (long long)op_dim(t, 1), (long long)g->Hkv);
      g->D = op_dim(t, 1) / g->Hkv;
    }
  }

  /* caches [NP, BS, Hkv, D] */
  g->NP = g->BS = -1;
  for (int k = PA_IN_KEY_CACHE; k <= (g->latent ? PA_IN_KEY_CACHE : PA_IN_VALUE_CACHE); k++) {
    const tinfo *t = &in[k];
    FORWARD_IF_ERROR(op_check_rank(n, t, 4,
                                   k == PA_IN_KEY_CACHE
                                       ? "key_cache [num_blocks, block_size, kv_num_heads, D]"
                                       : "value_cache [num_blocks, block_size, kv_num_heads, D]",
                                   d));
    FORWARD_IF_ERROR(op_merge_dim(n, &g->NP, op_dim(t, 0), "the cache block count", d));
    FORWARD_IF_ERROR(op_merge_dim(n, &g->BS, op_dim(t, 1), "the cache block_size", d));
    RETURN_ERROR_IF(op_dims_conflict(op_dim(t, 2), g->Hkv), d, PH_ERR_TENSOR_SHAPE,
                    "PagedAttention: %s dim 2 is %lld, expected kv_num_heads = %lld",
                    PA_IN_NAMES[k], (long long)op_dim(t, 2), (long long)g->Hkv);
    FORWARD_IF_ERROR(op_merge_dim(n, &g->D, op_dim(t, 3), "the head size", d));
  }
  RETURN_ERROR_IF(g->D >= 0 && (g->D == 0 || g->D % 8 != 0), d, PH_ERR_TENSOR_SHAPE,
                  "PagedAttention: head_size must be a positive multiple of 8, got %lld",
                  (long long)g->D);
  RETURN_ERROR_IF(g->BS >= 0 && (g->BS < 16 || (g->BS & (g->BS - 1)) != 0), d, PH_ERR_TENSOR_SHAPE,
                  "PagedAttention: block_size must be a power of two >= 16, got %lld",
                  (long long)g->BS);
  int64_t v_head = 0;
  FORWARD_IF_ERROR(op_attr_int(n, "v_head_size", 0, &v_head, d));
  RETURN_ERROR_IF(v_head < 0, d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: v_head_size must be >= 0 (0: head_size), got %lld",
                  (long long)v_head);
  RETURN_ERROR_IF(!g->latent && v_head != 0 && g->D >= 0 && v_head != g->D, d,
                  PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: v_head_size %lld must equal head_size %lld in SEPARATE",
                  (long long)v_head, (long long)g->D);
  RETURN_ERROR_IF(g->latent && g->D >= 0 && v_head > g->D, d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: v_head_size %lld must lie in [1, head_size = %lld] in LATENT",
                  (long long)v_head, (long long)g->D);
  g->Dv = v_head != 0 ? v_head : g->D;
  /* ORT's rule: a narrower value needs the caller's scale (1/sqrt(head_size) would be a guess) */
  RETURN_ERROR_IF(g->scale == 0.0f && g->D >= 0 && g->Dv != g->D, d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: scale must be given (non-zero) when v_head_size %lld differs "
                  "from head_size %lld",
                  (long long)g->Dv, (long long)g->D);

  /* cu [B+1], past [B], block_table [B, MB] */
  FORWARD_IF_ERROR(
      pa_check_i32(n, &in[PA_IN_CU], PA_IN_CU, 1, "cumulative_sequence_length [B+1]", d));
  FORWARD_IF_ERROR(pa_check_i32(n, &in[PA_IN_PAST], PA_IN_PAST, 1, "past_seqlens [B]", d));
  FORWARD_IF_ERROR(pa_check_i32(n, &in[PA_IN_BLOCK_TABLE], PA_IN_BLOCK_TABLE, 2,
                                "block_table [B, max_blocks_per_sequence]", d));
  const int64_t cu0 = op_dim(&in[PA_IN_CU], 0);
  RETURN_ERROR_IF(cu0 >= 0 && cu0 < 2, d, PH_ERR_TENSOR_SHAPE,
                  "PagedAttention: cumulative_sequence_length is [B+1] with B >= 1, got %lld "
                  "entries",
                  (long long)cu0);
  g->B = cu0 >= 0 ? cu0 - 1 : -1;
  FORWARD_IF_ERROR(op_merge_dim(n, &g->B, op_dim(&in[PA_IN_PAST], 0), "the sequence count B", d));
  FORWARD_IF_ERROR(
      op_merge_dim(n, &g->B, op_dim(&in[PA_IN_BLOCK_TABLE], 0), "the sequence count B", d));
  g->MB = op_dim(&in[PA_IN_BLOCK_TABLE], 1);

  /* rotary [max_pos, rot/2] */
  g->rot = 0;
  g->max_pos = -1;
  if (g->rotary) {
    g->rot = -1;
    for (int k = PA_IN_COS; k <= PA_IN_SIN; k++) {
      const tinfo *t = &in[k];
      FORWARD_IF_ERROR(op_check_rank(n, t, 2,
                                     k == PA_IN_COS ? "cos_cache [max_positions, rot/2]"
                                                    : "sin_cache [max_positions, rot/2]",
                                     d));
      FORWARD_IF_ERROR(op_merge_dim(n, &g->max_pos, op_dim(t, 0), "the rotary max position", d));
      FORWARD_IF_ERROR(
          op_merge_dim(n, &g->rot, op_dim(t, 1) < 0 ? -1 : 2 * op_dim(t, 1), "the rotary dim", d));
    }
    RETURN_ERROR_IF(g->rot >= 0 && (g->rot == 0 || (g->rot / 2) % 8 != 0), d, PH_ERR_TENSOR_SHAPE,
                    "PagedAttention: cos_cache dim 1 must be a positive multiple of 8, got %lld",
                    (long long)(g->rot / 2));
    RETURN_ERROR_IF(g->rot >= 0 && g->D >= 0 && g->rot_off + g->rot > g->D, d, PH_ERR_TENSOR_SHAPE,
                    "PagedAttention: rotary_offset %lld + rotary dim %lld exceeds head_size %lld",
                    (long long)g->rot_off, (long long)g->rot, (long long)g->D);
  }

  if (g->has_slots) {
    FORWARD_IF_ERROR(
        pa_check_i32(n, &in[PA_IN_SLOT_MAPPING], PA_IN_SLOT_MAPPING, 1, "slot_mapping [N]", d));
    FORWARD_IF_ERROR(
        op_merge_dim(n, &g->N, op_dim(&in[PA_IN_SLOT_MAPPING], 0), "the row count N", d));
  }
  if (g->has_sink) {
    FORWARD_IF_ERROR(op_check_rank(n, &in[PA_IN_HEAD_SINK], 1, "head_sink [num_heads]", d));
    RETURN_ERROR_IF(op_dims_conflict(op_dim(&in[PA_IN_HEAD_SINK], 0), g->Hq), d,
                    PH_ERR_TENSOR_SHAPE, "PagedAttention: head_sink must be [num_heads = %lld]",
                    (long long)g->Hq);
  }
  for (int k = PA_IN_Q_NORM; k <= PA_IN_K_NORM && g->has_norm; k++) {
    FORWARD_IF_ERROR(op_check_rank(n, &in[k], 1, "q/k_norm_weight [head_size]", d));
    RETURN_ERROR_IF(op_dims_conflict(op_dim(&in[k], 0), g->D), d, PH_ERR_TENSOR_SHAPE,
                    "PagedAttention: %s must be [head_size = %lld]", PA_IN_NAMES[k],
                    (long long)g->D);
  }
  if (g->has_meta) {
    const tinfo *t = &in[PA_IN_METADATA];
    FORWARD_IF_ERROR(pa_check_i32(n, t, PA_IN_METADATA, 1, "attention_metadata [2] or [3]", d));
    const int64_t m = op_dim(t, 0);
    RETURN_ERROR_IF(m >= 0 && m != 2 && m != 3, d, PH_ERR_TENSOR_SHAPE,
                    "PagedAttention: attention_metadata must have 2 or 3 entries, got %lld",
                    (long long)m);
    if (t->data && m >= 0) FORWARD_IF_ERROR(pa_check_metadata(t->data, m, d));
  }
  if (g->scale == 0.0f && g->D > 0) g->scale = (float)(1.0 / sqrt((double)g->D));
#undef PA_HAS
  return PH_OK;
}

static ph_status pa_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  pa_geom g;
  FORWARD_IF_ERROR(pa_resolve(n, in, &g, d));
  const int64_t od[2] = {g.N, pa_mul(g.Hq, g.Dv)};
  const int64_t cd[4] = {g.NP, g.BS, g.Hkv, g.D};
  out[0] = tinfo_make(g.dt, 2, od);
  for (int k = 1; k < n->n_outputs; k++) out[k] = tinfo_make(g.dt, 4, cd);
  return PH_OK;
}

/* Per thread: attend's work, the q and output tiles [ATTEND_MAX_ROWS][D or Dv], cos and sin
 * [rot/2] (phase 1 uses the slice's first D + rot floats). */
static size_t pa_slice_floats(const pa_geom *g) {
  return attend_work_floats(g->D, g->Dv) + (size_t)(ATTEND_MAX_ROWS * (g->D + g->Dv) + g->rot);
}

static size_t pa_scratch(const gnode *n, const tinfo *in, int n_threads) {
  pa_geom g;
  if (pa_resolve(n, in, &g, NULL) != PH_OK || g.D < 0 || g.Dv < 0 || g.rot < 0) return 0;
  return pa_slice_floats(&g) * sizeof(float) * (size_t)(n_threads > 0 ? n_threads : 1);
}

/* ---- kernels ---- */

typedef struct pa_job {
  const pa_geom *g;
  const tensor *q, *k, *v; /* k, v are q when packed */
  const int32_t *cu, *past, *bt, *slots;
  const tensor *cos, *sin, *sink, *qn, *kn;
  tensor *kc, *vc, *out;
  float *scratch;
  attend_rows_fn attend; /* the variant chosen once per run (kernels/dispatch.h) */
  int64_t chunks;        /* position chunks of PA_CHUNK rows per (sequence, kv head) */
} pa_job;

/* Query positions per phase-2 task. */
enum { PA_CHUNK = 32 };

static int64_t pa_q_off(const pa_geom *g, int64_t row, int64_t h) {
  const int64_t w = g->packed ? (g->Hq + 2 * g->Hkv) * g->D : g->Hq * g->D;
  return row * w + h * g->D;
}

static int64_t pa_kv_off(const pa_geom *g, int64_t row, int64_t kvh, int is_v) {
  if (!g->packed) return (row * g->Hkv + kvh) * g->D;
  return row * (g->Hq + 2 * g->Hkv) * g->D + (g->Hq + (is_v ? g->Hkv : 0) + kvh) * g->D;
}

/* Fused RMSNorm then RoPE on one head x[0..D) at position p. */
static void pa_prep(const pa_job *j, float *x, const tensor *w, int64_t p, float *c, float *sn) {
  const pa_geom *g = j->g;
  if (w) {
    float ss = 0.0f;
    for (int64_t e = 0; e < g->D; e++) ss += x[e] * x[e];
    const float inv = 1.0f / sqrtf(ss / (float)g->D + g->eps);
    for (int64_t e = 0; e < g->D; e++) x[e] = x[e] * inv * tensor_get_f32(w, e);
  }
  if (g->rotary) {
    const int64_t h = g->rot / 2;
    tensor_load_f32(j->cos, p * h, h, c);
    tensor_load_f32(j->sin, p * h, h, sn);
    rope_rotate_f32(x + g->rot_off, c, sn, g->rot, g->interleaved, x + g->rot_off);
  }
}

/* Slot of position t of sequence b through the block table (the write path; attention reads
 * the same slots through attend_kv's pages). */
static int64_t pa_slot(const pa_job *j, int64_t b, int64_t t) {
  const pa_geom *g = j->g;
  return (int64_t)j->bt[b * g->MB + t / g->BS] * g->BS + t % g->BS;
}

/* Phase 1, task kv head: every row's K/V for this head, rows in order. */
static void pa_write_task(void *ctx, size_t task, int thread) {
  const pa_job *j = ctx;
  const pa_geom *g = j->g;
  const int64_t kvh = (int64_t)task, D = g->D;
  float *x = j->scratch + (size_t)thread * pa_slice_floats(g);
  float *c = x + D, *sn = c + g->rot / 2;
  const size_t es = dtype_size(g->dt);
  for (int64_t b = 0; b < g->B; b++)
    for (int64_t r = j->cu[b]; r < j->cu[b + 1]; r++) {
      const int64_t p = (int64_t)j->past[b] + (r - j->cu[b]);
      const int64_t slot = j->slots ? (int64_t)j->slots[r] : pa_slot(j, b, p);
      if (slot < 0) continue;
      const int64_t dst = (slot * g->Hkv + kvh) * D;
      const int64_t koff = pa_kv_off(g, r, kvh, 0), voff = pa_kv_off(g, r, kvh, 1);
      if (j->kn || g->rotary) {
        tensor_load_f32(j->k, koff, D, x);
        pa_prep(j, x, j->kn, p, c, sn);
        tensor_store_f32(j->kc, dst, D, x);
      } else {
        memcpy((char *)j->kc->data + (size_t)dst * es, (const char *)j->k->data + (size_t)koff * es,
               (size_t)D * es);
      }
      if (!g->latent) /* LATENT: the values are the key row's first Dv elements */
        memcpy((char *)j->vc->data + (size_t)dst * es, (const char *)j->v->data + (size_t)voff * es,
               (size_t)D * es);
    }
}

/* Phase 2, task (sequence b, kv head, chunk c of PA_CHUNK query positions): the chunk's rows of
 * every query head of the kv head's group, in tiles of up to ATTEND_MAX_ROWS rows (positions x
 * heads; at least one position, heads split when the group is larger than a tile). A row's
 * bits never depend on its tile (kernels/attend.h), so neither on the chunking nor the batch. */
static void pa_attend_task(void *ctx, size_t task, int thread) {
  const pa_job *j = ctx;
  const pa_geom *g = j->g;
  const int64_t c = (int64_t)task % j->chunks, kvh = (int64_t)task / j->chunks % g->Hkv;
  const int64_t b = (int64_t)task / j->chunks / g->Hkv, D = g->D, Dv = g->Dv;
  const int64_t r_lo = j->cu[b] + c * PA_CHUNK;
  const int64_t r_hi = j->cu[b + 1] < r_lo + PA_CHUNK ? j->cu[b + 1] : r_lo + PA_CHUNK;
  if (r_lo >= r_hi) return;
  const int64_t G = g->Hq / g->Hkv;
  /* keys and values of this kv head through sequence b's block table row (kernels/attend.h) */
  const size_t es = dtype_size(g->dt);
  const attend_kv kv_rows = {.k = (const char *)j->kc->data + (size_t)(kvh * D) * es,
                             .v = (const char *)(g->latent ? j->kc : j->vc)->data +
                                  (size_t)(kvh * D) * es,
                             .v_width = Dv,
                             .dt = g->dt,
                             .row_stride = g->Hkv * D,
                             .pages = j->bt + b * g->MB,
                             .page_rows = g->BS};
  float *work = j->scratch + (size_t)thread * pa_slice_floats(g);
  float *q = work + attend_work_floats(D, Dv), *o = q + ATTEND_MAX_ROWS * D;
  float *cs = o + ATTEND_MAX_ROWS * Dv, *sn = cs + g->rot / 2;
  float sinks[ATTEND_MAX_ROWS];
  attend_query rows[ATTEND_MAX_ROWS];
  const int64_t hn = G < ATTEND_MAX_ROWS ? G : ATTEND_MAX_ROWS; /* heads per tile */
  const int64_t pn = ATTEND_MAX_ROWS / hn;                      /* positions per tile */
  for (int64_t h0 = 0; h0 < G; h0 += hn) {
    const int64_t nh = G - h0 < hn ? G - h0 : hn;
    for (int64_t i = 0; i < nh; i++)
      sinks[i] = j->sink ? tensor_get_f32(j->sink, kvh * G + h0 + i) : 0.0f;
    for (int64_t r0 = r_lo; r0 < r_hi; r0 += pn) {
      const int64_t np = r_hi - r0 < pn ? r_hi - r0 : pn;
      int n = 0;
      for (int64_t r = r0; r < r0 + np; r++) {
        const int64_t p = (int64_t)j->past[b] + (r - j->cu[b]);
        const int64_t lo = g->window > 0 && p - g->window + 1 > 0 ? p - g->window + 1 : 0;
        for (int64_t i = 0; i < nh; i++, n++) {
          float *qi = q + n * D;
          tensor_load_f32(j->q, pa_q_off(g, r, kvh * G + h0 + i), D, qi);
          pa_prep(j, qi, j->qn, p, cs, sn);
          rows[n] = (attend_query){
              .q = qi, .lo = lo, .hi = p, .sink = j->sink ? &sinks[i] : NULL, .out = o + n * Dv};
        }
      }
      j->attend(&kv_rows, D, g->scale, g->softcap, rows, n, work);
      n = 0;
      for (int64_t r = r0; r < r0 + np; r++)
        for (int64_t i = 0; i < nh; i++, n++)
          tensor_store_f32(j->out, (r * g->Hq + kvh * G + h0 + i) * Dv, Dv, o + n * Dv);
    }
  }
}

/* Lengths, block ids, slots and positions, before anything is written. */
static ph_status pa_check_data(const pa_job *j, diag *d) {
  const pa_geom *g = j->g;
  RETURN_ERROR_IF(j->cu[0] != 0, d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: cumulative_sequence_length[0] is %d, must be 0", (int)j->cu[0]);
  RETURN_ERROR_IF(j->cu[g->B] != g->N, d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: cumulative_sequence_length ends at %d, query has N = %lld rows",
                  (int)j->cu[g->B], (long long)g->N);
  const int64_t cap = g->MB * g->BS;
  for (int64_t b = 0; b < g->B; b++) {
    const int64_t ql = (int64_t)j->cu[b + 1] - j->cu[b], past = j->past[b];
    RETURN_ERROR_IF(ql < 0, d, PH_ERR_INVALID_ARGUMENT,
                    "PagedAttention: cumulative_sequence_length decreases at %lld (%d then %d)",
                    (long long)(b + 1), (int)j->cu[b], (int)j->cu[b + 1]);
    RETURN_ERROR_IF(past < 0, d, PH_ERR_INVALID_ARGUMENT,
                    "PagedAttention: past_seqlens[%lld] = %lld is negative", (long long)b,
                    (long long)past);
    if (ql == 0) continue;
    RETURN_ERROR_IF(past + ql - 1 >= cap, d, PH_ERR_INVALID_ARGUMENT,
                    "PagedAttention: sequence %lld needs %lld positions, its block table row holds "
                    "%lld x %lld = %lld",
                    (long long)b, (long long)(past + ql), (long long)g->MB, (long long)g->BS,
                    (long long)cap);
    for (int64_t k = 0; k <= (past + ql - 1) / g->BS; k++) {
      const int32_t id = j->bt[b * g->MB + k];
      RETURN_ERROR_IF(id < 0 || id >= g->NP, d, PH_ERR_INVALID_ARGUMENT,
                      "PagedAttention: block_table[%lld][%lld] = %d is outside [0, num_blocks = "
                      "%lld)",
                      (long long)b, (long long)k, (int)id, (long long)g->NP);
    }
    if (g->rotary)
      RETURN_ERROR_IF(past + ql - 1 >= g->max_pos, d, PH_ERR_INVALID_ARGUMENT,
                      "PagedAttention: sequence %lld reaches position %lld, outside the cos/sin "
                      "cache [0, %lld)",
                      (long long)b, (long long)(past + ql - 1), (long long)g->max_pos);
  }
  for (int64_t r = 0; j->slots && r < g->N; r++)
    RETURN_ERROR_IF(j->slots[r] < -1 || j->slots[r] >= g->NP * g->BS, d, PH_ERR_INVALID_ARGUMENT,
                    "PagedAttention: slot_mapping[%lld] = %d is outside [-1, num_blocks * "
                    "block_size = %lld)",
                    (long long)r, (int)j->slots[r], (long long)(g->NP * g->BS));
  return PH_OK;
}

static ph_status pa_plan(const gnode *n, const tinfo *in, void *plan, diag *d) {
  return pa_resolve(n, in, plan, d);
}

static ph_status pa_run(const gnode *n, const tensor *const *in, tensor *const *out, op_ctx *ctx,
                        diag *d) {
  const pa_geom *gp = ctx->plan; /* pa_resolve on these shapes, once per plan */
  RETURN_ERROR_IF(!gp, d, PH_ERR_INTERNAL, "PagedAttention: run without a plan");
  const pa_geom g = *gp;
  RETURN_ERROR_IF(!out[0], d, PH_ERR_INTERNAL, "PagedAttention: output 0 is required");
  tensor *kc = n->n_outputs > 1 ? out[1] : NULL, *vc = n->n_outputs > 2 ? out[2] : NULL;
  RETURN_ERROR_IF(!g.latent && !kc != !vc, d, PH_ERR_INVALID_ARGUMENT,
                  "PagedAttention: key_cache_out and value_cache_out come together");
  const int n_threads = pool_threads(ctx->pool);
  const size_t need = pa_slice_floats(&g) * sizeof(float) * (size_t)n_threads;
  RETURN_ERROR_IF(ctx->scratch_bytes < need || (need && !ctx->scratch), d, PH_ERR_INTERNAL,
                  "PagedAttention: scratch is %zu bytes, %zu needed for %d threads",
                  ctx->scratch_bytes, need, n_threads);
  if (g.has_meta)
    FORWARD_IF_ERROR(pa_check_metadata(in[PA_IN_METADATA]->data, in[PA_IN_METADATA]->dims[0], d));

  pa_job j;
  memset(&j, 0, sizeof j);
  j.g = &g;
  j.q = in[PA_IN_QUERY];
  j.k = g.packed ? j.q : in[PA_IN_KEY];
  j.v = g.packed ? j.q : in[PA_IN_VALUE];
  j.cu = in[PA_IN_CU]->data;
  j.past = in[PA_IN_PAST]->data;
  j.bt = in[PA_IN_BLOCK_TABLE]->data;
  j.slots = g.has_slots ? in[PA_IN_SLOT_MAPPING]->data : NULL;
  j.cos = g.rotary ? in[PA_IN_COS] : NULL;
  j.sin = g.rotary ? in[PA_IN_SIN] : NULL;
  j.sink = g.has_sink ? in[PA_IN_HEAD_SINK] : NULL;
  j.qn = g.has_norm ? in[PA_IN_Q_NORM] : NULL;
  j.kn = g.has_norm ? in[PA_IN_K_NORM] : NULL;
  j.out = out[0];
  j.scratch = ctx->scratch;
  FORWARD_IF_ERROR(pa_check_data(&j, d));

  /* The caches: in place when aliased (or not requested), else a full copy first. */
  const tensor *ikc = in[PA_IN_KEY_CACHE], *ivc = g.latent ? NULL : in[PA_IN_VALUE_CACHE];
  const size_t cache_bytes = (size_t)tensor_numel(ikc) * dtype_size(g.dt);
  if (kc && kc->data != ikc->data) memcpy(kc->data, ikc->data, cache_bytes);
  if (vc && vc->data != ivc->data) memcpy(vc->data, ivc->data, cache_bytes);
  j.kc = kc ? kc : (tensor *)(uintptr_t)ikc;
  j.vc = vc ? vc : (tensor *)(uintptr_t)ivc; /* NULL in LATENT */

  if (g.N > 0) {
    int64_t longest = 0;
    for (int64_t b = 0; b < g.B; b++)
      if (j.cu[b + 1] - j.cu[b] > longest) longest = j.cu[b + 1] - j.cu[b];
    j.chunks = (longest + PA_CHUNK - 1) / PA_CHUNK;
    j.attend = attend_rows_for(kernel_variant_active());
    pool_run(ctx->pool, (size_t)g.Hkv, pa_write_task, &j);
    pool_run(ctx->pool, (size_t)(g.B * g.Hkv * j.chunks), pa_attend_task, &j);
  }
  return PH_OK;
}

const op_def op_def_paged_attention = {
    "com.microsoft", "PagedAttention", 8,      17, 1, 3, pa_infer, pa_run,
    pa_scratch,      sizeof(pa_geom),  pa_plan};
