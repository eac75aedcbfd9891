/* test_base — unit tests of the base module: the status table, diag, arena, thread pool, CPU
 * features, logging and file maps.
 *
 * The pool tests check its contract task by task: every task runs exactly once per pool_run
 * (n_tasks around and far above the thread count), thread indices map to distinct OS threads
 * with 0 on the caller, workers that arrive late never run a stale job or the next job's tasks
 * with the old fn/ctx, a shared job is always joined (no lost wake-up), and pool_free works
 * whether workers spin or sleep. The options of pool_create_for_test share every job and delay
 * workers, so the concurrent paths run even where the cost model would keep a job inline. They
 * also run with more threads than CPUs, which exercises the sleep/wake paths.
 * Temporary files go under $PH_TMP_DIR (set by ctest).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "check.h"

#include "base/arena.h"
#include "base/cpu.h"
#include "base/diag.h"
#include "base/fmap.h"
#include "base/log.h"
#include "base/pool.h"
#include "base/wfile.h"
#include "file_testing.h"

/* ---- status table ------------------------------------------------------------------------ */

typedef struct status_row {
  int value;
  ph_status status;
  const char *name;
  const char *message;
} status_row;

static const status_row STATUS_ROWS[] = {
#define STATUS_ROW_(value, name, message) {value, PH_##name, "PH_" #name, message},
    PH_STATUS_TABLE(STATUS_ROW_)
#undef STATUS_ROW_
};
#define N_STATUS_ROWS (sizeof STATUS_ROWS / sizeof STATUS_ROWS[0])

static void test_status_table(void) {
  CHECK_EQ_INT(PH_OK, 0);
  CHECK(N_STATUS_ROWS > 1);
  for (size_t i = 0; i < N_STATUS_ROWS; i++) {
    const status_row *r = &STATUS_ROWS[i];
    CHECK_EQ_INT((int)r->status, r->value);
    const char *name = ph_status_name(r->status);
    CHECK_EQ_STR(name, r->name);
    CHECK(strncmp(name, "PH_", 3) == 0);
    CHECK(strlen(name) > 3);
    const char *msg = ph_status_message(r->status);
    CHECK_EQ_STR(msg, r->message);
    CHECK(msg && msg[0] != '\0');
    for (size_t j = i + 1; j < N_STATUS_ROWS; j++) {
      CHECK(STATUS_ROWS[j].value != r->value);
      CHECK(strcmp(STATUS_ROWS[j].name, r->name) != 0);
    }
  }
  CHECK_EQ_STR(ph_status_name((ph_status)9999), "PH_UNKNOWN_STATUS");
  const char *unknown_msg = ph_status_message((ph_status)9999);
  CHECK(unknown_msg && unknown_msg[0] != '\0');
}

/* ---- diag -------------------------------------------------------------------------------- */

static ph_status fails_if(int cond, diag *d) {
  RETURN_ERROR_IF(cond, d, PH_ERR_CONFIG_INVALID, "field %s is %d", "x", 7);
  return PH_OK;
}

static ph_status forwards(int cond, diag *d, int *reached_end) {
  FORWARD_IF_ERROR(fails_if(cond, d));
  *reached_end = 1;
  return PH_OK;
}

static void test_diag(void) {
  diag d;
  diag_clear(&d);
  CHECK_EQ_INT(d.status, PH_OK);
  CHECK_EQ_STR(d.msg, "");

  CHECK_STATUS(diag_set(&d, PH_ERR_IO, "open %s: %d", "a.bin", 2), PH_ERR_IO, d.msg);
  CHECK_EQ_INT(d.status, PH_ERR_IO);
  CHECK_EQ_STR(d.msg, "open a.bin: 2");
  CHECK_STATUS(diag_prefix(&d, "model %s", "dir"), PH_ERR_IO, d.msg);
  CHECK_EQ_STR(d.msg, "model dir: open a.bin: 2");

  diag copy;
  diag_copy(&copy, &d);
  CHECK_EQ_INT(copy.status, PH_ERR_IO);
  CHECK_EQ_STR(copy.msg, d.msg);
  diag_copy(NULL, &d);
  diag_copy(&d, &d);
  CHECK_EQ_STR(d.msg, "model dir: open a.bin: 2");

  /* A prefix on success changes nothing. */
  diag_clear(&d);
  CHECK_STATUS(diag_prefix(&d, "ctx"), PH_OK, d.msg);
  CHECK_EQ_STR(d.msg, "");

  /* NULL diags are allowed everywhere. */
  diag_clear(NULL);
  CHECK_STATUS(diag_set(NULL, PH_ERR_LIMIT, "x"), PH_ERR_LIMIT, NULL);
  CHECK_STATUS(diag_prefix(NULL, "x"), PH_OK, NULL);

  /* Truncation keeps a NUL inside the buffer. */
  char big[DIAG_MSG_BYTES * 2];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  diag_set(&d, PH_ERR_JSON, "%s", big);
  CHECK_EQ_INT(strlen(d.msg), DIAG_MSG_BYTES - 1);
  diag_set(&d, PH_ERR_JSON, "tail");
  diag_prefix(&d, "%s", big);
  CHECK_EQ_INT(strlen(d.msg), DIAG_MSG_BYTES - 1);
  CHECK(d.msg[0] == 'a');
  diag_set(&d, PH_ERR_JSON, "%s", big);
  diag_prefix(&d, "ctx");
  CHECK_EQ_INT(strlen(d.msg), DIAG_MSG_BYTES - 1);
  CHECK(strncmp(d.msg, "ctx: aaa", 8) == 0);

  /* The check-and-return pair. */
  int reached = 0;
  diag_clear(&d);
  CHECK_STATUS(forwards(0, &d, &reached), PH_OK, d.msg);
  CHECK_EQ_INT(reached, 1);
  reached = 0;
  CHECK_STATUS(forwards(1, &d, &reached), PH_ERR_CONFIG_INVALID, d.msg);
  CHECK_EQ_INT(reached, 0);
  CHECK_EQ_STR(d.msg, "field x is 7");
}

/* ---- arena ------------------------------------------------------------------------------- */

static int all_bytes_are(const unsigned char *p, size_t n, unsigned char v) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != v) return 0;
  return 1;
}

static const size_t ARENA_SIZES[] = {
    0,    1,    2,    3,    7,     8,     31,    63,    64, 65, 100, 127,   128, 129,    255, 256,
    1000, 4095, 4096, 4097, 16383, 16385, 65535, 65536, 1,  0,  3,   65537, 5,   200000, 17,  64};
