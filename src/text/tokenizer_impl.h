/* tokenizer_impl — the parts of a ph_tokenizer, shared by the files of src/text that build and
 * run it (tokenizer.c: loading and the public API; tokenizer_bpe.c: the vocabulary, merge
 * tables and the BPE merge loop; tokenizer_pretok.c: normalizer, added-token trie and
 * pre-tokenizer; tokenizer_utf8.c: UTF-8 repair and the byte-level alphabet). Not for chat.c,
 * which reads tokenizer.h.
 *
 * Text flows: bytes -> utf8_repair (WHATWG U+FFFD) -> added tokens split out (raw trie) ->
 * normalizer -> added tokens marked normalized split out -> pre-tokenizer pieces -> BPE over the
 * piece's bytes (the byte-level alphabet is a bijection, so the merge loop works on raw bytes and
 * the vocabulary is keyed by the bytes its byte-level strings stand for) -> ids.
 *
 * Every table is built once by tokenizer_load and only read afterwards: encode/decode keep their
 * scratch on the caller's side (tok_buf), so they are reentrant. */
#ifndef PH_TEXT_TOKENIZER_IMPL_H
#define PH_TEXT_TOKENIZER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/diag.h"
#include "text/tokenizer.h"

/* ---- growable byte and id buffers (caller-owned scratch) ---- */
typedef struct tok_buf {
  char *p;
  size_t n, cap;
} tok_buf;
typedef struct tok_ids {
  int64_t *p;
  size_t n, cap;
} tok_ids;

int tok_buf_reserve(tok_buf *b, size_t extra); /* 0: out of memory */
int tok_buf_append(tok_buf *b, const void *p, size_t n);
int tok_ids_push(tok_ids *v, int64_t id);

/* ---- UTF-8 (tokenizer_utf8.c) ---- */
/* Appends s[0..n) to out with every maximal subpart of an ill-formed sequence replaced by U+FFFD
 * (the WHATWG / Unicode "substitution of maximal subparts" rule). 0: out of memory. */
int utf8_repair(const char *s, size_t n, tok_buf *out);
/* Length of the UTF-8 character starting at s (1..4) in valid UTF-8; 1 for a stray byte. */
size_t utf8_char_len(const unsigned char *s, size_t n);
/* Decodes one character of valid UTF-8 at s (n >= 1 bytes); *len gets its length. */
uint32_t utf8_decode1(const unsigned char *s, size_t n, size_t *len);
size_t utf8_encode1(uint32_t cp, char *out); /* out: 4 bytes */
/* How many bytes at the end of s[0..n) are the start of a UTF-8 character that more bytes could
 * still complete (0..3). */
size_t utf8_incomplete_tail(const unsigned char *s, size_t n);

/* GPT-2's byte-level alphabet: byte b <-> code point byte_level_cp[b]. */
extern const uint16_t byte_level_cp[256];
/* The byte a code point stands for, or -1 when it is not in the alphabet. */
int byte_level_byte(uint32_t cp);
/* Appends the bytes a byte-level string (valid UTF-8) stands for to out. Returns 1 when every
 * character is in the alphabet, 0 when one is not (out then holds a partial result), -1 when out
 * of memory. */
int byte_level_to_bytes(const char *s, size_t n, tok_buf *out);

/* ---- string -> id table (tokenizer_bpe.c) ---- */
typedef struct str_map {
  const char *blob; /* keys live in the owner's blob; entries hold offsets */
  uint32_t *slot;   /* entry index + 1; 0 = empty */
  uint32_t mask;    /* slots - 1 (power of two) */
  uint32_t *key_off, *key_len;
  int32_t *val;
  uint32_t n, cap;
} str_map;

/* ---- merges: (left id, right id) -> (rank, merged id) ---- */
typedef struct merge_slot {
  uint64_t key; /* left << 32 | right; UINT64_MAX = empty */
  int32_t rank;
  int32_t id;
} merge_slot;
typedef struct merge_map {
  merge_slot *slot;
  uint64_t mask;
  uint64_t n;
} merge_map;

