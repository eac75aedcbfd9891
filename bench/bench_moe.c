/* bench_moe — kernel lab for com.microsoft::MoE (src/ops/op_moe.c): every kernel variant this CPU
 * runs, each timed on Qwen3.5-35B-A3B's expert shapes (H 2048, I 512, top-8) with fewer experts
 * (64 instead of 256, so the weights fit a small machine), next to this machine's DRAM bandwidth
 * and fp32 FMA peak measured in the same run (roofline.h).
 *
 *   bench_moe [--threads N] [--repeats N] [--variant scalar|avx2|avx512] [--case NAME]
 *             [--bits 0|4|8]
 *
 * --bits 4 or 8 times com.microsoft::QMoE (src/ops/op_qmoe.c) instead: the same shapes with
 * symmetric blocks of 32 and f32 scales; the decode figure then counts the code and scale bytes.
 *
 * Cases: decode (T = 1, 4: k experts' weights read once per call, bandwidth-bound: reported as
 * GB/s of the expert weights the call touches vs bandwidth; every call routes the same way, so
 * part of those weights may stay in the last-level cache and the figure can pass 1.0 of bw) and
 * prefill (T = 64, 512: every expert has rows, reported as GFLOP/s of the routed work,
 * 2 T k 3 I H, vs the FMA peak). The op is
 * called through its registry entry, with its plan and scratch, as the executor calls it. Each
 * figure is the median of --repeats samples; the VM is shared, so compare ratios to the limits
 * measured in the same run, not raw numbers. Correctness is test_ops_moe's: this only times.
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

typedef struct bench_case {
  const char *name;
  int64_t T, E, k, H, I;
  int decode; /* 1: report bandwidth, 0: report FLOP rate */
} bench_case;

static const bench_case CASES[] = {
    {"decode", 1, 64, 8, 2048, 512, 1},
    {"decode-4", 4, 64, 8, 2048, 512, 1},
    {"prefill-64", 64, 64, 8, 2048, 512, 0},
    {"prefill-512", 512, 64, 8, 2048, 512, 0},
};
#define N_CASES (sizeof CASES / sizeof CASES[0])

typedef struct bench_setup {
  const bench_case *c;
  tensor t[7]; /* MoE: input, router, fc1, (unused), fc2; QMoE: input, router, fc1 codes,
                  scales, (bias), fc2 codes, scales */
  int bits;    /* 0: MoE over bf16 weights; 4 or 8: QMoE */
  const op_def *op;
  gnode node;
  gattr attrs[9];
  op_ctx ctx;
  tensor y;
  void *plan;
} bench_setup;

static tensor make(ph_dtype dt, int rank, const int64_t *dims) {
  tensor t;
  memset(&t, 0, sizeof t);
  t.dtype = dt;
  t.rank = rank;
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= t.dims[i] = dims[i];
  t.data = malloc((size_t)n * dtype_size(dt) + 1);
  return t;
}

static int setup(bench_setup *s, const bench_case *c, pool *p, int threads, int bits) {
  memset(s, 0, sizeof *s);
  s->c = c;
  s->bits = bits;
  s->t[0] = make(PH_DTYPE_F32, 2, (int64_t[]){c->T, c->H});
  s->t[1] = make(PH_DTYPE_F32, 2, (int64_t[]){c->T, c->E});
  if (bits) {
    const int64_t pack = 8 / bits;
    s->t[2] = make(PH_DTYPE_U8, 3, (int64_t[]){c->E, 2 * c->I, c->H / pack});
    s->t[3] = make(PH_DTYPE_F32, 3, (int64_t[]){c->E, 2 * c->I, c->H / 32});
    s->t[5] = make(PH_DTYPE_U8, 3, (int64_t[]){c->E, c->H, c->I / pack});
    s->t[6] = make(PH_DTYPE_F32, 3, (int64_t[]){c->E, c->H, c->I / 32});
  } else {
    s->t[2] = make(PH_DTYPE_BF16, 3, (int64_t[]){c->E, 2 * c->I, c->H});
    s->t[4] = make(PH_DTYPE_BF16, 3, (int64_t[]){c->E, c->H, c->I});
  }
  s->y = make(PH_DTYPE_F32, 2, (int64_t[]){c->T, c->H});
  if (!s->y.data) return 0;
  rng r = rng_seed(7);
  for (int i = 0; i < 7; i++) {
    if (!s->t[i].data) continue;
    int64_t n = 1;
    for (int k = 0; k < s->t[i].rank; k++) n *= s->t[i].dims[k];
    for (int64_t e = 0; e < n; e++) {
      if (s->t[i].dtype == PH_DTYPE_U8)
        ((uint8_t *)s->t[i].data)[e] = (uint8_t)rng_below(&r, 256);
      else
        tensor_set_f32(&s->t[i], e, rng_range(&r, i == 3 || i == 6 ? 0.001f : -1, 1));
    }
  }
  s->attrs[0] = attr_int("k", c->k);
  s->attrs[1] = attr_string("activation_type", "swiglu");
  s->attrs[2] = attr_int("swiglu_fusion", 1);
  s->attrs[3] = attr_int("normalize_routing_weights", 1);
  s->attrs[4] = attr_float("activation_alpha", 1.0f);
  s->attrs[5] = attr_float("activation_beta", 0.0f);
  int na = 6;
  if (bits) {
    s->attrs[na++] = attr_int("expert_weight_bits", bits);
    s->attrs[na++] = attr_int("block_size", 32);
  }
  const int n_in = bits ? 7 : 5;
  s->node = kernel_lab_node("com.microsoft", bits ? "QMoE" : "MoE", n_in, s->attrs, na);
  s->op = s->node.op;
  if (!s->op) return 0;
  tinfo ti[7];
  memset(ti, 0, sizeof ti);
  for (int i = 0; i < n_in; i++)
    if (s->t[i].data) ti[i] = op_tinfo_of(&s->t[i]);
  s->plan = aligned_alloc(OP_PLAN_ALIGN,
                          (s->op->plan_bytes + OP_PLAN_ALIGN - 1) / OP_PLAN_ALIGN * OP_PLAN_ALIGN);
  if (!s->plan) return 0;
  memset(s->plan, 0, s->op->plan_bytes);
  diag d;
  if (s->op->plan(&s->node, ti, s->plan, &d) != PH_OK) {
    fprintf(stderr, "bench_moe: %s\n", d.msg);
    return 0;
  }
  s->ctx.pool = p;
  s->ctx.plan = s->plan;
  s->ctx.scratch_bytes = s->op->scratch_bytes(&s->node, ti, threads);
  s->ctx.scratch = aligned_alloc(64, (s->ctx.scratch_bytes + 63) / 64 * 64 + 64);
  return s->ctx.scratch != NULL;
}

