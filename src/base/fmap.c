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

#include "base/wfile.h"

static ph_status open_error(const char *path, int err, diag *d) {
  ph_status s = (err == ENOENT || err == ENOTDIR) ? PH_ERR_NOT_FOUND : PH_ERR_IO;
  return diag_set(d, s, "%s: %s", path, strerror(err));
}

const char *file_type_name(unsigned mode) {
  return S_ISREG(mode)    ? "a regular file"
         : S_ISDIR(mode)  ? "a directory"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISSOCK(mode) ? "a socket"
         : S_ISLNK(mode)  ? "a symbolic link"
                          : "not a regular file";
}

static ph_status not_regular(const char *path, unsigned mode, diag *d) {
  return diag_set(d, PH_ERR_IO, "%s: is %s, not a regular file", path, file_type_name(mode));
}

ph_status file_open_read(const char *path, int *fd_out, uint64_t *size, diag *d) {
  *fd_out = -1;
  if (size) *size = 0;
  struct stat st;
  /* refuse before opening: opening a device can have effects, a FIFO can block */
  if (stat(path, &st) != 0) return open_error(path, errno, d);
  if (!S_ISREG(st.st_mode)) return not_regular(path, st.st_mode, d);
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return open_error(path, errno, d);
  int flags;
  if (fstat(fd, &st) != 0 || (flags = fcntl(fd, F_GETFL)) < 0 ||
      (S_ISREG(st.st_mode) && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)) {
    int err = errno;
    close(fd);
    return open_error(path, err, d);
  }
  if (!S_ISREG(st.st_mode)) { /* replaced since the stat */
    close(fd);
    return not_regular(path, st.st_mode, d);
  }
  *fd_out = fd;
  if (size) *size = (uint64_t)st.st_size;
  return PH_OK;
}

ph_status file_open_read_stream(const char *path, FILE **out, uint64_t *size, diag *d) {
  *out = NULL;
  int fd;
  FORWARD_IF_ERROR(file_open_read(path, &fd, size, d));
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    int err = errno;
    close(fd);
    return diag_set(d, PH_ERR_NO_MEMORY, "%s: cannot open a stream: %s", path, strerror(err));
  }
  *out = f;
  return PH_OK;
}

ph_status fmap_open(const char *path, fmap *out, diag *d) {
  out->data = NULL;
  out->size = 0;
  int fd;
  uint64_t size;
  FORWARD_IF_ERROR(file_open_read(path, &fd, &size, d));
  if (size == 0) {
    close(fd);
    return PH_OK;
  }
  if (size > (uint64_t)SIZE_MAX) {
    close(fd);
    return diag_set(d, PH_ERR_LIMIT, "%s: %llu bytes do not fit in the address space", path,
                    (unsigned long long)size);
  }
  void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED) return diag_set(d, PH_ERR_IO, "%s: mmap failed: %s", path, strerror(err));
  out->data = p;
  out->size = (size_t)size;
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
  int fd;
  uint64_t size;
  FORWARD_IF_ERROR(file_open_read(path, &fd, &size, d));
  if (size > (uint64_t)max_bytes) {
    close(fd);
    return diag_set(d, PH_ERR_LIMIT, "%s: %llu bytes, more than the %zu allowed", path,
                    (unsigned long long)size, max_bytes);
  }
  size_t n = (size_t)size;
  char *buf = malloc(n + 1);
  if (!buf) {
    close(fd);
    return diag_set(d, PH_ERR_NO_MEMORY, "%s: cannot allocate %zu bytes", path, n + 1);
  }
  size_t got = 0;
  int err = 0;
  while (got < n) {
    ssize_t k = read(fd, buf + got, n - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      err = k < 0 ? errno : 0;
      break;
    }
    got += (size_t)k;
  }
  close(fd);
  if (got != n) {
    free(buf);
    return diag_set(d, PH_ERR_IO, "%s: short read (%zu of %zu bytes)%s%s", path, got, n,
                    err ? ": " : "", err ? strerror(err) : "");
  }
  buf[n] = '\0';
  *out = buf;
  *out_len = n;
  return PH_OK;
}

ph_status file_write_all(const char *path, const void *data, size_t len, diag *d) {
  wfile w;
  FORWARD_IF_ERROR(wfile_open(&w, path, d));
  ph_status s = wfile_write(&w, data, len, d);
  if (s != PH_OK) {
    wfile_abort(&w);
    return s;
  }
  return wfile_commit(&w, d);
}

int path_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

int path_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int path_resolves_inside(const char *dir, const char *path) {
  char *rd = realpath(dir, NULL), *rp = realpath(path, NULL);
  int ok = 0;
  if (rd && rp) {
    size_t n = strlen(rd);
    if (n && rd[n - 1] == '/') n--; /* dir is "/" */
    ok = strncmp(rp, rd, n) == 0 && rp[n] == '/' && rp[n + 1] && !strchr(rp + n + 1, '/');
  }
  free(rd);
  free(rp);
  return ok;
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

#define HUGE_PAGE ((size_t)2 << 20)

static size_t huge_round(size_t bytes) {
  return bytes ? (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1) : HUGE_PAGE;
}

void *pages_alloc_huge(size_t bytes) {
  size_t n = huge_round(bytes);
  if (n < bytes || n + HUGE_PAGE < n) return NULL; /* overflow */
  /* over-map by one huge page and trim both ends to a 2 MiB-aligned [n] */
  uint8_t *p =
      mmap(NULL, n + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  uint8_t *a = (uint8_t *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
  if (a > p) munmap(p, (size_t)(a - p));
  if (a + n < p + n + HUGE_PAGE) munmap(a + n, (size_t)(p + n + HUGE_PAGE - (a + n)));
#ifdef MADV_HUGEPAGE
  madvise(a, n, MADV_HUGEPAGE); /* advice: without transparent huge pages it is 4 KiB pages */
#endif
  return a;
}

void pages_free_huge(void *p, size_t bytes) {
  if (p) munmap(p, huge_round(bytes));
}

uint64_t mem_available_bytes(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
  fclose(f);
  return (uint64_t)kb * 1024u;
}

size_t fmap_release(const fmap *m, const void *p, size_t n) {
  const uint8_t *b = p;
  if (!m || !m->data || !n || b < m->data || b > m->data + m->size || n > m->size ||
      (size_t)(b - m->data) > m->size - n)
    return 0;
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t lo = (uintptr_t)b & ~(page - 1), hi = ((uintptr_t)b + n + page - 1) & ~(page - 1);
  const uintptr_t m_lo = (uintptr_t)m->data; /* mmap returned it: page-aligned */
  const uintptr_t m_hi = (m_lo + m->size + page - 1) & ~(page - 1);
  if (lo < m_lo) lo = m_lo;
  if (hi > m_hi) hi = m_hi;
  if (hi <= lo || madvise((void *)lo, hi - lo, MADV_DONTNEED) != 0) return 0;
  return hi - lo;
}
