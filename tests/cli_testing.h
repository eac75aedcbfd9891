/* cli_testing — run the built `pagedhybrid` binary (PH_CLI) from a test and capture its output.
 *
 *   cli_testing_init(tmp_dir);        // stdout/stderr land in tmp_dir/stdout.txt, stderr.txt
 *   int rc = cli_run("inspect DIR");  // exit code (-1 if it did not exit normally)
 *   ... g_stdout / g_stderr hold the captured text (NULL if unreadable) ...
 *   rc = cli_run_ex(dir, "demo", "/dev/full");  // in dir, stdout sent to /dev/full (g_stdout NULL)
 *   rc = cli_run_timeout(10, "generate ...");   // exit code 124 if it ran past 10 s
 *   cli_testing_done();
 *
 * One header for tests/test_cli.c and tests/test_cli_engine.c. */
#ifndef PH_TESTS_CLI_TESTING_H
#define PH_TESTS_CLI_TESTING_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "base/fmap.h"
#include "check.h"

static char g_out[1024], g_err[1024];
static char *g_stdout, *g_stderr;

static inline void cli_testing_init(const char *tmp_dir) {
  snprintf(g_out, sizeof g_out, "%s/stdout.txt", tmp_dir);
  snprintf(g_err, sizeof g_err, "%s/stderr.txt", tmp_dir);
}

/* Runs "PH_CLI args" in directory cwd (NULL: this one) with stdout sent to stdout_to (NULL:
 * captured into g_stdout) and stderr captured into g_stderr, under `timeout seconds` when seconds
 * > 0 (a command that blocks, on a FIFO it should have refused, then fails the test with exit
 * code 124 instead of hanging ctest); returns the exit code. */
static inline int cli_run_full(const char *cwd, const char *args, const char *stdout_to,
                               unsigned seconds) {
  char cmd[16384], limit[32] = "";
  if (seconds) snprintf(limit, sizeof limit, "timeout %u ", seconds);
  if (snprintf(cmd, sizeof cmd, "%s%s%s%s'%s' %s >'%s' 2>'%s'", cwd ? "cd '" : "", cwd ? cwd : "",
               cwd ? "' && " : "", limit, check_env("PH_CLI"), args, stdout_to ? stdout_to : g_out,
               g_err) >= (int)sizeof cmd)
    return -1;
  if (stdout_to) remove(g_out);
  int st = system(cmd);
  free(g_stdout);
  free(g_stderr);
  size_t n;
  diag d;
  g_stdout = g_stderr = NULL;
  file_read_all(g_out, 64 << 20, &g_stdout, &n, &d);
  file_read_all(g_err, 1 << 20, &g_stderr, &n, &d);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static inline int cli_run_ex(const char *cwd, const char *args, const char *stdout_to) {
  return cli_run_full(cwd, args, stdout_to, 0);
}

/* Runs "PH_CLI args" with stdout/stderr captured into g_stdout/g_stderr; returns the exit code. */
static inline int cli_run(const char *args) { return cli_run_full(NULL, args, NULL, 0); }

static inline int cli_run_timeout(unsigned seconds, const char *args) {
  return cli_run_full(NULL, args, NULL, seconds);
}

static inline void cli_testing_done(void) {
  free(g_stdout);
  free(g_stderr);
  g_stdout = g_stderr = NULL;
}

/* The ids the last command printed after "generated:" (generate's paged output), at most max
 * into out; returns the count (0, and a failed check, when there is no such line). */
static inline int64_t cli_generated_ids(int64_t max, int64_t *out) {
  const char *p = g_stdout ? strstr(g_stdout, "generated:") : NULL;
  CHECK(p != NULL);
  if (!p) return 0;
  p += strlen("generated:");
  int64_t n = 0;
  while (n < max) {
    char *end = NULL;
    long long v = strtoll(p, &end, 10);
    if (end == p) break;
    out[n++] = v;
    p = *end == ',' ? end + 1 : end;
  }
  return n;
}

#endif /* PH_TESTS_CLI_TESTING_H */
