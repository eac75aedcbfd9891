/* pagedhybrid inspect DIR — what a checkpoint or an exported package is, and what serving a
 * checkpoint costs.
 *
 * Text for people (every line fits 80 columns, long lists wrap; a long path is left whole),
 * --json (one object) for scripts. The memory plan sizes the three pools a server needs for
 * --max-seqs sequences sharing --max-tokens tokens of KV — weights as stored, KV pages (ceil(T/B)
 * pages plus one partial page per sequence plus the null block), and one fixed-state slot per
 * sequence — twice, side by side: as `pagedhybrid run` will hold it on this CPU runtime (pages of
 * --block-size tokens, default 16, caches in --cache-dtype, default f32: run's defaults; printed
 * with the run flags that give exactly these pools), and as a package exported for ONNX Runtime
 * GenAI on CUDA would (pages of 256 tokens, caches and weights in f16: export --layout paged's
 * defaults). docs/cli.md has the formulas.
 *
 * --check-weights scans every weight the model computes with (or every initializer of a
 * package) for NaN and infinities: exit 1 naming the first bad tensor, its flat index and how
 * many, else "all N tensors finite" in the report.
 *
 * --quant-report quantizes every weight issue 18 would put into MatMulNBits (models/weights.h
 * weight_role_quantizable; tensor/quant.h has the format and the rounding) at 8 and at 4 bits,
 * block --quant-block (default 32), symmetric unless --quant-asym, and prints one row per tensor:
 * the RMS relative error ||W - dq(q(W))|| / ||W|| of each, the shape NxK and the name (last, so
 * the columns fit 80 unless a name is long), instead of the summary (a checkpoint only;
 * docs/quantization.md).
 *
 * A directory holding model.onnx is a package: the reader validates it without finalizing (so a
 * package whose operators this build lacks is still described), the report is built once as a
 * JSON object and printed as JSON or as text, and finalizing afterwards says whether it runs
 * here. A config-only package (export --config-only; model.onnx says so, io/onnx.h) is read
 * without its weights and described the same way, saying it has none; --check-weights refuses
 * it. One that is not marked and lacks its data file is an error, as everywhere. docs/import.md
 * has the package keys.
 */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tools_api.h"

