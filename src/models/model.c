/* model — ph_model_open and friends: config.json → hf_config, safetensors → bound weights.
 * See include/pagedhybrid.h for the contract and models/weights.h for the name tables. */
#include "models/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "graph/prepare.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

struct ph_model {
  diag err;
  char *dir;
  int has_config;
  hf_config config;
  st_set *tensors;       /* NULL without weights */
  model_weights weights; /* bound when tensors != NULL */
  int64_t predicted_parameters;
  int64_t predicted_bytes;
  weight_store *store; /* the copies its sessions' graphs share (graph/prepare.h) */
};

ph_model_params ph_model_params_default(void) {
  ph_model_params p;
  memset(&p, 0, sizeof p);
  p.load_weights = 1;
  return p;
}

static ph_status predict_size(ph_model *m) {
  expected_tensor *exp = NULL;
  size_t n = 0;
  FORWARD_IF_ERROR(weights_expected(&m->config, weights_default_layout(&m->config), EXPERTS_FUSED,
                                    &exp, &n, &m->err));
  int64_t params = 0;
  for (size_t i = 0; i < n; i++) params += shape_numel(&exp[i].shape);
  free(exp);
  m->predicted_parameters = params;
  m->predicted_bytes = params * (int64_t)dtype_size(m->config.dtype);
  return PH_OK;
}

ph_status ph_model_open(const char *dir, const ph_model_params *params, ph_model **out) {
  if (!out) return PH_ERR_INVALID_ARGUMENT;
  *out = NULL;
  ph_model_params p = params ? *params : ph_model_params_default();
  ph_model *m = calloc(1, sizeof *m);
  if (!m) return PH_ERR_NO_MEMORY;
  *out = m;
  if (!dir) return diag_set(&m->err, PH_ERR_INVALID_ARGUMENT, "model directory is NULL");
  m->dir = strdup(dir);
  if (!m->dir) return diag_set(&m->err, PH_ERR_NO_MEMORY, "out of memory");

  FORWARD_IF_ERROR(hf_config_load(dir, &m->config, &m->err));
  m->has_config = 1;
  FORWARD_IF_ERROR(predict_size(m));
  if (!p.load_weights) return PH_OK;

  ph_status s = st_open_dir(dir, &m->tensors, &m->err);
  if (s != PH_OK) return s;
  s = weights_bind(&m->config, m->tensors, &m->weights, &m->err);
  if (s != PH_OK) return diag_prefix(&m->err, "%s", dir);
  FORWARD_IF_ERROR(weight_store_create(&m->store, &m->err));
  LOG_INFO("opened %s: %s, %d layers, %lld parameters", dir, m->config.model_type,
           (int)m->config.n_layers, (long long)m->weights.n_parameters);
  return PH_OK;
}

void ph_model_free(ph_model *m) {
  if (!m) return;
  weights_free(&m->weights);
  weight_store_free(m->store);
  st_close(m->tensors);
  free(m->dir);
  free(m);
}

const char *ph_model_error(const ph_model *m) { return m ? m->err.msg : "model is NULL"; }

ph_status ph_model_get_info(const ph_model *m, ph_model_info *out) {
  if (!m || !out) return PH_ERR_INVALID_ARGUMENT;
  if (!m->has_config) return m->err.status != PH_OK ? m->err.status : PH_ERR_INVALID_ARGUMENT;
  const hf_config *c = &m->config;
  memset(out, 0, sizeof *out);
  out->model_type = c->model_type;
  out->text_model_type = c->text_model_type;
  out->architecture = c->architecture;
  out->dtype = c->dtype;
  out->n_layers = (int)c->n_layers;
  out->n_full_attention_layers = (int)c->geom.n_full;
  out->n_linear_attention_layers = (int)c->geom.n_linear;
  out->hidden_size = c->hidden_size;
  out->vocab_size = c->vocab_size;
  out->weights_loaded = m->tensors != NULL;
  out->parameters = m->tensors ? m->weights.n_parameters : m->predicted_parameters;
  out->weight_bytes = m->tensors ? m->weights.n_bytes : m->predicted_bytes;
  return PH_OK;
}

ph_status ph_model_layer_kind(const ph_model *m, int layer, ph_layer_kind *out) {
  if (!m || !out || !m->has_config) return PH_ERR_INVALID_ARGUMENT;
  if (layer < 0 || layer >= m->config.n_layers) return PH_ERR_INVALID_ARGUMENT;
  *out = (ph_layer_kind)m->config.layer_kind[layer];
  return PH_OK;
}

int64_t ph_model_fixed_state_bytes(const ph_model *m, ph_dtype conv_dtype) {
  return m && m->has_config ? hf_config_fixed_state_bytes(&m->config, conv_dtype) : -1;
}

int64_t ph_model_kv_bytes_per_token(const ph_model *m, ph_dtype kv_dtype) {
  return m && m->has_config ? hf_config_kv_bytes_per_token(&m->config, kv_dtype) : -1;
}

