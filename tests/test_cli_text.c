/* test_cli_text — text in and out of the command line (issue 17), on a make-tiny model with the
 * tokenizer files make-tiny writes: `tokenize` (ids, pieces, --decode round trips, --chat),
 * `generate --prompt / --chat` against a reference the text path did not produce (the ids of
 * `generate --tokens` on the same prompt, decoded in this process with ph_tokenizer_decode), on
 * the checkpoint and on its paged package (a dense one refused), a padded vocabulary, stop
 * strings cutting text and tokens, the EOS of generation_config.json stopping generation, `run`
 * with prompt / messages / max_tokens / stop lines, and the errors: both prompts, a stop of the
 * wrong type, a model without tokenizer.json (typed, naming the file; --tokens still works),
 * usage errors. Runs the built binary (PH_CLI). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "check.h"
#include "cli_testing.h"
#include "pagedhybrid.h"

#define MAX_NEW 12

static char g_tmp[512], g_model[600], g_notok[600], g_chat[600];
static ph_tokenizer *g_tok;

static const char *const PROMPT = "Once upon a time, the quick brown fox";

static void write_text(const char *path, const char *text) {
  diag d;
  CHECK_STATUS(file_write_all(path, text, strlen(text), &d), PH_OK, d.msg);
}

/* The captured stdout with its length (it may hold NUL bytes). */
static char *read_out(size_t *n) {
  char *t = NULL;
  diag d;
  *n = 0;
  if (file_read_all(g_out, 64 << 20, &t, n, &d) != PH_OK) return NULL;
  return t;
}

static char *csv(const int64_t *ids, int64_t n) {
  char *s = malloc((size_t)n * 24 + 2);
  size_t k = 0;
  s[0] = '\0';
  for (int64_t i = 0; i < n; i++)
    k += (size_t)sprintf(s + k, "%s%lld", i ? "," : "", (long long)ids[i]);
  return s;
}

static int64_t *encode(const char *text, size_t len, int add_special, int64_t *n) {
  int64_t *ids = NULL;
  CHECK_STATUS(ph_tokenizer_encode(g_tok, text, len, add_special, &ids, n), PH_OK, "encode");
  return ids;
}

/* The reference text: ph_tokenizer_decode of ids, special tokens skipped (what generate and run
 * print). */
static char *decode(const int64_t *ids, int64_t n, size_t *len) {
  char *t = NULL;
  CHECK_STATUS(ph_tokenizer_decode(g_tok, ids, n, 1, &t, len), PH_OK, "decode");
  return t;
}

/* The ids `generate --layout paged --tokens` prints after "generated:". */
static int64_t generate_ids(const int64_t *prompt, int64_t n_prompt, int max_new, int64_t *out) {
  char *list = csv(prompt, n_prompt);
  char *args = malloc(strlen(list) + 1024);
  sprintf(args, "generate --model '%s' --layout paged --tokens %s --max-new %d", g_model, list,
          max_new);
  CHECK_EQ_INT(cli_run(args), 0);
  free(list);
  free(args);
  return cli_generated_ids(max_new, out);
}

/* stdout must be exactly want[n] and one newline. */
static void check_stdout_text(const char *want, size_t n) {
  size_t got_n = 0;
  char *got = read_out(&got_n);
  const int ok = got && got_n == n + 1 && memcmp(got, want, n) == 0 && got[n] == '\n';
  CHECK(ok);
  if (!ok)
    fprintf(stderr, "       stdout %zu bytes \"%s\", expected %zu + newline \"%s\"\n", got_n,
            got ? got : "(null)", n, want);
  free(got);
}

/* ---- tokenize ---- */

