/* jinja_filters — what templates call by name: filters (x|name, x|name(args)), tests
 * (x is name), the methods of strings and dicts (x.name(args)), and the globals (range,
 * namespace, raise_exception, strftime_now). Each follows the reference's behaviour for the
 * value kinds it accepts; any other kind, argument or name is PH_ERR_TEMPLATE naming it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/jinja_internal.h"

enum {
  JM_UPPER = 1,
  JM_LOWER,
  JM_STRIP,
  JM_TITLE,
  JM_CAPITALIZE,
  JM_RSTRIP,
  JM_LSTRIP,
  JM_STARTSWITH,
  JM_ENDSWITH,
  JM_SPLIT,
  JM_REPLACE,
  JM_GET,
  JM_ITEMS,
  JM_KEYS,
  JM_VALUES,
  JM_DICTSORT,
};

static const struct {
  const char *name;
  int id;
  int on_dict; /* 0: a string method, 1: a dict method */
} k_methods[] = {
    {"upper", JM_UPPER, 0},           {"lower", JM_LOWER, 0},
    {"strip", JM_STRIP, 0},           {"title", JM_TITLE, 0},
    {"capitalize", JM_CAPITALIZE, 0}, {"rstrip", JM_RSTRIP, 0},
    {"lstrip", JM_LSTRIP, 0},         {"startswith", JM_STARTSWITH, 0},
    {"endswith", JM_ENDSWITH, 0},     {"split", JM_SPLIT, 0},
    {"replace", JM_REPLACE, 0},       {"get", JM_GET, 1},
    {"items", JM_ITEMS, 1},           {"keys", JM_KEYS, 1},
    {"values", JM_VALUES, 1},         {"dictsort", JM_DICTSORT, 1},
};

static int bound_method(jctx *c, int line, jv self, jstr name, int on_dict, jv *out) {
  for (size_t i = 0; i < sizeof k_methods / sizeof k_methods[0]; i++) {
    if (k_methods[i].on_dict != on_dict || !jstr_eq_c(name, k_methods[i].name)) continue;
    jfunc *f = jctx_alloc(c, line, sizeof *f);
    if (!f) return -1;
    f->kind = JF_METHOD;
    f->id = k_methods[i].id;
    f->self = self;
    out->kind = JV_FUNC;
    out->u.fn = f;
    return 1;
  }
  return 0;
}

/* ---- member access --------------------------------------------------------------------------- */

/* The UTF-16 unit at index i of s (negative: from the end), as String.prototype.at gives it;
 * half of a surrogate pair has no UTF-8 form: refused. */
static int str_at(jctx *c, int line, jstr s, int64_t i, jv *out) {
  int64_t len = (int64_t)js_utf16_len(s);
  if (i < 0) i += len;
  if (i < 0 || i >= len) return *out = jv_undef(), 0;
  int64_t u = 0;
  for (size_t b = 0; b < s.n;) {
    uint32_t cp;
    size_t k = utf8_next(s.p + b, s.n - b, &cp);
    int w = cp >= 0x10000 ? 2 : 1;
    if (i < u + w) {
      if (w == 2)
        return jctx_fail(c, line,
                         "unsupported: an index into half of a character beyond U+FFFF (the "
                         "reference gives a lone surrogate)");
      return jv_make_str(c, line, s.p + b, k, out);
    }
    u += w;
    b += k;
  }
  return *out = jv_undef(), 0;
}

int jinja_member(jctx *c, int line, jv obj, jv key, jv *out) {
  if (obj.kind == JV_DICT || obj.kind == JV_NS) {
    if (key.kind != JV_STR)
      return jctx_fail(c, line, "a %s member needs a string key, not a %s", jv_kind_name(obj.kind),
                       jv_kind_name(key.kind));
    const jv *v = jdict_get(obj.u.d, key.u.s);
    if (v) return *out = *v, 0;
    if (obj.kind == JV_DICT) {
      int r = bound_method(c, line, obj, key.u.s, 1, out);
      if (r) return r < 0 ? -1 : 0;
    }
    return *out = jv_undef(), 0;
  }
  if (obj.kind == JV_LIST || obj.kind == JV_STR) {
    if (key.kind == JV_INT) {
      if (obj.kind == JV_STR) return str_at(c, line, obj.u.s, key.u.i, out);
      int64_t n = (int64_t)obj.u.l->n, i = key.u.i < 0 ? key.u.i + n : key.u.i;
      *out = i >= 0 && i < n ? obj.u.l->items[i] : jv_undef();
      return 0;
    }
    if (key.kind == JV_STR) {
      if (jstr_eq_c(key.u.s, "length")) {
        *out = jv_int(obj.kind == JV_LIST ? (int64_t)obj.u.l->n : (int64_t)js_utf16_len(obj.u.s));
        return 0;
      }
      if (obj.kind == JV_STR) {
        int r = bound_method(c, line, obj, key.u.s, 0, out);
        if (r) return r < 0 ? -1 : 0;
      }
      return *out = jv_undef(), 0;
    }
    return jctx_fail(c, line, "a %s index must be an integer or a name, not a %s",
                     jv_kind_name(obj.kind), jv_kind_name(key.kind));
  }
  if (key.kind != JV_STR) return jctx_fail(c, line, "a %s has no items", jv_kind_name(obj.kind));
  return *out = jv_undef(), 0;
}

/* ---- comparison and sorting ------------------------------------------------------------------ */

