/* export — checkpoint → package, dense or packed paged. See export.h.
 *
 * Everything that can be refused is checked before the first file is written: the options, the
 * output directory, the graph (built and finalized), the genai_config token ids, and that every
 * name genai_config.json promises resolves to a graph input or output (GenAI binds by those
 * templates; a mismatch would only show when GenAI loads the package). Then model.onnx(.data),
 * genai_config.json and the tokenizer files are written in that order.
 */
#include "models/export.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fmap.h"
#include "base/wfile.h"
#include "graph/abi_names.h"
#include "io/genai_config.h"
#include "io/inference_metadata.h"
#include "io/onnx.h"
#include "models/model.h"
#include "models/placeholder.h"
#include "models/registry.h"

#define GENAI_CONFIG_FILE "genai_config.json"
#define COPY_CHUNK_BYTES  ((size_t)1 << 20)

const char *const EXPORT_TOKENIZER_FILES[] = {
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "special_tokens_map.json",
    "chat_template.jinja",
    "generation_config.json",
    NULL,
};

export_options export_options_default(void) {
  export_options o;
  memset(&o, 0, sizeof o);
  o.dtype = PH_DTYPE_INVALID;
  o.layout = EXPORT_LAYOUT_DENSE;
  o.target = EXPORT_TARGET_CUDA;
  o.io_dtype = PH_DTYPE_INVALID;
  o.max_batch_size = 100;
  o.gpu_utilization_factor = 0.6;
  o.max_scheduled_tokens = 2048;
  return o;
}

const char *export_linear_op_name(export_linear_op op) {
  return op == EXPORT_GATED_DELTA_NET    ? "gated_delta_net"
         : op == EXPORT_LINEAR_ATTENTION ? "linear_attention"
                                         : "unknown";
}

const char *export_layout_name(export_layout l) {
  return l == EXPORT_LAYOUT_PAGED ? "paged" : l == EXPORT_LAYOUT_DENSE ? "dense" : "unknown";
}

const char *export_rotary_name(export_rotary r) {
  return r == EXPORT_ROTARY_OPS ? "ops" : r == EXPORT_ROTARY_FUSED ? "fused" : "default";
}

const char *export_target_name(export_target t) {
  return t == EXPORT_TARGET_CPU ? "cpu" : t == EXPORT_TARGET_CUDA ? "cuda" : "unknown";
}

/* ---- output directory --------------------------------------------------------------------- */

