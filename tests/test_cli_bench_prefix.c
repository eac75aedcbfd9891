/* `pagedhybrid bench --scenario prefix|chat` (docs/bench.md, "Prefix caching";
 * tools/bench_prefix.h) as a user meets it, on the golden f32 checkpoint (tests/data) with 16-token
 * chunks and pages: every key docs/bench.md lists, the figures that follow from the workload alone
 * (prompt lengths, expected cached tokens, request counts), the cache's counters where the engine's
 * prefix cache is on, the text tables, and every usage error. Nothing here is timed: TTFTs are
 * only checked to be positive. bench itself fails when a cached request's tokens differ from the
 * same request's on the engine without the cache, so exit 0 is also an exactness check. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli_testing.h"

static char g_tmp[512];
static char g_ckpt[1024];

static double num(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  if (!CHECK(json_is_number(v))) fprintf(stderr, "       key \"%s\" is not a number\n", key);
  return json_number_value(v);
}

/* Runs a bench command with --json; checks it exits 0 and prints one object (the caller's). */
static json_t *bench_json(const char *args) {
  const int rc = cli_run(args);
  CHECK_EQ_INT(rc, 0);
  json_error_t e;
  json_t *o = json_loads(g_stdout ? g_stdout : "", 0, &e);
  if (!CHECK(o != NULL)) fprintf(stderr, "       %s\n%s\n", e.text, g_stderr ? g_stderr : "");
  return o;
}

/* The keys every scenario shares, and none of the throughput sections. */
static void check_common(json_t *o, const char *scenario) {
  CHECK_EQ_STR(json_string_value(json_object_get(o, "scenario")), scenario);
  CHECK(json_object_get(o, "prefill") == NULL);
  CHECK(json_object_get(o, "decode") == NULL);
  CHECK(json_object_get(o, "decode_steps") == NULL);
  json_t *eng = json_object_get(o, "engine"), *mach = json_object_get(o, "machine");
  CHECK_EQ_STR(json_string_value(json_object_get(eng, "prefix_cache")), "on");
  CHECK_EQ_INT(num(eng, "prefill_chunk"), 16);
  CHECK_EQ_INT(num(eng, "block_size"), 16);
  /* prefill is compared with the compute peaks; the bandwidth probe is not run */
  CHECK(json_is_null(json_object_get(mach, "bandwidth_gbs")));
  CHECK(num(mach, "fma_gflops") > 0);
  CHECK_EQ_INT(num(json_object_get(o, "memory"), "engines"), 2);
  CHECK_EQ_INT(num(o, "repeats"), 2);
}

/* The cache engine's counters and gauges: on, and consistent with each other. */
static void check_cache(json_t *cache) {
  CHECK(json_is_object(cache));
  CHECK(json_is_true(json_object_get(cache, "enabled")));
  const double lookups = num(cache, "lookups"), hits = num(cache, "hits");
  CHECK(hits <= lookups);
  CHECK_EQ_INT(num(cache, "misses"), lookups - hits);
  CHECK_NEAR(num(cache, "hit_rate"), hits / lookups, 1e-6);
  CHECK(num(cache, "tokens_saved") <= num(cache, "tokens_looked_up"));
  CHECK_NEAR(num(cache, "saved_share"), num(cache, "tokens_saved") / num(cache, "tokens_looked_up"),
             1e-6);
  CHECK_EQ_INT(num(cache, "held_bytes"),
               num(cache, "page_bytes_held") + num(cache, "snapshot_bytes"));
  CHECK(num(cache, "peak_held_bytes") >= num(cache, "held_bytes"));
  CHECK(num(cache, "snapshots") <= num(cache, "snapshots_max"));
  CHECK(num(cache, "snapshot_bytes") <= num(cache, "snapshot_budget_bytes"));
  CHECK(num(cache, "snapshots_taken") > 0);
}

/* 48 shared + 8 unique tokens, 16-token chunks and pages: the cold request snapshots at 48 (its
 * deepest boundary below 56), so every warm request can start at 48. */
