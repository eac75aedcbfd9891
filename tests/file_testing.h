/* file_testing — helpers for tests of how files are read and written (base/wfile.h, fmap.h):
 * FIFOs, leftover temporary files, byte-for-byte comparisons, and a watchdog so that a read or
 * write that blocks fails the test in seconds instead of hanging ctest.
 *
 *   ft_watchdog(10);                       // SIGALRM ends the process after 10 s
 *   ... a call that must not block ...
 *   ft_watchdog(0);                        // disarm
 */
#ifndef PH_TESTS_FILE_TESTING_H
#define PH_TESTS_FILE_TESTING_H

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void ft_alarm_(int sig) {
  (void)sig;
  static const char msg[] = "  FAIL watchdog: a file operation blocked (FIFO?)\n";
  ssize_t n = write(2, msg, sizeof msg - 1);
  (void)n;
  _exit(3);
}

/* Ends the process with a failure after seconds (0 disarms). */
static inline void ft_watchdog(unsigned seconds) {
  signal(SIGALRM, ft_alarm_);
  alarm(seconds);
}

/* Creates a FIFO at dir/name (replacing what was there) into path[4096]; 0 on failure. */
static inline int ft_fifo(char *path, const char *dir, const char *name) {
  if (snprintf(path, 4096, "%s/%s", dir, name) >= 4096) return 0;
  unlink(path);
  return mkfifo(path, 0600) == 0;
}

/* Entries of dir whose name holds ".tmp-" (base/wfile.h's temporary files). */
static inline int ft_count_tmp(const char *dir) {
  DIR *dp = opendir(dir);
  if (!dp) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(dp)) != NULL) n += strstr(e->d_name, ".tmp-") != NULL;
  closedir(dp);
  return n;
}

/* 1 when path is a regular file holding exactly the n bytes at p. */
static inline int ft_file_is(const char *path, const void *p, size_t n) {
  struct stat st;
  if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size != n) return 0;
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  unsigned char *buf = malloc(n ? n : 1);
  int ok = buf && fread(buf, 1, n, f) == n && memcmp(buf, p, n) == 0;
  free(buf);
  fclose(f);
  return ok;
}

static inline int ft_is_fifo(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 && S_ISFIFO(st.st_mode);
}

static inline int ft_is_symlink(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

#endif /* PH_TESTS_FILE_TESTING_H */
