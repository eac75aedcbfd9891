/* pagedhybrid bench --model DIR|PKG [--json] — the engine's throughput on this machine next to
 * this machine's limits, measured in the same run (docs/bench.md).
 *
 * Measures, through the continuous-batching engine (src/engine/engine.h):
 *   prefill  one request with a --prompt N token prompt and max_new_tokens 1: prompt tokens per
 *            second and time to first token (the engine's time_to_first_token_ms: add → first
 *            token)
 *   decode   for each B of --batches: B requests with 16-token prompts decoding together; after
 *            their prompts and one warm-up step, --decode-steps steps are timed one by one and
 *            only steady ones count (B sequences, B tokens, B sampled, no preemption); the
 *            median step gives B / step tokens per second
 *   memory   peak resident set (getrusage ru_maxrss) after the model runs, and the engine's
 *            KV pages + state slots (ph_engine_info.cache_bytes)
 *   machine  DRAM read bandwidth, fp32 FMA peak and, where the CPU has them, the bf16 dot peak
 *            (AVX-512 BF16 vdpbf16ps) and the int8 dot peak (AVX-512 VNNI vpdpbusd;
 *            bench/roofline.h), measured after the model runs (so the probe's 1 GiB buffer
 *            stays out of the peak RSS)
 *   speculative (--speculative replay, in place of decode) for each B of --batches: B requests
 *            decode greedily once to give each its reference continuation; then, per repeat,
 *            per K of --draft-tokens, one plain decode run and, per p of --acceptance, one
 *            speculative run whose replay drafter proposes that continuation with each token
 *            replaced by a wrong one with probability 1 - p (a fixed hash: deterministic). Each
 *            run times --decode-steps steps after a warm-up; a speculative step is steady when
 *            all B sequences verify K drafts. Reports tokens/s of both, their ratio, the
 *            measured acceptance (ph_step_info n_accepted / n_drafted) and the verify step's
 *            time over the plain step's. Every run's tokens must equal the reference: a
 *            speculative run that changes the output is an error (PH_ERR_INTERNAL).
 *   scenarios (--scenario prefix|chat, in place of prefill and decode) the prefix cache: time to
 *            first token of requests sharing a prompt prefix, and a synthetic multi-turn chat,
 *            each on two engines, with the cache and without (tools/bench_prefix.h)
 * Every figure is the median over --repeats. Decode is compared with the bandwidth as bytes read
 * per step (weights once + each sequence's state read and written + its KV pages) / step time;
 * prefill with the FMA peak as 2 x parameters FLOPs per token, and with the compute peak of the
 * arithmetic the engine runs (compute_peak: the int8 dot peak for weights quantized at load with
 * accuracy_level 4, the bf16 dot peak in bf16 mode, else the FMA peak): vs_compute. The weight
 * bytes and parameters are the checkpoint's tensors as stored (ph_model_get_info) or the
 * package's initializers; the weight bytes a step reads are those, except that a checkpoint
 * quantized at load (--quant) reads its quantized linear weights in MatMulNBits' layout instead
 * (quantized_weight_bytes).
 *
 * bench/roofline.h is written for bench/ programs built with -march=native; the CLI is built
 * for the baseline ISA, so on x86-64 its functions are compiled here for AVX-512 + FMA (at -O3
 * under GCC) and called only when the CPU has both. Elsewhere the limits are reported as not
 * measured and the ratios as null.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli.h"
#include "engine_flags.h"
#include "pagedhybrid.h"
#include "quant_flags.h"
#include "tools_api.h"

#if defined(__x86_64__) && defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,fma"))), apply_to = function)
#pragma clang attribute push(__attribute__((no_sanitize("address", "undefined"))),                 \
                             apply_to = function)
#elif defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx512f,fma")
#pragma GCC optimize("O3")
#endif
#include "../bench/roofline.h"
#if defined(__x86_64__) && defined(__clang__)
#pragma clang attribute pop
#pragma clang attribute pop
#elif defined(__x86_64__) && defined(__GNUC__)
#pragma GCC pop_options
#endif
#include "../bench/engine_steps.h"
#include "bench_prefix.h"

static const cli_option OPTIONS[] = {
    {"model", "DIR|PKG", "Hugging Face checkpoint directory, or a package exported --layout paged"},
    {"prompt", "N", "prefill prompt length in tokens (default 512)"},
    {"decode-steps", "N", "timed decode steps per batch size and repeat (default 16)"},
    {"batches", "LIST", "decode batch sizes, comma-separated (default 1,4,16,64)"},
    {"repeats", "N", "repeat every measurement N times and report medians (default 3)"},
    {"threads", "N", "worker threads for the model and the roofline probes (default: all CPUs)"},
    {"json", NULL, "print one JSON object instead of the table"},
    {"precision", "f32|bf16|auto",
     "linear-layer arithmetic: f32, or bf16 inputs and bf16 dot products summed in f32 "
     "(default auto: bf16 for a bf16 checkpoint; docs/precision.md)"},
    {"max-batch", "N",
     "engine sequences per step (default: the largest of --batches for a "
     "checkpoint, the package's for a package)"},
    {"max-tokens", "N", "engine token budget per step (default: the package's, else 2048)"},
    {"prefill-chunk", "N", "prompt tokens per request per step (default min(256, max-tokens))"},
    {"memory", "MiB",
     "engine budget for KV pages + state slots (default: the pages the "
     "measurements need)"},
    {"speculative", "METHOD",
     "measure speculative decode instead of plain decode: replay (a known continuation, "
     "correct with probability --acceptance)"},
    {"draft-tokens", "LIST",
     "with --speculative: drafts per step, comma-separated (default 1,2,4,8)"},
    {"acceptance", "LIST",
     "with --speculative: probability that each drafted token is correct, comma-separated "
     "(default 0,0.5,0.9,1)"},
    {"state-update-capacity", "N",
     "state-update capacity of the engine (default: 8 with --speculative on a checkpoint, the "
     "package's for a package)"},
    ENGINE_FLAG_PREFIX_CACHE_OPTIONS,
    {"scenario", "NAME", "throughput (default); prefix or chat: the prefix cache, on and off"},
    {"shared-prefix", "N", "prefix: tokens shared (default 1024); chat: system prompt (0)"},
    {"unique", "N", "prefix: tokens after it (default 64)"},
    {"requests", "N", "prefix: warm requests per repeat (default 4)"},
    {"conversations", "N", "chat: conversations (default 8)"},
    {"turns", "N", "chat: turns per conversation (default 6)"},
    {"user-tokens", "N", "chat: tokens per user message (default 64)"},
    {"answer-tokens", "N", "chat: tokens per answer (default 32)"},
    {"seed", "N", "chat: user messages' seed (default 1)"},
    QUANT_FLAG_OPTIONS,
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

#define MAX_BATCHES   16
#define MAX_DRAFTS    PH_MAX_DRAFT_TOKENS /* --draft-tokens values */
#define MAX_ACCEPT    16                  /* --acceptance values */
#define DECODE_PROMPT 16                  /* prompt tokens of each decoding request */
#define MAX_LOOP      1000000 /* steps any one measurement may take before it is a bug */

typedef struct bench_config {
  int64_t prompt, decode_steps, repeats, threads;
  int64_t batches[MAX_BATCHES];
  int n_batches;
  int json;
  int spec; /* --speculative replay: the speculative section in place of decode */
  int64_t drafts[MAX_DRAFTS];
  int n_drafts;
  double accept[MAX_ACCEPT];
  int n_accept;
  prefix_config pc; /* pc.scenario: SCENARIO_THROUGHPUT, or a prefix-cache scenario in place of
                       prefill and decode */
} bench_config;

/* What bench learns about the model and the engine over it. */
typedef struct model_facts {
  int is_package;
  int64_t parameters, weight_bytes; /* tensors as stored (checkpoint) or initializers (package) */
  int64_t weight_bytes_read;        /* what a step reads: weight_bytes, or with --quant the
                                       quantized linear weights in place of theirs */
  int64_t quantized_tensors;        /* tensors counted as quantized (0 without --quant) */
  int64_t state_bytes_per_seq;      /* one state slot: conv + recurrent, every linear layer */
  int64_t state_banks;              /* copies of the state in a slot: 2 with state updates */
  int64_t kv_bytes_per_token;       /* K and V, every full-attention layer */
  int64_t vocab, block_size, max_context, kv_pages, cache_bytes;
  double load_s;
  int32_t quantized_linears; /* MatMulNBits linear layers (ph_engine_info) */
  char quant[256];           /* quant_flags_describe, taken while the engine is open */
} model_facts;

typedef struct prefill_result {
  double tok_s, ttft_ms;
  int64_t steps;
} prefill_result;

typedef struct decode_result {
  int64_t batch;
  const char *skipped; /* NULL when measured */
  char note[128];
  double step_s, tok_s, context; /* median step, B / step, mean tokens in cache per sequence */
  int64_t steady_steps;          /* of the last repeat */
} decode_result;

/* --NAME LIST: up to max comma-separated integers in [lo, hi] into out[*n] (left alone when the
 * option is absent). */
static int parse_int_list(cli_args *a, const char *name, const char *what, int64_t lo, int64_t hi,
                          int max, int64_t *out, int *n) {
  const char *v = cli_get(a, name);
  if (!v) return CLI_EXIT_OK;
  *n = 0;
  const char *p = v;
  while (*p) {
    const char *end = p;
    int64_t x = 0;
    if (!cli_parse_i64(p, &end, &x) || (*end != ',' && *end != '\0') || x < lo || x > hi ||
        *n == max)
      return cli_usage_error(a,
                             "--%s expects up to %d comma-separated %s in [%lld, %lld], "
                             "got \"%s\"",
                             name, max, what, (long long)lo, (long long)hi, v);
    out[(*n)++] = x;
    p = *end ? end + 1 : end;
    if (*end == ',' && *p == '\0')
      return cli_usage_error(a, "--%s has a trailing comma: \"%s\"", name, v);
  }
  if (*n == 0) return cli_usage_error(a, "--%s is empty", name);
  return CLI_EXIT_OK;
}

static int parse_batches(cli_args *a, bench_config *c) {
  return parse_int_list(a, "batches", "sizes", 1, 4096, MAX_BATCHES, c->batches, &c->n_batches);
}