static const cli_option OPTIONS[] = {
    {"json", NULL, "print one JSON object instead of text"},
    {"no-weights", NULL, "read config.json only (no safetensors needed)"},
    {"check-weights", NULL, "scan every weight for NaN/Inf; exit 1 naming the first one found"},
    {"quant-report", NULL, "RMS relative error of int8 and int4 quantization, per weight"},
    {"quant-block", "B", "--quant-report: block size, a power of two >= 16 (default 32)"},
    {"quant-asym", NULL, "--quant-report: asymmetric (zero points) instead of symmetric"},
    {"max-seqs", "N", "memory plan: concurrent sequences (default 16)"},
    {"max-tokens", "T", "memory plan: KV tokens shared by all sequences (default 32768)"},
    {"block-size", "B", "run's plan: tokens per KV page, a power of two >= 16 (default 16)"},
    {"cache-dtype", "DT", "run's plan: KV and conv-state dtype f32|f16|bf16 (default f32)"},
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

#define WIDTH 80 /* text lines fit a terminal of this many columns */
#define LABEL 14 /* "geometry      " */

/* Prints "label text" with the label padded to indent columns, wrapping text at spaces so every
 * line fits WIDTH columns; continuation lines are indented by indent. A word longer than a line
 * is printed whole. */
static void field_at(int indent, const char *label, const char *text) {
  printf("%-*s", indent, label);
  const int label_len = (int)strlen(label);
  if (label_len > indent) indent = label_len;
  const size_t room = WIDTH - (size_t)indent;
  const char *p = text;
  for (;;) {
    size_t n = strlen(p);
    if (n <= room) {
      printf("%s\n", p);
      return;
    }
    size_t cut = room;
    while (cut > 0 && p[cut] != ' ') cut--;
    if (cut == 0) { /* one long word: keep it whole */
      cut = room;
      while (p[cut] && p[cut] != ' ') cut++;
      if (!p[cut]) {
        printf("%s\n", p);
        return;
      }
    }
    printf("%.*s\n%*s", (int)cut, p, indent, "");
    p += cut + 1;
  }
}

/* field_at at the report's label column. */
static void field(const char *label, const char *text) { field_at(LABEL, label, text); }

/* field() with a printf format. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void
fieldf(const char *label, const char *fmt, ...) {
  char buf[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  field(label, buf);
}

/* One runtime's pools for max_seqs sequences sharing max_tokens tokens of KV. */
typedef struct plan {
  const char *runtime; /* "cpu" (pagedhybrid run) or "cuda" (ONNX Runtime GenAI) */
  ph_dtype cache_dtype;
  int64_t max_seqs, max_tokens, block_size, pages;
  int64_t kv_per_token, fixed_state, conv_state, recurrent_state; /* bytes */
  int64_t weight_bytes, kv_bytes, state_bytes, total_bytes;
} plan;

typedef struct report {
  ph_model_info info;
  const hf_config *c;
  const model_weights *w;
  plan run, cuda;
  int checked;       /* --check-weights ran (and found everything finite) */
  int64_t n_checked; /* tensors it scanned */
  int64_t active;    /* parameters one token reads (weights_param_counts); = parameters if dense */
  int n_moe_layers;
} report;

static plan make_plan(const ph_model *m, const hf_config *c, const char *runtime, ph_dtype dt,
                      int64_t max_seqs, int64_t max_tokens, int64_t block, int64_t weight_bytes) {
  plan p;
  memset(&p, 0, sizeof p);
  p.runtime = runtime;
  p.cache_dtype = dt;
  p.max_seqs = max_seqs;
  p.max_tokens = max_tokens;
  p.block_size = block;
  p.kv_per_token = ph_model_kv_bytes_per_token(m, dt);
  p.fixed_state = ph_model_fixed_state_bytes(m, dt);
  p.recurrent_state =
      c->geom.n_linear * c->lin.n_value_heads * c->lin.value_head_dim * c->lin.key_head_dim * 4;
  p.conv_state = p.fixed_state - p.recurrent_state;
  p.pages = (max_tokens + block - 1) / block + max_seqs + 1;
  p.weight_bytes = weight_bytes;
  p.kv_bytes = p.pages * block * p.kv_per_token;
  p.state_bytes = max_seqs * p.fixed_state;
  p.total_bytes = p.weight_bytes + p.kv_bytes + p.state_bytes;
  return p;
}

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

/* The run flags that give exactly this plan's pools. */
static const char *run_flags(const plan *p, char *buf, size_t n) {
  int k = snprintf(buf, n, "--max-batch %lld --num-blocks %lld", (long long)p->max_seqs,
                   (long long)p->pages);
  if (p->block_size != 16 && k > 0 && (size_t)k < n)
    k += snprintf(buf + k, n - (size_t)k, " --block-size %lld", (long long)p->block_size);
  if (p->cache_dtype != PH_DTYPE_F32 && k > 0 && (size_t)k < n)
    snprintf(buf + k, n - (size_t)k, " --io-dtype %s", ph_dtype_name(p->cache_dtype));
  return buf;
}

/* "  label         left                            right" */
static void plan_row(const char *label, const char *left, const char *right) {
  printf("  %-14s %-31s %s\n", label, left, right);
}

static void print_plans(const plan *a, const plan *b) {
  char l[64], r[64], x[CLI_BYTES_BUF], y[CLI_BYTES_BUF];
  fieldf("memory plan", "%lld sequences sharing %lld KV tokens (--max-seqs, --max-tokens)",
         (long long)a->max_seqs, (long long)a->max_tokens);
  plan_row("", "pagedhybrid run (this CPU)", "CUDA package (GenAI)");
  snprintf(l, sizeof l, "%lld tokens, %s", (long long)a->block_size, ph_dtype_name(a->cache_dtype));
  snprintf(r, sizeof r, "%lld tokens, %s", (long long)b->block_size, ph_dtype_name(b->cache_dtype));
  plan_row("page", l, r);
  plan_row("kv per token", cli_bytes((uint64_t)a->kv_per_token, x, sizeof x),
           cli_bytes((uint64_t)b->kv_per_token, y, sizeof y));
  plan_row("state per seq", cli_bytes((uint64_t)a->fixed_state, x, sizeof x),
           cli_bytes((uint64_t)b->fixed_state, y, sizeof y));
  plan_row("weights", cli_bytes((uint64_t)a->weight_bytes, x, sizeof x),
           cli_bytes((uint64_t)b->weight_bytes, y, sizeof y));
  snprintf(l, sizeof l, "%s (%lld pages)", cli_bytes((uint64_t)a->kv_bytes, x, sizeof x),
           (long long)a->pages);
  snprintf(r, sizeof r, "%s (%lld pages)", cli_bytes((uint64_t)b->kv_bytes, y, sizeof y),
           (long long)b->pages);
  plan_row("kv pages", l, r);
  /* a model without fixed state (MLA) holds no slots at all (hybrid_cache makes none) */
  snprintf(l, sizeof l, "%s (%lld slots)", cli_bytes((uint64_t)a->state_bytes, x, sizeof x),
           a->fixed_state > 0 ? (long long)a->max_seqs : 0LL);
  snprintf(r, sizeof r, "%s (%lld slots)", cli_bytes((uint64_t)b->state_bytes, y, sizeof y),
           b->fixed_state > 0 ? (long long)b->max_seqs : 0LL);
  plan_row("state slots", l, r);
  plan_row("total", cli_bytes((uint64_t)a->total_bytes, x, sizeof x),
           cli_bytes((uint64_t)b->total_bytes, y, sizeof y));
  char flags[160];
  printf("  %-14s %s\n", "run with", run_flags(a, flags, sizeof flags));
  if (b->max_seqs <= 256) /* export's --max-batch-size range */
    printf("  %-14s --layout paged --max-batch-size %lld --num-blocks %lld\n", "export with",
           (long long)b->max_seqs, (long long)b->pages);
}

static void print_text(const report *r, const char *dir) {
  const hf_config *c = r->c;
  const ph_model_info *in = &r->info;
  char buf[4096], m1[CLI_BYTES_BUF];
  printf("%-*s%s\n", LABEL, "checkpoint", dir);
  char tm[128] = "";
  if (strcmp(in->model_type, in->text_model_type) != 0)
    snprintf(tm, sizeof tm, " (text model %s)", in->text_model_type);
  fieldf("model_type", "%s%s, family %s%s", in->model_type, tm, model_family_name(c->family),
         c->is_vlm ? "; a VLM wrapper: the vision part is ignored" : "");
  fieldf("architecture", "%s, dtype %s", in->architecture[0] ? in->architecture : "(none)",
         ph_dtype_name(in->dtype));
  fieldf("layers", "%d: %d linear attention (GatedDeltaNet), %d %s", in->n_layers,
         in->n_linear_attention_layers, in->n_full_attention_layers,
         c->family == FAMILY_DEEPSEEK ? "multi-head latent attention" : "full attention");
  char pattern[HF_MAX_LAYERS + 1];
  for (int i = 0; i < in->n_layers; i++)
    pattern[i] = c->layer_kind[i] == PH_LAYER_LINEAR_ATTENTION ? 'L'
                 : c->layer_kind[i] == PH_LAYER_MLA            ? 'M'
                                                               : 'F';
  pattern[in->n_layers] = '\0';
  fieldf("pattern", "%s  (L linear, F full, M MLA)", pattern);
  layer_list(c, 1, buf, sizeof buf);
  field("full/MLA ids", buf[0] ? buf : "-");
  layer_list(c, 0, buf, sizeof buf);
  field("linear ids", buf[0] ? buf : "-");
  fieldf("geometry", "hidden %lld, vocab %lld, attention heads %lld/%lld x %lld, rms eps %g%s",
         (long long)c->hidden_size, (long long)c->vocab_size, (long long)c->n_heads,
         (long long)c->n_kv_heads, (long long)c->head_dim, c->rms_norm_eps,
         c->tie_word_embeddings ? ", tied embeddings" : "");
  int k = snprintf(buf, sizeof buf, "theta %g, rotary dims %lld", c->rope.theta,
                   (long long)c->rope.rotary_dim);
  if (c->rope.has_mrope && k > 0 && (size_t)k < sizeof buf)
    k += snprintf(buf + k, sizeof buf - (size_t)k, ", mrope [%lld, %lld, %lld]%s",
                  (long long)c->rope.mrope_section[0], (long long)c->rope.mrope_section[1],
                  (long long)c->rope.mrope_section[2],
                  c->rope.mrope_interleaved ? " interleaved" : "");
  if (c->rope.scaling == ROPE_SCALING_YARN && k > 0 && (size_t)k < sizeof buf)
    snprintf(buf + k, sizeof buf - (size_t)k, ", YaRN factor %g", c->rope.factor);
  field("rope", buf);
  if (c->geom.n_linear)
    fieldf("gateddeltanet", "Hk %lld x Dk %lld, Hv %lld x Dv %lld, conv kernel %lld, conv_dim %lld",
           (long long)c->lin.n_key_heads, (long long)c->lin.key_head_dim,
           (long long)c->lin.n_value_heads, (long long)c->lin.value_head_dim,
           (long long)c->lin.conv_kernel, (long long)c->geom.conv_dim);
  if (c->family == FAMILY_DEEPSEEK)
    fieldf("mla", "q_lora %lld, kv_lora %lld, nope/rope/v %lld/%lld/%lld, softmax scale %.6f",
           (long long)c->mla.q_lora_rank, (long long)c->mla.kv_lora_rank,
           (long long)c->mla.qk_nope_head_dim, (long long)c->mla.qk_rope_head_dim,
           (long long)c->mla.v_head_dim, c->mla.softmax_scale);
  if (c->moe.n_experts)
    fieldf("moe", "%lld experts, top-%lld, expert width %lld", (long long)c->moe.n_experts,
           (long long)c->moe.n_experts_per_tok, (long long)c->moe.moe_intermediate_size);
  else
    fieldf("mlp", "dense SwiGLU, intermediate %lld", (long long)c->intermediate_size);
  fieldf("parameters", "%lld (%s as stored)%s", (long long)in->parameters,
         cli_bytes((uint64_t)in->weight_bytes, m1, sizeof m1),
         in->weights_loaded ? "" : ", predicted from config.json");
  if (r->n_moe_layers)
    fieldf("active",
           "%lld per token (%.1f%%): all but the routed experts, plus %lld of %lld "
           "routed experts in each of %d MoE layers",
           (long long)r->active,
           in->parameters > 0 ? 100.0 * (double)r->active / (double)in->parameters : 0.0,
           (long long)c->moe.n_experts_per_tok, (long long)c->moe.n_experts, r->n_moe_layers);
  if (c->family == FAMILY_DEEPSEEK) {
    char m2[CLI_BYTES_BUF];
    const int64_t row = c->mla.kv_lora_rank + c->mla.qk_rope_head_dim;
    fieldf("latent kv",
           "%s per token in %s (%s in %s): %lld layers x one %lld-value row, kv_lora %lld + "
           "rope %lld",
           cli_bytes((uint64_t)r->run.kv_per_token, m1, sizeof m1),
           ph_dtype_name(r->run.cache_dtype),
           cli_bytes((uint64_t)r->cuda.kv_per_token, m2, sizeof m2),
           ph_dtype_name(r->cuda.cache_dtype), (long long)c->n_layers, (long long)row,
           (long long)c->mla.kv_lora_rank, (long long)c->mla.qk_rope_head_dim);
  }
  if (r->w) {
    fieldf("tensors", "every expected tensor found, %s layout (%s)",
           r->w->layout == LAYOUT_VLM ? "VLM" : "causal LM",
           r->w->layout == LAYOUT_VLM ? "model.language_model." : "model.");
    fieldf("unused", "%zu tensors (vision tower, MTP layers)", r->w->n_unused);
  }
  if (r->checked)
    fieldf("weights", "all %lld tensors finite (no NaN, no Inf)", (long long)r->n_checked);
  print_plans(&r->run, &r->cuda);
}

static json_t *plan_json(const plan *p) {
  json_t *mp = json_object();
  json_object_set_new(mp, "runtime", json_string(p->runtime));
  json_object_set_new(mp, "cache_dtype", json_string(ph_dtype_name(p->cache_dtype)));
  json_object_set_new(mp, "max_seqs", json_integer(p->max_seqs));
  json_object_set_new(mp, "max_tokens", json_integer(p->max_tokens));
  json_object_set_new(mp, "block_size", json_integer(p->block_size));
  json_object_set_new(mp, "kv_pages", json_integer(p->pages));
  json_object_set_new(mp, "kv_bytes_per_token", json_integer(p->kv_per_token));
  json_object_set_new(mp, "fixed_state_bytes_per_sequence", json_integer(p->fixed_state));
  json_object_set_new(mp, "weight_bytes", json_integer(p->weight_bytes));
  json_object_set_new(mp, "kv_bytes", json_integer(p->kv_bytes));
  json_object_set_new(mp, "state_bytes", json_integer(p->state_bytes));
  json_object_set_new(mp, "total_bytes", json_integer(p->total_bytes));
  return mp;
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
  json_object_set_new(o, "active_parameters", json_integer(r->active));
  json_object_set_new(o, "moe_layers", json_integer(r->n_moe_layers));
  json_object_set_new(o, "weight_bytes", json_integer(in->weight_bytes));
  json_object_set_new(o, "weights_loaded", json_boolean(in->weights_loaded));
  if (r->w) json_object_set_new(o, "tensors_unused", json_integer((json_int_t)r->w->n_unused));
  if (r->checked) json_object_set_new(o, "tensors_checked_finite", json_integer(r->n_checked));
  /* per-sequence and per-token figures of run's plan (the cache dtype it runs in) */
  const plan *p = &r->run;
  json_object_set_new(o, "cache_dtype", json_string(ph_dtype_name(p->cache_dtype)));
  json_object_set_new(o, "fixed_state_bytes_per_sequence", json_integer(p->fixed_state));
  json_object_set_new(o, "conv_state_bytes_per_sequence", json_integer(p->conv_state));
  json_object_set_new(o, "recurrent_state_bytes_per_sequence", json_integer(p->recurrent_state));
  json_object_set_new(o, "kv_bytes_per_token", json_integer(p->kv_per_token));
  json_object_set_new(o, "latent_kv_bytes_per_token",
                      c->family == FAMILY_DEEPSEEK ? json_integer(p->kv_per_token) : json_null());
  json_object_set_new(o, "memory_plan", plan_json(&r->run));
  json_object_set_new(o, "memory_plan_cuda", plan_json(&r->cuda));
  char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  if (s) puts(s);
  free(s);
  json_decref(o);
}

/* ---- packages (model.onnx + data + genai_config.json) --------------------------------------- */

typedef struct op_count {
  char name[160]; /* "MatMul", "com.microsoft.GroupQueryAttention" */
  int n;
} op_count;

static int cmp_op_count(const void *a, const void *b) {
  const op_count *x = a, *y = b;
  if (x->n != y->n) return x->n > y->n ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* {type: n}, most frequent first (then by name: the same package prints the same bytes). */
static json_t *op_counts(const graph *g) {
  op_count *c = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *c);
  json_t *o = json_object();
  if (!c) return o;
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const gnode *nd = &g->nodes[i];
    int ai = !nd->domain[0] || strcmp(nd->domain, "ai.onnx") == 0;
    char name[160];
    snprintf(name, sizeof name, "%s%s%s", ai ? "" : nd->domain, ai ? "" : ".", nd->op_type);
    int k = 0;
    while (k < n && strcmp(c[k].name, name) != 0) k++;
    if (k == n) snprintf(c[n++].name, sizeof c[0].name, "%s", name);
    c[k].n++;
  }
  qsort(c, (size_t)n, sizeof *c, cmp_op_count);
  for (int k = 0; k < n; k++) json_object_set_new(o, c[k].name, json_integer(c[k].n));
  free(c);
  return o;
}

