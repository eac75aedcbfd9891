/* jinja_eval — statements and expressions, with the reference interpreter's semantics:
 * scopes (a for loop and a macro call each open one; `if` does not; a macro's scope hangs off
 * its caller's, as the reference's does), the loop object (index, index0, revindex, revindex0,
 * first, last, length, previtem, nextitem), for-else running when no iteration completed, break
 * and continue discarding the text of the iteration they end, operators with JavaScript's
 * number rules, loose == and strict `in`. Also the two entry points of jinja.h.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_internal.h"

typedef struct jenv {
  struct jenv *parent;
  size_t n, cap;
  jstr *names;
  jv *vals;
} jenv;

enum { FLOW_OK = 0, FLOW_ERR = -1, FLOW_BREAK = 1, FLOW_CONTINUE = 2 };

static jenv *env_new(jctx *c, int line, jenv *parent) {
  jenv *e = jctx_alloc(c, line, sizeof *e);
  if (e) e->parent = parent;
  return e;
}

static int env_set(jctx *c, int line, jenv *e, jstr name, jv v) {
  for (size_t i = 0; i < e->n; i++)
    if (jstr_eq(e->names[i], name)) {
      e->vals[i] = v;
      return 0;
    }
  if (e->n == e->cap) {
    size_t cap = e->cap ? 2 * e->cap : 8;
    jstr *n = jctx_alloc(c, line, cap * sizeof *n);
    jv *v2 = jctx_alloc(c, line, cap * sizeof *v2);
    if (!n || !v2) return -1;
    if (e->n) {
      memcpy(n, e->names, e->n * sizeof *n);
      memcpy(v2, e->vals, e->n * sizeof *v2);
    }
    e->names = n;
    e->vals = v2;
    e->cap = cap;
  }
  e->names[e->n] = name;
  e->vals[e->n] = v;
  e->n++;
  return 0;
}

static jv env_get(const jenv *e, jstr name) {
  for (; e; e = e->parent)
    for (size_t i = 0; i < e->n; i++)
      if (jstr_eq(e->names[i], name)) return e->vals[i];
  return jv_undef();
}

static int exec_block(jctx *c, jnode *const *body, size_t n, jenv *env);
static int js_text(jctx *c, int line, jv v, char *buf, size_t cap, jstr *out);

/* ---- operators ------------------------------------------------------------------------------- */

/* JavaScript's ToNumber of a string (for loose ==): NaN when it is not a number. */
static double js_to_number(jstr s) {
  s = js_trim(s, 1, 1);
  if (s.n == 0) return 0;
  char buf[128];
  if (s.n >= sizeof buf) return NAN;
  memcpy(buf, s.p, s.n);
  buf[s.n] = '\0';
  if (s.n > 2 && buf[0] == '0' && strchr("xXoObB", buf[1])) {
    int base = (buf[1] == 'x' || buf[1] == 'X') ? 16 : (buf[1] == 'o' || buf[1] == 'O') ? 8 : 2;
    double v = 0;
    for (size_t i = 2; i < s.n; i++) {
      char ch = buf[i];
      int d = ch >= '0' && ch <= '9'   ? ch - '0'
              : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
              : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                       : 99;
      if (d >= base) return NAN;
      v = v * base + d;
    }
    return v;
  }
  const char *p = buf;
  int neg = 0;
  if (*p == '+' || *p == '-') neg = *p++ == '-';
  if (strcmp(p, "Infinity") == 0) return neg ? -INFINITY : INFINITY;
  /* StrDecimalLiteral: digits [. digits] [e [sign] digits], or . digits ... */
  const char *q = p;
  int digits = 0;
  while (*q >= '0' && *q <= '9') q++, digits++;
  if (*q == '.') {
    q++;
    while (*q >= '0' && *q <= '9') q++, digits++;
  }
  if (!digits) return NAN;
  if (*q == 'e' || *q == 'E') {
    q++;
    if (*q == '+' || *q == '-') q++;
    if (!(*q >= '0' && *q <= '9')) return NAN;
    while (*q >= '0' && *q <= '9') q++;
  }
  if (*q) return NAN;
  double v = strtod(p, NULL);
  return neg ? -v : v;
}

static int is_num(jv v) { return v.kind == JV_INT || v.kind == JV_FLOAT; }
static double num(jv v) {
  return v.kind == JV_INT     ? (double)v.u.i
         : v.kind == JV_FLOAT ? v.u.f
         : v.kind == JV_BOOL  ? v.u.b
                              : 0;
}

int jinja_strict_eq(jv a, jv b) {
  if (is_num(a) && is_num(b)) return num(a) == num(b);
  if (a.kind != b.kind) return 0;
  switch (a.kind) {
  case JV_UNDEF:
  case JV_NONE:
    return 1;
  case JV_BOOL:
    return a.u.b == b.u.b;
  case JV_STR:
    return jstr_eq(a.u.s, b.u.s);
  case JV_LIST:
    return a.u.l == b.u.l;
  case JV_DICT:
  case JV_NS:
    return a.u.d == b.u.d;
  case JV_FUNC:
    return a.u.fn == b.u.fn;
  default:
    return 0;
  }
}

