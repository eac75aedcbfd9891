/* jinja_lex — template source to tokens, as the reference's tokenize() reads it.
 *
 * First the reference's preprocessing, done on bytes with each byte's original line kept so
 * errors name the line the author wrote: drop one final newline; lstrip_blocks (spaces and tabs
 * before `{%`, `{#` or `{-` at a line start go); trim_blocks (the newline after `%}`, `#}` or
 * `-}` goes); `{% generation %}` / `{% endgeneration %}` tags vanish with the whitespace their
 * `-` asks. Then tokens: text between tags; inside tags identifiers, numbers (a sign glued to a
 * number after an operator), strings with the reference's escapes, operators, and `-` trimming
 * next to a tag's braces (JavaScript's whitespace set: trimEnd / \s).
 */
#include <stdio.h>
#include <string.h>

#include "text/jinja_internal.h"

typedef struct lexbuf {
  char *p;
  int *line;
  size_t n;
} lexbuf;

static int lex_fail(diag *d, const char *origin, int line, const char *what) {
  diag_set(d, PH_ERR_TEMPLATE, "%s:%d: %s", origin, line, what);
  return -1;
}

/* A line terminator for JavaScript's multiline ^ (\n, \r, U+2028, U+2029) ends at p[i-1]. */
static int at_line_start(const lexbuf *b, size_t i) {
  if (i == 0) return 1;
  char c = b->p[i - 1];
  if (c == '\n' || c == '\r') return 1;
  if (i >= 3 && (unsigned char)b->p[i - 3] == 0xE2 && (unsigned char)b->p[i - 2] == 0x80 &&
      ((unsigned char)c == 0xA8 || (unsigned char)c == 0xA9))
    return 1;
  return 0;
}

static void pp_lstrip(lexbuf *b) {
  size_t w = 0;
  for (size_t i = 0; i < b->n;) {
    if (at_line_start(b, i)) {
      size_t j = i;
      while (j < b->n && (b->p[j] == ' ' || b->p[j] == '\t')) j++;
      if (j > i && j + 1 < b->n && b->p[j] == '{' &&
          (b->p[j + 1] == '#' || b->p[j + 1] == '%' || b->p[j + 1] == '-')) {
        i = j; /* drop the run; at_line_start still reads the kept bytes before it */
      }
    }
    /* at_line_start reads b->p[i-1] of the unmodified prefix: compaction writes behind i. */
    b->p[w] = b->p[i];
    b->line[w] = b->line[i];
    w++;
    i++;
  }
  b->n = w;
}

static void pp_trim(lexbuf *b) {
  size_t w = 0;
  for (size_t i = 0; i < b->n; i++) {
    b->p[w] = b->p[i];
    b->line[w] = b->line[i];
    w++;
    if (i + 2 < b->n && (b->p[i] == '#' || b->p[i] == '%' || b->p[i] == '-') &&
        b->p[i + 1] == '}' && b->p[i + 2] == '\n') {
      b->p[w] = '}';
      b->line[w] = b->line[i + 1];
      w++;
      i += 2; /* skip the '}' (copied) and the newline */
    }
  }
  b->n = w;
}

/* JavaScript's \s at p[i]: returns its byte length, 0 when not whitespace. */
static size_t space_at(const char *p, size_t n, size_t i) {
  if (i >= n) return 0;
  unsigned char c = (unsigned char)p[i];
  if (c < 0x80) return (c == ' ' || (c >= '\t' && c <= '\r')) ? 1 : 0;
  uint32_t cp;
  size_t k = utf8_next(p + i, n - i, &cp);
  return js_is_space(cp) ? k : 0;
}

static int match_word(const lexbuf *b, size_t i, const char *w) {
  size_t k = strlen(w);
  return i + k <= b->n && memcmp(b->p + i, w, k) == 0;
}