int jinja_compare(jctx *c, int line, jv a, jv b, int case_sensitive, int *cmp) {
  if (a.kind == JV_NONE && b.kind == JV_NONE) return *cmp = 0, 0;
  if (a.kind == JV_NONE || b.kind == JV_NONE || a.kind == JV_UNDEF || b.kind == JV_UNDEF) {
    if (a.kind == JV_UNDEF && b.kind == JV_UNDEF) return *cmp = 0, 0;
    return jctx_fail(c, line, "cannot compare a %s with a %s", jv_kind_name(a.kind),
                     jv_kind_name(b.kind));
  }
  int an = a.kind == JV_INT || a.kind == JV_FLOAT || a.kind == JV_BOOL;
  int bn = b.kind == JV_INT || b.kind == JV_FLOAT || b.kind == JV_BOOL;
  if (an && bn) {
    double x = a.kind == JV_INT ? (double)a.u.i : a.kind == JV_FLOAT ? a.u.f : a.u.b;
    double y = b.kind == JV_INT ? (double)b.u.i : b.kind == JV_FLOAT ? b.u.f : b.u.b;
    *cmp = x < y ? -1 : x > y ? 1 : 0;
    return 0;
  }
  if (a.kind == JV_STR && b.kind == JV_STR) {
    if (case_sensitive) return *cmp = js_str_cmp(a.u.s, b.u.s), 0;
    jv la, lb;
    if (js_case(c, line, a.u.s, 0, &la) || js_case(c, line, b.u.s, 0, &lb)) return -1;
    *cmp = js_str_cmp(la.u.s, lb.u.s);
    return 0;
  }
  return jctx_fail(c, line, "cannot compare a %s with a %s", jv_kind_name(a.kind),
                   jv_kind_name(b.kind));
}

typedef struct sort_ctx {
  jctx *c;
  int line;
  int case_sensitive;
  int reverse;
  jstr attr; /* n == 0: the items themselves */
  int by_attr;
  int dict_index; /* dictsort: 0 key, 1 value (items are [key, value] lists); -1: not dictsort */
} sort_ctx;

static jv attr_path(jv item, jstr path);

static int sort_key_cmp(sort_ctx *s, jv a, jv b, int *r) {
  if (s->dict_index >= 0) {
    a = a.u.l->items[s->dict_index];
    b = b.u.l->items[s->dict_index];
  } else if (s->by_attr) {
    a = attr_path(a, s->attr);
    b = attr_path(b, s->attr);
  }
  if (jinja_compare(s->c, s->line, a, b, s->case_sensitive, r)) return -1;
  if (s->reverse) *r = -*r;
  return 0;
}

/* Stable merge sort that can fail (a comparison of kinds the reference refuses). */
static int merge_sort(sort_ctx *s, jv *v, jv *tmp, size_t n) {
  if (n < 2) return 0;
  size_t h = n / 2;
  if (merge_sort(s, v, tmp, h) || merge_sort(s, v + h, tmp, n - h)) return -1;
  size_t i = 0, j = h, k = 0;
  while (i < h && j < n) {
    int r;
    if (sort_key_cmp(s, v[j], v[i], &r)) return -1;
    tmp[k++] = r < 0 ? v[j++] : v[i++];
  }
  while (i < h) tmp[k++] = v[i++];
  while (j < n) tmp[k++] = v[j++];
  memcpy(v, tmp, n * sizeof *v);
  return 0;
}

static int sorted_copy(sort_ctx *s, jv list, jv *out) {
  size_t n = list.u.l->n;
  if (jv_make_list(s->c, s->line, n, out)) return -1;
  if (n) memcpy(out->u.l->items, list.u.l->items, n * sizeof(jv));
  jv *tmp = n ? jctx_alloc(s->c, s->line, n * sizeof *tmp) : NULL;
  if (n && !tmp) return -1;
  return merge_sort(s, out->u.l->items, tmp, n);
}

/* getAttributeValue: a dotted path through dicts, namespaces and list indices. */
static jv attr_path(jv item, jstr path) {
  jv v = item;
  size_t i = 0;
  for (;;) {
    size_t j = i;
    while (j < path.n && path.p[j] != '.') j++;
    jstr part = {path.p + i, j - i};
    if (v.kind == JV_DICT || v.kind == JV_NS) {
      const jv *m = jdict_get(v.u.d, part);
      v = m ? *m : jv_undef();
    } else if (v.kind == JV_LIST) {
      /* parseInt: leading digits (an optional sign) */
      char buf[24];
      size_t n = part.n < sizeof buf - 1 ? part.n : sizeof buf - 1;
      memcpy(buf, part.p, n);
      buf[n] = '\0';
      char *end;
      long long idx = strtoll(buf, &end, 10);
      if (end == buf || idx < 0 || (size_t)idx >= v.u.l->n) return jv_undef();
      v = v.u.l->items[idx];
    } else {
      return jv_undef();
    }
    if (j >= path.n) return v;
    i = j + 1;
  }
}

/* ---- tests ----------------------------------------------------------------------------------- */

static int run_test(jctx *c, int line, jstr name, jv v, const jv *arg, int *r) {
#define IS(s) jstr_eq_c(name, s)
  if (IS("boolean"))
    *r = v.kind == JV_BOOL;
  else if (IS("callable"))
    *r = v.kind == JV_FUNC;
  else if (IS("odd") || IS("even")) {
    if (v.kind != JV_INT)
      return jctx_fail(c, line, "cannot test odd/even on a %s", jv_kind_name(v.kind));
    *r = (v.u.i % 2 != 0) == IS("odd");
  } else if (IS("false"))
    *r = v.kind == JV_BOOL && !v.u.b;
  else if (IS("true"))
    *r = v.kind == JV_BOOL && v.u.b;
  else if (IS("none"))
    *r = v.kind == JV_NONE;
  else if (IS("string"))
    *r = v.kind == JV_STR;
  else if (IS("number"))
    *r = v.kind == JV_INT || v.kind == JV_FLOAT;
  else if (IS("integer"))
    *r = v.kind == JV_INT;
  else if (IS("iterable"))
    *r = (v.kind == JV_LIST && !v.u.l->is_tuple) || v.kind == JV_STR;
  else if (IS("mapping"))
    *r = v.kind == JV_DICT;
  else if (IS("sequence"))
    *r = v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_STR;
  else if (IS("lower") || IS("upper")) {
    if (v.kind != JV_STR)
      *r = 0;
    else {
      jv m;
      if (js_case(c, line, v.u.s, IS("upper"), &m)) return -1;
      *r = jstr_eq(m.u.s, v.u.s);
    }
  } else if (IS("defined"))
    *r = v.kind != JV_UNDEF;
  else if (IS("undefined"))
    *r = v.kind == JV_UNDEF;
  else if (IS("equalto") || IS("eq")) {
    if (!arg) return jctx_fail(c, line, "the test '%.*s' needs a value", (int)name.n, name.p);
    *r = jinja_strict_eq(v, *arg);
  } else {
    return jctx_fail(c, line, "unknown test '%.*s'", (int)name.n, name.p);
  }
#undef IS
  return 0;
}

