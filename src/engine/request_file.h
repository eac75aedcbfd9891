/* request_file — the requests JSONL file of `pagedhybrid run --requests FILE.jsonl`, and the
 * JSON line written for each finished request (docs/requests-jsonl.md).
 *
 * Owns: reading untrusted text as requests (one request_spec per non-blank line: id, the prompt
 * as token ids, text or chat messages, sampling parameters and stop strings, arrival and removal
 * steps), and formatting one result line. Text is kept as text: this module cannot tokenize
 * (src/text sits beside the engine, not below it), so the caller (tools/cmd_run.c) encodes a
 * text prompt and renders messages through the public text API.
 * Every key is checked: unknown keys, wrong types, out-of-range values and duplicate ids are
 * errors that name the file, the line and the key. Token ids are checked against 0 only: the
 * vocabulary is the engine's to check, per request, so one bad request does not stop the others.
 *
 * Streaming: request_file_open reads the file once, in blocks, parsing and checking every line
 * (transiently) so that every error is reported before anything runs, and keeps per line only a
 * request_entry (where the line is, when it arrives: 32 bytes). request_file_get parses one
 * line again, when its request is needed. Memory is the index plus the longest line plus what
 * the caller keeps, never the whole file. A line's prompt_tokens array of plain integers is read
 * by a small scanner (8 bytes a token, no JSON tree) and blanked before jansson parses the rest
 * of the line (jansson's tree costs ~50 bytes a token: a 50 MB line took 1.2 GB); the rest of a
 * line may hold at most REQUEST_LINE_MAX_OTHER bytes that are not whitespace.
 *
 * Must never: exit or abort on bad input, keep pointers into the caller's text beyond what is
 * documented, or hand back a partly filled result (on failure the out parameter is empty).
 */
#ifndef PH_ENGINE_REQUEST_FILE_H
#define PH_ENGINE_REQUEST_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "base/diag.h"
#include "engine/sampler.h"

#define REQUEST_ID_BYTES       64           /* ids are at most 63 bytes */
#define REQUEST_FILE_MAX_BYTES (1ull << 30) /* larger files are refused (offsets fit 32 bits) */
#define REQUEST_LINE_MAX_OTHER                                                                     \
  (1u << 20) /* non-whitespace bytes of a line outside a plain                                     \
                integer prompt_tokens array */

/* What a line's prompt is: exactly one of the keys prompt_tokens, prompt, messages. */
typedef enum request_input {
  REQUEST_INPUT_TOKENS = 0,   /* "prompt_tokens": ids, in prompt/n_prompt */
  REQUEST_INPUT_TEXT = 1,     /* "prompt": text, in prompt_text */
  REQUEST_INPUT_MESSAGES = 2, /* "messages": a chat, in messages_json (+ chat_extra_json) */
} request_input;

#define REQUEST_MAX_STOPS 16 /* stop strings a request may give (PH_MAX_STOP_STRINGS) */

typedef struct request_spec {
  char id[REQUEST_ID_BYTES]; /* NUL-terminated, unique within the file; integer ids in decimal */
  request_input input;
  int64_t *prompt;                /* TOKENS: [n_prompt] token ids >= 0, owned by the spec (or its
                                     list); NULL otherwise */
  int64_t n_prompt;               /* TOKENS: >= 1; 0 otherwise */
  char *prompt_text;              /* TEXT: non-empty UTF-8, NUL-terminated (none inside), owned */
  size_t prompt_text_len;         /* its bytes */
  char *messages_json;            /* MESSAGES: the non-empty array of message objects, compact JSON
                                     (UTF-8, NUL-terminated), owned */
  char *chat_extra_json;          /* MESSAGES: NULL, or a compact JSON object of template variables:
                                     "tools" and the members of "chat_template_kwargs", owned */
  int add_generation_prompt;      /* MESSAGES: 1 unless the line says false */
  int n_stops;                    /* stop strings, 0..REQUEST_MAX_STOPS */
  char *stops[REQUEST_MAX_STOPS]; /* each non-empty, NUL-terminated UTF-8, owned */
  sampling_params sampling; /* valid for an unknown vocabulary (sampling_params_validate, 0) */
  int64_t arrive_step;      /* >= 0: the engine step at which the request becomes visible */
  int64_t remove_step;      /* -1: never; else >= arrive_step: the step the engine aborts it */
  int line;                 /* 1-based line of the file it came from (for the engine's errors) */
  int64_t *draft_tokens;    /* replay tokens, owned (sampling.speculative points here) */
  int speculative_given;    /* the line has a "speculative" object */
} request_spec;

/* 1 when r needs the model's tokenizer: a text prompt, messages or stop strings. */
int request_spec_needs_tokenizer(const request_spec *r);

/* Frees r's prompt (ids, text, messages), stop strings and replay tokens; leaves them NULL and 0.
 * NULL is a no-op. */
void request_spec_free(request_spec *r);

/* ---- a requests file, indexed ---------------------------------------------------------------- */

typedef struct request_file request_file;

/* What the index keeps of one request (a non-blank line), in file order. */
typedef struct request_entry {
  int64_t arrive_step;     /* as request_spec */
  int64_t remove_step;     /* as request_spec */
  uint32_t offset;         /* of the line's first byte in the input */
  uint32_t length;         /* bytes of the line, without its '\n' */
  int32_t line;            /* 1-based line number */
  int32_t needs_tokenizer; /* request_spec_needs_tokenizer of its line */
} request_entry;