/* --acceptance LIST: up to MAX_ACCEPT probabilities in [0, 1]. */
static int parse_acceptance(cli_args *a, bench_config *c) {
  const char *v = cli_get(a, "acceptance");
  if (!v) return CLI_EXIT_OK;
  c->n_accept = 0;
  const char *p = v;
  while (*p) {
    char *end = NULL;
    const double x = strtod(p, &end);
    if (end == p || (*end != ',' && *end != '\0') || !(x >= 0.0 && x <= 1.0) ||
        c->n_accept == MAX_ACCEPT)
      return cli_usage_error(a,
                             "--acceptance expects up to %d comma-separated probabilities in "
                             "[0, 1], got \"%s\"",
                             MAX_ACCEPT, v);
    c->accept[c->n_accept++] = x;
    p = *end ? end + 1 : end;
    if (*end == ',' && *p == '\0')
      return cli_usage_error(a, "--acceptance has a trailing comma: \"%s\"", v);
  }
  if (c->n_accept == 0) return cli_usage_error(a, "--acceptance is empty");
  return CLI_EXIT_OK;
}

/* --speculative replay [--draft-tokens LIST] [--acceptance LIST]; the last two only with the
 * first. */
static int parse_speculative(cli_args *a, bench_config *c) {
  const char *m = cli_get(a, "speculative");
  if (!m) {
    if (cli_get(a, "draft-tokens") || cli_get(a, "acceptance"))
      return cli_usage_error(a, "--draft-tokens and --acceptance need --speculative replay");
    return CLI_EXIT_OK;
  }
  if (strcmp(m, "replay") != 0)
    return cli_usage_error(a,
                           "--speculative %s: bench measures the replay drafter (a known "
                           "continuation, correct with probability --acceptance): expected replay",
                           m);
  c->spec = 1;
  int rc = parse_int_list(a, "draft-tokens", "draft counts", 1, PH_MAX_DRAFT_TOKENS, MAX_DRAFTS,
                          c->drafts, &c->n_drafts);
  return rc ? rc : parse_acceptance(a, c);
}

/* --scenario throughput|prefix|chat and the options of each; an option of another scenario is a
 * usage error. p: the engine flags as parsed (a prefix-cache scenario runs the cache on and off
 * itself). */
static int parse_scenario(cli_args *a, bench_config *c, const ph_engine_params *p) {
  static const char *const THROUGHPUT[] = {"prompt",      "decode-steps", "batches",
                                           "speculative", "draft-tokens", "acceptance"};
  static const char *const PREFIX[] = {"unique", "requests"};
  static const char *const CHAT[] = {"conversations", "turns", "user-tokens", "answer-tokens",
                                     "seed"};
  static const char *const NAMES[] = {"throughput", "prefix", "chat"};
  prefix_config *pc = &c->pc;
  const char *v = cli_get(a, "scenario");
  pc->scenario = SCENARIO_THROUGHPUT;
  if (v) {
    int k = 0;
    while (k < 3 && strcmp(v, NAMES[k]) != 0) k++;
    if (k == 3) return cli_usage_error(a, "--scenario %s: expected throughput, prefix or chat", v);
    pc->scenario = (bench_scenario)k;
  }
  const char *const *own[3] = {THROUGHPUT, PREFIX, CHAT};
  const size_t n_own[3] = {6, 2, 5};
  for (int k = 0; k < 3; k++)
    for (size_t i = 0; k != (int)pc->scenario && i < n_own[k]; i++)
      if (cli_get(a, own[k][i]))
        return cli_usage_error(a, "--%s applies to --scenario %s%s", own[k][i], NAMES[k],
                               k == 0 ? " (the default)" : "");
  if (pc->scenario == SCENARIO_THROUGHPUT) {
    if (cli_get(a, "shared-prefix"))
      return cli_usage_error(a, "--shared-prefix applies to --scenario prefix or chat");
    return CLI_EXIT_OK;
  }
  if (p->prefix_cache == PH_PREFIX_CACHE_OFF)
    return cli_usage_error(a,
                           "--scenario %s measures with the prefix cache and without: "
                           "--no-prefix-cache does not apply",
                           NAMES[pc->scenario]);
  const int chat = pc->scenario == SCENARIO_CHAT;
  int64_t seed = 1;
  int rc;
  pc->shared = chat ? 0 : 1024;
  pc->unique = 64;
  pc->requests = 4;
  pc->conversations = 8;
  pc->turns = 6;
  pc->user_tokens = 64;
  pc->answer_tokens = 32;
  pc->repeats = c->repeats;
  if ((rc = cli_get_int(a, "shared-prefix", chat ? 0 : 1, (int64_t)1 << 24, &pc->shared)) ||
      (rc = cli_get_int(a, "unique", 1, (int64_t)1 << 24, &pc->unique)) ||
      (rc = cli_get_int(a, "requests", 1, PREFIX_MAX_REQUESTS, &pc->requests)) ||
      (rc = cli_get_int(a, "conversations", 1, CHAT_MAX_CONVERSATIONS, &pc->conversations)) ||
      (rc = cli_get_int(a, "turns", 1, CHAT_MAX_TURNS, &pc->turns)) ||
      (rc = cli_get_int(a, "user-tokens", 1, 1 << 20, &pc->user_tokens)) ||
      (rc = cli_get_int(a, "answer-tokens", 1, 1 << 20, &pc->answer_tokens)) ||
      (rc = cli_get_int(a, "seed", 0, (int64_t)1 << 32, &seed)))
    return rc;
  pc->seed = (uint64_t)seed;
  return CLI_EXIT_OK;
}

/* The engine's vocabulary (ph_engine_get_info cannot fail on an open engine). */
static int64_t vocab_of(const ph_engine *e) {
  ph_engine_info in;
  return ph_engine_get_info(e, &in) == PH_OK ? in.vocab_size : 0;
}

/* Steps e until nothing is queued or running. */
static ph_status drain(ph_engine *e, diag *d) {
  for (int64_t k = 0; ph_engine_busy(e); k++) {
    RETURN_ERROR_IF(k == MAX_LOOP, d, PH_ERR_INTERNAL, "the engine did not go idle");
    FORWARD_IF_ERROR(engine_failed(e, ph_engine_step(e, NULL), d));
  }
  return PH_OK;
}

static ph_status finish_ok(ph_engine *e, uint64_t id, diag *d) {
  ph_request_info in;
  FORWARD_IF_ERROR(
      engine_call_failed("ph_engine_request_info", ph_engine_request_info(e, id, &in), d));
  if (in.finish == PH_FINISH_ERROR)
    return diag_set(d, in.status, "the engine refused a benchmark request: %s", in.message);
  return PH_OK;
}

/* ---- prefill ------------------------------------------------------------------------------- */

static ph_status bench_prefill(ph_engine *e, const bench_config *c, int rep, prefill_result *out,
                               diag *d) {
  const int64_t V = vocab_of(e);
  int64_t *prompt = malloc((size_t)c->prompt * sizeof *prompt);
  RETURN_ERROR_IF(!prompt, d, PH_ERR_NO_MEMORY, "out of memory for a %lld-token prompt",
                  (long long)c->prompt);
  /* a different prompt per repeat: nothing could be reused between them */
  for (int64_t j = 0; j < c->prompt; j++)
    prompt[j] = bench_prompt_token(1000 + (uint64_t)rep, j, V);
  ph_sampling_params sp = ph_sampling_params_default();
  sp.max_new_tokens = 1;
  sp.ignore_eos = 1;
  uint64_t id = 0;
  ph_status s = engine_call_failed("ph_engine_add_request",
                                   ph_engine_add_request(e, prompt, c->prompt, &sp, &id), d);
  free(prompt);
  FORWARD_IF_ERROR(s);
  int64_t steps = 0;
  for (; ph_engine_busy(e); steps++) {
    RETURN_ERROR_IF(steps == MAX_LOOP, d, PH_ERR_INTERNAL, "the prefill request never finished");
    FORWARD_IF_ERROR(engine_failed(e, ph_engine_step(e, NULL), d));
  }
  FORWARD_IF_ERROR(finish_ok(e, id, d));
  ph_request_info in;
  FORWARD_IF_ERROR(
      engine_call_failed("ph_engine_request_info", ph_engine_request_info(e, id, &in), d));
  FORWARD_IF_ERROR(
      engine_call_failed("ph_engine_release_request", ph_engine_release_request(e, id), d));
  out->ttft_ms = in.time_to_first_token_ms;
  out->tok_s =
      in.time_to_first_token_ms > 0 ? (double)c->prompt / (in.time_to_first_token_ms * 1e-3) : 0.0;
  out->steps = steps;
  return PH_OK;
}

/* ---- decode -------------------------------------------------------------------------------- */

/* One repeat at batch B: *step_s is the median steady step (0 when there was none). */
static ph_status bench_decode_once(ph_engine *e, const bench_config *c, int64_t B, int rep,
                                   double *step_s, int64_t *n_steady, diag *d) {
  const int64_t V = vocab_of(e), n_steps = c->decode_steps;
  uint64_t *ids = calloc((size_t)B, sizeof *ids);
  double *times = calloc((size_t)n_steps, sizeof *times);
  ph_status s = ids && times ? PH_OK : diag_set(d, PH_ERR_NO_MEMORY, "out of memory");
  ph_sampling_params sp = ph_sampling_params_default();
  sp.max_new_tokens = n_steps + 3; /* the prompt's token, a warm-up step, the timed steps, 1 */
  sp.ignore_eos = 1;
  for (int64_t b = 0; s == PH_OK && b < B; b++) {
    int64_t prompt[DECODE_PROMPT];
    for (int j = 0; j < DECODE_PROMPT; j++)
      prompt[j] = bench_prompt_token((uint64_t)(rep * 4096 + b), (uint64_t)j, V);
    s = engine_call_failed("ph_engine_add_request",
                           ph_engine_add_request(e, prompt, DECODE_PROMPT, &sp, &ids[b]), d);
  }
  /* prompts, until the first step where every sequence decodes one token: the warm-up */
  ph_step_info si;
  memset(&si, 0, sizeof si);
  for (int64_t k = 0; s == PH_OK && !bench_steady_step(&si, B); k++) {
    if (k == MAX_LOOP || (k > 0 && !ph_engine_busy(e))) {
      s = diag_set(d, PH_ERR_INTERNAL, "batch %lld never reached a steady decode step",
                   (long long)B);
      break;
    }
    s = engine_failed(e, ph_engine_step(e, &si), d);
  }
  *n_steady = 0;
  for (int64_t k = 0; s == PH_OK && k < n_steps; k++) {
    const double t0 = roofline_now();
    s = engine_failed(e, ph_engine_step(e, &si), d);
    const double t = roofline_now() - t0;
    if (s == PH_OK && bench_steady_step(&si, B)) times[(*n_steady)++] = t;
  }
  *step_s = s == PH_OK ? bench_median(times, *n_steady) : 0.0;
  for (int64_t b = 0; s == PH_OK && b < B; b++) s = finish_ok(e, ids[b], d);
  for (int64_t b = 0; s == PH_OK && b < B; b++)
    s = engine_call_failed("ph_engine_remove_request", ph_engine_remove_request(e, ids[b]), d);
  if (s == PH_OK) s = drain(e, d);
  for (int64_t b = 0; s == PH_OK && b < B; b++)
    s = engine_call_failed("ph_engine_release_request", ph_engine_release_request(e, ids[b]), d);
  free(ids);
  free(times);
  return s;
}

