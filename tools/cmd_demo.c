/* pagedhybrid demo — the main job on an embedded default (make demo runs it; docs/demo.md).
 *
 * Output sections, in the order the data flows:
 * 1. make-tiny writes a random-weight Qwen3.8-shaped checkpoint (bf16, VLM layout);
 * 2. inspect loads it back and prints a memory plan equal to the engine's pools;
 * 3. the continuous-batching engine (src/engine) serves a fixed script of requests: unequal
 *    prompts (chunked prefill), greedy and seeded sampling, arrivals at different steps, one
 *    request removed mid-decode, and a page pool sized from the requests so that it runs short
 *    and the scheduler preempts. One line per step shows the batch and the pools;
 * 4. every request runs again alone on a fresh engine with the same parameters; its tokens and
 *    logits must be bit-identical to the batched run (memcmp), or the demo exits 1;
 * 5. a summary table and totals, and what two of the requests were served: their prompt and
 *    generated text through the model's tokenizer (make-tiny writes tokenizer files; the prompts
 *    are then a fixed English passage, encoded), and the token ids;
 * 6. speculative decoding: every request again, all at once, on an engine with compact state
 *    updates, drafting from a continuation with every third token wrong (the replay drafter) or
 *    by n-gram lookup; tokens and logits must be bit-identical to the batched run, or exit 1.
 * Deterministic apart from the timings: the script counts steps, not seconds. Every line fits an
 * 80-column terminal (the work directory's path aside); tests/test_cli.c checks it. When stdout
 * cannot be written the demo stops at the next section with exit 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "engine_flags.h"
#include "pagedhybrid.h"
#include "text_input.h"
#include "tools_api.h"

#define BLOCK_SIZE    16 /* tokens per KV page */
#define MAX_BATCH     4  /* sequences per step = state slots */
#define MAX_TOKENS    64 /* token budget per step */
#define PREFILL_CHUNK 32 /* prompt chunk boundaries: multiples of this */
#define MAX_PROMPT    128
#define MAX_STEPS     10000 /* a backstop: the script needs under 100 */

/* One request of the script. */
typedef struct demo_spec {
  int64_t n_prompt;
  int arrive_step;   /* added just before this step (steps counted from 0) */
  int64_t max_new;   /* max_new_tokens */
  float temperature; /* 0: greedy */
  float top_p;       /* 1: off */
  int32_t top_k;     /* 0: off */
  float min_p;       /* 0: off */
  int64_t remove_at; /* > 0: engine_remove once it has generated this many tokens */
} demo_spec;

static const demo_spec SCRIPT[] = {
    {5, 0, 24, 0.0f, 1.0f, 0, 0.0f, 0},   {17, 0, 32, 0.8f, 0.9f, 0, 0.0f, 0},
    {40, 2, 16, 0.0f, 1.0f, 0, 0.0f, 0},  {64, 5, 20, 1.0f, 1.0f, 40, 0.0f, 0},
    {65, 9, 12, 0.0f, 1.0f, 0, 0.0f, 0},  {120, 9, 24, 0.7f, 0.95f, 0, 0.0f, 0},
    {33, 14, 28, 0.0f, 1.0f, 0, 0.0f, 6}, {9, 20, 16, 1.2f, 1.0f, 0, 0.05f, 0},
};
#define N_REQ ((int)(sizeof SCRIPT / sizeof SCRIPT[0]))

/* A request of the script as the demo tracks it. */
typedef struct demo_req {
  const demo_spec *spec;
  int64_t prompt[MAX_PROMPT];
  sampling_params sp;
  uint64_t id; /* engine id; 0 until added */
  int admitted, finished, removed;
  int64_t n_preempted_seen;
  int readmit_pending;  /* preempted and not yet seen back */
  ph_request_info info; /* after the batched run */
  int identical;        /* 1 after the alone run matched */
} demo_req;

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Prints label then the ids, wrapped at 80 columns with continuation lines indented by `indent`. */
static void print_ids(const char *label, const int64_t *ids, int64_t n, int indent) {
  int col = printf("%s", label);
  for (int64_t i = 0; i < n; i++) {
    char id[24];
    const int w = snprintf(id, sizeof id, " %lld", (long long)ids[i]);
    if (col + w > 80) col = printf("\n%*s", indent, "") - 1;
    col += printf("%s", id);
  }
  printf("\n");
}

static const char *sampling_str(const sampling_params *sp, char *buf, size_t n) {
  if (sp->temperature == 0.0f) {
    snprintf(buf, n, "greedy");
    return buf;
  }
  int k = snprintf(buf, n, "T %.1f", (double)sp->temperature);
  if (sp->top_k > 0 && k < (int)n) k += snprintf(buf + k, n - (size_t)k, " top-k %d", sp->top_k);
  if (sp->top_p < 1.0f && k < (int)n)
    k += snprintf(buf + k, n - (size_t)k, " top-p %.2f", (double)sp->top_p);
  if (sp->min_p > 0.0f && k < (int)n)
    snprintf(buf + k, n - (size_t)k, " min-p %.2f", (double)sp->min_p);
  return buf;
}

