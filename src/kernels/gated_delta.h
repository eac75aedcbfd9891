/* gated_delta — the gated delta rule's compute core, shared by LinearAttention (dense, K-major
 * state, per-head or per-key-dim decay, GQA on either side) and GatedDeltaNet (packed varlen,
 * V-major state at its boundary, one query per value head).
 *
 * One call works on one (sequence, value head) pair: single-threaded, in a workspace the caller
 * carved (gated_delta_ws_layout) and filled. The op owns everything around it: validating,
 * reading its tensors (gate and beta activations, l2 norm, layout) into the workspace rows,
 * the state's boundary layout and dtype, where each output row goes, and the split over
 * threads. The math is spec/abi.md §2.4 (decay first, delta from the decayed state, write, read
 * after the write, scale on the read) and its chunked WY/UT form of spec/model-math.md §2
 * (docs/ops-linear.md, docs/ops-gdn.md).
 *
 * Letters: Dk key width, Dv value width, G query rows per value head, C the chunk stride of the
 * workspace (the longest chunk the call can see), L a chunk's length (1 <= L <= C), Dg the decay
 * width (Dk per key dim, else 1).
 *
 * Numerics: fp32 throughout, γ in double; every sum in a fixed order that depends on the shapes
 * only (kernels/vec.h), so a pair's results do not depend on the batch or the thread. Chunks
 * are anchored by the caller (at the sequence's first token), never by the batch.
 */
#ifndef PH_KERNELS_GATED_DELTA_H
#define PH_KERNELS_GATED_DELTA_H

#include <stddef.h>
#include <stdint.h>

/* The shape of one pair's work; the same for every pair of an op call. */
typedef struct gated_delta_shape {
  int64_t Dk, Dv;
  int64_t G;   /* query rows per value head (>= 1) */
  int64_t C;   /* workspace chunk stride (>= 1) */
  int per_dim; /* 1: decay per key dim (gl rows of Dk), 0: per head (gl rows of 1) */
  int gated;   /* decay applies (else gl is 0) */
  int delta;   /* delta rule: retrieve, subtract, scale by β */
  float scale; /* on every read */
} gated_delta_shape;

/* One thread's workspace. The caller fills rows i < L of K, V, Q, beta and gl; the core uses
 * the rest. S is the running state, K-major [Dk][Dv] (row stride Dv), updated in place. */
typedef struct gated_delta_ws {
  float *S;    /* [Dk][max(Dv, s_min_cols)] the state (and room for a caller's tile) */
  float *K;    /* [C][Dk]    keys; after a chunk, e^{γ_L-γ_s} k_s */
  float *V;    /* [C][Dv]    values; overwritten in place with U (what each token writes) */
  float *Q;    /* [G][C][Dk] queries: row i of query group jq at (jq * C + i) * Dk */
  float *A;    /* [C][C]     β_t e^{γ_t-γ_s} k_t·k_s for s < t (delta rules only) */
  float *QK;   /* [G][C][C]  e^{γ_t-γ_s} q_t·k_s for s <= t */
  float *beta; /* [C]        the effective β of each token (1 without the delta rule) */
  float *gl;   /* [C][Dg]    the log decay g of each token (0 when not gated) */
  float *eg;   /* [C][Dg]    e^{γ_t}: decay from the chunk start through token t */
  double *gam; /* [C][Dg]    γ_t = Σ_{s<=t} g_s, in double so differences of sums stay exact */
  float *t0;   /* [max(Dk,Dv)] */
  float *t1;   /* [Dv] */
  float *Kt; /* [Dk][C]    the blocked chunk's keys transposed, then e^{γ_L-γ_s} k_s transposed */
  float *O;  /* [G][C][Dv] the blocked chunk's output rows */
} gated_delta_ws;

/* Bytes of one workspace for shape s, every array 64-byte aligned; carves it from base into ws
 * when base is not NULL. S gets max(Dv, s_min_cols) columns (s_min_cols >= 1: a caller's
 * kernel may use S as a [Dk][s_min_cols] tile). */
size_t gated_delta_ws_layout(const gated_delta_shape *s, int64_t s_min_cols, char *base,
                             gated_delta_ws *ws);

/* Receives output row o [Dv] (scaled) of query group jq, token t of the call (0 <= t < L). */
typedef void (*gated_delta_store_fn)(void *ctx, int64_t jq, int64_t t, const float *o);

/* One token (row 0 of the workspace, loaded with query stride C), the recurrent form: decay S,
 * retrieve and correct (delta), write, then read once per query group. */
void gated_delta_token(const gated_delta_shape *sh, const gated_delta_ws *ws,
                       gated_delta_store_fn store, void *ctx);

/* One chunk of L tokens (rows 0..L-1 loaded), the WY/UT form, from the state in ws->S to the
 * state after the chunk, in place (K, V, Q, A, QK, Kt, O are scratch: their contents after the
 * call are unspecified). With γ_t the decay summed from the chunk start through t:
 *   (I + A) U = β⊙V − (β⊙e^γ⊙K) S0,     A_ts = β_t (k_t · e^{γ_t−γ_s}⊙k_s)  for s < t
 *   o_t = scale (S0^T (e^{γ_t}⊙q_t) + Σ_{s<=t} (q_t · e^{γ_t−γ_s}⊙k_s) u_s)
 *   S_end = e^{γ_L}⊙S0 + Σ_s (e^{γ_L−γ_s}⊙k_s) u_s^T
 * Log decays are clamped at GATED_DELTA_G_FLOOR and every exponent is a sum of g over (s, t]
 * with s <= t, so for g <= 0 every factor is in [0, 1] and nothing overflows. */
