/* builder — the node helpers every graph builder of src/models shares. See builder.h. */
#include "models/builder.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/abi_names.h"
#include "tensor/dtype.h"

wref wref_of(const st_tensor *t) {
  wref r = {t->name, t->dtype, t->shape.dims[0], t->shape.n_dims > 1 ? t->shape.dims[1] : 1,
            t->data};
  return r;
}

const st_tensor *lw(const builder *b, int layer, weight_role role) {
  return weights_layer(b->w, layer, role);
}

/* ---- node helpers: every value is named "<scope>/<node>/output_<k>" ------------------------- */

int node_n(builder *b, const char *op, const char *domain, const char *name, int n_in,
           const int *in, int n_out, int *out, int n_attrs, const gattr *attrs) {
  char node_name[256], names[GRAPH_MAX_IO][288];
  const char *out_names[GRAPH_MAX_IO];
  snprintf(node_name, sizeof node_name, "%s/%s", b->scope, name);
  for (int k = 0; k < n_out; k++) {
    if (out[k] == -2) { /* caller asks to leave this optional output absent */
      out_names[k] = NULL;
      continue;
    }
    snprintf(names[k], sizeof names[k], "%s/output_%d", node_name, k);
    out_names[k] = names[k];
  }
  return graph_add_node(b->g, op, domain, node_name, n_in, in, n_out, out_names, out, n_attrs,
                        attrs);
}

int node1(builder *b, const char *op, const char *domain, const char *name, int n_in, const int *in,
          int n_attrs, const gattr *attrs) {
  int out = -1;
  node_n(b, op, domain, name, n_in, in, 1, &out, n_attrs, attrs);
  return out;
}

int const_i64(builder *b, const char *name, int n, const int64_t *v) {
  char full[192];
  snprintf(full, sizeof full, "%s/%s", b->scope, name);
  return graph_add_initializer_copy(b->g, full, PH_DTYPE_I64,
                                    n < 0 ? shape_make(0, NULL) : shape_1d(n), v);
}

/* A graph-wide int64 constant named as GenAI's builder names its constants,
 * "/model/constants/INT64/[v0, v1, ...]" ("/model/constants/INT64/v" for a scalar, n < 0), made
 * once and shared by every node that needs the same value. */
int shared_i64(builder *b, int n, const int64_t *v) {
  char name[192];
  int at = snprintf(name, sizeof name, "/model/constants/INT64/%s", n < 0 ? "" : "[");
  for (int i = 0; i < (n < 0 ? 1 : n) && at < (int)sizeof name; i++)
    at += snprintf(name + at, sizeof name - (size_t)at, "%s%lld", i ? ", " : "", (long long)v[i]);
  if (n >= 0 && at < (int)sizeof name) snprintf(name + at, sizeof name - (size_t)at, "]");
  int id = graph_find_value(b->g, name);
  if (id >= 0) return id;
  return graph_add_initializer_copy(b->g, name, PH_DTYPE_I64,
                                    n < 0 ? shape_make(0, NULL) : shape_1d(n), v);
}

int reshape(builder *b, const char *name, int x, int n, const int64_t *dims) {
  char cname[96];
  snprintf(cname, sizeof cname, "%s/shape", name);
  int shp = const_i64(b, cname, n, dims);
  return NODE1(b, "Reshape", name, 0, NULL, x, shp);
}

/* [.., heads, dim] / [.., width] views of an activation in either layout: dense keeps the
 * [B, S] leading dims (0 = copy), packed keeps [N]. */
int split_heads(builder *b, const char *name, int x, int64_t heads, int64_t dim) {
  if (b->paged) return reshape(b, name, x, 3, (int64_t[]){0, heads, dim});
  return reshape(b, name, x, 4, (int64_t[]){0, 0, heads, dim});
}

int merge_heads(builder *b, const char *name, int x, int64_t width) {
  if (b->paged) return reshape(b, name, x, 2, (int64_t[]){0, width});
  return reshape(b, name, x, 3, (int64_t[]){0, 0, width});
}

int cast_to(builder *b, const char *name, int x, int onnx_type) {
  gattr a = attr_int("to", onnx_type);
  return NODE1(b, "Cast", name, 1, &a, x);
}

