/* test_tokenizer — every tokenizer feature on small tokenizer.json files written here (the real
 * tokenizers are test_tokenizer_ref's): the BPE merge loop against a quadratic reference, both
 * merge forms, ignore_merges, unk, each Split behavior and invert, ByteLevel's prefix space and
 * regex, NFC, added tokens (leftmost-longest, lstrip, rstrip, single_word, normalized, special),
 * WHATWG UTF-8 repair, decode, the BOS rule and TemplateProcessing, tokenizer_config's forms,
 * generation_config, the text stream, make-tiny's files, and bad files getting typed errors that
 * name the JSON path. */
#include <jansson.h>
#include <pthread.h>
#include <utf8proc.h>

#include "base/fmap.h"
#include "check.h"
#include "text/tiny_tokenizer.h"
#include "text/tokenizer_impl.h"

/* ---- building small tokenizers ---- */

/* A tokenizer.json with the 256 byte tokens (ids 0..255, minus `drop` when >= 0), the extra
 * vocabulary tokens given (ids from 256), and the other parts as JSON text (NULL: the default). */
static char *make_json(const char *const *extra, int n_extra, const char *merges, const char *added,
                       const char *normalizer, const char *pretok, const char *post,
                       const char *model_extra, int drop) {
  json_t *vocab = json_object();
  for (int b = 0; b < 256; b++) {
    if (b == drop) continue;
    char s[5];
    s[utf8_encode1(byte_level_cp[b], s)] = '\0';
    json_object_set_new(vocab, s, json_integer(b));
  }
  for (int i = 0; i < n_extra; i++) json_object_set_new(vocab, extra[i], json_integer(256 + i));
  json_t *model = json_pack("{ss so so}", "type", "BPE", "vocab", vocab, "merges",
                            json_loads(merges ? merges : "[]", 0, NULL));
  if (model_extra) {
    json_t *more = json_loads(model_extra, 0, NULL);
    json_object_update(model, more);
    json_decref(more);
  }
  json_t *root = json_pack(
      "{so so so so s{ss} so}", "added_tokens", json_loads(added ? added : "[]", 0, NULL),
      "normalizer", json_loads(normalizer ? normalizer : "null", JSON_DECODE_ANY, NULL),
      "pre_tokenizer",
      json_loads(pretok ? pretok
                        : "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": "
                          "false}",
                 0, NULL),
      "post_processor", json_loads(post ? post : "null", JSON_DECODE_ANY, NULL), "decoder", "type",
      "ByteLevel", "model", model);
  char *s = json_dumps(root, 0);
  json_decref(root);
  return s;
}

static ph_tokenizer *open_json(const char *json, const char *config) {
  ph_tokenizer *tok = NULL;
  ph_status st = tokenizer_open_json(json, strlen(json), config, config ? strlen(config) : 0, &tok);
  CHECK_STATUS(st, PH_OK, ph_tokenizer_error(tok));
  if (st != PH_OK) {
    ph_tokenizer_free(tok);
    return NULL;
  }
  return tok;
}

static ph_tokenizer *make(const char *const *extra, int n_extra, const char *merges,
                          const char *added, const char *normalizer, const char *pretok) {
  char *json = make_json(extra, n_extra, merges, added, normalizer, pretok, NULL, NULL, -1);
  ph_tokenizer *tok = open_json(json, NULL);
  free(json);
  return tok;
}

/* Encodes text (add_special 0) and compares with the expected ids (terminated by -1). */
static int encodes_to(const ph_tokenizer *tok, const char *text, size_t len, const int64_t *want) {
  int64_t *ids = NULL, n = 0, n_want = 0;
  while (want[n_want] >= 0) n_want++;
  if (ph_tokenizer_encode(tok, text, len, 0, &ids, &n) != PH_OK) return 0;
  int ok = n == n_want && memcmp(ids, want, (size_t)n * sizeof *ids) == 0;
  if (!ok) {
    fprintf(stderr, "       \"%.*s\" encodes to", (int)len, text);
    for (int64_t i = 0; i < n; i++) fprintf(stderr, " %lld", (long long)ids[i]);
    fprintf(stderr, "; expected");
    for (int64_t i = 0; i < n_want; i++) fprintf(stderr, " %lld", (long long)want[i]);
    fprintf(stderr, "\n");
  }
  ph_free(ids);
  return ok;
}
#define ENC(tok, text, ...) encodes_to(tok, text, strlen(text), (const int64_t[]){__VA_ARGS__, -1})

static char *decoded(const ph_tokenizer *tok, const int64_t *ids, int64_t n, int skip) {
  char *t = NULL;
  size_t len = 0;
  if (ph_tokenizer_decode(tok, ids, n, skip, &t, &len) != PH_OK) return NULL;
  return t;
}

/* ---- BPE ---- */

static void test_merge_order(void) {
  /* "b c" outranks "a b": abc -> a + bc -> abc through "a bc" */
  const char *extra[] = {"ab", "bc", "abc"};
  ph_tokenizer *t1 = make(extra, 3, "[\"b c\", \"a b\", \"a bc\"]", NULL, NULL, NULL);
  ph_tokenizer *t2 =
      make(extra, 3, "[[\"b\", \"c\"], [\"a\", \"b\"], [\"a\", \"bc\"]]", NULL, NULL, NULL);
  ph_tokenizer *t3 = make(extra, 3, "[\"a b\", \"b c\"]", NULL, NULL, NULL);
  if (t1 && t2 && t3) {
    CHECK(ENC(t1, "abc", 258));
    CHECK(ENC(t2, "abc", 258)); /* the pair form reads the same */
    CHECK(ENC(t3, "abc", 256, 'c'));
    CHECK(ENC(t3, "aaa", 'a', 'a', 'a'));
    CHECK(ENC(t1, "abcabc", 258, 258));
  }
  ph_tokenizer_free(t1);
  ph_tokenizer_free(t2);
  ph_tokenizer_free(t3);
  /* equal ranks are impossible; equal pairs merge leftmost first: aaa -> aa a */
  const char *ex2[] = {"aa", "aaaa"};
  ph_tokenizer *t = make(ex2, 2, "[\"a a\", \"aa aa\"]", NULL, NULL, NULL);
  if (t) {
    CHECK(ENC(t, "aaa", 256, 'a'));
    CHECK(ENC(t, "aaaaa", 257, 'a'));
  }
  ph_tokenizer_free(t);
}

/* The merge loop against the textbook one: repeatedly merge the lowest-ranked adjacent pair
 * (leftmost on ties), rescanning the whole word each time. */
static void reference_bpe(const ph_tokenizer *tok, const unsigned char *s, size_t n, tok_ids *out) {
  int32_t sym[64];
  size_t k = 0;
  for (size_t i = 0; i < n; i++) sym[k++] = tok->byte_id[s[i]];
  for (;;) {
    int best = -1;
    int32_t best_rank = INT32_MAX, best_id = -1;
    for (size_t i = 0; i + 1 < k; i++) {
      const merge_slot *m = merge_map_get(&tok->merges, sym[i], sym[i + 1]);
      if (m && m->rank < best_rank) {
        best_rank = m->rank;
        best = (int)i;
        best_id = m->id;
      }
    }
    if (best < 0) break;
    sym[best] = best_id;
    memmove(sym + best + 1, sym + best + 2, (k - (size_t)best - 2) * sizeof *sym);
    k--;
  }
  for (size_t i = 0; i < k; i++) tok_ids_push(out, sym[i]);
}