int jinja_test(jctx *c, const jnode *n, jv operand, int *result) {
  return run_test(c, n->line, n->s, operand, NULL, result);
}

/* ---- string helpers -------------------------------------------------------------------------- */

static int str_join2(jctx *c, int line, jstr a, jstr b, jv *out) {
  char *p = jctx_alloc(c, line, a.n + b.n + 1);
  if (!p) return -1;
  if (a.n) memcpy(p, a.p, a.n);
  if (b.n) memcpy(p + a.n, b.p, b.n);
  *out = jv_str((jstr){p, a.n + b.n});
  return 0;
}

static int js_is_word(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '_';
}

/* titleCase: /\b\w/g upper-cased (ASCII word characters only; the rest unchanged). */
static int str_title(jctx *c, int line, jstr s, jv *out) {
  if (jv_make_str(c, line, s.p, s.n, out)) return -1;
  char *p = (char *)out->u.s.p;
  for (size_t i = 0; i < s.n; i++)
    if (js_is_word(p[i]) && (i == 0 || !js_is_word(s.p[i - 1])) && p[i] >= 'a' && p[i] <= 'z')
      p[i] = (char)(p[i] - 32);
  return 0;
}

static int str_capitalize(jctx *c, int line, jstr s, jv *out) {
  if (s.n == 0) return *out = jv_str(s), 0;
  uint32_t cp;
  size_t k = utf8_next(s.p, s.n, &cp);
  if (cp >= 0x10000) return *out = jv_str(s), 0; /* a lone surrogate has no case */
  jv first;
  if (js_case(c, line, (jstr){s.p, k}, 1, &first)) return -1;
  return str_join2(c, line, first.u.s, (jstr){s.p + k, s.n - k}, out);
}

typedef struct sbuf {
  jctx *c;
  int line;
  char *p;
  size_t n, cap;
} sbuf;

static int sb_put(sbuf *b, const char *p, size_t n) {
  if (b->n + n > b->c->lim->max_output_bytes)
    return jctx_fail(b->c, b->line, "a string exceeds the output limit of %zu bytes",
                     b->c->lim->max_output_bytes);
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < b->n + n + 1) cap *= 2;
    char *q = jctx_alloc(b->c, b->line, cap);
    if (!q) return -1;
    if (b->n) memcpy(q, b->p, b->n);
    b->p = q;
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->n, p, n);
  b->n += n;
  return 0;
}

static jv sb_value(sbuf *b) { return jv_str((jstr){b->p ? b->p : "", b->n}); }

static int find_sub(jstr s, size_t from, jstr sub) {
  for (size_t i = from; i + sub.n <= s.n; i++)
    if (memcmp(s.p + i, sub.p, sub.n) == 0) return (int)(i - from) >= 0 ? (int)i : -1;
  return -1;
}

/* str.replace(old, new[, count]) with the reference's empty-old rule (between code points). */
static int str_replace(jctx *c, int line, jstr s, jstr old, jstr rep, int64_t count, jv *out) {
  if (count == 0) return *out = jv_str(s), 0;
  int64_t left = count < 0 ? INT64_MAX : count;
  sbuf b = {c, line, NULL, 0, 0};
  if (old.n == 0) {
    size_t i = 0;
    for (;;) {
      if (left > 0) {
        if (sb_put(&b, rep.p, rep.n)) return -1;
        left--;
      }
      if (i >= s.n) break;
      uint32_t cp;
      size_t k = utf8_next(s.p + i, s.n - i, &cp);
      if (sb_put(&b, s.p + i, k)) return -1;
      i += k;
    }
    return *out = sb_value(&b), 0;
  }
  size_t i = 0;
  while (i < s.n) {
    int at = left > 0 && old.n <= s.n ? find_sub(s, i, old) : -1;
    if (at < 0) break;
    if (sb_put(&b, s.p + i, (size_t)at - i) || sb_put(&b, rep.p, rep.n)) return -1;
    i = (size_t)at + old.n;
    left--;
  }
  if (sb_put(&b, s.p + i, s.n - i)) return -1;
  return *out = sb_value(&b), 0;
}

static int list_push(jctx *c, int line, jv *list, size_t *cap, jv v) {
  jlist *l = list->u.l;
  if (l->n == *cap) {
    size_t nc = *cap ? *cap * 2 : 8;
    jv *p = jctx_alloc(c, line, nc * sizeof *p);
    if (!p) return -1;
    if (l->n) memcpy(p, l->items, l->n * sizeof *p);
    l->items = p;
    *cap = nc;
  }
  l->items[l->n++] = v;
  return 0;
}

static int str_split(jctx *c, int line, jstr s, const jv *sep, int64_t maxsplit, jv *out) {
  if (jv_make_list(c, line, 0, out)) return -1;
  size_t cap = 0;
  if (!sep || sep->kind == JV_NONE) {
    jstr t = js_trim(s, 1, 0);
    size_t i = 0;
    while (i < t.n) {
      uint32_t cp;
      size_t k;
      while (i < t.n && (k = utf8_next(t.p + i, t.n - i, &cp)) && js_is_space(cp)) i += k;
      if (i >= t.n) break;
      size_t st = i;
      while (i < t.n && (k = utf8_next(t.p + i, t.n - i, &cp)) && !js_is_space(cp)) i += k;
      if (maxsplit != -1 && (int64_t)out->u.l->n >= maxsplit) {
        if (list_push(c, line, out, &cap, jv_str((jstr){t.p + st, t.n - st}))) return -1;
        return 0;
      }
      if (list_push(c, line, out, &cap, jv_str((jstr){t.p + st, i - st}))) return -1;
    }
    return 0;
  }
  jstr sp = sep->u.s;
  if (sp.n == 0) return jctx_fail(c, line, "split: empty separator");
  size_t i = 0;
  for (;;) {
    int at = find_sub(s, i, sp);
    if (at < 0 || (maxsplit != -1 && (int64_t)out->u.l->n >= maxsplit)) {
      /* JavaScript splits fully, then joins the parts past maxsplit back with sep: the same */
      if (list_push(c, line, out, &cap, jv_str((jstr){s.p + i, s.n - i}))) return -1;
      return 0;
    }
    if (list_push(c, line, out, &cap, jv_str((jstr){s.p + i, (size_t)at - i}))) return -1;
    i = (size_t)at + sp.n;
  }
}

