/* test_request_file — the requests JSONL reader (every field, every error with its line) and
 * the result line writer (parsed back with jansson). */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fmap.h"
#include "check.h"
#include "engine/request_file.h"

static ph_status parse(const char *text, request_list *l, diag *d) {
  return request_list_parse(text, strlen(text), "req.jsonl", l, d);
}

/* text must fail with status, the message naming "req.jsonl:<line>:" and needle. */
static void expect_error(const char *text, ph_status status, int line, const char *needle) {
  request_list l = {(request_spec *)1, 99};
  diag d;
  diag_clear(&d);
  CHECK_STATUS(parse(text, &l, &d), status, d.msg);
  char where[64];
  snprintf(where, sizeof where, "req.jsonl:%d:", line);
  CHECK_CONTAINS(d.msg, where);
  CHECK_CONTAINS(d.msg, needle);
  CHECK(l.items == NULL && l.n == 0); /* nothing handed back */
}

static void test_all_fields(void) {
  const char *text =
      "{\"id\": \"r1\", \"prompt_tokens\": [1, 2, 3], \"max_new_tokens\": 32, \"arrive_step\": 4, "
      "\"temperature\": 0.7, \"top_k\": 50, \"top_p\": 0.9, \"min_p\": 0.05, \"seed\": 42, "
      "\"stop_token_ids\": [2, 7], \"ignore_eos\": true, \"remove_step\": 12}\n"
      "\n"
      "   \t\r\n"
      "{\"id\": 17, \"prompt_tokens\": [0]}\r\n"
      "{\"prompt_tokens\": [5, 6], \"id\": \"x\", \"temperature\": 1, \"top_p\": 1, \"seed\": 0, "
      "\"remove_step\": null, \"stop_token_ids\": [], \"max_new_tokens\": null}";
  request_list l;
  diag d;
  CHECK_STATUS(parse(text, &l, &d), PH_OK, d.msg);
  CHECK_EQ_INT(l.n, 3);
  if (l.n != 3) return;
  const request_spec *a = &l.items[0], *b = &l.items[1], *c = &l.items[2];
  CHECK_EQ_STR(a->id, "r1");
  CHECK_EQ_INT(a->line, 1);
  CHECK_EQ_INT(a->n_prompt, 3);
  CHECK(a->prompt[0] == 1 && a->prompt[1] == 2 && a->prompt[2] == 3);
  CHECK_EQ_INT(a->sampling.max_new_tokens, 32);
  CHECK_EQ_INT(a->arrive_step, 4);
  /* floats parsed from decimals: within half an f32 ulp of the decimal, 2^-25 = 3e-8 for values
   * in [0.5, 1) and less below; 1e-7 is 3x that, and any misparse is far larger */
  CHECK_NEAR(a->sampling.temperature, 0.7, 1e-7);
  CHECK_EQ_INT(a->sampling.top_k, 50);
  CHECK_NEAR(a->sampling.top_p, 0.9, 1e-7);
  CHECK_NEAR(a->sampling.min_p, 0.05, 1e-7);
  CHECK_EQ_INT(a->sampling.seed, 42);
  CHECK_EQ_INT(a->sampling.n_stop_token_ids, 2);
  CHECK(a->sampling.stop_token_ids[0] == 2 && a->sampling.stop_token_ids[1] == 7);
  CHECK_EQ_INT(a->sampling.ignore_eos, 1);
  CHECK_EQ_INT(a->remove_step, 12);

  sampling_params def = sampling_params_default();
  CHECK_EQ_STR(b->id, "17"); /* integer ids are kept as decimal strings */
  CHECK_EQ_INT(b->line, 4);
  CHECK_EQ_INT(b->n_prompt, 1);
  CHECK_EQ_INT(b->prompt[0], 0);
  CHECK(memcmp(&b->sampling, &def, sizeof def) == 0); /* every default */
  CHECK_EQ_INT(b->arrive_step, 0);
  CHECK_EQ_INT(b->remove_step, -1);

  CHECK_EQ_STR(c->id, "x");
  CHECK_EQ_INT(c->line, 5);
  CHECK_EQ_INT(c->sampling.temperature, 1);
  CHECK_EQ_INT(c->remove_step, -1);             /* null = never */
  CHECK_EQ_INT(c->sampling.max_new_tokens, 16); /* null = default */
  CHECK_EQ_INT(c->sampling.n_stop_token_ids, 0);
  request_list_free(&l);
  CHECK(l.items == NULL && l.n == 0);
  request_list_free(&l); /* twice is fine */
  request_list_free(NULL);
}

static void test_missing_and_duplicate(void) {
  expect_error("{\"prompt_tokens\": [1]}", PH_ERR_CONFIG_MISSING_FIELD, 1, "id is missing");
  expect_error("{\"id\": null, \"prompt_tokens\": [1]}", PH_ERR_CONFIG_MISSING_FIELD, 1,
               "id is missing");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1]}\n{\"id\": \"b\"}",
               PH_ERR_CONFIG_MISSING_FIELD, 2, "prompt_tokens is missing");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1]}\n\n{\"id\": \"a\", \"prompt_tokens\": [2]}",
               PH_ERR_CONFIG_INVALID, 3, "id \"a\" repeats the id of line 1");
  /* integer 5 and string "5" are the same id */
  expect_error("{\"id\": 5, \"prompt_tokens\": [1]}\n{\"id\": \"5\", \"prompt_tokens\": [1]}",
               PH_ERR_CONFIG_INVALID, 2, "repeats the id of line 1");
  /* many ids: the hash set grows, a late duplicate still found */
  size_t cap = 200 * 64 + 128, used = 0;
  char *text = malloc(cap);
  for (int i = 0; i < 200; i++)
    used += (size_t)snprintf(text + used, cap - used,
                             "{\"id\": \"q%d\", \"prompt_tokens\": [%d]}\n", i, i);
  request_list l;
  diag d;
  CHECK_STATUS(request_list_parse(text, used, "req.jsonl", &l, &d), PH_OK, d.msg);
  CHECK_EQ_INT(l.n, 200);
  request_list_free(&l);
  snprintf(text + used, cap - used, "{\"id\": \"q137\", \"prompt_tokens\": [1]}\n");
  expect_error(text, PH_ERR_CONFIG_INVALID, 201, "id \"q137\" repeats the id of line 138");
  free(text);
}

static void test_prompt_errors(void) {
  expect_error("{\"id\": \"a\", \"prompt_tokens\": []}", PH_ERR_CONFIG_INVALID, 1,
               "prompt_tokens is empty");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1, -3]}", PH_ERR_CONFIG_INVALID, 1,
               "prompt_tokens[1] = -3 is negative");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1, 2.5]}", PH_ERR_CONFIG_INVALID, 1,
               "prompt_tokens[1] is a real number, expected a non-negative integer");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1, 2.0]}", PH_ERR_CONFIG_INVALID, 1,
               "prompt_tokens[1] is a real number");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [\"7\"]}", PH_ERR_CONFIG_INVALID, 1,
               "prompt_tokens[0] is a string");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": 7}", PH_ERR_CONFIG_INVALID, 1,
               "prompt_tokens is an integer, expected an array");
}

