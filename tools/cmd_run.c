/* pagedhybrid run --model DIR|PKG --requests FILE.jsonl [--out FILE.jsonl] — offline batch
 * inference through the continuous-batching engine (docs/run.md).
 *
 * Reads every request of the JSONL file first (src/engine/request_file.h: a file that cannot be
 * read or parsed is exit 1 with the parser's typed error and line), then opens the engine and
 * drives it: a request joins when the engine has run arrive_step steps, is aborted at
 * remove_step, and the loop steps until every request has arrived and finished. Each finished
 * request becomes one JSON line (request_result_to_json) written to --out or stdout in input
 * order, as soon as every earlier line is out. A request the engine refuses (token outside the
 * vocabulary, prompt beyond the context, ...) is such a line with finish_reason "error": the run
 * still succeeds. Progress goes to stderr (every --progress N steps, and a summary at the end).
 *
 * Step counting: "the engine has run k steps" counts the engine_step calls made here. While
 * nothing is queued or running the counter jumps to the next arrival (an idle step would change
 * nothing), so a file whose requests arrive at steps 0 and 1000 does not spin 1000 times.
 * Output is a function of the file and the engine parameters, except the timing fields
 * (time_in_queue_ms, time_to_first_token_ms, total_ms).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "engine/engine.h"
#include "engine/request_file.h"
#include "io/onnx.h"

static const cli_option OPTIONS[] = {
    {"model", "DIR|PKG", "Hugging Face checkpoint directory, or a package exported --layout paged"},
    {"requests", "FILE.jsonl", "the requests, one JSON object per line (docs/requests-jsonl.md)"},
    {"out", "FILE.jsonl", "write the result lines here (default: stdout)"},
    {"max-batch", "N", "sequences per step (default: the package's, capped at 64, else 16)"},
    {"max-tokens", "N", "token budget per step (default: the package's, else 2048)"},
    {"prefill-chunk", "N", "prompt tokens per request per step (default min(256, max-tokens))"},
    {"num-blocks", "N", "KV pages including the null page (default: from --memory)"},
    {"memory", "MiB",
     "budget for KV pages + state slots when --num-blocks is not given "
     "(default 1024)"},
    {"threads", "N", "worker threads (default: all CPUs)"},
    {"block-size", "N", "checkpoint only: tokens per KV page (power of two >= 16, default 16)"},
    {"max-context", "N", "checkpoint only: context bound (default min(max_position, 32768))"},
    {"io-dtype", "f32|f16|bf16", "checkpoint only: activation/KV dtype of the graph (default f32)"},
    {"progress", "N", "a progress line on stderr every N steps (default 0: the summary only)"},
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

/* The engine options run and bench share the names of; unset ones keep engine defaults. */
static int parse_params(cli_args *a, engine_params *p, int *checkpoint_only) {
  int64_t max_batch = 0, max_tokens = 0, chunk = 0, blocks = 0, mib = 0, threads = 0;
  int64_t block = 0, max_ctx = 0;
  int rc;
  if ((rc = cli_get_int(a, "max-batch", 1, 4096, &max_batch)) ||
      (rc = cli_get_int(a, "max-tokens", 1, (int64_t)1 << 24, &max_tokens)) ||
      (rc = cli_get_int(a, "prefill-chunk", 1, (int64_t)1 << 24, &chunk)) ||
      (rc = cli_get_int(a, "num-blocks", 2, INT32_MAX, &blocks)) ||
      (rc = cli_get_int(a, "memory", 1, (int64_t)1 << 30, &mib)) ||
      (rc = cli_get_int(a, "threads", 0, 1024, &threads)) ||
      (rc = cli_get_int(a, "block-size", 16, 1 << 20, &block)) ||
      (rc = cli_get_int(a, "max-context", 1, (int64_t)1 << 24, &max_ctx)) ||
      (rc = cli_get_dtype(a, "io-dtype", &p->io_dtype)))
    return rc;
  if (blocks && mib) return cli_usage_error(a, "give --num-blocks or --memory, not both");
  if (block & (block - 1))
    return cli_usage_error(a, "--block-size must be a power of two, got %lld", (long long)block);
  if (chunk && max_tokens && chunk > max_tokens)
    return cli_usage_error(a, "--prefill-chunk %lld is above --max-tokens %lld", (long long)chunk,
                           (long long)max_tokens);
  p->max_batch = (int32_t)max_batch;
  p->max_tokens = max_tokens;
  p->prefill_chunk = chunk;
  p->n_blocks = (int32_t)blocks;
  p->memory_bytes = mib << 20;
  p->n_threads = (int)threads;
  p->block_size = block;
  p->max_context = max_ctx;
  *checkpoint_only =
      cli_get(a, "block-size") || cli_get(a, "max-context") || cli_get(a, "io-dtype");
  return CLI_EXIT_OK;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the request schedule ------------------------------------------------------------------ */

typedef struct keyed {
  int64_t key, index;
} keyed;

static int cmp_keyed(const void *x, const void *y) {
  const keyed *a = x, *b = y;
  if (a->key != b->key) return a->key < b->key ? -1 : 1;
  return a->index < b->index ? -1 : a->index > b->index;
}

typedef struct run_state {
  const request_list *reqs;
  FILE *out;
  keyed *arrivals; /* [n] (arrive_step, input index), ascending */
  keyed *removals; /* [n_removals] (remove_step, input index), ascending */
  int64_t n_removals;
  uint64_t *ids;     /* [n_added] engine ids in add order (ascending) */
  int64_t *id_index; /* [n_added] the input index of ids[k] */
  int64_t n_added;
  uint64_t *id_of;    /* [n] engine id of input request i, 0 until added */
  int *done;          /* [n] 1 once the result line is made and the request released */
  char **lines;       /* [n] result lines waiting for every earlier one */
  int64_t next_write; /* lines[0, next_write) are written */
  uint64_t *finished; /* [n] engine ids the callback saw finish, not yet collected */
  int64_t n_finished;
  int64_t n_by_reason[ENGINE_FINISH_ERROR + 1];
} run_state;

/* The engine calls this on the stepping thread; results are read after the step returns. */
static void on_token(void *user, uint64_t id, int64_t token, engine_finish reason) {
  run_state *rs = user;
  (void)reason;
  if (token < 0 && rs->n_finished < rs->reqs->n) rs->finished[rs->n_finished++] = id;
}

static int64_t index_of_id(const run_state *rs, uint64_t id) {
  int64_t lo = 0, hi = rs->n_added - 1;
  while (lo <= hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (rs->ids[mid] == id) return rs->id_index[mid];
    if (rs->ids[mid] < id)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return -1;
}

/* Turns every request finished in the last step into its line, releases it, and writes the
 * lines that are next in input order. */
static ph_status collect(run_state *rs, engine *e, diag *d) {
  for (int64_t k = 0; k < rs->n_finished; k++) {
    const uint64_t id = rs->finished[k];
    const int64_t i = index_of_id(rs, id);
    RETURN_ERROR_IF(i < 0 || rs->done[i], d, PH_ERR_INTERNAL,
                    "engine request %llu finished but is not a pending request of the file",
                    (unsigned long long)id);
    engine_request_info info;
    FORWARD_IF_ERROR(engine_request_info_get(e, id, &info, d));
    int64_t n_tokens = 0;
    const int64_t *tokens = engine_tokens(e, id, &n_tokens);
    const request_timing t = {info.queue_ms, info.ttft_ms,     info.total_ms,
                              info.n_prompt, info.n_generated, info.n_preemptions};
    /* the engine names requests by its own ids: say which line of the file it was */
    char msg[sizeof info.message + 64];
    const int is_error = info.finish == ENGINE_FINISH_ERROR;
    if (is_error)
      snprintf(msg, sizeof msg, "line %d: %s: %s", rs->reqs->items[i].line,
               ph_status_name(info.status), info.message);
    FORWARD_IF_ERROR(request_result_to_json(rs->reqs->items[i].id, tokens, n_tokens,
                                            engine_finish_name(info.finish), &t,
                                            is_error ? msg : NULL, &rs->lines[i], d));
    FORWARD_IF_ERROR(engine_release(e, id, d));
    rs->done[i] = 1;
    if (info.finish >= ENGINE_FINISH_LENGTH && info.finish <= ENGINE_FINISH_ERROR)
      rs->n_by_reason[info.finish]++;
  }
  rs->n_finished = 0;
  while (rs->next_write < rs->reqs->n && rs->lines[rs->next_write]) {
    char *line = rs->lines[rs->next_write];
    const int bad = fputs(line, rs->out) < 0 || fputc('\n', rs->out) == EOF;
    free(line);
    rs->lines[rs->next_write++] = NULL;
    RETURN_ERROR_IF(bad, d, PH_ERR_IO, "writing the result lines failed");
  }
  return PH_OK;
}

typedef struct run_totals {
  uint64_t steps;
  int64_t n_run, n_generated, n_preempted;
  double seconds;
} run_totals;

static void print_progress(const run_state *rs, const run_totals *t, const engine_step_info *si,
                           uint64_t step) {
  int64_t done = 0;
  for (int r = ENGINE_FINISH_LENGTH; r <= ENGINE_FINISH_ERROR; r++) done += rs->n_by_reason[r];
  fprintf(stderr,
          "run: step %" PRIu64 ": %lld/%lld requests done, %d running, %d waiting, %lld tokens "
          "generated (%.1f tok/s), %lld preemptions\n",
          step, (long long)done, (long long)rs->reqs->n, si->n_running, si->n_waiting,
          (long long)t->n_generated, t->seconds > 0 ? (double)t->n_generated / t->seconds : 0.0,
          (long long)t->n_preempted);
}

/* The loop: arrivals and removals at their steps, one engine step at a time, results collected
 * after every step. */
static ph_status drive(run_state *rs, engine *e, int64_t progress, run_totals *t, diag *d) {
  const request_list *reqs = rs->reqs;
  const int64_t n = reqs->n;
  int64_t next_arrival = 0, next_removal = 0, idle_busy = 0;
  uint64_t step = 0;
  const double t0 = now_s();
  while (next_arrival < n || engine_busy(e)) {
    if (!engine_busy(e) && next_arrival < n && (uint64_t)rs->arrivals[next_arrival].key > step)
      step = (uint64_t)rs->arrivals[next_arrival].key; /* nothing to run until then */
    for (; next_arrival < n && (uint64_t)rs->arrivals[next_arrival].key <= step; next_arrival++) {
      const request_spec *r = &reqs->items[rs->arrivals[next_arrival].index];
      uint64_t id = 0;
      FORWARD_IF_ERROR(engine_add(e, r->prompt, r->n_prompt, &r->sampling, &id, d));
      rs->id_of[rs->arrivals[next_arrival].index] = id;
      rs->ids[rs->n_added] = id;
      rs->id_index[rs->n_added++] = rs->arrivals[next_arrival].index;
    }
    for (; next_removal < rs->n_removals && (uint64_t)rs->removals[next_removal].key <= step;
         next_removal++) {
      const int64_t i = rs->removals[next_removal].index;
      if (!rs->done[i]) /* else it finished before its removal step */
        FORWARD_IF_ERROR(engine_remove(e, rs->id_of[i], d));
    }
    engine_step_info si;
    FORWARD_IF_ERROR(engine_step(e, &si, d));
    step++;
    t->steps++;
    t->n_run += si.n_tokens;
    t->n_generated += si.n_sampled;
    t->n_preempted += si.n_preempted;
    t->seconds = now_s() - t0;
    FORWARD_IF_ERROR(collect(rs, e, d));
    /* a live request with nothing scheduled step after step is an engine bug, not a long run */
    idle_busy = si.n_seqs == 0 && engine_busy(e) ? idle_busy + 1 : 0;
    RETURN_ERROR_IF(idle_busy > 64, d, PH_ERR_INTERNAL,
                    "the engine scheduled nothing for %lld steps while requests were live "
                    "(%d running, %d waiting)",
                    (long long)idle_busy, si.n_running, si.n_waiting);
    if (progress > 0 && step % (uint64_t)progress == 0) print_progress(rs, t, &si, step);
  }
  t->seconds = now_s() - t0;
  RETURN_ERROR_IF(rs->next_write != n, d, PH_ERR_INTERNAL,
                  "%lld of %lld requests finished when the engine went idle",
                  (long long)rs->next_write, (long long)n);
  return PH_OK;
}

static ph_status run_state_init(run_state *rs, const request_list *reqs, diag *d) {
  const int64_t n = reqs->n;
  memset(rs, 0, sizeof *rs);
  rs->reqs = reqs;
  rs->arrivals = calloc((size_t)n, sizeof *rs->arrivals);
  rs->removals = calloc((size_t)n, sizeof *rs->removals);
  rs->ids = calloc((size_t)n, sizeof *rs->ids);
  rs->id_index = calloc((size_t)n, sizeof *rs->id_index);
  rs->id_of = calloc((size_t)n, sizeof *rs->id_of);
  rs->done = calloc((size_t)n, sizeof *rs->done);
  rs->lines = calloc((size_t)n, sizeof *rs->lines);
  rs->finished = calloc((size_t)n, sizeof *rs->finished);
  RETURN_ERROR_IF(!rs->arrivals || !rs->removals || !rs->ids || !rs->id_index || !rs->id_of ||
                      !rs->done || !rs->lines || !rs->finished,
                  d, PH_ERR_NO_MEMORY, "out of memory for %lld requests", (long long)n);
  for (int64_t i = 0; i < n; i++) {
    rs->arrivals[i] = (keyed){reqs->items[i].arrive_step, i};
    if (reqs->items[i].remove_step >= 0)
      rs->removals[rs->n_removals++] = (keyed){reqs->items[i].remove_step, i};
  }
  qsort(rs->arrivals, (size_t)n, sizeof *rs->arrivals, cmp_keyed);
  qsort(rs->removals, (size_t)rs->n_removals, sizeof *rs->removals, cmp_keyed);
  return PH_OK;
}

static void run_state_free(run_state *rs) {
  for (int64_t i = 0; rs->lines && i < rs->reqs->n; i++) free(rs->lines[i]);
  free(rs->arrivals);
  free(rs->removals);
  free(rs->ids);
  free(rs->id_index);
  free(rs->id_of);
  free(rs->done);
  free(rs->lines);
  free(rs->finished);
}

int cmd_run(int argc, char **argv) {
  cli_args a;
  int rc = cli_parse(&a, "run", OPTIONS, N_OPTIONS, argc, argv);
  if (rc) return rc;
  if (a.help) {
    cli_print_help(
        &a, "--model DIR|PKG --requests FILE.jsonl [--out FILE.jsonl] [options]",
        "Offline batch inference: every request of the JSONL file goes through the\n"
        "continuous-batching engine (arriving and aborted at the steps the file names), and\n"
        "one JSON result line per request is written in input order (docs/run.md).\n"
        "Only the timing fields differ between two runs of the same file.");
    return CLI_EXIT_OK;
  }
  if (a.n_positional) return cli_usage_error(&a, "unexpected argument \"%s\"", a.positional[0]);
  const char *dir = cli_get(&a, "model"), *req_path = cli_get(&a, "requests");
  const char *out_path = cli_get(&a, "out");
  if (!dir) return cli_usage_error(&a, "--model DIR|PKG is required");
  if (!req_path) return cli_usage_error(&a, "--requests FILE.jsonl is required");
  engine_params p = engine_params_default();
  int checkpoint_only = 0;
  int64_t progress = 0;
  if ((rc = parse_params(&a, &p, &checkpoint_only)) ||
      (rc = cli_get_int(&a, "progress", 0, INT64_MAX, &progress)))
    return rc;

  diag d;
  diag_clear(&d);
  request_list reqs = {NULL, 0};
  run_state rs;
  memset(&rs, 0, sizeof rs);
  engine *e = NULL;
  FILE *out = NULL;
  run_totals t;
  memset(&t, 0, sizeof t);
  ph_status s = request_list_read(req_path, &reqs, &d);
  if (s == PH_OK && checkpoint_only && onnx_is_package(dir))
    s = diag_set(&d, PH_ERR_INVALID_ARGUMENT,
                 "--block-size, --max-context and --io-dtype apply to a checkpoint; the package "
                 "%s fixes them in its graph",
                 dir);
  if (s == PH_OK) s = run_state_init(&rs, &reqs, &d);
  if (s == PH_OK) s = engine_create(dir, &p, &e, &d);
  if (s == PH_OK) {
    out = out_path ? fopen(out_path, "w") : stdout;
    if (!out) s = diag_set(&d, PH_ERR_IO, "cannot open %s for writing", out_path);
  }
  if (s == PH_OK) {
    rs.out = out;
    engine_set_callback(e, on_token, &rs);
    s = drive(&rs, e, progress, &t, &d);
  }
  if (s == PH_OK) {
    fprintf(stderr,
            "run: %lld requests (%lld length, %lld stop, %lld aborted, %lld error) in %" PRIu64
            " engine steps, %.3f s: %lld tokens run, %lld generated = %.1f tok/s, %lld "
            "preemptions\n",
            (long long)reqs.n, (long long)rs.n_by_reason[ENGINE_FINISH_LENGTH],
            (long long)rs.n_by_reason[ENGINE_FINISH_STOP],
            (long long)rs.n_by_reason[ENGINE_FINISH_ABORTED],
            (long long)rs.n_by_reason[ENGINE_FINISH_ERROR], t.steps, t.seconds, (long long)t.n_run,
            (long long)t.n_generated, t.seconds > 0 ? (double)t.n_generated / t.seconds : 0.0,
            (long long)t.n_preempted);
  }
  if (out && fflush(out) != 0 && s == PH_OK)
    s = diag_set(&d, PH_ERR_IO, "writing %s failed", out_path ? out_path : "stdout");
  if (out && out != stdout && fclose(out) != 0 && s == PH_OK)
    s = diag_set(&d, PH_ERR_IO, "closing %s failed", out_path);
  rc = s == PH_OK ? CLI_EXIT_OK : cli_lib_error(s, d.msg);
  engine_free(e);
  if (rs.reqs) run_state_free(&rs);
  request_list_free(&reqs);
  return rc;
}
