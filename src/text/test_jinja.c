/* test_jinja — unit tests of the Jinja interpreter (jinja.h) and of chat.c: each construct,
 * whitespace control, errors naming the line, the limits, the context chat_context builds and
 * ph_chat_render on a tokenizer directory of our own. Expected texts are what
 * @huggingface/jinja 0.5.11 writes (test_chat_ref checks many more against it directly).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "base/fmap.h"
#include "check.h"
#include "text/chat.h"
#include "text/jinja.h"
#include "text/jinja_internal.h"
#include "text/tiny_tokenizer.h"

static char g_out[1 << 16];
static char g_err[DIAG_MSG_BYTES];

/* Renders src with the JSON object ctx (NULL: none) under lim (NULL: defaults). */
static ph_status render_lim(const char *src, const char *ctx, const jinja_limits *lim) {
  g_out[0] = g_err[0] = '\0';
  diag d;
  jinja_template *t = NULL;
  ph_status s = jinja_parse(src, strlen(src), "t.jinja", &t, &d);
  if (s != PH_OK) {
    snprintf(g_err, sizeof g_err, "%s", d.msg);
    return s;
  }
  json_t *vars = NULL;
  if (ctx) {
    json_error_t e;
    vars = json_loads(ctx, 0, &e);
    if (!vars) {
      fprintf(stderr, "bad test context: %s\n", e.text);
      jinja_free(t);
      return PH_ERR_INVALID_ARGUMENT;
    }
  }
  char *text = NULL;
  size_t n = 0;
  s = jinja_render(t, vars, lim, &text, &n, &d);
  if (s == PH_OK) {
    snprintf(g_out, sizeof g_out, "%s", text);
    CHECK_EQ_INT(strlen(text), n);
  } else {
    snprintf(g_err, sizeof g_err, "%s", d.msg);
  }
  free(text);
  json_decref(vars);
  jinja_free(t);
  return s;
}

static ph_status render(const char *src, const char *ctx) { return render_lim(src, ctx, NULL); }

#define EXPECT(src, ctx, want)                                                                     \
  do {                                                                                             \
    ph_status s_ = render(src, ctx);                                                               \
    CHECK_STATUS(s_, PH_OK, g_err);                                                                \
    CHECK_EQ_STR(g_out, want);                                                                     \
  } while (0)

#define EXPECT_ERR(src, ctx, needle)                                                               \
  do {                                                                                             \
    ph_status s_ = render(src, ctx);                                                               \
    CHECK_STATUS(s_, PH_ERR_TEMPLATE, g_out);                                                      \
    CHECK_CONTAINS(g_err, needle);                                                                 \
  } while (0)

static void test_output_of_values(void) {
  EXPECT("a{{ 1 }}{{ -2 }}{{ 2.5 }}{{ 3.0 }}{{ -0.0 }}b", NULL, "a1-22.53.0-0.0b");
  EXPECT("{{ true }}{{ false }}{{ none }}{{ nope }}|", NULL, "truefalse|");
  EXPECT("{{ [1, 'a', none, nope] }}", NULL, "[1, \"a\", null, undefined]");
  EXPECT("{{ {'k': [1, {'x': true}]} }}", NULL, "{\"k\": [1, {\"x\": true}]}");
  EXPECT("{{ 'it''s' }}{{ \"q\\\"\" }}{{ '\\u00e9\\x41\\n' }}", NULL,
         "itsq\"\xc3\xa9"
         "A\n");
}