static void test_unknown_and_types(void) {
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"temprature\": 0.5}",
               PH_ERR_CONFIG_INVALID, 1, "unknown key \"temprature\"");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"Top_k\": 5}", PH_ERR_CONFIG_INVALID, 1,
               "unknown key \"Top_k\"");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"x\\ny\": 5}", PH_ERR_CONFIG_INVALID, 1,
               "unknown key \"x?y\""); /* control bytes are not printed */
  expect_error("{\"id\": true, \"prompt_tokens\": [1]}", PH_ERR_CONFIG_INVALID, 1,
               "id is a boolean, expected a string or a non-negative integer");
  expect_error("{\"id\": -4, \"prompt_tokens\": [1]}", PH_ERR_CONFIG_INVALID, 1,
               "id = -4 is negative");
  expect_error("{\"id\": \"\", \"prompt_tokens\": [1]}", PH_ERR_CONFIG_INVALID, 1, "id is empty");
  expect_error("{\"id\": \"0123456789012345678901234567890123456789012345678901234567890123\", "
               "\"prompt_tokens\": [1]}",
               PH_ERR_CONFIG_INVALID, 1, "id is 64 bytes, at most 63");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"max_new_tokens\": \"8\"}",
               PH_ERR_CONFIG_INVALID, 1, "max_new_tokens is a string, expected an integer");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"top_k\": 2.5}", PH_ERR_CONFIG_INVALID, 1,
               "top_k is a real number, expected an integer");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"temperature\": \"hot\"}",
               PH_ERR_CONFIG_INVALID, 1, "temperature is a string, expected a number");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"ignore_eos\": 1}", PH_ERR_CONFIG_INVALID,
               1, "ignore_eos is an integer, expected true or false");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"stop_token_ids\": 2}",
               PH_ERR_CONFIG_INVALID, 1, "stop_token_ids is an integer, expected an array");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"stop_token_ids\": [2, null]}",
               PH_ERR_CONFIG_INVALID, 1, "stop_token_ids[1] is null");
  expect_error("[1, 2]", PH_ERR_CONFIG_INVALID, 1, "the line is an array, expected a JSON object");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"seed\": -1}", PH_ERR_CONFIG_INVALID, 1,
               "seed = -1 is outside [0, ");
}

static void test_bad_values(void) {
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"max_new_tokens\": 0}",
               PH_ERR_CONFIG_INVALID, 1, "max_new_tokens = 0 is outside [1, ");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"arrive_step\": -1}",
               PH_ERR_CONFIG_INVALID, 1, "arrive_step = -1 is outside [0, ");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"remove_step\": -2}",
               PH_ERR_CONFIG_INVALID, 1, "remove_step = -2 is outside [-1, ");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"arrive_step\": 9, \"remove_step\": 3}",
               PH_ERR_CONFIG_INVALID, 1, "remove_step = 3 is before arrive_step = 9");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"temperature\": -0.1}",
               PH_ERR_CONFIG_INVALID, 1, "temperature = -0.1: must be finite and >= 0");
  /* beyond the float range: named with the value given, not as inf */
  expect_error(
      "{\"id\": \"a\", \"prompt_tokens\": [1], \"temperature\": 1e308}", PH_ERR_CONFIG_INVALID, 1,
      "temperature = 1e+308 is outside the range of a float (magnitude at most 3.40282e+38)");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"min_p\": -1e39}", PH_ERR_CONFIG_INVALID,
               1, "min_p = -1e+39 is outside the range of a float");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"top_k\": -1}", PH_ERR_CONFIG_INVALID, 1,
               "top_k = -1 is outside [0, 2147483647]");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"top_k\": 3000000000}",
               PH_ERR_CONFIG_INVALID, 1, "top_k = 3000000000 is outside");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"top_p\": 0}", PH_ERR_CONFIG_INVALID, 1,
               "top_p = 0: must be in (0, 1]");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"top_p\": 1.2}", PH_ERR_CONFIG_INVALID, 1,
               "top_p = 1.2");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"min_p\": 1}", PH_ERR_CONFIG_INVALID, 1,
               "min_p = 1: must be in [0, 1)");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"stop_token_ids\": [-2]}",
               PH_ERR_CONFIG_INVALID, 1, "stop_token_ids[0] = -2 is negative");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"stop_token_ids\": "
               "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}",
               PH_ERR_CONFIG_INVALID, 1, "stop_token_ids lists 17 ids, at most 16");
  /* the first error in file order wins; earlier good lines do not matter */
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1]}\n{\"id\": \"b\", \"prompt_tokens\": [1], "
               "\"top_p\": 2}\n{\"id\": \"c\"}",
               PH_ERR_CONFIG_INVALID, 2, "top_p = 2");
  /* huge token ids are the engine's to check against the vocabulary */
  request_list l;
  diag d;
  CHECK_STATUS(parse("{\"id\": \"a\", \"prompt_tokens\": [9223372036854775807]}", &l, &d), PH_OK,
               d.msg);
  CHECK_EQ_INT(l.n, 1);
  if (l.n == 1) CHECK(l.items[0].prompt[0] == INT64_MAX);
  request_list_free(&l);
}

static void test_malformed_json(void) {
  expect_error(
      "{\"id\": \"a\", \"prompt_tokens\": [1]}\n{\"id\": \"b\", \"prompt_tokens\": [1,]}\n",
      PH_ERR_JSON, 2, "column");
  expect_error("\n\n{\"id\": \"a\", \"prompt_tokens\": [1]", PH_ERR_JSON, 3, "req.jsonl:3:");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1]} {\"id\": \"b\", \"prompt_tokens\": [1]}",
               PH_ERR_JSON, 1, "end of file expected");
  expect_error("{\"id\": \"a\", \"id\": \"b\", \"prompt_tokens\": [1]}", PH_ERR_JSON, 1,
               "duplicate");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [99999999999999999999]}", PH_ERR_JSON, 1,
               "too big");
  expect_error("{\"id\": \"a\\u0000b\", \"prompt_tokens\": [1]}", PH_ERR_JSON, 1, "req.jsonl:1:");
  /* a NUL byte in the middle of a line */
  const char nul[] = "{\"id\": \"a\", \"prompt_tokens\": [1]}\n{\"id\"\0: 1}\n";
  request_list l;
  diag d;
  CHECK_STATUS(request_list_parse(nul, sizeof nul - 1, "req.jsonl", &l, &d), PH_ERR_JSON, d.msg);
  CHECK_CONTAINS(d.msg, "req.jsonl:2:");
}