/* {name, dtype, shape}: a known dim is a number, a named one its symbol, an anonymous one null;
 * unknown rank: shape null. */
static json_t *value_json(const graph *g, int id) {
  const gvalue *v = &g->values[id];
  json_t *o = json_object(), *dims_j = v->type.rank < 0 ? json_null() : json_array();
  json_object_set_new(o, "name", json_string(v->name));
  json_object_set_new(o, "dtype", json_string(ph_dtype_name(v->type.dtype)));
  for (int k = 0; k < v->type.rank; k++) {
    if (v->type.dims[k] >= 0)
      json_array_append_new(dims_j, json_integer(v->type.dims[k]));
    else if (v->sym[k] >= 0 && v->sym[k] < g->n_symbols)
      json_array_append_new(dims_j, json_string(g->symbols[v->sym[k]]));
    else
      json_array_append_new(dims_j, json_null());
  }
  json_object_set_new(o, "shape", dims_j);
  return o;
}

static json_t *values_json(const graph *g, const int *ids, int n) {
  json_t *a = json_array();
  for (int i = 0; i < n; i++) json_array_append_new(a, value_json(g, ids[i]));
  return a;
}

static json_t *genai_json(const genai_config *c) {
  json_t *o = json_object();
  json_object_set_new(o, "type", json_string(c->model_type));
  json_object_set_new(o, "filename", json_string(c->filename));
  json_object_set_new(o, "num_hidden_layers", json_integer(c->num_hidden_layers));
  json_object_set_new(o, "num_attention_heads", json_integer(c->num_attention_heads));
  json_object_set_new(o, "num_key_value_heads", json_integer(c->num_key_value_heads));
  json_object_set_new(o, "head_size", json_integer(c->head_size));
  json_object_set_new(o, "hidden_size", json_integer(c->hidden_size));
  json_object_set_new(o, "vocab_size", json_integer(c->vocab_size));
  json_object_set_new(o, "context_length", json_integer(c->context_length));
  json_t *eos = json_array();
  for (int i = 0; i < c->n_eos_token_ids; i++)
    json_array_append_new(eos, json_integer(c->eos_token_ids[i]));
  json_object_set_new(o, "bos_token_id",
                      c->bos_token_id >= 0 ? json_integer(c->bos_token_id) : json_null());
  json_object_set_new(o, "eos_token_ids", eos);
  json_object_set_new(o, "pad_token_id",
                      c->pad_token_id >= 0 ? json_integer(c->pad_token_id) : json_null());
  json_object_set_new(o, "past_present_share_buffer", json_boolean(c->past_present_share_buffer));
  if (c->n_state_groups) {
    json_t *groups = json_array();
    for (int k = 0; k < c->n_state_groups; k++) {
      const genai_state_group *sg = &c->state_groups[k];
      json_t *g = json_object(), *ids = json_array();
      for (int j = 0; j < sg->n_layer_ids; j++)
        json_array_append_new(ids, json_integer(sg->layer_ids[j]));
      json_object_set_new(g, "kind", json_string(genai_state_kind_name(sg->kind)));
      json_object_set_new(g, "layer_ids", ids);
      json_array_append_new(groups, g);
    }
    json_object_set_new(o, "state_groups", groups);
  }
  if (c->state_update_capacity > 0) /* compact state updates (speculative decoding) */
    json_object_set_new(o, "state_update_capacity", json_integer(c->state_update_capacity));
  if (c->dynamic_batching.present) {
    const genai_dynamic_batching *db = &c->dynamic_batching;
    json_t *b = json_object();
    json_object_set_new(b, "block_size", json_integer(db->block_size));
    json_object_set_new(b, "max_batch_size", json_integer(db->max_batch_size));
    if (db->num_blocks > 0) json_object_set_new(b, "num_blocks", json_integer(db->num_blocks));
    if (db->gpu_utilization_factor > 0)
      json_object_set_new(b, "gpu_utilization_factor", json_real(db->gpu_utilization_factor));
    json_object_set_new(b, "max_scheduled_tokens", json_integer(db->max_scheduled_tokens));
    json_object_set_new(o, "dynamic_batching", b);
  }
  return o;
}

