/* engine_flags — the engine options of run, bench and serve. See engine_flags.h. */
#include "engine_flags.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef enum flag {
  F_MAX_BATCH,
  F_MAX_TOKENS,
  F_PREFILL_CHUNK,
  F_NUM_BLOCKS,
  F_MEMORY,
  F_THREADS,
  F_BLOCK_SIZE,
  F_MAX_CONTEXT,
  F_IO_DTYPE,
  F_STATE_UPDATE_CAPACITY,
  F_PRECISION,
  F_NO_PREFIX_CACHE,
  F_PREFIX_CACHE_MB,
  N_FLAGS
} flag;

typedef struct flag_rule {
  const char *name;
  int64_t min, max; /* integers; io-dtype, precision and no-prefix-cache have none */
} flag_rule;

static const flag_rule RULES[N_FLAGS] = {
    [F_MAX_BATCH] = {"max-batch", 1, 4096},
    [F_MAX_TOKENS] = {"max-tokens", 1, (int64_t)1 << 24},
    [F_PREFILL_CHUNK] = {"prefill-chunk", 1, (int64_t)1 << 24},
    [F_NUM_BLOCKS] = {"num-blocks", 2, INT32_MAX},
    [F_MEMORY] = {"memory", 1, (int64_t)1 << 30},
    [F_THREADS] = {"threads", 0, 1024},
    [F_BLOCK_SIZE] = {"block-size", 16, 1 << 20},
    [F_MAX_CONTEXT] = {"max-context", 1, (int64_t)1 << 24},
    [F_IO_DTYPE] = {"io-dtype", 0, 0},
    [F_STATE_UPDATE_CAPACITY] = {"state-update-capacity", 0, PH_MAX_DRAFT_TOKENS},
    [F_PRECISION] = {"precision", 0, 0},
    [F_NO_PREFIX_CACHE] = {"no-prefix-cache", 0, 0},
    [F_PREFIX_CACHE_MB] = {"prefix-cache-mb", 0, (int64_t)1 << 30},
};

int engine_flags_precision(cli_args *a, ph_precision *out) {
  *out = PH_PRECISION_AUTO;
  const char *v = cli_get(a, "precision");
  if (!v) return CLI_EXIT_OK;
  static const ph_precision ALL[] = {PH_PRECISION_AUTO, PH_PRECISION_F32, PH_PRECISION_BF16};
  for (size_t i = 0; i < sizeof ALL / sizeof ALL[0]; i++)
    if (strcmp(v, ph_precision_name(ALL[i])) == 0) {
      *out = ALL[i];
      return CLI_EXIT_OK;
    }
  return cli_usage_error(a, "--precision %s: expected f32, bf16 or auto", v);
}

static int flag_of(const char *name) {
  for (int f = 0; f < N_FLAGS; f++)
    if (strcmp(RULES[f].name, name) == 0) return f;
  return -1;
}

/* The flag's value when the command has it and it was given, else NULL. */
static const char *given(const cli_args *a, flag f) {
  for (int i = 0; i < a->n_options; i++)
    if (strcmp(a->options[i].name, RULES[f].name) == 0) return a->values[i];
  return NULL;
}