/* A weight as an initializer view, copied only when its address is misaligned for its dtype
 * (real files pack tensors at any multiple of their element size, or not even that). */
int weight_view(builder *b, const char *name, ph_dtype dt, shape s, const void *data) {
  int id = graph_find_value(b->g, name);
  if (id >= 0) return id;
  ph_dtype want = b->weight_dtype != PH_DTYPE_INVALID ? b->weight_dtype : dt;
  if (want != dt) return graph_add_initializer_lazy(b->g, name, want, s, data, dt, 0);
  if ((uintptr_t)data % dtype_size(dt) != 0)
    return graph_add_initializer_copy(b->g, name, dt, s, data);
  return graph_add_initializer_view(b->g, name, dt, s, data);
}

/* y = x W^T: MatMul with the lazily transposed weight, behind a Cast when stored below f32
 * (the prepare pass fuses both into MatMulWT reading the stored bytes). */
ph_dtype stored_as(const builder *b, ph_dtype checkpoint) {
  return b->weight_dtype != PH_DTYPE_INVALID ? b->weight_dtype : checkpoint;
}

/* ---- quantized linear layers (docs/quantization.md) ------------------------------------------ */

/* 1 when `name` contains an entry of the comma-separated skip list (empty entries match
 * nothing; an entry may be of any length). */
static int skip_matches(const char *skip, const char *name) {
  if (!skip || !name) return 0;
  for (const char *at = skip; *at;) {
    const char *end = strchr(at, ',');
    const size_t n = end ? (size_t)(end - at) : strlen(at);
    for (const char *p = name; n > 0 && *p; p++)
      if (strncmp(p, at, n) == 0) return 1;
    if (!end) break;
    at = end + 1;
  }
  return 0;
}

/* The bound tensor `name` is, or is derived from ("<tensor name>.<suffix>"), and its role; NULL
 * when none. Searches the globals, every layer and the MTP head. */
static const st_tensor *source_tensor(const model_weights *w, const char *name, weight_role *role) {
  const st_tensor *const *tables[3] = {w->global, w->mtp_global, w->layer};
  const int counts[3] = {W_ROLE_COUNT, W_ROLE_COUNT, w->layer ? w->n_layers * W_ROLE_COUNT : 0};
  for (int t = 0; t < 3; t++)
    for (int i = 0; i < counts[t]; i++) {
      const st_tensor *x = tables[t][i];
      if (!x || !x->name) continue;
      const size_t n = strlen(x->name);
      if (strncmp(name, x->name, n) == 0 && (name[n] == '\0' || name[n] == '.')) {
        *role = (weight_role)(i % W_ROLE_COUNT);
        return x;
      }
    }
  return NULL;
}

/* One source of a weight: selected when its role is quantizable and its name matches no skip
 * entry. */
static int source_selected(const builder *b, const st_tensor *t, weight_role role) {
  return t && weight_role_quantizable(role) && !skip_matches(b->quant.skip, t->name);
}

int builder_quantizes(const builder *b, const char *name, int lm_head) {
  if (b->quant.bits == 0 || !name || skip_matches(b->quant.skip, name)) return 0;
  if (lm_head) return !skip_matches(b->quant.skip, "lm_head.weight");
  weight_role role = W_ROLE_COUNT;
  const st_tensor *t = source_tensor(b->w, name, &role);
  if (t) return source_selected(b, t, role);
  /* DeepSeek's absorbed projections (deepseek.c absorbed_weights): products of the layer's
   * query (or q_b) projection or o_proj with kv_b_proj, all quantizable by role */
  const int q = strstr(name, "self_attn.q_absorbed.weight") != NULL;
  const int o = strstr(name, "self_attn.o_absorbed.weight") != NULL;
  if ((!q && !o) || b->layer < 0 || b->layer >= b->w->n_layers) return 0;
  const weight_role first = o ? W_MLA_O : (lw(b, b->layer, W_MLA_Q_B) ? W_MLA_Q_B : W_MLA_Q);
  return source_selected(b, lw(b, b->layer, first), first) &&
         source_selected(b, lw(b, b->layer, W_MLA_KV_B), W_MLA_KV_B);
}

