/* jinja_value — runtime values and their text as the reference writes them: strings seen as
 * JavaScript sees them (UTF-16 lengths, its whitespace set), numbers as Number.toString writes
 * them, JSON as the reference's toJSON writes it (", " and ": " separators, ensure_ascii
 * escaping U+007F and above, indent), the output buffer and the render arena.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "text/jinja_internal.h"

/* ---- render state ---------------------------------------------------------------------------- */

int jctx_fail(jctx *c, int line, const char *fmt, ...) {
  char what[DIAG_MSG_BYTES];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (line > 0)
    diag_set(c->d, PH_ERR_TEMPLATE, "%s:%d: %s", c->origin, line, what);
  else /* the context, not a template line */
    diag_set(c->d, PH_ERR_TEMPLATE, "%s: %s", c->origin, what);
  return -1;
}

static void *arena_take(jctx *c, int line, size_t bytes);

void *jctx_alloc(jctx *c, int line, size_t bytes) {
  if (bytes > 1024) return arena_take(c, line, bytes);
  size_t need = (bytes + 7) & ~(size_t)7;
  if (!c->small_chunk || c->small_cap - c->small_used < need) {
    char *p = arena_take(c, line, (size_t)1 << 14);
    if (!p) return NULL;
    c->small_chunk = p;
    c->small_used = 0;
    c->small_cap = (size_t)1 << 14;
  }
  void *r = c->small_chunk + c->small_used; /* zeroed: the arena zeroes, nothing is reused */
  c->small_used += need;
  return r;
}

static void *arena_take(jctx *c, int line, size_t bytes) {
  if (c->mem->used_bytes + bytes > c->lim->max_memory_bytes) {
    jctx_fail(c, line, "rendering needs more than the memory limit (%zu bytes)",
              c->lim->max_memory_bytes);
    return NULL;
  }
  void *p = arena_alloc(c->mem, bytes);
  if (!p) diag_set(c->d, PH_ERR_NO_MEMORY, "%s:%d: out of memory rendering", c->origin, line);
  return p;
}

char *jctx_str_alloc(jctx *c, int line, size_t n) {
  if (!c->str_chunk || c->str_cap - c->str_used < n) {            /* never NULL, even for n == 0 */
    size_t cap = n < ((size_t)1 << 13) ? (size_t)1 << 14 : 2 * n; /* room to grow in place */
    char *p = arena_take(c, line, cap);
    if (!p) return NULL;
    c->str_chunk = p;
    c->str_used = 0;
    c->str_cap = cap;
  }
  char *r = c->str_chunk + c->str_used;
  c->str_used += n;
  return r;
}

int jctx_str_concat(jctx *c, int line, jstr a, jstr b, jv *out) {
  if (a.n && c->str_chunk && a.p + a.n == c->str_chunk + c->str_used &&
      c->str_cap - c->str_used >= b.n) {
    /* a is the newest string: what follows it is free, and a keeps its own length */
    if (b.n) memcpy(c->str_chunk + c->str_used, b.p, b.n);
    c->str_used += b.n;
    *out = jv_str((jstr){a.p, a.n + b.n});
    return 0;
  }
  char *p = jctx_str_alloc(c, line, a.n + b.n);
  if (!p) return -1;
  if (a.n) memcpy(p, a.p, a.n);
  if (b.n) memcpy(p + a.n, b.p, b.n);
  *out = jv_str((jstr){p, a.n + b.n});
  return 0;
}

int jctx_emit(jctx *c, int line, const char *p, size_t n) {
  if (n == 0) return 0;
  if (c->out_n + n > c->lim->max_output_bytes)
    return jctx_fail(c, line, "the output exceeds the limit of %zu bytes",
                     c->lim->max_output_bytes);
  if (c->out_n + n + 1 > c->out_cap) {
    size_t cap = c->out_cap ? c->out_cap : 4096;
    while (cap < c->out_n + n + 1) cap *= 2;
    char *q = realloc(c->out, cap);
    if (!q) {
      diag_set(c->d, PH_ERR_NO_MEMORY, "%s:%d: out of memory rendering", c->origin, line);
      return -1;
    }
    c->out = q;
    c->out_cap = cap;
  }
  memcpy(c->out + c->out_n, p, n);
  c->out_n += n;
  return 0;
}

