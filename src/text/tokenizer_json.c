/* tokenizer_json — a fast path for the two big members of tokenizer.json, model.vocab and
 * model.merges (99 % of an 11 MB file): a scanner finds their spans, reads them straight into
 * flat lists, and hands jansson the rest of the document with "{}" and "[]" in their place.
 * Parsing the whole file with jansson took two thirds of the open time (a 151k-key object).
 *
 * The fast path is only taken when it is certain to read what jansson would: at the first
 * doubt (a key with an escape, a repeated key, a number that is not a plain integer, an escape
 * or byte jansson refuses, anything unexpected) it reports "not taken" and the caller parses the
 * whole document with jansson, which then gives the error, with its line and column. */
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_impl.h"

#define SCAN_MAX_DEPTH 4096

static const char *skip_ws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  return p;
}

/* p at '"': the byte after the closing quote, or NULL. */
static const char *skip_string(const char *p, const char *end) {
  for (p++; p < end; p++) {
    if (*p == '\\') {
      p++;
      continue;
    }
    if (*p == '"') return p + 1;
  }
  return NULL;
}

/* The end of the value at p (any JSON value, not validated beyond its brackets), or NULL. */
static const char *skip_value(const char *p, const char *end) {
  if (p >= end) return NULL;
  if (*p == '"') return skip_string(p, end);
  if (*p != '{' && *p != '[') {
    while (p < end && !strchr(",}] \t\n\r", *p)) p++;
    return p;
  }
  int depth = 0;
  while (p < end) {
    if (*p == '"') {
      p = skip_string(p, end);
      if (!p) return NULL;
      continue;
    }
    if (*p == '{' || *p == '[') {
      if (++depth > SCAN_MAX_DEPTH) return NULL;
    } else if (*p == '}' || *p == ']') {
      if (--depth == 0) return p + 1;
    }
    p++;
  }
  return NULL;
}

typedef struct span {
  const char *b, *e; /* the value's bytes; b == NULL: not found */
} span;

/* Walks the object at p, recording the value spans of the keys asked for. 0 on any doubt. */
static int object_members(const char *p, const char *end, const char *const *keys, span *out,
                          int n_keys) {
  for (int k = 0; k < n_keys; k++) out[k].b = out[k].e = NULL;
  p = skip_ws(p, end);
  if (p >= end || *p != '{') return 0;
  p = skip_ws(p + 1, end);
  if (p < end && *p == '}') return 1;
  for (;;) {
    if (p >= end || *p != '"') return 0;
    const char *ks = p + 1, *ke = skip_string(p, end);
    if (!ke) return 0;
    if (memchr(ks, '\\', (size_t)(ke - 1 - ks))) return 0; /* an escaped key: jansson's job */
    p = skip_ws(ke, end);
    if (p >= end || *p != ':') return 0;
    p = skip_ws(p + 1, end);
    const char *vb = p, *ve = skip_value(p, end);
    if (!ve) return 0;
    for (int k = 0; k < n_keys; k++)
      if ((size_t)(ke - 1 - ks) == strlen(keys[k]) && memcmp(ks, keys[k], strlen(keys[k])) == 0) {
        if (out[k].b) return 0; /* a repeated key: jansson keeps the last, let it decide */
        out[k].b = vb;
        out[k].e = ve;
      }
    p = skip_ws(ve, end);
    if (p < end && *p == ',') {
      p = skip_ws(p + 1, end);
      continue;
    }
    return p < end && *p == '}';
  }
}

static int hex4(const char *p, uint32_t *v) {
  *v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    int d = c >= '0' && c <= '9'                 ? c - '0'
            : (c | 32) >= 'a' && (c | 32) <= 'f' ? (c | 32) - 'a' + 10
                                                 : -1;
    if (d < 0) return 0;
    *v = *v << 4 | (uint32_t)d;
  }
  return 1;
}

/* Decodes the JSON string at p (at '"') onto out; *next gets the byte after it. 0 when jansson
 * would refuse it (bad escape, lone surrogate, \u0000, a control byte, invalid UTF-8). */
