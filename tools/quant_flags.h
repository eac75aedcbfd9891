/* quant_flags — the weight-quantization options that export, run, bench, generate and serve
 * share (docs/quantization.md), parsed by one function into ph_quant_params:
 *   --quant none|int8|int4             bits (absent or none: 0, no quantization)
 *   --quant-block N                    block_size, a power of two in [16, 256] (default 32)
 *   --quant-sym | --quant-asym         symmetric (default) or a zero point per block
 *   --quant-accuracy-level 1|4         MatMulNBits accuracy_level: 4 (default) int8 activations,
 *                                      1 f32 activations
 *   --quant-skip NAME[,NAME...]        weights whose checkpoint name contains any NAME stay in
 *                                      their dtype (the value is kept as given: argv outlives it)
 * QUANT_FLAG_OPTIONS lists the rows for a command's option table. The --quant-* refinements
 * without --quant, or both --quant-sym and --quant-asym, are usage errors. */
#ifndef PH_TOOLS_QUANT_FLAGS_H
#define PH_TOOLS_QUANT_FLAGS_H

#include "cli.h"
#include "pagedhybrid.h"

#define QUANT_FLAG_OPTIONS                                                                         \
  {"quant", "Q",                                                                                   \
   "quantize linear weights: int8, int4 or none (default none; docs/quantization.md)"},            \
      {"quant-block", "N",                                                                         \
       "--quant: weights per scale along K, power of two 16..256 (default 32)"},                   \
      {"quant-sym", NULL, "--quant: symmetric, no zero points (the default)"},                     \
      {"quant-asym", NULL, "--quant: a zero point per block"},                                     \
      {"quant-accuracy-level", "L",                                                                \
       "--quant: MatMulNBits accuracy_level, 4 (int8 activations, default) or 1 (f32)"},           \
  {                                                                                                \
    "quant-skip", "NAMES",                                                                         \
        "--quant: comma-separated names; weights whose name contains one stay unquantized"         \
  }

/* Fills *q from a's quantization flags (the ones its table lists); zeroed when --quant is absent
 * or none. Returns CLI_EXIT_OK or CLI_EXIT_USAGE (message printed). */
int quant_flags_parse(cli_args *a, ph_quant_params *q);

/* The quantization an open engine serves, for the commands' startup lines: "none", or e.g.
 * "int8 (block 32, symmetric, accuracy level 4; 26 linear layers, skip lm_head)" from
 * in->params.quant and in->quantized_linears. Returns buf. */
const char *quant_flags_describe(const ph_engine_info *in, char *buf, size_t cap);

#endif /* PH_TOOLS_QUANT_FLAGS_H */