const hf_config *model_config(const ph_model *m) { return m->has_config ? &m->config : NULL; }
const model_weights *model_weights_of(const ph_model *m) { return m->tensors ? &m->weights : NULL; }
const st_set *model_tensors(const ph_model *m) { return m->tensors; }
weight_store *model_weight_store(const ph_model *m) { return m->store; }
const char *model_dir(const ph_model *m) { return m->dir; }

static void scan_one(nonfinite_report *r, const st_tensor *t) {
  if (t) nonfinite_scan(r, t->name, t->dtype, &t->shape, t->data);
}

ph_status model_check_finite(const ph_model *m, nonfinite_report *r, diag *d) {
  nonfinite_report_init(r);
  RETURN_ERROR_IF(!m || !m->tensors, d, PH_ERR_INVALID_ARGUMENT,
                  "the model was opened without weights: nothing to check");
  const model_weights *w = &m->weights;
  for (int k = 0; k < W_ROLE_COUNT; k++) scan_one(r, w->global[k]);
  for (size_t i = 0; w->layer && i < (size_t)w->n_layers * W_ROLE_COUNT; i++)
    scan_one(r, w->layer[i]);
  for (size_t i = 0; w->expert && i < (size_t)w->n_layers * 3 * (size_t)w->n_experts; i++)
    scan_one(r, w->expert[i]);
  FORWARD_IF_ERROR(nonfinite_status(r, d));
  return PH_OK;
}

typedef struct quant_acc {
  model_quant_row *rows;
  size_t n, cap;
  int block, symmetric;
} quant_acc;

static ph_status quant_one(quant_acc *a, const st_tensor *t, diag *d) {
  if (!t || !t->data || t->shape.n_dims < 2) return PH_OK;
  int64_t k = t->shape.dims[t->shape.n_dims - 1], n = 1;
  for (int i = 0; i + 1 < t->shape.n_dims; i++) n *= t->shape.dims[i];
  if (a->n == a->cap) {
    size_t cap = a->cap ? 2 * a->cap : 64;
    model_quant_row *r = realloc(a->rows, cap * sizeof *r);
    RETURN_ERROR_IF(!r, d, PH_ERR_NO_MEMORY, "quant report: %zu rows", cap);
    a->rows = r;
    a->cap = cap;
  }
  model_quant_row *row = &a->rows[a->n];
  memset(row, 0, sizeof *row);
  snprintf(row->name, sizeof row->name, "%s", t->name);
  row->n = n;
  row->k = k;
  quant_params p = {8, a->block, a->symmetric, PH_DTYPE_F32};
  FORWARD_IF_ERROR(quant_rms_rel_error(&p, t->data, t->dtype, n, k, t->name, &row->rel8, d));
  p.bits = 4;
  FORWARD_IF_ERROR(quant_rms_rel_error(&p, t->data, t->dtype, n, k, t->name, &row->rel4, d));
  a->n++;
  return PH_OK;
}

ph_status model_quant_report(const ph_model *m, int block, int symmetric, model_quant_row **rows,
                             size_t *n_rows, diag *d) {
  *rows = NULL;
  *n_rows = 0;
  RETURN_ERROR_IF(!m || !m->tensors, d, PH_ERR_INVALID_ARGUMENT,
                  "the model was opened without weights: nothing to quantize");
  const model_weights *w = &m->weights;
  quant_acc a = {NULL, 0, 0, block, symmetric};
  ph_status s = PH_OK;
  for (int r = 0; r < W_ROLE_COUNT && s == PH_OK; r++)
    if (weight_role_quantizable((weight_role)r)) s = quant_one(&a, w->global[r], d);
  for (size_t i = 0; s == PH_OK && w->layer && i < (size_t)w->n_layers * W_ROLE_COUNT; i++)
    if (weight_role_quantizable((weight_role)(i % W_ROLE_COUNT))) s = quant_one(&a, w->layer[i], d);
  for (size_t i = 0; s == PH_OK && w->expert && i < (size_t)w->n_layers * 3 * (size_t)w->n_experts;
       i++)
    s = quant_one(&a, w->expert[i], d);
  for (int r = 0; r < W_ROLE_COUNT && s == PH_OK; r++)
    if (weight_role_quantizable((weight_role)r)) s = quant_one(&a, w->mtp_global[r], d);
  for (size_t i = 0; s == PH_OK && w->mtp_layer && i < (size_t)w->n_mtp_layers * W_ROLE_COUNT; i++)
    if (weight_role_quantizable((weight_role)(i % W_ROLE_COUNT)))
      s = quant_one(&a, w->mtp_layer[i], d);
  if (s != PH_OK) {
    free(a.rows);
    return s;
  }
  *rows = a.rows;
  *n_rows = a.n;
  return PH_OK;
}