static void test_bpe_vs_reference(void) {
  /* a random merge table over the alphabet abcd: every merge of two existing tokens */
  enum { N_MERGES = 120 };
  char tokens[256 + N_MERGES][48];
  int n_tok = 0;
  const char *letters = "abcd";
  for (int i = 0; i < 4; i++) snprintf(tokens[n_tok++], sizeof tokens[0], "%c", letters[i]);
  json_t *merges = json_array();
  const char *extra[N_MERGES];
  int n_extra = 0;
  uint64_t s = 12345;
  while (n_extra < N_MERGES) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    int a = (int)((s >> 33) % (uint64_t)n_tok), b = (int)((s >> 45) % (uint64_t)n_tok);
    char joined[96];
    snprintf(joined, sizeof joined, "%s%s", tokens[a], tokens[b]);
    if (strlen(joined) > 12) continue;
    int dup = 0;
    for (int i = 0; i < n_tok; i++) dup |= strcmp(tokens[i], joined) == 0;
    if (dup) continue;
    json_array_append_new(merges, json_pack("[ss]", tokens[a], tokens[b]));
    snprintf(tokens[n_tok], sizeof tokens[0], "%s", joined);
    extra[n_extra++] = tokens[n_tok++];
  }
  char *ms = json_dumps(merges, 0);
  json_decref(merges);
  ph_tokenizer *tok = make(extra, n_extra, ms, NULL, NULL, NULL);
  free(ms);
  if (!tok) return;
  bpe_scratch sc = {0};
  int same = 0, total = 0;
  for (int w = 0; w < 2000; w++) {
    unsigned char word[40];
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    size_t n = 1 + (s >> 40) % 39;
    for (size_t i = 0; i < n; i++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      word[i] = (unsigned char)letters[(s >> 50) % 4];
    }
    tok_ids a = {0}, b = {0};
    CHECK(bpe_encode_word(tok, word, n, &sc, &a));
    reference_bpe(tok, word, n, &b);
    int eq = a.n == b.n && memcmp(a.p, b.p, a.n * sizeof *a.p) == 0;
    if (!eq && total - same < 3) fprintf(stderr, "       word \"%.*s\" differs\n", (int)n, word);
    same += eq;
    total++;
    free(a.p);
    free(b.p);
  }
  CHECK_EQ_INT(same, total);
  bpe_scratch_free(&sc);
  ph_tokenizer_free(tok);
}

static void test_ignore_merges_and_unk(void) {
  const char *extra[] = {"abc", "<unk>"};
  char *json = make_json(extra, 2, "[]", NULL, NULL, NULL, NULL, "{\"ignore_merges\": true}", -1);
  ph_tokenizer *tok = open_json(json, NULL);
  free(json);
  if (tok) {
    CHECK(ENC(tok, "abc", 256)); /* the whole word is a token: no merges needed */
    CHECK(ENC(tok, "abcd", 'a', 'b', 'c', 'd'));
  }
  ph_tokenizer_free(tok);
  /* byte 'z' missing: dropped without unk_token, unk with it, fused with fuse_unk */
  json = make_json(extra, 2, "[]", NULL, NULL, NULL, NULL, NULL, 'z');
  tok = open_json(json, NULL);
  free(json);
  if (tok) CHECK(ENC(tok, "azzb", 'a', 'b'));
  ph_tokenizer_free(tok);
  /* a word that is dropped whole gives no ids, twice (the second time through the word cache:
   * the fuzzer found it caching an empty id list through a null pointer, under UBSan) */
  json = make_json(extra, 2, "[]", NULL, NULL,
                   "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}",
                   NULL, NULL, 'z');
  tok = open_json(json, NULL);
  free(json);
  if (tok) CHECK(ENC(tok, "zz a zz zz", ' ', 'a', ' ', ' '));
  ph_tokenizer_free(tok);
  json = make_json(extra, 2, "[]", NULL, NULL, NULL, NULL, "{\"unk_token\": \"<unk>\"}", 'z');
  tok = open_json(json, NULL);
  free(json);
  if (tok) CHECK(ENC(tok, "azzb", 'a', 257, 257, 'b'));
  ph_tokenizer_free(tok);
  json = make_json(extra, 2, "[]", NULL, NULL, NULL, NULL,
                   "{\"unk_token\": \"<unk>\", \"fuse_unk\": true}", 'z');
  tok = open_json(json, NULL);
  free(json);
  if (tok) CHECK(ENC(tok, "azzb", 'a', 257, 'b'));
  ph_tokenizer_free(tok);
}

/* tokenizer.json's fast path (model.vocab and model.merges read by our scanner) against jansson
 * reading everything: the same tokenizer, whether the strings are raw UTF-8 or \u escapes. */
static void test_json_fast_path(void) {
  const char *extra[] = {"Ã©", "Ġt", "\"q\\"};
  char *raw = make_json(extra, 3, "[\"Ã ©\", [\"Ġ\", \"t\"]]", NULL, NULL, NULL, NULL, NULL, -1);
  json_t *root = json_loads(raw, 0, NULL);
  char *escaped = json_dumps(root, JSON_ENSURE_ASCII); /* every non-ASCII character as \uXXXX */
  json_decref(root);
  /* an escaped key: the fast path declines and jansson reads everything */
  char *slow = malloc(strlen(raw) + 8);
  const char *at = strstr(raw, "\"vocab\"");
  if (at) sprintf(slow, "%.*s\"voc\\u0061b\"%s", (int)(at - raw), raw, at + 7);
  model_lists l;
  char *rest = NULL;
  size_t rest_len = 0;
  CHECK(tokenizer_json_fast(raw, strlen(raw), &l, &rest, &rest_len) == 1);
  CHECK_EQ_INT(l.n_vocab, 259);
  CHECK_EQ_INT(l.n_merge, 2);
  model_lists_free(&l);
  free(rest);
  CHECK(tokenizer_json_fast(escaped, strlen(escaped), &l, &rest, &rest_len) == 1);
  model_lists_free(&l);
  free(rest);
  CHECK(at && tokenizer_json_fast(slow, strlen(slow), &l, &rest, &rest_len) == 0);
  const char *docs[] = {raw, escaped, slow};
  static const char text[] = "caf\xc3\xa9 to t\"q\\ \xc3\xa9t\xc3\xa9";
  int64_t *first = NULL, n_first = 0;
  for (int k = 0; k < 3; k++) {
    ph_tokenizer *t = open_json(docs[k], NULL);
    if (!t) continue;
    int64_t *ids = NULL, n = 0;
    CHECK_STATUS(ph_tokenizer_encode(t, text, sizeof text - 1, 0, &ids, &n), PH_OK, NULL);
    CHECK_EQ_INT(ph_tokenizer_token_id(t, "\"q\\"), 258);
    if (k == 0) {
      first = ids;
      n_first = n;
      CHECK_EQ_INT(n, 14); /* c a f é Ġt o Ġt " q \ Ġ é t é: the two merges applied */
    } else {
      CHECK(n == n_first && memcmp(ids, first, (size_t)n * sizeof *ids) == 0);
      ph_free(ids);
    }
    ph_tokenizer_free(t);
  }
  ph_free(first);
  free(raw);
  free(escaped);
  free(slow);
}

