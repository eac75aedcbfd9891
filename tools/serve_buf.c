/* serve_buf — see serve_buf.h. */
#include "serve_buf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int grow(sbuf *b, size_t extra) {
  if (b->failed) return -1;
  if (b->len + extra + 1 <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra + 1) {
    if (cap > SIZE_MAX / 2) {
      b->failed = 1;
      return -1;
    }
    cap *= 2;
  }
  char *p = realloc(b->data, cap);
  if (!p) {
    b->failed = 1;
    return -1;
  }
  b->data = p;
  b->cap = cap;
  return 0;
}

int sbuf_append(sbuf *b, const char *s, size_t n) {
  if (grow(b, n)) return -1;
  if (n) memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = '\0';
  return 0;
}

int sbuf_puts(sbuf *b, const char *s) { return sbuf_append(b, s, strlen(s)); }

int sbuf_printf(sbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || grow(b, (size_t)n)) {
    b->failed = 1;
    return -1;
  }
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
  return 0;
}

void sbuf_reset(sbuf *b) {
  b->len = 0;
  if (b->data) b->data[0] = '\0';
}

void sbuf_free(sbuf *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
  b->failed = 0;
}

/* Length of the valid UTF-8 character at s[0, n), or 0 when none starts there. */
static size_t utf8_char(const unsigned char *s, size_t n) {
  const unsigned c = s[0];
  if (c < 0x80) return 1;
  size_t len;
  uint32_t cp, min;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
    cp = c & 0x1F;
    min = 0x80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    cp = c & 0x0F;
    min = 0x800;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    cp = c & 0x07;
    min = 0x10000;
  } else {
    return 0;
  }
  if (n < len) return 0;
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

int serve_utf8_valid(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    const size_t k = utf8_char(u + i, n - i);
    if (!k) return 0;
    i += k;
  }
  return 1;
}

int serve_utf8_clean(const char *s, size_t n, sbuf *out) {
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0, run = 0; /* valid bytes [run, i) not yet copied */
  while (i < n) {
    const size_t k = utf8_char(u + i, n - i);
    if (k) {
      i += k;
      continue;
    }
    if (sbuf_append(out, s + run, i - run) || sbuf_append(out, "\xEF\xBF\xBD", 3)) return -1;
    run = ++i;
  }
  return sbuf_append(out, s + run, n - run);
}
