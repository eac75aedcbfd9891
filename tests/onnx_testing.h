/* onnx_testing — a finalized graph as an ONNX ModelProto, built by hand with protobuf-c, so the
 * reader's tests do not depend on the writer they will later be compared with.
 *
 *   ot_buf ext = {0};                               // external data, or pass NULL for raw_data
 *   Onnx__ModelProto *m = ot_model(g, &ext);        // heap-allocated like protobuf-c's unpack
 *   ... mutate m (ot_set_str to replace a string) ...
 *   ot_write_dir(m, &ext, dir);                     // dir/model.onnx (+ model.onnx.data)
 *   ot_free(m); free(ext.p);
 *
 * Every field is allocated individually (malloc, strdup), exactly as onnx__model_proto__unpack
 * does, so onnx__model_proto__free_unpacked frees a built or mutated model. Initializers are
 * written in value order with raw_data, or into ext at 64-byte aligned offsets; opsets
 * ai.onnx 17 and com.microsoft 1; IR 8. Dims: known -> dim_value, named -> dim_param, else
 * an empty Dimension.
 */
#ifndef PH_TESTS_ONNX_TESTING_H
#define PH_TESTS_ONNX_TESTING_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx.pb-c.h"

#include "base/fmap.h"
#include "graph/graph.h"
#include "io/onnx.h"
#include "tensor/dtype.h"

typedef struct ot_buf {
  uint8_t *p;
  size_t n, cap;
} ot_buf;

static inline char *ot_strdup(const char *s) {
  size_t n = strlen(s ? s : "") + 1;
  char *p = malloc(n);
  memcpy(p, s ? s : "", n);
  return p;
}

/* Replaces a heap string field. */
static inline void ot_set_str(char **field, const char *s) {
  free(*field);
  *field = ot_strdup(s);
}

/* Appends n bytes at the next multiple of align; returns their offset. */
static inline size_t ot_buf_put(ot_buf *b, const void *src, size_t n, size_t align) {
  size_t off = (b->n + align - 1) / align * align;
  if (off + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < off + n) cap *= 2;
    b->p = realloc(b->p, cap);
    b->cap = cap;
  }
  memset(b->p + b->n, 0, off - b->n);
  if (n) memcpy(b->p + off, src, n);
  b->n = off + n;
  return off;
}

static inline Onnx__StringStringEntryProto *ot_entry(const char *key, const char *value) {
  Onnx__StringStringEntryProto *e = malloc(sizeof *e);
  onnx__string_string_entry_proto__init(e);
  e->key = ot_strdup(key);
  e->value = ot_strdup(value);
  return e;
}

static inline Onnx__ValueInfoProto *ot_value_info(const graph *g, int id) {
  const gvalue *v = &g->values[id];
  Onnx__ValueInfoProto *vi = malloc(sizeof *vi);
  onnx__value_info_proto__init(vi);
  vi->name = ot_strdup(v->name);
  Onnx__TypeProto *tp = malloc(sizeof *tp);
  onnx__type_proto__init(tp);
  Onnx__TypeProto__Tensor *tt = malloc(sizeof *tt);
  onnx__type_proto__tensor__init(tt);
  tt->has_elem_type = 1;
  tt->elem_type = dtype_to_onnx(v->type.dtype);
  if (v->type.rank >= 0) {
    Onnx__TensorShapeProto *sh = malloc(sizeof *sh);
    onnx__tensor_shape_proto__init(sh);
    sh->n_dim = (size_t)v->type.rank;
    sh->dim = calloc(sh->n_dim ? sh->n_dim : 1, sizeof *sh->dim);
    for (int i = 0; i < v->type.rank; i++) {
      Onnx__TensorShapeProto__Dimension *dm = malloc(sizeof *dm);
      onnx__tensor_shape_proto__dimension__init(dm);
      if (v->type.dims[i] >= 0) {
        dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        dm->dim_value = v->type.dims[i];
      } else if (v->sym[i] >= 0) {
        dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
        dm->dim_param = ot_strdup(g->symbols[v->sym[i]]);
      }
      sh->dim[i] = dm;
    }
    tt->shape = sh;
  }
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  vi->type = tp;
  return vi;
}