int jinja_loose_eq(jctx *c, int line, jv a, jv b, int *eq) {
  int a_nil = a.kind == JV_UNDEF || a.kind == JV_NONE,
      b_nil = b.kind == JV_UNDEF || b.kind == JV_NONE;
  if (a_nil || b_nil) {
    *eq = a_nil && b_nil;
    return 0;
  }
  if (a.kind == JV_FUNC || b.kind == JV_FUNC) {
    if (a.kind == b.kind) return *eq = a.u.fn == b.u.fn, 0;
    return jctx_fail(c, line, "unsupported: comparing a function with ==");
  }
  int a_prim = a.kind == JV_BOOL || is_num(a) || a.kind == JV_STR;
  int b_prim = b.kind == JV_BOOL || is_num(b) || b.kind == JV_STR;
  if (!a_prim && !b_prim) {
    *eq = jinja_strict_eq(a, b);
    return 0;
  }
  /* an object against a primitive: the object's text (ToPrimitive), then as primitives */
  char ba[64], bb[64];
  jstr t;
  if (!a_prim) {
    if (js_text(c, line, a, ba, sizeof ba, &t)) return -1;
    a = jv_str(t);
  }
  if (!b_prim) {
    if (js_text(c, line, b, bb, sizeof bb, &t)) return -1;
    b = jv_str(t);
  }
  if (a.kind == JV_STR && b.kind == JV_STR) {
    *eq = jstr_eq(a.u.s, b.u.s);
  } else {
    double x = a.kind == JV_STR ? js_to_number(a.u.s) : num(a);
    double y = b.kind == JV_STR ? js_to_number(b.u.s) : num(b);
    *eq = x == y;
  }
  return 0;
}

/* value.toString() as + and ~ (and == against a primitive) use it: floats without a forced
 * ".0", a list as its items' text joined by commas (Array.prototype.toString), a dict or a
 * namespace as "[object Map]". The text goes to *out (in the arena when it is built). */
static int js_text(jctx *c, int line, jv v, char *buf, size_t cap, jstr *out) {
  switch (v.kind) {
  case JV_STR:
    *out = v.u.s;
    return 0;
  case JV_INT:
    snprintf(buf, cap, "%lld", (long long)v.u.i);
    break;
  case JV_FLOAT:
    js_number_text(v.u.f, buf, cap);
    break;
  case JV_BOOL:
    snprintf(buf, cap, "%s", v.u.b ? "true" : "false");
    break;
  case JV_DICT:
  case JV_NS:
    snprintf(buf, cap, "[object Map]");
    break;
  case JV_LIST: {
    size_t mark = c->out_n;
    for (size_t i = 0; i < v.u.l->n; i++)
      if ((i && jctx_emit(c, line, ",", 1)) || jv_emit_string(c, line, v.u.l->items[i])) return -1;
    jv s;
    if (jctx_cut(c, line, mark, &s)) return -1;
    *out = s.u.s;
    return 0;
  }
  default:
    return jctx_fail(c, line, "unsupported: a %s as text in + or ~", jv_kind_name(v.kind));
  }
  /* numbers and booleans stay in the caller's buffer: no allocation between a growing
   * string and what is appended to it */
  out->p = buf;
  out->n = strlen(buf);
  return 0;
}

static int concat(jctx *c, int line, jv a, jv b, jv *out) {
  char ba[64], bb[64];
  jstr x, y;
  if (js_text(c, line, a, ba, sizeof ba, &x) || js_text(c, line, b, bb, sizeof bb, &y)) return -1;
  return jctx_str_concat(c, line, x, y, out);
}

static int int_result(jctx *c, int line, double r, jv *out) {
  if (!(fabs(r) <= (double)JV_MAX_SAFE_INT))
    return jctx_fail(c, line, "unsupported: an integer result beyond 2^53");
  *out = jv_int((int64_t)r);
  return 0;
}

static int str_contains(jstr hay, jstr needle) {
  if (needle.n == 0) return 1;
  if (needle.n > hay.n) return 0;
  for (size_t i = 0; i + needle.n <= hay.n; i++)
    if (memcmp(hay.p + i, needle.p, needle.n) == 0) return 1;
  return 0;
}

static const char *op_name(int op) {
  static const char *const names[] = {"?",  "or", "and", "==",     "!=", "<", ">",
                                      "<=", ">=", "in",  "not in", "+",  "-", "~",
                                      "*",  "/",  "//",  "%",      "**"};
  return op >= 0 && op <= JOP_POW ? names[op] : "?";
}

