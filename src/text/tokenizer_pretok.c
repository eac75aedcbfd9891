/* tokenizer_pretok — from valid UTF-8 text to BPE pieces, in Hugging Face's order: added tokens
 * split out of the input (a byte trie, leftmost-longest, with their single_word / lstrip /
 * rstrip rules), the normalizer on the text between them, the added tokens marked normalized
 * split out of that, then the pre-tokenizer's Split steps (PCRE2, UTF + UCP, JIT) and ByteLevel,
 * each piece then encoded by the BPE model.
 *
 * Regex semantics: Hugging Face's Rust tokenizers use Oniguruma; PCRE2 agrees with it on the
 * constructs real tokenizers use (\p{..} classes, \s, lookahead, (?i:...)); docs/tokenizer.md
 * lists the few characters where the JavaScript reference differs from both. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "text/tokenizer_impl.h"

/* ---- added-token trie ---- */

static int32_t trie_new_node(added_trie *t, uint8_t byte) {
  if (t->n == t->cap) {
    int32_t cap = t->cap ? t->cap * 2 : 256;
    trie_node *p = realloc(t->node, (size_t)cap * sizeof *p);
    if (!p) return -1;
    t->node = p;
    t->cap = cap;
  }
  t->node[t->n] = (trie_node){-1, -1, -1, byte};
  return t->n++;
}

static int32_t trie_child(const added_trie *t, int32_t node, uint8_t byte) {
  if (node == 0) return t->root_child[byte];
  for (int32_t c = t->node[node].child; c >= 0; c = t->node[c].sibling)
    if (t->node[c].byte == byte) return c;
  return -1;
}

int added_trie_add(added_trie *t, const char *s, size_t n, int token) {
  if (t->n == 0) {
    for (int i = 0; i < 256; i++) t->root_child[i] = -1;
    if (trie_new_node(t, 0) < 0) return 0;
  }
  int32_t node = 0;
  for (size_t i = 0; i < n; i++) {
    uint8_t b = (uint8_t)s[i];
    int32_t c = trie_child(t, node, b);
    if (c < 0) {
      c = trie_new_node(t, b);
      if (c < 0) return 0;
      if (node == 0) {
        t->root_child[b] = c;
      } else {
        t->node[c].sibling = t->node[node].child;
        t->node[node].child = c;
      }
    }
    node = c;
  }
  if (node != 0 && t->node[node].token < 0) t->node[node].token = token;
  t->n_tokens++;
  return 1;
}

void added_trie_free(added_trie *t) {
  free(t->node);
  memset(t, 0, sizeof *t);
}

/* The longest token starting at s (its index, *len its bytes), or -1. */
static int trie_longest(const added_trie *t, const unsigned char *s, size_t n, size_t *len) {
  int best = -1;
  int32_t node = 0;
  for (size_t i = 0; i < n; i++) {
    node = trie_child(t, node, s[i]);
    if (node < 0) break;
    if (t->node[node].token >= 0) {
      best = t->node[node].token;
      *len = i + 1;
    }
  }
  return best;
}

int added_trie_exact(const added_trie *t, const char *s, size_t n) {
  if (t->n == 0 || n == 0) return -1;
  int32_t node = 0;
  for (size_t i = 0; i < n && node >= 0; i++) node = trie_child(t, node, (uint8_t)s[i]);
  return node > 0 ? t->node[node].token : -1;
}

/* Rust regex's \s (White_Space) and \w (alphabetic, marks, decimal digits, connector
 * punctuation, joiners): what Hugging Face's lstrip/rstrip and single_word test. */
