/* tokenizer — opening a Hugging Face tokenizer (tokenizer.json, tokenizer_config.json,
 * chat_template.jinja, generation_config.json) and the public ph_tokenizer_* API.
 *
 * What is read (docs/tokenizer.md): model BPE (vocab, merges as "a b" strings or ["a", "b"]
 * pairs, ignore_merges, unk_token, fuse_unk); normalizer null / NFC / NFD / NFKC / NFKD /
 * Sequence; pre_tokenizer ByteLevel, or a Sequence of Split steps ending in ByteLevel; decoder
 * ByteLevel; post_processor null / ByteLevel / TemplateProcessing (its "single" special tokens);
 * added_tokens with their flags. Anything else is PH_ERR_TOKENIZER naming its JSON path: a
 * tokenizer we cannot reproduce exactly is refused, never approximated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "text/tokenizer_impl.h"

#define TOK_MAX_FILE_BYTES ((size_t)512 << 20)

static const char *const k_special_names[TOKENIZER_N_SPECIAL] = {"bos_token", "eos_token",
                                                                 "unk_token", "pad_token"};

/* GPT-2's pre-tokenizer regex: ByteLevel's use_regex. */
static const char k_gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ---- small JSON helpers ---- */

static int json_flag(const json_t *obj, const char *key, int dflt) {
  const json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) return dflt;
  return json_is_true(v) ? 1 : 0;
}

/* A string member, or NULL when absent/null; *bad set when present with another type. */
static const char *json_str(const json_t *obj, const char *key, int *bad) {
  const json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) return NULL;
  if (!json_is_string(v)) {
    *bad = 1;
    return NULL;
  }
  return json_string_value(v);
}

/* ---- vocabulary ---- */

/* Looks a token's byte-level string up: its id in the vocabulary, or -1. */
static int64_t vocab_lookup(const ph_tokenizer *tok, const char *s, size_t n, tok_buf *tmp) {
  tmp->n = 0;
  int r = byte_level_to_bytes(s, n, tmp);
  if (r == 1) return str_map_get(&tok->vocab, tok->key_blob, tmp->p, tmp->n);
  return str_map_get(&tok->vocab_other, tok->key_blob, s, n);
}

/* model.vocab and model.merges from jansson into flat lists (when the fast path was not taken).
 * Merges of the wrong shape are refused here, with their index. */
static ph_status lists_from_json(ph_tokenizer *tok, const json_t *model, model_lists *l) {
  diag *d = &tok->err;
  const json_t *vocab = json_object_get(model, "vocab");
  RETURN_ERROR_IF(!json_is_object(vocab), d, PH_ERR_TOKENIZER,
                  "model.vocab: expected an object of token -> id");
  const char *key;
  const json_t *val;
  json_object_foreach((json_t *)vocab, key, val) {
    size_t off = l->strs.n, n = strlen(key);
    RETURN_ERROR_IF(!tok_buf_append(&l->strs, key, n + 1) || l->strs.n > UINT32_MAX, d,
                    PH_ERR_NO_MEMORY, "model.vocab");
    int64_t id = json_is_integer(val) ? json_integer_value(val) : -1;
    RETURN_ERROR_IF(!model_lists_push_vocab(l, (uint32_t)off, (uint32_t)n, id), d, PH_ERR_NO_MEMORY,
                    "model.vocab");
  }
  const json_t *merges = json_object_get(model, "merges");
  RETURN_ERROR_IF(merges && !json_is_array(merges), d, PH_ERR_TOKENIZER,
                  "model.merges: expected an array");
  for (size_t i = 0; i < json_array_size(merges); i++) {
    const json_t *m = json_array_get(merges, i);
    size_t a = l->strs.n, alen, b, blen;
    if (json_is_string(m)) {
      const char *s = json_string_value(m), *sp = strchr(s, ' ');
      RETURN_ERROR_IF(!sp || strchr(sp + 1, ' ') || sp == s || sp[1] == '\0', d, PH_ERR_TOKENIZER,
                      "model.merges[%zu]: expected \"left right\", got \"%.80s\"", i, s);
      alen = (size_t)(sp - s);
      b = a + alen + 1;
      blen = strlen(sp + 1);
      RETURN_ERROR_IF(!tok_buf_append(&l->strs, s, alen + blen + 2), d, PH_ERR_NO_MEMORY,
                      "model.merges");
    } else if (json_is_array(m) && json_array_size(m) == 2 &&
               json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
      const char *sa = json_string_value(json_array_get(m, 0));
      const char *sb = json_string_value(json_array_get(m, 1));
      alen = strlen(sa);
      blen = strlen(sb);
      b = a + alen + 1;
      RETURN_ERROR_IF(!tok_buf_append(&l->strs, sa, alen + 1) ||
                          !tok_buf_append(&l->strs, sb, blen + 1),
                      d, PH_ERR_NO_MEMORY, "model.merges");
    } else {
      return diag_set(d, PH_ERR_TOKENIZER,
                      "model.merges[%zu]: expected a string \"left right\" or a pair of strings",
                      i);
    }
    RETURN_ERROR_IF(
        l->strs.n > UINT32_MAX ||
            !model_lists_push_merge(l, (uint32_t)a, (uint32_t)alen, (uint32_t)b, (uint32_t)blen),
        d, PH_ERR_NO_MEMORY, "model.merges");
  }
  return PH_OK;
}