#define N_ARENA_SIZES (sizeof ARENA_SIZES / sizeof ARENA_SIZES[0])

static void fill_arena(arena *a, unsigned char *ptrs[], int *bad_align, int *bad_zero) {
  for (size_t i = 0; i < N_ARENA_SIZES; i++) {
    unsigned char *p = arena_alloc(a, ARENA_SIZES[i]);
    ptrs[i] = p;
    if (!p) continue;
    if ((uintptr_t)p % ARENA_ALIGN != 0) (*bad_align)++;
    if (!all_bytes_are(p, ARENA_SIZES[i], 0)) (*bad_zero)++;
    memset(p, (int)(i + 1), ARENA_SIZES[i]);
  }
}

static void test_arena_alignment_and_zeroing(void) {
  arena a;
  arena_init(&a, 0);
  unsigned char *ptrs[N_ARENA_SIZES];
  int bad_align = 0, bad_zero = 0;
  for (int round = 0; round < 3; round++) {
    fill_arena(&a, ptrs, &bad_align, &bad_zero);
    /* Every allocation still holds its own pattern: nothing overlapped. */
    int clobbered = 0, null = 0;
    for (size_t i = 0; i < N_ARENA_SIZES; i++) {
      if (!ptrs[i])
        null++;
      else if (!all_bytes_are(ptrs[i], ARENA_SIZES[i], (unsigned char)(i + 1)))
        clobbered++;
    }
    CHECK_EQ_INT(null, 0);
    CHECK_EQ_INT(clobbered, 0);
    /* Zero-byte allocations are distinct pointers. */
    CHECK(ptrs[0] != ptrs[25]);
    /* After a reset the same memory comes back, and must come back zeroed. */
    arena_reset(&a);
    CHECK_EQ_INT(a.used_bytes, 0);
  }
  CHECK_EQ_INT(bad_align, 0);
  CHECK_EQ_INT(bad_zero, 0);
  arena_free(&a);
  arena_free(&a); /* idempotent */
  arena_free(NULL);
}

static void test_arena_reset_reuse(void) {
  arena a;
  arena_init(&a, 4096);
  CHECK_EQ_INT(a.n_system_allocs, 0); /* lazy */
  /* A cycle that fits one block: after the first cycle, no more system allocations. */
  for (int cycle = 0; cycle < 5; cycle++) {
    for (int i = 0; i < 30; i++) CHECK(arena_alloc(&a, 100) != NULL);
    CHECK_EQ_INT(a.n_system_allocs, 1);
    CHECK(a.used_bytes >= 3000);
    arena_reset(&a);
  }

  /* Several blocks and a dedicated large one: reset keeps the largest, so a later cycle that
   * fits in it allocates nothing. */
  for (int i = 0; i < 100; i++) CHECK(arena_alloc(&a, 200) != NULL);
  unsigned char *big = arena_alloc(&a, 1 << 20);
  CHECK(big != NULL);
  CHECK(arena_alloc(&a, 10) != NULL); /* the current block keeps serving small requests */
  size_t before = a.n_system_allocs;
  CHECK(before > 2);
  arena_reset(&a);
  CHECK_EQ_INT(a.n_system_allocs, before);
  unsigned char *again = arena_alloc(&a, (1 << 20) - 4096);
  CHECK(again != NULL);
  for (int i = 0; i < 10; i++) CHECK(arena_alloc(&a, 300) != NULL);
  CHECK_EQ_INT(a.n_system_allocs, before);
  CHECK(again && all_bytes_are(again, (1 << 20) - 4096, 0));
  arena_free(&a);

  /* The arena is reusable after free + init. */
  arena_init(&a, 0);
  CHECK(arena_alloc(&a, 10) != NULL);
  arena_free(&a);
}

static void test_arena_limits_and_strings(void) {
  arena a;
  arena_init(&a, 1024);
  CHECK(arena_alloc(&a, SIZE_MAX) == NULL);
  CHECK(arena_alloc(&a, SIZE_MAX - 63) == NULL);
  CHECK(arena_alloc(&a, SIZE_MAX / 2 + 1) == NULL);
  CHECK(arena_alloc(NULL, 8) == NULL);
  CHECK_EQ_INT(a.n_system_allocs, 0); /* rejected before reaching malloc */

  char *s = arena_strdup(&a, "hello");
  CHECK_EQ_STR(s, "hello");
  CHECK((uintptr_t)s % ARENA_ALIGN == 0);
  CHECK_EQ_STR(arena_strndup(&a, "hello", 3), "hel");
  CHECK_EQ_STR(arena_strndup(&a, "hi", 10), "hi");
  CHECK_EQ_STR(arena_strndup(&a, "abc", 0), "");
  CHECK(arena_strdup(&a, NULL) == NULL);
  /* Still usable after the failures. */
  CHECK(arena_alloc(&a, 5000) != NULL);
  arena_free(&a);
}

/* ---- pool -------------------------------------------------------------------------------- */

/* Task cost for the pool tests: `spin` rounds of dependent arithmetic (about 1 ns each), enough
 * at a few hundred rounds for the real pool to share a job with its workers. */
static unsigned long long busy_work(size_t task, int spin) {
  volatile unsigned long long x = task + 1;
  for (int i = 0; i < spin; i++) x = x * 6364136223846793005ull + 1442695040888963407ull;
  return x;
}

typedef struct pool_record {
  int spin;
  atomic_int *count;         /* [n] times the task ran */
  int *thread;               /* [n] thread index that ran it */
  pthread_t *tid;            /* [n] OS thread that ran it */
  unsigned long long *value; /* [n] */
} pool_record;

static void record_task(void *ctx, size_t task, int thread) {
  pool_record *r = ctx;
  atomic_fetch_add(&r->count[task], 1);
  r->thread[task] = thread;
  r->tid[task] = pthread_self();
  busy_work(task, r->spin);
  r->value[task] = (unsigned long long)task * task + 1;
}

/* One pool_run of n tasks: every task ran exactly once, with a thread index in [0, T), index 0
 * on the calling thread and each index on one OS thread. Returns how many tasks ran on
 * workers. */
