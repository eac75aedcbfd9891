/* bench_matmul — kernel lab for MatMulWT (y [M, N] = A [M, K] W[N, K]^T): every kernel variant
 * this CPU runs (kernels/dispatch.h: scalar reference, avx2, avx512), each validated against
 * float64 and timed on the shapes that dominate a Qwen3.5-0.8B-shaped model, next to this machine's
 * DRAM bandwidth and fp32 FMA peak measured in the same run (roofline.h).
 *
 *   bench_matmul [--threads N] [--repeats N] [--variant scalar|avx2|avx512] [--case NAME]
 *                [--precision f32|bf16|both]
 *
 * Every case runs in the precision modes asked (default both; docs/precision.md): f32 (f32
 * FMA, reported against the fp32 FMA peak) and bf16 (A rounded to bf16, vdpbf16ps where the CPU
 * has it, reported against the bf16-dot peak roofline_bf16dot measured in the same run; the
 * "of peak" column is against the mode's own peak). The 0.8B model's shapes: K = 1024 against
 * N = 3584 (MLP up/gate), 6144 (GatedDeltaNet in-projection), 248320 (LM head), and K = 3584
 * against N = 1024 (MLP down), at M = 1, 4, 16, 64, 512 rows (the LM head to 64: the engine
 * computes only each sequence's last row).
 *
 * Cases: decode-like (M = 1: bandwidth-bound, reported as weight GB/s vs bandwidth) and
 * prefill-like (M = 64, 512: compute-bound, GFLOP/s vs the fp32 FMA peak). Decode shapes small
 * enough to stay in the last-level cache rotate over copies of W totalling >= 256 MB, as the
 * layers of a model do, so every call reads W from DRAM. Weights live in anonymous memory
 * advised for huge pages (the best case; a plain file mapping reads slower, machine.md). The
 * op is called through its registry entry, exactly as the executor calls it (A staged to f32,
 * bias, output rounding included). Each figure is the median of --repeats samples; the VM is
 * shared, so compare ratios to the limits measured in the same run, not raw numbers.
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
  int64_t M, K, N;
  ph_dtype w_dtype;
  int decode; /* 1: report bandwidth, 0: report FLOP rate */
} bench_case;

static const bench_case CASES[] = {
    {"decode-mlp-up", 1, 1024, 3584, PH_DTYPE_BF16, 1},
    {"decode-mlp-down", 1, 3584, 1024, PH_DTYPE_BF16, 1},
    {"decode-gdn-in", 1, 1024, 6144, PH_DTYPE_BF16, 1},
    {"decode-lm-head", 1, 1024, 248320, PH_DTYPE_BF16, 1},
    {"decode-f16", 1, 1024, 3584, PH_DTYPE_F16, 1},
    {"decode-f32", 1, 1024, 3584, PH_DTYPE_F32, 1},
    {"b4-mlp-up", 4, 1024, 3584, PH_DTYPE_BF16, 1},
    {"b4-lm-head", 4, 1024, 248320, PH_DTYPE_BF16, 1},
    {"b16-mlp-up", 16, 1024, 3584, PH_DTYPE_BF16, 0},
    {"b16-lm-head", 16, 1024, 248320, PH_DTYPE_BF16, 0},
    {"b64-mlp-up", 64, 1024, 3584, PH_DTYPE_BF16, 0},
    {"b64-gdn-in", 64, 1024, 6144, PH_DTYPE_BF16, 0},
    {"b64-mlp-down", 64, 3584, 1024, PH_DTYPE_BF16, 0},
    {"b64-lm-head", 64, 1024, 248320, PH_DTYPE_BF16, 0},
    {"prefill-512", 512, 1024, 3584, PH_DTYPE_BF16, 0},
    {"prefill-512-gdn", 512, 1024, 6144, PH_DTYPE_BF16, 0},
    {"prefill-512-down", 512, 3584, 1024, PH_DTYPE_BF16, 0},
};
#define N_CASES (sizeof CASES / sizeof CASES[0])

#define ROTATE_BYTES ((size_t)256 << 20)

static void *huge_alloc(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
  madvise(p, bytes, MADV_HUGEPAGE);
#endif
  return p;
}

