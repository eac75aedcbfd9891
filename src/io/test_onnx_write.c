/* The ONNX writer and the dense export, read back with protobuf-c's own unpacker (never with our
 * reader, which is tested on its own): the header (IR 8, both opsets), every node as the builder
 * made it, graph I/O dims and dim_params, every initializer's placement (external, 64-byte
 * aligned, inside model.onnx.data, length = dtype x shape; small ones inline) and bytes (equal to
 * graph_initializer_read, and for transposed weights to a transpose of the checkpoint computed
 * here, also after f16 conversion), determinism, genai_config.json keys, token ids, tokenizer
 * files, and every refusal. A synthetic graph covers odd tile edges, several staging chunks,
 * every attribute type, scalars, zero-size and unused initializers. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "check.h"
#include "graph/prepare.h"
#include "io/onnx.h"
#include "models/export.h"
#include "models/model.h"
#include "models/registry.h"
#include "onnx.pb-c.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

static char g_tmp[512];

typedef struct package {
  Onnx__ModelProto *m;
  fmap data;
  char *model_bytes;
} package;

static int load_package(const char *dir, package *p) {
  memset(p, 0, sizeof *p);
  char path[1100];
  size_t n = 0;
  diag d;
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  CHECK_STATUS(file_read_all(path, 256 << 20, &p->model_bytes, &n, &d), PH_OK, d.msg);
  if (!p->model_bytes) return 0;
  p->m = onnx__model_proto__unpack(NULL, n, (const uint8_t *)p->model_bytes);
  CHECK(p->m != NULL);
  snprintf(path, sizeof path, "%s/model.onnx.data", dir);
  CHECK_STATUS(fmap_open(path, &p->data, &d), PH_OK, d.msg);
  return p->m != NULL;
}

static void free_package(package *p) {
  if (p->m) onnx__model_proto__free_unpacked(p->m, NULL);
  free(p->model_bytes);
  fmap_close(&p->data);
}

static const Onnx__TensorProto *find_init(const package *p, const char *name) {
  for (size_t i = 0; i < p->m->graph->n_initializer; i++)
    if (strcmp(p->m->graph->initializer[i]->name, name) == 0) return p->m->graph->initializer[i];
  return NULL;
}

static const char *ext_value(const Onnx__TensorProto *t, const char *key) {
  for (size_t i = 0; i < t->n_external_data; i++)
    if (strcmp(t->external_data[i]->key, key) == 0) return t->external_data[i]->value;
  return NULL;
}

/* The bytes an initializer holds: raw_data, or its range of model.onnx.data (range checked). */
static const uint8_t *init_bytes(const package *p, const Onnx__TensorProto *t, size_t *len) {
  if (!t->has_data_location || t->data_location != ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
    *len = t->raw_data.len;
    return t->raw_data.len ? t->raw_data.data : (const uint8_t *)""; /* unpack: empty is NULL */
  }
  const char *off = ext_value(t, "offset"), *ln = ext_value(t, "length");
  if (!off || !ln) return NULL;
  long long o = atoll(off), l = atoll(ln);
  if (o < 0 || l < 0 || (size_t)(o + l) > p->data.size) return NULL;
  *len = (size_t)l;
  return p->data.data ? p->data.data + o : (const uint8_t *)"";
}

/* Every initializer the package holds against the graph it came from: the ones nodes read, in
 * value id order, external iff >= ONNX_INLINE_MAX_BYTES, aligned, packed inside the data file,
 * and byte-equal to graph_initializer_read. */
static void check_initializers(const package *p, const graph *g) {
  unsigned char *used = calloc((size_t)g->n_values, 1);
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_inputs; k++) {
      int v = g->nodes[i].inputs[k];
      if (v >= 0 && g->values[v].kind == VALUE_INITIALIZER) used[v] = 1;
    }
  size_t k = 0;
  long long end = 0;
  for (int i = 0; i < g->n_values; i++) {
    if (!used[i]) continue;
    const gvalue *v = &g->values[i];
    CHECK(k < p->m->graph->n_initializer);
    if (k >= p->m->graph->n_initializer) break;
    const Onnx__TensorProto *t = p->m->graph->initializer[k++];
    CHECK_EQ_STR(t->name, v->name);
    CHECK_EQ_INT(t->data_type, dtype_to_onnx(v->type.dtype));
    CHECK_EQ_INT(t->n_dims, v->type.rank);
    for (int j = 0; j < v->type.rank && j < (int)t->n_dims; j++)
      CHECK_EQ_INT(t->dims[j], v->type.dims[j]);
    int64_t bytes = tinfo_bytes(&v->type);
    int external =
        t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    CHECK_EQ_INT(external, bytes >= ONNX_INLINE_MAX_BYTES);
    if (external) {
      CHECK_EQ_INT(t->n_external_data, 3);
      CHECK_EQ_STR(ext_value(t, "location"), "model.onnx.data");
      CHECK(!t->has_raw_data);
      long long off = atoll(ext_value(t, "offset") ? ext_value(t, "offset") : "-1");
      CHECK_EQ_INT(off % ONNX_DATA_ALIGN, 0);
      CHECK(off >= end && off - end < ONNX_DATA_ALIGN); /* packed in value order */
      CHECK_EQ_INT(atoll(ext_value(t, "length") ? ext_value(t, "length") : "-1"), bytes);
      end = off + bytes;
    } else {
      CHECK(t->has_raw_data);
      CHECK_EQ_INT(t->raw_data.len, bytes);
    }
    size_t len = 0;
    const uint8_t *got = init_bytes(p, t, &len);
    CHECK(got != NULL);
    if (!got || (int64_t)len != bytes) continue;
    void *want = malloc((size_t)bytes + 1);
    diag d;
    CHECK_STATUS(graph_initializer_read(g, i, 0, tinfo_numel(&v->type), want, &d), PH_OK, d.msg);
    if (memcmp(got, want, (size_t)bytes) != 0) {
      CHECK(!"initializer bytes differ from graph_initializer_read");
      fprintf(stderr, "       initializer %s\n", v->name);
    }
    free(want);
  }
  CHECK_EQ_INT(k, p->m->graph->n_initializer);
  CHECK_EQ_INT((long long)p->data.size, end); /* nothing after the last tensor */
  free(used);
}