static void test_tokenize(void) {
  const char *text = "Hello, world! caf\xc3\xa9 123   spaces\tand\nlines";
  int64_t n = 0, n0 = 0;
  int64_t *ids = encode(text, strlen(text), 1, &n), *ids0 = encode(text, strlen(text), 0, &n0);
  char args[4096];
  /* --ids: the JSON array of the library's ids */
  snprintf(args, sizeof args, "tokenize --model '%s' --ids '%s'", g_model, text);
  CHECK_EQ_INT(cli_run(args), 0);
  json_error_t e;
  json_t *arr = g_stdout ? json_loads(g_stdout, 0, &e) : NULL;
  CHECK(json_is_array(arr) && (int64_t)json_array_size(arr) == n);
  for (int64_t i = 0; arr && i < n && i < (int64_t)json_array_size(arr); i++)
    CHECK_EQ_INT(json_integer_value(json_array_get(arr, (size_t)i)), ids[i]);
  json_decref(arr);
  CHECK(g_stdout && strchr(g_stdout, '\n') == g_stdout + strlen(g_stdout) - 1); /* one line */
  /* default: one line per token, id TAB JSON string */
  snprintf(args, sizeof args, "tokenize --model '%s' '%s'", g_model, text);
  CHECK_EQ_INT(cli_run(args), 0);
  int64_t lines = 0;
  for (const char *p = g_stdout; p && *p; lines++) {
    char *end = NULL;
    CHECK_EQ_INT(strtoll(p, &end, 10), ids[lines < n ? lines : 0]);
    CHECK(end && end[0] == '\t' && end[1] == '"');
    const char *nl = strchr(p, '\n');
    if (!nl) break;
    p = nl + 1;
  }
  CHECK_EQ_INT(lines, n);
  /* --no-add-special, --file */
  snprintf(args, sizeof args, "tokenize --model '%s' --ids --no-add-special '%s'", g_model, text);
  CHECK_EQ_INT(cli_run(args), 0);
  char *want0 = csv(ids0, n0);
  char *got = g_stdout ? strdup(g_stdout) : NULL;
  for (char *p = got; p && *p; p++)
    if (*p == ' ' || *p == '[' || *p == ']' || *p == '\n') memmove(p, p + 1, strlen(p)), p--;
  CHECK_EQ_STR(got, want0);
  free(got);
  char path[700];
  snprintf(path, sizeof path, "%s/text.txt", g_tmp);
  write_text(path, text);
  snprintf(args, sizeof args, "tokenize --model '%s' --ids --file '%s'", g_model, path);
  CHECK_EQ_INT(cli_run(args), 0);
  arr = g_stdout ? json_loads(g_stdout, 0, &e) : NULL;
  CHECK(json_is_array(arr) && (int64_t)json_array_size(arr) == n);
  json_decref(arr);
  /* round trip: ids -> --decode -> the text, byte for byte (nothing added) */
  snprintf(args, sizeof args, "tokenize --model '%s' --decode %s", g_model, want0);
  CHECK_EQ_INT(cli_run(args), 0);
  CHECK_EQ_STR(g_stdout, text);
  char *with = csv(ids, n);
  snprintf(args, sizeof args, "tokenize --model '%s' --skip-special --decode %s", g_model, with);
  CHECK_EQ_INT(cli_run(args), 0);
  CHECK_EQ_STR(g_stdout, text); /* a BOS, if any, left out */
  free(with);
  free(want0);
  /* round trip through the JSON array --ids prints: tokenize --decode "$(tokenize --ids TEXT)" */
  snprintf(args, sizeof args, "tokenize --model '%s' --ids --no-add-special 'Hello, world'",
           g_model);
  CHECK_EQ_INT(cli_run(args), 0);
  char printed[4096] = "";
  snprintf(printed, sizeof printed, "%s", g_stdout ? g_stdout : "");
  printed[strcspn(printed, "\n")] = '\0';
  snprintf(args, sizeof args, "tokenize --model '%s' --decode '%s'", g_model, printed);
  CHECK_EQ_INT(cli_run(args), 0);
  CHECK_EQ_STR(g_stdout, "Hello, world");
  snprintf(args, sizeof args, "tokenize --model '%s' --decode '[]'", g_model);
  CHECK_EQ_INT(cli_run(args), 0);
  CHECK_EQ_STR(g_stdout, "");
  static const char *const bad_arrays[] = {"[1, -2]", "[1, 2.0]", "[1, \"2\"]", "[1,", "[1] 2"};
  for (size_t i = 0; i < sizeof bad_arrays / sizeof bad_arrays[0]; i++) {
    snprintf(args, sizeof args, "tokenize --model '%s' --decode '%s'", g_model, bad_arrays[i]);
    CHECK_EQ_INT(cli_run(args), 2);
    CHECK_CONTAINS(g_stderr, "--decode expects non-negative integers");
  }
  /* an id beyond the vocabulary gives no text (as Hugging Face's decode, and as generate and
   * run drop what a padded model vocabulary generates), with a note on stderr */
  ph_tokenizer_info info;
  CHECK_STATUS(ph_tokenizer_get_info(g_tok, &info), PH_OK, "info");
  snprintf(args, sizeof args, "tokenize --model '%s' --decode 104,%lld,105", g_model,
           (long long)info.vocab_size);
  CHECK_EQ_INT(cli_run(args), 0);
  const int64_t hi_ids[] = {104, 105};
  size_t hi_n = 0;
  char *hi = decode(hi_ids, 2, &hi_n);
  CHECK_EQ_STR(g_stdout, hi ? hi : "?");
  ph_free(hi);
  CHECK_CONTAINS(g_stderr, "note: 1 id at or beyond the tokenizer's vocabulary size");
  /* usage errors */
  snprintf(args, sizeof args, "tokenize --model '%s' --decode 1,x", g_model);
  CHECK_EQ_INT(cli_run(args), 2);
  CHECK_CONTAINS(g_stderr, "--decode expects non-negative integers");
  snprintf(args, sizeof args, "tokenize --model '%s'", g_model);
  CHECK_EQ_INT(cli_run(args), 2);
  CHECK_CONTAINS(g_stderr, "nothing to do");
  snprintf(args, sizeof args, "tokenize --model '%s' --decode 1 hello", g_model);
  CHECK_EQ_INT(cli_run(args), 2);
  snprintf(args, sizeof args, "tokenize --model '%s' --skip-special hello", g_model);
  CHECK_EQ_INT(cli_run(args), 2);
  free(ids);
  free(ids0);
  ph_free(NULL);
}

