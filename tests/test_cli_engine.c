/* The engine's two commands as a user meets them: `pagedhybrid run` over a requests file (every
 * id back in input order, arrivals at different steps, a removal mid-decode, a refused request
 * that leaves the others alone, greedy tokens equal to `generate`'s paged run, the same output
 * twice apart from timings, a package and its checkpoint agreeing, the prefix cache's hits with
 * the tokens of --no-prefix-cache) and its exit codes; and
 * `pagedhybrid bench --json` with the keys docs/bench.md lists, and its speculative section
 * (--speculative replay). Runs the built binary (PH_CLI)
 * on the golden f32 checkpoint (tests/data). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "base/fmap.h"
#include "check.h"
#include "cli_testing.h"
#include "file_testing.h"

static char g_tmp[512];
static char g_ckpt[1024];

static int run(const char *args) { return cli_run(args); }

static void write_text(const char *path, const char *text) {
  diag d;
  CHECK_STATUS(file_write_all(path, text, strlen(text), &d), PH_OK, d.msg);
}

static char *read_text(const char *path) {
  char *text = NULL;
  size_t n = 0;
  diag d;
  CHECK_STATUS(file_read_all(path, 64 << 20, &text, &n, &d), PH_OK, d.msg);
  return text;
}

/* The tokens `generate --layout paged` prints after "generated:"; returns the count. */
static int generate_tokens(const char *model, const char *prompt, int max_new, int64_t *out) {
  char args[2048];
  snprintf(args, sizeof args, "generate --model '%s' --layout paged --tokens %s --max-new %d",
           model, prompt, max_new);
  CHECK_EQ_INT(run(args), 0);
  return (int)cli_generated_ids(max_new, out);
}

/* Parses JSON lines into an array of objects (NULL on any bad line). */
static json_t *parse_lines(const char *text) {
  json_t *arr = json_array();
  const char *p = text ? text : "";
  while (*p) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    if (len > 0) {
      json_error_t e;
      json_t *o = json_loadb(p, len, 0, &e);
      CHECK(o != NULL && json_is_object(o));
      if (!o) {
        fprintf(stderr, "       bad line: %.*s (%s)\n", (int)len, p, e.text);
        json_decref(arr);
        return NULL;
      }
      json_array_append_new(arr, o);
    }
    p += len + (nl ? 1 : 0);
  }
  return arr;
}

static int64_t n_tokens(json_t *line) {
  return (int64_t)json_array_size(json_object_get(line, "tokens"));
}

static int64_t token_at(json_t *line, size_t i) {
  return json_integer_value(json_array_get(json_object_get(line, "tokens"), i));
}

static const char *field(json_t *line, const char *key) {
  return json_string_value(json_object_get(line, key));
}