static void teardown(bench_setup *s) {
  for (int i = 0; i < 7; i++) free(s->t[i].data);
  free(s->y.data);
  free(s->ctx.scratch);
  free(s->plan);
}

/* Runs the op once (s: a bench_setup; the inputs are never rotated). */
static int run_once(void *arg, int i) {
  bench_setup *s = arg;
  (void)i;
  const tensor *in[7];
  for (int k = 0; k < 7; k++) in[k] = s->t[k].data ? &s->t[k] : NULL;
  tensor *out[1] = {&s->y};
  diag d;
  ph_status st = s->op->run(&s->node, in, out, &s->ctx, &d);
  if (st != PH_OK) fprintf(stderr, "bench_moe: %s: %s\n", ph_status_name(st), d.msg);
  return st == PH_OK;
}

/* The number of distinct experts the routing of this input touches (for the decode figure). */
static int64_t experts_touched(const bench_setup *s) {
  const bench_case *c = s->c;
  int used[1024] = {0};
  int64_t n = 0;
  for (int64_t t = 0; t < c->T; t++) {
    const float *l = (const float *)s->t[1].data + t * c->E;
    int taken[1024] = {0};
    for (int64_t j = 0; j < c->k; j++) {
      int64_t best = -1;
      for (int64_t e = 0; e < c->E; e++)
        if (!taken[e] && (best < 0 || l[e] > l[best])) best = e;
      taken[best] = 1;
      if (!used[best]++) n++;
    }
  }
  return n;
}

int main(int argc, char **argv) {
  kernel_lab lab;
  int rc = kernel_lab_init(&lab, "bench_moe", argc, argv);
  if (rc) return rc;
  const int bits = atoi(kernel_lab_arg(argc, argv, "--bits", "0"));
  if (bits != 0 && bits != 4 && bits != 8) {
    fprintf(stderr, "bench_moe: --bits must be 0, 4 or 8\n");
    return 2;
  }
  const double bw = lab.bw, fma = lab.fma;
  diag d;
  printf("%-12s %-7s %5s %7s %9s %7s %7s %8s %7s\n", "case", "variant", "T", "experts", "us/call",
         "GB/s", "of bw", "GFLOP/s", "of FMA");
  int failed = 0;
  for (size_t ci = 0; ci < N_CASES; ci++) {
    const bench_case *c = &CASES[ci];
    if (lab.only_case && strcmp(lab.only_case, c->name) != 0) continue;
    bench_setup s;
    if (!setup(&s, c, lab.pool, lab.threads, bits)) {
      fprintf(stderr, "bench_moe: %s: setup failed\n", c->name);
      teardown(&s);
      failed = 1;
      continue;
    }
    int64_t touched = experts_touched(&s);
    for (int vi = 0; vi < lab.nv; vi++) {
      if (kernel_force_variant(lab.vars[vi], &d) != PH_OK || !run_once(&s, 0)) {
        failed = 1;
        continue;
      }
      double sec = kernel_lab_time(run_once, &s, 1, lab.repeats);
      /* bytes per weight: bf16 2; QMoE the codes and one f32 scale per 32 */
      const double per_w = bits ? (double)bits / 8.0 + 4.0 / 32.0 : 2.0;
      double wbytes = (double)touched * 3.0 * (double)(c->I * c->H) * per_w;
      double gbs = wbytes / sec / 1e9;
      double gflops = 2.0 * (double)(c->T * c->k) * 3.0 * (double)(c->I * c->H) / sec / 1e9;
      printf("%-12s %-7s %5lld %7lld %9.1f %7.1f %7.3f %8.1f %7.3f%s\n", c->name,
             kernel_variant_name(lab.vars[vi]), (long long)c->T, (long long)touched, sec * 1e6, gbs,
             gbs / bw, gflops, gflops / fma,
             c->decode ? "  (bandwidth-bound)" : "  (compute-bound)");
    }
    teardown(&s);
  }
  printf("%s: GB/s: expert weight bytes the call touches (each read once); GFLOP/s: 2 T k 3 I "
         "H.\n",
         bits ? (bits == 4 ? "QMoE int4 block 32" : "QMoE int8 block 32") : "MoE bf16");
  pool_free(lab.pool);
  return failed;
}