static int str_starts_ends(jctx *c, int line, jstr s, const jargs *a, int ends, jv *out) {
  if (a->n == 0 || a->n_kw)
    return jctx_fail(c, line, "%s needs one argument", ends ? "endswith" : "startswith");
  jv p = a->pos[0];
  jstr one[1] = {{NULL, 0}};
  const jv *list = NULL;
  size_t n = 1;
  if (p.kind == JV_STR) {
    one[0] = p.u.s;
  } else if (p.kind == JV_LIST) {
    list = p.u.l->items;
    n = p.u.l->n;
  } else {
    return jctx_fail(c, line, "%s: the argument must be a string or a tuple of strings",
                     ends ? "endswith" : "startswith");
  }
  for (size_t i = 0; i < n; i++) {
    jstr x;
    if (list) {
      if (list[i].kind != JV_STR)
        return jctx_fail(c, line, "%s: tuple elements must be strings",
                         ends ? "endswith" : "startswith");
      x = list[i].u.s;
    } else {
      x = one[0];
    }
    if (x.n <= s.n && memcmp(ends ? s.p + s.n - x.n : s.p, x.p, x.n) == 0)
      return *out = jv_bool(1), 0;
  }
  return *out = jv_bool(0), 0;
}

static int dict_items(jctx *c, int line, const jdict *d, int what, jv *out) {
  if (jv_make_list(c, line, d->n, out)) return -1;
  for (size_t i = 0; i < d->n; i++) {
    if (what == JM_KEYS) {
      out->u.l->items[i] = jv_str(d->keys[i]);
    } else if (what == JM_VALUES) {
      out->u.l->items[i] = d->vals[i];
    } else {
      jv pair;
      if (jv_make_list(c, line, 2, &pair)) return -1;
      pair.u.l->items[0] = jv_str(d->keys[i]);
      pair.u.l->items[1] = d->vals[i];
      out->u.l->items[i] = pair;
    }
  }
  return 0;
}

static int want_bool(jctx *c, int line, const jv *v, int dflt, const char *what, int *out) {
  if (!v) return *out = dflt, 0;
  if (v->kind != JV_BOOL) return jctx_fail(c, line, "%s must be a boolean", what);
  return *out = v->u.b, 0;
}

static int dictsort(jctx *c, int line, const jdict *d, const jargs *a, jv *out) {
  const jv *cs = a->n > 0 ? &a->pos[0] : jargs_kw(a, "case_sensitive");
  const jv *by = a->n > 1 ? &a->pos[1] : jargs_kw(a, "by");
  const jv *rev = a->n > 2 ? &a->pos[2] : jargs_kw(a, "reverse");
  sort_ctx s = {c, line, 0, 0, {NULL, 0}, 0, 0};
  if (want_bool(c, line, cs, 0, "case_sensitive", &s.case_sensitive) ||
      want_bool(c, line, rev, 0, "reverse", &s.reverse))
    return -1;
  if (by) {
    if (by->kind != JV_STR || !(jstr_eq_c(by->u.s, "key") || jstr_eq_c(by->u.s, "value")))
      return jctx_fail(c, line, "dictsort: by must be 'key' or 'value'");
    s.dict_index = jstr_eq_c(by->u.s, "value");
  }
  jv items;
  if (dict_items(c, line, d, JM_ITEMS, &items)) return -1;
  return sorted_copy(&s, items, out);
}

int jinja_call_method(jctx *c, int line, const jfunc *f, const jargs *a, jv *out) {
  jv self = f->self;
  if (f->id == JM_DICTSORT) return dictsort(c, line, self.u.d, a, out);
  if (f->id == JM_REPLACE) {
    if (a->n < 2 || a->pos[0].kind != JV_STR || a->pos[1].kind != JV_STR)
      return jctx_fail(c, line, "replace() needs two string arguments");
    const jv *cnt = a->n > 2 ? &a->pos[2] : jargs_kw(a, "count");
    int64_t count = -1;
    if (cnt && cnt->kind == JV_INT)
      count = cnt->u.i;
    else if (cnt && cnt->kind != JV_NONE)
      return jctx_fail(c, line, "replace(): count must be an integer or none");
    return str_replace(c, line, self.u.s, a->pos[0].u.s, a->pos[1].u.s, count, out);
  }
  if (a->n_kw) return jctx_fail(c, line, "unsupported: keyword arguments to this method");
  switch (f->id) {
  case JM_UPPER:
    return js_case(c, line, self.u.s, 1, out);
  case JM_LOWER:
    return js_case(c, line, self.u.s, 0, out);
  /* the reference's strip family ignores its argument and strips whitespace
   * (docs/chat-template.md) */
  case JM_STRIP:
    return *out = jv_str(js_trim(self.u.s, 1, 1)), 0;
  case JM_LSTRIP:
    return *out = jv_str(js_trim(self.u.s, 1, 0)), 0;
  case JM_RSTRIP:
    return *out = jv_str(js_trim(self.u.s, 0, 1)), 0;
  case JM_TITLE:
    return str_title(c, line, self.u.s, out);
  case JM_CAPITALIZE:
    return str_capitalize(c, line, self.u.s, out);
  case JM_STARTSWITH:
    return str_starts_ends(c, line, self.u.s, a, 0, out);
  case JM_ENDSWITH:
    return str_starts_ends(c, line, self.u.s, a, 1, out);
  case JM_SPLIT: {
    const jv *sep = a->n > 0 ? &a->pos[0] : NULL;
    if (sep && sep->kind != JV_STR && sep->kind != JV_NONE)
      return jctx_fail(c, line, "split: the separator must be a string or none");
    int64_t maxsplit = -1;
    if (a->n > 1) {
      if (a->pos[1].kind != JV_INT) return jctx_fail(c, line, "split: maxsplit must be an integer");
      maxsplit = a->pos[1].u.i;
      if (maxsplit < -1) return jctx_fail(c, line, "unsupported: split with maxsplit below -1");
    }
    return str_split(c, line, self.u.s, sep, maxsplit, out);
  }
  case JM_GET: {
    if (a->n < 1 || a->pos[0].kind != JV_STR)
      return jctx_fail(c, line, "get(): the key must be a string");
    const jv *v = jdict_get(self.u.d, a->pos[0].u.s);
    *out = v ? *v : a->n > 1 ? a->pos[1] : jv_none();
    return 0;
  }
  case JM_ITEMS:
  case JM_KEYS:
  case JM_VALUES:
    return dict_items(c, line, self.u.d, f->id, out);
  default:
    break;
  }
  return jctx_fail(c, line, "unknown method");
}

