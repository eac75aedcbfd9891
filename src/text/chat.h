/* chat — rendering a chat template with a conversation (ph_chat_render in pagedhybrid.h), split
 * so the pieces can be used without an opened tokenizer: chat_context builds the variables a
 * template sees, as Hugging Face's apply_chat_template passes them; chat_render_source renders a
 * template source with them (jinja.h).
 *
 * The context, in this order: messages (the JSON array given), tools and documents (null unless
 * extra sets them, as apply_chat_template passes tools=None), the special tokens that are
 * strings (bos_token, eos_token, unk_token, pad_token; absent when the config has none) and
 * additional_special_tokens when the config lists them, add_generation_prompt, then every member
 * of extra (which may override a special token, tools or documents, never messages or
 * add_generation_prompt).
 */
#ifndef PH_TEXT_CHAT_H
#define PH_TEXT_CHAT_H

#include <jansson.h>

#include "base/diag.h"

#define CHAT_N_SPECIAL 4 /* bos, eos, unk, pad: tokenizer.h's tokenizer_special order */

/* special[i]: the content of the i-th special token, or NULL. config (may be NULL): the parsed
 * tokenizer_config.json, read for additional_special_tokens. *ctx: a new JSON object (the caller
 * json_decref's it). PH_ERR_JSON when messages_json is not a JSON array or extra_json not an
 * object (the message names the offset). */
ph_status chat_context(const json_t *config, const char *const special[CHAT_N_SPECIAL],
                       const char *messages_json, const char *extra_json, int add_generation_prompt,
                       json_t **ctx, diag *d);

/* Parses src (origin names it in messages) and renders it with ctx. *text malloc'ed. */
ph_status chat_render_source(const char *src, const char *origin, const json_t *ctx, char **text,
                             size_t *len, diag *d);

#endif /* PH_TEXT_CHAT_H */
