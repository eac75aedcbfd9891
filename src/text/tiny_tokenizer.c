/* tiny_tokenizer — see tiny_tokenizer.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/fmap.h"
#include "text/tiny_tokenizer.h"
#include "text/tokenizer_impl.h"

/* What the merges are learned from: plain English prose written for this project. */
static const char k_training_text[] =
    "The little model reads the text one piece at a time and writes the next piece after it. "
    "It has never seen a real book, so what it writes is noise, but the words still go in and "
    "come out the same way they do for the large models: the text is split into pieces, the "
    "pieces into tokens, and the tokens back into the same text. This is a test of that path. "
    "The user asks a question and the assistant gives an answer. The system sets the rules of "
    "the conversation. When the answer is done, the assistant ends its turn, and the user can "
    "ask again. There is nothing more to it than that: in, through, and out again, the same "
    "text that went in. Then the next turn starts, and the one after that, and so on.";

static const char *const k_specials[3] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

/* ChatML, written for this project: each message as <|im_start|>role\ncontent<|im_end|>\n, then
 * the assistant's opening when add_generation_prompt. The content: a string as it is; a list of
 * OpenAI-style parts as its text parts joined with newlines, as serve joins them ({"type": "text",
 * "text": ...}; other parts left out); null or missing (an assistant turn holding only tool_calls)
 * as empty. */
static const char k_chat_template[] =
    "{%- for message in messages %}"
    "{%- if message['content'] is string %}{%- set content = message['content'] %}"
    "{%- elif message['content'] is iterable and message['content'] is not mapping %}"
    "{%- set ns = namespace(text='', sep='') %}"
    "{%- for part in message['content'] %}"
    "{%- if part is mapping and part['type'] == 'text' %}"
    "{%- set ns.text = ns.text + ns.sep + part['text'] %}{%- set ns.sep = '\\n' %}{%- endif %}"
    "{%- endfor %}"
    "{%- set content = ns.text %}"
    "{%- else %}{%- set content = '' %}{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

typedef struct tiny_vocab {
  char **str; /* byte-level string of each id (NULL for the specials' ids) */
  int64_t n;  /* ids used */
  int32_t byte_id[256];
} tiny_vocab;

static int64_t find_str(const tiny_vocab *v, const char *s) {
  for (int64_t i = 0; i < v->n; i++)
    if (v->str[i] && strcmp(v->str[i], s) == 0) return i;
  return -1;
}

static char *concat(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  char *s = malloc(na + nb + 1);
  if (!s) return NULL;
  memcpy(s, a, na);
  memcpy(s + na, b, nb + 1);
  return s;
}

/* The training text as words (a space joins the word after it, as the GPT-2 pre-tokenizer
 * keeps it), each an array of ids; -1 ends a word. */
static int32_t *training_words(const tiny_vocab *v, size_t *n_out) {
  size_t n = sizeof k_training_text - 1;
  int32_t *w = malloc((2 * n + 2) * sizeof *w);
  if (!w) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)k_training_text[i];
    int letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    int prev_letter =
        i > 0 && ((k_training_text[i - 1] | 32) >= 'a' && (k_training_text[i - 1] | 32) <= 'z');
    if (i > 0 && !(letter && (prev_letter || k_training_text[i - 1] == ' '))) w[k++] = -1;
    w[k++] = v->byte_id[c];
  }
  w[k++] = -1;
  *n_out = k;
  return w;
}

/* Learns merges into v (and appends them to merges as [left, right] pairs) until v->n reaches
 * vocab_size or no pair occurs twice. 0: out of memory. */
static int learn_merges(tiny_vocab *v, int64_t vocab_size, json_t *merges) {
  size_t n_w = 0;
  int32_t *w = training_words(v, &n_w);
  if (!w) return 0;
  int ok = 1;
  while (v->n < vocab_size) {
    /* the most frequent adjacent pair; ties: the lowest (left, right) */
    int32_t best_l = -1, best_r = -1;
    int best_count = 1;
    for (size_t i = 0; i + 1 < n_w; i++) {
      if (w[i] < 0 || w[i + 1] < 0) continue;
      int count = 0;
      for (size_t j = 0; j + 1 < n_w; j++)
        if (w[j] == w[i] && w[j + 1] == w[i + 1] && w[j] >= 0) count++, j++;
      if (count > best_count || (count == best_count && best_l >= 0 &&
                                 (w[i] < best_l || (w[i] == best_l && w[i + 1] < best_r)))) {
        best_count = count;
        best_l = w[i];
        best_r = w[i + 1];
      }
    }
    if (best_l < 0) break;
    char *s = concat(v->str[best_l], v->str[best_r]);
    if (!s) {
      ok = 0;
      break;
    }
    int64_t id = find_str(v, s);
    if (id < 0) {
      id = v->n++;
      v->str[id] = s;
    } else {
      free(s);
    }
    json_t *pair = json_pack("[ss]", v->str[best_l], v->str[best_r]);
    if (!pair || json_array_append_new(merges, pair) != 0) {
      ok = 0;
      break;
    }
    size_t k = 0; /* apply the merge, left to right */
    for (size_t i = 0; i < n_w; i++) {
      if (i + 1 < n_w && w[i] == best_l && w[i + 1] == best_r && w[i] >= 0) {
        w[k++] = (int32_t)id;
        i++;
      } else {
        w[k++] = w[i];
      }
    }
    n_w = k;
  }
  free(w);
  return ok;
}