static ph_status load_vocab(ph_tokenizer *tok, const model_lists *l, const json_t *added,
                            tok_buf *blob) {
  diag *d = &tok->err;
  size_t n_vocab = l->n_vocab;
  RETURN_ERROR_IF(n_vocab >= (1u << 30), d, PH_ERR_LIMIT, "model.vocab: %zu entries", n_vocab);
  int64_t max_id = -1;
  for (size_t i = 0; i < n_vocab; i++) {
    const vocab_item *v = &l->vocab[i];
    RETURN_ERROR_IF(v->id < 0 || v->id >= (1 << 30), d, PH_ERR_TOKENIZER,
                    "model.vocab[\"%.80s\"]: expected an id in [0, 2^30)", l->strs.p + v->off);
    if (v->id > max_id) max_id = v->id;
  }
  size_t n_added = json_array_size(added);
  for (size_t i = 0; i < n_added; i++) {
    const json_t *id = json_object_get(json_array_get(added, i), "id");
    RETURN_ERROR_IF(!json_is_integer(id) || json_integer_value(id) < 0 ||
                        json_integer_value(id) >= (1 << 30),
                    d, PH_ERR_TOKENIZER, "added_tokens[%zu].id: expected an id in [0, 2^30)", i);
    if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
  }
  RETURN_ERROR_IF(max_id < 0, d, PH_ERR_TOKENIZER, "model.vocab: empty");
  tok->n_ids = max_id + 1;
  tok->entry = calloc((size_t)tok->n_ids, sizeof *tok->entry);
  RETURN_ERROR_IF(!tok->entry, d, PH_ERR_NO_MEMORY, "vocabulary of %lld ids",
                  (long long)tok->n_ids);
  RETURN_ERROR_IF(!str_map_init(&tok->vocab, (uint32_t)n_vocab + 1) ||
                      !str_map_init(&tok->vocab_other, 16),
                  d, PH_ERR_NO_MEMORY, "vocabulary table");
  RETURN_ERROR_IF(!tok_buf_reserve(blob, l->strs.n), d, PH_ERR_NO_MEMORY, "vocabulary");
  for (size_t i = 0; i < n_vocab; i++) {
    const char *key = l->strs.p + l->vocab[i].off;
    size_t klen = l->vocab[i].len;
    int32_t id = (int32_t)l->vocab[i].id;
    size_t off = blob->n;
    int r = byte_level_to_bytes(key, klen, blob);
    RETURN_ERROR_IF(r < 0, d, PH_ERR_NO_MEMORY, "vocabulary");
    RETURN_ERROR_IF(blob->n > UINT32_MAX - 4 * klen, d, PH_ERR_LIMIT, "model.vocab: too large");
    str_map *m = &tok->vocab;
    if (r == 0) { /* outside the byte-level alphabet: kept as written (decode gives it raw) */
      blob->n = off;
      RETURN_ERROR_IF(!tok_buf_append(blob, key, klen), d, PH_ERR_NO_MEMORY, "vocabulary");
      m = &tok->vocab_other;
    }
    uint32_t len = (uint32_t)(blob->n - off);
    RETURN_ERROR_IF(str_map_get(m, blob->p, blob->p + off, len) >= 0, d, PH_ERR_TOKENIZER,
                    "model.vocab[\"%.80s\"]: the same token twice", key);
    RETURN_ERROR_IF(!str_map_put(m, blob->p, (uint32_t)off, len, id), d, PH_ERR_NO_MEMORY,
                    "vocabulary table");
    RETURN_ERROR_IF(tok->entry[id].valid, d, PH_ERR_TOKENIZER,
                    "model.vocab[\"%.80s\"]: id %d is used twice", key, id);
    tok->entry[id] = (tok_entry){(uint32_t)off, len, 1, 0};
  }
  return PH_OK;
}

static ph_status load_merges(ph_tokenizer *tok, const model_lists *l) {
  diag *d = &tok->err;
  size_t n = l->n_merge;
  RETURN_ERROR_IF(!merge_map_init(&tok->merges, n + 1), d, PH_ERR_NO_MEMORY, "merges table");
  tok_buf tmp = {0}, joined = {0};
  ph_status st = PH_OK;
  for (size_t i = 0; i < n; i++) {
    const merge_item *mi = &l->merge[i];
    const char *a = l->strs.p + mi->a_off, *b = l->strs.p + mi->b_off;
    size_t alen = mi->a_len, blen = mi->b_len;
    int64_t ia = vocab_lookup(tok, a, alen, &tmp), ib = vocab_lookup(tok, b, blen, &tmp);
    joined.n = 0;
    if (!tok_buf_append(&joined, a, alen) || !tok_buf_append(&joined, b, blen)) {
      st = diag_set(d, PH_ERR_NO_MEMORY, "merges");
      goto done;
    }
    int64_t im = vocab_lookup(tok, joined.p, joined.n, &tmp);
    if (ia < 0 || ib < 0 || im < 0) {
      const char *miss = ia < 0 ? a : ib < 0 ? b : joined.p;
      int miss_len = (int)(ia < 0 ? alen : ib < 0 ? blen : joined.n);
      st = diag_set(d, PH_ERR_TOKENIZER, "model.merges[%zu]: token \"%.*s\" is not in model.vocab",
                    i, miss_len > 80 ? 80 : miss_len, miss);
      goto done;
    }
    if (!merge_map_put(&tok->merges, (int32_t)ia, (int32_t)ib, (int32_t)i, (int32_t)im)) {
      st = diag_set(d, PH_ERR_NO_MEMORY, "merges table");
      goto done;
    }
  }
done:
  free(tmp.p);
  free(joined.p);
  return st;
}