/* ---- globals --------------------------------------------------------------------------------- */

static int fn_namespace(jctx *c, int line, const jargs *a, jv *out) {
  if (a->n > 1) return jctx_fail(c, line, "namespace() takes at most 1 positional argument");
  if (jv_make_dict(c, line, 8, 1, out)) return -1;
  if (a->n == 1) {
    jv src = a->pos[0];
    if (src.kind == JV_DICT) {
      for (size_t i = 0; i < src.u.d->n; i++)
        if (jdict_set(c, line, out->u.d, src.u.d->keys[i], src.u.d->vals[i])) return -1;
    } else if (src.kind == JV_LIST) {
      for (size_t i = 0; i < src.u.l->n; i++) {
        jv p = src.u.l->items[i];
        if (p.kind != JV_LIST || p.u.l->n != 2 || p.u.l->items[0].kind != JV_STR)
          return jctx_fail(c, line, "namespace() expects [key, value] pairs with string keys");
        if (jdict_set(c, line, out->u.d, p.u.l->items[0].u.s, p.u.l->items[1])) return -1;
      }
    } else {
      return jctx_fail(c, line, "namespace() cannot read a %s", jv_kind_name(src.kind));
    }
  }
  for (size_t i = 0; i < a->n_kw; i++)
    if (jdict_set(c, line, out->u.d, a->kw_names[i], a->kw[i])) return -1;
  return 0;
}

static int fn_range(jctx *c, int line, const jargs *a, jv *out) {
  if (a->n_kw || a->n < 1 || a->n > 3) return jctx_fail(c, line, "range() takes 1 to 3 integers");
  for (size_t i = 0; i < a->n; i++)
    if (a->pos[i].kind != JV_INT)
      return jctx_fail(c, line, "unsupported: range() of a %s", jv_kind_name(a->pos[i].kind));
  int64_t start = 0, stop, step = 1;
  if (a->n == 1)
    stop = a->pos[0].u.i;
  else
    start = a->pos[0].u.i, stop = a->pos[1].u.i;
  if (a->n == 3) step = a->pos[2].u.i;
  if (step == 0) return jctx_fail(c, line, "range() step must not be zero");
  int64_t n = 0;
  if (step > 0 && stop > start) n = (stop - start + step - 1) / step;
  if (step < 0 && stop < start) n = (start - stop + (-step) - 1) / (-step);
  c->loop_iterations += n;
  if (c->loop_iterations > c->lim->max_loop_iterations)
    return jctx_fail(c, line, "range() of %lld items exceeds the iteration limit", (long long)n);
  if (jv_make_list(c, line, (size_t)n, out)) return -1;
  for (int64_t i = 0; i < n; i++) out->u.l->items[i] = jv_int(start + i * step);
  return 0;
}

static int fn_strftime(jctx *c, int line, const jargs *a, jv *out) {
  if (a->n != 1 || a->n_kw || a->pos[0].kind != JV_STR)
    return jctx_fail(c, line, "strftime_now() takes one format string");
  static const char *const months[] = {"January",   "February", "March",    "April",
                                       "May",       "June",     "July",     "August",
                                       "September", "October",  "November", "December"};
  time_t now = time(NULL);
  struct tm tmv;
  localtime_r(&now, &tmv);
  jstr f = a->pos[0].u.s;
  sbuf b = {c, line, NULL, 0, 0};
  for (size_t i = 0; i < f.n; i++) {
    char buf[32];
    if (f.p[i] == '%' && i + 1 < f.n && strchr("YmdbBHM%", f.p[i + 1])) {
      switch (f.p[++i]) {
      case 'Y':
        snprintf(buf, sizeof buf, "%d", tmv.tm_year + 1900);
        break;
      case 'm':
        snprintf(buf, sizeof buf, "%02d", tmv.tm_mon + 1);
        break;
      case 'd':
        snprintf(buf, sizeof buf, "%02d", tmv.tm_mday);
        break;
      case 'b':
        snprintf(buf, sizeof buf, "%.3s", months[tmv.tm_mon]);
        break;
      case 'B':
        snprintf(buf, sizeof buf, "%s", months[tmv.tm_mon]);
        break;
      case 'H':
        snprintf(buf, sizeof buf, "%02d", tmv.tm_hour);
        break;
      case 'M':
        snprintf(buf, sizeof buf, "%02d", tmv.tm_min);
        break;
      default:
        snprintf(buf, sizeof buf, "%%");
        break;
      }
      if (sb_put(&b, buf, strlen(buf))) return -1;
    } else if (sb_put(&b, f.p + i, 1)) {
      return -1;
    }
  }
  *out = sb_value(&b);
  return 0;
}

int jinja_call_global(jctx *c, int line, const jfunc *f, const jargs *a, jv *out) {
  switch (f->id) {
  case JG_NAMESPACE:
    return fn_namespace(c, line, a, out);
  case JG_RANGE:
    return fn_range(c, line, a, out);
  case JG_STRFTIME:
    return fn_strftime(c, line, a, out);
  case JG_RAISE: {
    char buf[64];
    jstr msg = {"", 0};
    if (a->n > 0) {
      jv m = a->pos[0];
      if (m.kind == JV_STR)
        msg = m.u.s;
      else if (m.kind == JV_INT)
        snprintf(buf, sizeof buf, "%lld", (long long)m.u.i), msg = (jstr){buf, strlen(buf)};
      else
        msg = (jstr){jv_kind_name(m.kind), strlen(jv_kind_name(m.kind))};
    }
    return jctx_fail(c, line, "raise_exception: %.*s", (int)(msg.n > 300 ? 300 : msg.n), msg.p);
  }
  default:
    break;
  }
  return jctx_fail(c, line, "unknown function");
}