static const char *dims_text(const json_t *dims_j, char *buf, size_t n) {
  size_t pos = 0;
  buf[0] = '\0';
  if (json_is_null(dims_j)) {
    snprintf(buf, n, "[?..]");
    return buf;
  }
  size_t i;
  json_t *dim;
  pos += (size_t)snprintf(buf, n, "[");
  json_array_foreach(dims_j, i, dim) {
    if (pos >= n) break;
    const char *sep = i ? ", " : "";
    if (json_is_integer(dim))
      pos +=
          (size_t)snprintf(buf + pos, n - pos, "%s%lld", sep, (long long)json_integer_value(dim));
    else if (json_is_string(dim))
      pos += (size_t)snprintf(buf + pos, n - pos, "%s%s", sep, json_string_value(dim));
    else
      pos += (size_t)snprintf(buf + pos, n - pos, "%s?", sep);
  }
  if (pos < n) snprintf(buf + pos, n - pos, "]");
  return buf;
}

static void print_values_text(const char *label, const json_t *values) {
  size_t i;
  json_t *v;
  printf("%-13s %zu\n", label, json_array_size(values));
  json_array_foreach(values, i, v) {
    char dims[512];
    printf("  %-40s %s%s\n", json_string_value(json_object_get(v, "name")),
           json_string_value(json_object_get(v, "dtype")),
           dims_text(json_object_get(v, "shape"), dims, sizeof dims));
  }
}