static ph_status load_model(ph_tokenizer *tok, const json_t *root, model_lists *lists,
                            int have_lists, tok_buf *blob) {
  diag *d = &tok->err;
  const json_t *model = json_object_get(root, "model");
  RETURN_ERROR_IF(!json_is_object(model), d, PH_ERR_TOKENIZER, "model: expected an object");
  int bad = 0;
  const char *type = json_str(model, "type", &bad);
  RETURN_ERROR_IF(bad || (type && strcmp(type, "BPE") != 0), d, PH_ERR_TOKENIZER,
                  "model.type: \"%s\" is not supported (only BPE)", type ? type : "?");
  const json_t *dropout = json_object_get(model, "dropout");
  RETURN_ERROR_IF(dropout && !json_is_null(dropout) &&
                      !(json_is_number(dropout) && json_number_value(dropout) == 0.0),
                  d, PH_ERR_TOKENIZER, "model.dropout: BPE dropout is not supported");
  const char *prefix = json_str(model, "continuing_subword_prefix", &bad);
  const char *suffix = json_str(model, "end_of_word_suffix", &bad);
  RETURN_ERROR_IF(bad, d, PH_ERR_TOKENIZER,
                  "model: continuing_subword_prefix / end_of_word_suffix must be strings");
  RETURN_ERROR_IF(prefix && prefix[0], d, PH_ERR_TOKENIZER,
                  "model.continuing_subword_prefix: \"%.40s\" is not supported", prefix);
  RETURN_ERROR_IF(suffix && suffix[0], d, PH_ERR_TOKENIZER,
                  "model.end_of_word_suffix: \"%.40s\" is not supported", suffix);
  RETURN_ERROR_IF(json_flag(model, "byte_fallback", 0), d, PH_ERR_TOKENIZER,
                  "model.byte_fallback: true is not supported");
  tok->ignore_merges = json_flag(model, "ignore_merges", 0);
  tok->fuse_unk = json_flag(model, "fuse_unk", 0);
  const json_t *added = json_object_get(root, "added_tokens");
  RETURN_ERROR_IF(added && !json_is_array(added) && !json_is_null(added), d, PH_ERR_TOKENIZER,
                  "added_tokens: expected an array");
  if (!have_lists) FORWARD_IF_ERROR(lists_from_json(tok, model, lists));
  FORWARD_IF_ERROR(load_vocab(tok, lists, added, blob));
  tok->key_blob = blob->p;
  for (int b = 0; b < 256; b++) {
    char c = (char)b;
    tok->byte_id[b] = str_map_get(&tok->vocab, blob->p, &c, 1);
  }
  const char *unk = json_str(model, "unk_token", &bad);
  RETURN_ERROR_IF(bad, d, PH_ERR_TOKENIZER, "model.unk_token: expected a string or null");
  tok->unk_id = -1;
  if (unk) {
    tok_buf tmp = {0};
    tok->unk_id = vocab_lookup(tok, unk, strlen(unk), &tmp);
    free(tmp.p);
    RETURN_ERROR_IF(tok->unk_id < 0, d, PH_ERR_TOKENIZER,
                    "model.unk_token: \"%.80s\" is not in model.vocab", unk);
  }
  FORWARD_IF_ERROR(load_merges(tok, lists));
  /* the first round of every word looks up pairs of one-byte tokens: a direct table */
  tok->byte_pair = malloc(256 * 256 * sizeof *tok->byte_pair);
  RETURN_ERROR_IF(!tok->byte_pair, d, PH_ERR_NO_MEMORY, "byte-pair table");
  for (int a = 0; a < 256; a++)
    for (int b = 0; b < 256; b++) {
      const merge_slot *m = tok->byte_id[a] < 0 || tok->byte_id[b] < 0
                                ? NULL
                                : merge_map_get(&tok->merges, tok->byte_id[a], tok->byte_id[b]);
      tok->byte_pair[a << 8 | b] = m ? (bpe_pair){m->rank, m->id} : (bpe_pair){-1, -1};
    }
  return PH_OK;
}

static ph_status load_added(ph_tokenizer *tok, const json_t *root, tok_buf *blob) {
  diag *d = &tok->err;
  const json_t *added = json_object_get(root, "added_tokens");
  size_t n = json_array_size(added);
  if (n == 0) return PH_OK;
  tok->added = calloc(n, sizeof *tok->added);
  RETURN_ERROR_IF(!tok->added, d, PH_ERR_NO_MEMORY, "added tokens");
  for (size_t i = 0; i < n; i++) {
    const json_t *a = json_array_get(added, i);
    RETURN_ERROR_IF(!json_is_object(a), d, PH_ERR_TOKENIZER,
                    "added_tokens[%zu]: expected an object", i);
    int bad = 0;
    const char *content = json_str(a, "content", &bad);
    RETURN_ERROR_IF(bad || !content || !content[0], d, PH_ERR_TOKENIZER,
                    "added_tokens[%zu].content: expected a non-empty string", i);
    added_token *t = &tok->added[tok->n_added++];
    t->len = strlen(content);
    t->content = malloc(t->len + 1);
    RETURN_ERROR_IF(!t->content, d, PH_ERR_NO_MEMORY, "added tokens");
    memcpy(t->content, content, t->len + 1);
    t->id = json_integer_value(json_object_get(a, "id")); /* checked by load_vocab */
    t->special = (uint8_t)json_flag(a, "special", 0);
    t->single_word = (uint8_t)json_flag(a, "single_word", 0);
    t->lstrip = (uint8_t)json_flag(a, "lstrip", 0);
    t->rstrip = (uint8_t)json_flag(a, "rstrip", 0);
    /* Hugging Face's default: special tokens are not normalized, others are */
    t->normalized = (uint8_t)json_flag(a, "normalized", !t->special);
    /* decode: the byte-level decoder turns an added token into the bytes its characters stand
     * for when all of them are in the alphabet, else leaves its UTF-8 as written */
    size_t off = blob->n;
    int r = byte_level_to_bytes(t->content, t->len, blob);
    RETURN_ERROR_IF(r < 0, d, PH_ERR_NO_MEMORY, "added tokens");
    if (r == 0) {
      blob->n = off;
      RETURN_ERROR_IF(!tok_buf_append(blob, t->content, t->len), d, PH_ERR_NO_MEMORY,
                      "added tokens");
    }
    RETURN_ERROR_IF(blob->n > UINT32_MAX, d, PH_ERR_LIMIT, "added_tokens: too large");
    tok->entry[t->id] = (tok_entry){(uint32_t)off, (uint32_t)(blob->n - off), 1, t->special};
  }
  tok->key_blob = blob->p;
  return PH_OK;
}