static int eval_binary(jctx *c, const jnode *n, jenv *env, jv *out) {
  jv l, r;
  if (jinja_eval(c, n->a, env, &l)) return -1;
  if (n->op == JOP_AND) return jv_truthy(l) ? jinja_eval(c, n->b, env, out) : (*out = l, 0);
  if (n->op == JOP_OR) return jv_truthy(l) ? (*out = l, 0) : jinja_eval(c, n->b, env, out);
  if (jinja_eval(c, n->b, env, &r)) return -1;
  int op = n->op, line = n->line;
  if (op == JOP_EQ || op == JOP_NE) {
    int eq;
    if (jinja_loose_eq(c, line, l, r, &eq)) return -1;
    *out = jv_bool(op == JOP_EQ ? eq : !eq);
    return 0;
  }
  if (l.kind == JV_UNDEF || r.kind == JV_UNDEF) {
    if (r.kind == JV_UNDEF && (op == JOP_IN || op == JOP_NOT_IN)) {
      *out = jv_bool(op == JOP_NOT_IN);
      return 0;
    }
    return jctx_fail(c, line, "cannot apply '%s' to an undefined value", op_name(op));
  }
  if (l.kind == JV_NONE || r.kind == JV_NONE)
    return jctx_fail(c, line, "cannot apply '%s' to none", op_name(op));
  if (op == JOP_CONCAT) return concat(c, line, l, r, out);
  int l_numlike = is_num(l) || l.kind == JV_BOOL, r_numlike = is_num(r) || r.kind == JV_BOOL;
  if (op == JOP_POW && l_numlike && r_numlike) {
    double a = num(l), b = num(r);
    if (a == 0 && b < 0) return jctx_fail(c, line, "0.0 cannot be raised to a negative power");
    double res = pow(a, b);
    if (!isfinite(res)) return jctx_fail(c, line, "exponentiation result is not finite");
    if (l.kind == JV_FLOAT || r.kind == JV_FLOAT || b < 0) {
      *out = jv_float(res);
      return 0;
    }
    return int_result(c, line, res, out);
  }
  if (is_num(l) && is_num(r)) {
    int is_float = l.kind == JV_FLOAT || r.kind == JV_FLOAT;
    double a = num(l), b = num(r);
    switch (op) {
    case JOP_ADD:
    case JOP_SUB:
    case JOP_MUL: {
      double res = op == JOP_ADD ? a + b : op == JOP_SUB ? a - b : a * b;
      if (is_float) return *out = jv_float(res), 0;
      return int_result(c, line, res, out);
    }
    case JOP_DIV:
      if (b == 0)
        return jctx_fail(c, line,
                         "unsupported: division by zero (the reference gives Infinity or NaN)");
      *out = jv_float(a / b);
      return 0;
    case JOP_FLOORDIV: {
      if (b == 0)
        return jctx_fail(c, line,
                         "unsupported: division by zero (the reference gives Infinity or NaN)");
      double res = floor(a / b);
      if (is_float) return *out = jv_float(res), 0;
      return int_result(c, line, res, out);
    }
    case JOP_MOD:
      if (b == 0)
        return jctx_fail(c, line, "unsupported: modulo by zero (the reference gives NaN)");
      if (is_float) return *out = jv_float(fmod(a, b)), 0;
      *out = jv_int(l.u.i % r.u.i); /* JavaScript's % keeps the dividend's sign, as C's does */
      return 0;
    case JOP_LT:
      *out = jv_bool(a < b);
      return 0;
    case JOP_GT:
      *out = jv_bool(a > b);
      return 0;
    case JOP_LE:
      *out = jv_bool(a <= b);
      return 0;
    case JOP_GE:
      *out = jv_bool(a >= b);
      return 0;
    default:
      break;
    }
  } else if (l.kind == JV_LIST && r.kind == JV_LIST) {
    if (op == JOP_ADD) {
      if (jv_make_list(c, line, l.u.l->n + r.u.l->n, out)) return -1;
      for (size_t i = 0; i < l.u.l->n; i++) out->u.l->items[i] = l.u.l->items[i];
      for (size_t i = 0; i < r.u.l->n; i++) out->u.l->items[l.u.l->n + i] = r.u.l->items[i];
      return 0;
    }
  } else if (r.kind == JV_LIST && (op == JOP_IN || op == JOP_NOT_IN)) {
    int member = 0;
    for (size_t i = 0; i < r.u.l->n && !member; i++) member = jinja_strict_eq(r.u.l->items[i], l);
    *out = jv_bool(op == JOP_IN ? member : !member);
    return 0;
  }
  if ((l.kind == JV_STR || r.kind == JV_STR) && op == JOP_ADD) return concat(c, line, l, r, out);
  if (l.kind == JV_STR && r.kind == JV_STR && (op == JOP_IN || op == JOP_NOT_IN)) {
    int has = str_contains(r.u.s, l.u.s);
    *out = jv_bool(op == JOP_IN ? has : !has);
    return 0;
  }
  if (l.kind == JV_STR && r.kind == JV_DICT && (op == JOP_IN || op == JOP_NOT_IN)) {
    int has = jdict_get(r.u.d, l.u.s) != NULL;
    *out = jv_bool(op == JOP_IN ? has : !has);
    return 0;
  }
  return jctx_fail(c, line, "unsupported operator '%s' between a %s and a %s", op_name(op),
                   jv_kind_name(l.kind), jv_kind_name(r.kind));
}

/* ---- slices ---------------------------------------------------------------------------------- */

static int slice_bound(jctx *c, const jnode *x, jenv *env, int *has, int64_t *v) {
  *has = 0;
  if (!x) return 0;
  jv b;
  if (jinja_eval(c, x, env, &b)) return -1;
  if (b.kind == JV_UNDEF) return 0;
  if (b.kind != JV_INT) return jctx_fail(c, x->line, "slice bounds must be integers");
  *has = 1;
  *v = b.u.i;
  return 0;
}

