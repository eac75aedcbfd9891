/* log — library logging through the callback installed with ph_set_log_callback().
 *
 * Silent by default. log_msg() formats only when a callback is installed and the level passes,
 * so debug logging costs one branch in the fast path. Thread-safe: the callback pointer is
 * read atomically; the callback itself must be thread-safe.
 */
#ifndef PH_BASE_LOG_H
#define PH_BASE_LOG_H

#include "base/diag.h"

void log_msg(ph_log_level level, const char *fmt, ...) PH_PRINTF(2, 3);
int log_enabled(ph_log_level level);

#define LOG_ERROR(...) log_msg(PH_LOG_ERROR, __VA_ARGS__)
#define LOG_WARN(...)  log_msg(PH_LOG_WARN, __VA_ARGS__)
#define LOG_INFO(...)  log_msg(PH_LOG_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) log_msg(PH_LOG_DEBUG, __VA_ARGS__)

#endif /* PH_BASE_LOG_H */