/* A merge of two one-byte tokens, looked up directly by the two bytes (id -1: none). */
typedef struct bpe_pair {
  int32_t rank, id;
} bpe_pair;

/* ---- added tokens: a byte trie, leftmost-longest ---- */
typedef struct trie_node {
  int32_t child;   /* first child node, -1 none */
  int32_t sibling; /* next sibling, -1 none */
  int32_t token;   /* added-token index ending here, -1 none */
  uint8_t byte;
} trie_node;
typedef struct added_trie {
  trie_node *node; /* node[0]: the root; its children by byte in root_child */
  int32_t n, cap;
  int32_t root_child[256];
  int n_tokens;
} added_trie;

typedef struct added_token {
  char *content;
  size_t len;
  int64_t id;
  uint8_t special, single_word, lstrip, rstrip, normalized;
} added_token;

/* ---- normalizer and pre-tokenizer steps ---- */
typedef enum norm_kind { NORM_NFC = 1, NORM_NFD, NORM_NFKC, NORM_NFKD } norm_kind;

typedef enum split_behavior {
  SPLIT_REMOVED = 0,
  SPLIT_ISOLATED,
  SPLIT_MERGED_WITH_PREVIOUS,
  SPLIT_MERGED_WITH_NEXT,
  SPLIT_CONTIGUOUS,
} split_behavior;

typedef struct pretok_step {
  int is_byte_level;       /* 1: ByteLevel; 0: Split */
  void *re;                /* pcre2_code_8 *: Split's pattern, or ByteLevel's GPT-2 regex */
  split_behavior behavior; /* Split */
  int invert;              /* Split */
  int add_prefix_space;    /* ByteLevel */
} pretok_step;

#define TOK_MAX_STEPS 16

/* One id's decoded text: decode concatenates these, then repairs UTF-8. */
typedef struct tok_entry {
  uint32_t off, len; /* into ph_tokenizer.dec_blob */
  uint8_t valid;     /* 1: the id exists */
  uint8_t special;   /* an added token marked special */
} tok_entry;

struct ph_tokenizer {
  diag err; /* why the open failed (ph_tokenizer_error) */

  /* model (BPE) */
  str_map vocab;       /* raw bytes -> id (entries whose byte-level string maps to bytes) */
  str_map vocab_other; /* the exact string -> id, entries outside the byte-level alphabet */
  char *key_blob;      /* the keys of vocab and vocab_other */
  merge_map merges;
  bpe_pair *byte_pair;  /* [256 * 256]: merges of two one-byte tokens, by (left, right) byte */
  int32_t byte_id[256]; /* the id of each one-byte token, -1 none */
  int ignore_merges;
  int64_t unk_id; /* -1: none (unknown bytes are dropped, as Hugging Face does) */
  int fuse_unk;

  /* decode */
  int64_t n_ids;    /* vocab_size: 1 + the largest id */
  tok_entry *entry; /* [n_ids] */
  char *dec_blob;

  /* added tokens */
  added_token *added; /* [n_added] */
  int n_added;
  added_trie trie_raw;  /* tokens with normalized == false, matched on the input */
  added_trie trie_norm; /* tokens with normalized == true, matched after the normalizer */

  /* pipeline */
  norm_kind norm[TOK_MAX_STEPS];
  int n_norm;
  pretok_step step[TOK_MAX_STEPS];
  int n_steps;
  int64_t post_prefix[4], post_suffix[4]; /* TemplateProcessing "single" special ids */
  int n_post_prefix, n_post_suffix;
  int has_template_post; /* post_processor is TemplateProcessing */

  /* tokenizer_config.json, chat template, generation_config.json */
  json_t *config;
  char *chat_template;
  const char *chat_template_origin;
  char *special_str[TOKENIZER_N_SPECIAL];
  int64_t bos_id;
  int add_bos, add_eos;
  int64_t eos_id; /* tokenizer_config eos_token's id, -1 none */
  int32_t n_eos_ids;
  int64_t eos_ids[PH_MAX_STOP_TOKENS];
};