/* One graph input/output's ValueInfo: element type, then each dim as a number, the graph's
 * symbol, or the generated "<name>_dim<k>". */
static void check_value_info(const graph *g, int id, const Onnx__ValueInfoProto *vi) {
  const gvalue *v = &g->values[id];
  CHECK_EQ_STR(vi->name, v->name);
  CHECK(vi->type && vi->type->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE);
  if (!vi->type || vi->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) return;
  const Onnx__TypeProto__Tensor *tt = vi->type->tensor_type;
  CHECK_EQ_INT(tt->elem_type, dtype_to_onnx(v->type.dtype));
  CHECK(tt->shape != NULL);
  if (!tt->shape) return;
  CHECK_EQ_INT(tt->shape->n_dim, v->type.rank);
  for (int k = 0; k < v->type.rank && k < (int)tt->shape->n_dim; k++) {
    const Onnx__TensorShapeProto__Dimension *dm = tt->shape->dim[k];
    if (v->type.dims[k] >= 0) {
      CHECK_EQ_INT(dm->value_case, ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE);
      CHECK_EQ_INT(dm->dim_value, v->type.dims[k]);
      continue;
    }
    CHECK_EQ_INT(dm->value_case, ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM);
    char gen[256];
    if (v->sym[k] >= 0)
      snprintf(gen, sizeof gen, "%s", g->symbols[(int)v->sym[k]]);
    else
      snprintf(gen, sizeof gen, "%s_dim%d", v->name, k);
    if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM)
      CHECK_EQ_STR(dm->dim_param, gen);
  }
}

/* The package's model against the graph it was written from, node by node. */
static void check_model(const package *p, const graph *g, const char *producer) {
  const Onnx__ModelProto *m = p->m;
  CHECK(m->has_ir_version && m->ir_version == 8);
  CHECK_EQ_INT(m->n_opset_import, 2);
  if (m->n_opset_import == 2) {
    CHECK_EQ_STR(m->opset_import[0]->domain, "");
    CHECK_EQ_INT(m->opset_import[0]->version, 17);
    CHECK_EQ_STR(m->opset_import[1]->domain, "com.microsoft");
    CHECK_EQ_INT(m->opset_import[1]->version, 1);
  }
  CHECK_EQ_STR(m->producer_name, producer);
  CHECK_EQ_STR(m->graph->name, "main");
  const Onnx__GraphProto *gp = m->graph;
  CHECK_EQ_INT(gp->n_node, g->n_nodes);
  for (int i = 0; i < g->n_nodes && i < (int)gp->n_node; i++) {
    const gnode *n = &g->nodes[i];
    const Onnx__NodeProto *np = gp->node[i];
    CHECK_EQ_STR(np->op_type, n->op_type);
    CHECK_EQ_STR(np->domain, n->domain);
    CHECK_EQ_STR(np->name, n->name);
    CHECK_EQ_INT(np->n_input, n->n_inputs);
    CHECK_EQ_INT(np->n_output, n->n_outputs);
    for (int k = 0; k < n->n_inputs && k < (int)np->n_input; k++)
      CHECK_EQ_STR(np->input[k], n->inputs[k] < 0 ? "" : g->values[n->inputs[k]].name);
    for (int k = 0; k < n->n_outputs && k < (int)np->n_output; k++)
      CHECK_EQ_STR(np->output[k], n->outputs[k] < 0 ? "" : g->values[n->outputs[k]].name);
    CHECK_EQ_INT(np->n_attribute, n->n_attrs);
    for (int k = 0; k < n->n_attrs && k < (int)np->n_attribute; k++) {
      const gattr *a = &n->attrs[k];
      const Onnx__AttributeProto *ap = np->attribute[k];
      CHECK_EQ_STR(ap->name, a->name);
      switch (a->type) {
      case ATTR_INT:
        CHECK(ap->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT && ap->i == a->i);
        break;
      case ATTR_FLOAT:
        CHECK(ap->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT && ap->f == a->f);
        break;
      case ATTR_STRING:
        CHECK(ap->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING &&
              ap->s.len == strlen(a->s) && memcmp(ap->s.data, a->s, ap->s.len) == 0);
        break;
      case ATTR_INTS:
        CHECK(ap->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS &&
              ap->n_ints == (size_t)a->n &&
              (a->n == 0 || memcmp(ap->ints, a->ints, (size_t)a->n * sizeof(int64_t)) == 0));
        break;
      case ATTR_FLOATS:
        CHECK(ap->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS &&
              ap->n_floats == (size_t)a->n &&
              (a->n == 0 || memcmp(ap->floats, a->floats, (size_t)a->n * sizeof(float)) == 0));
        break;
      }
    }
  }
  CHECK_EQ_INT(gp->n_input, g->n_inputs);
  for (int i = 0; i < g->n_inputs && i < (int)gp->n_input; i++)
    check_value_info(g, g->inputs[i], gp->input[i]);
  CHECK_EQ_INT(gp->n_output, g->n_outputs);
  for (int i = 0; i < g->n_outputs && i < (int)gp->n_output; i++)
    check_value_info(g, g->outputs[i], gp->output[i]);
  check_initializers(p, g);
}

static const Onnx__ValueInfoProto *find_io(const Onnx__ValueInfoProto *const *v, size_t n,
                                           const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(v[i]->name, name) == 0) return v[i];
  return NULL;
}

/* dims as "3,batch_size,sequence_length" */
static void dims_string(const Onnx__ValueInfoProto *v, char *buf, size_t n) {
  size_t at = 0;
  buf[0] = '\0';
  if (!v || !v->type || !v->type->tensor_type || !v->type->tensor_type->shape) return;
  const Onnx__TensorShapeProto *s = v->type->tensor_type->shape;
  for (size_t k = 0; k < s->n_dim && at < n; k++) {
    const Onnx__TensorShapeProto__Dimension *dm = s->dim[k];
    int w = dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE
                ? snprintf(buf + at, n - at, "%s%lld", k ? "," : "", (long long)dm->dim_value)
                : snprintf(buf + at, n - at, "%s%s", k ? "," : "", dm->dim_param);
    at += w > 0 ? (size_t)w : 0;
  }
}

static ph_model *open_golden(const char *name) {
  char dir[1024];
  check_data(dir, sizeof dir, "golden/%s/checkpoint", name);
  ph_model *m = NULL;
  ph_status s = ph_model_open(dir, NULL, &m);
  CHECK_STATUS(s, PH_OK, ph_model_error(m));
  if (s != PH_OK) {
    ph_model_free(m);
    return NULL;
  }
  return m;
}