/* (\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*) replaced by the whitespace the dashes keep. */
static void pp_generation(lexbuf *b) {
  size_t w = 0;
  size_t i = 0;
  while (i < b->n) {
    /* try a match starting at the whitespace run beginning at i */
    size_t ws = i;
    while (space_at(b->p, b->n, ws)) ws += space_at(b->p, b->n, ws);
    size_t j = ws;
    int ok = 0, lstrip = 0, rstrip = 0;
    size_t after_start = 0, after_end = 0;
    if (j + 1 < b->n && b->p[j] == '{' && b->p[j + 1] == '%') {
      j += 2;
      if (j < b->n && b->p[j] == '-') lstrip = 1, j++;
      while (space_at(b->p, b->n, j)) j += space_at(b->p, b->n, j);
      if (match_word(b, j, "end")) j += 3;
      if (match_word(b, j, "generation")) {
        j += 10;
        while (space_at(b->p, b->n, j)) j += space_at(b->p, b->n, j);
        if (j < b->n && b->p[j] == '-') rstrip = 1, j++;
        if (j + 1 < b->n && b->p[j] == '%' && b->p[j + 1] == '}') {
          j += 2;
          after_start = j;
          while (space_at(b->p, b->n, j)) j += space_at(b->p, b->n, j);
          after_end = j;
          ok = 1;
        }
      }
    }
    if (!ok) {
      /* no match here: copy one byte (or the whole run up to ws, none of which can start one) */
      size_t stop = ws > i ? ws : i + 1;
      while (i < stop) {
        b->p[w] = b->p[i];
        b->line[w] = b->line[i];
        w++, i++;
      }
      continue;
    }
    if (!lstrip) {
      for (size_t k = i; k < ws; k++, w++) b->p[w] = b->p[k], b->line[w] = b->line[k];
    }
    if (!rstrip) {
      for (size_t k = after_start; k < after_end; k++, w++)
        b->p[w] = b->p[k], b->line[w] = b->line[k];
    }
    i = after_end;
  }
  b->n = w;
}

typedef struct lexer {
  lexbuf b;
  size_t pos;
  jtok *toks;
  size_t n, cap;
  arena *a;
  const char *origin;
  diag *d;
  int depth_curly;
} lexer;

static int push(lexer *L, jtok_kind kind, int line, const char *p, size_t n) {
  if (L->n == L->cap) {
    size_t cap = L->cap ? 2 * L->cap : 256;
    jtok *t = arena_alloc(L->a, cap * sizeof *t);
    if (!t) {
      diag_set(L->d, PH_ERR_NO_MEMORY, "%s: out of memory reading the template", L->origin);
      return -1;
    }
    if (L->n) memcpy(t, L->toks, L->n * sizeof *t);
    L->toks = t;
    L->cap = cap;
  }
  jtok *t = &L->toks[L->n++];
  t->kind = kind;
  t->line = line;
  t->text.p = p;
  t->text.n = n;
  return 0;
}

static int cur_line(const lexer *L) {
  size_t i = L->pos < L->b.n ? L->pos : (L->b.n ? L->b.n - 1 : 0);
  return L->b.n ? L->b.line[i] : 1;
}

static void strip_trailing(lexer *L) {
  if (!L->n || L->toks[L->n - 1].kind != JT_TEXT) return;
  jtok *t = &L->toks[L->n - 1];
  t->text = js_trim(t->text, 0, 1);
  if (t->text.n == 0) L->n--;
}

static void skip_space(lexer *L) {
  size_t k;
  while ((k = space_at(L->b.p, L->b.n, L->pos))) L->pos += k;
}