/* y = x W^T as com.microsoft::MatMulNBits over W quantized lazily (graph_add_initializer_quant):
 * B, scales in the io dtype (A's, as the schema wants), zero points when asymmetric. A weight
 * used twice shares its initializers. */
static int linear_nbits(builder *b, const char *name, int x, wref w) {
  const quant_params p = {b->quant.bits, b->quant.block_size, !b->quant.asymmetric, b->io};
  static const char *const suffix[4] = {"", "_Q%d", "_scales", "_zero_points"};
  int in[4] = {x, -1, -1, -1};
  for (int part = GRAPH_QUANT_B; part <= (p.symmetric ? GRAPH_QUANT_SCALES : GRAPH_QUANT_ZP);
       part++) {
    char sfx[32], qname[256];
    snprintf(sfx, sizeof sfx, suffix[part], p.bits);
    snprintf(qname, sizeof qname, "%s%s", w.name, sfx);
    int id = graph_find_value(b->g, qname);
    if (id < 0)
      id = graph_add_initializer_quant(b->g, qname, (graph_quant_part)part, &p, w.rows, w.cols,
                                       w.data, w.dtype);
    in[part] = id;
  }
  const gattr attrs[5] = {attr_int("K", w.cols), attr_int("N", w.rows), attr_int("bits", p.bits),
                          attr_int("block_size", p.block),
                          attr_int("accuracy_level", b->quant.accuracy_level)};
  char mname[128];
  snprintf(mname, sizeof mname, "%s/MatMulNBits", name);
  return node1(b, "MatMulNBits", "com.microsoft", mname, p.symmetric ? 3 : 4, in, 5, attrs);
}

/* y = x W^T: MatMul with the lazily transposed (and converted) weight, behind a Cast when it is
 * stored below f32 (the prepare pass fuses both into MatMulWT reading the checkpoint's bytes);
 * or MatMulNBits when the weight is quantized. */
static int linear_as(builder *b, const char *name, int x, wref w, int lm_head) {
  if (b->quant.bits && builder_quantizes(b, w.name, lm_head)) return linear_nbits(b, name, x, w);
  char tname[224];
  snprintf(tname, sizeof tname, "%s.T", w.name);
  ph_dtype dt = stored_as(b, w.dtype);
  int wt = graph_find_value(b->g, tname);
  if (wt < 0) {
    const void *src = w.data;
    if ((uintptr_t)src % dtype_size(w.dtype) != 0) {
      void *copy = NULL;
      char cname[240];
      snprintf(cname, sizeof cname, "%s.aligned", w.name);
      if (graph_add_initializer_alloc(b->g, cname, w.dtype, shape_2d(w.rows, w.cols), &copy) < 0)
        return -1;
      memcpy(copy, src, (size_t)(w.rows * w.cols) * dtype_size(w.dtype));
      src = copy;
    }
    wt = graph_add_initializer_lazy(b->g, tname, dt, shape_2d(w.cols, w.rows), src, w.dtype, 1);
  }
  if (dt != b->io) {
    char cname[128];
    snprintf(cname, sizeof cname, "%s/Cast", name);
    wt = cast_to(b, cname, wt, dtype_to_onnx(b->io));
  }
  char mname[128];
  snprintf(mname, sizeof mname, "%s/MatMul", name);
  return NODE1(b, "MatMul", mname, 0, NULL, x, wt);
}

int linear(builder *b, const char *name, int x, wref w) { return linear_as(b, name, x, w, 0); }

/* An initializer of dtype dt computed in f32 from a small checkpoint tensor and rounded once:
 * (1+w) RMSNorm gains folded once (model-math §7.3), -exp(A_log) for LinearAttentionGate's
 * decay_scale, copies of conv taps, dt_bias and the GDN norm gain. */
