/* The packed paged layout (issue 5) end to end on the golden checkpoints: several sequences of
 * unequal lengths in one packed batch (input_ids [N], cumulative_sequence_lengths, block tables
 * over shuffled pages, V-major GatedDeltaNet state), prefill and continuation, logits of every
 * position within 2e-4 of the golden scale, and bit-identical to each sequence run alone. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/exec.h"
#include "graph/prepare.h"
#include "io/safetensors.h"
#include "models/model.h"
#include "models/registry.h"

#define BLOCK      16
#define MAX_SEQ    3
#define MAX_TOK    256
#define MAX_BLOCKS 16 /* per sequence */

typedef struct seq_state {
  int64_t tokens[MAX_TOK];
  int64_t n_tokens, done;
  int32_t blocks[MAX_BLOCKS];
  float *conv[64], *rec[64]; /* per linear layer */
  float *logits;             /* [n_tokens, V] */
} seq_state;

typedef struct paged_model {
  const hf_config *c;
  graph *g;
  executor *e;
  int64_t V, n_pages;
  float *kcache[64], *vcache[64]; /* per layer (full attention) [P, BLOCK, Hkv, D] */
} paged_model;

static tensor tens(ph_dtype dt, int rank, const int64_t *dims, void *data) {
  tensor t;
  memset(&t, 0, sizeof t);
  t.dtype = dt;
  t.rank = rank;
  memcpy(t.dims, dims, (size_t)rank * sizeof *dims);
  t.data = data;
  return t;
}

static int64_t conv_elems(const hf_config *c) {
  return c->geom.conv_dim * (c->lin.conv_kernel - 1);
}
static int64_t rec_elems(const hf_config *c) {
  return c->lin.n_value_heads * c->lin.value_head_dim * c->lin.key_head_dim;
}

