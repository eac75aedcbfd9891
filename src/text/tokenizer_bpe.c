/* tokenizer_bpe — the vocabulary and merge tables (open addressing, built once, read-only after)
 * and the BPE merge loop: the symbols of a word in a linked list, the mergeable adjacent pairs in
 * a binary min-heap ordered by (merge rank, position) — the order Hugging Face's Word::merge_all
 * applies them — so a word of n bytes costs O(n log n), never a rescan per merge. */
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_impl.h"

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
  return h ^ (h >> 29);
}

int str_map_init(str_map *m, uint32_t cap_hint) {
  memset(m, 0, sizeof *m);
  uint32_t slots = 64;
  while (slots < cap_hint * 2u && slots < (1u << 30)) slots *= 2;
  m->slot = calloc(slots, sizeof *m->slot);
  m->cap = cap_hint ? cap_hint : 1;
  m->key_off = malloc(m->cap * sizeof *m->key_off);
  m->key_len = malloc(m->cap * sizeof *m->key_len);
  m->val = malloc(m->cap * sizeof *m->val);
  m->mask = slots - 1;
  return m->slot && m->key_off && m->key_len && m->val;
}

void str_map_free(str_map *m) {
  free(m->slot);
  free(m->key_off);
  free(m->key_len);
  free(m->val);
  memset(m, 0, sizeof *m);
}

static int str_map_grow(str_map *m) {
  uint32_t slots = (m->mask + 1) * 2;
  uint32_t *s = calloc(slots, sizeof *s);
  if (!s) return 0;
  for (uint32_t e = 0; e < m->n; e++) {
    uint64_t h = hash_bytes(m->blob + m->key_off[e], m->key_len[e]);
    uint32_t i = (uint32_t)h & (slots - 1);
    while (s[i]) i = (i + 1) & (slots - 1);
    s[i] = e + 1;
  }
  free(m->slot);
  m->slot = s;
  m->mask = slots - 1;
  return 1;
}

int32_t str_map_get(const str_map *m, const char *blob, const char *key, size_t len) {
  if (!m->slot) return -1;
  uint32_t i = (uint32_t)hash_bytes(key, len) & m->mask;
  for (uint32_t e; (e = m->slot[i]) != 0; i = (i + 1) & m->mask) {
    e--;
    if (m->key_len[e] == len && memcmp(blob + m->key_off[e], key, len) == 0) return m->val[e];
  }
  return -1;
}

int str_map_put(str_map *m, const char *blob, uint32_t off, uint32_t len, int32_t val) {
  m->blob = blob;
  if (str_map_get(m, blob, blob + off, len) >= 0) return 1;
  if ((uint64_t)(m->n + 1) * 2 > (uint64_t)m->mask + 1 && !str_map_grow(m)) return 0;
  if (m->n == m->cap) {
    uint32_t cap = m->cap * 2;
    uint32_t *ko = realloc(m->key_off, cap * sizeof *ko);
    if (!ko) return 0;
    m->key_off = ko;
    uint32_t *kl = realloc(m->key_len, cap * sizeof *kl);
    if (!kl) return 0;
    m->key_len = kl;
    int32_t *v = realloc(m->val, cap * sizeof *v);
    if (!v) return 0;
    m->val = v;
    m->cap = cap;
  }
  uint32_t e = m->n++;
  m->key_off[e] = off;
  m->key_len[e] = len;
  m->val[e] = val;
  uint32_t i = (uint32_t)hash_bytes(blob + off, len) & m->mask;
  while (m->slot[i]) i = (i + 1) & m->mask;
  m->slot[i] = e + 1;
  return 1;
}

static uint64_t hash_pair(uint64_t key) {
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdull;
  key ^= key >> 33;
  return key;
}

int merge_map_init(merge_map *m, uint64_t n) {
  uint64_t slots = 64; /* load at most 2/3: Qwen3's 151k merges fit 4 MiB */
  while (slots < n + n / 2) slots *= 2;
  m->slot = malloc(slots * sizeof *m->slot);
  if (!m->slot) return 0;
  for (uint64_t i = 0; i < slots; i++) m->slot[i].key = UINT64_MAX;
  m->mask = slots - 1;
  m->n = 0;
  return 1;
}

void merge_map_free(merge_map *m) {
  free(m->slot);
  memset(m, 0, sizeof *m);
}

int merge_map_put(merge_map *m, int32_t left, int32_t right, int32_t rank, int32_t id) {
  if ((m->n + 1) * 3 > (m->mask + 1) * 2) return 0; /* sized by merge_map_init: never grows */
  uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
  uint64_t i = hash_pair(key) & m->mask;
  while (m->slot[i].key != UINT64_MAX) {
    if (m->slot[i].key == key) return 1; /* a repeated merge keeps its first (lowest) rank */
    i = (i + 1) & m->mask;
  }
  m->slot[i].key = key;
  m->slot[i].rank = rank;
  m->slot[i].id = id;
  m->n++;
  return 1;
}

const merge_slot *merge_map_get(const merge_map *m, int32_t left, int32_t right) {
  if (!m->slot) return NULL;
  uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
  uint64_t i = hash_pair(key) & m->mask;
  while (m->slot[i].key != UINT64_MAX) {
    if (m->slot[i].key == key) return &m->slot[i];
    i = (i + 1) & m->mask;
  }
  return NULL;
}

/* A candidate merge of the symbol at pos with its right neighbour. */
typedef struct bpe_merge {
  int32_t rank, pos, id;
} bpe_merge;