static void test_tokenize_chat(void) {
  const char *messages = "[{\"role\": \"system\", \"content\": \"Be brief.\"}, "
                         "{\"role\": \"user\", \"content\": \"Hi there\"}]";
  write_text(g_chat, messages);
  char *want = NULL, err[256] = "";
  size_t want_n = 0;
  CHECK_STATUS(ph_chat_render(g_tok, messages, NULL, 1, &want, &want_n, err, sizeof err), PH_OK,
               err);
  char args[2048];
  snprintf(args, sizeof args, "tokenize --model '%s' --chat '%s'", g_model, g_chat);
  CHECK_EQ_INT(cli_run(args), 0);
  CHECK_EQ_STR(g_stdout, want);
  int64_t n = 0;
  int64_t *ids = encode(want, want_n, 0, &n);
  snprintf(args, sizeof args, "tokenize --model '%s' --ids --chat '%s'", g_model, g_chat);
  CHECK_EQ_INT(cli_run(args), 0);
  json_error_t e;
  json_t *arr = g_stdout ? json_loads(g_stdout, 0, &e) : NULL;
  CHECK(json_is_array(arr) && (int64_t)json_array_size(arr) == n);
  for (int64_t i = 0; arr && i < n && i < (int64_t)json_array_size(arr); i++)
    CHECK_EQ_INT(json_integer_value(json_array_get(arr, (size_t)i)), ids[i]);
  json_decref(arr);
  free(ids);
  ph_free(want);
  /* the object form: add_generation_prompt false, other members template variables */
  char obj_path[700];
  snprintf(obj_path, sizeof obj_path, "%s/chat_obj.json", g_tmp);
  char obj[1024];
  snprintf(obj, sizeof obj, "{\"messages\": %s, \"add_generation_prompt\": false}", messages);
  write_text(obj_path, obj);
  CHECK_STATUS(ph_chat_render(g_tok, messages, NULL, 0, &want, &want_n, err, sizeof err), PH_OK,
               err);
  snprintf(args, sizeof args, "tokenize --model '%s' --chat '%s'", g_model, obj_path);
  CHECK_EQ_INT(cli_run(args), 0);
  CHECK_EQ_STR(g_stdout, want);
  ph_free(want);
  /* a chat file that is not JSON, or has no messages */
  write_text(obj_path, "[{\"role\": \"user\",");
  CHECK_EQ_INT(cli_run(args), 1);
  CHECK_CONTAINS(g_stderr, "error: PH_ERR_JSON");
  CHECK_CONTAINS(g_stderr, "chat_obj.json:1:");
  write_text(obj_path, "{\"tools\": []}");
  CHECK_EQ_INT(cli_run(args), 1);
  CHECK_CONTAINS(g_stderr, "error: PH_ERR_CONFIG_INVALID");
  CHECK_CONTAINS(g_stderr, "without \"messages\"");
}

/* ---- generate ---- */

static int64_t g_prompt_n, g_gen[MAX_NEW], g_n_gen;
static int64_t *g_prompt;
static char *g_ref;
static size_t g_ref_n;

static void test_generate_prompt(void) {
  g_prompt = encode(PROMPT, strlen(PROMPT), 1, &g_prompt_n);
  g_n_gen = generate_ids(g_prompt, g_prompt_n, MAX_NEW, g_gen);
  CHECK_EQ_INT(g_n_gen, MAX_NEW);
  g_ref = decode(g_gen, g_n_gen, &g_ref_n);
  char args[2048];
  snprintf(args, sizeof args, "generate --model '%s' --prompt '%s' --max-new %d --ignore-eos",
           g_model, PROMPT, MAX_NEW);
  CHECK_EQ_INT(cli_run(args), 0);
  check_stdout_text(g_ref, g_ref_n);
  char want[256];
  snprintf(want, sizeof want, "generate: finish length, %lld prompt tokens, %d generated tokens",
           (long long)g_prompt_n, MAX_NEW);
  CHECK_CONTAINS(g_stderr, want);
}

/* A stop string taken from the reference text: one whole UTF-8 character at the start of token
 * 6's text (not U+FFFD, a quote, NUL or a control byte); *cut: where its first occurrence
 * starts; *k: the tokens up to the one that completes it. 0 when none fits. */
