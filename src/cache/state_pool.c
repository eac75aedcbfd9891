/* state_pool — slot buffers per linear layer (one or two banks), a used-bit and a published-bank
 * bit per slot, and one active binding. */
#include "cache/state_pool.h"

#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "tensor/dtype.h"

struct state_pool {
  state_geometry g;             /* g.linear_layers -> layers */
  int32_t *layers;              /* [n_linear] model layer indices */
  uint8_t **conv;               /* [n_linear] each [banks][max_slots, conv_dim, K-1] io dtype */
  float **rec;                  /* [n_linear] each [banks][max_slots, Hv, Dv, Dk] f32 */
  int32_t banks;                /* 1 or 2 (g.banks 0 reads as 1) */
  int64_t conv_row;             /* bytes of one slot's conv rows in one layer, one bank */
  int64_t rec_row;              /* bytes of one slot's recurrent rows in one layer, one bank */
  size_t conv_bank, rec_bank;   /* bytes of one bank of a layer's conv / rec mapping (aligned) */
  size_t conv_bytes, rec_bytes; /* of each layer's conv / rec mapping (every bank) */
  uint8_t *used;                /* [max_slots] 1 = allocated */
  uint8_t *pub;                 /* [max_slots] the slot's published bank (0 with one bank) */
  int32_t n_used;
  /* active binding */
  int bound; /* past views: 0 none, 1 slice of the published bank, 2 gathered into staging */
  int out;   /* present views: 0 = the past views, 1 = the other bank's slice, 2 = out staging */
  int32_t batch;
  int32_t first;        /* slice: first slot */
  int32_t *slots;       /* [max_slots] row b is slot slots[b] */
  uint8_t *spec;        /* [max_slots] row b is speculative (present -> the inactive bank) */
  uint8_t **conv_stage; /* [n_linear] each [stage_rows, conv_dim, K-1], lazily grown */
  float **rec_stage;    /* [n_linear] each [stage_rows, Hv, Dv, Dk] */
  int32_t stage_rows;
  uint8_t **conv_out_stage; /* [n_linear] present staging of a mixed slice binding, same shape */
  float **rec_out_stage;
  int32_t out_stage_rows;
  uint64_t bytes_moved;
};

static int dtype_ok(ph_dtype dt) {
  return dt == PH_DTYPE_F32 || dt == PH_DTYPE_F16 || dt == PH_DTYPE_BF16;
}

static int64_t round_up(int64_t n) {
  return (n + STATE_POOL_ALIGN - 1) / STATE_POOL_ALIGN * STATE_POOL_ALIGN;
}

/* Checks g; fills the per-layer per-slot row bytes. */
static ph_status check_geometry(const state_geometry *g, int64_t *conv_row, int64_t *rec_row,
                                diag *d) {
  RETURN_ERROR_IF(!g, d, PH_ERR_INVALID_ARGUMENT, "state geometry is NULL");
  RETURN_ERROR_IF(g->n_linear < 0 || (g->n_linear > 0 && !g->linear_layers), d,
                  PH_ERR_INVALID_ARGUMENT, "state geometry: n_linear %d with linear_layers %s",
                  (int)g->n_linear, g->linear_layers ? "set" : "NULL");
  for (int32_t i = 0; i < g->n_linear; i++)
    RETURN_ERROR_IF(g->linear_layers[i] < 0 ||
                        (i > 0 && g->linear_layers[i] <= g->linear_layers[i - 1]),
                    d, PH_ERR_INVALID_ARGUMENT,
                    "state geometry: linear_layers[%d] = %d is negative or not ascending", (int)i,
                    (int)g->linear_layers[i]);
  RETURN_ERROR_IF(g->conv_dim < 1, d, PH_ERR_INVALID_ARGUMENT, "state geometry: conv_dim %d",
                  (int)g->conv_dim);
  RETURN_ERROR_IF(g->conv_kernel < 2, d, PH_ERR_INVALID_ARGUMENT,
                  "state geometry: conv_kernel %d (must be >= 2)", (int)g->conv_kernel);
  RETURN_ERROR_IF(g->n_v_heads < 1 || g->head_v < 1 || g->head_k < 1, d, PH_ERR_INVALID_ARGUMENT,
                  "state geometry: Hv %d, Dv %d, Dk %d", (int)g->n_v_heads, (int)g->head_v,
                  (int)g->head_k);
  RETURN_ERROR_IF(!dtype_ok(g->io_dtype), d, PH_ERR_INVALID_ARGUMENT,
                  "state geometry: io dtype %d is not f32, f16 or bf16", (int)g->io_dtype);
  RETURN_ERROR_IF(g->max_slots < (g->n_linear > 0 ? 1 : 0), d, PH_ERR_INVALID_ARGUMENT,
                  "state geometry: max_slots %d (>= 1 with linear layers, >= 0 without)",
                  (int)g->max_slots);
  RETURN_ERROR_IF(g->banks < 0 || g->banks > 2, d, PH_ERR_INVALID_ARGUMENT,
                  "state geometry: banks %d (0 or 1: single bank, 2: double banked)",
                  (int)g->banks);
  /* one slot's rows (slot counts do not change a row's size) */
  int64_t cdims[3] = {1, g->conv_dim, g->conv_kernel - 1};
  int64_t rdims[4] = {1, g->n_v_heads, g->head_v, g->head_k};
  shape cs = shape_make(3, cdims), rs = shape_make(4, rdims);
  int64_t cb = shape_bytes(&cs, g->io_dtype), rb = shape_bytes(&rs, PH_DTYPE_F32);
  RETURN_ERROR_IF(cb < 0 || rb < 0 ||
                      (g->max_slots > 0 &&
                       (cb > INT64_MAX / 4 / g->max_slots || rb > INT64_MAX / 4 / g->max_slots)),
                  d, PH_ERR_LIMIT, "state geometry: buffer size overflows");
  *conv_row = cb;
  *rec_row = rb;
  return PH_OK;
}

