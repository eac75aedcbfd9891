/* jinja — our interpreter of the Jinja subset that Hugging Face chat templates use
 * (docs/chat-template.md): parse a template's source once into a compiled template, render it
 * with a context of JSON values as many times as needed.
 *
 * The reference is @huggingface/jinja 0.5.11 (what transformers.js renders chat templates with):
 * for every construct we support, the rendered bytes are the reference's, including its
 * departures from Python's Jinja (docs/chat-template.md lists them). The template is read with
 * trim_blocks and lstrip_blocks on, as apply_chat_template sets them. Whatever we do not support,
 * or cannot render as the reference would, is a PH_ERR_TEMPLATE naming the template line: never
 * a different prompt.
 *
 * Independent of the tokenizer: the caller builds the context (chat.c does it for
 * ph_chat_render). A compiled template is immutable; any number of threads may render it at
 * once. Hostile templates and contexts are bounded by jinja_limits (nesting, output bytes,
 * memory, loop iterations, macro recursion): exceeding one is PH_ERR_TEMPLATE, never a crash.
 *
 * Files: jinja_lex.c (preprocessing and tokens), jinja_parse.c (tokens to a tree),
 * jinja_value.c (values, strings as JavaScript sees them, JSON text), jinja_eval.c (statements
 * and expressions), jinja_filters.c (filters, tests, methods, globals). jinja_internal.h holds
 * what they share.
 */
#ifndef PH_TEXT_JINJA_H
#define PH_TEXT_JINJA_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/diag.h"

typedef struct jinja_template jinja_template;

/* Largest template source jinja_parse accepts (bytes). */
#define JINJA_MAX_SOURCE_BYTES (4u << 20)
/* Deepest nesting of blocks and expressions the parser accepts. */
#define JINJA_MAX_NESTING      200

typedef struct jinja_limits {
  size_t max_output_bytes;     /* rendered text (default 16 MiB) */
  size_t max_memory_bytes;     /* values made while rendering (default 256 MiB) */
  int64_t max_loop_iterations; /* for-loop iterations and range() items, all loops together
                                  (default 1,000,000) */
  int max_call_depth;          /* nested macro calls (default 64) */
} jinja_limits;

void jinja_limits_default(jinja_limits *lim);

/* Compiles len bytes of template source (UTF-8). origin names the source in messages
 * ("tokenizer_config.json"; may be NULL). PH_ERR_TEMPLATE for a syntax error or a construct we
 * do not support ("origin:LINE: what"), PH_ERR_NO_MEMORY. *out is set only on success. */
ph_status jinja_parse(const char *src, size_t len, const char *origin, jinja_template **out,
                      diag *d);

/* NULL-safe. */
void jinja_free(jinja_template *t);

/* Renders t with the members of vars (a JSON object; may be NULL) as variables, besides the
 * globals (true/false/none, namespace, range, raise_exception, strftime_now). lim NULL: the
 * defaults. *out: malloc'ed, NUL-terminated, *out_len bytes without the NUL (the text itself may
 * hold NULs written by \x00 escapes). PH_ERR_TEMPLATE ("origin:LINE: what") for
 * raise_exception, a type error, an unsupported operation or an exceeded limit;
 * PH_ERR_NO_MEMORY. */
ph_status jinja_render(const jinja_template *t, const json_t *vars, const jinja_limits *lim,
                       char **out, size_t *out_len, diag *d);

#endif /* PH_TEXT_JINJA_H */
