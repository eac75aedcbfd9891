/* request_file — the requests JSONL file of `pagedhybrid run --requests FILE.jsonl`, and the
 * JSON line written for each finished request (docs/requests-jsonl.md).
 *
 * Owns: reading untrusted text into a request_list (one request_spec per non-blank line: id,
 * prompt token ids, sampling parameters, arrival and removal steps), and formatting one result
 * line. Every key is checked: unknown keys, wrong types, out-of-range values and duplicate ids
 * are errors that name the file, the line and the key. Token ids are checked against 0 only:
 * the vocabulary is the engine's to check, per request, so one bad request does not stop the
 * others. Must never: exit or abort on bad input, keep pointers into the caller's text, or hand
 * back a partly filled list (on failure *out is empty).
 */
#ifndef PH_ENGINE_REQUEST_FILE_H
#define PH_ENGINE_REQUEST_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "base/diag.h"
#include "engine/sampler.h"

#define REQUEST_ID_BYTES       64           /* ids are at most 63 bytes */
#define REQUEST_FILE_MAX_BYTES (1ull << 30) /* request_list_read refuses larger files */

typedef struct request_spec {
  char id[REQUEST_ID_BYTES]; /* NUL-terminated, unique within the file; integer ids in decimal */
  int64_t *prompt;           /* [n_prompt] token ids >= 0, owned by the list */
  int64_t n_prompt;          /* >= 1 */
  sampling_params sampling;  /* valid for an unknown vocabulary (sampling_params_validate, 0) */
  int64_t arrive_step;       /* >= 0: the engine step at which the request becomes visible */
  int64_t remove_step;       /* -1: never; else >= arrive_step: the step the engine aborts it */
  int line;                  /* 1-based line of the file it came from (for the engine's errors) */
} request_spec;

typedef struct request_list {
  request_spec *items; /* [n], in file order; NULL when n == 0 */
  int64_t n;
} request_list;

/* Parses text[len] (need not be NUL-terminated; may hold any bytes). Each line holding anything
 * but spaces, tabs and '\r' is one JSON object; lines end at '\n' ("\r\n" is fine). label names
 * the input in messages ("<label>:<line>: ..."); NULL reads as "requests".
 * Errors (first one in file order; *out is then {NULL, 0}):
 *   PH_ERR_JSON                  a line that is not valid JSON (message has line and column)
 *   PH_ERR_CONFIG_MISSING_FIELD  a line without "id" or "prompt_tokens"
 *   PH_ERR_CONFIG_INVALID        a line that is not an object, an unknown key, a wrong type, a
 *                                value out of range, a duplicate id, a file with no requests
 *   PH_ERR_NO_MEMORY
 * On success *out owns its memory: request_list_free(out). */
ph_status request_list_parse(const char *text, size_t len, const char *label, request_list *out,
                             diag *d);

/* Reads the file at path (at most REQUEST_FILE_MAX_BYTES, else PH_ERR_LIMIT) and parses it with
 * the path as label. PH_ERR_NOT_FOUND / PH_ERR_IO for the file, then as request_list_parse. */
ph_status request_list_read(const char *path, request_list *out, diag *d);

/* Frees every prompt and the items; leaves *l as {NULL, 0}. NULL is a no-op. */
void request_list_free(request_list *l);

/* Timing and counts of one finished request, as the engine measured them. A negative time means
 * "never reached" (e.g. no first token before an abort) and is written as null. */
typedef struct request_timing {
  double queue_ms;     /* arrival to first scheduled */
  double ttft_ms;      /* arrival to first generated token */
  double total_ms;     /* arrival to finish */
  int64_t n_prompt;    /* prompt tokens */
  int64_t n_generated; /* generated tokens: must equal n_tokens of the result */
  int64_t n_preempted; /* times the request was preempted */
} request_timing;

/* One output line for a finished request, compact JSON without a newline, keys in this order:
 * id, tokens, finish_reason, n_prompt_tokens, n_generated_tokens, n_preemptions,
 * time_in_queue_ms, time_to_first_token_ms, total_ms, and "error" when error_message is given.
 *   id             NUL-terminated UTF-8
 *   tokens         [n_tokens] generated ids (not the prompt); NULL allowed when n_tokens == 0
 *   finish_reason  "length", "stop", "aborted" or "error"
 *   t              timing; times finite (negative = null), counts >= 0
 *   error_message  NULL, or UTF-8 text, only with finish_reason "error"
 * *out_line is malloc'd, the caller frees it. PH_ERR_INVALID_ARGUMENT (naming the argument) for
 * anything outside the above, PH_ERR_NO_MEMORY; *out_line is NULL on failure. */
ph_status request_result_to_json(const char *id, const int64_t *tokens, int64_t n_tokens,
                                 const char *finish_reason, const request_timing *t,
                                 const char *error_message, char **out_line, diag *d);

#endif /* PH_ENGINE_REQUEST_FILE_H */
