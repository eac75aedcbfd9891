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
 * Text prompts (--prompt) wait for a tokenizer: the option is refused with what to use instead.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "engine_flags.h"
#include "pagedhybrid.h"
#include "tools_api.h"

static const cli_option OPTIONS[] = {
    {"model", "DIR", "Hugging Face checkpoint directory, or an exported package (model.onnx)"},
    {"tokens", "LIST...",
     "prompt token ids, comma-separated (e.g. 1,2,3); repeat for more sequences"},
    {"prompt", "TEXT", "not supported yet (no tokenizer): give token ids with --tokens"},
    {"layout", "dense|paged",
     "for a checkpoint: the graph to run (default: dense for one prompt, paged for several)"},
    {"block-size", "N",
     "checkpoint: tokens per KV page, power of two >= 16 (default 16; implies paged)"},
    {"max-new", "N", "tokens to generate greedily (default 16; fewer when the context is full)"},
    {"logits-out", "FILE",
     "write every position's logits: F32 safetensors \"seq{i}.logits\" [T_i, vocab]"},
    {"threads", "N", "worker threads (default: all CPUs)"},
    {"max-context", "N", "context bound (default min(max_position_embeddings, 32768))"},
    {"precision", "f32|bf16|auto",
     "linear-layer arithmetic: f32, or bf16 inputs and bf16 dot products summed in f32 "
     "(default auto: bf16 for a bf16 checkpoint; docs/precision.md)"},
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

static int parse_tokens(cli_args *a, const char *s, int64_t **out, int64_t *n_out) {
  int64_t n = 1;
  for (const char *p = s; *p; p++) n += *p == ',';
  int64_t *t = calloc((size_t)n, sizeof *t);
  if (!t) return cli_lib_error(PH_ERR_NO_MEMORY, "out of memory");
  const char *p = s;
  for (int64_t i = 0; i < n; i++) {
    const char *end = NULL;
    int64_t v = 0;
    if (!cli_parse_i64(p, &end, &v) || (*end != ',' && *end != '\0') || v < 0) {
      free(t);
      return cli_usage_error(
          a, "--tokens expects non-negative integers separated by commas, got \"%s\"", s);
    }
    t[i] = v;
    p = *end ? end + 1 : end;
  }
  *out = t;
  *n_out = n;
  return CLI_EXIT_OK;
}

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

int cmd_generate(int argc, char **argv) {
  cli_args a;
  int rc = cli_parse(&a, "generate", OPTIONS, N_OPTIONS, argc, argv);
  if (rc) return rc;
  if (a.help) {
    cli_print_help(
        &a, "--model DIR --tokens LIST [--tokens LIST ...] [options]",
        "Greedy generation from token ids (no tokenizer yet), printing each prompt, its\n"
        "generated ids and its finish reason. Several prompts run packed in one batch on\n"
        "the paged layout. Generation stops at --max-new tokens or at the context.");
    return CLI_EXIT_OK;
  }
  if (a.n_positional) return cli_usage_error(&a, "unexpected argument \"%s\"", a.positional[0]);
  if (cli_get(&a, "prompt"))
    return cli_usage_error(&a, "--prompt: text input is not supported yet (there is no tokenizer); "
                               "give the prompt's token ids with --tokens 1,2,3");
  const char *dir = cli_get(&a, "model"), *lists[MAX_SEQS + 1];
  const int n = cli_get_all(&a, "tokens", lists, MAX_SEQS + 1);
  if (!dir) return cli_usage_error(&a, "--model DIR is required");
  if (n == 0) return cli_usage_error(&a, "--tokens LIST is required");
  if (n > MAX_SEQS) return cli_usage_error(&a, "at most %d --tokens sequences", MAX_SEQS);
  diag out_d; /* a --logits-out that cannot be replaced (a FIFO, a device) before any work */
  if (cli_get(&a, "logits-out") && wfile_check_target(cli_get(&a, "logits-out"), &out_d) != PH_OK)
    return cli_lib_error(out_d.status, out_d.msg);
  int64_t max_new = 16, threads = 0, max_ctx = 0, block = 16;
  ph_precision precision = PH_PRECISION_AUTO;
  if ((rc = cli_get_int(&a, "max-new", 0, 1 << 20, &max_new)) ||
      (rc = cli_get_int(&a, "threads", 0, 1024, &threads)) ||
      (rc = cli_get_int(&a, "max-context", 0, (int64_t)1 << 24, &max_ctx)) ||
      (rc = cli_get_int(&a, "block-size", 16, 1 << 20, &block)) ||
      (rc = engine_flags_precision(&a, &precision)))
    return rc;
  if (block & (block - 1))
    return cli_usage_error(&a, "--block-size must be a power of two, got %lld", (long long)block);
  const char *layout = cli_get(&a, "layout");
  if (layout && strcmp(layout, "dense") != 0 && strcmp(layout, "paged") != 0)
    return cli_usage_error(&a, "--layout is dense or paged, got \"%s\"", layout);
  if (cli_get(&a, "block-size") && layout && strcmp(layout, "dense") == 0)
    return cli_usage_error(&a, "--block-size applies to --layout paged only");
  gen_seq q[MAX_SEQS];
  memset(q, 0, sizeof q);
  for (int i = 0; i < n; i++) {
    if ((rc = parse_tokens(&a, lists[i], &q[i].tokens, &q[i].n_prompt))) {
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
    if (is_package) {
      graph *g = NULL;
      s = package_read_graph(dir, &gc, PACKAGE_FINALIZE | PACKAGE_CHECK, &g, NULL, &d);
      if (s == PH_OK)
        s = dense_session_create_graph_ex(g, max_ctx, (int)threads, precision, &dense, &d);
    } else {
      s = dense_session_create_ex(m, max_ctx, (int)threads, precision, &dense, &d);
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
    ph_engine_info info;
    s = ph_engine_create(dir, &p, &eng);
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