static int emit_c(jctx *c, int line, const char *s) { return jctx_emit(c, line, s, strlen(s)); }

int jctx_cut(jctx *c, int line, size_t mark, jv *out) {
  /* nothing written yet: the buffer may not exist */
  int rc = jv_make_str(c, line, c->out ? c->out + mark : "", c->out_n - mark, out);
  c->out_n = mark;
  return rc;
}

/* ---- UTF-8 and JavaScript's view of strings ----------------------------------------------------
 */

size_t utf8_next(const char *s, size_t n, uint32_t *cp) {
  const unsigned char *p = (const unsigned char *)s;
  if (n == 0) {
    *cp = 0;
    return 0;
  }
  if (p[0] < 0x80) {
    *cp = p[0];
    return 1;
  }
  size_t k = (p[0] & 0xE0) == 0xC0 ? 2 : (p[0] & 0xF0) == 0xE0 ? 3 : (p[0] & 0xF8) == 0xF0 ? 4 : 0;
  if (k == 0 || k > n) {
    *cp = 0xFFFD;
    return 1;
  }
  uint32_t v = p[0] & (0x7F >> k);
  for (size_t i = 1; i < k; i++) {
    if ((p[i] & 0xC0) != 0x80) {
      *cp = 0xFFFD;
      return 1;
    }
    v = (v << 6) | (p[i] & 0x3F);
  }
  *cp = v;
  return k;
}

