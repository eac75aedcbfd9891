/* pagedhybrid generate --model DIR --tokens 1,2,3 [--tokens 4,5 ...] — greedy generation.
 *
 * One or more prompts. On the packed paged layout (a paged package, or a checkpoint with
 * --layout paged, the default for several prompts) the sequences are requests of the serving
 * engine (ph_engine_*, include/pagedhybrid.h), sized so that they run packed in one batch: the
 * prompts in one prefill step (a chunk and a token budget that hold every prompt), then one
 * greedy step with every sequence each; the pages in use and the state bytes moved per step are
 * reported. Each request asks for one token more than it prints: the engine runs a token only
 * to sample the next, and the logits of the last printed token are part of --logits-out. Its
 * rows come from the engine's capture of every position (PH_CAPTURE_POSITIONS).
 * On the dense layout (a dense package, or a checkpoint with one prompt by default) the
 * sequences run one after another on a dense session (src/runtime/dense_session.h through
 * src/tools_api.h): the engine serves only the paged graph, and the dense graph is the reference
 * the golden logits were made with, so it stays.
 *
 * Prints each prompt, its generated token ids and its finish reason. A sequence stops at
 * --max-new tokens or when it fills the context (every position the model has rotary rows for),
 * whichever comes first; both are finish "length", as in `run`, and stopping at the context is
 * said on stderr. --logits-out FILE writes an F32 safetensors file with one tensor per sequence
 * "seq{i}.logits" [T_i, vocab] (and, for a single sequence, the same rows as "logits", the
 * format of the dense-only releases): row t holds the logits computed at position t of prompt +
 * generated tokens (row t predicts token t+1). Every generated token is run once too, so T_i =
 * prompt length + generated (max-new unless the context stopped it first; so one token fewer
 * than `run`, whose last token is never run). This format is stable: others check us with it.
 *
 * Text (--prompt TEXT, --chat FILE, --chat --prompt TEXT): one request of the serving engine,
 * its prompt encoded by the model's own tokenizer (tools/text_input.h: a text prompt with
 * add_special 1; a chat rendered by the model's template with the generation prompt and encoded
 * with add_special 0). The generated tokens go through a ph_text_stream (special tokens skipped)
 * and each piece is written to stdout and flushed as it comes, then one newline; stderr gets the
 * finish reason and the token counts ("generate: finish stop (stop string), 9 prompt tokens, 4
 * generated"). The tokenizer's EOS ids join the stop ids unless --ignore-eos. A --stop string
 * cuts the text before it, removes the request (ph_engine_remove_request) and is finish "stop";
 * the generated count then runs to the token that completed it. Sampling: greedy unless
 * --temperature, with --top-k, --top-p, --min-p, --seed. A checkpoint without tokenizer.json is
 * PH_ERR_NOT_FOUND naming the file; --tokens needs none.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "engine_flags.h"
#include "pagedhybrid.h"
#include "quant_flags.h"
#include "text_input.h"
#include "tools_api.h"

static const cli_option OPTIONS[] = {
    {"model", "DIR", "Hugging Face checkpoint directory, or an exported package (model.onnx)"},
    {"tokens", "LIST...",
     "prompt token ids, comma-separated (e.g. 1,2,3); repeat for more sequences"},
    {"prompt", "TEXT", "the prompt as text, encoded by the model's tokenizer (tokenizer.json)"},
    {"chat", "[FILE]",
     "a chat rendered by the model's template: FILE holds a messages array (or {\"messages\": "
     "[...], template variables}); without FILE, --prompt is one user turn"},
    {"stop", "STR...", "text: stop before this string (repeatable, up to 16)"},
    {"ignore-eos", NULL, "text: the end-of-sequence ids do not stop generation"},
    {"temperature", "T", "text: sampling temperature (default 0: greedy)"},
    {"top-k", "K", "text: sample from the K most likely tokens (default 0: off)"},
    {"top-p", "P", "text: nucleus sampling, (0, 1] (default 1: off)"},
    {"min-p", "P", "text: drop tokens below P x the most likely one's probability, [0, 1)"},
    {"seed", "S", "text: sampling seed (default 0)"},
    {"layout", "dense|paged",
     "for a checkpoint: the graph to run (default: dense for one prompt, paged for several)"},
    {"block-size", "N",
     "checkpoint: tokens per KV page, power of two >= 16 (default 16; implies paged)"},
    {"max-new", "N", "tokens to generate (default 16; fewer when the context is full)"},
    {"logits-out", "FILE",
     "write every position's logits: F32 safetensors \"seq{i}.logits\" [T_i, vocab]"},
    {"threads", "N", "worker threads (default: all CPUs)"},
    {"max-context", "N", "context bound (default min(max_position_embeddings, 32768))"},
    {"precision", "f32|bf16|auto",
     "linear-layer arithmetic: f32, or bf16 inputs and bf16 dot products summed in f32 "
     "(default auto: bf16 for a bf16 checkpoint; docs/precision.md)"},
    QUANT_FLAG_OPTIONS,
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

static int64_t argmax(const float *row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; i++)
    if (row[i] > row[best]) best = i;
  return best;
}

#define MAX_SEQS 32

typedef struct gen_seq {
  int64_t *tokens; /* [T]: prompt then generated */
  int64_t n_prompt, T;
  float *logits; /* [T, V] */
} gen_seq;