static void test_blank_and_empty(void) {
  request_list l;
  diag d;
  CHECK_STATUS(parse("", &l, &d), PH_ERR_CONFIG_INVALID, d.msg);
  CHECK_CONTAINS(d.msg, "req.jsonl: no requests");
  CHECK_STATUS(parse("\n \n\t\r\n", &l, &d), PH_ERR_CONFIG_INVALID, d.msg);
  CHECK_CONTAINS(d.msg, "no requests");
  CHECK_STATUS(request_list_parse(NULL, 0, NULL, &l, &d), PH_ERR_CONFIG_INVALID, d.msg);
  CHECK_CONTAINS(d.msg, "requests: no requests"); /* default label */
  CHECK_STATUS(request_list_parse(NULL, 5, "x", &l, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(request_list_parse("{}", 2, "x", NULL, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  /* no trailing newline, CRLF, leading blank lines: line numbers count every line */
  CHECK_STATUS(parse("\r\n\n  {\"id\": \"z\", \"prompt_tokens\": [3]}  ", &l, &d), PH_OK, d.msg);
  CHECK_EQ_INT(l.n, 1);
  if (l.n == 1) CHECK_EQ_INT(l.items[0].line, 3);
  request_list_free(&l);
}

static void test_long_line(void) {
  enum { N = 300000 }; /* ~2.4 MB on one line */
  size_t cap = (size_t)N * 8 + 128, used = 0;
  char *text = malloc(cap);
  used += (size_t)snprintf(text, cap, "{\"id\": \"long\", \"prompt_tokens\": [");
  for (int i = 0; i < N; i++)
    used += (size_t)snprintf(text + used, cap - used, i ? ",%d" : "%d",
                             (int)(((int64_t)i * 7919) % 248320));
  used += (size_t)snprintf(text + used, cap - used, "], \"max_new_tokens\": 4}\n");
  request_list l;
  diag d;
  CHECK_STATUS(request_list_parse(text, used, "req.jsonl", &l, &d), PH_OK, d.msg);
  CHECK_EQ_INT(l.n, 1);
  if (l.n == 1) {
    CHECK_EQ_INT(l.items[0].n_prompt, N);
    CHECK_EQ_INT(l.items[0].prompt[N - 1], ((int64_t)(N - 1) * 7919) % 248320);
  }
  request_list_free(&l);
  free(text);
}

static void test_read_file(void) {
  const char *dir = check_env("PH_TMP_DIR");
  diag d;
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
  char path[4096];
  snprintf(path, sizeof path, "%s/requests.jsonl", dir);
  const char *text = "{\"id\": \"f1\", \"prompt_tokens\": [1, 2]}\n{\"id\": \"f2\", "
                     "\"prompt_tokens\": [3], \"top_p\": 7}\n";
  CHECK_STATUS(file_write_all(path, text, strlen(text), &d), PH_OK, d.msg);
  request_file *f = (request_file *)1;
  CHECK_STATUS(request_file_open(path, &f, &d), PH_ERR_CONFIG_INVALID, d.msg);
  CHECK(f == NULL);
  char where[4200];
  snprintf(where, sizeof where, "%s:2: top_p = 7", path);
  CHECK_CONTAINS(d.msg, where); /* the label is the path */
  size_t first_line = (size_t)(strchr(text, '\n') - text) + 1;
  CHECK_STATUS(file_write_all(path, text, first_line, &d), PH_OK, d.msg);
  CHECK_STATUS(request_file_open(path, &f, &d), PH_OK, d.msg);
  CHECK_EQ_INT(request_file_count(f), 1);
  request_file_close(f);
  snprintf(path, sizeof path, "%s/absent.jsonl", dir);
  CHECK_STATUS(request_file_open(path, &f, &d), PH_ERR_NOT_FOUND, d.msg);
  CHECK(f == NULL);
  CHECK_STATUS(request_file_open(dir, &f, &d), PH_ERR_IO, d.msg); /* a directory */
  CHECK_CONTAINS(d.msg, "not a regular file");
  request_file_close(NULL);
}

/* The index keeps where each line is and when it arrives; get parses a line again, in any
 * order; lines longer than the read block and a missing final newline are fine; a file that
 * changes after it was indexed is refused by name, not misread. */
static void test_stream_file(void) {
  const char *dir = check_env("PH_TMP_DIR");
  diag d;
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
  char path[4096];
  snprintf(path, sizeof path, "%s/stream.jsonl", dir);
  enum { LONG_N = 400000 }; /* ~2.6 MB: longer than the 1 MiB read block */
  size_t cap = (size_t)LONG_N * 8 + 4096, used = 0;
  char *text = malloc(cap);
  used += (size_t)snprintf(text + used, cap - used,
                           "{\"id\": \"late\", \"prompt_tokens\": [5, 6], \"arrive_step\": 9}\n"
                           "\r\n"
                           "{\"id\": 3, \"prompt_tokens\": [7], \"remove_step\": 4}\n"
                           "{\"id\": \"long\", \"arrive_step\": 2, \"prompt_tokens\": [");
  for (int i = 0; i < LONG_N; i++)
    used += (size_t)snprintf(text + used, cap - used, i ? ", %d" : "%d", (i * 31) % 1000);
  used +=
      (size_t)snprintf(text + used, cap - used, "]}\n  {\"id\": \"end\", \"prompt_tokens\": [1]}");
  CHECK_STATUS(file_write_all(path, text, used, &d), PH_OK, d.msg);
  request_file *f = NULL;
  CHECK_STATUS(request_file_open(path, &f, &d), PH_OK, d.msg);
  if (!f) {
    free(text);
    return;
  }
  CHECK_EQ_INT(request_file_count(f), 4);
  const int lines[4] = {1, 3, 4, 5};
  const int64_t arrive[4] = {9, 0, 2, 0}, remove[4] = {-1, 4, -1, -1};
  for (int i = 0; i < 4; i++) {
    const request_entry *e = request_file_entry(f, i);
    CHECK_EQ_INT(e->line, lines[i]);
    CHECK_EQ_INT(e->arrive_step, arrive[i]);
    CHECK_EQ_INT(e->remove_step, remove[i]);
    CHECK(e->offset + e->length <= used &&
          (e->offset + e->length == used || text[e->offset + e->length] == '\n'));
  }
  CHECK(request_file_entry(f, 4) == NULL && request_file_entry(f, -1) == NULL);
  for (int pass = 0; pass < 2; pass++)
    for (int k = 3; k >= 0; k--) { /* any order, twice */
      request_spec r;
      CHECK_STATUS(request_file_get(f, k, &r, &d), PH_OK, d.msg);
      CHECK_EQ_INT(r.line, lines[k]);
      if (k == 2) {
        CHECK_EQ_STR(r.id, "long");
        CHECK_EQ_INT(r.n_prompt, LONG_N);
        if (r.n_prompt == LONG_N) CHECK_EQ_INT(r.prompt[LONG_N - 1], ((LONG_N - 1) * 31) % 1000);
      }
      if (k == 1) CHECK_EQ_STR(r.id, "3");
      request_spec_free(&r);
      CHECK(r.prompt == NULL && r.n_prompt == 0);
    }
  request_spec r;
  CHECK_STATUS(request_file_get(f, 4, &r, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  /* the file changes under the index, in place (file_write_all would replace it by rename,
   * and the open file would still read the old bytes) */
  CHECK(truncate(path, (off_t)(used - 1)) == 0);
  CHECK_STATUS(request_file_get(f, 0, &r, &d), PH_ERR_IO, d.msg);
  CHECK_CONTAINS(d.msg, "changed since it was read");
  request_file_close(f);
  free(text);
}

/* jansson's allocation peak while parsing, through json_set_alloc_funcs. */
static size_t j_live, j_peak;
static void *j_malloc(size_t n) {
  size_t *p = malloc(n + 16);
  if (!p) return NULL;
  p[0] = n;
  j_live += n;
  if (j_live > j_peak) j_peak = j_live;
  return (char *)p + 16;
}
static void j_free(void *q) {
  if (!q) return;
  size_t *p = (size_t *)(void *)((char *)q - 16);
  j_live -= p[0];
  free(p);
}

/* A long prompt costs 8 bytes a token, not a JSON tree: jansson never sees its elements (it
 * took ~50 bytes a token, 25x a line of one-digit ids: 1.28 GB for a 50 MB line). Lines that are
 * not a plain integer array still go to jansson whole, so its messages stay; but at most
 * REQUEST_LINE_MAX_OTHER bytes of them. */
static void test_long_prompt_memory(void) {
  enum { N = 500000 }; /* one-digit ids: ~1 MB of line */
  size_t cap = (size_t)N * 2 + 256, used = 0;
  char *text = malloc(cap);
  used += (size_t)snprintf(text, cap, "{\"id\": \"d\", \"prompt_tokens\": [");
  for (int i = 0; i < N; i++) {
    text[used++] = (char)('0' + i % 10);
    text[used++] = i + 1 < N ? ',' : ']';
  }
  used += (size_t)snprintf(text + used, cap - used, ", \"max_new_tokens\": 2}");
  json_set_alloc_funcs(j_malloc, j_free);
  j_live = j_peak = 0;
  request_list l;
  diag d;
  CHECK_STATUS(request_list_parse(text, used, "req.jsonl", &l, &d), PH_OK, d.msg);
  const size_t peak = j_peak;
  json_set_alloc_funcs(malloc, free);
  printf("  %d-token line (%zu bytes): jansson peak %zu bytes\n", N, used, peak);
  /* what remains for jansson: the line's other keys (a handful of small values, well under a
   * kilobyte of JSON tree); 16 KiB is far below the ~25 MB a tree of the 500k tokens takes
   * (~50 bytes a token) */
  CHECK(peak < 16384);
  CHECK_EQ_INT(l.n, 1);
  if (l.n == 1) {
    CHECK_EQ_INT(l.items[0].n_prompt, N);
    CHECK_EQ_INT(l.items[0].prompt[N - 1], (N - 1) % 10);
    CHECK_EQ_INT(l.items[0].sampling.max_new_tokens, 2);
  }
  request_list_free(&l);
  free(text);

  /* more than 1 MiB that is not a plain integer prompt: refused before jansson builds it */
  const size_t big = REQUEST_LINE_MAX_OTHER + 100;
  text = malloc(big + 128);
  used = (size_t)snprintf(text, 128, "{\"id\": \"s\", \"prompt_tokens\": [");
  for (size_t i = 0; used + 4 < big; i++) used += (size_t)snprintf(text + used, 8, "\"x\",");
  used += (size_t)snprintf(text + used, 16, "\"x\"]}");
  expect_error(text, PH_ERR_LIMIT, 1, "neither whitespace nor a prompt_tokens array of integer");
  free(text);
}

/* The scanner agrees with jansson wherever it takes over, and leaves everything else to it. */
static void test_prompt_scanner(void) {
  request_list l;
  diag d;
  /* the key after others holding brackets, quotes and escapes; whitespace everywhere */
  const char *text =
      " { \"id\" : \"a]\\\"[{\" , \"stop_token_ids\" : [ 1 , 2 ] , \"prompt_tokens\"\t:\t[ 0 ,"
      "-0, 9223372036854775807 ,\t12 ] , \"seed\": 3 } ";
  CHECK_STATUS(parse(text, &l, &d), PH_OK, d.msg);
  CHECK_EQ_INT(l.n, 1);
  if (l.n == 1) {
    const request_spec *r = &l.items[0];
    CHECK_EQ_STR(r->id, "a]\"[{");
    CHECK_EQ_INT(r->n_prompt, 4);
    if (r->n_prompt == 4)
      CHECK(r->prompt[0] == 0 && r->prompt[1] == 0 && r->prompt[2] == INT64_MAX &&
            r->prompt[3] == 12);
    CHECK_EQ_INT(r->sampling.n_stop_token_ids, 2);
    CHECK_EQ_INT(r->sampling.seed, 3);
  }
  request_list_free(&l);
  /* errors the scanner meets: jansson's message and column, or the negative element */
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1, 01]}", PH_ERR_JSON, 1, "column");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1, 2e3]}", PH_ERR_CONFIG_INVALID, 1,
               "prompt_tokens[1] is a real number");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1, -9223372036854775808]}",
               PH_ERR_CONFIG_INVALID, 1, "prompt_tokens[1] = -9223372036854775808 is negative");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [4, -2, -5]}", PH_ERR_CONFIG_INVALID, 1,
               "prompt_tokens[1] = -2 is negative");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [ ]}", PH_ERR_CONFIG_INVALID, 1,
               "prompt_tokens is empty");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"prompt_tokens\": [2]}", PH_ERR_JSON, 1,
               "duplicate");
  /* an error after a blanked array keeps its column (jansson counts from 1) */
  diag e;
  CHECK_STATUS(parse("{\"id\": \"a\", \"prompt_tokens\": [1, 2, 3], x}", &l, &e), PH_ERR_JSON,
               e.msg);
  CHECK_CONTAINS(e.msg, "column 41");
  /* a prompt_tokens array before an unknown key: the key is still reported */
  expect_error("{\"prompt_tokens\": [1, 2], \"id\": 1, \"tokens\": 5}", PH_ERR_CONFIG_INVALID, 1,
               "unknown key \"tokens\"");
}