static size_t check_pool_case(pool *p, size_t n, int T, int spin) {
  size_t alloc_n = n ? n : 1, on_workers = 0;
  pool_record r = {spin, calloc(alloc_n, sizeof(atomic_int)), calloc(alloc_n, sizeof(int)),
                   calloc(alloc_n, sizeof(pthread_t)), calloc(alloc_n, sizeof(unsigned long long))};
  pthread_t *index_tid = calloc((size_t)T, sizeof(pthread_t));
  int *index_seen = calloc((size_t)T, sizeof(int));
  if (!CHECK(r.count && r.thread && r.tid && r.value && index_tid && index_seen)) goto done;
  for (size_t i = 0; i < n; i++) atomic_init(&r.count[i], 0);
  pool_run(p, n, record_task, &r);
  unsigned long long sum = 0, want = 0;
  size_t bad_count = 0, bad_thread = 0, bad_tid = 0;
  for (size_t i = 0; i < n; i++) {
    sum += r.value[i];
    want += (unsigned long long)i * i + 1;
    if (atomic_load(&r.count[i]) != 1) bad_count++;
    int t = r.thread[i];
    if (t < 0 || t >= T) {
      bad_thread++;
      continue;
    }
    on_workers += t != 0;
    if (!index_seen[t]) {
      index_seen[t] = 1;
      index_tid[t] = r.tid[i];
    } else if (!pthread_equal(index_tid[t], r.tid[i])) {
      bad_tid++;
    }
    if ((pthread_equal(r.tid[i], pthread_self()) != 0) != (t == 0)) bad_tid++;
  }
  for (int a = 1; a < T; a++) /* different indices: different OS threads */
    for (int b = 0; b < a; b++)
      if (index_seen[a] && index_seen[b] && pthread_equal(index_tid[a], index_tid[b])) bad_tid++;
  if (sum != want || bad_count || bad_thread || bad_tid)
    fprintf(stderr,
            "  pool case n_tasks=%zu threads=%d spin=%d: sum %llu (want %llu), %zu tasks not run "
            "exactly once, %zu thread indices out of range, %zu wrong OS threads\n",
            n, T, spin, sum, want, bad_count, bad_thread, bad_tid);
  CHECK(sum == want);
  CHECK_EQ_INT(bad_count, 0);
  CHECK_EQ_INT(bad_thread, 0);
  CHECK_EQ_INT(bad_tid, 0);
done:
  free(r.count);
  free(r.thread);
  free(r.tid);
  free(r.value);
  free(index_tid);
  free(index_seen);
  return on_workers;
}

/* Every task exactly once for n_tasks around the thread count and far above it, with the real
 * cost model (cheap tasks run inline, costly ones are shared) and with every job shared. */
static void test_pool_every_task_once(void) {
  static const int THREADS[] = {1, 2, 3, 8};
  for (int share = 0; share <= 1; share++)
    for (size_t k = 0; k < sizeof THREADS / sizeof THREADS[0]; k++) {
      int T = THREADS[k];
      pool_test_options o = {NULL, NULL, share};
      pool *p = NULL;
      diag d;
      diag_clear(&d);
      CHECK_STATUS(pool_create_for_test(T, &o, &p, &d), PH_OK, d.msg);
      if (!p) continue;
      CHECK_EQ_INT(pool_threads(p), T);
      const size_t N[] = {0, 1, 2, 3, (size_t)T - 1, (size_t)T, (size_t)T + 1, 100, 10000};
      size_t on_workers = 0;
      /* Twice over, so every case also runs on a pool whose cost table knows it. */
      for (int round = 0; round < 2; round++)
        for (size_t i = 0; i < sizeof N / sizeof N[0]; i++)
          for (int spin = 0; spin <= 400; spin += 400)
            on_workers += check_pool_case(p, N[i], T, spin);
      if (T == 1) CHECK_EQ_INT(on_workers, 0);
      fprintf(stderr, "     threads %d%s: %zu tasks ran on workers\n", T,
              share ? ", every job shared" : "", on_workers);
      pool_free(p);
    }
}

/* A shared job of two tasks that each wait for the other to start needs a worker: it ends only
 * if a worker joins, which it must do whether it was spinning or asleep when the job was
 * published (a lost wake-up fails here after 10 s instead of hanging). */
typedef struct rendezvous {
  atomic_int started;
  atomic_int timed_out;
} rendezvous;

static void rendezvous_task(void *ctx, size_t task, int thread) {
  (void)task;
  (void)thread;
  rendezvous *r = ctx;
  atomic_fetch_add(&r->started, 1);
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (atomic_load(&r->started) < 2) {
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (t.tv_sec - t0.tv_sec > 10) {
      atomic_store(&r->timed_out, 1);
      return;
    }
    sched_yield();
  }
}

static void test_pool_workers_join(void) {
  static const int THREADS[] = {2, 3, 8};
  for (size_t k = 0; k < sizeof THREADS / sizeof THREADS[0]; k++) {
    pool_test_options o = {NULL, NULL, 1};
    pool *p = NULL;
    CHECK_STATUS(pool_create_for_test(THREADS[k], &o, &p, NULL), PH_OK, NULL);
    if (!p) continue;
    int timed_out = 0;
    for (int run = 0; run < 60; run++) {
      /* gaps from none to 2 ms straddle the workers' spin: they are spinning, deciding to
       * sleep, or asleep when the job comes */
      long gap_us = run % 3 == 0 ? 0 : run % 3 == 1 ? (run * 7) % 120 : 2000;
      struct timespec gap = {0, gap_us * 1000};
      nanosleep(&gap, NULL);
      rendezvous r;
      atomic_init(&r.started, 0);
      atomic_init(&r.timed_out, 0);
      pool_run(p, 2, rendezvous_task, &r);
      timed_out += atomic_load(&r.timed_out);
      CHECK_EQ_INT(atomic_load(&r.started), 2);
    }
    CHECK_EQ_INT(timed_out, 0);
    pool_free(p);
  }
}

/* A worker that is not running (the OS descheduled it: here the hook holds every worker until
 * the test opens the gate) must not hold a job hostage: the caller runs every task itself and
 * pool_run returns. A static split waits for the held worker's share; with the hook's 10 s
 * limit it returned only then, which is what `held_to_the_limit` catches. */
typedef struct gate {
  atomic_int open;
  atomic_int held_to_the_limit;
} gate;

static void gate_hook(void *ctx, int worker) {
  (void)worker;
  gate *g = ctx;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (!atomic_load(&g->open)) {
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (t.tv_sec - t0.tv_sec > 10) {
      atomic_store(&g->held_to_the_limit, 1);
      return;
    }
    struct timespec nap = {0, 100 * 1000};
    nanosleep(&nap, NULL);
  }
}