static int pick_stop(char *stop, size_t *cut, int64_t *k) {
  for (int64_t t = 5; t < g_n_gen - 1; t++) {
    size_t at = 0;
    char *head = decode(g_gen, t, &at);
    ph_free(head);
    if (at >= g_ref_n) continue;
    const unsigned char c = (unsigned char)g_ref[at];
    const size_t w = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
    if (!w || at + w > g_ref_n || c < 0x21 || c == '\'' || c == '\\' || c == '-') continue;
    if (w == 3 && memcmp(g_ref + at, "\xef\xbf\xbd", 3) == 0) continue;
    memcpy(stop, g_ref + at, w);
    stop[w] = '\0';
    const char *first = NULL;
    for (size_t i = 0; i + w <= g_ref_n && !first; i++)
      if (memcmp(g_ref + i, stop, w) == 0) first = g_ref + i;
    *cut = (size_t)(first - g_ref);
    for (*k = 1; *k <= g_n_gen; ++*k) {
      size_t n = 0;
      char *s = decode(g_gen, *k, &n);
      int found = 0;
      for (size_t i = 0; i + w <= n && !found; i++) found = memcmp(s + i, stop, w) == 0;
      ph_free(s);
      if (found) return 1;
    }
  }
  return 0;
}

static char g_stop[8];
static size_t g_cut;
static int64_t g_k;

static void test_generate_stop(void) {
  CHECK(pick_stop(g_stop, &g_cut, &g_k));
  if (!g_stop[0]) return;
  char args[2048];
  snprintf(args, sizeof args,
           "generate --model '%s' --prompt '%s' --max-new %d --ignore-eos --stop zzzz-never "
           "--stop '%s'",
           g_model, PROMPT, MAX_NEW, g_stop);
  CHECK_EQ_INT(cli_run(args), 0);
  check_stdout_text(g_ref, g_cut); /* cut before the stop string */
  char want[256];
  snprintf(want, sizeof want, "finish stop (stop string), %lld prompt tokens, %lld generated",
           (long long)g_prompt_n, (long long)g_k);
  CHECK_CONTAINS(g_stderr, want);
  /* usage: an empty stop, or --stop with --tokens */
  snprintf(args, sizeof args, "generate --model '%s' --prompt x --stop ''", g_model);
  CHECK_EQ_INT(cli_run(args), 2);
  snprintf(args, sizeof args, "generate --model '%s' --tokens 1,2 --stop a", g_model);
  CHECK_EQ_INT(cli_run(args), 2);
  CHECK_CONTAINS(g_stderr, "--stop applies to a text prompt");
}

/* The vocabulary entry of id in dir/tokenizer.json (model.vocab, then added_tokens); NULL when
 * none. Borrowed from *root (json_decref it). */
static const char *token_text(const char *dir, int64_t id, json_t **root) {
  char path[800];
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  json_error_t e;
  *root = json_load_file(path, 0, &e);
  const char *key;
  json_t *v;
  json_object_foreach(json_object_get(json_object_get(*root, "model"), "vocab"), key, v) {
    if (json_integer_value(v) == id) return key;
  }
  size_t i;
  json_array_foreach(json_object_get(*root, "added_tokens"), i, v) {
    if (json_integer_value(json_object_get(v, "id")) == id)
      return json_string_value(json_object_get(v, "content"));
  }
  return NULL;
}

/* The tokenizer's EOS stops text generation even where the engine knows no EOS: a copy of the
 * model without generation_config.json (config.json has no eos_token_id) whose tokenizer_config
 * names a token the greedy run generates as its eos_token. --ignore-eos generates past it. */
static void test_generate_eos(void) {
  int64_t at = -1; /* the first generated token that does not occur before it */
  for (int64_t t = 2; t < g_n_gen && at < 0; t++) {
    int seen = 0;
    for (int64_t j = 0; j < t; j++) seen |= g_gen[j] == g_gen[t];
    if (!seen) at = t;
  }
  CHECK(at > 0);
  if (at <= 0) return;
  char dir[700], cmd[4096], path[800];
  snprintf(dir, sizeof dir, "%s/eos", g_tmp);
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s' && rm -f '%s/generation_config.json'",
           dir, g_model, dir, dir);
  CHECK_EQ_INT(system(cmd), 0);
  json_t *vocab = NULL;
  const char *eos = token_text(dir, g_gen[at], &vocab);
  CHECK(eos != NULL);
  snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
  json_error_t e;
  json_t *cfg = json_load_file(path, 0, &e);
  if (!cfg) cfg = json_object();
  json_object_set_new(cfg, "eos_token", json_string(eos ? eos : "?"));
  CHECK_EQ_INT(json_dump_file(cfg, path, 0), 0);
  json_decref(cfg);
  json_decref(vocab);
  ph_tokenizer *t = NULL;
  ph_tokenizer_info info;
  CHECK_STATUS(ph_tokenizer_open(dir, &t), PH_OK, t ? ph_tokenizer_error(t) : "");
  CHECK_STATUS(ph_tokenizer_get_info(t, &info), PH_OK, "info");
  CHECK(info.n_eos_ids == 1 && info.eos_ids[0] == g_gen[at]);
  ph_tokenizer_free(t);
  snprintf(cmd, sizeof cmd, "generate --model '%s' --prompt '%s' --max-new %d", dir, PROMPT,
           MAX_NEW);
  CHECK_EQ_INT(cli_run(cmd), 0);
  size_t n = 0;
  char *want = decode(g_gen, at + 1, &n);
  check_stdout_text(want, n);
  ph_free(want);
  char line[256];
  snprintf(line, sizeof line, "finish stop (end of sequence or stop id), %lld prompt tokens, %lld",
           (long long)g_prompt_n, (long long)(at + 1));
  CHECK_CONTAINS(g_stderr, line);
  snprintf(cmd, sizeof cmd, "generate --model '%s' --prompt '%s' --max-new %d --ignore-eos", dir,
           PROMPT, MAX_NEW);
  CHECK_EQ_INT(cli_run(cmd), 0);
  check_stdout_text(g_ref, g_ref_n);
}