static int eval_slice(jctx *c, const jnode *sl, jv obj, jenv *env, jv *out) {
  if (obj.kind != JV_LIST && obj.kind != JV_STR)
    return jctx_fail(c, sl->line, "only a list or a string can be sliced, not a %s",
                     jv_kind_name(obj.kind));
  int hs, he, hp;
  int64_t s = 0, e = 0, step = 1;
  if (slice_bound(c, sl->a, env, &hs, &s) || slice_bound(c, sl->b, env, &he, &e) ||
      slice_bound(c, sl->c, env, &hp, &step))
    return -1;
  if (!hp) step = 1;
  if (step == 0) return jctx_fail(c, sl->line, "slice step cannot be zero");
  /* strings slice by code points (Array.from) */
  size_t len;
  size_t *offs = NULL; /* code point i starts at offs[i]; offs[len] = bytes */
  if (obj.kind == JV_LIST) {
    len = obj.u.l->n;
  } else {
    len = 0;
    offs = jctx_alloc(c, sl->line, (obj.u.s.n + 1) * sizeof *offs);
    if (!offs) return -1;
    for (size_t i = 0; i < obj.u.s.n;) {
      uint32_t cp;
      offs[len++] = i;
      i += utf8_next(obj.u.s.p + i, obj.u.s.n - i, &cp);
    }
    offs[len] = obj.u.s.n;
  }
  int64_t L = (int64_t)len;
  int64_t start, stop;
  if (step > 0) {
    start = !hs ? 0 : s < 0 ? (L + s > 0 ? L + s : 0) : (s < L ? s : L);
    stop = !he ? L : e < 0 ? (L + e > 0 ? L + e : 0) : (e < L ? e : L);
  } else {
    start = !hs ? L - 1 : s < 0 ? (L + s > -1 ? L + s : -1) : (s < L - 1 ? s : L - 1);
    stop = !he ? -1 : e < -1 ? (L + e > -1 ? L + e : -1) : (e < L - 1 ? e : L - 1);
  }
  int64_t dir = step > 0 ? 1 : -1;
  size_t count = 0;
  for (int64_t i = start; dir * i < dir * stop; i += step) count++;
  if (obj.kind == JV_LIST) {
    if (jv_make_list(c, sl->line, count, out)) return -1;
    size_t k = 0;
    for (int64_t i = start; dir * i < dir * stop; i += step)
      out->u.l->items[k++] = obj.u.l->items[i];
    return 0;
  }
  char *buf = jctx_alloc(c, sl->line, obj.u.s.n + 1);
  if (!buf) return -1;
  size_t n = 0;
  for (int64_t i = start; dir * i < dir * stop; i += step) {
    size_t a = offs[i], b = offs[i + 1];
    memcpy(buf + n, obj.u.s.p + a, b - a);
    n += b - a;
  }
  *out = jv_str((jstr){buf, n});
  return 0;
}

/* ---- calls ----------------------------------------------------------------------------------- */

const jv *jargs_kw(const jargs *a, const char *name) {
  for (size_t i = 0; i < a->n_kw; i++)
    if (jstr_eq_c(a->kw_names[i], name)) return &a->kw[i];
  return NULL;
}

int jinja_eval_args(jctx *c, const jnode *const *nodes, size_t n, jenv *env, jargs *out) {
  memset(out, 0, sizeof *out);
  size_t n_kw = 0;
  for (size_t i = 0; i < n; i++) n_kw += nodes[i]->kind == JN_KWARG;
  int line = n ? nodes[0]->line : 0;
  if (n - n_kw) {
    out->pos = jctx_alloc(c, line, (n - n_kw) * sizeof(jv));
    if (!out->pos) return -1;
  }
  if (n_kw) {
    out->kw = jctx_alloc(c, line, n_kw * sizeof(jv));
    out->kw_names = jctx_alloc(c, line, n_kw * sizeof(jstr));
    if (!out->kw || !out->kw_names) return -1;
  }
  /* positional arguments first, then keyword ones (the reference's order) */
  for (size_t i = 0; i < n; i++) {
    if (nodes[i]->kind == JN_KWARG) continue;
    if (jinja_eval(c, nodes[i], env, &out->pos[out->n++])) return -1;
  }
  for (size_t i = 0; i < n; i++) {
    if (nodes[i]->kind != JN_KWARG) continue;
    for (size_t k = 0; k < out->n_kw; k++)
      if (jstr_eq(out->kw_names[k], nodes[i]->s))
        return jctx_fail(c, nodes[i]->line, "got multiple values for keyword argument '%.*s'",
                         (int)nodes[i]->s.n, nodes[i]->s.p);
    out->kw_names[out->n_kw] = nodes[i]->s;
    if (jinja_eval(c, nodes[i]->a, env, &out->kw[out->n_kw])) return -1;
    out->n_kw++;
  }
  return 0;
}