int engine_flags_parse(cli_args *a, ph_engine_params *p) {
  int64_t v[N_FLAGS] = {0};
  int rc;
  for (int i = 0; i < a->n_options; i++) {
    const int f = flag_of(a->options[i].name);
    if (f < 0 || f == F_NO_PREFIX_CACHE) continue; /* a flag: no value to check */
    if (f == F_IO_DTYPE)
      rc = cli_get_dtype(a, RULES[f].name, &p->io_dtype);
    else if (f == F_PRECISION)
      rc = engine_flags_precision(a, &p->precision);
    else
      rc = cli_get_int(a, RULES[f].name, RULES[f].min, RULES[f].max, &v[f]);
    if (rc) return rc;
  }
  if (v[F_NUM_BLOCKS] && v[F_MEMORY])
    return cli_usage_error(a, "give --num-blocks or --memory, not both");
  if (v[F_BLOCK_SIZE] & (v[F_BLOCK_SIZE] - 1))
    return cli_usage_error(a, "--block-size must be a power of two, got %lld",
                           (long long)v[F_BLOCK_SIZE]);
  v[F_NO_PREFIX_CACHE] = given(a, F_NO_PREFIX_CACHE) != NULL;
  if (v[F_NO_PREFIX_CACHE] && given(a, F_PREFIX_CACHE_MB))
    return cli_usage_error(a, "give --no-prefix-cache or --prefix-cache-mb, not both");
  if (v[F_PREFILL_CHUNK] && v[F_MAX_TOKENS] && v[F_PREFILL_CHUNK] > v[F_MAX_TOKENS])
    return cli_usage_error(a, "--prefill-chunk %lld is above --max-tokens %lld",
                           (long long)v[F_PREFILL_CHUNK], (long long)v[F_MAX_TOKENS]);
  p->max_batch_size = (int32_t)v[F_MAX_BATCH];
  p->max_scheduled_tokens = v[F_MAX_TOKENS];
  p->prefill_chunk = v[F_PREFILL_CHUNK];
  p->num_blocks = (int32_t)v[F_NUM_BLOCKS];
  p->memory_bytes = v[F_MEMORY] << 20;
  p->n_threads = (int)v[F_THREADS];
  p->block_size = v[F_BLOCK_SIZE];
  p->max_context = v[F_MAX_CONTEXT];
  p->state_update_capacity = (int32_t)v[F_STATE_UPDATE_CAPACITY];
  if (v[F_NO_PREFIX_CACHE]) p->prefix_cache = PH_PREFIX_CACHE_OFF;
  p->prefix_cache_bytes = v[F_PREFIX_CACHE_MB] << 20;
  return CLI_EXIT_OK;
}

int engine_flags_speculative(cli_args *a, ph_speculative_params *out, int *given) {
  memset(out, 0, sizeof *out);
  *given = 0;
  const char *v = cli_get(a, "speculative");
  if (!v) return CLI_EXIT_OK;
  *given = 1;
  static const ph_draft_method methods[] = {PH_DRAFT_NONE, PH_DRAFT_NGRAM, PH_DRAFT_MTP};
  const char *colon = strchr(v, ':');
  const size_t len = colon ? (size_t)(colon - v) : strlen(v);
  int found = 0;
  for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
    const char *name = ph_draft_method_name(methods[i]);
    if (strlen(name) == len && strncmp(v, name, len) == 0) {
      out->method = methods[i];
      found = 1;
    }
  }
  if (!found)
    return cli_usage_error(a,
                           "--speculative %s: expected none, ngram or mtp, optionally with "
                           ":K drafts per step (1..%d), e.g. ngram:4",
                           v, PH_MAX_DRAFT_TOKENS);
  if (colon) {
    char *end = NULL;
    const long k = strtol(colon + 1, &end, 10);
    /* digits only: strtol alone also takes leading spaces and a sign ("ngram: 4", "ngram:+4") */
    if (colon[1] < '0' || colon[1] > '9' || *end || k < 1 || k > PH_MAX_DRAFT_TOKENS)
      return cli_usage_error(a, "--speculative %s: K must be an integer in [1, %d]", v,
                             PH_MAX_DRAFT_TOKENS);
    out->num_draft_tokens = (int32_t)k;
  }
  return CLI_EXIT_OK;
}

int engine_flags_checkpoint_only(const cli_args *a) {
  return given(a, F_BLOCK_SIZE) || given(a, F_MAX_CONTEXT) || given(a, F_IO_DTYPE);
}

ph_status engine_failed(const ph_engine *e, ph_status s, diag *d) {
  if (s == PH_OK) return s;
  const char *detail = e ? ph_engine_error(e) : "";
  return diag_set(d, s, "%s", detail[0] ? detail : ph_status_message(s));
}

ph_status engine_call_failed(const char *call, ph_status s, diag *d) {
  if (s == PH_OK) return s;
  return diag_set(d, s, "%s: %s", call, ph_status_message(s));
}