static int64_t g_chat_gen[MAX_NEW], g_n_chat_gen;

static void test_generate_chat(void) {
  const char *messages = "[{\"role\": \"user\", \"content\": \"Hi there\"}]";
  write_text(g_chat, messages);
  char *text = NULL, err[256] = "";
  size_t len = 0;
  CHECK_STATUS(ph_chat_render(g_tok, messages, NULL, 1, &text, &len, err, sizeof err), PH_OK, err);
  int64_t n = 0;
  int64_t *ids = encode(text, len, 0, &n);
  ph_free(text);
  g_n_chat_gen = generate_ids(ids, n, 8, g_chat_gen);
  free(ids);
  size_t ref_n = 0;
  char *ref = decode(g_chat_gen, g_n_chat_gen, &ref_n);
  char args[2048];
  snprintf(args, sizeof args, "generate --model '%s' --chat '%s' --max-new 8 --ignore-eos", g_model,
           g_chat);
  CHECK_EQ_INT(cli_run(args), 0);
  check_stdout_text(ref, ref_n);
  snprintf(args, sizeof args,
           "generate --model '%s' --chat --prompt 'Hi there' --max-new 8 "
           "--ignore-eos",
           g_model);
  CHECK_EQ_INT(cli_run(args), 0);
  check_stdout_text(ref, ref_n);
  snprintf(args, sizeof args,
           "generate --model '%s' --prompt 'Hi there' --max-new 8 --ignore-eos "
           "--chat",
           g_model);
  CHECK_EQ_INT(cli_run(args), 0);
  check_stdout_text(ref, ref_n);
  ph_free(ref);
  /* usage errors */
  snprintf(args, sizeof args, "generate --model '%s' --chat '%s' --prompt hi", g_model, g_chat);
  CHECK_EQ_INT(cli_run(args), 2);
  snprintf(args, sizeof args, "generate --model '%s' --chat", g_model);
  CHECK_EQ_INT(cli_run(args), 2);
  snprintf(args, sizeof args, "generate --model '%s' --prompt hi --tokens 1,2", g_model);
  CHECK_EQ_INT(cli_run(args), 2);
  snprintf(args, sizeof args, "generate --model '%s' --prompt hi --layout dense", g_model);
  CHECK_EQ_INT(cli_run(args), 2);
}

/* A model vocabulary larger than the tokenizer's (as Qwen pads its own): the ids beyond the
 * tokenizer give no text, as Hugging Face's decode drops them, and never fail the request. */
static void test_generate_padded_vocab(void) {
  char dir[700], args[2048];
  snprintf(dir, sizeof dir, "%s/v512", g_tmp);
  snprintf(args, sizeof args, "make-tiny --out '%s' --force --vocab 512", dir);
  CHECK_EQ_INT(cli_run(args), 0);
  ph_tokenizer *t = NULL;
  ph_tokenizer_info info;
  CHECK_STATUS(ph_tokenizer_open(dir, &t), PH_OK, t ? ph_tokenizer_error(t) : "");
  if (!t) return;
  CHECK_STATUS(ph_tokenizer_get_info(t, &info), PH_OK, "info");
  int64_t n = 0, *ids = NULL, gen[24];
  CHECK_STATUS(ph_tokenizer_encode(t, PROMPT, strlen(PROMPT), 1, &ids, &n), PH_OK, "encode");
  char *list = csv(ids, n);
  snprintf(args, sizeof args, "generate --model '%s' --layout paged --tokens %s --max-new 24", dir,
           list);
  free(list);
  ph_free(ids);
  CHECK_EQ_INT(cli_run(args), 0);
  int64_t n_gen = 0, n_known = 0, known[24];
  for (const char *p = g_stdout ? strstr(g_stdout, "generated:") : NULL; p && n_gen < 24;) {
    p += p[0] == 'g' ? strlen("generated:") : 1;
    char *end = NULL;
    const long long v = strtoll(p, &end, 10);
    if (end == p) break;
    gen[n_gen++] = v;
    p = end;
    if (*p != ',') break;
  }
  CHECK_EQ_INT(n_gen, 24);
  for (int64_t i = 0; i < n_gen; i++)
    if (gen[i] < info.vocab_size) known[n_known++] = gen[i];
  CHECK(n_known < n_gen); /* the random weights do generate ids beyond the tokenizer */
  char *want = NULL;
  size_t want_n = 0;
  CHECK_STATUS(ph_tokenizer_decode(t, known, n_known, 1, &want, &want_n), PH_OK, "decode");
  snprintf(args, sizeof args, "generate --model '%s' --prompt '%s' --max-new 24 --ignore-eos", dir,
           PROMPT);
  CHECK_EQ_INT(cli_run(args), 0);
  check_stdout_text(want ? want : "", want_n);
  CHECK_CONTAINS(g_stderr, "24 generated tokens");
  ph_free(want);
  ph_tokenizer_free(t);
}