static void test_pool_no_hostage(void) {
  static const int THREADS[] = {2, 3, 8};
  for (size_t k = 0; k < sizeof THREADS / sizeof THREADS[0]; k++) {
    int T = THREADS[k];
    gate g;
    atomic_init(&g.open, 0);
    atomic_init(&g.held_to_the_limit, 0);
    pool_test_options o = {gate_hook, &g, 1};
    pool *p = NULL;
    CHECK_STATUS(pool_create_for_test(T, &o, &p, NULL), PH_OK, NULL);
    if (!p) continue;
    for (int run = 0; run < 3; run++) /* workers held: everything on the caller */
      CHECK_EQ_INT(check_pool_case(p, 100, T, 100), 0);
    CHECK_EQ_INT(atomic_load(&g.held_to_the_limit), 0);
    atomic_store(&g.open, 1); /* the workers arrive, late: the jobs are over */
    for (int run = 0; run < 3; run++) check_pool_case(p, 1000, T, 100);
    pool_free(p);
    CHECK_EQ_INT(atomic_load(&g.held_to_the_limit), 0);
  }
}

/* Workers that arrive late (the hook sleeps before they try to join) must never run a task of a
 * job that is over, nor run the next job's tasks with the old fn/ctx. Two task functions with
 * their own contexts alternate over thousands of back-to-back jobs of varying size; every task
 * checks that the job it belongs to is the one running, and some tasks are slow. */
typedef struct late_ctx {
  int kind;          /* 0 or 1: which function must run this context */
  int job;           /* the job this context belongs to */
  atomic_int *count; /* [n] */
  atomic_int *errors;
} late_ctx;

static atomic_int late_running_job; /* the job pool_run is inside, 0 between jobs */
static atomic_int late_hook_calls;

static void late_hook(void *ctx, int worker) {
  (void)ctx;
  int k = atomic_fetch_add(&late_hook_calls, 1);
  /* a deterministic subset of arrivals are late by 0.2 ms, longer than most jobs here */
  if ((k + worker) % 5 == 0) {
    struct timespec t = {0, 200 * 1000};
    nanosleep(&t, NULL);
  }
}

static void late_check(late_ctx *c, size_t task, int kind) {
  if (c->kind != kind || atomic_load(&late_running_job) != c->job) atomic_fetch_add(c->errors, 1);
  atomic_fetch_add(&c->count[task], 1);
  if (c->job % 97 == 0 && task == 0) { /* a slow task holds its job open */
    struct timespec t = {0, 500 * 1000};
    nanosleep(&t, NULL);
  }
  busy_work(task, 50);
  if (atomic_load(&late_running_job) != c->job) atomic_fetch_add(c->errors, 1);
}

static void late_task_a(void *ctx, size_t task, int thread) {
  (void)thread;
  late_check(ctx, task, 0);
}

static void late_task_b(void *ctx, size_t task, int thread) {
  (void)thread;
  late_check(ctx, task, 1);
}

static void test_pool_late_workers(void) {
  static const int THREADS[] = {2, 3, 8};
  for (size_t k = 0; k < sizeof THREADS / sizeof THREADS[0]; k++) {
    for (int share = 0; share <= 1; share++) {
      pool_test_options o = {late_hook, NULL, share};
      pool *p = NULL;
      CHECK_STATUS(pool_create_for_test(THREADS[k], &o, &p, NULL), PH_OK, NULL);
      if (!p) continue;
      enum { MAX_N = 40, JOBS = 3000 };
      atomic_int count[2][MAX_N], errors;
      atomic_init(&errors, 0);
      int miscounted = 0;
      for (int job = 1; job <= JOBS; job++) {
        int kind = job % 2;
        size_t n = (size_t)((job * 7) % MAX_N);
        for (int i = 0; i < MAX_N; i++) atomic_init(&count[kind][i], 0);
        late_ctx c = {kind, job, count[kind], &errors};
        atomic_store(&late_running_job, job);
        pool_run(p, n, kind ? late_task_b : late_task_a, &c);
        atomic_store(&late_running_job, 0);
        for (size_t i = 0; i < MAX_N; i++)
          miscounted += atomic_load(&count[kind][i]) != (i < n ? 1 : 0);
      }
      /* late workers may still be on their way: give them time to do something wrong */
      struct timespec t = {0, 2 * 1000 * 1000};
      nanosleep(&t, NULL);
      CHECK_EQ_INT(atomic_load(&errors), 0);
      CHECK_EQ_INT(miscounted, 0);
      pool_free(p);
    }
  }
}

typedef struct stamp_ctx {
  int run;    /* written by the caller between runs */
  int spin;   /* task cost */
  int *stamp; /* [n_tasks] */
  int *count; /* [n_tasks] */
} stamp_ctx;

static void stamp_task(void *ctx, size_t task, int thread) {
  (void)thread;
  stamp_ctx *c = ctx;
  busy_work(task, c->spin);
  c->stamp[task] = c->run;
  c->count[task]++;
}

/* Thousands of back-to-back runs of varying size and cost: pool_run returning means every task
 * ran once and its writes are visible, whether the caller ran it or a worker did. */
static void test_pool_back_to_back(void) {
  /* 2 threads matches this machine; 4 and 8 oversubscribe it and so exercise the sleep paths. */
  static const int THREADS[] = {2, 4, 8};
  for (size_t k = 0; k < sizeof THREADS / sizeof THREADS[0]; k++) {
    int T = THREADS[k];
    pool *p = NULL;
    CHECK_STATUS(pool_create(T, &p, NULL), PH_OK, NULL);
    if (!p) continue;
    enum { MAX_N = 64 };
    int stamp[MAX_N] = {0}, count[MAX_N] = {0};
    stamp_ctx c = {0, 0, stamp, count};
    int stale = 0, miscounted = 0;
    const int RUNS = 10000;
    for (int run = 1; run <= RUNS; run++) {
      size_t n = (size_t)((run * 13) % (MAX_N + 1));
      c.run = run;
      c.spin = (run / 100) % 3 == 0 ? 0 : (run / 100) % 3 == 1 ? 200 : 2000;
      memset(count, 0, sizeof count);
      pool_run(p, n, stamp_task, &c);
      for (size_t t = 0; t < n; t++) {
        stale += stamp[t] != run;
        miscounted += count[t] != 1;
      }
    }
    CHECK_EQ_INT(stale, 0);
    CHECK_EQ_INT(miscounted, 0);

    /* Gaps from 0 to 190 us straddle the end of the workers' spin, so runs land while workers
     * are deciding to sleep. */
    stale = 0;
    c.spin = 2000;
    for (int run = 0; run < 200; run++) {
      struct timespec gap = {0, (run % 20) * 10 * 1000};
      nanosleep(&gap, NULL);
      c.run = RUNS + 2 + run;
      pool_run(p, MAX_N, stamp_task, &c);
      for (int t = 0; t < MAX_N; t++) stale += stamp[t] != c.run;
    }
    CHECK_EQ_INT(stale, 0);
    pool_free(p);
  }
}