int64_t state_geometry_slot_bytes(const state_geometry *g) {
  int64_t c = 0, r = 0;
  if (check_geometry(g, &c, &r, NULL) != PH_OK) return -1;
  if (g->n_linear > 0 && c + r > INT64_MAX / g->n_linear) return -1;
  return (c + r) * g->n_linear;
}

int64_t state_geometry_slot_cost(const state_geometry *g) {
  const int64_t one = state_geometry_slot_bytes(g);
  if (one < 0) return -1;
  const int64_t banks = g->banks == 2 ? 2 : 1;
  return one > INT64_MAX / banks ? -1 : one * banks;
}

ph_status state_pool_create(const state_geometry *g, state_pool **out, diag *d) {
  RETURN_ERROR_IF(!out, d, PH_ERR_INVALID_ARGUMENT, "state_pool_create: out is NULL");
  *out = NULL;
  int64_t c = 0, r = 0;
  FORWARD_IF_ERROR(check_geometry(g, &c, &r, d));
  RETURN_ERROR_IF(state_geometry_slot_cost(g) < 0, d, PH_ERR_LIMIT,
                  "state_pool_create: total size overflows");
  state_pool *p = calloc(1, sizeof *p);
  if (!p) return diag_set(d, PH_ERR_NO_MEMORY, "state_pool_create: struct");
  size_t n = g->n_linear > 0 ? (size_t)g->n_linear : 1;
  p->g = *g;
  p->conv_row = c;
  p->rec_row = r;
  p->layers = calloc(n, sizeof *p->layers);
  p->conv = calloc(n, sizeof *p->conv);
  p->rec = calloc(n, sizeof *p->rec);
  p->conv_stage = calloc(n, sizeof *p->conv_stage);
  p->rec_stage = calloc(n, sizeof *p->rec_stage);
  p->conv_out_stage = calloc(n, sizeof *p->conv_out_stage);
  p->rec_out_stage = calloc(n, sizeof *p->rec_out_stage);
  size_t ns = g->max_slots > 0 ? (size_t)g->max_slots : 1;
  p->used = calloc(ns, 1);
  p->pub = calloc(ns, 1);
  p->spec = calloc(ns, 1);
  p->slots = calloc(ns, sizeof *p->slots);
  p->g.linear_layers = p->layers;
  if (!p->layers || !p->conv || !p->rec || !p->conv_stage || !p->rec_stage || !p->conv_out_stage ||
      !p->rec_out_stage || !p->used || !p->pub || !p->spec || !p->slots)
    goto fail_mem;
  if (g->n_linear > 0) memcpy(p->layers, g->linear_layers, (size_t)g->n_linear * sizeof *p->layers);
  p->banks = g->banks == 2 ? 2 : 1;
  p->conv_bank = (size_t)round_up(c * g->max_slots);
  p->rec_bank = (size_t)round_up(r * g->max_slots);
  size_t cb = p->conv_bank * (size_t)p->banks, rb = p->rec_bank * (size_t)p->banks;
  p->conv_bytes = cb;
  p->rec_bytes = rb;
  for (int32_t i = 0; i < g->n_linear; i++) {
    p->conv[i] = pages_alloc_zeroed(cb); /* zero, committed as slots are first used */
    p->rec[i] = pages_alloc_zeroed(rb);
    if (!p->conv[i] || !p->rec[i]) goto fail_mem;
  }
  *out = p;
  return PH_OK;
fail_mem:
  state_pool_free(p);
  return diag_set(d, PH_ERR_NO_MEMORY, "state_pool_create: %d slots x %lld bytes",
                  (int)g->max_slots, (long long)state_geometry_slot_cost(g));
}

