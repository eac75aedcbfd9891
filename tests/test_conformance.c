/* Conformance of the packed paged export with the pinned ABI (../shared/spec/abi.md §1-§3 and
 * §8), table-driven: the exported model.onnx is read back as a protobuf and every
 * PagedAttention, GatedDeltaNet and VarlenCausalConvWithState node is checked slot by slot
 * against the tables below (which graph input, which initializer, which node output or empty,
 * in which dtype), every attribute (the exact set, names, types and values, defaulted ones the
 * builder writes included), the Casts in front of GatedDeltaNet's gates, the zero conv bias, the
 * rotary form of the target, the graph I/O of §8.1/§8.2 (names, dtypes, dims), the present.*
 * names the cache outputs alias, the logits dtype, and the genai_config state groups and
 * provider options against the graph's layers.
 *
 * Dtypes of values inside the graph are not in model.onnx (no value_info): they come from the
 * graph export_build returns for the same options, the graph the writer serialized; the test
 * first checks that the file's nodes are that graph's nodes, in order, with the same names.
 *
 * Cases: a Qwen3.8-27B-shaped config exported --config-only (default CUDA target: f16; and
 * --io-dtype bf16), the golden checkpoints with weights (CUDA default, and the CPU target in
 * f32, which keeps the fused rotary op), and the DeepSeek-V3 MoE golden checkpoint's LATENT
 * package (abi §1.8/§9.1: every slot and attribute of its PagedAttention nodes, its graph I/O,
 * genai_config and MoE nodes; CUDA f16 and CPU f32). Packages with compact state updates
 * (state_update_capacity 4, 7, 8) are checked against the C > 0 tables: the capture inputs and
 * outputs, the capacity attribute, their genai_config keys. Changing any attribute, slot or dtype
 * in the builder fails here. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx.pb-c.h"

#include "base/fmap.h"
#include "check.h"
#include "io/genai_config.h"
#include "model_testing.h"
#include "models/export.h"
#include "models/model.h"
#include "tensor/dtype.h"

static char g_tmp[512];

/* ---- what a slot must hold ------------------------------------------------------------------ */

typedef enum slot_kind {
  S_EMPTY,  /* absent optional input: an empty name (the slot keeps later slots in place) */
  S_INPUT,  /* a graph input named `name` (%d = the layer) */
  S_OUTPUT, /* a graph output named `name` (%d = the layer) */
  S_NODE,   /* an intermediate produced by another node (not a graph input, not an initializer) */
  S_CAST32, /* produced by a Cast to float whose input is a node output (io != f32), or that
               node output itself (io == f32): abi §8.3 step 4 */
  S_INIT,   /* an initializer */
  S_ZEROS,  /* an initializer whose every element is zero (the conv bias, abi §3) */
} slot_kind;

typedef enum slot_dtype { D_IO, D_F32, D_I32 } slot_dtype;

typedef struct slot {
  slot_kind kind;
  const char *name;
  slot_dtype dtype;
  int rank; /* 0: not checked */
} slot;

typedef struct attr_want {
  const char *name;
  int type; /* ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT / FLOAT / STRING */
  int64_t i;
  float f;
  const char *s;
  int head_scale; /* FLOAT: the value is 1/sqrt(head_dim) of the model, not f */
} attr_want;

#define A_INT(n, v)                                                                                \
  { n, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, v, 0.0f, NULL, 0 }
#define A_FLOAT(n, v)                                                                              \
  { n, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT, 0, v, NULL, 0 }
#define A_STR(n, v)                                                                                \
  { n, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, 0, 0.0f, v, 0 }
#define A_HEAD_SCALE(n)                                                                            \
  { n, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT, 0, 0.0f, NULL, 1 }

typedef struct op_table {
  const char *op;
  int n_in, n_out;
  slot in[17], out[3];
  int n_attrs;
  attr_want attrs[12];
} op_table;

/* num_heads / kv_num_heads in a table: the model's head counts; kv_lora_rank (LATENT's
 * v_head_size and rotary_offset) and the config's RoPE pairing (rope_interleave) */
#define HEADS_Q    INT64_MIN
#define HEADS_KV   (INT64_MIN + 1)
#define LORA_RANK  (INT64_MIN + 2)
#define INTERLEAVE (INT64_MIN + 3)
#define SU_CAP     (INT64_MIN + 4) /* the package's state_update_capacity */
/* a FLOAT attribute that is the MLA softmax scale: (dn + dr)^-1/2 * mscale^2 */
#define A_MLA_SCALE(n)                                                                             \
  { n, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT, 0, 0.0f, NULL, 2 }

/* abi §8.3 step 5 and §1.2: inputs 0-7 filled, 8-15 empty (RoPE and q/k norm are done before the
 * node), 16 the host metadata; outputs 1/2 alias the cache inputs (§1.4) under the present.*
 * names. Attributes: the ones GenAI's builder writes, defaulted values included. */
static const op_table PAGED_ATTENTION = {
    "PagedAttention",
    17,
    3,
    {{S_NODE, NULL, D_IO, 2},
     {S_NODE, NULL, D_IO, 2},
     {S_NODE, NULL, D_IO, 2},
     {S_INPUT, "past_key_values.%d.key", D_IO, 4},
     {S_INPUT, "past_key_values.%d.value", D_IO, 4},
     {S_INPUT, "cumulative_sequence_lengths", D_I32, 1},
     {S_INPUT, "past_sequence_lengths", D_I32, 1},
     {S_INPUT, "block_table", D_I32, 2},
     {S_EMPTY, NULL, D_IO, 0},
     {S_EMPTY, NULL, D_IO, 0},
     {S_EMPTY, NULL, D_IO, 0},
     {S_EMPTY, NULL, D_IO, 0},
     {S_EMPTY, NULL, D_IO, 0},
     {S_EMPTY, NULL, D_IO, 0},
     {S_EMPTY, NULL, D_IO, 0},
     {S_EMPTY, NULL, D_IO, 0},
     {S_INPUT, "attention_metadata", D_I32, 1}},
    {{S_NODE, NULL, D_IO, 2},
     {S_OUTPUT, "present.%d.key", D_IO, 4},
     {S_OUTPUT, "present.%d.value", D_IO, 4}},
    7,
    {A_INT("num_heads", HEADS_Q), A_INT("kv_num_heads", HEADS_KV), A_HEAD_SCALE("scale"),
     A_INT("local_window_size", -1), A_FLOAT("softcap", 0.0f), A_INT("do_rotary", 0),
     A_INT("rotary_interleaved", 0)},
};

