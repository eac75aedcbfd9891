/* pagedhybrid run --model DIR|PKG --requests FILE.jsonl [--out FILE.jsonl] — offline batch
 * inference through the continuous-batching engine (docs/run.md).
 *
 * Opens --out first (an unwritable path is the first thing reported), then indexes and checks
 * every line of the JSONL file (src/engine/request_file.h: a file that cannot be read or parsed
 * is exit 1 with the parser's typed error and line; only 32 bytes a line are kept), then opens
 * the engine and drives it: a request's line is parsed again when the engine has run
 * arrive_step steps, added (the engine copies the prompt; the parsed copy is freed at once), is
 * aborted at remove_step, and the loop steps until every request has arrived and finished. Each
 * finished request becomes one JSON line (request_result_to_json) written to --out or stdout in
 * input order, as soon as every earlier line is out. A request the engine refuses (token outside
 * the vocabulary, prompt beyond the context, non-finite logits, ...) is such a line with
 * finish_reason "error": the run still succeeds unless --strict is given. Progress goes to
 * stderr (every --progress N steps, and a summary at the end).
 * Text (docs/requests-jsonl.md "Text, stop strings and finish reasons"): when the model has
 * tokenizer.json, a line's text prompt is encoded (add_special 1), its messages rendered by the
 * chat template and encoded (add_special 0), the tokenizer's EOS ids join its stop ids, and its
 * generated tokens go through a ph_text_stream with its stop strings (in the engine's callback);
 * a completed stop string removes the request after that step and its line says "stop", text
 * and tokens cut there. Every line then carries "text". Without a tokenizer, a file that needs
 * one (a text prompt, messages, stop strings) is refused before the engine opens. A prompt that
 * cannot be made (the template refuses the chat) is that request's error line; the run goes on.
 * Memory: the index (32 bytes a line), ~32 bytes a line here, what the engine holds for the
 * requests that arrived and are not finished (with their text so far), and result lines
 * waiting for an earlier one.
 *
 * Step counting: "the engine has run k steps" counts the ph_engine_step calls made here. While
 * nothing is queued or running the counter jumps to the next arrival (an idle step would change
 * nothing), so a file whose requests arrive at steps 0 and 1000 does not spin 1000 times.
 * Output is a function of the file and the engine parameters, except the timing fields
 * (time_in_queue_ms, time_to_first_token_ms, total_ms).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "engine_flags.h"
#include "pagedhybrid.h"
#include "quant_flags.h"
#include "text_input.h"
#include "tools_api.h"

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
    {"state-update-capacity", "N",
     "compact state updates for speculative decoding, 0..8 (checkpoint: the graph is built with "
     "it, default 0, or 8 with --speculative; package: must match its own)"},
    {"speculative", "METHOD[:K]",
     "default speculation of requests without their own \"speculative\": none, ngram or mtp, "
     "K drafts per step 1..8 (default 4); outputs are identical with it or without "
     "(docs/speculative.md)"},
    {"precision", "f32|bf16|auto",
     "linear-layer arithmetic: f32, or bf16 inputs and bf16 dot products summed in f32 "
     "(default auto: bf16 for a bf16 checkpoint; docs/precision.md)"},
    ENGINE_FLAG_PREFIX_CACHE_OPTIONS,
    QUANT_FLAG_OPTIONS,
    {"progress", "N", "a progress line on stderr every N steps (default 0: the summary only)"},
    {"strict", NULL, "exit 1 when any request finished with an error"},
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

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

#define EID_DONE ((uint64_t)1 << 63) /* set in eid[i] once request i's line is made */

/* What a running request needs beyond its id when the model has a tokenizer, or when its prompt
 * could not be made (the engine then refuses an empty prompt, and the line says why). */
typedef struct live_req {
  text_out out;    /* the generated text and the stop strings (with a tokenizer) */
  int has_out;     /* out is initialised */
  ph_status error; /* PH_OK, or why the prompt could not be made (render, encode, stop ids) */
  char *error_msg; /* malloc'ed with error */
} live_req;

static void live_free(live_req *lv) {
  if (!lv) return;
  if (lv->has_out) text_out_free(&lv->out);
  free(lv->error_msg);
  free(lv);
}