static void free_stage_set(state_pool *p, uint8_t **conv, float **rec, int32_t *rows) {
  for (int32_t i = 0; i < p->g.n_linear; i++) {
    free(conv[i]);
    free(rec[i]);
    conv[i] = NULL;
    rec[i] = NULL;
  }
  *rows = 0;
}

static void free_stage(state_pool *p) {
  free_stage_set(p, p->conv_stage, p->rec_stage, &p->stage_rows);
  free_stage_set(p, p->conv_out_stage, p->rec_out_stage, &p->out_stage_rows);
}

void state_pool_free(state_pool *p) {
  if (!p) return;
  for (int32_t i = 0; i < p->g.n_linear; i++) {
    if (p->conv) pages_free(p->conv[i], p->conv_bytes);
    if (p->rec) pages_free(p->rec[i], p->rec_bytes);
  }
  if (p->conv_stage && p->rec_stage && p->conv_out_stage && p->rec_out_stage) free_stage(p);
  free(p->conv);
  free(p->rec);
  free(p->conv_stage);
  free(p->rec_stage);
  free(p->conv_out_stage);
  free(p->rec_out_stage);
  free(p->layers);
  free(p->used);
  free(p->pub);
  free(p->spec);
  free(p->slots);
  free(p);
}

int64_t state_pool_bytes(const state_pool *p) {
  return (int64_t)(p->conv_bytes + p->rec_bytes) * p->g.n_linear;
}
int64_t state_pool_slot_bytes(const state_pool *p) {
  return (p->conv_row + p->rec_row) * p->g.n_linear;
}
int64_t state_pool_slot_cost(const state_pool *p) { return state_pool_slot_bytes(p) * p->banks; }
int32_t state_pool_banks(const state_pool *p) { return p->banks; }
int32_t state_pool_max_slots(const state_pool *p) { return p->g.max_slots; }
int32_t state_pool_used_count(const state_pool *p) { return p->n_used; }
int state_pool_slot_in_use(const state_pool *p, int32_t slot) {
  return slot >= 0 && slot < p->g.max_slots && p->used[slot];
}
uint64_t state_pool_bytes_moved(const state_pool *p) { return p->bytes_moved; }
void state_pool_reset_bytes_moved(state_pool *p) { p->bytes_moved = 0; }

/* Rows of `slot` in bank `bank` of layer index i. */
static uint8_t *conv_bank_ptr(const state_pool *p, int32_t i, int bank, int32_t slot) {
  return p->conv[i] + (size_t)bank * p->conv_bank + (size_t)slot * (size_t)p->conv_row;
}
static uint8_t *rec_bank_ptr(const state_pool *p, int32_t i, int bank, int32_t slot) {
  return (uint8_t *)p->rec[i] + (size_t)bank * p->rec_bank + (size_t)slot * (size_t)p->rec_row;
}
/* The published rows of `slot`. */
static uint8_t *conv_row_ptr(const state_pool *p, int32_t i, int32_t slot) {
  return conv_bank_ptr(p, i, p->pub[slot], slot);
}
static uint8_t *rec_row_ptr(const state_pool *p, int32_t i, int32_t slot) {
  return rec_bank_ptr(p, i, p->pub[slot], slot);
}

