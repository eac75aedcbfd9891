/* roofline — this machine's limits, measured in the same run as the thing compared with them
 * (../shared/spec/machine.md: the VM's throughput moves 10–50 % minute to minute, so a ratio to
 * a number measured yesterday means little).
 *
 *   roofline_bandwidth(threads)  DRAM read GB/s: 4 concurrent streams per thread over 1 GiB of
 *                                huge-page-advised anonymous memory, median of 5
 *   roofline_fma(threads)        fp32 FMA GFLOP/s: 16 independent 16-lane chains per thread
 *   roofline_bf16dot(threads)    bf16 dot GFLOP/s (vdpbf16ps: 32 multiply-adds per lane-pair
 *                                vector, 64 flops per instruction): 16 independent chains per
 *                                thread; 0 when the CPU has no AVX-512 BF16
 *   roofline_int8dot(threads)    int8 dot GOP/s (vpdpbusd: 64 u8 x s8 products summed into 16
 *                                int32 lanes, 128 ops per instruction): 16 independent chains
 *                                per thread; 0 when the CPU has no AVX-512 VNNI
 *
 * Header-only, for bench/ programs (compiled with -O3 -march=native). Not part of the library.
 */
#ifndef PH_BENCH_ROOFLINE_H
#define PH_BENCH_ROOFLINE_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static inline double roofline_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int roofline_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static inline double roofline_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, roofline_cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef float roofline_v16 __attribute__((vector_size(64)));

typedef struct roofline_job {
  const float *data;
  size_t n; /* floats */
  double result;
  int iters;
} roofline_job;

/* Reads n floats as 4 concurrent streams (quarters of the range). */
static inline void *roofline_read(void *arg) {
  roofline_job *j = arg;
  const roofline_v16 *p = (const roofline_v16 *)j->data;
  size_t nv = j->n / 16, q = nv / 4;
  roofline_v16 a = {0}, b = {0}, c = {0}, d = {0};
  for (size_t i = 0; i < q; i++) {
    a += p[i];
    b += p[q + i];
    c += p[2 * q + i];
    d += p[3 * q + i];
  }
  roofline_v16 s = a + b + c + d;
  double r = 0;
  for (int k = 0; k < 16; k++) r += s[k];
  j->result = r;
  return NULL;
}

static inline double roofline_bandwidth(int threads) {
  const size_t bytes = (size_t)1 << 30;
  float *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buf == MAP_FAILED) return 0;
#ifdef MADV_HUGEPAGE
  madvise(buf, bytes, MADV_HUGEPAGE);
#endif
  memset(buf, 1, bytes);
  double gbs[5];
  roofline_job jobs[16];
  pthread_t tid[16];
  if (threads > 16) threads = 16;
  size_t per = bytes / sizeof(float) / (size_t)threads;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = roofline_now();
    for (int t = 0; t < threads; t++) {
      jobs[t].data = buf + (size_t)t * per;
      jobs[t].n = per;
      pthread_create(&tid[t], NULL, roofline_read, &jobs[t]);
    }
    for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
    gbs[rep] = (double)bytes / (roofline_now() - t0) / 1e9;
  }
  munmap(buf, bytes);
  return roofline_median(gbs, 5);
}

static inline void *roofline_fma_job(void *arg) {
  roofline_job *j = arg;
  roofline_v16 acc[16];
  roofline_v16 x, y;
  for (int k = 0; k < 16; k++) {
    x[k] = 1.0f + 1e-7f * (float)k;
    y[k] = 0.999999f;
  }
  for (int i = 0; i < 16; i++) acc[i] = x * (float)(i + 1);
  for (int it = 0; it < j->iters; it++)
    for (int i = 0; i < 16; i++) acc[i] = acc[i] * y + x;
  double r = 0;
  for (int i = 0; i < 16; i++)
    for (int k = 0; k < 16; k++) r += acc[i][k];
  j->result = r;
  return NULL;
}

/* GFLOP/s of `threads` threads each running job (20M iterations of 16 chains x 16 lanes, each
 * instruction worth flops_per_lane FLOP per lane), the median of 5. */
static inline double roofline_peak(int threads, void *(*job)(void *), int flops_per_lane) {
  double g[5];
  roofline_job jobs[16];
  pthread_t tid[16];
  if (threads > 16) threads = 16;
  const int iters = 20 * 1000 * 1000;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = roofline_now();
    for (int t = 0; t < threads; t++) {
      jobs[t].iters = iters;
      pthread_create(&tid[t], NULL, job, &jobs[t]);
    }
    for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
    g[rep] = (double)iters * 16 * 16 * flops_per_lane * threads / (roofline_now() - t0) / 1e9;
  }
  return roofline_median(g, 5);
}

/* 2 FLOP per lane per FMA */
static inline double roofline_fma(int threads) {
  return roofline_peak(threads, roofline_fma_job, 2);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

__attribute__((target("avx512f,avx512bf16"))) static inline void *roofline_bf16dot_job(void *arg) {
  roofline_job *j = arg;
  __m512 acc[16];
  __m512i x = _mm512_set1_epi32(0x3f803f80), y = _mm512_set1_epi32(0x3f7f3f7f);
  for (int i = 0; i < 16; i++) acc[i] = _mm512_set1_ps((float)i);
  for (int it = 0; it < j->iters; it++)
    for (int i = 0; i < 16; i++) acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)x, (__m512bh)y);
  __m512 s = acc[0];
  for (int i = 1; i < 16; i++) s = _mm512_add_ps(s, acc[i]);
  j->result = (double)_mm512_reduce_add_ps(s);
  return NULL;
}

/* 2 pairs x 2 FLOP per lane per instruction */
static inline double roofline_bf16dot(int threads) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16")) return 0;
  return roofline_peak(threads, roofline_bf16dot_job, 4);
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static inline void *
roofline_int8dot_job(void *arg) {
  roofline_job *j = arg;
  __m512i acc[16];
  __m512i x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(-1);
  for (int i = 0; i < 16; i++) acc[i] = _mm512_set1_epi32(i);
  for (int it = 0; it < j->iters; it++)
    for (int i = 0; i < 16; i++) acc[i] = _mm512_dpbusd_epi32(acc[i], x, y);
  __m512i s = acc[0];
  for (int i = 1; i < 16; i++) s = _mm512_add_epi32(s, acc[i]);
  j->result = (double)_mm512_reduce_add_epi32(s);
  return NULL;
}

/* int8 dot (vpdpbusd) in GOP/s: 4 products and 4 adds per lane per instruction; 0 without
 * AVX-512 VNNI */
static inline double roofline_int8dot(int threads) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512vnni")) return 0;
  return roofline_peak(threads, roofline_int8dot_job, 8);
}
#else
static inline double roofline_bf16dot(int threads) {
  (void)threads;
  return 0;
}
static inline double roofline_int8dot(int threads) {
  (void)threads;
  return 0;
}
#endif

#endif /* PH_BENCH_ROOFLINE_H */
