/* The engine's two commands as a user meets them: `pagedhybrid run` over a requests file (every
 * id back in input order, arrivals at different steps, a removal mid-decode, a refused request
 * that leaves the others alone, greedy tokens equal to `generate`'s paged run, the same output
 * twice apart from timings, a package and its checkpoint agreeing) and its exit codes; and
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
  const char *p = g_stdout ? strstr(g_stdout, "generated:") : NULL;
  CHECK(p != NULL);
  if (!p) return 0;
  p += strlen("generated:");
  int n = 0;
  while (n < max_new) {
    char *end = NULL;
    long long v = strtoll(p, &end, 10);
    if (end == p) break;
    out[n++] = v;
    p = *end == ',' ? end + 1 : end;
  }
  return n;
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
  };
  static const char *const says[] = {
      "expects an integer", "must be in", "must be in",         "expects an integer",
      "must be in",         "must be in", "power of two",       "f32, f16 or bf16",
      "must be in",         "not both",   "above --max-tokens", "unknown option",
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

static double num(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  CHECK(json_is_number(v));
  if (!json_is_number(v)) fprintf(stderr, "       key \"%s\" is not a number\n", key);
  return json_number_value(v);
}

static void test_bench_json(void) {
  char args[4096];
  snprintf(args, sizeof args,
           "bench --model '%s' --json --prompt 64 --decode-steps 4 --batches 1,4 --repeats 1",
           g_ckpt);
  CHECK_EQ_INT(run(args), 0);
  json_error_t e;
  json_t *o = json_loads(g_stdout ? g_stdout : "", 0, &e);
  CHECK(o != NULL);
  if (!o) {
    fprintf(stderr, "       %s\n%s\n", e.text, g_stderr ? g_stderr : "");
    return;
  }
  json_t *model = json_object_get(o, "model"), *eng = json_object_get(o, "engine");
  json_t *mach = json_object_get(o, "machine"), *pre = json_object_get(o, "prefill");
  json_t *dec = json_object_get(o, "decode"), *mem = json_object_get(o, "memory");
  CHECK_EQ_STR(json_string_value(json_object_get(model, "kind")), "checkpoint");
  CHECK_EQ_INT(num(model, "parameters"), 216776); /* the golden model's tensors */
  CHECK_EQ_INT(num(model, "weight_bytes"), 4 * 216776);
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
  }
  CHECK(num(mem, "peak_rss_bytes") > 0);
  CHECK(num(mem, "cache_bytes") > 0);
  CHECK_EQ_INT(num(o, "repeats"), 1);
  CHECK_EQ_INT(num(o, "decode_steps"), 4);
  CHECK(num(o, "total_s") > 0);
  CHECK(json_is_object(json_object_get(o, "units")));
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
  static const char *const bad[] = {"--batches 0", "--batches 1,,2", "--batches 1,",
                                    "--repeats 0", "--prompt x",     "--decode-steps 0",
                                    "--json 1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(args, sizeof args, "bench --model '%s' %s", g_ckpt, bad[i]);
    CHECK_EQ_INT(run(args), 2);
  }
  snprintf(args, sizeof args, "bench --model '%s/nonexistent' --repeats 1", g_tmp);
  CHECK_EQ_INT(run(args), 1);
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
  CHECK_EQ_INT(run(args), 0);
  json_error_t e;
  json_t *o = json_loads(g_stdout ? g_stdout : "", 0, &e);
  CHECK(o != NULL);
  if (!o) {
    fprintf(stderr, "       %s\n%s\n", e.text, g_stderr ? g_stderr : "");
    return;
  }
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
  RUN(test_bench_json);
  RUN(test_bench_table_and_usage);
  RUN(test_bench_speculative);
  cli_testing_done();
  return check_finish();
}