/* "3, 7, 11" into buf (cut short, never overrun, when it does not fit). */
static const char *ids_text(const json_t *ids, char *buf, size_t n) {
  size_t i, pos = 0;
  json_t *id;
  buf[0] = '\0';
  json_array_foreach(ids, i, id) {
    int k =
        snprintf(buf + pos, n - pos, "%s%lld", i ? ", " : "", (long long)json_integer_value(id));
    if (k < 0 || (size_t)k >= n - pos) break;
    pos += (size_t)k;
  }
  return buf;
}

static void print_package_text(const json_t *o, const char *dir) {
  char m1[CLI_BYTES_BUF], m2[CLI_BYTES_BUF];
  const json_t *opsets = json_object_get(o, "opsets");
  printf("package       %s\n", dir);
  char format[512];
  int k = snprintf(format, sizeof format, "ONNX, IR version %lld, opsets",
                   (long long)json_integer_value(json_object_get(o, "ir_version")));
  const char *key;
  json_t *v;
  int first = 1;
  json_object_foreach((json_t *)opsets, key, v) {
    if (k > 0 && (size_t)k < sizeof format)
      k += snprintf(format + k, sizeof format - (size_t)k, "%s %s %lld", first ? "" : ",", key,
                    (long long)json_integer_value(v));
    first = 0;
  }
  const char *producer = json_string_value(json_object_get(o, "producer"));
  if (producer[0] && k > 0 && (size_t)k < sizeof format)
    snprintf(format + k, sizeof format - (size_t)k, ", producer %s", producer);
  field("format", format);
  const json_t *ops = json_object_get(o, "op_counts");
  int64_t n_nodes = 0;
  json_object_foreach((json_t *)ops, key, v) n_nodes += json_integer_value(v);
  printf("nodes         %lld, %zu operator types\n", (long long)n_nodes, json_object_size(ops));
  json_object_foreach((json_t *)ops, key, v)
      printf("  %-48s %lld\n", key, (long long)json_integer_value(v));
  print_values_text("inputs", json_object_get(o, "inputs"));
  print_values_text("outputs", json_object_get(o, "outputs"));
  const int config_only = json_is_true(json_object_get(o, "config_only"));
  printf("initializers  %lld (%s; %s external data%s)\n",
         (long long)json_integer_value(json_object_get(o, "initializers")),
         cli_bytes((uint64_t)json_integer_value(json_object_get(o, "initializer_bytes")), m1,
                   sizeof m1),
         cli_bytes((uint64_t)json_integer_value(json_object_get(o, "external_data_bytes")), m2,
                   sizeof m2),
         config_only ? ", not written" : "");
  printf("parameters    %lld\n", (long long)json_integer_value(json_object_get(o, "parameters")));
  if (config_only)
    field("weights", "none: a config-only package (export --config-only), model.onnx.data was "
                     "never written; the sizes above are what the weights would take");
  const json_t *checked = json_object_get(o, "tensors_checked_finite");
  if (checked)
    fieldf("weights", "all %lld initializers finite (no NaN, no Inf)",
           (long long)json_integer_value(checked));
  if (json_is_true(json_object_get(o, "runnable")))
    printf("runs here     yes (every operator and contract checked)\n");
  else
    fieldf("runs here", "no: %s", json_string_value(json_object_get(o, "runnable_error")));
  const json_t *gc = json_object_get(o, "genai_config");
  if (json_is_null(gc)) {
    printf("genai_config  (none)\n");
    return;
  }
  fieldf("genai_config",
         "%s, %lld layers, heads %lld/%lld x %lld, hidden %lld, vocab %lld, context "
         "%lld",
         json_string_value(json_object_get(gc, "type")),
         (long long)json_integer_value(json_object_get(gc, "num_hidden_layers")),
         (long long)json_integer_value(json_object_get(gc, "num_attention_heads")),
         (long long)json_integer_value(json_object_get(gc, "num_key_value_heads")),
         (long long)json_integer_value(json_object_get(gc, "head_size")),
         (long long)json_integer_value(json_object_get(gc, "hidden_size")),
         (long long)json_integer_value(json_object_get(gc, "vocab_size")),
         (long long)json_integer_value(json_object_get(gc, "context_length")));
  const json_t *groups = json_object_get(gc, "state_groups");
  size_t i;
  json_array_foreach((json_t *)groups, i, v) {
    char label[64], ids[4096];
    snprintf(label, sizeof label, "  state group %-16s layers",
             json_string_value(json_object_get(v, "kind")));
    field_at((int)strlen(label) + 1, label,
             ids_text(json_object_get(v, "layer_ids"), ids, sizeof ids));
  }
  const json_t *su = json_object_get(gc, "state_update_capacity");
  if (su) {
    char text[128];
    snprintf(text, sizeof text,
             "capacity %lld (a verify may capture that many tokens: docs/speculative.md)",
             (long long)json_integer_value(su));
    field_at(LABEL + 6, "  state updates:", text);
  }
  const json_t *db = json_object_get(gc, "dynamic_batching");
  if (db) {
    char text[512];
    int n = snprintf(text, sizeof text, "block_size %lld, max_batch_size %lld, ",
                     (long long)json_integer_value(json_object_get(db, "block_size")),
                     (long long)json_integer_value(json_object_get(db, "max_batch_size")));
    if (json_object_get(db, "num_blocks") && n > 0 && (size_t)n < sizeof text)
      n += snprintf(text + n, sizeof text - (size_t)n, "num_blocks %lld, ",
                    (long long)json_integer_value(json_object_get(db, "num_blocks")));
    if (json_object_get(db, "gpu_utilization_factor") && n > 0 && (size_t)n < sizeof text)
      n += snprintf(text + n, sizeof text - (size_t)n, "gpu_utilization_factor %g, ",
                    json_real_value(json_object_get(db, "gpu_utilization_factor")));
    if (n > 0 && (size_t)n < sizeof text)
      snprintf(text + n, sizeof text - (size_t)n, "max_scheduled_tokens %lld",
               (long long)json_integer_value(json_object_get(db, "max_scheduled_tokens")));
    field_at(LABEL + 6, "  dynamic batching:", text);
  }
}

