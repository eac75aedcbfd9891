/* pagedhybrid generate --model DIR --tokens 1,2,3 [--tokens 4,5 ...] — greedy generation.
 *
 * One or more prompts. On the packed paged layout (a paged package, or a checkpoint with
 * --layout paged, the default for several prompts) all sequences run packed in one batch: the
 * prompts in one prefill step, then one greedy step with every sequence each; pages and state
 * slots come from the session's pools and the state bytes moved per step are reported. On the
 * dense layout the sequences run one after another.
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

#include "base/wfile.h"
#include "cli.h"
#include "io/genai_config.h"
#include "io/onnx.h"
#include "io/safetensors.h"
#include "models/model.h"
#include "models/package.h"
#include "models/registry.h"
#include "runtime/dense_session.h"
#include "runtime/paged_session.h"

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
  int32_t slot;
  block_table bt;
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

/* Paged: every sequence packed in each step; a sequence whose context is full leaves the batch
 * (step k runs the prompts for k == 0, else each sequence's k-th generated token). */
static ph_status run_paged(paged_session *s, gen_seq *q, int n, int all_rows, diag *d) {
  const int64_t V = paged_session_vocab(s), K = paged_session_block_size(s);
  paged_seq batch[MAX_SEQS];
  int who[MAX_SEQS];
  int64_t max_gen = 0;
  for (int i = 0; i < n; i++) {
    FORWARD_IF_ERROR(state_pool_alloc(paged_session_states(s), &q[i].slot, d));
    FORWARD_IF_ERROR(block_table_reserve(&q[i].bt, paged_session_blocks(s), q[i].T, (int32_t)K, d));
    if (q[i].T - q[i].n_prompt > max_gen) max_gen = q[i].T - q[i].n_prompt;
  }
  uint64_t moved = 0;
  int64_t steps = 0;
  for (int64_t k = 0; k <= max_gen; k++) {
    int nb = 0;
    for (int i = 0; i < n; i++) {
      if (k > 0 && q[i].n_prompt + k > q[i].T) continue; /* done */
      const int64_t past = k == 0 ? 0 : q[i].n_prompt + k - 1, len = k == 0 ? q[i].n_prompt : 1;
      if (k > 0) q[i].tokens[past] = argmax(q[i].logits + (past - 1) * V, V);
      who[nb] = i;
      batch[nb++] = (paged_seq){q[i].slot, &q[i].bt, past, q[i].tokens + past, len};
    }
    FORWARD_IF_ERROR(paged_session_run(s, batch, nb, d));
    for (int b = 0; b < nb; b++)
      for (int64_t j = 0; j < batch[b].n; j++) {
        const float *row = paged_session_token_logits(s, b, j);
        if (!row && !all_rows) continue; /* a pruned LM head: greedy needs only the last row */
        RETURN_ERROR_IF(!row, d, PH_ERR_UNSUPPORTED,
                        "the package prunes its LM head to the last row per sequence; "
                        "--logits-out and prompt rows need the full logits");
        memcpy(q[who[b]].logits + (batch[b].past + j) * V, row, (size_t)V * sizeof(float));
      }
    moved += paged_session_last_stats(s).state_bytes_moved;
    steps++;
  }
  char moved_s[CLI_BYTES_BUF], per_step[CLI_BYTES_BUF];
  fprintf(stderr,
          "paged: %d sequences packed, %lld steps, %d pages of %lld tokens in use, "
          "state bytes moved %s (%s per step)\n",
          n, (long long)steps, block_pool_used_count(paged_session_blocks(s)), (long long)K,
          cli_bytes(moved, moved_s, sizeof moved_s),
          cli_bytes(steps ? moved / (uint64_t)steps : 0, per_step, sizeof per_step));
  return PH_OK;
}

/* Rows of sequence q (prompt + generated) when generation stops at max_new or at the context. */
static int64_t rows_within(const gen_seq *q, int64_t max_new, int64_t context) {
  const int64_t room = context - q->n_prompt;
  return q->n_prompt + (room < max_new ? (room > 0 ? room : 0) : max_new);
}