/* ---- result lines ---------------------------------------------------------------------------- */

static void test_result_round_trip(void) {
  const int64_t toks[] = {5, 0, 248319, 2};
  request_timing t = {12.25, 40.5, 1234.125, 3, 4, 2, 0, 0, 0};
  char *line = NULL;
  diag d;
  CHECK_STATUS(request_result_to_json("r1", toks, 4, "stop", &t, NULL, &line, &d), PH_OK, d.msg);
  CHECK(line && !strchr(line, '\n'));
  if (!line) return;
  const char *head = "{\"id\":\"r1\",\"tokens\":[5,0,248319,2],\"finish_reason\":\"stop\",";
  CHECK(strncmp(line, head, strlen(head)) == 0); /* key order as documented */
  json_error_t err;
  json_t *o = json_loads(line, 0, &err);
  CHECK(json_is_object(o));
  CHECK_EQ_STR(json_string_value(json_object_get(o, "id")), "r1");
  json_t *arr = json_object_get(o, "tokens");
  CHECK_EQ_INT(json_array_size(arr), 4);
  for (size_t i = 0; i < 4; i++) CHECK_EQ_INT(json_integer_value(json_array_get(arr, i)), toks[i]);
  CHECK_EQ_STR(json_string_value(json_object_get(o, "finish_reason")), "stop");
  CHECK_EQ_INT(json_integer_value(json_object_get(o, "n_prompt_tokens")), 3);
  CHECK_EQ_INT(json_integer_value(json_object_get(o, "n_generated_tokens")), 4);
  CHECK_EQ_INT(json_integer_value(json_object_get(o, "n_preemptions")), 2);
  CHECK_NEAR(json_real_value(json_object_get(o, "time_in_queue_ms")), 12.25, 0);
  CHECK_NEAR(json_real_value(json_object_get(o, "time_to_first_token_ms")), 40.5, 0);
  CHECK_NEAR(json_real_value(json_object_get(o, "total_ms")), 1234.125, 0);
  CHECK(json_object_get(o, "error") == NULL);
  CHECK_EQ_INT(json_object_size(o), 9);
  json_decref(o);
  free(line);

  /* error with a message, no tokens, ttft never reached (negative -> null) */
  request_timing e = {3.0, -1.0, 5.5, 7, 0, 0, 0, 0, 0};
  CHECK_STATUS(request_result_to_json("17", NULL, 0, "error", &e,
                                      "token 300000 is outside the vocabulary \"x\"", &line, &d),
               PH_OK, d.msg);
  o = json_loads(line ? line : "", 0, &err);
  CHECK(json_is_object(o));
  CHECK_EQ_INT(json_array_size(json_object_get(o, "tokens")), 0);
  CHECK(json_is_null(json_object_get(o, "time_to_first_token_ms")));
  CHECK_EQ_STR(json_string_value(json_object_get(o, "error")),
               "token 300000 is outside the vocabulary \"x\"");
  CHECK_EQ_STR(json_string_value(json_object_get(o, "finish_reason")), "error");
  json_decref(o);
  free(line);

  const char *reasons[] = {"length", "aborted"};
  for (int i = 0; i < 2; i++) {
    CHECK_STATUS(request_result_to_json("q", toks, 4, reasons[i], &t, NULL, &line, &d), PH_OK,
                 d.msg);
    free(line);
  }
}

