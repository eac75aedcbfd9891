/* pagedhybrid export HF_DIR -o PKG_DIR — a checkpoint as an ONNX Runtime GenAI package.
 *
 * Writes model.onnx, model.onnx.data, genai_config.json, inference_metadata.json and the
 * checkpoint's tokenizer files (models/export.h, docs/export.md). --dtype picks the weights'
 * storage dtype; without it each weight keeps its checkpoint dtype. --layout dense (f32
 * activations, what ONNX Runtime's CPU EP runs; the default) or paged (the packed paged ABI for
 * GenAI's Engine on CUDA, or --target cpu for ours; naming a --target implies it). --config-only
 * needs only config.json and writes the structure without weights. --state-update-capacity C
 * (paged) adds compact state updates; --linear-attn-op picks the dense recurrent op. Prints one
 * summary line per file written, sizes in cli_bytes' units; says on stderr when the checkpoint has
 * no tokenizer files (the package then takes token ids only). On a terminal, stderr shows the data
 * file's progress (tensors, bytes, rate) on one line rewritten in place; redirected (logs, tests),
 * nothing. Option values wrong on their own (a page size that is not a power of two >= 16, or not a
 * multiple of 256 for CUDA; f32 activations for CUDA) are usage errors, exit 2; what needs the
 * checkpoint to judge is the library's, exit 1. --quant int8|int4 and its refinements
 * (tools/quant_flags.h) store the linear layers as com.microsoft::MatMulNBits, either layout.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "quant_flags.h"
#include "tools_api.h"

static const cli_option OPTIONS[] = {
    {"out", "DIR", "package directory to write (also -o; created; must be empty unless --force)"},
    {"layout", "L", "graph layout: dense (default) or paged (packed; implied by --target)"},
    {"dtype", "DT", "weight storage dtype f32|f16|bf16 (default: as stored in the checkpoint)"},
    {"target", "T", "paged: cuda (default; ONNX Runtime GenAI) or cpu (pagedhybrid's runtime)"},
    {"io-dtype", "DT",
     "paged: activation/KV/conv-state dtype (cuda: f16 (default) or bf16; "
     "cpu: f32 (default), f16 or bf16)"},
    {"rotary", "FORM",
     "RoPE as plain ONNX ops or the fused com.microsoft op: ops|fused "
     "(default: ops for --target cuda, fused otherwise)"},
    {"block-size", "N",
     "paged: tokens per KV page, power of two >= 16 (cuda: multiple of 256; "
     "default cuda 256, cpu 16)"},
    {"prune-lm-head", NULL, "paged: logits only for each sequence's last token ([B, vocab])"},
    {"max-batch-size", "N", "paged: engine.dynamic_batching.max_batch_size (1..256, default 100)"},
    {"gpu-utilization-factor", "F", "paged: share of free GPU memory for pages (default 0.6)"},
    {"num-blocks", "N", "paged: explicit page budget instead of the utilization factor"},
    {"max-scheduled-tokens", "N", "paged: tokens per engine step (default 2048)"},
    {"state-update-capacity", "C",
     "paged: compact state updates for speculative decoding, C in 0..8 (default 0: none); "
     "adds the capture inputs and per-linear-layer state_update outputs"},
    {"linear-attn-op", "OP",
     "dense: the linear layers' recurrent op, linear_attention (default) or gated_delta_net "
     "(paged always uses GatedDeltaNet)"},
    {"config-only", NULL,
     "build from config.json alone: model.onnx structure + genai_config.json, "
     "no weights (cannot run)"},
    {"max-context", "N",
     "context length = rotary cache rows (default min(max_position_embeddings, 32768))"},
    {"force", NULL, "write into a non-empty --out directory, replacing package files"},
    QUANT_FLAG_OPTIONS,
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void print_file(const char *dir, const char *name) {
  char path[4096], size[CLI_BYTES_BUF];
  struct stat st;
  if (path_join(path, sizeof path, dir, name, NULL) != PH_OK || stat(path, &st) != 0) return;
  printf("  %-24s %s\n", name, cli_bytes((uint64_t)st.st_size, size, sizeof size));
}

/* The terminal progress line: rewritten in place at most every 0.1 s, and once at the end. */
typedef struct progress_line {
  double t0, last;
  int width; /* of the line last printed, to blank what a shorter one leaves */
} progress_line;

static void on_progress(void *user, int64_t tensors_done, int64_t tensors_total, int64_t bytes_done,
                        int64_t bytes_total) {
  progress_line *p = user;
  const double now = now_s();
  const int last = tensors_done == tensors_total && bytes_done == bytes_total;
  if (!last && now - p->last < 0.1) return;
  p->last = now;
  char done[CLI_BYTES_BUF], total[CLI_BYTES_BUF], rate[CLI_BYTES_BUF];
  const double dt = now - p->t0 > 1e-3 ? now - p->t0 : 1e-3;
  int n = fprintf(stderr, "\rexport: %lld/%lld tensors, %s of %s, %s/s", (long long)tensors_done,
                  (long long)tensors_total, cli_bytes((uint64_t)bytes_done, done, sizeof done),
                  cli_bytes((uint64_t)bytes_total, total, sizeof total),
                  cli_bytes((uint64_t)((double)bytes_done / dt), rate, sizeof rate));
  if (n > 0 && n < p->width) fprintf(stderr, "%*s", p->width - n, "");
  if (n > p->width) p->width = n;
  fflush(stderr);
}