static int read_string(const char *p, const char *end, tok_buf *out, const char **next) {
  size_t start = out->n;
  int ascii = 1;
  for (p++; p < end; p++) {
    unsigned char c = (unsigned char)*p;
    if (c == '"') {
      *next = p + 1;
      if (!ascii) { /* UTF-8 as jansson checks it */
        tok_buf fixed = {0};
        int ok = utf8_repair(out->p + start, out->n - start, &fixed) && fixed.n == out->n - start &&
                 memcmp(fixed.p, out->p + start, fixed.n) == 0;
        free(fixed.p);
        if (!ok) return 0;
      }
      return tok_buf_append(out, "", 0); /* keeps the NUL after the last string */
    }
    if (c < 0x20) return 0;
    if (c != '\\') {
      ascii &= c < 0x80;
      if (!tok_buf_append(out, p, 1)) return 0;
      continue;
    }
    if (++p >= end) return 0;
    const char *simple = strchr("\"\\/bfnrt", *p);
    if (*p && simple) {
      static const char map[] = "\"\\/\b\f\n\r\t";
      if (!tok_buf_append(out, &map[simple - "\"\\/bfnrt"], 1)) return 0;
      continue;
    }
    uint32_t cp, lo;
    if (*p != 'u' || end - p < 5 || !hex4(p + 1, &cp)) return 0;
    p += 4;
    if (cp >= 0xDC00 && cp <= 0xDFFF) return 0;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (end - p < 7 || p[1] != '\\' || p[2] != 'u' || !hex4(p + 3, &lo) || lo < 0xDC00 ||
          lo > 0xDFFF)
        return 0;
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      p += 6;
    }
    if (cp == 0) return 0;
    char u[4];
    if (!tok_buf_append(out, u, utf8_encode1(cp, u))) return 0;
  }
  return 0;
}

/* A plain integer (what jansson reads as an integer), or 0. */
static int read_int(const char *p, const char *end, int64_t *v, const char **next) {
  int neg = p < end && *p == '-';
  if (neg) p++;
  if (p >= end || *p < '0' || *p > '9') return 0;
  if (*p == '0' && p + 1 < end && p[1] >= '0' && p[1] <= '9') return 0; /* JSON: no 01 */
  int64_t x = 0;
  int digits = 0;
  while (p < end && *p >= '0' && *p <= '9') {
    if (++digits > 15) return 0;
    x = x * 10 + (*p++ - '0');
  }
  if (p < end && (*p == '.' || *p == 'e' || *p == 'E')) return 0;
  *v = neg ? -x : x;
  *next = p;
  return 1;
}

void model_lists_free(model_lists *l) {
  free(l->strs.p);
  free(l->vocab);
  free(l->merge);
  memset(l, 0, sizeof *l);
}

static int push_vocab(model_lists *l, uint32_t off, uint32_t len, int64_t id) {
  if (l->n_vocab == l->cap_vocab) {
    size_t cap = l->cap_vocab ? 2 * l->cap_vocab : 1024;
    vocab_item *v = realloc(l->vocab, cap * sizeof *v);
    if (!v) return 0;
    l->vocab = v;
    l->cap_vocab = cap;
  }
  l->vocab[l->n_vocab++] = (vocab_item){off, len, id};
  return 1;
}

int model_lists_push_merge(model_lists *l, uint32_t a_off, uint32_t a_len, uint32_t b_off,
                           uint32_t b_len) {
  if (l->n_merge == l->cap_merge) {
    size_t cap = l->cap_merge ? 2 * l->cap_merge : 1024;
    merge_item *m = realloc(l->merge, cap * sizeof *m);
    if (!m) return 0;
    l->merge = m;
    l->cap_merge = cap;
  }
  l->merge[l->n_merge++] = (merge_item){a_off, a_len, b_off, b_len};
  return 1;
}

int model_lists_push_vocab(model_lists *l, uint32_t off, uint32_t len, int64_t id) {
  return push_vocab(l, off, len, id);
}

static int read_vocab(span s, model_lists *l) {
  const char *p = skip_ws(s.b, s.e);
  if (p >= s.e || *p != '{') return 0;
  p = skip_ws(p + 1, s.e);
  if (p < s.e && *p == '}') return 1;
  for (;;) {
    size_t off = l->strs.n;
    int64_t id;
    if (p >= s.e || *p != '"' || !read_string(p, s.e, &l->strs, &p)) return 0;
    size_t len = l->strs.n - off;
    l->strs.n++; /* past the NUL */
    p = skip_ws(p, s.e);
    if (p >= s.e || *p != ':') return 0;
    p = skip_ws(p + 1, s.e);
    if (!read_int(p, s.e, &id, &p) || l->strs.n > UINT32_MAX ||
        !push_vocab(l, (uint32_t)off, (uint32_t)len, id))
      return 0;
    p = skip_ws(p, s.e);
    if (p < s.e && *p == ',') {
      p = skip_ws(p + 1, s.e);
      continue;
    }
    return p < s.e && *p == '}' && skip_ws(p + 1, s.e) == s.e;
  }
}