/* abi §9.1 (the seed 003 LATENT emitter) and §1.8: the absorbed query and the latent row in,
 * slots 2 and 4 (value, value cache) empty, the one latent page cache, the lengths and the block
 * table, cos/sin [max_pos, r/2] in the activation dtype (the op's T), slot_mapping bound, 11-16
 * empty (no attention_metadata); exactly 2 outputs, the cache output aliasing the input under
 * present.%d.key. Attributes: num_heads, kv_num_heads 1, the explicit MLA scale, LATENT,
 * v_head_size = rotary_offset = kv_lora_rank, do_rotary 1, the config's pairing. */
static const op_table PAGED_ATTENTION_LATENT = {
    "PagedAttention",
    17,
    2,
    {{S_NODE, NULL, D_IO, 2},
     {S_NODE, NULL, D_IO, 2},
     {S_EMPTY, NULL, D_IO, 0},
     {S_INPUT, "past_key_values.%d.key", D_IO, 4},
     {S_EMPTY, NULL, D_IO, 0},
     {S_INPUT, "cumulative_sequence_lengths", D_I32, 1},
     {S_INPUT, "past_sequence_lengths", D_I32, 1},
     {S_INPUT, "block_table", D_I32, 2},
     {S_INIT, "cos_cache", D_IO, 2},
     {S_INIT, "sin_cache", D_IO, 2},
     {S_INPUT, "slot_mapping", D_I32, 1},
     {S_EMPTY, NULL, D_IO, 0},
     {S_EMPTY, NULL, D_IO, 0},
     {S_EMPTY, NULL, D_IO, 0},
     {S_EMPTY, NULL, D_IO, 0},
     {S_EMPTY, NULL, D_IO, 0},
     {S_EMPTY, NULL, D_IO, 0}},
    {{S_NODE, NULL, D_IO, 2}, {S_OUTPUT, "present.%d.key", D_IO, 4}},
    8,
    {A_INT("num_heads", HEADS_Q), A_INT("kv_num_heads", 1), A_MLA_SCALE("scale"),
     A_STR("kv_cache_layout", "LATENT"), A_INT("v_head_size", LORA_RANK),
     A_INT("rotary_offset", LORA_RANK), A_INT("do_rotary", 1),
     A_INT("rotary_interleaved", INTERLEAVE)},
};

/* abi §8.3 linear layer step 5, §2.2: q, k, v [N, H, D] in the io dtype, the raw a and b
 * projections in f32 (a Cast when io is not f32), the f32 V-major state, A_log and dt_bias f32
 * [Hv]; no capture inputs (state_update_capacity 0). The six attributes the builder writes. */
static const op_table GATED_DELTA_NET = {
    "GatedDeltaNet",
    9,
    2,
    {{S_NODE, NULL, D_IO, 3},
     {S_NODE, NULL, D_IO, 3},
     {S_NODE, NULL, D_IO, 3},
     {S_INPUT, "cumulative_sequence_lengths", D_I32, 1},
     {S_CAST32, "a_proj", D_F32, 2},
     {S_CAST32, "b_proj", D_F32, 2},
     {S_INPUT, "past_key_values.%d.recurrent_state", D_F32, 4},
     {S_INIT, "model.layers.%d.linear_attn.A_log", D_F32, 1},
     {S_INIT, "model.layers.%d.linear_attn.dt_bias", D_F32, 1}},
    {{S_NODE, NULL, D_IO, 3}, {S_OUTPUT, "present.%d.recurrent_state", D_F32, 4}},
    6,
    {A_STR("update_rule", "gated_delta"), A_FLOAT("scale", 0.0f), A_STR("gate_activation", "qwen"),
     A_STR("beta_activation", "sigmoid"), A_INT("qk_l2_norm", 1), A_INT("chunk_size", 64)},
};

/* abi §8.3 linear layer step 2, §3: the packed conv input, depthwise taps [C, 1, K], the
 * cumulative lengths, a zero bias holding slot 3, the conv state in the io dtype. */
static const op_table VARLEN_CONV = {
    "VarlenCausalConvWithState",
    5,
    2,
    {{S_NODE, NULL, D_IO, 2},
     {S_INIT, "model.layers.%d.linear_attn.conv1d.weight", D_IO, 3},
     {S_INPUT, "cumulative_sequence_lengths", D_I32, 1},
     {S_ZEROS, "model.layers.%d.linear_attn.conv1d.bias", D_IO, 1},
     {S_INPUT, "past_key_values.%d.conv_state", D_IO, 3}},
    {{S_NODE, NULL, D_IO, 2}, {S_OUTPUT, "present.%d.conv_state", D_IO, 3}},
    2,
    {A_STR("activation", "silu"), A_INT("dilation", 1)},
};

/* The same two ops with state_update_capacity C > 0 (abi §2.2/§2.3, §3, §8.3): capture_count
 * (the graph input state_update_capture_count) as GatedDeltaNet's input 9 and the conv's input 5,
 * state_update_active as GatedDeltaNet's input 10, output 2 the graph's state_update.{i}.*
 * (capsule f32 [B, C*(Hv+Hk*Dk+Hv*Dv)], conv value io [B, C, conv_dim]), and the capacity
 * attribute after the others. */
static const op_table GATED_DELTA_NET_SU = {
    "GatedDeltaNet",
    11,
    3,
    {{S_NODE, NULL, D_IO, 3},
     {S_NODE, NULL, D_IO, 3},
     {S_NODE, NULL, D_IO, 3},
     {S_INPUT, "cumulative_sequence_lengths", D_I32, 1},
     {S_CAST32, "a_proj", D_F32, 2},
     {S_CAST32, "b_proj", D_F32, 2},
     {S_INPUT, "past_key_values.%d.recurrent_state", D_F32, 4},
     {S_INIT, "model.layers.%d.linear_attn.A_log", D_F32, 1},
     {S_INIT, "model.layers.%d.linear_attn.dt_bias", D_F32, 1},
     {S_INPUT, "state_update_capture_count", D_I32, 1},
     {S_INPUT, "state_update_active", D_I32, 1}},
    {{S_NODE, NULL, D_IO, 3},
     {S_OUTPUT, "present.%d.recurrent_state", D_F32, 4},
     {S_OUTPUT, "state_update.%d.recurrent_capsule", D_F32, 2}},
    7,
    {A_STR("update_rule", "gated_delta"), A_FLOAT("scale", 0.0f), A_STR("gate_activation", "qwen"),
     A_STR("beta_activation", "sigmoid"), A_INT("qk_l2_norm", 1), A_INT("chunk_size", 64),
     A_INT("state_update_capacity", SU_CAP)},
};