static int is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* A string literal's body up to the closing quote q, escapes decoded. */
static int lex_string(lexer *L, char q) {
  int line = cur_line(L);
  L->pos++; /* the opening quote */
  /* the literal's raw extent bounds its decoded size (every escape decodes shorter) */
  size_t end = L->pos;
  while (end < L->b.n && L->b.p[end] != q) end += L->b.p[end] == '\\' ? 2 : 1;
  char *out = arena_alloc(L->a, (end < L->b.n ? end : L->b.n) - L->pos + 1);
  if (!out) {
    diag_set(L->d, PH_ERR_NO_MEMORY, "%s: out of memory reading the template", L->origin);
    return -1;
  }
  size_t n = 0;
  for (;;) {
    if (L->pos >= L->b.n) return lex_fail(L->d, L->origin, line, "unterminated string literal");
    char c = L->b.p[L->pos];
    if (c == q) break;
    if (c != '\\') {
      out[n++] = c;
      L->pos++;
      continue;
    }
    L->pos++;
    if (L->pos >= L->b.n) return lex_fail(L->d, L->origin, line, "unterminated string literal");
    char e = L->b.p[L->pos++];
    if (e == 'x' || e == 'u') {
      int len = e == 'x' ? 2 : 4;
      uint32_t cp = 0;
      for (int k = 0; k < len; k++) {
        int h = L->pos + (size_t)k < L->b.n ? hexval(L->b.p[L->pos + (size_t)k]) : -1;
        if (h < 0) return lex_fail(L->d, L->origin, line, "invalid \\x or \\u escape");
        cp = cp * 16 + (uint32_t)h;
      }
      L->pos += (size_t)len;
      if (cp >= 0xD800 && cp <= 0xDBFF && L->pos + 6 <= L->b.n && L->b.p[L->pos] == '\\' &&
          L->b.p[L->pos + 1] == 'u') {
        uint32_t lo = 0;
        int okhex = 1;
        for (int k = 0; k < 4; k++) {
          int h = hexval(L->b.p[L->pos + 2 + (size_t)k]);
          if (h < 0) okhex = 0;
          lo = lo * 16 + (uint32_t)(h < 0 ? 0 : h);
        }
        if (okhex && lo >= 0xDC00 && lo <= 0xDFFF) {
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          L->pos += 6;
        }
      }
      if (cp >= 0xD800 && cp <= 0xDFFF)
        return lex_fail(L->d, L->origin, line,
                        "unsupported: a \\u escape of a lone surrogate (not representable in "
                        "UTF-8)");
      n += utf8_put(cp, out + n);
      continue;
    }
    char r;
    switch (e) {
    case 'n':
      r = '\n';
      break;
    case 't':
      r = '\t';
      break;
    case 'r':
      r = '\r';
      break;
    case 'b':
      r = '\b';
      break;
    case 'f':
      r = '\f';
      break;
    case 'v':
      r = '\v';
      break;
    case '\'':
      r = '\'';
      break;
    case '"':
      r = '"';
      break;
    case '\\':
      r = '\\';
      break;
    default: {
      char msg[64];
      snprintf(msg, sizeof msg, "unexpected escaped character '\\%c'", e);
      return lex_fail(L->d, L->origin, line, msg);
    }
    }
    out[n++] = r;
  }
  L->pos++; /* closing quote */
  return push(L, JT_STRING, line, out, n);
}

