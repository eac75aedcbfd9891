/* serve_testing — start `pagedhybrid serve` (PH_CLI) from a test, talk to it with curl, stop it.
 *
 *   server sv;
 *   if (!server_start(&sv, tmp, "--model DIR --threads 1")) ...;  // --port 0 added; sv.url set
 *   int code = http(&sv, "/v1/completions", "-d '{...}'", &body);  // curl; body malloc'ed
 *   CHECK_EQ_INT(server_stop(&sv), 0);                            // SIGTERM, its exit code
 *
 * Everything is bounded: the server must print its URL within 60 s and exit within 60 s of
 * SIGTERM (else it is killed and the test fails); every curl runs under --max-time. Only
 * 127.0.0.1 is used. The server's stderr is kept in TMP/server-N.err and shown on a failure.
 */
#ifndef PH_TESTS_SERVE_TESTING_H
#define PH_TESTS_SERVE_TESTING_H

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/fmap.h"
#include "check.h"

typedef struct server {
  pid_t pid;
  char url[128];
  char out[1024], err[1024]; /* its stdout and stderr files */
  int exited, status;
} server;

static int g_server_count;

static inline double serve_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline char *serve_read_file(const char *path) {
  char *text = NULL;
  size_t n = 0;
  diag d;
  if (file_read_all(path, 256 << 20, &text, &n, &d) != PH_OK) return NULL;
  return text;
}

static inline void server_show_stderr(const server *sv) {
  char *e = serve_read_file(sv->err);
  fprintf(stderr, "       server stderr (%s):\n%s\n", sv->err, e ? e : "(unreadable)");
  free(e);
}

/* Starts "PH_CLI serve ARGS --host 127.0.0.1 --port 0" and waits for its "listening on URL". */
static inline int server_start(server *sv, const char *tmp, const char *args) {
  memset(sv, 0, sizeof *sv);
  const int n = ++g_server_count;
  snprintf(sv->out, sizeof sv->out, "%s/server-%d.out", tmp, n);
  snprintf(sv->err, sizeof sv->err, "%s/server-%d.err", tmp, n);
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "exec '%s' serve %s --host 127.0.0.1 --port 0 >'%s' 2>'%s'",
           check_env("PH_CLI"), args, sv->out, sv->err);
  remove(sv->out);
  fflush(NULL);
  const pid_t pid = fork();
  if (pid < 0) return check_report(0, __FILE__, __LINE__, "fork the server");
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  sv->pid = pid;
  const double until = serve_now() + 60;
  while (serve_now() < until) {
    char *text = serve_read_file(sv->out);
    const char *p = text ? strstr(text, "listening on ") : NULL;
    if (p && strchr(p, '\n')) {
      sscanf(p + strlen("listening on "), "%127s", sv->url);
      free(text);
      return check_report(strncmp(sv->url, "http://127.0.0.1:", 17) == 0, __FILE__, __LINE__,
                          "the server prints its 127.0.0.1 URL");
    }
    free(text);
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      sv->exited = 1;
      sv->status = st;
      check_report(0, __FILE__, __LINE__, "the server starts");
      server_show_stderr(sv);
      return 0;
    }
    usleep(20000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  sv->exited = 1;
  check_report(0, __FILE__, __LINE__, "the server prints its URL within 60 s");
  server_show_stderr(sv);
  return 0;
}

/* Waits up to seconds for the server to exit; returns its exit code (128 + signal when killed
 * by one), or -1 when it is still running. */
static inline int server_wait(server *sv, double seconds) {
  const double until = serve_now() + seconds;
  while (!sv->exited) {
    int st;
    const pid_t r = waitpid(sv->pid, &st, WNOHANG);
    if (r == sv->pid) {
      sv->exited = 1;
      sv->status = st;
      break;
    }
    if (serve_now() >= until) return -1;
    usleep(20000);
  }
  return WIFEXITED(sv->status) ? WEXITSTATUS(sv->status) : 128 + WTERMSIG(sv->status);
}

/* SIGTERM, then its exit code (SIGKILL and -1 after 60 s). */
static inline int server_stop(server *sv) {
  if (!sv->pid) return -1;
  if (!sv->exited) kill(sv->pid, SIGTERM);
  int rc = server_wait(sv, 60);
  if (rc < 0) {
    kill(sv->pid, SIGKILL);
    waitpid(sv->pid, NULL, 0);
    sv->exited = 1;
    check_report(0, __FILE__, __LINE__, "the server exits within 60 s of SIGTERM");
  }
  if (rc != 0) server_show_stderr(sv);
  return rc;
}

/* curl -s [curl_args] URL/path with the body written to a file and read into *body (malloc'ed;
 * NULL when body is NULL). Returns the HTTP status (0: no response). */
static inline int http(const server *sv, const char *path, const char *curl_args, char **body) {
  char body_path[1100], code_path[1100], cmd[16384];
  snprintf(body_path, sizeof body_path, "%s.body", sv->out);
  snprintf(code_path, sizeof code_path, "%s.code", sv->out);
  remove(body_path);
  snprintf(cmd, sizeof cmd, "curl -s --max-time 60 -o '%s' -w '%%{http_code}' %s '%s%s' >'%s'",
           body_path, curl_args ? curl_args : "", sv->url, path, code_path);
  const int st = system(cmd);
  (void)st;
  char *code = serve_read_file(code_path);
  const int c = code ? atoi(code) : 0;
  free(code);
  if (body) {
    *body = serve_read_file(body_path);
    if (!*body) *body = calloc(1, 1);
  }
  return c;
}

#endif /* PH_TESTS_SERVE_TESTING_H */