static inline Onnx__TensorProto *ot_tensor(graph *g, int id, ot_buf *ext) {
  const gvalue *v = &g->values[id];
  const void *data = graph_initializer_data(g, id, NULL);
  size_t n = (size_t)v->n_bytes;
  Onnx__TensorProto *t = malloc(sizeof *t);
  onnx__tensor_proto__init(t);
  t->name = ot_strdup(v->name);
  t->has_data_type = 1;
  t->data_type = dtype_to_onnx(v->type.dtype);
  t->n_dims = (size_t)v->type.rank;
  t->dims = malloc((t->n_dims ? t->n_dims : 1) * sizeof *t->dims);
  for (size_t i = 0; i < t->n_dims; i++) t->dims[i] = v->type.dims[i];
  if (!ext) {
    t->has_raw_data = 1;
    t->raw_data.len = n;
    t->raw_data.data = malloc(n ? n : 1);
    if (n) memcpy(t->raw_data.data, data, n);
    return t;
  }
  size_t off = ot_buf_put(ext, data, n, 64);
  char num[32];
  t->has_data_location = 1;
  t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  t->n_external_data = 3;
  t->external_data = malloc(3 * sizeof *t->external_data);
  t->external_data[0] = ot_entry("location", ONNX_DATA_FILE);
  snprintf(num, sizeof num, "%zu", off);
  t->external_data[1] = ot_entry("offset", num);
  snprintf(num, sizeof num, "%zu", n);
  t->external_data[2] = ot_entry("length", num);
  return t;
}

static inline Onnx__AttributeProto *ot_attr(const gattr *a) {
  Onnx__AttributeProto *p = malloc(sizeof *p);
  onnx__attribute_proto__init(p);
  p->name = ot_strdup(a->name);
  p->has_type = 1;
  switch (a->type) {
  case ATTR_INT:
    p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    p->has_i = 1;
    p->i = a->i;
    break;
  case ATTR_FLOAT:
    p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    p->has_f = 1;
    p->f = a->f;
    break;
  case ATTR_STRING:
    p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
    p->has_s = 1;
    p->s.len = strlen(a->s);
    p->s.data = (uint8_t *)ot_strdup(a->s);
    break;
  case ATTR_INTS:
    p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    p->n_ints = (size_t)a->n;
    p->ints = malloc((size_t)(a->n ? a->n : 1) * sizeof *p->ints);
    if (a->n) memcpy(p->ints, a->ints, (size_t)a->n * sizeof *p->ints);
    break;
  case ATTR_FLOATS:
    p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
    p->n_floats = (size_t)a->n;
    p->floats = malloc((size_t)(a->n ? a->n : 1) * sizeof *p->floats);
    if (a->n) memcpy(p->floats, a->floats, (size_t)a->n * sizeof *p->floats);
    break;
  }
  return p;
}

static inline char **ot_names(const graph *g, int n, const int *ids) {
  char **out = malloc((size_t)(n ? n : 1) * sizeof *out);
  for (int i = 0; i < n; i++) out[i] = ot_strdup(ids[i] >= 0 ? g->values[ids[i]].name : "");
  return out;
}

static inline Onnx__NodeProto *ot_node(const graph *g, const gnode *n) {
  Onnx__NodeProto *p = malloc(sizeof *p);
  onnx__node_proto__init(p);
  p->name = ot_strdup(n->name);
  p->op_type = ot_strdup(n->op_type);
  p->domain = ot_strdup(n->domain);
  p->n_input = (size_t)n->n_inputs;
  p->input = ot_names(g, n->n_inputs, n->inputs);
  p->n_output = (size_t)n->n_outputs;
  p->output = ot_names(g, n->n_outputs, n->outputs);
  p->n_attribute = (size_t)n->n_attrs;
  p->attribute = malloc((size_t)(n->n_attrs ? n->n_attrs : 1) * sizeof *p->attribute);
  for (int i = 0; i < n->n_attrs; i++) p->attribute[i] = ot_attr(&n->attrs[i]);
  return p;
}

