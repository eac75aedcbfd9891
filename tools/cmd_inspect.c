/* pagedhybrid inspect DIR — what a checkpoint is and what serving it costs.
 *
 * Text for people, --json (one object) for scripts. The memory plan sizes the three pools a
 * server needs for --max-seqs sequences sharing --max-tokens tokens of KV: weights as stored,
 * KV pages (ceil(T/B) pages plus one partial page per sequence plus the null block), and one
 * fixed-state slot per sequence. docs/cli.md has the formulas.
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "models/model.h"
#include "tensor/dtype.h"

static const cli_option OPTIONS[] = {
    {"json", NULL, "print one JSON object instead of text"},
    {"no-weights", NULL, "read config.json only (no safetensors needed)"},
    {"max-seqs", "N", "memory plan: concurrent sequences (default 16)"},
    {"max-tokens", "T", "memory plan: KV tokens shared by all sequences (default 32768)"},
    {"block-size", "B", "memory plan: tokens per KV page, a power of two >= 16 (default 256)"},
    {"cache-dtype", "DT", "KV and conv-state dtype: f32|f16|bf16 (default: checkpoint dtype)"},
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

typedef struct plan {
  int64_t max_seqs, max_tokens, block_size, pages;
  int64_t weight_bytes, kv_bytes, state_bytes, total_bytes;
} plan;

typedef struct report {
  ph_model_info info;
  const hf_config *c;
  const model_weights *w;
  ph_dtype cache_dtype;
  int64_t fixed_state, conv_state, recurrent_state, kv_per_token;
  plan plan;
} report;

static void layer_list(const hf_config *c, int full, char *buf, size_t n) {
  size_t pos = 0;
  buf[0] = '\0';
  for (int i = 0; i < (int)c->n_layers; i++) {
    int is_full = c->layer_kind[i] != PH_LAYER_LINEAR_ATTENTION;
    if (is_full != full) continue;
    int k = snprintf(buf + pos, n - pos, "%s%d", pos ? ", " : "", i);
    if (k < 0 || (size_t)k >= n - pos) break;
    pos += (size_t)k;
  }
}

static json_t *layer_array(const hf_config *c, int kind) {
  json_t *a = json_array();
  for (int i = 0; i < (int)c->n_layers; i++)
    if (c->layer_kind[i] == kind) json_array_append_new(a, json_integer(i));
  return a;
}

static const char *mib(int64_t bytes, char *buf, size_t n) {
  if (bytes >= ((int64_t)1 << 30))
    snprintf(buf, n, "%.2f GiB", (double)bytes / (double)((int64_t)1 << 30));
  else
    snprintf(buf, n, "%.1f MiB", (double)bytes / (double)(1 << 20));
  return buf;
}

static void print_text(const report *r, const char *dir) {
  const hf_config *c = r->c;
  const ph_model_info *in = &r->info;
  char buf[4096], m1[32], m2[32], m3[32], m4[32];
  printf("checkpoint    %s\n", dir);
  printf("model_type    %s", in->model_type);
  if (strcmp(in->model_type, in->text_model_type) != 0) printf(" (text model %s)", in->text_model_type);
  printf(", family %s%s\n", model_family_name(c->family), c->is_vlm ? ", VLM wrapper (vision part ignored)" : "");
  printf("architecture  %s, dtype %s\n", in->architecture[0] ? in->architecture : "(none)", ph_dtype_name(in->dtype));
  printf("layers        %d: %d linear attention (GatedDeltaNet), %d %s\n", in->n_layers,
         in->n_linear_attention_layers, in->n_full_attention_layers,
         c->family == FAMILY_DEEPSEEK ? "multi-head latent attention" : "full attention");
  char pattern[HF_MAX_LAYERS + 1];
  for (int i = 0; i < in->n_layers; i++)
    pattern[i] = c->layer_kind[i] == PH_LAYER_LINEAR_ATTENTION ? 'L' : c->layer_kind[i] == PH_LAYER_MLA ? 'M' : 'F';
  pattern[in->n_layers] = '\0';
  printf("pattern       %s  (L linear, F full, M MLA)\n", pattern);
  layer_list(c, 1, buf, sizeof buf);
  printf("full/MLA ids  %s\n", buf[0] ? buf : "-");
  layer_list(c, 0, buf, sizeof buf);
  printf("linear ids    %s\n", buf[0] ? buf : "-");
  printf("geometry      hidden %lld, vocab %lld, attention heads %lld/%lld x %lld, rms eps %g%s\n",
         (long long)c->hidden_size, (long long)c->vocab_size, (long long)c->n_heads,
         (long long)c->n_kv_heads, (long long)c->head_dim, c->rms_norm_eps,
         c->tie_word_embeddings ? ", tied embeddings" : "");
  printf("rope          theta %g, rotary dims %lld", c->rope.theta, (long long)c->rope.rotary_dim);
  if (c->rope.has_mrope)
    printf(", mrope [%lld, %lld, %lld]%s", (long long)c->rope.mrope_section[0],
           (long long)c->rope.mrope_section[1], (long long)c->rope.mrope_section[2],
           c->rope.mrope_interleaved ? " interleaved" : "");
  if (c->rope.scaling == ROPE_SCALING_YARN) printf(", YaRN factor %g", c->rope.factor);
  printf("\n");
  if (c->geom.n_linear)
    printf("gateddeltanet Hk %lld x Dk %lld, Hv %lld x Dv %lld, conv kernel %lld, conv_dim %lld\n",
           (long long)c->lin.n_key_heads, (long long)c->lin.key_head_dim,
           (long long)c->lin.n_value_heads, (long long)c->lin.value_head_dim,
           (long long)c->lin.conv_kernel, (long long)c->geom.conv_dim);
  if (c->family == FAMILY_DEEPSEEK)
    printf("mla           q_lora %lld, kv_lora %lld, nope/rope/v %lld/%lld/%lld, softmax scale %.6f\n",
           (long long)c->mla.q_lora_rank, (long long)c->mla.kv_lora_rank,
           (long long)c->mla.qk_nope_head_dim, (long long)c->mla.qk_rope_head_dim,
           (long long)c->mla.v_head_dim, c->mla.softmax_scale);
  if (c->moe.n_experts)
    printf("moe           %lld experts, top-%lld, expert width %lld\n", (long long)c->moe.n_experts,
           (long long)c->moe.n_experts_per_tok, (long long)c->moe.moe_intermediate_size);
  else
    printf("mlp           dense SwiGLU, intermediate %lld\n", (long long)c->intermediate_size);
  printf("parameters    %lld (%s as stored)%s\n", (long long)in->parameters,
         mib(in->weight_bytes, m1, sizeof m1), in->weights_loaded ? "" : ", predicted from config.json");
  if (r->w)
    printf("tensors       %s layout, every expected tensor found; %zu unused (vision, MTP)\n",
           r->w->layout == LAYOUT_VLM ? "VLM (model.language_model.)" : "causal LM (model.)",
           r->w->n_unused);
  printf("fixed state   %lld bytes per sequence (conv %lld in %s + recurrent %lld in f32)\n",
         (long long)r->fixed_state, (long long)r->conv_state, ph_dtype_name(r->cache_dtype),
         (long long)r->recurrent_state);
  printf("kv cache      %lld bytes per token (%s)\n", (long long)r->kv_per_token, ph_dtype_name(r->cache_dtype));
  const plan *p = &r->plan;
  printf("memory plan   --max-seqs %lld --max-tokens %lld --block-size %lld\n",
         (long long)p->max_seqs, (long long)p->max_tokens, (long long)p->block_size);
  printf("  weights     %s\n", mib(p->weight_bytes, m1, sizeof m1));
  printf("  kv pages    %s (%lld pages of %lld tokens)\n", mib(p->kv_bytes, m2, sizeof m2),
         (long long)p->pages, (long long)p->block_size);
  printf("  state slots %s (%lld slots)\n", mib(p->state_bytes, m3, sizeof m3), (long long)p->max_seqs);
  printf("  total       %s\n", mib(p->total_bytes, m4, sizeof m4));
}

static void print_json(const report *r) {
  const hf_config *c = r->c;
  const ph_model_info *in = &r->info;
  json_t *o = json_object();
  json_object_set_new(o, "model_type", json_string(in->model_type));
  json_object_set_new(o, "text_model_type", json_string(in->text_model_type));
  json_object_set_new(o, "architecture", json_string(in->architecture));
  json_object_set_new(o, "family", json_string(model_family_name(c->family)));
  json_object_set_new(o, "dtype", json_string(ph_dtype_name(in->dtype)));
  json_object_set_new(o, "num_layers", json_integer(in->n_layers));
  json_object_set_new(o, "full_attention_layers", layer_array(c, PH_LAYER_FULL_ATTENTION));
  json_object_set_new(o, "linear_attention_layers", layer_array(c, PH_LAYER_LINEAR_ATTENTION));
  json_object_set_new(o, "mla_layers", layer_array(c, PH_LAYER_MLA));
  json_t *g = json_object();
  json_object_set_new(g, "hidden_size", json_integer(c->hidden_size));
  json_object_set_new(g, "vocab_size", json_integer(c->vocab_size));
  json_object_set_new(g, "num_attention_heads", json_integer(c->n_heads));
  json_object_set_new(g, "num_key_value_heads", json_integer(c->n_kv_heads));
  json_object_set_new(g, "head_dim", json_integer(c->head_dim));
  json_object_set_new(g, "rotary_dim", json_integer(c->rope.rotary_dim));
  json_object_set_new(g, "linear_num_key_heads", json_integer(c->lin.n_key_heads));
  json_object_set_new(g, "linear_num_value_heads", json_integer(c->lin.n_value_heads));
  json_object_set_new(g, "linear_key_head_dim", json_integer(c->lin.key_head_dim));
  json_object_set_new(g, "linear_value_head_dim", json_integer(c->lin.value_head_dim));
  json_object_set_new(g, "conv_kernel", json_integer(c->lin.conv_kernel));
  json_object_set_new(g, "conv_dim", json_integer(c->geom.conv_dim));
  json_object_set_new(g, "intermediate_size", json_integer(c->intermediate_size));
  json_object_set_new(g, "num_experts", json_integer(c->moe.n_experts));
  json_object_set_new(g, "kv_lora_rank", json_integer(c->mla.kv_lora_rank));
  json_object_set_new(g, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
  json_object_set_new(o, "geometry", g);
  json_object_set_new(o, "parameters", json_integer(in->parameters));
  json_object_set_new(o, "weight_bytes", json_integer(in->weight_bytes));
  json_object_set_new(o, "weights_loaded", json_boolean(in->weights_loaded));
  if (r->w) json_object_set_new(o, "tensors_unused", json_integer((json_int_t)r->w->n_unused));
  json_object_set_new(o, "cache_dtype", json_string(ph_dtype_name(r->cache_dtype)));
  json_object_set_new(o, "fixed_state_bytes_per_sequence", json_integer(r->fixed_state));
  json_object_set_new(o, "conv_state_bytes_per_sequence", json_integer(r->conv_state));
  json_object_set_new(o, "recurrent_state_bytes_per_sequence", json_integer(r->recurrent_state));
  json_object_set_new(o, "kv_bytes_per_token", json_integer(r->kv_per_token));
  const plan *p = &r->plan;
  json_t *mp = json_object();
  json_object_set_new(mp, "max_seqs", json_integer(p->max_seqs));
  json_object_set_new(mp, "max_tokens", json_integer(p->max_tokens));
  json_object_set_new(mp, "block_size", json_integer(p->block_size));
  json_object_set_new(mp, "kv_pages", json_integer(p->pages));
  json_object_set_new(mp, "weight_bytes", json_integer(p->weight_bytes));
  json_object_set_new(mp, "kv_bytes", json_integer(p->kv_bytes));
  json_object_set_new(mp, "state_bytes", json_integer(p->state_bytes));
  json_object_set_new(mp, "total_bytes", json_integer(p->total_bytes));
  json_object_set_new(o, "memory_plan", mp);
  char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  if (s) puts(s);
  free(s);
  json_decref(o);
}

int cmd_inspect(int argc, char **argv) {
  cli_args a;
  int rc = cli_parse(&a, "inspect", OPTIONS, N_OPTIONS, argc, argv);
  if (rc) return rc;
  if (a.help) {
    cli_print_help(&a, "DIR [options]",
                   "Summarise a Hugging Face checkpoint directory: architecture, which layers are full\n"
                   "attention, geometry, parameter count, fixed state per sequence, KV bytes per\n"
                   "token, and a memory plan for serving it.");
    return CLI_EXIT_OK;
  }
  if (a.n_positional != 1) return cli_usage_error(&a, "expects exactly one checkpoint directory");
  int64_t max_seqs = 16, max_tokens = 32768, block = 256;
  ph_dtype cache_dtype = PH_DTYPE_INVALID;
  if ((rc = cli_get_int(&a, "max-seqs", 1, 1 << 20, &max_seqs)) ||
      (rc = cli_get_int(&a, "max-tokens", 1, (int64_t)1 << 40, &max_tokens)) ||
      (rc = cli_get_int(&a, "block-size", 16, 1 << 20, &block)) ||
      (rc = cli_get_dtype(&a, "cache-dtype", &cache_dtype)))
    return rc;
  if (block & (block - 1)) return cli_usage_error(&a, "--block-size must be a power of two, got %lld", (long long)block);

  ph_model_params params = ph_model_params_default();
  params.load_weights = !cli_flag(&a, "no-weights");
  ph_model *m = NULL;
  ph_status s = ph_model_open(a.positional[0], &params, &m);
  if (s != PH_OK) {
    rc = cli_lib_error(s, m ? ph_model_error(m) : NULL);
    ph_model_free(m);
    return rc;
  }
  report r;
  memset(&r, 0, sizeof r);
  ph_model_get_info(m, &r.info);
  r.c = model_config(m);
  r.w = model_weights_of(m);
  r.cache_dtype = cache_dtype != PH_DTYPE_INVALID ? cache_dtype
                  : (r.info.dtype == PH_DTYPE_F32 || r.info.dtype == PH_DTYPE_F16 || r.info.dtype == PH_DTYPE_BF16)
                      ? r.info.dtype
                      : PH_DTYPE_BF16;
  r.fixed_state = ph_model_fixed_state_bytes(m, r.cache_dtype);
  r.recurrent_state = r.c->geom.n_linear * r.c->lin.n_value_heads * r.c->lin.value_head_dim * r.c->lin.key_head_dim * 4;
  r.conv_state = r.fixed_state - r.recurrent_state;
  r.kv_per_token = ph_model_kv_bytes_per_token(m, r.cache_dtype);
  plan *p = &r.plan;
  p->max_seqs = max_seqs;
  p->max_tokens = max_tokens;
  p->block_size = block;
  p->pages = (max_tokens + block - 1) / block + max_seqs + 1;
  p->weight_bytes = r.info.weight_bytes;
  p->kv_bytes = p->pages * block * r.kv_per_token;
  p->state_bytes = max_seqs * r.fixed_state;
  p->total_bytes = p->weight_bytes + p->kv_bytes + p->state_bytes;
  if (cli_flag(&a, "json"))
    print_json(&r);
  else
    print_text(&r, a.positional[0]);
  ph_model_free(m);
  return CLI_EXIT_OK;
}