static ph_status bench_decode(ph_engine *e, const bench_config *c, decode_result *r, diag *d) {
  ph_engine_info info;
  FORWARD_IF_ERROR(engine_call_failed("ph_engine_get_info", ph_engine_get_info(e, &info), d));
  const ph_engine_params *p = &info.params;
  const int64_t B = r->batch;
  if (B > p->max_batch_size) {
    r->skipped = "above the engine's max_batch";
    snprintf(r->note, sizeof r->note, "above the engine's max_batch (%d): --max-batch",
             p->max_batch_size);
    return PH_OK;
  }
  if (B > p->max_scheduled_tokens) {
    r->skipped = "above the engine's token budget";
    snprintf(r->note, sizeof r->note, "above the engine's token budget (%lld): --max-tokens",
             (long long)p->max_scheduled_tokens);
    return PH_OK;
  }
  double steps[64];
  int64_t n_steady = 0;
  int n = 0;
  for (int rep = 0; rep < c->repeats; rep++) {
    double step_s = 0;
    FORWARD_IF_ERROR(bench_decode_once(e, c, B, rep, &step_s, &n_steady, d));
    if (n_steady > 0) steps[n++] = step_s;
  }
  r->steady_steps = n_steady;
  if (n == 0) {
    r->skipped = "no steady decode step";
    snprintf(r->note, sizeof r->note,
             "no steady decode step (sequences were preempted: pages short, raise --memory)");
    return PH_OK;
  }
  r->step_s = bench_median(steps, n);
  r->tok_s = r->step_s > 0 ? (double)B / r->step_s : 0.0;
  /* tokens in each sequence's cache over the timed steps: prompt + first token + warm-up, then
   * one more per step */
  r->context = DECODE_PROMPT + 2 + 0.5 * (double)(c->decode_steps - 1);
  return PH_OK;
}

/* Bytes a decode step at batch B reads (and writes, for the state): the weights once, each
 * sequence's state read and written back (one bank of a double-banked slot), and its KV pages
 * up to the context. */
static double bytes_per_step(const model_facts *m, int64_t B, double context) {
  const double state = (double)m->state_bytes_per_seq / (double)m->state_banks;
  return (double)m->weight_bytes_read +
         (double)B * (2.0 * state + context * (double)m->kv_bytes_per_token);
}

static double decode_bytes_per_step(const model_facts *m, const decode_result *r) {
  return bytes_per_step(m, r->batch, r->context);
}

/* ---- speculative decode (--speculative replay) ---------------------------------------------- */

typedef struct spec_point {
  int64_t k;              /* drafts per step */
  double p;               /* probability that a drafted token is correct */
  double step_s, tok_s;   /* median steady verify step; tokens emitted per second */
  double verify_cost;     /* the verify step / the plain step of the same repeat and K, median */
  double speedup;         /* tok_s / the plain tok_s of the same repeat and K, median */
  double tokens_per_step; /* tokens emitted per sequence per steady step */
  double acceptance;      /* n_accepted / n_drafted over the steady steps */
  int64_t steady_steps;   /* of the last repeat */
} spec_point;

typedef struct spec_batch {
  int64_t batch;
  const char *skipped; /* NULL when measured */
  char note[128];
  double plain_step_s, plain_tok_s, context; /* one-token decode in the same engine */
  int64_t plain_steady;                      /* of the last plain run */
  int64_t n_ref;                             /* tokens of each reference continuation */
  spec_point pts[MAX_DRAFTS * MAX_ACCEPT];   /* --draft-tokens x --acceptance, in that order */
  int n_pts;
} spec_batch;

/* Tokens each request generates in a speculative measurement: its first token, the warm-up
 * step and the timed steps, K + 1 each at most, and K + 1 spare so that the scheduler (which
 * keeps a verify below the tokens a request may still generate) never trims a timed step's
 * drafts. */
static int64_t spec_ref_tokens(const bench_config *c) {
  int64_t kmax = 0;
  for (int i = 0; i < c->n_drafts; i++)
    if (c->drafts[i] > kmax) kmax = c->drafts[i];
  return 2 + (kmax + 1) * (c->decode_steps + 2);
}

/* Request b's prompt in the speculative section: the same in every run, so that every run
 * must generate the reference continuation. */
static void spec_prompt(int64_t b, int64_t V, int64_t *prompt) {
  for (int j = 0; j < DECODE_PROMPT; j++)
    prompt[j] = bench_prompt_token(700000 + (uint64_t)b, (uint64_t)j, V);
}

/* The replay drafter's continuation for request b: the reference with token i kept when a
 * fixed hash of (b, i) in [0, 1) is below p, else replaced by another token. */
static void spec_replay(const int64_t *ref, int64_t n, int64_t b, double p, int64_t V,
                        int64_t *out) {
  for (int64_t i = 0; i < n; i++) {
    const double u =
        (double)bench_prompt_token(900000 + (uint64_t)b, (uint64_t)i, (int64_t)1 << 30) /
        (double)((int64_t)1 << 30);
    const int64_t shift = V > 1 ? 1 + bench_prompt_token(800000 + (uint64_t)b, i, V - 1) : 0;
    out[i] = u < p ? ref[i] : (ref[i] + shift) % V;
  }
}

static ph_status spec_add(ph_engine *e, int64_t B, int64_t n_ref, int64_t k, const int64_t *replay,
                          uint64_t *ids, diag *d) {
  const int64_t V = vocab_of(e);
  for (int64_t b = 0; b < B; b++) {
    int64_t prompt[DECODE_PROMPT];
    spec_prompt(b, V, prompt);
    ph_sampling_params sp = ph_sampling_params_default();
    sp.max_new_tokens = n_ref;
    sp.ignore_eos = 1;
    if (k > 0) {
      sp.speculative.method = PH_DRAFT_REPLAY;
      sp.speculative.num_draft_tokens = (int32_t)k;
      sp.speculative.replay_tokens = replay + b * n_ref;
      sp.speculative.n_replay_tokens = n_ref;
    }
    FORWARD_IF_ERROR(engine_call_failed(
        "ph_engine_add_request", ph_engine_add_request(e, prompt, DECODE_PROMPT, &sp, &ids[b]), d));
  }
  return PH_OK;
}

/* The reference: B requests decode greedily (no speculation) to n_ref tokens each, into
 * ref[B][n_ref]. */
static ph_status spec_reference(ph_engine *e, int64_t B, int64_t n_ref, int64_t *ref, uint64_t *ids,
                                diag *d) {
  FORWARD_IF_ERROR(spec_add(e, B, n_ref, 0, NULL, ids, d));
  FORWARD_IF_ERROR(drain(e, d));
  for (int64_t b = 0; b < B; b++) {
    FORWARD_IF_ERROR(finish_ok(e, ids[b], d));
    int64_t n = 0;
    const int64_t *t = ph_engine_request_tokens(e, ids[b], &n);
    RETURN_ERROR_IF(!t || n != n_ref, d, PH_ERR_INTERNAL,
                    "reference request %lld generated %lld tokens, expected %lld", (long long)b,
                    (long long)n, (long long)n_ref);
    memcpy(ref + b * n_ref, t, (size_t)n_ref * sizeof *t);
    FORWARD_IF_ERROR(
        engine_call_failed("ph_engine_release_request", ph_engine_release_request(e, ids[b]), d));
  }
  return PH_OK;
}

typedef struct spec_run_result {
  double step_s; /* median steady step */
  int64_t steady, generated, drafted, accepted;
} spec_run_result;

/* A step of a run at batch B with K drafts (0: plain decode) is steady when all B sequences ran
 * K + 1 tokens, K of them drafts, and nothing was preempted. */
static int spec_steady(const ph_step_info *si, int64_t B, int64_t k) {
  if (k == 0) return bench_steady_step(si, B);
  return si->batch_size == B && si->n_tokens == B * (k + 1) && si->n_drafted == B * k &&
         si->n_preempted == 0;
}

/* One run: B requests (replay drafting k tokens from replay[B][n_ref], or plain when k is 0)
 * step to their first steady step (the warm-up), then --decode-steps steps are timed. Every
 * token they generated must equal the reference's; then they are removed. */