/* ---- filters --------------------------------------------------------------------------------- */

/* parseInt(s, 10) / parseFloat(s): a leading number after whitespace, else NaN. */
static double js_parse_number(jstr s, int integer) {
  s = js_trim(s, 1, 0);
  char buf[400];
  size_t n = s.n < sizeof buf - 1 ? s.n : sizeof buf - 1;
  memcpy(buf, s.p, n);
  buf[n] = '\0';
  const char *p = buf;
  int neg = 0;
  if (*p == '+' || *p == '-') neg = *p++ == '-';
  if (!integer && strncmp(p, "Infinity", 8) == 0) return neg ? -INFINITY : INFINITY;
  const char *q = p;
  int digits = 0;
  while (*q >= '0' && *q <= '9') q++, digits++;
  if (integer) {
    if (!digits) return NAN;
    double v = 0;
    for (const char *r = p; r < q; r++) v = v * 10 + (*r - '0');
    return neg ? -v : v;
  }
  if (*q == '.') {
    q++;
    while (*q >= '0' && *q <= '9') q++, digits++;
  }
  if (!digits) return NAN;
  if (*q == 'e' || *q == 'E') {
    const char *e = q + 1;
    if (*e == '+' || *e == '-') e++;
    if (*e >= '0' && *e <= '9') {
      while (*e >= '0' && *e <= '9') e++;
      q = e;
    }
  }
  char num[400];
  size_t len = (size_t)(q - p);
  memcpy(num, p, len);
  num[len] = '\0';
  double v = strtod(num, NULL);
  return neg ? -v : v;
}

static int number_value(jctx *c, int line, double v, int integer, jv *out) {
  if (!integer) return *out = jv_float(v), 0;
  if (!(fabs(v) <= (double)JV_MAX_SAFE_INT))
    return jctx_fail(c, line, "unsupported: an integer beyond 2^53");
  return *out = jv_int((int64_t)v), 0;
}

/* Array.prototype.join over raw values: strings, numbers, booleans; none/undefined as "". */
static int join_list(jctx *c, int line, jv list, jstr sep, jv *out) {
  sbuf b = {c, line, NULL, 0, 0};
  for (size_t i = 0; i < list.u.l->n; i++) {
    if (i && sb_put(&b, sep.p, sep.n)) return -1;
    jv x = list.u.l->items[i];
    char buf[64];
    switch (x.kind) {
    case JV_STR:
      if (sb_put(&b, x.u.s.p, x.u.s.n)) return -1;
      break;
    case JV_INT:
      snprintf(buf, sizeof buf, "%lld", (long long)x.u.i);
      if (sb_put(&b, buf, strlen(buf))) return -1;
      break;
    case JV_FLOAT:
      js_number_text(x.u.f, buf, sizeof buf);
      if (sb_put(&b, buf, strlen(buf))) return -1;
      break;
    case JV_BOOL:
      if (sb_put(&b, x.u.b ? "true" : "false", x.u.b ? 4 : 5)) return -1;
      break;
    case JV_NONE:
    case JV_UNDEF:
      break;
    default:
      return jctx_fail(c, line, "unsupported: join of a list holding a %s", jv_kind_name(x.kind));
    }
  }
  *out = sb_value(&b);
  return 0;
}

static int indent_str(jctx *c, int line, jstr s, int64_t width, int first, int blank, jv *out) {
  if (width < 0 || width > 1024) return jctx_fail(c, line, "indent width out of range");
  sbuf b = {c, line, NULL, 0, 0};
  size_t i = 0, ln = 0;
  for (;;) {
    size_t j = i;
    while (j < s.n && s.p[j] != '\n') j++;
    int empty = j == i;
    if (!((!first && ln == 0) || (!blank && empty)))
      for (int64_t k = 0; k < width; k++)
        if (sb_put(&b, " ", 1)) return -1;
    if (sb_put(&b, s.p + i, j - i)) return -1;
    if (j >= s.n) break;
    if (sb_put(&b, "\n", 1)) return -1;
    i = j + 1;
    ln++;
  }
  *out = sb_value(&b);
  return 0;
}

static int tojson(jctx *c, int line, jv v, const jargs *a, jv *out) {
  jjson_opts o = {-1, 0, 0, 1, NULL, NULL};
  const jv *ind = a ? jargs_kw(a, "indent") : NULL;
  if (ind && ind->kind == JV_INT)
    o.indent = ind->u.i;
  else if (ind && ind->kind != JV_NONE)
    return jctx_fail(c, line, "tojson: indent must be an integer");
  if (o.indent > 64) return jctx_fail(c, line, "tojson: indent above 64 is not supported");
  if (a && (want_bool(c, line, jargs_kw(a, "ensure_ascii"), 0, "ensure_ascii", &o.ensure_ascii) ||
            want_bool(c, line, jargs_kw(a, "sort_keys"), 0, "sort_keys", &o.sort_keys)))
    return -1;
  const jv *seps = a ? jargs_kw(a, "separators") : NULL;
  char *item_sep = NULL, *key_sep = NULL;
  if (seps && seps->kind == JV_LIST) {
    if (seps->u.l->n != 2 || seps->u.l->items[0].kind != JV_STR ||
        seps->u.l->items[1].kind != JV_STR)
      return jctx_fail(c, line, "tojson: separators must be two strings");
    jv s0 = seps->u.l->items[0], s1 = seps->u.l->items[1];
    item_sep = jctx_alloc(c, line, s0.u.s.n + 1);
    key_sep = jctx_alloc(c, line, s1.u.s.n + 1);
    if (!item_sep || !key_sep) return -1;
    memcpy(item_sep, s0.u.s.p, s0.u.s.n);
    memcpy(key_sep, s1.u.s.p, s1.u.s.n);
    if (memchr(item_sep, 0, s0.u.s.n) || memchr(key_sep, 0, s1.u.s.n))
      return jctx_fail(c, line, "tojson: separators with NUL are not supported");
    o.item_sep = item_sep;
    o.key_sep = key_sep;
  } else if (seps && seps->kind != JV_NONE) {
    return jctx_fail(c, line, "tojson: separators must be two strings");
  }
  size_t mark = c->out_n;
  if (jv_emit_json(c, line, v, &o, 0)) return -1;
  return jctx_cut(c, line, mark, out);
}