static void test_prefix_json(void) {
  char args[4096];
  snprintf(args, sizeof args,
           "bench --model '%s' --json --scenario prefix --shared-prefix 48 --unique 8 "
           "--requests 3 --repeats 2 --prefill-chunk 16 --threads 1",
           g_ckpt);
  json_t *o = bench_json(args);
  if (!o) return;
  check_common(o, "prefix");
  CHECK_EQ_INT(num(json_object_get(o, "engine"), "max_batch"), 1);
  json_t *x = json_object_get(o, "prefix");
  CHECK(json_object_get(o, "chat") == NULL);
  CHECK_EQ_INT(num(x, "shared_tokens"), 48);
  CHECK_EQ_INT(num(x, "unique_tokens"), 8);
  CHECK_EQ_INT(num(x, "prompt_tokens"), 56);
  CHECK_EQ_INT(num(x, "requests"), 3);
  CHECK_EQ_INT(num(x, "align_tokens"), 16);
  CHECK_EQ_INT(num(x, "expected_cached_tokens"), 48);
  CHECK_NEAR(num(x, "expected_cached_share"), 48.0 / 56.0, 1e-6);
  CHECK_NEAR(num(x, "expected_ttft_ratio"), 8.0 / 56.0, 1e-6);
  CHECK(json_is_true(json_object_get(x, "exact")));
  json_t *off = json_object_get(x, "without_cache"), *cold = json_object_get(x, "cold"),
         *warm = json_object_get(x, "warm");
  json_t *const kinds[] = {off, cold, warm};
  for (int k = 0; k < 3; k++) {
    CHECK(num(kinds[k], "ttft_ms") > 0);
    CHECK(num(kinds[k], "tok_s") > 0);
    CHECK(num(kinds[k], "computed_tok_s") > 0);
    CHECK(num(kinds[k], "computed_tok_s") <= num(kinds[k], "tok_s"));
    CHECK(num(kinds[k], "gflops") > 0);
    CHECK(num(kinds[k], "vs_fma") > 0);
    CHECK(num(kinds[k], "vs_compute") > 0);
  }
  CHECK_EQ_INT(num(off, "cached_tokens"), 0);
  CHECK_EQ_INT(num(cold, "cached_tokens"), 0); /* cleared before each repeat */
  CHECK_EQ_INT(num(warm, "count"), 6);
  CHECK(num(x, "ttft_ratio_warm_cold") > 0);
  CHECK(num(x, "ttft_ratio_warm_without") > 0);
  json_t *cache = json_object_get(x, "cache");
  check_cache(cache);
  /* per repeat: the cold request misses and snapshots at 48, every warm one starts there */
  CHECK_EQ_INT(num(cache, "lookups"), 2 * 4);
  CHECK_EQ_INT(num(cache, "hits"), 2 * 3);
  CHECK_EQ_INT(num(cache, "tokens_looked_up"), 2 * 4 * 56);
  CHECK_EQ_INT(num(cache, "tokens_saved"), 2 * 3 * 48);
  CHECK_EQ_INT(num(warm, "hits"), 6);
  CHECK_EQ_INT(num(warm, "cached_tokens"), 48);
  CHECK_EQ_INT(num(warm, "cached_tokens_min"), 48);
  CHECK_NEAR(num(warm, "computed_tok_s") / num(warm, "tok_s"), 8.0 / 56.0, 1e-6);
  CHECK(num(cache, "peak_held_bytes") > 0);
  json_decref(o);
}

/* 3 conversations x 3 turns after a 16-token system prompt, 8-token user messages, 4-token
 * answers: prompts of 24, 36 and 48 tokens. */