void gated_delta_chunk(const gated_delta_shape *sh, const gated_delta_ws *ws, int64_t L,
                       gated_delta_store_fn store, void *ctx);

/* A variant of gated_delta_chunk (the dispatch table's gated_delta_chunk column). */
typedef void (*gated_delta_chunk_fn)(const gated_delta_shape *sh, const gated_delta_ws *ws,
                                     int64_t L, gated_delta_store_fn store, void *ctx);

/* The chunk's decays, shared by every chunk variant: γ_t = Σ_{s<=t} max(g_s, GATED_DELTA_G_FLOOR)
 * in double (ws->gam) and e^{γ_t} = expf((float)γ_t) (ws->eg), rows t < L. */
void gated_delta_chunk_decays(const gated_delta_shape *sh, const gated_delta_ws *ws, int64_t L);

/* gated_delta_chunk as blocked matrix products in AVX-512 F (kernels/gated_delta_chunk_avx512.c),
 * the same math in another summation order (register tiles of 4 rows x 64 columns, every sum over
 * its inner index in increasing order, one fused multiply-add per term); the order depends on
 * the shape and L only. The pairwise products, the right-hand side β⊙V − (β⊙e^γ⊙K) S0, the
 * triangular solve (forward substitution, row tiles of 4 in increasing order), the outputs
 * (e^γ⊙Q) S0 + QK U and the end state e^{γ_L} S0 + K'^T U are each one blocked product.
 * Per-key-dim decay forms its pairwise products as the reference does (the decay sits inside
 * the dot product). Absent (the reference runs) off x86. */
void gated_delta_chunk_avx512(const gated_delta_shape *sh, const gated_delta_ws *ws, int64_t L,
                              gated_delta_store_fn store, void *ctx);

/* Log decays below this are clamped: e^-1e4 is 0 in f32 either way, and the clamp keeps the
 * chunk's cumulative sums finite so that differences of them never become inf - inf = NaN. */
#define GATED_DELTA_G_FLOOR (-1.0e4)

/* ---- one-token step on a V-major state (GatedDeltaNet's decode) ----------------------------- */

/* One decode step of one pair, V-major state in and out, everything the kernels need. */
typedef struct gated_delta_dec {
  const float *src; /* [Dv][Dk] V-major initial state; NULL: zeros */
  float *dst;       /* [Dv][Dk] V-major final state; NULL: not wanted; may equal src */
  const float *k;   /* [Dk] key (normalised if asked) */
  const float *q;   /* [Dk] query */
  const float *v;   /* [Dv] value */
  float *o;         /* [Dv] output, scaled */
  float *u;         /* [Dv] the delta row the step wrote (β(v − k·S), or v); NULL: not wanted */
  float *tile;      /* [Dk][8] scratch: the decayed state of eight value rows, K-major */
  float a, beta, scale;
  int gated, delta;
  int64_t Dk, Dv;
} gated_delta_dec;

/* A whole decode step: every value row of p. */
typedef void (*gated_delta_decode_fn)(const gated_delta_dec *p);

/* The reference for value rows [c0, c0+w), w <= 8, the order of spec/abi.md §2.4 with the
 * update of §2.5: x_rc = S_rc * a (one rounding; skipped when not gated), pred_c = Σ_r k_r x_rc
 * in increasing r (each product rounded, then added), u = β (v − pred) (u = v without the delta
 * rule), S'_rc = fmaf(k_r, u_c, x_rc) (one fused multiply-add: exactly the capsule's replay
 * rule), o_c = Σ_r q_r S'_rc in increasing r (products rounded), o *= scale. The rows are read
 * whole before any is written, so dst may equal src. Not the bits of gated_delta_token (that one
 * adds k_r u_c rounded): GatedDeltaNet runs every one-token step through this kernel or its
 * variants, LinearAttention keeps gated_delta_token. */
void gated_delta_decode_cols_ref(const gated_delta_dec *p, int64_t c0, int64_t w);

/* gated_delta_decode_cols_ref over every value row, eight at a time: the scalar variant's
 * decode (a gated_delta_decode_fn). */
void gated_delta_decode_ref(const gated_delta_dec *p);

/* gated_delta_decode_cols_ref for every value row, eight rows per step with lane l = row c0 + l,
 * in AVX2 with FMA for the state update only (kernels/gated_delta_avx2.c): bit-identical to the
 * reference. Reads the V-major state once and writes it once. Absent (NULL in the table) off
 * x86. */
void gated_delta_decode_f32_avx2(const gated_delta_dec *p);

/* The same sixteen value rows per step in AVX-512 F (kernels/gated_delta_avx512.c), its tile on
 * the stack (p->tile is used only by the rows it hands to the AVX2 kernel: the last Dv % 16, a
 * Dv below 16, a Dk above 256): bit-identical to the reference. Absent off x86. */
void gated_delta_decode_f32_avx512(const gated_delta_dec *p);

#endif /* PH_KERNELS_GATED_DELTA_H */