/* One merge: "a b" (split at its one space) or ["a", "b"]. */
static int read_merge(const char **pp, const char *end, model_lists *l) {
  const char *p = *pp;
  size_t a = l->strs.n, b;
  if (*p == '"') {
    if (!read_string(p, end, &l->strs, &p)) return 0;
    const char *s = l->strs.p + a, *sp = memchr(s, ' ', l->strs.n - a);
    size_t n = l->strs.n - a;
    l->strs.n++;
    /* not exactly one space splitting two non-empty halves: the loader's error, from jansson */
    if (!sp || sp == s || (size_t)(sp - s) == n - 1 ||
        memchr(sp + 1, ' ', n - (size_t)(sp - s) - 1))
      return 0;
    b = a + (size_t)(sp - s) + 1;
    *pp = p;
    return model_lists_push_merge(l, (uint32_t)a, (uint32_t)(sp - s), (uint32_t)b,
                                  (uint32_t)(n - (size_t)(sp - s) - 1));
  }
  if (*p != '[') return 0;
  p = skip_ws(p + 1, end);
  if (p >= end || *p != '"' || !read_string(p, end, &l->strs, &p)) return 0;
  size_t alen = l->strs.n - a;
  b = ++l->strs.n;
  p = skip_ws(p, end);
  if (p >= end || *p != ',') return 0;
  p = skip_ws(p + 1, end);
  if (p >= end || *p != '"' || !read_string(p, end, &l->strs, &p)) return 0;
  size_t blen = l->strs.n - b;
  l->strs.n++;
  p = skip_ws(p, end);
  if (p >= end || *p != ']') return 0;
  *pp = p + 1;
  return l->strs.n <= UINT32_MAX &&
         model_lists_push_merge(l, (uint32_t)a, (uint32_t)alen, (uint32_t)b, (uint32_t)blen);
}

static int read_merges(span s, model_lists *l) {
  const char *p = skip_ws(s.b, s.e);
  if (p >= s.e || *p != '[') return 0;
  p = skip_ws(p + 1, s.e);
  if (p < s.e && *p == ']') return 1;
  for (;;) {
    if (p >= s.e || !read_merge(&p, s.e, l)) return 0;
    p = skip_ws(p, s.e);
    if (p < s.e && *p == ',') {
      p = skip_ws(p + 1, s.e);
      continue;
    }
    return p < s.e && *p == ']' && skip_ws(p + 1, s.e) == s.e;
  }
}

int tokenizer_json_fast(const char *json, size_t len, model_lists *lists, char **rest,
                        size_t *rest_len) {
  *rest = NULL;
  *rest_len = 0;
  memset(lists, 0, sizeof *lists);
  const char *end = json + len;
  static const char *const top_keys[] = {"model"};
  static const char *const model_keys[] = {"vocab", "merges"};
  span top, m[2];
  if (!object_members(json, end, top_keys, &top, 1) || !top.b ||
      !object_members(top.b, top.e, model_keys, m, 2) || !m[0].b)
    return 0;
  if (!read_vocab(m[0], lists) || (m[1].b && !read_merges(m[1], lists))) {
    model_lists_free(lists);
    return 0;
  }
  /* the rest of the document, the two members emptied */
  int first = !m[1].b || m[0].b < m[1].b ? 0 : 1;
  span a = m[first], b = m[1 - first];
  const char *fill_a = first == 0 ? "{}" : "[]", *fill_b = first == 0 ? "[]" : "{}";
  tok_buf r = {0};
  int ok = tok_buf_append(&r, json, (size_t)(a.b - json)) && tok_buf_append(&r, fill_a, 2);
  if (b.b)
    ok = ok && tok_buf_append(&r, a.e, (size_t)(b.b - a.e)) && tok_buf_append(&r, fill_b, 2) &&
         tok_buf_append(&r, b.e, (size_t)(end - b.e));
  else
    ok = ok && tok_buf_append(&r, a.e, (size_t)(end - a.e));
  if (!ok) {
    free(r.p);
    model_lists_free(lists);
    return 0;
  }
  *rest = r.p;
  *rest_len = r.n;
  return 1;
}