static ph_status spec_run(ph_engine *e, const bench_config *c, int64_t B, int64_t k, double p,
                          const int64_t *ref, const int64_t *replay, int64_t n_ref, uint64_t *ids,
                          double *times, spec_run_result *out, diag *d) {
  memset(out, 0, sizeof *out);
  ph_status s = spec_add(e, B, n_ref, k, replay, ids, d);
  ph_step_info si;
  memset(&si, 0, sizeof si);
  for (int64_t n = 0; s == PH_OK && !spec_steady(&si, B, k); n++) {
    if (n == MAX_LOOP || (n > 0 && !ph_engine_busy(e))) {
      /* a request the engine refused says why */
      for (int64_t b = 0; s == PH_OK && b < B; b++) s = finish_ok(e, ids[b], d);
      if (s == PH_OK)
        s = diag_set(d, PH_ERR_INTERNAL,
                     "batch %lld never reached a steady %s step (every sequence running %lld "
                     "tokens)",
                     (long long)B, k ? "verify" : "decode", (long long)k + 1);
      break;
    }
    s = engine_failed(e, ph_engine_step(e, &si), d);
  }
  for (int64_t n = 0; s == PH_OK && n < c->decode_steps; n++) {
    const double t0 = roofline_now();
    s = engine_failed(e, ph_engine_step(e, &si), d);
    const double t = roofline_now() - t0;
    if (s != PH_OK || !spec_steady(&si, B, k)) continue;
    times[out->steady++] = t;
    out->generated += si.n_generated;
    out->drafted += si.n_drafted;
    out->accepted += si.n_accepted;
  }
  out->step_s = s == PH_OK ? bench_median(times, out->steady) : 0.0;
  for (int64_t b = 0; s == PH_OK && b < B; b++) s = finish_ok(e, ids[b], d);
  /* exactness: speculation never changes a token */
  for (int64_t b = 0; s == PH_OK && b < B; b++) {
    int64_t n = 0;
    const int64_t *t = ph_engine_request_tokens(e, ids[b], &n);
    const int64_t *r = ref + b * n_ref;
    for (int64_t i = 0; t && i < n && i < n_ref; i++)
      if (t[i] != r[i]) {
        s = diag_set(d, PH_ERR_INTERNAL,
                     "batch %lld, %lld drafts, p %.3g: request %lld generated %lld at index "
                     "%lld where plain decode generated %lld: %s changed the output",
                     (long long)B, (long long)k, p, (long long)b, (long long)t[i], (long long)i,
                     (long long)r[i], k ? "speculative decoding" : "a second plain run");
        break;
      }
  }
  for (int64_t b = 0; s == PH_OK && b < B; b++)
    s = engine_call_failed("ph_engine_remove_request", ph_engine_remove_request(e, ids[b]), d);
  if (s == PH_OK) s = drain(e, d);
  for (int64_t b = 0; s == PH_OK && b < B; b++)
    s = engine_call_failed("ph_engine_release_request", ph_engine_release_request(e, ids[b]), d);
  return s;
}

/* The speculative section at batch r->batch: the reference, then per repeat and per K one plain
 * run and one speculative run per p. Medians over repeats (the plain step: over every plain
 * run). */
static ph_status bench_spec(ph_engine *e, const bench_config *c, spec_batch *r, diag *d) {
  ph_engine_info info;
  FORWARD_IF_ERROR(engine_call_failed("ph_engine_get_info", ph_engine_get_info(e, &info), d));
  const ph_engine_params *p = &info.params;
  const int64_t B = r->batch, n_ref = spec_ref_tokens(c), V = info.vocab_size;
  int64_t kmax = 0;
  for (int i = 0; i < c->n_drafts; i++)
    if (c->drafts[i] > kmax) kmax = c->drafts[i];
  r->n_ref = n_ref;
  if (B > p->max_batch_size) {
    r->skipped = "above the engine's max_batch";
    snprintf(r->note, sizeof r->note, "above the engine's max_batch (%d): --max-batch",
             p->max_batch_size);
    return PH_OK;
  }
  if (B * (kmax + 1) > p->max_scheduled_tokens || B * DECODE_PROMPT > p->max_scheduled_tokens) {
    r->skipped = "above the engine's token budget";
    snprintf(r->note, sizeof r->note,
             "%lld x %lld tokens are above the engine's token budget (%lld): --max-tokens",
             (long long)B, (long long)(kmax + 1 > DECODE_PROMPT ? kmax + 1 : DECODE_PROMPT),
             (long long)p->max_scheduled_tokens);
    return PH_OK;
  }
  const int64_t n_pts = (int64_t)c->n_drafts * c->n_accept, n_runs = c->repeats;
  int64_t *ref = malloc((size_t)(B * n_ref) * sizeof *ref);
  int64_t *replay = malloc((size_t)(B * n_ref * c->n_accept) * sizeof *replay); /* [p][B][n_ref] */
  uint64_t *ids = calloc((size_t)B, sizeof *ids);
  double *times = calloc((size_t)c->decode_steps, sizeof *times);
  double *plain = calloc((size_t)(n_runs * c->n_drafts), sizeof *plain);
  double *steps = calloc((size_t)(n_runs * n_pts), sizeof *steps);
  double *toks = calloc((size_t)(n_runs * n_pts), sizeof *toks);
  double *cost = calloc((size_t)(n_runs * n_pts), sizeof *cost);
  double *gain = calloc((size_t)(n_runs * n_pts), sizeof *gain);
  ph_status s = ref && replay && ids && times && plain && steps && toks && cost && gain
                    ? PH_OK
                    : diag_set(d, PH_ERR_NO_MEMORY, "out of memory");
  if (s == PH_OK) s = spec_reference(e, B, n_ref, ref, ids, d);
  for (int64_t pi = 0; s == PH_OK && pi < c->n_accept; pi++)
    for (int64_t b = 0; b < B; b++)
      spec_replay(ref + b * n_ref, n_ref, b, c->accept[pi], V, replay + (pi * B + b) * n_ref);
  int n_plain = 0;
  int64_t drafted[MAX_DRAFTS * MAX_ACCEPT] = {0}, accepted[MAX_DRAFTS * MAX_ACCEPT] = {0};
  int64_t generated[MAX_DRAFTS * MAX_ACCEPT] = {0}, steady_total[MAX_DRAFTS * MAX_ACCEPT] = {0};
  int n_ok[MAX_DRAFTS * MAX_ACCEPT] = {0};
  for (int rep = 0; s == PH_OK && rep < c->repeats; rep++)
    for (int ki = 0; s == PH_OK && ki < c->n_drafts; ki++) {
      spec_run_result x;
      s = spec_run(e, c, B, 0, 1.0, ref, NULL, n_ref, ids, times, &x, d);
      const double plain_s = x.steady > 0 ? x.step_s : 0.0; /* this repeat's, this K's */
      if (s == PH_OK && x.steady > 0) plain[n_plain++] = x.step_s;
      r->plain_steady = x.steady;
      for (int pi = 0; s == PH_OK && pi < c->n_accept; pi++) {
        const int i = ki * c->n_accept + pi;
        spec_point *pt = &r->pts[i];
        pt->k = c->drafts[ki];
        pt->p = c->accept[pi];
        s = spec_run(e, c, B, pt->k, pt->p, ref, replay + (int64_t)pi * B * n_ref, n_ref, ids,
                     times, &x, d);
        pt->steady_steps = x.steady;
        if (s != PH_OK || x.steady == 0 || plain_s <= 0) continue;
        /* the ratios against the plain run just before: both see the same machine */
        const int64_t at = i * n_runs + n_ok[i];
        steps[at] = x.step_s;
        toks[at] = (double)x.generated / (double)x.steady / x.step_s;
        cost[at] = x.step_s / plain_s;
        gain[at] = toks[at] / ((double)B / plain_s);
        n_ok[i]++;
        drafted[i] += x.drafted;
        accepted[i] += x.accepted;
        generated[i] += x.generated;
        steady_total[i] += x.steady;
      }
    }
  r->n_pts = (int)n_pts;
  if (s == PH_OK && n_plain == 0) {
    r->skipped = "no steady decode step";
    snprintf(r->note, sizeof r->note,
             "no steady decode step (sequences were preempted: pages short, raise --memory)");
  } else if (s == PH_OK) {
    r->plain_step_s = bench_median(plain, n_plain);
    r->plain_tok_s = (double)B / r->plain_step_s;
    r->context = DECODE_PROMPT + 2 + 0.5 * (double)(c->decode_steps - 1);
    for (int i = 0; i < n_pts; i++) {
      spec_point *pt = &r->pts[i];
      if (n_ok[i] == 0) continue; /* steady_steps 0: reported as not measured */
      pt->step_s = bench_median(steps + i * n_runs, n_ok[i]);
      pt->tok_s = bench_median(toks + i * n_runs, n_ok[i]);
      pt->verify_cost = bench_median(cost + i * n_runs, n_ok[i]);
      pt->speedup = bench_median(gain + i * n_runs, n_ok[i]);
      pt->tokens_per_step = (double)generated[i] / (double)steady_total[i] / (double)B;
      pt->acceptance = drafted[i] > 0 ? (double)accepted[i] / (double)drafted[i] : 0.0;
    }
  }
  free(ref);
  free(replay);
  free(ids);
  free(times);
  free(plain);
  free(steps);
  free(toks);
  free(cost);
  free(gain);
  return s;
}

/* ---- model facts --------------------------------------------------------------------------- */

static void session_facts(const ph_engine_info *in, model_facts *m) {
  m->vocab = in->vocab_size;
  m->max_context = in->max_context;
  m->block_size = in->block_size;
  m->cache_bytes = in->cache_bytes;
  m->kv_pages = in->kv_pages;
  m->state_bytes_per_seq = in->state_bytes_per_request;
  m->state_banks = in->params.state_update_capacity > 0 ? 2 : 1;
  m->kv_bytes_per_token = in->kv_bytes_per_token;
  m->quantized_linears = in->quantized_linears;
  quant_flags_describe(in, m->quant, sizeof m->quant);
}

/* 1 when the checkpoint name `name` contains one of the comma-separated NAMEs of skip
 * (ph_quant_params.skip; NULL or "" skips nothing). */
static int quant_skipped(const char *skip, const char *name) {
  for (const char *p = skip; p && *p;) {
    const char *end = strchr(p, ',');
    const size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n > 0 && n < 192) {
      char part[192];
      memcpy(part, p, n);
      part[n] = '\0';
      if (strstr(name, part)) return 1;
    }
    p = end ? end + 1 : p + n;
  }
  return 0;
}

/* Bytes of t [N = all but the last dim, K = the last] in MatMulNBits' layout (tensor/quant.h):
 * the codes, padded to whole blocks, plus a scale per block in the scale dtype (the graph's io
 * dtype), plus the zero points when asymmetric. */
static int64_t quant_tensor_bytes(const st_tensor *t, const ph_quant_params *q, size_t scale_size) {
  const int64_t K = t->shape.n_dims > 0 ? t->shape.dims[t->shape.n_dims - 1] : 1;
  int64_t N = 1;
  for (int i = 0; i + 1 < t->shape.n_dims; i++) N *= t->shape.dims[i];
  const int64_t block = q->block_size > 0 ? q->block_size : 32, kb = (K + block - 1) / block;
  const int64_t codes = N * kb * block * q->bits / 8, scales = N * kb * (int64_t)scale_size;
  const int64_t zp = q->asymmetric ? N * ((kb * q->bits + 7) / 8) : 0;
  return codes + scales + zp;
}

