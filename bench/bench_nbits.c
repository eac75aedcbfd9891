/* bench_nbits — kernel lab for com.microsoft::MatMulNBits (src/ops/op_matmul_nbits.c): int8 and
 * int4 weights at accuracy_level 4 (int8 activations, the VNNI kernel) and 1 (f32, the scalar
 * dequantize-then-dot), on the Qwen3.5-0.8B-shaped linear layers, next to the same shapes in
 * bf16 MatMulWT and to this machine's limits measured in the same run (roofline.h: DRAM read
 * bandwidth, int8 vpdpbusd peak).
 *
 *   bench_nbits [--threads N] [--repeats N] [--variant scalar|avx2|avx512] [--case NAME]
 *               [--block 32] [--levels 4|1|both]
 *
 * Shapes: K = 1024 against N = 3584 (MLP up/gate), 6144 (GatedDeltaNet in-projection), 248320
 * (LM head), and K = 3584 against N = 1024 (MLP down); M = 1 and 16 (decode: bandwidth-bound,
 * reported as GB/s of the packed weight bytes, B plus scales, as a ratio to the bandwidth) and
 * M = 8, 24, 32 (the MLP up shape only: where the op switches from the streaming to the panel
 * kernel) and M = 512 (prefill: reported as int8 TOP/s, 2·M·N·K, as a ratio to the vpdpbusd peak).
 * Decode weights smaller than 256 MB rotate over copies, so each call reads them from DRAM; they
 * live in anonymous memory advised for huge pages. The op is called through its registry entry as
 * the executor calls it (A quantized per call, bias-free, f32 output). Medians of --repeats; the VM
 * is shared, so read the ratios, not the raw numbers; numbers are indicative.
 * "wt-bf16" rows: MatMulWT with bf16 weights and the bf16 dot (bench_matmul's mode), same shape.
 * err: max |y − float64| of 128 sampled outputs over Σ_k |a_k·w_k| (a sanity check only:
 * test_matmul_nbits holds the exact rule and the bound).
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

typedef struct nb_bench_case {
  const char *name;
  int64_t M, K, N;
} nb_bench_case;

static const nb_bench_case CASES[] = {
    {"decode-mlp-up", 1, 1024, 3584},      {"decode-gdn-in", 1, 1024, 6144},
    {"decode-mlp-down", 1, 3584, 1024},    {"decode-lm-head", 1, 1024, 248320},
    {"b16-mlp-up", 16, 1024, 3584},        {"b16-mlp-down", 16, 3584, 1024},
    {"b16-lm-head", 16, 1024, 248320},     {"b8-mlp-up", 8, 1024, 3584},
    {"b24-mlp-up", 24, 1024, 3584},        {"b32-mlp-up", 32, 1024, 3584},
    {"prefill-512", 512, 1024, 3584},      {"prefill-512-gdn", 512, 1024, 6144},
    {"prefill-512-down", 512, 3584, 1024},
};
#define N_CASES      (sizeof CASES / sizeof CASES[0])
#define ROTATE_BYTES ((size_t)256 << 20)

static void *huge_alloc(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
  madvise(p, bytes, MADV_HUGEPAGE);
#endif
  return p;
}

/* One prepared case: n_w copies of the weights (B then scales, or the bf16 W), A, y, the op. */
typedef struct nb_setup {
  const nb_bench_case *c;
  int bits, level, block, wt; /* wt: MatMulWT bf16 instead */
  int n_w;
  size_t b_bytes, s_bytes, w_bytes; /* one copy: B, scales, both */
  unsigned char *w_all;
  tensor a, b, s, y;
  gattr attrs[5];
  gnode node;
  const op_def *op;
  op_ctx ctx;
} nb_setup;

static void nb_teardown(nb_setup *s) {
  if (s->w_all) munmap(s->w_all, s->w_bytes * (size_t)s->n_w);
  free(s->a.data);
  free(s->y.data);
  free(s->ctx.scratch);
}

