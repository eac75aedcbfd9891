/* tokenizer — the internal view of an opened ph_tokenizer (the public API is the "text" section
 * of pagedhybrid.h): what the chat template renderer (chat.c) and the text stream read from it.
 *
 * A ph_tokenizer is immutable once ph_tokenizer_open returned: every accessor here borrows from
 * it (valid until ph_tokenizer_free) and may be called from many threads at once. */
#ifndef PH_TEXT_TOKENIZER_H
#define PH_TEXT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "pagedhybrid.h"

/* The chat template's source: chat_template.jinja when the directory has one, else
 * tokenizer_config.json's "chat_template" (a string; when it is a list of named templates, the
 * one named "default"). NULL when there is none. NUL-terminated, borrowed. */
const char *tokenizer_chat_template(const ph_tokenizer *tok);

/* Where the template came from ("chat_template.jinja" or "tokenizer_config.json"), for error
 * messages; NULL when there is no template. */
const char *tokenizer_chat_template_origin(const ph_tokenizer *tok);

/* The parsed tokenizer_config.json (borrowed; NULL when the directory has none). */
const json_t *tokenizer_config(const ph_tokenizer *tok);

/* The special tokens tokenizer_config.json names, as the template sees them (bos_token, ...). */
typedef enum tokenizer_special {
  TOKENIZER_BOS = 0,
  TOKENIZER_EOS = 1,
  TOKENIZER_UNK = 2,
  TOKENIZER_PAD = 3,
  TOKENIZER_N_SPECIAL = 4,
} tokenizer_special;

/* The content string of tokenizer_config.json's bos_token / eos_token / unk_token / pad_token,
 * whether the config gives a string or an AddedToken object ({"content": ...}); NULL when the
 * config has none (absent or null). NUL-terminated, borrowed. */
const char *tokenizer_special_token(const ph_tokenizer *tok, tokenizer_special which);

/* The config key of a special token ("bos_token", "eos_token", "unk_token", "pad_token"). */
const char *tokenizer_special_name(tokenizer_special which);

/* The text of one token as decode writes it (byte-level decoded; not yet checked for UTF-8):
 * *bytes points into the tokenizer (borrowed), *n_bytes its length. Returns 0 for an id outside
 * the vocabulary (then *bytes is NULL), 1 otherwise; *special (may be NULL) is 1 for an added
 * token marked special (what skip_special leaves out). */
int tokenizer_token_bytes(const ph_tokenizer *tok, int64_t id, const char **bytes, size_t *n_bytes,
                          int *special);

#endif /* PH_TEXT_TOKENIZER_H */
