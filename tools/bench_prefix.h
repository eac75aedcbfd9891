/* bench_prefix — the prefix cache's two scenarios of `pagedhybrid bench` (docs/bench.md, "Prefix
 * caching: --scenario prefix and chat"), measured through the public engine API on two engines
 * over the same model and geometry: one with the prefix cache on, one with it off
 * (ph_engine_params.prefix_cache), run interleaved so that a change in the machine's load reaches
 * both. Every output of the cache engine is checked against the other's: a cached run whose
 * tokens differ fails the benchmark (PH_ERR_INTERNAL), as a speculative one does.
 *
 *   prefix  per repeat: a fresh P-token shared prefix; the cache engine is cleared
 *           (ph_engine_prefix_cache_clear) and runs a cold request, prefix + unique suffix 0;
 *           the engine without the cache runs prefix + suffix 1; then the cache engine runs
 *           --requests warm requests, prefix + suffix i (i = 1..N), one at a time. Each request
 *           has max_new_tokens 1; its time to first token is ph_request_info's. The TTFT ratios
 *           are formed per repeat, then the median over repeats is taken.
 *   chat    N conversations x M turns: turn t's prompt is turn t-1's prompt + its answer
 *           (greedy, A tokens, ignore_eos) + a new user message of K tokens (a seeded hash: the
 *           same workload every run), all conversations after one shared system prompt of S
 *           tokens (0 by default). Every conversation's first turn is queued at once and its
 *           next turn as soon as its answer ends (zero think time), so conversations interleave
 *           in the engine's batches. Per repeat the workload runs on the cleared cache engine,
 *           then on the other; per turn the mean TTFT over conversations, median over repeats.
 *
 * The share of a prompt the cache can serve: state snapshots exist only at boundaries that are
 * multiples of align = lcm(prefill_chunk, block_size) below the prompt's length
 * (docs/prefix-cache.md), so a request sharing P tokens of an n-token prompt with an earlier one
 * can skip floor(min(P, n - 1) / align) x align of them: bench_prefix_cached_tokens. */
#ifndef PH_TOOLS_BENCH_PREFIX_H
#define PH_TOOLS_BENCH_PREFIX_H

#include <jansson.h>
#include <stdint.h>

#include "pagedhybrid.h"
#include "tools_api.h"

typedef enum bench_scenario {
  SCENARIO_THROUGHPUT = 0, /* prefill + decode (or speculative): tools/cmd_bench.c */
  SCENARIO_PREFIX = 1,
  SCENARIO_CHAT = 2,
} bench_scenario;

#define CHAT_MAX_TURNS         64
#define CHAT_MAX_CONVERSATIONS 256
#define PREFIX_MAX_REQUESTS    1024

typedef struct prefix_config {
  bench_scenario scenario;
  int64_t shared;   /* prefix: P tokens every request of a repeat starts with; chat: the system
                       prompt every conversation starts with */
  int64_t unique;   /* prefix: U tokens after it, different for every request */
  int64_t requests; /* prefix: warm requests per repeat, 1..PREFIX_MAX_REQUESTS */
  int64_t conversations, turns, user_tokens, answer_tokens; /* chat: N, M, K, A */
  uint64_t seed;                                            /* chat: the user messages */
  int64_t repeats;
} prefix_config;

/* What the prefill figures are compared with (tools/cmd_bench.c measures it). */
typedef struct prefix_peaks {
  double parameters;     /* 2 x parameters FLOP per token computed */
  double fma_gflops;     /* 0: not measured */
  double peak_gflops;    /* the compute peak of the engine's arithmetic; 0: not measured */
  const char *peak_name; /* "f32 FMA", "bf16 dot" or "int8 dot" */
} prefix_peaks;

/* The cache engine's counters over a span, its gauges at the end, and the most it held. */
typedef struct prefix_cache_figures {
  ph_prefix_cache_stats delta; /* counters: over the span; gauges: at its end */
  int64_t peak_held_bytes;     /* max over the span's steps of page_bytes_held + snapshot_bytes */
} prefix_cache_figures;

typedef struct prefix_result {
  int64_t prompt, align, expected_cached; /* n = P + U; bench_prefix_cached_tokens(P, n) */
  double cold_ttft_ms, off_ttft_ms;       /* medians over repeats */
  double warm_ttft_ms;                    /* median over every warm request */
  double warm_cached;                     /* median n_cached_tokens of the warm requests */
  int64_t warm_cached_min, warm_hits;     /* hits: warm requests with n_cached_tokens > 0 */
  int64_t cold_cached_max;                /* 0 unless clearing left something */
  double warm_vs_cold, warm_vs_off;       /* per repeat (median warm / cold), median over repeats */
  prefix_cache_figures cache;             /* over the whole scenario */
} prefix_result;

typedef struct chat_turn_result {
  double prompt_tokens;           /* mean over conversations */
  double cached_tokens;           /* mean n_cached_tokens with the cache (last repeat) */
  double expected_cached;         /* mean over conversations of the previous turn's deepest snapshot
                                     boundary, bench_prefix_cached_tokens(n_prev - 1, n, align): what the
                                     conversation's own history makes reusable (0 for the first turn) */
  double ttft_on_ms, ttft_off_ms; /* mean over conversations, median over repeats */
} chat_turn_result;

typedef struct chat_result {
  chat_turn_result turn[CHAT_MAX_TURNS];
  int64_t requests, prompt_tokens; /* one run of the workload */
  double ttft_on_ms, ttft_off_ms;  /* mean over every request, median over repeats */
  double on_s, off_s;              /* one run's wall time, median over repeats */
  prefix_cache_figures cache;      /* over the last repeat's run with the cache */
} chat_result;

/* Tokens of an n-token prompt that a prefix cache can serve when its first `shared` tokens were
 * computed before: the largest multiple of align (lcm of prefill chunk and page size) that is at
 * most shared and below n. */
int64_t bench_prefix_cached_tokens(int64_t shared, int64_t n, int64_t align);

/* lcm(prefill_chunk, block_size) of an open engine (ph_engine_get_info), > 0. */
int64_t bench_prefix_align(const ph_engine *e);

/* The scenarios. on: the engine with the prefix cache; off: the same without. Both idle, their
 * requests released on return. */
ph_status bench_prefix_run(ph_engine *on, ph_engine *off, const prefix_config *c, prefix_result *r,
                           diag *d);
ph_status bench_chat_run(ph_engine *on, ph_engine *off, const prefix_config *c, chat_result *r,
                         diag *d);

/* Their JSON sections (docs/bench.md lists every key; new references) and text tables. */
json_t *bench_prefix_json(const prefix_config *c, const prefix_result *r, const prefix_peaks *pk);
json_t *bench_chat_json(const prefix_config *c, const chat_result *r);
void bench_prefix_print(const prefix_config *c, const prefix_result *r, const prefix_peaks *pk);
void bench_chat_print(const prefix_config *c, const chat_result *r);

#endif /* PH_TOOLS_BENCH_PREFIX_H */