int const_named(builder *b, const st_tensor *t, const char *name, f32_transform tf, ph_dtype dt) {
  int id = graph_find_value(b->g, name);
  if (id >= 0) return id;
  int64_t n = shape_numel(&t->shape);
  float *tmp = malloc((size_t)(n > 0 ? n : 1) * sizeof *tmp);
  void *dst = NULL;
  id = tmp ? graph_add_initializer_alloc(b->g, name, dt, t->shape, &dst) : -1;
  if (id >= 0 && dtype_convert(tmp, PH_DTYPE_F32, t->data, t->dtype, (size_t)n, NULL) == PH_OK) {
    for (int64_t i = 0; i < n; i++) {
      if (tf == F32_ONE_PLUS) tmp[i] = 1.0f + tmp[i];
      if (tf == F32_NEG_EXP) tmp[i] = -expf(tmp[i]);
    }
    if (dtype_convert(dst, dt, tmp, PH_DTYPE_F32, (size_t)n, NULL) != PH_OK) id = -1;
  } else {
    id = -1;
  }
  free(tmp);
  return id;
}

int const_as(builder *b, const st_tensor *t, const char *suffix, f32_transform tf, ph_dtype dt) {
  char name[224];
  snprintf(name, sizeof name, "%s%s", t->name, suffix);
  return const_named(b, t, name, tf, dt);
}

/* f32 constants (gate parameters the ops require in f32) and io-dtype ones (norm gains and conv
 * taps, which ONNX Runtime's kernels take in the activation dtype). */
int f32_const(builder *b, const st_tensor *t, const char *suffix, f32_transform tf) {
  return const_as(b, t, suffix, tf, PH_DTYPE_F32);
}

int io_const(builder *b, const st_tensor *t, const char *suffix, f32_transform tf) {
  return const_as(b, t, suffix, tf, b->io);
}

int fill_named(builder *b, const char *full, int64_t n, float v, ph_dtype dt) {
  void *dst = NULL;
  int id = graph_add_initializer_alloc(b->g, full, dt, shape_1d(n), &dst);
  for (int64_t i = 0; id >= 0 && i < n; i++)
    if (dtype_convert((char *)dst + (size_t)i * dtype_size(dt), dt, &v, PH_DTYPE_F32, 1, NULL) !=
        PH_OK)
      return -1;
  return id;
}

int f32_fill(builder *b, const char *name, int64_t n, float v) {
  char full[192];
  snprintf(full, sizeof full, "%s/%s", b->scope, name);
  return fill_named(b, full, n, v, PH_DTYPE_F32);
}

int rms_norm(builder *b, const char *name, int x, int gain, float eps) {
  gattr a[2] = {attr_int("axis", -1), attr_float("epsilon", eps)};
  return NODE1(b, "SimplifiedLayerNormalization", name, 2, a, x, gain);
}

/* Returns the normalized output; *sum receives input + skip (the new residual stream). */
int skip_rms_norm(builder *b, const char *name, int x, int skip, int gain, float eps, int *sum) {
  gattr a = attr_float("epsilon", eps);
  int out[4] = {-1, -2, -2, -1};
  node_n(b, "SkipSimplifiedLayerNormalization", "com.microsoft", name, 3, (int[]){x, skip, gain}, 4,
         out, 1, &a);
  *sum = out[3];
  return out[0];
}

/* cos_cache / sin_cache [context, rot/2], f32 in every layout and io dtype: RoPE is computed in
 * f32 (GenAI's builder casts around it the same way, docs/genai-builder.md §1.2), so a
 * half-precision graph rounds once after the rotation instead of also rounding the angles' cos and
 * sin. */
void rotary_caches(builder *b, const double *inv_freq, double attention_factor, ph_dtype dt) {
  const hf_config *c = b->c;
  int64_t half = c->rope.rotary_dim / 2;
  void *cs_p = NULL, *sn_p = NULL;
  b->cos =
      graph_add_initializer_alloc(b->g, ABI_COS_CACHE, dt, shape_2d(b->max_context, half), &cs_p);
  b->sin =
      graph_add_initializer_alloc(b->g, ABI_SIN_CACHE, dt, shape_2d(b->max_context, half), &sn_p);
  if (!cs_p || !sn_p) return;
  const size_t es = dtype_size(dt);
  /* angle p * inv_freq_j in double (the golden reference is f64; HF's single fp32 multiply
   * differs only in the last bits, model-math §7.15); NULL inv_freq: theta^(-2j/rot); rounded
   * once to f32, then (f16 / bf16 caches) once more */
  for (int64_t p = 0; p < b->max_context; p++)
    for (int64_t j = 0; j < half; j++) {
      double inv = inv_freq ? inv_freq[j]
                            : pow(c->rope.theta, -2.0 * (double)j / (double)c->rope.rotary_dim);
      double ang = (double)p * inv;
      float cv = (float)(cos(ang) * attention_factor), sv = (float)(sin(ang) * attention_factor);
      size_t at = (size_t)(p * half + j) * es;
      dtype_convert((char *)cs_p + at, dt, &cv, PH_DTYPE_F32, 1, NULL);
      dtype_convert((char *)sn_p + at, dt, &sv, PH_DTYPE_F32, 1, NULL);
    }
}