static void test_result_errors(void) {
  const int64_t toks[] = {1, 2};
  const int64_t neg[] = {1, -2};
  request_timing t = {1.0, 2.0, 3.0, 5, 2, 0, 0, 0, 0};
  char *line = (char *)1;
  diag d;
  CHECK_STATUS(request_result_to_json("r", toks, 2, "done", &t, NULL, &line, &d),
               PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "finish_reason \"done\"");
  CHECK(line == NULL);
  CHECK_STATUS(request_result_to_json("r", toks, 2, NULL, &t, NULL, &line, &d),
               PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(request_result_to_json("r", toks, 2, "stop", &t, "oops", &line, &d),
               PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "needs finish_reason \"error\"");
  const int64_t three[] = {1, 2, 3};
  CHECK_STATUS(request_result_to_json("r", three, 3, "stop", &t, NULL, &line, &d),
               PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "2 generated tokens, tokens has 3");
  CHECK_STATUS(request_result_to_json("r", neg, 2, "stop", &t, NULL, &line, &d),
               PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "tokens[1] = -2");
  CHECK_STATUS(request_result_to_json("r", NULL, 2, "stop", &t, NULL, &line, &d),
               PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(request_result_to_json(NULL, toks, 2, "stop", &t, NULL, &line, &d),
               PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(request_result_to_json("r", toks, 2, "stop", NULL, NULL, &line, &d),
               PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(request_result_to_json("r", toks, 2, "stop", &t, NULL, NULL, &d),
               PH_ERR_INVALID_ARGUMENT, d.msg);
  request_timing nan_t = t;
  nan_t.total_ms = NAN;
  CHECK_STATUS(request_result_to_json("r", toks, 2, "stop", &nan_t, NULL, &line, &d),
               PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "finite");
  request_timing neg_t = t;
  neg_t.n_preempted = -1;
  CHECK_STATUS(request_result_to_json("r", toks, 2, "stop", &neg_t, NULL, &line, &d),
               PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "negative count");
  CHECK_STATUS(request_result_to_json("r\xff", toks, 2, "stop", &t, NULL, &line, &d),
               PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "UTF-8");
  request_timing zero = {0, 0, 0, 1, 0, 0, 0, 0, 0};
  CHECK_STATUS(request_result_to_json("r", NULL, 0, "error", &zero, "bad \xc3", &line, &d),
               PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "error_message is not valid UTF-8");
  CHECK(line == NULL);
}

/* ---- the "speculative" object ------------------------------------------------------------------
 */

static void test_speculative_fields(void) {
  const char *text =
      "{\"id\": \"n\", \"prompt_tokens\": [1, 2], \"speculative\": {\"method\": \"ngram\", "
      "\"num_draft_tokens\": 6, \"ngram_min\": 2, \"ngram_max\": 5}}\n"
      "{\"id\": \"r\", \"prompt_tokens\": [3], \"speculative\": {\"method\": \"replay\", "
      "\"tokens\": [7, 0, 9], \"num_draft_tokens\": 8}}\n"
      "{\"id\": \"m\", \"prompt_tokens\": [4], \"speculative\": {\"method\": \"mtp\"}}\n"
      "{\"id\": \"z\", \"prompt_tokens\": [5], \"speculative\": {\"method\": \"none\"}}\n"
      "{\"id\": \"d\", \"prompt_tokens\": [6], \"speculative\": {\"method\": \"ngram\", "
      "\"num_draft_tokens\": null, \"ngram_min\": null, \"ngram_max\": null, \"tokens\": null}}\n"
      "{\"id\": \"p\", \"prompt_tokens\": [7]}\n"
      "{\"id\": \"q\", \"prompt_tokens\": [8], \"speculative\": null}\n";
  request_list l;
  diag d;
  CHECK_STATUS(parse(text, &l, &d), PH_OK, d.msg);
  CHECK_EQ_INT(l.n, 7);
  if (l.n != 7) return;
  const ph_speculative_params *n = &l.items[0].sampling.speculative;
  CHECK_EQ_INT(n->method, PH_DRAFT_NGRAM);
  CHECK_EQ_INT(n->num_draft_tokens, 6);
  CHECK_EQ_INT(n->ngram_min, 2);
  CHECK_EQ_INT(n->ngram_max, 5);
  CHECK(n->replay_tokens == NULL && n->n_replay_tokens == 0);
  CHECK_EQ_INT(l.items[0].speculative_given, 1);

  const request_spec *r = &l.items[1];
  CHECK_EQ_INT(r->sampling.speculative.method, PH_DRAFT_REPLAY);
  CHECK_EQ_INT(r->sampling.speculative.num_draft_tokens, 8);
  CHECK_EQ_INT(r->sampling.speculative.n_replay_tokens, 3);
  CHECK(r->sampling.speculative.replay_tokens == r->draft_tokens); /* owned by the spec */
  CHECK(r->draft_tokens && r->draft_tokens[0] == 7 && r->draft_tokens[1] == 0 &&
        r->draft_tokens[2] == 9);

  /* absent (and null) keys are 0: the defaults (4 drafts, n-grams 1..4) are applied later */
  for (int i = 2; i <= 4; i++) {
    const ph_speculative_params *s = &l.items[i].sampling.speculative;
    CHECK_EQ_INT(s->method, i == 2 ? PH_DRAFT_MTP : i == 3 ? PH_DRAFT_NONE : PH_DRAFT_NGRAM);
    CHECK(s->num_draft_tokens == 0 && s->ngram_min == 0 && s->ngram_max == 0);
    CHECK(s->replay_tokens == NULL && s->n_replay_tokens == 0 && !l.items[i].draft_tokens);
    CHECK_EQ_INT(l.items[i].speculative_given, 1);
    ph_speculative_params res = speculative_params_resolved(s);
    CHECK_EQ_INT(res.num_draft_tokens, SPEC_DEFAULT_DRAFTS);
    CHECK(res.ngram_min == 1 && res.ngram_max == 4);
  }
  /* no object (or null): none, and not "given" (the CLI's --speculative default applies) */
  sampling_params def = sampling_params_default();
  for (int i = 5; i <= 6; i++) {
    CHECK_EQ_INT(l.items[i].speculative_given, 0);
    CHECK(memcmp(&l.items[i].sampling, &def, sizeof def) == 0);
  }
  /* request_spec_free frees the replay tokens (the sanitizer build checks) and clears them */
  request_spec one = l.items[1];
  l.items[1].draft_tokens = NULL; /* moved out */
  l.items[1].prompt = NULL;
  l.items[1].sampling.speculative.replay_tokens = NULL;
  request_spec_free(&one);
  CHECK(one.draft_tokens == NULL && one.prompt == NULL);
  CHECK(one.sampling.speculative.replay_tokens == NULL &&
        one.sampling.speculative.n_replay_tokens == 0);
  request_spec_free(&one); /* twice is fine */
  request_list_free(&l);
}

/* A line with a speculative object s, line 2 of a file (line 1 is valid). */
static void expect_spec_error(const char *s, const char *needle) {
  char text[512];
  snprintf(text, sizeof text,
           "{\"id\": \"ok\", \"prompt_tokens\": [1]}\n"
           "{\"id\": \"bad\", \"prompt_tokens\": [1, 2], \"speculative\": %s}\n",
           s);
  expect_error(text, PH_ERR_CONFIG_INVALID, 2, needle);
}

static void test_speculative_errors(void) {
  /* types */
  expect_spec_error("\"ngram\"", "speculative is a string, expected an object");
  expect_spec_error("[1]", "speculative is an array, expected an object");
  expect_spec_error("4", "speculative is an integer, expected an object");
  expect_spec_error("{}", "speculative.method is missing");
  expect_spec_error("{\"method\": null}", "speculative.method is missing");
  expect_spec_error("{\"method\": 1}", "speculative.method is an integer, expected \"none\"");
  expect_spec_error("{\"method\": \"eagle\"}",
                    "speculative.method \"eagle\" is none of none, ngram, mtp, replay");
  expect_spec_error("{\"method\": \"NGRAM\"}", "speculative.method \"NGRAM\""); /* exact case */
  expect_spec_error("{\"method\": \"ngram\", \"num_draft_tokens\": \"4\"}",
                    "speculative.num_draft_tokens is a string, expected an integer");
  expect_spec_error("{\"method\": \"ngram\", \"num_draft_tokens\": 4.0}",
                    "speculative.num_draft_tokens is a real number, expected an integer");
  expect_spec_error("{\"method\": \"ngram\", \"ngram_min\": true}",
                    "speculative.ngram_min is a boolean, expected an integer");
  expect_spec_error("{\"method\": \"ngram\", \"ngram_max\": [2]}",
                    "speculative.ngram_max is an array, expected an integer");
  /* unknown keys, inside the object (a top-level key is not a speculative one) */
  expect_spec_error("{\"method\": \"ngram\", \"k\": 4}",
                    "unknown key \"k\" in speculative (known: method, num_draft_tokens, ngram_min, "
                    "ngram_max, tokens)");
  expect_spec_error("{\"method\": \"ngram\", \"seed\": 4}", "unknown key \"seed\" in speculative");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"num_draft_tokens\": 4}",
               PH_ERR_CONFIG_INVALID, 1, "unknown key \"num_draft_tokens\"");
  /* bounds: num_draft_tokens 0..8 (0 = 4), n-grams 0..16 here, the rest by the validator */
  expect_spec_error("{\"method\": \"ngram\", \"num_draft_tokens\": 9}",
                    "speculative.num_draft_tokens = 9 is outside [0, 8]");
  expect_spec_error("{\"method\": \"ngram\", \"num_draft_tokens\": -1}",
                    "speculative.num_draft_tokens = -1 is outside [0, 8]");
  expect_spec_error("{\"method\": \"ngram\", \"ngram_max\": 17}",
                    "speculative.ngram_max = 17 is outside [0, 16]");
  expect_spec_error("{\"method\": \"ngram\", \"ngram_min\": -2}",
                    "speculative.ngram_min = -2 is outside [0, 16]");
  expect_spec_error("{\"method\": \"ngram\", \"ngram_min\": 3, \"ngram_max\": 2}",
                    "speculative.ngram_min = 3, ngram_max = 2: need 1 <= min <= max <= 16");
  expect_spec_error("{\"method\": \"ngram\", \"ngram_max\": 3}",
                    "speculative.ngram_min = 0, ngram_max = 3");
  expect_spec_error("{\"method\": \"ngram\", \"ngram_min\": 2}",
                    "speculative.ngram_min = 2, ngram_max = 0");
  /* tokens: replay only, a non-empty array of ids >= 0 */
  expect_spec_error("{\"method\": \"ngram\", \"tokens\": [1]}",
                    "speculative.tokens is for the replay method only");
  expect_spec_error("{\"method\": \"none\", \"tokens\": [1]}",
                    "speculative.tokens is for the replay method only");
  expect_spec_error("{\"method\": \"replay\"}", "speculative replay with 0 tokens");
  expect_spec_error("{\"method\": \"replay\", \"tokens\": []}",
                    "speculative.tokens must be an array of 1..16777216 token ids");
  expect_spec_error("{\"method\": \"replay\", \"tokens\": 5}",
                    "speculative.tokens must be an array of 1..16777216 token ids");
  expect_spec_error("{\"method\": \"replay\", \"tokens\": [1, -4]}",
                    "speculative.tokens[1] = -4 is negative");
  expect_spec_error("{\"method\": \"replay\", \"tokens\": [1, 2, 2.5]}",
                    "speculative.tokens[2] is a real number, expected a non-negative integer");
  expect_spec_error("{\"method\": \"replay\", \"tokens\": [\"1\"]}",
                    "speculative.tokens[0] is a string, expected a non-negative integer");
  /* a duplicate key inside the object is jansson's */
  char text[256];
  snprintf(text, sizeof text,
           "{\"id\": \"a\", \"prompt_tokens\": [1], \"speculative\": {\"method\": \"ngram\", "
           "\"method\": \"mtp\"}}");
  expect_error(text, PH_ERR_JSON, 1, "duplicate object key");
  /* the error comes in file order: the first bad line is named, whatever comes after */
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"speculative\": {\"method\": \"x\"}}\n"
               "{\"id\": \"b\", \"prompt_tokens\": [1], \"speculative\": 1}",
               PH_ERR_CONFIG_INVALID, 1, "speculative.method \"x\"");
}

/* The index parses every line without keeping it: replay tokens must not leak there (nor when
 * a duplicate-id check parses an earlier line again), nor on a failure after they were read. */
static void test_speculative_no_leak(void) {
  const char *text =
      "{\"id\": \"a\", \"prompt_tokens\": [1], \"speculative\": {\"method\": \"replay\", "
      "\"tokens\": [1, 2, 3]}}\n"
      "{\"id\": \"b\", \"prompt_tokens\": [1, 2], \"speculative\": {\"method\": \"replay\", "
      "\"tokens\": [4]}}\n";
  request_file *f = NULL;
  diag d;
  CHECK_STATUS(request_file_open_text(text, strlen(text), "req.jsonl", &f, &d), PH_OK, d.msg);
  CHECK_EQ_INT(request_file_count(f), 2);
  request_spec r;
  CHECK_STATUS(request_file_get(f, 1, &r, &d), PH_OK, d.msg);
  CHECK_EQ_INT(r.sampling.speculative.n_replay_tokens, 1);
  CHECK(r.draft_tokens && r.draft_tokens[0] == 4);
  request_spec_free(&r);
  request_file_close(f);
  /* a duplicate id: the earlier line is parsed again to confirm it */
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"speculative\": {\"method\": \"replay\", "
               "\"tokens\": [1, 2]}}\n"
               "{\"id\": \"a\", \"prompt_tokens\": [1], \"speculative\": {\"method\": \"replay\", "
               "\"tokens\": [3]}}",
               PH_ERR_CONFIG_INVALID, 2, "repeats the id of line 1");
  /* failures after the tokens were read: a later key, the validator */
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"speculative\": {\"method\": \"replay\", "
               "\"tokens\": [1, 2]}, \"top_p\": 7}",
               PH_ERR_CONFIG_INVALID, 1, "top_p");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"speculative\": {\"method\": \"replay\", "
               "\"tokens\": [1, 2]}, \"remove_step\": 0, \"arrive_step\": 3}",
               PH_ERR_CONFIG_INVALID, 1, "remove_step = 0 is before arrive_step = 3");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1, -1], \"speculative\": {\"method\": "
               "\"replay\", \"tokens\": [1, 2]}}",
               PH_ERR_CONFIG_INVALID, 1, "prompt_tokens[1] = -1 is negative");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1, \"x\"], \"speculative\": {\"method\": "
               "\"replay\", \"tokens\": [1, 2]}}",
               PH_ERR_CONFIG_INVALID, 1, "prompt_tokens[1] is a string");
}