static const op_table VARLEN_CONV_SU = {
    "VarlenCausalConvWithState",
    6,
    3,
    {{S_NODE, NULL, D_IO, 2},
     {S_INIT, "model.layers.%d.linear_attn.conv1d.weight", D_IO, 3},
     {S_INPUT, "cumulative_sequence_lengths", D_I32, 1},
     {S_ZEROS, "model.layers.%d.linear_attn.conv1d.bias", D_IO, 1},
     {S_INPUT, "past_key_values.%d.conv_state", D_IO, 3},
     {S_INPUT, "state_update_capture_count", D_I32, 1}},
    {{S_NODE, NULL, D_IO, 2},
     {S_OUTPUT, "present.%d.conv_state", D_IO, 3},
     {S_OUTPUT, "state_update.%d.conv_value", D_IO, 3}},
    3,
    {A_STR("activation", "silu"), A_INT("dilation", 1), A_INT("state_update_capacity", SU_CAP)},
};

/* ---- the package under test ----------------------------------------------------------------- */

typedef struct pkg {
  const char *what;
  Onnx__ModelProto *mp;
  const Onnx__GraphProto *g;
  export_built built; /* the graph the writer serialized: dtypes of intermediates */
  genai_config gc;
  const hf_config *c;
  export_options o;
} pkg;

static ph_dtype want_dtype(const pkg *p, slot_dtype d) {
  return d == D_IO ? p->built.io_dtype : d == D_F32 ? PH_DTYPE_F32 : PH_DTYPE_I32;
}

static const Onnx__ValueInfoProto *find_vi(Onnx__ValueInfoProto **v, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(v[i]->name, name) == 0) return v[i];
  return NULL;
}

static const Onnx__TensorProto *find_init(const Onnx__GraphProto *g, const char *name) {
  for (size_t i = 0; i < g->n_initializer; i++)
    if (strcmp(g->initializer[i]->name, name) == 0) return g->initializer[i];
  return NULL;
}

static const Onnx__NodeProto *producer(const Onnx__GraphProto *g, const char *name) {
  for (size_t i = 0; i < g->n_node; i++)
    for (size_t k = 0; k < g->node[i]->n_output; k++)
      if (strcmp(g->node[i]->output[k], name) == 0) return g->node[i];
  return NULL;
}

static int layer_of(const char *node_name) {
  int layer = -1;
  return sscanf(node_name, "/model/layers.%d/", &layer) == 1 ? layer : -1;
}

/* The dtype and rank of a value of the serialized graph. */
static int value_type(const pkg *p, const char *name, ph_dtype *dt, int *rank) {
  const int v = graph_find_value(p->built.g, name);
  if (v < 0) return 0;
  *dt = p->built.g->values[v].type.dtype;
  *rank = p->built.g->values[v].type.rank;
  return 1;
}

static void check_slot(const pkg *p, const Onnx__NodeProto *n, const char *dir, int k,
                       const char *got, const slot *w, int layer) {
  char name[160], where[512];
  snprintf(where, sizeof where, "%s: %s %s %d", p->what, n->name, dir, k);
  if (w->name) snprintf(name, sizeof name, w->name, layer);
  const int empty = !got || !got[0];
  if (w->kind == S_EMPTY) {
    if (!CHECK(empty)) printf("  %s: expected empty, got %s\n", where, got);
    return;
  }
  if (!CHECK(!empty)) {
    printf("  %s: expected a value, slot is empty\n", where);
    return;
  }
  const Onnx__GraphProto *g = p->g;
  const int is_in = find_vi(g->input, g->n_input, got) != NULL;
  const int is_out = find_vi(g->output, g->n_output, got) != NULL;
  const Onnx__TensorProto *init = find_init(g, got);
  const Onnx__NodeProto *prod = producer(g, got);
  int ok = 1;
  switch (w->kind) {
  case S_INPUT:
    ok = is_in && strcmp(got, name) == 0;
    break;
  case S_OUTPUT:
    ok = is_out && strcmp(got, name) == 0;
    break;
  case S_NODE:
    ok = prod && !is_in && !init;
    break;
  case S_INIT:
    ok = init && strcmp(got, name) == 0;
    break;
  case S_ZEROS: {
    ok = init && strcmp(got, name) == 0;
    const int v = graph_find_value(p->built.g, got);
    const gvalue *gv = v >= 0 ? &p->built.g->values[v] : NULL;
    const unsigned char *bytes = gv ? gv->type.data : NULL;
    const size_t nb = gv ? (size_t)tinfo_numel(&gv->type) * dtype_size(gv->type.dtype) : 0;
    ok = ok && bytes && nb > 0;
    for (size_t i = 0; ok && i < nb; i++) ok = bytes[i] == 0;
    break;
  }
  case S_CAST32: {
    /* io below f32: Cast(to=FLOAT) of the projection's MatMul; f32: the MatMul itself */
    const Onnx__NodeProto *mm = prod;
    if (p->built.io_dtype != PH_DTYPE_F32) {
      ok = prod && strcmp(prod->op_type, "Cast") == 0 && prod->n_attribute == 1 &&
           strcmp(prod->attribute[0]->name, "to") == 0 && prod->attribute[0]->i == 1 &&
           prod->n_input == 1;
      mm = ok ? producer(g, prod->input[0]) : NULL;
    }
    char needle[64];
    snprintf(needle, sizeof needle, "/%s/MatMul", w->name);
    ok = ok && mm && strcmp(mm->op_type, "MatMul") == 0 && strstr(mm->name, needle) &&
         layer_of(mm->name) == layer;
    break;
  }
  case S_EMPTY:
    break;
  }
  if (!CHECK(ok))
    printf("  %s: %s does not hold what abi.md says (%s)\n", where, got,
           w->name ? name : "a node output");
  ph_dtype dt = PH_DTYPE_INVALID;
  int rank = -1;
  if (!CHECK(value_type(p, got, &dt, &rank))) return;
  if (!CHECK(dt == want_dtype(p, w->dtype) && (!w->rank || rank == w->rank)))
    printf("  %s: %s is %s rank %d, expected %s rank %d\n", where, got, ph_dtype_name(dt), rank,
           ph_dtype_name(want_dtype(p, w->dtype)), w->rank);
}