static int call_macro(jctx *c, int line, const jnode *m, const jargs *args, jenv *caller, jv *out) {
  if (c->call_depth >= c->lim->max_call_depth)
    return jctx_fail(c, line, "macro calls nested deeper than %d", c->lim->max_call_depth);
  size_t n_params = m->n_kids2;
  if (args->n > n_params)
    return jctx_fail(c, line, "macro '%.*s' takes not more than %zu argument(s)", (int)m->s.n,
                     m->s.p, n_params);
  for (size_t k = 0; k < args->n_kw; k++) {
    int known = 0;
    for (size_t i = args->n; i < n_params; i++) known |= jstr_eq(m->kids2[i]->s, args->kw_names[k]);
    if (!known)
      return jctx_fail(c, line, "macro '%.*s' takes no keyword argument '%.*s'", (int)m->s.n,
                       m->s.p, (int)args->kw_names[k].n, args->kw_names[k].p);
  }
  jenv *scope = env_new(c, line, caller);
  if (!scope) return -1;
  for (size_t i = 0; i < n_params; i++) {
    jv v = jv_undef();
    if (i < args->n) {
      v = args->pos[i];
    } else {
      const jv *kw = NULL;
      for (size_t k = 0; k < args->n_kw; k++)
        if (jstr_eq(args->kw_names[k], m->kids2[i]->s)) kw = &args->kw[k];
      if (kw) v = *kw;
    }
    if (env_set(c, line, scope, m->kids2[i]->s, v)) return -1;
  }
  /* defaults after every name is bound, in the macro's scope */
  for (size_t i = args->n; i < n_params; i++) {
    const jnode *p = m->kids2[i];
    if (p->kind != JN_KWARG) continue;
    int given = 0;
    for (size_t k = 0; k < args->n_kw; k++) given |= jstr_eq(args->kw_names[k], p->s);
    if (given) continue;
    jv v;
    if (jinja_eval(c, p->a, scope, &v) || env_set(c, line, scope, p->s, v)) return -1;
  }
  size_t mark = c->out_n;
  c->call_depth++;
  int rc = exec_block(c, m->kids, m->n_kids, scope);
  c->call_depth--;
  if (rc == FLOW_ERR) return -1;
  if (rc != FLOW_OK)
    return jctx_fail(c, line, "unsupported: break or continue leaving macro '%.*s'", (int)m->s.n,
                     m->s.p);
  return jctx_cut(c, line, mark, out);
}

int jinja_call(jctx *c, int line, jv fn, const jargs *args, jenv *env, jv *out) {
  if (fn.kind != JV_FUNC)
    return jctx_fail(c, line, "cannot call a %s (not a function)", jv_kind_name(fn.kind));
  switch (fn.u.fn->kind) {
  case JF_MACRO:
    return call_macro(c, line, fn.u.fn->macro, args, env, out);
  case JF_GLOBAL:
    return jinja_call_global(c, line, fn.u.fn, args, out);
  case JF_METHOD:
    return jinja_call_method(c, line, fn.u.fn, args, out);
  }
  return jctx_fail(c, line, "cannot call this value");
}

/* ---- expressions ----------------------------------------------------------------------------- */

int jinja_eval(jctx *c, const jnode *n, jenv *env, jv *out) {
  switch (n->kind) {
  case JN_INT:
    *out = jv_int(n->i);
    return 0;
  case JN_FLOAT:
    *out = jv_float(n->f);
    return 0;
  case JN_STR:
    *out = jv_str(n->s);
    return 0;
  case JN_IDENT:
    *out = env_get(env, n->s);
    return 0;
  case JN_LIST:
  case JN_TUPLE:
    if (jv_make_list(c, n->line, n->n_kids, out)) return -1;
    out->u.l->is_tuple = n->kind == JN_TUPLE;
    for (size_t i = 0; i < n->n_kids; i++)
      if (jinja_eval(c, n->kids[i], env, &out->u.l->items[i])) return -1;
    return 0;
  case JN_DICT: {
    jv d;
    if (jv_make_dict(c, n->line, n->n_kids / 2, 0, &d)) return -1;
    for (size_t i = 0; i + 1 < n->n_kids; i += 2) {
      jv k, v;
      if (jinja_eval(c, n->kids[i], env, &k)) return -1;
      if (k.kind != JV_STR)
        return jctx_fail(c, n->kids[i]->line, "dict keys must be strings, not a %s",
                         jv_kind_name(k.kind));
      if (jinja_eval(c, n->kids[i + 1], env, &v) || jdict_set(c, n->line, d.u.d, k.u.s, v))
        return -1;
    }
    *out = d;
    return 0;
  }
  case JN_MEMBER: {
    jv obj, key;
    if (jinja_eval(c, n->a, env, &obj)) return -1;
    if (n->op && n->b->kind == JN_SLICE) return eval_slice(c, n->b, obj, env, out);
    if (n->op) {
      if (jinja_eval(c, n->b, env, &key)) return -1;
    } else if (n->b->kind == JN_INT) {
      key = jv_int(n->b->i);
    } else {
      key = jv_str(n->b->s);
    }
    return jinja_member(c, n->line, obj, key, out);
  }
  case JN_CALL: {
    jargs args;
    jv fn;
    if (jinja_eval_args(c, (const jnode *const *)n->kids, n->n_kids, env, &args) ||
        jinja_eval(c, n->a, env, &fn))
      return -1;
    return jinja_call(c, n->line, fn, &args, env, out);
  }
  case JN_UNARY: {
    jv v;
    if (jinja_eval(c, n->a, env, &v)) return -1;
    if (n->op == 'n') {
      *out = jv_bool(!jv_truthy(v));
      return 0;
    }
    double sign = n->op == '-' ? -1 : 1;
    if (v.kind == JV_FLOAT) return *out = jv_float(sign * v.u.f), 0;
    if (v.kind == JV_INT || v.kind == JV_BOOL) return int_result(c, n->line, sign * num(v), out);
    return jctx_fail(c, n->line, "unary '%c' needs a number, not a %s", n->op,
                     jv_kind_name(v.kind));
  }
  case JN_BINARY:
    return eval_binary(c, n, env, out);
  case JN_FILTER: {
    jv v;
    if (jinja_eval(c, n->a, env, &v)) return -1;
    return jinja_filter(c, n, v, env, out);
  }
  case JN_TEST: {
    jv v;
    int r;
    if (jinja_eval(c, n->a, env, &v) || jinja_test(c, n, v, &r)) return -1;
    *out = jv_bool(n->op ? !r : r);
    return 0;
  }
  case JN_SELECT: {
    jv cond;
    if (jinja_eval(c, n->b, env, &cond)) return -1;
    if (!jv_truthy(cond)) return *out = jv_undef(), 0;
    return jinja_eval(c, n->a, env, out);
  }
  case JN_TERNARY: {
    jv cond;
    if (jinja_eval(c, n->a, env, &cond)) return -1;
    return jinja_eval(c, jv_truthy(cond) ? n->b : n->c, env, out);
  }
  default:
    break;
  }
  return jctx_fail(c, n->line, "a statement where an expression was expected");
}