static void test_operators(void) {
  EXPECT("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 3 }}",
         NULL, "3 -4 1 -1 3.5 2.0 8");
  EXPECT("{{ 1 + 2.0 }} {{ 'a' ~ 1 ~ 2.0 ~ true }} {{ 'n' + 1 }}", NULL, "3.0 a12true n1");
  EXPECT("{{ 1 == 1.0 }} {{ '1' == 1 }} {{ true == 1 }} {{ none == nope }} {{ [] == [] }}", NULL,
         "true true true true false");
  EXPECT("{{ 1 in [1, 2] }} {{ '1' in [1] }} {{ 'b' in 'abc' }} {{ 'k' in {'k': 1} }} "
         "{{ 'x' not in nope }}",
         NULL, "true false true true true");
  EXPECT("{{ 0 or '' or 'z' }} {{ 1 and [] }} {{ not 0 }} {{ 'y' if 0 else 'n' }}[{{ 'y' if 0 }}]",
         NULL, "z [] true n[]");
  EXPECT("{{ [1] + [2, 3] }} {{ -(3) }} {{ 3 < 4 }} {{ 2 >= 3 }}", NULL, "[1, 2, 3] -3 true false");
  /* only the newest string grows in place: an older one is copied */
  EXPECT("{% set a = 'x' ~ 'y' %}{% set b = 'p' ~ 'q' %}{% set c = a ~ 'Z' %}{{ c }}{{ b }}"
         "{% set d = b ~ 1 %}{{ d }}{{ a ~ b }}{{ c }}",
         NULL, "xyZpqpq1xypqxyZ");
  EXPECT_ERR("{{ 'a' < 'b' }}", NULL, "unsupported operator '<'");
  EXPECT_ERR("{{ nope + 1 }}", NULL, "undefined");
  EXPECT_ERR("{{ 1 / 0 }}", NULL, "division by zero");
}

static void test_members_and_slices(void) {
  const char *ctx = "{\"l\": [1, 2, 3, 4], \"s\": \"h\xc3\xa9llo\", \"d\": {\"a\": {\"b\": [5]}}}";
  EXPECT("{{ l[0] }}{{ l[-1] }}[{{ l[9] }}]{{ l.length }}{{ s.length }}{{ s[1] }}", ctx,
         "14[]45\xc3\xa9");
  EXPECT("{{ l[1:3] }}{{ l[::-1] }}{{ l[:-2] }}{{ l[::2] }}{{ s[::-1] }}{{ s[1:3] }}", ctx,
         "[2, 3][4, 3, 2, 1][1, 2][1, 3]oll\xc3\xa9h\xc3\xa9l");
  EXPECT("{{ d.a.b[0] }}{{ d['a']['b'][0] }}[{{ d.z }}][{{ nope.z }}]{{ d.a.b.0 }}", ctx,
         "55[][]5");
  EXPECT_ERR("{{ d[0] }}", ctx, "string key");
}

static void test_filters(void) {
  const char *ctx = "{\"w\": [\"b\", \"A\", \"c\"], \"p\": [{\"n\": \"x\", \"ok\": true}, "
                    "{\"n\": \"y\", \"ok\": false}], \"d\": {\"b\": 1, \"a\": 2}}";
  EXPECT("{{ w|sort }}{{ w|sort(reverse=true)|join(',') }}{{ w|length }}{{ w|first }}{{ w|last }}",
         ctx, "[\"A\", \"b\", \"c\"]c,b,A3bc");
  EXPECT("{{ '  x y '|trim }}|{{ 'ab'|upper }}{{ 'AB'|lower }}{{ 'ab cd'|title }}{{ "
         "'aB'|capitalize }}",
         NULL, "x y|ABabAb CdAB");
  EXPECT("{{ p|selectattr('ok')|map(attribute='n')|join }}{{ p|rejectattr('ok')|map(attribute='n')|"
         "join }}{{ p|map(attribute='z', default='-')|join }}",
         ctx, "xy--");
  EXPECT("{{ d|items }}{{ d|dictsort }}{{ d|length }}", ctx,
         "[[\"b\", 1], [\"a\", 2]][[\"a\", 2], [\"b\", 1]]2");
  EXPECT(
      "{{ '7'|int + 1 }}{{ 'x'|int(5) }}{{ '2.5'|float }}{{ 3.7|int }}{{ -3|abs }}{{ 2|string }}",
      NULL, "852.5332");
  EXPECT("{{ nope|default('d') }}{{ ''|default('e', true) }}{{ 1|default(2) }}", NULL, "de1");
  EXPECT("{{ 'a\nb\n\nc'|indent }}|{{ 'a\nb'|indent(2, true) }}", NULL,
         "a\n    b\n\n    c|  a\n  b");
  EXPECT("{{ 'aaa'|replace('a', 'b', 2) }}{{ [1, 1, 2]|unique }}{{ [1, 2]|reverse }}", NULL,
         "bba[1, 2][2, 1]");
  EXPECT_ERR("{{ 1|wordcount }}", NULL, "unsupported filter 'wordcount'");
  EXPECT_ERR("{{ nope|upper }}", NULL, "on a undefined");
}