static void test_chat_json(void) {
  char args[4096];
  snprintf(args, sizeof args,
           "bench --model '%s' --json --scenario chat --shared-prefix 16 --conversations 3 "
           "--turns 3 --user-tokens 8 --answer-tokens 4 --seed 7 --repeats 2 --prefill-chunk 16 "
           "--threads 1 --prefix-cache-mb 1",
           g_ckpt);
  json_t *o = bench_json(args);
  if (!o) return;
  check_common(o, "chat");
  CHECK_EQ_INT(num(json_object_get(o, "engine"), "max_batch"), 3);
  json_t *x = json_object_get(o, "chat");
  CHECK(json_object_get(o, "prefix") == NULL);
  CHECK_EQ_INT(num(x, "conversations"), 3);
  CHECK_EQ_INT(num(x, "turns"), 3);
  CHECK_EQ_INT(num(x, "shared_tokens"), 16);
  CHECK_EQ_INT(num(x, "user_tokens"), 8);
  CHECK_EQ_INT(num(x, "answer_tokens"), 4);
  CHECK_EQ_INT(num(x, "seed"), 7);
  CHECK_EQ_INT(num(x, "requests"), 9);
  CHECK_EQ_INT(num(x, "prompt_tokens"), 3 * (24 + 36 + 48));
  CHECK(json_is_true(json_object_get(x, "exact")));
  json_t *turns = json_object_get(x, "per_turn");
  CHECK(json_is_array(turns) && json_array_size(turns) == 3);
  static const double prompt[] = {24, 36, 48}, expected[] = {0, 16, 32};
  double cached = 0;
  for (size_t t = 0; t < json_array_size(turns) && t < 3; t++) {
    json_t *e = json_array_get(turns, t);
    CHECK_EQ_INT(num(e, "turn"), (int)t + 1);
    CHECK(num(e, "prompt_tokens") == prompt[t]);
    CHECK(num(e, "expected_cached_tokens") == expected[t]);
    CHECK_NEAR(num(e, "expected_ttft_ratio"), (prompt[t] - expected[t]) / prompt[t], 1e-6);
    CHECK(num(e, "ttft_ms") > 0);
    CHECK(num(e, "ttft_ms_without") > 0);
    CHECK(num(e, "ttft_ratio") > 0);
    /* snapshots lie on the prompt chunks' boundaries: a turn is served at most the previous
     * turn's deepest one (turn 1's conversations all start at once: nothing computed yet) */
    CHECK(num(e, "cached_tokens") >= 0 && num(e, "cached_tokens") <= expected[t]);
    cached += num(e, "cached_tokens") * 3;
  }
  CHECK(num(x, "ttft_ms") > 0);
  CHECK(num(x, "ttft_ms_without") > 0);
  CHECK(num(x, "workload_s") > 0);
  CHECK(num(x, "workload_s_without") > 0);
  json_t *cache = json_object_get(x, "cache");
  check_cache(cache);
  /* --prefix-cache-mb reaches the cache engine: as many snapshots as 1 MiB holds */
  CHECK_EQ_INT(num(cache, "snapshot_budget_bytes"), 1 << 20);
  CHECK_EQ_INT(num(cache, "snapshots_max"),
               (1 << 20) / (int64_t)num(json_object_get(o, "model"), "state_bytes_per_sequence"));
  /* every turn after the first continues its conversation's computed history */
  CHECK(num(cache, "hits") > 0);
  CHECK(num(cache, "tokens_saved") > 0);
  CHECK(num(json_array_get(turns, 2), "cached_tokens") > 0);
  /* the counters are the last repeat's alone, and there is no preemption here (pages for twice
   * the last turns): one lookup per request, and the tokens the requests were served are the
   * ones saved */
  CHECK_EQ_INT(num(cache, "lookups"), 9);
  CHECK_EQ_INT(num(cache, "tokens_looked_up"), 3 * (24 + 36 + 48));
  CHECK(num(cache, "tokens_saved") == cached);
  json_decref(o);
}