typedef struct quant_count {
  const ph_quant_params *q;
  size_t scale_size;
  int64_t bytes;   /* weight bytes as a step reads them, updated tensor by tensor */
  int64_t tensors; /* tensors counted as quantized */
} quant_count;

/* t (may be NULL) is quantized unless --quant-skip names it: its bytes as stored leave the count
 * and its quantized bytes enter it. name: the name --quant-skip matches (t's own when NULL). */
static void quant_count_one(quant_count *c, const st_tensor *t, const char *name) {
  if (!t || quant_skipped(c->q->skip, name ? name : t->name)) return;
  c->bytes += quant_tensor_bytes(t, c->q, c->scale_size) - (int64_t)(t->data_end - t->data_begin);
  c->tensors++;
}

/* The weight bytes a step of a checkpoint quantized at load reads: the stored bytes, with every
 * tensor weight_role_quantizable accepts (models/weights.h: globals, layers, experts; the MTP
 * head is not in the target's bytes) replaced by its MatMulNBits bytes, skip names permitting.
 * A tied LM head (no lm_head.weight: the embedding is the head) counts as a quantized copy of
 * the embedding named "lm_head.weight", which a step reads in place of the embedding (the gather
 * reads B rows of it, not counted): the embedding gather itself stays in its dtype. This mirrors
 * what the loader quantizes; a change there must be made here too. */
static void quantized_weight_bytes(const ph_model *pm, const ph_engine_params *p, model_facts *m) {
  const model_weights *w = model_weights_of(pm);
  const ph_dtype io = p->io_dtype == PH_DTYPE_INVALID ? PH_DTYPE_F32 : p->io_dtype;
  quant_count c = {&p->quant, dtype_size(io), m->weight_bytes, 0};
  if (!w) return;
  for (int r = 0; r < W_ROLE_COUNT; r++)
    if (weight_role_quantizable((weight_role)r)) quant_count_one(&c, w->global[r], NULL);
  if (!w->global[W_LM_HEAD]) quant_count_one(&c, w->global[W_EMBED], "lm_head.weight");
  for (size_t i = 0; w->layer && i < (size_t)w->n_layers * W_ROLE_COUNT; i++)
    if (weight_role_quantizable((weight_role)(i % W_ROLE_COUNT)))
      quant_count_one(&c, w->layer[i], NULL);
  for (size_t i = 0; w->expert && i < (size_t)w->n_layers * 3 * (size_t)w->n_experts; i++)
    quant_count_one(&c, w->expert[i], NULL);
  m->weight_bytes_read = c.bytes;
  m->quantized_tensors = c.tensors;
}

/* Parameters and weight bytes: the checkpoint's tensors (ph_model_get_info), or the package's
 * initializers (read again from model.onnx, not finalized); and the bytes a step reads of them
 * (p: the engine's resolved parameters, whose quant says what was quantized at load). */
static ph_status weight_facts(const char *dir, const ph_engine_params *p, model_facts *m, diag *d) {
  if (!m->is_package) {
    ph_model *pm = NULL;
    ph_status s = ph_model_open(dir, NULL, &pm);
    if (s != PH_OK) {
      diag_set(d, s, "%s", pm ? ph_model_error(pm) : ph_status_message(s));
      ph_model_free(pm);
      return s;
    }
    ph_model_info info;
    s = ph_model_get_info(pm, &info);
    if (s == PH_OK) {
      m->parameters = info.parameters;
      m->weight_bytes = m->weight_bytes_read = info.weight_bytes;
      if (p->quant.bits != 0) quantized_weight_bytes(pm, p, m);
    } else {
      diag_set(d, s, "%s", ph_model_error(pm));
    }
    ph_model_free(pm);
    return s;
  }
  graph *g = NULL;
  onnx_model_info oi;
  FORWARD_IF_ERROR(package_read(dir, PACKAGE_CHECK, NULL, NULL, &g, &oi, d));
  m->weight_bytes = m->weight_bytes_read = oi.initializer_bytes;
  m->parameters = 0;
  for (int v = 0; v < g->n_values; v++) {
    const gvalue *val = &g->values[v];
    if (val->kind != VALUE_INITIALIZER) continue;
    int64_t n = 1;
    for (int k = 0; k < val->type.rank; k++) n *= val->type.dims[k];
    m->parameters += n;
  }
  graph_free(g);
  return PH_OK;
}

/* ---- the machine ---------------------------------------------------------------------------- */

static int roofline_available(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
#else
  return 1;
#endif
}

typedef struct machine_limits {
  int threads, measured;
  double bandwidth_gbs, fma_gflops;
  double bf16_gflops; /* 0: the CPU has no vdpbf16ps */
  double int8_gops;   /* 0: the CPU has no vpdpbusd */
} machine_limits;

/* bandwidth 0: the compute peaks only (the prefix-cache scenarios compare prefill, which is
 * compute-bound; bandwidth_gbs stays 0, reported as not measured). */
static void measure_machine(int64_t threads, int bandwidth, machine_limits *ml) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  ml->threads = threads > 0 ? (int)threads : cpus > 0 ? (int)cpus : 1;
  if (ml->threads > 16) ml->threads = 16; /* the probes' limit */
  ml->measured = roofline_available();
  if (!ml->measured) return;
  if (bandwidth) ml->bandwidth_gbs = roofline_bandwidth(ml->threads);
  ml->fma_gflops = roofline_fma(ml->threads);
  ml->bf16_gflops = roofline_bf16dot(ml->threads);
  ml->int8_gops = roofline_int8dot(ml->threads);
}

/* The arithmetic the engine's linear layers run, by its resolved parameters: int8 dot products
 * for weights quantized at load with accuracy_level 4 (0 stands for 4: int8 activations per row
 * and block), f32 for accuracy_level 1 (dequantized weights; 2 and 3 compute as 1), else the
 * precision's: bf16 dot products in bf16 mode, f32 FMA otherwise. */
typedef enum compute_kind { COMPUTE_FMA, COMPUTE_BF16, COMPUTE_INT8 } compute_kind;

static compute_kind compute_of(const ph_engine_params *p) {
  if (p->quant.bits != 0)
    return p->quant.accuracy_level == 0 || p->quant.accuracy_level == 4 ? COMPUTE_INT8
                                                                        : COMPUTE_FMA;
  return p->precision == PH_PRECISION_BF16 ? COMPUTE_BF16 : COMPUTE_FMA;
}

/* The name of that arithmetic's peak, as the JSON's engine.compute_peak and the table say it. */
static const char *compute_peak_name(const machine_limits *ml, const ph_engine_params *p) {
  switch (compute_of(p)) {
  case COMPUTE_INT8:
    return ml->int8_gops > 0 ? "int8 dot" : "f32 FMA";
  case COMPUTE_BF16:
    return ml->bf16_gflops > 0 ? "bf16 dot" : "f32 FMA";
  default:
    return "f32 FMA";
  }
}

/* The compute peak the engine's linear layers can reach (compute_of; where the CPU lacks the
 * instruction, the f32 FMA's); 0 when not measured. In GFLOP/s, or GOP/s for int8: prefill's
 * 2 x parameters per token counts an int8 multiply-add as 2 operations too. */
static double compute_peak(const machine_limits *ml, const ph_engine_params *p) {
  if (!ml->measured) return 0;
  switch (compute_of(p)) {
  case COMPUTE_INT8:
    return ml->int8_gops > 0 ? ml->int8_gops : ml->fma_gflops;
  case COMPUTE_BF16:
    return ml->bf16_gflops > 0 ? ml->bf16_gflops : ml->fma_gflops;
  default:
    return ml->fma_gflops;
  }
}

/* ---- reporting ------------------------------------------------------------------------------ */

typedef struct bench_report {
  const char *model_dir;
  const bench_config *c;
  model_facts m;
  ph_engine_params p; /* as the engine resolved them */
  machine_limits ml;
  prefill_result pre;
  int64_t prefill_steps;
  decode_result dec[MAX_BATCHES];
  spec_batch *spec;     /* [n_batches] with --speculative, in place of dec */
  prefix_result prefix; /* --scenario prefix, in place of pre and dec */
  chat_result chat;     /* --scenario chat, in place of pre and dec */
  int64_t peak_rss_bytes;
  double total_s;
} bench_report;

static json_t *real_or_null(int ok, double x) { return ok ? json_real(x) : json_null(); }

/* What a prefix-cache scenario's prefill figures are compared with. */
static prefix_peaks scenario_peaks(const bench_report *r) {
  prefix_peaks pk = {(double)r->m.parameters, r->ml.measured ? r->ml.fma_gflops : 0.0,
                     compute_peak(&r->ml, &r->p), compute_peak_name(&r->ml, &r->p)};
  return pk;
}