/* n_drafted_tokens / n_accepted_tokens: written, after n_preemptions, only when drafts were
 * verified; counts must be >= 0 and accepted <= drafted. */
static void test_result_speculative(void) {
  const int64_t toks[] = {5, 6, 7};
  request_timing t = {1.0, 2.0, 3.0, 2, 3, 0, 6, 4, 0};
  char *line = NULL;
  diag d;
  CHECK_STATUS(request_result_to_json("s", toks, 3, "length", &t, NULL, &line, &d), PH_OK, d.msg);
  CHECK(line && strstr(line, "\"n_preemptions\":0,\"n_drafted_tokens\":6,\"n_accepted_tokens\":4,"
                             "\"time_in_queue_ms\":"));
  json_error_t err;
  json_t *o = json_loads(line ? line : "", 0, &err);
  CHECK_EQ_INT(json_object_size(o), 11);
  CHECK_EQ_INT(json_integer_value(json_object_get(o, "n_drafted_tokens")), 6);
  CHECK_EQ_INT(json_integer_value(json_object_get(o, "n_accepted_tokens")), 4);
  json_decref(o);
  free(line);
  /* nothing verified (no speculation, or none drafted): no keys */
  t.n_drafted = t.n_accepted = 0;
  CHECK_STATUS(request_result_to_json("s", toks, 3, "length", &t, NULL, &line, &d), PH_OK, d.msg);
  CHECK(line && !strstr(line, "n_drafted_tokens") && !strstr(line, "n_accepted_tokens"));
  free(line);
  /* every draft rejected: both keys, accepted 0 */
  t.n_drafted = 3;
  CHECK_STATUS(request_result_to_json("s", toks, 3, "length", &t, NULL, &line, &d), PH_OK, d.msg);
  CHECK(line && strstr(line, "\"n_drafted_tokens\":3,\"n_accepted_tokens\":0,"));
  free(line);
  /* out of range */
  request_timing bad = t;
  bad.n_accepted = -1;
  CHECK_STATUS(request_result_to_json("s", toks, 3, "length", &bad, NULL, &line, &d),
               PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "-1 accepted of 3 drafted");
  CHECK(line == NULL);
  bad = t;
  bad.n_accepted = 4; /* more kept than drafted */
  CHECK_STATUS(request_result_to_json("s", toks, 3, "length", &bad, NULL, &line, &d),
               PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "4 accepted of 3 drafted");
  bad = t;
  bad.n_drafted = -2;
  bad.n_accepted = 0;
  CHECK_STATUS(request_result_to_json("s", toks, 3, "length", &bad, NULL, &line, &d),
               PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "0 accepted of -2 drafted");
}