static graph *build(const ph_model *m, ph_dtype dt, int64_t ctx) {
  model_options o = model_options_default();
  o.weight_dtype = dt;
  o.max_context = ctx;
  graph *g = NULL;
  diag d;
  CHECK_STATUS(model_build_graph(model_config(m), model_weights_of(m), &o, &g, &d), PH_OK, d.msg);
  return g;
}

static ph_status export_to(const ph_model *m, const char *sub, ph_dtype dt, int force, char *dir,
                           diag *d) {
  snprintf(dir, 1024, "%s/%s", g_tmp, sub);
  export_options o = export_options_default();
  o.dtype = dt;
  o.force = force;
  return model_export(m, dir, &o, d);
}

/* The transpose of checkpoint tensor `name` [R, C], converted to dt, must be the bytes of the
 * initializer "<name>.T" [C, R] in the package. Computed here element by element. */
static void check_transposed_weight(const package *p, const ph_model *m, const char *name,
                                    ph_dtype dt) {
  const st_tensor *src = st_find(model_tensors(m), name);
  CHECK(src != NULL);
  char tname[256];
  snprintf(tname, sizeof tname, "%s.T", name);
  const Onnx__TensorProto *t = find_init(p, tname);
  CHECK(t != NULL);
  if (!src || !t) return;
  const int64_t R = src->shape.dims[0], C = src->shape.dims[1];
  CHECK(t->n_dims == 2 && t->dims[0] == C && t->dims[1] == R);
  CHECK_EQ_INT(t->data_type, dtype_to_onnx(dt));
  size_t len = 0;
  const uint8_t *got = init_bytes(p, t, &len);
  size_t es = dtype_size(dt), ses = dtype_size(src->dtype);
  CHECK(got && len == (size_t)(R * C) * es);
  if (!got || len != (size_t)(R * C) * es) return;
  int64_t bad = 0;
  for (int64_t c = 0; c < C; c++)
    for (int64_t r = 0; r < R; r++) {
      const uint8_t *s = src->data + (size_t)(r * C + c) * ses;
      float f;
      uint16_t h;
      if (src->dtype == PH_DTYPE_F32)
        memcpy(&f, s, 4);
      else {
        memcpy(&h, s, 2);
        f = src->dtype == PH_DTYPE_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
      }
      uint8_t want[4];
      if (dt == PH_DTYPE_F32) {
        memcpy(want, &f, 4);
      } else {
        h = dt == PH_DTYPE_F16 ? f32_to_f16(f) : f32_to_bf16(f);
        memcpy(want, &h, 2);
      }
      bad += memcmp(got + (size_t)(c * R + r) * es, want, es) != 0;
    }
  CHECK_EQ_INT(bad, 0);
}

static void test_golden_f32(void) {
  ph_model *m = open_golden("qwen35-tiny-f32");
  if (!m) return;
  char dir[1024];
  diag d;
  CHECK_STATUS(export_to(m, "f32", PH_DTYPE_INVALID, 0, dir, &d), PH_OK, d.msg);
  graph *g = build(m, PH_DTYPE_INVALID, 0);
  package p;
  if (g && load_package(dir, &p)) {
    check_model(&p, g, "pagedhybrid");
    check_transposed_weight(&p, m, "model.layers.0.linear_attn.in_proj_qkv.weight", PH_DTYPE_F32);
    check_transposed_weight(&p, m, "lm_head.weight", PH_DTYPE_F32);
    const Onnx__GraphProto *gp = p.m->graph;
    char s[256];
    /* the dense ABI's symbolic dims (docs/graph-io.md) */
    dims_string(find_io((const Onnx__ValueInfoProto *const *)gp->input, gp->n_input, "input_ids"),
                s, sizeof s);
    CHECK_EQ_STR(s, "batch_size,sequence_length");
    dims_string(
        find_io((const Onnx__ValueInfoProto *const *)gp->input, gp->n_input, "position_ids"), s,
        sizeof s);
    CHECK_EQ_STR(s, "3,batch_size,sequence_length");
    dims_string(
        find_io((const Onnx__ValueInfoProto *const *)gp->input, gp->n_input, "attention_mask"), s,
        sizeof s);
    CHECK_EQ_STR(s, "batch_size,total_sequence_length");
    dims_string(find_io((const Onnx__ValueInfoProto *const *)gp->input, gp->n_input,
                        "past_key_values.3.key"),
                s, sizeof s);
    CHECK_EQ_STR(s, "batch_size,2,past_sequence_length,32");
    dims_string(find_io((const Onnx__ValueInfoProto *const *)gp->input, gp->n_input,
                        "past_key_values.0.conv_state"),
                s, sizeof s);
    CHECK_EQ_STR(s, "batch_size,128,3");
    dims_string(find_io((const Onnx__ValueInfoProto *const *)gp->input, gp->n_input,
                        "past_key_values.0.recurrent_state"),
                s, sizeof s);
    CHECK_EQ_STR(s, "batch_size,4,16,16");
    /* every output dim is a number or a name a runtime can bind */
    for (size_t i = 0; i < gp->n_output; i++) {
      const Onnx__TensorShapeProto *sh = gp->output[i]->type->tensor_type->shape;
      CHECK(sh != NULL);
      for (size_t k = 0; sh && k < sh->n_dim; k++)
        CHECK(sh->dim[k]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE ||
              (sh->dim[k]->dim_param && sh->dim[k]->dim_param[0]));
    }
    dims_string(find_io((const Onnx__ValueInfoProto *const *)gp->output, gp->n_output, "logits"), s,
                sizeof s);
    CHECK_CONTAINS(s, ",256");
    free_package(&p);
  }
  graph_free(g);
  ph_model_free(m);
}

