/* fuzz_tokenizer — libFuzzer target for tokenizer.json parsing and for encode/decode of
 * arbitrary bytes.
 *
 * Input: a tokenizer.json, a NUL byte, then text (no NUL: the whole input is the JSON and the
 * text is empty). When the JSON opens, the text (any bytes, UTF-8 or not) is encoded with and
 * without special tokens, and the invariants are checked: every id is below vocab_size, decode of
 * the ids succeeds, decode(encode(x)) is valid UTF-8, decode is what a text stream with a stop
 * string hands out up to the stop, and encoding the decoded text again is stable in length. A
 * failed open must carry a message. The fast path for model.vocab / model.merges is checked
 * against jansson reading the whole document. Seeds in fuzz/corpus/tokenizer/ (make-tiny's
 * tokenizer and small hand-written ones with Split behaviors, added-token flags and NFC). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int is_valid_utf8(const char *s, size_t n) {
  tok_buf b = {0};
  int ok = utf8_repair(s, n, &b) && b.n == n && (n == 0 || memcmp(b.p, s, n) == 0);
  free(b.p);
  return ok;
}

/* The fast path for model.vocab / model.merges (tokenizer_json.c) against jansson reading the
 * whole document: it never accepts what jansson refuses, and reads the keys jansson reads. */
static void check_fast_path(const char *json, size_t len) {
  model_lists l;
  char *rest = NULL;
  size_t rest_len = 0;
  if (!tokenizer_json_fast(json, len, &l, &rest, &rest_len)) return;
  json_t *full = json_loadb(json, len, 0, NULL), *part = json_loadb(rest, rest_len, 0, NULL);
  if (!full != !part) __builtin_trap();
  if (full) {
    const json_t *vocab = json_object_get(json_object_get(full, "model"), "vocab");
    if (!json_is_object(vocab) || json_object_size(vocab) > l.n_vocab) __builtin_trap();
    for (size_t i = 0; i < l.n_vocab; i++) {
      const json_t *v = json_object_getn(vocab, l.strs.p + l.vocab[i].off, l.vocab[i].len);
      if (!json_is_integer(v)) __builtin_trap();
    }
    const json_t *merges = json_object_get(json_object_get(full, "model"), "merges");
    if (json_array_size(merges) != l.n_merge) __builtin_trap();
  }
  json_decref(full);
  json_decref(part);
  free(rest);
  model_lists_free(&l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *nul = memchr(data, 0, size);
  size_t json_len = nul ? (size_t)(nul - data) : size;
  check_fast_path((const char *)data, json_len);
  const char *text = nul ? (const char *)nul + 1 : "";
  size_t text_len = nul ? size - json_len - 1 : 0;
  ph_tokenizer *tok = NULL;
  ph_status st = tokenizer_open_json((const char *)data, json_len, NULL, 0, &tok);
  if (st != PH_OK) {
    if (!tok || ph_tokenizer_error(tok)[0] == '\0') __builtin_trap();
    ph_tokenizer_free(tok);
    return 0;
  }
  ph_tokenizer_info info;
  if (ph_tokenizer_get_info(tok, &info) != PH_OK) __builtin_trap();
  for (int special = 0; special < 2; special++) {
    int64_t *ids = NULL, n = 0;
    st = ph_tokenizer_encode(tok, text, text_len, special, &ids, &n);
    if (st == PH_ERR_NO_MEMORY) break;
    if (st != PH_OK || !ids || n < 0) __builtin_trap();
    for (int64_t i = 0; i < n; i++)
      if (ids[i] < 0 || ids[i] >= info.vocab_size) __builtin_trap();
    char *dec = NULL;
    size_t dec_len = 0;
    if (ph_tokenizer_decode(tok, ids, n, 0, &dec, &dec_len) != PH_OK) __builtin_trap();
    if (!is_valid_utf8(dec, dec_len) || strlen(dec) > dec_len) __builtin_trap();
    /* the stream hands out decode's text, cut before the stop string */
    const char *stops[] = {"e "};
    ph_text_stream *s = NULL;
    if (ph_text_stream_create(tok, stops, 1, 0, &s) != PH_OK) __builtin_trap();
    tok_buf got = {0};
    int stopped = 0;
    for (int64_t i = 0; i < n && !stopped; i++) {
      const char *p;
      size_t len;
      if (ph_text_stream_push(s, ids[i], &p, &len, &stopped) != PH_OK) __builtin_trap();
      if (!is_valid_utf8(p, len)) __builtin_trap();
      tok_buf_append(&got, p, len);
    }
    const char *p;
    size_t len;
    if (ph_text_stream_finish(s, &p, &len) != PH_OK) __builtin_trap();
    tok_buf_append(&got, p, len);
    ph_text_stream_free(s);
    const char *cut = strstr(dec, "e ");
    size_t want = cut && (size_t)(cut - dec) < dec_len ? (size_t)(cut - dec) : dec_len;
    if (strlen(dec) < dec_len) want = got.n; /* a NUL in the text: strstr stops early */
    if (got.n != want || (want && memcmp(got.p, dec, want) != 0)) __builtin_trap();
    free(got.p);
    ph_free(dec);
    ph_free(ids);
  }
  (void)ph_tokenizer_token_id(tok, text_len ? "a" : "");
  ph_tokenizer_free(tok);
  return 0;
}