/* The speculative section (docs/bench.md lists every key). */
static json_t *spec_json(const bench_report *r) {
  const model_facts *m = &r->m;
  const int bw = r->ml.measured && r->ml.bandwidth_gbs > 0,
            fma = r->ml.measured && r->ml.fma_gflops > 0;
  json_t *o = json_object(), *ks = json_array(), *ps = json_array(), *bs = json_array();
  for (int i = 0; i < r->c->n_drafts; i++) json_array_append_new(ks, json_integer(r->c->drafts[i]));
  for (int i = 0; i < r->c->n_accept; i++) json_array_append_new(ps, json_real(r->c->accept[i]));
  json_object_set_new(o, "method", json_string("replay"));
  json_object_set_new(o, "state_update_capacity", json_integer(r->p.state_update_capacity));
  json_object_set_new(o, "draft_tokens", ks);
  json_object_set_new(o, "acceptance", ps);
  for (int i = 0; i < r->c->n_batches; i++) {
    const spec_batch *x = &r->spec[i];
    json_t *e = json_object();
    json_object_set_new(e, "batch", json_integer(x->batch));
    if (x->skipped) {
      json_object_set_new(e, "skipped", json_string(x->note));
      json_array_append_new(bs, e);
      continue;
    }
    json_object_set_new(e, "reference_tokens", json_integer(x->n_ref));
    json_t *pl = json_object(), *runs = json_array();
    const double bytes = bytes_per_step(m, x->batch, x->context),
                 gbs = bytes / x->plain_step_s / 1e9;
    const double gflops = x->plain_tok_s * 2.0 * (double)m->parameters / 1e9;
    json_object_set_new(pl, "tok_s", json_real(x->plain_tok_s));
    json_object_set_new(pl, "step_ms", json_real(x->plain_step_s * 1e3));
    json_object_set_new(pl, "steady_steps", json_integer(x->plain_steady));
    json_object_set_new(pl, "bytes_per_step", json_real(bytes));
    json_object_set_new(pl, "gbs", json_real(gbs));
    json_object_set_new(pl, "vs_bandwidth", real_or_null(bw, gbs / r->ml.bandwidth_gbs));
    json_object_set_new(pl, "gflops", json_real(gflops));
    json_object_set_new(pl, "vs_fma_peak", real_or_null(fma, gflops / r->ml.fma_gflops));
    json_object_set_new(e, "plain", pl);
    for (int j = 0; j < x->n_pts; j++) {
      const spec_point *pt = &x->pts[j];
      json_t *q = json_object();
      json_object_set_new(q, "draft_tokens", json_integer(pt->k));
      json_object_set_new(q, "p", json_real(pt->p));
      json_object_set_new(q, "steady_steps", json_integer(pt->steady_steps));
      if (pt->steady_steps == 0 || pt->step_s <= 0) {
        json_object_set_new(q, "skipped", json_string("no steady verify step"));
        json_array_append_new(runs, q);
        continue;
      }
      /* every token a verify step runs does the work of one decode token */
      const double run_gflops =
          (double)x->batch * (double)(pt->k + 1) / pt->step_s * 2.0 * (double)m->parameters / 1e9;
      json_object_set_new(q, "acceptance", json_real(pt->acceptance));
      json_object_set_new(q, "tokens_per_step", json_real(pt->tokens_per_step));
      json_object_set_new(q, "tok_s", json_real(pt->tok_s));
      json_object_set_new(q, "step_ms", json_real(pt->step_s * 1e3));
      json_object_set_new(q, "speedup", json_real(pt->speedup));
      json_object_set_new(q, "verify_cost", json_real(pt->verify_cost));
      json_object_set_new(q, "gflops", json_real(run_gflops));
      json_object_set_new(q, "vs_fma_peak", real_or_null(fma, run_gflops / r->ml.fma_gflops));
      json_array_append_new(runs, q);
    }
    json_object_set_new(e, "runs", runs);
    json_array_append_new(bs, e);
  }
  json_object_set_new(o, "batches", bs);
  json_object_set_new(o, "exact", json_true()); /* a run that changed a token fails the bench */
  return o;
}

static void print_json(const bench_report *r) {
  const model_facts *m = &r->m;
  const bench_scenario scenario = r->c->pc.scenario;
  const int throughput = scenario == SCENARIO_THROUGHPUT;
  const double pre_gflops = r->pre.tok_s * 2.0 * (double)m->parameters / 1e9;
  const double peak = compute_peak(&r->ml, &r->p);
  json_t *o = json_object();
  json_t *model = json_object(), *eng = json_object(), *mach = json_object(), *pre = json_object(),
         *dec = json_array(), *mem = json_object(), *units = json_object();
  json_object_set_new(model, "path", json_string(r->model_dir));
  json_object_set_new(model, "kind", json_string(m->is_package ? "package" : "checkpoint"));
  json_object_set_new(model, "parameters", json_integer(m->parameters));
  json_object_set_new(model, "weight_bytes", json_integer(m->weight_bytes));
  json_object_set_new(model, "weight_bytes_read", json_integer(m->weight_bytes_read));
  json_object_set_new(model, "quantized_tensors", json_integer(m->quantized_tensors));
  json_object_set_new(model, "state_bytes_per_sequence", json_integer(m->state_bytes_per_seq));
  json_object_set_new(model, "kv_bytes_per_token", json_integer(m->kv_bytes_per_token));
  json_object_set_new(model, "vocab", json_integer(m->vocab));
  json_object_set_new(model, "max_context", json_integer(m->max_context));
  json_object_set_new(eng, "precision", json_string(ph_precision_name(r->p.precision)));
  if (r->p.quant.bits != 0) {
    json_t *q = json_object();
    json_object_set_new(q, "bits", json_integer(r->p.quant.bits));
    json_object_set_new(q, "block_size",
                        json_integer(r->p.quant.block_size ? r->p.quant.block_size : 32));
    json_object_set_new(q, "asymmetric", json_boolean(r->p.quant.asymmetric));
    json_object_set_new(q, "accuracy_level",
                        json_integer(r->p.quant.accuracy_level ? r->p.quant.accuracy_level : 4));
    json_object_set_new(q, "linear_layers", json_integer(m->quantized_linears));
    json_object_set_new(q, "skip", r->p.quant.skip ? json_string(r->p.quant.skip) : json_null());
    json_object_set_new(eng, "quant", q);
  } else {
    json_object_set_new(eng, "quant", json_null());
  }
  json_object_set_new(eng, "compute_peak", json_string(compute_peak_name(&r->ml, &r->p)));
  json_object_set_new(eng, "max_batch", json_integer(r->p.max_batch_size));
  json_object_set_new(eng, "max_tokens", json_integer(r->p.max_scheduled_tokens));
  json_object_set_new(eng, "prefill_chunk", json_integer(r->p.prefill_chunk));
  json_object_set_new(eng, "prefix_cache",
                      json_string(r->p.prefix_cache == PH_PREFIX_CACHE_OFF ? "off" : "on"));
  json_object_set_new(eng, "block_size", json_integer(m->block_size));
  json_object_set_new(eng, "kv_pages", json_integer(m->kv_pages));
  json_object_set_new(eng, "threads", json_integer(r->c->threads));
  json_object_set_new(eng, "load_s", json_real(m->load_s));
  json_object_set_new(mach, "threads", json_integer(r->ml.threads));
  json_object_set_new(mach, "measured", json_boolean(r->ml.measured));
  json_object_set_new(mach, "bandwidth_gbs",
                      real_or_null(r->ml.measured && r->ml.bandwidth_gbs > 0, r->ml.bandwidth_gbs));
  json_object_set_new(mach, "fma_gflops", real_or_null(r->ml.measured, r->ml.fma_gflops));
  json_object_set_new(mach, "bf16_gflops",
                      real_or_null(r->ml.measured && r->ml.bf16_gflops > 0, r->ml.bf16_gflops));
  json_object_set_new(mach, "int8_gops",
                      real_or_null(r->ml.measured && r->ml.int8_gops > 0, r->ml.int8_gops));
  json_object_set_new(pre, "tokens", json_integer(r->c->prompt));
  json_object_set_new(pre, "tok_s", json_real(r->pre.tok_s));
  json_object_set_new(pre, "ttft_ms", json_real(r->pre.ttft_ms));
  json_object_set_new(pre, "steps", json_integer(r->prefill_steps));
  json_object_set_new(pre, "flops_per_token", json_real(2.0 * (double)m->parameters));
  json_object_set_new(pre, "gflops", json_real(pre_gflops));
  json_object_set_new(
      pre, "vs_fma",
      real_or_null(r->ml.measured && r->ml.fma_gflops > 0, pre_gflops / r->ml.fma_gflops));
  json_object_set_new(pre, "vs_compute", real_or_null(peak > 0, pre_gflops / peak));
  for (int i = 0; !r->spec && throughput && i < r->c->n_batches; i++) {
    const decode_result *x = &r->dec[i];
    json_t *e = json_object();
    json_object_set_new(e, "batch", json_integer(x->batch));
    if (x->skipped) {
      json_object_set_new(e, "skipped", json_string(x->note));
    } else {
      const double bytes = decode_bytes_per_step(m, x), gbs = bytes / x->step_s / 1e9;
      json_object_set_new(e, "tok_s", json_real(x->tok_s));
      json_object_set_new(e, "step_ms", json_real(x->step_s * 1e3));
      json_object_set_new(e, "steady_steps", json_integer(x->steady_steps));
      json_object_set_new(e, "context_tokens", json_real(x->context));
      json_object_set_new(e, "bytes_per_step", json_real(bytes));
      json_object_set_new(e, "bytes_per_token", json_real(bytes / (double)x->batch));
      json_object_set_new(e, "gbs", json_real(gbs));
      json_object_set_new(
          e, "vs_bandwidth",
          real_or_null(r->ml.measured && r->ml.bandwidth_gbs > 0, gbs / r->ml.bandwidth_gbs));
      /* a batch of B tokens does 2 x parameters FLOP each: large batches are compute-bound */
      const double gflops = x->tok_s * 2.0 * (double)m->parameters / 1e9;
      json_object_set_new(e, "gflops", json_real(gflops));
      json_object_set_new(
          e, "vs_fma_peak",
          real_or_null(r->ml.measured && r->ml.fma_gflops > 0, gflops / r->ml.fma_gflops));
      json_object_set_new(e, "vs_compute", real_or_null(peak > 0, gflops / peak));
    }
    json_array_append_new(dec, e);
  }
  json_object_set_new(mem, "peak_rss_bytes", json_integer(r->peak_rss_bytes));
  json_object_set_new(mem, "cache_bytes", json_integer(m->cache_bytes));
  json_object_set_new(mem, "engines", json_integer(throughput ? 1 : 2));
  json_object_set_new(units, "*_bytes", json_string("bytes"));
  json_object_set_new(units, "*_s", json_string("seconds"));
  json_object_set_new(units, "*_ms", json_string("milliseconds"));
  json_object_set_new(units, "tok_s", json_string("tokens per second"));
  json_object_set_new(units, "gbs", json_string("1e9 bytes per second"));
  json_object_set_new(units, "gflops", json_string("1e9 floating-point operations per second"));
  json_object_set_new(units, "gops", json_string("1e9 integer operations per second"));
  json_object_set_new(units, "vs_*",
                      json_string("ratio to the machine limit measured in this run"));
  json_object_set_new(o, "model", model);
  json_object_set_new(o, "engine", eng);
  json_object_set_new(o, "machine", mach);
  json_object_set_new(o, "scenario",
                      json_string(scenario == SCENARIO_PREFIX ? "prefix"
                                  : scenario == SCENARIO_CHAT ? "chat"
                                                              : "throughput"));
  if (throughput) {
    json_object_set_new(o, "prefill", pre);
  } else {
    const prefix_peaks pk = scenario_peaks(r);
    json_decref(pre);
    json_decref(dec);
    if (scenario == SCENARIO_PREFIX)
      json_object_set_new(o, "prefix", bench_prefix_json(&r->c->pc, &r->prefix, &pk));
    else
      json_object_set_new(o, "chat", bench_chat_json(&r->c->pc, &r->chat));
  }
  if (throughput && r->spec) {
    json_decref(dec);
    json_object_set_new(o, "speculative", spec_json(r));
  } else if (throughput) {
    json_object_set_new(o, "decode", dec);
  }
  json_object_set_new(o, "memory", mem);
  json_object_set_new(o, "repeats", json_integer(r->c->repeats));
  if (throughput) json_object_set_new(o, "decode_steps", json_integer(r->c->decode_steps));
  json_object_set_new(o, "total_s", json_real(r->total_s));
  json_object_set_new(o, "units", units);
  char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(8));
  if (text) printf("%s\n", text);
  free(text);
  json_decref(o);
}