/* ---- statements ------------------------------------------------------------------------------ */

static int bind_target(jctx *c, const jnode *target, jv v, jenv *scope, int line) {
  if (target->kind == JN_IDENT) return env_set(c, line, scope, target->s, v);
  /* tuple target: the item must be a list (the reference refuses its own tuples here) */
  if (v.kind != JV_LIST || v.u.l->is_tuple)
    return jctx_fail(c, line, "cannot unpack a %s",
                     v.kind == JV_LIST ? "tuple" : jv_kind_name(v.kind));
  if (v.u.l->n != target->n_kids)
    return jctx_fail(c, line, "too %s items to unpack", target->n_kids > v.u.l->n ? "few" : "many");
  for (size_t j = 0; j < target->n_kids; j++)
    if (env_set(c, line, scope, target->kids[j]->s, v.u.l->items[j])) return -1;
  return 0;
}

static const char *const k_loop_keys[] = {"index", "index0", "revindex", "revindex0", "first",
                                          "last",  "length", "previtem", "nextitem"};

static int exec_for(jctx *c, const jnode *n, jenv *env) {
  jenv *scope = env_new(c, n->line, env);
  if (!scope) return FLOW_ERR;
  jv it;
  if (jinja_eval(c, n->b, scope, &it)) return FLOW_ERR;
  if (it.kind == JV_DICT) {
    jv keys;
    if (jv_make_list(c, n->line, it.u.d->n, &keys)) return FLOW_ERR;
    for (size_t i = 0; i < it.u.d->n; i++) keys.u.l->items[i] = jv_str(it.u.d->keys[i]);
    it = keys;
  } else if (it.kind != JV_LIST) {
    return jctx_fail(c, n->line, "cannot loop over a %s (a list or a dict is expected)",
                     jv_kind_name(it.kind));
  }
  size_t total = it.u.l->n;
  jv *items = total ? jctx_alloc(c, n->line, total * sizeof *items) : NULL;
  if (total && !items) return FLOW_ERR;
  size_t count = 0;
  for (size_t i = 0; i < total; i++) {
    if (++c->loop_iterations > c->lim->max_loop_iterations)
      return jctx_fail(c, n->line, "more than %lld loop iterations",
                       (long long)c->lim->max_loop_iterations);
    jv cur = it.u.l->items[i];
    if (n->a->kind == JN_TUPLE && (cur.kind != JV_LIST || cur.u.l->is_tuple))
      return jctx_fail(c, n->line, "cannot unpack a %s", jv_kind_name(cur.kind));
    if (n->a->kind == JN_TUPLE && cur.u.l->n != n->a->n_kids)
      return jctx_fail(c, n->line, "too %s items to unpack",
                       n->a->n_kids > cur.u.l->n ? "few" : "many");
    if (n->c) {
      jenv *ls = env_new(c, n->line, scope);
      jv t;
      if (!ls || bind_target(c, n->a, cur, ls, n->line) || jinja_eval(c, n->c, ls, &t))
        return FLOW_ERR;
      if (!jv_truthy(t)) continue;
    }
    items[count++] = cur;
  }
  jstr *keys = jctx_alloc(c, n->line, 9 * sizeof *keys);
  if (!keys) return FLOW_ERR;
  for (int k = 0; k < 9; k++) keys[k] = (jstr){k_loop_keys[k], strlen(k_loop_keys[k])};
  int none_done = 1;
  for (size_t i = 0; i < count; i++) {
    jdict *ld = jctx_alloc(c, n->line, sizeof *ld);
    jv *vals = jctx_alloc(c, n->line, 9 * sizeof *vals);
    if (!ld || !vals) return FLOW_ERR;
    vals[0] = jv_int((int64_t)i + 1);
    vals[1] = jv_int((int64_t)i);
    vals[2] = jv_int((int64_t)(count - i));
    vals[3] = jv_int((int64_t)(count - i - 1));
    vals[4] = jv_bool(i == 0);
    vals[5] = jv_bool(i == count - 1);
    vals[6] = jv_int((int64_t)count);
    vals[7] = i > 0 ? items[i - 1] : jv_undef();
    vals[8] = i + 1 < count ? items[i + 1] : jv_undef();
    ld->n = ld->cap = 9;
    ld->keys = keys;
    ld->vals = vals;
    jv loop = {JV_DICT, {0}};
    loop.u.d = ld;
    if (env_set(c, n->line, scope, (jstr){"loop", 4}, loop) ||
        bind_target(c, n->a, items[i], scope, n->line))
      return FLOW_ERR;
    size_t mark = c->out_n;
    int rc = exec_block(c, n->kids, n->n_kids, scope);
    if (rc == FLOW_ERR) return FLOW_ERR;
    if (rc == FLOW_CONTINUE) {
      c->out_n = mark;
      continue;
    }
    if (rc == FLOW_BREAK) {
      c->out_n = mark;
      break;
    }
    none_done = 0;
  }
  if (none_done) return exec_block(c, n->kids2, n->n_kids2, scope);
  return FLOW_OK;
}