static void test_tojson(void) {
  const char *ctx = "{\"v\": {\"s\": \"\xc3\xa9\\\"\\n\\u0001\", \"l\": [1, 2.5, 3.0, true, null], "
                    "\"e\": {}}}";
  EXPECT("{{ v|tojson }}", ctx,
         "{\"s\": \"\xc3\xa9\\\"\\n\\u0001\", \"l\": [1, 2.5, 3, true, null], \"e\": {}}");
  EXPECT("{{ v.s|tojson(ensure_ascii=true) }}", ctx, "\"\\u00e9\\\"\\n\\u0001\"");
  EXPECT("{{ v.l|tojson(indent=2) }}", ctx, "[\n  1,\n  2.5,\n  3,\n  true,\n  null\n]");
  EXPECT("{{ {'b': 1, 'a': [2]}|tojson(indent=1, sort_keys=true) }}", NULL,
         "{\n \"a\": [\n  2\n ],\n \"b\": 1\n}");
  EXPECT("{{ {'b': 1}|tojson(separators=[',', ':']) }}{{ nope|tojson }}", NULL, "{\"b\":1}null");
  /* object members named like array indices come first, ascending, as in JavaScript */
  EXPECT("{{ o|tojson }}", "{\"o\": {\"z\": 1, \"10\": 2, \"2\": 3, \"02\": 4}}",
         "{\"2\": 3, \"10\": 2, \"z\": 1, \"02\": 4}");
}

static void test_tests_and_methods(void) {
  EXPECT("{{ 'a' is string }}{{ 1 is number }}{{ true is number }}{{ [1] is iterable }}"
         "{{ {} is iterable }}{{ {} is mapping }}{{ nope is defined }}{{ none is none }}"
         "{{ 3 is odd }}{{ 'ab' is lower }}{{ 1 is not string }}",
         NULL, "truetruefalsetruefalsetruefalsetruetruetruetrue");
  EXPECT("{{ ' a b '.strip() }}|{{ 'x\n'.rstrip('\n') }}|{{ 'a,b,,c'.split(',') }}{{ 'a b  "
         "c'.split() }}"
         "{{ 'a,b,c'.split(',', 1) }}",
         NULL, "a b|x|[\"a\", \"b\", \"\", \"c\"][\"a\", \"b\", \"c\"][\"a\", \"b,c\"]");
  EXPECT("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}{{ 'aXa'.replace('a', 'b') }}"
         "{{ 'ab'.replace('', '-') }}",
         NULL, "truetruebXb-a-b-");
  EXPECT("{{ d.get('a') }}{{ d.get('z', 9) }}[{{ d.get('z') }}]{{ d.keys() }}{{ d.values() }}"
         "{{ d.items() }}",
         "{\"d\": {\"a\": 1}}", "19[][\"a\"][1][[\"a\", 1]]");
  /* the reference's strip family ignores its argument: all whitespace goes */
  EXPECT("[{{ '\n  x  \n'.lstrip('\n') }}]", NULL, "[x  \n]");
  EXPECT_ERR("{{ 'a'.find('a') }}", NULL, "cannot call a undefined");
}

