/* wfile — writing a file by replacing it whole, never harming what was there before.
 *
 * Every whole-file write of the library and the CLI goes through here: safetensors files, shards
 * and their index, model.onnx and model.onnx.data, genai_config.json, the tokenizer files export
 * copies, make-tiny's config.json, `generate --logits-out`, `run --out` (and file_write_all in
 * fmap.h).
 *
 * The rules:
 * - The bytes go to a temporary file beside the target, in the same directory, named
 *   ".<target name>.tmp-XXXXXX" and created exclusively (O_CREAT | O_EXCL | O_NOFOLLOW): it is
 *   always a new file of ours, never a file or symlink someone else put there.
 * - Only wfile_commit() puts it in place, with rename(): a reader sees the old file or the new
 *   one, never a mix. A symlink at the target is replaced itself; the file it points to is never
 *   opened, written or removed, so a symlink planted in an output directory cannot redirect a
 *   write outside it.
 * - On any failure, and on wfile_abort(), only the temporary file is removed: a target that
 *   existed is left exactly as it was.
 * - A target that exists and is neither a regular file nor a symlink (a directory, FIFO, device
 *   or socket) is refused with PH_ERR_IO naming the path and what it is, before anything is
 *   created and without opening it, so a FIFO never blocks and /dev/full is never touched.
 * A file that replaces a regular file keeps that file's permission bits; a new one gets 0666 less
 * the umask, as fopen() gives. Data are not fsync'ed: a machine crash may lose the new contents,
 * never the old file's name. A process killed between open and commit leaves its hidden
 * temporary file behind.
 *
 * Several files that belong together (a sharded checkpoint and its index, model.onnx and its
 * data) are all written and finished first, then committed in order, so a failure in any of
 * them replaces none.
 *
 * Output written as it is made (`run --out`'s result lines) streams into the temporary file
 * through wfile_stream() and is committed when the run succeeds.
 */
#ifndef PH_BASE_WFILE_H
#define PH_BASE_WFILE_H

#include <stddef.h>
#include <stdio.h>

#include "base/diag.h"

typedef struct wfile {
  char *path; /* the target; malloc'ed, NULL when the wfile holds nothing */
  char *tmp;  /* the temporary file beside it; NULL once renamed or removed */
  int fd;     /* -1 once closed */
  FILE *f;    /* the stream of wfile_stream(), which then owns fd */
} wfile;

/* Checks the target alone: PH_OK when path does not exist or is a regular file or a symlink;
 * PH_ERR_IO otherwise (or when its directory cannot be examined). For refusing early, before
 * work whose result would then be thrown away. */
ph_status wfile_check_target(const char *path, diag *d);

/* Creates the temporary file for path. On failure *w holds nothing (wfile_abort is still safe).
 * Errors: PH_ERR_IO (target refused, directory missing or not writable), PH_ERR_LIMIT (path too
 * long), PH_ERR_NO_MEMORY. */
ph_status wfile_open(wfile *w, const char *path, diag *d);

/* Appends n bytes (all of them; interrupted and partial writes are resumed). PH_ERR_IO naming
 * the target on failure (disk full, quota). Not after wfile_stream(). */
ph_status wfile_write(wfile *w, const void *p, size_t n, diag *d);

/* A stdio stream over the temporary file, for formatted output; from then on write only through
 * it. The wfile owns the stream (commit or abort closes it). NULL with PH_ERR_NO_MEMORY in d. */
FILE *wfile_stream(wfile *w, diag *d);

/* Flushes and closes the temporary file, keeping it for a later wfile_commit(). A write error
 * that shows only now (a full disk at flush or close) is PH_ERR_IO. Idempotent. */
ph_status wfile_finish(wfile *w, diag *d);

/* Finishes and renames the temporary file over the target. On success the target holds the new
 * bytes; on failure the temporary file is removed and the target is as it was. Either way *w
 * then holds nothing. */
ph_status wfile_commit(wfile *w, diag *d);

/* Closes and removes the temporary file; the target is untouched. NULL-safe, idempotent. */
void wfile_abort(wfile *w);

#endif /* PH_BASE_WFILE_H */