size_t utf8_put(uint32_t cp, char *o) {
  unsigned char *out = (unsigned char *)o;
  if (cp < 0x80) {
    out[0] = (unsigned char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (unsigned char)(0xC0 | (cp >> 6));
    out[1] = (unsigned char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (unsigned char)(0xE0 | (cp >> 12));
    out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (unsigned char)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (unsigned char)(0xF0 | (cp >> 18));
  out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
  out[3] = (unsigned char)(0x80 | (cp & 0x3F));
  return 4;
}

/* ECMAScript WhiteSpace and LineTerminator: what \s, trim() and trimEnd() see. */
int js_is_space(uint32_t cp) {
  switch (cp) {
  case 0x09:
  case 0x0A:
  case 0x0B:
  case 0x0C:
  case 0x0D:
  case 0x20:
  case 0xA0:
  case 0x1680:
  case 0x2028:
  case 0x2029:
  case 0x202F:
  case 0x205F:
  case 0x3000:
  case 0xFEFF:
    return 1;
  default:
    return cp >= 0x2000 && cp <= 0x200A;
  }
}

size_t js_utf16_len(jstr s) {
  size_t n = 0;
  for (size_t i = 0; i < s.n;) {
    uint32_t cp;
    i += utf8_next(s.p + i, s.n - i, &cp);
    n += cp >= 0x10000 ? 2 : 1;
  }
  return n;
}

jstr js_trim(jstr s, int start, int end) {
  if (start) {
    while (s.n) {
      uint32_t cp;
      size_t k = utf8_next(s.p, s.n, &cp);
      if (!js_is_space(cp)) break;
      s.p += k;
      s.n -= k;
    }
  }
  if (end) {
    while (s.n) {
      size_t i = s.n - 1;
      while (i > 0 && ((unsigned char)s.p[i] & 0xC0) == 0x80) i--;
      uint32_t cp;
      utf8_next(s.p + i, s.n - i, &cp);
      if (!js_is_space(cp)) break;
      s.n = i;
    }
  }
  return s;
}

/* UTF-16 order: code points above U+FFFF sort as their lead surrogates (D800-DBFF). */
static uint32_t utf16_key(uint32_t cp) {
  return cp >= 0x10000 ? 0xD800 + ((cp - 0x10000) >> 10) : cp;
}

int js_str_cmp(jstr a, jstr b) {
  size_t i = 0, j = 0;
  while (i < a.n && j < b.n) {
    uint32_t x, y;
    i += utf8_next(a.p + i, a.n - i, &x);
    j += utf8_next(b.p + j, b.n - j, &y);
    if (x == y) continue;
    uint32_t kx = utf16_key(x), ky = utf16_key(y);
    if (kx != ky) return kx < ky ? -1 : 1;
    /* same lead surrogate: the trail decides */
    uint32_t tx = 0xDC00 + ((x - 0x10000) & 0x3FF), ty = 0xDC00 + ((y - 0x10000) & 0x3FF);
    return tx < ty ? -1 : 1;
  }
  if (i < a.n) return 1;
  if (j < b.n) return -1;
  return 0;
}

/* Code points whose JavaScript case mapping is not a one-to-one simple mapping (SpecialCasing:
 * ß -> SS, ligatures, Greek with iota subscript; İ and the context-dependent final sigma when
 * lower-casing): refused rather than mapped differently. */
static int special_casing(uint32_t cp, int upper) {
  if (!upper) return cp == 0x130 || cp == 0x3A3;
  return cp == 0xDF || cp == 0x149 || cp == 0x1F0 || cp == 0x390 || cp == 0x3B0 || cp == 0x587 ||
         (cp >= 0x1E96 && cp <= 0x1E9A) || (cp >= 0x1F50 && cp <= 0x1F56 && !(cp & 1)) ||
         (cp >= 0x1F80 && cp <= 0x1FFC) || (cp >= 0xFB00 && cp <= 0xFB06) ||
         (cp >= 0xFB13 && cp <= 0xFB17);
}

int js_case(jctx *c, int line, jstr s, int upper, jv *out) {
  char *buf = jctx_alloc(c, line, s.n * 2 + 4);
  if (!buf) return -1;
  size_t n = 0;
  for (size_t i = 0; i < s.n;) {
    uint32_t cp;
    i += utf8_next(s.p + i, s.n - i, &cp);
    if (special_casing(cp, upper))
      return jctx_fail(c, line,
                       "unsupported: %s-casing U+%04X (JavaScript maps it to several characters "
                       "or by context)",
                       upper ? "upper" : "lower", cp);
    utf8proc_int32_t m =
        upper ? utf8proc_toupper((utf8proc_int32_t)cp) : utf8proc_tolower((utf8proc_int32_t)cp);
    char tmp[4];
    size_t k = utf8_put((uint32_t)m, tmp);
    if (n + k > s.n * 2 + 4) return jctx_fail(c, line, "case mapping grew the string");
    memcpy(buf + n, tmp, k);
    n += k;
  }
  *out = jv_str((jstr){buf, n});
  return 0;
}

/* ---- values ---------------------------------------------------------------------------------- */

const char *jv_kind_name(jv_kind k) {
  switch (k) {
  case JV_UNDEF:
    return "undefined";
  case JV_NONE:
    return "none";
  case JV_BOOL:
    return "boolean";
  case JV_INT:
    return "integer";
  case JV_FLOAT:
    return "float";
  case JV_STR:
    return "string";
  case JV_LIST:
    return "list";
  case JV_DICT:
    return "dict";
  case JV_NS:
    return "namespace";
  case JV_FUNC:
    return "function";
  }
  return "?";
}

int jv_truthy(jv v) {
  switch (v.kind) {
  case JV_UNDEF:
  case JV_NONE:
    return 0;
  case JV_BOOL:
    return v.u.b;
  case JV_INT:
    return v.u.i != 0;
  case JV_FLOAT:
    return v.u.f != 0 && !isnan(v.u.f);
  case JV_STR:
    return v.u.s.n != 0;
  case JV_LIST:
    return v.u.l->n != 0;
  case JV_DICT:
    return v.u.d->n != 0;
  case JV_NS:
  case JV_FUNC:
    return 1;
  }
  return 0;
}

int jstr_eq(jstr a, jstr b) { return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0); }
int jstr_eq_c(jstr a, const char *s) {
  size_t n = strlen(s);
  return a.n == n && memcmp(a.p, s, n) == 0;
}

int jv_make_str(jctx *c, int line, const char *p, size_t n, jv *out) {
  char *b = jctx_str_alloc(c, line, n);
  if (!b) return -1;
  if (n) memcpy(b, p, n);
  *out = jv_str((jstr){b, n});
  return 0;
}

int jv_make_list(jctx *c, int line, size_t n, jv *out) {
  jlist *l = jctx_alloc(c, line, sizeof *l);
  if (!l) return -1;
  l->n = n;
  l->items = n ? jctx_alloc(c, line, n * sizeof(jv)) : NULL;
  if (n && !l->items) return -1;
  out->kind = JV_LIST;
  out->u.l = l;
  return 0;
}

int jv_make_dict(jctx *c, int line, size_t cap, int ns, jv *out) {
  jdict *d = jctx_alloc(c, line, sizeof *d);
  if (!d) return -1;
  if (cap < 4) cap = 4;
  d->keys = jctx_alloc(c, line, cap * sizeof(jstr));
  d->vals = jctx_alloc(c, line, cap * sizeof(jv));
  if (!d->keys || !d->vals) return -1;
  d->cap = cap;
  out->kind = ns ? JV_NS : JV_DICT;
  out->u.d = d;
  return 0;
}

const jv *jdict_get(const jdict *d, jstr key) {
  for (size_t i = 0; i < d->n; i++)
    if (jstr_eq(d->keys[i], key)) return &d->vals[i];
  return NULL;
}

int jdict_set(jctx *c, int line, jdict *d, jstr key, jv val) {
  for (size_t i = 0; i < d->n; i++)
    if (jstr_eq(d->keys[i], key)) {
      d->vals[i] = val;
      return 0;
    }
  if (d->n == d->cap) {
    size_t cap = d->cap * 2;
    jstr *k = jctx_alloc(c, line, cap * sizeof *k);
    jv *v = jctx_alloc(c, line, cap * sizeof *v);
    if (!k || !v) return -1;
    memcpy(k, d->keys, d->n * sizeof *k);
    memcpy(v, d->vals, d->n * sizeof *v);
    d->keys = k;
    d->vals = v;
    d->cap = cap;
  }
  d->keys[d->n] = key;
  d->vals[d->n] = val;
  d->n++;
  return 0;
}

/* An array index as JavaScript orders object keys: canonical decimal below 2^32 - 1. */
static int index_key(const char *s, size_t n, uint64_t *idx) {
  if (n == 0 || n > 10 || (n > 1 && s[0] == '0')) return 0;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return 0;
    v = v * 10 + (uint64_t)(s[i] - '0');
  }
  if (v >= 4294967295ull) return 0;
  *idx = v;
  return 1;
}

int jv_from_json(jctx *c, const json_t *j, jv *out) {
  switch (json_typeof(j)) {
  case JSON_NULL:
    *out = jv_none();
    return 0;
  case JSON_TRUE:
    *out = jv_bool(1);
    return 0;
  case JSON_FALSE:
    *out = jv_bool(0);
    return 0;
  case JSON_INTEGER: {
    json_int_t i = json_integer_value(j);
    if (i > JV_MAX_SAFE_INT || i < -JV_MAX_SAFE_INT)
      return jctx_fail(c, 0,
                       "unsupported: the integer %lld in the context is beyond 2^53 (the "
                       "reference would round it)",
                       (long long)i);
    *out = jv_int((int64_t)i);
    return 0;
  }
  case JSON_REAL: {
    double f = json_real_value(j);
    if (isfinite(f) && floor(f) == f && fabs(f) <= (double)JV_MAX_SAFE_INT)
      *out = jv_int((int64_t)f);
    else
      *out = jv_float(f);
    return 0;
  }
  case JSON_STRING:
    *out = jv_str((jstr){json_string_value(j), json_string_length(j)});
    return 0;
  case JSON_ARRAY: {
    size_t n = json_array_size(j);
    if (jv_make_list(c, 0, n, out)) return -1;
    for (size_t i = 0; i < n; i++)
      if (jv_from_json(c, json_array_get(j, i), &out->u.l->items[i])) return -1;
    return 0;
  }
  case JSON_OBJECT: {
    size_t n = json_object_size(j);
    if (jv_make_dict(c, 0, n, 0, out)) return -1;
    jdict *d = out->u.d;
    /* index-like keys first, ascending (insertion sort: objects are small) */
    const char *key;
    json_t *val;
    size_t n_idx = 0;
    json_object_foreach((json_t *)j, key, val) {
      uint64_t idx;
      if (!index_key(key, strlen(key), &idx)) continue;
      jv v;
      if (jv_from_json(c, val, &v)) return -1;
      size_t pos = n_idx;
      while (pos > 0) {
        uint64_t prev;
        index_key(d->keys[pos - 1].p, d->keys[pos - 1].n, &prev);
        if (prev < idx) break;
        d->keys[pos] = d->keys[pos - 1];
        d->vals[pos] = d->vals[pos - 1];
        pos--;
      }
      d->keys[pos] = (jstr){key, strlen(key)};
      d->vals[pos] = v;
      n_idx++;
      d->n++;
    }
    json_object_foreach((json_t *)j, key, val) {
      uint64_t idx;
      if (index_key(key, strlen(key), &idx)) continue;
      jv v;
      if (jv_from_json(c, val, &v)) return -1;
      d->keys[d->n] = (jstr){key, strlen(key)};
      d->vals[d->n] = v;
      d->n++;
    }
    return 0;
  }
  }
  return jctx_fail(c, 0, "unsupported JSON value in the context");
}

/* ---- text of values -------------------------------------------------------------------------- */

void js_number_text(double v, char *buf, size_t cap) {
  if (isnan(v)) {
    snprintf(buf, cap, "NaN");
    return;
  }
  if (isinf(v)) {
    snprintf(buf, cap, v < 0 ? "-Infinity" : "Infinity");
    return;
  }
  if (v == 0) {
    snprintf(buf, cap, "0");
    return;
  }
  char tmp[48];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(tmp, sizeof tmp, "%.*e", prec - 1, v);
    if (strtod(tmp, NULL) == v) break;
  }
  /* tmp: [-]d[.ddd]e(+|-)xx */
  const char *s = tmp;
  int neg = *s == '-';
  if (neg) s++;
  char digits[24];
  int k = 0;
  while (*s && *s != 'e') {
    if (*s != '.') digits[k++] = *s;
    s++;
  }
  while (k > 1 && digits[k - 1] == '0') k--;
  digits[k] = '\0';
  int e10 = atoi(s + 1);
  int n = e10 + 1;
  char *o = buf;
  size_t left = cap;
#define PUT(...)                                                                                   \
  do {                                                                                             \
    int w_ = snprintf(o, left, __VA_ARGS__);                                                       \
    if (w_ < 0 || (size_t)w_ >= left) return;                                                      \
    o += w_;                                                                                       \
    left -= (size_t)w_;                                                                            \
  } while (0)
  if (neg) PUT("-");
  if (k <= n && n <= 21) {
    PUT("%s", digits);
    for (int i = 0; i < n - k; i++) PUT("0");
  } else if (0 < n && n <= 21) {
    PUT("%.*s.%s", n, digits, digits + n);
  } else if (-6 < n && n <= 0) {
    PUT("0.");
    for (int i = 0; i < -n; i++) PUT("0");
    PUT("%s", digits);
  } else {
    PUT("%c", digits[0]);
    if (k > 1) PUT(".%s", digits + 1);
    PUT("e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
  }
#undef PUT
}

/* FloatValue.toString: -0.0, integral values with one decimal, else Number.toString. */
static void float_text(double v, char *buf, size_t cap) {
  if (v == 0 && signbit(v)) {
    snprintf(buf, cap, "-0.0");
  } else if (isfinite(v) && floor(v) == v && fabs(v) < 1e21) {
    snprintf(buf, cap, "%.1f", v);
  } else {
    js_number_text(v, buf, cap);
  }
}

int jv_emit_string(jctx *c, int line, jv v) {
  char buf[64];
  switch (v.kind) {
  case JV_STR:
    return jctx_emit(c, line, v.u.s.p, v.u.s.n);
  case JV_INT:
    snprintf(buf, sizeof buf, "%lld", (long long)v.u.i);
    return emit_c(c, line, buf);
  case JV_FLOAT:
    float_text(v.u.f, buf, sizeof buf);
    return emit_c(c, line, buf);
  case JV_BOOL:
    return emit_c(c, line, v.u.b ? "true" : "false");
  case JV_UNDEF:
    return emit_c(c, line, "undefined");
  case JV_NONE:
    return emit_c(c, line, "null");
  case JV_LIST:
  case JV_DICT:
  case JV_NS: {
    jjson_opts o = {-1, 0, 0, 0, NULL, NULL};
    return jv_emit_json(c, line, v, &o, 0);
  }
  case JV_FUNC:
    break;
  }
  return jctx_fail(c, line, "unsupported: writing a function or macro as text");
}

int jv_emit(jctx *c, int line, jv v) {
  if (v.kind == JV_UNDEF || v.kind == JV_NONE) return 0;
  return jv_emit_string(c, line, v);
}

static int emit_json_string(jctx *c, int line, jstr s, int ascii) {
  if (emit_c(c, line, "\"")) return -1;
  size_t run = 0; /* bytes copied through unchanged, flushed before an escape */
  for (size_t i = 0; i < s.n;) {
    uint32_t cp;
    size_t k = utf8_next(s.p + i, s.n - i, &cp);
    char esc[16];
    const char *e = NULL;
    switch (cp) {
    case '"':
      e = "\\\"";
      break;
    case '\\':
      e = "\\\\";
      break;
    case '\b':
      e = "\\b";
      break;
    case '\f':
      e = "\\f";
      break;
    case '\n':
      e = "\\n";
      break;
    case '\r':
      e = "\\r";
      break;
    case '\t':
      e = "\\t";
      break;
    default:
      if (cp < 0x20) {
        snprintf(esc, sizeof esc, "\\u%04x", cp);
        e = esc;
      } else if (ascii && cp >= 0x7F) {
        if (cp >= 0x10000) {
          uint32_t hi = 0xD800 + ((cp - 0x10000) >> 10), lo = 0xDC00 + ((cp - 0x10000) & 0x3FF);
          snprintf(esc, sizeof esc, "\\u%04x\\u%04x", hi, lo);
        } else {
          snprintf(esc, sizeof esc, "\\u%04x", cp);
        }
        e = esc;
      }
    }
    if (e) {
      if (jctx_emit(c, line, s.p + i - run, run) || emit_c(c, line, e)) return -1;
      run = 0;
    } else {
      run += k;
    }
    i += k;
  }
  if (jctx_emit(c, line, s.p + s.n - run, run)) return -1;
  return emit_c(c, line, "\"");
}

/* localeCompare, approximated: punctuation < digits < letters (case folded) < other, then
 * lower case before upper case (docs/chat-template.md: keys beyond ASCII may order
 * differently). */
static int collate_class(uint32_t cp, uint32_t *key) {
  if (cp >= '0' && cp <= '9') return *key = cp, 1;
  if (cp >= 'a' && cp <= 'z') return *key = cp, 2;
  if (cp >= 'A' && cp <= 'Z') return *key = cp + 32, 2;
  if (cp < 0x80) return *key = cp, 0;
  return *key = cp, 3;
}

static int locale_cmp(jstr a, jstr b) {
  size_t i = 0, j = 0;
  int tertiary = 0;
  while (i < a.n && j < b.n) {
    uint32_t x, y, kx, ky;
    i += utf8_next(a.p + i, a.n - i, &x);
    j += utf8_next(b.p + j, b.n - j, &y);
    int cx = collate_class(x, &kx), cy = collate_class(y, &ky);
    if (cx != cy) return cx < cy ? -1 : 1;
    if (kx != ky) return kx < ky ? -1 : 1;
    if (!tertiary && x != y) tertiary = x > y ? -1 : 1; /* lower case (larger code) first */
  }
  if (i < a.n) return 1;
  if (j < b.n) return -1;
  return tertiary;
}

int jv_emit_json(jctx *c, int line, jv v, const jjson_opts *o, int depth) {
  char buf[64];
  if (depth > JINJA_MAX_NESTING) return jctx_fail(c, line, "tojson: nesting too deep");
  const char *item_sep = o->item_sep ? o->item_sep : o->indent > 0 ? "," : ", ";
  const char *key_sep = o->key_sep ? o->key_sep : ": ";
  switch (v.kind) {
  case JV_NONE:
    return emit_c(c, line, "null");
  case JV_UNDEF:
    return emit_c(c, line, o->undef_null ? "null" : "undefined");
  case JV_BOOL:
    return emit_c(c, line, v.u.b ? "true" : "false");
  case JV_INT:
    snprintf(buf, sizeof buf, "%lld", (long long)v.u.i);
    return emit_c(c, line, buf);
  case JV_FLOAT:
    if (!isfinite(v.u.f)) return emit_c(c, line, "null");
    js_number_text(v.u.f, buf, sizeof buf);
    return emit_c(c, line, buf);
  case JV_STR:
    return emit_json_string(c, line, v.u.s, o->ensure_ascii);
  case JV_FUNC:
    return jctx_fail(c, line, "cannot convert a function to JSON");
  case JV_LIST:
  case JV_DICT:
  case JV_NS:
    break;
  }
  if (v.kind == JV_LIST && v.u.l->is_tuple)
    return jctx_fail(c, line,
                     "unsupported: a tuple as JSON or text (the reference cannot convert one)");
  int ind = o->indent > 0;
  /* childrenPadding = "\n" + indent * (depth + 1) */
  size_t n = v.kind == JV_LIST ? v.u.l->n : v.u.d->n;
  if (emit_c(c, line, v.kind == JV_LIST ? "[" : "{")) return -1;
  size_t *order = NULL;
  if (v.kind != JV_LIST && o->sort_keys && n > 1) {
    order = jctx_alloc(c, line, n * sizeof *order);
    if (!order) return -1;
    for (size_t i = 0; i < n; i++) order[i] = i;
    for (size_t i = 1; i < n; i++) { /* stable insertion sort */
      size_t x = order[i], k = i;
      while (k > 0 && locale_cmp(v.u.d->keys[order[k - 1]], v.u.d->keys[x]) > 0) {
        order[k] = order[k - 1];
        k--;
      }
      order[k] = x;
    }
  }
  for (size_t i = 0; i < n; i++) {
    if (i && emit_c(c, line, item_sep)) return -1;
    if (ind) {
      if (emit_c(c, line, "\n")) return -1;
      for (int64_t s = 0; s < o->indent * (depth + 1); s++)
        if (emit_c(c, line, " ")) return -1;
    }
    if (v.kind == JV_LIST) {
      if (jv_emit_json(c, line, v.u.l->items[i], o, depth + 1)) return -1;
    } else {
      size_t k = order ? order[i] : i;
      if (emit_json_string(c, line, v.u.d->keys[k], o->ensure_ascii) || emit_c(c, line, key_sep) ||
          jv_emit_json(c, line, v.u.d->vals[k], o, depth + 1))
        return -1;
    }
  }
  if (ind && n) {
    if (emit_c(c, line, "\n")) return -1;
    for (int64_t s = 0; s < o->indent * depth; s++)
      if (emit_c(c, line, " ")) return -1;
  }
  return emit_c(c, line, v.kind == JV_LIST ? "]" : "}");
}