/* Elements of every initializer (the weights, and constants such as the rotary caches); known
 * from the shapes alone, so a config-only package has the count too. */
static int64_t initializer_elements(const graph *g) {
  int64_t n = 0;
  for (int i = 0; i < g->n_values; i++) {
    const gvalue *v = &g->values[i];
    if (v->kind != VALUE_INITIALIZER || v->type.rank < 0) continue;
    const shape sh = shape_make(v->type.rank, v->type.dims);
    const int64_t k = shape_numel(&sh);
    if (k > 0) n += k;
  }
  return n;
}

/* Every initializer with data, in value order (tensor.h nonfinite_report). */
static ph_status check_initializers(const graph *g, int64_t *n_checked, diag *d) {
  nonfinite_report r;
  nonfinite_report_init(&r);
  for (int i = 0; i < g->n_values; i++) {
    const gvalue *v = &g->values[i];
    if (v->kind != VALUE_INITIALIZER || !v->type.data || v->type.rank < 0) continue;
    const shape sh = shape_make(v->type.rank, v->type.dims);
    nonfinite_scan(&r, v->name, v->type.dtype, &sh, v->type.data);
  }
  *n_checked = r.n_tensors;
  return nonfinite_status(&r, d);
}

/* --quant-report: one row per quantizable weight (model_quant_report), text or JSON. */
static int print_quant_report(const cli_args *a, ph_model *m, int block, int symmetric) {
  model_quant_row *rows = NULL;
  size_t n = 0;
  diag d;
  diag_clear(&d);
  ph_status s = model_quant_report(m, block, symmetric, &rows, &n, &d);
  if (s != PH_OK) return cli_lib_error(s, d.msg);
  if (cli_flag(a, "json")) {
    json_t *o = json_object(), *arr = json_array();
    json_object_set_new(o, "block_size", json_integer(block));
    json_object_set_new(o, "symmetric", json_boolean(symmetric));
    for (size_t i = 0; i < n; i++) {
      json_t *r = json_object();
      json_object_set_new(r, "name", json_string(rows[i].name));
      json_object_set_new(r, "shape",
                          json_pack("[II]", (json_int_t)rows[i].n, (json_int_t)rows[i].k));
      json_object_set_new(r, "rms_rel_int8", json_real(rows[i].rel8));
      json_object_set_new(r, "rms_rel_int4", json_real(rows[i].rel4));
      json_array_append_new(arr, r);
    }
    json_object_set_new(o, "tensors", arr);
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
    json_decref(o);
    if (text) printf("%s\n", text);
    free(text);
  } else {
    printf("quantization error per weight (block %d, %s; RMS relative error)\n", block,
           symmetric ? "symmetric" : "asymmetric");
    printf("%9s %9s %11s  %s\n", "int8", "int4", "shape", "tensor");
    for (size_t i = 0; i < n; i++) {
      char shp[48];
      snprintf(shp, sizeof shp, "%lldx%lld", (long long)rows[i].n, (long long)rows[i].k);
      printf("%9.3e %9.3e %11s  %s\n", rows[i].rel8, rows[i].rel4, shp, rows[i].name);
    }
    printf("%zu tensors\n", n);
  }
  free(rows);
  return CLI_EXIT_OK;
}

