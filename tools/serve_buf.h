/* serve_buf — a growable byte buffer for the server's response bodies and SSE events.
 *
 * sbuf starts zeroed ({0}); every append returns 0 on success and -1 when memory ran out, after
 * which the buffer keeps what it had (and `failed` stays set, so a caller may check once at the
 * end). data is NUL-terminated whenever len > 0. sbuf_free leaves it zeroed and reusable.
 */
#ifndef PH_TOOLS_SERVE_BUF_H
#define PH_TOOLS_SERVE_BUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct sbuf {
  char *data;
  size_t len, cap;
  int failed; /* an append ran out of memory */
} sbuf;

int sbuf_append(sbuf *b, const char *s, size_t n);
int sbuf_puts(sbuf *b, const char *s);
int sbuf_printf(sbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void sbuf_reset(sbuf *b); /* len 0, memory kept */
void sbuf_free(sbuf *b);

/* Appends s[0, n) to out with every byte that does not start or continue a valid UTF-8
 * character (shortest form, no surrogates, <= U+10FFFF) replaced by U+FFFD, so that out is valid
 * UTF-8 (JSON strings must be). Returns 0 or -1 (out of memory). */
int serve_utf8_clean(const char *s, size_t n, sbuf *out);
/* 1 when s[0, n) is valid UTF-8. */
int serve_utf8_valid(const char *s, size_t n);

#endif /* PH_TOOLS_SERVE_BUF_H */