static void check_attrs(const pkg *p, const Onnx__NodeProto *n, const op_table *t) {
  const hf_config *c = p->c;
  if (!CHECK((int)n->n_attribute == t->n_attrs)) {
    printf("  %s: %s has %zu attributes, abi.md's table %d\n", p->what, n->name, n->n_attribute,
           t->n_attrs);
    return;
  }
  for (int a = 0; a < t->n_attrs; a++) {
    const attr_want *w = &t->attrs[a];
    const Onnx__AttributeProto *got = n->attribute[a]; /* the builder's order */
    int ok = strcmp(got->name, w->name) == 0 && (int)got->type == w->type;
    if (ok && w->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT) {
      const int64_t want = w->i == HEADS_Q      ? c->n_heads
                           : w->i == HEADS_KV   ? c->n_kv_heads
                           : w->i == LORA_RANK  ? c->mla.kv_lora_rank
                           : w->i == INTERLEAVE ? c->rope.interleave
                           : w->i == SU_CAP     ? p->built.state_update_capacity
                                                : w->i;
      ok = got->i == want;
    } else if (ok && w->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT) {
      /* MLA: (dn + dr)^-1/2 * m^2, m = 0.1 ln(factor) mscale_all_dim + 1 under YaRN
       * (model-math §5.2), computed here from the config's fields, not taken from the builder */
      double m = 1.0;
      if (c->rope.scaling == ROPE_SCALING_YARN && c->rope.factor > 1 && c->rope.mscale_all_dim)
        m = 0.1 * c->rope.mscale_all_dim * log(c->rope.factor) + 1.0;
      const float want =
          w->head_scale == 2
              ? (float)(m * m / sqrt((double)(c->mla.qk_nope_head_dim + c->mla.qk_rope_head_dim)))
          : w->head_scale ? (float)(1.0 / sqrt((double)c->head_dim))
                          : w->f;
      ok = got->f == want;
    } else if (ok) {
      ok = got->s.len == strlen(w->s) && memcmp(got->s.data, w->s, got->s.len) == 0;
    }
    if (!CHECK(ok))
      printf("  %s: %s attribute %d is not %s as abi.md says\n", p->what, n->name, a, w->name);
  }
}

/* §8.3 full attention, steps 1 and 6 around the node: q_proj viewed [N, H, 2D] and split [D, D]
 * with the query first (its output 0 reaches the rotary, output 1 the gate), the gate's Sigmoid
 * multiplying PagedAttention's output, and that product feeding o_proj. */
static const Onnx__NodeProto *node_named(const pkg *p, const char *fmt, int layer) {
  char name[160];
  snprintf(name, sizeof name, fmt, layer);
  for (size_t i = 0; i < p->g->n_node; i++)
    if (strcmp(p->g->node[i]->name, name) == 0) return p->g->node[i];
  return NULL;
}

static int consumes(const Onnx__NodeProto *n, const char *value) {
  for (size_t k = 0; n && k < n->n_input; k++)
    if (strcmp(n->input[k], value) == 0) return 1;
  return 0;
}

static void check_gated_attention(const pkg *p, const Onnx__NodeProto *pa, int layer) {
  const int64_t D = p->c->head_dim, H = p->c->n_heads;
  const Onnx__NodeProto *split = node_named(p, "/model/layers.%d/attn/q_gate/Split", layer);
  const Onnx__NodeProto *view = node_named(p, "/model/layers.%d/attn/q_proj/Reshape", layer);
  const Onnx__NodeProto *sig = node_named(p, "/model/layers.%d/attn/gate/Sigmoid", layer);
  const Onnx__NodeProto *mul = node_named(p, "/model/layers.%d/attn/gate/Mul", layer);
  const Onnx__NodeProto *o = node_named(p, "/model/layers.%d/attn/o_proj/MatMul", layer);
  if (!CHECK(split && view && sig && mul && o && split->n_output == 2 && view->n_input == 2)) {
    printf("  %s: layer %d lacks the gated attention of abi.md §8.3\n", p->what, layer);
    return;
  }
  const Onnx__TensorProto *shp = find_init(p->g, view->input[1]);
  const Onnx__TensorProto *sizes = split->n_input == 2 ? find_init(p->g, split->input[1]) : NULL;
  int64_t sh[3] = {0}, sz[2] = {0};
  if (CHECK(shp && shp->raw_data.len == sizeof sh && sizes && sizes->raw_data.len == sizeof sz)) {
    memcpy(sh, shp->raw_data.data, sizeof sh);
    memcpy(sz, sizes->raw_data.data, sizeof sz);
    CHECK(sh[0] == 0 && sh[1] == H && sh[2] == 2 * D && sz[0] == D && sz[1] == D);
  }
  CHECK(consumes(split, view->output[0]));
  /* the gate half (output 1) reaches the Sigmoid through a Reshape; the query half does not */
  const Onnx__NodeProto *gview = producer(p->g, sig->input[0]);
  CHECK(gview && consumes(gview, split->output[1]) && !consumes(gview, split->output[0]));
  CHECK(consumes(mul, pa->output[0]) && consumes(mul, sig->output[0]));
  CHECK(consumes(o, mul->output[0]));
}

/* Every node of op t->op: domain, arity, slot by slot, attributes; returns the layer ids seen. */
static int check_op(const pkg *p, const op_table *t, int *layers) {
  int n_seen = 0;
  for (size_t i = 0; i < p->g->n_node; i++) {
    const Onnx__NodeProto *n = p->g->node[i];
    if (strcmp(n->op_type, t->op) != 0) continue;
    const int layer = layer_of(n->name);
    CHECK(layer >= 0 && layer < (int)p->c->n_layers);
    CHECK(n->domain && strcmp(n->domain, "com.microsoft") == 0);
    layers[n_seen++] = layer;
    if (!CHECK((int)n->n_input == t->n_in) || !CHECK((int)n->n_output == t->n_out)) continue;
    for (int k = 0; k < t->n_in; k++) check_slot(p, n, "input", k, n->input[k], &t->in[k], layer);
    for (int k = 0; k < t->n_out; k++)
      check_slot(p, n, "output", k, n->output[k], &t->out[k], layer);
    check_attrs(p, n, t);
    if (t == &PAGED_ATTENTION) check_gated_attention(p, n, layer);
  }
  return n_seen;
}

/* ---- graph I/O (abi §8.1, §8.2), the rotary form, the state groups (§8.5) ----------------- */