/* Dense GroupQueryAttention lengths from attention_mask [B, P+S]: seqlens_k = sum - 1 (i32 [B])
 * and total_sequence_length = P+S (i32 scalar), into b->seqlens_k / b->total. */
void attention_lengths(builder *b, int mask) {
  snprintf(b->scope, sizeof b->scope, "/model/attn_mask");
  int64_t axis1 = 1, one = 1;
  gattr keep = attr_int("keepdims", 0);
  int sum = NODE1(b, "ReduceSum", "ReduceSum", 1, &keep, mask, const_i64(b, "axes", 1, &axis1));
  int minus1 = NODE1(b, "Sub", "Sub", 0, NULL, sum, const_i64(b, "one", -1, &one));
  b->seqlens_k = cast_to(b, "seqlens_k", minus1, ONNX_INT32);
  int shp = NODE1(b, "Shape", "Shape", 0, NULL, mask);
  int total = NODE1(b, "Gather", "Gather", 0, NULL, shp, const_i64(b, "index1", -1, &axis1));
  b->total = cast_to(b, "total_sequence_length", total, ONNX_INT32);
}

void packed_batch_inputs(builder *b) {
  static const char *const bt[] = {ABI_DIM_BATCH, ABI_DIM_MAX_BLOCKS};
  static const char *const cs[] = {ABI_DIM_BATCH_PLUS_1};
  static const char *const pl[] = {ABI_DIM_BATCH};
  graph *g = b->g;
  b->block_table = graph_add_input(g, ABI_BLOCK_TABLE, PH_DTYPE_I32, 2, (int64_t[]){-1, -1}, bt);
  b->cu = graph_add_input(g, ABI_CU_SEQLENS, PH_DTYPE_I32, 1, (int64_t[]){-1}, cs);
  b->past_lens = graph_add_input(g, ABI_PAST_SEQLENS, PH_DTYPE_I32, 1, (int64_t[]){-1}, pl);
}

int embed_tokens(builder *b, int ids) {
  snprintf(b->scope, sizeof b->scope, "/model/embed_tokens");
  const st_tensor *embed = b->w->global[W_EMBED];
  int ew = weight_view(b, embed->name, embed->dtype, embed->shape, embed->data);
  int x = NODE1(b, "Gather", "Gather", 0, NULL, ew, ids);
  if (stored_as(b, embed->dtype) != b->io) x = cast_to(b, "Cast", x, dtype_to_onnx(b->io));
  return x;
}

void logit_rows_input(builder *b) {
  static const char *const rs[] = {ABI_DIM_LOGIT_ROWS};
  b->logit_rows_in =
      b->logit_rows ? graph_add_input(b->g, ABI_LOGIT_ROWS, PH_DTYPE_I64, 1, (int64_t[]){-1}, rs)
                    : -1;
}

/* abi §8.2 prune_lm_head: only each sequence's last row reaches the LM head: rows cu[1:] - 1 of
 * x [N, H] -> [B, H]. */
int last_rows(builder *b, int x) {
  snprintf(b->scope, sizeof b->scope, "/model/prune_lm_head");
  int64_t one = 1, big = INT64_MAX, zero = 0;
  int ends = NODE1(b, "Slice", "Slice", 0, NULL, b->cu, const_i64(b, "starts", 1, &one),
                   const_i64(b, "ends", 1, &big), const_i64(b, "axes", 1, &zero));
  int ends64 = cast_to(b, "Cast", ends, 7 /* INT64 */);
  int last = NODE1(b, "Sub", "Sub", 0, NULL, ends64, const_i64(b, "one", -1, &one));
  gattr ax0 = attr_int("axis", 0);
  return node1(b, "Gather", "", "Gather", 2, (int[]){x, last}, 1, &ax0);
}