/* One line with the timing fields (the ones docs/run.md says vary) taken out, as compact text. */
static char *without_timings(json_t *line) {
  json_t *c = json_deep_copy(line);
  json_object_del(c, "time_in_queue_ms");
  json_object_del(c, "time_to_first_token_ms");
  json_object_del(c, "total_ms");
  char *s = json_dumps(c, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(c);
  return s;
}

/* The requests the run tests use; the stop id comes from the greedy tokens so the "stop" request
 * ends on its third token whatever the golden weights produce. */
#define GREEDY_PROMPT "1,2,3,4,5"
#define GREEDY_NEW    8

static void write_requests(const char *path, const int64_t *greedy) {
  char text[4096];
  snprintf(text, sizeof text,
           "{\"id\": \"greedy\", \"prompt_tokens\": [" GREEDY_PROMPT
           "], \"max_new_tokens\": %d, \"ignore_eos\": true}\n"
           "{\"id\": \"sampled\", \"prompt_tokens\": [7, 8, 9], \"max_new_tokens\": 6, "
           "\"arrive_step\": 2, \"temperature\": 0.8, \"top_p\": 0.9, \"seed\": 7}\n"
           "\n"
           "{\"id\": 17, \"prompt_tokens\": [10, 11, 300, 12], \"arrive_step\": 1}\n"
           "{\"id\": \"removed\", \"prompt_tokens\": [20, 21, 22, 23, 24, 25], "
           "\"max_new_tokens\": 30, \"arrive_step\": 1, \"remove_step\": 5}\n"
           "{\"id\": \"stop\", \"prompt_tokens\": [" GREEDY_PROMPT
           "], \"max_new_tokens\": 20, \"arrive_step\": 3, \"stop_token_ids\": [%lld]}\n"
           "{\"id\": \"late\", \"prompt_tokens\": [5, 4, 3, 2, 1, 0, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, "
           "9, 8, 7, 6], \"max_new_tokens\": 3, \"arrive_step\": 200}\n",
           GREEDY_NEW, (long long)greedy[2]);
  write_text(path, text);
}

static const char *const IDS[] = {"greedy", "sampled", "17", "removed", "stop", "late"};
#define N_IDS 6

/* Every promise of one run's output; returns the parsed lines (caller frees) or NULL. */
static json_t *check_run_output(const char *text, const int64_t *greedy) {
  json_t *lines = parse_lines(text);
  if (!lines) return NULL;
  CHECK_EQ_INT(json_array_size(lines), N_IDS);
  if (json_array_size(lines) != N_IDS) return lines;
  for (int i = 0; i < N_IDS; i++) {
    json_t *l = json_array_get(lines, (size_t)i);
    CHECK_EQ_STR(field(l, "id"), IDS[i]);
    CHECK_EQ_INT(json_integer_value(json_object_get(l, "n_generated_tokens")), n_tokens(l));
  }
  json_t *g = json_array_get(lines, 0), *s = json_array_get(lines, 1);
  json_t *bad = json_array_get(lines, 2), *rm = json_array_get(lines, 3);
  json_t *stop = json_array_get(lines, 4), *late = json_array_get(lines, 5);
  /* greedy: generate's paged run, token for token */
  CHECK_EQ_STR(field(g, "finish_reason"), "length");
  CHECK_EQ_INT(n_tokens(g), GREEDY_NEW);
  for (int j = 0; j < GREEDY_NEW; j++) CHECK_EQ_INT(token_at(g, (size_t)j), greedy[j]);
  CHECK_EQ_INT(json_integer_value(json_object_get(g, "n_prompt_tokens")), 5);
  CHECK(json_is_number(json_object_get(g, "time_to_first_token_ms")));
  CHECK_EQ_STR(field(s, "finish_reason"), "length");
  CHECK_EQ_INT(n_tokens(s), 6);
  /* refused: an error line naming the token and the file's line, no tokens */
  CHECK_EQ_STR(field(bad, "finish_reason"), "error");
  CHECK_EQ_INT(n_tokens(bad), 0);
  CHECK_CONTAINS(field(bad, "error"), "line 4");
  CHECK_CONTAINS(field(bad, "error"), "300");
  CHECK_CONTAINS(field(bad, "error"), "outside the vocabulary");
  CHECK(json_is_null(json_object_get(bad, "time_to_first_token_ms")));
  /* removed at step 5 after arriving at step 1: its short prompt and first token take one step,
   * then one token a step until the removal */
  CHECK_EQ_STR(field(rm, "finish_reason"), "aborted");
  CHECK_EQ_INT(n_tokens(rm), 4);
  /* the stop id ends the request on its third token (the same tokens as greedy until then) */
  CHECK_EQ_STR(field(stop, "finish_reason"), "stop");
  CHECK_EQ_INT(n_tokens(stop), 3);
  for (int j = 0; j < 3 && j < n_tokens(stop); j++)
    CHECK_EQ_INT(token_at(stop, (size_t)j), greedy[j]);
  /* arrives long after the others finished: the idle stretch is skipped */
  CHECK_EQ_STR(field(late, "finish_reason"), "length");
  CHECK_EQ_INT(n_tokens(late), 3);
  CHECK_EQ_INT(json_integer_value(json_object_get(late, "n_prompt_tokens")), 20);
  return lines;
}

/* Every timing value in the raw text has at most 3 decimals (microseconds of ms). */
static void check_timing_text(const char *text) {
  static const char *const keys[3] = {
      "\"time_in_queue_ms\":", "\"time_to_first_token_ms\":", "\"total_ms\":"};
  int n_seen = 0;
  for (int k = 0; k < 3; k++)
    for (const char *p = text ? strstr(text, keys[k]) : NULL; p; p = strstr(p + 1, keys[k])) {
      const char *v = p + strlen(keys[k]);
      if (strncmp(v, "null", 4) == 0) continue;
      const size_t len = strspn(v, "0123456789.-e+");
      const char *dot = memchr(v, '.', len);
      const size_t decimals = dot ? len - (size_t)(dot - v) - 1 : 0;
      if (decimals > 3) printf("       %.*s has %zu decimals\n", (int)len, v, decimals);
      CHECK(decimals <= 3 && !memchr(v, 'e', len));
      n_seen++;
    }
  CHECK(n_seen >= 3);
}

static void test_run_golden(void) {
  int64_t greedy[GREEDY_NEW];
  CHECK_EQ_INT(generate_tokens(g_ckpt, GREEDY_PROMPT, GREEDY_NEW, greedy), GREEDY_NEW);
  char req[1024], out[1024], args[4096];
  snprintf(req, sizeof req, "%s/requests.jsonl", g_tmp);
  snprintf(out, sizeof out, "%s/results.jsonl", g_tmp);
  write_requests(req, greedy);

  snprintf(args, sizeof args,
           "run --model '%s' --requests '%s' --out '%s' --progress 2 --memory 64", g_ckpt, req,
           out);
  CHECK_EQ_INT(run(args), 0);
  CHECK_CONTAINS(g_stderr, "run: step 2:");
  CHECK_CONTAINS(g_stderr, "run: 6 requests (3 length, 1 stop, 1 aborted, 1 error)");
  CHECK_EQ_STR(g_stdout, "");
  char *first = read_text(out);
  json_t *a = check_run_output(first, greedy);
  check_timing_text(first);

  /* again, to stdout, on a small page pool with a small batch and chunk: the same tokens */
  snprintf(args, sizeof args,
           "run --model '%s' --requests '%s' --max-batch 2 --max-tokens 8 --prefill-chunk 4 "
           "--num-blocks 8 --threads 1",
           g_ckpt, req);
  CHECK_EQ_INT(run(args), 0);
  json_t *b = parse_lines(g_stdout);
  for (int i = 0; a && b && i < N_IDS; i++) {
    json_t *la = json_array_get(a, (size_t)i), *lb = json_array_get(b, (size_t)i);
    if (strcmp(IDS[i], "removed") == 0) { /* how far it got by its step depends on the batch */
      CHECK_EQ_STR(field(lb, "finish_reason"), field(la, "finish_reason"));
      continue;
    }
    char *sa = without_timings(la), *sb = without_timings(lb);
    CHECK_EQ_STR(sb, sa);
    free(sa);
    free(sb);
  }
  json_decref(b);

  /* the same file with the same options twice: byte-identical apart from the timing fields */
  snprintf(args, sizeof args,
           "run --model '%s' --requests '%s' -o '%s/second.jsonl' --progress 2 --memory 64", g_ckpt,
           req, g_tmp);
  CHECK_EQ_INT(run(args), 0);
  char path[1100];
  snprintf(path, sizeof path, "%s/second.jsonl", g_tmp);
  char *second = read_text(path);
  json_t *c = parse_lines(second);
  CHECK(c && a && json_array_size(c) == json_array_size(a));
  for (size_t i = 0; a && c && i < json_array_size(a) && i < json_array_size(c); i++) {
    char *sa = without_timings(json_array_get(a, i)), *sc = without_timings(json_array_get(c, i));
    CHECK_EQ_STR(sc, sa);
    free(sa);
    free(sc);
  }
  json_decref(a);
  json_decref(c);
  free(first);
  free(second);
}

/* A CPU paged package of the same checkpoint gives the same tokens; checkpoint-only options are
 * refused for it. */
static void test_run_package(void) {
  char pkg[1024], req[1024], args[4096];
  snprintf(pkg, sizeof pkg, "%s/paged-cpu", g_tmp);
  snprintf(req, sizeof req, "%s/pkg-requests.jsonl", g_tmp);
  snprintf(args, sizeof args, "export '%s' -o '%s' --layout paged --target cpu", g_ckpt, pkg);
  CHECK_EQ_INT(run(args), 0);
  write_text(req, "{\"id\": \"a\", \"prompt_tokens\": [1, 2, 3, 4, 5], \"max_new_tokens\": 6, "
                  "\"ignore_eos\": true}\n"
                  "{\"id\": \"b\", \"prompt_tokens\": [9, 8, 7], \"max_new_tokens\": 4, "
                  "\"arrive_step\": 1, \"temperature\": 1.0, \"seed\": 3}\n");
  snprintf(args, sizeof args, "run --model '%s' --requests '%s' --memory 64", g_ckpt, req);
  CHECK_EQ_INT(run(args), 0);
  json_t *a = parse_lines(g_stdout);
  snprintf(args, sizeof args, "run --model '%s' --requests '%s' --memory 64", pkg, req);
  CHECK_EQ_INT(run(args), 0);
  json_t *b = parse_lines(g_stdout);
  CHECK(a && b && json_array_size(a) == 2 && json_array_size(b) == 2);
  for (size_t i = 0; a && b && i < 2 && i < json_array_size(a) && i < json_array_size(b); i++) {
    char *sa = without_timings(json_array_get(a, i)), *sb = without_timings(json_array_get(b, i));
    CHECK_EQ_STR(sb, sa);
    free(sa);
    free(sb);
  }
  json_decref(a);
  json_decref(b);
  snprintf(args, sizeof args, "run --model '%s' --requests '%s' --block-size 32", pkg, req);
  CHECK_EQ_INT(run(args), 1);
  CHECK_CONTAINS(g_stderr, "PH_ERR_INVALID_ARGUMENT");
  CHECK_CONTAINS(g_stderr, "checkpoint");
}

static void test_run_usage(void) {
  char args[4096], req[1024];
  snprintf(req, sizeof req, "%s/usage.jsonl", g_tmp);
  write_text(req, "{\"id\": 1, \"prompt_tokens\": [1]}\n");
  CHECK_EQ_INT(run("run --help"), 0);
  CHECK_CONTAINS(g_stdout, "usage: pagedhybrid run");
  CHECK_CONTAINS(g_stdout, "--requests");
  CHECK_EQ_INT(run("--help"), 0);
  CHECK_CONTAINS(g_stdout, "run ");
  CHECK_CONTAINS(g_stdout, "bench ");
  snprintf(args, sizeof args, "run --model '%s'", g_ckpt);
  CHECK_EQ_INT(run(args), 2);
  CHECK_CONTAINS(g_stderr, "--requests FILE.jsonl is required");
  snprintf(args, sizeof args, "run --requests '%s'", req);
  CHECK_EQ_INT(run(args), 2);
  CHECK_CONTAINS(g_stderr, "--model DIR|PKG is required");
  static const char *const bad[] = {
      "--max-batch abc",
      "--max-batch 0",
      "--max-tokens -1",
      "--threads x",
      "--memory 0",
      "--num-blocks 1",
      "--block-size 24",
      "--io-dtype f64",
      "--progress -1",
      "--num-blocks 9 --memory 64",
      "--max-tokens 8 --prefill-chunk 16",
      "--frobnicate 1",
      "--speculative bogus",
      "--speculative ngram:0",
      "--speculative ngram:9",
      "--speculative ngram:",
      "--speculative ngram:4x",
      "--speculative ngram:+4",
      "--speculative 'ngram: 4'",
      "--speculative replay",
      "--state-update-capacity 9",
      "--state-update-capacity -1",
  };
  static const char *const says[] = {
      "expects an integer",
      "must be in",
      "must be in",
      "expects an integer",
      "must be in",
      "must be in",
      "power of two",
      "f32, f16 or bf16",
      "must be in",
      "not both",
      "above --max-tokens",
      "unknown option",
      "--speculative bogus: expected none, ngram or mtp",
      "--speculative ngram:0: K must be an integer in [1, 8]",
      "--speculative ngram:9: K must be an integer in [1, 8]",
      "K must be an integer in [1, 8]",
      "K must be an integer in [1, 8]",
      "--speculative ngram:+4: K must be an integer in [1, 8]",
      "--speculative ngram: 4: K must be an integer in [1, 8]",
      "--speculative replay: expected none, ngram or mtp",
      "--state-update-capacity",
      "--state-update-capacity",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(args, sizeof args, "run --model '%s' --requests '%s' %s", g_ckpt, req, bad[i]);
    CHECK_EQ_INT(run(args), 2);
    CHECK_CONTAINS(g_stderr, says[i]);
  }
  snprintf(args, sizeof args, "run --model '%s' --requests '%s' extra", g_ckpt, req);
  CHECK_EQ_INT(run(args), 2);
}

/* A file that cannot be read or parsed: exit 1 with the typed error and the line. */
static void test_run_bad_files(void) {
  char args[4096], req[1024];
  snprintf(req, sizeof req, "%s/bad.jsonl", g_tmp);
  struct {
    const char *text, *status, *says;
  } cases[] = {
      {"{\"id\": 1, \"prompt_tokens\": [1]}\n{\"id\": 2, \"prompt_tokens\": [1, 2}\n",
       "PH_ERR_JSON", "bad.jsonl:2:"},
      {"{\"id\": 1, \"prompt_tokens\": [1]}\n\n{\"id\": 2, \"prompt_tokens\": [1], \"temprature\": "
       "1}\n",
       "PH_ERR_CONFIG_INVALID", "bad.jsonl:3:"},
      {"{\"id\": 1, \"prompt_tokens\": [1]}\n{\"id\": 1, \"prompt_tokens\": [2]}\n",
       "PH_ERR_CONFIG_INVALID", "bad.jsonl:2:"},
      {"{\"id\": 1, \"prompt_tokens\": [1], \"remove_step\": 0, \"arrive_step\": 3}\n",
       "PH_ERR_CONFIG_INVALID", "bad.jsonl:1:"},
      {"\n\n", "PH_ERR_CONFIG_INVALID", "no requests"},
      {"{\"prompt_tokens\": [1]}\n", "PH_ERR_CONFIG_MISSING_FIELD", "bad.jsonl:1:"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_text(req, cases[i].text);
    snprintf(args, sizeof args, "run --model '%s' --requests '%s'", g_ckpt, req);
    CHECK_EQ_INT(run(args), 1);
    CHECK_CONTAINS(g_stderr, cases[i].status);
    CHECK_CONTAINS(g_stderr, cases[i].says);
    CHECK_EQ_STR(g_stdout, "");
  }
  snprintf(args, sizeof args, "run --model '%s' --requests '%s/none.jsonl'", g_ckpt, g_tmp);
  CHECK_EQ_INT(run(args), 1);
  CHECK_CONTAINS(g_stderr, "PH_ERR_NOT_FOUND");
  write_text(req, "{\"id\": 1, \"prompt_tokens\": [1]}\n");
  snprintf(args, sizeof args, "run --model '%s/nonexistent' --requests '%s'", g_tmp, req);
  CHECK_EQ_INT(run(args), 1);
  CHECK_CONTAINS(g_stderr, "error: PH_ERR_");
  snprintf(args, sizeof args,
           "run --model '%s' --requests '%s' --out '%s/no/such/dir/out.jsonl' --memory 16", g_ckpt,
           req, g_tmp);
  CHECK_EQ_INT(run(args), 1);
  CHECK_CONTAINS(g_stderr, "PH_ERR_IO");
}

/* An --out that cannot be written is the first and only thing reported: before the requests
 * file is read or the model opened (before, a bad requests file or model hid it, and a good run
 * did all its work first). */
static void test_run_out_first(void) {
  char args[4096], req[1024];
  snprintf(req, sizeof req, "%s/out-first.jsonl", g_tmp);
  write_text(req, "{\"id\": 1, \"prompt_tokens\": [1}\n"); /* malformed */
  snprintf(args, sizeof args,
           "run --model '%s/nonexistent' --requests '%s' --out '%s/no/such/dir/out.jsonl' "
           "--progress 1",
           g_tmp, req, g_tmp);
  CHECK_EQ_INT(run(args), 1);
  CHECK(strncmp(g_stderr, "error: PH_ERR_IO: ", 18) == 0);
  CHECK_CONTAINS(g_stderr, "no/such/dir/out.jsonl: cannot create");
  CHECK(strchr(g_stderr, '\n') == g_stderr + strlen(g_stderr) - 1); /* one line */
  CHECK_EQ_STR(g_stdout, "");
}

/* --out is replaced whole (base/wfile.h): a FIFO is refused at once instead of blocking, a
 * symlink planted at the target is replaced and the file it points to is left alone, a failed
 * run leaves an existing output as it was and no temporary file, and a good run's lines land. */
static void test_run_out_replaced(void) {
  char args[4096], req[1100], out[1100], outside[1100], dir[1000];
  snprintf(dir, sizeof dir, "%s/out-replaced", g_tmp);
  diag d;
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
  snprintf(req, sizeof req, "%s/good.jsonl", dir);
  write_text(req, "{\"id\": \"a\", \"prompt_tokens\": [1, 2], \"max_new_tokens\": 2}\n");
  /* a FIFO as --out */
  char fifo[1200];
  CHECK(ft_fifo(fifo, dir, "out.fifo"));
  snprintf(args, sizeof args, "run --model '%s' --requests '%s' --out '%s'", g_ckpt, req, fifo);
  CHECK_EQ_INT(cli_run_timeout(10, args), 1);
  CHECK_CONTAINS(g_stderr, "out.fifo: exists and is a FIFO");
  CHECK(ft_is_fifo(fifo));
  /* a symlink at the target, pointing outside: replaced, the outside file untouched */
  snprintf(outside, sizeof outside, "%s/outside.txt", dir);
  write_text(outside, "keep me\n");
  snprintf(out, sizeof out, "%s/out.jsonl", dir);
  unlink(out);
  CHECK(symlink(outside, out) == 0);
  snprintf(args, sizeof args, "run --model '%s' --requests '%s' --out '%s'", g_ckpt, req, out);
  CHECK_EQ_INT(run(args), 0);
  CHECK(ft_file_is(outside, "keep me\n", 8));
  CHECK(!ft_is_symlink(out));
  char *text = NULL;
  size_t n = 0;
  CHECK_STATUS(file_read_all(out, 1 << 20, &text, &n, &d), PH_OK, d.msg);
  CHECK_CONTAINS(text, "\"id\":\"a\"");
  /* a run that fails (a malformed line) keeps that output byte for byte */
  snprintf(req, sizeof req, "%s/bad.jsonl", dir);
  write_text(req, "{\"id\": \"b\", \"prompt_tokens\": [1}\n");
  snprintf(args, sizeof args, "run --model '%s' --requests '%s' --out '%s'", g_ckpt, req, out);
  CHECK_EQ_INT(run(args), 1);
  if (text) CHECK(ft_file_is(out, text, n));
  CHECK_EQ_INT(ft_count_tmp(dir), 0);
  free(text);
  unlink(fifo);
}

/* A copy of the golden checkpoint whose final norm holds a NaN: every logits row is NaN. */
static const char *nan_checkpoint(char *dir, size_t dir_n) {
  diag d;
  char src[1200], dst[1200];
  snprintf(dir, dir_n, "%s/nan-norm", g_tmp);
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
  static const char *const files[2] = {"config.json", "model.safetensors"};
  for (int f = 0; f < 2; f++) {
    snprintf(src, sizeof src, "%s/%s", g_ckpt, files[f]);
    snprintf(dst, sizeof dst, "%s/%s", dir, files[f]);
    char *bytes = NULL;
    size_t n = 0;
    CHECK_STATUS(file_read_all(src, 1 << 24, &bytes, &n, &d), PH_OK, d.msg);
    if (!bytes) return NULL;
    if (f == 1) {
      uint64_t hn = 0;
      memcpy(&hn, bytes, sizeof hn);
      json_error_t err;
      json_t *h = n > 8 + hn ? json_loadb(bytes + 8, (size_t)hn, 0, &err) : NULL;
      const json_t *off = json_object_get(json_object_get(h, "model.norm.weight"), "data_offsets");
      const size_t at =
          (size_t)(8 + hn + (uint64_t)json_integer_value(json_array_get(off, 0))) + 3 * 4;
      CHECK(off && at + 4 <= n);
      const float nan = NAN;
      if (off && at + 4 <= n) memcpy(bytes + at, &nan, sizeof nan);
      json_decref(h);
    }
    CHECK_STATUS(file_write_all(dst, bytes, n, &d), PH_OK, d.msg);
    free(bytes);
  }
  return dir;
}

/* Non-finite weights: every request ends with an error line naming PH_ERR_NON_FINITE, the run
 * itself succeeds (exit 0) unless --strict; --strict also fails a run with a refused request
 * and passes a clean one. */
static void test_run_strict_and_nonfinite(void) {
  char args[4096], req[1024], dir[1024];
  snprintf(req, sizeof req, "%s/strict.jsonl", g_tmp);
  write_text(req, "{\"id\": \"a\", \"prompt_tokens\": [1, 2, 3], \"max_new_tokens\": 4}\n"
                  "{\"id\": \"b\", \"prompt_tokens\": [4, 5], \"max_new_tokens\": 4, "
                  "\"temperature\": 0.7}\n");
  if (!nan_checkpoint(dir, sizeof dir)) return;
  snprintf(args, sizeof args, "run --model '%s' --requests '%s' --memory 16", dir, req);
  CHECK_EQ_INT(run(args), 0);
  json_t *lines = parse_lines(g_stdout);
  CHECK(lines && json_array_size(lines) == 2);
  for (size_t i = 0; lines && i < json_array_size(lines); i++) {
    json_t *l = json_array_get(lines, i);
    CHECK_EQ_STR(field(l, "finish_reason"), "error");
    CHECK_EQ_INT(n_tokens(l), 0);
    CHECK_CONTAINS(field(l, "error"), "PH_ERR_NON_FINITE");
    CHECK_CONTAINS(field(l, "error"), "are not finite: logits[0] = nan");
  }
  json_decref(lines);
  CHECK_CONTAINS(g_stderr, "run: 2 requests (0 length, 0 stop, 0 aborted, 2 error)");
  snprintf(args, sizeof args, "run --model '%s' --requests '%s' --memory 16 --strict", dir, req);
  CHECK_EQ_INT(run(args), 1);
  CHECK_CONTAINS(g_stderr, "error: PH_ERR_NON_FINITE: --strict: 2 of 2 requests finished with an "
                           "error (the first: line 1: PH_ERR_NON_FINITE: ");
  CHECK_CONTAINS(g_stdout, "\"id\":\"b\""); /* the lines are still written */
  /* the clean checkpoint: --strict changes nothing */
  snprintf(args, sizeof args, "run --model '%s' --requests '%s' --memory 16 --strict", g_ckpt, req);
  CHECK_EQ_INT(run(args), 0);
  CHECK_CONTAINS(g_stderr, "run: 2 requests (2 length, 0 stop, 0 aborted, 0 error)");
  /* a refused request fails a strict run */
  write_text(req, "{\"id\": 1, \"prompt_tokens\": [1]}\n{\"id\": 2, \"prompt_tokens\": [999]}\n");
  CHECK_EQ_INT(run(args), 1);
  CHECK_CONTAINS(g_stderr, "error: PH_ERR_INVALID_ARGUMENT: --strict: 1 of 2 requests finished "
                           "with an error (the first: line 2: ");
}

/* ---- speculative decoding through run ----------------------------------------------------------
 */

/* The requests the speculative runs use, each with an optional speculative object spec[i] (NULL:
 * none) and an id suffix: a greedy prompt, a repetitive one (the n-gram drafter finds matches),
 * a sampled one (acceptance by the sampler's own draw keeps its tokens too). */
#define SPEC_N 3
static const char *const SPEC_BASE[SPEC_N] = {
    "\"prompt_tokens\": [1, 2, 3, 4, 5], \"max_new_tokens\": 12, \"ignore_eos\": true",
    "\"prompt_tokens\": [7, 8, 9, 7, 8, 9, 7, 8, 9, 7, 8], \"max_new_tokens\": 10, "
    "\"ignore_eos\": true, \"arrive_step\": 1",
    "\"prompt_tokens\": [30, 31, 32], \"max_new_tokens\": 9, \"temperature\": 0.8, "
    "\"top_p\": 0.9, \"seed\": 11, \"ignore_eos\": true",
};

/* Appends SPEC_N lines "<tag><i>" with spec (NULL: no object; "%TOKENS%" / "%WRONG%" replaced by
 * the plain run's tokens of that request, or those tokens + 1 mod 256). */
static void append_spec_lines(char *text, size_t cap, const char *tag, const char *spec,
                              json_t *plain) {
  for (int i = 0; i < SPEC_N; i++) {
    size_t used = strlen(text);
    char obj[1024] = "";
    if (spec) {
      const char *mark = strstr(spec, "%TOKENS%")  ? "%TOKENS%"
                         : strstr(spec, "%WRONG%") ? "%WRONG%"
                                                   : NULL;
      if (mark) {
        char toks[512] = "";
        json_t *l = json_array_get(plain, (size_t)i);
        for (int64_t j = 0; l && j < n_tokens(l); j++) {
          const int64_t t = token_at(l, (size_t)j) + (mark[1] == 'W');
          snprintf(toks + strlen(toks), sizeof toks - strlen(toks), "%s%lld", j ? ", " : "",
                   (long long)(t % 256));
        }
        const char *at = strstr(spec, mark);
        snprintf(obj, sizeof obj, ", \"speculative\": %.*s%s%s", (int)(at - spec), spec, toks,
                 at + strlen(mark));
      } else {
        snprintf(obj, sizeof obj, ", \"speculative\": %s", spec);
      }
    }
    snprintf(text + used, cap - used, "{\"id\": \"%s%d\", %s%s}\n", tag, i, SPEC_BASE[i], obj);
  }
}

/* lines[off + i] has the plain run's tokens and finish reason for every request i. */
static void check_same_tokens(json_t *lines, size_t off, json_t *plain) {
  for (size_t i = 0; lines && plain && i < SPEC_N; i++) {
    json_t *a = json_array_get(plain, i), *b = json_array_get(lines, off + i);
    CHECK(b != NULL);
    if (!b) return;
    CHECK_EQ_STR(field(b, "finish_reason"), field(a, "finish_reason"));
    char *ta = json_dumps(json_object_get(a, "tokens"), JSON_COMPACT);
    char *tb = json_dumps(json_object_get(b, "tokens"), JSON_COMPACT);
    CHECK_EQ_STR(tb, ta);
    if (ta && tb && strcmp(ta, tb) != 0) printf("       %s%s\n", field(b, "id"), "");
    free(ta);
    free(tb);
  }
}

static int64_t count(json_t *line, const char *key) {
  json_t *v = json_object_get(line, key);
  return json_is_integer(v) ? json_integer_value(v) : -1; /* -1: absent */
}

/* The summary's "N drafts verified, M accepted" equals the lines' totals. */
static void check_summary(json_t *lines) {
  int64_t drafted = 0, accepted = 0;
  for (size_t i = 0; lines && i < json_array_size(lines); i++) {
    json_t *l = json_array_get(lines, i);
    if (count(l, "n_drafted_tokens") < 0) continue;
    drafted += count(l, "n_drafted_tokens");
    accepted += count(l, "n_accepted_tokens");
  }
  char want[160];
  snprintf(want, sizeof want, "run: speculative: %lld drafts verified, %lld accepted (%.1f%%)",
           (long long)drafted, (long long)accepted,
           drafted ? 100.0 * (double)accepted / (double)drafted : 0.0);
  if (drafted > 0)
    CHECK_CONTAINS(g_stderr, want);
  else
    CHECK(!strstr(g_stderr, "run: speculative:"));
}

/* run --speculative ngram:4, and per-request speculative objects (ngram, replay of the right and
 * of wrong tokens, none): the plain run's tokens and finish reasons, with the drafted/accepted
 * counts on the lines and in the summary. Without capacity, speculative requests are error lines
 * naming state_update_capacity. */
static void test_run_speculative(void) {
  char req[1024], args[4096];
  static char text[16384];
  snprintf(req, sizeof req, "%s/spec-plain.jsonl", g_tmp);
  text[0] = '\0';
  append_spec_lines(text, sizeof text, "p", NULL, NULL);
  write_text(req, text);
  snprintf(args, sizeof args, "run --model '%s' --requests '%s' --memory 64", g_ckpt, req);
  CHECK_EQ_INT(run(args), 0);
  json_t *plain = parse_lines(g_stdout);
  CHECK(plain && json_array_size(plain) == SPEC_N);
  if (!plain || json_array_size(plain) != SPEC_N) return;
  for (size_t i = 0; i < SPEC_N; i++) { /* a plain line has no speculative keys */
    CHECK_EQ_INT(count(json_array_get(plain, i), "n_drafted_tokens"), -1);
    CHECK_EQ_INT(count(json_array_get(plain, i), "n_accepted_tokens"), -1);
  }
  CHECK(!strstr(g_stderr, "run: speculative:"));

  /* --speculative ngram:4 for every request: the same tokens, drafts verified (the repetitive
   * prompt matches), with --state-update-capacity implied (8) */
  snprintf(args, sizeof args, "run --model '%s' --requests '%s' --memory 64 --speculative ngram:4",
           g_ckpt, req);
  CHECK_EQ_INT(run(args), 0);
  json_t *ng = parse_lines(g_stdout);
  CHECK(ng && json_array_size(ng) == SPEC_N);
  check_same_tokens(ng, 0, plain);
  CHECK(count(json_array_get(ng, 1), "n_drafted_tokens") > 0);
  for (size_t i = 0; ng && i < json_array_size(ng); i++) {
    json_t *l = json_array_get(ng, i);
    const int64_t dr = count(l, "n_drafted_tokens"), ac = count(l, "n_accepted_tokens");
    CHECK((dr < 0 && ac < 0) || (dr > 0 && ac >= 0 && ac <= dr)); /* both keys or neither */
  }
  check_summary(ng);
  json_decref(ng);
  /* and with an explicit capacity below 8 but at least K */
  snprintf(args, sizeof args,
           "run --model '%s' --requests '%s' --memory 64 --speculative ngram:2 "
           "--state-update-capacity 2",
           g_ckpt, req);
  CHECK_EQ_INT(run(args), 0);
  ng = parse_lines(g_stdout);
  check_same_tokens(ng, 0, plain);
  check_summary(ng);
  json_decref(ng);

  /* per-request objects: ngram, replay of the plain tokens, replay of wrong tokens, none */
  char spec_req[1024];
  snprintf(spec_req, sizeof spec_req, "%s/spec-objects.jsonl", g_tmp);
  text[0] = '\0';
  append_spec_lines(text, sizeof text, "n", "{\"method\": \"ngram\", \"num_draft_tokens\": 3}",
                    plain);
  append_spec_lines(text, sizeof text, "r",
                    "{\"method\": \"replay\", \"num_draft_tokens\": 8, \"tokens\": [%TOKENS%]}",
                    plain);
  append_spec_lines(text, sizeof text, "w", "{\"method\": \"replay\", \"tokens\": [%WRONG%]}",
                    plain);
  append_spec_lines(text, sizeof text, "z", "{\"method\": \"none\"}", plain);
  write_text(spec_req, text);
  /* --speculative ngram:4 does not override a request's own object (nor "none") */
  for (int with_flag = 0; with_flag < 2; with_flag++) {
    snprintf(args, sizeof args, "run --model '%s' --requests '%s' --memory 64 %s", g_ckpt, spec_req,
             with_flag ? "--speculative ngram:4" : "--state-update-capacity 8");
    CHECK_EQ_INT(run(args), 0);
    json_t *lines = parse_lines(g_stdout);
    CHECK(lines && json_array_size(lines) == 4 * SPEC_N);
    if (!lines || json_array_size(lines) != 4 * SPEC_N) {
      json_decref(lines);
      continue;
    }
    for (size_t g = 0; g < 4; g++) check_same_tokens(lines, g * SPEC_N, plain);
    for (size_t i = 0; i < SPEC_N; i++) {
      json_t *r = json_array_get(lines, SPEC_N + i), *w = json_array_get(lines, 2 * SPEC_N + i);
      json_t *z = json_array_get(lines, 3 * SPEC_N + i);
      /* replaying what the request generates: drafts verified, every one kept */
      CHECK(count(r, "n_drafted_tokens") > 0);
      CHECK_EQ_INT(count(r, "n_accepted_tokens"), count(r, "n_drafted_tokens"));
      /* replaying tokens that never match: every draft rejected */
      CHECK(count(w, "n_drafted_tokens") > 0);
      CHECK_EQ_INT(count(w, "n_accepted_tokens"), 0);
      /* none: no drafts, no keys */
      CHECK_EQ_INT(count(z, "n_drafted_tokens"), -1);
      CHECK_EQ_INT(count(z, "n_accepted_tokens"), -1);
    }
    /* fewer steps than the plain run: the replayed requests keep up to 8 tokens a step */
    CHECK(count(json_array_get(lines, SPEC_N), "n_accepted_tokens") >= 8);
    check_summary(lines);
    json_decref(lines);
  }

  /* no capacity on the checkpoint (no flag): every speculative request is an error line naming
   * state_update_capacity; the "none" ones run; exit 0, or 1 with --strict */
  snprintf(args, sizeof args, "run --model '%s' --requests '%s' --memory 64", g_ckpt, spec_req);
  CHECK_EQ_INT(run(args), 0);
  json_t *lines = parse_lines(g_stdout);
  CHECK(lines && json_array_size(lines) == 4 * SPEC_N);
  for (size_t i = 0; lines && i < json_array_size(lines); i++) {
    json_t *l = json_array_get(lines, i);
    if (i < 3 * SPEC_N) {
      CHECK_EQ_STR(field(l, "finish_reason"), "error");
      CHECK_EQ_INT(n_tokens(l), 0);
      CHECK_CONTAINS(field(l, "error"), "PH_ERR_UNSUPPORTED");
      CHECK_CONTAINS(field(l, "error"), "state_update_capacity");
      CHECK_CONTAINS(field(l, "error"), "--state-update-capacity");
      char at[32];
      snprintf(at, sizeof at, "line %zu:", i + 1);
      CHECK_CONTAINS(field(l, "error"), at);
    } else {
      CHECK_EQ_STR(field(l, "finish_reason"), "length");
    }
  }
  json_decref(lines);
  CHECK_CONTAINS(g_stderr, "run: 12 requests (3 length, 0 stop, 0 aborted, 9 error)");
  snprintf(args, sizeof args, "run --model '%s' --requests '%s' --memory 64 --strict", g_ckpt,
           spec_req);
  CHECK_EQ_INT(run(args), 1);
  CHECK_CONTAINS(g_stderr, "error: PH_ERR_UNSUPPORTED: --strict: 9 of 12 requests finished with "
                           "an error (the first: line 1: ");
  /* drafts per step above the capacity: refused per request, naming both */
  snprintf(args, sizeof args,
           "run --model '%s' --requests '%s' --memory 64 --speculative ngram:8 "
           "--state-update-capacity 4",
           g_ckpt, req);
  CHECK_EQ_INT(run(args), 0);
  lines = parse_lines(g_stdout);
  for (size_t i = 0; lines && i < json_array_size(lines); i++) {
    json_t *l = json_array_get(lines, i);
    CHECK_EQ_STR(field(l, "finish_reason"), "error");
    CHECK_CONTAINS(field(l, "error"), "num_draft_tokens = 8 is more than the model's "
                                      "state_update_capacity 4");
  }
  json_decref(lines);
  /* mtp on a checkpoint without an MTP head */
  snprintf(args, sizeof args, "run --model '%s' --requests '%s' --memory 64 --speculative mtp",
           g_ckpt, req);
  CHECK_EQ_INT(run(args), 0);
  CHECK_CONTAINS(g_stdout, "no MTP head");

  /* a CPU paged package exported with capacity 8: the same tokens, its capacity taken as is;
   * another capacity is refused */
  char pkg[1024];
  snprintf(pkg, sizeof pkg, "%s/paged-cpu-su8", g_tmp);
  snprintf(args, sizeof args,
           "export '%s' -o '%s' --layout paged --target cpu --state-update-capacity 8", g_ckpt,
           pkg);
  CHECK_EQ_INT(run(args), 0);
  snprintf(args, sizeof args, "run --model '%s' --requests '%s' --memory 64", pkg, spec_req);
  CHECK_EQ_INT(run(args), 0);
  lines = parse_lines(g_stdout);
  CHECK(lines && json_array_size(lines) == 4 * SPEC_N);
  for (size_t g = 0; lines && g < 4; g++) check_same_tokens(lines, g * SPEC_N, plain);
  for (size_t i = 0; lines && i < SPEC_N; i++) {
    json_t *r = json_array_get(lines, SPEC_N + i);
    CHECK(count(r, "n_drafted_tokens") > 0);
    CHECK_EQ_INT(count(r, "n_accepted_tokens"), count(r, "n_drafted_tokens"));
  }
  check_summary(lines);
  json_decref(lines);
  snprintf(args, sizeof args, "run --model '%s' --requests '%s' --memory 64 --speculative ngram:4",
           pkg, req);
  CHECK_EQ_INT(run(args), 0);
  lines = parse_lines(g_stdout);
  check_same_tokens(lines, 0, plain);
  json_decref(lines);
  snprintf(args, sizeof args, "run --model '%s' --requests '%s' --state-update-capacity 4", pkg,
           req);
  CHECK_EQ_INT(run(args), 1);
  CHECK_CONTAINS(g_stderr, "state_update_capacity 4");
  CHECK_CONTAINS(g_stderr, "exported");
  CHECK_EQ_STR(g_stdout, "");
  json_decref(plain);
}

static double num(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  CHECK(json_is_number(v));
  if (!json_is_number(v)) fprintf(stderr, "       key \"%s\" is not a number\n", key);
  return json_number_value(v);
}

/* Runs `args` (a bench command with --json), checks it exits 0 and prints one JSON object;
 * returns that object (the caller's), or NULL after the failed check says why. */
static json_t *bench_json(const char *args) {
  CHECK_EQ_INT(run(args), 0);
  json_error_t e;
  json_t *o = json_loads(g_stdout ? g_stdout : "", 0, &e);
  CHECK(o != NULL);
  if (!o) fprintf(stderr, "       %s\n%s\n", e.text, g_stderr ? g_stderr : "");
  return o;
}

static void test_bench_json(void) {
  char args[4096];
  snprintf(args, sizeof args,
           "bench --model '%s' --json --prompt 64 --decode-steps 4 --batches 1,4 --repeats 1",
           g_ckpt);
  json_t *o = bench_json(args);
  if (!o) return;
  json_t *model = json_object_get(o, "model"), *eng = json_object_get(o, "engine");
  json_t *mach = json_object_get(o, "machine"), *pre = json_object_get(o, "prefill");
  json_t *dec = json_object_get(o, "decode"), *mem = json_object_get(o, "memory");
  CHECK_EQ_STR(json_string_value(json_object_get(model, "kind")), "checkpoint");
  CHECK_EQ_INT(num(model, "parameters"), 216776); /* the golden model's tensors */
  CHECK_EQ_INT(num(model, "weight_bytes"), 4 * 216776);
  /* nothing quantized: a step reads the weights as stored */
  CHECK_EQ_INT(num(model, "weight_bytes_read"), 4 * 216776);
  CHECK_EQ_INT(num(model, "quantized_tensors"), 0);
  CHECK(json_is_null(json_object_get(eng, "quant")));
  CHECK(num(model, "state_bytes_per_sequence") > 0);
  CHECK(num(model, "kv_bytes_per_token") > 0);
  CHECK_EQ_INT(num(model, "vocab"), 256);
  CHECK_EQ_INT(num(eng, "max_batch"), 4);
  CHECK(num(eng, "kv_pages") > 0);
  CHECK(num(eng, "load_s") > 0);
  CHECK(json_is_true(json_object_get(mach, "measured")));
  CHECK(num(mach, "bandwidth_gbs") > 0);
  CHECK(num(mach, "fma_gflops") > 0);
  CHECK_EQ_INT(num(pre, "tokens"), 64);
  CHECK(num(pre, "tok_s") > 0);
  CHECK(num(pre, "ttft_ms") > 0);
  CHECK(num(pre, "gflops") > 0);
  CHECK(num(pre, "vs_fma") > 0);
  /* an f32 checkpoint runs in f32 mode: its compute peak is the FMA's; the bf16 dot peak is
   * measured where the CPU has it (null otherwise) */
  CHECK_EQ_STR(json_string_value(json_object_get(eng, "precision")), "f32");
  CHECK_EQ_STR(json_string_value(json_object_get(eng, "compute_peak")), "f32 FMA");
  CHECK(num(pre, "vs_compute") == num(pre, "vs_fma"));
  json_t *bf = json_object_get(mach, "bf16_gflops"), *i8 = json_object_get(mach, "int8_gops");
  CHECK(json_is_null(bf) || json_number_value(bf) > 0);
  CHECK(json_is_null(i8) || json_number_value(i8) > 0);
  CHECK(json_is_array(dec) && json_array_size(dec) == 2);
  for (size_t i = 0; i < json_array_size(dec); i++) {
    json_t *x = json_array_get(dec, i);
    CHECK_EQ_INT(num(x, "batch"), i == 0 ? 1 : 4);
    CHECK(json_object_get(x, "skipped") == NULL);
    CHECK(num(x, "tok_s") > 0);
    CHECK(num(x, "step_ms") > 0);
    CHECK_EQ_INT(num(x, "steady_steps"), 4);
    CHECK(num(x, "bytes_per_step") >= num(model, "weight_bytes"));
    CHECK(num(x, "bytes_per_token") > 0);
    CHECK(num(x, "gbs") > 0);
    CHECK(num(x, "vs_bandwidth") > 0);
    CHECK(num(x, "gflops") > 0);
    CHECK(num(x, "vs_fma_peak") > 0);
    CHECK(num(x, "vs_compute") == num(x, "vs_fma_peak"));
  }
  CHECK(num(mem, "peak_rss_bytes") > 0);
  CHECK(num(mem, "cache_bytes") > 0);
  CHECK_EQ_INT(num(o, "repeats"), 1);
  CHECK_EQ_INT(num(o, "decode_steps"), 4);
  CHECK(num(o, "total_s") > 0);
  CHECK(json_is_object(json_object_get(o, "units")));
  json_decref(o);
}

/* bench --quant int8: the decode bytes a step reads are the quantized weights', counted
 * independently here from `inspect --quant-report` (every weight the loader quantizes, N x K)
 * in MatMulNBits' layout: N x ceil(K/32) blocks of 32 codes of 8 bits plus an f32 scale (the
 * golden checkpoint's io dtype), in place of their f32 bytes; lm_head skipped by name; the
 * compute peak is the int8 dot's. Runs once the bench takes --quant (tools/quant_flags.h). */
static void test_bench_quant(void) {
  CHECK_EQ_INT(run("bench --help"), 0);
  if (!g_stdout || !strstr(g_stdout, "--quant ")) {
    fprintf(stderr, "       (bench has no --quant yet: test_bench_quant not run)\n");
    return;
  }
  char args[4096];
  snprintf(args, sizeof args, "inspect '%s' --quant-report --json", g_ckpt);
  CHECK_EQ_INT(run(args), 0);
  json_t *rep = json_loads(g_stdout ? g_stdout : "", 0, NULL);
  json_t *ts = json_object_get(rep, "tensors");
  CHECK(json_is_array(ts) && json_array_size(ts) > 1);
  int64_t quantized = 0, f32_bytes = 0, q_bytes = 0;
  for (size_t i = 0; i < json_array_size(ts); i++) {
    json_t *t = json_array_get(ts, i), *sh = json_object_get(t, "shape");
    if (strcmp(json_string_value(json_object_get(t, "name")), "lm_head.weight") == 0) continue;
    const int64_t n = json_integer_value(json_array_get(sh, 0)),
                  k = json_integer_value(json_array_get(sh, 1)), kb = (k + 31) / 32;
    quantized++;
    f32_bytes += 4 * n * k;
    q_bytes += n * kb * 32 + n * kb * 4;
  }
  json_decref(rep);
  snprintf(args, sizeof args,
           "bench --model '%s' --json --prompt 16 --decode-steps 2 --batches 1 --repeats 1 "
           "--threads 1 --quant int8 --quant-skip lm_head",
           g_ckpt);
  json_t *o = bench_json(args);
  if (!o) return;
  json_t *model = json_object_get(o, "model"), *eng = json_object_get(o, "engine");
  json_t *mach = json_object_get(o, "machine"), *pre = json_object_get(o, "prefill");
  json_t *q = json_object_get(eng, "quant");
  CHECK_EQ_INT(num(q, "bits"), 8);
  CHECK_EQ_INT(num(q, "block_size"), 32);
  CHECK(json_is_false(json_object_get(q, "asymmetric")));
  CHECK_EQ_INT(num(q, "accuracy_level"), 4);
  CHECK_EQ_STR(json_string_value(json_object_get(q, "skip")), "lm_head");
  CHECK_EQ_INT(num(model, "weight_bytes"), 4 * 216776);
  CHECK_EQ_INT(num(model, "quantized_tensors"), quantized);
  CHECK_EQ_INT(num(model, "weight_bytes_read"), 4 * 216776 - f32_bytes + q_bytes);
  json_t *d0 = json_array_get(json_object_get(o, "decode"), 0);
  CHECK(num(d0, "bytes_per_step") >= num(model, "weight_bytes_read"));
  CHECK(num(d0, "bytes_per_step") < num(model, "weight_bytes"));
  json_t *i8 = json_object_get(mach, "int8_gops");
  if (json_is_number(i8)) { /* the CPU has vpdpbusd: accuracy_level 4 is measured against it */
    CHECK_EQ_STR(json_string_value(json_object_get(eng, "compute_peak")), "int8 dot");
    CHECK_NEAR(num(pre, "vs_compute"), num(pre, "gflops") / json_number_value(i8), 1e-6);
  }
  json_decref(o);
}

static void test_bench_table_and_usage(void) {
  char args[4096];
  /* batch 8 is above --max-batch 4: skipped with a note, the rest measured */
  snprintf(args, sizeof args,
           "bench --model '%s' --prompt 16 --decode-steps 2 --batches 2,8 --repeats 1 "
           "--max-batch 4 --threads 1",
           g_ckpt);
  CHECK_EQ_INT(run(args), 0);
  CHECK_CONTAINS(g_stdout, "prefill   16 tokens");
  CHECK_CONTAINS(g_stdout, "skipped: above the engine's max_batch (4)");
  CHECK_CONTAINS(g_stdout, "peak RSS");
  CHECK_CONTAINS(g_stdout, "machine   1 threads");
  CHECK_EQ_INT(run("bench --help"), 0);
  CHECK_CONTAINS(g_stdout, "usage: pagedhybrid bench");
  CHECK_EQ_INT(run("bench"), 2);
  CHECK_CONTAINS(g_stderr, "--model DIR|PKG is required");
  static const char *const bad[] = {"--batches 0", "--batches 1,,2",  "--batches 1,",
                                    "--repeats 0", "--prompt x",      "--decode-steps 0",
                                    "--json 1",    "--precision bf15"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(args, sizeof args, "bench --model '%s' %s", g_ckpt, bad[i]);
    CHECK_EQ_INT(run(args), 2);
  }
  snprintf(args, sizeof args, "bench --model '%s/nonexistent' --repeats 1", g_tmp);
  CHECK_EQ_INT(run(args), 1);
  snprintf(args, sizeof args, "run --model '%s' --requests x.jsonl --precision F32", g_ckpt);
  CHECK_EQ_INT(run(args), 2);
  CHECK_CONTAINS(g_stderr, "--precision F32: expected f32, bf16 or auto");
}

/* --speculative replay: the speculative section in place of decode, every key docs/bench.md
 * lists; at p = 1 every draft is kept (K + 1 tokens a step), at p = 0 none. bench itself fails
 * when a speculative run's tokens differ from plain decode's, so exit 0 is the exactness check. */
static void test_bench_speculative(void) {
  char args[4096];
  snprintf(args, sizeof args,
           "bench --model '%s' --json --prompt 16 --decode-steps 3 --batches 1,2 --repeats 1 "
           "--threads 1 --speculative replay --draft-tokens 1,3 --acceptance 0,0.5,1",
           g_ckpt);
  json_t *o = bench_json(args);
  if (!o) return;
  CHECK(json_object_get(o, "decode") == NULL);
  CHECK(num(json_object_get(o, "prefill"), "tok_s") > 0);
  json_t *sp = json_object_get(o, "speculative");
  CHECK(json_is_object(sp));
  CHECK_EQ_STR(json_string_value(json_object_get(sp, "method")), "replay");
  CHECK_EQ_INT(num(sp, "state_update_capacity"), 8);
  CHECK(json_is_true(json_object_get(sp, "exact")));
  CHECK_EQ_INT(json_array_size(json_object_get(sp, "draft_tokens")), 2);
  CHECK_EQ_INT(json_array_size(json_object_get(sp, "acceptance")), 3);
  json_t *bs = json_object_get(sp, "batches");
  CHECK(json_is_array(bs) && json_array_size(bs) == 2);
  for (size_t i = 0; i < json_array_size(bs); i++) {
    json_t *b = json_array_get(bs, i);
    const int B = i == 0 ? 1 : 2;
    CHECK_EQ_INT(num(b, "batch"), B);
    CHECK(json_object_get(b, "skipped") == NULL);
    CHECK_EQ_INT(num(b, "reference_tokens"), 2 + 4 * (3 + 2)); /* 2 + (max K + 1)(steps + 2) */
    json_t *pl = json_object_get(b, "plain");
    CHECK(num(pl, "tok_s") > 0);
    CHECK(num(pl, "step_ms") > 0);
    CHECK_EQ_INT(num(pl, "steady_steps"), 3);
    CHECK(num(pl, "bytes_per_step") > 0);
    CHECK(num(pl, "gbs") > 0);
    CHECK(num(pl, "vs_bandwidth") > 0);
    CHECK(num(pl, "gflops") > 0);
    CHECK(num(pl, "vs_fma_peak") > 0);
    json_t *runs = json_object_get(b, "runs");
    CHECK(json_is_array(runs) && json_array_size(runs) == 6);
    for (size_t j = 0; j < json_array_size(runs); j++) {
      json_t *r = json_array_get(runs, j);
      const int k = j < 3 ? 1 : 3;
      const double p = j % 3 == 0 ? 0.0 : j % 3 == 1 ? 0.5 : 1.0;
      CHECK_EQ_INT(num(r, "draft_tokens"), k);
      CHECK(num(r, "p") == p);
      CHECK_EQ_INT(num(r, "steady_steps"), 3);
      const double acc = num(r, "acceptance"), tps = num(r, "tokens_per_step");
      if (p == 0.0) {
        CHECK(acc == 0.0);
        CHECK(tps == 1.0);
      } else if (p == 1.0) {
        CHECK(acc == 1.0);
        CHECK(tps == k + 1);
      } else {
        CHECK(acc >= 0.0 && acc <= 1.0);
        CHECK(tps >= 1.0 && tps <= k + 1);
      }
      CHECK(num(r, "tok_s") > 0);
      CHECK(num(r, "step_ms") > 0);
      CHECK(num(r, "speedup") > 0);
      CHECK(num(r, "verify_cost") > 0);
      CHECK(num(r, "gflops") > 0);
      CHECK(num(r, "vs_fma_peak") > 0);
    }
  }
  json_decref(o);
  /* the table */
  snprintf(args, sizeof args,
           "bench --model '%s' --prompt 16 --decode-steps 2 --batches 2 --repeats 1 --threads 1 "
           "--speculative replay --draft-tokens 2 --acceptance 1",
           g_ckpt);
  CHECK_EQ_INT(run(args), 0);
  CHECK_CONTAINS(g_stdout, "speculative replay drafter");
  CHECK_CONTAINS(g_stdout, "batch 2  plain ");
  CHECK_CONTAINS(g_stdout, "      2  1.00     1.000      3.00");
  /* usage */
  static const char *const bad[] = {"--draft-tokens 2",
                                    "--acceptance 0.5",
                                    "--speculative ngram",
                                    "--speculative replay --draft-tokens 0",
                                    "--speculative replay --draft-tokens 9",
                                    "--speculative replay --draft-tokens 1,",
                                    "--speculative replay --acceptance 1.5",
                                    "--speculative replay --acceptance -0.1",
                                    "--speculative replay --acceptance x",
                                    "--speculative replay --acceptance 0.5,,1",
                                    "--speculative replay --state-update-capacity 9"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(args, sizeof args, "bench --model '%s' %s", g_ckpt, bad[i]);
    CHECK_EQ_INT(run(args), 2);
  }
  CHECK_CONTAINS(g_stderr, "--state-update-capacity");
  /* drafts beyond the engine's capacity: the engine refuses the request, bench says why */
  snprintf(args, sizeof args,
           "bench --model '%s' --prompt 16 --decode-steps 2 --batches 1 --repeats 1 --threads 1 "
           "--speculative replay --draft-tokens 4 --acceptance 1 --state-update-capacity 2",
           g_ckpt);
  CHECK_EQ_INT(run(args), 1);
  CHECK_CONTAINS(g_stderr, "num_draft_tokens = 4");
}

/* --quant on every command that loads a checkpoint (docs/quantization.md "Quantizing at load"):
 * the startup line says what the engine serves; run and generate's paged engine give the same
 * tokens (one engine, the same graph); bench --json reports it; a package is refused (its
 * weights run as exported); and every malformed --quant* option is a usage error (exit 2) on run,
 * bench, generate and serve alike. */
static void test_quant_flags(void) {
  char args[4096], req[1024];
  snprintf(req, sizeof req, "%s/quant.jsonl", g_tmp);
  write_text(req, "{\"id\": \"a\", \"prompt_tokens\": [" GREEDY_PROMPT
                  "], \"max_new_tokens\": 8, \"ignore_eos\": true}\n");
  snprintf(args, sizeof args, "run --model '%s' --requests '%s' --quant int8", g_ckpt, req);
  CHECK_EQ_INT(run(args), 0);
  CHECK_CONTAINS(g_stderr,
                 "run: weights int8 (block 32, symmetric, accuracy level 4; 26 linear layers)");
  json_t *a = parse_lines(g_stdout);
  /* generate's paged engine, the same options: the same tokens */
  snprintf(args, sizeof args,
           "generate --model '%s' --layout paged --tokens " GREEDY_PROMPT
           " --max-new 8 --quant int8",
           g_ckpt);
  CHECK_EQ_INT(run(args), 0);
  CHECK_CONTAINS(g_stderr, "generate: weights int8 (block 32");
  int64_t ids[8];
  CHECK_EQ_INT(cli_generated_ids(8, ids), 8);
  json_t *toks = a ? json_object_get(json_array_get(a, 0), "tokens") : NULL;
  CHECK(json_array_size(toks) == 8);
  for (size_t i = 0; i < json_array_size(toks) && i < 8; i++)
    CHECK_EQ_INT(json_integer_value(json_array_get(toks, i)), ids[i]);
  json_decref(a);
  /* the dense session quantizes too; skip and the other options reach the line */
  snprintf(args, sizeof args,
           "generate --model '%s' --tokens " GREEDY_PROMPT
           " --max-new 2 --quant int4 --quant-block 64 --quant-asym --quant-accuracy-level 1 "
           "--quant-skip lm_head",
           g_ckpt);
  CHECK_EQ_INT(run(args), 0);
  CHECK_CONTAINS(g_stderr, "generate: weights int4 (block 64, asymmetric, accuracy level 1; 25 "
                           "linear layers, skip lm_head)");
  snprintf(args, sizeof args,
           "bench --model '%s' --prompt 16 --decode-steps 2 --batches 1 --repeats 1 --threads 1 "
           "--json --quant int4",
           g_ckpt);
  CHECK_EQ_INT(run(args), 0);
  json_error_t e;
  json_t *o = json_loads(g_stdout, 0, &e);
  json_t *q = json_object_get(json_object_get(o, "engine"), "quant");
  CHECK(q != NULL);
  CHECK_EQ_INT(json_integer_value(json_object_get(q, "bits")), 4);
  CHECK_EQ_INT(json_integer_value(json_object_get(q, "block_size")), 32);
  CHECK_EQ_INT(json_integer_value(json_object_get(q, "accuracy_level")), 4);
  CHECK_EQ_INT(json_integer_value(json_object_get(q, "linear_layers")), 26);
  json_decref(o);
  /* a package (test_run_package exported it) runs as exported */
  char pkg[1024];
  snprintf(pkg, sizeof pkg, "%s/paged-cpu", g_tmp);
  snprintf(args, sizeof args, "run --model '%s' --requests '%s' --quant int8", pkg, req);
  CHECK_EQ_INT(run(args), 1);
  CHECK_CONTAINS(g_stderr, "PH_ERR_INVALID_ARGUMENT");
  CHECK_CONTAINS(g_stderr, "quantize at export");
  static const char *const bad[] = {
      "--quant int3",
      "--quant-block 64",
      "--quant-asym",
      "--quant int8 --quant-block 48",
      "--quant int8 --quant-block 512",
      "--quant int8 --quant-sym --quant-asym",
      "--quant int8 --quant-accuracy-level 2",
      "--quant int4 --quant-skip ''",
  };
  static const char *const says[] = {
      "--quant int3: expected int8, int4 or none",
      "--quant-* options need --quant int8 or int4",
      "--quant-* options need --quant int8 or int4",
      "--quant-block 48: expected a power of two",
      "must be in",
      "--quant-sym and --quant-asym: give one",
      "--quant-accuracy-level 2: expected 1 (f32) or 4 (int8)",
      "--quant-skip: expected a name",
  };
  static const char *const cmds[] = {"run --requests x.jsonl", "bench", "generate --tokens 1,2",
                                     "serve --port 0"};
  for (size_t c = 0; c < sizeof cmds / sizeof cmds[0]; c++)
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      snprintf(args, sizeof args, "%s --model '%s' %s", cmds[c], g_ckpt, bad[i]);
      const int rc = run(args);
      if (!CHECK(rc == 2)) fprintf(stderr, "       exit %d: pagedhybrid %s\n", rc, args);
      CHECK_CONTAINS(g_stderr, says[i]);
    }
}

/* The prefix cache through `run` (issue 19; docs/run.md "Prefix cache"): with --prefill-chunk 16
 * (snapshot boundaries every 16 tokens, the page size) a 40-token prompt computed once is served
 * from the cache up to 32 tokens for a request with the same prompt and for one that shares
 * only its first 32 tokens; the lines say n_cached_tokens 32 (and the first line none), the
 * summary the hits, and the tokens equal those of the same file with --no-prefix-cache. With the
 * default chunk (256) nothing is a boundary below 40: no hits. The flags' bad values: exit 2. */
static void test_run_prefix_cache(void) {
  char req[1024], args[4096], prompt[512] = "", other[512] = "";
  snprintf(req, sizeof req, "%s/prefix.jsonl", g_tmp);
  for (int i = 0; i < 40; i++) {
    char t[16];
    snprintf(t, sizeof t, "%s%d", i ? ", " : "", 1 + (i * 37) % 200);
    strcat(prompt, t);
    snprintf(t, sizeof t, "%s%d", i ? ", " : "", i < 32 ? 1 + (i * 37) % 200 : 3 + i);
    strcat(other, t);
  }
  char text[4096];
  snprintf(text, sizeof text,
           "{\"id\": \"first\", \"prompt_tokens\": [%s], \"max_new_tokens\": 4, \"ignore_eos\": "
           "true}\n"
           "{\"id\": \"same\", \"prompt_tokens\": [%s], \"max_new_tokens\": 4, \"ignore_eos\": "
           "true, \"arrive_step\": 20}\n"
           "{\"id\": \"branch\", \"prompt_tokens\": [%s], \"max_new_tokens\": 4, \"ignore_eos\": "
           "true, \"arrive_step\": 20}\n",
           prompt, prompt, other);
  write_text(req, text);
  static const char *const IDS3[] = {"first", "same", "branch"};
  static const int64_t CACHED[] = {0, 32, 32};

  snprintf(args, sizeof args, "run --model '%s' --requests '%s' --prefill-chunk 16 --threads 1",
           g_ckpt, req);
  CHECK_EQ_INT(run(args), 0);
  CHECK_CONTAINS(g_stderr, "run: prefix cache: 2 of 3 lookups hit, 64 of 120 prompt tokens from "
                           "the cache (53.3%); holds ");
  json_t *on = parse_lines(g_stdout);
  snprintf(args, sizeof args,
           "run --model '%s' --requests '%s' --prefill-chunk 16 --threads 1 --no-prefix-cache",
           g_ckpt, req);
  CHECK_EQ_INT(run(args), 0);
  CHECK_CONTAINS(g_stderr, "run: prefix cache: off\n");
  json_t *off = parse_lines(g_stdout);
  CHECK(on && off && json_array_size(on) == 3 && json_array_size(off) == 3);
  for (size_t i = 0; on && off && i < 3 && i < json_array_size(on) && i < json_array_size(off);
       i++) {
    json_t *lon = json_array_get(on, i), *loff = json_array_get(off, i);
    CHECK_EQ_STR(field(lon, "id"), IDS3[i]);
    CHECK_EQ_INT(n_tokens(lon), 4);
    json_t *cached = json_object_get(lon, "n_cached_tokens");
    const int64_t got = cached ? json_integer_value(cached) : 0;
    if (!CHECK(got == CACHED[i]))
      fprintf(stderr, "       %s: n_cached_tokens %lld, expected %lld\n", IDS3[i], (long long)got,
              (long long)CACHED[i]);
    CHECK(json_object_get(loff, "n_cached_tokens") == NULL);
    /* the same tokens and counts with the cache and without; only n_cached_tokens differs */
    json_object_del(lon, "n_cached_tokens");
    char *son = without_timings(lon), *soff = without_timings(loff);
    CHECK_EQ_STR(son, soff);
    free(son);
    free(soff);
  }
  json_decref(on);
  json_decref(off);

  /* the default chunk (256): no boundary below 40 tokens, no hit; a snapshot budget as given */
  snprintf(args, sizeof args, "run --model '%s' --requests '%s' --threads 1 --prefix-cache-mb 3",
           g_ckpt, req);
  CHECK_EQ_INT(run(args), 0);
  CHECK_CONTAINS(g_stderr, "run: prefix cache: 0 of 3 lookups hit, 0 of 120 prompt tokens");
  CHECK_CONTAINS(g_stderr, " of 3.0 MiB); evicted ");
  CHECK(g_stdout && !strstr(g_stdout, "n_cached_tokens"));

  static const char *const bad[] = {
      "--prefix-cache-mb -1",
      "--prefix-cache-mb 1.5",
      "--prefix-cache-mb ''",
      "--prefix-cache-mb 1073741825",
      "--no-prefix-cache --prefix-cache-mb 8",
      "--no-prefix-cache=1",
  };
  static const char *const says[] = {
      "--prefix-cache-mb must be in [0, 1073741824], got -1",
      "--prefix-cache-mb expects an integer, got \"1.5\"",
      "--prefix-cache-mb expects an integer, got \"\"",
      "--prefix-cache-mb must be in [0, 1073741824], got 1073741825",
      "give --no-prefix-cache or --prefix-cache-mb, not both",
      "--no-prefix-cache takes no value",
  };
  static const char *const cmds[] = {"run --requests x.jsonl", "serve --port 0"};
  for (size_t c = 0; c < sizeof cmds / sizeof cmds[0]; c++)
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      snprintf(args, sizeof args, "%s --model '%s' %s", cmds[c], g_ckpt, bad[i]);
      const int rc = run(args);
      if (!CHECK(rc == 2)) fprintf(stderr, "       exit %d: pagedhybrid %s\n", rc, args);
      CHECK_CONTAINS(g_stderr, says[i]);
    }
  CHECK_EQ_INT(run("run --help"), 0);
  CHECK_CONTAINS(g_stdout, "--no-prefix-cache");
  CHECK_CONTAINS(g_stdout, "--prefix-cache-mb MiB");
  CHECK_EQ_INT(run("serve --help"), 0);
  CHECK_CONTAINS(g_stdout, "--no-prefix-cache");
  CHECK_CONTAINS(g_stdout, "--prefix-cache-mb MiB");
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "%s", check_env("PH_TMP_DIR"));
  check_data(g_ckpt, sizeof g_ckpt, "golden/qwen35-tiny-f32/checkpoint");
  char rm[600];
  snprintf(rm, sizeof rm, "rm -rf '%s'", g_tmp); /* start clean: export needs a fresh dir */
  if (system(rm) != 0) return 1;
  diag d;
  if (path_mkdirs(g_tmp, &d) != PH_OK) return 1;
  cli_testing_init(g_tmp);
  RUN(test_run_golden);
  RUN(test_run_package);
  RUN(test_run_usage);
  RUN(test_run_bad_files);
  RUN(test_run_out_first);
  RUN(test_run_out_replaced);
  RUN(test_run_strict_and_nonfinite);
  RUN(test_run_speculative);
  RUN(test_run_prefix_cache);
  RUN(test_bench_json);
  RUN(test_bench_quant);
  RUN(test_bench_table_and_usage);
  RUN(test_bench_speculative);
  RUN(test_quant_flags);
  cli_testing_done();
  return check_finish();
}