/* 1 when dir has a tokenizer a runtime could use (tokenizer.json, or vocab.json + merges.txt). */
static int has_tokenizer(const char *dir) {
  static const char *const files[] = {"tokenizer.json", "vocab.json", "merges.txt",
                                      "tokenizer_config.json"};
  char path[4096];
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
    if (path_join(path, sizeof path, dir, files[i], NULL) == PH_OK && path_exists(path)) return 1;
  return 0;
}

int cmd_export(int argc, char **argv) {
  cli_args a;
  int rc = cli_parse(&a, "export", OPTIONS, N_OPTIONS, argc, argv);
  if (rc) return rc;
  if (a.help) {
    cli_print_help(
        &a, "HF_DIR -o PKG_DIR [options]",
        "Export a Hugging Face checkpoint as an ONNX Runtime GenAI package: model.onnx\n"
        "(IR 8, opsets ai.onnx 17 + com.microsoft 1), model.onnx.data (weights as\n"
        "external data, 64-byte aligned), genai_config.json, inference_metadata.json\n"
        "(onnx-genai's inference metadata) and the tokenizer files.\n"
        "dense: activations, inputs, outputs and caches are f32 (ONNX Runtime's CPU kernels\n"
        "for LinearAttention and CausalConvWithState are float-only). paged: the packed\n"
        "layout with state_groups and engine.dynamic_batching for GenAI's Engine.\n"
        "--dtype sets how the weights are stored; --quant int8|int4 stores the linear\n"
        "layers as com.microsoft::MatMulNBits. See docs/export.md.");
    return CLI_EXIT_OK;
  }
  if (a.n_positional != 1) return cli_usage_error(&a, "expects exactly one checkpoint directory");
  const char *out = cli_get(&a, "out");
  if (!out || !out[0]) return cli_usage_error(&a, "-o/--out DIR is required");
  export_options o = export_options_default();
  const char *layout = cli_get(&a, "layout"), *target = cli_get(&a, "target");
  if (layout && strcmp(layout, "dense") != 0 && strcmp(layout, "paged") != 0)
    return cli_usage_error(&a, "--layout must be dense or paged, got \"%s\"", layout);
  if (target && strcmp(target, "cuda") != 0 && strcmp(target, "cpu") != 0)
    return cli_usage_error(&a, "--target must be cuda or cpu, got \"%s\"", target);
  /* a target is who runs a paged package: naming one asks for the paged layout */
  o.layout = (layout && strcmp(layout, "paged") == 0) || (!layout && target) ? EXPORT_LAYOUT_PAGED
                                                                             : EXPORT_LAYOUT_DENSE;
  o.target = target && strcmp(target, "cpu") == 0 ? EXPORT_TARGET_CPU : EXPORT_TARGET_CUDA;
  const char *rotary = cli_get(&a, "rotary");
  if (rotary && strcmp(rotary, "ops") != 0 && strcmp(rotary, "fused") != 0)
    return cli_usage_error(&a, "--rotary must be ops or fused, got \"%s\"", rotary);
  o.rotary = !rotary                      ? EXPORT_ROTARY_DEFAULT
             : strcmp(rotary, "ops") == 0 ? EXPORT_ROTARY_OPS
                                          : EXPORT_ROTARY_FUSED;
  const char *linear_op = cli_get(&a, "linear-attn-op");
  if (linear_op && strcmp(linear_op, "linear_attention") != 0 &&
      strcmp(linear_op, "gated_delta_net") != 0)
    return cli_usage_error(&a,
                           "--linear-attn-op must be linear_attention or gated_delta_net, got "
                           "\"%s\"",
                           linear_op);
  o.linear_op = linear_op && strcmp(linear_op, "gated_delta_net") == 0 ? EXPORT_GATED_DELTA_NET
                                                                       : EXPORT_LINEAR_ATTENTION;
  o.force = cli_flag(&a, "force");
  o.prune_lm_head = cli_flag(&a, "prune-lm-head");
  o.config_only = cli_flag(&a, "config-only");
  int64_t su_capacity = 0;
  if ((rc = cli_get_dtype(&a, "dtype", &o.dtype)) ||
      (rc = cli_get_dtype(&a, "io-dtype", &o.io_dtype)) ||
      (rc = cli_get_int(&a, "max-context", 1, (int64_t)1 << 31, &o.max_context)) ||
      (rc = cli_get_int(&a, "block-size", 16, (int64_t)1 << 20, &o.block_size)) ||
      (rc = cli_get_int(&a, "max-batch-size", 1, 256, &o.max_batch_size)) ||
      (rc = cli_get_double(&a, "gpu-utilization-factor", 1e-9, 1.0, &o.gpu_utilization_factor)) ||
      (rc = cli_get_int(&a, "num-blocks", 1, INT32_MAX, &o.num_blocks)) ||
      (rc =
           cli_get_int(&a, "max-scheduled-tokens", 1, (int64_t)1 << 30, &o.max_scheduled_tokens)) ||
      (rc = cli_get_int(&a, "state-update-capacity", 0, 8, &su_capacity)))
    return rc;
  o.state_update_capacity = (int32_t)su_capacity;
  if ((rc = quant_flags_parse(&a, &o.quant))) return rc;
  if (o.layout == EXPORT_LAYOUT_DENSE) {
    static const char *const paged_only[] = {"target",
                                             "io-dtype",
                                             "block-size",
                                             "prune-lm-head",
                                             "max-batch-size",
                                             "gpu-utilization-factor",
                                             "num-blocks",
                                             "max-scheduled-tokens",
                                             "state-update-capacity"};
    for (size_t i = 0; i < sizeof paged_only / sizeof paged_only[0]; i++)
      if (cli_get(&a, paged_only[i]))
        return cli_usage_error(&a, "--%s applies to --layout paged only", paged_only[i]);
  }
  if (o.block_size & (o.block_size - 1))
    return cli_usage_error(&a, "--block-size must be a power of two, got %lld",
                           (long long)o.block_size);
  if (o.target == EXPORT_TARGET_CUDA && o.block_size % 256 != 0)
    return cli_usage_error(&a,
                           "--block-size %lld: ONNX Runtime GenAI on CUDA needs a multiple of 256 "
                           "(--target cpu takes any power of two >= 16)",
                           (long long)o.block_size);
  if (o.target == EXPORT_TARGET_CUDA && o.io_dtype == PH_DTYPE_F32)
    return cli_usage_error(&a, "--io-dtype f32: ONNX Runtime's PagedAttention on CUDA takes f16 or "
                               "bf16 (--target cpu runs f32)");
  if (cli_get(&a, "num-blocks") && cli_get(&a, "gpu-utilization-factor"))
    return cli_usage_error(&a, "give --num-blocks or --gpu-utilization-factor, not both");

  if ((rc = cli_check_model_path(a.positional[0]))) return rc;

  ph_model *m = NULL;
  ph_model_params mp = ph_model_params_default();
  mp.load_weights = !o.config_only;
  ph_status s = ph_model_open(a.positional[0], &mp, &m);
  if (s != PH_OK) {
    rc = cli_lib_error(s, m ? ph_model_error(m) : NULL);
    ph_model_free(m);
    return rc;
  }
  diag d;
  diag_clear(&d);
  double t0 = now_s();
  progress_line pl = {t0, 0.0, 0};
  if (!o.config_only && isatty(STDERR_FILENO)) o.progress = (onnx_progress){on_progress, &pl};
  s = model_export(m, out, &o, &d);
  double t1 = now_s();
  ph_model_free(m);
  if (pl.width) fprintf(stderr, "\n"); /* below the progress line */
  if (s != PH_OK) return cli_lib_error(s, d.msg);
  char quant[96] = "";
  if (o.quant.bits)
    snprintf(quant, sizeof quant, ", linear layers int%d block %d %s accuracy_level %d",
             (int)o.quant.bits, (int)o.quant.block_size, o.quant.asymmetric ? "asym" : "sym",
             (int)o.quant.accuracy_level);
  printf("exported %s -> %s (%s layout%s%s, weights %s%s%s) in %.2f s\n", a.positional[0], out,
         export_layout_name(o.layout), o.layout == EXPORT_LAYOUT_PAGED ? " for " : "",
         o.layout == EXPORT_LAYOUT_PAGED ? export_target_name(o.target) : "",
         o.dtype == PH_DTYPE_INVALID ? "as stored" : ph_dtype_name(o.dtype), quant,
         o.config_only ? "; config only: structure without weights, cannot run" : "", t1 - t0);
  print_file(out, "model.onnx");
  if (!o.config_only) print_file(out, "model.onnx.data");
  print_file(out, "genai_config.json");
  print_file(out, INFERENCE_METADATA_FILE);
  for (int i = 0; EXPORT_TOKENIZER_FILES[i]; i++) print_file(out, EXPORT_TOKENIZER_FILES[i]);
  if (o.layout == EXPORT_LAYOUT_PAGED && o.target == EXPORT_TARGET_CUDA &&
      o.io_dtype == PH_DTYPE_BF16)
    fprintf(stderr, "note: %s\n", EXPORT_CUDA_BF16_NOTE);
  if (!has_tokenizer(a.positional[0]))
    fprintf(stderr,
            "note: the checkpoint has no tokenizer files; the package takes token ids only\n");
  return CLI_EXIT_OK;
}
