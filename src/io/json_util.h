/* json_util — small helpers shared by the JSON readers and writers (config.json,
 * genai_config.json, inference_metadata.json). */
#ifndef PH_IO_JSON_UTIL_H
#define PH_IO_JSON_UTIL_H

#include <jansson.h>

#include "base/diag.h"

/* "an object", "an integer", "null", ... for error messages ("x is an array, expected ..."). */
const char *json_kind(const json_t *v);
/* The same for a type (JSON_TRUE and JSON_FALSE: "a boolean"), for what was expected. */
const char *json_type_kind(json_type t);

/* Writes text (json_dumps' result, owned: freed here, NULL meaning it ran out of memory) and a
 * final newline to path through base/wfile.h: a complete file replaces path, or nothing does. */
ph_status json_text_write(const char *path, char *text, diag *d);

#endif /* PH_IO_JSON_UTIL_H */