static int dir_is_nonempty(const char *path) {
  DIR *dp = opendir(path);
  if (!dp) return 0;
  struct dirent *e;
  int n = 0;
  while ((e = readdir(dp)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
  closedir(dp);
  return n > 0;
}

static int same_file(const char *a, const char *b) {
  struct stat sa, sb;
  return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Refusals only; the directory is created later, once nothing else can be refused. */
static ph_status check_out_dir(const char *out_dir, const char *ckpt_dir, int force, diag *d) {
  if (!path_exists(out_dir)) return PH_OK;
  RETURN_ERROR_IF(!path_is_dir(out_dir), d, PH_ERR_INVALID_ARGUMENT,
                  "%s: exists and is not a directory", out_dir);
  /* --force there would delete and then copy tokenizer files onto themselves */
  RETURN_ERROR_IF(same_file(out_dir, ckpt_dir), d, PH_ERR_INVALID_ARGUMENT,
                  "%s: the output directory is the checkpoint directory", out_dir);
  RETURN_ERROR_IF(dir_is_nonempty(out_dir) && !force, d, PH_ERR_INVALID_ARGUMENT,
                  "%s: output directory is not empty (use --force to overwrite)", out_dir);
  return PH_OK;
}

/* Every file a package may hold must, if it exists, be a regular file or a symlink (base/
 * wfile.h's rule; checked before anything is written). */
static ph_status check_package_files(const char *out_dir, diag *d) {
  static const char *const model_files[] = {ONNX_MODEL_FILE, ONNX_DATA_FILE, GENAI_CONFIG_FILE,
                                            INFERENCE_METADATA_FILE};
  const size_t n_model = sizeof model_files / sizeof model_files[0];
  char path[4096];
  for (size_t i = 0; i < n_model || EXPORT_TOKENIZER_FILES[i - n_model]; i++) {
    const char *name = i < n_model ? model_files[i] : EXPORT_TOKENIZER_FILES[i - n_model];
    FORWARD_IF_ERROR(path_join(path, sizeof path, out_dir, name, d));
    FORWARD_IF_ERROR(wfile_check_target(path, d));
  }
  return PH_OK;
}

/* With force, after the new package is in place: a tokenizer file this checkpoint does not have
 * (left by an earlier export of another checkpoint) and, for a structure-only package, the old
 * model.onnx.data are removed, so nothing stale sits next to this model. Done last, so a failed
 * export leaves the earlier package whole. unlink() removes a symlink itself, never what it
 * points to. Other files stay. */
static ph_status remove_stale_files(const char *ckpt_dir, const char *out_dir, int config_only,
                                    diag *d) {
  char src[4096], path[4096];
  for (int i = -1; i < 0 || EXPORT_TOKENIZER_FILES[i]; i++) {
    if (i < 0 && !config_only) continue;
    const char *name = i < 0 ? ONNX_DATA_FILE : EXPORT_TOKENIZER_FILES[i];
    FORWARD_IF_ERROR(path_join(src, sizeof src, ckpt_dir, name, d));
    if (i >= 0 && path_exists(src)) continue; /* just copied */
    FORWARD_IF_ERROR(path_join(path, sizeof path, out_dir, name, d));
    RETURN_ERROR_IF(unlink(path) != 0 && errno != ENOENT, d, PH_ERR_IO, "%s: cannot remove: %s",
                    path, strerror(errno));
  }
  return PH_OK;
}

/* src (a regular file; a FIFO or device is refused without blocking) to dst via base/wfile.h. */
static ph_status copy_file(const char *src, const char *dst, diag *d) {
  FILE *in = NULL;
  FORWARD_IF_ERROR(file_open_read_stream(src, &in, NULL, d));
  wfile out;
  ph_status s = wfile_open(&out, dst, d);
  char *buf = s == PH_OK ? malloc(COPY_CHUNK_BYTES) : NULL;
  if (s == PH_OK && !buf) s = diag_set(d, PH_ERR_NO_MEMORY, "out of memory copying %s", src);
  while (s == PH_OK) {
    size_t n = fread(buf, 1, COPY_CHUNK_BYTES, in);
    if (n) s = wfile_write(&out, buf, n, d);
    if (n < COPY_CHUNK_BYTES) break;
  }
  if (s == PH_OK && ferror(in)) s = diag_set(d, PH_ERR_IO, "%s: read failed", src);
  free(buf);
  fclose(in);
  if (s == PH_OK) return wfile_commit(&out, d);
  wfile_abort(&out);
  return s;
}

static ph_status copy_tokenizer_files(const char *ckpt_dir, const char *out_dir, diag *d) {
  char src[4096], dst[4096];
  for (int i = 0; EXPORT_TOKENIZER_FILES[i]; i++) {
    FORWARD_IF_ERROR(path_join(src, sizeof src, ckpt_dir, EXPORT_TOKENIZER_FILES[i], d));
    if (!path_exists(src)) continue;
    FORWARD_IF_ERROR(path_join(dst, sizeof dst, out_dir, EXPORT_TOKENIZER_FILES[i], d));
    FORWARD_IF_ERROR(copy_file(src, dst, d));
  }
  return PH_OK;
}

/* ---- genai_config against the graph ------------------------------------------------------- */

static int is_input(const graph *g, const char *name) {
  int id = graph_find_value(g, name);
  return id >= 0 && g->values[id].kind == VALUE_INPUT;
}

static int is_output(const graph *g, const char *name) {
  int id = graph_find_value(g, name);
  return id >= 0 && g->values[id].is_output;
}

/* One layer's past/present pair from the templates; counts what it found. */
static ph_status check_layer_names(const graph *g, int layer, const char *past_t,
                                   const char *present_t, int *n_in, int *n_out, diag *d) {
  char name[GENAI_MAX_NAME + 16];
  RETURN_ERROR_IF(!past_t[0] || !present_t[0], d, PH_ERR_INTERNAL,
                  "genai_config has no name template for layer %d's state", layer);
  snprintf(name, sizeof name, past_t, layer);
  RETURN_ERROR_IF(!is_input(g, name), d, PH_ERR_INTERNAL,
                  "genai_config names %s, which is not a graph input", name);
  snprintf(name, sizeof name, present_t, layer);
  RETURN_ERROR_IF(!is_output(g, name), d, PH_ERR_INTERNAL,
                  "genai_config names %s, which is not a graph output", name);
  ++*n_in;
  ++*n_out;
  return PH_OK;
}

/* Every graph input and output is one genai_config names, and every name it gives exists. A
 * LATENT config (slot_mapping named, no value templates) gives its MLA layers key pages only. */
static ph_status check_genai_names(const graph *g, const genai_config *gc, const hf_config *c,
                                   diag *d) {
  const char *ins[GENAI_N_SINGLE_INPUTS];
  genai_config_single_inputs(gc, ins);
  /* LATENT (slot_mapping named, no value templates): an MLA layer holds key pages only */
  const int key_only =
      gc->slot_mapping[0] && !gc->past_value_names[0] && !gc->present_value_names[0];
  int n_in = 0, n_out = 0;
  for (size_t i = 0; i < sizeof ins / sizeof ins[0]; i++) {
    if (!ins[i][0]) continue; /* not part of this layout */
    RETURN_ERROR_IF(!is_input(g, ins[i]), d, PH_ERR_INTERNAL,
                    "genai_config names input \"%s\", which the graph does not have", ins[i]);
    n_in++;
  }
  RETURN_ERROR_IF(!is_output(g, gc->logits), d, PH_ERR_INTERNAL,
                  "genai_config names output \"%s\", which the graph does not have", gc->logits);
  n_out++;
  for (int i = 0; i < (int)c->n_layers; i++) {
    if (c->layer_kind[i] == PH_LAYER_LINEAR_ATTENTION) {
      FORWARD_IF_ERROR(
          check_layer_names(g, i, gc->past_conv_names, gc->present_conv_names, &n_in, &n_out, d));
      FORWARD_IF_ERROR(check_layer_names(g, i, gc->past_recurrent_names,
                                         gc->present_recurrent_names, &n_in, &n_out, d));
      const char *su[2] = {gc->state_update_conv_value_names,
                           gc->state_update_recurrent_capsule_names};
      for (int k = 0; k < 2 && gc->state_update_capacity > 0; k++) {
        char name[2 * GENAI_MAX_NAME];
        abi_layer_name(name, sizeof name, su[k], i);
        RETURN_ERROR_IF(!is_output(g, name), d, PH_ERR_INTERNAL,
                        "genai_config names output \"%s\", which the graph does not have", name);
        n_out++;
      }
    } else {
      FORWARD_IF_ERROR(
          check_layer_names(g, i, gc->past_key_names, gc->present_key_names, &n_in, &n_out, d));
      if (key_only && c->layer_kind[i] == PH_LAYER_MLA) continue;
      FORWARD_IF_ERROR(
          check_layer_names(g, i, gc->past_value_names, gc->present_value_names, &n_in, &n_out, d));
    }
  }
  RETURN_ERROR_IF(n_in != g->n_inputs || n_out != g->n_outputs, d, PH_ERR_INTERNAL,
                  "graph has %d inputs and %d outputs, genai_config names %d and %d", g->n_inputs,
                  g->n_outputs, n_in, n_out);
  return PH_OK;
}

/* ---- the export ---------------------------------------------------------------------------- */

/* What the export builds: Qwen3.5/3.6/3.8 and Qwen3-Next (dense or MoE MLPs) and DeepSeek-V2/V3
 * (MLA, dense or DeepSeekMoE MLPs), either layout. The paged layout routes a Qwen3.5 hybrid to
 * SEPARATE PagedAttention and an eligible MLA model to LATENT (models/mla.h decides eligibility
 * from the geometry, in build_checked once the paged defaults are known). */
static ph_status check_family(const hf_config *c, diag *d) {
  RETURN_ERROR_IF(c->family != FAMILY_QWEN35 && c->family != FAMILY_QWEN3_NEXT &&
                      c->family != FAMILY_DEEPSEEK,
                  d, PH_ERR_UNSUPPORTED,
                  "model_type %s (family %s): export builds Qwen3.5/3.6/3.8, Qwen3-Next and "
                  "DeepSeek-V2/V3 only",
                  c->model_type, model_family_name(c->family));
  return PH_OK;
}

static ph_status check_options(const hf_config *c, const export_options *o, diag *d) {
  RETURN_ERROR_IF(o->dtype != PH_DTYPE_INVALID && o->dtype != PH_DTYPE_F32 &&
                      o->dtype != PH_DTYPE_F16 && o->dtype != PH_DTYPE_BF16,
                  d, PH_ERR_UNSUPPORTED, "export weight dtype %s: expected f32, f16 or bf16",
                  ph_dtype_name(o->dtype));
  FORWARD_IF_ERROR(check_family(c, d));
  RETURN_ERROR_IF(o->max_context < 0, d, PH_ERR_INVALID_ARGUMENT, "max_context %lld is negative",
                  (long long)o->max_context);
  RETURN_ERROR_IF(c->max_position_embeddings > 0 && o->max_context > c->max_position_embeddings, d,
                  PH_ERR_INVALID_ARGUMENT,
                  "max_context %lld is beyond the model's max_position_embeddings %lld",
                  (long long)o->max_context, (long long)c->max_position_embeddings);
  RETURN_ERROR_IF(o->layout != EXPORT_LAYOUT_DENSE && o->layout != EXPORT_LAYOUT_PAGED, d,
                  PH_ERR_INVALID_ARGUMENT, "unknown export layout %d", (int)o->layout);
  RETURN_ERROR_IF(o->rotary != EXPORT_ROTARY_DEFAULT && o->rotary != EXPORT_ROTARY_FUSED &&
                      o->rotary != EXPORT_ROTARY_OPS,
                  d, PH_ERR_INVALID_ARGUMENT, "unknown rotary form %d", (int)o->rotary);
  RETURN_ERROR_IF(o->linear_op != EXPORT_LINEAR_ATTENTION && o->linear_op != EXPORT_GATED_DELTA_NET,
                  d, PH_ERR_INVALID_ARGUMENT, "unknown linear_attn_op %d", (int)o->linear_op);
  RETURN_ERROR_IF(o->state_update_capacity < 0 || o->state_update_capacity > ABI_SU_MAX_CAPACITY, d,
                  PH_ERR_INVALID_ARGUMENT, "state_update_capacity %d: expected 0..%d",
                  (int)o->state_update_capacity, ABI_SU_MAX_CAPACITY);
  if (o->layout == EXPORT_LAYOUT_DENSE) {
    RETURN_ERROR_IF(o->state_update_capacity > 0, d, PH_ERR_INVALID_ARGUMENT,
                    "state_update_capacity %d requires the paged layout",
                    (int)o->state_update_capacity);
    /* the paged layout's options mean nothing to the dense graph: refuse rather than ignore */
    RETURN_ERROR_IF(o->block_size || o->prune_lm_head || o->io_dtype != PH_DTYPE_INVALID, d,
                    PH_ERR_INVALID_ARGUMENT, "%s applies to the paged layout only",
                    o->block_size      ? "block size"
                    : o->prune_lm_head ? "prune_lm_head"
                                       : "io dtype");
    return PH_OK;
  }
  RETURN_ERROR_IF(o->target != EXPORT_TARGET_CUDA && o->target != EXPORT_TARGET_CPU, d,
                  PH_ERR_INVALID_ARGUMENT, "unknown export target %d", (int)o->target);
  const int64_t K = o->block_size;
  RETURN_ERROR_IF(K < 0 || (K && (K < 16 || (K & (K - 1)))), d, PH_ERR_INVALID_ARGUMENT,
                  "block size %lld: must be a power of two >= 16", (long long)K);
  const ph_dtype io = o->io_dtype;
  RETURN_ERROR_IF(
      io != PH_DTYPE_INVALID && io != PH_DTYPE_F32 && io != PH_DTYPE_F16 && io != PH_DTYPE_BF16, d,
      PH_ERR_UNSUPPORTED, "io dtype %s: expected f32, f16 or bf16", ph_dtype_name(io));
  if (o->target == EXPORT_TARGET_CUDA) {
    /* abi §8.4: GenAI's CUDA PagedAttention takes fp16/bf16 and pages of a multiple of 256 */
    RETURN_ERROR_IF(K && K % 256, d, PH_ERR_INVALID_ARGUMENT,
                    "block size %lld: ONNX Runtime GenAI on CUDA needs a multiple of 256 "
                    "(use --target cpu for smaller pages)",
                    (long long)K);
    RETURN_ERROR_IF(io == PH_DTYPE_F32, d, PH_ERR_UNSUPPORTED,
                    "io dtype f32: ONNX Runtime's CUDA PagedAttention takes f16 or bf16 only "
                    "(use --target cpu for f32 activations)");
  }
  RETURN_ERROR_IF(o->max_batch_size < 1 || o->max_batch_size > 256, d, PH_ERR_INVALID_ARGUMENT,
                  "max_batch_size %lld: expected 1..256", (long long)o->max_batch_size);
  RETURN_ERROR_IF(o->num_blocks < 0, d, PH_ERR_INVALID_ARGUMENT, "num_blocks %lld is negative",
                  (long long)o->num_blocks);
  RETURN_ERROR_IF(!o->num_blocks &&
                      !(o->gpu_utilization_factor > 0 && o->gpu_utilization_factor <= 1),
                  d, PH_ERR_INVALID_ARGUMENT, "gpu_utilization_factor %g: expected (0, 1]",
                  o->gpu_utilization_factor);
  RETURN_ERROR_IF(o->max_scheduled_tokens < 1, d, PH_ERR_INVALID_ARGUMENT,
                  "max_scheduled_tokens %lld: expected >= 1", (long long)o->max_scheduled_tokens);
  return PH_OK;
}

/* The paged export's io dtype and block size once defaults are applied: CUDA f16 (the one half
 * dtype every kernel of the graph is registered for on CUDA, abi §2.6 / §3; bf16 only when asked)
 * and 256-token pages; CPU f32 and 16. */
static void paged_defaults(const export_options *o, ph_dtype *io, int64_t *K) {
  *io = o->io_dtype;
  if (*io == PH_DTYPE_INVALID) *io = o->target == EXPORT_TARGET_CPU ? PH_DTYPE_F32 : PH_DTYPE_F16;
  *K = o->block_size ? o->block_size : o->target == EXPORT_TARGET_CPU ? 16 : 256;
}

/* What any export refuses before building: no config, no weights (unless config_only), options
 * that are wrong for this model. */
static ph_status check_inputs(const ph_model *m, const export_options *opt, diag *d) {
  const hf_config *c = model_config(m);
  RETURN_ERROR_IF(!c, d, PH_ERR_INVALID_ARGUMENT, "the model has no parsed configuration");
  RETURN_ERROR_IF(!model_weights_of(m) && !opt->config_only, d, PH_ERR_INVALID_ARGUMENT,
                  "the model was opened without weights; export needs them (or config_only)");
  return check_options(c, opt, d);
}

/* export_build once check_inputs has passed. */
static ph_status build_checked(const ph_model *m, const export_options *o, export_built *out,
                               diag *d) {
  memset(out, 0, sizeof *out);
  const export_options opt = *o;
  const hf_config *c = model_config(m);
  const model_weights *w = model_weights_of(m);
  model_options qo = model_options_default();
  qo.max_context = opt.max_context;
  qo.weight_dtype = opt.dtype;
  qo.quant = opt.quant;
  /* RoPE: plain ops for CUDA, whose MRotaryEmbedding kernel we cannot check here; the fused op
   * where our runtime (or ONNX Runtime's CPU EP, for the dense graph) runs it */
  const int cuda = opt.layout == EXPORT_LAYOUT_PAGED && opt.target == EXPORT_TARGET_CUDA;
  qo.rotary = opt.rotary == EXPORT_ROTARY_OPS || (opt.rotary == EXPORT_ROTARY_DEFAULT && cuda)
                  ? MODEL_ROTARY_OPS
                  : MODEL_ROTARY_FUSED;
  out->rotary = qo.rotary == MODEL_ROTARY_OPS ? EXPORT_ROTARY_OPS : EXPORT_ROTARY_FUSED;
  qo.linear_op =
      opt.linear_op == EXPORT_GATED_DELTA_NET ? MODEL_GATED_DELTA_NET : MODEL_LINEAR_ATTENTION;
  if (opt.layout == EXPORT_LAYOUT_PAGED) {
    qo.paged = 1;
    qo.state_update_capacity = opt.state_update_capacity;
    qo.prune_lm_head = opt.prune_lm_head;
    paged_defaults(&opt, &qo.io_dtype, &out->block_size);
    qo.block_size = out->block_size;
    /* a half-precision graph stores its weights in that dtype unless told otherwise: no Cast
     * per projection, the weights' bytes halve (what GenAI's builder does) */
    if (opt.dtype == PH_DTYPE_INVALID && qo.io_dtype != PH_DTYPE_F32) qo.weight_dtype = qo.io_dtype;
  }
  out->io_dtype = qo.paged ? qo.io_dtype : PH_DTYPE_F32;
  out->state_update_capacity = model_state_update_capacity(c, &qo);
  /* config_only: the graph over predicted tensors (a zero mapping), never their bytes */
  if (opt.config_only) {
    FORWARD_IF_ERROR(placeholder_weights_create(c, &out->placeholders, d));
    w = placeholder_weights_get(out->placeholders);
  }
  ph_status s = model_build_graph(c, w, &qo, &out->g, d);
  if (s != PH_OK) export_built_free(out);
  return s;
}

void export_built_free(export_built *b) {
  if (!b) return;
  graph_free(b->g);
  placeholder_weights_free(b->placeholders);
  memset(b, 0, sizeof *b);
}

ph_status export_build(const ph_model *m, const export_options *o, export_built *out, diag *d) {
  memset(out, 0, sizeof *out);
  RETURN_ERROR_IF(!m, d, PH_ERR_INVALID_ARGUMENT, "export: NULL model");
  const export_options opt = o ? *o : export_options_default();
  FORWARD_IF_ERROR(check_inputs(m, &opt, d));
  return build_checked(m, &opt, out, d);
}

ph_status model_export(const ph_model *m, const char *out_dir, const export_options *o, diag *d) {
  RETURN_ERROR_IF(!m || !out_dir || !out_dir[0], d, PH_ERR_INVALID_ARGUMENT,
                  "model_export: NULL model or empty output directory");
  export_options opt = o ? *o : export_options_default();
  const hf_config *c = model_config(m);
  FORWARD_IF_ERROR(check_inputs(m, &opt, d));
  FORWARD_IF_ERROR(check_out_dir(out_dir, model_dir(m), opt.force, d));
  export_built built;
  FORWARD_IF_ERROR(build_checked(m, &opt, &built, d));
  graph *g = built.g;
  const int64_t K = built.block_size;
  ph_status s = PH_OK;
  genai_config gc;
  /* context_length is what the graph can serve: the rows of its rotary caches */
  int cos = graph_find_value(g, ABI_COS_CACHE);
  if (cos < 0 || g->values[cos].type.rank != 2) {
    s = diag_set(d, PH_ERR_INTERNAL, "the dense graph has no 2-D cos_cache initializer");
    goto done;
  }
  if (opt.layout == EXPORT_LAYOUT_PAGED) {
    gc = genai_config_paged(c, g->values[cos].type.dims[0], K, opt.max_batch_size,
                            opt.num_blocks ? 0.0 : opt.gpu_utilization_factor, opt.num_blocks,
                            opt.max_scheduled_tokens);
    /* CUDA provider options only in a package made for CUDA: a CPU-target package names none */
    gc.cuda_graph_disabled = opt.target == EXPORT_TARGET_CUDA;
    genai_config_set_state_updates(&gc, built.state_update_capacity);
  } else {
    gc = genai_config_dense(c, g->values[cos].type.dims[0]);
  }
  if ((s = genai_config_token_ids(&gc, model_dir(m), d)) != PH_OK) {
    diag_prefix(d, "%s", model_dir(m));
    goto done;
  }
  if ((s = check_genai_names(g, &gc, c, d)) != PH_OK) goto done;
  if ((s = path_mkdirs(out_dir, d)) != PH_OK) goto done;
  if ((s = check_package_files(out_dir, d)) != PH_OK) goto done;
  s = opt.config_only ? onnx_write_model_structure(g, out_dir, EXPORT_PRODUCER, d)
                      : onnx_write_model_progress(g, out_dir, EXPORT_PRODUCER, &opt.progress, d);
  if (s != PH_OK) goto done;
  if ((s = genai_config_write(&gc, out_dir, d)) != PH_OK) goto done;
  if ((s = inference_metadata_write(g, &gc, out_dir, d)) != PH_OK) goto done;
  if ((s = copy_tokenizer_files(model_dir(m), out_dir, d)) != PH_OK) goto done;
  if (opt.force) s = remove_stale_files(model_dir(m), out_dir, opt.config_only, d);
done:
  export_built_free(&built);
  return s;
}