static void test_statements(void) {
  EXPECT("{% if 0 %}a{% elif 1 %}b{% else %}c{% endif %}", NULL, "b");
  EXPECT("{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
         "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}"
         "{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}",
         NULL, "1032truefalse32;2121falsefalse313;3210falsetrue32;");
  EXPECT(
      "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
      "{\"d\": {\"a\": 1, \"b\": 2}}", "a=1;b=2;ab");
  EXPECT("{% for x in [] %}x{% else %}empty{% endfor %}{% for x in [1, 2, 3] if x != 2 %}{{ x }}"
         "{% endfor %}",
         NULL, "empty13");
  /* break and continue drop the text their iteration wrote, as the reference does */
  EXPECT("{% for x in [1, 2, 3, 4] %}<{{ x }}{% if x == 2 %}{% continue %}{% endif %}"
         "{% if x == 3 %}{% break %}{% endif %}>{% endfor %}",
         NULL, "<1>");
  EXPECT("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"
         "{% set ns = namespace(x=1) %}{% for i in [1] %}{% set ns.x = 2 %}{% endfor %}{{ ns.x }}",
         NULL, "12");
  EXPECT("{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set c %}x{{ a }}y{% endset %}{{ c }}", NULL,
         "12x1y");
  EXPECT("{% macro m(a, b=2, c=a) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(1) }}|{{ m(1, 3) }}|"
         "{{ m(1, c=5) }}|{{ m(1)|length }}",
         NULL, "121|131|125|3");
  EXPECT(
      "{% for i in range(3) %}{{ i }}{% endfor %}{% for i in range(4, 0, -2) %}{{ i }}{% endfor %}",
      NULL, "01242");
  EXPECT("{# comment #}a{# multi\nline #}b", NULL, "ab");
}

static void test_whitespace_control(void) {
  /* trim_blocks and lstrip_blocks as apply_chat_template sets them, and one final newline dropped
   */
  EXPECT("  {% if 1 %}\n  x\n  {% endif %}\ny\n", NULL, "  x\ny");
  EXPECT("a  {%- if 1 -%}  b  {%- endif -%}  c", NULL, "abc");
  EXPECT("a \n {{- 'b' -}} \n c", NULL, "abc");
  EXPECT("a\n{{ 'b' }}\nc", NULL, "a\nb\nc"); /* expressions keep their newline */
  EXPECT("a {#- x -#} b", NULL, "ab");
  EXPECT("x\n  {# c #}\ny", NULL, "x\ny");
  EXPECT("a\n{% generation %} b {%- endgeneration %}\n", NULL, "a\n b");
  EXPECT("\xe3\x80\x80{%- if 1 %}x{% endif %}", NULL, "x"); /* U+3000 is JavaScript whitespace */
}

static void test_errors_name_the_line(void) {
  EXPECT_ERR("line1\n{{ x }}\n{{ 1 + }}\n", NULL, "t.jinja:3:");
  EXPECT_ERR("a\n\n{% if x %}\nb\n", NULL, "'if' is not closed");
  EXPECT_ERR("a\n{% call m() %}x{% endcall %}", NULL, "t.jinja:2: unsupported statement: call");
  EXPECT_ERR("{% filter upper %}x{% endfilter %}", NULL, "unsupported statement: filter");
  EXPECT_ERR("\n\n\n{{ raise_exception('no system role') }}", NULL,
             "t.jinja:4: raise_exception: no system role");
  EXPECT_ERR("{{ f(*a) }}", NULL, "unsupported: argument unpacking");
  EXPECT_ERR("{% macro m() %}{{ varargs }}{% endmacro %}", NULL, "varargs");
  EXPECT_ERR("{% foo %}", NULL, "unknown statement 'foo'");
  EXPECT_ERR("{{ 'abc }}", NULL, "unterminated string");
  EXPECT_ERR("{{ '\\q' }}", NULL, "escaped character");
  EXPECT_ERR("{% for x in 'abc' %}{% endfor %}", NULL, "cannot loop over a string");
  EXPECT_ERR("{% break %}", NULL, "outside a loop");
  EXPECT_ERR("{{ x }}", "{\"range\": 1}", "already declared");
  EXPECT_ERR("\xff", NULL, "not valid UTF-8");
  EXPECT_ERR("{{ n }}", "{\"n\": 9007199254740993}", "beyond 2^53");
  EXPECT_ERR("{{ 'x' is frobbed }}", NULL, "unknown test 'frobbed'");
}

