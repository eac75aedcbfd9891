/* op_testing — running one operator outside a graph, for kernel tests.
 *
 *   gattr attrs[] = {attr_int("q_num_heads", 2), attr_int("kv_num_heads", 4)};
 *   gnode n = op_test_node("LinearAttention", "com.microsoft", 6, 2, attrs, 2);
 *   tensor *in[6] = {q, k, v, past, decay, beta};         // NULL for an absent optional input
 *   tensor *out[2] = {NULL, NULL};                        // allocated by op_test_run
 *   CHECK_STATUS(op_test_run(&n, in, out, 2, &d), PH_OK, d.msg);
 *
 * op_test_run resolves the op, runs infer() with static shapes first (every dim known: the
 * same checks the graph makes at build time), then the op's plan hook on the same types as the
 * executor does when shapes change (op.h), allocates each NULL output with the inferred shape (a
 * caller-provided output must match it), then run() on a pool of n_threads with that plan.
 *
 * Tensors the tests build and compare: tensor_new/tensor_free (heap, zeroed), tensor_rand
 * (uniform), tensor_i32, tensor_clone, tensor_same_bits (bit-exact), tensor_at (an element as a
 * double), round_to_dtype (a double as a store to dt rounds it), tensors_free (an array).
 */
#ifndef PH_TESTS_OP_TESTING_H
#define PH_TESTS_OP_TESTING_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool.h"
#include "base/rng.h"
#include "check.h"
#include "ops/op.h"
#include "tensor/dtype.h"

static inline gnode op_test_node(const char *op_type, const char *domain, int n_inputs,
                                 int n_outputs, gattr *attrs, int n_attrs) {
  gnode n;
  memset(&n, 0, sizeof n);
  n.name = "test_node";
  n.op_type = op_type;
  n.domain = domain;
  n.n_inputs = n_inputs;
  n.n_outputs = n_outputs;
  n.attrs = attrs;
  n.n_attrs = n_attrs;
  return n;
}

static inline tensor *tensor_new(ph_dtype dt, int rank, const int64_t *dims) {
  tensor *t = calloc(1, sizeof *t);
  t->dtype = dt;
  t->rank = rank;
  int64_t n = 1;
  for (int i = 0; i < rank; i++) {
    t->dims[i] = dims[i];
    n *= dims[i];
  }
  size_t bytes = (size_t)n * dtype_size(dt);
  t->data = calloc(bytes ? bytes : 1, 1);
  return t;
}

static inline void tensor_free(tensor *t) {
  if (!t) return;
  free(t->data);
  free(t);
}

/* Fills a float tensor with uniform(lo, hi) values (rounded to its dtype). */
static inline void tensor_fill_uniform(tensor *t, rng *r, float lo, float hi) {
  int64_t n = tensor_numel(t);
  for (int64_t i = 0; i < n; i++) tensor_set_f32(t, i, rng_range(r, lo, hi));
}

/* A new float tensor filled with uniform(lo, hi) values drawn from r. */
static inline tensor *tensor_rand(ph_dtype dt, int rank, const int64_t *dims, rng *r, float lo,
                                  float hi) {
  tensor *t = tensor_new(dt, rank, dims);
  tensor_fill_uniform(t, r, lo, hi);
  return t;
}

/* A new i32 [n] holding v[0 .. n) (zeros when v is NULL). */
static inline tensor *tensor_i32(int64_t n, const int32_t *v) {
  int64_t dims[1] = {n};
  tensor *t = tensor_new(PH_DTYPE_I32, 1, dims);
  if (n > 0 && v) memcpy(t->data, v, (size_t)n * sizeof(int32_t));
  return t;
}

static inline size_t tensor_bytes(const tensor *t) {
  return (size_t)tensor_numel(t) * dtype_size(t->dtype);
}

static inline tensor *tensor_clone(const tensor *t) {
  tensor *c = tensor_new(t->dtype, t->rank, t->dims);
  memcpy(c->data, t->data, tensor_bytes(t));
  return c;
}

/* 1 when both exist and hold the same dtype, element count and bytes. */
static inline int tensor_same_bits(const tensor *a, const tensor *b) {
  return a && b && a->dtype == b->dtype && tensor_numel(a) == tensor_numel(b) &&
         memcmp(a->data, b->data, tensor_bytes(a)) == 0;
}

