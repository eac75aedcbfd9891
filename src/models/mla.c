/* mla — LATENT eligibility, softmax scale and RoPE frequencies. See mla.h. */
#include "models/mla.h"

#include <math.h>
#include <stddef.h>

#include "tensor/dtype.h"

#define PI 3.14159265358979323846

/* ---- eligibility ---------------------------------------------------------------------------- */

/* Not MLA at all: a non-MLA family, or an MLA size that is absent (a hand-built config). */
static ph_status check_is_mla(const hf_config *c, diag *d) {
  RETURN_ERROR_IF(c->family != FAMILY_DEEPSEEK, d, PH_ERR_UNSUPPORTED,
                  "LATENT PagedAttention needs an MLA config: model_type \"%s\" has no "
                  "kv_lora_rank (multi-head latent attention: deepseek_v2, deepseek_v3, "
                  "glm_moe_dsa, glm4_moe_lite)",
                  c->model_type);
  const struct {
    const char *name;
    int64_t v;
  } sizes[] = {{"kv_lora_rank", c->mla.kv_lora_rank},
               {"qk_nope_head_dim", c->mla.qk_nope_head_dim},
               {"qk_rope_head_dim", c->mla.qk_rope_head_dim},
               {"v_head_dim", c->mla.v_head_dim}};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    RETURN_ERROR_IF(sizes[i].v <= 0, d, PH_ERR_UNSUPPORTED,
                    "LATENT PagedAttention needs an MLA config: %s = %lld (must be > 0)",
                    sizes[i].name, (long long)sizes[i].v);
  return PH_OK;
}

/* Features the operator has no input or attribute for. */
static ph_status check_features(const hf_config *c, unsigned flags, diag *d) {
  const int64_t topk = c->mla_feat.index_topk, nh = c->mla_feat.index_n_heads,
                hd = c->mla_feat.index_head_dim;
  RETURN_ERROR_IF(c->mla_feat.use_dsa && (topk > 0 || nh > 0 || hd > 0), d, PH_ERR_UNSUPPORTED,
                  "LATENT PagedAttention cannot express DeepSeek Sparse Attention: use_dsa = true "
                  "with an indexer (index_topk = %lld, index_n_heads = %lld, index_head_dim = "
                  "%lld) selects keys per query, and the operator has no sparse-index input "
                  "(use_dsa = false exports full attention)",
                  (long long)topk, (long long)nh, (long long)hd);
  RETURN_ERROR_IF(c->mla_feat.n_compress_ratios > 0, d, PH_ERR_UNSUPPORTED,
                  "LATENT PagedAttention cannot express DeepSeek-V4 compressed sparse attention "
                  "(CSA/HCA): compress_ratios has %lld entries",
                  (long long)c->mla_feat.n_compress_ratios);
  RETURN_ERROR_IF(c->mla_feat.o_lora_rank > 0, d, PH_ERR_UNSUPPORTED,
                  "LATENT PagedAttention cannot express DeepSeek-V4's low-rank output projection: "
                  "o_lora_rank = %lld",
                  (long long)c->mla_feat.o_lora_rank);
  RETURN_ERROR_IF(c->mla_feat.o_groups > 1, d, PH_ERR_UNSUPPORTED,
                  "LATENT PagedAttention cannot express DeepSeek-V4's grouped output projection: "
                  "o_groups = %lld",
                  (long long)c->mla_feat.o_groups);
  RETURN_ERROR_IF(c->mla_feat.hc_mult > 1, d, PH_ERR_UNSUPPORTED,
                  "LATENT PagedAttention cannot express hyper-connections: hc_mult = %lld",
                  (long long)c->mla_feat.hc_mult);
  RETURN_ERROR_IF(flags & MLA_CHECK_MTP, d, PH_ERR_UNSUPPORTED,
                  "LATENT PagedAttention does not serve multi-token prediction "
                  "(num_nextn_predict_layers = %lld): the MTP layers are not exported",
                  (long long)c->mla_feat.num_nextn_predict_layers);
  RETURN_ERROR_IF(c->mla_feat.qk_norm, d, PH_ERR_UNSUPPORTED,
                  "LATENT PagedAttention rejects q/k norm: %s = true", c->mla_feat.qk_norm_key);
  RETURN_ERROR_IF(c->mla_feat.sliding_window > 0, d, PH_ERR_UNSUPPORTED,
                  "LATENT PagedAttention does not implement windowed attention: sliding_window = "
                  "%lld",
                  (long long)c->mla_feat.sliding_window);
  RETURN_ERROR_IF(c->mla_feat.head_sink, d, PH_ERR_UNSUPPORTED,
                  "LATENT PagedAttention rejects the head_sink input: attention_sink / head_sink "
                  "= true");
  return PH_OK;
}

static ph_status check_cache_dtype(ph_dtype dt, unsigned flags, diag *d) {
  if (dt == PH_DTYPE_F16 || dt == PH_DTYPE_BF16) return PH_OK;
  if (dt == PH_DTYPE_F32) {
    RETURN_ERROR_IF(!(flags & MLA_CHECK_CPU), d, PH_ERR_UNSUPPORTED,
                    "LATENT PagedAttention cache dtype float32: the ONNX Runtime schema allows "
                    "only float16 and bfloat16 (float32 runs on the CPU executor only)");
    return PH_OK;
  }
  RETURN_ERROR_IF(dt == PH_DTYPE_I8 || dt == PH_DTYPE_U8 || dt == PH_DTYPE_F8E4M3, d,
                  PH_ERR_UNSUPPORTED,
                  "LATENT PagedAttention rejects a quantized cache: cache dtype %s (float16 or "
                  "bfloat16)",
                  ph_dtype_name(dt));
  return diag_set(d, PH_ERR_UNSUPPORTED,
                  "LATENT PagedAttention cache dtype %s: expected float16 or bfloat16",
                  ph_dtype_name(dt));
}