static ph_status write_json(const char *dir, const char *name, json_t *j, diag *d) {
  char path[4096];
  RETURN_ERROR_IF((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path, d,
                  PH_ERR_INVALID_ARGUMENT, "path too long: %s/%s", dir, name);
  char *text = json_dumps(j, JSON_INDENT(1));
  RETURN_ERROR_IF(!text, d, PH_ERR_NO_MEMORY, "%s", name);
  size_t n = strlen(text);
  text[n] = '\n'; /* json_dumps leaves room for its NUL: write it as the final newline */
  ph_status st = file_write_all(path, text, n + 1, d);
  free(text);
  return st;
}

static json_t *tokenizer_json(tiny_vocab *v, int64_t vocab_size, int64_t first_special) {
  json_t *added = json_array(), *merges = json_array(), *vocab = json_object();
  json_t *root = NULL;
  if (!added || !merges || !vocab) goto fail;
  for (int k = 0; k < 3; k++) {
    json_t *t = json_pack("{sI ss sb sb sb sb sb}", "id", (json_int_t)(first_special + k),
                          "content", k_specials[k], "single_word", 0, "lstrip", 0, "rstrip", 0,
                          "normalized", 0, "special", 1);
    if (!t || json_array_append_new(added, t) != 0) goto fail;
  }
  if (!learn_merges(v, vocab_size, merges)) goto fail;
  for (int64_t i = 0; i < v->n; i++)
    if (v->str[i] && json_object_set_new(vocab, v->str[i], json_integer(i)) != 0) goto fail;
  /* GPT-2's layout: NFC, ByteLevel with its regex, byte-level decoding */
  root = json_pack("{ss sn sn so s{ss} s{ss sb sb sb} s{ss sb sb sb} s{ss sb sb sb} "
                   "s{ss sn sn sn sn sb sb sb so so}}",
                   "version", "1.0", "truncation", "padding", "added_tokens", added, "normalizer",
                   "type", "NFC", "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0,
                   "trim_offsets", 1, "use_regex", 1, "post_processor", "type", "ByteLevel",
                   "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0, "decoder", "type",
                   "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 1, "model",
                   "type", "BPE", "dropout", "unk_token", "continuing_subword_prefix",
                   "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0, "ignore_merges", 0,
                   "vocab", vocab, "merges", merges);
  added = merges = vocab = NULL; /* owned by root now, or freed by json_pack's failure */
  return root;
fail:
  json_decref(added);
  json_decref(merges);
  json_decref(vocab);
  return NULL;
}

ph_status tiny_tokenizer_write(const char *dir, int64_t vocab_size, diag *d) {
  RETURN_ERROR_IF(vocab_size < TINY_TOKENIZER_MIN_VOCAB, d, PH_ERR_INVALID_ARGUMENT,
                  "vocab_size %lld is too small for a byte-level tokenizer (at least %d)",
                  (long long)vocab_size, TINY_TOKENIZER_MIN_VOCAB);
  tiny_vocab v;
  memset(&v, 0, sizeof v);
  int64_t cap = vocab_size < 4096 ? vocab_size : 4096; /* merges stop long before */
  v.str = calloc((size_t)cap, sizeof *v.str);
  RETURN_ERROR_IF(!v.str, d, PH_ERR_NO_MEMORY, "tiny tokenizer");
  const int all_bytes = vocab_size >= 259;
  ph_status st = PH_OK;
  json_t *tj = NULL, *cfg = NULL, *gen = NULL;
  for (int b = 0; b < 256; b++) {
    v.byte_id[b] = -1;
    if (!all_bytes && (b == 0xC0 || b == 0xC1 || b >= 0xF5)) continue; /* never in UTF-8 */
    char s[4];
    size_t n = utf8_encode1(byte_level_cp[b], s);
    v.str[v.n] = malloc(n + 1);
    if (!v.str[v.n]) {
      st = diag_set(d, PH_ERR_NO_MEMORY, "tiny tokenizer");
      goto done;
    }
    memcpy(v.str[v.n], s, n);
    v.str[v.n][n] = '\0';
    v.byte_id[b] = (int32_t)v.n++;
  }
  const int64_t first_special = v.n;
  v.n += 3; /* their str stays NULL: they are added tokens, not vocabulary entries */
  tj = tokenizer_json(&v, cap, first_special);
  if (!tj) {
    st = diag_set(d, PH_ERR_NO_MEMORY, "tiny tokenizer.json");
    goto done;
  }
  const json_int_t eot = first_special, im_end = first_special + 2;
  cfg = json_pack("{sb sb sn ss ss sn sI ss ss sb}", "add_bos_token", 0, "add_eos_token", 0,
                  "bos_token", "eos_token", k_specials[2], "pad_token", k_specials[0], "unk_token",
                  "model_max_length", (json_int_t)262144, "tokenizer_class",
                  "PreTrainedTokenizerFast", "chat_template", k_chat_template,
                  "clean_up_tokenization_spaces", 0);
  gen = json_pack("{s[II] sI}", "eos_token_id", im_end, eot, "pad_token_id", eot);
  if (!cfg || !gen) {
    st = diag_set(d, PH_ERR_NO_MEMORY, "tiny tokenizer config");
    goto done;
  }
  if ((st = write_json(dir, "tokenizer.json", tj, d)) != PH_OK ||
      (st = write_json(dir, "tokenizer_config.json", cfg, d)) != PH_OK ||
      (st = write_json(dir, "generation_config.json", gen, d)) != PH_OK)
    goto done;
  ph_tokenizer *tok = NULL; /* what was written must open */
  st = ph_tokenizer_open(dir, &tok);
  if (st != PH_OK) diag_set(d, st, "the tiny tokenizer does not open: %s", ph_tokenizer_error(tok));
  ph_tokenizer_free(tok);
done:
  json_decref(tj);
  json_decref(cfg);
  json_decref(gen);
  for (int64_t i = 0; i < cap; i++) free(v.str[i]);
  free(v.str);
  return st;
}