ph_status state_pool_alloc(state_pool *p, int32_t *out_slot, diag *d) {
  for (int32_t s = 0; s < p->g.max_slots; s++) {
    if (p->used[s]) continue;
    /* the bank of the slot below, so a batch over consecutive slots stays one slice */
    p->pub[s] = s > 0 && p->used[s - 1] ? p->pub[s - 1] : 0;
    for (int32_t i = 0; i < p->g.n_linear; i++) {
      memset(conv_row_ptr(p, i, s), 0, (size_t)p->conv_row);
      memset(rec_row_ptr(p, i, s), 0, (size_t)p->rec_row);
    }
    p->used[s] = 1;
    p->n_used++;
    *out_slot = s;
    return PH_OK;
  }
  return diag_set(d, PH_ERR_LIMIT, "state_pool_alloc: all %d slots are in use",
                  (int)p->g.max_slots);
}

ph_status state_pool_release(state_pool *p, int32_t slot, diag *d) {
  RETURN_ERROR_IF(p->bound, d, PH_ERR_INVALID_ARGUMENT,
                  "state_pool_release: slot %d released while a step is bound", (int)slot);
  RETURN_ERROR_IF(!state_pool_slot_in_use(p, slot), d, PH_ERR_INVALID_ARGUMENT,
                  "state_pool_release: slot %d is %s", (int)slot,
                  slot < 0 || slot >= p->g.max_slots ? "out of range" : "already free");
  p->used[slot] = 0;
  p->n_used--;
  return PH_OK;
}

ph_status state_pool_compact(state_pool *p, state_move *moves, int32_t max_moves, int32_t *n_moves,
                             diag *d) {
  *n_moves = 0;
  RETURN_ERROR_IF(p->bound, d, PH_ERR_INVALID_ARGUMENT, "state_pool_compact: a step is bound");
  for (;;) {
    int32_t low = 0, high = p->g.max_slots - 1;
    while (low < p->g.max_slots && p->used[low]) low++;
    while (high >= 0 && !p->used[high]) high--;
    if (low >= high) return PH_OK;
    RETURN_ERROR_IF(*n_moves >= max_moves, d, PH_ERR_LIMIT,
                    "state_pool_compact: more than %d moves needed", (int)max_moves);
    p->pub[low] = p->pub[high]; /* the published rows move, and the bit saying which they are */
    for (int32_t i = 0; i < p->g.n_linear; i++) {
      memcpy(conv_row_ptr(p, i, low), conv_row_ptr(p, i, high), (size_t)p->conv_row);
      memcpy(rec_row_ptr(p, i, low), rec_row_ptr(p, i, high), (size_t)p->rec_row);
    }
    p->bytes_moved += (uint64_t)state_pool_slot_bytes(p);
    p->used[low] = 1;
    p->used[high] = 0;
    moves[*n_moves].from = high;
    moves[*n_moves].to = low;
    (*n_moves)++;
  }
}

void state_pool_slot_order(const int32_t *slots, int32_t n, int32_t *order) {
  for (int32_t i = 0; i < n; i++) order[i] = i;
  for (int32_t i = 1; i < n; i++) { /* insertion sort: batches are small, and stable */
    int32_t v = order[i], j = i;
    while (j > 0 && slots[order[j - 1]] > slots[v]) {
      order[j] = order[j - 1];
      j--;
    }
    order[j] = v;
  }
}

int state_pool_slots_are_slice(const int32_t *slots, int32_t n) {
  if (n < 1) return 0;
  for (int32_t b = 1; b < n; b++)
    if (slots[b] != slots[0] + b) return 0;
  return 1;
}

/* Grows one staging set (past or present) to `rows` rows; zeroed so no row is ever read
 * uninitialised. */
static ph_status grow_stage_set(state_pool *p, uint8_t **conv, float **rec, int32_t *have,
                                int32_t rows, diag *d) {
  if (rows <= *have) return PH_OK;
  free_stage_set(p, conv, rec, have);
  size_t cb = (size_t)round_up(p->conv_row * rows), rb = (size_t)round_up(p->rec_row * rows);
  for (int32_t i = 0; i < p->g.n_linear; i++) {
    conv[i] = aligned_alloc(STATE_POOL_ALIGN, cb);
    rec[i] = aligned_alloc(STATE_POOL_ALIGN, rb);
    if (!conv[i] || !rec[i]) {
      free_stage_set(p, conv, rec, have);
      return diag_set(d, PH_ERR_NO_MEMORY, "state_pool_bind: staging for %d rows", (int)rows);
    }
    memset(conv[i], 0, cb);
    memset(rec[i], 0, rb);
  }
  *have = rows;
  return PH_OK;
}