static int exec_set(jctx *c, const jnode *n, jenv *env) {
  jv v;
  if (n->b) {
    if (jinja_eval(c, n->b, env, &v)) return FLOW_ERR;
  } else {
    size_t mark = c->out_n;
    int rc = exec_block(c, n->kids, n->n_kids, env);
    if (rc != FLOW_OK) return rc;
    if (jctx_cut(c, n->line, mark, &v)) return FLOW_ERR;
  }
  const jnode *t = n->a;
  if (t->kind == JN_IDENT) return env_set(c, n->line, env, t->s, v) ? FLOW_ERR : FLOW_OK;
  if (t->kind == JN_TUPLE) {
    if (v.kind != JV_LIST)
      return jctx_fail(c, n->line, "cannot unpack a %s in set", jv_kind_name(v.kind));
    if (v.u.l->n != t->n_kids)
      return jctx_fail(c, n->line, "too %s items to unpack in set",
                       t->n_kids > v.u.l->n ? "few" : "many");
    for (size_t i = 0; i < t->n_kids; i++)
      if (env_set(c, n->line, env, t->kids[i]->s, v.u.l->items[i])) return FLOW_ERR;
    return FLOW_OK;
  }
  /* ns.name = value */
  jv obj;
  if (jinja_eval(c, t->a, env, &obj)) return FLOW_ERR;
  if (obj.kind != JV_NS)
    return jctx_fail(c, n->line, "cannot assign an attribute of a %s (only of a namespace)",
                     jv_kind_name(obj.kind));
  return jdict_set(c, n->line, obj.u.d, t->b->s, v) ? FLOW_ERR : FLOW_OK;
}

static int exec_stmt(jctx *c, const jnode *n, jenv *env) {
  switch (n->kind) {
  case JN_STR:
    return jctx_emit(c, n->line, n->s.p, n->s.n) ? FLOW_ERR : FLOW_OK;
  case JN_COMMENT:
    return FLOW_OK;
  case JN_IF: {
    jv t;
    if (jinja_eval(c, n->a, env, &t)) return FLOW_ERR;
    return jv_truthy(t) ? exec_block(c, n->kids, n->n_kids, env)
                        : exec_block(c, n->kids2, n->n_kids2, env);
  }
  case JN_FOR:
    return exec_for(c, n, env);
  case JN_SET:
    return exec_set(c, n, env);
  case JN_MACRO: {
    jfunc *f = jctx_alloc(c, n->line, sizeof *f);
    if (!f) return FLOW_ERR;
    f->kind = JF_MACRO;
    f->macro = n;
    jv v = {JV_FUNC, {0}};
    v.u.fn = f;
    return env_set(c, n->line, env, n->s, v) ? FLOW_ERR : FLOW_OK;
  }
  case JN_BREAK:
    return FLOW_BREAK;
  case JN_CONTINUE:
    return FLOW_CONTINUE;
  default: {
    jv v;
    if (jinja_eval(c, n, env, &v) || jv_emit(c, n->line, v)) return FLOW_ERR;
    return FLOW_OK;
  }
  }
}

static int exec_block(jctx *c, jnode *const *body, size_t n, jenv *env) {
  for (size_t i = 0; i < n; i++) {
    int rc = exec_stmt(c, body[i], env);
    if (rc != FLOW_OK) return rc;
  }
  return FLOW_OK;
}

/* ---- entry points ---------------------------------------------------------------------------- */