/* The startup line of a quantized engine on stderr (nothing when it serves float weights). */
static void log_engine_quant(const ph_engine *e) {
  ph_engine_info in;
  char line[256];
  if (ph_engine_get_info(e, &in) == PH_OK && in.quantized_linears > 0)
    fprintf(stderr, "generate: weights %s\n", quant_flags_describe(&in, line, sizeof line));
}

/* Dense: each sequence alone, one after another. */
static ph_status run_dense(dense_session *sess, gen_seq *q, int n, diag *d) {
  const int64_t V = dense_session_vocab(sess);
  for (int i = 0; i < n; i++) {
    dense_session_reset(sess);
    FORWARD_IF_ERROR(dense_session_step(sess, q[i].tokens, q[i].n_prompt, q[i].logits, d));
    for (int64_t pos = q[i].n_prompt; pos < q[i].T; pos++) {
      q[i].tokens[pos] = argmax(q[i].logits + (pos - 1) * V, V);
      FORWARD_IF_ERROR(dense_session_step(sess, &q[i].tokens[pos], 1, q[i].logits + pos * V, d));
    }
  }
  return PH_OK;
}

/* Paged: every sequence a request of the engine, packed in each step (step k runs the prompts
 * for k == 0, else each sequence's k-th generated token); a sequence whose context is full
 * leaves the batch. Sequence i asks for T_i - n_prompt + 1 tokens and keeps T_i - n_prompt: the
 * engine runs its last kept token (to sample the one dropped), which gives row T_i - 1. A
 * sequence with nothing to generate (its prompt fills the context) is not a request (the
 * engine refuses a prompt that leaves no room): it prints as before, but no position of it is
 * run, so --logits-out is PH_ERR_LIMIT for it. */