static void test_golden_bf16_vlm(void) {
  ph_model *m = open_golden("qwen35-tiny-bf16-vlm");
  if (!m) return;
  char dir[1024];
  diag d;
  static const char *qkv = "model.language_model.layers.4.linear_attn.in_proj_qkv.weight";
  static const char *q = "model.language_model.layers.3.self_attn.q_proj.weight";
  /* as stored: bf16 bits moved unchanged */
  CHECK_STATUS(export_to(m, "bf16", PH_DTYPE_INVALID, 0, dir, &d), PH_OK, d.msg);
  graph *g = build(m, PH_DTYPE_INVALID, 0);
  package p;
  if (g && load_package(dir, &p)) {
    check_model(&p, g, "pagedhybrid");
    check_transposed_weight(&p, m, qkv, PH_DTYPE_BF16);
    check_transposed_weight(&p, m, q, PH_DTYPE_BF16);
    free_package(&p);
  }
  graph_free(g);
  /* converted: f16 (one rounding from the exact f32 value) and f32 */
  CHECK_STATUS(export_to(m, "bf16-as-f16", PH_DTYPE_F16, 0, dir, &d), PH_OK, d.msg);
  g = build(m, PH_DTYPE_F16, 0);
  if (g && load_package(dir, &p)) {
    check_model(&p, g, "pagedhybrid");
    check_transposed_weight(&p, m, qkv, PH_DTYPE_F16);
    free_package(&p);
  }
  graph_free(g);
  CHECK_STATUS(export_to(m, "bf16-as-f32", PH_DTYPE_F32, 0, dir, &d), PH_OK, d.msg);
  g = build(m, PH_DTYPE_F32, 0);
  if (g && load_package(dir, &p)) {
    check_model(&p, g, "pagedhybrid");
    check_transposed_weight(&p, m, q, PH_DTYPE_F32);
    free_package(&p);
  }
  graph_free(g);
  ph_model_free(m);
}

static void test_f32_to_f16(void) {
  ph_model *m = open_golden("qwen35-tiny-f32");
  if (!m) return;
  char dir[1024];
  diag d;
  CHECK_STATUS(export_to(m, "f32-as-f16", PH_DTYPE_F16, 0, dir, &d), PH_OK, d.msg);
  graph *g = build(m, PH_DTYPE_F16, 0);
  package p;
  if (g && load_package(dir, &p)) {
    check_model(&p, g, "pagedhybrid");
    check_transposed_weight(&p, m, "model.layers.3.mlp.down_proj.weight", PH_DTYPE_F16);
    check_transposed_weight(&p, m, "lm_head.weight", PH_DTYPE_F16);
    /* the embedding is converted but not transposed */
    const Onnx__TensorProto *t = find_init(&p, "model.embed_tokens.weight");
    const st_tensor *src = st_find(model_tensors(m), "model.embed_tokens.weight");
    CHECK(t && src);
    if (t && src) {
      size_t len = 0;
      const uint8_t *got = init_bytes(&p, t, &len);
      int64_t n = shape_numel(&src->shape), bad = 0;
      CHECK(got && len == (size_t)n * 2);
      for (int64_t i = 0; got && len == (size_t)n * 2 && i < n; i++) {
        float f;
        uint16_t h, want;
        memcpy(&f, src->data + i * 4, 4);
        want = f32_to_f16(f);
        memcpy(&h, got + i * 2, 2);
        bad += h != want;
      }
      CHECK_EQ_INT(bad, 0);
    }
    free_package(&p);
  }
  graph_free(g);
  ph_model_free(m);
}

static int files_equal(const char *a, const char *b) {
  fmap x, y;
  diag d;
  if (fmap_open(a, &x, &d) != PH_OK) return 0;
  if (fmap_open(b, &y, &d) != PH_OK) {
    fmap_close(&x);
    return 0;
  }
  int eq = x.size == y.size && (x.size == 0 || memcmp(x.data, y.data, x.size) == 0);
  fmap_close(&x);
  fmap_close(&y);
  return eq;
}

static void test_deterministic(void) {
  ph_model *m = open_golden("qwen35-tiny-bf16-vlm");
  if (!m) return;
  char a[1024], b[1024], pa[1100], pb[1100];
  diag d;
  CHECK_STATUS(export_to(m, "det-a", PH_DTYPE_F16, 0, a, &d), PH_OK, d.msg);
  CHECK_STATUS(export_to(m, "det-b", PH_DTYPE_F16, 0, b, &d), PH_OK, d.msg);
  static const char *files[] = {"model.onnx", "model.onnx.data", "genai_config.json"};
  for (size_t i = 0; i < 3; i++) {
    snprintf(pa, sizeof pa, "%s/%s", a, files[i]);
    snprintf(pb, sizeof pb, "%s/%s", b, files[i]);
    if (!CHECK(files_equal(pa, pb))) fprintf(stderr, "       %s differs\n", files[i]);
  }
  ph_model_free(m);
}

static json_t *load_json(const char *dir, const char *name) {
  char path[1100];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  json_error_t e;
  json_t *o = json_load_file(path, 0, &e);
  CHECK(o != NULL);
  return o;
}

#define JGET(o, path) json_object_get((o), (path))