static void check_io(const pkg *p, const char *name, int output, ph_dtype dt, int rank,
                     const int64_t *known /* rank dims, -1 symbolic */) {
  const Onnx__GraphProto *g = p->g;
  const Onnx__ValueInfoProto *v =
      output ? find_vi(g->output, g->n_output, name) : find_vi(g->input, g->n_input, name);
  if (!CHECK(v != NULL)) {
    printf("  %s: graph %s %s is missing\n", p->what, output ? "output" : "input", name);
    return;
  }
  const Onnx__TypeProto__Tensor *t = v->type->tensor_type;
  int ok = t->elem_type == dtype_to_onnx(dt) && t->shape && (int)t->shape->n_dim == rank;
  for (int k = 0; ok && k < rank; k++) {
    const Onnx__TensorShapeProto__Dimension *dm = t->shape->dim[k];
    ok = known[k] < 0 ? dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM
                      : dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
                            dm->dim_value == known[k];
  }
  if (!CHECK(ok))
    printf("  %s: %s is not %s rank %d as abi.md §8.1/8.2 says\n", p->what, name, ph_dtype_name(dt),
           rank);
}

static void check_graph_io(const pkg *p) {
  const hf_config *c = p->c;
  const ph_dtype io = p->built.io_dtype;
  const int64_t K = p->built.block_size, Hkv = c->n_kv_heads, D = c->head_dim;
  const int64_t Hv = c->lin.n_value_heads, Dv = c->lin.value_head_dim, Dk = c->lin.key_head_dim;
  check_io(p, "input_ids", 0, PH_DTYPE_I64, 1, (int64_t[]){-1});
  check_io(p, "position_ids", 0, PH_DTYPE_I64, 2, (int64_t[]){3, -1});
  check_io(p, "block_table", 0, PH_DTYPE_I32, 2, (int64_t[]){-1, -1});
  check_io(p, "cumulative_sequence_lengths", 0, PH_DTYPE_I32, 1, (int64_t[]){-1});
  check_io(p, "past_sequence_lengths", 0, PH_DTYPE_I32, 1, (int64_t[]){-1});
  check_io(p, "attention_metadata", 0, PH_DTYPE_I32, 1, (int64_t[]){3});
  CHECK(!find_vi(p->g->input, p->g->n_input, "attention_mask"));
  CHECK(!find_vi(p->g->input, p->g->n_input, "slot_mapping"));
  /* logits f32 whatever the io dtype (docs/export.md: a deliberate difference for f16) */
  check_io(p, "logits", 1, PH_DTYPE_F32, 2, (int64_t[]){-1, c->vocab_size});
  int n_in = 6, n_out = 1;
  char name[96];
  for (int i = 0; i < (int)c->n_layers; i++) {
    const int full = c->layer_kind[i] == PH_LAYER_FULL_ATTENTION;
    for (int k = 0; k < 2; k++)
      for (int out = 0; out < 2; out++) {
        const char *kind = full ? (k ? "value" : "key") : (k ? "recurrent_state" : "conv_state");
        snprintf(name, sizeof name, out ? "present.%d.%s" : "past_key_values.%d.%s", i, kind);
        if (full)
          check_io(p, name, out, io, 4, (int64_t[]){-1, K, Hkv, D});
        else if (k)
          check_io(p, name, out, PH_DTYPE_F32, 4, (int64_t[]){-1, Hv, Dv, Dk});
        else
          check_io(p, name, out, io, 3, (int64_t[]){-1, c->geom.conv_dim, c->lin.conv_kernel - 1});
        out ? n_out++ : n_in++;
      }
  }
  /* compact state updates (§8.1/§8.2): the two inputs after every other, then per linear layer
   * ascending the conv value and the capsule after every other output */
  const int64_t C = p->built.state_update_capacity, Hk = c->lin.n_key_heads;
  if (C > 0) {
    check_io(p, "state_update_capture_count", 0, PH_DTYPE_I32, 1, (int64_t[]){-1});
    check_io(p, "state_update_active", 0, PH_DTYPE_I32, 1, (int64_t[]){1});
    CHECK(n_in + 2 == (int)p->g->n_input &&
          strcmp(p->g->input[n_in]->name, "state_update_capture_count") == 0 &&
          strcmp(p->g->input[n_in + 1]->name, "state_update_active") == 0);
    n_in += 2;
    for (int i = 0; i < (int)c->n_layers; i++) {
      if (c->layer_kind[i] != PH_LAYER_LINEAR_ATTENTION) continue;
      for (int k = 0; k < 2; k++, n_out++) {
        snprintf(name, sizeof name,
                 k ? "state_update.%d.recurrent_capsule" : "state_update.%d.conv_value", i);
        if (k)
          check_io(p, name, 1, PH_DTYPE_F32, 2, (int64_t[]){-1, C * (Hv + Hk * Dk + Hv * Dv)});
        else
          check_io(p, name, 1, io, 3, (int64_t[]){-1, C, c->geom.conv_dim});
        CHECK(n_out < (int)p->g->n_output && strcmp(p->g->output[n_out]->name, name) == 0);
      }
    }
  } else {
    CHECK(!find_vi(p->g->input, p->g->n_input, "state_update_capture_count"));
    CHECK(!find_vi(p->g->input, p->g->n_input, "state_update_active"));
  }
  CHECK_EQ_INT((int)p->g->n_input, n_in);
  CHECK_EQ_INT((int)p->g->n_output, n_out);
}

static int count_op(const Onnx__GraphProto *g, const char *op) {
  int n = 0;
  for (size_t i = 0; i < g->n_node; i++) n += strcmp(g->node[i]->op_type, op) == 0;
  return n;
}

/* ops: no fused rotary node anywhere, one shared table per graph; fused: GenAI's wrapped
 * MRotaryEmbedding on q and k of every full-attention layer, in f32, one packed batch. */