static ph_status run_paged(ph_engine *e, gen_seq *q, int n, int64_t K, int want_rows, diag *d) {
  ph_engine_info info;
  ph_status s = ph_engine_get_info(e, &info);
  RETURN_ERROR_IF(s != PH_OK, d, s, "ph_engine_get_info: %s", ph_engine_error(e));
  const int64_t V = info.vocab_size;
  uint64_t id[MAX_SEQS] = {0};
  int64_t pages = 0;
  for (int i = 0; i < n; i++) /* as the paged session checks them, before any step */
    for (int64_t t = 0; t < q[i].n_prompt; t++)
      RETURN_ERROR_IF(q[i].tokens[t] >= V, d, PH_ERR_INVALID_ARGUMENT,
                      "sequence %d: token %lld at %lld is outside the vocabulary [0, %lld)", i,
                      (long long)q[i].tokens[t], (long long)t, (long long)V);
  for (int i = 0; i < n; i++) {
    pages += (q[i].T + K - 1) / K;
    if (q[i].T == q[i].n_prompt) {
      RETURN_ERROR_IF(want_rows, d, PH_ERR_LIMIT,
                      "seq%d: a prompt of %lld tokens fills the context of %lld: the engine runs "
                      "none of it, and --logits-out needs its rows",
                      i, (long long)q[i].n_prompt, (long long)q[i].T);
      continue;
    }
    ph_sampling_params sp = ph_sampling_params_default(); /* greedy */
    sp.max_new_tokens = q[i].T - q[i].n_prompt + 1;
    sp.ignore_eos = 1;
    s = ph_engine_add_request(e, q[i].tokens, q[i].n_prompt, &sp, &id[i]);
    RETURN_ERROR_IF(s != PH_OK, d, s, "ph_engine_add_request: %s", ph_status_message(s));
  }
  uint64_t moved = 0;
  int64_t steps = 0;
  while (ph_engine_busy(e)) {
    ph_step_info si;
    s = ph_engine_step(e, &si);
    RETURN_ERROR_IF(s != PH_OK, d, s, "%s", ph_engine_error(e));
    moved += si.state_bytes_moved;
    steps += si.batch_size > 0;
  }
  for (int i = 0; i < n; i++) {
    if (!id[i]) continue;
    ph_request_info in;
    s = ph_engine_request_info(e, id[i], &in);
    RETURN_ERROR_IF(s != PH_OK, d, s, "ph_engine_request_info: %s", ph_status_message(s));
    if (in.finish == PH_FINISH_ERROR) {
      char tag[16] = "";
      if (n > 1) snprintf(tag, sizeof tag, "seq%d: ", i);
      return diag_set(d, in.status, "%s%s", tag, in.message);
    }
    int64_t n_tok = 0, n_rows = 0;
    const int64_t *tok = ph_engine_request_tokens(e, id[i], &n_tok);
    RETURN_ERROR_IF(!tok || n_tok != q[i].T - q[i].n_prompt + 1, d, PH_ERR_INTERNAL,
                    "seq%d: the engine generated %lld tokens, %lld asked for", i, (long long)n_tok,
                    (long long)(q[i].T - q[i].n_prompt + 1));
    memcpy(q[i].tokens + q[i].n_prompt, tok, (size_t)(n_tok - 1) * sizeof *tok);
    if (want_rows) {
      const float *rows = ph_engine_request_logits(e, id[i], &n_rows);
      RETURN_ERROR_IF(!rows || n_rows != q[i].T, d, PH_ERR_INTERNAL,
                      "seq%d: the engine kept %lld logits rows, %lld expected", i,
                      (long long)n_rows, (long long)q[i].T);
      memcpy(q[i].logits, rows, (size_t)(q[i].T * V) * sizeof *rows);
    }
    s = ph_engine_release_request(e, id[i]);
    RETURN_ERROR_IF(s != PH_OK, d, s, "ph_engine_release_request: %s", ph_status_message(s));
  }
  char moved_s[CLI_BYTES_BUF], per_step[CLI_BYTES_BUF];
  fprintf(stderr,
          "paged: %d sequences packed, %lld steps, %lld pages of %lld tokens in use, "
          "state bytes moved %s (%s per step)\n",
          n, (long long)steps, (long long)pages, (long long)K,
          cli_bytes(moved, moved_s, sizeof moved_s),
          cli_bytes(steps ? moved / (uint64_t)steps : 0, per_step, sizeof per_step));
  return PH_OK;
}

/* Rows of sequence q (prompt + generated) when generation stops at max_new or at the context. */
static int64_t rows_within(const gen_seq *q, int64_t max_new, int64_t context) {
  const int64_t room = context - q->n_prompt;
  return q->n_prompt + (room < max_new ? (room > 0 ? room : 0) : max_new);
}

/* Engine parameters for a packed run of these sequences, each at most `context` tokens: one
 * batch of all of them, every prompt whole in the first step, pages for every token. */
static ph_engine_params paged_params(const gen_seq *q, int n, int64_t threads, int64_t K,
                                     int64_t max_new, int64_t context) {
  ph_engine_params p = ph_engine_params_default();
  int64_t pages = 1, tokens = 0, chunk = 1; /* the null page */
  for (int i = 0; i < n; i++) {
    pages += (rows_within(&q[i], max_new, context) + K - 1) / K;
    tokens += q[i].n_prompt > 1 ? q[i].n_prompt : 1;
    if (q[i].n_prompt > chunk) chunk = q[i].n_prompt;
  }
  p.num_blocks = (int32_t)(pages < INT32_MAX ? pages : INT32_MAX);
  p.max_requests = p.max_batch_size = n;
  p.max_scheduled_tokens = tokens;
  p.prefill_chunk = chunk;
  p.n_threads = (int)threads;
  return p;
}

static ph_status write_logits(const char *path, const gen_seq *q, int n, int64_t V, diag *d) {
  st_write_entry e[MAX_SEQS + 1];
  char names[MAX_SEQS][32];
  int k = 0;
  for (int i = 0; i < n; i++) {
    snprintf(names[i], sizeof names[i], "seq%d.logits", i);
    e[k++] = (st_write_entry){names[i], PH_DTYPE_F32, shape_2d(q[i].T, V), q[i].logits};
  }
  if (n == 1) e[k++] = (st_write_entry){"logits", PH_DTYPE_F32, shape_2d(q[0].T, V), q[0].logits};
  return st_write_file(path, e, (size_t)k, NULL, NULL, d);
}

