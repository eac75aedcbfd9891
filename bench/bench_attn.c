/* bench_attn — kernel lab for PagedAttention (the attention of the paged engine) at the
 * Qwen3.5-0.8B shapes: 8 query heads, 2 kv heads, head size 256, 16-token pages, every kernel
 * variant this CPU runs (kernels/dispatch.h), timed through the op's registry entry exactly as
 * the executor calls it (K/V written into the pages, the causal attention of every row), next
 * to the fp32 FMA peak measured in the same run (roofline.h).
 *
 *   bench_attn [--threads N] [--repeats N] [--variant scalar|avx2|avx512] [--case NAME]
 *
 * Cases: prefill of 512 tokens in one call (and as the engine's two chunks of 256: the second
 * sees the first's 256 keys), and decode of 1 and 16 sequences at context 512; f32 pages, and
 * bf16 pages for the prefill. FLOPs counted: 2 (D + Dv) per (query head, visible key) (the
 * q.k and p.v products); the softmax and the K/V writes are not counted. Each figure is the
 * median of --repeats samples; the VM is shared, so compare ratios to the peak measured in the
 * same run, not raw numbers. The program only calls the op, so the same file times older trees.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool.h"
#include "base/rng.h"
#include "kernel_lab.h"
#include "kernels/dispatch.h"
#include "ops/op.h"
#include "ops/op_util.h"
#include "roofline.h"
#include "tensor/dtype.h"

enum { HQ = 8, HKV = 2, HD = 256, BS = 16 };

typedef struct bench_case {
  const char *name;
  int B;       /* sequences */
  int q_len;   /* new rows per sequence */
  int past;    /* keys already in the cache per sequence */
  ph_dtype dt; /* IO and cache dtype */
} bench_case;

static const bench_case CASES[] = {
    {"prefill-512", 1, 512, 0, PH_DTYPE_F32},        {"prefill-256+256", 1, 256, 256, PH_DTYPE_F32},
    {"prefill-512-bf16", 1, 512, 0, PH_DTYPE_BF16},  {"decode-b1-ctx512", 1, 1, 511, PH_DTYPE_F32},
    {"decode-b16-ctx512", 16, 1, 511, PH_DTYPE_F32},
};
#define N_CASES (sizeof CASES / sizeof CASES[0])

typedef struct bench_setup {
  const bench_case *c;
  tensor q, k, v, kc, vc, cu, past, bt, out;
  gattr attrs[2];
  gnode node;
  const op_def *op;
  op_ctx ctx;
  void *plan;
} bench_setup;

static void tset(tensor *t, ph_dtype dt, int rank, const int64_t *dims) {
  t->dtype = dt;
  t->rank = rank;
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= t->dims[i] = dims[i];
  t->data = calloc((size_t)n, dtype_size(dt));
}

static int setup(bench_setup *s, const bench_case *c, pool *p, int threads) {
  memset(s, 0, sizeof *s);
  s->c = c;
  const int64_t N = (int64_t)c->B * c->q_len, MB = (c->past + c->q_len + BS - 1) / BS;
  const int64_t NP = c->B * MB;
  tset(&s->q, c->dt, 2, (int64_t[]){N, HQ * HD});
  tset(&s->k, c->dt, 2, (int64_t[]){N, HKV * HD});
  tset(&s->v, c->dt, 2, (int64_t[]){N, HKV * HD});
  tset(&s->kc, c->dt, 4, (int64_t[]){NP, BS, HKV, HD});
  tset(&s->vc, c->dt, 4, (int64_t[]){NP, BS, HKV, HD});
  tset(&s->cu, PH_DTYPE_I32, 1, (int64_t[]){c->B + 1});
  tset(&s->past, PH_DTYPE_I32, 1, (int64_t[]){c->B});
  tset(&s->bt, PH_DTYPE_I32, 2, (int64_t[]){c->B, MB});
  tset(&s->out, c->dt, 2, (int64_t[]){N, HQ * HD});
  rng r = rng_seed(11);
  /* q and k of unit-ish RMS scaled like a normalised model's: scores of a few units */
  for (int64_t i = 0; i < N * HQ * HD; i++) tensor_set_f32(&s->q, i, rng_range(&r, -1, 1));
  for (int64_t i = 0; i < N * HKV * HD; i++) tensor_set_f32(&s->k, i, rng_range(&r, -1, 1));
  for (int64_t i = 0; i < N * HKV * HD; i++) tensor_set_f32(&s->v, i, rng_range(&r, -1, 1));
  for (int64_t i = 0; i < NP * BS * HKV * HD; i++) {
    tensor_set_f32(&s->kc, i, rng_range(&r, -1, 1));
    tensor_set_f32(&s->vc, i, rng_range(&r, -1, 1));
  }
  int32_t *cu = s->cu.data, *past = s->past.data, *bt = s->bt.data;
  for (int b = 0; b <= c->B; b++) cu[b] = b * c->q_len;
  for (int b = 0; b < c->B; b++) past[b] = c->past;
  /* pages interleaved between sequences, as an engine's allocator leaves them */
  for (int b = 0; b < c->B; b++)
    for (int64_t m = 0; m < MB; m++) bt[b * MB + m] = (int32_t)(m * c->B + b);
  s->attrs[0] = (gattr){.name = "num_heads", .type = ATTR_INT, .i = HQ};
  s->attrs[1] = (gattr){.name = "kv_num_heads", .type = ATTR_INT, .i = HKV};
  s->node = kernel_lab_node("com.microsoft", "PagedAttention", 8, s->attrs, 2);
  s->op = s->node.op;
  if (!s->op) return 0;
  tinfo ti[8];
  const tensor *in[8] = {&s->q, &s->k, &s->v, &s->kc, &s->vc, &s->cu, &s->past, &s->bt};
  for (int i = 0; i < 8; i++) ti[i] = op_tinfo_of(in[i]);
  diag d;
  if (s->op->plan_bytes) {
    s->plan = aligned_alloc(16, (s->op->plan_bytes + 15) / 16 * 16);
    memset(s->plan, 0, s->op->plan_bytes);
    if (s->op->plan(&s->node, ti, s->plan, &d) != PH_OK) {
      fprintf(stderr, "bench_attn: plan: %s\n", d.msg);
      return 0;
    }
  }
  s->ctx.plan = s->plan;
  s->ctx.pool = p;
  s->ctx.scratch_bytes = s->op->scratch_bytes(&s->node, ti, threads);
  s->ctx.scratch = aligned_alloc(64, (s->ctx.scratch_bytes + 63) / 64 * 64 + 64);
  return s->ctx.scratch != NULL;
}