static int cp_is_space(uint32_t c) {
  return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

static int cp_is_word(uint32_t c) {
  if (c == 0x200C || c == 0x200D) return 1;
  switch (utf8proc_category((utf8proc_int32_t)c)) {
  case UTF8PROC_CATEGORY_LU:
  case UTF8PROC_CATEGORY_LL:
  case UTF8PROC_CATEGORY_LT:
  case UTF8PROC_CATEGORY_LM:
  case UTF8PROC_CATEGORY_LO:
  case UTF8PROC_CATEGORY_MN:
  case UTF8PROC_CATEGORY_MC:
  case UTF8PROC_CATEGORY_ME:
  case UTF8PROC_CATEGORY_ND:
  case UTF8PROC_CATEGORY_NL:
  case UTF8PROC_CATEGORY_PC:
    return 1;
  default:
    return 0;
  }
}

/* The code point ending at s[end) (valid UTF-8, end > 0); *start gets where it begins. */
static uint32_t cp_before(const unsigned char *s, size_t end, size_t *start) {
  size_t i = end - 1;
  while (i > 0 && (s[i] & 0xC0) == 0x80 && end - i < 4) i--;
  size_t l;
  *start = i;
  return utf8_decode1(s + i, end - i, &l);
}

typedef struct seg {
  size_t off, len;
  int token; /* added-token index, -1: text */
} seg;
typedef struct segs {
  seg *p;
  size_t n, cap;
} segs;

static int segs_push(segs *v, size_t off, size_t len, int token) {
  if (v->n == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 16;
    seg *p = realloc(v->p, cap * sizeof *p);
    if (!p) return 0;
    v->p = p;
    v->cap = cap;
  }
  v->p[v->n++] = (seg){off, len, token};
  return 1;
}

/* Hugging Face's AddedVocabulary::find_matches: the leftmost-longest token at each place; a
 * single_word token only between non-word characters; lstrip/rstrip take the whitespace beside
 * it into the token. Segments cover s[0..n) (text segments may be empty: callers skip them). */
static int added_split(const ph_tokenizer *tok, const added_trie *t, const unsigned char *s,
                       size_t n, segs *out) {
  out->n = 0;
  size_t done = 0, i = 0;
  while (t->n > 0 && i < n) {
    if (t->root_child[s[i]] < 0) {
      i++;
      continue;
    }
    size_t len = 0;
    int k = trie_longest(t, s + i, n - i, &len);
    if (k < 0) {
      i++;
      continue;
    }
    const added_token *at = &tok->added[k];
    size_t start = i, stop = i + len;
    if (at->single_word) {
      size_t l, b;
      int word_before = start > 0 && cp_is_word(cp_before(s, start, &b));
      int word_after = stop < n && cp_is_word(utf8_decode1(s + stop, n - stop, &l));
      if (word_before || word_after) {
        i = stop; /* the match is skipped, as an Aho-Corasick iterator moves past it */
        continue;
      }
    }
    if (at->lstrip) {
      size_t b = start;
      while (b > done) {
        size_t c0;
        if (!cp_is_space(cp_before(s, b, &c0))) break;
        b = c0;
      }
      start = b;
    }
    if (at->rstrip) {
      while (stop < n) {
        size_t l;
        if (!cp_is_space(utf8_decode1(s + stop, n - stop, &l))) break;
        stop += l;
      }
    }
    if (start > done && !segs_push(out, done, start - done, -1)) return 0;
    if (!segs_push(out, start, stop - start, k)) return 0;
    done = i = stop;
  }
  if (done < n && !segs_push(out, done, n - done, -1)) return 0;
  return 1;
}

/* ---- regex ---- */

/* Oniguruma's classes where PCRE2's differ (Hugging Face's Rust tokenizers compile with
 * Oniguruma): \s is White_Space there, but PCRE2 10.42 also matches U+180E (a format character
 * since Unicode 6.3); \w is letters, marks, decimal digits and connector punctuation there, but
 * PCRE2 takes every number and no marks. Rewritten as explicit property classes, inside a
 * character class too (\S and \W inside one are left to PCRE2). */
#define ONIG_SPACE "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\p{Zl}\\p{Zp}\\p{Zs}"
#define ONIG_WORD  "\\p{L}\\p{M}\\p{Nd}\\p{Pc}"

static char *regex_onig_compat(const char *p, size_t n, size_t *out_len) {
  tok_buf o = {0};
  int in_class = 0, ok = 1;
  for (size_t i = 0; i < n && ok;) {
    if (p[i] == '\\' && i + 1 < n) {
      char c = p[i + 1];
      if (c == 'Q') { /* a literal run up to \E: copied as it is */
        const char *e = NULL;
        for (size_t k = i + 2; k + 1 < n && !e; k++)
          if (p[k] == '\\' && p[k + 1] == 'E') e = p + k + 2;
        size_t len = e ? (size_t)(e - (p + i)) : n - i;
        ok = tok_buf_append(&o, p + i, len);
        i += len;
        continue;
      }
      const char *rep = NULL;
      int neg = 0;
      if (c == 's' || c == 'S') rep = ONIG_SPACE, neg = c == 'S';
      if (c == 'w' || c == 'W') rep = ONIG_WORD, neg = c == 'W';
      if (rep && in_class && neg) rep = NULL;
      if (!rep)
        ok = tok_buf_append(&o, p + i, 2);
      else if (in_class)
        ok = tok_buf_append(&o, rep, strlen(rep));
      else
        ok = tok_buf_append(&o, neg ? "[^" : "[", neg ? 2 : 1) &&
             tok_buf_append(&o, rep, strlen(rep)) && tok_buf_append(&o, "]", 1);
      i += 2;
      continue;
    }
    if (p[i] == '[' && !in_class) {
      in_class = 1;
      size_t k = i + 1;
      if (k < n && p[k] == '^') k++;
      if (k < n && p[k] == ']') k++; /* a ']' first in a class is a literal */
      ok = tok_buf_append(&o, p + i, k - i);
      i = k;
      continue;
    }
    if (p[i] == '[' && in_class && i + 1 < n && p[i + 1] == ':') { /* [:alpha:] */
      const char *e = strstr(p + i, ":]");
      size_t len = e && (size_t)(e - p) < n ? (size_t)(e - (p + i)) + 2 : 1;
      ok = tok_buf_append(&o, p + i, len);
      i += len;
      continue;
    }
    if (p[i] == ']' && in_class) in_class = 0;
    ok = tok_buf_append(&o, p + i, 1);
    i++;
  }
  if (!ok || !tok_buf_reserve(&o, 0)) {
    free(o.p);
    return NULL;
  }
  *out_len = o.n;
  return o.p;
}

void *tok_regex_compile(const char *pattern, size_t len, char *msg, size_t msg_cap) {
  size_t n = 0;
  char *src = regex_onig_compat(pattern, len, &n);
  if (!src) {
    snprintf(msg, msg_cap, "out of memory");
    return NULL;
  }
  int code;
  PCRE2_SIZE where;
  pcre2_code *re = pcre2_compile((PCRE2_SPTR)src, n, PCRE2_UTF | PCRE2_UCP, &code, &where, NULL);
  free(src);
  if (!re) {
    char why[256];
    pcre2_get_error_message(code, (PCRE2_UCHAR *)why, sizeof why);
    snprintf(msg, msg_cap, "regex error: %s", why);
    return NULL;
  }
  (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* interpreted when JIT is unavailable */
  return re;
}

void tok_regex_free(void *re) { pcre2_code_free((pcre2_code *)re); }

typedef struct range {
  size_t off, len;
  int is_match;
} range;
typedef struct ranges {
  range *p;
  size_t n, cap;
} ranges;

static int ranges_push(ranges *v, size_t off, size_t len, int is_match) {
  if (v->n == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 64;
    range *p = realloc(v->p, cap * sizeof *p);
    if (!p) return 0;
    v->p = p;
    v->cap = cap;
  }
  v->p[v->n++] = (range){off, len, is_match};
  return 1;
}

/* Matches of re in s[off..off+len) as (range, is_match) covering it, as Hugging Face's
 * Pattern::find_matches; an empty match splits too. -1 out of memory, -2 regex failure. */
static int regex_find(pcre2_code *re, pcre2_match_data *md, const char *s, size_t off, size_t len,
                      ranges *out) {
  const PCRE2_SPTR subject = (PCRE2_SPTR)(s + off);
  size_t prev = 0, at = 0;
  while (at <= len) {
    int rc = pcre2_match(re, subject, len, at, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) return -2;
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    size_t b = ov[0], e = ov[1];
    if (b > prev && !ranges_push(out, off + prev, b - prev, 0)) return -1;
    if (!ranges_push(out, off + b, e - b, 1)) return -1;
    prev = e;
    if (e > b) {
      at = e;
    } else {
      if (e >= len) break;
      at = e + utf8_char_len((const unsigned char *)s + off + e, len - e);
    }
  }
  if (prev < len && !ranges_push(out, off + prev, len - prev, 0)) return -1;
  return 0;
}

/* Applies a Split behavior to one piece's matches (Hugging Face's NormalizedString::split). */
static int split_apply(split_behavior beh, int invert, const ranges *m, ranges *out) {
  size_t first = out->n;
  int prev_match = 0;
  for (size_t i = 0; i < m->n; i++) {
    range r = m->p[i];
    int is_match = invert ? !r.is_match : r.is_match;
    int has_last = out->n > first;
    range *last = has_last ? &out->p[out->n - 1] : NULL;
    switch (beh) {
    case SPLIT_REMOVED:
      if (!is_match && !ranges_push(out, r.off, r.len, 0)) return 0;
      break;
    case SPLIT_ISOLATED:
      if (!ranges_push(out, r.off, r.len, 0)) return 0;
      break;
    case SPLIT_MERGED_WITH_PREVIOUS:
      if (is_match && !prev_match && has_last)
        last->len = r.off + r.len - last->off;
      else if (!ranges_push(out, r.off, r.len, 0))
        return 0;
      break;
    case SPLIT_CONTIGUOUS:
      if (is_match == prev_match && has_last)
        last->len = r.off + r.len - last->off;
      else if (!ranges_push(out, r.off, r.len, 0))
        return 0;
      break;
    case SPLIT_MERGED_WITH_NEXT:
      break; /* below: walks the matches backwards */
    }
    prev_match = is_match;
  }
  if (beh == SPLIT_MERGED_WITH_NEXT) {
    prev_match = 0;
    for (size_t i = m->n; i-- > 0;) {
      range r = m->p[i];
      int is_match = invert ? !r.is_match : r.is_match;
      if (is_match && !prev_match && out->n > first) {
        range *last = &out->p[out->n - 1];
        last->len = last->off + last->len - r.off;
        last->off = r.off;
      } else if (!ranges_push(out, r.off, r.len, 0)) {
        return 0;
      }
      prev_match = is_match;
    }
    for (size_t a = first, b = out->n; a + 1 < b; a++, b--) { /* back into text order */
      range t = out->p[a];
      out->p[a] = out->p[b - 1];
      out->p[b - 1] = t;
    }
  }
  /* empty pieces are dropped */
  size_t w = first;
  for (size_t i = first; i < out->n; i++)
    if (out->p[i].len > 0) out->p[w++] = out->p[i];
  out->n = w;
  return 1;
}

/* ---- the pipeline ---- */

/* A cache of the pieces one encode call has already run through BPE (text repeats its words):
 * owned by the call, so encode stays reentrant with nothing shared between threads. */
#define WORD_CACHE_MAX_BYTES 48        /* longer pieces are rare and not cached */
#define WORD_CACHE_MAX_WORDS (1 << 16) /* then the table stops growing and stops caching */

typedef struct word_cache {
  uint32_t *slot; /* word index + 1; 0 empty */
  uint32_t mask;
  uint32_t n;
  uint32_t *key_off, *ids_off; /* [n + 1]: word i's bytes and ids are [off[i], off[i + 1]) */
  uint8_t *key_len;
  tok_buf keys;
  tok_ids ids;
  uint32_t cap;
} word_cache;

static void word_cache_free(word_cache *c) {
  free(c->slot);
  free(c->key_off);
  free(c->ids_off);
  free(c->key_len);
  free(c->keys.p);
  free(c->ids.p);
}

static uint32_t word_hash(const unsigned char *s, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 16777619u;
  return h ^ (h >> 15);
}

/* 1 when word s is cached: its ids are c->ids.p[*first .. *first + *n_ids) (a word may have
 * none: every byte dropped by a model without unk_token). */
static int word_cache_get(const word_cache *c, const unsigned char *s, size_t n, size_t *first,
                          size_t *n_ids) {
  if (!c->slot) return 0;
  for (uint32_t i = word_hash(s, n) & c->mask, e; (e = c->slot[i]) != 0; i = (i + 1) & c->mask) {
    e--;
    if (c->key_len[e] == n && memcmp(c->keys.p + c->key_off[e], s, n) == 0) {
      *first = c->ids_off[e];
      *n_ids = c->ids_off[e + 1] - c->ids_off[e];
      return 1;
    }
  }
  return 0;
}

/* Remembers that word s encodes to ids[0..n_ids). 0: out of memory (the cache is optional:
 * callers go on without it). */
static int word_cache_put(word_cache *c, const unsigned char *s, size_t n, const int64_t *ids,
                          size_t n_ids) {
  if (c->n >= WORD_CACHE_MAX_WORDS) return 1;
  if (!c->slot) {
    c->cap = 1024;
    c->mask = 2 * c->cap - 1;
    c->slot = calloc(2 * (size_t)c->cap, sizeof *c->slot);
    c->key_off = malloc(((size_t)c->cap + 1) * sizeof *c->key_off);
    c->ids_off = malloc(((size_t)c->cap + 1) * sizeof *c->ids_off);
    c->key_len = malloc(c->cap);
    if (!c->slot || !c->key_off || !c->ids_off || !c->key_len) return 0;
    c->key_off[0] = c->ids_off[0] = 0;
  }
  if (c->n == c->cap) { /* double the arrays and rehash */
    uint32_t cap = 2 * c->cap;
    uint32_t *ko = realloc(c->key_off, ((size_t)cap + 1) * sizeof *ko);
    if (!ko) return 0;
    c->key_off = ko;
    uint32_t *io = realloc(c->ids_off, ((size_t)cap + 1) * sizeof *io);
    if (!io) return 0;
    c->ids_off = io;
    uint8_t *kl = realloc(c->key_len, cap);
    if (!kl) return 0;
    c->key_len = kl;
    uint32_t *sl = calloc(2 * (size_t)cap, sizeof *sl);
    if (!sl) return 0;
    free(c->slot);
    c->slot = sl;
    c->cap = cap;
    c->mask = 2 * cap - 1;
    for (uint32_t e = 0; e < c->n; e++) {
      uint32_t i =
          word_hash((const unsigned char *)c->keys.p + c->key_off[e], c->key_len[e]) & c->mask;
      while (c->slot[i]) i = (i + 1) & c->mask;
      c->slot[i] = e + 1;
    }
  }
  if (!tok_buf_append(&c->keys, s, n)) return 0;
  for (size_t k = 0; k < n_ids; k++)
    if (!tok_ids_push(&c->ids, ids[k])) return 0;
  uint32_t e = c->n++;
  c->key_len[e] = (uint8_t)n;
  c->key_off[e + 1] = (uint32_t)c->keys.n;
  c->ids_off[e + 1] = (uint32_t)c->ids.n;
  uint32_t i = word_hash(s, n) & c->mask;
  while (c->slot[i]) i = (i + 1) & c->mask;
  c->slot[i] = e + 1;
  return 1;
}

typedef struct encode_scratch {
  segs raw, norm;
  ranges a, b, m;
  tok_buf nbuf, pbuf;
  bpe_scratch bpe;
  word_cache cache;
  pcre2_match_data *md[TOK_MAX_STEPS];
} encode_scratch;

/* BPE on one piece, through the call's word cache. 0: out of memory. */
static int encode_piece(const ph_tokenizer *tok, encode_scratch *e, const char *p, size_t n,
                        tok_ids *out) {
  const unsigned char *s = (const unsigned char *)p;
  if (n > WORD_CACHE_MAX_BYTES) return bpe_encode_word(tok, s, n, &e->bpe, out);
  size_t first = 0, n_ids = 0;
  if (word_cache_get(&e->cache, s, n, &first, &n_ids)) {
    for (size_t k = 0; k < n_ids; k++)
      if (!tok_ids_push(out, e->cache.ids.p[first + k])) return 0;
    return 1;
  }
  size_t before = out->n;
  if (!bpe_encode_word(tok, s, n, &e->bpe, out)) return 0;
  if (out->n > before) (void)word_cache_put(&e->cache, s, n, out->p + before, out->n - before);
  return 1;
}

static void encode_scratch_free(encode_scratch *e) {
  free(e->raw.p);
  free(e->norm.p);
  free(e->a.p);
  free(e->b.p);
  free(e->m.p);
  free(e->nbuf.p);
  free(e->pbuf.p);
  bpe_scratch_free(&e->bpe);
  word_cache_free(&e->cache);
  for (int i = 0; i < TOK_MAX_STEPS; i++) pcre2_match_data_free(e->md[i]);
}

/* Runs the normalizer steps on s[0..n) with utf8proc, appending to out. 0: failure. */
static int normalize_utf8proc(const ph_tokenizer *tok, const char *s, size_t n, tok_buf *out) {
  tok_buf cur = {0};
  if (!tok_buf_append(&cur, s, n)) return 0;
  for (int k = 0; k < tok->n_norm; k++) {
    utf8proc_option_t opt = UTF8PROC_STABLE;
    switch (tok->norm[k]) {
    case NORM_NFC:
      opt |= UTF8PROC_COMPOSE;
      break;
    case NORM_NFD:
      opt |= UTF8PROC_DECOMPOSE;
      break;
    case NORM_NFKC:
      opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NORM_NFKD:
      opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
    }
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r =
        utf8proc_map((const utf8proc_uint8_t *)cur.p, (utf8proc_ssize_t)cur.n, &dst, opt);
    if (r < 0) {
      free(cur.p);
      return 0;
    }
    cur.n = 0;
    int ok = tok_buf_append(&cur, dst, (size_t)r);
    free(dst);
    if (!ok) {
      free(cur.p);
      return 0;
    }
  }
  int ok = tok_buf_append(out, cur.p, cur.n);
  free(cur.p);
  return ok;
}

/* Code points NFC leaves as they are and never composes with what comes before: a run of them
 * passes through NFC unchanged, and NFC never reaches across one. Below U+0300 (no composition
 * has one as its second part), kana letters, CJK unified ideographs, Hangul syllables (they can
 * start a composition with a following jamo, which is not in this set, so that run is
 * normalized together with the syllable before it). test_tokenizer checks the fast path
 * against utf8proc on random mixtures. */
static int nfc_inert(uint32_t c) {
  return c < 0x300 || (c >= 0x3041 && c <= 0x3096) || (c >= 0x30A1 && c <= 0x30FA) ||
         (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7A3);
}

int tokenizer_normalize(const ph_tokenizer *tok, const char *s, size_t n, tok_buf *out) {
  out->n = 0;
  if (!tok_buf_reserve(out, n)) return 0;
  const unsigned char *u = (const unsigned char *)s;
  if (tok->n_norm == 0) return tok_buf_append(out, s, n);
  if (tok->n_norm > 1 || tok->norm[0] != NORM_NFC) {
    int ascii = 1;
    for (size_t i = 0; i < n && ascii; i++) ascii = u[i] < 0x80;
    /* every normalization form leaves ASCII as it is */
    return ascii ? tok_buf_append(out, s, n) : normalize_utf8proc(tok, s, n, out);
  }
  /* NFC: only the runs of code points that are not inert, each with the inert one before it
   * (the starter they may compose with), go through utf8proc */
  size_t i = 0, copied = 0, prev = 0;
  while (i < n) {
    size_t l;
    uint32_t c = u[i] < 0x80 ? (l = 1, u[i]) : utf8_decode1(u + i, n - i, &l);
    if (nfc_inert(c)) {
      prev = i;
      i += l;
      continue;
    }
    size_t start = i > copied ? prev : i, j = i + l;
    while (j < n) {
      size_t m;
      if (nfc_inert(utf8_decode1(u + j, n - j, &m))) break;
      j += m;
    }
    if (!tok_buf_append(out, s + copied, start - copied) ||
        !normalize_utf8proc(tok, s + start, j - start, out))
      return 0;
    copied = i = j;
  }
  return tok_buf_append(out, s + copied, n - copied);
}

/* The pre-tokenizer and BPE on one normalized text segment s[0..n). */
static ph_status pretokenize_encode(const ph_tokenizer *tok, const char *s, size_t n,
                                    encode_scratch *e, tok_ids *out, diag *d) {
  ranges *cur = &e->a, *next = &e->b;
  cur->n = 0;
  if (!ranges_push(cur, 0, n, 0)) return diag_set(d, PH_ERR_NO_MEMORY, "encode: pieces");
  for (int k = 0; k < tok->n_steps; k++) {
    const pretok_step *st = &tok->step[k];
    if (st->is_byte_level) break; /* the last step: below, per piece */
    next->n = 0;
    for (size_t i = 0; i < cur->n; i++) {
      e->m.n = 0;
      int rc = regex_find(st->re, e->md[k], s, cur->p[i].off, cur->p[i].len, &e->m);
      if (rc == -1 || (rc == 0 && !split_apply(st->behavior, st->invert, &e->m, next)))
        return diag_set(d, PH_ERR_NO_MEMORY, "encode: pieces");
      if (rc == -2) return diag_set(d, PH_ERR_INTERNAL, "encode: regex match failed");
    }
    ranges *t = cur;
    cur = next;
    next = t;
  }
  const pretok_step *bl = &tok->step[tok->n_steps - 1];
  for (size_t i = 0; i < cur->n; i++) {
    const char *p = s + cur->p[i].off;
    size_t len = cur->p[i].len;
    if (bl->add_prefix_space && p[0] != ' ') {
      e->pbuf.n = 0;
      if (!tok_buf_append(&e->pbuf, " ", 1) || !tok_buf_append(&e->pbuf, p, len))
        return diag_set(d, PH_ERR_NO_MEMORY, "encode: prefix space");
      p = e->pbuf.p;
      len = e->pbuf.n;
    }
    if (!bl->re) {
      if (!encode_piece(tok, e, p, len, out)) return diag_set(d, PH_ERR_NO_MEMORY, "encode: BPE");
      continue;
    }
    e->m.n = 0;
    next->n = 0;
    int rc = regex_find(bl->re, e->md[tok->n_steps - 1], p, 0, len, &e->m);
    if (rc == -1 || (rc == 0 && !split_apply(SPLIT_ISOLATED, 0, &e->m, next)))
      return diag_set(d, PH_ERR_NO_MEMORY, "encode: pieces");
    if (rc == -2) return diag_set(d, PH_ERR_INTERNAL, "encode: regex match failed");
    for (size_t j = 0; j < next->n; j++)
      if (!encode_piece(tok, e, p + next->p[j].off, next->p[j].len, out))
        return diag_set(d, PH_ERR_NO_MEMORY, "encode: BPE");
  }
  return PH_OK;
}

ph_status tokenizer_encode_text(const ph_tokenizer *tok, const char *text, size_t len, tok_ids *out,
                                diag *d) {
  encode_scratch e;
  memset(&e, 0, sizeof e);
  ph_status st = PH_OK;
  for (int k = 0; k < tok->n_steps; k++) {
    if (!tok->step[k].re) continue;
    e.md[k] = pcre2_match_data_create_from_pattern(tok->step[k].re, NULL);
    if (!e.md[k]) {
      st = diag_set(d, PH_ERR_NO_MEMORY, "encode: regex match data");
      goto done;
    }
  }
  const unsigned char *s = (const unsigned char *)text;
  if (!added_split(tok, &tok->trie_raw, s, len, &e.raw)) {
    st = diag_set(d, PH_ERR_NO_MEMORY, "encode: added tokens");
    goto done;
  }
  for (size_t i = 0; i < e.raw.n; i++) {
    const seg r = e.raw.p[i];
    if (r.token >= 0) {
      if (!tok_ids_push(out, tok->added[r.token].id)) {
        st = diag_set(d, PH_ERR_NO_MEMORY, "encode: ids");
        goto done;
      }
      continue;
    }
    if (r.len == 0) continue;
    const char *sec = text + r.off;
    size_t sec_len = r.len;
    if (tok->n_norm > 0) {
      if (!tokenizer_normalize(tok, sec, sec_len, &e.nbuf)) {
        st = diag_set(d, PH_ERR_NO_MEMORY, "encode: normalizer");
        goto done;
      }
      sec = e.nbuf.p;
      sec_len = e.nbuf.n;
    }
    if (!added_split(tok, &tok->trie_norm, (const unsigned char *)sec, sec_len, &e.norm)) {
      st = diag_set(d, PH_ERR_NO_MEMORY, "encode: added tokens");
      goto done;
    }
    for (size_t j = 0; j < e.norm.n; j++) {
      const seg q = e.norm.p[j];
      if (q.token >= 0) {
        if (!tok_ids_push(out, tok->added[q.token].id)) {
          st = diag_set(d, PH_ERR_NO_MEMORY, "encode: ids");
          goto done;
        }
      } else if (q.len > 0) {
        st = pretokenize_encode(tok, sec + q.off, q.len, &e, out, d);
        if (st != PH_OK) goto done;
      }
    }
  }
done:
  encode_scratch_free(&e);
  return st;
}