/* Final norm (closing the last residual add), the LM head, logits in f32. */
int lm_head(builder *b, int branch, int residual, f32_transform final_norm) {
  const hf_config *c = b->c;
  snprintf(b->scope, sizeof b->scope, "/model");
  int final_gain = io_const(b, b->w->global[W_FINAL_NORM],
                            final_norm == F32_ONE_PLUS ? ".1p" : ".io", final_norm);
  int x = skip_rms_norm(b, "norm", branch, residual, final_gain, (float)c->rms_norm_eps, &residual);
  b->hidden = x;
  if (b->prune_lm_head) x = last_rows(b, x);
  if (b->logit_rows) { /* the rows the caller names: gathered whole, so each is the same bits */
    snprintf(b->scope, sizeof b->scope, "/model/logit_rows");
    gattr ax0 = attr_int("axis", 0);
    x = node1(b, "Gather", "", "Gather", 2, (int[]){x, b->logit_rows_in}, 1, &ax0);
  }
  /* §7.16: tied embeddings: the embedding matrix is the LM head */
  const st_tensor *head = b->w->global[W_LM_HEAD] ? b->w->global[W_LM_HEAD] : b->w->global[W_EMBED];
  b->scope[0] = '\0';
  int logits = linear_as(b, "/lm_head", x, wref_of(head), 1);
  /* logits are f32 whatever the io dtype (Mobius requires it; GenAI reads both) */
  if (b->io != PH_DTYPE_F32) {
    snprintf(b->scope, sizeof b->scope, "/lm_head");
    logits = cast_to(b, "Cast", logits, ONNX_FLOAT);
  }
  return logits;
}

/* model_options.quant checked, defaults applied into *out (bits 4|8, block a power of two in
 * 16..256 (0: 32), accuracy_level 0..4 (0: 4)). */
static ph_status check_quant(const ph_quant_params *q, ph_quant_params *out, diag *d) {
  RETURN_ERROR_IF(q->bits != 4 && q->bits != 8, d, PH_ERR_INVALID_ARGUMENT,
                  "quant bits %d: expected 4 or 8 (0: no quantization)", (int)q->bits);
  const int32_t block = q->block_size ? q->block_size : 32;
  RETURN_ERROR_IF(block < 16 || block > 256 || (block & (block - 1)), d, PH_ERR_INVALID_ARGUMENT,
                  "quant block_size %d: expected a power of two in 16..256", (int)q->block_size);
  RETURN_ERROR_IF(q->accuracy_level < 0 || q->accuracy_level > 4, d, PH_ERR_INVALID_ARGUMENT,
                  "quant accuracy_level %d: expected 0..4 (0: 4)", (int)q->accuracy_level);
  RETURN_ERROR_IF(q->asymmetric != 0 && q->asymmetric != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "quant asymmetric %d: expected 0 or 1", (int)q->asymmetric);
  *out = *q;
  out->block_size = block;
  out->accuracy_level = q->accuracy_level ? q->accuracy_level : 4;
  return PH_OK;
}

