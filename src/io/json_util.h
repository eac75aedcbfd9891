/* json_util — small helpers shared by the JSON readers (config.json, genai_config.json). */
#ifndef PH_IO_JSON_UTIL_H
#define PH_IO_JSON_UTIL_H

#include <jansson.h>

/* "an object", "an integer", "null", ... for error messages ("x is an array, expected ..."). */
const char *json_kind(const json_t *v);

#endif /* PH_IO_JSON_UTIL_H */