static int lex_all(lexer *L) {
  const char *p = L->b.p;
  size_t n = L->b.n;
  while (L->pos < n) {
    jtok_kind last = L->n ? L->toks[L->n - 1].kind : JT_CLOSE_STMT;
    if (!L->n || last == JT_CLOSE_STMT || last == JT_CLOSE_EXPR || last == JT_COMMENT) {
      size_t s = L->pos;
      while (L->pos < n &&
             !(p[L->pos] == '{' && L->pos + 1 < n &&
               (p[L->pos + 1] == '%' || p[L->pos + 1] == '{' || p[L->pos + 1] == '#')))
        L->pos++;
      if (L->pos > s) {
        if (push(L, JT_TEXT, L->b.line[s], p + s, L->pos - s)) return -1;
        continue;
      }
    }
    int line = cur_line(L);
    if (p[L->pos] == '{' && L->pos + 1 < n && p[L->pos + 1] == '#') {
      L->pos += 2;
      int strip_before = L->pos < n && p[L->pos] == '-';
      if (strip_before) L->pos++;
      size_t s = L->pos;
      while (!(L->pos + 1 < n && p[L->pos] == '#' && p[L->pos + 1] == '}')) {
        if (L->pos + 2 >= n) return lex_fail(L->d, L->origin, line, "missing end of comment tag");
        L->pos++;
      }
      size_t e = L->pos;
      int strip_after = e > s && p[e - 1] == '-';
      if (strip_before) strip_trailing(L);
      if (push(L, JT_COMMENT, line, p + s, e - s - (strip_after ? 1 : 0))) return -1;
      L->pos += 2;
      if (strip_after) skip_space(L);
      continue;
    }
    if (L->pos + 2 < n && p[L->pos] == '{' && p[L->pos + 1] == '%' && p[L->pos + 2] == '-') {
      strip_trailing(L);
      if (push(L, JT_OPEN_STMT, line, "{%", 2)) return -1;
      L->pos += 3;
      continue;
    }
    if (L->pos + 2 < n && p[L->pos] == '{' && p[L->pos + 1] == '{' && p[L->pos + 2] == '-') {
      strip_trailing(L);
      if (push(L, JT_OPEN_EXPR, line, "{{", 2)) return -1;
      L->depth_curly = 0;
      L->pos += 3;
      continue;
    }
    /* consumeWhile(isWhitespace) throws at the end of input after consuming */
    if (space_at(p, n, L->pos)) {
      skip_space(L);
      if (L->pos >= n) return lex_fail(L->d, L->origin, line, "unexpected end of input");
    }
    line = cur_line(L);
    if (L->pos + 2 < n && p[L->pos] == '-' && p[L->pos + 1] == '%' && p[L->pos + 2] == '}') {
      if (push(L, JT_CLOSE_STMT, line, "%}", 2)) return -1;
      L->pos += 3;
      skip_space(L);
      continue;
    }
    if (L->pos + 2 < n && p[L->pos] == '-' && p[L->pos + 1] == '}' && p[L->pos + 2] == '}') {
      if (push(L, JT_CLOSE_EXPR, line, "}}", 2)) return -1;
      L->pos += 3;
      skip_space(L);
      continue;
    }
    char ch = p[L->pos];
    if (ch == '-' || ch == '+') {
      if (!L->n || last == JT_TEXT) return lex_fail(L->d, L->origin, line, "unexpected character");
      last = L->toks[L->n - 1].kind;
      if (!(last == JT_IDENT || last == JT_NUMBER || last == JT_STRING || last == JT_RPAREN ||
            last == JT_RBRACKET)) {
        size_t s = L->pos++;
        while (L->pos < n && is_digit(p[L->pos])) L->pos++;
        size_t digits = L->pos - s - 1;
        if (digits > 0 && L->pos + 1 < n && p[L->pos] == '.' && is_digit(p[L->pos + 1])) {
          L->pos++;
          while (L->pos < n && is_digit(p[L->pos])) L->pos++;
        }
        if (digits > 0 && L->pos >= n)
          return lex_fail(L->d, L->origin, line, "unexpected end of input");
        if (push(L, digits ? JT_NUMBER : JT_UNARY, line, p + s, L->pos - s)) return -1;
        continue;
      }
    }
    static const struct {
      const char *seq;
      jtok_kind kind;
    } table[] = {
        {"{%", JT_OPEN_STMT}, {"%}", JT_CLOSE_STMT}, {"{{", JT_OPEN_EXPR}, {"}}", JT_CLOSE_EXPR},
        {"(", JT_LPAREN},     {")", JT_RPAREN},      {"{", JT_LBRACE},     {"}", JT_RBRACE},
        {"[", JT_LBRACKET},   {"]", JT_RBRACKET},    {",", JT_COMMA},      {".", JT_DOT},
        {":", JT_COLON},      {"|", JT_PIPE},        {"<=", JT_COMPARE},   {">=", JT_COMPARE},
        {"==", JT_COMPARE},   {"!=", JT_COMPARE},    {"<", JT_COMPARE},    {">", JT_COMPARE},
        {"+", JT_ADD},        {"-", JT_ADD},         {"~", JT_ADD},        {"**", JT_POW},
        {"*", JT_MUL},        {"//", JT_MUL},        {"/", JT_MUL},        {"%", JT_MUL},
        {"=", JT_EQUALS},
    };
    int matched = 0;
    for (size_t k = 0; k < sizeof table / sizeof table[0]; k++) {
      size_t len = table[k].seq[1] ? 2 : 1;
      if (p[L->pos] != table[k].seq[0]) continue;
      if (table[k].kind == JT_CLOSE_EXPR && L->depth_curly > 0) continue;
      if (L->pos + len <= n && memcmp(p + L->pos, table[k].seq, len) == 0) {
        if (push(L, table[k].kind, line, p + L->pos, len)) return -1;
        if (table[k].kind == JT_OPEN_EXPR) L->depth_curly = 0;
        if (table[k].kind == JT_LBRACE) L->depth_curly++;
        if (table[k].kind == JT_RBRACE) L->depth_curly--;
        L->pos += len;
        matched = 1;
        break;
      }
    }
    if (matched) continue;
    if (ch == '\'' || ch == '"') {
      if (lex_string(L, ch)) return -1;
      continue;
    }
    if (is_digit(ch)) {
      size_t s = L->pos;
      while (L->pos < n && is_digit(p[L->pos])) L->pos++;
      if (!(L->n && L->toks[L->n - 1].kind == JT_DOT) && L->pos + 1 < n && p[L->pos] == '.' &&
          is_digit(p[L->pos + 1])) {
        L->pos++;
        while (L->pos < n && is_digit(p[L->pos])) L->pos++;
      }
      if (L->pos >= n) return lex_fail(L->d, L->origin, line, "unexpected end of input");
      if (push(L, JT_NUMBER, line, p + s, L->pos - s)) return -1;
      continue;
    }
    if (is_word(ch)) {
      size_t s = L->pos;
      while (L->pos < n && is_word(p[L->pos])) L->pos++;
      if (L->pos >= n) return lex_fail(L->d, L->origin, line, "unexpected end of input");
      if (push(L, JT_IDENT, line, p + s, L->pos - s)) return -1;
      continue;
    }
    return lex_fail(L->d, L->origin, line, "unexpected character in a tag");
  }
  return 0;
}