/* One packed step: for each listed sequence, its next n[k] tokens. */
static ph_status step(paged_model *pm, seq_state **seqs, const int64_t *n, int B, diag *d) {
  const hf_config *c = pm->c;
  static int64_t ids[MAX_TOK * MAX_SEQ], pos[3 * MAX_TOK * MAX_SEQ];
  static int32_t cu[MAX_SEQ + 1], past[MAX_SEQ], table[MAX_SEQ * MAX_BLOCKS], meta[3];
  int64_t N = 0;
  int32_t max_q = 0, max_kv = 0;
  for (int b = 0; b < B; b++) N += n[b];
  cu[0] = 0;
  for (int b = 0, at = 0; b < B; b++) {
    seq_state *s = seqs[b];
    for (int64_t j = 0; j < n[b]; j++, at++) {
      ids[at] = s->tokens[s->done + j];
      for (int r = 0; r < 3; r++) pos[r * N + at] = s->done + j;
    }
    cu[b + 1] = cu[b] + (int32_t)n[b];
    past[b] = (int32_t)s->done;
    memcpy(&table[b * MAX_BLOCKS], s->blocks, sizeof s->blocks);
    if (n[b] > max_q) max_q = (int32_t)n[b];
    if (s->done + n[b] > max_kv) max_kv = (int32_t)(s->done + n[b]);
  }
  meta[0] = max_q;
  meta[1] = max_kv;
  meta[2] = 0;
  /* gather the step's fixed state into [B, ...] (a test's simple staging; the engine binds
   * slots of the state pool instead) */
  float *conv = calloc((size_t)(B * conv_elems(c) * c->n_layers), sizeof(float));
  float *rec = calloc((size_t)(B * rec_elems(c) * c->n_layers), sizeof(float));
  executor *e = pm->e;
  tensor t;
#define BIND(name, tt)                                                                             \
  do {                                                                                             \
    t = tt;                                                                                        \
    FORWARD_IF_ERROR(exec_bind_input(e, exec_input_index(e, name), &t, d));                        \
  } while (0)
  BIND("input_ids", tens(PH_DTYPE_I64, 1, (int64_t[]){N}, ids));
  BIND("position_ids", tens(PH_DTYPE_I64, 2, (int64_t[]){3, N}, pos));
  BIND("block_table", tens(PH_DTYPE_I32, 2, (int64_t[]){B, MAX_BLOCKS}, table));
  BIND("cumulative_sequence_lengths", tens(PH_DTYPE_I32, 1, (int64_t[]){B + 1}, cu));
  BIND("past_sequence_lengths", tens(PH_DTYPE_I32, 1, (int64_t[]){B}, past));
  BIND("attention_metadata", tens(PH_DTYPE_I32, 1, (int64_t[]){3}, meta));
  char name[96];
  for (int i = 0; i < (int)c->n_layers; i++) {
    if (c->layer_kind[i] == PH_LAYER_FULL_ATTENTION) {
      int64_t dims[4] = {pm->n_pages, BLOCK, c->n_kv_heads, c->head_dim};
      for (int kv = 0; kv < 2; kv++) {
        t = tens(PH_DTYPE_F32, 4, dims, kv ? pm->vcache[i] : pm->kcache[i]);
        snprintf(name, sizeof name, "past_key_values.%d.%s", i, kv ? "value" : "key");
        FORWARD_IF_ERROR(exec_bind_input(e, exec_input_index(e, name), &t, d));
        snprintf(name, sizeof name, "present.%d.%s", i, kv ? "value" : "key");
        FORWARD_IF_ERROR(exec_bind_output(e, exec_output_index(e, name), &t, d)); /* in place */
      }
    } else {
      float *cs = conv + (size_t)(i * B) * (size_t)conv_elems(c);
      float *rs = rec + (size_t)(i * B) * (size_t)rec_elems(c);
      for (int b = 0; b < B; b++) {
        memcpy(cs + b * conv_elems(c), seqs[b]->conv[i], (size_t)conv_elems(c) * sizeof(float));
        memcpy(rs + b * rec_elems(c), seqs[b]->rec[i], (size_t)rec_elems(c) * sizeof(float));
      }
      tensor tc =
          tens(PH_DTYPE_F32, 3, (int64_t[]){B, c->geom.conv_dim, c->lin.conv_kernel - 1}, cs);
      tensor tr = tens(
          PH_DTYPE_F32, 4,
          (int64_t[]){B, c->lin.n_value_heads, c->lin.value_head_dim, c->lin.key_head_dim}, rs);
      snprintf(name, sizeof name, "past_key_values.%d.conv_state", i);
      FORWARD_IF_ERROR(exec_bind_input(e, exec_input_index(e, name), &tc, d));
      snprintf(name, sizeof name, "present.%d.conv_state", i);
      FORWARD_IF_ERROR(exec_bind_output(e, exec_output_index(e, name), &tc, d));
      snprintf(name, sizeof name, "past_key_values.%d.recurrent_state", i);
      FORWARD_IF_ERROR(exec_bind_input(e, exec_input_index(e, name), &tr, d));
      snprintf(name, sizeof name, "present.%d.recurrent_state", i);
      FORWARD_IF_ERROR(exec_bind_output(e, exec_output_index(e, name), &tr, d));
    }
  }
#undef BIND
  ph_status st = exec_run(e, d);
  if (st == PH_OK) {
    const tensor *lg = exec_output(e, exec_output_index(e, "logits"));
    for (int b = 0; b < B; b++) {
      seq_state *s = seqs[b];
      memcpy(s->logits + s->done * pm->V, (const float *)lg->data + (int64_t)cu[b] * pm->V,
             (size_t)(n[b] * pm->V) * sizeof(float));
      s->done += n[b];
      for (int i = 0; i < (int)c->n_layers; i++) {
        if (c->layer_kind[i] == PH_LAYER_FULL_ATTENTION) continue;
        memcpy(s->conv[i], conv + (size_t)(i * B + b) * (size_t)conv_elems(c),
               (size_t)conv_elems(c) * sizeof(float));
        memcpy(s->rec[i], rec + (size_t)(i * B + b) * (size_t)rec_elems(c),
               (size_t)rec_elems(c) * sizeof(float));
      }
    }
  }
  free(conv);
  free(rec);
  return st;
}