static void test_genai_config(void) {
  ph_model *m = open_golden("qwen35-tiny-f32");
  if (!m) return;
  char dir[1024];
  diag d;
  snprintf(dir, sizeof dir, "%s/ctx512", g_tmp);
  export_options o = export_options_default();
  o.max_context = 512;
  CHECK_STATUS(model_export(m, dir, &o, &d), PH_OK, d.msg);
  json_t *root = load_json(dir, "genai_config.json");
  if (root) {
    json_t *model = JGET(root, "model"), *dec = JGET(model, "decoder");
    json_t *in = JGET(dec, "inputs"), *out = JGET(dec, "outputs"), *search = JGET(root, "search");
    CHECK_EQ_STR(json_string_value(JGET(model, "type")), "qwen3_5_text");
    CHECK_EQ_INT(json_integer_value(JGET(model, "context_length")), 512);
    CHECK_EQ_INT(json_integer_value(JGET(model, "vocab_size")), 256);
    CHECK(!JGET(model, "bos_token_id") && !JGET(model, "eos_token_id") &&
          !JGET(model, "pad_token_id"));
    CHECK_EQ_STR(json_string_value(JGET(dec, "filename")), "model.onnx");
    CHECK_EQ_INT(json_integer_value(JGET(dec, "head_size")), 32);
    CHECK_EQ_INT(json_integer_value(JGET(dec, "hidden_size")), 64);
    CHECK_EQ_INT(json_integer_value(JGET(dec, "num_attention_heads")), 4);
    CHECK_EQ_INT(json_integer_value(JGET(dec, "num_hidden_layers")), 4);
    CHECK_EQ_INT(json_integer_value(JGET(dec, "num_key_value_heads")), 2);
    json_t *so = JGET(dec, "session_options");
    CHECK_EQ_STR(json_string_value(JGET(so, "log_id")), "onnxruntime-genai");
    CHECK(json_is_array(JGET(so, "provider_options")));
    static const char *const in_keys[][2] = {
        {"input_ids", "input_ids"},
        {"attention_mask", "attention_mask"},
        {"position_ids", "position_ids"},
        {"past_key_names", "past_key_values.%d.key"},
        {"past_value_names", "past_key_values.%d.value"},
        {"past_conv_names", "past_key_values.%d.conv_state"},
        {"past_recurrent_names", "past_key_values.%d.recurrent_state"},
    };
    static const char *const out_keys[][2] = {
        {"logits", "logits"},
        {"present_key_names", "present.%d.key"},
        {"present_value_names", "present.%d.value"},
        {"present_conv_names", "present.%d.conv_state"},
        {"present_recurrent_names", "present.%d.recurrent_state"},
    };
    for (size_t i = 0; i < sizeof in_keys / sizeof in_keys[0]; i++)
      CHECK_EQ_STR(json_string_value(JGET(in, in_keys[i][0])), in_keys[i][1]);
    for (size_t i = 0; i < sizeof out_keys / sizeof out_keys[0]; i++)
      CHECK_EQ_STR(json_string_value(JGET(out, out_keys[i][0])), out_keys[i][1]);
    CHECK_EQ_INT(json_object_size(in), 7);
    CHECK_EQ_INT(json_object_size(out), 5);
    CHECK(json_is_false(JGET(search, "do_sample")));
    CHECK(json_is_false(JGET(search, "past_present_share_buffer")));
    CHECK_EQ_INT(json_integer_value(JGET(search, "max_length")), 512);
    CHECK_EQ_INT(json_integer_value(JGET(search, "num_beams")), 1);
    json_decref(root);
  }
  /* the rotary caches have exactly context_length rows */
  package p;
  if (load_package(dir, &p)) {
    const Onnx__TensorProto *t = find_init(&p, "cos_cache");
    CHECK(t && t->n_dims == 2 && t->dims[0] == 512);
    free_package(&p);
  }
  /* beyond max_position_embeddings, or negative: refused */
  o.max_context = 262145;
  snprintf(dir, sizeof dir, "%s/ctx-too-long", g_tmp);
  CHECK_STATUS(model_export(m, dir, &o, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "max_position_embeddings");
  CHECK(!path_exists(dir));
  o.max_context = -1;
  CHECK_STATUS(model_export(m, dir, &o, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  ph_model_free(m);
}

static void copy_into(const char *src_dir, const char *dst_dir, const char *name) {
  char a[1100], b[1100], *buf = NULL;
  size_t n = 0;
  diag d;
  snprintf(a, sizeof a, "%s/%s", src_dir, name);
  snprintf(b, sizeof b, "%s/%s", dst_dir, name);
  CHECK_STATUS(file_read_all(a, 256 << 20, &buf, &n, &d), PH_OK, d.msg);
  if (buf) CHECK_STATUS(file_write_all(b, buf, n, &d), PH_OK, d.msg);
  free(buf);
}

static void write_text(const char *dir, const char *name, const char *text) {
  char path[1100];
  diag d;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  CHECK_STATUS(file_write_all(path, text, strlen(text), &d), PH_OK, d.msg);
}

/* A copy of the golden checkpoint with tokenizer files and token ids: both land in the package;
 * a later --force export from a checkpoint without them removes them. */
static void test_tokenizer_and_token_ids(void) {
  char golden[1024], ckpt[1024], out[1024], a[1100], b[1100];
  diag d;
  check_data(golden, sizeof golden, "golden/qwen35-tiny-bf16-vlm/checkpoint");
  snprintf(ckpt, sizeof ckpt, "%s/ckpt-with-tokenizer", g_tmp);
  CHECK_STATUS(path_mkdirs(ckpt, &d), PH_OK, d.msg);
  copy_into(golden, ckpt, "config.json");
  copy_into(golden, ckpt, "model.safetensors");
  static const char tok[] =
      "{\"version\": \"1.0\", \"model\": {\"type\": \"BPE\", \"vocab\": {}}}\n";
  write_text(ckpt, "tokenizer.json", tok);
  write_text(ckpt, "merges.txt", "#version: 0.2\n");
  write_text(ckpt, "generation_config.json",
             "{\"bos_token_id\": 7, \"eos_token_id\": [9, 8], \"pad_token_id\": null}");
  ph_model *m = NULL;
  ph_status s = ph_model_open(ckpt, NULL, &m);
  CHECK_STATUS(s, PH_OK, ph_model_error(m));
  snprintf(out, sizeof out, "%s/pkg-with-tokenizer", g_tmp);
  export_options o = export_options_default();
  if (s == PH_OK) CHECK_STATUS(model_export(m, out, &o, &d), PH_OK, d.msg);
  ph_model_free(m);
  static const char *copied[] = {"tokenizer.json", "merges.txt", "generation_config.json"};
  for (size_t i = 0; i < 3; i++) {
    snprintf(a, sizeof a, "%s/%s", ckpt, copied[i]);
    snprintf(b, sizeof b, "%s/%s", out, copied[i]);
    if (!CHECK(files_equal(a, b))) fprintf(stderr, "       %s not copied\n", copied[i]);
  }
  snprintf(b, sizeof b, "%s/vocab.json", out);
  CHECK(!path_exists(b));
  json_t *root = load_json(out, "genai_config.json");
  if (root) {
    json_t *model = JGET(root, "model");
    CHECK_EQ_INT(json_integer_value(JGET(model, "bos_token_id")), 7);
    json_t *eos = JGET(model, "eos_token_id");
    CHECK(json_is_array(eos) && json_array_size(eos) == 2);
    CHECK_EQ_INT(json_integer_value(json_array_get(eos, 0)), 9);
    CHECK_EQ_INT(json_integer_value(json_array_get(eos, 1)), 8);
    CHECK(JGET(model, "pad_token_id") == NULL);                           /* null = absent */
    CHECK_EQ_STR(json_string_value(JGET(model, "type")), "qwen3_5_text"); /* the text model */
    json_decref(root);
  }
  /* a token id of the wrong type is a typed error naming file and key, before any write */
  write_text(ckpt, "generation_config.json", "{\"eos_token_id\": \"</s>\"}");
  s = ph_model_open(ckpt, NULL, &m);
  snprintf(out, sizeof out, "%s/pkg-bad-ids", g_tmp);
  if (s == PH_OK) {
    CHECK_STATUS(model_export(m, out, &o, &d), PH_ERR_CONFIG_INVALID, d.msg);
    CHECK_CONTAINS(d.msg, "generation_config.json");
    CHECK_CONTAINS(d.msg, "eos_token_id");
    CHECK(!path_exists(out));
  }
  ph_model_free(m);
  /* --force over the tokenizer package from the golden checkpoint (no tokenizer files) */
  m = open_golden("qwen35-tiny-bf16-vlm");
  if (!m) return;
  snprintf(out, sizeof out, "%s/pkg-with-tokenizer", g_tmp);
  o.force = 1;
  CHECK_STATUS(model_export(m, out, &o, &d), PH_OK, d.msg);
  snprintf(b, sizeof b, "%s/tokenizer.json", out);
  CHECK(!path_exists(b));
  ph_model_free(m);
}

static void test_refusals(void) {
  ph_model *m = open_golden("qwen35-tiny-f32");
  if (!m) return;
  char dir[1024], path[1100];
  diag d;
  snprintf(dir, sizeof dir, "%s/nonempty", g_tmp);
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
  write_text(dir, "notes.txt", "mine");
  export_options o = export_options_default();
  CHECK_STATUS(model_export(m, dir, &o, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "not empty");
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  CHECK(!path_exists(path));
  o.force = 1;
  CHECK_STATUS(model_export(m, dir, &o, &d), PH_OK, d.msg);
  CHECK(path_exists(path));
  snprintf(path, sizeof path, "%s/notes.txt", dir); /* files not of the package stay */
  CHECK(path_exists(path));
  /* the checkpoint directory itself, even with force */
  CHECK_STATUS(model_export(m, model_dir(m), &o, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "checkpoint directory");
  /* a file where the directory should be */
  CHECK_STATUS(model_export(m, path, &o, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  /* dtypes the export does not store */
  o.dtype = PH_DTYPE_I8;
  snprintf(dir, sizeof dir, "%s/i8", g_tmp);
  CHECK_STATUS(model_export(m, dir, &o, &d), PH_ERR_UNSUPPORTED, d.msg);
  CHECK_CONTAINS(d.msg, "i8");
  CHECK(!path_exists(dir));
  ph_model_free(m);
  /* a model opened without weights */
  char ck[1024];
  check_data(ck, sizeof ck, "golden/qwen35-tiny-f32/checkpoint");
  ph_model_params mp = ph_model_params_default();
  mp.load_weights = 0;
  CHECK_STATUS(ph_model_open(ck, &mp, &m), PH_OK, ph_model_error(m));
  o = export_options_default();
  snprintf(dir, sizeof dir, "%s/noweights", g_tmp);
  CHECK_STATUS(model_export(m, dir, &o, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "without weights");
  ph_model_free(m);
}

/* ---- the writer alone, on a synthetic graph ------------------------------------------------ */

static void fill_floats(void *p, ph_dtype dt, int64_t n, int seed) {
  for (int64_t i = 0; i < n; i++) {
    float f = (float)((i * 7919 + seed * 104729) % 2001 - 1000) / 128.0f;
    if (dt == PH_DTYPE_F32)
      memcpy((char *)p + i * 4, &f, 4);
    else {
      uint16_t h = dt == PH_DTYPE_F16 ? f32_to_f16(f) : f32_to_bf16(f);
      memcpy((char *)p + i * 2, &h, 2);
    }
  }
}

typedef struct synth {
  graph *g;
  void *bufs[8];
  int n_bufs;
} synth;

/* x [?, K] f32 -> MatMul with lazily transposed weights of several dtype pairs and shapes
 * (tile edges 1, 63, 64, 65, 130; one weight larger than a staging chunk) -> Add of a scalar,
 * Concat with a zero-size constant, a Cast carrying extra attributes of every type; plus one
 * initializer no node reads. */
static int build_synth(synth *s, int big) {
  memset(s, 0, sizeof *s);
  diag d;
  if (graph_create(&s->g, &d) != PH_OK) return 0;
  graph *g = s->g;
  const int64_t K = big ? 4200 : 130;
  const char *xs[] = {"batch", NULL};
  int x = graph_add_input(g, "x", PH_DTYPE_F32, 2, (int64_t[]){-1, K}, xs);
  struct {
    const char *name;
    int64_t n;
    ph_dtype src, dst;
  } ws[] = {
      {"w_f32_f32", 65, PH_DTYPE_F32, PH_DTYPE_F32},
      {"w_bf16_bf16", 1, PH_DTYPE_BF16, PH_DTYPE_BF16},
      {"w_bf16_f16", 63, PH_DTYPE_BF16, PH_DTYPE_F16},
      {"w_f32_bf16", 64, PH_DTYPE_F32, PH_DTYPE_BF16},
      {"w_f16_f32", 131, PH_DTYPE_F16, PH_DTYPE_F32},
  };
  int y = -1;
  for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
    int64_t N = big ? ws[i].n * 16 : ws[i].n; /* big: 4200 x 2096 f32 = 35 MB > one 32 MiB chunk */
    if (big && i != 4) continue;
    void *src = malloc((size_t)(N * K) * dtype_size(ws[i].src));
    s->bufs[s->n_bufs++] = src;
    fill_floats(src, ws[i].src, N * K, (int)i);
    /* checkpoint layout [N, K] (out, in); the value is [K, N] */
    int w = graph_add_initializer_lazy(g, ws[i].name, ws[i].dst, shape_2d(K, N), src, ws[i].src, 1);
    if (ws[i].dst != PH_DTYPE_F32) {
      gattr to = attr_int("to", 1);
      char cn[64];
      snprintf(cn, sizeof cn, "%s/Cast", ws[i].name);
      int cast;
      graph_add_node(g, "Cast", "", cn, 1, &w, 1, (const char *const[]){cn}, &cast, 1, &to);
      w = cast;
    }
    char mn[64];
    snprintf(mn, sizeof mn, "%s/MatMul", ws[i].name);
    int mm;
    graph_add_node(g, "MatMul", "", mn, 2, (int[]){x, w}, 1, (const char *const[]){mn}, &mm, 0,
                   NULL);
    graph_mark_output(g, mm, NULL);
    y = mm;
  }
  float one = 1.5f;
  int sc = graph_add_initializer_copy(g, "scalar", PH_DTYPE_F32, shape_make(0, NULL), &one);
  int added;
  graph_add_node(g, "Add", "", "add", 2, (int[]){y, sc}, 1, (const char *const[]){"added"}, &added,
                 0, NULL);
  int64_t ncol = big ? 131 * 16 : 131;
  int empty = graph_add_initializer_copy(g, "empty", PH_DTYPE_F32, shape_2d(0, ncol), &one);
  gattr ax = attr_int("axis", 0);
  int cat;
  graph_add_node(g, "Concat", "", "concat", 2, (int[]){added, empty}, 1,
                 (const char *const[]){"cat"}, &cat, 1, &ax);
  static const int64_t ints[] = {3, -1, 1LL << 40};
  static const float floats[] = {0.5f, -2.0f};
  gattr attrs[] = {attr_int("to", 1),
                   attr_float("alpha", 0.25f),
                   attr_string("note", "odd \"text\""),
                   attr_ints("ids", ints, 3),
                   attr_floats("weights", floats, 2),
                   attr_ints("none", NULL, 0)};
  int out;
  graph_add_node(g, "Cast", "", "cast_attrs", 1, &cat, 1, (const char *const[]){"out"}, &out, 6,
                 attrs);
  float unused[300] = {0};
  graph_add_initializer_copy(g, "unused", PH_DTYPE_F32, shape_1d(300), unused);
  ph_status st = graph_finalize(g, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  /* marked once its rank is known: graph_mark_output keeps symbols only then */
  const char *os[] = {"batch", NULL};
  CHECK(graph_mark_output(g, out, os) == out);
  return st == PH_OK;
}

static void free_synth(synth *s) {
  graph_free(s->g);
  for (int i = 0; i < s->n_bufs; i++) free(s->bufs[i]);
}

static void test_synthetic(void) {
  for (int big = 0; big <= 1; big++) {
    synth s;
    if (!build_synth(&s, big)) {
      free_synth(&s);
      continue;
    }
    char dir[1024];
    diag d;
    snprintf(dir, sizeof dir, "%s/synth%d", g_tmp, big);
    CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
    CHECK_STATUS(onnx_write_model(s.g, dir, "test", &d), PH_OK, d.msg);
    package p;
    if (load_package(dir, &p)) {
      check_model(&p, s.g, "test");
      CHECK(find_init(&p, "unused") == NULL);
      const Onnx__TensorProto *t = find_init(&p, "scalar");
      CHECK(t && t->n_dims == 0 && t->raw_data.len == 4);
      t = find_init(&p, "empty");
      CHECK(t && t->n_dims == 2 && t->dims[0] == 0 && t->raw_data.len == 0 && t->has_raw_data);
      /* a generated name for an output dim the graph left anonymous */
      const Onnx__ValueInfoProto *o =
          find_io((const Onnx__ValueInfoProto *const *)p.m->graph->output, p.m->graph->n_output,
                  "w_f32_f32/MatMul");
      char dims[128];
      dims_string(o, dims, sizeof dims);
      if (!big) CHECK_EQ_STR(dims, "w_f32_f32/MatMul_dim0,65");
      /* and the graph's symbol where the output names one */
      o = find_io((const Onnx__ValueInfoProto *const *)p.m->graph->output, p.m->graph->n_output,
                  "out");
      dims_string(o, dims, sizeof dims);
      if (!big) CHECK_EQ_STR(dims, "batch,131");
      free_package(&p);
    }
    free_synth(&s);
  }
}

/* Lazy quantized weights written part by part: two weights whose parts interleave in value id
 * order (W2's scales first, so its B gets a pass of its own; W1's B pass keeps W1's later scales
 * and zero points, the zero points inline, across W2's passes), streamed in calls of 1, 7 or all
 * rows: every part's bytes in the package equal tensor/quant.h's, and W1 is quantized once. */
static void test_quant_parts(void) {
  enum { N1 = 300, K1 = 80, N2 = 130, K2 = 100 };
  uint16_t *w1 = malloc(sizeof(uint16_t) * N1 * K1);
  float *w2 = malloc(sizeof(float) * N2 * K2);
  for (int i = 0; i < N1 * K1; i++) w1[i] = f32_to_bf16(sinf((float)i * 0.7f) * (float)(1 + i % 3));
  for (int i = 0; i < N2 * K2; i++) w2[i] = cosf((float)i * 0.3f) * (float)(1 + i % 9);
  const quant_params p1 = {4, 16, 0, PH_DTYPE_F32}, p2 = {8, 32, 1, PH_DTYPE_F32};
  uint8_t *want[2][3] = {{NULL}}; /* [weight][part] */
  size_t want_n[2][3] = {{0}};
  diag d;
  for (int wi = 0; wi < 2; wi++) {
    const quant_params *p = wi ? &p2 : &p1;
    const int64_t n = wi ? N2 : N1, k = wi ? K2 : K1;
    size_t nb = 0, ns = 0, nz = 0;
    CHECK_STATUS(quant_sizes(p, n, k, &nb, &ns, &nz, &d), PH_OK, d.msg);
    want[wi][0] = malloc(nb);
    want[wi][1] = malloc(ns * 4);
    want[wi][2] = malloc(nz + 1);
    want_n[wi][0] = nb, want_n[wi][1] = ns * 4, want_n[wi][2] = nz;
    CHECK_STATUS(quant_quantize(p, wi ? (const void *)w2 : (const void *)w1,
                                wi ? PH_DTYPE_F32 : PH_DTYPE_BF16, n, k, want[wi][0],
                                (float *)(void *)want[wi][1], nz ? want[wi][2] : NULL, "w", &d),
                 PH_OK, d.msg);
  }
  const int64_t passes[3] = {1, 7, 0};
  for (int pi = 0; pi < 3; pi++) {
    graph *g = NULL;
    CHECK_STATUS(graph_create(&g, &d), PH_OK, d.msg);
    /* ids in the order W1.B, W2.scales, W1.scales, W2.B, W1.zp */
    const int id1b =
        graph_add_initializer_quant(g, "w1.B", GRAPH_QUANT_B, &p1, N1, K1, w1, PH_DTYPE_BF16);
    const int id2s = graph_add_initializer_quant(g, "w2.scales", GRAPH_QUANT_SCALES, &p2, N2, K2,
                                                 w2, PH_DTYPE_F32);
    const int id1s = graph_add_initializer_quant(g, "w1.scales", GRAPH_QUANT_SCALES, &p1, N1, K1,
                                                 w1, PH_DTYPE_BF16);
    const int id2b =
        graph_add_initializer_quant(g, "w2.B", GRAPH_QUANT_B, &p2, N2, K2, w2, PH_DTYPE_F32);
    const int id1z =
        graph_add_initializer_quant(g, "w1.zp", GRAPH_QUANT_ZP, &p1, N1, K1, w1, PH_DTYPE_BF16);
    const int a1 = graph_add_input(g, "a1", PH_DTYPE_F32, 2, (int64_t[]){1, K1}, NULL);
    const int a2 = graph_add_input(g, "a2", PH_DTYPE_F32, 2, (int64_t[]){1, K2}, NULL);
    gattr at1[5] = {attr_int("K", K1), attr_int("N", N1), attr_int("bits", 4),
                    attr_int("block_size", 16), attr_int("accuracy_level", 1)};
    gattr at2[5] = {attr_int("K", K2), attr_int("N", N2), attr_int("bits", 8),
                    attr_int("block_size", 32), attr_int("accuracy_level", 1)};
    int y1 = -1, y2 = -1;
    graph_add_node(g, "MatMulNBits", "com.microsoft", "mm1", 4, (int[]){a1, id1b, id1s, id1z}, 1,
                   (const char *[]){"y1"}, &y1, 5, at1);
    graph_add_node(g, "MatMulNBits", "com.microsoft", "mm2", 3, (int[]){a2, id2b, id2s}, 1,
                   (const char *[]){"y2"}, &y2, 5, at2);
    graph_mark_output(g, y1, NULL);
    graph_mark_output(g, y2, NULL);
    CHECK_STATUS(graph_finalize(g, &d), PH_OK, d.msg);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/quant%d", g_tmp, pi);
    CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
    int64_t done = 0;
    CHECK_STATUS(onnx_write_model_quant_rows(g, dir, "test", passes[pi], &done, &d), PH_OK, d.msg);
    /* W1's rows once (its B's pass keeps its scales and zero points), W2's twice (its scales come
     * before its B, which is never kept) */
    CHECK_EQ_INT(done, N1 + 2 * N2);
    graph_free(g);
    graph *r = NULL;
    CHECK_STATUS(onnx_read_model(dir, &r, &d), PH_OK, d.msg);
    if (!r) continue;
    const char *names[2][3] = {{"w1.B", "w1.scales", "w1.zp"}, {"w2.B", "w2.scales", NULL}};
    for (int wi = 0; wi < 2; wi++)
      for (int part = 0; part < 3; part++) {
        if (!names[wi][part]) continue;
        const int id = graph_find_value(r, names[wi][part]);
        if (!CHECK(id >= 0 && r->values[id].type.data)) continue;
        CHECK_EQ_INT((int64_t)tinfo_bytes(&r->values[id].type), (int64_t)want_n[wi][part]);
        if (!CHECK(memcmp(r->values[id].type.data, want[wi][part], want_n[wi][part]) == 0)) {
          size_t at = 0;
          const uint8_t *got = r->values[id].type.data;
          while (at < want_n[wi][part] && got[at] == want[wi][part][at]) at++;
          fprintf(stderr, "    %s, passes of %lld rows: byte %zu of %zu is %u, expected %u\n",
                  names[wi][part], (long long)passes[pi], at, want_n[wi][part], got[at],
                  want[wi][part][at]);
        }
      }
    graph_free(r);
  }
  for (int wi = 0; wi < 2; wi++)
    for (int part = 0; part < 3; part++) free(want[wi][part]);
  free(w1);
  free(w2);
}

static void test_writer_refusals(void) {
  synth s;
  if (!build_synth(&s, 0)) {
    free_synth(&s);
    return;
  }
  char dir[1024], path[1100];
  diag d;
  snprintf(dir, sizeof dir, "%s/refused", g_tmp);
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
  snprintf(path, sizeof path, "%s/model.onnx.data", dir);
  /* a dead node (a prepare pass removed it) */
  s.g->nodes[0].dead = 1;
  CHECK_STATUS(onnx_write_model(s.g, dir, NULL, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "w_f32_f32/MatMul");
  s.g->nodes[0].dead = 0;
  s.g->nodes[1].internal = 1;
  CHECK_STATUS(onnx_write_model(s.g, dir, NULL, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "internal");
  s.g->nodes[1].internal = 0;
  CHECK(!path_exists(path));
  /* prepared for the CPU: MatMulWT nodes are internal */
  CHECK_STATUS(graph_prepare_cpu(s.g, &d), PH_OK, d.msg);
  CHECK_STATUS(onnx_write_model(s.g, dir, NULL, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK(!path_exists(path));
  /* no such directory */
  snprintf(path, sizeof path, "%s/missing/dir", g_tmp);
  CHECK_STATUS(onnx_write_model(s.g, path, NULL, &d), PH_ERR_NOT_FOUND, d.msg);
  free_synth(&s);
  /* not finalized */
  graph *g = NULL;
  CHECK_STATUS(graph_create(&g, &d), PH_OK, d.msg);
  CHECK_STATUS(onnx_write_model(g, dir, NULL, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  graph_free(g);
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "%s", check_env("PH_TMP_DIR"));
  char rm[600];
  snprintf(rm, sizeof rm, "rm -rf '%s'", g_tmp); /* fresh: the refusal cases need empty dirs */
  if (system(rm) != 0) return 1;
  diag d;
  if (path_mkdirs(g_tmp, &d) != PH_OK) return 1;
  RUN(test_golden_f32);
  RUN(test_golden_bf16_vlm);
  RUN(test_f32_to_f16);
  RUN(test_deterministic);
  RUN(test_genai_config);
  RUN(test_tokenizer_and_token_ids);
  RUN(test_refusals);
  RUN(test_synthetic);
  RUN(test_quant_parts);
  RUN(test_writer_refusals);
  return check_finish();
}
