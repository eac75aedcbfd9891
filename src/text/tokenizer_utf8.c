/* tokenizer_utf8 — UTF-8 repair (WHATWG decoder: each maximal subpart of an ill-formed sequence
 * becomes one U+FFFD, as Node's Buffer.toString('utf8') and Rust's from_utf8_lossy do) and
 * GPT-2's byte-level alphabet (every byte is shown as a printable code point: bytes 33..126,
 * 161..172 and 174..255 as themselves, the 68 others as 256, 257, ... in byte order). */
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_impl.h"

int tok_buf_reserve(tok_buf *b, size_t extra) {
  if (b->cap - b->n > extra) return 1;
  size_t cap = b->cap ? b->cap : 64;
  while (cap - b->n <= extra) {
    if (cap > SIZE_MAX / 2) return 0;
    cap *= 2;
  }
  char *p = realloc(b->p, cap);
  if (!p) return 0;
  b->p = p;
  b->cap = cap;
  return 1;
}

int tok_buf_append(tok_buf *b, const void *p, size_t n) {
  if (!tok_buf_reserve(b, n)) return 0;
  if (n) memcpy(b->p + b->n, p, n);
  b->n += n;
  b->p[b->n] = '\0';
  return 1;
}

int tok_ids_push(tok_ids *v, int64_t id) {
  if (v->n == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 64;
    int64_t *p = realloc(v->p, cap * sizeof *p);
    if (!p) return 0;
    v->p = p;
    v->cap = cap;
  }
  v->p[v->n++] = id;
  return 1;
}

/* The bounds of the first continuation byte after lead byte b (Unicode Table 3-7), and how many
 * continuation bytes follow; need 0: b cannot start a character. */
static int utf8_lead(unsigned char b, unsigned char *lo, unsigned char *hi) {
  *lo = 0x80;
  *hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) return 1;
  if (b == 0xE0) {
    *lo = 0xA0;
    return 2;
  }
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return 2;
  if (b == 0xED) {
    *hi = 0x9F;
    return 2;
  }
  if (b == 0xF0) {
    *lo = 0x90;
    return 3;
  }
  if (b >= 0xF1 && b <= 0xF3) return 3;
  if (b == 0xF4) {
    *hi = 0x8F;
    return 3;
  }
  return 0;
}

int utf8_repair(const char *str, size_t n, tok_buf *out) {
  const unsigned char *s = (const unsigned char *)str;
  if (!tok_buf_reserve(out, n)) return 0;
  size_t i = 0;
  while (i < n) {
    size_t run = i; /* copy the longest well-formed run at once */
    while (run < n) {
      if (s[run] < 0x80) {
        run++;
        continue;
      }
      unsigned char lo, hi;
      int need = utf8_lead(s[run], &lo, &hi);
      if (!need || run + (size_t)need >= n) break; /* cut short */
      size_t j = run + 1;
      int k = 0;
      for (; k < need; k++, j++) {
        if (s[j] < lo || s[j] > hi) break;
        lo = 0x80;
        hi = 0xBF;
      }
      if (k < need) break;
      run = j;
    }
    if (run > i && !tok_buf_append(out, s + i, run - i)) return 0;
    i = run;
    if (i >= n) break;
    /* an ill-formed sequence at i: the lead and its valid continuations are one U+FFFD */
    unsigned char lo, hi;
    int need = utf8_lead(s[i], &lo, &hi);
    size_t j = i + 1;
    for (int k = 0; k < need && j < n; k++, j++) {
      if (s[j] < lo || s[j] > hi) break;
      lo = 0x80;
      hi = 0xBF;
    }
    if (!tok_buf_append(out, "\xEF\xBF\xBD", 3)) return 0;
    i = j;
  }
  if (!tok_buf_reserve(out, 0)) return 0;
  out->p[out->n] = '\0';
  return 1;
}

size_t utf8_char_len(const unsigned char *s, size_t n) {
  size_t len = 1;
  if (s[0] >= 0xF0)
    len = 4;
  else if (s[0] >= 0xE0)
    len = 3;
  else if (s[0] >= 0xC0)
    len = 2;
  return len <= n ? len : 1;
}