/* Inserts the added tokens into the two tries (normalized ones as the normalizer writes them). */
static ph_status build_tries(ph_tokenizer *tok) {
  diag *d = &tok->err;
  tok_buf nb = {0};
  ph_status st = PH_OK;
  for (int i = 0; i < tok->n_added; i++) {
    const added_token *t = &tok->added[i];
    int ok;
    if (!t->normalized) {
      ok = added_trie_add(&tok->trie_raw, t->content, t->len, i);
    } else {
      ok = tokenizer_normalize(tok, t->content, t->len, &nb);
      if (ok) ok = added_trie_add(&tok->trie_norm, nb.p, nb.n, i);
    }
    if (!ok) {
      st = diag_set(d, PH_ERR_NO_MEMORY, "added-token trie");
      break;
    }
  }
  free(nb.p);
  return st;
}

/* ---- normalizer, pre-tokenizer, decoder, post-processor ---- */

static ph_status load_normalizer(ph_tokenizer *tok, const json_t *n, const char *path) {
  diag *d = &tok->err;
  if (!n || json_is_null(n)) return PH_OK;
  int bad = 0;
  const char *type = json_str(n, "type", &bad);
  RETURN_ERROR_IF(!type, d, PH_ERR_TOKENIZER, "%s.type: expected a string", path);
  if (strcmp(type, "Sequence") == 0) {
    const json_t *list = json_object_get(n, "normalizers");
    RETURN_ERROR_IF(!json_is_array(list), d, PH_ERR_TOKENIZER, "%s.normalizers: expected an array",
                    path);
    for (size_t i = 0; i < json_array_size(list); i++) {
      char sub[128];
      snprintf(sub, sizeof sub, "%s.normalizers[%zu]", path, i);
      FORWARD_IF_ERROR(load_normalizer(tok, json_array_get(list, i), sub));
    }
    return PH_OK;
  }
  norm_kind k = 0;
  if (strcmp(type, "NFC") == 0) k = NORM_NFC;
  if (strcmp(type, "NFD") == 0) k = NORM_NFD;
  if (strcmp(type, "NFKC") == 0) k = NORM_NFKC;
  if (strcmp(type, "NFKD") == 0) k = NORM_NFKD;
  RETURN_ERROR_IF(!k, d, PH_ERR_TOKENIZER, "%s.type: normalizer \"%.40s\" is not supported", path,
                  type);
  RETURN_ERROR_IF(tok->n_norm >= TOK_MAX_STEPS, d, PH_ERR_LIMIT, "%s: more than %d normalizers",
                  path, TOK_MAX_STEPS);
  tok->norm[tok->n_norm++] = k;
  return PH_OK;
}

static ph_status add_step(ph_tokenizer *tok, pretok_step st, const char *path) {
  if (tok->n_steps >= TOK_MAX_STEPS) {
    tok_regex_free(st.re);
    return diag_set(&tok->err, PH_ERR_LIMIT, "%s: more than %d pre-tokenizers", path,
                    TOK_MAX_STEPS);
  }
  tok->step[tok->n_steps++] = st;
  return PH_OK;
}

static void *compile_or_fail(ph_tokenizer *tok, const char *re, size_t len, const char *path) {
  char msg[300];
  void *code = tok_regex_compile(re, len, msg, sizeof msg);
  if (!code) diag_set(&tok->err, PH_ERR_TOKENIZER, "%s: %s", path, msg);
  return code;
}

/* Escapes a literal string for PCRE2 (\Q...\E cannot hold "\E"). */
static char *regex_escape(const char *s, size_t n, size_t *out_len) {
  char *o = malloc(2 * n + 1);
  if (!o) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (strchr("\\^$.|?*+()[]{}-/#", s[i]) && s[i] != '\0') o[k++] = '\\';
    o[k++] = s[i];
  }
  o[k] = '\0';
  *out_len = k;
  return o;
}

