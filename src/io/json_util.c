/* json_util — see json_util.h. */
#include "io/json_util.h"

#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"

const char *json_kind(const json_t *v) { return json_type_kind(json_typeof(v)); }

const char *json_type_kind(json_type t) {
  switch (t) {
  case JSON_OBJECT:
    return "an object";
  case JSON_ARRAY:
    return "an array";
  case JSON_STRING:
    return "a string";
  case JSON_INTEGER:
    return "an integer";
  case JSON_REAL:
    return "a real number";
  case JSON_TRUE:
  case JSON_FALSE:
    return "a boolean";
  case JSON_NULL:
    return "null";
  }
  return "an unknown JSON value";
}

ph_status json_text_write(const char *path, char *text, diag *d) {
  RETURN_ERROR_IF(!text, d, PH_ERR_NO_MEMORY, "out of memory building %s", path);
  const size_t n = strlen(text);
  char *with_nl = realloc(text, n + 2);
  if (!with_nl) {
    free(text);
    return diag_set(d, PH_ERR_NO_MEMORY, "out of memory building %s", path);
  }
  with_nl[n] = '\n';
  with_nl[n + 1] = '\0';
  ph_status s = file_write_all(path, with_nl, n + 1, d);
  free(with_nl);
  return s;
}