static void teardown(bench_setup *s) {
  tensor *ts[] = {&s->q, &s->k, &s->v, &s->kc, &s->vc, &s->cu, &s->past, &s->bt, &s->out};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) free(ts[i]->data);
  free(s->ctx.scratch);
  free(s->plan);
}

static int run_once(void *arg, int i) {
  (void)i;
  bench_setup *s = arg;
  const tensor *in[8] = {&s->q, &s->k, &s->v, &s->kc, &s->vc, &s->cu, &s->past, &s->bt};
  tensor *out[1] = {&s->out};
  diag d;
  ph_status st = s->op->run(&s->node, in, out, &s->ctx, &d);
  if (st != PH_OK) fprintf(stderr, "bench_attn: %s: %s\n", ph_status_name(st), d.msg);
  return st == PH_OK;
}

/* Visible (query head, key) pairs: each row at position p sees p + 1 keys. */
static double pairs(const bench_case *c) {
  double n = 0;
  for (int j = 0; j < c->q_len; j++) n += (double)(c->past + j + 1);
  return n * c->B * HQ;
}

int main(int argc, char **argv) {
  kernel_lab lab;
  int rc = kernel_lab_init(&lab, "bench_attn", argc, argv);
  if (rc) return rc;
  diag d;
  printf("%-18s %-7s %8s %10s %8s %7s\n", "case", "variant", "rows", "us/call", "GFLOP/s",
         "of FMA");
  int failed = 0;
  for (size_t ci = 0; ci < N_CASES; ci++) {
    const bench_case *c = &CASES[ci];
    if (lab.only_case && strcmp(lab.only_case, c->name) != 0) continue;
    bench_setup s;
    if (!setup(&s, c, lab.pool, lab.threads)) {
      fprintf(stderr, "bench_attn: %s: setup failed\n", c->name);
      teardown(&s);
      failed = 1;
      continue;
    }
    double base = 0;
    for (int vi = 0; vi < lab.nv; vi++) {
      if (kernel_force_variant(lab.vars[vi], &d) != PH_OK || !run_once(&s, 0)) {
        failed = 1;
        continue;
      }
      double sec = kernel_lab_time(run_once, &s, 1, lab.repeats);
      double gflops = pairs(c) * 2.0 * (HD + HD) / sec / 1e9;
      if (vi == 0) base = sec;
      printf("%-18s %-7s %8lld %10.1f %8.2f %7.4f", c->name, kernel_variant_name(lab.vars[vi]),
             (long long)c->B * c->q_len, sec * 1e6, gflops, gflops / lab.fma);
      if (vi > 0) printf("  x%.2f", base / sec);
      printf("\n");
    }
    teardown(&s);
  }
  printf("x N: speedup over the first variant listed. FLOPs: 2 (D + Dv) per visible (query head, "
         "key) pair.\n");
  pool_free(lab.pool);
  return failed;
}