/* The bank batch row b's present rows go to: the inactive bank when the row is speculative. */
static int target_bank(const state_pool *p, int32_t b) {
  const int32_t slot = p->slots[b];
  return p->spec[b] ? 1 - p->pub[slot] : p->pub[slot];
}

/* Gathers every row's published rows into the past staging. Counts every byte. */
static void gather_rows(state_pool *p) {
  for (int32_t i = 0; i < p->g.n_linear; i++)
    for (int32_t b = 0; b < p->batch; b++) {
      memcpy(p->conv_stage[i] + (size_t)b * (size_t)p->conv_row, conv_row_ptr(p, i, p->slots[b]),
             (size_t)p->conv_row);
      memcpy((uint8_t *)p->rec_stage[i] + (size_t)b * (size_t)p->rec_row,
             rec_row_ptr(p, i, p->slots[b]), (size_t)p->rec_row);
    }
  p->bytes_moved += (uint64_t)p->batch * (uint64_t)state_pool_slot_bytes(p);
}

/* Scatters staged present rows back: a speculative row to its slot's inactive bank, any other row
 * to its published bank. Counts every byte. */
static void scatter_rows(state_pool *p, uint8_t *const *conv, float *const *rec) {
  for (int32_t i = 0; i < p->g.n_linear; i++)
    for (int32_t b = 0; b < p->batch; b++) {
      const int bank = target_bank(p, b);
      memcpy(conv_bank_ptr(p, i, bank, p->slots[b]), conv[i] + (size_t)b * (size_t)p->conv_row,
             (size_t)p->conv_row);
      memcpy(rec_bank_ptr(p, i, bank, p->slots[b]),
             (const uint8_t *)rec[i] + (size_t)b * (size_t)p->rec_row, (size_t)p->rec_row);
    }
  p->bytes_moved += (uint64_t)p->batch * (uint64_t)state_pool_slot_bytes(p);
}

ph_status state_pool_bind_spec(state_pool *p, const int32_t *slots, const uint8_t *spec,
                               int32_t batch, diag *d) {
  RETURN_ERROR_IF(p->bound, d, PH_ERR_INVALID_ARGUMENT, "state_pool_bind: a step is bound");
  RETURN_ERROR_IF(batch < 1 || batch > p->g.max_slots || !slots, d, PH_ERR_INVALID_ARGUMENT,
                  "state_pool_bind: batch %d (max_slots %d)", (int)batch, (int)p->g.max_slots);
  int32_t n_spec = 0;
  for (int32_t b = 0; b < batch; b++) {
    RETURN_ERROR_IF(!state_pool_slot_in_use(p, slots[b]), d, PH_ERR_INVALID_ARGUMENT,
                    "state_pool_bind: row %d names slot %d, which is not allocated", (int)b,
                    (int)slots[b]);
    for (int32_t c = 0; c < b; c++)
      RETURN_ERROR_IF(slots[c] == slots[b], d, PH_ERR_INVALID_ARGUMENT,
                      "state_pool_bind: slot %d appears in rows %d and %d", (int)slots[b], (int)c,
                      (int)b);
    n_spec += spec && spec[b];
  }
  RETURN_ERROR_IF(n_spec > 0 && p->banks < 2, d, PH_ERR_INVALID_ARGUMENT,
                  "state_pool_bind_spec: %d speculative rows, but speculative binding needs a "
                  "double-banked pool (state geometry banks 2; this pool has 1)",
                  (int)n_spec);
  int slice = state_pool_slots_are_slice(slots, batch);
  for (int32_t b = 1; slice && b < batch; b++) slice = p->pub[slots[b]] == p->pub[slots[0]];
  const int mixed = n_spec > 0 && n_spec < batch;
  if (!slice)
    FORWARD_IF_ERROR(grow_stage_set(p, p->conv_stage, p->rec_stage, &p->stage_rows, batch, d));
  if (slice && mixed)
    FORWARD_IF_ERROR(
        grow_stage_set(p, p->conv_out_stage, p->rec_out_stage, &p->out_stage_rows, batch, d));
  p->batch = batch;
  memcpy(p->slots, slots, (size_t)batch * sizeof *slots);
  for (int32_t b = 0; b < batch; b++) p->spec[b] = spec && spec[b] ? 1 : 0;
  p->first = slots[0];
  if (slice) {
    p->bound = 1;
    /* all speculative: the other bank's slice; mixed: present staging; none: in place */
    p->out = n_spec == 0 ? 0 : mixed ? 2 : 1;
  } else {
    gather_rows(p);
    p->bound = 2;
    p->out = 0; /* the op updates the staging in place; unbind scatters each row to its bank */
  }
  return PH_OK;
}

