/* The weights a session runs are copied out of the checkpoint's mapping, and the copy replaces
 * the mapping in memory instead of doubling it (graph/prepare.h: weight_residency): the peak
 * resident set of a process that opens a checkpoint, builds a paged session and runs a step
 * stays within weights + cache + 10 % (issue 16). A process of its own (this test binary), so
 * getrusage's ru_maxrss is this job's peak; the checkpoint is written by a child process, whose
 * memory does not count here. The same bound holds for the mapped weights (WEIGHTS_MAP: nothing
 * copied), which is checked first, in a child too. Memory, not time: nothing here is timed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/fmap.h"
#include "check.h"
#include "graph/prepare.h"
#include "models/model.h"
#include "models/tiny.h"
#include "runtime/mtp_session.h"
#include "runtime/runtime.h"

static long peak_rss_kb(void) {
  struct rusage u;
  return getrusage(RUSAGE_SELF, &u) == 0 ? u.ru_maxrss : -1;
}

/* A checkpoint of about 70 MB of f32 weights (the 32768-row embedding and LM head are most of
 * it), with an MTP head when mtp. */
static void write_checkpoint(const char *dir, int mtp) {
  pid_t pid = fork();
  if (pid == 0) {
    tiny_params tp = tiny_params_default();
    tp.vocab_size = 32768;
    tp.hidden_size = 256;
    tp.intermediate_size = 512;
    tp.mtp_layers = mtp;
    diag d;
    _exit(tiny_write(dir, &tp, &d) == PH_OK ? 0 : 1);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
        WEXITSTATUS(status) == 0);
}

/* Opens dir, builds a paged session (weights as `mode`), runs one 8-token step; returns 1 when
 * the peak RSS stayed within weights + cache + 10 % (+ 8 MiB for activations, code and the
 * allocator), printing the figures. */
static int session_within_bound(const char *dir, weight_residency mode) {
  const long before = peak_rss_kb();
  diag d;
  runtime_source src;
  ph_status st = runtime_source_open(dir, &src, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  if (st != PH_OK) return 0;
  runtime_build b = {.block_size = 16, .io_dtype = PH_DTYPE_F32, .prune_lm_head = 1};
  paged_session_params p = paged_session_params_default();
  p.n_blocks = 8;
  p.max_slots = 1;
  p.max_batch = 1;
  p.max_tokens = 8;
  p.n_threads = 1;
  p.map_weights = mode == WEIGHTS_MAP;
  paged_session *s = NULL;
  st = runtime_paged_session(&src, &b, &p, &s, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  int ok = st == PH_OK;
  if (ok) {
    block_table bt;
    block_table_init(&bt);
    int32_t slot = -1;
    int64_t tokens[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    st = hybrid_cache_reserve(paged_session_cache(s), &bt, &slot, 8, &d);
    paged_seq seq = {.slot = slot, .blocks = &bt, .past = 0, .tokens = tokens, .n = 8};
    if (st == PH_OK) st = paged_session_run(s, &seq, 1, &d);
    CHECK_STATUS(st, PH_OK, d.msg);
    ok = st == PH_OK;
    const double weights = (double)model_weights_of(src.model)->n_bytes;
    const double cache = (double)paged_session_cache_bytes(s);
    const double grown = (double)(peak_rss_kb() - before) * 1024.0;
    const double bound = 1.10 * (weights + cache) + 8.0 * 1048576.0;
    printf("  %s: peak RSS grew %.1f MiB; weights %.1f MiB, cache %.1f MiB, bound %.1f MiB\n",
           mode == WEIGHTS_MAP ? "mapped" : "copied", grown / 1048576.0, weights / 1048576.0,
           cache / 1048576.0, bound / 1048576.0);
    ok = CHECK(ok && grown <= bound);
    if (slot >= 0) hybrid_cache_release(paged_session_cache(s), &bt, &slot, &d);
    free(bt.ids);
  }
  paged_session_free(s);
  runtime_source_close(&src);
  return ok;
}

static void test_peak_rss_bound(void) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/rss-checkpoint", check_env("PH_TMP_DIR"));
  write_checkpoint(dir, 0);
  /* mapped first, in a child: its own peak, not this process's */
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    int ok = session_within_bound(dir, WEIGHTS_MAP);
    fflush(stdout);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
        WEXITSTATUS(status) == 0);
  session_within_bound(dir, WEIGHTS_COPY);
}

/* The MTP head's session reads the target's embedding (and LM head): built from the same
 * checkpoint, it takes the target session's copies (the model's weight_store) and copies only its
 * own layer's weights, so the drafter does not add a second embedding to the resident set. */
static void test_mtp_shares_the_copy(void) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/rss-checkpoint-mtp", check_env("PH_TMP_DIR"));
  write_checkpoint(dir, 1);
  diag d;
  runtime_source src;
  ph_status st = runtime_source_open(dir, &src, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  if (st != PH_OK) return;
  CHECK(runtime_source_has_mtp(&src));
  runtime_build b = {.block_size = 16, .io_dtype = PH_DTYPE_F32, .prune_lm_head = 1};
  paged_session_params p = paged_session_params_default();
  p.n_blocks = 8;
  p.max_slots = 1;
  p.max_batch = 1;
  p.max_tokens = 8;
  p.n_threads = 1;
  paged_session *s = NULL;
  mtp_session *m = NULL;
  st = runtime_paged_session(&src, &b, &p, &s, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  const weight_store *ws = model_weight_store(src.model);
  const size_t target = weight_store_bytes(ws);
  const double embed = 32768.0 * 256 * 4;
  CHECK(target >= 2 * embed); /* embedding and LM head copied once */
  if (st == PH_OK) {
    st = runtime_mtp_session(&src, &b, 1, 8, 0, &m, &d);
    CHECK_STATUS(st, PH_OK, d.msg);
    const size_t head = weight_store_bytes(ws) - target;
    printf("  target copied %.1f MiB, the MTP head %.1f MiB more\n", target / 1048576.0,
           head / 1048576.0);
    CHECK(head > 0 && head < embed / 4); /* its own layer only */
  }
  mtp_session_free(m);
  paged_session_free(s);
  runtime_source_close(&src);
}

int main(void) {
  RUN(test_peak_rss_bound);
  RUN(test_mtp_shares_the_copy);
  return check_finish();
}