/* pool_free joins workers whether they are spinning (right after a shared job) or asleep. */
static void test_pool_free_spinning_or_asleep(void) {
  static const int THREADS[] = {2, 8};
  for (size_t k = 0; k < sizeof THREADS / sizeof THREADS[0]; k++)
    for (int i = 0; i < 20; i++) {
      pool_test_options o = {NULL, NULL, 1};
      pool *p = NULL;
      CHECK_STATUS(pool_create_for_test(THREADS[k], &o, &p, NULL), PH_OK, NULL);
      if (!p) continue;
      int stamp[16] = {0}, count[16] = {0};
      stamp_ctx c = {1, 100, stamp, count};
      pool_run(p, 16, stamp_task, &c);
      if (i % 2) {
        struct timespec t = {0, 5 * 1000 * 1000};
        nanosleep(&t, NULL);
      }
      pool_free(p);
      for (int t = 0; t < 16; t++) CHECK_EQ_INT(count[t], 1);
    }
}

static void test_pool_create_and_free(void) {
  CHECK(cpu_count_online() >= 1);
  pool *p = NULL;
  CHECK_STATUS(pool_create(0, &p, NULL), PH_OK, NULL);
  CHECK_EQ_INT(pool_threads(p), cpu_count_online());
  pool_free(p);
  p = NULL;
  CHECK_STATUS(pool_create(-3, &p, NULL), PH_OK, NULL);
  CHECK_EQ_INT(pool_threads(p), cpu_count_online());
  pool_free(p);

  diag d;
  diag_clear(&d);
  p = (pool *)&d; /* must be overwritten with NULL on failure */
  CHECK_STATUS(pool_create(1 << 20, &p, &d), PH_ERR_LIMIT, d.msg);
  CHECK(p == NULL);
  CHECK_CONTAINS(d.msg, "threads");

  /* Create and free straight away, workers possibly not yet started: no hang, no leak. */
  for (int i = 0; i < 20; i++) {
    p = NULL;
    CHECK_STATUS(pool_create(1 + i % 4, &p, NULL), PH_OK, NULL);
    pool_free(p);
  }
  pool_free(NULL);

  /* A NULL pool runs inline on the caller as thread 0. */
  atomic_int count[3];
  int thread[3] = {-1, -1, -1};
  pthread_t tid[3];
  unsigned long long value[3];
  for (int i = 0; i < 3; i++) atomic_init(&count[i], 0);
  pool_record r = {0, count, thread, tid, value};
  pool_run(NULL, 3, record_task, &r);
  for (int i = 0; i < 3; i++) {
    CHECK_EQ_INT(thread[i], 0);
    CHECK_EQ_INT(atomic_load(&count[i]), 1);
  }
}

/* ---- cpu features ------------------------------------------------------------------------ */

static int features_equal(const ph_cpu_features *a, const ph_cpu_features *b) {
  return a->avx2 == b->avx2 && a->fma == b->fma && a->f16c == b->f16c && a->avx512f == b->avx512f &&
         a->avx512bw == b->avx512bw && a->avx512vl == b->avx512vl &&
         a->avx512_vnni == b->avx512_vnni && a->avx512_bf16 == b->avx512_bf16;
}

static void check_consistent(const ph_cpu_features *f) {
  int flags[] = {f->avx2,     f->fma,      f->f16c,        f->avx512f,
                 f->avx512bw, f->avx512vl, f->avx512_vnni, f->avx512_bf16};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) CHECK(flags[i] == 0 || flags[i] == 1);
  if (f->avx512bw || f->avx512vl || f->avx512_vnni || f->avx512_bf16) CHECK(f->avx512f);
  if (f->avx512f) CHECK(f->avx2 && f->fma && f->f16c);
}

/* 1 if /proc/cpuinfo lists `flag`, 0 if not, -1 if it cannot be read. */
static int cpuinfo_has(const char *flag) {
  FILE *fp = fopen("/proc/cpuinfo", "r");
  if (!fp) return -1;
  char line[8192];
  int found = -1;
  while (fgets(line, sizeof line, fp)) {
    if (strncmp(line, "flags", 5) != 0) continue;
    found = 0;
    size_t n = strlen(flag);
    for (char *p = strstr(line, flag); p; p = strstr(p + 1, flag)) {
      int starts = p == line || p[-1] == ' ' || p[-1] == '\t';
      int ends = p[n] == ' ' || p[n] == '\n' || p[n] == '\0';
      if (starts && ends) {
        found = 1;
        break;
      }
    }
    break;
  }
  fclose(fp);
  return found;
}

static void *read_features_thread(void *arg) {
  *(const ph_cpu_features **)arg = cpu_features();
  return NULL;
}

static void test_cpu_features(void) {
  ph_cpu_features base = cpu_detect_uncached(NULL);
  check_consistent(&base);
  ph_cpu_features public_result = ph_cpu_detect();
  check_consistent(&public_result);
  /* The cached value is the public one, and one object for every thread. */
  const ph_cpu_features *cached = cpu_features();
  CHECK(cached == cpu_features());
  CHECK(features_equal(cached, &public_result));
  pthread_t th[4];
  const ph_cpu_features *seen[4] = {0};
  for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, read_features_thread, &seen[i]);
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    CHECK(seen[i] == cached);
  }

  char buf[128];
  printf("     cpu: %s\n", cpu_features_string(&base, buf, sizeof buf));