static int filter_plain(jctx *c, const jnode *n, jv v, jv *out) {
  int line = n->line;
  jstr name = n->s;
#define IS(s) jstr_eq_c(name, s)
  if (IS("safe")) return *out = v, 0;
  if (IS("tojson")) return tojson(c, line, v, NULL, out);
  if (v.kind == JV_LIST) {
    jlist *l = v.u.l;
    if (IS("list")) return *out = v, 0;
    if (IS("first") || IS("last")) {
      if (!l->n) return jctx_fail(c, line, "first/last of an empty list");
      *out = l->items[IS("first") ? 0 : l->n - 1];
      return 0;
    }
    if (IS("length")) return *out = jv_int((int64_t)l->n), 0;
    if (IS("reverse")) {
      if (jv_make_list(c, line, l->n, out)) return -1;
      for (size_t i = 0; i < l->n; i++) out->u.l->items[i] = l->items[l->n - 1 - i];
      return 0;
    }
    if (IS("sort")) {
      sort_ctx s = {c, line, 0, 0, {NULL, 0}, 0, -1};
      return sorted_copy(&s, v, out);
    }
    if (IS("join")) return join_list(c, line, v, (jstr){"", 0}, out);
    if (IS("string")) {
      size_t mark = c->out_n;
      jjson_opts o = {-1, 0, 0, 0, NULL, NULL};
      if (jv_emit_json(c, line, v, &o, 0)) return -1;
      return jctx_cut(c, line, mark, out);
    }
    if (IS("unique")) {
      size_t cap = 0;
      if (jv_make_list(c, line, 0, out)) return -1;
      for (size_t i = 0; i < l->n; i++) {
        int seen = 0;
        for (size_t k = 0; k < out->u.l->n && !seen; k++)
          seen = jinja_strict_eq(out->u.l->items[k], l->items[i]);
        if (!seen && list_push(c, line, out, &cap, l->items[i])) return -1;
      }
      return 0;
    }
  } else if (v.kind == JV_STR) {
    if (IS("length")) return *out = jv_int((int64_t)js_utf16_len(v.u.s)), 0;
    if (IS("upper")) return js_case(c, line, v.u.s, 1, out);
    if (IS("lower")) return js_case(c, line, v.u.s, 0, out);
    if (IS("title")) return str_title(c, line, v.u.s, out);
    if (IS("capitalize")) return str_capitalize(c, line, v.u.s, out);
    if (IS("trim")) return *out = jv_str(js_trim(v.u.s, 1, 1)), 0;
    if (IS("indent")) return indent_str(c, line, v.u.s, 4, 0, 0, out);
    if (IS("join") || IS("string")) return *out = v, 0;
    if (IS("int") || IS("float")) {
      double x = js_parse_number(v.u.s, IS("int"));
      return number_value(c, line, isnan(x) ? 0 : x, IS("int"), out);
    }
  } else if (v.kind == JV_INT || v.kind == JV_FLOAT) {
    if (IS("abs"))
      return *out = v.kind == JV_INT ? jv_int(v.u.i < 0 ? -v.u.i : v.u.i) : jv_float(fabs(v.u.f)),
             0;
    if (IS("int"))
      return number_value(c, line, floor(v.kind == JV_INT ? (double)v.u.i : v.u.f), 1, out);
    if (IS("float")) return *out = jv_float(v.kind == JV_INT ? (double)v.u.i : v.u.f), 0;
    if (IS("string")) {
      size_t mark = c->out_n;
      if (jv_emit_string(c, line, v)) return -1;
      return jctx_cut(c, line, mark, out);
    }
  } else if (v.kind == JV_DICT) {
    if (IS("items") || IS("keys") || IS("values"))
      return dict_items(c, line, v.u.d,
                        IS("items")  ? JM_ITEMS
                        : IS("keys") ? JM_KEYS
                                     : JM_VALUES,
                        out);
    if (IS("length")) return *out = jv_int((int64_t)v.u.d->n), 0;
    if (IS("dictsort")) {
      jargs none = {0};
      return dictsort(c, line, v.u.d, &none, out);
    }
  } else if (v.kind == JV_BOOL) {
    if (IS("bool")) return *out = v, 0;
    if (IS("int")) return *out = jv_int(v.u.b), 0;
    if (IS("float")) return *out = jv_float(v.u.b), 0;
    if (IS("string")) return *out = jv_str(v.u.b ? (jstr){"true", 4} : (jstr){"false", 5}), 0;
  }
#undef IS
  return jctx_fail(c, line, "unsupported filter '%.*s' on a %s", (int)name.n, name.p,
                   jv_kind_name(v.kind));
}

static int select_attr(jctx *c, const jnode *n, jv v, const jargs *a, int select, jv *out) {
  int line = n->line;
  for (size_t i = 0; i < v.u.l->n; i++)
    if (v.u.l->items[i].kind != JV_DICT && v.u.l->items[i].kind != JV_NS)
      return jctx_fail(c, line, "%s needs a list of dicts", select ? "selectattr" : "rejectattr");
  for (size_t i = 0; i < n->n_kids; i++)
    if (n->kids[i]->kind != JN_STR)
      return jctx_fail(c, line, "the arguments of %s must be string literals",
                       select ? "selectattr" : "rejectattr");
  if (a->n < 1)
    return jctx_fail(c, line, "%s needs an attribute name", select ? "selectattr" : "rejectattr");
  size_t cap = 0;
  if (jv_make_list(c, line, 0, out)) return -1;
  for (size_t i = 0; i < v.u.l->n; i++) {
    jv item = v.u.l->items[i];
    const jv *m = jdict_get(item.u.d, a->pos[0].u.s);
    int r = 0;
    if (m) {
      if (a->n > 1) {
        if (run_test(c, line, a->pos[1].u.s, *m, a->n > 2 ? &a->pos[2] : NULL, &r)) return -1;
      } else {
        r = jv_truthy(*m);
      }
    }
    if ((select ? r : !r) && list_push(c, line, out, &cap, item)) return -1;
  }
  return 0;
}

