/* diag — status table strings and detail messages. See diag.h. */
#include "base/diag.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *ph_status_name(ph_status status) {
  switch (status) {
#define NAME_CASE_(value, name, message)                                                           \
  case PH_##name:                                                                                  \
    return "PH_" #name;
    PH_STATUS_TABLE(NAME_CASE_)
#undef NAME_CASE_
  }
  return "PH_UNKNOWN_STATUS";
}

const char *ph_status_message(ph_status status) {
  switch (status) {
#define MESSAGE_CASE_(value, name, message)                                                        \
  case PH_##name:                                                                                  \
    return message;
    PH_STATUS_TABLE(MESSAGE_CASE_)
#undef MESSAGE_CASE_
  }
  return "unknown status";
}

void diag_clear(diag *d) {
  if (!d) return;
  d->status = PH_OK;
  d->msg[0] = '\0';
}

ph_status diag_set(diag *d, ph_status status, const char *fmt, ...) {
  if (!d) return status;
  d->status = status;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->msg, sizeof d->msg, fmt, ap);
  va_end(ap);
  return status;
}

ph_status diag_prefix(diag *d, const char *fmt, ...) {
  if (!d) return PH_OK;
  if (d->status == PH_OK) return PH_OK;
  char prefix[DIAG_MSG_BYTES];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  if (n < 0) return d->status;
  /* prefix ": " msg, truncated to fit; built by hand to keep the truncation explicit. */
  char joined[DIAG_MSG_BYTES];
  size_t pos = 0;
  const char *parts[3] = {prefix, ": ", d->msg};
  for (int i = 0; i < 3; i++)
    for (const char *c = parts[i]; *c && pos + 1 < sizeof joined; c++) joined[pos++] = *c;
  joined[pos] = '\0';
  memcpy(d->msg, joined, pos + 1);
  return d->status;
}

void diag_copy(diag *dst, const diag *src) {
  if (!dst || !src || dst == src) return;
  *dst = *src;
}