static void print_spec_table(const bench_report *r) {
  const model_facts *m = &r->m;
  const int lim = r->ml.measured && r->ml.bandwidth_gbs > 0 && r->ml.fma_gflops > 0;
  printf(
      "speculative replay drafter (each draft correct with probability p), state_update_capacity "
      "%d;\n            plain = one-token decode in the same engine, interleaved; all tokens "
      "checked equal\n",
      (int)r->p.state_update_capacity);
  for (int i = 0; i < r->c->n_batches; i++) {
    const spec_batch *x = &r->spec[i];
    if (x->skipped) {
      printf("batch %lld  skipped: %s\n", (long long)x->batch, x->note);
      continue;
    }
    const double bytes = bytes_per_step(m, x->batch, x->context),
                 gbs = bytes / x->plain_step_s / 1e9;
    const double gflops = x->plain_tok_s * 2.0 * (double)m->parameters / 1e9;
    printf("batch %lld  plain %.1f tok/s, %.3f ms/step, %.3f GB/s", (long long)x->batch,
           x->plain_tok_s, x->plain_step_s * 1e3, gbs);
    if (lim)
      printf(" = %.4f of bandwidth, %.2f GFLOP/s = %.4f of FMA peak", gbs / r->ml.bandwidth_gbs,
             gflops, gflops / r->ml.fma_gflops);
    printf("\n      k     p  accepted  tok/step      tok/s  speedup    step ms  verify/plain   "
           "GFLOP/s  of FMA peak\n");
    for (int j = 0; j < x->n_pts; j++) {
      const spec_point *pt = &x->pts[j];
      if (pt->steady_steps == 0 || pt->step_s <= 0) {
        printf("      %lld  %4.2f  skipped: no steady verify step\n", (long long)pt->k, pt->p);
        continue;
      }
      const double run_gflops =
          (double)x->batch * (double)(pt->k + 1) / pt->step_s * 2.0 * (double)m->parameters / 1e9;
      printf("      %lld  %4.2f  %8.3f  %8.2f  %9.1f  %7.2f  %9.3f  %12.2f  %8.2f",
             (long long)pt->k, pt->p, pt->acceptance, pt->tokens_per_step, pt->tok_s, pt->speedup,
             pt->step_s * 1e3, pt->verify_cost, run_gflops);
      if (lim) printf("  %11.4f", run_gflops / r->ml.fma_gflops);
      printf("\n");
    }
  }
}

static void print_table(const bench_report *r) {
  const model_facts *m = &r->m;
  /* sizes in cli_bytes' binary units; bandwidth, and the traffic per step it is computed from,
   * in decimal GB/s and MB as memory bandwidth is quoted */
  char b1[CLI_BYTES_BUF], b2[CLI_BYTES_BUF], b3[CLI_BYTES_BUF];
  const double pre_gflops = r->pre.tok_s * 2.0 * (double)m->parameters / 1e9;
  const double peak = compute_peak(&r->ml, &r->p);
  /* a second peak column when the engine's arithmetic is not the f32 FMA's */
  const char *peak_name = compute_peak_name(&r->ml, &r->p);
  const int other_peak = peak > 0 && strcmp(peak_name, "f32 FMA") != 0;
  printf("model     %s (%s): %lld parameters, %s of weights; state %s/sequence, KV %s/token\n",
         r->model_dir, m->is_package ? "package" : "checkpoint", (long long)m->parameters,
         cli_bytes((uint64_t)m->weight_bytes, b1, sizeof b1),
         cli_bytes((uint64_t)m->state_bytes_per_seq, b2, sizeof b2),
         cli_bytes((uint64_t)m->kv_bytes_per_token, b3, sizeof b3));
  if (r->p.quant.bits != 0)
    printf("quant     int%d, block %d, %s, accuracy_level %d%s%s: %lld tensors quantized at load, "
           "%s of weights read per step\n",
           (int)r->p.quant.bits, (int)(r->p.quant.block_size ? r->p.quant.block_size : 32),
           r->p.quant.asymmetric ? "asymmetric" : "symmetric",
           (int)(r->p.quant.accuracy_level ? r->p.quant.accuracy_level : 4),
           r->p.quant.skip ? ", skip " : "", r->p.quant.skip ? r->p.quant.skip : "",
           (long long)m->quantized_tensors,
           cli_bytes((uint64_t)m->weight_bytes_read, b1, sizeof b1));
  printf("engine    precision %s, max_batch %d, max_tokens %lld, prefill_chunk %lld, %lld KV "
         "pages of %lld tokens; loaded in %.2f s\n",
         ph_precision_name(r->p.precision), r->p.max_batch_size,
         (long long)r->p.max_scheduled_tokens, (long long)r->p.prefill_chunk,
         (long long)m->kv_pages, (long long)m->block_size, m->load_s);
  if (m->quantized_linears > 0) printf("weights   %s, quantized at load\n", m->quant);
  if (r->ml.measured) {
    printf("machine   %d threads: ", r->ml.threads);
    if (r->ml.bandwidth_gbs > 0) printf("DRAM read %.1f GB/s, ", r->ml.bandwidth_gbs);
    printf("fp32 FMA %.1f GFLOP/s", r->ml.fma_gflops);
    if (r->ml.bf16_gflops > 0) printf(", bf16 dot %.1f GFLOP/s", r->ml.bf16_gflops);
    if (r->ml.int8_gops > 0) printf(", int8 dot %.1f GOP/s", r->ml.int8_gops);
    printf(" (measured in this run)\n");
  } else
    printf("machine   not measured: the roofline probes need AVX-512 and FMA\n");
  if (r->c->pc.scenario != SCENARIO_THROUGHPUT) {
    const prefix_peaks pk = scenario_peaks(r);
    if (r->c->pc.scenario == SCENARIO_PREFIX)
      bench_prefix_print(&r->c->pc, &r->prefix, &pk);
    else
      bench_chat_print(&r->c->pc, &r->chat);
    printf("memory    peak RSS %s; each engine's cache (KV pages + state slots) %s, two engines\n",
           cli_bytes((uint64_t)r->peak_rss_bytes, b1, sizeof b1),
           cli_bytes((uint64_t)m->cache_bytes, b2, sizeof b2));
    printf("(medians of %lld repeats; %.1f s in all)\n", (long long)r->c->repeats, r->total_s);
    return;
  }
  printf("prefill   %lld tokens: %.1f tok/s = %.3f GFLOP/s", (long long)r->c->prompt, r->pre.tok_s,
         pre_gflops);
  if (r->ml.measured && r->ml.fma_gflops > 0)
    printf(" = %.4f of the FMA peak", pre_gflops / r->ml.fma_gflops);
  if (other_peak) printf(", %.4f of the %s peak", pre_gflops / peak, peak_name);
  printf("; TTFT %.2f ms (%lld steps)\n", r->pre.ttft_ms, (long long)r->prefill_steps);
  if (r->spec)
    print_spec_table(r);
  else
    printf("decode    batch       tok/s    step ms    MB/step      GB/s  of bandwidth   GFLOP/s  "
           "of FMA peak%s%s\n",
           other_peak ? "  of " : "", other_peak ? peak_name : "");
  for (int i = 0; !r->spec && i < r->c->n_batches; i++) {
    const decode_result *x = &r->dec[i];
    if (x->skipped) {
      printf("          %5lld  skipped: %s\n", (long long)x->batch, x->note);
      continue;
    }
    const double bytes = decode_bytes_per_step(m, x), gbs = bytes / x->step_s / 1e9;
    printf("          %5lld  %10.1f  %9.3f  %9.3f  %8.3f", (long long)x->batch, x->tok_s,
           x->step_s * 1e3, bytes / 1e6, gbs);
    const double gflops = x->tok_s * 2.0 * (double)m->parameters / 1e9;
    if (r->ml.measured && r->ml.bandwidth_gbs > 0 && r->ml.fma_gflops > 0)
      printf("  %12.4f  %8.2f  %11.4f", gbs / r->ml.bandwidth_gbs, gflops,
             gflops / r->ml.fma_gflops);
    if (other_peak) printf("  %12.4f", gflops / peak);
    printf("\n");
  }
  printf("memory    peak RSS %s; engine cache (KV pages + state slots) %s\n",
         cli_bytes((uint64_t)r->peak_rss_bytes, b1, sizeof b1),
         cli_bytes((uint64_t)m->cache_bytes, b2, sizeof b2));
  printf("(medians of %lld repeats; %s: the median of %lld timed steps per %s; %.1f s in all)\n",
         (long long)r->c->repeats, r->spec ? "speculative" : "decode",
         (long long)r->c->decode_steps, r->spec ? "run" : "repeat", r->total_s);
}

/* ---- the command ---------------------------------------------------------------------------- */

/* KV pages the measurements need at most, with the smallest page (16 tokens; a package's larger
 * pages need fewer), plus the null page: the prefill request alone, or the largest decode batch
 * the engine takes. A default-sized cache (1 GiB) would only add its zeroing to the load time
 * and to the peak RSS. */