/* n_cached_tokens (issue 19): written last before "error", only when the prefix cache served
 * part of the prompt; 0 <= cached <= prompt. */
static void test_result_cached(void) {
  const int64_t toks[] = {5, 6, 7};
  request_timing t = {1.0, 2.0, 3.0, 40, 3, 0, 0, 0, 32};
  char *line = NULL;
  diag d;
  CHECK_STATUS(request_result_to_json("c", toks, 3, "length", &t, NULL, &line, &d), PH_OK, d.msg);
  CHECK(line && strstr(line, "\"total_ms\":3.0,\"n_cached_tokens\":32}"));
  json_error_t err;
  json_t *o = json_loads(line ? line : "", 0, &err);
  CHECK_EQ_INT(json_object_size(o), 10);
  CHECK_EQ_INT(json_integer_value(json_object_get(o, "n_cached_tokens")), 32);
  json_decref(o);
  free(line);
  /* with an error message, "error" stays the last key */
  CHECK_STATUS(request_result_to_json("c", toks, 3, "error", &t, "oops", &line, &d), PH_OK, d.msg);
  CHECK(line && strstr(line, "\"n_cached_tokens\":32,\"error\":\"oops\"}"));
  free(line);
  /* nothing from the cache (a miss, or the cache off): no key, the line of before issue 19 */
  t.n_cached = 0;
  CHECK_STATUS(request_result_to_json("c", toks, 3, "length", &t, NULL, &line, &d), PH_OK, d.msg);
  CHECK(line && !strstr(line, "n_cached_tokens"));
  free(line);
  /* the whole prompt is the bound */
  t.n_cached = 40;
  CHECK_STATUS(request_result_to_json("c", toks, 3, "length", &t, NULL, &line, &d), PH_OK, d.msg);
  free(line);
  request_timing bad = t;
  bad.n_cached = 41;
  CHECK_STATUS(request_result_to_json("c", toks, 3, "length", &bad, NULL, &line, &d),
               PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "41 cached prompt tokens of 40");
  CHECK(line == NULL);
  bad.n_cached = -1;
  CHECK_STATUS(request_result_to_json("c", toks, 3, "length", &bad, NULL, &line, &d),
               PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "-1 cached prompt tokens of 40");
}

/* ---- text prompts, chats, max_tokens, stop strings (issue 17) ---- */

static void test_text_fields(void) {
  const char *text =
      "{\"id\": \"t\", \"prompt\": \"Hello, w\\u00f6rld\", \"max_tokens\": 5, \"stop\": \"\\n\"}\n"
      "{\"id\": \"c\", \"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
      "{\"role\": \"user\", \"content\": \"Hi\"}], \"tools\": [{\"type\": \"function\"}], "
      "\"chat_template_kwargs\": {\"enable_thinking\": false}, \"add_generation_prompt\": false, "
      "\"stop\": [\"a\", \"bc\"], \"max_new_tokens\": 7, \"max_tokens\": 7}\n"
      "{\"id\": \"k\", \"prompt_tokens\": [1, 2], \"stop\": []}\n"
      "{\"id\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": "
      "null}\n";
  request_list l;
  diag d;
  CHECK_STATUS(parse(text, &l, &d), PH_OK, d.msg);
  CHECK_EQ_INT(l.n, 4);
  if (l.n != 4) return;
  const request_spec *t = &l.items[0], *c = &l.items[1], *k = &l.items[2], *m = &l.items[3];
  CHECK_EQ_INT(t->input, REQUEST_INPUT_TEXT);
  CHECK_EQ_STR(t->prompt_text, "Hello, w\xc3\xb6rld");
  CHECK_EQ_INT((int64_t)t->prompt_text_len, 13);
  CHECK(t->prompt == NULL && t->n_prompt == 0 && t->messages_json == NULL);
  CHECK_EQ_INT(t->sampling.max_new_tokens, 5); /* max_tokens, the OpenAI name */
  CHECK_EQ_INT(t->n_stops, 1);
  CHECK_EQ_STR(t->stops[0], "\n");
  CHECK_EQ_INT(request_spec_needs_tokenizer(t), 1);

  CHECK_EQ_INT(c->input, REQUEST_INPUT_MESSAGES);
  CHECK_EQ_STR(c->messages_json, "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":"
                                 "\"user\",\"content\":\"Hi\"}]");
  CHECK_EQ_STR(c->chat_extra_json,
               "{\"enable_thinking\":false,\"tools\":[{\"type\":\"function\"}]}");
  CHECK_EQ_INT(c->add_generation_prompt, 0);
  CHECK_EQ_INT(c->sampling.max_new_tokens, 7); /* both given, equal */
  CHECK_EQ_INT(c->n_stops, 2);
  CHECK_EQ_STR(c->stops[0], "a");
  CHECK_EQ_STR(c->stops[1], "bc");
  CHECK(c->prompt_text == NULL && c->prompt == NULL);

  CHECK_EQ_INT(k->input, REQUEST_INPUT_TOKENS);
  CHECK_EQ_INT(k->n_stops, 0);
  CHECK_EQ_INT(request_spec_needs_tokenizer(k), 0); /* ids and no stop strings: as before */

  CHECK_EQ_INT(m->input, REQUEST_INPUT_MESSAGES);
  CHECK(m->chat_extra_json == NULL); /* no tools, no kwargs */
  CHECK_EQ_INT(m->add_generation_prompt, 1);
  request_list_free(&l);

  /* the index says which lines need the tokenizer, and keeps none of their text */
  request_file *f = NULL;
  CHECK_STATUS(request_file_open_text(text, strlen(text), "req.jsonl", &f, &d), PH_OK, d.msg);
  CHECK_EQ_INT(request_file_entry(f, 0)->needs_tokenizer, 1);
  CHECK_EQ_INT(request_file_entry(f, 1)->needs_tokenizer, 1);
  CHECK_EQ_INT(request_file_entry(f, 2)->needs_tokenizer, 0);
  CHECK_EQ_INT(request_file_entry(f, 3)->needs_tokenizer, 1);
  CHECK_EQ_INT((int64_t)sizeof(request_entry), 32);
  request_file_close(f);
}