/* Element i of a float tensor as a double. */
static inline double tensor_at(const tensor *t, int64_t i) { return (double)tensor_get_f32(t, i); }

/* x rounded to dt's precision (through f32), as a store to a dt tensor rounds it. */
static inline double round_to_dtype(ph_dtype dt, double x) {
  float f = (float)x;
  if (dt == PH_DTYPE_F16) return f16_to_f32(f32_to_f16(f));
  if (dt == PH_DTYPE_BF16) return bf16_to_f32(f32_to_bf16(f));
  return f;
}

/* Frees t[0 .. n) and sets each to NULL. */
static inline void tensors_free(tensor **t, int n) {
  for (int i = 0; i < n; i++) {
    tensor_free(t[i]);
    t[i] = NULL;
  }
}

static inline tinfo tensor_tinfo(const tensor *t, int with_data) {
  tinfo ti;
  memset(&ti, 0, sizeof ti);
  ti.dtype = t->dtype;
  ti.rank = t->rank;
  for (int i = 0; i < t->rank; i++) ti.dims[i] = t->dims[i];
  ti.data = with_data ? t->data : NULL;
  return ti;
}

/* const_mask: bit i set = input i is a constant (its data visible to infer, as initializers
 * are). Returns the first failing status. */
static inline ph_status op_test_run_ex(const gnode *n, tensor **in, tensor **out, int n_threads,
                                       unsigned const_mask, diag *d) {
  const op_def *def = op_lookup(n->domain, n->op_type);
  if (!def) return diag_set(d, PH_ERR_UNSUPPORTED, "no op %s", n->op_type);
  if (!def->infer || !def->run)
    return diag_set(d, PH_ERR_UNSUPPORTED, "op %s is a stub", n->op_type);
  gnode node = *n;
  node.op = def;
  tinfo ti[GRAPH_MAX_IO], to[GRAPH_MAX_IO];
  memset(ti, 0, sizeof ti);
  memset(to, 0, sizeof to);
  for (int i = 0; i < n->n_inputs; i++)
    if (in[i]) ti[i] = tensor_tinfo(in[i], (const_mask >> i) & 1u);
  FORWARD_IF_ERROR(def->infer(&node, ti, to, d));
  void *plan = NULL;
  if (def->plan && def->plan_bytes) {
    plan = aligned_alloc(OP_PLAN_ALIGN,
                         (def->plan_bytes + OP_PLAN_ALIGN - 1) / OP_PLAN_ALIGN * OP_PLAN_ALIGN);
    if (!plan) return diag_set(d, PH_ERR_NO_MEMORY, "out of memory for a plan");
    memset(plan, 0, def->plan_bytes);
    ph_status ps = def->plan(&node, ti, plan, d);
    if (ps != PH_OK) {
      free(plan);
      return ps;
    }
  }
  for (int i = 0; i < n->n_outputs; i++) {
    if (to[i].dtype == PH_DTYPE_INVALID) continue;
    if (!out[i]) {
      out[i] = tensor_new(to[i].dtype, to[i].rank, to[i].dims);
      continue;
    }
    int ok = out[i]->rank == to[i].rank && out[i]->dtype == to[i].dtype;
    for (int k = 0; ok && k < to[i].rank; k++) ok = out[i]->dims[k] == to[i].dims[k];
    if (!ok) {
      free(plan);
      return diag_set(d, PH_ERR_INTERNAL, "output %d: caller buffer does not match inferred type",
                      i);
    }
  }
  pool *p = NULL;
  ph_status pst = pool_create(n_threads, &p, d);
  if (pst != PH_OK) {
    free(plan);
    return pst;
  }
  op_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.pool = p;
  ctx.plan = plan;
  size_t scratch = def->scratch_bytes ? def->scratch_bytes(&node, ti, n_threads) : 0;
  if (scratch) {
    ctx.scratch = aligned_alloc(64, (scratch + 63) / 64 * 64);
    ctx.scratch_bytes = scratch;
  }
  ph_status s = def->run(&node, (const tensor *const *)in, (tensor *const *)out, &ctx, d);
  free(ctx.scratch);
  free(plan);
  pool_free(p);
  return s;
}

