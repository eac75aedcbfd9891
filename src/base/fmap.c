/* fmap — read-only file maps and small whole-file reads. See fmap.h. */
#include "base/fmap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static ph_status open_error(const char *path, int err, diag *d) {
  ph_status s = (err == ENOENT || err == ENOTDIR) ? PH_ERR_NOT_FOUND : PH_ERR_IO;
  return diag_set(d, s, "%s: %s", path, strerror(err));
}

ph_status fmap_open(const char *path, fmap *out, diag *d) {
  out->data = NULL;
  out->size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return open_error(path, errno, d);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return open_error(path, err, d);
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return diag_set(d, PH_ERR_IO, "%s: not a regular file", path);
  }
  if (st.st_size == 0) {
    close(fd);
    return PH_OK;
  }
  void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED) return diag_set(d, PH_ERR_IO, "%s: mmap failed: %s", path, strerror(err));
  out->data = p;
  out->size = (size_t)st.st_size;
  return PH_OK;
}

void fmap_close(fmap *m) {
  if (!m || !m->data) return;
  munmap((void *)m->data, m->size);
  m->data = NULL;
  m->size = 0;
}

ph_status file_read_all(const char *path, size_t max_bytes, char **out, size_t *out_len, diag *d) {
  *out = NULL;
  *out_len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return open_error(path, errno, d);
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return diag_set(d, PH_ERR_IO, "%s: not a regular file", path);
  }
  if ((uint64_t)st.st_size > (uint64_t)max_bytes) {
    fclose(f);
    return diag_set(d, PH_ERR_LIMIT, "%s: %lld bytes, more than the %zu allowed", path,
                    (long long)st.st_size, max_bytes);
  }
  size_t n = (size_t)st.st_size;
  char *buf = malloc(n + 1);
  if (!buf) {
    fclose(f);
    return diag_set(d, PH_ERR_NO_MEMORY, "%s: cannot allocate %zu bytes", path, n + 1);
  }
  size_t got = fread(buf, 1, n, f);
  int err = ferror(f);
  fclose(f);
  if (err || got != n) {
    free(buf);
    return diag_set(d, PH_ERR_IO, "%s: short read (%zu of %zu bytes)", path, got, n);
  }
  buf[n] = '\0';
  *out = buf;
  *out_len = n;
  return PH_OK;
}

ph_status file_write_all(const char *path, const void *data, size_t len, diag *d) {
  FILE *f = fopen(path, "wb");
  if (!f) return diag_set(d, PH_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
  size_t put = len ? fwrite(data, 1, len, f) : 0;
  int bad = put != len || fflush(f) != 0;
  bad |= fclose(f) != 0;
  if (bad) return diag_set(d, PH_ERR_IO, "%s: write failed: %s", path, strerror(errno));
  return PH_OK;
}

int path_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

int path_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

ph_status path_join(char *buf, size_t buf_bytes, const char *dir, const char *name, diag *d) {
  size_t dl = strlen(dir);
  int slash = dl > 0 && dir[dl - 1] != '/';
  int n = snprintf(buf, buf_bytes, "%s%s%s", dir, slash ? "/" : "", name);
  RETURN_ERROR_IF(n < 0 || (size_t)n >= buf_bytes, d, PH_ERR_LIMIT, "path too long: %s/%s", dir,
                  name);
  return PH_OK;
}

ph_status path_mkdirs(const char *path, diag *d) {
  char buf[4096];
  size_t n = strlen(path);
  RETURN_ERROR_IF(n == 0 || n >= sizeof buf, d, PH_ERR_INVALID_ARGUMENT, "bad directory path");
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    char saved = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
      return diag_set(d, PH_ERR_IO, "%s: cannot create directory: %s", buf, strerror(errno));
    buf[i] = saved;
  }
  RETURN_ERROR_IF(!path_is_dir(path), d, PH_ERR_IO, "%s: exists and is not a directory", path);
  return PH_OK;
}

void *pages_alloc_zeroed(size_t bytes) {
  void *p =
      mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

void pages_free(void *p, size_t bytes) {
  if (p) munmap(p, bytes ? bytes : 1);
}
