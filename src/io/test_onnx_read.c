/* ONNX reader: graphs built in C, serialized by hand (tests/onnx_testing.h), read back, equal
 * in structure and bit-identical when run; external data viewed or copied; typed fields;
 * symbolic dims; and every malformed case a typed error whose message names the problem.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "exec/exec.h"
#include "file_testing.h"
#include "onnx_testing.h"

static char g_tmp[512];

/* ---- the test graph --------------------------------------------------------------------------
 * ids i64 [batch, seq] -> Gather(E f16 [10, 8]) -> Cast f32 -> MatMul W [8, 6] -> Add b ->
 * SimplifiedLayerNormalization(gamma; axis, epsilon) -> Transpose [0, 2, 1] ->
 * CausalConvWithState(wconv [6, 1, 3], bconv, past conv_state [batch, 6, 2]; "silu") ->
 * Cast f16 -> Cast f32 -> x * Sigmoid(x) = out [batch, 6, seq]; present conv_state. Every
 * attribute kind the ops use (INT, FLOAT, STRING, INTS), f16/f32/i64 initializers. */

static float frand(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static graph *test_graph(void) {
  diag d;
  graph *g = NULL;
  if (graph_create(&g, &d) != PH_OK) return NULL;
  unsigned seed = 7;
  uint16_t e16[10 * 8];
  for (int i = 0; i < 80; i++) e16[i] = f32_to_f16(frand(&seed));
  float w[8 * 6], b[6], gamma[6], wc[6 * 3], bc[6];
  for (int i = 0; i < 48; i++) w[i] = frand(&seed);
  for (int i = 0; i < 6; i++)
    b[i] = frand(&seed), gamma[i] = 1.0f + frand(&seed) / 4, bc[i] = frand(&seed);
  for (int i = 0; i < 18; i++) wc[i] = frand(&seed);

  int ids = graph_add_input(g, "ids", PH_DTYPE_I64, 2, (int64_t[]){-1, -1},
                            (const char *[]){"batch", "seq"});
  int past = graph_add_input(g, "past_conv", PH_DTYPE_F32, 3, (int64_t[]){-1, 6, 2},
                             (const char *[]){"batch", NULL, NULL});
  int e = graph_add_initializer_copy(g, "E", PH_DTYPE_F16, shape_2d(10, 8), e16);
  int wi = graph_add_initializer_copy(g, "W", PH_DTYPE_F32, shape_2d(8, 6), w);
  int bi = graph_add_initializer_copy(g, "b", PH_DTYPE_F32, shape_1d(6), b);
  int gi = graph_add_initializer_copy(g, "gamma", PH_DTYPE_F32, shape_1d(6), gamma);
  int wci = graph_add_initializer_copy(g, "wconv", PH_DTYPE_F32, shape_3d(6, 1, 3), wc);
  int bci = graph_add_initializer_copy(g, "bconv", PH_DTYPE_F32, shape_1d(6), bc);
  int v[12], pc;
  gattr to32 = attr_int("to", 1), to16 = attr_int("to", 10);
  gattr ln[2] = {attr_int("axis", -1), attr_float("epsilon", 1e-5f)};
  int64_t perm[3] = {0, 2, 1};
  gattr tp = attr_ints("perm", perm, 3);
  gattr act = attr_string("activation", "silu");
  graph_add_node(g, "Gather", "", "gather", 2, (int[]){e, ids}, 1, (const char *[]){"emb16"}, &v[0],
                 0, NULL);
  graph_add_node(g, "Cast", "", "cast_in", 1, &v[0], 1, (const char *[]){"emb"}, &v[1], 1, &to32);
  graph_add_node(g, "MatMul", "", "mm", 2, (int[]){v[1], wi}, 1, (const char *[]){"y"}, &v[2], 0,
                 NULL);
  graph_add_node(g, "Add", "", "add", 2, (int[]){v[2], bi}, 1, (const char *[]){"z"}, &v[3], 0,
                 NULL);
  graph_add_node(g, "SimplifiedLayerNormalization", "", "norm", 2, (int[]){v[3], gi}, 1,
                 (const char *[]){"n"}, &v[4], 2, ln);
  graph_add_node(g, "Transpose", "", "tr", 1, &v[4], 1, (const char *[]){"t"}, &v[5], 1, &tp);
  int conv_out[2];
  graph_add_node(g, "CausalConvWithState", "com.microsoft", "conv", 4,
                 (int[]){v[5], wci, bci, past}, 2, (const char *[]){"c", "present_conv"}, conv_out,
                 1, &act);
  pc = conv_out[1];
  graph_add_node(g, "Cast", "", "to16", 1, &conv_out[0], 1, (const char *[]){"c16"}, &v[6], 1,
                 &to16);
  graph_add_node(g, "Cast", "", "to32", 1, &v[6], 1, (const char *[]){"c32"}, &v[7], 1, &to32);
  graph_add_node(g, "Sigmoid", "", "sig", 1, &v[7], 1, (const char *[]){"s"}, &v[8], 0, NULL);
  graph_add_node(g, "Mul", "", "mul", 2, (int[]){v[8], v[7]}, 1, (const char *[]){"out"}, &v[9], 0,
                 NULL);
  graph_mark_output(g, v[9], NULL);
  graph_mark_output(g, pc, NULL);
  if (graph_finalize(g, &d) != PH_OK) {
    fprintf(stderr, "  test graph: %s\n", d.msg);
    graph_free(g);
    return NULL;
  }
  return g;
}

/* Runs g on fixed inputs (batch 2, seq 5); out receives [2, 6, 5] then [2, 6, 2]. */
static int run_graph(graph *g, float out[2 * 6 * 5 + 2 * 6 * 2]) {
  diag d;
  executor *e = NULL;
  CHECK_STATUS(exec_create(g, 2, &e, &d), PH_OK, d.msg);
  if (!e) return 0;
  int64_t ids[10];
  float past[2 * 6 * 2];
  for (int i = 0; i < 10; i++) ids[i] = (i * 7 + 3) % 10;
  unsigned seed = 99;
  for (int i = 0; i < 24; i++) past[i] = frand(&seed);
  tensor ti = {.dtype = PH_DTYPE_I64, .rank = 2, .dims = {2, 5}, .data = ids};
  tensor tp = {.dtype = PH_DTYPE_F32, .rank = 3, .dims = {2, 6, 2}, .data = past};
  int ok = 1;
  ok &= exec_bind_input(e, exec_input_index(e, "ids"), &ti, &d) == PH_OK;
  ok &= exec_bind_input(e, exec_input_index(e, "past_conv"), &tp, &d) == PH_OK;
  ok &= exec_run(e, &d) == PH_OK;
  CHECK(ok);
  if (!ok) fprintf(stderr, "  run: %s\n", d.msg);
  if (ok) {
    const tensor *o = exec_output(e, exec_output_index(e, "out"));
    const tensor *p = exec_output(e, exec_output_index(e, "present_conv"));
    CHECK_EQ_INT(o->dims[2], 5);
    memcpy(out, o->data, 60 * sizeof(float));
    memcpy(out + 60, p->data, 24 * sizeof(float));
  }
  exec_free(e);
  return ok;
}

static void check_same_run(graph *a, graph *b) {
  float x[84], y[84];
  memset(x, 0, sizeof x);
  memset(y, 1, sizeof y);
  if (!run_graph(a, x) || !run_graph(b, y)) return;
  CHECK(memcmp(x, y, sizeof x) == 0);
}

/* Structure equal: inputs (dtype, dims, symbol names), initializers (bytes), nodes (op, domain,
 * names of inputs/outputs, attributes), outputs. */
static void check_same_graph(const graph *a, const graph *b) {
  CHECK_EQ_INT(b->n_inputs, a->n_inputs);
  CHECK_EQ_INT(b->n_outputs, a->n_outputs);
  CHECK_EQ_INT(b->n_nodes, a->n_nodes);
  if (b->n_inputs != a->n_inputs || b->n_nodes != a->n_nodes || b->n_outputs != a->n_outputs)
    return;
  for (int i = 0; i < a->n_inputs; i++) {
    const gvalue *x = &a->values[a->inputs[i]], *y = &b->values[b->inputs[i]];
    CHECK_EQ_STR(y->name, x->name);
    CHECK_EQ_INT(y->type.dtype, x->type.dtype);
    CHECK_EQ_INT(y->type.rank, x->type.rank);
    for (int k = 0; k < x->type.rank; k++) {
      CHECK_EQ_INT(y->type.dims[k], x->type.dims[k]);
      CHECK_EQ_INT(y->sym[k] >= 0, x->sym[k] >= 0);
      if (x->sym[k] >= 0 && y->sym[k] >= 0)
        CHECK_EQ_STR(b->symbols[y->sym[k]], a->symbols[x->sym[k]]);
    }
  }
  for (int i = 0; i < a->n_values; i++) {
    const gvalue *x = &a->values[i];
    if (x->kind != VALUE_INITIALIZER) continue;
    int j = graph_find_value(b, x->name);
    CHECK(j >= 0);
    if (j < 0) continue;
    const gvalue *y = &b->values[j];
    CHECK_EQ_INT(y->kind, VALUE_INITIALIZER);
    CHECK_EQ_INT(y->type.dtype, x->type.dtype);
    CHECK_EQ_INT(y->n_bytes, x->n_bytes);
    if (y->n_bytes == x->n_bytes && x->n_bytes)
      CHECK(memcmp(y->type.data, x->type.data, (size_t)x->n_bytes) == 0);
  }
  for (int i = 0; i < a->n_nodes; i++) {
    const gnode *x = &a->nodes[i], *y = &b->nodes[i];
    CHECK_EQ_STR(y->op_type, x->op_type);
    CHECK_EQ_STR(y->domain, x->domain);
    CHECK_EQ_STR(y->name, x->name);
    CHECK_EQ_INT(y->n_inputs, x->n_inputs);
    CHECK_EQ_INT(y->n_outputs, x->n_outputs);
    CHECK_EQ_INT(y->n_attrs, x->n_attrs);
    for (int k = 0; k < x->n_inputs && k < y->n_inputs; k++)
      CHECK_EQ_STR(x->inputs[k] < 0 ? "" : b->values[y->inputs[k]].name,
                   x->inputs[k] < 0 ? "" : a->values[x->inputs[k]].name);
    for (int k = 0; k < x->n_attrs && k < y->n_attrs; k++) {
      const gattr *p = &x->attrs[k], *q = &y->attrs[k];
      CHECK_EQ_STR(q->name, p->name);
      CHECK_EQ_INT(q->type, p->type);
      CHECK_EQ_INT(q->i, p->i);
      CHECK(q->f == p->f);
      CHECK_EQ_INT(q->n, p->n);
      if (p->type == ATTR_STRING) CHECK_EQ_STR(q->s, p->s);
      if (p->type == ATTR_INTS && q->n == p->n)
        CHECK(memcmp(q->ints, p->ints, (size_t)p->n * sizeof *p->ints) == 0);
    }
  }
  for (int i = 0; i < a->n_outputs; i++) {
    const gvalue *x = &a->values[a->outputs[i]], *y = &b->values[b->outputs[i]];
    CHECK_EQ_STR(y->name, x->name);
    CHECK_EQ_INT(y->type.dtype, x->type.dtype);
    CHECK_EQ_INT(y->type.rank, x->type.rank);
  }
}

/* ---- helpers for malformed models ------------------------------------------------------------ */

static void dir_for(char *buf, size_t n, const char *name) {
  snprintf(buf, n, "%s/%s", g_tmp, name);
}

/* Parses m from memory (data: the bytes of model.onnx.data, or NULL) and checks the status and
 * that the message contains each needle (NULL-terminated list). */
static void expect_parse(const Onnx__ModelProto *m, const ot_buf *data, ph_status want,
                         const char *const *needles) {
  size_t n;
  uint8_t *bytes = ot_pack(m, &n);
  graph *g = NULL;
  diag d;
  diag_clear(&d);
  ph_status s = onnx_parse_model(bytes, n, data ? data->p : NULL, data ? data->n : 0, &g, &d);
  CHECK_STATUS(s, want, d.msg);
  CHECK((g != NULL) == (s == PH_OK));
  for (int i = 0; needles && needles[i]; i++) CHECK_CONTAINS(d.msg, needles[i]);
  graph_free(g);
  free(bytes);
}

/* Writes m (+ ext) into a fresh dir, reads it, checks like expect_parse. */
static void expect_read(const Onnx__ModelProto *m, const ot_buf *ext, const char *name,
                        ph_status want, const char *const *needles) {
  char dir[1024];
  dir_for(dir, sizeof dir, name);
  diag d;
  CHECK_STATUS(ot_write_dir(m, ext, dir, &d), PH_OK, d.msg);
  graph *g = NULL;
  diag_clear(&d);
  ph_status s = onnx_read_model(dir, &g, &d);
  CHECK_STATUS(s, want, d.msg);
  CHECK((g != NULL) == (s == PH_OK));
  for (int i = 0; needles && needles[i]; i++) CHECK_CONTAINS(d.msg, needles[i]);
  graph_free(g);
}

#define NEEDLES(...) ((const char *const[]){__VA_ARGS__, NULL})

static Onnx__TensorProto *find_init(Onnx__ModelProto *m, const char *name) {
  for (size_t i = 0; i < m->graph->n_initializer; i++)
    if (strcmp(m->graph->initializer[i]->name, name) == 0) return m->graph->initializer[i];
  return NULL;
}

static Onnx__NodeProto *find_node(Onnx__ModelProto *m, const char *name) {
  for (size_t i = 0; i < m->graph->n_node; i++)
    if (strcmp(m->graph->node[i]->name, name) == 0) return m->graph->node[i];
  return NULL;
}

static Onnx__StringStringEntryProto *ext_entry(Onnx__TensorProto *t, const char *key) {
  for (size_t i = 0; i < t->n_external_data; i++)
    if (strcmp(t->external_data[i]->key, key) == 0) return t->external_data[i];
  return NULL;
}

/* ---- round trips ----------------------------------------------------------------------------- */

static void test_parse_raw_data_round_trip(void) {
  graph *g = test_graph();
  CHECK(g != NULL);
  if (!g) return;
  Onnx__ModelProto *m = ot_model(g, NULL);
  size_t n;
  uint8_t *bytes = ot_pack(m, &n);
  graph *h = NULL;
  diag d;
  CHECK_STATUS(onnx_parse_model(bytes, n, NULL, 0, &h, &d), PH_OK, d.msg);
  if (h) {
    CHECK(h->finalized);
    check_same_graph(g, h);
    check_same_run(g, h);
    /* raw_data is copied into the graph: it outlives the protobuf */
    int e = graph_find_value(h, "E");
    CHECK(e >= 0 && h->values[e].owned);
  }
  graph_free(h);
  free(bytes);
  ot_free(m);
  graph_free(g);
}

static void test_read_external_round_trip(void) {
  graph *g = test_graph();
  if (!g) return;
  ot_buf ext = {0};
  Onnx__ModelProto *m = ot_model(g, &ext);
  char dir[1024];
  dir_for(dir, sizeof dir, "external");
  diag d;
  CHECK_STATUS(ot_write_dir(m, &ext, dir, &d), PH_OK, d.msg);
  graph *h = NULL;
  onnx_model_info info;
  CHECK_STATUS(onnx_read_model_ex(dir, 1, &h, &info, &d), PH_OK, d.msg);
  if (h) {
    check_same_graph(g, h);
    check_same_run(g, h);
    /* aligned external data is a view of the adopted mapping, not a copy */
    int w = graph_find_value(h, "W");
    CHECK(w >= 0 && !h->values[w].owned);
    CHECK_EQ_INT(h->n_mappings, 1);
    CHECK_EQ_INT(info.ir_version, 8);
    CHECK_EQ_INT(info.opset_ai, 17);
    CHECK_EQ_INT(info.opset_ms, 1);
    CHECK_EQ_INT(info.n_initializers, 6);
    CHECK_EQ_INT(info.initializer_bytes, 160 + 192 + 24 + 24 + 72 + 24);
    CHECK_EQ_INT(info.external_data_bytes, info.initializer_bytes);
    CHECK_EQ_INT(info.n_external_files, 1);
    CHECK_EQ_STR(info.producer_name, "onnx_testing");
  }
  graph_free(h);
  /* the same bytes given to the in-memory parser are copied (caller's buffer may go away) */
  size_t n;
  uint8_t *bytes = ot_pack(m, &n);
  h = NULL;
  CHECK_STATUS(onnx_parse_model(bytes, n, ext.p, ext.n, &h, &d), PH_OK, d.msg);
  if (h) {
    int w = graph_find_value(h, "W");
    CHECK(w >= 0 && h->values[w].owned);
    check_same_run(g, h);
  }
  graph_free(h);
  free(bytes);
  ot_free(m);
  free(ext.p);
  graph_free(g);
}

/* Unaligned external data is copied; length omitted means the tensor's size. */
static void test_external_unaligned_and_no_length(void) {
  graph *g = test_graph();
  if (!g) return;
  ot_buf ext = {0};
  Onnx__ModelProto *m = ot_model(g, &ext);
  /* move W's bytes to offset +2 (misaligned for f32) */
  Onnx__TensorProto *w = find_init(m, "W");
  long off = atol(ext_entry(w, "offset")->value);
  uint8_t *copy = calloc(1, 194);
  memcpy(copy, ext.p + off, 192);
  size_t off2 = ot_buf_put(&ext, copy, 194, 1) + 2;
  memmove(ext.p + off2, copy, 192);
  free(copy);
  char num[32];
  snprintf(num, sizeof num, "%zu", off2);
  ot_set_str(&ext_entry(w, "offset")->value, num);
  /* drop b's length entry */
  Onnx__TensorProto *b = find_init(m, "b");
  Onnx__StringStringEntryProto *len = ext_entry(b, "length");
  ot_set_str(&len->key, "checksum"); /* an ignored key in its place */
  char dir[1024];
  dir_for(dir, sizeof dir, "unaligned");
  diag d;
  CHECK_STATUS(ot_write_dir(m, &ext, dir, &d), PH_OK, d.msg);
  graph *h = NULL;
  CHECK_STATUS(onnx_read_model(dir, &h, &d), PH_OK, d.msg);
  if (h) {
    int wi = graph_find_value(h, "W");
    CHECK(wi >= 0 && h->values[wi].owned);
    check_same_graph(g, h);
    check_same_run(g, h);
  }
  graph_free(h);
  ot_free(m);
  free(ext.p);
  graph_free(g);
}

/* Typed fields instead of raw_data: float_data, int64_data, int32_data (f16 bit patterns). */
static void test_typed_fields(void) {
  graph *g = test_graph();
  if (!g) return;
  Onnx__ModelProto *m = ot_model(g, NULL);
  Onnx__TensorProto *w = find_init(m, "W"), *e = find_init(m, "E");
  w->n_float_data = 48;
  w->float_data = malloc(48 * sizeof(float));
  memcpy(w->float_data, w->raw_data.data, 48 * sizeof(float));
  free(w->raw_data.data);
  w->raw_data.data = NULL;
  w->raw_data.len = 0;
  w->has_raw_data = 0;
  e->n_int32_data = 80;
  e->int32_data = malloc(80 * sizeof(int32_t));
  for (int i = 0; i < 80; i++) {
    uint16_t h;
    memcpy(&h, e->raw_data.data + 2 * i, 2);
    e->int32_data[i] = h;
  }
  free(e->raw_data.data);
  e->raw_data.data = NULL;
  e->raw_data.len = 0;
  e->has_raw_data = 0;
  /* an extra i64 and an i8 initializer, unused by the nodes */
  Onnx__TensorProto *t64 = malloc(sizeof *t64);
  onnx__tensor_proto__init(t64);
  t64->name = ot_strdup("shape64");
  t64->has_data_type = 1;
  t64->data_type = 7;
  t64->n_dims = 1;
  t64->dims = malloc(sizeof(int64_t));
  t64->dims[0] = 3;
  t64->n_int64_data = 3;
  t64->int64_data = malloc(3 * sizeof(int64_t));
  t64->int64_data[0] = -1, t64->int64_data[1] = 0, t64->int64_data[2] = INT64_MAX;
  OT_APPEND(m->graph->n_initializer, m->graph->initializer, t64);
  Onnx__TensorProto *t8 = malloc(sizeof *t8);
  onnx__tensor_proto__init(t8);
  t8->name = ot_strdup("bytes8");
  t8->has_data_type = 1;
  t8->data_type = 3; /* INT8 */
  t8->n_dims = 1;
  t8->dims = malloc(sizeof(int64_t));
  t8->dims[0] = 2;
  t8->n_int32_data = 2;
  t8->int32_data = malloc(2 * sizeof(int32_t));
  t8->int32_data[0] = -128, t8->int32_data[1] = 127;
  OT_APPEND(m->graph->n_initializer, m->graph->initializer, t8);

  size_t n;
  uint8_t *bytes = ot_pack(m, &n);
  graph *h = NULL;
  diag d;
  CHECK_STATUS(onnx_parse_model(bytes, n, NULL, 0, &h, &d), PH_OK, d.msg);
  if (h) {
    check_same_graph(g, h);
    check_same_run(g, h);
    const gvalue *v64 = &h->values[graph_find_value(h, "shape64")];
    const int64_t *p64 = v64->type.data;
    CHECK(p64[0] == -1 && p64[1] == 0 && p64[2] == INT64_MAX);
    const int8_t *p8 = h->values[graph_find_value(h, "bytes8")].type.data;
    CHECK(p8[0] == -128 && p8[1] == 127);
  }
  graph_free(h);
  free(bytes);

  /* out of range for the dtype, count mismatch, field mismatch */
  t8->int32_data[1] = 128;
  expect_parse(m, NULL, PH_ERR_ONNX, NEEDLES("bytes8", "int32_data[1] = 128"));
  t8->int32_data[1] = 0;
  t64->n_int64_data = 2;
  expect_parse(m, NULL, PH_ERR_ONNX, NEEDLES("shape64", "int64_data has 2 values", "[3]"));
  t64->n_int64_data = 3;
  t8->data_type = 1; /* FLOAT with int32_data */
  expect_parse(m, NULL, PH_ERR_ONNX, NEEDLES("bytes8", "float_data"));
  ot_free(m);
  graph_free(g);
}

/* dim_value known, dim_param -> unknown with its name, absent -> anonymous unknown; old IR lists
 * initializers among the inputs. */
static void test_dims_and_old_ir(void) {
  graph *g = test_graph();
  if (!g) return;
  Onnx__ModelProto *m = ot_model(g, NULL);
  Onnx__TensorShapeProto *sh = m->graph->input[1]->type->tensor_type->shape; /* past_conv */
  CHECK_EQ_INT(sh->dim[0]->value_case, ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM);
  free(sh->dim[0]->dim_param);
  sh->dim[0]->dim_param = NULL;
  sh->dim[0]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE__NOT_SET;
  /* IR 3: initializers repeated as inputs */
  m->ir_version = 3;
  for (size_t i = 0; i < m->graph->n_initializer; i++) {
    Onnx__ValueInfoProto *vi = malloc(sizeof *vi);
    onnx__value_info_proto__init(vi);
    vi->name = ot_strdup(m->graph->initializer[i]->name);
    OT_APPEND(m->graph->n_input, m->graph->input, vi);
  }
  size_t n;
  uint8_t *bytes = ot_pack(m, &n);
  graph *h = NULL;
  diag d;
  CHECK_STATUS(onnx_parse_model(bytes, n, NULL, 0, &h, &d), PH_OK, d.msg);
  if (h) {
    CHECK_EQ_INT(h->n_inputs, 2);
    const gvalue *ids = &h->values[h->inputs[0]], *past = &h->values[h->inputs[1]];
    CHECK_EQ_INT(ids->type.dims[0], -1);
    CHECK(ids->sym[0] >= 0 && strcmp(h->symbols[ids->sym[0]], "batch") == 0);
    CHECK(ids->sym[1] >= 0 && strcmp(h->symbols[ids->sym[1]], "seq") == 0);
    CHECK_EQ_INT(past->type.dims[0], -1);
    CHECK_EQ_INT(past->sym[0], -1);
    CHECK_EQ_INT(past->type.dims[1], 6);
    check_same_run(g, h);
  }
  graph_free(h);
  free(bytes);
  ot_free(m);
  graph_free(g);
}

/* Output dim names: "<value>_dim<k>" (what the writer generates for anonymous dims) reads as
 * anonymous; a name too long for the graph's symbol table is dropped and counted; 17 distinct
 * names overflow the 16-entry table by one. Sizes are never lost. */
static void test_symbol_names(void) {
  graph *g = test_graph();
  if (!g) return;
  Onnx__ModelProto *m = ot_model(g, NULL);
  Onnx__TensorShapeProto *sh = m->graph->output[0]->type->tensor_type->shape; /* out [?, 6, ?] */
  sh->dim[0]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
  sh->dim[0]->dim_param = ot_strdup("out_dim0");
  sh->dim[2]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
  sh->dim[2]->dim_param = ot_strdup("past_sequence_length + sequence_length");
  Onnx__TensorShapeProto *psh = m->graph->output[1]->type->tensor_type->shape; /* [?, 6, 2] */
  psh->dim[0]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
  psh->dim[0]->dim_param = ot_strdup("present_conv_dim1"); /* wrong index: a real name */
  char dir[1024];
  dir_for(dir, sizeof dir, "symbols");
  diag d;
  CHECK_STATUS(ot_write_dir(m, NULL, dir, &d), PH_OK, d.msg);
  graph *h = NULL;
  onnx_model_info info;
  CHECK_STATUS(onnx_read_model_ex(dir, 1, &h, &info, &d), PH_OK, d.msg);
  if (h) {
    const gvalue *out = &h->values[graph_find_value(h, "out")];
    const gvalue *pc = &h->values[graph_find_value(h, "present_conv")];
    CHECK_EQ_INT(out->sym[0], -1);
    CHECK_EQ_INT(out->sym[2], -1);
    CHECK_EQ_INT(out->type.dims[1], 6);
    CHECK(pc->sym[0] >= 0 && strcmp(h->symbols[pc->sym[0]], "present_conv_dim1") == 0);
    CHECK_EQ_INT(info.n_symbols_dropped, 1);
    CHECK_EQ_INT(h->n_symbols, 3); /* batch, seq, present_conv_dim1 */
  }
  graph_free(h);
  /* two unused inputs of 8 named dims each: with batch and seq the table (16) holds t0..t7 and
   * u0..u5; u6, u7 and then present_conv_dim1 are dropped */
  for (int k = 0; k < 2; k++) {
    Onnx__ValueInfoProto *extra = malloc(sizeof *extra);
    onnx__value_info_proto__init(extra);
    extra->name = ot_strdup(k ? "extra_u" : "extra_t");
    extra->type = malloc(sizeof *extra->type);
    onnx__type_proto__init(extra->type);
    extra->type->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    extra->type->tensor_type = malloc(sizeof *extra->type->tensor_type);
    onnx__type_proto__tensor__init(extra->type->tensor_type);
    extra->type->tensor_type->has_elem_type = 1;
    extra->type->tensor_type->elem_type = 1;
    Onnx__TensorShapeProto *esh = malloc(sizeof *esh);
    onnx__tensor_shape_proto__init(esh);
    for (int i = 0; i < 8; i++) {
      Onnx__TensorShapeProto__Dimension *dm = malloc(sizeof *dm);
      onnx__tensor_shape_proto__dimension__init(dm);
      dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      char nm[8];
      snprintf(nm, sizeof nm, "%c%d", k ? 'u' : 't', i);
      dm->dim_param = ot_strdup(nm);
      OT_APPEND(esh->n_dim, esh->dim, dm);
    }
    extra->type->tensor_type->shape = esh;
    OT_APPEND(m->graph->n_input, m->graph->input, extra);
  }
  CHECK_STATUS(ot_write_dir(m, NULL, dir, &d), PH_OK, d.msg);
  h = NULL;
  CHECK_STATUS(onnx_read_model_ex(dir, 1, &h, &info, &d), PH_OK, d.msg);
  if (h) {
    CHECK_EQ_INT(h->n_symbols, 16);
    const gvalue *u = &h->values[graph_find_value(h, "extra_u")];
    CHECK(u->sym[5] >= 0 && strcmp(h->symbols[u->sym[5]], "u5") == 0);
    CHECK_EQ_INT(u->sym[6], -1);
    CHECK_EQ_INT(u->type.dims[7], -1);
    CHECK_EQ_INT(h->values[graph_find_value(h, "present_conv")].sym[0], -1);
    CHECK_EQ_INT(info.n_symbols_dropped, 4);
  }
  graph_free(h);
  ot_free(m);
  graph_free(g);
}

/* Attributes of every supported kind survive, and a graph of ops this build lacks can still be
 * read unfinalized (inspect), its outputs carrying their declared types. */
static void test_attributes_unfinalized(void) {
  diag d;
  graph *g = NULL;
  graph_create(&g, &d);
  int x = graph_add_input(g, "x", PH_DTYPE_F32, 2, (int64_t[]){-1, 4}, (const char *[]){"n", NULL});
  int64_t ints[3] = {1, -2, INT64_MIN};
  float floats[2] = {0.5f, -1e30f};
  gattr attrs[5] = {attr_int("i", -7), attr_float("f", 2.5f), attr_string("s", "héllo"),
                    attr_ints("is", ints, 3), attr_floats("fs", floats, 2)};
  int outs[2];
  graph_add_node(g, "Frobnicate", "com.microsoft", "frob", 1, &x, 2, (const char *[]){"y", NULL},
                 outs, 5, attrs);
  int y = outs[0];
  graph_mark_output(g, y, NULL);
  g->values[y].type = tinfo_make(PH_DTYPE_F16, 2, (int64_t[]){-1, 4}); /* "declared" */
  g->values[y].sym[0] = g->values[x].sym[0];
  Onnx__ModelProto *m = ot_model(g, NULL);
  graph_free(g);
  char dir[1024];
  dir_for(dir, sizeof dir, "attrs");
  CHECK_STATUS(ot_write_dir(m, NULL, dir, &d), PH_OK, d.msg);
  graph *h = NULL;
  CHECK_STATUS(onnx_read_model_ex(dir, 0, &h, NULL, &d), PH_OK, d.msg);
  if (h) {
    CHECK(!h->finalized);
    const gnode *n = &h->nodes[0];
    CHECK_EQ_INT(n->n_outputs, 2);
    CHECK_EQ_INT(n->outputs[1], -1);
    CHECK_EQ_INT(node_attr_int(n, "i", 0), -7);
    CHECK(node_attr_float(n, "f", 0) == 2.5f);
    CHECK_EQ_STR(node_attr_string(n, "s", ""), "héllo");
    const gattr *a = node_attr(n, "is");
    CHECK(a && a->type == ATTR_INTS && a->n == 3 && a->ints[2] == INT64_MIN);
    a = node_attr(n, "fs");
    CHECK(a && a->type == ATTR_FLOATS && a->n == 2 && a->floats[1] == -1e30f);
    const gvalue *out = &h->values[h->outputs[0]];
    CHECK_EQ_INT(out->type.dtype, PH_DTYPE_F16);
    CHECK(out->sym[0] >= 0 && strcmp(h->symbols[out->sym[0]], "n") == 0);
    /* finalizing says which op is missing */
    CHECK_STATUS(graph_finalize(h, &d), PH_ERR_UNSUPPORTED, d.msg);
    CHECK_CONTAINS(d.msg, "com.microsoft.Frobnicate");
  }
  graph_free(h);
  /* the default read finalizes */
  CHECK_STATUS(onnx_read_model(dir, &h, &d), PH_ERR_UNSUPPORTED, d.msg);
  CHECK(h == NULL);
  ot_free(m);
}

/* ---- malformed models ------------------------------------------------------------------------ */

static void test_garbage_and_truncation(void) {
  graph *g = NULL;
  diag d;
  const char *junk = "this is certainly not a protobuf \xff\xff\xff\xff";
  CHECK_STATUS(onnx_parse_model((const uint8_t *)junk, strlen(junk), NULL, 0, &g, &d), PH_ERR_ONNX,
               d.msg);
  CHECK_CONTAINS(d.msg, "protobuf decoding failed");
  CHECK(g == NULL);
  CHECK_STATUS(onnx_parse_model(NULL, 0, NULL, 0, &g, &d), PH_ERR_ONNX, d.msg);
  CHECK_CONTAINS(d.msg, "no ir_version");

  graph *t = test_graph();
  if (!t) return;
  Onnx__ModelProto *m = ot_model(t, NULL);
  size_t n;
  uint8_t *bytes = ot_pack(m, &n);
  CHECK_STATUS(onnx_parse_model(bytes, n / 2, NULL, 0, &g, &d), PH_ERR_ONNX, d.msg);
  CHECK_CONTAINS(d.msg, "truncated");
  /* every prefix: a typed error with a message, or (cut between fields) a valid graph */
  int n_ok = 0, bad = 0;
  for (size_t k = 0; k < n; k++) {
    diag_clear(&d);
    ph_status s = onnx_parse_model(bytes, k, NULL, 0, &g, &d);
    if (s == PH_OK)
      n_ok++;
    else if (d.status != s || !d.msg[0] || g)
      bad++;
    graph_free(g);
    g = NULL;
  }
  CHECK_EQ_INT(bad, 0);
  CHECK(n_ok < 3);
  /* the model read from a file cut short names the file */
  char dir[1024], path[1200];
  dir_for(dir, sizeof dir, "truncated");
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  CHECK_STATUS(file_write_all(path, bytes, n - 5, &d), PH_OK, d.msg);
  CHECK_STATUS(onnx_read_model(dir, &g, &d), PH_ERR_ONNX, d.msg);
  CHECK_CONTAINS(d.msg, path);
  dir_for(dir, sizeof dir, "nothing_here");
  CHECK_STATUS(onnx_read_model(dir, &g, &d), PH_ERR_NOT_FOUND, d.msg);
  CHECK_CONTAINS(d.msg, "model.onnx");
  free(bytes);
  ot_free(m);
  graph_free(t);
}

static void test_external_data_errors(void) {
  graph *g = test_graph();
  if (!g) return;
  ot_buf ext = {0};
  Onnx__ModelProto *m = ot_model(g, &ext);
  Onnx__TensorProto *w = find_init(m, "W");
  Onnx__StringStringEntryProto *off = ext_entry(w, "offset"), *len = ext_entry(w, "length"),
                               *loc = ext_entry(w, "location");
  char keep_off[32], num[32];
  snprintf(keep_off, sizeof keep_off, "%s", off->value);

  snprintf(num, sizeof num, "%zu", ext.n - 100);
  ot_set_str(&off->value, num);
  expect_read(m, &ext, "ext_past_end", PH_ERR_ONNX,
              NEEDLES("\"W\"", "lies outside", "model.onnx.data"));
  expect_parse(m, &ext, PH_ERR_ONNX, NEEDLES("\"W\"", "lies outside"));
  ot_set_str(&off->value, "99999999999999999999999");
  expect_parse(m, &ext, PH_ERR_ONNX, NEEDLES("\"W\"", "offset", "not a decimal integer"));
  ot_set_str(&off->value, "-4");
  expect_parse(m, &ext, PH_ERR_ONNX, NEEDLES("\"W\"", "offset \"-4\""));
  ot_set_str(&off->value, keep_off);

  ot_set_str(&len->value, "100");
  expect_read(m, &ext, "ext_length", PH_ERR_ONNX, NEEDLES("\"W\"", "length 100", "needs 192"));
  ot_set_str(&len->value, "192");

  ot_set_str(&loc->value, "../x");
  expect_read(m, &ext, "ext_dotdot", PH_ERR_ONNX, NEEDLES("\"W\"", "\"../x\"", "plain file name"));
  ot_set_str(&loc->value, "..");
  expect_parse(m, &ext, PH_ERR_ONNX, NEEDLES("plain file name"));
  ot_set_str(&loc->value, "/etc/passwd");
  expect_parse(m, &ext, PH_ERR_ONNX, NEEDLES("plain file name"));
  ot_set_str(&loc->value, "other.bin");
  expect_read(m, &ext, "ext_missing_file", PH_ERR_NOT_FOUND, NEEDLES("\"W\"", "other.bin"));
  expect_parse(m, &ext, PH_ERR_ONNX, NEEDLES("\"W\"", "other.bin", "only model.onnx.data"));
  ot_set_str(&loc->value, ONNX_DATA_FILE);

  /* a data file that resolves outside the package (symlink) is refused, as ORT does */
  char dir[1024], outside[1200], link[1200];
  dir_for(dir, sizeof dir, "ext_symlink");
  diag d;
  CHECK_STATUS(ot_write_dir(m, NULL, dir, &d), PH_OK, d.msg);
  snprintf(outside, sizeof outside, "%s/outside.data", g_tmp);
  CHECK_STATUS(file_write_all(outside, ext.p, ext.n, &d), PH_OK, d.msg);
  snprintf(link, sizeof link, "%s/%s", dir, ONNX_DATA_FILE);
  unlink(link);
  CHECK(symlink(outside, link) == 0);
  graph *h = NULL;
  CHECK_STATUS(onnx_read_model(dir, &h, &d), PH_ERR_ONNX, d.msg);
  CHECK_CONTAINS(d.msg, "resolves outside the package");
  graph_free(h);

  /* no data file given to the in-memory parser */
  expect_parse(m, NULL, PH_ERR_ONNX, NEEDLES("initializer \"E\"", "no data file was given"));
  /* unknown key, missing location */
  ot_set_str(&len->key, "lenght");
  expect_parse(m, &ext, PH_ERR_ONNX, NEEDLES("\"W\"", "unknown external_data key \"lenght\""));
  ot_set_str(&len->key, "length");
  ot_set_str(&loc->key, "place");
  expect_parse(m, &ext, PH_ERR_ONNX, NEEDLES("\"W\""));
  ot_set_str(&loc->key, "location");
  /* external and raw_data at once */
  w->has_raw_data = 1;
  w->raw_data.len = 0;
  expect_parse(m, &ext, PH_ERR_ONNX, NEEDLES("\"W\"", "more than one place"));
  w->has_raw_data = 0;
  /* a valid model again */
  expect_parse(m, &ext, PH_OK, NULL);
  ot_free(m);
  free(ext.p);
  graph_free(g);
}

static void test_initializer_errors(void) {
  graph *g = test_graph();
  if (!g) return;
  Onnx__ModelProto *m = ot_model(g, NULL);
  Onnx__TensorProto *b = find_init(m, "b");
  b->data_type = 11; /* DOUBLE */
  expect_parse(m, NULL, PH_ERR_TENSOR_DTYPE, NEEDLES("initializer \"b\"", "DOUBLE"));
  b->data_type = 99;
  expect_parse(m, NULL, PH_ERR_TENSOR_DTYPE, NEEDLES("initializer \"b\"", "99"));
  b->data_type = 1;
  b->raw_data.len = 20;
  expect_parse(m, NULL, PH_ERR_ONNX, NEEDLES("\"b\"", "raw_data holds 20 bytes", "needs 24"));
  b->raw_data.len = 24;
  b->dims[0] = -6;
  expect_parse(m, NULL, PH_ERR_ONNX, NEEDLES("\"b\"", "negative"));
  b->dims[0] = INT64_MAX;
  expect_parse(m, NULL, PH_ERR_ONNX, NEEDLES("\"b\"", "overflows"));
  b->dims[0] = 6;
  b->has_raw_data = 0;
  expect_parse(m, NULL, PH_ERR_ONNX, NEEDLES("\"b\"", "has no data"));
  b->has_raw_data = 1;
  ot_set_str(&b->name, "W");
  expect_parse(m, NULL, PH_ERR_ONNX, NEEDLES("\"W\" is defined twice"));
  ot_set_str(&b->name, "b");
  expect_parse(m, NULL, PH_OK, NULL);
  ot_free(m);
  graph_free(g);
}

static void test_node_errors(void) {
  graph *g = test_graph();
  if (!g) return;
  Onnx__ModelProto *m = ot_model(g, NULL);
  Onnx__NodeProto *mm = find_node(m, "mm"), *sig = find_node(m, "sig"),
                  *conv = find_node(m, "conv");

  /* input naming nothing, and naming a later node's output */
  ot_set_str(&mm->input[1], "no_such_value");
  expect_parse(m, NULL, PH_ERR_ONNX,
               NEEDLES("node 2 \"mm\" (MatMul)", "\"no_such_value\"",
                       "not a graph input, an initializer or an output"));
  ot_set_str(&mm->input[1], "s");
  expect_parse(m, NULL, PH_ERR_ONNX, NEEDLES("\"mm\"", "\"s\""));
  ot_set_str(&mm->input[1], "W");

  /* an output assigned twice */
  ot_set_str(&sig->output[0], "z");
  expect_parse(m, NULL, PH_ERR_ONNX, NEEDLES("\"sig\"", "output \"z\" is already defined"));
  ot_set_str(&sig->output[0], "s");

  /* attribute types beyond INT/FLOAT/STRING/INTS/FLOATS */
  Onnx__AttributeProto *act = conv->attribute[0];
  act->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
  expect_parse(m, NULL, PH_ERR_UNSUPPORTED,
               NEEDLES("\"conv\"", "attribute \"activation\"", "TENSOR"));
  act->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS;
  expect_parse(m, NULL, PH_ERR_UNSUPPORTED, NEEDLES("\"conv\"", "\"activation\"", "GRAPHS"));
  act->type = 77;
  expect_parse(m, NULL, PH_ERR_UNSUPPORTED, NEEDLES("\"activation\"", "77"));
  act->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
  act->s.data[1] = 0;
  expect_parse(m, NULL, PH_ERR_ONNX, NEEDLES("\"activation\"", "NUL"));
  act->s.data[1] = 'i';

  /* unknown op types are listed all at once, with their domains */
  ot_set_str(&sig->op_type, "Sigmoidal");
  ot_set_str(&mm->op_type, "MatMulPlus");
  ot_set_str(&mm->domain, "com.microsoft");
  expect_parse(m, NULL, PH_ERR_UNSUPPORTED,
               NEEDLES("2 unsupported operator types", "com.microsoft.MatMulPlus", "Sigmoidal"));
  ot_set_str(&sig->op_type, "Sigmoid");
  ot_set_str(&mm->op_type, "MatMul");
  ot_set_str(&mm->domain, "");

  /* a node in a domain we do not know */
  ot_set_str(&sig->domain, "ai.onnx.ml");
  expect_parse(m, NULL, PH_ERR_UNSUPPORTED, NEEDLES("\"sig\"", "domain \"ai.onnx.ml\""));
  ot_set_str(&sig->domain, "ai.onnx"); /* the default domain's long spelling */
  expect_parse(m, NULL, PH_OK, NULL);
  ot_set_str(&sig->domain, "");
  ot_free(m);
  graph_free(g);
}

static void test_header_and_output_errors(void) {
  graph *g = test_graph();
  if (!g) return;
  Onnx__ModelProto *m = ot_model(g, NULL);
  m->ir_version = 2;
  expect_parse(m, NULL, PH_ERR_UNSUPPORTED, NEEDLES("IR version 2"));
  m->ir_version = 11;
  expect_parse(m, NULL, PH_ERR_UNSUPPORTED, NEEDLES("IR version 11"));
  m->ir_version = 10;
  expect_parse(m, NULL, PH_OK, NULL);
  m->ir_version = 8;
  m->opset_import[0]->version = 11;
  expect_parse(m, NULL, PH_ERR_UNSUPPORTED, NEEDLES("ai.onnx opset 11"));
  m->opset_import[0]->version = 17;
  m->opset_import[1]->version = 2;
  expect_parse(m, NULL, PH_ERR_UNSUPPORTED, NEEDLES("com.microsoft opset 2"));
  m->opset_import[1]->version = 1;
  /* two extra imports: unknown domains (both named), then duplicates; the count is lowered to
   * hide them and restored before ot_free so every entry is freed */
  OT_APPEND(m->n_opset_import, m->opset_import, ot_opset("ai.onnx.ml", 3));
  OT_APPEND(m->n_opset_import, m->opset_import, ot_opset("org.pytorch.aten", 1));
  expect_parse(m, NULL, PH_ERR_UNSUPPORTED,
               NEEDLES("2 unsupported opset domains", "\"ai.onnx.ml\"", "\"org.pytorch.aten\""));
  m->n_opset_import = 3;
  ot_set_str(&m->opset_import[2]->domain, "ai.onnx");
  expect_parse(m, NULL, PH_ERR_ONNX, NEEDLES("ai.onnx is imported twice"));
  ot_set_str(&m->opset_import[2]->domain, "com.microsoft");
  expect_parse(m, NULL, PH_ERR_ONNX, NEEDLES("com.microsoft is imported twice"));
  /* without the com.microsoft import the conv node's domain is not imported */
  m->n_opset_import = 1;
  expect_parse(m, NULL, PH_ERR_ONNX, NEEDLES("\"conv\"", "com.microsoft is not among the opset"));
  m->n_opset_import = 2;

  /* outputs: declared dtype or shape contradicting the computation, unknown names, none */
  Onnx__ValueInfoProto *out = m->graph->output[0];
  out->type->tensor_type->elem_type = 10;
  expect_parse(m, NULL, PH_ERR_TENSOR_DTYPE,
               NEEDLES("graph output \"out\"", "declared f16", "is f32"));
  out->type->tensor_type->elem_type = 1;
  out->type->tensor_type->shape->dim[1]->dim_value = 7;
  expect_parse(m, NULL, PH_ERR_TENSOR_SHAPE, NEEDLES("graph output \"out\"", "7"));
  out->type->tensor_type->shape->dim[1]->dim_value = 6;
  ot_set_str(&out->name, "nowhere");
  expect_parse(m, NULL, PH_ERR_ONNX, NEEDLES("graph output \"nowhere\""));
  ot_set_str(&out->name, "out");
  m->graph->n_output = 0;
  expect_parse(m, NULL, PH_ERR_ONNX, NEEDLES("no outputs"));
  m->graph->n_output = 2;
  /* an input of a type we cannot hold */
  m->graph->input[0]->type->tensor_type->elem_type = 9; /* BOOL */
  expect_parse(m, NULL, PH_ERR_TENSOR_DTYPE, NEEDLES("graph input \"ids\"", "BOOL"));
  m->graph->input[0]->type->tensor_type->elem_type = 7;
  expect_parse(m, NULL, PH_OK, NULL);
  /* no graph at all */
  Onnx__GraphProto *gp = m->graph;
  m->graph = NULL;
  expect_parse(m, NULL, PH_ERR_ONNX, NEEDLES("no graph"));
  m->graph = gp;
  m->n_opset_import = 4;
  ot_free(m);
  graph_free(g);
}

/* ---- nesting ----------------------------------------------------------------------------------
 * A ModelProto whose graph holds a node whose attribute holds a graph that holds a node ...
 * `levels` times: 1 + 3 * levels messages nested below the ModelProto. Written by hand, back to
 * front (each message's length is known once its contents are written), because protobuf-c's own
 * packer recurses as deeply as its unpacker. Caller frees. */
typedef struct rev_buf {
  uint8_t *p;
  size_t pos; /* bytes are p[pos..cap) */
} rev_buf;

static void rev_varint(rev_buf *r, uint64_t v) {
  uint8_t t[10];
  int n = 0;
  do {
    t[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  r->pos -= (size_t)n;
  memcpy(r->p + r->pos, t, (size_t)n);
}

/* Makes p[pos..end) the contents of length-delimited field `field`. */
static void rev_wrap(rev_buf *r, size_t end, unsigned field) {
  rev_varint(r, end - r->pos);
  rev_varint(r, (uint64_t)field << 3 | 2);
}

static uint8_t *nested_model(int levels, size_t *size) {
  const size_t cap = (size_t)levels * 40 + 64;
  rev_buf r = {malloc(cap), cap};
  if (!r.p) return NULL;
  /* each message's nested one is its last field, so every message ends at cap */
  for (int i = 0; i < levels; i++) {
    rev_wrap(&r, cap, 6);     /* AttributeProto.g */
    rev_varint(&r, 5);        /* AttributeProto.type = GRAPH ... */
    rev_varint(&r, 20u << 3); /* ... (field 20, varint) */
    rev_wrap(&r, cap, 5);     /* NodeProto.attribute */
    rev_wrap(&r, cap, 1);     /* GraphProto.node */
  }
  rev_wrap(&r, cap, 7); /* ModelProto.graph */
  size_t end = r.pos;
  rev_varint(&r, 17); /* OperatorSetIdProto.version */
  rev_varint(&r, 2u << 3);
  rev_wrap(&r, end, 8); /* ModelProto.opset_import */
  rev_varint(&r, 8);    /* ModelProto.ir_version */
  rev_varint(&r, 1u << 3);
  *size = cap - r.pos;
  memmove(r.p, r.p + r.pos, *size);
  return r.p;
}

static ph_status parse_nested(int levels, diag *d) {
  size_t n = 0;
  uint8_t *bytes = nested_model(levels, &n);
  if (!bytes) return diag_set(d, PH_ERR_NO_MEMORY, "test: out of memory");
  graph *g = NULL;
  ph_status s = onnx_parse_model(bytes, n, NULL, 0, &g, d);
  graph_free(g);
  free(bytes);
  return s;
}

/* Defect: 3,000 nested subgraphs (a 50 KB file) overflowed the stack inside protobuf-c. */
static void test_deep_nesting(void) {
  diag d;
  /* 33 levels nest 1 + 99 messages: within the limit, so the model decodes and the reader then
   * refuses it for what it is (a graph without outputs) */
  CHECK_STATUS(parse_nested(33, &d), PH_ERR_ONNX, d.msg);
  CHECK_CONTAINS(d.msg, "no outputs");
  /* 34 levels nest 103: refused before decoding */
  CHECK_STATUS(parse_nested(34, &d), PH_ERR_LIMIT, d.msg);
  CHECK_CONTAINS(d.msg, "nest more than 100 deep");
  CHECK_CONTAINS(d.msg, "GraphProto");
  size_t n = 0;
  uint8_t *bytes = nested_model(3000, &n);
  CHECK(bytes && n < 60000);
  free(bytes);
  CHECK_STATUS(parse_nested(3000, &d), PH_ERR_LIMIT, d.msg);
  CHECK_STATUS(parse_nested(200000, &d), PH_ERR_LIMIT, d.msg);
  /* read from a package it names the file */
  char dir[1024], path[1200];
  dir_for(dir, sizeof dir, "deep");
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  bytes = nested_model(3000, &n);
  CHECK_STATUS(file_write_all(path, bytes, n, &d), PH_OK, d.msg);
  free(bytes);
  graph *g = NULL;
  CHECK_STATUS(onnx_read_model(dir, &g, &d), PH_ERR_LIMIT, d.msg);
  CHECK_CONTAINS(d.msg, path);
  CHECK(g == NULL);
  /* malformed wire data the walk cannot follow is PH_ERR_ONNX, as protobuf-c would say */
  const uint8_t group[] = {0x0b, 0x0c}; /* field 1 as a start/end group */
  CHECK_STATUS(onnx_parse_model(group, sizeof group, NULL, 0, &g, &d), PH_ERR_ONNX, d.msg);
  CHECK_CONTAINS(d.msg, "protobuf decoding failed");
  const uint8_t past_end[] = {0x3a, 0x05, 0x0a, 0x01}; /* graph of 5 bytes, 2 present */
  CHECK_STATUS(onnx_parse_model(past_end, sizeof past_end, NULL, 0, &g, &d), PH_ERR_ONNX, d.msg);
  CHECK_CONTAINS(d.msg, "protobuf decoding failed");
}

/* A file of many tiny fields: 2-byte empty NodeProtos decode at ~75x their size, so a 2 GB
 * file could ask for 150 GB; past ONNX_MAX_FIELDS the walk refuses before protobuf-c allocates
 * anything (measured with inspect: one field under the limit, 16 MB, decodes in 1.26 GB peak
 * RSS; at the limit it is refused with 18 MB). */
static void test_too_many_fields(void) {
  const size_t n_nodes = ONNX_MAX_FIELDS, body = 2 * n_nodes;
  uint8_t *p = malloc(body + 16);
  if (!check_report(p != NULL, __FILE__, __LINE__, "allocated the test model")) return;
  size_t k = 0;
  p[k++] = 0x3a; /* ModelProto.graph, length-delimited */
  for (size_t v = body; v; v >>= 7) p[k++] = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
  for (size_t i = 0; i < n_nodes; i++) p[k++] = 0x0a, p[k++] = 0x00; /* GraphProto.node {} */
  diag d;
  graph *g = NULL;
  CHECK_STATUS(onnx_parse_model(p, k, NULL, 0, &g, &d), PH_ERR_LIMIT, d.msg);
  CHECK_CONTAINS(d.msg, "protobuf fields");
  CHECK(g == NULL);
  /* one node fewer (the graph field itself counts) is within the limit: decoded, and refused
   * for what it is, a graph without outputs; 1 << 16 nodes keep this part cheap */
  k = 0;
  p[k++] = 0x3a;
  const size_t small = 2 * ((size_t)1 << 16);
  for (size_t v = small; v; v >>= 7) p[k++] = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
  for (size_t i = 0; i < small / 2; i++) p[k++] = 0x0a, p[k++] = 0x00;
  CHECK_STATUS(onnx_parse_model(p, k, NULL, 0, &g, &d), PH_ERR_ONNX, d.msg);
  graph_free(g);
  free(p);
}

/* ---- config-only packages -------------------------------------------------------------------
 * export --config-only writes model.onnx without model.onnx.data and marks it in metadata_props
 * (io/onnx.h ONNX_META_CONFIG_ONLY). Marked: refused for running whether or not a data file lies
 * there, read for its structure when asked. Not marked, a missing data file is damage (a typed
 * error) even when the structure is asked for. */
static void test_config_only_marker(void) {
  graph *g = test_graph();
  if (!g) return;
  ot_buf ext = {0};
  Onnx__ModelProto *m = ot_model(g, &ext); /* every initializer external */
  Onnx__StringStringEntryProto *mark = ot_entry(ONNX_META_CONFIG_ONLY, "true");
  OT_APPEND(m->n_metadata_props, m->metadata_props, ot_entry("note", "free text"));
  OT_APPEND(m->n_metadata_props, m->metadata_props, mark);
  char dir[1024], path[1200];
  dir_for(dir, sizeof dir, "config_only");
  snprintf(path, sizeof path, "%s/%s", dir, ONNX_DATA_FILE);
  unlink(path); /* left by the step below in an earlier run */
  diag d;
  CHECK_STATUS(ot_write_dir(m, NULL, dir, &d), PH_OK, d.msg);
  graph *h = NULL;
  CHECK_STATUS(onnx_read_model(dir, &h, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "config-only package");
  CHECK_CONTAINS(d.msg, "cannot run");
  CHECK(h == NULL);
  onnx_model_info info;
  CHECK_STATUS(onnx_read_model_ex(dir, ONNX_READ_FINALIZE | ONNX_READ_CONFIG_ONLY, &h, &info, &d),
               PH_OK, d.msg);
  if (h) {
    CHECK_EQ_INT(h->n_nodes, g->n_nodes);
    CHECK_EQ_INT(h->n_outputs, g->n_outputs);
    CHECK(h->finalized);
    CHECK_EQ_INT(info.config_only, 1);
    CHECK_EQ_INT(info.n_initializers, 6);
    CHECK_EQ_INT(info.initializer_bytes, 160 + 192 + 24 + 24 + 72 + 24);
    CHECK_EQ_INT(info.external_data_bytes, info.initializer_bytes);
    CHECK_EQ_INT(info.n_external_files, 0); /* none opened */
    const int w = graph_find_value(h, "W");
    CHECK(w >= 0 && h->values[w].type.data == NULL && h->values[w].type.dims[1] == 6);
  }
  graph_free(h);
  h = NULL;
  /* a data file next to it is not its data */
  CHECK_STATUS(file_write_all(path, ext.p, ext.n, &d), PH_OK, d.msg);
  CHECK_STATUS(onnx_read_model(dir, &h, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "config-only package");
  expect_parse(m, &ext, PH_ERR_INVALID_ARGUMENT, NEEDLES("config-only package"));
  /* not marked ("false", or no such key): the package lost its data file */
  ot_set_str(&mark->value, "false");
  dir_for(dir, sizeof dir, "config_only_false");
  CHECK_STATUS(ot_write_dir(m, NULL, dir, &d), PH_OK, d.msg);
  CHECK_STATUS(onnx_read_model_ex(dir, ONNX_READ_FINALIZE | ONNX_READ_CONFIG_ONLY, &h, &info, &d),
               PH_ERR_NOT_FOUND, d.msg);
  CHECK_CONTAINS(d.msg, ONNX_DATA_FILE);
  CHECK(h == NULL);
  expect_parse(m, &ext, PH_OK, NULL);
  ot_free(m);
  free(ext.p);
  graph_free(g);
}

/* The writer's side: onnx_write_model_structure marks its model.onnx, onnx_write_model does
 * not, and the marked one reads back with the full package's totals. */
static void test_write_structure_marks(void) {
  diag d;
  graph *g = NULL;
  CHECK_STATUS(graph_create(&g, &d), PH_OK, d.msg);
  float w[16 * 32]; /* 2048 bytes: external */
  for (int i = 0; i < 16 * 32; i++) w[i] = (float)i;
  int x = graph_add_input(g, "x", PH_DTYPE_F32, 2, (int64_t[]){-1, 16}, NULL);
  int wi = graph_add_initializer_copy(g, "W", PH_DTYPE_F32, shape_2d(16, 32), w);
  int y;
  graph_add_node(g, "MatMul", "", "mm", 2, (int[]){x, wi}, 1, (const char *[]){"y"}, &y, 0, NULL);
  graph_mark_output(g, y, NULL);
  CHECK_STATUS(graph_finalize(g, &d), PH_OK, d.msg);
  char full[1024], bare[1024], path[1200];
  dir_for(full, sizeof full, "write_full");
  dir_for(bare, sizeof bare, "write_structure");
  CHECK_STATUS(path_mkdirs(full, &d), PH_OK, d.msg);
  CHECK_STATUS(path_mkdirs(bare, &d), PH_OK, d.msg);
  CHECK_STATUS(onnx_write_model(g, full, "test", &d), PH_OK, d.msg);
  CHECK_STATUS(onnx_write_model_structure(g, bare, "test", &d), PH_OK, d.msg);
  snprintf(path, sizeof path, "%s/%s", bare, ONNX_DATA_FILE);
  CHECK(!path_exists(path));
  graph *h = NULL;
  onnx_model_info a, b;
  CHECK_STATUS(onnx_read_model_ex(full, ONNX_READ_FINALIZE | ONNX_READ_CONFIG_ONLY, &h, &a, &d),
               PH_OK, d.msg);
  CHECK_EQ_INT(a.config_only, 0);
  graph_free(h);
  h = NULL;
  CHECK_STATUS(onnx_read_model(bare, &h, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "config-only package");
  CHECK_STATUS(onnx_read_model_ex(bare, ONNX_READ_FINALIZE | ONNX_READ_CONFIG_ONLY, &h, &b, &d),
               PH_OK, d.msg);
  CHECK_EQ_INT(b.config_only, 1);
  CHECK_EQ_INT(b.external_data_bytes, 2048);
  CHECK_EQ_INT(b.external_data_bytes, a.external_data_bytes);
  CHECK_EQ_INT(b.initializer_bytes, a.initializer_bytes);
  graph_free(h);
  graph_free(g);
}

/* Issue 10 defect 6: a FIFO given as model.onnx (or its data file) blocked open() forever. */
static void test_fifo_model(void) {
  char dir[1024], path[4096];
  dir_for(dir, sizeof dir, "fifo");
  diag d;
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
  CHECK(ft_fifo(path, dir, "model.onnx"));
  CHECK(onnx_is_package(dir));
  graph *g = NULL;
  ft_watchdog(10);
  CHECK_STATUS(onnx_read_model(dir, &g, &d), PH_ERR_IO, d.msg);
  CHECK_CONTAINS(d.msg, "model.onnx: is a FIFO, not a regular file");
  /* a real model whose external data file is a FIFO */
  graph *t = test_graph();
  if (t) {
    ot_buf ext = {0};
    Onnx__ModelProto *m = ot_model(t, &ext);
    dir_for(dir, sizeof dir, "fifo_data");
    snprintf(path, sizeof path, "%s/model.onnx.data", dir);
    unlink(path); /* a FIFO left by an earlier run */
    CHECK_STATUS(ot_write_dir(m, &ext, dir, &d), PH_OK, d.msg);
    CHECK(ft_fifo(path, dir, "model.onnx.data"));
    CHECK_STATUS(onnx_read_model(dir, &g, &d), PH_ERR_IO, d.msg);
    CHECK_CONTAINS(d.msg, "model.onnx.data: is a FIFO");
    ot_free(m);
    free(ext.p);
    graph_free(t);
  }
  ft_watchdog(0);
  CHECK(g == NULL);
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "%s", check_env("PH_TMP_DIR"));
  diag d;
  if (path_mkdirs(g_tmp, &d) != PH_OK) {
    fprintf(stderr, "%s\n", d.msg);
    return 1;
  }
  RUN(test_parse_raw_data_round_trip);
  RUN(test_read_external_round_trip);
  RUN(test_external_unaligned_and_no_length);
  RUN(test_typed_fields);
  RUN(test_dims_and_old_ir);
  RUN(test_symbol_names);
  RUN(test_attributes_unfinalized);
  RUN(test_garbage_and_truncation);
  RUN(test_external_data_errors);
  RUN(test_initializer_errors);
  RUN(test_node_errors);
  RUN(test_header_and_output_errors);
  RUN(test_deep_nesting);
  RUN(test_too_many_fields);
  RUN(test_fifo_model);
  RUN(test_config_only_marker);
  RUN(test_write_structure_marks);
  return check_finish();
}
