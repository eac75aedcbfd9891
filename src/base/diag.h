/* diag — a status plus a detail message, and the check-and-return macros every module uses.
 *
 * Library functions that can fail take a `diag *` (may be NULL) and return a ph_status. On
 * failure they fill the diag with the status and one line naming the context: which file,
 * which tensor, which field, expected vs got. Callers add context on the way up with
 * diag_prefix(). Objects in the public API embed a diag and expose its message.
 *
 * Flat error flow (as zstd's error_private.h):
 *   RETURN_ERROR_IF(cond, d, PH_ERR_X, "fmt", ...)  fills d and returns PH_ERR_X when cond holds
 *   FORWARD_IF_ERROR(expr)                           returns expr's status when it is not PH_OK
 * Functions owning several resources use one `fail:` label and diag_set() before `goto fail`.
 */
#ifndef PH_BASE_DIAG_H
#define PH_BASE_DIAG_H

#include "pagedhybrid.h"

#define DIAG_MSG_BYTES 512

typedef struct diag {
  ph_status status;
  char msg[DIAG_MSG_BYTES]; /* NUL-terminated; "" when status == PH_OK */
} diag;

#if defined(__GNUC__)
#define PH_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define PH_PRINTF(fmt_index, first_arg)
#endif

/* Resets d to PH_OK and "". d may be NULL. */
void diag_clear(diag *d);

/* Sets status and message (printf-style, truncated to fit) and returns status. d may be NULL.
 * status must not be PH_OK. */
ph_status diag_set(diag *d, ph_status status, const char *fmt, ...) PH_PRINTF(3, 4);

/* Prepends "context: " to the message of a failed diag (no-op on PH_OK or NULL). Returns the
 * diag's status so it can end a function: `return diag_prefix(d, "%s", path);`. */
ph_status diag_prefix(diag *d, const char *fmt, ...) PH_PRINTF(2, 3);

/* Copies src into dst (dst may be NULL). */
void diag_copy(diag *dst, const diag *src);

#define RETURN_ERROR_IF(cond, d, status, ...)                                                      \
  do {                                                                                             \
    if (cond) return diag_set((d), (status), __VA_ARGS__);                                         \
  } while (0)

#define FORWARD_IF_ERROR(expr)                                                                     \
  do {                                                                                             \
    ph_status forward_status_ = (expr);                                                            \
    if (forward_status_ != PH_OK) return forward_status_;                                          \
  } while (0)

#endif /* PH_BASE_DIAG_H */