static int32_t pages_needed(const bench_config *c, const ph_engine_params *p) {
  const int64_t K = 16;
  int64_t largest = 0;
  for (int i = 0; i < c->n_batches; i++)
    if (c->batches[i] > largest && (p->max_batch_size == 0 || c->batches[i] <= p->max_batch_size))
      largest = c->batches[i];
  if (p->max_batch_size == 0 && largest > 64) largest = 64; /* a package's cap */
  const int64_t prefill = (c->prompt + K - 1) / K;
  /* speculative: the reference continuation, and a verify's drafts beyond the last kept token */
  const int64_t per_seq = c->spec ? DECODE_PROMPT + spec_ref_tokens(c) + PH_MAX_DRAFT_TOKENS
                                  : DECODE_PROMPT + c->decode_steps + 3;
  const int64_t decode = largest * ((per_seq + K - 1) / K);
  const int64_t need = 1 + (prefill > decode ? prefill : decode);
  return need < INT32_MAX ? (int32_t)need : INT32_MAX;
}

/* KV pages (16-token pages, the smallest; and the null page) a prefix-cache scenario needs with
 * room for what the cache keeps: prefix, the shared prefix twice and every request's suffix;
 * chat, every conversation's last turn twice. */
static int32_t scenario_pages(const prefix_config *pc) {
  const int64_t K = 16;
  int64_t need;
  if (pc->scenario == SCENARIO_PREFIX)
    need = 1 + 2 * ((pc->shared + pc->unique + K) / K) +
           (pc->requests + 2) * ((pc->unique + K - 1) / K + 1);
  else
    need = 1 + 2 * pc->conversations *
                   ((pc->shared + pc->turns * (pc->user_tokens + pc->answer_tokens) + K) / K);
  return need < INT32_MAX ? (int32_t)need : INT32_MAX;
}

/* --scenario prefix|chat: two engines over dir, the same but for the prefix cache (on, off),
 * created and measured together (tools/bench_prefix.h). */
static ph_status run_scenario(const char *dir, const ph_engine_params *p0, bench_report *r,
                              diag *d) {
  const prefix_config *pc = &r->c->pc;
  const double t_start = roofline_now();
  r->m.is_package = onnx_is_package(dir);
  ph_engine_params p = *p0;
  /* prefix runs one request at a time; chat every conversation at once */
  if (!r->m.is_package && p.max_batch_size == 0)
    p.max_batch_size = pc->scenario == SCENARIO_CHAT ? (int32_t)pc->conversations : 1;
  if (p.num_blocks == 0 && p.memory_bytes == 0) p.num_blocks = scenario_pages(pc);
  p.prefix_cache = PH_PREFIX_CACHE_ON;
  ph_engine_params q = p;
  q.prefix_cache = PH_PREFIX_CACHE_OFF;
  ph_engine *on = NULL, *off = NULL;
  const double t0 = roofline_now();
  ph_status s = ph_engine_create(dir, &p, &on);
  if (s == PH_OK) r->m.load_s = roofline_now() - t0;
  if (s != PH_OK) engine_failed(on, s, d);
  if (s == PH_OK && (s = ph_engine_create(dir, &q, &off)) != PH_OK) engine_failed(off, s, d);
  ph_engine_info info;
  if (s == PH_OK) s = engine_failed(on, ph_engine_get_info(on, &info), d);
  if (s == PH_OK) {
    r->p = info.params;
    r->p.quant.skip = p.quant.skip; /* as run_bench: outlives the engine */
    session_facts(&info, &r->m);
    s = pc->scenario == SCENARIO_PREFIX ? bench_prefix_run(on, off, pc, &r->prefix, d)
                                        : bench_chat_run(on, off, pc, &r->chat, d);
  }
  struct rusage ru;
  if (s == PH_OK && getrusage(RUSAGE_SELF, &ru) == 0)
    r->peak_rss_bytes = (int64_t)ru.ru_maxrss * 1024; /* KiB on Linux */
  ph_engine_free(on);
  ph_engine_free(off);
  if (s == PH_OK) s = weight_facts(dir, &r->p, &r->m, d);
  if (s == PH_OK) measure_machine(r->c->threads, 0, &r->ml);
  r->total_s = roofline_now() - t_start;
  return s;
}

static ph_status run_bench(const char *dir, const ph_engine_params *p0, bench_report *r, diag *d) {
  const bench_config *c = r->c;
  if (c->pc.scenario != SCENARIO_THROUGHPUT) return run_scenario(dir, p0, r, d);
  const double t_start = roofline_now();
  r->m.is_package = onnx_is_package(dir);
  ph_engine_params p = *p0;
  if (!r->m.is_package && p.max_batch_size == 0)
    for (int i = 0; i < c->n_batches; i++)
      if (c->batches[i] > p.max_batch_size) p.max_batch_size = (int32_t)c->batches[i];
  if (p.num_blocks == 0 && p.memory_bytes == 0) p.num_blocks = pages_needed(c, &p);
  /* a verify needs the checkpoint's graph built with state-update outputs (as run does) */
  if (c->spec && !r->m.is_package && p.state_update_capacity == 0)
    p.state_update_capacity = PH_MAX_DRAFT_TOKENS;
  ph_engine *e = NULL;
  const double t0 = roofline_now();
  ph_status s = ph_engine_create(dir, &p, &e);
  ph_engine_info info;
  if (s == PH_OK) s = ph_engine_get_info(e, &info);
  if (s != PH_OK) {
    engine_failed(e, s, d);
    ph_engine_free(e);
    return s;
  }
  r->m.load_s = roofline_now() - t0;
  r->p = info.params;
  /* the skip names as given (they outlive the engine, whose own copy the report must not use
   * after ph_engine_free) */
  r->p.quant.skip = p.quant.skip;
  session_facts(&info, &r->m);
  if (c->prompt >= r->m.max_context)
    s = diag_set(d, PH_ERR_LIMIT, "--prompt %lld does not fit the context of %lld",
                 (long long)c->prompt, (long long)r->m.max_context);
  double tok_s[64], ttft[64];
  for (int rep = 0; s == PH_OK && rep < c->repeats; rep++) {
    prefill_result one = {0, 0, 0};
    s = bench_prefill(e, c, rep, &one, d);
    tok_s[rep] = one.tok_s;
    ttft[rep] = one.ttft_ms;
    r->prefill_steps = one.steps;
  }
  if (s == PH_OK) {
    r->pre.tok_s = bench_median(tok_s, c->repeats);
    r->pre.ttft_ms = bench_median(ttft, c->repeats);
  }
  if (s == PH_OK && c->spec && DECODE_PROMPT + spec_ref_tokens(c) > r->m.max_context)
    s = diag_set(d, PH_ERR_LIMIT,
                 "the speculative runs need %lld tokens of context (16 of prompt, %lld generated: "
                 "--decode-steps, --draft-tokens), the context is %lld",
                 (long long)(DECODE_PROMPT + spec_ref_tokens(c)), (long long)spec_ref_tokens(c),
                 (long long)r->m.max_context);
  for (int i = 0; s == PH_OK && i < c->n_batches; i++) {
    if (c->spec) {
      r->spec[i].batch = c->batches[i];
      s = bench_spec(e, c, &r->spec[i], d);
    } else {
      r->dec[i].batch = c->batches[i];
      s = bench_decode(e, c, &r->dec[i], d);
    }
  }
  struct rusage ru;
  if (s == PH_OK && getrusage(RUSAGE_SELF, &ru) == 0)
    r->peak_rss_bytes = (int64_t)ru.ru_maxrss * 1024; /* KiB on Linux */
  ph_engine_free(e);
  if (s == PH_OK) s = weight_facts(dir, &r->p, &r->m, d);
  if (s == PH_OK) measure_machine(c->threads, 1, &r->ml);
  r->total_s = roofline_now() - t_start;
  return s;
}

int cmd_bench(int argc, char **argv) {
  cli_args a;
  int rc = cli_parse(&a, "bench", OPTIONS, N_OPTIONS, argc, argv);
  if (rc) return rc;
  if (a.help) {
    cli_print_help(
        &a, "--model DIR|PKG [--json] [options]",
        "Prefill and decode throughput, time to first token and peak memory of the engine\n"
        "on this machine, next to the machine's DRAM bandwidth and fp32 FMA peak measured\n"
        "in the same run; medians over --repeats (docs/bench.md). With --speculative replay,\n"
        "speculative decode at each --draft-tokens K and --acceptance p next to plain decode\n"
        "measured in the same engine, in place of the decode section. --scenario prefix|chat:\n"
        "the prefix cache instead, on and off.");
    return CLI_EXIT_OK;
  }
  if (a.n_positional) return cli_usage_error(&a, "unexpected argument \"%s\"", a.positional[0]);
  const char *dir = cli_get(&a, "model");
  if (!dir) return cli_usage_error(&a, "--model DIR|PKG is required");
  bench_config c = {.prompt = 512,
                    .decode_steps = 16,
                    .repeats = 3,
                    .threads = 0,
                    .batches = {1, 4, 16, 64},
                    .n_batches = 4,
                    .drafts = {1, 2, 4, 8},
                    .n_drafts = 4,
                    .accept = {0.0, 0.5, 0.9, 1.0},
                    .n_accept = 4};
  c.json = cli_flag(&a, "json");
  /* the engine flags, --threads among them, through the parser run uses too */
  ph_engine_params p = ph_engine_params_default();
  if ((rc = cli_get_int(&a, "prompt", 1, (int64_t)1 << 24, &c.prompt)) ||
      (rc = cli_get_int(&a, "decode-steps", 1, 1 << 20, &c.decode_steps)) ||
      (rc = cli_get_int(&a, "repeats", 1, 64, &c.repeats)) || (rc = parse_batches(&a, &c)) ||
      (rc = parse_speculative(&a, &c)) || (rc = engine_flags_parse(&a, &p)) ||
      (rc = quant_flags_parse(&a, &p.quant)) || (rc = parse_scenario(&a, &c, &p)))
    return rc;
  c.threads = p.n_threads;

  if ((rc = cli_check_model_path(dir))) return rc;
  bench_report r;
  memset(&r, 0, sizeof r);
  r.model_dir = dir;
  r.c = &c;
  diag d;
  diag_clear(&d);
  if (c.spec && !(r.spec = calloc((size_t)c.n_batches, sizeof *r.spec)))
    return cli_lib_error(PH_ERR_NO_MEMORY, "out of memory");
  if (!c.json) fprintf(stderr, "bench: measuring %s ...\n", dir);
  ph_status s = run_bench(dir, &p, &r, &d);
  if (s == PH_OK && c.json)
    print_json(&r);
  else if (s == PH_OK)
    print_table(&r);
  free(r.spec);
  return s == PH_OK ? CLI_EXIT_OK : cli_lib_error(s, d.msg);
}
