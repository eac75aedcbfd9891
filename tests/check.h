/* check — the project's test harness: a few assertion macros and a runner, header-only.
 *
 * Why not a framework: ctest is the runner (its closing line is what CI reads); each test
 * program needs only "check, print the failing values with file:line, keep going, exit non-zero
 * if anything failed". See docs/testing.md.
 *
 *   static void test_parse(void) { CHECK_EQ_INT(1 + 1, 2); }
 *   int main(void) { RUN(test_parse); return check_finish(); }
 *
 * A check that fails prints the expression, both values and the location, and the test goes on
 * (so one run shows every failure). RUN prints one line per test.
 */
#ifndef PH_TESTS_CHECK_H
#define PH_TESTS_CHECK_H

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "pagedhybrid.h"

static int check_n_checks;
static int check_n_failed;
static int check_n_tests;
static int check_n_tests_failed;

static inline int check_report(int ok, const char *file, int line, const char *what) {
  check_n_checks++;
  if (!ok) {
    check_n_failed++;
    fprintf(stderr, "  FAIL %s:%d: %s\n", file, line, what);
  }
  return ok;
}

#define CHECK(cond) check_report(!!(cond), __FILE__, __LINE__, #cond)

#define CHECK_EQ_INT(a, b)                                                                         \
  do {                                                                                             \
    long long check_a_ = (long long)(a), check_b_ = (long long)(b);                                \
    if (!check_report(check_a_ == check_b_, __FILE__, __LINE__, #a " == " #b))                     \
      fprintf(stderr, "       got %lld, expected %lld\n", check_a_, check_b_);                     \
  } while (0)

#define CHECK_EQ_STR(a, b)                                                                         \
  do {                                                                                             \
    const char *check_a_ = (a), *check_b_ = (b);                                                   \
    int check_ok_ = check_a_ && check_b_ && strcmp(check_a_, check_b_) == 0;                       \
    if (!check_report(check_ok_, __FILE__, __LINE__, #a " == " #b))                                \
      fprintf(stderr, "       got \"%s\", expected \"%s\"\n", check_a_ ? check_a_ : "(null)",      \
              check_b_ ? check_b_ : "(null)");                                                     \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                                      \
  do {                                                                                             \
    double check_a_ = (double)(a), check_b_ = (double)(b), check_t_ = (double)(tol);               \
    if (!check_report(fabs(check_a_ - check_b_) <= check_t_, __FILE__, __LINE__, #a " ~= " #b))    \
      fprintf(stderr, "       got %.9g, expected %.9g (tolerance %.3g)\n", check_a_, check_b_,     \
              check_t_);                                                                           \
  } while (0)

/* Checks a ph_status; on mismatch prints both names and the diag/detail message if given. */
#define CHECK_STATUS(expr, expected, detail)                                                       \
  do {                                                                                             \
    ph_status check_s_ = (expr), check_e_ = (expected);                                            \
    const char *check_detail_ = (detail);                                                          \
    if (!check_report(check_s_ == check_e_, __FILE__, __LINE__, #expr))                            \
      fprintf(stderr, "       got %s, expected %s%s%s\n", ph_status_name(check_s_),                \
              ph_status_name(check_e_), check_detail_ ? ": " : "",                                 \
              check_detail_ ? check_detail_ : "");                                                 \
  } while (0)

/* Checks that haystack contains needle (messages must name the problem). */
#define CHECK_CONTAINS(haystack, needle)                                                           \
  do {                                                                                             \
    const char *check_h_ = (haystack), *check_n_ = (needle);                                       \
    if (!check_report(check_h_ && strstr(check_h_, check_n_) != NULL, __FILE__, __LINE__,          \
                      #haystack " contains " #needle))                                             \
      fprintf(stderr, "       \"%s\" does not contain \"%s\"\n", check_h_ ? check_h_ : "(null)",   \
              check_n_);                                                                           \
  } while (0)

static inline void check_run(const char *name, void (*fn)(void)) {
  int before = check_n_failed;
  check_n_tests++;
  fn();
  int failed = check_n_failed - before;
  if (failed) check_n_tests_failed++;
  printf("%s %s\n", failed ? "FAIL" : "ok  ", name);
  fflush(stdout);
}

#define RUN(fn) check_run(#fn, fn)

/* A test program given an argument runs only the tests whose names contain it ("test_engine
 * randomized"): main calls check_select(argc, argv), then RUN_SELECTED(fn) for each test. */
static const char *check_only;

static inline void check_select(int argc, char **argv) { check_only = argc > 1 ? argv[1] : NULL; }

static inline int check_selected(const char *name) {
  return !check_only || strstr(name, check_only) != NULL;
}

#define RUN_SELECTED(fn)                                                                           \
  do {                                                                                             \
    if (check_selected(#fn)) RUN(fn);                                                              \
  } while (0)

/* Prints the summary ("N passed, N failed" counts tests) and returns the exit code. */
static inline int check_finish(void) {
  printf("%d passed, %d failed (%d checks, %d failed)\n", check_n_tests - check_n_tests_failed,
         check_n_tests_failed, check_n_checks, check_n_failed);
  return check_n_tests_failed ? 1 : 0;
}

/* Tolerances shared by the model-level tests, as fractions of the reference's scale (max |x| of
 * the reference tensor: logits of a sequence, or one state tensor).
 *
 * GOLDEN_F32_TOL: a float32 implementation of the model math against the float64 golden
 * references (tests/data/golden; their README, ../shared/golden/README.md): such an
 * implementation lands within about 3e-5 of the scale on the golden sequences, and 2e-4 (~7x
 * that, for sequences and kernels other than the ones measured) is the bound the references come
 * with; a real mistake is orders of magnitude larger.
 *
 * PAIR_F32_TOL: two float32 implementations of the same math over the same weights (paged vs
 * dense, our executor vs ONNX Runtime), each within GOLDEN_F32_TOL of the f64 result, differ by at
 * most the sum of their distances to it (triangle inequality): 2 x GOLDEN_F32_TOL. */
#define GOLDEN_F32_TOL 2e-4
#define PAIR_F32_TOL   (2 * GOLDEN_F32_TOL)

/* One element of a comparison against a reference: raises *err to |got - want| and *scale to
 * |want|. NaN counts as infinite error: a non-finite got or want makes *err infinite (fmax, the
 * obvious way to write this, silently drops a NaN, so an all-NaN output would pass). */
static inline void check_err_acc(double got, double want, double *err, double *scale) {
  if (!isfinite(got) || !isfinite(want)) {
    *err = INFINITY;
    return;
  }
  const double e = fabs(got - want), a = fabs(want);
  if (e > *err) *err = e;
  if (a > *scale) *scale = a;
}

/* Environment helpers for tests run by ctest (CMakeLists sets these). */
static inline const char *check_env(const char *name) {
  const char *v = getenv(name);
  if (!v || !*v) {
    fprintf(stderr, "  FAIL: environment variable %s is not set (run through ctest)\n", name);
    exit(1);
  }
  return v;
}

/* A path under the test data the project ships (tests/data, PH_DATA_DIR set by ctest), checked to
 * exist: a test whose data is missing stops at once with one line naming the file, instead of a
 * cascade of failures. fmt is relative to tests/data ("golden/%s/checkpoint"). Returns buf. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static inline const char *
check_data(char *buf, size_t n, const char *fmt, ...) {
  const char *root = check_env("PH_DATA_DIR");
  char rel[1024];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(rel, sizeof rel, fmt, ap);
  va_end(ap);
  int m = k >= 0 && (size_t)k < sizeof rel ? snprintf(buf, n, "%s/%s", root, rel) : -1;
  if (m < 0 || (size_t)m >= n) {
    fprintf(stderr, "  FAIL: test data path too long: %s/%s\n", root, rel);
    exit(1);
  }
  if (access(buf, R_OK) != 0) {
    fprintf(stderr,
            "  FAIL: test data missing: %s (tests/data/README.md says where it comes from)\n", buf);
    exit(1);
  }
  return buf;
}

/* SANITIZED: 1 in a build with a sanitizer that slows or reshapes memory (ASan, MSan, TSan),
 * for the tests that size their work or their memory bounds by it; 0 otherwise. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer) ||                         \
    __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#endif /* PH_TESTS_CHECK_H */