/* One prepared case: n_w copies of W (same values), A, y, the op and its scratch. */
typedef struct bench_setup {
  const bench_case *c;
  int n_w;
  size_t w_bytes; /* one copy */
  unsigned char *w_all;
  tensor a, w, y;
  const op_def *op;
  gattr attr; /* bf16_dot */
  gnode node;
  op_ctx ctx;
} bench_setup;

static int setup(bench_setup *s, const bench_case *c, pool *p, int threads, int bf16) {
  memset(s, 0, sizeof *s);
  s->c = c;
  s->w_bytes = (size_t)(c->N * c->K) * dtype_size(c->w_dtype);
  s->n_w = c->decode && s->w_bytes < ROTATE_BYTES ? (int)(ROTATE_BYTES / s->w_bytes) + 1 : 1;
  s->w_all = huge_alloc(s->w_bytes * (size_t)s->n_w);
  s->a.data = malloc((size_t)(c->M * c->K) * sizeof(float));
  s->y.data = malloc((size_t)(c->M * c->N) * sizeof(float));
  if (!s->w_all || !s->a.data || !s->y.data) return 0;
  rng r = rng_seed(7);
  s->w.dtype = c->w_dtype;
  s->w.rank = 2;
  s->w.dims[0] = c->N;
  s->w.dims[1] = c->K;
  s->w.data = s->w_all;
  for (int64_t i = 0; i < c->N * c->K; i++) tensor_set_f32(&s->w, i, rng_range(&r, -1, 1));
  for (int i = 1; i < s->n_w; i++) memcpy(s->w_all + (size_t)i * s->w_bytes, s->w_all, s->w_bytes);
  s->a.dtype = PH_DTYPE_F32;
  s->a.rank = 2;
  s->a.dims[0] = c->M;
  s->a.dims[1] = c->K;
  for (int64_t i = 0; i < c->M * c->K; i++) ((float *)s->a.data)[i] = rng_range(&r, -1, 1);
  s->y.dtype = PH_DTYPE_F32;
  s->y.rank = 2;
  s->y.dims[0] = c->M;
  s->y.dims[1] = c->N;
  s->attr = attr_int("bf16_dot", bf16);
  s->node = kernel_lab_node("pagedhybrid.internal", "MatMulWT", 2, &s->attr, 1);
  s->op = s->node.op;
  if (!s->op) return 0;
  tinfo ti[2];
  memset(ti, 0, sizeof ti);
  ti[0] = op_tinfo_of(&s->a);
  ti[1] = op_tinfo_of(&s->w);
  s->ctx.pool = p;
  s->ctx.scratch_bytes = s->op->scratch_bytes(&s->node, ti, threads);
  s->ctx.scratch = aligned_alloc(64, (s->ctx.scratch_bytes + 63) / 64 * 64 + 64);
  return s->ctx.scratch != NULL;
}

static void teardown(bench_setup *s) {
  if (s->w_all) munmap(s->w_all, s->w_bytes * (size_t)s->n_w);
  free(s->a.data);
  free(s->y.data);
  free(s->ctx.scratch);
}

/* Runs the op once on W copy i (s: a bench_setup). */
static int run_once(void *arg, int i) {
  bench_setup *s = arg;
  s->w.data = s->w_all + (size_t)(i % s->n_w) * s->w_bytes;
  const tensor *in[2] = {&s->a, &s->w};
  tensor *out[1] = {&s->y};
  diag d;
  ph_status st = s->op->run(&s->node, in, out, &s->ctx, &d);
  if (st != PH_OK) fprintf(stderr, "bench_matmul: %s: %s\n", ph_status_name(st), d.msg);
  return st == PH_OK;
}

/* Largest error of 256 sampled outputs against float64, in units of u * sum |a w|; in bf16 mode
 * against the products of the bf16-rounded A and W (what the mode computes). */