static int inspect_package(const cli_args *a, const char *dir) {
  graph *g = NULL;
  onnx_model_info info;
  diag d;
  /* genai_config.json first: it names the graph file; a config that does not describe the graph
   * is reported below as what keeps the package from running */
  genai_config gc;
  int has_config = 0;
  /* a config-only package is described (its external initializers without data); one that is
   * not marked so and lacks its data file is an error here as everywhere */
  ph_status s = package_read(dir, PACKAGE_CONFIG_ONLY, &gc, &has_config, &g, &info, &d);
  if (s != PH_OK) return cli_lib_error(s, d.msg);
  const int config_only = info.config_only;
  if (config_only && cli_flag(a, "check-weights")) {
    graph_free(g);
    char why[4200];
    snprintf(why, sizeof why,
             "%s: --check-weights: a config-only package (export --config-only) has no weights "
             "to check: model.onnx.data was never written",
             dir);
    return cli_lib_error(PH_ERR_INVALID_ARGUMENT, why);
  }
  int64_t n_checked = -1;
  if (cli_flag(a, "check-weights") && (s = check_initializers(g, &n_checked, &d)) != PH_OK) {
    graph_free(g);
    return cli_lib_error(s, d.msg);
  }
  json_t *o = json_object();
  json_object_set_new(o, "format", json_string("onnx"));
  json_object_set_new(o, "ir_version", json_integer(info.ir_version));
  json_t *opsets = json_object();
  if (info.opset_ai) json_object_set_new(opsets, "ai.onnx", json_integer(info.opset_ai));
  if (info.opset_ms) json_object_set_new(opsets, "com.microsoft", json_integer(info.opset_ms));
  json_object_set_new(o, "opsets", opsets);
  char producer[128];
  snprintf(producer, sizeof producer, "%s%s%s", info.producer_name,
           info.producer_version[0] ? " " : "", info.producer_version);
  json_object_set_new(o, "producer", json_string(producer));
  json_object_set_new(o, "op_counts", op_counts(g));
  json_object_set_new(o, "inputs", values_json(g, g->inputs, g->n_inputs));
  json_object_set_new(o, "outputs", values_json(g, g->outputs, g->n_outputs));
  json_object_set_new(o, "initializers", json_integer(info.n_initializers));
  json_object_set_new(o, "parameters", json_integer(initializer_elements(g)));
  json_object_set_new(o, "initializer_bytes", json_integer(info.initializer_bytes));
  json_object_set_new(o, "external_data_bytes", json_integer(info.external_data_bytes));
  /* config-only: the bytes above are what the weights would take; none of them exist */
  json_object_set_new(o, "config_only", json_boolean(config_only));
  json_object_set_new(o, "weights_present", json_boolean(!config_only));
  if (n_checked >= 0) json_object_set_new(o, "tensors_checked_finite", json_integer(n_checked));
  /* after the declared types are in the report: finalizing replaces them with inferred ones */
  s = graph_finalize(g, &d);
  if (s == PH_OK && has_config) s = package_check_graph(&gc, g, &d);
  /* a structure that does not check is the more useful news; else the missing weights */
  if (s == PH_OK && config_only)
    s = diag_set(&d, PH_ERR_INVALID_ARGUMENT,
                 "no weights (a config-only package: model.onnx.data was never written)");
  json_object_set_new(o, "runnable", json_boolean(s == PH_OK));
  if (s != PH_OK) {
    char why[DIAG_MSG_BYTES + 64];
    snprintf(why, sizeof why, "%s: %s", ph_status_name(s), d.msg);
    json_object_set_new(o, "runnable_error", json_string(why));
  }
  graph_free(g);

  int rc = CLI_EXIT_OK;
  json_object_set_new(o, "genai_config", has_config ? genai_json(&gc) : json_null());
  if (cli_flag(a, "json")) {
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (text) puts(text);
    free(text);
  } else {
    print_package_text(o, dir);
  }
  json_decref(o);
  return rc;
}

