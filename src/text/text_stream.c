/* text_stream — streaming detokenization with stop strings (pagedhybrid.h, ph_text_stream).
 *
 * A token's bytes join `raw`; the longest prefix of raw that cannot change with more bytes (all
 * but a UTF-8 character still being completed) is repaired (U+FFFD for ill-formed sequences,
 * exactly as ph_tokenizer_decode does: a WHATWG decoder gives the same text whether it is fed at
 * once or in pieces cut this way) and joins `text`, the text not yet handed out. From text: a stop
 * string found cuts it there and ends the stream; otherwise everything but the longest suffix
 * that could still grow into a stop string is handed out. Stop strings must be valid UTF-8, so a
 * held-back suffix always starts on a character boundary. */
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_impl.h"

struct ph_text_stream {
  const ph_tokenizer *tok;
  char *stop[PH_MAX_STOP_STRINGS];
  size_t stop_len[PH_MAX_STOP_STRINGS];
  int n_stops;
  int skip_special;
  int stopped;
  tok_buf raw;   /* bytes of an unfinished UTF-8 character (at most 3) */
  tok_buf text;  /* repaired text not yet handed out */
  tok_buf piece; /* what the last call handed out */
};

static int valid_utf8(const char *s, size_t n) {
  tok_buf b = {0};
  int ok = utf8_repair(s, n, &b) && b.n == n && memcmp(b.p, s, n) == 0;
  free(b.p);
  return ok;
}

ph_status ph_text_stream_create(const ph_tokenizer *tok, const char *const *stops, int n_stops,
                                int skip_special, ph_text_stream **out) {
  if (!out) return PH_ERR_INVALID_ARGUMENT;
  *out = NULL;
  if (!tok || n_stops < 0 || n_stops > PH_MAX_STOP_STRINGS || (n_stops > 0 && !stops))
    return PH_ERR_INVALID_ARGUMENT;
  for (int i = 0; i < n_stops; i++)
    if (!stops[i] || !stops[i][0] || !valid_utf8(stops[i], strlen(stops[i])))
      return PH_ERR_INVALID_ARGUMENT;
  ph_text_stream *s = calloc(1, sizeof *s);
  if (!s) return PH_ERR_NO_MEMORY;
  s->tok = tok;
  s->skip_special = skip_special;
  for (int i = 0; i < n_stops; i++) {
    s->stop_len[i] = strlen(stops[i]);
    s->stop[i] = malloc(s->stop_len[i] + 1);
    if (!s->stop[i]) {
      ph_text_stream_free(s);
      return PH_ERR_NO_MEMORY;
    }
    memcpy(s->stop[i], stops[i], s->stop_len[i] + 1);
    s->n_stops = i + 1;
  }
  if (!tok_buf_reserve(&s->raw, 8) || !tok_buf_reserve(&s->text, 64) ||
      !tok_buf_reserve(&s->piece, 64)) {
    ph_text_stream_free(s);
    return PH_ERR_NO_MEMORY;
  }
  *out = s;
  return PH_OK;
}

void ph_text_stream_free(ph_text_stream *s) {
  if (!s) return;
  for (int i = 0; i < s->n_stops; i++) free(s->stop[i]);
  free(s->raw.p);
  free(s->text.p);
  free(s->piece.p);
  free(s);
}

/* Hands out text[0..n) as the piece and keeps the rest. */
static ph_status emit(ph_text_stream *s, size_t n, const char **piece, size_t *len) {
  s->piece.n = 0;
  if (!tok_buf_append(&s->piece, s->text.p, n)) return PH_ERR_NO_MEMORY;
  memmove(s->text.p, s->text.p + n, s->text.n - n);
  s->text.n -= n;
  s->text.p[s->text.n] = '\0';
  *piece = s->piece.p;
  *len = s->piece.n;
  return PH_OK;
}

/* The earliest stop string in text, or (size_t)-1. */
static size_t find_stop(const ph_text_stream *s) {
  size_t best = (size_t)-1;
  for (int i = 0; i < s->n_stops; i++) {
    if (s->stop_len[i] > s->text.n) continue;
    for (size_t p = 0; p + s->stop_len[i] <= s->text.n && p < best; p++)
      if (memcmp(s->text.p + p, s->stop[i], s->stop_len[i]) == 0) {
        best = p;
        break;
      }
  }
  return best;
}

/* How many bytes at the end of text are a proper prefix of some stop string. */
static size_t held_back(const ph_text_stream *s) {
  size_t hold = 0;
  for (int i = 0; i < s->n_stops; i++) {
    size_t max = s->stop_len[i] - 1 < s->text.n ? s->stop_len[i] - 1 : s->text.n;
    for (size_t k = max; k > hold; k--)
      if (memcmp(s->text.p + s->text.n - k, s->stop[i], k) == 0) {
        hold = k;
        break;
      }
  }
  return hold;
}

static ph_status settle(ph_text_stream *s, int final, const char **piece, size_t *len,
                        int *stopped) {
  size_t at = find_stop(s);
  if (at != (size_t)-1) {
    s->stopped = 1;
    if (stopped) *stopped = 1;
    ph_status st = emit(s, at, piece, len);
    s->text.n = 0;
    return st;
  }
  return emit(s, s->text.n - (final ? 0 : held_back(s)), piece, len);
}

ph_status ph_text_stream_push(ph_text_stream *s, int64_t token, const char **piece, size_t *len,
                              int *stopped) {
  if (!s || !piece || !len) return PH_ERR_INVALID_ARGUMENT;
  *piece = "";
  *len = 0;
  if (stopped) *stopped = s->stopped;
  const char *bytes;
  size_t n;
  int special;
  if (token < 0) return PH_ERR_INVALID_ARGUMENT;
  if (s->stopped) return PH_OK;
  /* an id that is no token gives no text, as in ph_tokenizer_decode */
  if (!tokenizer_token_bytes(s->tok, token, &bytes, &n, &special)) n = 0;
  if (special && s->skip_special) n = 0;
  if (!tok_buf_append(&s->raw, bytes, n)) return PH_ERR_NO_MEMORY;
  size_t tail = utf8_incomplete_tail((const unsigned char *)s->raw.p, s->raw.n);
  if (!utf8_repair(s->raw.p, s->raw.n - tail, &s->text)) return PH_ERR_NO_MEMORY;
  memmove(s->raw.p, s->raw.p + s->raw.n - tail, tail);
  s->raw.n = tail;
  return settle(s, 0, piece, len, stopped);
}

ph_status ph_text_stream_finish(ph_text_stream *s, const char **piece, size_t *len) {
  if (!s || !piece || !len) return PH_ERR_INVALID_ARGUMENT;
  *piece = "";
  *len = 0;
  if (s->stopped) return PH_OK;
  if (!utf8_repair(s->raw.p ? s->raw.p : "", s->raw.n, &s->text)) return PH_ERR_NO_MEMORY;
  s->raw.n = 0;
  ph_status st = settle(s, 1, piece, len, NULL);
  s->stopped = 1; /* nothing more comes out after finish */
  return st;
}