static int utf8_valid(const char *s, size_t n, size_t *bad) {
  size_t i = 0;
  while (i < n) {
    unsigned char c = (unsigned char)s[i];
    size_t k;
    uint32_t min;
    if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xE0) == 0xC0)
      k = 2, min = 0x80;
    else if ((c & 0xF0) == 0xE0)
      k = 3, min = 0x800;
    else if ((c & 0xF8) == 0xF0)
      k = 4, min = 0x10000;
    else
      break;
    if (i + k > n) break;
    uint32_t cp = c & (0x7F >> k);
    size_t j = 1;
    for (; j < k; j++) {
      unsigned char cc = (unsigned char)s[i + j];
      if ((cc & 0xC0) != 0x80) break;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (j < k || cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) break;
    i += k;
  }
  *bad = i;
  return i == n;
}

ph_status jinja_lex(const char *src, size_t len, const char *origin, arena *a, jtok **toks,
                    size_t *n_toks, diag *d) {
  size_t bad = 0;
  if (!utf8_valid(src, len, &bad)) {
    int line = 1;
    for (size_t i = 0; i < bad; i++) line += src[i] == '\n';
    return diag_set(d, PH_ERR_TEMPLATE, "%s:%d: the template is not valid UTF-8 (byte %zu)", origin,
                    line, bad);
  }
  lexer L;
  memset(&L, 0, sizeof L);
  L.a = a;
  L.origin = origin;
  L.d = d;
  L.b.p = arena_alloc(a, len + 1);
  L.b.line = arena_alloc(a, (len + 1) * sizeof(int));
  if (!L.b.p || !L.b.line)
    return diag_set(d, PH_ERR_NO_MEMORY, "%s: out of memory reading the template", origin);
  int line = 1;
  for (size_t i = 0; i < len; i++) {
    L.b.p[i] = src[i];
    L.b.line[i] = line;
    if (src[i] == '\n') line++;
  }
  L.b.n = len;
  if (L.b.n && L.b.p[L.b.n - 1] == '\n') L.b.n--;
  pp_lstrip(&L.b);
  pp_trim(&L.b);
  pp_generation(&L.b);
  if (lex_all(&L)) return d->status;
  *toks = L.toks;
  *n_toks = L.n;
  return PH_OK;
}