/* ---- pre-tokenizer ---- */

/* With every two-character token of "a-b--c" mergeable, the ids show where the pieces end. */
static ph_tokenizer *split_tok(const char *behavior, int invert) {
  const char *extra[] = {"a-", "-b", "b-", "-c", "--", "ab", "bc"};
  char pretok[512];
  snprintf(pretok, sizeof pretok,
           "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
           "{\"String\": \"-\"}, \"behavior\": \"%s\", \"invert\": %s}, {\"type\": "
           "\"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}",
           behavior, invert ? "true" : "false");
  return make(extra, 7, "[\"a -\", \"- b\", \"b -\", \"- c\", \"- -\", \"a b\", \"b c\"]", NULL,
              NULL, pretok);
}

static void test_split_behaviors(void) {
  ph_tokenizer *t;
  if ((t = split_tok("Removed", 0))) CHECK(ENC(t, "a-b--c", 'a', 'b', 'c'));
  ph_tokenizer_free(t);
  if ((t = split_tok("Isolated", 0))) CHECK(ENC(t, "a-b--c", 'a', '-', 'b', '-', '-', 'c'));
  ph_tokenizer_free(t);
  /* a-, b-, -, c */
  if ((t = split_tok("MergedWithPrevious", 0))) CHECK(ENC(t, "a-b--c", 256, 258, '-', 'c'));
  ph_tokenizer_free(t);
  /* a, -b, -, -c */
  if ((t = split_tok("MergedWithNext", 0))) CHECK(ENC(t, "a-b--c", 'a', 257, '-', 259));
  ph_tokenizer_free(t);
  /* a, -, b, --, c */
  if ((t = split_tok("Contiguous", 0))) CHECK(ENC(t, "a-b--c", 'a', '-', 'b', 260, 'c'));
  ph_tokenizer_free(t);
  /* invert: the pattern marks what to keep; Removed then drops the rest */
  if ((t = split_tok("Removed", 1))) CHECK(ENC(t, "a-b--c", '-', '-', '-'));
  ph_tokenizer_free(t);
  if ((t = split_tok("Isolated", 1))) CHECK(ENC(t, "ab-bc", 261, '-', 262));
  ph_tokenizer_free(t);
}

/* \s and \w as Oniguruma (Hugging Face's Rust) reads them, not PCRE2: U+180E is not
 * whitespace (the reference run found PCRE2 splitting on it), '²' is not a word character, a
 * combining mark is; inside a character class too. */
static ph_tokenizer *regex_tok(const char *regex, const char *behavior, int invert) {
  char pretok[512];
  snprintf(pretok, sizeof pretok,
           "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
           "{\"Regex\": \"%s\"}, \"behavior\": \"%s\", \"invert\": %s}, {\"type\": "
           "\"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}",
           regex, behavior, invert ? "true" : "false");
  return make(NULL, 0, NULL, NULL, NULL, pretok);
}

static void test_regex_oniguruma(void) {
  ph_tokenizer *t = regex_tok("\\\\s+", "Removed", 0);
  if (t) {
    CHECK(ENC(t,
              "a\xe1\xa0\x8e"
              "b c",
              'a', 0xe1, 0xa0, 0x8e, 'b', 'c'));
    CHECK(ENC(t,
              "a\xe3\x80\x80"
              "b\xc2\x85"
              "c",
              'a', 'b', 'c')); /* U+3000, U+0085 are */
  }
  ph_tokenizer_free(t);
  if ((t = regex_tok("[^\\\\s]+", "Removed", 1))) /* keep the non-space runs */
    CHECK(ENC(t,
              "a\xe1\xa0\x8e"
              "b c",
              'a', 0xe1, 0xa0, 0x8e, 'b', 'c'));
  ph_tokenizer_free(t);
  if ((t = regex_tok("\\\\w+", "Removed", 1))) {
    CHECK(ENC(t, "x\xc2\xb2y", 'x', 'y'));             /* '²' (No) is not \w */
    CHECK(ENC(t, "e\xcc\x81x", 'e', 0xcc, 0x81, 'x')); /* U+0301 (Mn) is */
  }
  ph_tokenizer_free(t);
  if ((t = regex_tok("\\\\Qa\\\\s\\\\E", "Removed", 1))) /* \Q..\E stays literal */
    CHECK(ENC(t, "a b a\\s", 'a', '\\', 's'));
  ph_tokenizer_free(t);
}

static void test_byte_level(void) {
  const char *extra[] = {"Ġh", "Ġhi", "bĠ"};
  const char *merges = "[\"b Ġ\", \"Ġ h\", \"Ġh i\"]";
  ph_tokenizer *t = make(extra, 3, merges, NULL, NULL,
                         "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"use_regex\": "
                         "true}");
  if (t) {
    CHECK(ENC(t, "hi", 257));             /* the prefix space */
    CHECK(ENC(t, " hi", 257));            /* not a second one */
    CHECK(ENC(t, "b hi", ' ', 'b', 257)); /* " b", " hi" (GPT-2 regex): no "bĠ" merge */
    int64_t ids[] = {257};
    char *s = decoded(t, ids, 1, 0);
    CHECK_EQ_STR(s, " hi");
    ph_free(s);
  }
  ph_tokenizer_free(t);
  t = make(extra, 3, merges, NULL, NULL,
           "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}");
  if (t) {
    CHECK(ENC(t, "hi", 'h', 'i'));
    CHECK(ENC(t, "b hi", 258, 'h', 'i')); /* one piece: "bĠ" merges first */
  }
  ph_tokenizer_free(t);
}

static void test_nfc(void) {
  const char *extra[] = {"Ã©"}; /* é's two bytes as byte-level characters */
  const char *merges = "[\"Ã ©\"]";
  ph_tokenizer *t = make(extra, 1, merges, NULL, "{\"type\": \"NFC\"}", NULL);
  ph_tokenizer *raw = make(extra, 1, merges, NULL, NULL, NULL);
  if (t && raw) {
    CHECK(ENC(t, "e\xcc\x81", 256)); /* e + U+0301 composes to é */
    CHECK(ENC(t, "\xc3\xa9", 256));
    CHECK(ENC(raw, "e\xcc\x81", 'e', 0xcc, 0x81));
  }
  ph_tokenizer_free(t);
  ph_tokenizer_free(raw);
  ph_tokenizer *seq = make(extra, 1, merges, NULL,
                           "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFD\"}, "
                           "{\"type\": \"NFC\"}]}",
                           NULL);
  if (seq) CHECK(ENC(seq, "e\xcc\x81", 256));
  ph_tokenizer_free(seq);
}

/* NFC's fast path (only runs that are not inert go through utf8proc) against utf8proc on the
 * whole text, on random mixtures of inert code points and ones that compose or decompose. */