/* A NULL diag is allowed everywhere: the status alone comes back. */
static void test_null_diag(void) {
  jinja_template *t = NULL;
  const char *bad = "{{ 1 + }}", *raises = "{{ x.y }}{{ raise_exception('r') }}";
  CHECK_STATUS(jinja_parse(bad, strlen(bad), NULL, &t, NULL), PH_ERR_TEMPLATE, NULL);
  CHECK(t == NULL);
  CHECK_STATUS(jinja_parse(raises, strlen(raises), NULL, &t, NULL), PH_OK, NULL);
  char *text = (char *)"not set";
  CHECK_STATUS(jinja_render(t, NULL, NULL, &text, NULL, NULL), PH_ERR_TEMPLATE, NULL);
  CHECK(text == NULL);
  jinja_free(t);
  jinja_free(NULL);
}

static void test_limits(void) {
  jinja_limits lim;
  jinja_limits_default(&lim);
  lim.max_output_bytes = 100;
  CHECK_STATUS(render_lim("{% for i in range(200) %}x{% endfor %}", NULL, &lim), PH_ERR_TEMPLATE,
               g_err);
  CHECK_CONTAINS(g_err, "output exceeds");
  jinja_limits_default(&lim);
  lim.max_loop_iterations = 50;
  CHECK_STATUS(render_lim("{% for i in [1,2,3,4,5,6,7,8] %}{% for j in [1,2,3,4,5,6,7,8] %}"
                          "{% endfor %}{% endfor %}",
                          NULL, &lim),
               PH_ERR_TEMPLATE, g_err);
  CHECK_CONTAINS(g_err, "loop iterations");
  CHECK_STATUS(render_lim("{{ range(100)|length }}", NULL, &lim), PH_ERR_TEMPLATE, g_err);
  jinja_limits_default(&lim);
  CHECK_STATUS(render_lim("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, &lim),
               PH_ERR_TEMPLATE, g_err);
  CHECK_CONTAINS(g_err, "nested deeper");
  lim.max_memory_bytes = 1 << 20;
  CHECK_STATUS(render_lim("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(100) %}"
                          "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                          NULL, &lim),
               PH_ERR_TEMPLATE, g_err);
  CHECK_CONTAINS(g_err, "memory limit");
  /* nesting: parentheses and blocks */
  char deep[4096];
  size_t n = 0;
  n += (size_t)snprintf(deep + n, sizeof deep - n, "{{ ");
  for (int i = 0; i < 600; i++) deep[n++] = '(';
  deep[n++] = '1';
  for (int i = 0; i < 600; i++) deep[n++] = ')';
  snprintf(deep + n, sizeof deep - n, " }}");
  CHECK_STATUS(render(deep, NULL), PH_ERR_TEMPLATE, g_err);
  CHECK_CONTAINS(g_err, "nesting deeper");
  n = 0;
  for (int i = 0; i < 300; i++) n += (size_t)snprintf(deep + n, sizeof deep - n, "{%% if 1 %%}");
  CHECK_STATUS(render(deep, NULL), PH_ERR_TEMPLATE, g_err);
  CHECK_CONTAINS(g_err, "nesting deeper");
}

/* A template of many string literals compiles in memory proportional to its size (each
 * literal's buffer once took the rest of the source: quadratic). */
static void test_parse_memory_is_linear(void) {
  size_t n_lit = 20000, cap = n_lit * 16 + 1;
  char *src = malloc(cap);
  if (!CHECK(src != NULL)) return;
  size_t n = 0;
  for (size_t i = 0; i < n_lit; i++) n += (size_t)snprintf(src + n, cap - n, "{{ 'abcdef' }}");
  jinja_template *t = NULL;
  diag d;
  CHECK_STATUS(jinja_parse(src, n, "many.jinja", &t, &d), PH_OK, d.msg);
  if (t) {
    CHECK(t->mem.used_bytes < 400 * n);
    if (t->mem.used_bytes >= 400 * n)
      fprintf(stderr, "       %zu bytes of source took %zu bytes\n", n, t->mem.used_bytes);
  }
  jinja_free(t);
  free(src);
}

/* A string grown in a loop (`set ns.s = ns.s ~ x`) costs memory linear in its final length:
 * the newest string grows in place (copying every step took 2 GB here, past the limit). */
static void test_growing_string_is_linear(void) {
  jinja_limits lim;
  jinja_limits_default(&lim);
  lim.max_memory_bytes = 32 << 20;
  ph_status s = render_lim("{% set ns = namespace(s='') %}{% for i in range(20000) %}"
                           "{% set ns.s = ns.s ~ 'abcdefghi' ~ (i % 10) %}{% endfor %}"
                           "{{ ns.s|length }} {{ ns.s[-20:] }}",
                           NULL, &lim);
  CHECK_STATUS(s, PH_OK, g_err);
  CHECK_EQ_STR(g_out, "200000 abcdefghi8abcdefghi9");
}

static void test_strftime_now(void) {
  for (int attempt = 0; attempt < 3; attempt++) { /* a render across midnight retries */
    char before[64], after[64];
    time_t t = time(NULL);
    struct tm tmv;
    localtime_r(&t, &tmv);
    strftime(before, sizeof before, "%Y-%m-%d %B %b %%", &tmv);
    CHECK_STATUS(render("{{ strftime_now('%Y-%m-%d %B %b %%') }}", NULL), PH_OK, g_err);
    t = time(NULL);
    localtime_r(&t, &tmv);
    strftime(after, sizeof after, "%Y-%m-%d %B %b %%", &tmv);
    if (strcmp(before, after) != 0) continue;
    CHECK_EQ_STR(g_out, before);
    return;
  }
}

static void test_chat_context(void) {
  const char *special[CHAT_N_SPECIAL] = {"<s>", "</s>", NULL, NULL};
  json_t *ctx = NULL;
  diag d;
  CHECK_STATUS(chat_context(NULL, special, "[{\"role\": \"user\", \"content\": \"hi\"}]",
                            "{\"tools\": [], \"enable_thinking\": false, \"bos_token\": \"B\"}", 1,
                            &ctx, &d),
               PH_OK, d.msg);
  char *s = json_dumps(ctx, JSON_COMPACT);
  CHECK_EQ_STR(s, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[],"
                  "\"documents\":null,\"bos_token\":\"B\",\"eos_token\":\"</s>\","
                  "\"add_generation_prompt\":true,\"enable_thinking\":false}");
  free(s);
  json_decref(ctx);
  /* without extra: tools and documents are null, as apply_chat_template passes them; no unk */
  CHECK_STATUS(chat_context(NULL, special, "[]", NULL, 0, &ctx, &d), PH_OK, d.msg);
  CHECK(json_is_null(json_object_get(ctx, "tools")));
  CHECK(json_is_null(json_object_get(ctx, "documents")));
  CHECK(json_object_get(ctx, "unk_token") == NULL);
  CHECK(json_is_false(json_object_get(ctx, "add_generation_prompt")));
  json_decref(ctx);
  CHECK_STATUS(chat_context(NULL, special, "{\"role\": 1}", NULL, 0, &ctx, &d), PH_ERR_JSON, d.msg);
  CHECK_CONTAINS(d.msg, "messages");
  CHECK_STATUS(chat_context(NULL, special, "[", NULL, 0, &ctx, &d), PH_ERR_JSON, d.msg);
  CHECK_STATUS(chat_context(NULL, special, "[]", "[1]", 0, &ctx, &d), PH_ERR_JSON, d.msg);
  CHECK_STATUS(chat_context(NULL, special, "[]", "{\"messages\": []}", 0, &ctx, &d), PH_ERR_JSON,
               d.msg);
  CHECK_STATUS(chat_context(NULL, special, "[]", "{\"a\": 1, \"a\": 2}", 0, &ctx, &d), PH_ERR_JSON,
               d.msg);
}

/* ph_chat_render through a tokenizer directory of our own (a two-token vocabulary). */
static void test_ph_chat_render(void) {
  char err[256];
  char *text = NULL;
  size_t len = 0;
  CHECK_STATUS(ph_chat_render(NULL, "[]", NULL, 1, &text, &len, err, sizeof err),
               PH_ERR_INVALID_ARGUMENT, err);
  char dir[1200], path[1300];
  snprintf(dir, sizeof dir, "%s/chat_tok", check_env("PH_TMP_DIR"));
  diag d;
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  FILE *f = fopen(path, "w");
  if (!CHECK(f != NULL)) return;
  fputs("{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 2, \"content\": \"<s>\", \"special\": "
        "true, \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": "
        "false}], \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
        "\"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}, "
        "\"post_processor\": null, \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": "
        "\"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": []}}",
        f);
  fclose(f);
  snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
  f = fopen(path, "w");
  if (!CHECK(f != NULL)) return;
  fputs("{\"bos_token\": \"<s>\", \"eos_token\": {\"content\": \"</s>\"}, \"chat_template\": "
        "\"{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}\\n{% endfor %}"
        "{% if add_generation_prompt %}[assistant]{% endif %}{{ eos_token }}{{ x }}\"}",
        f);
  fclose(f);
  ph_tokenizer *tok = NULL;
  ph_status s = ph_tokenizer_open(dir, &tok);
  CHECK_STATUS(s, PH_OK, tok ? ph_tokenizer_error(tok) : "open");
  if (s == PH_OK) {
    s = ph_chat_render(tok, "[{\"role\": \"user\", \"content\": \"hi\"}]", "{\"x\": \"!\"}", 1,
                       &text, &len, err, sizeof err);
    CHECK_STATUS(s, PH_OK, err);
    CHECK_EQ_STR(text, "<s>[user]hi\n[assistant]</s>!");
    CHECK_EQ_INT(len, strlen("<s>[user]hi\n[assistant]</s>!"));
    ph_free(text);
    s = ph_chat_render(tok, "[]", "{\"x\": []}", 0, &text, &len, err, sizeof err);
    CHECK_STATUS(s, PH_OK, err);
    ph_free(text);
    /* an error names the template's line inside tokenizer_config.json's chat_template */
    s = ph_chat_render(tok, "[]", "{\"x\": {}}", 0, &text, &len, err, sizeof err);
    CHECK_STATUS(s, PH_OK, err);
    ph_free(text);
    s = ph_chat_render(tok, "[{\"role\": \"u\", \"content\": {}}]", NULL, 0, &text, &len, err,
                       sizeof err);
    CHECK_STATUS(s, PH_OK, err); /* a dict as text is JSON, as the reference writes it */
    CHECK_EQ_STR(text, "<s>[u]{}\n</s>");
    ph_free(text);
    s = ph_chat_render(tok, "[]", "{\"x\": 9007199254740993}", 0, &text, &len, err, sizeof err);
    CHECK_STATUS(s, PH_ERR_TEMPLATE, err);
    CHECK_CONTAINS(err, "tokenizer_config.json chat_template:");
    CHECK(text == NULL);
    s = ph_chat_render(tok, "{}", NULL, 0, &text, &len, err, sizeof err);
    CHECK_STATUS(s, PH_ERR_JSON, err);
    CHECK(text == NULL);
  }
  ph_tokenizer_free(tok);
}