typedef struct run_state {
  request_file *file;
  int64_t n; /* requests in the file */
  FILE *out;
  uint32_t *order; /* [n] file index of the k-th arrival, by (arrive_step, file order); NULL when
                      the file is in that order already */
  keyed *removals; /* [n_removals] (remove_step, file index), ascending */
  int64_t n_removals;
  int64_t n_added;   /* arrivals added so far */
  uint64_t *eid;     /* [n] engine id of request i (0 until added; ascending in arrival order),
                        | EID_DONE once its line is made */
  char **text;       /* [n] while it runs: its id; finished: its result line until written */
  live_req **live;   /* [n] while it runs, with a tokenizer or a failed prompt; else NULL */
  ph_tokenizer *tok; /* the model's, when it has tokenizer.json; NULL otherwise */
  int64_t *stopped;  /* file indices whose stop string completed in the last step */
  int64_t n_stopped, cap_stopped;
  ph_status cb_status; /* the first failure inside the callback */
  char cb_msg[DIAG_MSG_BYTES];
  int64_t next_write; /* lines [0, next_write) are written */
  uint64_t *finished; /* engine ids the callback saw finish, not yet collected */
  int64_t n_finished, cap_finished;
  int out_of_memory; /* the callback could not record a finish */
  int64_t n_by_reason[PH_FINISH_ERROR + 1];
  char first_error[320]; /* the first error line's message and status, for --strict */
  ph_status first_status;
  ph_speculative_params spec; /* --speculative: for requests without their own */
} run_state;

static int64_t arrival(const run_state *rs, int64_t k) {
  return rs->order ? (int64_t)rs->order[k] : k;
}

static int64_t index_of_id(const run_state *rs, uint64_t id);

/* A generated token into its request's text stream; a completed stop string queues the request
 * for removal after the step. */
static void push_text(run_state *rs, uint64_t id, int64_t token) {
  const int64_t i = index_of_id(rs, id);
  live_req *lv = i >= 0 ? rs->live[i] : NULL;
  if (!lv || !lv->has_out || lv->out.stopped || rs->cb_status != PH_OK) return;
  const char *piece;
  size_t n;
  diag d;
  diag_clear(&d);
  if ((rs->cb_status = text_out_push(&lv->out, token, &piece, &n, &d)) != PH_OK) {
    snprintf(rs->cb_msg, sizeof rs->cb_msg, "%s", d.msg);
    return;
  }
  if (!lv->out.stopped) return;
  if (rs->n_stopped == rs->cap_stopped) {
    const int64_t cap = rs->cap_stopped ? 2 * rs->cap_stopped : 64;
    int64_t *t = realloc(rs->stopped, (size_t)cap * sizeof *t);
    if (!t) {
      rs->out_of_memory = 1;
      return;
    }
    rs->stopped = t;
    rs->cap_stopped = cap;
  }
  rs->stopped[rs->n_stopped++] = i;
}

/* The engine calls this on the stepping thread; results are read after the step returns. */
static void on_token(void *user, uint64_t id, int64_t token, ph_finish_reason reason) {
  run_state *rs = user;
  (void)reason;
  if (token >= 0 && rs->tok) push_text(rs, id, token);
  if (token >= 0) return;
  if (rs->n_finished == rs->cap_finished) {
    const int64_t cap = rs->cap_finished ? 2 * rs->cap_finished : 256;
    uint64_t *f = realloc(rs->finished, (size_t)cap * sizeof *f);
    if (!f) {
      rs->out_of_memory = 1;
      return;
    }
    rs->finished = f;
    rs->cap_finished = cap;
  }
  rs->finished[rs->n_finished++] = id;
}