static inline ph_status op_test_run(const gnode *n, tensor **in, tensor **out, int n_threads,
                                    diag *d) {
  return op_test_run_ex(n, in, out, n_threads, ~0u, d);
}

/* A dtype's name for messages ("F32", "BF16", ...; "INVALID" when it has none). */
static inline const char *dtype_label(ph_dtype dt) {
  const char *s = dtype_safetensors_name(dt);
  return s ? s : "INVALID";
}

/* Element i of any tensor as a double (exact for every dtype but i64 beyond 2^53). */
static inline double tensor_elem(const tensor *t, int64_t i) {
  switch (t->dtype) {
  case PH_DTYPE_I64:
    return (double)((const int64_t *)t->data)[i];
  case PH_DTYPE_I32:
    return ((const int32_t *)t->data)[i];
  case PH_DTYPE_I8:
    return ((const int8_t *)t->data)[i];
  case PH_DTYPE_U8:
    return ((const uint8_t *)t->data)[i];
  default:
    return tensor_get_f32(t, i);
  }
}

/* Spacing of dtype dt's values around v (subnormal spacing near 0). */
static inline double dtype_ulp_at(ph_dtype dt, double v) {
  int mant = dt == PH_DTYPE_BF16 ? 7 : dt == PH_DTYPE_F16 ? 10 : 23;
  double min_step = dt == PH_DTYPE_F16    ? ldexp(1, -24)
                    : dt == PH_DTYPE_BF16 ? ldexp(1, -133)
                                          : ldexp(1, -149);
  v = fabs(v);
  if (v == 0) return min_step;
  int e;
  frexp(v, &e);
  double u = ldexp(1.0, e - 1 - mant);
  return u > min_step ? u : min_step;
}

/* One CHECK that y[0 .. n) matches ref: float outputs within tol[i] (tol0 for all when tol is
 * NULL) plus one output ulp of ref for f16/bf16, NaN and inf exactly; integer outputs exact.
 * Prints the first failure under `name`. */
static inline int op_expect_close(const char *name, const tensor *y, const double *ref,
                                  const double *tol, double tol0, int64_t n) {
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < n; i++) {
    double got = tensor_elem(y, i), want = ref[i], t = tol ? tol[i] : tol0;
    int ok;
    if (!dtype_is_compute_float(y->dtype)) {
      ok = got == want;
    } else if (isnan(want) || isinf(want)) {
      ok = isnan(want) ? isnan(got) : got == want;
    } else {
      if (y->dtype != PH_DTYPE_F32) t += dtype_ulp_at(y->dtype, want);
      ok = fabs(got - want) <= t; /* false for a NaN got */
    }
    if (!ok) {
      if (first < 0) first = i;
      bad++;
    }
  }
  if (bad)
    fprintf(stderr,
            "  %s (%s): %lld of %lld wrong; first at %lld: got %.9g, want %.9g (tol %.3g)\n", name,
            dtype_label(y->dtype), (long long)bad, (long long)n, (long long)first,
            tensor_elem(y, first), ref[first], tol ? tol[first] : tol0);
  return CHECK(bad == 0);
}

/* op_test_run_ex on a node made here (op_test_node), d cleared first. */
static inline ph_status op_run(const char *op, const char *dom, int n_in, tensor **in, int n_out,
                               tensor **out, gattr *attrs, int n_attrs, int threads,
                               unsigned const_mask, diag *d) {
  gnode n = op_test_node(op, dom, n_in, n_out, attrs, n_attrs);
  diag_clear(d);
  return op_test_run_ex(&n, in, out, threads, const_mask, d);
}

/* Max |a - b| over all elements (as f32), and max |b| for a relative bound. */
static inline double tensor_max_abs_diff(const tensor *a, const double *ref, int64_t n,
                                         double *ref_scale) {
  double m = 0.0, s = 0.0;
  for (int64_t i = 0; i < n; i++) {
    double x = tensor_get_f32(a, i), y = ref[i];
    double e = x > y ? x - y : y - x;
    if (e > m || e != e) m = e != e ? 1e300 : e;
    double ay = y < 0 ? -y : y;
    if (ay > s) s = ay;
  }
  if (ref_scale) *ref_scale = s;
  return m;
}

#endif /* PH_TESTS_OP_TESTING_H */