/* The builder for opt (NULL: the defaults), its layout options checked. */
ph_status builder_init(builder *b, graph *g, const hf_config *c, const model_weights *w,
                       const model_options *opt, int64_t default_context, diag *d) {
  *b = (builder){.g = g,
                 .c = c,
                 .w = w,
                 .weight_dtype = opt ? opt->weight_dtype : PH_DTYPE_INVALID,
                 .rotary_ops = opt && opt->rotary == MODEL_ROTARY_OPS,
                 .rope_cos = -1,
                 .rope_sin = -1,
                 .su_count = -1,
                 .su_active = -1,
                 .layer = -1,
                 .hidden = -1};
  /* rotary cache rows: the caller's context bound, else the default */
  b->max_context = opt && opt->max_context > 0 ? opt->max_context : default_context;
  b->paged = opt && opt->paged;
  b->io = opt && opt->io_dtype != PH_DTYPE_INVALID ? opt->io_dtype : PH_DTYPE_F32;
  b->prune_lm_head = opt && opt->prune_lm_head;
  b->logit_rows = opt && opt->logit_rows;
  b->logit_rows_in = -1;
  b->block_size = opt && opt->block_size > 0 ? opt->block_size : 16;
  RETURN_ERROR_IF(b->paged && (b->block_size < 16 || (b->block_size & (b->block_size - 1))), d,
                  PH_ERR_INVALID_ARGUMENT, "block size %lld: must be a power of two >= 16",
                  (long long)b->block_size);
  RETURN_ERROR_IF(b->weight_dtype != PH_DTYPE_INVALID && b->weight_dtype != PH_DTYPE_F32 &&
                      b->weight_dtype != PH_DTYPE_F16 && b->weight_dtype != PH_DTYPE_BF16,
                  d, PH_ERR_UNSUPPORTED, "weight dtype %s: expected f32, f16 or bf16",
                  ph_dtype_name(b->weight_dtype));
  RETURN_ERROR_IF(b->io != PH_DTYPE_F32 && b->io != PH_DTYPE_F16 && b->io != PH_DTYPE_BF16, d,
                  PH_ERR_UNSUPPORTED, "activation dtype %s: expected f32, f16 or bf16",
                  ph_dtype_name(b->io));
  RETURN_ERROR_IF(!b->paged && b->io != PH_DTYPE_F32, d, PH_ERR_UNSUPPORTED,
                  "activation dtype %s: the dense layout runs f32 activations (ONNX Runtime's CPU "
                  "LinearAttention and CausalConvWithState are float only); use the paged layout",
                  ph_dtype_name(b->io));
  RETURN_ERROR_IF(!b->paged && opt && opt->output_hidden, d, PH_ERR_INVALID_ARGUMENT,
                  "output_hidden applies to the packed layout only");
  RETURN_ERROR_IF(b->logit_rows && (!b->paged || b->prune_lm_head), d, PH_ERR_INVALID_ARGUMENT,
                  "logit_rows applies to the paged layout without prune_lm_head");
  RETURN_ERROR_IF(!b->paged && (b->prune_lm_head || (opt && opt->block_size)), d,
                  PH_ERR_INVALID_ARGUMENT, "%s applies to the paged layout only",
                  b->prune_lm_head ? "prune_lm_head" : "block_size");
  RETURN_ERROR_IF(opt && opt->linear_op != MODEL_LINEAR_ATTENTION &&
                      opt->linear_op != MODEL_GATED_DELTA_NET,
                  d, PH_ERR_INVALID_ARGUMENT, "unknown linear_op %d", (int)opt->linear_op);
  b->dense_gdn = !b->paged && opt && opt->linear_op == MODEL_GATED_DELTA_NET;
  const int32_t cap = opt ? opt->state_update_capacity : 0;
  RETURN_ERROR_IF(cap < 0 || cap > ABI_SU_MAX_CAPACITY, d, PH_ERR_INVALID_ARGUMENT,
                  "state_update_capacity %d: expected 0..%d", (int)cap, ABI_SU_MAX_CAPACITY);
  RETURN_ERROR_IF(cap > 0 && !b->paged, d, PH_ERR_INVALID_ARGUMENT,
                  "state_update_capacity %d requires the paged layout", (int)cap);
  if (opt && opt->quant.bits) FORWARD_IF_ERROR(check_quant(&opt->quant, &b->quant, d));
  /* compact updates capture linear layers' state: nothing to capture without one (abi §8.4) */
  b->su_capacity = model_state_update_capacity(c, opt);
  return PH_OK;
}

ph_status builder_finish(builder *b, graph **out, diag *d) {
  graph *g = b->g;
  ph_status s = graph_status(g);
  if (s != PH_OK) {
    diag_copy(d, &g->err);
    graph_free(g);
    return s;
  }
  if ((s = graph_finalize(g, d)) != PH_OK) {
    graph_free(g);
    return diag_prefix(d, "building the %s %s graph", b->paged ? "packed" : "dense",
                       b->c->model_type);
  }
  *out = g;
  return PH_OK;
}

/* ---- for moe.c (QMoE experts, added by the qmoe slice) ------------------------------------- */

int builder_skips(const builder *b, const char *name) { return skip_matches(b->quant.skip, name); }