static void test_text_errors(void) {
  expect_error("{\"id\": \"a\", \"prompt\": \"hi\", \"prompt_tokens\": [1]}", PH_ERR_CONFIG_INVALID,
               1, "prompt_tokens and prompt are both given");
  expect_error("{\"id\": \"a\", \"prompt\": \"hi\", \"messages\": [{}]}", PH_ERR_CONFIG_INVALID, 1,
               "prompt and messages are both given");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"messages\": [{}]}", PH_ERR_CONFIG_INVALID,
               1, "prompt_tokens and messages are both given");
  expect_error("{\"id\": \"a\"}", PH_ERR_CONFIG_MISSING_FIELD, 1,
               "one of prompt_tokens: ids, prompt: text, messages: a chat");
  expect_error("{\"id\": \"a\", \"prompt\": null}", PH_ERR_CONFIG_MISSING_FIELD, 1,
               "prompt_tokens is missing");
  expect_error("{\"id\": \"a\", \"prompt\": [1, 2]}", PH_ERR_CONFIG_INVALID, 1,
               "prompt is an array, expected a string");
  expect_error("{\"id\": \"a\", \"prompt\": \"\"}", PH_ERR_CONFIG_INVALID, 1, "prompt is empty");
  expect_error("{\"id\": \"a\", \"prompt\": \"x\", \"max_tokens\": 3, \"max_new_tokens\": 4}",
               PH_ERR_CONFIG_INVALID, 1, "max_tokens = 3 and max_new_tokens = 4 differ");
  expect_error("{\"id\": \"a\", \"prompt\": \"x\", \"max_tokens\": 0}", PH_ERR_CONFIG_INVALID, 1,
               "max_tokens = 0 is outside [1,");
  expect_error("{\"id\": \"a\", \"prompt\": \"x\", \"max_tokens\": \"5\"}", PH_ERR_CONFIG_INVALID,
               1, "max_tokens is a string, expected an integer");
  expect_error("{\"id\": \"a\", \"prompt\": \"x\", \"stop\": 7}", PH_ERR_CONFIG_INVALID, 1,
               "stop is an integer, expected a string or an array of strings");
  expect_error("{\"id\": \"a\", \"prompt\": \"x\", \"stop\": [\"a\", 2]}", PH_ERR_CONFIG_INVALID, 1,
               "stop[1] is an integer, expected a string");
  expect_error("{\"id\": \"a\", \"prompt\": \"x\", \"stop\": \"\"}", PH_ERR_CONFIG_INVALID, 1,
               "stop is an empty string");
  expect_error("{\"id\": \"a\", \"prompt\": \"x\", \"stop\": [\"a\", \"\"]}", PH_ERR_CONFIG_INVALID,
               1, "stop[1] is an empty string");
  expect_error("{\"id\": \"a\", \"prompt\": \"x\", \"stop\": [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\","
               "\"7\",\"8\",\"9\",\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}",
               PH_ERR_CONFIG_INVALID, 1, "stop lists 17 strings, at most 16");
  expect_error("{\"id\": \"a\", \"messages\": {\"role\": \"user\"}}", PH_ERR_CONFIG_INVALID, 1,
               "messages is an object, expected an array of message objects");
  expect_error("{\"id\": \"a\", \"messages\": []}", PH_ERR_CONFIG_INVALID, 1, "messages is empty");
  expect_error("{\"id\": \"a\", \"messages\": [{\"role\": \"user\"}, \"hi\"]}",
               PH_ERR_CONFIG_INVALID, 1, "messages[1] is a string, expected an object");
  expect_error("{\"id\": \"a\", \"messages\": [{}], \"tools\": {}}", PH_ERR_CONFIG_INVALID, 1,
               "tools is an object, expected an array");
  expect_error("{\"id\": \"a\", \"messages\": [{}], \"chat_template_kwargs\": []}",
               PH_ERR_CONFIG_INVALID, 1, "chat_template_kwargs is an array, expected an object");
  expect_error("{\"id\": \"a\", \"messages\": [{}], \"chat_template_kwargs\": {\"tools\": []}}",
               PH_ERR_CONFIG_INVALID, 1, "chat_template_kwargs.tools: give tools as a key");
  expect_error("{\"id\": \"a\", \"messages\": [{}], \"add_generation_prompt\": 1}",
               PH_ERR_CONFIG_INVALID, 1, "add_generation_prompt is an integer, expected true");
  expect_error("{\"id\": \"a\", \"prompt\": \"x\", \"tools\": []}", PH_ERR_CONFIG_INVALID, 1,
               "tools is for a chat: it needs messages");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"add_generation_prompt\": true}",
               PH_ERR_CONFIG_INVALID, 1, "add_generation_prompt is for a chat");
  expect_error("{\"id\": \"a\", \"prompt_tokens\": [1], \"chat_template_kwargs\": {}}",
               PH_ERR_CONFIG_INVALID, 1, "chat_template_kwargs is for a chat");
  /* the second line fails after the first allocated its text and stops (sanitize: no leak) */
  expect_error("{\"id\": \"a\", \"prompt\": \"x\", \"stop\": [\"s\"]}\n"
               "{\"id\": \"b\", \"messages\": [{}], \"stop\": [\"s\", \"t\"], \"top_p\": 2}",
               PH_ERR_CONFIG_INVALID, 2, "top_p");
  expect_error("{\"id\": \"a\", \"prompt\": \"x\", \"stop\": [\"s\", \"t\", 3]}",
               PH_ERR_CONFIG_INVALID, 1, "stop[2] is an integer");
  expect_error("{\"id\": \"a\", \"prompt\": \"x\", \"propmt\": 1}", PH_ERR_CONFIG_INVALID, 1,
               "unknown key \"propmt\"");
}

/* A text prompt counts toward the 1 MiB of a line outside prompt_tokens (jansson holds it). */
static void test_text_prompt_limit(void) {
  const size_t n = REQUEST_LINE_MAX_OTHER + 16;
  char *line = malloc(n + 64);
  size_t k = (size_t)sprintf(line, "{\"id\": \"a\", \"prompt\": \"");
  memset(line + k, 'x', n);
  k += n;
  k += (size_t)sprintf(line + k, "\"}");
  request_list l;
  diag d;
  CHECK_STATUS(request_list_parse(line, k, "req.jsonl", &l, &d), PH_ERR_LIMIT, d.msg);
  CHECK_CONTAINS(d.msg, "req.jsonl:1:");
  CHECK_CONTAINS(d.msg, "(a text prompt or messages included)");
  /* just under: accepted, kept whole */
  k = (size_t)sprintf(line, "{\"id\": \"a\", \"prompt\": \"");
  const size_t m = REQUEST_LINE_MAX_OTHER - 64;
  memset(line + k, 'y', m);
  k += m;
  k += (size_t)sprintf(line + k, "\"}");
  CHECK_STATUS(request_list_parse(line, k, "req.jsonl", &l, &d), PH_OK, d.msg);
  CHECK(l.n == 1 && l.items[0].prompt_text_len == m && l.items[0].prompt_text[m - 1] == 'y');
  request_list_free(&l);
  free(line);
}

static void test_result_text(void) {
  const int64_t toks[3] = {5, 6, 7};
  request_timing t = {0.5, 1.0, 2.0, 4, 3, 0, 0, 0, 0};
  char *line = NULL;
  diag d;
  CHECK_STATUS(request_result_to_json_text("r", "a\"b\n\xc3\xa9\0z", 8, toks, 3, "stop", &t, NULL,
                                           &line, &d),
               PH_OK, d.msg);
  CHECK(line && strncmp(line,
                        "{\"id\":\"r\",\"text\":\"a\\\"b\\n\xc3\xa9\\u0000z\",\"tokens\":"
                        "[5,6,7],\"finish_reason\":\"stop\"",
                        67) == 0);
  json_error_t e;
  json_t *o = line ? json_loads(line, JSON_ALLOW_NUL, &e) : NULL;
  CHECK(json_is_string(json_object_get(o, "text")));
  CHECK_EQ_INT((int64_t)json_string_length(json_object_get(o, "text")), 8);
  json_decref(o);
  free(line);
  /* text NULL: no key, the line of request_result_to_json */
  char *plain = NULL;
  CHECK_STATUS(request_result_to_json_text("r", NULL, 0, toks, 3, "stop", &t, NULL, &line, &d),
               PH_OK, d.msg);
  CHECK_STATUS(request_result_to_json("r", toks, 3, "stop", &t, NULL, &plain, &d), PH_OK, d.msg);
  CHECK(line && plain && strcmp(line, plain) == 0 && !strstr(line, "\"text\""));
  free(line);
  free(plain);
  CHECK_STATUS(request_result_to_json_text("r", "\xff", 1, toks, 3, "stop", &t, NULL, &line, &d),
               PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "text is not valid UTF-8");
  CHECK(line == NULL);
}

int main(void) {
  RUN(test_all_fields);
  RUN(test_missing_and_duplicate);
  RUN(test_prompt_errors);
  RUN(test_unknown_and_types);
  RUN(test_bad_values);
  RUN(test_malformed_json);
  RUN(test_blank_and_empty);
  RUN(test_long_line);
  RUN(test_read_file);
  RUN(test_stream_file);
  RUN(test_long_prompt_memory);
  RUN(test_prompt_scanner);
  RUN(test_result_round_trip);
  RUN(test_result_errors);
  RUN(test_speculative_fields);
  RUN(test_speculative_errors);
  RUN(test_speculative_no_leak);
  RUN(test_result_speculative);
  RUN(test_result_cached);
  RUN(test_text_fields);
  RUN(test_text_errors);
  RUN(test_text_prompt_limit);
  RUN(test_result_text);
  return check_finish();
}