static inline Onnx__OperatorSetIdProto *ot_opset(const char *domain, int64_t version) {
  Onnx__OperatorSetIdProto *o = malloc(sizeof *o);
  onnx__operator_set_id_proto__init(o);
  o->domain = ot_strdup(domain);
  o->has_version = 1;
  o->version = version;
  return o;
}

/* Appends one pointer to a protobuf-c repeated field (count + malloc'ed array). */
#define OT_APPEND(count, array, item)                                                              \
  do {                                                                                             \
    (array) = realloc((array), ((count) + 1) * sizeof *(array));                                   \
    (array)[(count)++] = (item);                                                                   \
  } while (0)

static inline Onnx__ModelProto *ot_model(graph *g, ot_buf *ext) {
  Onnx__ModelProto *m = malloc(sizeof *m);
  onnx__model_proto__init(m);
  m->has_ir_version = 1;
  m->ir_version = 8;
  m->producer_name = ot_strdup("onnx_testing");
  OT_APPEND(m->n_opset_import, m->opset_import, ot_opset("", 17));
  OT_APPEND(m->n_opset_import, m->opset_import, ot_opset("com.microsoft", 1));
  Onnx__GraphProto *gp = malloc(sizeof *gp);
  onnx__graph_proto__init(gp);
  gp->name = ot_strdup("test");
  for (int i = 0; i < g->n_values; i++)
    if (g->values[i].kind == VALUE_INITIALIZER)
      OT_APPEND(gp->n_initializer, gp->initializer, ot_tensor(g, i, ext));
  for (int i = 0; i < g->n_inputs; i++)
    OT_APPEND(gp->n_input, gp->input, ot_value_info(g, g->inputs[i]));
  for (int i = 0; i < g->n_nodes; i++)
    if (!g->nodes[i].internal && !g->nodes[i].dead)
      OT_APPEND(gp->n_node, gp->node, ot_node(g, &g->nodes[i]));
  for (int i = 0; i < g->n_outputs; i++)
    OT_APPEND(gp->n_output, gp->output, ot_value_info(g, g->outputs[i]));
  m->graph = gp;
  return m;
}

static inline void ot_free(Onnx__ModelProto *m) {
  if (m) onnx__model_proto__free_unpacked(m, NULL);
}

/* The serialized bytes (malloc'ed). */
static inline uint8_t *ot_pack(const Onnx__ModelProto *m, size_t *size) {
  *size = onnx__model_proto__get_packed_size(m);
  uint8_t *p = malloc(*size ? *size : 1);
  onnx__model_proto__pack(m, p);
  return p;
}

/* Writes dir/model.onnx and, when ext is not NULL, dir/model.onnx.data (dir is created). */
static inline ph_status ot_write_dir(const Onnx__ModelProto *m, const ot_buf *ext, const char *dir,
                                     diag *d) {
  char path[1024];
  FORWARD_IF_ERROR(path_mkdirs(dir, d));
  size_t n;
  uint8_t *bytes = ot_pack(m, &n);
  ph_status s = path_join(path, sizeof path, dir, ONNX_MODEL_FILE, d);
  if (s == PH_OK) s = file_write_all(path, bytes, n, d);
  free(bytes);
  if (s == PH_OK && ext) {
    FORWARD_IF_ERROR(path_join(path, sizeof path, dir, ONNX_DATA_FILE, d));
    s = file_write_all(path, ext->p, ext->n, d);
  }
  return s;
}

#endif /* PH_TESTS_ONNX_TESTING_H */