static double validate(bench_setup *s, int bf16) {
  const bench_case *c = s->c;
  rng r = rng_seed(9);
  double worst = 0;
  const float *a = s->a.data, *y = s->y.data;
  for (int i = 0; i < 256; i++) {
    int64_t m = (int64_t)rng_below(&r, (uint64_t)c->M), n = (int64_t)rng_below(&r, (uint64_t)c->N);
    double sum = 0, mag = 0;
    for (int64_t k = 0; k < c->K; k++) {
      float av = a[m * c->K + k], wv = tensor_get_f32(&s->w, n * c->K + k);
      if (bf16) {
        av = bf16_to_f32(f32_to_bf16(av));
        wv = bf16_to_f32(f32_to_bf16(wv));
      }
      double p = (double)av * (double)wv;
      sum += p;
      mag += fabs(p);
    }
    double e = fabs((double)y[m * c->N + n] - sum) / (ldexp(1.0, -24) * (mag > 0 ? mag : 1e-30));
    if (e > worst) worst = e;
  }
  return worst;
}

int main(int argc, char **argv) {
  kernel_lab lab;
  int rc = kernel_lab_init(&lab, "bench_matmul", argc, argv);
  if (rc) return rc;
  const double bw = lab.bw, fma = lab.fma;
  const char *prec = kernel_lab_arg(argc, argv, "--precision", "both");
  const int mode0 = strcmp(prec, "bf16") == 0, mode1 = strcmp(prec, "f32") == 0 ? 0 : 1;
  if (strcmp(prec, "both") && strcmp(prec, "f32") && strcmp(prec, "bf16")) {
    fprintf(stderr, "bench_matmul: --precision %s: expected f32, bf16 or both\n", prec);
    return 2;
  }
  const double bf16dot = roofline_bf16dot(lab.threads);
  printf("machine   bf16 dot (vdpbf16ps) %.1f GFLOP/s = %.2f x the fp32 FMA peak (measured now; "
         "0: no AVX-512 BF16)\n",
         bf16dot, fma > 0 ? bf16dot / fma : 0.0);
  diag d;
  printf("%-16s %-4s %-7s %5s %11s %9s %7s %6s %7s %7s %8s\n", "case", "mode", "variant", "M",
         "K x N", "us/call", "GB/s", "of bw", "GFLOP/s", "of peak", "err (u)");
  int failed = 0;
  for (size_t ci = 0; ci < N_CASES; ci++)
    for (int bf16 = mode0; bf16 <= mode1; bf16++) {
      const bench_case *c = &CASES[ci];
      if (lab.only_case && strcmp(lab.only_case, c->name) != 0) continue;
      const double peak = bf16 && bf16dot > 0 ? bf16dot : fma;
      bench_setup s;
      if (!setup(&s, c, lab.pool, lab.threads, bf16)) {
        fprintf(stderr, "bench_matmul: %s: out of memory\n", c->name);
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
        double err = validate(&s, bf16);
        double sec = kernel_lab_time(run_once, &s, s.n_w, lab.repeats);
        double bytes = (double)s.w_bytes + 4.0 * (double)(c->M * c->K + c->M * c->N);
        double gbs = bytes / sec / 1e9, gflops = 2.0 * c->M * c->N * c->K / sec / 1e9;
        if (vi == 0) base = sec;
        char dims[32];
        snprintf(dims, sizeof dims, "%lldx%lld", (long long)c->K, (long long)c->N);
        printf("%-16s %-4s %-7s %5lld %11s %9.1f %7.1f %6.3f %7.1f %7.3f %8.2f", c->name,
               bf16 ? "bf16" : "f32", kernel_variant_name(lab.vars[vi]), (long long)c->M, dims,
               sec * 1e6, gbs, gbs / bw, gflops, gflops / peak, err);
        if (vi > 0) printf("  x%.1f", base / sec);
        printf("%s\n", c->decode ? "  (bandwidth-bound)" : "  (compute-bound)");
        /* a loose sanity check; test_matmul_wt holds the exact bounds */
        if (!(err <= 64.0 + c->K / 16)) failed = 1;
      }
      teardown(&s);
    }
  printf("x N: speedup over the first variant listed. of peak: of the fp32 FMA peak (f32 mode) or "
         "the bf16-dot peak (bf16 mode). err: max |y - float64| over 256 sampled outputs, in u * "
         "sum |a w| (u = 2^-24; bf16 mode: of the bf16-rounded operands).\n");
  pool_free(lab.pool);
  return failed;
}
