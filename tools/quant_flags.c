/* quant_flags — the weight-quantization options of the CLI. See quant_flags.h. */
#include "quant_flags.h"

#include <stdio.h>
#include <string.h>

int quant_flags_parse(cli_args *a, ph_quant_params *q) {
  memset(q, 0, sizeof *q);
  const char *v = cli_get(a, "quant");
  const int sym = cli_flag(a, "quant-sym"), asym = cli_flag(a, "quant-asym");
  const int refined = sym || asym || cli_get(a, "quant-block") ||
                      cli_get(a, "quant-accuracy-level") || cli_get(a, "quant-skip");
  if (!v || strcmp(v, "none") == 0) {
    if (refined) return cli_usage_error(a, "--quant-* options need --quant int8 or int4");
    return CLI_EXIT_OK;
  }
  if (strcmp(v, "int8") == 0)
    q->bits = 8;
  else if (strcmp(v, "int4") == 0)
    q->bits = 4;
  else
    return cli_usage_error(a, "--quant %s: expected int8, int4 or none", v);
  if (sym && asym) return cli_usage_error(a, "--quant-sym and --quant-asym: give one");
  q->asymmetric = asym;
  int64_t block = 32;
  int rc = cli_get_int(a, "quant-block", 16, 256, &block);
  if (rc) return rc;
  if (block & (block - 1))
    return cli_usage_error(a, "--quant-block %lld: expected a power of two", (long long)block);
  q->block_size = (int32_t)block;
  int64_t level = 4;
  if ((rc = cli_get_int(a, "quant-accuracy-level", 1, 4, &level))) return rc;
  if (level != 1 && level != 4)
    return cli_usage_error(a, "--quant-accuracy-level %lld: expected 1 (f32) or 4 (int8)",
                           (long long)level);
  q->accuracy_level = (int32_t)level;
  const char *skip = cli_get(a, "quant-skip");
  if (skip && !*skip) return cli_usage_error(a, "--quant-skip: expected a name");
  q->skip = skip;
  return CLI_EXIT_OK;
}

const char *quant_flags_describe(const ph_engine_info *in, char *buf, size_t cap) {
  const ph_quant_params *q = &in->params.quant;
  if (q->bits == 0 && in->quantized_linears == 0) {
    snprintf(buf, cap, "none");
    return buf;
  }
  snprintf(buf, cap, "int%d (block %d, %s, accuracy level %d; %d linear layers%s%s)", (int)q->bits,
           (int)q->block_size, q->asymmetric ? "asymmetric" : "symmetric", (int)q->accuracy_level,
           (int)in->quantized_linears, q->skip ? ", skip " : "", q->skip ? q->skip : "");
  return buf;
}