/* The operator's geometry gates (abi.md §9.1, the final %16 form). */
static ph_status check_geometry(const hf_config *c, int64_t block_size, diag *d) {
  const int64_t l = c->mla.kv_lora_rank, r = c->mla.qk_rope_head_dim;
  RETURN_ERROR_IF(l % 16 != 0, d, PH_ERR_UNSUPPORTED,
                  "LATENT PagedAttention kv_lora_rank = %lld (v_head_size and rotary_offset) is "
                  "not a multiple of 16",
                  (long long)l);
  RETURN_ERROR_IF(r % 16 != 0, d, PH_ERR_UNSUPPORTED,
                  "LATENT PagedAttention rotary dim qk_rope_head_dim = %lld is not a multiple of "
                  "16, so neither is head size kv_lora_rank + qk_rope_head_dim = %lld",
                  (long long)r, (long long)(l + r));
  /* Implied by the two gates above: head size l + r % 16 == 0, rotary_offset = l % 8 == 0,
   * and 1 <= v_head_size = l <= l + r = head_size (l > 0 and r >= 0, check_is_mla). */
  RETURN_ERROR_IF(block_size < 16 || (block_size & (block_size - 1)) != 0, d, PH_ERR_UNSUPPORTED,
                  "LATENT PagedAttention block_size = %lld: must be a power of two >= 16",
                  (long long)block_size);
  return PH_OK;
}

ph_status mla_latent_check(const hf_config *c, int64_t block_size, ph_dtype cache_dtype,
                           unsigned flags, diag *d) {
  RETURN_ERROR_IF(!c, d, PH_ERR_INVALID_ARGUMENT, "mla_latent_check: NULL config");
  FORWARD_IF_ERROR(check_is_mla(c, d));
  FORWARD_IF_ERROR(check_features(c, flags, d));
  FORWARD_IF_ERROR(check_cache_dtype(cache_dtype, flags, d));
  return check_geometry(c, block_size, d);
}

/* ---- scale and frequencies ------------------------------------------------------------------ */

double mla_softmax_scale(const hf_config *c) {
  return c && c->family == FAMILY_DEEPSEEK ? c->mla.softmax_scale : 0.0;
}

/* YaRN's magnitude correction: 0.1 m ln(s) + 1 for s > 1, else 1. */
static double yarn_mscale(double s, double m) { return s <= 1.0 ? 1.0 : 0.1 * m * log(s) + 1.0; }

/* The dimension index whose wavelength completes n rotations over orig positions. */
static double correction_dim(double n, double dim, double theta, double orig) {
  return dim * log(orig / (n * 2.0 * PI)) / (2.0 * log(theta));
}

void mla_rope_inv_freq(const hf_config *c, double *inv_freq, double *attention_factor) {
  if (!c) return;
  const int64_t dim = c->rope.rotary_dim, half = dim / 2;
  const double theta = c->rope.theta, factor = c->rope.factor;
  double af = 1.0;
  int64_t orig = c->rope.original_max_position_embeddings;
  if (orig <= 0) orig = c->max_position_embeddings;
  const int yarn = c->rope.scaling == ROPE_SCALING_YARN;
  double low = 0, high = 0;
  if (yarn) {
    if (c->rope.attention_factor > 0)
      af = c->rope.attention_factor;
    else if (c->rope.mscale != 0 && c->rope.mscale_all_dim != 0)
      af = yarn_mscale(factor, c->rope.mscale) / yarn_mscale(factor, c->rope.mscale_all_dim);
    else
      af = yarn_mscale(factor, 1.0);
    if (orig > 0) {
      /* HF reads `beta_fast or 32`, `beta_slow or 1`: a zero means the default. */
      const double bf = c->rope.beta_fast > 0 ? c->rope.beta_fast : 32.0;
      const double bs = c->rope.beta_slow > 0 ? c->rope.beta_slow : 1.0;
      low = correction_dim(bf, (double)dim, theta, (double)orig);
      high = correction_dim(bs, (double)dim, theta, (double)orig);
      if (c->rope.truncate) low = floor(low), high = ceil(high);
      low = fmax(low, 0.0);
      high = fmin(high, (double)(dim - 1));
      if (low == high) high += 0.001; /* HF's guard against a zero-width ramp */
    }
  }
  if (attention_factor) *attention_factor = af;
  if (!inv_freq) return;
  for (int64_t j = 0; j < half; j++) {
    const double extrap = pow(theta, -2.0 * (double)j / (double)dim);
    double f = extrap;
    if (c->rope.scaling == ROPE_SCALING_LINEAR) {
      f = extrap / factor;
    } else if (yarn && orig > 0) {
      double ramp = ((double)j - low) / (high - low);
      ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
      const double e = 1.0 - ramp; /* 1: keep the original frequency (extrapolate) */
      f = extrap / factor * (1.0 - e) + extrap * e;
    }
    inv_freq[j] = f;
  }
}