#if defined(__linux__) && (defined(__x86_64__) || defined(__i386__))
  /* The kernel's view is an independent reading of the same CPUID + XCR0 facts. */
  const char *env = getenv("PH_CPU_DISABLE");
  if (!env || !*env) {
    const struct {
      int have;
      const char *flag;
    } kernel[] = {
        {base.avx2, "avx2"},
        {base.fma, "fma"},
        {base.f16c, "f16c"},
        {base.avx512f, "avx512f"},
        {base.avx512bw, "avx512bw"},
        {base.avx512vl, "avx512vl"},
        {base.avx512_vnni, "avx512_vnni"},
        {base.avx512_bf16, "avx512_bf16"},
    };
    for (size_t i = 0; i < sizeof kernel / sizeof kernel[0]; i++) {
      int has = cpuinfo_has(kernel[i].flag);
      if (has < 0) break;
      if (!CHECK(has == kernel[i].have))
        fprintf(stderr, "       %s: /proc/cpuinfo %d, detected %d\n", kernel[i].flag, has,
                kernel[i].have);
    }
  }
#endif
}

static void clear_avx512(ph_cpu_features *f) {
  f->avx512f = f->avx512bw = f->avx512vl = f->avx512_vnni = f->avx512_bf16 = 0;
}

static void check_mask(const char *list, ph_cpu_features want) {
  ph_cpu_features got = cpu_detect_uncached(list);
  check_consistent(&got);
  if (!CHECK(features_equal(&got, &want))) {
    char a[128], b[128];
    fprintf(stderr, "       PH_CPU_DISABLE=\"%s\": got \"%s\", expected \"%s\"\n", list,
            cpu_features_string(&got, a, sizeof a), cpu_features_string(&want, b, sizeof b));
  }
}

static void test_cpu_disable(void) {
  const ph_cpu_features base = cpu_detect_uncached(NULL);
  ph_cpu_features w;

  check_mask("", base);
  check_mask("bogus,avx513", base);
  w = base;
  clear_avx512(&w);
  check_mask("avx512", w);
  check_mask("avx512f", w);
  w = base;
  w.avx512_bf16 = 0;
  check_mask("bf16", w);
  w = base;
  w.avx512bw = 0;
  check_mask("avx512bw", w);
  w = base;
  w.avx512vl = 0;
  check_mask("avx512vl", w);
  w = base;
  w.avx512_vnni = 0;
  check_mask("vnni", w);
  /* Without AVX2, FMA or F16C the AVX-512 tier goes too (cpu.c: tier order). */
  w = base;
  w.avx2 = 0;
  clear_avx512(&w);
  check_mask("avx2", w);
  w = base;
  w.fma = 0;
  clear_avx512(&w);
  check_mask("fma", w);
  w = base;
  w.f16c = 0;
  w.avx512_bf16 = 0;
  clear_avx512(&w);
  check_mask(" f16c , bf16 ,,", w);
  ph_cpu_features none;
  memset(&none, 0, sizeof none);
  check_mask("avx2,fma,f16c,avx512,avx512bw,avx512vl,vnni,bf16", none);
}

static void test_cpu_features_string(void) {
  ph_cpu_features all = {1, 1, 1, 1, 1, 1, 1, 1}, none;
  memset(&none, 0, sizeof none);
  char buf[128];
  CHECK_EQ_STR(cpu_features_string(&all, buf, sizeof buf),
               "avx2 fma f16c avx512f avx512bw avx512vl avx512_vnni avx512_bf16");
  CHECK_EQ_STR(cpu_features_string(&none, buf, sizeof buf), "");
  /* Truncation keeps whole names only. */
  CHECK_EQ_STR(cpu_features_string(&all, buf, 10), "avx2 fma");
  CHECK_EQ_STR(cpu_features_string(&all, buf, 9), "avx2 fma");
  CHECK_EQ_STR(cpu_features_string(&all, buf, 8), "avx2");
  CHECK_EQ_STR(cpu_features_string(&all, buf, 1), "");
  CHECK(cpu_features_string(&all, NULL, 0) == NULL);
}

/* ---- log --------------------------------------------------------------------------------- */

typedef struct log_sink {
  atomic_int n;
  int last_level;
  char last[2048];
} log_sink;

static void sink_fn(void *user, ph_log_level level, const char *message) {
  log_sink *s = user;
  atomic_fetch_add(&s->n, 1);
  s->last_level = (int)level;
  snprintf(s->last, sizeof s->last, "%s", message);
}

static void count_only_fn(void *user, ph_log_level level, const char *message) {
  (void)level;
  (void)message;
  atomic_fetch_add((atomic_int *)user, 1);
}

static void log_task(void *ctx, size_t task, int thread) {
  (void)ctx;
  LOG_INFO("task %zu on thread %d", task, thread);
}