static void test_tables_and_usage(void) {
  char args[4096];
  snprintf(args, sizeof args,
           "bench --model '%s' --scenario prefix --shared-prefix 80 --unique 20 --requests 1 "
           "--repeats 1 --prefill-chunk 24 --threads 1",
           g_ckpt);
  CHECK_EQ_INT(cli_run(args), 0);
  CHECK_CONTAINS(g_stdout, "prefix    80 shared + 20 unique tokens = 100-token prompts");
  /* snapshots on multiples of lcm(24, 16) = 48 (of 24 alone, 72 of the 80 could be served) */
  CHECK_CONTAINS(g_stdout, "expected: 48 of 100 tokens cached (0.480; multiples of "
                           "lcm(prefill_chunk, page) = 48), TTFT ratio 0.5200");
  CHECK_CONTAINS(g_stdout, "without cache");
  CHECK_CONTAINS(g_stdout, "cold (cleared)");
  CHECK_CONTAINS(g_stdout, "two engines");
  snprintf(args, sizeof args,
           "bench --model '%s' --scenario chat --conversations 2 --turns 2 --user-tokens 4 "
           "--answer-tokens 2 --repeats 1 --threads 1",
           g_ckpt);
  CHECK_EQ_INT(cli_run(args), 0);
  CHECK_CONTAINS(g_stdout, "chat      2 conversations x 2 turns: system prompt 0, user messages "
                           "4, answers 2 tokens (greedy), seed 1");
  CHECK_CONTAINS(g_stdout, "             2      10.0");
  CHECK_CONTAINS(g_stdout, "workload ");
  /* prompts beyond the golden model's context (32768): the library's limit (exit 1) */
  snprintf(args, sizeof args,
           "bench --model '%s' --scenario prefix --shared-prefix 40000 --repeats 1", g_ckpt);
  CHECK_EQ_INT(cli_run(args), 1);
  CHECK_CONTAINS(g_stderr, "PH_ERR_LIMIT");
  CHECK_CONTAINS(g_stderr, "need 40065 tokens of context, the context is 32768");
  snprintf(args, sizeof args,
           "bench --model '%s' --scenario chat --conversations 1 --turns 64 --user-tokens 500 "
           "--answer-tokens 20 --repeats 1",
           g_ckpt);
  CHECK_EQ_INT(cli_run(args), 1);
  CHECK_CONTAINS(g_stderr, "the last turn's prompt and answer need 33280 tokens of context");
  static const char *const bad[] = {
      "--scenario prefill",
      "--scenario prefix --prompt 16",
      "--scenario chat --batches 1",
      "--scenario prefix --speculative replay",
      "--scenario chat --decode-steps 2",
      "--shared-prefix 16",
      "--unique 8",
      "--scenario chat --unique 8",
      "--scenario chat --requests 2",
      "--scenario prefix --turns 2",
      "--conversations 2",
      "--scenario prefix --seed 3",
      "--scenario prefix --shared-prefix 0",
      "--scenario prefix --unique 0",
      "--scenario prefix --requests 0",
      "--scenario prefix --requests 1025",
      "--scenario chat --conversations 257",
      "--scenario chat --turns 0",
      "--scenario chat --turns 65",
      "--scenario chat --user-tokens 0",
      "--scenario chat --answer-tokens 0",
      "--scenario chat --seed -1",
      "--scenario chat --shared-prefix -1",
      "--scenario prefix --no-prefix-cache",
      "--scenario chat --no-prefix-cache",
  };
  static const char *const says[] = {
      "--scenario prefill: expected throughput, prefix or chat",
      "--prompt applies to --scenario throughput (the default)",
      "--batches applies to --scenario throughput",
      "--speculative applies to --scenario throughput",
      "--decode-steps applies to --scenario throughput",
      "--shared-prefix applies to --scenario prefix or chat",
      "--unique applies to --scenario prefix",
      "--unique applies to --scenario prefix",
      "--requests applies to --scenario prefix",
      "--turns applies to --scenario chat",
      "--conversations applies to --scenario chat",
      "--seed applies to --scenario chat",
      "--shared-prefix must be in [1,",
      "--unique must be in",
      "--requests must be in [1, 1024]",
      "--requests must be in [1, 1024]",
      "--conversations must be in [1, 256]",
      "--turns must be in [1, 64]",
      "--turns must be in [1, 64]",
      "--user-tokens must be in",
      "--answer-tokens must be in",
      "--seed must be in",
      "--shared-prefix must be in [0,",
      "--scenario prefix measures with the prefix cache and without",
      "--scenario chat measures with the prefix cache and without",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(args, sizeof args, "bench --model '%s' %s", g_ckpt, bad[i]);
    const int rc = cli_run(args);
    if (!CHECK(rc == 2)) fprintf(stderr, "       exit %d: pagedhybrid %s\n", rc, args);
    CHECK_CONTAINS(g_stderr, says[i]);
  }
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "%s", check_env("PH_TMP_DIR"));
  check_data(g_ckpt, sizeof g_ckpt, "golden/qwen35-tiny-f32/checkpoint");
  diag d;
  if (path_mkdirs(g_tmp, &d) != PH_OK) return 1;
  cli_testing_init(g_tmp);
  RUN(test_prefix_json);
  RUN(test_chat_json);
  RUN(test_tables_and_usage);
  cli_testing_done();
  return check_finish();
}