static void print_seq(const gen_seq *q, int i, int n, int64_t max_new, int64_t context) {
  char tag[16] = "";
  if (n > 1) snprintf(tag, sizeof tag, "seq%d ", i);
  printf("%sprompt:", tag);
  for (int64_t k = 0; k < q->n_prompt; k++)
    printf("%s%lld", k ? "," : " ", (long long)q->tokens[k]);
  printf("\n%sgenerated:", tag);
  for (int64_t k = q->n_prompt; k < q->T; k++)
    printf("%s%lld", k > q->n_prompt ? "," : " ", (long long)q->tokens[k]);
  const int64_t n_gen = q->T - q->n_prompt;
  if (n_gen < max_new) {
    printf("\n%sfinish: length (the context of %lld tokens is full)\n", tag, (long long)context);
    fprintf(stderr,
            "%sstopped at the context: %lld of --max-new %lld tokens generated (prompt %lld, "
            "context %lld)\n",
            tag, (long long)n_gen, (long long)max_new, (long long)q->n_prompt, (long long)context);
  } else {
    printf("\n%sfinish: length\n", tag);
  }
}

/* ---- text: one request of the engine, printed as it is generated ---------------------------- */

typedef struct gen_text {
  text_out out;
  int stop_seen;   /* a stop string completed: remove the request after the step */
  ph_status error; /* the first failure inside the callback */
  diag d;
  int wrote_error; /* stdout could not be written */
} gen_text;

/* The engine's callback (the stepping thread, inside ph_engine_step): each token through the
 * text stream, its piece to stdout at once. */
static void on_text_token(void *user, uint64_t id, int64_t token, ph_finish_reason reason) {
  gen_text *g = user;
  (void)id;
  (void)reason;
  if (token < 0 || g->error != PH_OK || g->out.stopped) return;
  const char *piece = NULL;
  size_t n = 0;
  g->error = text_out_push(&g->out, token, &piece, &n, &g->d);
  if (g->error == PH_OK && n && (fwrite(piece, 1, n, stdout) != n || fflush(stdout) != 0))
    g->wrote_error = 1;
  if (g->out.stopped) g->stop_seen = 1;
}

/* Sampling flags into sp (only for text: --tokens is greedy, its logits the reference). */
static int text_sampling(cli_args *a, int64_t max_new, ph_sampling_params *sp) {
  *sp = ph_sampling_params_default();
  sp->max_new_tokens = max_new;
  double t = 0.0, p = 1.0, mp = 0.0;
  int64_t k = 0;
  uint64_t seed = 0;
  int rc;
  if ((rc = cli_get_double(a, "temperature", 0.0, 1e6, &t)) ||
      (rc = cli_get_int(a, "top-k", 0, INT32_MAX, &k)) ||
      (rc = cli_get_double(a, "top-p", 0.0, 1.0, &p)) ||
      (rc = cli_get_double(a, "min-p", 0.0, 1.0, &mp)) || (rc = cli_get_u64(a, "seed", &seed)))
    return rc;
  if (p <= 0.0) return cli_usage_error(a, "--top-p must be in (0, 1], got %g", p);
  if (mp >= 1.0) return cli_usage_error(a, "--min-p must be in [0, 1), got %g", mp);
  sp->temperature = (float)t;
  sp->top_k = (int32_t)k;
  sp->top_p = (float)p;
  sp->min_p = (float)mp;
  sp->seed = seed;
  sp->ignore_eos = cli_flag(a, "ignore-eos");
  return CLI_EXIT_OK;
}

/* The prompt's ids: --prompt TEXT (add_special 1), --chat FILE, or --chat with --prompt as one
 * user turn (rendered with the generation prompt, add_special 0). */
static ph_status text_prompt_ids(const cli_args *a, const ph_tokenizer *tok, int64_t **ids,
                                 int64_t *n, diag *d) {
  const char *prompt = cli_get(a, "prompt"), *chat = cli_get(a, "chat");
  if (!chat) return text_encode(tok, prompt, strlen(prompt), 1, ids, n, d);
  char *messages = NULL, *extra = NULL;
  int add_gen = 1;
  ph_status s = chat[0] ? text_read_chat_file(chat, &messages, &extra, &add_gen, d)
                        : text_user_turn(prompt, &messages, d);
  if (s == PH_OK) s = text_chat_ids(tok, messages, extra, add_gen, ids, n, d);
  free(messages);
  free(extra);
  return s;
}