static ph_status load_pretok(ph_tokenizer *tok, const json_t *p, const char *path) {
  diag *d = &tok->err;
  RETURN_ERROR_IF(!p || json_is_null(p), d, PH_ERR_TOKENIZER,
                  "%s: null is not supported (a ByteLevel pre-tokenizer is required)", path);
  int bad = 0;
  const char *type = json_str(p, "type", &bad);
  RETURN_ERROR_IF(!type, d, PH_ERR_TOKENIZER, "%s.type: expected a string", path);
  RETURN_ERROR_IF(tok->n_steps > 0 && tok->step[tok->n_steps - 1].is_byte_level, d,
                  PH_ERR_TOKENIZER, "%s: a pre-tokenizer after ByteLevel is not supported", path);
  if (strcmp(type, "Sequence") == 0) {
    const json_t *list = json_object_get(p, "pretokenizers");
    RETURN_ERROR_IF(!json_is_array(list), d, PH_ERR_TOKENIZER,
                    "%s.pretokenizers: expected an array", path);
    for (size_t i = 0; i < json_array_size(list); i++) {
      char sub[128];
      snprintf(sub, sizeof sub, "%s.pretokenizers[%zu]", path, i);
      FORWARD_IF_ERROR(load_pretok(tok, json_array_get(list, i), sub));
    }
    return PH_OK;
  }
  pretok_step st;
  memset(&st, 0, sizeof st);
  if (strcmp(type, "ByteLevel") == 0) {
    st.is_byte_level = 1;
    st.add_prefix_space = json_flag(p, "add_prefix_space", 1);
    if (json_flag(p, "use_regex", 1)) {
      char sub[160];
      snprintf(sub, sizeof sub, "%s (GPT-2 regex)", path);
      st.re = compile_or_fail(tok, k_gpt2_regex, sizeof k_gpt2_regex - 1, sub);
      if (!st.re) return tok->err.status;
    }
    return add_step(tok, st, path);
  }
  RETURN_ERROR_IF(strcmp(type, "Split") != 0, d, PH_ERR_TOKENIZER,
                  "%s.type: pre-tokenizer \"%.40s\" is not supported (Split, ByteLevel, Sequence)",
                  path, type);
  const char *beh = json_str(p, "behavior", &bad);
  static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                      "Contiguous"};
  int found = -1;
  for (int i = 0; i < 5 && beh; i++)
    if (strcmp(beh, names[i]) == 0) found = i;
  RETURN_ERROR_IF(found < 0, d, PH_ERR_TOKENIZER,
                  "%s.behavior: \"%.40s\" is not one of Removed, Isolated, MergedWithPrevious, "
                  "MergedWithNext, Contiguous",
                  path, beh ? beh : "(missing)");
  st.behavior = (split_behavior)found;
  st.invert = json_flag(p, "invert", 0);
  const json_t *pat = json_object_get(p, "pattern");
  const char *re = json_str(pat, "Regex", &bad), *lit = json_str(pat, "String", &bad);
  char sub[160];
  if (re) {
    snprintf(sub, sizeof sub, "%s.pattern.Regex", path);
    st.re = compile_or_fail(tok, re, json_string_length(json_object_get(pat, "Regex")), sub);
  } else if (lit) {
    size_t n = json_string_length(json_object_get(pat, "String")), elen = 0;
    RETURN_ERROR_IF(n == 0, d, PH_ERR_TOKENIZER, "%s.pattern.String: empty", path);
    char *esc = regex_escape(lit, n, &elen);
    RETURN_ERROR_IF(!esc, d, PH_ERR_NO_MEMORY, "%s.pattern", path);
    snprintf(sub, sizeof sub, "%s.pattern.String", path);
    st.re = compile_or_fail(tok, esc, elen, sub);
    free(esc);
  } else {
    return diag_set(d, PH_ERR_TOKENIZER,
                    "%s.pattern: expected {\"Regex\": ...} or {\"String\": ...}", path);
  }
  if (!st.re) return tok->err.status;
  return add_step(tok, st, path);
}

static ph_status load_decoder(ph_tokenizer *tok, const json_t *dec) {
  int bad = 0;
  const char *type = json_str(dec, "type", &bad);
  if (type && strcmp(type, "Sequence") == 0) { /* a Sequence holding just ByteLevel */
    const json_t *list = json_object_get(dec, "decoders");
    if (json_array_size(list) == 1) {
      dec = json_array_get(list, 0);
      type = json_str(dec, "type", &bad);
    }
  }
  RETURN_ERROR_IF(!type || strcmp(type, "ByteLevel") != 0, &tok->err, PH_ERR_TOKENIZER,
                  "decoder: \"%.40s\" is not supported (only ByteLevel)", type ? type : "null");
  return PH_OK;
}

static ph_status load_post(ph_tokenizer *tok, const json_t *post) {
  diag *d = &tok->err;
  if (!post || json_is_null(post)) return PH_OK;
  int bad = 0;
  const char *type = json_str(post, "type", &bad);
  RETURN_ERROR_IF(!type, d, PH_ERR_TOKENIZER, "post_processor.type: expected a string");
  if (strcmp(type, "ByteLevel") == 0) return PH_OK; /* offsets only: the ids are unchanged */
  RETURN_ERROR_IF(strcmp(type, "TemplateProcessing") != 0, d, PH_ERR_TOKENIZER,
                  "post_processor.type: \"%.40s\" is not supported (ByteLevel, "
                  "TemplateProcessing)",
                  type);
  tok->has_template_post = 1;
  const json_t *single = json_object_get(post, "single");
  const json_t *specials = json_object_get(post, "special_tokens");
  RETURN_ERROR_IF(!json_is_array(single), d, PH_ERR_TOKENIZER,
                  "post_processor.single: expected an array");
  int seen_seq = 0;
  for (size_t i = 0; i < json_array_size(single); i++) {
    const json_t *piece = json_array_get(single, i);
    const json_t *sp = json_object_get(piece, "SpecialToken");
    if (json_object_get(piece, "Sequence")) {
      RETURN_ERROR_IF(seen_seq, d, PH_ERR_TOKENIZER,
                      "post_processor.single[%zu]: a second Sequence", i);
      seen_seq = 1;
      continue;
    }
    const char *name = json_str(sp, "id", &bad);
    RETURN_ERROR_IF(!name, d, PH_ERR_TOKENIZER,
                    "post_processor.single[%zu]: expected {\"SpecialToken\": {\"id\": ...}} or "
                    "{\"Sequence\": ...}",
                    i);
    const json_t *ids = json_object_get(json_object_get(specials, name), "ids");
    RETURN_ERROR_IF(json_array_size(ids) != 1 || !json_is_integer(json_array_get(ids, 0)), d,
                    PH_ERR_TOKENIZER,
                    "post_processor.special_tokens[\"%.40s\"].ids: expected one id", name);
    int64_t id = json_integer_value(json_array_get(ids, 0));
    RETURN_ERROR_IF(id < 0 || id >= tok->n_ids || !tok->entry[id].valid, d, PH_ERR_TOKENIZER,
                    "post_processor.special_tokens[\"%.40s\"]: id %lld is not a token", name,
                    (long long)id);
    int *n = seen_seq ? &tok->n_post_suffix : &tok->n_post_prefix;
    int64_t *dst = seen_seq ? tok->post_suffix : tok->post_prefix;
    RETURN_ERROR_IF(*n >= 4, d, PH_ERR_TOKENIZER, "post_processor.single: too many special tokens");
    dst[(*n)++] = id;
  }
  return PH_OK;
}

