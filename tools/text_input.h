/* text_input — the command line's text side, over the public text API (include/pagedhybrid.h,
 * section "text"): opening a model's tokenizer with an error that names the missing file,
 * reading a chat file, turning a text prompt or a chat into token ids, the tokenizer's EOS ids
 * joining a request's stop ids, and a request's streamed text (ph_text_stream) with its stop
 * strings. Shared by generate, tokenize and run (docs/cli.md, docs/requests-jsonl.md).
 *
 * Every function returns a ph_status and fills the diag with a message naming the file or the
 * option; none prints. Strings handed out are malloc'ed: free() them (the text API's own strings
 * are copied out of ph_free'd memory here, so callers need one rule).
 */
#ifndef PH_TOOLS_TEXT_INPUT_H
#define PH_TOOLS_TEXT_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include "pagedhybrid.h"
#include "tools_api.h"

/* Opens dir's tokenizer. A directory without tokenizer.json is PH_ERR_NOT_FOUND saying
 * "<dir>/tokenizer.json not found: <what> needs the model's tokenizer (...)[; <hint>]" (what:
 * "--prompt", "req.jsonl:3 (...)"; hint: NULL, or what works without one); any other failure
 * carries ph_tokenizer_error's detail. */
ph_status text_open_tokenizer(const char *dir, const char *what, const char *hint,
                              ph_tokenizer **out, diag *d);

/* 1 when dir holds a tokenizer.json (a regular file); 0 otherwise. */
int text_has_tokenizer(const char *dir);

/* A chat file: a JSON array of messages, or an object with "messages" (that array), an optional
 * "add_generation_prompt" (true or false; default true) and other members, which are template
 * variables ("tools", "enable_thinking", ...). *messages_json: the array, compact; *extra_json:
 * NULL, or an object of the template variables, compact (malloc'ed, free()). Errors name the
 * file: PH_ERR_NOT_FOUND/PH_ERR_IO, PH_ERR_JSON (with line and column), PH_ERR_CONFIG_INVALID
 * (not an array or object, no "messages", an empty array, an element not an object,
 * add_generation_prompt not a boolean). */
ph_status text_read_chat_file(const char *path, char **messages_json, char **extra_json,
                              int *add_generation_prompt, diag *d);

/* [{"role": "user", "content": text}], compact (malloc'ed, free()). */
ph_status text_user_turn(const char *text, char **messages_json, diag *d);

/* The chat rendered by the tokenizer's template (malloc'ed, NUL-terminated, *len bytes; free()).
 * Errors: ph_chat_render's (PH_ERR_NOT_FOUND: no template; PH_ERR_TEMPLATE: its line). */
ph_status text_render_chat(const ph_tokenizer *tok, const char *messages_json,
                           const char *extra_json, int add_generation_prompt, char **text,
                           size_t *len, diag *d);

/* Text to ids (malloc'ed, free()): ph_tokenizer_encode with add_special. */
ph_status text_encode(const ph_tokenizer *tok, const char *text, size_t len, int add_special,
                      int64_t **ids, int64_t *n, diag *d);

/* A chat to ids: rendered with add_generation_prompt, encoded with add_special 0 (the template
 * writes every special token itself). */
ph_status text_chat_ids(const ph_tokenizer *tok, const char *messages_json, const char *extra_json,
                        int add_generation_prompt, int64_t **ids, int64_t *n, diag *d);

/* Adds the tokenizer's EOS ids (generation_config.json's eos_token_id, else its eos_token) to
 * sp's stop ids, each once, unless sp->ignore_eos. PH_ERR_LIMIT when the union exceeds
 * PH_MAX_STOP_TOKENS. */
ph_status text_join_eos(const ph_tokenizer *tok, ph_sampling_params *sp, diag *d);

/* ---- one request's text, as it is generated ---------------------------------------------------
 * The generated tokens go through a ph_text_stream (special tokens skipped, the stop strings cut
 * the text); the text handed out is kept, and so is the number of tokens up to the one that
 * completed a stop string (the request is cut there: finish "stop"). */
typedef struct text_out {
  ph_text_stream *stream;
  char *text; /* [len] the text handed out so far, NUL-terminated; malloc'ed */
  size_t len, cap;
  int64_t n_tokens; /* tokens pushed */
  int stopped;      /* a stop string completed at token n_tokens - 1: nothing more is pushed */
  int finished;     /* text_out_finish done */
} text_out;

/* stops: n_stops (<= PH_MAX_STOP_STRINGS) non-empty strings. */
ph_status text_out_init(text_out *o, const ph_tokenizer *tok, const char *const *stops, int n_stops,
                        diag *d);
/* Pushes one generated token; *piece, *piece_len: the new text (valid until the next call on o;
 * may be empty). After a stop nothing is pushed (PH_OK, empty piece). An id the tokenizer does
 * not know (a model vocabulary padded beyond the tokenizer's, as Qwen's is) gives no text and is
 * counted: ph_text_stream drops such ids, as Hugging Face's decode does. */
ph_status text_out_push(text_out *o, int64_t token, const char **piece, size_t *piece_len, diag *d);
/* Generation ended (not by a stop string): the text held back. Once; then as push. */
ph_status text_out_finish(text_out *o, const char **piece, size_t *piece_len, diag *d);
void text_out_free(text_out *o);

#endif /* PH_TOOLS_TEXT_INPUT_H */
