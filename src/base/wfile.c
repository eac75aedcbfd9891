/* wfile — writing a file by replacing it whole. See wfile.h. */
#include "base/wfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/fmap.h"

#define TMP_TAG         ".tmp-"
#define TMP_RANDOM      6
/* bytes of the target's name kept in the temporary name (NAME_MAX is 255) */
#define TMP_NAME_KEEP   200
#define TMP_TRIES       64
#define WRITE_MAX_SLICE ((size_t)1 << 30) /* one write() of several GB is not portable */

static void wfile_clear(wfile *w) {
  w->path = NULL;
  w->tmp = NULL;
  w->fd = -1;
  w->f = NULL;
}

/* Refuses what exists and is neither a regular file nor a symlink; st is lstat's result. */
static ph_status refuse_kind(const char *path, const struct stat *st, diag *d) {
  RETURN_ERROR_IF(!S_ISREG(st->st_mode) && !S_ISLNK(st->st_mode), d, PH_ERR_IO,
                  "%s: exists and is %s, not a regular file; not replaced", path,
                  file_type_name(st->st_mode));
  return PH_OK;
}

ph_status wfile_check_target(const char *path, diag *d) {
  RETURN_ERROR_IF(!path || !path[0], d, PH_ERR_INVALID_ARGUMENT, "empty output path");
  struct stat st;
  if (lstat(path, &st) != 0) {
    RETURN_ERROR_IF(errno != ENOENT, d, PH_ERR_IO, "%s: %s", path, strerror(errno));
    return PH_OK;
  }
  return refuse_kind(path, &st, d);
}

/* splitmix64: spreads the seed over the name's characters. */
static uint64_t mix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

ph_status wfile_open(wfile *w, const char *path, diag *d) {
  wfile_clear(w);
  FORWARD_IF_ERROR(wfile_check_target(path, d));
  struct stat old;
  const int replaces_file = lstat(path, &old) == 0 && S_ISREG(old.st_mode);
  const char *slash = strrchr(path, '/');
  const char *name = slash ? slash + 1 : path;
  const size_t dir_len = (size_t)(name - path), name_len = strlen(name);
  RETURN_ERROR_IF(name_len == 0 || strcmp(name, ".") == 0 || strcmp(name, "..") == 0, d,
                  PH_ERR_INVALID_ARGUMENT, "%s: not a file name", path);
  const size_t keep = name_len < TMP_NAME_KEEP ? name_len : TMP_NAME_KEEP;
  const size_t tmp_bytes = dir_len + 1 + keep + sizeof TMP_TAG - 1 + TMP_RANDOM + 1;
  RETURN_ERROR_IF(tmp_bytes > 4096, d, PH_ERR_LIMIT, "%s: path too long", path);
  w->path = malloc(strlen(path) + 1);
  w->tmp = malloc(tmp_bytes);
  if (!w->path || !w->tmp) {
    wfile_abort(w);
    return diag_set(d, PH_ERR_NO_MEMORY, "%s: out of memory", path);
  }
  strcpy(w->path, path);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 16) ^
                  (uint64_t)(uintptr_t)w;
  static const char ALNUM[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  int err = EEXIST;
  for (int t = 0; t < TMP_TRIES && err == EEXIST; t++) {
    char rnd[TMP_RANDOM + 1];
    uint64_t r = mix(&seed);
    for (int i = 0; i < TMP_RANDOM; i++, r /= 36) rnd[i] = ALNUM[r % 36];
    rnd[TMP_RANDOM] = '\0';
    snprintf(w->tmp, tmp_bytes, "%.*s.%.*s%s%s", (int)dir_len, path, (int)keep, name, TMP_TAG, rnd);
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    err = w->fd < 0 ? errno : 0;
  }
  if (w->fd < 0) {
    free(w->tmp);
    w->tmp = NULL; /* nothing of ours to remove */
    wfile_abort(w);
    return diag_set(d, PH_ERR_IO, "%s: cannot create a temporary file beside it: %s", path,
                    strerror(err));
  }
  /* a replaced file keeps its permissions (a private file stays private) */
  if (replaces_file) (void)fchmod(w->fd, old.st_mode & 07777);
  return PH_OK;
}

ph_status wfile_write(wfile *w, const void *p, size_t n, diag *d) {
  RETURN_ERROR_IF(w->fd < 0 || w->f, d, PH_ERR_INTERNAL, "%s: write after close",
                  w->path ? w->path : "(no file)");
  const uint8_t *b = p;
  while (n > 0) {
    ssize_t k = write(w->fd, b, n < WRITE_MAX_SLICE ? n : WRITE_MAX_SLICE);
    if (k < 0 && errno == EINTR) continue;
    RETURN_ERROR_IF(k <= 0, d, PH_ERR_IO, "%s: write failed: %s", w->path,
                    k < 0 ? strerror(errno) : "no progress");
    b += k;
    n -= (size_t)k;
  }
  return PH_OK;
}

FILE *wfile_stream(wfile *w, diag *d) {
  if (w->f) return w->f;
  if (w->fd < 0) {
    diag_set(d, PH_ERR_INTERNAL, "%s: stream after close", w->path ? w->path : "(no file)");
    return NULL;
  }
  w->f = fdopen(w->fd, "wb");
  if (!w->f)
    diag_set(d, PH_ERR_NO_MEMORY, "%s: cannot open a stream: %s", w->path, strerror(errno));
  return w->f;
}

ph_status wfile_finish(wfile *w, diag *d) {
  int bad = 0, err = 0;
  if (w->f) {
    bad = ferror(w->f) || fflush(w->f) != 0;
    if (bad) err = errno;
    if (fclose(w->f) != 0 && !bad) bad = 1, err = errno;
    w->f = NULL;
    w->fd = -1;
  } else if (w->fd >= 0) {
    bad = close(w->fd) != 0;
    err = errno;
    w->fd = -1;
  }
  RETURN_ERROR_IF(bad, d, PH_ERR_IO, "%s: write failed: %s", w->path,
                  err ? strerror(err) : "stream error");
  return PH_OK;
}

ph_status wfile_commit(wfile *w, diag *d) {
  RETURN_ERROR_IF(!w->path || !w->tmp, d, PH_ERR_INTERNAL, "wfile_commit: nothing to commit");
  ph_status s = wfile_finish(w, d);
  /* the target may have changed since wfile_open: the same refusal, again */
  if (s == PH_OK) s = wfile_check_target(w->path, d);
  if (s == PH_OK && rename(w->tmp, w->path) != 0)
    s = diag_set(d, PH_ERR_IO, "%s: cannot replace it with %s: %s", w->path, w->tmp,
                 strerror(errno));
  if (s == PH_OK) {
    free(w->tmp);
    w->tmp = NULL;
  }
  wfile_abort(w);
  return s;
}

void wfile_abort(wfile *w) {
  if (!w) return;
  if (w->f)
    fclose(w->f);
  else if (w->fd >= 0)
    close(w->fd);
  if (w->tmp) unlink(w->tmp);
  free(w->tmp);
  free(w->path);
  wfile_clear(w);
}