/* ---- tokenizer_config.json ---- */

static ph_status load_config(ph_tokenizer *tok) {
  diag *d = &tok->err;
  tok->bos_id = -1;
  tok->eos_id = -1;
  if (!tok->config) return PH_OK;
  RETURN_ERROR_IF(!json_is_object(tok->config), d, PH_ERR_TOKENIZER,
                  "tokenizer_config.json: expected an object");
  for (int k = 0; k < TOKENIZER_N_SPECIAL; k++) {
    const json_t *v = json_object_get(tok->config, k_special_names[k]);
    if (!v || json_is_null(v)) continue;
    if (json_is_object(v)) v = json_object_get(v, "content");
    RETURN_ERROR_IF(!json_is_string(v), d, PH_ERR_TOKENIZER,
                    "tokenizer_config.json %s: expected a string or {\"content\": string}",
                    k_special_names[k]);
    tok->special_str[k] = strdup(json_string_value(v));
    RETURN_ERROR_IF(!tok->special_str[k], d, PH_ERR_NO_MEMORY, "special tokens");
  }
  if (tok->special_str[TOKENIZER_BOS])
    tok->bos_id = ph_tokenizer_token_id(tok, tok->special_str[TOKENIZER_BOS]);
  if (tok->special_str[TOKENIZER_EOS])
    tok->eos_id = ph_tokenizer_token_id(tok, tok->special_str[TOKENIZER_EOS]);
  tok->add_bos = json_flag(tok->config, "add_bos_token", 0) && tok->bos_id >= 0;
  tok->add_eos = json_flag(tok->config, "add_eos_token", 0) && tok->eos_id >= 0;
  const json_t *tpl = json_object_get(tok->config, "chat_template");
  if (json_is_array(tpl)) { /* named templates: the "default" one */
    const json_t *pick = NULL;
    for (size_t i = 0; i < json_array_size(tpl); i++) {
      const json_t *e = json_array_get(tpl, i);
      const json_t *name = json_object_get(e, "name");
      if (json_is_string(name) && strcmp(json_string_value(name), "default") == 0)
        pick = json_object_get(e, "template");
    }
    tpl = pick;
  }
  if (json_is_string(tpl)) {
    tok->chat_template = strdup(json_string_value(tpl));
    RETURN_ERROR_IF(!tok->chat_template, d, PH_ERR_NO_MEMORY, "chat template");
    tok->chat_template_origin = "tokenizer_config.json";
  }
  return PH_OK;
}

/* ---- open ---- */

static ph_status open_json(ph_tokenizer *tok, const char *json, size_t len, const char *cfg,
                           size_t cfg_len) {
  diag *d = &tok->err;
  json_error_t jerr;
  model_lists lists;
  char *rest = NULL;
  size_t rest_len = 0;
  /* the fast path for model.vocab and model.merges; jansson reads the rest (or, when the fast
   * path is not taken, everything) */
  const int fast = json && tokenizer_json_fast(json, len, &lists, &rest, &rest_len);
  json_t *root = fast ? json_loadb(rest, rest_len, 0, &jerr)
                      : json_loadb(json ? json : "", json ? len : 0, 0, &jerr);
  free(rest);
  if (!fast) memset(&lists, 0, sizeof lists);
  if (!root) {
    model_lists_free(&lists);
    return diag_set(d, PH_ERR_JSON, "tokenizer.json line %d column %d: %s", jerr.line, jerr.column,
                    jerr.text);
  }
  tok_buf blob = {0};
  ph_status st = PH_OK;
  if (!json_is_object(root)) {
    st = diag_set(d, PH_ERR_TOKENIZER, "tokenizer.json: expected an object");
    goto done;
  }
  const json_t *trunc = json_object_get(root, "truncation"),
               *pad = json_object_get(root, "padding");
  if ((trunc && !json_is_null(trunc)) || (pad && !json_is_null(pad))) {
    st = diag_set(d, PH_ERR_TOKENIZER, "%s: not supported (expected null)",
                  trunc && !json_is_null(trunc) ? "truncation" : "padding");
    goto done;
  }
  if ((st = load_model(tok, root, &lists, fast, &blob)) != PH_OK) goto done;
  if ((st = load_added(tok, root, &blob)) != PH_OK) goto done;
  if ((st = load_normalizer(tok, json_object_get(root, "normalizer"), "normalizer")) != PH_OK)
    goto done;
  if ((st = load_pretok(tok, json_object_get(root, "pre_tokenizer"), "pre_tokenizer")) != PH_OK)
    goto done;
  if (tok->n_steps == 0 || !tok->step[tok->n_steps - 1].is_byte_level) {
    st = diag_set(d, PH_ERR_TOKENIZER,
                  "pre_tokenizer: must end with ByteLevel (only byte-level BPE is supported)");
    goto done;
  }
  if ((st = load_decoder(tok, json_object_get(root, "decoder"))) != PH_OK) goto done;
  if ((st = load_post(tok, json_object_get(root, "post_processor"))) != PH_OK) goto done;
  if ((st = build_tries(tok)) != PH_OK) goto done;
  if (cfg) {
    tok->config = json_loadb(cfg, cfg_len, 0, &jerr);
    if (!tok->config) {
      st = diag_set(d, PH_ERR_JSON, "tokenizer_config.json line %d column %d: %s", jerr.line,
                    jerr.column, jerr.text);
      goto done;
    }
  }
  st = load_config(tok);
done:
  tok->key_blob = blob.p; /* owned by tok from here (also on failure) */
  model_lists_free(&lists);
  json_decref(root);
  return st;
}

ph_status tokenizer_open_json(const char *json, size_t len, const char *config_json,
                              size_t config_len, ph_tokenizer **out) {
  if (!out) return PH_ERR_INVALID_ARGUMENT;
  *out = NULL;
  ph_tokenizer *tok = calloc(1, sizeof *tok);
  if (!tok) return PH_ERR_NO_MEMORY;
  *out = tok;
  return open_json(tok, json, len, config_json, config_len);
}