int jinja_filter(jctx *c, const jnode *n, jv v, struct jenv *env, jv *out) {
  if (!n->op) return filter_plain(c, n, v, out);
  int line = n->line;
  jstr name = n->s;
  jargs a;
  if (jinja_eval_args(c, (const jnode *const *)n->kids, n->n_kids, env, &a)) return -1;
#define IS(s) jstr_eq_c(name, s)
  if (IS("tojson")) return tojson(c, line, v, &a, out);
  if (IS("join")) {
    const jv *sep = a.n > 0 ? &a.pos[0] : jargs_kw(&a, "separator");
    if (sep && sep->kind != JV_STR)
      return jctx_fail(c, line, "join: the separator must be a string");
    jstr s = sep ? sep->u.s : (jstr){"", 0};
    if (v.kind == JV_LIST) return join_list(c, line, v, s, out);
    if (v.kind == JV_STR) {
      sbuf b = {c, line, NULL, 0, 0};
      for (size_t i = 0; i < v.u.s.n;) {
        uint32_t cp;
        size_t k = utf8_next(v.u.s.p + i, v.u.s.n - i, &cp);
        if ((i && sb_put(&b, s.p, s.n)) || sb_put(&b, v.u.s.p + i, k)) return -1;
        i += k;
      }
      return *out = sb_value(&b), 0;
    }
    return jctx_fail(c, line, "join of a %s", jv_kind_name(v.kind));
  }
  if (IS("int") || IS("float")) {
    int integer = IS("int");
    const jv *dflt = a.n > 0 ? &a.pos[0] : jargs_kw(&a, "default");
    if (v.kind == JV_STR) {
      double x = js_parse_number(v.u.s, integer);
      if (isnan(x)) return *out = dflt ? *dflt : integer ? jv_int(0) : jv_float(0), 0;
      return number_value(c, line, x, integer, out);
    }
    if (v.kind == JV_INT || v.kind == JV_FLOAT) return *out = v, 0;
    if (v.kind == JV_BOOL) return *out = integer ? jv_int(v.u.b) : jv_float(v.u.b), 0;
    return jctx_fail(c, line, "%s of a %s", integer ? "int" : "float", jv_kind_name(v.kind));
  }
  if (IS("default")) {
    jv dflt = a.n > 0 ? a.pos[0] : jv_str((jstr){"", 0});
    const jv *b = a.n > 1 ? &a.pos[1] : jargs_kw(&a, "boolean");
    int boolean = 0;
    if (want_bool(c, line, b, 0, "default: boolean", &boolean)) return -1;
    *out = (v.kind == JV_UNDEF || (boolean && !jv_truthy(v))) ? dflt : v;
    return 0;
  }
  if (v.kind == JV_LIST) {
    if (IS("sort")) {
      sort_ctx s = {c, line, 0, 0, {NULL, 0}, 0, -1};
      const jv *rev = a.n > 0 ? &a.pos[0] : jargs_kw(&a, "reverse");
      const jv *cs = a.n > 1 ? &a.pos[1] : jargs_kw(&a, "case_sensitive");
      const jv *attr = a.n > 2 ? &a.pos[2] : jargs_kw(&a, "attribute");
      if (want_bool(c, line, rev, 0, "reverse", &s.reverse) ||
          want_bool(c, line, cs, 0, "case_sensitive", &s.case_sensitive))
        return -1;
      char buf[32];
      if (attr && attr->kind == JV_STR) {
        s.by_attr = 1;
        s.attr = attr->u.s;
      } else if (attr && attr->kind == JV_INT) {
        snprintf(buf, sizeof buf, "%lld", (long long)attr->u.i);
        s.by_attr = 1;
        s.attr = (jstr){buf, strlen(buf)};
      } else if (attr && attr->kind != JV_NONE) {
        return jctx_fail(c, line, "sort: attribute must be a string or an integer");
      }
      return sorted_copy(&s, v, out);
    }
    if (IS("selectattr") || IS("rejectattr"))
      return select_attr(c, n, v, &a, IS("selectattr"), out);
    if (IS("map")) {
      const jv *attr = jargs_kw(&a, "attribute");
      if (!attr) return jctx_fail(c, line, "unsupported: map without attribute=");
      if (attr->kind != JV_STR) return jctx_fail(c, line, "map: attribute must be a string");
      const jv *dflt = jargs_kw(&a, "default");
      if (jv_make_list(c, line, v.u.l->n, out)) return -1;
      for (size_t i = 0; i < v.u.l->n; i++) {
        jv item = v.u.l->items[i];
        if (item.kind != JV_DICT && item.kind != JV_NS)
          return jctx_fail(c, line, "map: items must be dicts");
        jv r = attr_path(item, attr->u.s);
        out->u.l->items[i] = r.kind == JV_UNDEF && dflt ? *dflt : r;
      }
      return 0;
    }
  } else if (v.kind == JV_STR) {
    if (IS("indent")) {
      const jv *w = a.n > 0 ? &a.pos[0] : jargs_kw(&a, "width");
      const jv *first = a.n > 1 ? &a.pos[1] : jargs_kw(&a, "first");
      const jv *blank = a.n > 2 ? &a.pos[2] : jargs_kw(&a, "blank");
      if (w && w->kind != JV_INT) return jctx_fail(c, line, "indent: width must be an integer");
      return indent_str(c, line, v.u.s, w ? w->u.i : 4, first && jv_truthy(*first),
                        blank && jv_truthy(*blank), out);
    }
    if (IS("replace")) {
      jfunc f = {JF_METHOD, NULL, JM_REPLACE, v};
      return jinja_call_method(c, line, &f, &a, out);
    }
  } else if (v.kind == JV_DICT) {
    for (size_t i = 0; i < sizeof k_methods / sizeof k_methods[0]; i++) {
      if (!k_methods[i].on_dict || !IS(k_methods[i].name)) continue;
      jfunc f = {JF_METHOD, NULL, k_methods[i].id, v};
      return jinja_call_method(c, line, &f, &a, out);
    }
  }
#undef IS
  return jctx_fail(c, line, "unsupported filter '%.*s(...)' on a %s", (int)name.n, name.p,
                   jv_kind_name(v.kind));
}