static void check_rotary(const pkg *p, int n_full) {
  const hf_config *c = p->c;
  if (p->built.rotary == EXPORT_ROTARY_OPS) {
    CHECK_EQ_INT(count_op(p->g, "MRotaryEmbedding") + count_op(p->g, "RotaryEmbedding"), 0);
    int tables = 0;
    for (size_t i = 0; i < p->g->n_node; i++)
      tables += strcmp(p->g->node[i]->name, "/model/rotary_emb/cos/Gather") == 0 ||
                strcmp(p->g->node[i]->name, "/model/rotary_emb/sin/Gather") == 0;
    CHECK_EQ_INT(tables, 2);
    return;
  }
  CHECK_EQ_INT(count_op(p->g, "MRotaryEmbedding"), 2 * n_full);
  for (size_t i = 0; i < p->g->n_node; i++) {
    const Onnx__NodeProto *n = p->g->node[i];
    if (strcmp(n->op_type, "MRotaryEmbedding") != 0) continue;
    const int is_k = strstr(n->name, "/k_rotary/") != NULL;
    CHECK_EQ_INT((int)n->n_attribute, 6);
    if (n->n_attribute != 6) continue;
    static const char *const names[6] = {"interleaved",  "rotary_embedding_dim",
                                         "num_heads",    "mrope_section",
                                         "mrope_layout", "is_packed_batching"};
    const int64_t want[6] = {0, c->rope.rotary_dim, is_k ? c->n_kv_heads : c->n_heads, 0, 1, 1};
    for (int a = 0; a < 6; a++) {
      CHECK_EQ_STR(n->attribute[a]->name, names[a]);
      if (a == 3) {
        CHECK(n->attribute[a]->n_ints == 3 &&
              memcmp(n->attribute[a]->ints, c->rope.mrope_section, 3 * sizeof(int64_t)) == 0);
      } else {
        CHECK(n->attribute[a]->i == want[a]);
      }
    }
    ph_dtype dt = PH_DTYPE_INVALID;
    int rank = -1;
    for (int k = 0; k < 4; k++)
      if (k != 1 && CHECK(value_type(p, n->input[k], &dt, &rank))) CHECK(dt == PH_DTYPE_F32);
    CHECK(value_type(p, n->input[0], &dt, &rank) && rank == 3);
    CHECK(value_type(p, n->input[1], &dt, &rank) && rank == 3 && dt == PH_DTYPE_I64);
  }
}

/* genai_config's state groups name exactly the layers whose nodes hold each kind of state. */
static void check_state_groups(const pkg *p, const int *full, int n_full, const int *conv,
                               int n_conv, const int *rec, int n_rec) {
  const genai_config *gc = &p->gc;
  CHECK(gc->paged && gc->past_present_share_buffer);
  CHECK_EQ_INT(gc->cuda_graph_disabled, p->o.target == EXPORT_TARGET_CUDA);
  CHECK_EQ_INT(gc->dynamic_batching.block_size, p->built.block_size);
  CHECK_EQ_STR(gc->past_conv_names, "past_key_values.%d.conv_state");
  CHECK_EQ_STR(gc->past_recurrent_names, "past_key_values.%d.recurrent_state");
  CHECK_EQ_STR(gc->present_conv_names, "present.%d.conv_state");
  CHECK_EQ_STR(gc->present_recurrent_names, "present.%d.recurrent_state");
  CHECK_EQ_STR(gc->past_key_names, "past_key_values.%d.key");
  CHECK_EQ_STR(gc->present_key_names, "present.%d.key");
  /* §8.5 keys: the decoder's sizes, the input and output names, §8.4's dynamic batching */
  const hf_config *c = p->c;
  CHECK_EQ_STR(gc->model_type, "qwen3_5_text");
  CHECK(gc->head_size == c->head_dim && gc->hidden_size == c->hidden_size &&
        gc->num_attention_heads == c->n_heads && gc->num_key_value_heads == c->n_kv_heads &&
        gc->num_hidden_layers == c->n_layers && gc->vocab_size == c->vocab_size);
  static const char *const names[6] = {"input_ids",
                                       "position_ids",
                                       "block_table",
                                       "cumulative_sequence_lengths",
                                       "past_sequence_lengths",
                                       "attention_metadata"};
  const char *const got[6] = {gc->input_ids,
                              gc->position_ids,
                              gc->block_table,
                              gc->cumulative_sequence_lengths,
                              gc->past_sequence_lengths,
                              gc->attention_metadata};
  for (int k = 0; k < 6; k++) CHECK_EQ_STR(got[k], names[k]);
  CHECK_EQ_STR(gc->attention_mask, "");
  CHECK_EQ_STR(gc->logits, "logits");
  /* §8.5: the capacity and its four names exactly when it is above 0 */
  const int su = p->built.state_update_capacity > 0;
  CHECK_EQ_INT(gc->state_update_capacity, p->built.state_update_capacity);
  CHECK_EQ_STR(gc->state_update_capture_count, su ? "state_update_capture_count" : "");
  CHECK_EQ_STR(gc->state_update_active, su ? "state_update_active" : "");
  CHECK_EQ_STR(gc->state_update_conv_value_names, su ? "state_update.%d.conv_value" : "");
  CHECK_EQ_STR(gc->state_update_recurrent_capsule_names,
               su ? "state_update.%d.recurrent_capsule" : "");
  CHECK(gc->dynamic_batching.present && gc->dynamic_batching.max_batch_size == 100 &&
        gc->dynamic_batching.gpu_utilization_factor == 0.6 &&
        gc->dynamic_batching.num_blocks == 0 && gc->dynamic_batching.max_scheduled_tokens == 2048);
  static const genai_state_kind kinds[3] = {GENAI_STATE_PAGED_KV, GENAI_STATE_FIXED_CONV,
                                            GENAI_STATE_FIXED_RECURRENT};
  const int *ids[3] = {full, conv, rec}, n[3] = {n_full, n_conv, n_rec};
  if (!CHECK(gc->n_state_groups == 3)) return;
  for (int k = 0; k < 3; k++) {
    const genai_state_group *sg = &gc->state_groups[k];
    CHECK(sg->kind == kinds[k]);
    int ok = sg->n_layer_ids == n[k];
    for (int j = 0; ok && j < n[k]; j++)
      ok = sg->layer_ids[j] == ids[k][j]; /* node order = id order */
    if (!CHECK(ok))
      printf("  %s: state group %d names other layers than the graph's nodes\n", p->what, k);
  }
}

/* model.onnx holds the graph export_build returns, node for node. */
static void check_same_graph(const pkg *p) {
  const graph *g = p->built.g;
  size_t k = 0;
  int ok = 1;
  for (int i = 0; i < g->n_nodes && ok; i++) {
    const gnode *n = &g->nodes[i];
    if (n->dead) continue;
    ok = k < p->g->n_node && strcmp(p->g->node[k]->name, n->name) == 0 &&
         strcmp(p->g->node[k]->op_type, n->op_type) == 0 &&
         p->g->node[k]->n_input == (size_t)n->n_inputs;
    for (int j = 0; ok && j < n->n_inputs; j++)
      ok = n->inputs[j] < 0 ? !p->g->node[k]->input[j][0]
                            : strcmp(p->g->node[k]->input[j], g->values[n->inputs[j]].name) == 0;
    k++;
  }
  CHECK(ok && k == p->g->n_node);
}