/* Reads dir/name into *text (NULL when the file does not exist). */
static ph_status read_optional(const char *dir, const char *name, char **text, size_t *len,
                               diag *d) {
  char path[4096];
  *text = NULL;
  *len = 0;
  RETURN_ERROR_IF((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path, d,
                  PH_ERR_INVALID_ARGUMENT, "path too long: %s/%s", dir, name);
  if (!path_exists(path)) return PH_OK;
  return file_read_all(path, TOK_MAX_FILE_BYTES, text, len, d);
}

static ph_status load_generation_config(ph_tokenizer *tok, const char *dir) {
  diag *d = &tok->err;
  char *text = NULL;
  size_t len = 0;
  FORWARD_IF_ERROR(read_optional(dir, "generation_config.json", &text, &len, d));
  if (text) {
    json_error_t jerr;
    json_t *g = json_loadb(text, len, 0, &jerr);
    free(text);
    RETURN_ERROR_IF(!g, d, PH_ERR_JSON, "generation_config.json line %d: %s", jerr.line, jerr.text);
    const json_t *e = json_object_get(g, "eos_token_id");
    ph_status st = PH_OK;
    if (json_is_integer(e)) {
      tok->eos_ids[tok->n_eos_ids++] = json_integer_value(e);
    } else if (json_is_array(e)) {
      for (size_t i = 0; i < json_array_size(e) && st == PH_OK; i++) {
        const json_t *v = json_array_get(e, i);
        if (!json_is_integer(v))
          st = diag_set(d, PH_ERR_CONFIG_INVALID,
                        "generation_config.json eos_token_id[%zu]: expected an integer", i);
        else if (tok->n_eos_ids >= PH_MAX_STOP_TOKENS)
          st = diag_set(d, PH_ERR_LIMIT, "generation_config.json eos_token_id: more than %d ids",
                        PH_MAX_STOP_TOKENS);
        else
          tok->eos_ids[tok->n_eos_ids++] = json_integer_value(v);
      }
    } else if (e && !json_is_null(e)) {
      st = diag_set(d, PH_ERR_CONFIG_INVALID,
                    "generation_config.json eos_token_id: expected an integer or a list");
    }
    json_decref(g);
    FORWARD_IF_ERROR(st);
    for (int32_t i = 0; i < tok->n_eos_ids; i++)
      RETURN_ERROR_IF(tok->eos_ids[i] < 0 || tok->eos_ids[i] >= tok->n_ids ||
                          !tok->entry[tok->eos_ids[i]].valid,
                      d, PH_ERR_CONFIG_INVALID,
                      "generation_config.json eos_token_id: %lld is not a token of tokenizer.json",
                      (long long)tok->eos_ids[i]);
  }
  if (tok->n_eos_ids == 0 && tok->eos_id >= 0) tok->eos_ids[tok->n_eos_ids++] = tok->eos_id;
  return PH_OK;
}

ph_status ph_tokenizer_open(const char *dir, ph_tokenizer **out) {
  if (!out) return PH_ERR_INVALID_ARGUMENT;
  *out = NULL;
  if (!dir) return PH_ERR_INVALID_ARGUMENT;
  ph_tokenizer *tok = calloc(1, sizeof *tok);
  if (!tok) return PH_ERR_NO_MEMORY;
  *out = tok;
  diag *d = &tok->err;
  char *json = NULL, *cfg = NULL;
  size_t len = 0, cfg_len = 0;
  char path[4096];
  if ((size_t)snprintf(path, sizeof path, "%s/tokenizer.json", dir) >= sizeof path)
    return diag_set(d, PH_ERR_INVALID_ARGUMENT, "path too long: %s", dir);
  if (!path_exists(path)) return diag_set(d, PH_ERR_NOT_FOUND, "%s: no tokenizer.json", dir);
  ph_status st = file_read_all(path, TOK_MAX_FILE_BYTES, &json, &len, d);
  if (st == PH_OK) st = read_optional(dir, "tokenizer_config.json", &cfg, &cfg_len, d);
  if (st == PH_OK) st = open_json(tok, json, len, cfg, cfg_len);
  free(json);
  free(cfg);
  if (st == PH_OK) {
    char *tpl = NULL;
    size_t tpl_len = 0;
    st = read_optional(dir, "chat_template.jinja", &tpl, &tpl_len, d);
    if (tpl) {
      free(tok->chat_template);
      tok->chat_template = tpl;
      tok->chat_template_origin = "chat_template.jinja";
    }
  }
  if (st == PH_OK) st = load_generation_config(tok, dir);
  if (st != PH_OK) diag_prefix(d, "%s", dir);
  return st;
}

void ph_tokenizer_free(ph_tokenizer *tok) {
  if (!tok) return;
  str_map_free(&tok->vocab);
  str_map_free(&tok->vocab_other);
  merge_map_free(&tok->merges);
  free(tok->byte_pair);
  free(tok->key_blob);
  free(tok->entry);
  for (int i = 0; i < tok->n_added; i++) free(tok->added[i].content);
  free(tok->added);
  added_trie_free(&tok->trie_raw);
  added_trie_free(&tok->trie_norm);
  for (int i = 0; i < tok->n_steps; i++) tok_regex_free(tok->step[i].re);
  json_decref(tok->config);
  free(tok->chat_template);
  for (int k = 0; k < TOKENIZER_N_SPECIAL; k++) free(tok->special_str[k]);
  free(tok);
}

const char *ph_tokenizer_error(const ph_tokenizer *tok) { return tok ? tok->err.msg : ""; }

void ph_free(void *p) { free(p); }

ph_status ph_tokenizer_get_info(const ph_tokenizer *tok, ph_tokenizer_info *out) {
  if (!tok || !out) return PH_ERR_INVALID_ARGUMENT;
  memset(out, 0, sizeof *out);
  out->vocab_size = tok->n_ids;
  out->bos_id = tok->bos_id;
  out->add_bos = tok->has_template_post ? tok->n_post_prefix > 0 && tok->bos_id >= 0 &&
                                              tok->post_prefix[0] == tok->bos_id
                                        : tok->add_bos;
  out->n_eos_ids = tok->n_eos_ids;
  memcpy(out->eos_ids, tok->eos_ids, sizeof out->eos_ids);
  out->has_chat_template = tok->chat_template != NULL;
  return PH_OK;
}

ph_status ph_tokenizer_encode(const ph_tokenizer *tok, const char *text, size_t len,
                              int add_special, int64_t **ids, int64_t *n) {
  if (ids) *ids = NULL;
  if (n) *n = 0;
  if (!tok || !ids || !n || (!text && len > 0)) return PH_ERR_INVALID_ARGUMENT;
  tok_buf clean = {0};
  tok_ids out = {0};
  ph_status st = PH_OK;
  if (!utf8_repair(text ? text : "", len, &clean)) {
    st = PH_ERR_NO_MEMORY;
    goto done;
  }
  if (add_special) {
    if (tok->has_template_post) {
      for (int i = 0; i < tok->n_post_prefix; i++)
        if (!tok_ids_push(&out, tok->post_prefix[i])) st = PH_ERR_NO_MEMORY;
    } else if (tok->add_bos && !tok_ids_push(&out, tok->bos_id)) {
      st = PH_ERR_NO_MEMORY;
    }
    if (st != PH_OK) goto done;
  }
  st = tokenizer_encode_text(tok, clean.p, clean.n, &out, NULL);
  if (st != PH_OK) goto done;
  if (add_special) {
    if (tok->has_template_post) {
      for (int i = 0; i < tok->n_post_suffix; i++)
        if (!tok_ids_push(&out, tok->post_suffix[i])) st = PH_ERR_NO_MEMORY;
    } else if (tok->add_eos && !tok_ids_push(&out, tok->eos_id)) {
      st = PH_ERR_NO_MEMORY;
    }
    if (st != PH_OK) goto done;
  }
  size_t n_out = out.n;
  if (!out.p && !tok_ids_push(&out, 0)) { /* never hand out NULL for an empty result */
    st = PH_ERR_NO_MEMORY;
    goto done;
  }
  *ids = out.p;
  *n = (int64_t)n_out;
  out.p = NULL;
done:
  free(clean.p);
  free(out.p);
  return st;
}

ph_status ph_tokenizer_decode(const ph_tokenizer *tok, const int64_t *ids, int64_t n,
                              int skip_special, char **text, size_t *len) {
  if (text) *text = NULL;
  if (len) *len = 0;
  if (!tok || !text || !len || n < 0 || (!ids && n > 0)) return PH_ERR_INVALID_ARGUMENT;
  tok_buf raw = {0}, clean = {0};
  for (int64_t i = 0; i < n; i++) {
    int64_t id = ids[i];
    if (id < 0) {
      free(raw.p);
      return PH_ERR_INVALID_ARGUMENT;
    }
    /* an id that is no token (beyond vocab_size, as a padded model vocabulary generates, or a
     * gap) gives no text: Hugging Face's decode drops it too */
    if (id >= tok->n_ids || !tok->entry[id].valid) continue;
    const tok_entry *e = &tok->entry[id];
    if (skip_special && e->special) continue;
    if (!tok_buf_append(&raw, tok->key_blob + e->off, e->len)) {
      free(raw.p);
      return PH_ERR_NO_MEMORY;
    }
  }
  int ok = utf8_repair(raw.p ? raw.p : "", raw.n, &clean);
  free(raw.p);
  if (!ok) {
    free(clean.p);
    return PH_ERR_NO_MEMORY;
  }
  *text = clean.p;
  *len = clean.n;
  return PH_OK;
}

int64_t ph_tokenizer_token_id(const ph_tokenizer *tok, const char *token) {
  if (!tok || !token) return -1;
  size_t n = strlen(token);
  for (int i = 0; i < tok->n_added; i++)
    if (tok->added[i].len == n && memcmp(tok->added[i].content, token, n) == 0)
      return tok->added[i].id;
  tok_buf tmp = {0};
  int64_t id = vocab_lookup(tok, token, n, &tmp);
  free(tmp.p);
  return id;
}

/* ---- tokenizer.h ---- */

const char *tokenizer_chat_template(const ph_tokenizer *tok) {
  return tok ? tok->chat_template : NULL;
}

const char *tokenizer_chat_template_origin(const ph_tokenizer *tok) {
  return tok && tok->chat_template ? tok->chat_template_origin : NULL;
}

const json_t *tokenizer_config(const ph_tokenizer *tok) { return tok ? tok->config : NULL; }

const char *tokenizer_special_token(const ph_tokenizer *tok, tokenizer_special which) {
  if (!tok || (int)which < 0 || which >= TOKENIZER_N_SPECIAL) return NULL;
  return tok->special_str[which];
}

const char *tokenizer_special_name(tokenizer_special which) {
  if ((int)which < 0 || which >= TOKENIZER_N_SPECIAL) return NULL;
  return k_special_names[which];
}

int tokenizer_token_bytes(const ph_tokenizer *tok, int64_t id, const char **bytes, size_t *n_bytes,
                          int *special) {
  *bytes = NULL;
  *n_bytes = 0;
  if (special) *special = 0;
  if (!tok || id < 0 || id >= tok->n_ids || !tok->entry[id].valid) return 0;
  *bytes = tok->key_blob + tok->entry[id].off;
  *n_bytes = tok->entry[id].len;
  if (special) *special = tok->entry[id].special;
  return 1;
}