static int merge_less(const bpe_merge *a, const bpe_merge *b) {
  return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(bpe_merge *h, size_t *n, bpe_merge m) {
  size_t i = (*n)++;
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!merge_less(&m, &h[parent])) break;
    h[i] = h[parent];
    i = parent;
  }
  h[i] = m;
}

static bpe_merge heap_pop(bpe_merge *h, size_t *n) {
  bpe_merge top = h[0], last = h[--(*n)];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && merge_less(&h[c + 1], &h[c])) c++;
    if (!merge_less(&h[c], &last)) break;
    h[i] = h[c];
    i = c;
  }
  if (*n) h[i] = last;
  return top;
}

void bpe_scratch_free(bpe_scratch *s) {
  free(s->sym_id);
  free(s->sym_prev);
  free(s->sym_next);
  free(s->sym_len);
  free(s->heap);
  memset(s, 0, sizeof *s);
}

static int bpe_scratch_reserve(bpe_scratch *s, size_t n) {
  if (n <= s->cap) return 1;
  size_t cap = s->cap ? s->cap : 64;
  while (cap < n) cap *= 2;
  int32_t *a = realloc(s->sym_id, cap * sizeof *a);
  if (!a) return 0;
  s->sym_id = a;
  a = realloc(s->sym_prev, cap * sizeof *a);
  if (!a) return 0;
  s->sym_prev = a;
  a = realloc(s->sym_next, cap * sizeof *a);
  if (!a) return 0;
  s->sym_next = a;
  a = realloc(s->sym_len, cap * sizeof *a);
  if (!a) return 0;
  s->sym_len = a;
  /* each merge adds at most two candidates: the heap never holds more than 3n */
  bpe_merge *h = realloc(s->heap, 3 * cap * sizeof *h);
  if (!h) return 0;
  s->heap = h;
  s->cap = cap;
  s->heap_cap = 3 * cap;
  return 1;
}

static void bpe_candidate(const ph_tokenizer *tok, bpe_scratch *sc, size_t *n_heap, int32_t pos) {
  int32_t next = sc->sym_next[pos];
  if (next < 0) return;
  const merge_slot *m = merge_map_get(&tok->merges, sc->sym_id[pos], sc->sym_id[next]);
  if (m && *n_heap < sc->heap_cap) heap_push(sc->heap, n_heap, (bpe_merge){m->rank, pos, m->id});
}

int bpe_encode_word(const ph_tokenizer *tok, const unsigned char *s, size_t n, bpe_scratch *sc,
                    tok_ids *out) {
  if (n == 0) return 1;
  if (tok->ignore_merges) {
    int32_t whole = str_map_get(&tok->vocab, tok->key_blob, (const char *)s, n);
    if (whole >= 0) return tok_ids_push(out, whole);
  }
  if (n == 1 && tok->byte_id[s[0]] >= 0) return tok_ids_push(out, tok->byte_id[s[0]]);
  if (!bpe_scratch_reserve(sc, n)) return 0;
  /* symbols: one per byte; a byte without a token becomes unk (consecutive ones fused when
   * fuse_unk), or is dropped when the model has no unk token — Hugging Face's BPE does both */
  int32_t n_sym = 0;
  int all_bytes = 1; /* every symbol is its byte's token */
  for (size_t i = 0; i < n; i++) {
    int32_t id = tok->byte_id[s[i]];
    if (id < 0) {
      all_bytes = 0;
      if (tok->unk_id < 0) continue;
      if (tok->fuse_unk && n_sym > 0 && sc->sym_id[n_sym - 1] == (int32_t)tok->unk_id) {
        sc->sym_len[n_sym - 1]++;
        continue;
      }
      id = (int32_t)tok->unk_id;
    }
    sc->sym_id[n_sym] = id;
    sc->sym_len[n_sym] = 1;
    sc->sym_prev[n_sym] = n_sym - 1;
    sc->sym_next[n_sym] = n_sym + 1;
    n_sym++;
  }
  if (n_sym == 0) return 1;
  sc->sym_next[n_sym - 1] = -1;
  size_t n_heap = 0;
  if (all_bytes && tok->byte_pair) { /* every symbol one byte: the direct table */
    for (int32_t i = 0; i + 1 < n_sym; i++) {
      const bpe_pair *bp = &tok->byte_pair[(size_t)s[i] << 8 | s[i + 1]];
      if (bp->id >= 0) heap_push(sc->heap, &n_heap, (bpe_merge){bp->rank, i, bp->id});
    }
  } else {
    for (int32_t i = 0; i + 1 < n_sym; i++) bpe_candidate(tok, sc, &n_heap, i);
  }
  while (n_heap > 0) {
    bpe_merge top = heap_pop(sc->heap, &n_heap);
    int32_t pos = top.pos;
    if (sc->sym_len[pos] == 0) continue; /* merged into its left neighbour since */
    int32_t next = sc->sym_next[pos];
    if (next < 0) continue;
    const merge_slot *m = merge_map_get(&tok->merges, sc->sym_id[pos], sc->sym_id[next]);
    if (!m || m->id != top.id) continue; /* the pair changed since this candidate was made */
    sc->sym_id[pos] = top.id;
    sc->sym_len[pos] += sc->sym_len[next];
    sc->sym_len[next] = 0;
    int32_t after = sc->sym_next[next];
    sc->sym_next[pos] = after;
    if (after >= 0) sc->sym_prev[after] = pos;
    if (sc->sym_prev[pos] >= 0) bpe_candidate(tok, sc, &n_heap, sc->sym_prev[pos]);
    bpe_candidate(tok, sc, &n_heap, pos);
  }
  for (int32_t i = 0; i >= 0; i = sc->sym_next[i])
    if (!tok_ids_push(out, sc->sym_id[i])) return 0;
  return 1;
}