static int generate_text(cli_args *a, const char *dir, int64_t max_new, int64_t threads,
                         int64_t max_ctx, int64_t block, ph_precision precision,
                         const ph_quant_params *quant) {
  const char *stops[PH_MAX_STOP_STRINGS + 1];
  const int n_stops = cli_get_all(a, "stop", stops, PH_MAX_STOP_STRINGS + 1);
  if (n_stops > PH_MAX_STOP_STRINGS)
    return cli_usage_error(a, "at most %d --stop strings", PH_MAX_STOP_STRINGS);
  for (int i = 0; i < n_stops; i++)
    if (!stops[i][0]) return cli_usage_error(a, "--stop needs a non-empty string");
  ph_sampling_params sp;
  int rc = text_sampling(a, max_new, &sp);
  if (rc) return rc;
  const int is_package = onnx_is_package(dir);
  if (is_package && (cli_get(a, "max-context") || cli_get(a, "block-size")))
    return cli_usage_error(a, "--max-context and --block-size apply to a checkpoint; a package "
                              "fixes them in its graph");
  if (!is_package && (rc = cli_check_model_path(dir))) return rc;

  diag d;
  diag_clear(&d);
  gen_text g;
  memset(&g, 0, sizeof g);
  ph_tokenizer *tok = NULL;
  ph_engine *e = NULL;
  int64_t *ids = NULL, n_ids = 0;
  uint64_t id = 0;
  const char *what = cli_get(a, "chat") ? "--chat" : "--prompt";
  ph_status s = text_open_tokenizer(
      dir, what, "--tokens 1,2,3 generates from token ids without one", &tok, &d);
  if (s == PH_OK) s = text_prompt_ids(a, tok, &ids, &n_ids, &d);
  if (s == PH_OK) s = text_join_eos(tok, &sp, &d);
  if (s == PH_OK) s = text_out_init(&g.out, tok, stops, n_stops, &d);
  if (s == PH_OK && is_package) { /* the engine serves the paged layout only */
    genai_config gc;
    s = genai_config_read(dir, &gc, &d);
    if (s == PH_OK && !gc.paged)
      s = diag_set(&d, PH_ERR_UNSUPPORTED,
                   "%s is a dense package: text generation runs on the serving engine, which "
                   "serves packages exported --layout paged (or give the checkpoint)",
                   dir);
  }
  if (s == PH_OK) {
    ph_engine_params p = ph_engine_params_default();
    p.max_batch_size = p.max_requests = 1;
    p.n_threads = (int)threads;
    p.precision = precision;
    p.quant = *quant;
    if (!is_package) {
      p.block_size = block;
      p.max_context = max_ctx;
    }
    s = engine_failed(e, ph_engine_create(dir, &p, &e), &d);
    if (s == PH_OK) log_engine_quant(e);
  }
  if (s == PH_OK) {
    ph_engine_set_callback(e, on_text_token, &g);
    s = engine_call_failed("ph_engine_add_request", ph_engine_add_request(e, ids, n_ids, &sp, &id),
                           &d);
  }
  while (s == PH_OK && ph_engine_busy(e)) {
    s = engine_failed(e, ph_engine_step(e, NULL), &d);
    if (s == PH_OK && g.error != PH_OK) s = diag_set(&d, g.error, "%s", g.d.msg);
    if (s == PH_OK && g.wrote_error) s = diag_set(&d, PH_ERR_IO, "writing stdout failed");
    if (s == PH_OK && g.stop_seen) { /* the text is cut: the request ends at the next step */
      g.stop_seen = 0;
      s = engine_call_failed("ph_engine_remove_request", ph_engine_remove_request(e, id), &d);
    }
  }
  ph_request_info info;
  if (s == PH_OK)
    s = engine_call_failed("ph_engine_request_info", ph_engine_request_info(e, id, &info), &d);
  if (s == PH_OK && info.finish == PH_FINISH_ERROR)
    s = diag_set(&d, info.status, "%s", info.message);
  if (s == PH_OK) {
    const char *piece = NULL;
    size_t n = 0;
    s = text_out_finish(&g.out, &piece, &n, &d); /* nothing after a stop string */
    if (s == PH_OK && n) fwrite(piece, 1, n, stdout);
  }
  if (s == PH_OK) {
    printf("\n");
    const int64_t n_gen = g.out.stopped ? g.out.n_tokens : info.n_generated;
    const char *why = g.out.stopped                   ? "stop (stop string)"
                      : info.finish == PH_FINISH_STOP ? "stop (end of sequence or stop id)"
                                                      : ph_finish_reason_name(info.finish);
    fflush(stdout); /* before stderr's line; a failed write is main's to report */
    fprintf(stderr, "generate: finish %s, %lld prompt tokens, %lld generated tokens\n", why,
            (long long)n_ids, (long long)n_gen);
  }
  rc = s == PH_OK ? CLI_EXIT_OK : cli_lib_error(s, d.msg);
  text_out_free(&g.out);
  free(ids);
  ph_engine_free(e);
  ph_tokenizer_free(tok);
  return rc;
}