int cmd_inspect(int argc, char **argv) {
  cli_args a;
  int rc = cli_parse(&a, "inspect", OPTIONS, N_OPTIONS, argc, argv);
  if (rc) return rc;
  if (a.help) {
    cli_print_help(
        &a, "DIR [options]",
        "Summarise a Hugging Face checkpoint directory: architecture, which layers are full\n"
        "attention, geometry, parameter count, and a memory plan for serving it, twice:\n"
        "as `pagedhybrid run` holds it here (16-token f32 pages: run's defaults) and as a\n"
        "package exported for ONNX Runtime GenAI on CUDA (256-token pages, f16).\n"
        "A directory with model.onnx or genai_config.json is an exported package: operator\n"
        "counts, graph inputs and outputs with their dims, initializers and external data,\n"
        "whether it runs here (its operators, and its genai_config.json against the graph),\n"
        "and its genai_config.json (the memory-plan options do not apply). A package from\n"
        "export --config-only is described without weights, and says it has none.\n"
        "--check-weights also scans every weight for NaN and infinities.\n"
        "--quant-report prints, instead, the int8 and int4 quantization error of every\n"
        "weight MatMulNBits would hold (docs/quantization.md).");
    return CLI_EXIT_OK;
  }
  if (a.n_positional != 1) return cli_usage_error(&a, "expects exactly one checkpoint directory");
  int64_t max_seqs = 16, max_tokens = 32768, block = 16;
  ph_dtype cache_dtype = PH_DTYPE_F32;
  if ((rc = cli_get_int(&a, "max-seqs", 1, 1 << 20, &max_seqs)) ||
      (rc = cli_get_int(&a, "max-tokens", 1, (int64_t)1 << 40, &max_tokens)) ||
      (rc = cli_get_int(&a, "block-size", 16, 1 << 20, &block)) ||
      (rc = cli_get_dtype(&a, "cache-dtype", &cache_dtype)))
    return rc;
  if (block & (block - 1))
    return cli_usage_error(&a, "--block-size must be a power of two, got %lld", (long long)block);
  if (cli_flag(&a, "check-weights") && cli_flag(&a, "no-weights"))
    return cli_usage_error(&a, "--check-weights needs the weights: drop --no-weights");
  int64_t quant_block = 32;
  if ((rc = cli_get_int(&a, "quant-block", 16, 1 << 20, &quant_block))) return rc;
  if (quant_block & (quant_block - 1))
    return cli_usage_error(&a, "--quant-block must be a power of two, got %lld",
                           (long long)quant_block);
  const int quant = cli_flag(&a, "quant-report");
  if (quant && cli_flag(&a, "no-weights"))
    return cli_usage_error(&a, "--quant-report needs the weights: drop --no-weights");
  if ((rc = cli_check_model_path(a.positional[0]))) return rc;

  if (onnx_is_package(a.positional[0])) {
    if (quant)
      return cli_usage_error(&a, "--quant-report reads a checkpoint, not an exported package");
    return inspect_package(&a, a.positional[0]);
  }

  ph_model_params params = ph_model_params_default();
  params.load_weights = !cli_flag(&a, "no-weights");
  ph_model *m = NULL;
  ph_status s = ph_model_open(a.positional[0], &params, &m);
  if (s != PH_OK) {
    rc = cli_lib_error(s, m ? ph_model_error(m) : NULL);
    ph_model_free(m);
    return rc;
  }
  if (quant) {
    rc = print_quant_report(&a, m, (int)quant_block, !cli_flag(&a, "quant-asym"));
    ph_model_free(m);
    return rc;
  }
  report r;
  memset(&r, 0, sizeof r);
  if (cli_flag(&a, "check-weights")) {
    nonfinite_report nf;
    diag d;
    diag_clear(&d);
    if ((s = model_check_finite(m, &nf, &d)) != PH_OK) {
      ph_model_free(m);
      return cli_lib_error(s, d.msg);
    }
    r.checked = 1;
    r.n_checked = nf.n_tensors;
  }
  ph_model_get_info(m, &r.info);
  r.c = model_config(m);
  r.w = model_weights_of(m);
  /* a CUDA-target export keeps activations and caches in f16 (export's default io dtype,
   * docs/export.md) and, without --dtype, stores the weights in it too */
  const ph_dtype half = PH_DTYPE_F16;
  const int64_t cuda_weights =
      r.info.dtype == half ? r.info.weight_bytes : r.info.parameters * (int64_t)dtype_size(half);
  /* Active parameters: the config's prediction of what the routed experts take, subtracted from
   * the count shown (the bound tensors' when loaded; the two agree, weights_bind checks every
   * shape). */
  int64_t pred_total = 0, pred_active = 0;
  diag d;
  diag_clear(&d);
  if ((s = weights_param_counts(r.c, &pred_total, &pred_active, &d)) != PH_OK) {
    ph_model_free(m);
    return cli_lib_error(s, d.msg);
  }
  r.active = r.info.parameters - (pred_total - pred_active);
  for (int i = 0; i < (int)r.c->n_layers; i++) r.n_moe_layers += r.c->layer_is_moe[i];
  r.run = make_plan(m, r.c, "cpu", cache_dtype, max_seqs, max_tokens, block, r.info.weight_bytes);
  r.cuda = make_plan(m, r.c, "cuda", half, max_seqs, max_tokens, 256, cuda_weights);
  if (cli_flag(&a, "json"))
    print_json(&r);
  else
    print_text(&r, a.positional[0]);
  ph_model_free(m);
  return CLI_EXIT_OK;
}