/* A package carries the tokenizer files export copies: a paged package generates the same text
 * as its checkpoint; a dense one is refused (the engine serves the paged layout), typed. */
static void test_generate_package(void) {
  char pkg[700], dense[700], args[4096];
  snprintf(pkg, sizeof pkg, "%s/pkg-paged", g_tmp);
  snprintf(dense, sizeof dense, "%s/pkg-dense", g_tmp);
  snprintf(args, sizeof args, "export '%s' -o '%s' --layout paged --target cpu --force", g_model,
           pkg);
  CHECK_EQ_INT(cli_run(args), 0);
  snprintf(args, sizeof args, "generate --model '%s' --prompt '%s' --max-new %d --ignore-eos", pkg,
           PROMPT, MAX_NEW);
  CHECK_EQ_INT(cli_run(args), 0);
  check_stdout_text(g_ref, g_ref_n);
  snprintf(args, sizeof args, "export '%s' -o '%s' --force", g_model, dense);
  CHECK_EQ_INT(cli_run(args), 0);
  snprintf(args, sizeof args, "generate --model '%s' --prompt '%s'", dense, PROMPT);
  CHECK_EQ_INT(cli_run(args), 1);
  CHECK_CONTAINS(g_stderr, "error: PH_ERR_UNSUPPORTED");
  CHECK_CONTAINS(g_stderr, "is a dense package: text generation runs on the serving engine");
}

/* ---- run ---- */

static json_t *parse_lines(const char *text, int want) {
  json_t *arr = json_array();
  for (const char *p = text ? text : ""; *p;) {
    const char *nl = strchr(p, '\n');
    const size_t len = nl ? (size_t)(nl - p) : strlen(p);
    json_error_t e;
    json_t *o = json_loadb(p, len, JSON_ALLOW_NUL, &e);
    CHECK(json_is_object(o));
    if (o) json_array_append_new(arr, o);
    p += len + (nl ? 1 : 0);
  }
  CHECK_EQ_INT((int64_t)json_array_size(arr), want);
  return arr;
}

static void check_tokens(json_t *line, const int64_t *want, int64_t n) {
  const json_t *t = json_object_get(line, "tokens");
  CHECK_EQ_INT((int64_t)json_array_size(t), n);
  for (int64_t i = 0; i < n && i < (int64_t)json_array_size(t); i++)
    CHECK_EQ_INT(json_integer_value(json_array_get(t, (size_t)i)), want[i]);
  CHECK_EQ_INT(json_integer_value(json_object_get(line, "n_generated_tokens")), n);
}

static void check_text(json_t *line, const char *want, size_t n) {
  const json_t *t = json_object_get(line, "text");
  const int ok =
      json_is_string(t) && json_string_length(t) == n && memcmp(json_string_value(t), want, n) == 0;
  CHECK(ok);
  if (!ok)
    fprintf(stderr, "       text \"%s\", expected \"%.*s\"\n",
            json_is_string(t) ? json_string_value(t) : "(none)", (int)n, want);
}