static void test_log(void) {
  static log_sink sink; /* static: 2 KiB of message */
  atomic_init(&sink.n, 0);
  ph_set_log_callback(NULL, NULL, PH_LOG_DEBUG);
  CHECK(!log_enabled(PH_LOG_ERROR));
  LOG_ERROR("nobody listens");

  ph_set_log_callback(sink_fn, &sink, PH_LOG_INFO);
  CHECK(log_enabled(PH_LOG_ERROR));
  CHECK(log_enabled(PH_LOG_INFO));
  CHECK(!log_enabled(PH_LOG_DEBUG));
  LOG_ERROR("e %d", 1);
  CHECK_EQ_STR(sink.last, "e 1");
  CHECK_EQ_INT(sink.last_level, PH_LOG_ERROR);
  LOG_WARN("w %d", 2);
  LOG_INFO("i %s", "3");
  LOG_DEBUG("d %d", 4);
  CHECK_EQ_INT(atomic_load(&sink.n), 3);
  CHECK_EQ_STR(sink.last, "i 3");
  CHECK_EQ_INT(sink.last_level, PH_LOG_INFO);

  LOG_INFO("line\n");
  CHECK_EQ_STR(sink.last, "line");
  char big[3000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  LOG_WARN("%s", big);
  CHECK_EQ_INT(strlen(sink.last), 1023);

  ph_set_log_callback(sink_fn, &sink, PH_LOG_ERROR);
  int before = atomic_load(&sink.n);
  LOG_WARN("dropped");
  LOG_ERROR("kept");
  CHECK_EQ_INT(atomic_load(&sink.n), before + 1);

  ph_set_log_callback(NULL, &sink, PH_LOG_DEBUG);
  before = atomic_load(&sink.n);
  LOG_ERROR("silenced");
  LOG_DEBUG("silenced");
  CHECK_EQ_INT(atomic_load(&sink.n), before);
  CHECK(!log_enabled(PH_LOG_ERROR));

  /* Concurrent logging from pool threads reaches the callback once per message. */
  static atomic_int hits;
  atomic_init(&hits, 0);
  ph_set_log_callback(count_only_fn, &hits, PH_LOG_INFO);
  pool *p = NULL;
  CHECK_STATUS(pool_create(3, &p, NULL), PH_OK, NULL);
  for (int i = 0; i < 10; i++) pool_run(p, 100, log_task, NULL);
  pool_free(p);
  ph_set_log_callback(NULL, NULL, PH_LOG_ERROR);
  CHECK_EQ_INT(atomic_load(&hits), 1000);
}

/* ---- fmap -------------------------------------------------------------------------------- */

static void test_fmap(void) {
  const char *tmp = check_env("PH_TMP_DIR");
  diag d;
  diag_clear(&d);
  CHECK_STATUS(path_mkdirs(tmp, &d), PH_OK, d.msg);
  char path[4096], dir[4096];

  fmap m;
  CHECK_STATUS(path_join(path, sizeof path, tmp, "missing.bin", &d), PH_OK, d.msg);
  CHECK_STATUS(fmap_open(path, &m, &d), PH_ERR_NOT_FOUND, d.msg);
  CHECK_CONTAINS(d.msg, "missing.bin");
  CHECK_STATUS(fmap_open(tmp, &m, &d), PH_ERR_IO, d.msg);

  unsigned char bytes[1000];
  for (int i = 0; i < 1000; i++) bytes[i] = (unsigned char)(i * 7 + 3);
  CHECK_STATUS(path_join(path, sizeof path, tmp, "data.bin", &d), PH_OK, d.msg);
  CHECK_STATUS(file_write_all(path, bytes, sizeof bytes, &d), PH_OK, d.msg);
  CHECK_STATUS(fmap_open(path, &m, &d), PH_OK, d.msg);
  CHECK_EQ_INT(m.size, sizeof bytes);
  CHECK(m.data && memcmp(m.data, bytes, sizeof bytes) == 0);
  fmap_close(&m);
  fmap_close(&m); /* idempotent */
  fmap_close(NULL);
  CHECK(m.data == NULL);

  char *text = NULL;
  size_t len = 0;
  CHECK_STATUS(file_read_all(path, 999, &text, &len, &d), PH_ERR_LIMIT, d.msg);
  CHECK(text == NULL);
  CHECK_STATUS(file_read_all(path, 1000, &text, &len, &d), PH_OK, d.msg);
  CHECK_EQ_INT(len, 1000);
  CHECK(text && memcmp(text, bytes, 1000) == 0 && text[1000] == '\0');
  free(text);
  CHECK_STATUS(path_join(dir, sizeof dir, tmp, "missing.json", &d), PH_OK, d.msg);
  CHECK_STATUS(file_read_all(dir, 1000, &text, &len, &d), PH_ERR_NOT_FOUND, d.msg);

  CHECK_STATUS(path_join(path, sizeof path, tmp, "empty.bin", &d), PH_OK, d.msg);
  CHECK_STATUS(file_write_all(path, "", 0, &d), PH_OK, d.msg);
  CHECK_STATUS(fmap_open(path, &m, &d), PH_OK, d.msg);
  CHECK_EQ_INT(m.size, 0);
  CHECK(m.data == NULL);
  fmap_close(&m);

  CHECK_STATUS(path_join(dir, sizeof dir, tmp, "a/b/c", &d), PH_OK, d.msg);
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
  CHECK(path_is_dir(dir));
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg); /* exists already: fine */
  CHECK_STATUS(path_join(dir, sizeof dir, tmp, "data.bin/sub", &d), PH_OK, d.msg);
  CHECK(path_mkdirs(dir, &d) != PH_OK); /* a file on the way */
  CHECK(path_exists(path));
  CHECK(!path_is_dir(path));

  char small[8];
  CHECK_STATUS(path_join(small, sizeof small, "abcd", "efgh", &d), PH_ERR_LIMIT, d.msg);
  CHECK_STATUS(path_join(small, sizeof small, "ab/", "cd", &d), PH_OK, d.msg);
  CHECK_EQ_STR(small, "ab/cd");
}

/* ---- reading only regular files, writing by replacing ---------------------------------------
 * Issue 10 defects 2, 3 and 6: a failed write removed its target (even a device or a file that
 * existed before), writes followed symlinks out of their directory, and a FIFO hung every
 * reader and writer. */

static void test_read_refuses_non_regular(void) {
  const char *tmp = check_env("PH_TMP_DIR");
  diag d;
  char fifo[4096];
  CHECK_STATUS(path_mkdirs(tmp, &d), PH_OK, d.msg);
  CHECK(ft_fifo(fifo, tmp, "fifo.json"));
  ft_watchdog(10); /* before the fix each call below blocked in open() forever */
  fmap m;
  CHECK_STATUS(fmap_open(fifo, &m, &d), PH_ERR_IO, d.msg);
  CHECK_CONTAINS(d.msg, "fifo.json: is a FIFO, not a regular file");
  char *text = NULL;
  size_t len = 0;
  CHECK_STATUS(file_read_all(fifo, 1000, &text, &len, &d), PH_ERR_IO, d.msg);
  CHECK_CONTAINS(d.msg, "is a FIFO");
  int fd = -1;
  CHECK_STATUS(file_open_read(fifo, &fd, NULL, &d), PH_ERR_IO, d.msg);
  CHECK(fd == -1);
  FILE *f = NULL;
  CHECK_STATUS(file_open_read_stream(fifo, &f, NULL, &d), PH_ERR_IO, d.msg);
  CHECK(f == NULL);
  CHECK_STATUS(file_read_all("/dev/zero", 1000, &text, &len, &d), PH_ERR_IO, d.msg);
  CHECK_CONTAINS(d.msg, "a character device");
  CHECK_STATUS(file_read_all(tmp, 1000, &text, &len, &d), PH_ERR_IO, d.msg);
  CHECK_CONTAINS(d.msg, "a directory");
  ft_watchdog(0);
  CHECK(ft_is_fifo(fifo));
  /* a regular file through the stream */
  char path[4096];
  CHECK_STATUS(path_join(path, sizeof path, tmp, "stream.txt", &d), PH_OK, d.msg);
  CHECK_STATUS(file_write_all(path, "abc", 3, &d), PH_OK, d.msg);
  uint64_t size = 0;
  CHECK_STATUS(file_open_read_stream(path, &f, &size, &d), PH_OK, d.msg);
  CHECK_EQ_INT(size, 3);
  char buf[8] = {0};
  CHECK(f && fread(buf, 1, 8, f) == 3 && strcmp(buf, "abc") == 0);
  if (f) fclose(f);
}