ph_status state_pool_bind(state_pool *p, const int32_t *slots, int32_t batch, diag *d) {
  return state_pool_bind_spec(p, slots, NULL, batch, d);
}

int state_pool_bound_is_slice(const state_pool *p) { return p->bound == 1 && p->out != 2; }

static int32_t layer_index(const state_pool *p, int32_t layer) {
  for (int32_t i = 0; i < p->g.n_linear; i++)
    if (p->layers[i] == layer) return i;
  return -1;
}

/* present 0: the past (input) views; 1: the present (output) views. */
static ph_status bound_view(const state_pool *p, int32_t layer, int recurrent, int present,
                            tensor *out, diag *d) {
  RETURN_ERROR_IF(!p->bound, d, PH_ERR_INVALID_ARGUMENT, "state_pool: no step is bound");
  int32_t i = layer_index(p, layer);
  RETURN_ERROR_IF(i < 0, d, PH_ERR_INVALID_ARGUMENT, "state_pool: layer %d is not a linear layer",
                  (int)layer);
  const int mode = present ? p->out : 0;
  uint8_t *base;
  if (mode == 2)
    base = recurrent ? (uint8_t *)p->rec_out_stage[i] : p->conv_out_stage[i];
  else if (p->bound == 2)
    base = recurrent ? (uint8_t *)p->rec_stage[i] : p->conv_stage[i];
  else {
    const int bank = mode == 1 ? 1 - p->pub[p->first] : p->pub[p->first];
    base = recurrent ? rec_bank_ptr(p, i, bank, p->first) : conv_bank_ptr(p, i, bank, p->first);
  }
  if (recurrent) {
    int64_t dims[4] = {p->batch, p->g.n_v_heads, p->g.head_v, p->g.head_k};
    *out = tensor_make(PH_DTYPE_F32, 4, dims, base);
  } else {
    int64_t dims[3] = {p->batch, p->g.conv_dim, p->g.conv_kernel - 1};
    *out = tensor_make(p->g.io_dtype, 3, dims, base);
  }
  return PH_OK;
}

ph_status state_pool_bound_conv(const state_pool *p, int32_t layer, tensor *out, diag *d) {
  return bound_view(p, layer, 0, 0, out, d);
}
ph_status state_pool_bound_recurrent(const state_pool *p, int32_t layer, tensor *out, diag *d) {
  return bound_view(p, layer, 1, 0, out, d);
}
ph_status state_pool_bound_conv_out(const state_pool *p, int32_t layer, tensor *out, diag *d) {
  return bound_view(p, layer, 0, 1, out, d);
}
ph_status state_pool_bound_recurrent_out(const state_pool *p, int32_t layer, tensor *out, diag *d) {
  return bound_view(p, layer, 1, 1, out, d);
}

ph_status state_pool_unbind(state_pool *p, diag *d) {
  RETURN_ERROR_IF(!p->bound, d, PH_ERR_INVALID_ARGUMENT, "state_pool_unbind: nothing is bound");
  if (p->bound == 2)
    scatter_rows(p, p->conv_stage, p->rec_stage);
  else if (p->out == 2)
    scatter_rows(p, p->conv_out_stage, p->rec_out_stage);
  p->bound = 0;
  p->out = 0;
  p->batch = 0;
  return PH_OK;
}

ph_status state_pool_publish(state_pool *p, int32_t slot, diag *d) {
  RETURN_ERROR_IF(p->banks < 2, d, PH_ERR_INVALID_ARGUMENT,
                  "state_pool_publish: slot %d: publishing needs a double-banked pool (state "
                  "geometry banks 2; this pool has 1)",
                  (int)slot);
  RETURN_ERROR_IF(p->bound, d, PH_ERR_INVALID_ARGUMENT,
                  "state_pool_publish: slot %d published while a step is bound", (int)slot);
  RETURN_ERROR_IF(!state_pool_slot_in_use(p, slot), d, PH_ERR_INVALID_ARGUMENT,
                  "state_pool_publish: slot %d is %s", (int)slot,
                  slot < 0 || slot >= p->g.max_slots ? "out of range" : "not allocated");
  p->pub[slot] = (uint8_t)(1 - p->pub[slot]);
  return PH_OK;
}