static void test_run_text(void) {
  char path[700];
  snprintf(path, sizeof path, "%s/req.jsonl", g_tmp);
  json_t *ids = json_array();
  for (int64_t i = 0; i < g_prompt_n; i++) json_array_append_new(ids, json_integer(g_prompt[i]));
  json_t *lines[] = {
      json_pack("{s:s,s:s,s:i,s:b}", "id", "p", "prompt", PROMPT, "max_tokens", MAX_NEW,
                "ignore_eos", 1),
      json_pack("{s:s,s:O,s:i,s:b}", "id", "t", "prompt_tokens", ids, "max_new_tokens", MAX_NEW,
                "ignore_eos", 1),
      json_pack("{s:s,s:s,s:i,s:i,s:b,s:[s,s]}", "id", "s", "prompt", PROMPT, "max_tokens", MAX_NEW,
                "max_new_tokens", MAX_NEW, "ignore_eos", 1, "stop", "zzzz-never", g_stop),
      json_pack("{s:s,s:[{s:s,s:s}],s:i,s:b}", "id", "c", "messages", "role", "user", "content",
                "Hi there", "max_tokens", 8, "ignore_eos", 1),
      json_pack("{s:s,s:s,s:i,s:b,s:i}", "id", "r", "prompt", PROMPT, "max_tokens", 30,
                "ignore_eos", 1, "remove_step", 4),
      /* a chat the template refuses (no role): that request's error, the others go on */
      json_pack("{s:s,s:[{s:s}]}", "id", "bad", "messages", "content", "x"),
  };
  json_decref(ids);
  char *text = calloc(1, 1 << 16);
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
    char *l = json_dumps(lines[i], JSON_COMPACT);
    strcat(text, l);
    strcat(text, "\n");
    free(l);
    json_decref(lines[i]);
  }
  write_text(path, text);
  free(text);
  char args[2048];
  snprintf(args, sizeof args, "run --model '%s' --requests '%s'", g_model, path);
  CHECK_EQ_INT(cli_run(args), 0);
  json_t *out = parse_lines(g_stdout, 6);
  json_t *p = json_array_get(out, 0), *t = json_array_get(out, 1), *s = json_array_get(out, 2);
  json_t *c = json_array_get(out, 3), *r = json_array_get(out, 4);
  /* a text prompt gives what generate --tokens gives for its ids, and the reference text */
  CHECK_EQ_STR(json_string_value(json_object_get(p, "finish_reason")), "length");
  check_tokens(p, g_gen, g_n_gen);
  check_text(p, g_ref, g_ref_n);
  CHECK_EQ_INT(json_integer_value(json_object_get(p, "n_prompt_tokens")), g_prompt_n);
  /* ids: the same, and text too (the model has a tokenizer) */
  check_tokens(t, g_gen, g_n_gen);
  check_text(t, g_ref, g_ref_n);
  /* a stop string: finish stop (not aborted), text cut before it, tokens to the one that
   * completed it */
  CHECK_EQ_STR(json_string_value(json_object_get(s, "finish_reason")), "stop");
  check_text(s, g_ref, g_cut);
  check_tokens(s, g_gen, g_k);
  /* messages */
  CHECK_EQ_STR(json_string_value(json_object_get(c, "finish_reason")), "length");
  check_tokens(c, g_chat_gen, g_n_chat_gen);
  size_t n = 0;
  char *want = decode(g_chat_gen, g_n_chat_gen, &n);
  check_text(c, want, n);
  ph_free(want);
  /* removed: the text of what it generated until then */
  CHECK_EQ_STR(json_string_value(json_object_get(r, "finish_reason")), "aborted");
  const json_t *rt = json_object_get(r, "tokens");
  int64_t rn = (int64_t)json_array_size(rt), rids[64];
  CHECK(rn > 0 && rn < 30);
  for (int64_t i = 0; i < rn && i < 64; i++)
    rids[i] = json_integer_value(json_array_get(rt, (size_t)i));
  want = decode(rids, rn < 64 ? rn : 64, &n);
  check_text(r, want, n);
  ph_free(want);
  json_t *bad = json_array_get(out, 5);
  CHECK_EQ_STR(json_string_value(json_object_get(bad, "finish_reason")), "error");
  CHECK_CONTAINS(json_string_value(json_object_get(bad, "error")), "line 6: PH_ERR_TEMPLATE: ");
  CHECK_CONTAINS(json_string_value(json_object_get(bad, "error")),
                 "tokenizer_config.json chat_template:1:");
  check_text(bad, "", 0);
  check_tokens(bad, NULL, 0);
  CHECK_CONTAINS(g_stderr, "(3 length, 1 stop, 1 aborted, 1 error)");
  json_decref(out);
  /* the stopped request alone: removed at once, the engine generates nothing after the token
   * that completed the stop string (the summary counts what the engine generated) */
  json_t *alone = json_pack("{s:s,s:s,s:i,s:b,s:[s]}", "id", "s", "prompt", PROMPT, "max_tokens",
                            MAX_NEW, "ignore_eos", 1, "stop", g_stop);
  char *l = json_dumps(alone, JSON_COMPACT);
  json_decref(alone);
  write_text(path, l);
  free(l);
  CHECK_EQ_INT(cli_run(args), 0);
  char summary[128];
  snprintf(summary, sizeof summary, "(0 length, 1 stop, 0 aborted, 0 error)");
  CHECK_CONTAINS(g_stderr, summary);
  snprintf(summary, sizeof summary, " tokens run, %lld generated = ", (long long)g_k);
  CHECK_CONTAINS(g_stderr, summary);
}

/* ---- errors ---- */

static void run_file(const char *model, const char *jsonl, int want_rc, const char *status,
                     const char *needle) {
  char path[700], args[2048];
  snprintf(path, sizeof path, "%s/bad.jsonl", g_tmp);
  write_text(path, jsonl);
  snprintf(args, sizeof args, "run --model '%s' --requests '%s'", model, path);
  CHECK_EQ_INT(cli_run(args), want_rc);
  if (status) CHECK_CONTAINS(g_stderr, status);
  if (needle) CHECK_CONTAINS(g_stderr, needle);
}