uint32_t utf8_decode1(const unsigned char *s, size_t n, size_t *len) {
  size_t l = utf8_char_len(s, n);
  *len = l;
  switch (l) {
  case 2:
    return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
  case 3:
    return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
  case 4:
    return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
           ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
  default:
    return s[0];
  }
}

size_t utf8_encode1(uint32_t cp, char *out) {
  unsigned char *o = (unsigned char *)out;
  if (cp < 0x80) {
    o[0] = (unsigned char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (unsigned char)(0xC0 | (cp >> 6));
    o[1] = (unsigned char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (unsigned char)(0xE0 | (cp >> 12));
    o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (unsigned char)(0xF0 | (cp >> 18));
  o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
  o[3] = (unsigned char)(0x80 | (cp & 0x3F));
  return 4;
}

size_t utf8_incomplete_tail(const unsigned char *s, size_t n) {
  /* look back at most 3 bytes for a lead byte whose character is cut short */
  for (size_t back = 1; back <= 3 && back <= n; back++) {
    unsigned char b = s[n - back];
    if (b >= 0x80 && b < 0xC0) continue; /* a continuation byte: keep looking */
    unsigned char lo, hi;
    int need = utf8_lead(b, &lo, &hi);
    if (!need || (size_t)need < back) return 0;
    /* the bytes after the lead must all be valid continuations so far */
    for (size_t k = 1; k < back; k++) {
      unsigned char c = s[n - back + k];
      if (c < lo || c > hi) return 0;
      lo = 0x80;
      hi = 0xBF;
    }
    return (size_t)need > back - 1 ? back : 0;
  }
  return 0;
}

const uint16_t byte_level_cp[256] = {
    256, 257, 258, 259, 260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 270, 271, /* 0x00 */
    272, 273, 274, 275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285, 286, 287, /* 0x10 */
    288, 33,  34,  35,  36,  37,  38,  39,  40,  41,  42,  43,  44,  45,  46,  47,  /* 0x20 */
    48,  49,  50,  51,  52,  53,  54,  55,  56,  57,  58,  59,  60,  61,  62,  63,  /* 0x30 */
    64,  65,  66,  67,  68,  69,  70,  71,  72,  73,  74,  75,  76,  77,  78,  79,  /* 0x40 */
    80,  81,  82,  83,  84,  85,  86,  87,  88,  89,  90,  91,  92,  93,  94,  95,  /* 0x50 */
    96,  97,  98,  99,  100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, /* 0x60 */
    112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 289, /* 0x70 */
    290, 291, 292, 293, 294, 295, 296, 297, 298, 299, 300, 301, 302, 303, 304, 305, /* 0x80 */
    306, 307, 308, 309, 310, 311, 312, 313, 314, 315, 316, 317, 318, 319, 320, 321, /* 0x90 */
    322, 161, 162, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172, 323, 174, 175, /* 0xA0 */
    176, 177, 178, 179, 180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191, /* 0xB0 */
    192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207, /* 0xC0 */
    208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 223, /* 0xD0 */
    224, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238, 239, /* 0xE0 */
    240, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254, 255, /* 0xF0 */
};

int byte_level_byte(uint32_t cp) {
  if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
    return (int)cp;
  if (cp < 256 || cp > 323) return -1;
  /* the 68 remapped bytes in order: 0..32, 127..160, 173 */
  uint32_t k = cp - 256;
  if (k <= 32) return (int)k;
  if (k <= 32 + 34) return (int)(127 + (k - 33));
  return 173;
}

int byte_level_to_bytes(const char *str, size_t n, tok_buf *out) {
  const unsigned char *s = (const unsigned char *)str;
  if (!tok_buf_reserve(out, n)) return -1;
  size_t i = 0;
  while (i < n) {
    size_t l;
    uint32_t cp = utf8_decode1(s + i, n - i, &l);
    int b = byte_level_byte(cp);
    if (b < 0) return 0;
    out->p[out->n++] = (char)b;
    i += l;
  }
  out->p[out->n] = '\0';
  return 1;
}