static void seq_init(seq_state *s, const paged_model *pm, const int64_t *tokens, int64_t n,
                     int first_block) {
  memset(s, 0, sizeof *s);
  memcpy(s->tokens, tokens, (size_t)n * sizeof *tokens);
  s->n_tokens = n;
  /* pages shuffled by a permutation of 1..P-1 (7 is coprime to P-1 = 48); page 0 is the null
   * block padding the table */
  for (int k = 0; k < MAX_BLOCKS; k++) s->blocks[k] = 0;
  for (int k = 0; k < (n + BLOCK - 1) / BLOCK; k++)
    s->blocks[k] = (int32_t)(1 + (first_block + k) * 7 % (pm->n_pages - 1));
  for (int i = 0; i < (int)pm->c->n_layers; i++) {
    s->conv[i] = calloc((size_t)conv_elems(pm->c), sizeof(float));
    s->rec[i] = calloc((size_t)rec_elems(pm->c), sizeof(float));
  }
  s->logits = calloc((size_t)(n * pm->V), sizeof(float));
}

static void seq_free(seq_state *s, const paged_model *pm) {
  for (int i = 0; i < (int)pm->c->n_layers; i++) {
    free(s->conv[i]);
    free(s->rec[i]);
  }
  free(s->logits);
}

static void reset_caches(paged_model *pm) {
  const hf_config *c = pm->c;
  size_t n = (size_t)(pm->n_pages * BLOCK * c->n_kv_heads * c->head_dim);
  for (int i = 0; i < (int)c->n_layers; i++)
    if (pm->kcache[i]) {
      for (size_t k = 0; k < n; k++) pm->kcache[i][k] = pm->vcache[i][k] = 1e3f; /* garbage */
    }
}