int state_pool_slot_bank(const state_pool *p, int32_t slot) {
  return state_pool_slot_in_use(p, slot) ? p->pub[slot] : -1;
}

/* staged 0: the published rows; 1: the inactive bank's rows. */
static ph_status slot_view(const state_pool *p, int32_t layer, int32_t slot, int recurrent,
                           int staged, tensor *out, diag *d) {
  int32_t i = layer_index(p, layer);
  RETURN_ERROR_IF(i < 0, d, PH_ERR_INVALID_ARGUMENT, "state_pool: layer %d is not a linear layer",
                  (int)layer);
  RETURN_ERROR_IF(!state_pool_slot_in_use(p, slot), d, PH_ERR_INVALID_ARGUMENT,
                  "state_pool: slot %d is not allocated", (int)slot);
  RETURN_ERROR_IF(staged && p->banks < 2, d, PH_ERR_INVALID_ARGUMENT,
                  "state_pool: slot %d has no inactive bank (the pool is single banked)",
                  (int)slot);
  const int bank = staged ? 1 - p->pub[slot] : p->pub[slot];
  if (recurrent) {
    int64_t dims[3] = {p->g.n_v_heads, p->g.head_v, p->g.head_k};
    *out = tensor_make(PH_DTYPE_F32, 3, dims, rec_bank_ptr(p, i, bank, slot));
  } else {
    int64_t dims[2] = {p->g.conv_dim, p->g.conv_kernel - 1};
    *out = tensor_make(p->g.io_dtype, 2, dims, conv_bank_ptr(p, i, bank, slot));
  }
  return PH_OK;
}

ph_status state_pool_slot_conv(const state_pool *p, int32_t layer, int32_t slot, tensor *out,
                               diag *d) {
  return slot_view(p, layer, slot, 0, 0, out, d);
}
ph_status state_pool_slot_recurrent(const state_pool *p, int32_t layer, int32_t slot, tensor *out,
                                    diag *d) {
  return slot_view(p, layer, slot, 1, 0, out, d);
}
ph_status state_pool_slot_conv_staged(const state_pool *p, int32_t layer, int32_t slot, tensor *out,
                                      diag *d) {
  return slot_view(p, layer, slot, 0, 1, out, d);
}
ph_status state_pool_slot_recurrent_staged(const state_pool *p, int32_t layer, int32_t slot,
                                           tensor *out, diag *d) {
  return slot_view(p, layer, slot, 1, 1, out, d);
}

/* ---- snapshots (prefix caching) ---------------------------------------------------------------
 */

static ph_status check_snapshot_slot(const state_pool *p, int32_t slot, const void *buf,
                                     const char *fn, diag *d) {
  RETURN_ERROR_IF(!buf, d, PH_ERR_INVALID_ARGUMENT, "%s: NULL buffer", fn);
  RETURN_ERROR_IF(p->bound, d, PH_ERR_INVALID_ARGUMENT, "%s: a step is bound", fn);
  RETURN_ERROR_IF(!state_pool_slot_in_use(p, slot), d, PH_ERR_INVALID_ARGUMENT,
                  "%s: slot %d is not allocated", fn, (int)slot);
  return PH_OK;
}

ph_status state_pool_save_slot(const state_pool *p, int32_t slot, void *dst, diag *d) {
  FORWARD_IF_ERROR(check_snapshot_slot(p, slot, dst, "state_pool_save_slot", d));
  uint8_t *o = dst;
  for (int32_t i = 0; i < p->g.n_linear; i++) {
    memcpy(o, conv_row_ptr(p, i, slot), (size_t)p->conv_row);
    o += p->conv_row;
    memcpy(o, rec_row_ptr(p, i, slot), (size_t)p->rec_row);
    o += p->rec_row;
  }
  return PH_OK;
}

ph_status state_pool_load_slot(state_pool *p, int32_t slot, const void *src, diag *d) {
  FORWARD_IF_ERROR(check_snapshot_slot(p, slot, src, "state_pool_load_slot", d));
  const uint8_t *in = src;
  for (int32_t i = 0; i < p->g.n_linear; i++) {
    memcpy(conv_row_ptr(p, i, slot), in, (size_t)p->conv_row);
    in += p->conv_row;
    memcpy(rec_row_ptr(p, i, slot), in, (size_t)p->rec_row);
    in += p->rec_row;
  }
  return PH_OK;
}