/* Opens path (a regular file of at most REQUEST_FILE_MAX_BYTES, else PH_ERR_LIMIT; refused
 * without blocking if it is not a regular file) and indexes it: every line is parsed and
 * checked, ids are kept unique, so *out holds at least one request and each is known valid.
 * Errors: PH_ERR_NOT_FOUND / PH_ERR_IO for the file, then (the first in file order, labelled
 * "<path>:<line>:")
 *   PH_ERR_JSON                  a line that is not valid JSON (message has line and column)
 *   PH_ERR_CONFIG_MISSING_FIELD  a line without "id", or without any of "prompt_tokens",
 *                                "prompt", "messages"
 *   PH_ERR_CONFIG_INVALID        a line that is not an object, an unknown key, a wrong type, a
 *                                value out of range, two of prompt_tokens/prompt/messages,
 *                                max_tokens and max_new_tokens that differ, chat keys without
 *                                messages, a duplicate id, a file with no requests
 *   PH_ERR_LIMIT                 more than REQUEST_LINE_MAX_OTHER bytes of a line outside a
 *                                plain integer prompt_tokens array (a text prompt or messages
 *                                count: at most 1 MiB of them a line)
 *   PH_ERR_NO_MEMORY
 * The file stays open until request_file_close. *out is NULL on failure. */
ph_status request_file_open(const char *path, request_file **out, diag *d);

/* The same over text[len] in memory (need not be NUL-terminated; any bytes), labelled label
 * (NULL reads as "requests"). text is borrowed: it must outlive *out. */
ph_status request_file_open_text(const char *text, size_t len, const char *label,
                                 request_file **out, diag *d);

int64_t request_file_count(const request_file *f); /* >= 1 */

/* Entry i in [0, count) in file order; NULL outside. */
const request_entry *request_file_entry(const request_file *f, int64_t i);

/* Parses request i into *out (zeroed first; its prompt, stop strings and replay tokens are
 * allocated: request_spec_free).
 * The line was checked when the file was opened; errors now are PH_ERR_IO (the file can no
 * longer be read, or changed size or time since it was opened: named), PH_ERR_NO_MEMORY, or
 * the parser's error if the bytes changed. Not thread-safe (one read buffer per file). */
ph_status request_file_get(request_file *f, int64_t i, request_spec *out, diag *d);

/* Closes the file and frees the index. NULL is a no-op. */
void request_file_close(request_file *f);

/* ---- the whole list in memory (small inputs, tests, fuzzing) -----------------------------------
 */

typedef struct request_list {
  request_spec *items; /* [n], in file order; NULL when n == 0 */
  int64_t n;
} request_list;

/* Every request of text[len] (request_file_open_text, then request_file_get for each): the
 * same rules and errors. *out is {NULL, 0} on failure; request_list_free(out) otherwise. */
ph_status request_list_parse(const char *text, size_t len, const char *label, request_list *out,
                             diag *d);

/* Frees every prompt and the items; leaves *l as {NULL, 0}. NULL is a no-op. */
void request_list_free(request_list *l);

/* ---- the result line --------------------------------------------------------------------------
 */

/* Timing and counts of one finished request, as the engine measured them. A negative time means
 * "never reached" (e.g. no first token before an abort) and is written as null. */
typedef struct request_timing {
  double queue_ms;     /* arrival to first scheduled */
  double ttft_ms;      /* arrival to first generated token */
  double total_ms;     /* arrival to finish */
  int64_t n_prompt;    /* prompt tokens */
  int64_t n_generated; /* generated tokens: must equal n_tokens of the result */
  int64_t n_preempted; /* times the request was preempted */
  int64_t n_drafted;   /* speculative drafts verified (the keys are written when > 0) */
  int64_t n_accepted;  /* of which kept */
  int64_t n_cached;    /* prompt tokens served from the prefix cache, 0..n_prompt (the key is
                          written when > 0) */
} request_timing;

/* One output line for a finished request, compact JSON without a newline, keys in this order:
 * id, text (request_result_to_json_text only), tokens, finish_reason, n_prompt_tokens,
 * n_generated_tokens, n_preemptions, n_drafted_tokens and n_accepted_tokens (when n_drafted > 0: a
 * speculative request), time_in_queue_ms, time_to_first_token_ms, total_ms, n_cached_tokens (when
 * n_cached > 0: a prefix-cache hit), and "error" when error_message is given. Times are rounded
 * to the microsecond (at most 3 decimals of ms).
 * Arguments: id, NUL-terminated UTF-8; tokens, [n_tokens] generated ids (not the prompt), NULL
 * allowed when n_tokens == 0; finish_reason, "length", "stop", "aborted" or "error"; t, times
 * finite (negative = null), counts >= 0, n_accepted <= n_drafted, n_cached <= n_prompt;
 * error_message, NULL or UTF-8 text, only with finish_reason "error". *out_line is malloc'd, the
 * caller frees it. PH_ERR_INVALID_ARGUMENT (naming the argument) for anything outside the above,
 * PH_ERR_NO_MEMORY; *out_line is NULL on failure. */
ph_status request_result_to_json(const char *id, const int64_t *tokens, int64_t n_tokens,
                                 const char *finish_reason, const request_timing *t,
                                 const char *error_message, char **out_line, diag *d);

/* The same line with the generated text: key "text" (text[text_len], any bytes that are UTF-8,
 * NUL included) right after id; text NULL writes no "text" key (request_result_to_json).
 * PH_ERR_INVALID_ARGUMENT also for text that is not UTF-8. */
ph_status request_result_to_json_text(const char *id, const char *text, size_t text_len,
                                      const int64_t *tokens, int64_t n_tokens,
                                      const char *finish_reason, const request_timing *t,
                                      const char *error_message, char **out_line, diag *d);

#endif /* PH_ENGINE_REQUEST_FILE_H */