static const char PASSAGE[] =
    "It was a bright cold day in April, and the clocks were striking thirteen. The hallway "
    "smelt of boiled cabbage and old rag mats. At one end of it a coloured poster, too large "
    "for indoor display, had been tacked to the wall. It depicted simply an enormous face, more "
    "than a metre wide: the face of a man of about forty-five, with a heavy black moustache and "
    "ruggedly handsome features. Outside, even through the shut window-pane, the world looked "
    "cold. Down in the street little eddies of wind were whirling dust and torn paper into "
    "spirals, and though the sun was shining and the sky a harsh blue, there seemed to be no "
    "colour in anything.";

/* Prompts: with a tokenizer, windows of the passage encoded (request i starts 7i tokens in);
 * without one, a fixed hash of (request, position). The same every run either way. The model's
 * EOS is ignored so that the script's lengths hold whatever the random weights generate. */
static void init_requests(demo_req *reqs, int64_t vocab, const ph_tokenizer *tok) {
  int64_t *passage = NULL, n_passage = 0;
  diag d;
  if (tok && (text_encode(tok, PASSAGE, sizeof PASSAGE - 1, 0, &passage, &n_passage, &d) != PH_OK ||
              n_passage < 1)) {
    free(passage);
    passage = NULL;
  }
  for (int64_t j = 0; passage && j < n_passage; j++)
    if (passage[j] >= vocab) { /* a tokenizer larger than the model: the hash instead */
      free(passage);
      passage = NULL;
    }
  for (int i = 0; i < N_REQ; i++) {
    demo_req *r = &reqs[i];
    memset(r, 0, sizeof *r);
    r->spec = &SCRIPT[i];
    for (int64_t j = 0; j < r->spec->n_prompt; j++) {
      uint64_t h = (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull + (uint64_t)j * 0xBF58476D1CE4E5B9ull;
      h ^= h >> 29;
      r->prompt[j] = passage ? passage[(7 * i + j) % n_passage] : (int64_t)(h % (uint64_t)vocab);
    }
    r->sp = ph_sampling_params_default();
    r->sp.max_new_tokens = r->spec->max_new;
    r->sp.temperature = r->spec->temperature;
    r->sp.top_p = r->spec->top_p;
    r->sp.top_k = r->spec->top_k;
    r->sp.min_p = r->spec->min_p;
    r->sp.seed = 1000 + (uint64_t)i;
    r->sp.ignore_eos = 1;
  }
  free(passage);
}

/* KV pages a request can ever hold: its last generated token is never run. */
static int32_t pages_needed(const demo_spec *s) {
  return (int32_t)((s->n_prompt + s->max_new - 1 + BLOCK_SIZE - 1) / BLOCK_SIZE);
}

/* A pool that holds the largest request alone but 3/8 of what all of them would take together:
 * with MAX_BATCH running, the decoders outgrow it and the newest gets preempted (with this
 * script: request 4 after 10 generated tokens, and requests 5 and 6 during their prompts). */
static int32_t pool_pages(void) {
  int32_t largest = 0, sum = 0;
  for (int i = 0; i < N_REQ; i++) {
    const int32_t n = pages_needed(&SCRIPT[i]);
    sum += n;
    if (n > largest) largest = n;
  }
  const int32_t pages = sum * 3 / 8;
  return pages > largest ? pages : largest;
}

/* ---- 1. the model ---------------------------------------------------------------------------- */

static int make_model(const char *dir) {
  tiny_params p = tiny_params_default();
  diag d;
  diag_clear(&d);
  ph_status s = tiny_apply_preset(&p, "qwen3.8-tiny", &d);
  if (s == PH_OK) {
    p.dtype = PH_DTYPE_BF16;
    p.layout = LAYOUT_VLM; /* the shipped Qwen3.5/3.6/3.8 layout */
    s = tiny_write(dir, &p, &d);
  }
  /* the tokenizer files make-tiny writes too: the demo shows text */
  if (s == PH_OK && p.vocab_size >= TINY_TOKENIZER_MIN_VOCAB)
    s = tiny_tokenizer_write(dir, p.vocab_size, &d);
  if (s != PH_OK) return cli_lib_error(s, d.msg);
  char pattern[64];
  int64_t n = p.n_layers < 63 ? p.n_layers : 63;
  for (int64_t i = 0; i < n; i++) pattern[i] = (i + 1) % p.full_attention_interval == 0 ? 'F' : 'L';
  pattern[n] = '\0';
  printf("1. make-tiny wrote a Qwen3.8-shaped checkpoint (VLM layout, bf16) to\n"
         "   %s\n"
         "   %lld layers %s (L GatedDeltaNet linear attention, F full attention),\n"
         "   hidden %lld, vocab %lld, with a byte-level tokenizer and a chat template.\n"
         "   The weights are RANDOM: the tokens are meaningless (the text gibberish);\n"
         "   this demo shows the serving machinery.\n\n",
         dir, (long long)p.n_layers, pattern, (long long)p.hidden_size, (long long)p.vocab_size);
  return CLI_EXIT_OK;
}

/* inspect with a memory plan of exactly the engine's pools (f32 pages, as the engine runs). */
static int inspect(const char *dir, int32_t pages) {
  char seqs[16], tokens[32], block[16];
  snprintf(seqs, sizeof seqs, "%d", MAX_BATCH);
  snprintf(tokens, sizeof tokens, "%d", (pages - MAX_BATCH) * BLOCK_SIZE); /* inspect adds them */
  snprintf(block, sizeof block, "%d", BLOCK_SIZE);
  char *argv[] = {(char *)dir, "--max-seqs",    seqs, "--max-tokens", tokens, "--block-size",
                  block,       "--cache-dtype", "f32"};
  printf("2. inspect loads it back (config parsed, every tensor checked by name, shape\n"
         "   and dtype). Its memory plan's run column is the engine's pools below:\n"
         "   %d state slots, %d KV pages of %d tokens and the null page, f32 as run uses:\n\n",
         MAX_BATCH, pages, BLOCK_SIZE);
  fflush(stdout);
  return cmd_inspect((int)(sizeof argv / sizeof argv[0]), argv);
}

/* ---- 2. serving ------------------------------------------------------------------------------ */

typedef struct totals {
  int64_t steps, tokens_run, tokens_generated, preemptions;
  double wall_s;
} totals;

static ph_status add_request(ph_engine *e, demo_req *r, diag *d) {
  return engine_call_failed("ph_engine_add_request",
                            ph_engine_add_request(e, r->prompt, r->spec->n_prompt, &r->sp, &r->id),
                            d);
}

/* Prints what happened to each request in the step just run. */
static void print_events(ph_engine *e, const ph_step_info *si, demo_req *reqs) {
  int32_t first_admissions = 0;
  for (int i = 0; i < N_REQ; i++) {
    demo_req *r = &reqs[i];
    if (!r->id || r->finished) continue;
    ph_request_info in;
    if (ph_engine_request_info(e, r->id, &in) != PH_OK) continue;
    if (!r->admitted && in.queue_ms >= 0) {
      r->admitted = 1;
      first_admissions++;
      printf("         + request %llu admitted (prompt %lld tokens, %lld chunk(s) of <= %d)\n",
             (unsigned long long)r->id, (long long)in.n_prompt,
             (long long)((in.n_prompt + PREFILL_CHUNK - 1) / PREFILL_CHUNK), PREFILL_CHUNK);
    }
    if (in.n_preemptions > r->n_preempted_seen) {
      r->n_preempted_seen = in.n_preemptions;
      r->readmit_pending = 1;
      printf("         ! request %llu preempted, pages short: its pages and slot go back;\n"
             "           it will recompute its %lld tokens (prompt %lld + %lld generated)\n",
             (unsigned long long)r->id, (long long)(in.n_prompt + in.n_generated),
             (long long)in.n_prompt, (long long)in.n_generated);
    }
    if (in.finish == PH_FINISH_ERROR) {
      r->finished = 1;
      printf("         - request %llu refused: %s: %s\n", (unsigned long long)r->id,
             ph_status_name(in.status), in.message);
    } else if (in.finish != PH_FINISH_NONE) {
      r->finished = 1;
      printf("         - request %llu finished (%s) after %lld tokens\n", (unsigned long long)r->id,
             ph_finish_reason_name(in.finish), (long long)in.n_generated);
    }
  }
  /* the engine counts admissions, not who: a preempted request waits at the front of the queue,
   * so when exactly one is pending it is the one that came back */
  const int32_t back = si->n_admitted - first_admissions;
  int n_pending = 0, last = -1;
  for (int i = 0; i < N_REQ; i++)
    if (reqs[i].readmit_pending && !reqs[i].finished) {
      n_pending++;
      last = i;
    }
  if (back == 1 && n_pending == 1) {
    reqs[last].readmit_pending = 0;
    printf("         + request %llu re-admitted: recomputing from token 0\n",
           (unsigned long long)reqs[last].id);
  } else if (back > 0) {
    for (int i = 0; i < N_REQ && back == n_pending; i++) reqs[i].readmit_pending = 0;
    printf("         + %d preempted request(s) re-admitted: recomputing from token 0\n", back);
  }
}

/* One line per step, under a header: the state after the step, the batch it ran, its speed, the
 * pools in use, the state bytes its binding moved. */
#define STEP_HEAD "  step  run wait | seqs tokens   tok/s | pages slots | moved\n"
#define STEP_ROW  "  %4d %4d %4d | %4d %6lld %7.0f | %5s %5s | %s\n"

/* Runs the script on e; one line per step. */
static ph_status serve(ph_engine *e, demo_req *reqs, totals *t, diag *d) {
  memset(t, 0, sizeof *t);
  int n_added = 0;
  const double t0 = seconds();
  printf(STEP_HEAD);
  for (int step = 0; n_added < N_REQ || ph_engine_busy(e); step++) {
    for (int i = 0; i < N_REQ; i++)
      if (SCRIPT[i].arrive_step == step) {
        FORWARD_IF_ERROR(add_request(e, &reqs[i], d));
        n_added++;
        printf("         > request %llu arrives: prompt %lld, max_new %lld, %s\n",
               (unsigned long long)reqs[i].id, (long long)SCRIPT[i].n_prompt,
               (long long)SCRIPT[i].max_new, sampling_str(&reqs[i].sp, (char[64]){0}, 64));
      }
    for (int i = 0; i < N_REQ; i++) {
      demo_req *r = &reqs[i];
      int64_t n = 0;
      if (!r->id || r->finished || r->removed || r->spec->remove_at <= 0) continue;
      if (ph_engine_request_tokens(e, r->id, &n) && n >= r->spec->remove_at) {
        FORWARD_IF_ERROR(
            engine_call_failed("ph_engine_remove_request", ph_engine_remove_request(e, r->id), d));
        r->removed = 1;
        printf("         x request %llu removed by the caller after %lld tokens (mid-decode)\n",
               (unsigned long long)r->id, (long long)n);
      }
    }
    RETURN_ERROR_IF(step == MAX_STEPS, d, PH_ERR_INTERNAL,
                    "the engine still has work after %d steps", MAX_STEPS);
    ph_step_info si;
    FORWARD_IF_ERROR(engine_failed(e, ph_engine_step(e, &si), d));
    char moved[CLI_BYTES_BUF], pages[24], slots[24];
    snprintf(pages, sizeof pages, "%d/%d", si.pages_used, si.pages_total);
    snprintf(slots, sizeof slots, "%d/%d", si.slots_used, si.slots_total);
    printf(STEP_ROW, step, si.n_running, si.n_waiting, si.batch_size, (long long)si.n_tokens,
           si.seconds > 0 ? (double)si.n_tokens / si.seconds : 0.0, pages, slots,
           cli_bytes(si.state_bytes_moved, moved, sizeof moved));
    if (ferror(stdout)) return diag_set(d, PH_ERR_IO, "writing stdout failed");
    print_events(e, &si, reqs);
    t->steps = step + 1;
    t->tokens_run += si.n_tokens;
    t->tokens_generated += si.n_generated;
    t->preemptions += si.n_preempted;
  }
  t->wall_s = seconds() - t0;
  for (int i = 0; i < N_REQ; i++)
    FORWARD_IF_ERROR(engine_call_failed("ph_engine_request_info",
                                        ph_engine_request_info(e, reqs[i].id, &reqs[i].info), d));
  return PH_OK;
}

/* ---- 3. the proof ---------------------------------------------------------------------------- */

/* Runs r alone on a fresh engine and compares with the batched run in e. Prints one line;
 * sets r->identical. A removed request is compared on the tokens it got before removal. */
static ph_status prove_one(const char *dir, const ph_engine_params *p, ph_engine *e, demo_req *r,
                           diag *d) {
  ph_engine *solo = NULL;
  ph_status s = ph_engine_create(dir, p, &solo);
  if (s == PH_OK) s = ph_engine_set_capture_logits(solo, PH_CAPTURE_SAMPLED);
  if (s != PH_OK) {
    engine_failed(solo, s, d);
    ph_engine_free(solo);
    return s;
  }
  uint64_t id = 0;
  s = engine_call_failed("ph_engine_add_request",
                         ph_engine_add_request(solo, r->prompt, r->spec->n_prompt, &r->sp, &id), d);
  for (int step = 0; s == PH_OK && ph_engine_busy(solo); step++)
    s = step == MAX_STEPS ? diag_set(d, PH_ERR_INTERNAL,
                                     "alone run of request %llu: still "
                                     "busy after %d steps",
                                     (unsigned long long)r->id, MAX_STEPS)
                          : engine_failed(solo, ph_engine_step(solo, NULL), d);
  ph_request_info solo_info;
  if (s == PH_OK)
    s = engine_call_failed("ph_engine_request_info", ph_engine_request_info(solo, id, &solo_info),
                           d);
  if (s != PH_OK) {
    ph_engine_free(solo);
    return s;
  }
  ph_engine_info ei;
  FORWARD_IF_ERROR(engine_call_failed("ph_engine_get_info", ph_engine_get_info(e, &ei), d));
  const int64_t V = ei.vocab_size;
  int64_t n_batched = 0, n_solo = 0;
  const int64_t *tb = ph_engine_request_tokens(e, r->id, &n_batched);
  const int64_t *ts = ph_engine_request_tokens(solo, id, &n_solo);
  const float *lb = ph_engine_request_logits(e, r->id, NULL),
              *ls = ph_engine_request_logits(solo, id, NULL);
  const int prefix = r->info.finish == PH_FINISH_ABORTED;
  const char *why = NULL;
  char detail[160] = "";
  if (r->info.finish == PH_FINISH_ERROR || solo_info.finish == PH_FINISH_ERROR) {
    why = "outcome";
    snprintf(detail, sizeof detail, "refused: batched %s, alone %s", ph_status_name(r->info.status),
             ph_status_name(solo_info.status));
  } else if (n_batched > n_solo || (!prefix && n_batched != n_solo)) {
    why = "token count";
    snprintf(detail, sizeof detail, "batched %lld, alone %lld", (long long)n_batched,
             (long long)n_solo);
  } else if (!prefix && solo_info.finish != r->info.finish) {
    why = "finish reason";
    snprintf(detail, sizeof detail, "batched %s, alone %s", ph_finish_reason_name(r->info.finish),
             ph_finish_reason_name(solo_info.finish));
  } else if (n_batched && memcmp(tb, ts, (size_t)n_batched * sizeof *tb) != 0) {
    int64_t j = 0;
    while (tb[j] == ts[j]) j++;
    why = "tokens";
    snprintf(detail, sizeof detail, "token %lld: batched %lld, alone %lld", (long long)j,
             (long long)tb[j], (long long)ts[j]);
  } else if (n_batched &&
             (!lb || !ls || memcmp(lb, ls, (size_t)(n_batched * V) * sizeof *lb) != 0)) {
    why = "logits";
    int64_t k = 0;
    if (lb && ls)
      while (memcmp(&lb[k], &ls[k], sizeof *lb) == 0) k++;
    snprintf(detail, sizeof detail, "token %lld, vocab entry %lld: batched %.9g, alone %.9g",
             (long long)(k / V), (long long)(k % V), lb ? (double)lb[k] : 0.0,
             ls ? (double)ls[k] : 0.0);
  }
  r->identical = why == NULL;
  char note[96] = "";
  if (prefix)
    snprintf(note, sizeof note, " (removed: first %lld alone)", (long long)n_batched);
  else if (r->info.n_preemptions > 0)
    snprintf(note, sizeof note, " (preempted %lldx, recomputed)", (long long)r->info.n_preemptions);
  if (r->identical)
    printf("   request %llu: %2lld tokens, %2lld x %lld logits identical%s\n",
           (unsigned long long)r->id, (long long)n_batched, (long long)n_batched, (long long)V,
           note);
  else
    printf("   request %llu: DIFFERENT %s (%s)\n", (unsigned long long)r->id, why, detail);
  ph_engine_free(solo);
  return PH_OK;
}

/* ---- 4. the summary -------------------------------------------------------------------------- */

/* label, then text[n] in double quotes, wrapped at 80 bytes with continuation lines indented by
 * `indent`: printable ASCII as it is, \n and \t escaped, other control bytes as \xNN, UTF-8
 * characters whole (never split across lines). */
static void print_text(const char *label, const char *text, size_t n, int indent) {
  int col = printf("%s \"", label);
  for (size_t i = 0; i < n;) {
    char buf[8];
    const unsigned char c = (unsigned char)text[i];
    size_t w = 1;
    if (c == '\n' || c == '\t' || c == '"' || c == '\\')
      snprintf(buf, sizeof buf, "\\%c", c == '\n' ? 'n' : c == '\t' ? 't' : (char)c);
    else if (c < 0x20 || c == 0x7f)
      snprintf(buf, sizeof buf, "\\x%02x", c);
    else if (c == 0xc2 && i + 1 < n && (unsigned char)text[i + 1] < 0xa0) { /* C1 controls */
      snprintf(buf, sizeof buf, "\\u%04x", (unsigned char)text[i + 1]);
      w = 2;
    } else {
      w = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
      if (w > n - i) w = n - i;
      memcpy(buf, text + i, w);
      buf[w] = '\0';
    }
    const int len = (int)strlen(buf);
    if (col + len > 79) col = printf("\n%*s", indent, "") - 1;
    col += printf("%s", buf);
    i += w;
  }
  printf("\"\n");
}

/* The text of ids (special tokens left out; ids beyond the tokenizer's vocabulary, which the
 * model's larger one lets a random model generate, give none: ph_tokenizer_decode drops them as
 * Hugging Face does); NULL without a tokenizer. */
static char *text_of(const ph_tokenizer *tok, const int64_t *ids, int64_t n, size_t *len) {
  char *t = NULL;
  if (!tok || ph_tokenizer_decode(tok, ids, n, 1, &t, len) != PH_OK) {
    ph_free(t);
    t = NULL;
  }
  return t;
}

static void summary(ph_engine *e, const demo_req *reqs, const totals *t, const ph_tokenizer *tok) {
  printf("\n5. summary\n\n"
         "   id prompt arrive generated finish  preempted  TTFT ms  total ms  alone\n");
  for (int i = 0; i < N_REQ; i++) {
    const demo_req *r = &reqs[i];
    printf("   %2llu %6lld %6d %9lld %-7s %9lld  %7.1f  %8.1f  %s\n", (unsigned long long)r->id,
           (long long)r->spec->n_prompt, r->spec->arrive_step, (long long)r->info.n_generated,
           ph_finish_reason_name(r->info.finish), (long long)r->info.n_preemptions,
           r->info.time_to_first_token_ms, r->info.total_ms,
           r->identical ? "identical" : "DIFFERENT");
  }
  printf("\n   %lld steps, %lld tokens run (prompts, decodes and recomputation),\n"
         "   %lld generated, %lld preemption(s), in %.2f s: %.0f tokens/s run,\n"
         "   %.0f tokens/s generated\n",
         (long long)t->steps, (long long)t->tokens_run, (long long)t->tokens_generated,
         (long long)t->preemptions, t->wall_s,
         t->wall_s > 0 ? (double)t->tokens_run / t->wall_s : 0.0,
         t->wall_s > 0 ? (double)t->tokens_generated / t->wall_s : 0.0);
  /* what was served: a greedy request and a sampled one, as text and token ids */
  if (tok)
    printf("\n   What two of them were served, as text (the model's tokenizer) and ids.\n"
           "   The weights are random, so the generated text is gibberish:\n");
  else
    printf("\n   What two of them were served (token ids; the model has no tokenizer):\n");
  for (int i = 0; i < 2 && i < N_REQ; i++) {
    const demo_req *r = &reqs[i];
    int64_t n = 0;
    const int64_t *gen = ph_engine_request_tokens(e, r->id, &n);
    char label[96];
    printf("\n   request %llu, %s:\n", (unsigned long long)r->id,
           sampling_str(&r->sp, (char[64]){0}, 64));
    size_t len = 0;
    char *text = text_of(tok, r->prompt, r->spec->n_prompt, &len);
    if (text) print_text("     prompt text:", text, len, 6);
    ph_free(text);
    text = gen ? text_of(tok, gen, n, &len) : NULL;
    if (text) print_text("     generated text:", text, len, 6);
    ph_free(text);
    snprintf(label, sizeof label, "     prompt (%lld):", (long long)r->spec->n_prompt);
    print_ids(label, r->prompt, r->spec->n_prompt, 6);
    snprintf(label, sizeof label, "     generated (%lld):", (long long)n);
    print_ids(label, gen ? gen : r->prompt, gen ? n : 0, 6);
  }
}

/* ---- 6. speculative decoding ---------------------------------------------------------------- */

/* Every request again, all at once, on an engine with compact state updates: even requests draft
 * from their own batched output with every third token wrong (PH_DRAFT_REPLAY), odd ones by
 * n-gram lookup, 4 drafts a step; max_new_tokens is what the batched run generated (the removed
 * request's prefix). Each request's tokens and logits rows are compared with memcmp against the
 * batched run in e. *n_bad counts the requests that differ. */
static ph_status speculate(const char *dir, const ph_engine_params *p, ph_engine *e,
                           const demo_req *reqs, int *n_bad, diag *d) {
  ph_engine_params sp = *p;
  sp.state_update_capacity = 8;
  ph_engine *x = NULL;
  ph_status s = ph_engine_create(dir, &sp, &x);
  if (s == PH_OK) s = ph_engine_set_capture_logits(x, PH_CAPTURE_SAMPLED);
  ph_engine_info ei;
  if (s == PH_OK) s = ph_engine_get_info(x, &ei);
  if (s != PH_OK) {
    engine_failed(x, s, d);
    ph_engine_free(x);
    return s;
  }
  int64_t replay[N_REQ][64];
  uint64_t ids[N_REQ] = {0};
  for (int i = 0; i < N_REQ && s == PH_OK; i++) {
    const demo_req *r = &reqs[i];
    int64_t n = 0;
    const int64_t *t = ph_engine_request_tokens(e, r->id, &n);
    if (!t || n < 1 || n > 64) continue;
    sampling_params q = r->sp;
    q.max_new_tokens = n;
    q.speculative.num_draft_tokens = 4;
    if (i % 2 == 0) {
      for (int64_t j = 0; j < n; j++) replay[i][j] = j % 3 == 2 ? (t[j] + 1) % ei.vocab_size : t[j];
      q.speculative.method = PH_DRAFT_REPLAY;
      q.speculative.replay_tokens = replay[i];
      q.speculative.n_replay_tokens = n;
    } else {
      q.speculative.method = PH_DRAFT_NGRAM;
    }
    s = engine_call_failed("ph_engine_add_request",
                           ph_engine_add_request(x, r->prompt, r->spec->n_prompt, &q, &ids[i]), d);
  }
  int64_t steps = 0, drafted = 0, accepted = 0, generated = 0, preempted = 0;
  for (; s == PH_OK && ph_engine_busy(x); steps++) {
    ph_step_info si;
    s = steps == MAX_STEPS ? diag_set(d, PH_ERR_INTERNAL, "speculative run: still busy")
                           : engine_failed(x, ph_engine_step(x, &si), d);
    drafted += si.n_drafted;
    accepted += si.n_accepted;
    generated += si.n_generated;
    preempted += si.n_preempted;
  }
  *n_bad = 0;
  for (int i = 0; i < N_REQ && s == PH_OK; i++) {
    if (!ids[i]) continue;
    int64_t nb = 0, nx = 0;
    const int64_t *tb = ph_engine_request_tokens(e, reqs[i].id, &nb);
    const int64_t *tx = ph_engine_request_tokens(x, ids[i], &nx);
    const float *lb = ph_engine_request_logits(e, reqs[i].id, NULL),
                *lx = ph_engine_request_logits(x, ids[i], NULL);
    const int same = nb == nx && tb && tx && lb && lx &&
                     memcmp(tb, tx, (size_t)nb * sizeof *tb) == 0 &&
                     memcmp(lb, lx, (size_t)(nb * ei.vocab_size) * sizeof *lb) == 0;
    ph_request_info in;
    s = engine_call_failed("ph_engine_request_info", ph_engine_request_info(x, ids[i], &in), d);
    if (s != PH_OK) break;
    printf("   request %llu: %-6s %2lld drafts, %2lld kept; %2lld tokens and logits %s\n",
           (unsigned long long)reqs[i].id, i % 2 == 0 ? "replay" : "n-gram",
           (long long)in.n_drafted, (long long)in.n_accepted, (long long)nx,
           same ? "identical" : "DIFFERENT");
    *n_bad += !same;
  }
  if (s == PH_OK)
    printf("\n   %lld steps for %lld tokens (all requests at once, %lld preemption(s));\n"
           "   %lld drafts verified, %lld accepted (%.0f%%).\n",
           (long long)steps, (long long)generated, (long long)preempted, (long long)drafted,
           (long long)accepted, drafted > 0 ? 100.0 * (double)accepted / (double)drafted : 0.0);
  ph_engine_free(x);
  return s;
}

/* ---- the command ----------------------------------------------------------------------------- */

static const cli_option OPTIONS[] = {
    {"work-dir", "DIR", "where to write the demo model (default build/demo)"},
    {"threads", "N", "CPU threads for the model (default 1: the model is tiny)"},
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

int cmd_demo(int argc, char **argv) {
  cli_args a;
  int rc = cli_parse(&a, "demo", OPTIONS, N_OPTIONS, argc, argv);
  if (rc) return rc;
  if (a.help) {
    cli_print_help(
        &a, "[--work-dir DIR] [--threads N]",
        "Make a small random-weight Qwen3.8-shaped checkpoint and inspect it, then serve\n"
        "a script of requests with the continuous-batching engine (live per-step\n"
        "progress, one request removed, preemption), prove every request's tokens and\n"
        "logits bit-identical to running it alone, and print a summary.");
    return CLI_EXIT_OK;
  }
  if (a.n_positional) return cli_usage_error(&a, "unexpected argument \"%s\"", a.positional[0]);
  /* a step of this model is microseconds of work per thread: more threads mostly add
   * synchronisation, and on a busy machine a lot of it */
  int64_t threads = 1;
  if ((rc = cli_get_int(&a, "threads", 1, 1024, &threads))) return rc;
  const char *work = cli_get(&a, "work-dir") ? cli_get(&a, "work-dir") : "build/demo";
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/qwen3.8-tiny-bf16", work);

  printf("== pagedhybrid demo: continuous batching on a tiny Qwen3.8-shaped model ==\n\n");
  if ((rc = make_model(dir))) return rc;
  const int32_t pages = pool_pages();
  if ((rc = inspect(dir, pages))) return rc;
  if (ferror(stdout)) return cli_flush_stdout(); /* no one reads what follows */

  ph_engine_params p = ph_engine_params_default();
  p.max_batch_size = MAX_BATCH;
  p.max_requests = MAX_BATCH;
  p.max_scheduled_tokens = MAX_TOKENS;
  p.prefill_chunk = PREFILL_CHUNK;
  p.block_size = BLOCK_SIZE;
  p.num_blocks = pages + 1; /* and the null page */
  p.n_threads = (int)threads;
  diag d;
  diag_clear(&d);
  ph_engine *e = NULL;
  ph_engine_info info;
  ph_status s = ph_engine_create(dir, &p, &e);
  if (s == PH_OK)
    s = ph_engine_set_capture_logits(e, PH_CAPTURE_SAMPLED); /* every logits row, compared with
                                            the run alone */
  if (s == PH_OK) s = ph_engine_get_info(e, &info);
  if (s != PH_OK) {
    engine_failed(e, s, &d);
    ph_engine_free(e);
    return cli_lib_error(s, d.msg);
  }
  /* the tokenizer make-tiny wrote (a model without one shows ids only) */
  ph_tokenizer *tok = NULL;
  if (text_has_tokenizer(dir) && text_open_tokenizer(dir, "demo", NULL, &tok, &d) != PH_OK) {
    fprintf(stderr, "demo: note: no text shown: %s\n", d.msg);
    diag_clear(&d);
  }
  demo_req reqs[N_REQ];
  init_requests(reqs, info.vocab_size, tok);
  char cache[CLI_BYTES_BUF];
  printf("\n3. serve: %d requests through one engine: %d KV pages of %d tokens and %d state\n"
         "   slots (%s, as planned above); at most %d sequences and %d tokens a\n"
         "   step; prompts in chunks of %d. The pool holds the largest request but not\n"
         "   all of them at once, so the scheduler has to preempt.\n"
         "   Each step line: requests running and waiting after it; the sequences and\n"
         "   tokens it ran; its speed; pages and slots in use; state bytes moved.\n"
         "   Events: > arrives and x removed by the caller (before the step line that\n"
         "   follows); + admitted, ! preempted, - finished (by the step line above).\n\n",
         N_REQ, pages, BLOCK_SIZE, MAX_BATCH,
         cli_bytes((uint64_t)info.cache_bytes, cache, sizeof cache), MAX_BATCH, MAX_TOKENS,
         PREFILL_CHUNK);
  totals t;
  s = serve(e, reqs, &t, &d);
  if (s != PH_OK) {
    ph_engine_free(e);
    ph_tokenizer_free(tok);
    return ferror(stdout) ? cli_flush_stdout() : cli_lib_error(s, d.msg);
  }
  int n_removed = 0;
  for (int i = 0; i < N_REQ; i++) n_removed += reqs[i].info.finish == PH_FINISH_ABORTED;
  printf("\n   preemption check: %lld preemption(s) %s;\n"
         "   removal check: %d request(s) aborted.\n",
         (long long)t.preemptions,
         t.preemptions > 0 ? "happened (the pool ran short)" : "did NOT happen this time",
         n_removed);

  printf("\n4. proof: each request again, alone on a fresh engine with the same parameters;\n"
         "   generated tokens and every logits row compared with memcmp:\n\n");
  int n_bad = 0;
  for (int i = 0; i < N_REQ && s == PH_OK; i++) {
    fflush(stdout);
    s = prove_one(dir, &p, e, &reqs[i], &d);
    n_bad += s == PH_OK && !reqs[i].identical;
  }
  if (s != PH_OK) {
    ph_engine_free(e);
    ph_tokenizer_free(tok);
    return cli_lib_error(s, d.msg);
  }
  summary(e, reqs, &t, tok);
  ph_tokenizer_free(tok);
  if (n_bad) {
    ph_engine_free(e);
    char msg[128];
    snprintf(msg, sizeof msg, "%d request(s) differ from running alone (batch invariance broken)",
             n_bad);
    fflush(stdout);
    return cli_lib_error(PH_ERR_INTERNAL, msg);
  }
  printf("\n6. speculative decoding: the requests again, all at once, on an engine with\n"
         "   compact state updates (state_update_capacity 8: a verify of k drafts runs\n"
         "   in one step, the kept prefix of the state is replayed and published). Even\n"
         "   requests draft their own output with every third token wrong, odd ones by\n"
         "   n-gram lookup; every token and logits row must equal the batched run's:\n\n");
  int n_spec_bad = 0;
  s = speculate(dir, &p, e, reqs, &n_spec_bad, &d);
  ph_engine_free(e);
  if (s != PH_OK) return cli_lib_error(s, d.msg);
  if (n_spec_bad) {
    char msg[128];
    snprintf(msg, sizeof msg, "%d request(s) differ with speculative decoding", n_spec_bad);
    fflush(stdout);
    return cli_lib_error(PH_ERR_INTERNAL, msg);
  }
  printf("\nEvery request matched its alone run bit for bit, preempted ones included,\n"
         "and speculative decoding changed no token and no logit.\n"
         "The weights are RANDOM, so the tokens mean nothing; what is shown is the\n"
         "serving machinery.\n");
  return CLI_EXIT_OK;
}
