/* engine_flags — the engine options `run`, `bench` and `serve` share, parsed by one function into
 * the engine's own parameters (ph_engine_params), and the public engine's errors as a diag.
 *
 * A command lists the rows it offers in its own option table (with its own help text); the
 * parser reads those of the flags below that the table has, in the table's order, with one range
 * and one message each, then checks how they combine:
 *   --max-batch N      [1, 4096]         max_batch_size
 *   --max-tokens N     [1, 2^24]         max_scheduled_tokens
 *   --prefill-chunk N  [1, 2^24]         prefill_chunk (not above --max-tokens when both given)
 *   --num-blocks N     [2, INT32_MAX]    num_blocks (not with --memory)
 *   --memory MiB       [1, 2^30]         memory_bytes = MiB << 20
 *   --threads N        [0, 1024]         n_threads (0: all CPUs)
 *   --block-size N     [16, 2^20]        block_size, a power of two   (checkpoints only)
 *   --max-context N    [1, 2^24]         max_context                  (checkpoints only)
 *   --io-dtype f32|f16|bf16              io_dtype                     (checkpoints only)
 *   --state-update-capacity N  [0, 8]    state_update_capacity (speculative decoding; a package
 *                                        must match its own)
 *   --precision f32|bf16|auto            precision (docs/precision.md; default auto)
 *   --no-prefix-cache                    prefix_cache = PH_PREFIX_CACHE_OFF (docs/prefix-cache.md;
 *                                        absent: 0, auto, which is on)
 *   --prefix-cache-mb MiB  [0, 2^30]     prefix_cache_bytes = MiB << 20, the state snapshots'
 *                                        budget (0: the engine's default); not with
 *                                        --no-prefix-cache
 * ENGINE_FLAG_PREFIX_CACHE_OPTIONS lists the two prefix-cache rows for a command's table.
 * A flag not given leaves its field 0 (the engine's default, include/pagedhybrid.h). A bad value
 * is a usage error (tools/cli.h: printed, CLI_EXIT_USAGE). */
#ifndef PH_TOOLS_ENGINE_FLAGS_H
#define PH_TOOLS_ENGINE_FLAGS_H

#include "cli.h"
#include "pagedhybrid.h"
#include "tools_api.h"

#define ENGINE_FLAG_PREFIX_CACHE_OPTIONS                                                           \
  {"no-prefix-cache", NULL,                                                                        \
   "do not reuse the KV pages and state of prompt prefixes earlier requests computed (the "        \
   "cache is on by default; outputs are identical either way; docs/prefix-cache.md)"},             \
  {                                                                                                \
    "prefix-cache-mb", "MiB",                                                                      \
        "memory for the prefix cache's state snapshots (default 0: a quarter of the KV + state "   \
        "memory, one per request at least)"                                                        \
  }

/* Fills *p (start from ph_engine_params_default()) from the engine flags a has. Returns
 * CLI_EXIT_OK or CLI_EXIT_USAGE (message printed). */
int engine_flags_parse(cli_args *a, ph_engine_params *p);

/* --precision f32|bf16|auto into *out (PH_PRECISION_AUTO when absent); engine_flags_parse reads
 * it too, for the commands that list it. Returns CLI_EXIT_OK or CLI_EXIT_USAGE (printed). */
int engine_flags_precision(cli_args *a, ph_precision *out);

/* --speculative METHOD[:K] (METHOD none, ngram or mtp; K drafts per step, 1..8): the default
 * speculation of requests that do not set their own. *given = 1 when the flag is there.
 * Returns CLI_EXIT_OK or CLI_EXIT_USAGE (message printed). */
int engine_flags_speculative(cli_args *a, ph_speculative_params *out, int *given);

/* 1 when a has any of the checkpoint-only flags (--block-size, --max-context, --io-dtype): a
 * package fixes them in its graph. */
int engine_flags_checkpoint_only(const cli_args *a);

/* A failed ph_engine_create or ph_engine_step as the tool's diag, with the engine's detail
 * (ph_engine_error). Returns s; PH_OK leaves d alone. */
ph_status engine_failed(const ph_engine *e, ph_status s, diag *d);

/* A failed ph_engine_* call that keeps no detail on the object (add, remove, request info,
 * release: they may run on other threads): "call: status message". Returns s. */
ph_status engine_call_failed(const char *call, ph_status s, diag *d);

#endif /* PH_TOOLS_ENGINE_FLAGS_H */