void jinja_limits_default(jinja_limits *lim) {
  lim->max_output_bytes = (size_t)16 << 20;
  lim->max_memory_bytes = (size_t)256 << 20;
  lim->max_loop_iterations = 1000000;
  lim->max_call_depth = 64;
}

ph_status jinja_parse(const char *src, size_t len, const char *origin, jinja_template **out,
                      diag *d) {
  diag local;
  if (!d) d = &local; /* the lexer and parser always have a diag to fill */
  diag_clear(d);
  if (!origin) origin = "template";
  if (!src) return diag_set(d, PH_ERR_INVALID_ARGUMENT, "%s: no template source", origin);
  if (len > JINJA_MAX_SOURCE_BYTES)
    return diag_set(d, PH_ERR_TEMPLATE, "%s: the template is %zu bytes, above the limit of %u",
                    origin, len, JINJA_MAX_SOURCE_BYTES);
  jinja_template *t = calloc(1, sizeof *t);
  if (!t) return diag_set(d, PH_ERR_NO_MEMORY, "%s: out of memory", origin);
  arena_init(&t->mem, 0);
  snprintf(t->origin, sizeof t->origin, "%s", origin);
  jtok *toks = NULL;
  size_t n_toks = 0;
  ph_status s = jinja_lex(src, len, t->origin, &t->mem, &toks, &n_toks, d);
  if (s == PH_OK) s = jinja_parse_tokens(toks, n_toks, t->origin, &t->mem, &t->root, d);
  if (s != PH_OK) {
    jinja_free(t);
    return s;
  }
  *out = t;
  return PH_OK;
}

void jinja_free(jinja_template *t) {
  if (!t) return;
  arena_free(&t->mem);
  free(t);
}

static int add_global_fn(jctx *c, jenv *g, const char *name, int id) {
  jfunc *f = jctx_alloc(c, 0, sizeof *f);
  if (!f) return -1;
  f->kind = JF_GLOBAL;
  f->id = id;
  jv v = {JV_FUNC, {0}};
  v.u.fn = f;
  return env_set(c, 0, g, (jstr){name, strlen(name)}, v);
}

ph_status jinja_render(const jinja_template *t, const json_t *vars, const jinja_limits *lim,
                       char **out, size_t *out_len, diag *d) {
  diag_clear(d);
  *out = NULL;
  if (out_len) *out_len = 0;
  if (vars && !json_is_object(vars))
    return diag_set(d, PH_ERR_INVALID_ARGUMENT, "%s: the render context must be a JSON object",
                    t->origin);
  jinja_limits deflim;
  if (!lim) {
    jinja_limits_default(&deflim);
    lim = &deflim;
  }
  arena mem;
  arena_init(&mem, 0);
  diag local;
  jctx c;
  memset(&c, 0, sizeof c);
  c.mem = &mem;
  c.lim = lim;
  c.origin = t->origin;
  c.d = d ? d : &local;
  diag_clear(c.d);
  int rc = FLOW_ERR;
  jenv *g = env_new(&c, 0, NULL);
  if (!g) goto done;
  c.globals = g;
  static const char *const bools[] = {"false", "true", "False", "True"};
  for (int i = 0; i < 4; i++)
    if (env_set(&c, 0, g, (jstr){bools[i], strlen(bools[i])}, jv_bool(i & 1))) goto done;
  if (env_set(&c, 0, g, (jstr){"none", 4}, jv_none()) ||
      env_set(&c, 0, g, (jstr){"None", 4}, jv_none()) ||
      add_global_fn(&c, g, "raise_exception", JG_RAISE) ||
      add_global_fn(&c, g, "range", JG_RANGE) ||
      add_global_fn(&c, g, "strftime_now", JG_STRFTIME) ||
      add_global_fn(&c, g, "namespace", JG_NAMESPACE))
    goto done;
  if (vars) {
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)vars, key, val) {
      jstr k = {key, strlen(key)};
      for (size_t i = 0; i < g->n; i++)
        if (jstr_eq(g->names[i], k)) {
          jctx_fail(&c, 0, "the context variable '%s' is already declared (a global)", key);
          goto done;
        }
      jv v;
      if (jv_from_json(&c, val, &v) || env_set(&c, 0, g, k, v)) goto done;
    }
  }
  rc = exec_block(&c, t->root->kids, t->root->n_kids, g);
  if (rc == FLOW_BREAK || rc == FLOW_CONTINUE) {
    jctx_fail(&c, 0, "break or continue outside a loop");
    rc = FLOW_ERR;
  }
done:
  arena_free(&mem);
  if (rc != FLOW_OK) {
    free(c.out);
    return c.d->status != PH_OK ? c.d->status : PH_ERR_TEMPLATE;
  }
  if (!c.out) { /* nothing was written: an empty string */
    c.out = malloc(1);
    if (!c.out) return diag_set(d, PH_ERR_NO_MEMORY, "%s: out of memory", t->origin);
    c.out_n = 0;
  }
  /* jctx_emit keeps a byte free after the text */
  c.out[c.out_n] = '\0';
  *out = c.out;
  if (out_len) *out_len = c.out_n;
  return PH_OK;
}
