/* fmap — read-only memory maps of whole files, and small whole-file reads.
 *
 * A map owns its mapping and unmaps on fmap_close(). Empty files map to a valid object with
 * size 0 and data == NULL. Errors (missing file, permission, not a regular file) are typed:
 * PH_ERR_NOT_FOUND for a path that does not exist, PH_ERR_IO otherwise, the message naming
 * the path and the OS error.
 *
 * Every file the library reads is opened by file_open_read() (fmap_open and file_read_all use
 * it): only regular files are read, and anything else — a FIFO, a device, a directory, a
 * socket — is refused without blocking, so a FIFO given as config.json, a weights file,
 * model.onnx, genai_config.json or a requests file is an error at once, not a hang. Writes go
 * through base/wfile.h (file_write_all too).
 */
#ifndef PH_BASE_FMAP_H
#define PH_BASE_FMAP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/diag.h"

typedef struct fmap {
  const uint8_t *data; /* NULL when size == 0 */
  size_t size;
} fmap;

/* Opens path read-only when it is a regular file (a symlink to one is followed). Never blocks:
 * the path is examined with stat() first and opened O_NONBLOCK | O_NOCTTY | O_CLOEXEC, checked
 * again with fstat() (the path may have changed in between), then O_NONBLOCK is cleared. A path
 * that is not a regular file is PH_ERR_IO naming the path and what it is ("is a FIFO"); a missing
 * one PH_ERR_NOT_FOUND. *fd is the caller's to close; *size (may be NULL) its size in bytes. */
ph_status file_open_read(const char *path, int *fd, uint64_t *size, diag *d);

/* The same as a stdio stream ("rb"), for readers that parse as they go. *out is the caller's to
 * fclose. */
ph_status file_open_read_stream(const char *path, FILE **out, uint64_t *size, diag *d);

/* "a directory", "a FIFO", "a character device", ... for a stat() mode (static string). */
const char *file_type_name(unsigned mode);

ph_status fmap_open(const char *path, fmap *out, diag *d);
void fmap_close(fmap *m); /* NULL-safe, idempotent */

/* Reads a whole file of at most max_bytes into a malloc'ed, NUL-terminated buffer (for JSON).
 * *out_len excludes the NUL. Larger files are PH_ERR_LIMIT. */
ph_status file_read_all(const char *path, size_t max_bytes, char **out, size_t *out_len, diag *d);

/* Replaces path with len bytes, through a temporary file beside it (base/wfile.h): on failure
 * path is left as it was; a symlink at path is replaced, never followed; a target that is not a
 * regular file or symlink is refused. */
ph_status file_write_all(const char *path, const void *data, size_t len, diag *d);

/* 1 if path exists (any type). */
int path_exists(const char *path);

/* Anonymous read-write memory of bytes (> 0 or not), page-aligned: it reads as zero and is
 * committed only when first written, so a large cache costs nothing until used (zeroing 1 GiB
 * with memset took seconds on the development VM). NULL on failure. Free with pages_free and
 * the same size. */
void *pages_alloc_zeroed(size_t bytes);
void pages_free(void *p, size_t bytes); /* NULL-safe */
/* Anonymous read-write memory for data read often and at bandwidth (the weights a prepared graph
 * reads): aligned to 2 MiB and advised MADV_HUGEPAGE, so the kernel can back it with huge pages
 * (fewer TLB misses when decode streams every weight once per step); committed when first
 * written, not zeroed up front. NULL on failure. Free with pages_free_huge and the same size. */
void *pages_alloc_huge(size_t bytes);
void pages_free_huge(void *p, size_t bytes); /* NULL-safe */

/* MemAvailable of /proc/meminfo in bytes (what the kernel estimates can be allocated without
 * swapping, reclaimable page cache included); 0 when unknown (not Linux, unreadable). */
uint64_t mem_available_bytes(void);

/* Drops the pages of the read-only private file mapping m that hold [p, p + n) from this process
 * (madvise MADV_DONTNEED; the range is widened to whole pages, clipped to the mapping): the
 * mapping stays valid and its bytes read back from the file when touched again, so only the
 * resident set shrinks. Nothing is done when [p, p + n) is not inside m. Returns the bytes
 * released (0 when none). Only for fmap_open's mappings (never anonymous memory, which
 * MADV_DONTNEED would zero). */
size_t fmap_release(const fmap *m, const void *p, size_t n);

/* 1 if path is a directory. */
int path_is_dir(const char *path);

/* 1 if path, every symlink resolved (realpath), is an entry directly inside dir (also resolved):
 * for file names a package may give (external data, decoder.filename) that must not lead out of
 * the package directory. 0 when either does not resolve. */
int path_resolves_inside(const char *dir, const char *path);

/* Joins dir and name with one '/', into buf. Returns PH_ERR_LIMIT if it does not fit. */
ph_status path_join(char *buf, size_t buf_bytes, const char *dir, const char *name, diag *d);

/* mkdir -p. */
ph_status path_mkdirs(const char *path, diag *d);

#endif /* PH_BASE_FMAP_H */
