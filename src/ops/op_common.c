/* op_common — what the op files share: the contract toolkit of op_util.h (attributes, optional
 * slots, static shapes, broadcasting). Tensor element access is src/tensor's (tensor.h). */
#include <string.h>

#include "ops/op.h"
#include "ops/op_util.h"
#include "tensor/dtype.h"

/* ---- op_util.h ------------------------------------------------------------------------------ */

static const char *op_type_of(const gnode *n) { return n->op_type ? n->op_type : "op"; }

static const char *attr_type_name(attr_type t) {
  switch (t) {
  case ATTR_INT:
    return "an int";
  case ATTR_FLOAT:
    return "a float";
  case ATTR_STRING:
    return "a string";
  case ATTR_INTS:
    return "a list of ints";
  case ATTR_FLOATS:
    return "a list of floats";
  }
  return "an unknown type";
}

/* The attribute `name` when it has type want; NULL when absent; an error for another type. */
static ph_status attr_typed(const gnode *n, const char *name, attr_type want, const char *what,
                            const gattr **out, diag *d) {
  const gattr *a = node_attr(n, name);
  *out = NULL;
  if (!a) return PH_OK;
  RETURN_ERROR_IF(a->type != want || (want == ATTR_STRING && !a->s), d, PH_ERR_INVALID_ARGUMENT,
                  "%s: attribute %s must be %s, got %s", op_type_of(n), name, what,
                  a->type == want ? "a null string" : attr_type_name(a->type));
  *out = a;
  return PH_OK;
}

ph_status op_attr_int(const gnode *n, const char *name, int64_t def, int64_t *out, diag *d) {
  const gattr *a;
  *out = def;
  FORWARD_IF_ERROR(attr_typed(n, name, ATTR_INT, "an int", &a, d));
  if (a) *out = a->i;
  return PH_OK;
}

ph_status op_attr_float(const gnode *n, const char *name, float def, float *out, diag *d) {
  const gattr *a;
  *out = def;
  FORWARD_IF_ERROR(attr_typed(n, name, ATTR_FLOAT, "a float", &a, d));
  if (a) *out = a->f;
  return PH_OK;
}

ph_status op_attr_string(const gnode *n, const char *name, const char *def, const char **out,
                         diag *d) {
  const gattr *a;
  *out = def;
  FORWARD_IF_ERROR(attr_typed(n, name, ATTR_STRING, "a string", &a, d));
  if (a) *out = a->s;
  return PH_OK;
}

ph_status op_attr_update_rule(const gnode *n, const char **name, int *gated, int *delta, diag *d) {
  const char *rs = "gated_delta";
  *gated = *delta = 0;
  *name = rs;
  FORWARD_IF_ERROR(op_attr_string(n, "update_rule", "gated_delta", &rs, d));
  *name = rs;
  if (strcmp(rs, "gated") == 0 || strcmp(rs, "gated_delta") == 0) *gated = 1;
  if (strcmp(rs, "delta") == 0 || strcmp(rs, "gated_delta") == 0) *delta = 1;
  RETURN_ERROR_IF(!*gated && !*delta && strcmp(rs, "linear") != 0, d, PH_ERR_INVALID_ARGUMENT,
                  "%s: update_rule \"%s\" is not linear, gated, delta or gated_delta", n->op_type,
                  rs);
  return PH_OK;
}

ph_status op_attr_conv_activation(const gnode *n, int *silu, diag *d) {
  const char *act = NULL;
  *silu = 0;
  FORWARD_IF_ERROR(op_attr_string(n, "activation", "none", &act, d));
  if (strcmp(act, "silu") == 0 || strcmp(act, "swish") == 0) {
    *silu = 1;
    return PH_OK;
  }
  RETURN_ERROR_IF(strcmp(act, "none") != 0, d, PH_ERR_INVALID_ARGUMENT,
                  "%s: activation \"%s\" is not none, silu or swish", n->op_type, act);
  return PH_OK;
}

ph_status op_attr_ints(const gnode *n, const char *name, const int64_t **v, int *count, diag *d) {
  const gattr *a;
  *v = NULL;
  *count = -1;
  FORWARD_IF_ERROR(attr_typed(n, name, ATTR_INTS, "a list of ints", &a, d));
  if (a) {
    *v = a->ints;
    *count = a->n;
  }
  return PH_OK;
}

int op_has_input(const gnode *n, const tinfo *in, int i) {
  return i < n->n_inputs && in[i].dtype != PH_DTYPE_INVALID;
}

int op_wants_output(const gnode *n, int i) {
  return i < n->n_outputs && (!n->outputs || n->outputs[i] >= 0);
}

tinfo op_tinfo_of(const tensor *t) {
  tinfo ti = tinfo_make(t->dtype, t->rank, t->dims);
  ti.data = t->data;
  return ti;
}

const char *op_dtype_name(ph_dtype dt) {
  const char *s = dtype_safetensors_name(dt);
  return s ? s : "INVALID";
}

int64_t op_dim(const tinfo *t, int i) { return t->rank < 0 ? -1 : t->dims[i]; }

int op_dims_conflict(int64_t a, int64_t b) { return a >= 0 && b >= 0 && a != b; }

ph_status op_check_rank(const gnode *n, const tinfo *t, int rank, const char *what, diag *d) {
  RETURN_ERROR_IF(t->rank >= 0 && t->rank != rank, d, PH_ERR_TENSOR_SHAPE,
                  "%s: %s must have rank %d, got %d", op_type_of(n), what, rank, t->rank);
  return PH_OK;
}

ph_status op_merge_dim(const gnode *n, int64_t *acc, int64_t v, const char *what, diag *d) {
  if (v < 0) return PH_OK;
  RETURN_ERROR_IF(*acc >= 0 && *acc != v, d, PH_ERR_TENSOR_SHAPE,
                  "%s: %s is %lld here but %lld elsewhere", op_type_of(n), what, (long long)v,
                  (long long)*acc);
  *acc = v;
  return PH_OK;
}

ph_status op_norm_axis(const gnode *n, int64_t axis, int r, int *out, diag *d) {
  RETURN_ERROR_IF(axis < -r || axis >= r, d, PH_ERR_INVALID_ARGUMENT,
                  "%s: axis %lld is out of range [%d, %d] for rank %d", op_type_of(n),
                  (long long)axis, -r, r - 1, r);
  *out = (int)(axis < 0 ? axis + r : axis);
  return PH_OK;
}

ph_status op_broadcast(const gnode *n, const char *what, int ra, const int64_t *a, int rb,
                       const int64_t *b, int *ro, int64_t *o, diag *d) {
  int r = ra > rb ? ra : rb;
  for (int i = 0; i < r; i++) {
    int64_t x = i < r - ra ? 1 : a[i - (r - ra)];
    int64_t y = i < r - rb ? 1 : b[i - (r - rb)];
    if (x == y)
      o[i] = x;
    else if (x == 1)
      o[i] = y;
    else if (y == 1)
      o[i] = x;
    else if (x < 0)
      o[i] = y;
    else if (y < 0)
      o[i] = x;
    else
      return diag_set(d, PH_ERR_TENSOR_SHAPE, "%s: %s %d: %lld and %lld do not broadcast",
                      op_type_of(n), what, i, (long long)x, (long long)y);
  }
  *ro = r;
  return PH_OK;
}