static int nb_setup_case(nb_setup *s, const nb_bench_case *c, int bits, int level, int block,
                         int wt, pool *p, int threads) {
  memset(s, 0, sizeof *s);
  s->c = c;
  s->bits = bits;
  s->level = level;
  s->block = block;
  s->wt = wt;
  int64_t nb = (c->K + block - 1) / block;
  if (wt) {
    s->b_bytes = (size_t)(c->N * c->K) * 2;
    s->s_bytes = 0;
  } else {
    s->b_bytes = (size_t)(c->N * nb * block * bits / 8);
    s->s_bytes = (size_t)(c->N * nb) * 4;
  }
  s->w_bytes = (s->b_bytes + s->s_bytes + 63) / 64 * 64;
  s->n_w = c->M < 64 && s->w_bytes < ROTATE_BYTES ? (int)(ROTATE_BYTES / s->w_bytes) + 1 : 1;
  s->w_all = huge_alloc(s->w_bytes * (size_t)s->n_w);
  s->a.data = malloc((size_t)(c->M * c->K) * sizeof(float));
  s->y.data = malloc((size_t)(c->M * c->N) * sizeof(float));
  if (!s->w_all || !s->a.data || !s->y.data) return 0;
  rng r = rng_seed(18);
  if (wt) {
    uint16_t *w = (uint16_t *)(void *)s->w_all;
    for (int64_t i = 0; i < c->N * c->K; i++) w[i] = f32_to_bf16(rng_range(&r, -0.1f, 0.1f));
  } else {
    for (size_t i = 0; i < s->b_bytes; i++) s->w_all[i] = (unsigned char)rng_below(&r, 256);
    float *sc = (float *)(void *)(s->w_all + s->b_bytes);
    for (int64_t i = 0; i < c->N * nb; i++) sc[i] = rng_range(&r, 0.001f, 0.02f);
  }
  for (int i = 1; i < s->n_w; i++) memcpy(s->w_all + (size_t)i * s->w_bytes, s->w_all, s->w_bytes);
  for (int64_t i = 0; i < c->M * c->K; i++) ((float *)s->a.data)[i] = rng_range(&r, -1, 1);
  s->a.dtype = PH_DTYPE_F32;
  s->a.rank = 2;
  s->a.dims[0] = c->M;
  s->a.dims[1] = c->K;
  s->y.dtype = PH_DTYPE_F32;
  s->y.rank = 2;
  s->y.dims[0] = c->M;
  s->y.dims[1] = c->N;
  tinfo ti[3];
  memset(ti, 0, sizeof ti);
  ti[0] = op_tinfo_of(&s->a);
  if (wt) {
    s->b.dtype = PH_DTYPE_BF16;
    s->b.rank = 2;
    s->b.dims[0] = c->N;
    s->b.dims[1] = c->K;
    s->attrs[0] = attr_int("bf16_dot", 1);
    s->node = kernel_lab_node("pagedhybrid.internal", "MatMulWT", 2, s->attrs, 1);
  } else {
    s->b.dtype = PH_DTYPE_U8;
    s->b.rank = 3;
    s->b.dims[0] = c->N;
    s->b.dims[1] = nb;
    s->b.dims[2] = block * bits / 8;
    s->s.dtype = PH_DTYPE_F32;
    s->s.rank = 1;
    s->s.dims[0] = c->N * nb;
    s->attrs[0] = attr_int("K", c->K);
    s->attrs[1] = attr_int("N", c->N);
    s->attrs[2] = attr_int("bits", bits);
    s->attrs[3] = attr_int("block_size", block);
    s->attrs[4] = attr_int("accuracy_level", level);
    s->node = kernel_lab_node("com.microsoft", "MatMulNBits", 3, s->attrs, 5);
    ti[2] = op_tinfo_of(&s->s);
  }
  ti[1] = op_tinfo_of(&s->b);
  s->op = s->node.op;
  if (!s->op) return 0;
  diag d;
  void *plan = NULL;
  if (s->op->plan_bytes) {
    plan = calloc(1, s->op->plan_bytes);
    if (!plan || s->op->plan(&s->node, ti, plan, &d) != PH_OK) {
      fprintf(stderr, "bench_nbits: plan: %s\n", d.msg);
      free(plan);
      return 0;
    }
  }
  s->ctx.plan = plan;
  s->ctx.pool = p;
  s->ctx.scratch_bytes = s->op->scratch_bytes(&s->node, ti, threads);
  s->ctx.scratch = aligned_alloc(64, (s->ctx.scratch_bytes + 63) / 64 * 64 + 64);
  return s->ctx.scratch != NULL;
}

static int nb_run_once(void *arg, int i) {
  nb_setup *s = arg;
  unsigned char *w = s->w_all + (size_t)(i % s->n_w) * s->w_bytes;
  s->b.data = w;
  s->s.data = w + s->b_bytes;
  const tensor *in[3] = {&s->a, &s->b, &s->s};
  tensor *out[1] = {&s->y};
  diag d;
  ph_status st = s->op->run(&s->node, in, out, &s->ctx, &d);
  if (st != PH_OK) fprintf(stderr, "bench_nbits: %s: %s\n", ph_status_name(st), d.msg);
  return st == PH_OK;
}