static void check_package(pkg *p) {
  const hf_config *c = p->c;
  int full[HF_MAX_LAYERS], conv[HF_MAX_LAYERS], rec[HF_MAX_LAYERS], n_full_cfg = 0;
  for (int i = 0; i < (int)c->n_layers; i++)
    n_full_cfg += c->layer_kind[i] == PH_LAYER_FULL_ATTENTION;
  check_same_graph(p);
  const int n_full = check_op(p, &PAGED_ATTENTION, full);
  const int su = p->built.state_update_capacity > 0;
  const int n_rec = check_op(p, su ? &GATED_DELTA_NET_SU : &GATED_DELTA_NET, rec);
  const int n_conv = check_op(p, su ? &VARLEN_CONV_SU : &VARLEN_CONV, conv);
  CHECK_EQ_INT(n_full, n_full_cfg);
  CHECK_EQ_INT(n_rec, (int)c->n_layers - n_full_cfg);
  CHECK_EQ_INT(n_conv, n_rec);
  CHECK_EQ_INT(count_op(p->g, "GroupQueryAttention") + count_op(p->g, "LinearAttention") +
                   count_op(p->g, "CausalConvWithState"),
               0);
  check_graph_io(p);
  check_rotary(p, n_full);
  check_state_groups(p, full, n_full, conv, n_conv, rec, n_rec);
  printf("  %-34s %zu nodes: %d PagedAttention, %d GatedDeltaNet, %d VarlenCausalConvWithState; "
         "io %s, rotary %s, state_update_capacity %d\n",
         p->what, p->g->n_node, n_full, n_rec, n_conv, ph_dtype_name(p->built.io_dtype),
         export_rotary_name(p->built.rotary), (int)p->built.state_update_capacity);
}

/* A LATENT (DeepSeek MLA) package: one LATENT PagedAttention per layer, nothing of the hybrid's
 * (no GatedDeltaNet, no conv, no GroupQueryAttention), the graph I/O of docs/graph-io.md's LATENT
 * layout (no position_ids, no attention_metadata, slot_mapping [N], key pages
 * [P, K, 1, l + r] only), cos/sin [context, r/2], one paged_kv group of every layer in
 * genai_config with num_key_value_heads 1 and head_size l + r, and the MoE layers'
 * com.microsoft::MoE nodes with the SwiGLU attributes ONNX Runtime's CPU kernel takes. */
static void check_latent_package(pkg *p) {
  const hf_config *c = p->c;
  const int64_t L = c->n_layers, row = c->mla.kv_lora_rank + c->mla.qk_rope_head_dim;
  int layers[HF_MAX_LAYERS];
  check_same_graph(p);
  CHECK_EQ_INT(check_op(p, &PAGED_ATTENTION_LATENT, layers), (int)L);
  CHECK_EQ_INT(count_op(p->g, "GatedDeltaNet") + count_op(p->g, "VarlenCausalConvWithState") +
                   count_op(p->g, "GroupQueryAttention") + count_op(p->g, "RotaryEmbedding"),
               0);
  const ph_dtype io = p->built.io_dtype;
  const int64_t K = p->built.block_size;
  check_io(p, "input_ids", 0, PH_DTYPE_I64, 1, (int64_t[]){-1});
  check_io(p, "block_table", 0, PH_DTYPE_I32, 2, (int64_t[]){-1, -1});
  check_io(p, "cumulative_sequence_lengths", 0, PH_DTYPE_I32, 1, (int64_t[]){-1});
  check_io(p, "past_sequence_lengths", 0, PH_DTYPE_I32, 1, (int64_t[]){-1});
  check_io(p, "slot_mapping", 0, PH_DTYPE_I32, 1, (int64_t[]){-1});
  check_io(p, "logits", 1, PH_DTYPE_F32, 2, (int64_t[]){-1, c->vocab_size});
  CHECK(!find_vi(p->g->input, p->g->n_input, "position_ids"));
  CHECK(!find_vi(p->g->input, p->g->n_input, "attention_metadata"));
  char name[96];
  for (int i = 0; i < (int)L; i++)
    for (int out = 0; out < 2; out++) {
      snprintf(name, sizeof name, out ? "present.%d.key" : "past_key_values.%d.key", i);
      check_io(p, name, out, io, 4, (int64_t[]){-1, K, 1, row});
    }
  CHECK_EQ_INT((int)p->g->n_input, 5 + (int)L);
  CHECK_EQ_INT((int)p->g->n_output, 1 + (int)L);
  const Onnx__TensorProto *cs = find_init(p->g, "cos_cache");
  CHECK(cs && cs->n_dims == 2 && cs->dims[1] == c->mla.qk_rope_head_dim / 2 &&
        cs->data_type == dtype_to_onnx(io));
  CHECK_EQ_INT(p->gc.n_state_groups, 1);
  CHECK(p->gc.n_state_groups == 1 && p->gc.state_groups[0].kind == GENAI_STATE_PAGED_KV &&
        p->gc.state_groups[0].n_layer_ids == (int)L);
  CHECK_EQ_INT(p->gc.num_key_value_heads, 1);
  CHECK_EQ_INT(p->gc.head_size, row);
  CHECK(strcmp(p->gc.slot_mapping, "slot_mapping") == 0 && !p->gc.past_value_names[0] &&
        !p->gc.position_ids[0] && !p->gc.attention_metadata[0]);
  int n_moe_layers = 0, n_moe = 0;
  for (int i = 0; i < (int)L; i++) n_moe_layers += c->layer_is_moe[i];
  for (size_t i = 0; i < p->g->n_node; i++) {
    const Onnx__NodeProto *n = p->g->node[i];
    if (strcmp(n->op_type, "MoE") != 0) continue;
    n_moe++;
    int ok =
        n->domain && strcmp(n->domain, "com.microsoft") == 0 && n->n_input == 5 && !n->input[3][0];
    for (size_t a = 0; ok && a < n->n_attribute; a++) {
      const Onnx__AttributeProto *at = n->attribute[a];
      if (strcmp(at->name, "activation_type") == 0)
        ok = at->s.len == 6 && memcmp(at->s.data, "swiglu", 6) == 0;
      if (strcmp(at->name, "swiglu_fusion") == 0) ok = at->i == 1;
      if (strcmp(at->name, "k") == 0) ok = at->i == c->moe.n_experts_per_tok;
      if (strcmp(at->name, "activation_alpha") == 0) ok = at->f == 1.0f;
      if (strcmp(at->name, "activation_beta") == 0) ok = at->f == 0.0f;
    }
    CHECK(ok && n->n_attribute == 6);
  }
  CHECK_EQ_INT(n_moe, n_moe_layers);
  printf("  %-34s %zu nodes: %d LATENT PagedAttention, %d MoE; io %s, rows of %lld\n", p->what,
         p->g->n_node, (int)L, n_moe, ph_dtype_name(io), (long long)row);
}