static void test_wfile_replaces_whole(void) {
  char dir[2048], path[4096], other[4096];
  diag d;
  snprintf(dir, sizeof dir, "%s/wfile", check_env("PH_TMP_DIR"));
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
  CHECK_STATUS(path_join(path, sizeof path, dir, "out.bin", &d), PH_OK, d.msg);
  CHECK_STATUS(file_write_all(path, "old contents", 12, &d), PH_OK, d.msg);

  /* aborted after writing: the old file stays, the temporary file goes */
  wfile w;
  CHECK_STATUS(wfile_open(&w, path, &d), PH_OK, d.msg);
  CHECK(w.tmp && strstr(w.tmp, "/.out.bin.tmp-") != NULL);
  CHECK_STATUS(wfile_write(&w, "new", 3, &d), PH_OK, d.msg);
  CHECK_EQ_INT(ft_count_tmp(dir), 1);
  CHECK(ft_file_is(path, "old contents", 12));
  wfile_abort(&w);
  wfile_abort(&w); /* idempotent */
  wfile_abort(NULL);
  CHECK(ft_file_is(path, "old contents", 12));
  CHECK_EQ_INT(ft_count_tmp(dir), 0);

  /* a replaced file keeps its permissions */
  CHECK(chmod(path, 0600) == 0);
  CHECK_STATUS(file_write_all(path, "old contents", 12, &d), PH_OK, d.msg);
  struct stat st;
  CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);

  /* committed through a stream: replaced in one step */
  CHECK_STATUS(wfile_open(&w, path, &d), PH_OK, d.msg);
  FILE *f = wfile_stream(&w, &d);
  CHECK(f != NULL);
  if (f) fprintf(f, "line %d\n", 1);
  CHECK_STATUS(wfile_commit(&w, &d), PH_OK, d.msg);
  CHECK(ft_file_is(path, "line 1\n", 7));
  CHECK_EQ_INT(ft_count_tmp(dir), 0);
  CHECK(w.path == NULL && w.tmp == NULL);

  /* a symlink at the target is replaced, the file it points to is never written */
  CHECK_STATUS(path_join(other, sizeof other, dir, "outside.txt", &d), PH_OK, d.msg);
  CHECK_STATUS(file_write_all(other, "precious", 8, &d), PH_OK, d.msg);
  CHECK_STATUS(path_join(path, sizeof path, dir, "link.bin", &d), PH_OK, d.msg);
  unlink(path);
  CHECK(symlink(other, path) == 0);
  CHECK_STATUS(file_write_all(path, "mine", 4, &d), PH_OK, d.msg);
  CHECK(ft_file_is(other, "precious", 8));
  CHECK(ft_file_is(path, "mine", 4)); /* lstat: a regular file now, not the link */

  /* a dangling symlink too: its target is not created */
  CHECK_STATUS(path_join(other, sizeof other, dir, "never-created", &d), PH_OK, d.msg);
  unlink(path);
  CHECK(symlink(other, path) == 0);
  CHECK_STATUS(file_write_all(path, "x", 1, &d), PH_OK, d.msg);
  CHECK(!path_exists(other));
  CHECK(ft_file_is(path, "x", 1));

  /* a missing directory: typed error, nothing created */
  CHECK_STATUS(path_join(path, sizeof path, dir, "no/such/dir/out.bin", &d), PH_OK, d.msg);
  CHECK_STATUS(file_write_all(path, "x", 1, &d), PH_ERR_IO, d.msg);
  CHECK_CONTAINS(d.msg, "out.bin");
  CHECK_STATUS(wfile_open(&w, dir, &d), PH_ERR_IO, d.msg); /* the directory itself */
  CHECK_CONTAINS(d.msg, "a directory");
  CHECK_EQ_INT(ft_count_tmp(dir), 0);
}

static void test_wfile_refuses_non_regular(void) {
  char dir[2048], fifo[4096];
  diag d;
  snprintf(dir, sizeof dir, "%s/wfile_fifo", check_env("PH_TMP_DIR"));
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
  CHECK(ft_fifo(fifo, dir, "out.fifo"));
  ft_watchdog(10);
  /* before the fix: fopen("wb") blocked on the FIFO; /dev/full failed the write and then
   * remove()d the device node */
  CHECK_STATUS(file_write_all(fifo, "x", 1, &d), PH_ERR_IO, d.msg);
  CHECK_CONTAINS(d.msg, "out.fifo: exists and is a FIFO");
  CHECK(ft_is_fifo(fifo));
  CHECK_STATUS(file_write_all("/dev/full", "x", 1, &d), PH_ERR_IO, d.msg);
  CHECK_CONTAINS(d.msg, "/dev/full: exists and is a character device");
  CHECK(path_exists("/dev/full"));
  wfile w;
  CHECK_STATUS(wfile_open(&w, "/dev/null", &d), PH_ERR_IO, d.msg);
  CHECK(w.path == NULL && w.fd == -1);
  CHECK_STATUS(wfile_check_target(fifo, &d), PH_ERR_IO, d.msg);
  char path[4096];
  CHECK_STATUS(path_join(path, sizeof path, dir, "fresh", &d), PH_OK, d.msg);
  unlink(path); /* from an earlier run */
  CHECK_STATUS(wfile_check_target(path, &d), PH_OK, d.msg);

  ft_watchdog(0);
  CHECK_EQ_INT(ft_count_tmp(dir), 0);
}

int main(void) {
  RUN(test_status_table);
  RUN(test_diag);
  RUN(test_arena_alignment_and_zeroing);
  RUN(test_arena_reset_reuse);
  RUN(test_arena_limits_and_strings);
  RUN(test_pool_every_task_once);
  RUN(test_pool_workers_join);
  RUN(test_pool_no_hostage);
  RUN(test_pool_late_workers);
  RUN(test_pool_back_to_back);
  RUN(test_pool_free_spinning_or_asleep);
  RUN(test_pool_create_and_free);
  RUN(test_cpu_features);
  RUN(test_cpu_disable);
  RUN(test_cpu_features_string);
  RUN(test_log);
  RUN(test_fmap);
  RUN(test_read_refuses_non_regular);
  RUN(test_wfile_replaces_whole);
  RUN(test_wfile_refuses_non_regular);
  return check_finish();
}