static void test_bad_inputs(void) {
  run_file(g_model, "{\"id\": 1, \"prompt\": \"hi\", \"prompt_tokens\": [1]}\n", 1,
           "error: PH_ERR_CONFIG_INVALID", "bad.jsonl:1: prompt_tokens and prompt are both given");
  run_file(g_model,
           "{\"id\": 1, \"prompt\": \"hi\"}\n{\"id\": 2, \"prompt\": \"hi\", \"stop\": 3}\n", 1,
           "error: PH_ERR_CONFIG_INVALID", "bad.jsonl:2: stop is an integer");
  run_file(g_model, "{\"id\": 1, \"prompt\": \"hi\", \"max_tokens\": 3, \"max_new_tokens\": 4}\n",
           1, "error: PH_ERR_CONFIG_INVALID", "max_tokens = 3 and max_new_tokens = 4 differ");
  run_file(g_model, "{\"id\": 1, \"messages\": [], \"max_tokens\": 3}\n", 1,
           "error: PH_ERR_CONFIG_INVALID", "messages is empty");
  /* no tokenizer.json: typed, naming the file and the first line that needs it; ids still run */
  run_file(g_notok,
           "{\"id\": 1, \"prompt_tokens\": [1, 2]}\n{\"id\": 2, \"prompt_tokens\": [1], "
           "\"stop\": [\"x\"]}\n",
           1, "error: PH_ERR_NOT_FOUND", "tokenizer.json not found: ");
  CHECK_CONTAINS(g_stderr, "bad.jsonl:2");
  run_file(g_notok, "{\"id\": 1, \"prompt_tokens\": [1, 2], \"max_new_tokens\": 2}\n", 0, NULL,
           NULL);
  CHECK(g_stdout && strstr(g_stdout, "\"tokens\":[") && !strstr(g_stdout, "\"text\""));
  char args[2048];
  snprintf(args, sizeof args, "generate --model '%s' --prompt hi", g_notok);
  CHECK_EQ_INT(cli_run(args), 1);
  CHECK_CONTAINS(g_stderr, "error: PH_ERR_NOT_FOUND");
  CHECK_CONTAINS(g_stderr, "/notok/tokenizer.json not found: --prompt needs the model's tokenizer");
  snprintf(args, sizeof args, "generate --model '%s' --chat --prompt hi", g_notok);
  CHECK_EQ_INT(cli_run(args), 1);
  CHECK_CONTAINS(g_stderr, "tokenizer.json not found: --chat");
  snprintf(args, sizeof args, "tokenize --model '%s' --ids hi", g_notok);
  CHECK_EQ_INT(cli_run(args), 1);
  CHECK_CONTAINS(g_stderr, "error: PH_ERR_NOT_FOUND");
  snprintf(args, sizeof args, "generate --model '%s' --tokens 1,2,3 --max-new 2", g_notok);
  CHECK_EQ_INT(cli_run(args), 0);
  CHECK_CONTAINS(g_stdout, "generated:");
}

/* The model (make-tiny writes its tokenizer files) and a copy without tokenizer.json. */
static void setup(void) {
  char args[2048];
  snprintf(args, sizeof args, "make-tiny --out '%s' --force", g_model);
  CHECK_EQ_INT(cli_run(args), 0);
  snprintf(args, sizeof args, "make-tiny --out '%s' --force", g_notok);
  CHECK_EQ_INT(cli_run(args), 0);
  char path[700];
  snprintf(path, sizeof path, "%s/tokenizer.json", g_notok);
  remove(path);
  ph_status s = ph_tokenizer_open(g_model, &g_tok);
  CHECK_STATUS(s, PH_OK, g_tok ? ph_tokenizer_error(g_tok) : "make-tiny wrote no tokenizer");
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "%s", check_env("PH_TMP_DIR"));
  char rm[600];
  snprintf(rm, sizeof rm, "rm -rf '%s'", g_tmp);
  if (system(rm) != 0) return 1;
  diag d;
  if (path_mkdirs(g_tmp, &d) != PH_OK) return 1;
  cli_testing_init(g_tmp);
  snprintf(g_model, sizeof g_model, "%s/tiny", g_tmp);
  snprintf(g_notok, sizeof g_notok, "%s/notok", g_tmp);
  snprintf(g_chat, sizeof g_chat, "%s/chat.json", g_tmp);
  RUN(setup);
  if (!g_tok) return check_finish();
  RUN(test_tokenize);
  RUN(test_tokenize_chat);
  RUN(test_generate_prompt);
  RUN(test_generate_stop);
  RUN(test_generate_eos);
  RUN(test_generate_chat);
  RUN(test_generate_padded_vocab);
  RUN(test_generate_package);
  RUN(test_run_text);
  RUN(test_bad_inputs);
  free(g_prompt);
  ph_free(g_ref);
  ph_tokenizer_free(g_tok);
  cli_testing_done();
  return check_finish();
}