/* ---- tokenizer_bpe.c ---- */
int str_map_init(str_map *m, uint32_t cap_hint);
void str_map_free(str_map *m);
/* Adds key blob[off..off+len) -> val. 0: out of memory. An existing key keeps its first value. */
int str_map_put(str_map *m, const char *blob, uint32_t off, uint32_t len, int32_t val);
int32_t str_map_get(const str_map *m, const char *blob, const char *key, size_t len); /* -1 */
int merge_map_init(merge_map *m, uint64_t n);
void merge_map_free(merge_map *m);
int merge_map_put(merge_map *m, int32_t left, int32_t right, int32_t rank, int32_t id);
const merge_slot *merge_map_get(const merge_map *m, int32_t left, int32_t right);

/* Scratch for one BPE word; reused across words of one encode call. */
typedef struct bpe_scratch {
  int32_t *sym_id, *sym_prev, *sym_next, *sym_len;
  struct bpe_merge *heap;
  size_t cap, heap_cap;
} bpe_scratch;
void bpe_scratch_free(bpe_scratch *s);
/* Appends the ids of one pre-tokenized piece (raw bytes) to out. 0: out of memory. */
int bpe_encode_word(const ph_tokenizer *tok, const unsigned char *s, size_t n, bpe_scratch *sc,
                    tok_ids *out);

/* ---- tokenizer_pretok.c ---- */
int added_trie_add(added_trie *t, const char *s, size_t n, int token); /* 0: out of memory */
void added_trie_free(added_trie *t);
int added_trie_exact(const added_trie *t, const char *s, size_t n); /* token index or -1 */
/* Encodes valid UTF-8 text (the added-token split, normalizer, pre-tokenizer and BPE) into out.
 * PH_ERR_NO_MEMORY or PH_ERR_INTERNAL (a regex failure) on error. */
ph_status tokenizer_encode_text(const ph_tokenizer *tok, const char *text, size_t len, tok_ids *out,
                                diag *d);
/* Replaces out's contents with the normalizer's output for s[0..n) (valid UTF-8 in and out; a
 * copy when there is no normalizer). 0: out of memory or a utf8proc failure. */
int tokenizer_normalize(const ph_tokenizer *tok, const char *s, size_t n, tok_buf *out);
/* Compiles a regex for a Split step (UTF, UCP, JIT when available). NULL: *msg says why. */
void *tok_regex_compile(const char *pattern, size_t len, char *msg, size_t msg_cap);
void tok_regex_free(void *re);

/* ---- tokenizer_json.c: model.vocab and model.merges as flat lists ---- */
typedef struct vocab_item {
  uint32_t off, len; /* the token's string in model_lists.strs */
  int64_t id;        /* -1 when the JSON value is not an integer */
} vocab_item;
typedef struct merge_item {
  uint32_t a_off, a_len, b_off, b_len;
} merge_item;
typedef struct model_lists {
  tok_buf strs; /* the strings, each followed by a NUL */
  vocab_item *vocab;
  size_t n_vocab, cap_vocab;
  merge_item *merge;
  size_t n_merge, cap_merge;
} model_lists;
void model_lists_free(model_lists *l);
int model_lists_push_vocab(model_lists *l, uint32_t off, uint32_t len, int64_t id);
int model_lists_push_merge(model_lists *l, uint32_t a_off, uint32_t a_len, uint32_t b_off,
                           uint32_t b_len);
/* Reads model.vocab and model.merges of a tokenizer.json text into *lists and gives the rest of
 * the document (those two emptied) in *rest (malloc'ed). 0 when the fast path is not taken
 * (nothing is held then): parse the whole text with jansson instead. */
int tokenizer_json_fast(const char *json, size_t len, model_lists *lists, char **rest,
                        size_t *rest_len);

/* ---- tokenizer.c ---- */
/* Opens a tokenizer from the bytes of a tokenizer.json (and optionally a tokenizer_config.json's,
 * NULL when absent): what ph_tokenizer_open does after reading the files; the fuzz target's
 * entry. Same failure contract as ph_tokenizer_open. */
ph_status tokenizer_open_json(const char *json, size_t len, const char *config_json,
                              size_t config_len, ph_tokenizer **out);

#endif /* PH_TEXT_TOKENIZER_IMPL_H */