/* The file index of engine request id: ids ascend with the arrival order. */
static int64_t index_of_id(const run_state *rs, uint64_t id) {
  int64_t lo = 0, hi = rs->n_added - 1;
  while (lo <= hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    const int64_t i = arrival(rs, mid);
    const uint64_t at = rs->eid[i] & ~EID_DONE;
    if (at == id) return i;
    if (at < id)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return -1;
}

/* Turns every request finished in the last step into its line, releases it, and writes the
 * lines that are next in input order. */
static ph_status collect(run_state *rs, ph_engine *e, diag *d) {
  RETURN_ERROR_IF(rs->out_of_memory, d, PH_ERR_NO_MEMORY, "out of memory recording finishes");
  RETURN_ERROR_IF(rs->cb_status != PH_OK, d, rs->cb_status, "%s", rs->cb_msg);
  for (int64_t k = 0; k < rs->n_finished; k++) {
    const uint64_t id = rs->finished[k];
    const int64_t i = index_of_id(rs, id);
    RETURN_ERROR_IF(i < 0 || (rs->eid[i] & EID_DONE), d, PH_ERR_INTERNAL,
                    "engine request %llu finished but is not a pending request of the file",
                    (unsigned long long)id);
    ph_request_info info;
    FORWARD_IF_ERROR(
        engine_call_failed("ph_engine_request_info", ph_engine_request_info(e, id, &info), d));
    int64_t n_tokens = 0;
    const int64_t *tokens = ph_engine_request_tokens(e, id, &n_tokens);
    live_req *lv = rs->live[i];
    const char *text = NULL;
    size_t text_len = 0;
    if (lv && lv->error != PH_OK) { /* its prompt could not be made: the engine got none */
      info.finish = PH_FINISH_ERROR;
      info.status = lv->error;
      snprintf(info.message, sizeof info.message, "%s", lv->error_msg ? lv->error_msg : "");
    } else if (lv && lv->has_out) {
      if (lv->out.stopped) { /* cut at the token that completed the stop string */
        info.finish = PH_FINISH_STOP;
        if (n_tokens > lv->out.n_tokens) n_tokens = lv->out.n_tokens;
      } else if (info.finish != PH_FINISH_ERROR) {
        const char *piece;
        size_t n;
        FORWARD_IF_ERROR(text_out_finish(&lv->out, &piece, &n, d));
      }
      text = lv->out.text;
      text_len = lv->out.len;
    }
    const request_timing t = {.queue_ms = info.queue_ms,
                              .ttft_ms = info.time_to_first_token_ms,
                              .total_ms = info.total_ms,
                              .n_prompt = info.n_prompt,
                              .n_generated = n_tokens,
                              .n_preempted = info.n_preemptions,
                              .n_drafted = info.n_drafted,
                              .n_accepted = info.n_accepted,
                              .n_cached = info.n_cached_tokens};
    /* the engine names requests by its own ids: say which line of the file it was */
    char msg[sizeof info.message + 64];
    const int is_error = info.finish == PH_FINISH_ERROR;
    if (is_error) {
      snprintf(msg, sizeof msg, "line %d: %s: %s", request_file_entry(rs->file, i)->line,
               ph_status_name(info.status), info.message);
      if (!rs->first_error[0]) {
        snprintf(rs->first_error, sizeof rs->first_error, "%s", msg);
        rs->first_status = info.status;
      }
    }
    char *line = NULL;
    FORWARD_IF_ERROR(request_result_to_json_text(
        rs->text[i], is_error && rs->tok ? "" : text, text_len, tokens, n_tokens,
        ph_finish_reason_name(info.finish), &t, is_error ? msg : NULL, &line, d));
    free(rs->text[i]); /* the id */
    rs->text[i] = line;
    live_free(lv);
    rs->live[i] = NULL;
    FORWARD_IF_ERROR(
        engine_call_failed("ph_engine_release_request", ph_engine_release_request(e, id), d));
    rs->eid[i] |= EID_DONE;
    if (info.finish >= PH_FINISH_LENGTH && info.finish <= PH_FINISH_ERROR)
      rs->n_by_reason[info.finish]++;
  }
  rs->n_finished = 0;
  while (rs->next_write < rs->n && (rs->eid[rs->next_write] & EID_DONE)) {
    char *line = rs->text[rs->next_write];
    const int bad = fputs(line, rs->out) < 0 || fputc('\n', rs->out) == EOF;
    free(line);
    rs->text[rs->next_write++] = NULL;
    RETURN_ERROR_IF(bad, d, PH_ERR_IO, "writing the result lines failed");
  }
  return PH_OK;
}

/* Request r's prompt ids and stop ids with the tokenizer: a text prompt encoded with add_special
 * 1, messages rendered by the template and encoded with add_special 0, the tokenizer's EOS ids
 * joined to the stop ids; and its text stream. A prompt that cannot be made (a template error, too
 * many stop ids) is lv->error: the request still goes to the engine, empty, and its line says
 * why; only running out of memory stops the run. *owned: the ids allocated here (free). */
static ph_status prepare_text(run_state *rs, request_spec *r, live_req *lv, int64_t **owned,
                              int64_t *n_ids, diag *d) {
  diag why;
  diag_clear(&why);
  ph_status s = text_out_init(&lv->out, rs->tok, (const char *const *)r->stops, r->n_stops, d);
  lv->has_out = s == PH_OK;
  FORWARD_IF_ERROR(s);
  if (r->input == REQUEST_INPUT_TEXT)
    s = text_encode(rs->tok, r->prompt_text, r->prompt_text_len, 1, owned, n_ids, &why);
  else if (r->input == REQUEST_INPUT_MESSAGES)
    s = text_chat_ids(rs->tok, r->messages_json, r->chat_extra_json, r->add_generation_prompt,
                      owned, n_ids, &why);
  if (s == PH_OK) s = text_join_eos(rs->tok, &r->sampling, &why);
  if (s == PH_ERR_NO_MEMORY) return diag_set(d, s, "%s", why.msg);
  if (s != PH_OK) {
    lv->error = s;
    lv->error_msg = malloc(strlen(why.msg) + 1);
    RETURN_ERROR_IF(!lv->error_msg, d, PH_ERR_NO_MEMORY, "out of memory");
    memcpy(lv->error_msg, why.msg, strlen(why.msg) + 1);
    free(*owned);
    *owned = NULL;
    *n_ids = 0;
  }
  return PH_OK;
}

/* Parses request i's line again and adds it; the engine copies the prompt, the parse is freed. */
static ph_status add_request(run_state *rs, ph_engine *e, int64_t i, diag *d) {
  request_spec r;
  FORWARD_IF_ERROR(request_file_get(rs->file, i, &r, d));
  if (!r.speculative_given) r.sampling.speculative = rs->spec; /* --speculative */
  int64_t *owned = NULL, n_ids = r.n_prompt;
  ph_status st = PH_OK;
  if (rs->tok) {
    rs->live[i] = calloc(1, sizeof *rs->live[i]);
    st = rs->live[i] ? prepare_text(rs, &r, rs->live[i], &owned, &n_ids, d)
                     : diag_set(d, PH_ERR_NO_MEMORY, "out of memory");
  }
  const int64_t *ids = r.input == REQUEST_INPUT_TOKENS ? r.prompt : owned;
  if (rs->live[i] && rs->live[i]->error != PH_OK) ids = NULL, n_ids = 0;
  uint64_t id = 0;
  if (st == PH_OK)
    st = engine_call_failed("ph_engine_add_request",
                            ph_engine_add_request(e, ids, n_ids, &r.sampling, &id), d);
  free(owned);
  request_spec_free(&r);
  FORWARD_IF_ERROR(st);
  const size_t n = strlen(r.id) + 1;
  rs->text[i] = malloc(n);
  RETURN_ERROR_IF(!rs->text[i], d, PH_ERR_NO_MEMORY, "out of memory");
  memcpy(rs->text[i], r.id, n);
  rs->eid[i] = id;
  rs->n_added++;
  return PH_OK;
}

typedef struct run_totals {
  uint64_t steps;
  int64_t n_run, n_generated, n_preempted, n_drafted, n_accepted;
  double seconds;
} run_totals;

static void print_progress(const run_state *rs, const run_totals *t, const ph_step_info *si,
                           uint64_t step) {
  int64_t done = 0;
  for (int r = PH_FINISH_LENGTH; r <= PH_FINISH_ERROR; r++) done += rs->n_by_reason[r];
  fprintf(stderr,
          "run: step %" PRIu64 ": %lld/%lld requests done, %d running, %d waiting, %lld tokens "
          "generated (%.1f tok/s), %lld preemptions\n",
          step, (long long)done, (long long)rs->n, si->n_running, si->n_waiting,
          (long long)t->n_generated, t->seconds > 0 ? (double)t->n_generated / t->seconds : 0.0,
          (long long)t->n_preempted);
}

/* The summary's prefix-cache line (docs/run.md "Progress"): what the cache served and holds. */
static void print_prefix_cache(ph_engine *e) {
  ph_prefix_cache_stats pc;
  if (ph_engine_prefix_cache_stats(e, &pc) != PH_OK) return;
  if (!pc.enabled) {
    fprintf(stderr, "run: prefix cache: off\n");
    return;
  }
  char held[CLI_BYTES_BUF], snap[CLI_BYTES_BUF], budget[CLI_BYTES_BUF];
  fprintf(stderr,
          "run: prefix cache: %lld of %lld lookups hit, %lld of %lld prompt tokens from the cache "
          "(%.1f%%); holds %d pages (%d evictable, %s) and %d snapshots (%s of %s); evicted %lld "
          "pages, %lld snapshots\n",
          (long long)pc.hits, (long long)pc.lookups, (long long)pc.tokens_saved,
          (long long)pc.tokens_looked_up,
          pc.tokens_looked_up > 0 ? 100.0 * (double)pc.tokens_saved / (double)pc.tokens_looked_up
                                  : 0.0,
          pc.pages_cached, pc.pages_evictable,
          cli_bytes((uint64_t)pc.page_bytes_held, held, sizeof held), pc.snapshots,
          cli_bytes((uint64_t)pc.snapshot_bytes, snap, sizeof snap),
          cli_bytes((uint64_t)pc.snapshot_budget_bytes, budget, sizeof budget),
          (long long)pc.pages_evicted, (long long)pc.snapshots_evicted);
}

static int64_t arrive_step_of(const run_state *rs, int64_t k) {
  return request_file_entry(rs->file, arrival(rs, k))->arrive_step;
}

/* The loop: arrivals and removals at their steps, one engine step at a time, results collected
 * after every step. */
static ph_status drive(run_state *rs, ph_engine *e, int64_t progress, run_totals *t, diag *d) {
  const int64_t n = rs->n;
  int64_t next_removal = 0, idle_busy = 0;
  uint64_t step = 0;
  const double t0 = now_s();
  while (rs->n_added < n || ph_engine_busy(e)) {
    if (!ph_engine_busy(e) && rs->n_added < n && (uint64_t)arrive_step_of(rs, rs->n_added) > step)
      step = (uint64_t)arrive_step_of(rs, rs->n_added); /* nothing to run until then */
    while (rs->n_added < n && (uint64_t)arrive_step_of(rs, rs->n_added) <= step)
      FORWARD_IF_ERROR(add_request(rs, e, arrival(rs, rs->n_added), d));
    for (; next_removal < rs->n_removals && (uint64_t)rs->removals[next_removal].key <= step;
         next_removal++) {
      const int64_t i = rs->removals[next_removal].index;
      if (!(rs->eid[i] & EID_DONE)) /* else it finished before its removal step */
        FORWARD_IF_ERROR(engine_call_failed("ph_engine_remove_request",
                                            ph_engine_remove_request(e, rs->eid[i]), d));
    }
    ph_step_info si;
    FORWARD_IF_ERROR(engine_failed(e, ph_engine_step(e, &si), d));
    step++;
    t->steps++;
    t->n_run += si.n_tokens;
    t->n_generated += si.n_generated;
    t->n_preempted += si.n_preempted;
    t->n_drafted += si.n_drafted;
    t->n_accepted += si.n_accepted;
    t->seconds = now_s() - t0;
    FORWARD_IF_ERROR(collect(rs, e, d));
    /* a completed stop string: the text is cut, the request ends at the next step ("stop") */
    for (int64_t k = 0; k < rs->n_stopped; k++)
      if (!(rs->eid[rs->stopped[k]] & EID_DONE))
        FORWARD_IF_ERROR(engine_call_failed(
            "ph_engine_remove_request", ph_engine_remove_request(e, rs->eid[rs->stopped[k]]), d));
    rs->n_stopped = 0;
    /* a live request with nothing scheduled step after step is an engine bug, not a long run */
    idle_busy = si.batch_size == 0 && ph_engine_busy(e) ? idle_busy + 1 : 0;
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

static ph_status run_state_init(run_state *rs, request_file *f, diag *d) {
  const int64_t n = request_file_count(f);
  memset(rs, 0, sizeof *rs);
  rs->file = f;
  rs->n = n;
  rs->eid = calloc((size_t)n, sizeof *rs->eid);
  rs->text = calloc((size_t)n, sizeof *rs->text);
  rs->live = calloc((size_t)n, sizeof *rs->live);
  RETURN_ERROR_IF(!rs->eid || !rs->text || !rs->live, d, PH_ERR_NO_MEMORY,
                  "out of memory for %lld requests", (long long)n);
  int sorted = 1;
  int64_t n_removals = 0;
  for (int64_t i = 0; i < n; i++) {
    const request_entry *en = request_file_entry(f, i);
    sorted &= i == 0 || en->arrive_step >= request_file_entry(f, i - 1)->arrive_step;
    n_removals += en->remove_step >= 0;
  }
  if (!sorted) { /* (arrive_step, file order): the key array is transient */
    keyed *arrivals = malloc((size_t)n * sizeof *arrivals);
    rs->order = malloc((size_t)n * sizeof *rs->order);
    if (!arrivals || !rs->order) {
      free(arrivals);
      return diag_set(d, PH_ERR_NO_MEMORY, "out of memory for %lld requests", (long long)n);
    }
    for (int64_t i = 0; i < n; i++) arrivals[i] = (keyed){request_file_entry(f, i)->arrive_step, i};
    qsort(arrivals, (size_t)n, sizeof *arrivals, cmp_keyed);
    for (int64_t k = 0; k < n; k++) rs->order[k] = (uint32_t)arrivals[k].index;
    free(arrivals);
  }
  rs->removals = malloc((size_t)(n_removals ? n_removals : 1) * sizeof *rs->removals);
  RETURN_ERROR_IF(!rs->removals, d, PH_ERR_NO_MEMORY, "out of memory for %lld removals",
                  (long long)n_removals);
  for (int64_t i = 0; i < n; i++) {
    const request_entry *en = request_file_entry(f, i);
    if (en->remove_step >= 0) rs->removals[rs->n_removals++] = (keyed){en->remove_step, i};
  }
  qsort(rs->removals, (size_t)rs->n_removals, sizeof *rs->removals, cmp_keyed);
  return PH_OK;
}

/* The model's tokenizer when it has tokenizer.json (every line then carries "text"); without
 * one, the first line that needs it (a text prompt, messages, stop strings) is the error. */
static ph_status open_tokenizer(run_state *rs, const char *dir, const char *path, diag *d) {
  int64_t first = -1; /* the first line that needs the tokenizer */
  for (int64_t i = 0; i < rs->n && first < 0; i++)
    if (request_file_entry(rs->file, i)->needs_tokenizer) first = i;
  if (first >= 0) {
    char what[1200];
    snprintf(what, sizeof what, "%s:%d (a text prompt, messages or stop strings)", path,
             request_file_entry(rs->file, first)->line);
    return text_open_tokenizer(
        dir, what, "lines of prompt_tokens without stop strings run without one", &rs->tok, d);
  }
  if (!text_has_tokenizer(dir)) return PH_OK;
  /* only ids: a tokenizer that does not open costs the lines their text, not the run */
  diag why;
  diag_clear(&why);
  if (text_open_tokenizer(dir, "run", NULL, &rs->tok, &why) != PH_OK)
    fprintf(stderr, "run: note: the result lines carry no text: %s: %s\n",
            ph_status_name(why.status), why.msg);
  return PH_OK;
}

static void run_state_free(run_state *rs) {
  for (int64_t i = 0; rs->text && i < rs->n; i++) free(rs->text[i]);
  for (int64_t i = 0; rs->live && i < rs->n; i++) live_free(rs->live[i]);
  free(rs->live);
  free(rs->stopped);
  ph_tokenizer_free(rs->tok);
  free(rs->order);
  free(rs->removals);
  free(rs->eid);
  free(rs->text);
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
        "Only the timing fields differ between two runs of the same file. A request that\n"
        "fails is a line with \"finish_reason\": \"error\" and the run exits 0 (1 with\n"
        "--strict).");
    return CLI_EXIT_OK;
  }
  if (a.n_positional) return cli_usage_error(&a, "unexpected argument \"%s\"", a.positional[0]);
  const char *dir = cli_get(&a, "model"), *req_path = cli_get(&a, "requests");
  const char *out_path = cli_get(&a, "out");
  if (!dir) return cli_usage_error(&a, "--model DIR|PKG is required");
  if (!req_path) return cli_usage_error(&a, "--requests FILE.jsonl is required");
  ph_engine_params p = ph_engine_params_default();
  int64_t progress = 0;
  ph_speculative_params rs_spec;
  int spec_given = 0;
  if ((rc = engine_flags_parse(&a, &p)) || (rc = quant_flags_parse(&a, &p.quant)) ||
      (rc = cli_get_int(&a, "progress", 0, INT64_MAX, &progress)) ||
      (rc = engine_flags_speculative(&a, &rs_spec, &spec_given)))
    return rc;
  /* a checkpoint built for --speculative captures as many drafts as any step may verify */
  if (spec_given && rs_spec.method != PH_DRAFT_NONE && !cli_get(&a, "state-update-capacity") &&
      !onnx_is_package(dir))
    p.state_update_capacity = PH_MAX_DRAFT_TOKENS;
  const int checkpoint_only = engine_flags_checkpoint_only(&a);
  const int strict = cli_flag(&a, "strict");

  diag d;
  diag_clear(&d);
  request_file *file = NULL;
  run_state rs;
  memset(&rs, 0, sizeof rs);
  ph_engine *e = NULL;
  run_totals t;
  memset(&t, 0, sizeof t);
  /* The output first: an unwritable --out is reported before any work. --out is written like
   * every whole file (base/wfile.h): the lines go to a temporary file beside it, which replaces
   * the target only when the run succeeded; a failed run leaves an existing file as it was, and
   * a FIFO, device or directory is refused at once. stdout streams as lines are made. */
  wfile wout = {NULL, NULL, -1, NULL};
  FILE *out = stdout;
  ph_status s = PH_OK;
  if (out_path && (s = wfile_open(&wout, out_path, &d)) == PH_OK &&
      !(out = wfile_stream(&wout, &d)))
    s = d.status;
  if (s == PH_OK) s = request_file_open(req_path, &file, &d);
  if (s == PH_OK && checkpoint_only && onnx_is_package(dir))
    s = diag_set(&d, PH_ERR_INVALID_ARGUMENT,
                 "--block-size, --max-context and --io-dtype apply to a checkpoint; the package "
                 "%s fixes them in its graph",
                 dir);
  if (s == PH_OK) s = run_state_init(&rs, file, &d);
  if (s == PH_OK) s = open_tokenizer(&rs, dir, req_path, &d);
  if (s == PH_OK) {
    s = ph_engine_create(dir, &p, &e); /* on failure e (when set) says why */
    s = engine_failed(e, s, &d);
  }
  ph_engine_info info;
  if (s == PH_OK && ph_engine_get_info(e, &info) == PH_OK && info.quantized_linears > 0) {
    char q[256];
    fprintf(stderr, "run: weights %s\n", quant_flags_describe(&info, q, sizeof q));
  }
  if (s == PH_OK) {
    rs.out = out;
    rs.spec = rs_spec;
    ph_engine_set_callback(e, on_token, &rs);
    s = drive(&rs, e, progress, &t, &d);
  }
  if (s == PH_OK) {
    fprintf(stderr,
            "run: %lld requests (%lld length, %lld stop, %lld aborted, %lld error) in %" PRIu64
            " engine steps, %.3f s: %lld tokens run, %lld generated = %.1f tok/s, %lld "
            "preemptions\n",
            (long long)rs.n, (long long)rs.n_by_reason[PH_FINISH_LENGTH],
            (long long)rs.n_by_reason[PH_FINISH_STOP], (long long)rs.n_by_reason[PH_FINISH_ABORTED],
            (long long)rs.n_by_reason[PH_FINISH_ERROR], t.steps, t.seconds, (long long)t.n_run,
            (long long)t.n_generated, t.seconds > 0 ? (double)t.n_generated / t.seconds : 0.0,
            (long long)t.n_preempted);
    if (t.n_drafted > 0)
      fprintf(stderr, "run: speculative: %lld drafts verified, %lld accepted (%.1f%%)\n",
              (long long)t.n_drafted, (long long)t.n_accepted,
              100.0 * (double)t.n_accepted / (double)t.n_drafted);
    print_prefix_cache(e);
  }
  if (!out_path && fflush(stdout) != 0 && s == PH_OK)
    s = diag_set(&d, PH_ERR_IO, "writing stdout failed");
  if (out_path) {
    if (s == PH_OK)
      s = wfile_commit(&wout, &d);
    else
      wfile_abort(&wout);
  }
  if (s == PH_OK && strict && rs.n_by_reason[PH_FINISH_ERROR] > 0)
    s = diag_set(&d, rs.first_status,
                 "--strict: %lld of %lld requests finished with an error (the first: %s)",
                 (long long)rs.n_by_reason[PH_FINISH_ERROR], (long long)rs.n, rs.first_error);
  rc = s == PH_OK ? CLI_EXIT_OK : cli_lib_error(s, d.msg);
  ph_engine_free(e);
  if (rs.file) run_state_free(&rs);
  request_file_close(file);
  return rc;
}
