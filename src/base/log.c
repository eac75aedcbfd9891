/* log — the process-wide log callback. See log.h.
 *
 * The fast path is one relaxed atomic load: `max_level` is -1 while no callback is installed,
 * so a disabled LOG_DEBUG costs a compare and never formats. The callback, its user pointer
 * and its level change together under a read-write lock, and callbacks run under the read
 * lock: loggers on different threads do not serialize on each other, and once
 * ph_set_log_callback() returns no thread is still inside the previous callback, so its user
 * data may be freed. The price is that a callback must not call ph_set_log_callback() itself
 * (it would wait for its own read lock). Messages are formatted into a 1 KiB stack buffer and
 * truncated there: logging never allocates.
 */
#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define LOG_LINE_BYTES 1024

static pthread_rwlock_t log_lock = PTHREAD_RWLOCK_INITIALIZER;
static ph_log_fn log_fn;          /* guarded by log_lock */
static void *log_user;            /* guarded by log_lock */
static atomic_int max_level = -1; /* -1: silent; mirrors (log_fn ? level : -1) */

void ph_set_log_callback(ph_log_fn fn, void *user, ph_log_level level) {
  pthread_rwlock_wrlock(&log_lock);
  log_fn = fn;
  log_user = user;
  atomic_store_explicit(&max_level, fn ? (int)level : -1, memory_order_relaxed);
  pthread_rwlock_unlock(&log_lock);
}

int log_enabled(ph_log_level level) {
  return (int)level <= atomic_load_explicit(&max_level, memory_order_relaxed);
}

void log_msg(ph_log_level level, const char *fmt, ...) {
  if (!log_enabled(level)) return;
  char line[LOG_LINE_BYTES];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  /* One line per call: drop trailing newlines a caller added out of habit. */
  size_t len = strlen(line);
  while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
  pthread_rwlock_rdlock(&log_lock);
  /* Re-check under the lock: the callback or level may have changed since the fast path. */
  if (log_fn && (int)level <= atomic_load_explicit(&max_level, memory_order_relaxed))
    log_fn(log_user, level, line);
  pthread_rwlock_unlock(&log_lock);
}