static void check_set(const char *set) {
  char path[1200];
  check_data(path, sizeof path, "golden/%s/checkpoint", set);
  ph_model *m = NULL;
  CHECK_STATUS(ph_model_open(path, NULL, &m), PH_OK, ph_model_error(m));
  diag d;
  paged_model pm;
  memset(&pm, 0, sizeof pm);
  pm.c = model_config(m);
  model_options opt = model_options_default();
  opt.paged = 1;
  opt.block_size = BLOCK;
  opt.max_context = 512;
  CHECK_STATUS(model_build_graph(pm.c, model_weights_of(m), &opt, &pm.g, &d), PH_OK, d.msg);
  if (!pm.g) {
    ph_model_free(m);
    return;
  }
  CHECK_STATUS(graph_prepare_cpu(pm.g, &d), PH_OK, d.msg);
  CHECK_STATUS(exec_create(pm.g, 2, &pm.e, &d), PH_OK, d.msg);
  pm.V = pm.c->vocab_size;
  pm.n_pages = 1 + 3 * MAX_BLOCKS;
  for (int i = 0; i < (int)pm.c->n_layers; i++)
    if (pm.c->layer_kind[i] == PH_LAYER_FULL_ATTENTION) {
      size_t n = (size_t)(pm.n_pages * BLOCK * pm.c->n_kv_heads * pm.c->head_dim);
      pm.kcache[i] = calloc(n, sizeof(float));
      pm.vcache[i] = calloc(n, sizeof(float));
    }
  check_data(path, sizeof path, "golden/%s/manifest.json", set);
  json_error_t je;
  json_t *man = json_load_file(path, 0, &je);
  if (!check_report(man != NULL, __FILE__, __LINE__, "manifest.json parses"))
    fprintf(stderr, "       %s:%d: %s\n", path, je.line, je.text);
  check_data(path, sizeof path, "golden/%s/reference.safetensors", set);
  st_set *ref = NULL;
  CHECK_STATUS(st_open_file(path, &ref, &d), PH_OK, d.msg);
  json_t *seqs_j = json_object_get(man, "sequences");
  int S = (int)json_array_size(seqs_j);
  /* the golden sets hold 3 sequences each; an empty or oversized list must not pass quietly */
  if (!check_report(S >= 1 && S <= MAX_SEQ, __FILE__, __LINE__, "1 <= sequences <= MAX_SEQ"))
    fprintf(stderr, "       %s: %d sequences in the manifest\n", set, S);
  if (S > MAX_SEQ) S = MAX_SEQ;
  int64_t toks[MAX_SEQ][MAX_TOK], lens[MAX_SEQ];
  for (int s = 0; s < S && s < MAX_SEQ; s++) {
    json_t *t = json_object_get(json_array_get(seqs_j, (size_t)s), "tokens");
    lens[s] = (int64_t)json_array_size(t);
    if (!check_report(lens[s] >= 1 && lens[s] <= MAX_TOK, __FILE__, __LINE__,
                      "1 <= tokens <= MAX_TOK")) {
      fprintf(stderr, "       %s: sequence %d has %lld tokens\n", set, s, (long long)lens[s]);
      lens[s] = lens[s] > MAX_TOK ? MAX_TOK : lens[s];
    }
    for (int64_t k = 0; k < lens[s]; k++)
      toks[s][k] = json_integer_value(json_array_get(t, (size_t)k));
  }
  /* schedules: (a) everything in one packed prefill; (b) chunks of 64 per sequence per step,
   * packed; (c) each sequence alone with the same chunks (batch invariance reference) */
  seq_state packed[MAX_SEQ], alone[MAX_SEQ];
  double worst = 0;
  for (int mode = 0; mode < 3; mode++) {
    reset_caches(&pm);
    seq_state *st = mode == 2 ? alone : packed;
    for (int s = 0; s < S; s++) seq_init(&st[s], &pm, toks[s], lens[s], s * MAX_BLOCKS);
    if (mode < 2) {
      for (;;) {
        seq_state *list[MAX_SEQ];
        int64_t n[MAX_SEQ];
        int B = 0;
        for (int s = 0; s < S; s++) {
          int64_t left = st[s].n_tokens - st[s].done;
          if (!left) continue;
          list[B] = &st[s];
          n[B++] = mode == 0 ? left : (left < 64 ? left : 64);
        }
        if (!B) break;
        ph_status r = step(&pm, list, n, B, &d);
        CHECK_STATUS(r, PH_OK, d.msg);
        if (r != PH_OK) break;
      }
    } else {
      for (int s = 0; s < S; s++)
        while (st[s].done < st[s].n_tokens) {
          seq_state *list[1] = {&st[s]};
          int64_t left = st[s].n_tokens - st[s].done, n1 = left < 64 ? left : 64;
          ph_status r = step(&pm, list, &n1, 1, &d);
          CHECK_STATUS(r, PH_OK, d.msg);
          if (r != PH_OK) break;
        }
    }
    for (int s = 0; s < S; s++) {
      char name[64];
      snprintf(name, sizeof name, "seq%d.logits", s);
      const st_tensor *rt = st_find(ref, name);
      if (!check_report(rt && rt->dtype == PH_DTYPE_F32 &&
                            shape_numel(&rt->shape) == lens[s] * pm.V,
                        __FILE__, __LINE__, "reference logits present, f32 [T, V]")) {
        fprintf(stderr, "       %s: %s in %s\n", set, name, rt ? "misshapen" : "missing");
        continue;
      }
      const float *rv = (const float *)rt->data;
      double scale = 0, err = 0;
      for (int64_t k = 0; k < lens[s] * pm.V; k++)
        check_err_acc(st[s].logits[k], rv[k], &err, &scale);
      CHECK(err <= GOLDEN_F32_TOL * scale); /* the golden bound (tests/check.h) */
      if (err / scale > worst) worst = err / scale;
      /* batch invariance: chunked packed == chunked alone, bit for bit */
      if (mode == 2)
        CHECK(memcmp(packed[s].logits, alone[s].logits, (size_t)(lens[s] * pm.V) * sizeof(float)) ==
              0);
    }
    if (mode == 0)
      for (int s = 0; s < S; s++) seq_free(&packed[s], &pm);
  }
  printf("  %s: packed paged logits worst error %.2e of scale (bound %.0e)\n", set, worst,
         GOLDEN_F32_TOL);
  for (int s = 0; s < S; s++) {
    seq_free(&packed[s], &pm);
    seq_free(&alone[s], &pm);
  }
  for (int i = 0; i < (int)pm.c->n_layers; i++) {
    free(pm.kcache[i]);
    free(pm.vcache[i]);
  }
  json_decref(man);
  st_close(ref);
  exec_free(pm.e);
  graph_free(pm.g);
  ph_model_free(m);
}

static void test_paged_f32(void) { check_set("qwen35-tiny-f32"); }
static void test_paged_bf16_vlm(void) { check_set("qwen35-tiny-bf16-vlm"); }
static void test_paged_qwen35_moe(void) { check_set("qwen35-moe-tiny"); }

int main(void) {
  RUN(test_paged_f32);
  RUN(test_paged_bf16_vlm);
  RUN(test_paged_qwen35_moe);
  return check_finish();
}