/* max |y − float64| / Σ|a·w| over 128 sampled outputs (weights of copy 0) */
static double nb_validate(nb_setup *s) {
  const nb_bench_case *c = s->c;
  rng r = rng_seed(5);
  double worst = 0;
  int64_t nb = (c->K + s->block - 1) / s->block, blob = s->block * s->bits / 8;
  const float *a = s->a.data, *y = s->y.data;
  const float *sc = (const float *)(const void *)(s->w_all + s->b_bytes);
  for (int i = 0; i < 128; i++) {
    int64_t m = (int64_t)rng_below(&r, (uint64_t)c->M), n = (int64_t)rng_below(&r, (uint64_t)c->N);
    double sum = 0, mag = 0;
    for (int64_t k = 0; k < c->K; k++) {
      double w;
      if (s->wt) {
        w = bf16_to_f32(((const uint16_t *)(const void *)s->w_all)[n * c->K + k]);
      } else {
        const unsigned char *p = s->w_all + n * nb * blob + (k / s->block) * blob;
        int64_t j = k % s->block;
        int q = s->bits == 8 ? p[j] : (p[j / 2] >> ((j % 2) * 4)) & 15;
        w = (double)(q - (1 << (s->bits - 1))) * sc[n * nb + k / s->block];
      }
      double av = s->wt ? bf16_to_f32(f32_to_bf16(a[m * c->K + k])) : a[m * c->K + k];
      sum += av * w;
      mag += fabs(av * w);
    }
    double e = fabs((double)y[m * c->N + n] - sum) / (mag > 0 ? mag : 1e-30);
    if (!(e <= worst)) worst = e;
  }
  return worst;
}

int main(int argc, char **argv) {
  kernel_lab lab;
  int rc = kernel_lab_init(&lab, "bench_nbits", argc, argv);
  if (rc) return rc;
  const int block = atoi(kernel_lab_arg(argc, argv, "--block", "32"));
  const char *levels = kernel_lab_arg(argc, argv, "--levels", "4");
  if (block < 16 || (block & (block - 1)) ||
      (strcmp(levels, "4") && strcmp(levels, "1") && strcmp(levels, "both"))) {
    fprintf(stderr, "bench_nbits: --block a power of two >= 16, --levels 4|1|both\n");
    return 2;
  }
  const double i8peak = roofline_int8dot(lab.threads);
  printf("machine   int8 dot (vpdpbusd) %.1f GOP/s (measured now; 0: no AVX-512 VNNI)\n", i8peak);
  printf("%-17s %-7s %-7s %4s %12s %10s %7s %6s %7s %7s %9s\n", "case", "weights", "variant", "M",
         "K x N", "us/call", "GB/s", "of bw", "GOP/s", "of i8pk", "err");
  int failed = 0;
  diag d;
  /* rows: int8 L4, int4 L4, (int8 L1, int4 L1), bf16 MatMulWT */
  struct {
    int bits, level, wt;
    const char *label;
  } rows[] = {{8, 4, 0, "int8-L4"},
              {4, 4, 0, "int4-L4"},
              {8, 1, 0, "int8-L1"},
              {4, 1, 0, "int4-L1"},
              {16, 0, 1, "wt-bf16"}};
  for (size_t ci = 0; ci < N_CASES; ci++) {
    const nb_bench_case *c = &CASES[ci];
    if (lab.only_case && strcmp(lab.only_case, c->name) != 0) continue;
    for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
      int lv = rows[ri].level;
      if (!rows[ri].wt && ((lv == 4 && !strcmp(levels, "1")) || (lv == 1 && !strcmp(levels, "4"))))
        continue;
      /* level 1 is the scalar reference: skip the long prefill and LM-head runs */
      if (lv == 1 && (c->M > 16 || c->N > 100000)) continue;
      nb_setup s;
      if (!nb_setup_case(&s, c, rows[ri].bits, lv, block, rows[ri].wt, lab.pool, lab.threads)) {
        fprintf(stderr, "bench_nbits: %s: setup failed\n", c->name);
        nb_teardown(&s);
        failed = 1;
        continue;
      }
      for (int vi = 0; vi < lab.nv; vi++) {
        if (vi != lab.nv - 1) continue; /* the best variant listed (--variant picks one) */
        if (kernel_force_variant(lab.vars[vi], &d) != PH_OK || !nb_run_once(&s, 0)) {
          failed = 1;
          continue;
        }
        double err = nb_validate(&s);
        double sec = kernel_lab_time(nb_run_once, &s, s.n_w, lab.repeats);
        double gbs = (double)(s.b_bytes + s.s_bytes) / sec / 1e9;
        double gops = 2.0 * (double)c->M * (double)c->N * (double)c->K / sec / 1e9;
        char dims[32];
        snprintf(dims, sizeof dims, "%lldx%lld", (long long)c->K, (long long)c->N);
        printf("%-17s %-7s %-7s %4lld %12s %10.1f %7.1f %6.3f %7.1f %7.3f %9.2e\n", c->name,
               rows[ri].label, kernel_variant_name(lab.vars[vi]), (long long)c->M, dims, sec * 1e6,
               gbs, gbs / lab.bw, gops, i8peak > 0 ? gops / i8peak : 0.0, err);
        fflush(stdout);
        if (!(err <= 0.05)) failed = 1;
      }
      free((void *)s.ctx.plan);
      nb_teardown(&s);
    }
  }
  printf("GB/s: packed weight bytes (B + f32 scales; bf16 W for wt-bf16) per second; of bw: of the "
         "DRAM read bandwidth measured now. GOP/s: 2·M·N·K per second; of i8pk: of the vpdpbusd "
         "peak measured now. block %d, no zero points. Only the last variant listed is timed.\n",
         block);
  pool_free(lab.pool);
  return failed;
}
