/* pagedhybrid make-tiny --out DIR — a deterministic random-weight checkpoint in exact HF
 * layout (config.json + safetensors), for tests, the demo and benchmarks, with a byte-level
 * tokenizer and a chat template of our own (text/tiny_tokenizer.h) when --vocab allows one. */
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tools_api.h"

static const cli_option OPTIONS[] = {
    {"out", "DIR", "directory to write (created; must be empty unless --force)"},
    {"force", NULL, "overwrite files in a non-empty --out directory"},
    {"preset", "NAME", "start from tiny (default) | qwen3.5-0.8b | qwen3.8-tiny"},
    {"model-type", "T",
     "qwen3_5_text (default) | qwen3_5_moe_text | qwen3_next | deepseek_v2 | deepseek_v3"},
    {"layout", "L",
     "causal_lm (default) | vlm (qwen3_5 wrapper, tensors under model.language_model.)"},
    {"dtype", "DT", "f32 (default) | bf16 | f16"},
    {"seed", "S", "random seed (default 1)"},
    {"shard-bytes", "N", "write shards of at most N bytes plus model.safetensors.index.json"},
    {"hidden", "N", "hidden_size"},
    {"layers", "N", "num_hidden_layers"},
    {"vocab", "N", "vocab_size"},
    {"intermediate", "N", "intermediate_size (dense MLP)"},
    {"heads", "N", "num_attention_heads"},
    {"kv-heads", "N", "num_key_value_heads"},
    {"head-dim", "N", "head_dim"},
    {"linear-key-heads", "N", "linear_num_key_heads (Hk)"},
    {"linear-value-heads", "N", "linear_num_value_heads (Hv)"},
    {"linear-key-dim", "N", "linear_key_head_dim (Dk)"},
    {"linear-value-dim", "N", "linear_value_head_dim (Dv)"},
    {"conv-kernel", "N", "linear_conv_kernel_dim"},
    {"full-attention-interval", "N", "every N-th layer is full attention"},
    {"partial-rotary-factor", "F", "fraction of head_dim rotated"},
    {"rope-theta", "F", "rope base"},
    {"mrope-section", "T,H,W", "interleaved MRoPE section (sums to rotary_dim/2)"},
    {"tie", NULL, "tie the LM head to the embedding (no lm_head.weight)"},
    {"no-tie", NULL, "write lm_head.weight"},
    {"experts", "N", "MoE: routed experts"},
    {"experts-per-tok", "N", "MoE: experts per token"},
    {"moe-intermediate", "N", "MoE: expert width"},
    {"shared-intermediate", "N", "MoE: shared expert width (Qwen)"},
    {"kv-lora-rank", "N", "MLA: kv_lora_rank"},
    {"q-lora-rank", "N", "MLA: q_lora_rank (deepseek_v3; 0 = none)"},
    {"qk-nope-dim", "N", "MLA: qk_nope_head_dim"},
    {"qk-rope-dim", "N", "MLA: qk_rope_head_dim"},
    {"v-head-dim", "N", "MLA: v_head_dim"},
    {"mtp-layers", "N",
     "Qwen dense MLP: mtp_num_hidden_layers, with that many MTP layers' weights (default 0)"},
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

static int dir_is_nonempty(const char *path) {
  DIR *d = opendir(path);
  if (!d) return 0;
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
  closedir(d);
  return n > 0;
}

typedef struct int_flag {
  const char *name;
  int64_t *field;
  int64_t min, max;
} int_flag;

int cmd_make_tiny(int argc, char **argv) {
  cli_args a;
  int rc = cli_parse(&a, "make-tiny", OPTIONS, N_OPTIONS, argc, argv);
  if (rc) return rc;
  if (a.help) {
    cli_print_help(&a, "--out DIR [options]",
                   "Write a deterministic random-weight checkpoint (config.json + safetensors) in\n"
                   "exact Hugging Face layout. Same options and seed, same bytes. The weights are\n"
                   "random: the model's output means nothing.");
    return CLI_EXIT_OK;
  }
  if (a.n_positional) return cli_usage_error(&a, "unexpected argument \"%s\"", a.positional[0]);
  const char *out = cli_get(&a, "out");
  if (!out) return cli_usage_error(&a, "--out DIR is required");

  tiny_params p = tiny_params_default();
  diag d;
  diag_clear(&d);
  const char *preset = cli_get(&a, "preset");
  if (preset && tiny_apply_preset(&p, preset, &d) != PH_OK) return cli_usage_error(&a, "%s", d.msg);
  if (cli_get(&a, "model-type")) p.model_type = cli_get(&a, "model-type");
  const char *layout = cli_get(&a, "layout");
  if (layout) {
    if (strcmp(layout, "causal_lm") == 0)
      p.layout = LAYOUT_CAUSAL_LM;
    else if (strcmp(layout, "vlm") == 0)
      p.layout = LAYOUT_VLM;
    else
      return cli_usage_error(&a, "--layout must be causal_lm or vlm, got \"%s\"", layout);
  }
  if ((rc = cli_get_dtype(&a, "dtype", &p.dtype))) return rc;
  if ((rc = cli_get_u64(&a, "seed", &p.seed)) ||
      (rc = cli_get_u64(&a, "shard-bytes", &p.max_shard_bytes)))
    return rc;
  const int64_t big = (int64_t)1 << 24;
  int_flag ints[] = {
      {"hidden", &p.hidden_size, 1, big},
      {"layers", &p.n_layers, 1, 512},
      {"vocab", &p.vocab_size, 1, big},
      {"intermediate", &p.intermediate_size, 1, big},
      {"heads", &p.n_heads, 1, 4096},
      {"kv-heads", &p.n_kv_heads, 1, 4096},
      {"head-dim", &p.head_dim, 1, 4096},
      {"linear-key-heads", &p.lin_key_heads, 1, 4096},
      {"linear-value-heads", &p.lin_value_heads, 1, 4096},
      {"linear-key-dim", &p.lin_key_dim, 1, 4096},
      {"linear-value-dim", &p.lin_value_dim, 1, 4096},
      {"conv-kernel", &p.conv_kernel, 2, 64},
      {"full-attention-interval", &p.full_attention_interval, 1, 512},
      {"experts", &p.n_experts, 1, 4096},
      {"experts-per-tok", &p.n_experts_per_tok, 1, 4096},
      {"moe-intermediate", &p.moe_intermediate_size, 1, big},
      {"shared-intermediate", &p.shared_intermediate_size, 0, big},
      {"kv-lora-rank", &p.kv_lora_rank, 1, big},
      {"q-lora-rank", &p.q_lora_rank, 0, big},
      {"qk-nope-dim", &p.qk_nope_head_dim, 1, 4096},
      {"qk-rope-dim", &p.qk_rope_head_dim, 2, 4096},
      {"v-head-dim", &p.v_head_dim, 1, 4096},
      {"mtp-layers", &p.mtp_layers, 0, 8},
  };
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
    if ((rc = cli_get_int(&a, ints[i].name, ints[i].min, ints[i].max, ints[i].field))) return rc;
  if ((rc = cli_get_double(&a, "partial-rotary-factor", 0.0, 1.0, &p.partial_rotary_factor)) ||
      (rc = cli_get_double(&a, "rope-theta", 1.0, 1e12, &p.rope_theta)) ||
      (rc = cli_get_int_list(&a, "mrope-section", 3, p.mrope_section)))
    return rc;
  if (cli_flag(&a, "tie") && cli_flag(&a, "no-tie"))
    return cli_usage_error(&a, "--tie and --no-tie together");
  if (cli_flag(&a, "tie")) p.tie_word_embeddings = 1;
  if (cli_flag(&a, "no-tie")) p.tie_word_embeddings = 0;

  if (dir_is_nonempty(out) && !cli_flag(&a, "force"))
    return cli_lib_error(PH_ERR_INVALID_ARGUMENT,
                         "--out directory is not empty (use --force to overwrite)");
  ph_status s = tiny_write(out, &p, &d);
  if (s != PH_OK) return cli_lib_error(s, d.msg);
  /* text for tiny models too: a byte-level tokenizer and a chat template of our own */
  const int with_tokenizer = p.vocab_size >= TINY_TOKENIZER_MIN_VOCAB;
  if (with_tokenizer && (s = tiny_tokenizer_write(out, p.vocab_size, &d)) != PH_OK)
    return cli_lib_error(s, d.msg);
  printf("wrote %s (%s, %s, %s layout, seed %llu; random weights; %s)\n", out, p.model_type,
         ph_dtype_name(p.dtype), p.layout == LAYOUT_VLM ? "vlm" : "causal_lm",
         (unsigned long long)p.seed,
         with_tokenizer ? "with tokenizer.json and a chat template"
                        : "no tokenizer: --vocab is below 246");
  return CLI_EXIT_OK;
}