/* Exports m with o into g_tmp/tag, reads it back and checks it. */
static void check_export(const ph_model *m, const export_options *o, const char *tag) {
  char dir[700], path[800];
  snprintf(dir, sizeof dir, "%s/%s", g_tmp, tag);
  pkg p;
  memset(&p, 0, sizeof p);
  p.what = tag;
  p.o = *o;
  p.o.force = 1;
  p.c = model_config(m);
  diag d;
  ph_status st = model_export(m, dir, &p.o, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  if (st != PH_OK) return;
  st = export_build(m, &p.o, &p.built, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  if (st != PH_OK) return;
  CHECK_STATUS(genai_config_read(dir, &p.gc, &d), PH_OK, d.msg);
  char *bytes = NULL;
  size_t n = 0;
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  CHECK_STATUS(file_read_all(path, (size_t)1 << 30, &bytes, &n, &d), PH_OK, d.msg);
  p.mp = bytes ? onnx__model_proto__unpack(NULL, n, (const uint8_t *)bytes) : NULL;
  free(bytes);
  if (CHECK(p.mp && p.mp->graph)) {
    p.g = p.mp->graph;
    if (p.c->family == FAMILY_DEEPSEEK)
      check_latent_package(&p);
    else
      check_package(&p);
    onnx__model_proto__free_unpacked(p.mp, NULL);
  }
  export_built_free(&p.built);
}

static export_options paged(export_target t, ph_dtype io, export_rotary r) {
  export_options o = export_options_default();
  o.layout = EXPORT_LAYOUT_PAGED;
  o.target = t;
  o.io_dtype = io;
  o.rotary = r;
  return o;
}

/* Qwen3.8-27B's geometry from its config alone: the default CUDA package (f16, plain-op RoPE),
 * bf16, and the fused rotary form. */
static void test_27b_config_only(void) {
  ph_model *m = mt_open_27b_config(g_tmp);
  if (!m) return;
  export_options o = paged(EXPORT_TARGET_CUDA, PH_DTYPE_INVALID, EXPORT_ROTARY_DEFAULT);
  o.config_only = 1;
  check_export(m, &o, "27b-cuda-default");
  o.io_dtype = PH_DTYPE_BF16;
  check_export(m, &o, "27b-cuda-bf16");
  o.io_dtype = PH_DTYPE_INVALID;
  o.rotary = EXPORT_ROTARY_FUSED;
  check_export(m, &o, "27b-cuda-fused-rotary");
  o.rotary = EXPORT_ROTARY_DEFAULT;
  o.state_update_capacity = 7; /* abi §8.2: 48 linear layers x 2 = 96 state-update outputs */
  check_export(m, &o, "27b-cuda-su7");
  ph_model_free(m);
}

/* The golden checkpoints with weights: CUDA default and the CPU target (f32, fused RoPE). */
static void test_golden_packages(void) {
  static const char *const sets[2] = {"qwen35-tiny-f32", "qwen35-tiny-bf16-vlm"};
  for (int s = 0; s < 2; s++) {
    char ckpt[1024], tag[96];
    check_data(ckpt, sizeof ckpt, "golden/%s/checkpoint", sets[s]);
    ph_model *m = mt_open(ckpt, 1);
    if (!m) continue;
    export_options o = paged(EXPORT_TARGET_CUDA, PH_DTYPE_INVALID, EXPORT_ROTARY_DEFAULT);
    o.max_context = 256;
    snprintf(tag, sizeof tag, "%s-cuda", sets[s]);
    check_export(m, &o, tag);
    o = paged(EXPORT_TARGET_CPU, PH_DTYPE_INVALID, EXPORT_ROTARY_DEFAULT);
    o.max_context = 256;
    snprintf(tag, sizeof tag, "%s-cpu", sets[s]);
    check_export(m, &o, tag);
    /* compact state updates (issue 15): the CUDA package at C = 4, the CPU one at C = 8 */
    o = paged(EXPORT_TARGET_CUDA, PH_DTYPE_INVALID, EXPORT_ROTARY_DEFAULT);
    o.max_context = 256;
    o.state_update_capacity = 4;
    snprintf(tag, sizeof tag, "%s-cuda-su4", sets[s]);
    check_export(m, &o, tag);
    o = paged(EXPORT_TARGET_CPU, PH_DTYPE_INVALID, EXPORT_ROTARY_DEFAULT);
    o.max_context = 256;
    o.state_update_capacity = 8;
    snprintf(tag, sizeof tag, "%s-cpu-su8", sets[s]);
    check_export(m, &o, tag);
    ph_model_free(m);
  }
}

/* DeepSeek-V3 (the MoE golden checkpoint): the LATENT package, CUDA default (f16) and CPU (f32). */
static void test_latent_packages(void) {
  char ckpt[1024];
  check_data(ckpt, sizeof ckpt, "golden/deepseek-v3-tiny-moe/checkpoint");
  ph_model *m = mt_open(ckpt, 1);
  if (!m) return;
  export_options o = paged(EXPORT_TARGET_CUDA, PH_DTYPE_INVALID, EXPORT_ROTARY_DEFAULT);
  o.max_context = 256;
  check_export(m, &o, "deepseek-v3-latent-cuda");
  o = paged(EXPORT_TARGET_CPU, PH_DTYPE_INVALID, EXPORT_ROTARY_DEFAULT);
  o.max_context = 256;
  check_export(m, &o, "deepseek-v3-latent-cpu");
  ph_model_free(m);
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "%s", check_env("PH_TMP_DIR"));
  diag d;
  if (path_mkdirs(g_tmp, &d) != PH_OK) return 1;
  RUN(test_27b_config_only);
  RUN(test_golden_packages);
  RUN(test_latent_packages);
  return check_finish();
}