/* The pool sizes a packed run of these sequences needs, each at most `context` tokens. */
static paged_session_params paged_params(const gen_seq *q, int n, int64_t threads, int64_t K,
                                         int64_t max_new, int64_t context) {
  paged_session_params p = paged_session_params_default();
  int64_t pages = 1, tokens = 0;
  for (int i = 0; i < n; i++) {
    pages += (rows_within(&q[i], max_new, context) + K - 1) / K;
    tokens += q[i].n_prompt > 1 ? q[i].n_prompt : 1;
  }
  p.n_blocks = (int32_t)(pages < INT32_MAX ? pages : INT32_MAX);
  p.max_slots = p.max_batch = n;
  p.max_tokens = tokens;
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
  if ((rc = cli_get_int(&a, "max-new", 0, 1 << 20, &max_new)) ||
      (rc = cli_get_int(&a, "threads", 0, 1024, &threads)) ||
      (rc = cli_get_int(&a, "max-context", 0, (int64_t)1 << 24, &max_ctx)) ||
      (rc = cli_get_int(&a, "block-size", 16, 1 << 20, &block)))
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
    block_table_init(&q[i].bt);
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
  paged_session *ps = NULL;
  genai_config gc;
  /* the context: what the caller bounds it to, else what the model was built or exported for
   * (model_default_context); the session's own rows cap it */
  int64_t context = max_ctx > 0 ? max_ctx : INT64_MAX;
  if (is_package) {
    s = genai_config_read(dir, &gc, &d);
    if (s == PH_OK) paged = gc.paged;
    if (s == PH_OK && max_ctx <= 0 && gc.context_length > 0) context = gc.context_length;
  } else {
    s = ph_model_open(dir, NULL, &m);
    if (s != PH_OK) diag_set(&d, s, "%s", m ? ph_model_error(m) : ph_status_message(s));
    if (s == PH_OK && max_ctx <= 0) context = model_default_context(model_config(m));
  }
  if (s == PH_OK && !paged) {
    if (is_package) {
      graph *g = NULL;
      s = package_read_graph(dir, &gc, PACKAGE_FINALIZE | PACKAGE_CHECK, &g, NULL, &d);
      if (s == PH_OK) s = dense_session_create_graph(g, max_ctx, (int)threads, &dense, &d);
    } else {
      s = dense_session_create(m, max_ctx, (int)threads, &dense, &d);
    }
  } else if (s == PH_OK) {
    const int64_t K = is_package ? gc.dynamic_batching.block_size : block;
    paged_session_params p = paged_params(q, n, threads, K, max_new, context);
    if (is_package) {
      s = paged_session_create_package(dir, &gc, &p, &ps, &d);
    } else {
      model_options o = model_options_default();
      o.block_size = block;
      o.max_context = max_ctx;
      s = paged_session_create_model(m, &o, &p, &ps, &d);
    }
  }
  if (s == PH_OK) {
    const int64_t rows = dense ? dense_session_max_context(dense) : paged_session_max_context(ps);
    if (rows < context) context = rows;
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
  const int64_t V = dense ? dense_session_vocab(dense) : ps ? paged_session_vocab(ps) : 0;
  for (int i = 0; s == PH_OK && i < n; i++) {
    q[i].logits = calloc((size_t)(q[i].T * V), sizeof(float));
    if (!q[i].logits)
      s = diag_set(&d, PH_ERR_NO_MEMORY, "out of memory for %lld logits rows", (long long)q[i].T);
  }
  if (s == PH_OK)
    s = dense ? run_dense(dense, q, n, &d)
              : run_paged(ps, q, n, cli_get(&a, "logits-out") != NULL, &d);
  for (int i = 0; s == PH_OK && i < n; i++) print_seq(&q[i], i, n, max_new, context);
  const char *out = cli_get(&a, "logits-out");
  if (s == PH_OK && out) s = write_logits(out, q, n, V, &d);
  rc = s == PH_OK ? CLI_EXIT_OK : cli_lib_error(s, d.msg);
  for (int i = 0; i < n; i++) {
    if (ps) block_table_release(&q[i].bt, paged_session_blocks(ps), &d);
    free(q[i].tokens);
    free(q[i].logits);
  }
  dense_session_free(dense);
  paged_session_free(ps);
  ph_model_free(m);
  return rc;
}