static void test_nfc_fast_path(void) {
  ph_tokenizer *t = make(NULL, 0, NULL, NULL, "{\"type\": \"NFC\"}", NULL);
  if (!t) return;
  static const uint32_t pool[] = {'a',    'e',    ' ',    0xE9,   0x300,  0x301,  0x323,  0x345,
                                  0x385,  0x344,  0x1100, 0x1161, 0x11A8, 0xAC00, 0xAC01, 0x304B,
                                  0x3099, 0x309A, 0x30AB, 0x30FC, 0x4E00, 0x9FA5, 0xF900, 0x212B,
                                  0x2126, 0x0B47, 0x0B3E, 0x0DD9, 0x0DCF, 0x1E0A, 0x0F73, 0x0340,
                                  0x1F71, 0x3000, 0x0CC6, 0x0CD5, 0x0CC2, 0x2ADC, 0x0958, 0x05B7};
  uint64_t r = 99;
  int same = 0;
  for (int trial = 0; trial < 3000; trial++) {
    char text[256];
    size_t n = 0;
    int len = 1 + trial % 24;
    for (int k = 0; k < len; k++) {
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      n += utf8_encode1(pool[(r >> 33) % (sizeof pool / sizeof pool[0])], text + n);
    }
    tok_buf got = {0};
    CHECK(tokenizer_normalize(t, text, n, &got));
    utf8proc_uint8_t *want = utf8proc_NFC((const utf8proc_uint8_t *)(text[n] = '\0', text));
    int eq = want && got.n == strlen((const char *)want) && memcmp(got.p, want, got.n) == 0;
    same += eq;
    free(want);
    free(got.p);
  }
  CHECK_EQ_INT(same, 3000);
  ph_tokenizer_free(t);
}

/* ---- added tokens ---- */

static const char k_added[] =
    "[{\"id\": 300, \"content\": \"<x>\", \"special\": true},"
    " {\"id\": 301, \"content\": \"<x><y>\", \"special\": true},"
    " {\"id\": 302, \"content\": \"<l>\", \"special\": false, \"lstrip\": true},"
    " {\"id\": 303, \"content\": \"<r>\", \"special\": false, \"rstrip\": true},"
    " {\"id\": 304, \"content\": \"<w>\", \"special\": false, \"single_word\": true},"
    " {\"id\": 305, \"content\": \"\\u00e9t\\u00e9\", \"special\": false, \"normalized\": true}]";

static void test_added_tokens(void) {
  ph_tokenizer *t = make(NULL, 0, NULL, k_added, "{\"type\": \"NFC\"}", NULL);
  if (!t) return;
  CHECK(ENC(t, "a<x>b", 'a', 300, 'b'));
  CHECK(ENC(t, "<x><y><x>", 301, 300)); /* leftmost-longest */
  CHECK(ENC(t, "<x<x>", '<', 'x', 300));
  CHECK(ENC(t, "a \t<l> b", 'a', 302, ' ', 'b'));  /* lstrip takes the spaces before */
  CHECK(ENC(t, "a <r> \n b", 'a', ' ', 303, 'b')); /* rstrip the whitespace after */
  CHECK(ENC(t, "a<w>", 'a', '<', 'w', '>'));       /* single_word: not inside a word */
  CHECK(ENC(t, "a <w>.", 'a', ' ', 304, '.'));
  CHECK(ENC(t, "_<w>", '_', '<', 'w', '>'));       /* '_' is a word character */
  CHECK(ENC(t, "e\xcc\x81te\xcc\x81!", 305, '!')); /* normalized: matched after NFC */
  int64_t ids[] = {'a', 300, 'b', 305};
  /* Hugging Face's byte-level decoder reads an added token whose characters are all in the
   * byte-level alphabet as the bytes they stand for: "été" is E9 74 E9, not UTF-8 */
  char *s = decoded(t, ids, 4, 0);
  CHECK_EQ_STR(s, "a<x>b\xef\xbf\xbdt\xef\xbf\xbd");
  ph_free(s);
  s = decoded(t, ids, 4, 1); /* skip_special leaves out <x> only */
  CHECK_EQ_STR(s, "ab\xef\xbf\xbdt\xef\xbf\xbd");
  ph_free(s);
  CHECK_EQ_INT(ph_tokenizer_token_id(t, "<x><y>"), 301);
  CHECK_EQ_INT(ph_tokenizer_token_id(t, "Ġ"), ' ');
  CHECK_EQ_INT(ph_tokenizer_token_id(t, "nope"), -1);
  ph_tokenizer_info info;
  CHECK_STATUS(ph_tokenizer_get_info(t, &info), PH_OK, NULL);
  CHECK_EQ_INT(info.vocab_size, 306);
  ph_tokenizer_free(t);
}

/* ---- UTF-8 ---- */