/* make-tiny's tokenizer: its chat template renders, and the prompt encodes with the special
 * tokens recognised (the path generate --chat and serve take). */
static void test_tiny_tokenizer_chat(void) {
  char dir[1200];
  snprintf(dir, sizeof dir, "%s/tiny_tok", check_env("PH_TMP_DIR"));
  diag d;
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
  ph_status s = tiny_tokenizer_write(dir, 512, &d);
  CHECK_STATUS(s, PH_OK, d.msg);
  if (s != PH_OK) return;
  ph_tokenizer *tok = NULL;
  s = ph_tokenizer_open(dir, &tok);
  CHECK_STATUS(s, PH_OK, tok ? ph_tokenizer_error(tok) : "open");
  if (s != PH_OK) {
    ph_tokenizer_free(tok);
    return;
  }
  char err[256];
  char *text = NULL;
  size_t len = 0;
  s = ph_chat_render(tok,
                     "[{\"role\": \"system\", \"content\": \"Be brief.\"}, "
                     "{\"role\": \"user\", \"content\": \"Hi there\"}]",
                     NULL, 1, &text, &len, err, sizeof err);
  CHECK_STATUS(s, PH_OK, err);
  const char *want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi "
                     "there<|im_end|>\n<|im_start|>assistant\n";
  CHECK_EQ_STR(text, want);
  if (s == PH_OK) {
    int64_t *ids = NULL, n = 0;
    CHECK_STATUS(ph_tokenizer_encode(tok, text, len, 0, &ids, &n), PH_OK, NULL);
    int64_t im_start = ph_tokenizer_token_id(tok, "<|im_start|>");
    CHECK(im_start >= 0);
    CHECK(n > 0 && ids[0] == im_start);
    char *back = NULL;
    size_t back_len = 0;
    CHECK_STATUS(ph_tokenizer_decode(tok, ids, n, 0, &back, &back_len), PH_OK, NULL);
    CHECK_EQ_STR(back, want);
    ph_free(back);
    ph_free(ids);
  }
  ph_free(text);
  /* OpenAI-style content: a list of parts renders its text parts, joined with newlines as serve
   * joins them (was the list's JSON spliced
   * into the prompt), null or missing content is empty (was PH_ERR_TEMPLATE "cannot apply '+'
   * to none"); @huggingface/jinja renders the same bytes (checked with the reference) */
  static const struct {
    const char *messages, *want;
  } parts[] = {
      {"[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hi\"}, "
       "{\"type\": \"image_url\", \"image_url\": {\"url\": \"x\"}}, {\"type\": \"text\", "
       "\"text\": \"there\"}]}]",
       "<|im_start|>user\nHi\nthere<|im_end|>\n<|im_start|>assistant\n"},
      {"[{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": "
       "null, \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", "
       "\"arguments\": \"{}\"}}]}, {\"role\": \"tool\", \"content\": \"r\"}]",
       "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n<|im_start|>tool\nr<|"
       "im_end|>\n<|im_start|>assistant\n"},
      {"[{\"role\": \"user\"}]", "<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n"},
  };
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    text = NULL;
    s = ph_chat_render(tok, parts[i].messages, NULL, 1, &text, &len, err, sizeof err);
    CHECK_STATUS(s, PH_OK, err);
    CHECK_EQ_STR(text ? text : "(none)", parts[i].want);
    ph_free(text);
  }
  ph_tokenizer_free(tok);
}

int main(void) {
  RUN(test_output_of_values);
  RUN(test_operators);
  RUN(test_members_and_slices);
  RUN(test_filters);
  RUN(test_tojson);
  RUN(test_tests_and_methods);
  RUN(test_statements);
  RUN(test_whitespace_control);
  RUN(test_errors_name_the_line);
  RUN(test_null_diag);
  RUN(test_limits);
  RUN(test_parse_memory_is_linear);
  RUN(test_growing_string_is_linear);
  RUN(test_strftime_now);
  RUN(test_chat_context);
  RUN(test_ph_chat_render);
  RUN(test_tiny_tokenizer_chat);
  return check_finish();
}