/* The flags both kinds of prompt share. min_new: the least --max-new (a text prompt generates at
 * least one token; --tokens may ask for none and write the prompt's logits only). */
typedef struct run_flags {
  int64_t max_new, threads, max_ctx, block;
  ph_precision precision;
  ph_quant_params quant;
} run_flags;

static int read_run_flags(cli_args *a, int64_t min_new, run_flags *f) {
  *f = (run_flags){.max_new = 16, .block = 16, .precision = PH_PRECISION_AUTO};
  int rc;
  if ((rc = cli_get_int(a, "max-new", min_new, 1 << 20, &f->max_new)) ||
      (rc = cli_get_int(a, "threads", 0, 1024, &f->threads)) ||
      (rc = cli_get_int(a, "max-context", 0, (int64_t)1 << 24, &f->max_ctx)) ||
      (rc = cli_get_int(a, "block-size", 16, 1 << 20, &f->block)) ||
      (rc = engine_flags_precision(a, &f->precision)) || (rc = quant_flags_parse(a, &f->quant)))
    return rc;
  if (f->block & (f->block - 1))
    return cli_usage_error(a, "--block-size must be a power of two, got %lld", (long long)f->block);
  return CLI_EXIT_OK;
}

int cmd_generate(int argc, char **argv) {
  cli_args a;
  int rc = cli_parse(&a, "generate", OPTIONS, N_OPTIONS, argc, argv);
  if (rc) return rc;
  if (a.help) {
    cli_print_help(
        &a, "--model DIR (--prompt TEXT | --chat FILE | --chat --prompt TEXT | --tokens LIST ...)",
        "Text: the prompt encoded by the model's tokenizer (a chat rendered by its template),\n"
        "one request of the serving engine; the text is printed as it is generated, then the\n"
        "finish reason and token counts on stderr. Stops at --max-new tokens, an end-of-\n"
        "sequence id or a --stop string. --tokens: greedy generation from token ids, printing\n"
        "each prompt, its generated ids and its finish reason; several prompts run packed in\n"
        "one batch on the paged layout.");
    return CLI_EXIT_OK;
  }
  if (a.n_positional) return cli_usage_error(&a, "unexpected argument \"%s\"", a.positional[0]);
  const char *dir = cli_get(&a, "model"), *lists[MAX_SEQS + 1];
  const int n = cli_get_all(&a, "tokens", lists, MAX_SEQS + 1);
  if (!dir) return cli_usage_error(&a, "--model DIR is required");
  const char *prompt = cli_get(&a, "prompt"), *chat = cli_get(&a, "chat");
  static const char *const text_only[] = {"stop",  "ignore-eos", "temperature", "top-k",
                                          "top-p", "min-p",      "seed"};
  if (n > 0 && (prompt || chat))
    return cli_usage_error(&a, "give the prompt as --tokens or as text (--prompt, --chat), not "
                               "both");
  if (n == 0 && !prompt && !chat)
    return cli_usage_error(&a, "a prompt is required: --prompt TEXT, --chat FILE or --tokens "
                               "LIST");
  if (chat && chat[0] && prompt)
    return cli_usage_error(&a, "--chat FILE holds the messages; --prompt goes with --chat "
                               "without a FILE (one user turn)");
  if (chat && !chat[0] && !prompt)
    return cli_usage_error(&a, "--chat needs a FILE of messages, or --prompt TEXT as the user "
                               "turn");
  for (size_t i = 0; n > 0 && i < sizeof text_only / sizeof text_only[0]; i++)
    if (cli_get(&a, text_only[i]))
      return cli_usage_error(&a,
                             "--%s applies to a text prompt (--prompt, --chat); --tokens "
                             "generates greedily",
                             text_only[i]);
  if (n == 0) {
    const char *layout = cli_get(&a, "layout");
    if (layout && strcmp(layout, "paged") != 0)
      return cli_usage_error(&a,
                             "a text prompt runs on the serving engine (the paged layout); "
                             "--layout %s applies to --tokens",
                             layout);
    if (cli_get(&a, "logits-out")) return cli_usage_error(&a, "--logits-out applies to --tokens");
    run_flags f;
    if ((rc = read_run_flags(&a, 1, &f))) return rc;
    return generate_text(&a, dir, f.max_new, f.threads, f.max_ctx, f.block, f.precision, &f.quant);
  }
  if (n > MAX_SEQS) return cli_usage_error(&a, "at most %d --tokens sequences", MAX_SEQS);
  diag out_d; /* a --logits-out that cannot be replaced (a FIFO, a device) before any work */
  if (cli_get(&a, "logits-out") && wfile_check_target(cli_get(&a, "logits-out"), &out_d) != PH_OK)
    return cli_lib_error(out_d.status, out_d.msg);
  run_flags f;
  if ((rc = read_run_flags(&a, 0, &f))) return rc;
  const int64_t max_new = f.max_new, threads = f.threads, max_ctx = f.max_ctx, block = f.block;
  const ph_precision precision = f.precision;
  const char *layout = cli_get(&a, "layout");
  if (layout && strcmp(layout, "dense") != 0 && strcmp(layout, "paged") != 0)
    return cli_usage_error(&a, "--layout is dense or paged, got \"%s\"", layout);
  if (cli_get(&a, "block-size") && layout && strcmp(layout, "dense") == 0)
    return cli_usage_error(&a, "--block-size applies to --layout paged only");
  gen_seq q[MAX_SEQS];
  memset(q, 0, sizeof q);
  for (int i = 0; i < n; i++) {
    if ((rc = cli_parse_ids(&a, "tokens", lists[i], &q[i].tokens, &q[i].n_prompt))) {
      for (int k = 0; k < i; k++) free(q[k].tokens);
      return rc;
    }
  }
  /* A package directory (model.onnx) runs its graph, in the layout and page size it was
   * exported with; anything else is a checkpoint. */
  const int is_package = onnx_is_package(dir);
  if (is_package && (layout || cli_get(&a, "block-size"))) {
    for (int i = 0; i < n; i++) free(q[i].tokens);
    return cli_usage_error(&a, layout ? "--layout applies to a checkpoint; a package runs its own "
                                        "layout"
                                      : "--block-size applies to a checkpoint; a package has its "
                                        "own page size");
  }
  /* default: paged for several prompts, or when a page size is asked for */
  int paged = layout ? strcmp(layout, "paged") == 0 : n > 1 || cli_get(&a, "block-size") != NULL;
  if (!is_package && (rc = cli_check_model_path(dir))) {
    for (int i = 0; i < n; i++) free(q[i].tokens);
    return rc;
  }

  ph_model *m = NULL;
  ph_status s = PH_OK;
  diag d;
  diag_clear(&d);
  dense_session *dense = NULL;
  ph_engine *eng = NULL;
  genai_config gc;
  int64_t K = block, V = 0;
  /* the context: what the caller bounds it to, else what the model was exported for; the
   * session's own rows cap it (a checkpoint's: what its builder makes by default) */
  int64_t context = max_ctx > 0 ? max_ctx : INT64_MAX;
  if (is_package) {
    s = genai_config_read(dir, &gc, &d);
    if (s == PH_OK) paged = gc.paged;
    if (s == PH_OK && max_ctx <= 0 && gc.context_length > 0) context = gc.context_length;
    if (s == PH_OK) K = gc.dynamic_batching.block_size;
  } else if (!paged) {                /* the paged layout's engine opens the checkpoint itself */
    s = ph_model_open(dir, NULL, &m); /* its errors, before any graph is built */
    if (s != PH_OK) diag_set(&d, s, "%s", m ? ph_model_error(m) : ph_status_message(s));
  }
  if (s == PH_OK && !paged) {
    if (is_package && f.quant.bits != 0) { /* as the engine refuses it for a paged package */
      s = diag_set(&d, PH_ERR_INVALID_ARGUMENT,
                   "--quant: %s is a package: the package's weights run as exported; quantize "
                   "at export (pagedhybrid export --quant)",
                   dir);
    } else if (is_package) {
      graph *g = NULL;
      s = package_read_graph(dir, &gc, PACKAGE_FINALIZE | PACKAGE_CHECK, &g, NULL, &d);
      if (s == PH_OK)
        s = dense_session_create_graph_ex(g, max_ctx, (int)threads, precision, &dense, &d);
    } else {
      s = dense_session_create_quant(m, max_ctx, (int)threads, precision, &f.quant, &dense, &d);
      ph_quant_params qp;
      const int n_q = s == PH_OK ? dense_session_quant(dense, &qp) : 0;
      if (n_q > 0) {
        ph_engine_info in; /* the engine's description of the same facts */
        memset(&in, 0, sizeof in);
        in.params.quant = qp;
        in.params.quant.skip = f.quant.skip;
        in.quantized_linears = n_q;
        char line[256];
        fprintf(stderr, "generate: weights %s\n", quant_flags_describe(&in, line, sizeof line));
      }
    }
    if (s == PH_OK) {
      V = dense_session_vocab(dense);
      if (dense_session_max_context(dense) < context) context = dense_session_max_context(dense);
    }
  } else if (s == PH_OK) {
    /* pages for every token up to the context (a checkpoint's default context is at most
     * 32768 tokens; fewer pages used than made changes nothing) */
    ph_engine_params p =
        paged_params(q, n, threads, K, max_new, context < INT64_MAX ? context : 32768);
    if (!is_package) {
      p.block_size = block;
      p.max_context = max_ctx;
    }
    /* --logits-out: every position's row (a checkpoint's graph keeps its whole LM head) */
    if (cli_get(&a, "logits-out")) p.capture_logits = PH_CAPTURE_POSITIONS;
    p.precision = precision;
    p.quant = f.quant;
    ph_engine_info info;
    s = ph_engine_create(dir, &p, &eng);
    if (s == PH_OK) log_engine_quant(eng);
    if (s == PH_ERR_UNSUPPORTED && eng && strstr(ph_engine_error(eng), "prunes its LM head"))
      diag_set(&d, s,
               "the package prunes its LM head to the last row per sequence; "
               "--logits-out and prompt rows need the full logits");
    if (s == PH_OK) s = ph_engine_get_info(eng, &info);
    if (s != PH_OK && !d.msg[0])
      diag_set(&d, s, "%s",
               eng && ph_engine_error(eng)[0] ? ph_engine_error(eng) : ph_status_message(s));
    if (s == PH_OK) {
      V = info.vocab_size;
      if (info.max_context < context) context = info.max_context;
    }
  }
  for (int i = 0; s == PH_OK && i < n; i++) {
    if (q[i].n_prompt > context) {
      char tag[16] = "";
      if (n > 1) snprintf(tag, sizeof tag, "seq%d: ", i);
      s = diag_set(&d, PH_ERR_LIMIT, "%sa prompt of %lld tokens does not fit the context of %lld",
                   tag, (long long)q[i].n_prompt, (long long)context);
      break;
    }
    q[i].T = rows_within(&q[i], max_new, context);
    int64_t *t = realloc(q[i].tokens, (size_t)q[i].T * sizeof *t);
    if (!t)
      s = diag_set(&d, PH_ERR_NO_MEMORY, "out of memory");
    else
      q[i].tokens = t;
  }
  for (int i = 0; s == PH_OK && i < n; i++) {
    q[i].logits = calloc((size_t)(q[i].T * V), sizeof(float));
    if (!q[i].logits)
      s = diag_set(&d, PH_ERR_NO_MEMORY, "out of memory for %lld logits rows", (long long)q[i].T);
  }
  if (s == PH_OK)
    s = dense ? run_dense(dense, q, n, &d)
              : run_paged(eng, q, n, K, cli_get(&a, "logits-out") != NULL, &d);
  for (int i = 0; s == PH_OK && i < n; i++) print_seq(&q[i], i, n, max_new, context);
  const char *out = cli_get(&a, "logits-out");
  if (s == PH_OK && out) s = write_logits(out, q, n, V, &d);
  rc = s == PH_OK ? CLI_EXIT_OK : cli_lib_error(s, d.msg);
  for (int i = 0; i < n; i++) {
    free(q[i].tokens);
    free(q[i].logits);
  }
  dense_session_free(dense);
  ph_engine_free(eng);
  ph_model_free(m);
  return rc;
}