static void test_utf8_repair(void) {
  static const struct {
    const char *in, *out;
  } cases[] = {
      {"ok \xc3\xa9", "ok \xc3\xa9"},
      {"a\x80"
       "b",
       "a\xef\xbf\xbd"
       "b"},
      {"x\xc3", "x\xef\xbf\xbd"},
      {"\xe2\x82x", "\xef\xbf\xbdx"},                           /* one for the subpart */
      {"\xe0\x80\xaf", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* overlong: three */
      {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* surrogate: three */
      {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* > U+10FFFF */
      {"\xf0\x9f\x98", "\xef\xbf\xbd"},
      {"\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80"},
      {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},
      {"\xff", "\xef\xbf\xbd"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tok_buf b = {0};
    CHECK(utf8_repair(cases[i].in, strlen(cases[i].in), &b));
    CHECK_EQ_STR(b.p, cases[i].out);
    free(b.p);
  }
  /* a character cut short by the end of the input, whose next byte (beyond len) would finish it:
   * the first reference run found the repair reading past the end */
  tok_buf cut = {0};
  CHECK(utf8_repair("x\xc3\xa9", 2, &cut));
  CHECK(cut.n == 4 && memcmp(cut.p, "x\xef\xbf\xbd", 4) == 0);
  free(cut.p);
  CHECK_EQ_INT(utf8_incomplete_tail((const unsigned char *)"a\xf0\x9f\x98", 4), 3);
  CHECK_EQ_INT(utf8_incomplete_tail((const unsigned char *)"a\xf0\x9f\x98\x80", 5), 0);
  CHECK_EQ_INT(utf8_incomplete_tail((const unsigned char *)"a\xc3", 2), 1);
  CHECK_EQ_INT(utf8_incomplete_tail((const unsigned char *)"a\xe0\x80", 3), 0); /* can't finish */
  for (int b = 0; b < 256; b++) CHECK_EQ_INT(byte_level_byte(byte_level_cp[b]), b);
}

static void test_decode(void) {
  ph_tokenizer *t = make(NULL, 0, NULL, NULL, NULL, NULL);
  if (!t) return;
  int64_t ids[] = {'h', 0xc3, 0xa9, 0xc3};
  char *text = NULL;
  size_t len = 0;
  CHECK_STATUS(ph_tokenizer_decode(t, ids, 4, 0, &text, &len), PH_OK, NULL);
  CHECK_EQ_STR(text, "h\xc3\xa9\xef\xbf\xbd"); /* the last byte alone is U+FFFD */
  CHECK_EQ_INT(len, 6);
  ph_free(text);
  /* an id that is no token (beyond vocab_size: a padded model vocabulary generates them) gives
   * no text, as Hugging Face's decode drops it; a negative id is refused */
  int64_t beyond[] = {'a', 256, INT64_MAX, 'b'};
  CHECK_STATUS(ph_tokenizer_decode(t, beyond, 4, 0, &text, &len), PH_OK, NULL);
  CHECK(text && len == 2 && strcmp(text, "ab") == 0);
  ph_free(text);
  int64_t neg[] = {'a', -1};
  CHECK_STATUS(ph_tokenizer_decode(t, neg, 2, 0, &text, &len), PH_ERR_INVALID_ARGUMENT, NULL);
  CHECK(text == NULL && len == 0);
  char *gap_json = make_json(NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL, 'A');
  ph_tokenizer *gap = gap_json ? open_json(gap_json, NULL) : NULL;
  free(gap_json);
  if (gap) { /* id 65 is a gap: no text either */
    int64_t ids_gap[] = {'x', 'A', 'y'};
    CHECK_STATUS(ph_tokenizer_decode(gap, ids_gap, 3, 0, &text, &len), PH_OK, NULL);
    CHECK(text && strcmp(text, "xy") == 0);
    ph_free(text);
    ph_tokenizer_free(gap);
  }
  int64_t *out = NULL, n = -1;
  CHECK_STATUS(ph_tokenizer_encode(t, "", 0, 0, &out, &n), PH_OK, NULL);
  CHECK_EQ_INT(n, 0);
  CHECK(out != NULL);
  ph_free(out);
  CHECK_STATUS(ph_tokenizer_encode(t, "a\x80", 2, 0, &out, &n), PH_OK, NULL);
  CHECK_EQ_INT(n, 4); /* a, then U+FFFD's three bytes */
  ph_free(out);
  ph_tokenizer_free(t);
}

/* ---- special tokens, config, post-processor ---- */

static void test_bos_rule(void) {
  const char *added = "[{\"id\": 256, \"content\": \"<s>\", \"special\": true},"
                      " {\"id\": 257, \"content\": \"</s>\", \"special\": true}]";
  char *json = make_json(NULL, 0, NULL, added, NULL, NULL, NULL, NULL, -1);
  /* bos as an AddedToken object, add_bos_token true: add_special prepends it */
  ph_tokenizer *t = open_json(json, "{\"add_bos_token\": true, \"bos_token\": {\"__type\": "
                                    "\"AddedToken\", \"content\": \"<s>\"}, \"eos_token\": "
                                    "\"</s>\", \"chat_template\": \"{{ bos_token }}\"}");
  if (t) {
    int64_t *ids = NULL, n = 0;
    CHECK_STATUS(ph_tokenizer_encode(t, "ab", 2, 1, &ids, &n), PH_OK, NULL);
    CHECK_EQ_INT(n, 3);
    if (n == 3) CHECK_EQ_INT(ids[0], 256);
    ph_free(ids);
    CHECK(ENC(t, "ab", 'a', 'b'));
    ph_tokenizer_info info;
    CHECK_STATUS(ph_tokenizer_get_info(t, &info), PH_OK, NULL);
    CHECK_EQ_INT(info.add_bos, 1);
    CHECK_EQ_INT(info.bos_id, 256);
    CHECK_EQ_INT(info.n_eos_ids, 0); /* no generation_config: set by ph_tokenizer_open only */
    CHECK_EQ_STR(tokenizer_special_token(t, TOKENIZER_BOS), "<s>");
    CHECK_EQ_STR(tokenizer_special_token(t, TOKENIZER_EOS), "</s>");
    CHECK(tokenizer_special_token(t, TOKENIZER_PAD) == NULL);
    CHECK_EQ_STR(tokenizer_chat_template(t), "{{ bos_token }}");
    CHECK_EQ_STR(tokenizer_chat_template_origin(t), "tokenizer_config.json");
    CHECK(tokenizer_config(t) != NULL);
  }
  ph_tokenizer_free(t);
  /* add_bos_token false (or absent): nothing added */
  t = open_json(json, "{\"bos_token\": \"<s>\"}");
  if (t) {
    int64_t *ids = NULL, n = 0;
    CHECK_STATUS(ph_tokenizer_encode(t, "ab", 2, 1, &ids, &n), PH_OK, NULL);
    CHECK_EQ_INT(n, 2);
    ph_free(ids);
    CHECK(tokenizer_chat_template(t) == NULL);
  }
  ph_tokenizer_free(t);
  free(json);
  /* TemplateProcessing: its single template's special tokens around the text */
  json = make_json(NULL, 0, NULL, added, NULL, NULL,
                   "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": "
                   "\"<s>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, "
                   "{\"SpecialToken\": {\"id\": \"</s>\", \"type_id\": 0}}], \"special_tokens\": "
                   "{\"<s>\": {\"id\": \"<s>\", \"ids\": [256], \"tokens\": [\"<s>\"]}, \"</s>\": "
                   "{\"id\": \"</s>\", \"ids\": [257], \"tokens\": [\"</s>\"]}}}",
                   NULL, -1);
  t = open_json(json, "{\"bos_token\": \"<s>\"}");
  free(json);
  if (t) {
    int64_t *ids = NULL, n = 0;
    CHECK_STATUS(ph_tokenizer_encode(t, "a", 1, 1, &ids, &n), PH_OK, NULL);
    CHECK_EQ_INT(n, 3);
    if (n == 3) CHECK(ids[0] == 256 && ids[1] == 'a' && ids[2] == 257);
    ph_free(ids);
  }
  ph_tokenizer_free(t);
}

/* ---- files on disk: ph_tokenizer_open, generation_config, chat_template.jinja, make-tiny ---- */

static void write_file(const char *dir, const char *name, const char *text) {
  char path[1200];
  diag d;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  CHECK_STATUS(file_write_all(path, text, strlen(text), &d), PH_OK, d.msg);
}

static void test_open_dir(void) {
  char dir[1024];
  diag d;
  snprintf(dir, sizeof dir, "%s/dir", check_env("PH_TMP_DIR"));
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
  ph_tokenizer *t = NULL;
  char missing[1100];
  snprintf(missing, sizeof missing, "%s/none", dir);
  CHECK_STATUS(ph_tokenizer_open(missing, &t), PH_ERR_NOT_FOUND, NULL);
  CHECK_CONTAINS(ph_tokenizer_error(t), "no tokenizer.json");
  ph_tokenizer_free(t);
  const char *added = "[{\"id\": 256, \"content\": \"<e>\", \"special\": true}]";
  char *json = make_json(NULL, 0, NULL, added, NULL, NULL, NULL, NULL, -1);
  write_file(dir, "tokenizer.json", json);
  free(json);
  write_file(dir, "tokenizer_config.json", "{\"eos_token\": \"<e>\", \"chat_template\": \"cfg\"}");
  write_file(dir, "chat_template.jinja", "file {{ x }}");
  write_file(dir, "generation_config.json", "{\"eos_token_id\": [256, 10]}");
  CHECK_STATUS(ph_tokenizer_open(dir, &t), PH_OK, ph_tokenizer_error(t));
  if (t) {
    ph_tokenizer_info info;
    CHECK_STATUS(ph_tokenizer_get_info(t, &info), PH_OK, NULL);
    CHECK_EQ_INT(info.n_eos_ids, 2);
    CHECK(info.eos_ids[0] == 256 && info.eos_ids[1] == 10);
    CHECK_EQ_STR(tokenizer_chat_template(t), "file {{ x }}"); /* the .jinja file wins */
    CHECK_EQ_STR(tokenizer_chat_template_origin(t), "chat_template.jinja");
  }
  ph_tokenizer_free(t);
  write_file(dir, "generation_config.json", "{\"eos_token_id\": 5000}");
  CHECK_STATUS(ph_tokenizer_open(dir, &t), PH_ERR_CONFIG_INVALID, NULL);
  CHECK_CONTAINS(ph_tokenizer_error(t), "eos_token_id");
  ph_tokenizer_free(t);
  write_file(dir, "generation_config.json", "{}"); /* none: tokenizer_config's eos_token */
  CHECK_STATUS(ph_tokenizer_open(dir, &t), PH_OK, ph_tokenizer_error(t));
  if (t) {
    ph_tokenizer_info info;
    ph_tokenizer_get_info(t, &info);
    CHECK(info.n_eos_ids == 1 && info.eos_ids[0] == 256);
  }
  ph_tokenizer_free(t);
}

static void test_tiny_files(void) {
  char dir[1024];
  diag d;
  snprintf(dir, sizeof dir, "%s/tiny", check_env("PH_TMP_DIR"));
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
  CHECK_STATUS(tiny_tokenizer_write(dir, 245, &d), PH_ERR_INVALID_ARGUMENT, NULL);
  const int64_t vocabs[] = {246, 256, 259, 512};
  for (int v = 0; v < 4; v++) {
    CHECK_STATUS(tiny_tokenizer_write(dir, vocabs[v], &d), PH_OK, d.msg);
    ph_tokenizer *t = NULL;
    CHECK_STATUS(ph_tokenizer_open(dir, &t), PH_OK, ph_tokenizer_error(t));
    if (!t) continue;
    ph_tokenizer_info info;
    ph_tokenizer_get_info(t, &info);
    CHECK(info.vocab_size <= vocabs[v]);
    CHECK_EQ_INT(info.n_eos_ids, 2);
    CHECK_EQ_INT(info.eos_ids[0], ph_tokenizer_token_id(t, "<|im_end|>"));
    CHECK_EQ_INT(info.has_chat_template, 1);
    CHECK(strstr(tokenizer_chat_template(t), "add_generation_prompt") != NULL);
    static const char text[] = "Hello, the user and the assistant! \xc3\xa9\xf0\x9f\x98\x80 42";
    int64_t *ids = NULL, n = 0;
    CHECK_STATUS(ph_tokenizer_encode(t, text, sizeof text - 1, 1, &ids, &n), PH_OK, NULL);
    for (int64_t i = 0; i < n; i++) CHECK(ids[i] >= 0 && ids[i] < vocabs[v]);
    if (vocabs[v] != 246 && vocabs[v] != 259) CHECK(n < (int64_t)sizeof text - 1); /* merges */
    char *back = decoded(t, ids, n, 0);
    CHECK_EQ_STR(back, text);
    ph_free(back);
    ph_free(ids);
    CHECK(ENC(t, "<|im_start|>", ph_tokenizer_token_id(t, "<|im_start|>")));
    ph_tokenizer_free(t);
  }
}

/* ---- the text stream ---- */

/* Feeds ids one by one; returns the concatenated pieces (malloc'ed) and checks each piece is
 * valid UTF-8 on its own. */
static char *stream_all(const ph_tokenizer *t, const int64_t *ids, int n, const char *const *stops,
                        int n_stops, int *stopped_at) {
  ph_text_stream *s = NULL;
  CHECK_STATUS(ph_text_stream_create(t, stops, n_stops, 0, &s), PH_OK, NULL);
  if (!s) return NULL;
  tok_buf all = {0};
  tok_buf_append(&all, "", 0);
  *stopped_at = -1;
  for (int i = 0; i < n; i++) {
    const char *p;
    size_t len;
    int stopped = 0;
    CHECK_STATUS(ph_text_stream_push(s, ids[i], &p, &len, &stopped), PH_OK, NULL);
    tok_buf fix = {0};
    utf8_repair(p, len, &fix);
    CHECK(fix.n == len && memcmp(fix.p, p, len) == 0); /* never half a character */
    free(fix.p);
    tok_buf_append(&all, p, len);
    if (stopped && *stopped_at < 0) *stopped_at = i;
  }
  const char *p;
  size_t len;
  CHECK_STATUS(ph_text_stream_finish(s, &p, &len), PH_OK, NULL);
  tok_buf_append(&all, p, len);
  ph_text_stream_free(s);
  return all.p;
}

static void test_text_stream(void) {
  ph_tokenizer *t =
      make(NULL, 0, NULL, "[{\"id\": 256, \"content\": \"<e>\", \"special\": true}]", NULL, NULL);
  if (!t) return;
  /* é as two byte tokens: nothing after the first, the character after the second */
  ph_text_stream *s = NULL;
  const char *stops[] = {"STOP", "\xc3\xa9!"};
  CHECK_STATUS(ph_text_stream_create(t, stops, 2, 1, &s), PH_OK, NULL);
  const char *p;
  size_t len;
  int stopped = 0;
  CHECK_STATUS(ph_text_stream_push(s, 0xc3, &p, &len, &stopped), PH_OK, NULL);
  CHECK_EQ_INT(len, 0);
  CHECK_STATUS(ph_text_stream_push(s, 0xa9, &p, &len, &stopped), PH_OK, NULL);
  CHECK_EQ_INT(len, 0); /* é could start "é!" */
  CHECK_STATUS(ph_text_stream_push(s, 'x', &p, &len, &stopped), PH_OK, NULL);
  CHECK(len == 3 && memcmp(p, "\xc3\xa9x", 3) == 0);
  CHECK_STATUS(ph_text_stream_push(s, 'S', &p, &len, &stopped), PH_OK, NULL);
  CHECK_EQ_INT(len, 0); /* held: could be STOP */
  CHECK_STATUS(ph_text_stream_push(s, 256, &p, &len, &stopped), PH_OK, NULL);
  CHECK_EQ_INT(len, 0); /* special and skipped */
  CHECK_STATUS(ph_text_stream_push(s, 'T', &p, &len, &stopped), PH_OK, NULL);
  CHECK_STATUS(ph_text_stream_push(s, 'O', &p, &len, &stopped), PH_OK, NULL);
  CHECK_EQ_INT(stopped, 0);
  CHECK_STATUS(ph_text_stream_push(s, 'P', &p, &len, &stopped), PH_OK, NULL);
  CHECK_EQ_INT(stopped, 1);
  CHECK_EQ_INT(len, 0);
  CHECK_STATUS(ph_text_stream_push(s, 'z', &p, &len, &stopped), PH_OK, NULL);
  CHECK(stopped == 1 && len == 0);
  CHECK_STATUS(ph_text_stream_finish(s, &p, &len), PH_OK, NULL);
  CHECK_EQ_INT(len, 0);
  CHECK_STATUS(ph_text_stream_push(s, 999, &p, &len, &stopped), PH_OK, NULL);
  CHECK(stopped == 1 && len == 0);
  CHECK_STATUS(ph_text_stream_push(s, -1, &p, &len, &stopped), PH_ERR_INVALID_ARGUMENT, NULL);
  ph_text_stream_free(s);
  /* an id that is no token gives no text and keeps the stream going, as decode drops it */
  CHECK_STATUS(ph_text_stream_create(t, stops, 2, 1, &s), PH_OK, NULL);
  CHECK_STATUS(ph_text_stream_push(s, 0xc3, &p, &len, &stopped), PH_OK, NULL);
  CHECK_STATUS(ph_text_stream_push(s, 999, &p, &len, &stopped), PH_OK, NULL);
  CHECK_EQ_INT(len, 0);
  CHECK_STATUS(ph_text_stream_push(s, 0xa9, &p, &len, &stopped), PH_OK, NULL);
  CHECK_STATUS(ph_text_stream_push(s, 'x', &p, &len, &stopped), PH_OK, NULL);
  CHECK(len == 3 && memcmp(p, "\xc3\xa9x", 3) == 0); /* the character across the unknown id */
  CHECK_STATUS(ph_text_stream_push(s, -5, &p, &len, &stopped), PH_ERR_INVALID_ARGUMENT, NULL);
  ph_text_stream_free(s);
  /* a held-back prefix is flushed by finish, and an unfinished character becomes U+FFFD */
  CHECK_STATUS(ph_text_stream_create(t, stops, 2, 0, &s), PH_OK, NULL);
  ph_text_stream_push(s, 'S', &p, &len, &stopped);
  ph_text_stream_push(s, 0xe2, &p, &len, &stopped);
  CHECK_EQ_INT(len, 0);
  CHECK_STATUS(ph_text_stream_finish(s, &p, &len), PH_OK, NULL);
  CHECK(len == 4 && memcmp(p, "S\xef\xbf\xbd", 4) == 0);
  ph_text_stream_free(s);
  /* bad arguments */
  const char *empty[] = {""}, *bad_utf8[] = {"\xc3"};
  CHECK_STATUS(ph_text_stream_create(t, empty, 1, 0, &s), PH_ERR_INVALID_ARGUMENT, NULL);
  CHECK_STATUS(ph_text_stream_create(t, bad_utf8, 1, 0, &s), PH_ERR_INVALID_ARGUMENT, NULL);
  CHECK_STATUS(ph_text_stream_create(t, stops, PH_MAX_STOP_STRINGS + 1, 0, &s),
               PH_ERR_INVALID_ARGUMENT, NULL);
  /* random token streams: the pieces are decode(all) cut before the first stop string */
  const char *rstops[] = {"ab", "\xc3\xa9\xc3\xa9", "ba\xe2\x82\xac"};
  uint64_t r = 7;
  for (int trial = 0; trial < 400; trial++) {
    int64_t ids[40];
    int n = 1 + trial % 40;
    static const int64_t pool[] = {'a', 'b', 'c', ' ', 0xc3, 0xa9, 0xe2, 0x82, 0xac, 0x80, 256};
    for (int i = 0; i < n; i++) {
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      ids[i] = pool[(r >> 33) % (sizeof pool / sizeof pool[0])];
    }
    int n_stops = trial % 4, at = -1;
    char *got = stream_all(t, ids, n, rstops, n_stops, &at);
    char *want = decoded(t, ids, n, 0);
    size_t cut = want ? strlen(want) : 0;
    for (int k = 0; k < n_stops; k++) {
      const char *f = want ? strstr(want, rstops[k]) : NULL;
      if (f && (size_t)(f - want) < cut) cut = (size_t)(f - want);
    }
    int ok = got && want && strlen(got) == cut && memcmp(got, want, cut) == 0;
    if (!ok) fprintf(stderr, "       trial %d: stream \"%s\" vs decode \"%s\"\n", trial, got, want);
    CHECK(ok);
    free(got);
    ph_free(want);
  }
  ph_tokenizer_free(t);
}

/* ---- threads: one tokenizer, many callers ---- */

/* pagedhybrid.h promises that every function taking a const ph_tokenizer may run on many threads
 * at once. Four threads encode, decode, render the chat template and stream the same inputs over
 * and over on make-tiny's tokenizer; each result must be the single-threaded one (run under
 * ThreadSanitizer during the review of issue 17: no report). */
typedef struct thread_job {
  const ph_tokenizer *tok;
  const char *text, *messages;
  size_t text_len;
  const int64_t *ids;
  int64_t n_ids;
  const char *chat;
  size_t chat_len;
  int failures;
} thread_job;

static void *thread_work(void *arg) {
  thread_job *j = arg;
  for (int r = 0; r < 8; r++) {
    int64_t *ids = NULL, n = 0;
    if (ph_tokenizer_encode(j->tok, j->text, j->text_len, 1, &ids, &n) != PH_OK || n != j->n_ids ||
        memcmp(ids, j->ids, (size_t)n * sizeof *ids) != 0)
      j->failures++;
    char *t = NULL;
    size_t len = 0;
    if (ph_tokenizer_decode(j->tok, ids, n, 0, &t, &len) != PH_OK || len != j->text_len ||
        memcmp(t, j->text, len) != 0)
      j->failures++;
    ph_free(t);
    ph_text_stream *s = NULL;
    const char *stops[] = {"never-there"};
    size_t streamed = 0;
    if (ph_text_stream_create(j->tok, stops, 1, 0, &s) != PH_OK) j->failures++;
    for (int64_t i = 0; s && i < n; i++) {
      const char *p;
      size_t pl;
      int stopped;
      if (ph_text_stream_push(s, ids[i], &p, &pl, &stopped) != PH_OK) j->failures++;
      streamed += pl;
    }
    const char *p;
    size_t pl = 0;
    if (s && ph_text_stream_finish(s, &p, &pl) != PH_OK) j->failures++;
    if (streamed + pl != j->text_len) j->failures++;
    ph_text_stream_free(s);
    ph_free(ids);
    char err[256];
    t = NULL;
    if (ph_chat_render(j->tok, j->messages, NULL, 1, &t, &len, err, sizeof err) != PH_OK ||
        len != j->chat_len || memcmp(t, j->chat, len) != 0)
      j->failures++;
    ph_free(t);
  }
  return NULL;
}

static void test_threads(void) {
  char dir[1024];
  diag d;
  snprintf(dir, sizeof dir, "%s/threads", check_env("PH_TMP_DIR"));
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
  CHECK_STATUS(tiny_tokenizer_write(dir, 512, &d), PH_OK, d.msg);
  ph_tokenizer *t = NULL;
  CHECK_STATUS(ph_tokenizer_open(dir, &t), PH_OK, t ? ph_tokenizer_error(t) : "open");
  if (!t) return;
  static const char *const parts[] = {"Hello, the world ",
                                      "<|im_start|>user\n",
                                      "\xc3\xa9t\xc3\xa9 ",
                                      "  \t\n\n",
                                      "1234 ",
                                      "\xf0\x9f\x98\x80 ",
                                      "don't "};
  tok_buf text = {0};
  for (int i = 0; i < 3000; i++)
    tok_buf_append(&text, parts[(i * 5) % 7], strlen(parts[(i * 5) % 7]));
  const char *messages =
      "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
      "\"content\": [{\"type\": \"text\", \"text\": \"Hi\"}]}]";
  thread_job base = {t, text.p, messages, text.n, NULL, 0, NULL, 0, 0};
  int64_t *ids = NULL;
  char *chat = NULL, err[256];
  CHECK_STATUS(ph_tokenizer_encode(t, text.p, text.n, 1, &ids, &base.n_ids), PH_OK, NULL);
  CHECK_STATUS(ph_chat_render(t, messages, NULL, 1, &chat, &base.chat_len, err, sizeof err), PH_OK,
               err);
  base.ids = ids;
  base.chat = chat;
  if (ids && chat) {
    thread_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
      jobs[i] = base;
      CHECK(pthread_create(&th[i], NULL, thread_work, &jobs[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
      pthread_join(th[i], NULL);
      CHECK_EQ_INT(jobs[i].failures, 0);
    }
  }
  ph_free(ids);
  ph_free(chat);
  free(text.p);
  ph_tokenizer_free(t);
}

/* ---- bad files: typed errors naming the JSON path ---- */

static void expect_error(const char *json, ph_status want, const char *needle) {
  ph_tokenizer *t = NULL;
  CHECK_STATUS(tokenizer_open_json(json, strlen(json), NULL, 0, &t), want, ph_tokenizer_error(t));
  CHECK_CONTAINS(ph_tokenizer_error(t), needle);
  ph_tokenizer_free(t);
}

static void test_bad_files(void) {
  expect_error("{", PH_ERR_JSON, "tokenizer.json line");
  expect_error("[]", PH_ERR_TOKENIZER, "expected an object");
  expect_error("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", PH_ERR_TOKENIZER,
               "model.type");
  expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}}}", PH_ERR_TOKENIZER,
               "model.vocab[\"a\"]");
  expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}}}",
               PH_ERR_TOKENIZER, "used twice");
  expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}",
               PH_ERR_TOKENIZER, "model.merges[0]: token \"b\"");
  expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a\"]}}",
               PH_ERR_TOKENIZER, "model.merges[0]");
  expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [[1, 2]]}}",
               PH_ERR_TOKENIZER, "model.merges[0]");
  expect_error("{\"model\": {\"type\": \"BPE\", \"dropout\": 0.1, \"vocab\": {\"a\": 0}}}",
               PH_ERR_TOKENIZER, "model.dropout");
  expect_error("{\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"vocab\": {\"a\": 0}}}",
               PH_ERR_TOKENIZER, "model.byte_fallback");
  expect_error("{\"model\": {\"type\": \"BPE\", \"unk_token\": \"<u>\", \"vocab\": {\"a\": 0}}}",
               PH_ERR_TOKENIZER, "model.unk_token");
  expect_error("{\"truncation\": {\"max_length\": 5}, \"model\": {}}", PH_ERR_TOKENIZER,
               "truncation");
  char *j = make_json(NULL, 0, NULL, NULL, "{\"type\": \"Lowercase\"}", NULL, NULL, NULL, -1);
  expect_error(j, PH_ERR_TOKENIZER, "normalizer.type");
  free(j);
  j = make_json(NULL, 0, NULL, NULL,
                "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": "
                "\"NFC\"}, {\"type\": \"Strip\"}]}",
                NULL, NULL, NULL, -1);
  expect_error(j, PH_ERR_TOKENIZER, "normalizer.normalizers[1].type");
  free(j);
  j = make_json(NULL, 0, NULL, NULL, NULL,
                "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
                "{\"Regex\": \"(unclosed\"}, \"behavior\": \"Isolated\"}, {\"type\": "
                "\"ByteLevel\"}]}",
                NULL, NULL, -1);
  expect_error(j, PH_ERR_TOKENIZER, "pre_tokenizer.pretokenizers[0].pattern.Regex: regex error");
  free(j);
  j = make_json(NULL, 0, NULL, NULL, NULL,
                "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
                "{\"String\": \"x\"}, \"behavior\": \"Sideways\"}, {\"type\": \"ByteLevel\"}]}",
                NULL, NULL, -1);
  expect_error(j, PH_ERR_TOKENIZER, "pre_tokenizer.pretokenizers[0].behavior");
  free(j);
  j = make_json(NULL, 0, NULL, NULL, NULL, "{\"type\": \"Whitespace\"}", NULL, NULL, -1);
  expect_error(j, PH_ERR_TOKENIZER, "pre_tokenizer.type");
  free(j);
  j = make_json(NULL, 0, NULL, NULL, NULL,
                "{\"type\": \"Split\", \"pattern\": {\"String\": \"x\"}, \"behavior\": "
                "\"Isolated\"}",
                NULL, NULL, -1);
  expect_error(j, PH_ERR_TOKENIZER, "must end with ByteLevel");
  free(j);
  j = make_json(NULL, 0, NULL, NULL, NULL, NULL, "{\"type\": \"BertProcessing\"}", NULL, -1);
  expect_error(j, PH_ERR_TOKENIZER, "post_processor.type");
  free(j);
  j = make_json(NULL, 0, NULL, "[{\"id\": 3, \"content\": \"\"}]", NULL, NULL, NULL, NULL, -1);
  expect_error(j, PH_ERR_TOKENIZER, "added_tokens[0].content");
  free(j);
  j = make_json(NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL, -1);
  ph_tokenizer *t = NULL;
  CHECK_STATUS(tokenizer_open_json(j, strlen(j), "{\"bos_token\": 3}", 16, &t), PH_ERR_TOKENIZER,
               NULL);
  CHECK_CONTAINS(ph_tokenizer_error(t), "bos_token");
  ph_tokenizer_free(t);
  CHECK_STATUS(tokenizer_open_json(j, strlen(j), "{", 1, &t), PH_ERR_JSON, NULL);
  ph_tokenizer_free(t);
  free(j);
  CHECK_STATUS(ph_tokenizer_open(NULL, &t), PH_ERR_INVALID_ARGUMENT, NULL);
  CHECK_STATUS(ph_tokenizer_get_info(NULL, NULL), PH_ERR_INVALID_ARGUMENT, NULL);
  ph_tokenizer_free(NULL);
  ph_text_stream_free(NULL);
  ph_free(NULL);
}

int main(void) {
  RUN(test_merge_order);
  RUN(test_bpe_vs_reference);
  RUN(test_ignore_merges_and_unk);
  RUN(test_json_fast_path);
  RUN(test_split_behaviors);
  RUN(test_regex_oniguruma);
  RUN(test_byte_level);
  RUN(test_nfc);
  RUN(test_nfc_fast_path);
  RUN(test_added_tokens);
  RUN(test_utf8_repair);
  RUN(test_decode);
  RUN(test_bos_rule);
  RUN(test_open_dir);
  RUN(test_tiny_files);
  RUN(test_text_stream);
  RUN(test_threads);
  RUN(test_bad_files);
  return check_finish();
}
