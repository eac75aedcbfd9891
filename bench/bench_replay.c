/* bench_replay — the replay half of a speculative commit (paged_session_commit: for every linear
 * layer, state_replay_conv then state_replay_recurrent, kernels/state_replay.h) on one sequence
 * at the Qwen3.5-0.8B state geometry, next to this machine's DRAM bandwidth measured in the
 * same run (roofline.h).
 *
 *   bench_replay [--threads N] [--repeats N] [--seqs N]
 *
 * Geometry: 18 linear layers; conv state [6144][3] bf16 (conv_dim 2·Hk·Dk + Hv·Dv, K - 1 = 3);
 * recurrent state f32 [Hv 16][Dv 128][Dk 128] (1 MiB a layer); capacity C = 8 (a capsule slot:
 * Hv + Hk·Dk + Hv·Dv floats). For a = 1..8 replayed slots (a commit keeps a = accepted + 1
 * tokens; when it keeps every token it takes the op's final state and replays nothing), one
 * commit's replay is timed over --seqs sequences' buffers in turn (default 8, about 330 MB: each
 * commit reads its state from DRAM, as at a batch whose states do not fit the cache), median of
 * --repeats. Reported per commit, per replayed token, and as GB/s of two byte counts:
 *   state  the bytes a replay cannot avoid: the published state read, the new state written, the
 *          a captured slots read (every layer)
 *   loop   the bytes the kernel's loop order touches: the copy (read + write), then each slot a
 *          pass over the layer's 1 MiB recurrent state (read + write), conv as above
 * against the bandwidth of 1 thread (the commit runs on the stepping thread) and of --threads.
 * Next to it, a one-pass replay local to this file (head outermost, FMA instructions; its bits
 * checked equal to the library's): what the kernel could cost. Timing only; the library's
 * arithmetic is tested in test_gdn_capture.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/state_replay.h"
#include "roofline.h"

#define L_LAYERS 18
#define HV       16
#define HK       16
#define DK       128
#define DV       128
#define CONV_DIM (2 * HK * DK + HV * DV)
#define WIDTH    3
#define CAP      8
#define SLOT     (HV + HK * DK + HV * DV) /* floats per capsule slot */
#define REC      ((int64_t)HV * DV * DK)  /* floats per layer's recurrent state */

static const char *arg_value(int argc, char **argv, const char *name, const char *def) {
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], name) == 0) return argv[i + 1];
  return def;
}

typedef struct seq_bufs {
  float *rec_src, *rec_dst, *capsule;     /* [L][REC], [L][REC], [L][CAP * SLOT] */
  uint16_t *conv_src, *conv_dst, *values; /* [L][CONV_DIM][WIDTH] x 2, [L][CAP][CONV_DIM] bf16 */
} seq_bufs;

static void *alloc_touch(size_t bytes) {
  void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (p) memset(p, 0, bytes);
  return p;
}

/* Finite, decaying values: decay in (0.9, 1), small keys and deltas; the state stays bounded. */
static void fill(seq_bufs *s, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < (int64_t)L_LAYERS * REC; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    s->rec_src[i] = (float)((double)(x >> 40) / (double)(1 << 24) - 0.5);
  }
  for (int l = 0; l < L_LAYERS; l++) {
    float *c = s->capsule + (int64_t)l * CAP * SLOT;
    for (int64_t i = 0; i < (int64_t)CAP * SLOT; i++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      const float u = (float)((double)(x >> 40) / (double)(1 << 24));
      c[i] = i < CAP * HV ? 0.9f + 0.1f * u : 0.05f * (u - 0.5f);
    }
  }
  for (int64_t i = 0; i < (int64_t)L_LAYERS * CONV_DIM * WIDTH; i++) s->conv_src[i] = 0x3f80;
  for (int64_t i = 0; i < (int64_t)L_LAYERS * CAP * CONV_DIM; i++) s->values[i] = 0x3f00;
}

/* For comparison only, not the library's: the same arithmetic (fmaf(key, delta, state ·
 * decay), slots in order) with the head outermost, so each 64 KiB head stays in L1/L2 while all
 * a slots are applied, compiled as bench/ is (-O3 -march=native: fmaf becomes the FMA
 * instruction instead of a libm call at the library's baseline x86-64). main checks its bits
 * against the library's. */
static void replay_recurrent_onepass(const float *src, float *dst, const float *capsule,
                                     int64_t a) {
  const float *decay = capsule, *key = capsule + CAP * HV, *delta = key + CAP * HK * DK;
  for (int64_t hv = 0; hv < HV; hv++) {
    const float *S0 = src + hv * DV * DK;
    float *S = dst + hv * DV * DK;
    for (int64_t c = 0; c < DV; c++) {
      float row[DK];
      memcpy(row, S0 + c * DK, sizeof row);
      for (int64_t t = 0; t < a; t++) {
        const float al = decay[t * HV + hv], u = delta[(t * HV + hv) * DV + c];
        const float *k = key + (t * HK + hv / (HV / HK)) * DK;
        for (int64_t r = 0; r < DK; r++) row[r] = fmaf(k[r], u, row[r] * al);
      }
      memcpy(S + c * DK, row, sizeof row);
    }
  }
}

static void replay_seq_onepass(seq_bufs *s, int64_t a) {
  for (int l = 0; l < L_LAYERS; l++) {
    state_replay_conv(s->conv_src + (int64_t)l * CONV_DIM * WIDTH,
                      s->conv_dst + (int64_t)l * CONV_DIM * WIDTH,
                      s->values + (int64_t)l * CAP * CONV_DIM, CONV_DIM, WIDTH, a, PH_DTYPE_BF16);
    replay_recurrent_onepass(s->rec_src + (int64_t)l * REC, s->rec_dst + (int64_t)l * REC,
                             s->capsule + (int64_t)l * CAP * SLOT, a);
  }
}

/* One commit's replay of a slots: what paged_session_commit does for one sequence. */
static void replay_seq(seq_bufs *s, int64_t a) {
  for (int l = 0; l < L_LAYERS; l++) {
    state_replay_conv(s->conv_src + (int64_t)l * CONV_DIM * WIDTH,
                      s->conv_dst + (int64_t)l * CONV_DIM * WIDTH,
                      s->values + (int64_t)l * CAP * CONV_DIM, CONV_DIM, WIDTH, a, PH_DTYPE_BF16);
    state_replay_recurrent(s->rec_src + (int64_t)l * REC, s->rec_dst + (int64_t)l * REC,
                           s->capsule + (int64_t)l * CAP * SLOT, CAP, HV, HK, DK, DV, a);
  }
}

int main(int argc, char **argv) {
  const int threads = atoi(arg_value(argc, argv, "--threads", "2"));
  const int repeats = atoi(arg_value(argc, argv, "--repeats", "7"));
  const int n_seqs = atoi(arg_value(argc, argv, "--seqs", "8"));
  if (threads < 1 || threads > 16 || repeats < 1 || repeats > 31 || n_seqs < 1 || n_seqs > 64) {
    fprintf(stderr, "usage: bench_replay [--threads 1..16] [--repeats 1..31] [--seqs 1..64]\n");
    return 2;
  }
  seq_bufs *seqs = calloc((size_t)n_seqs, sizeof *seqs);
  if (!seqs) return 1;
  for (int q = 0; q < n_seqs; q++) {
    seq_bufs *s = &seqs[q];
    s->rec_src = alloc_touch((size_t)L_LAYERS * REC * sizeof(float));
    s->rec_dst = alloc_touch((size_t)L_LAYERS * REC * sizeof(float));
    s->capsule = alloc_touch((size_t)L_LAYERS * CAP * SLOT * sizeof(float));
    s->conv_src = alloc_touch((size_t)L_LAYERS * CONV_DIM * WIDTH * 2);
    s->conv_dst = alloc_touch((size_t)L_LAYERS * CONV_DIM * WIDTH * 2);
    s->values = alloc_touch((size_t)L_LAYERS * CAP * CONV_DIM * 2);
    if (!s->rec_src || !s->rec_dst || !s->capsule || !s->conv_src || !s->conv_dst || !s->values) {
      fprintf(stderr, "bench_replay: out of memory\n");
      return 1;
    }
    fill(s, (uint64_t)q);
  }
  fprintf(stderr, "bench_replay: measuring this machine's limits ...\n");
  const double bw1 = roofline_bandwidth(1), bwn = roofline_bandwidth(threads);

  const double rec_b = (double)REC * 4, conv_b = (double)CONV_DIM * WIDTH * 2;
  const double slot_b = (double)SLOT * 4 + (double)CONV_DIM * 2;
  printf("geometry  %d linear layers: recurrent state %.2f MB, conv state %.1f KB a layer; "
         "a captured slot %.1f KB a layer; state %.1f MB a sequence\n",
         L_LAYERS, rec_b / 1e6, conv_b / 1e3, slot_b / 1e3, L_LAYERS * (rec_b + conv_b) / 1e6);
  printf("machine   DRAM read %.1f GB/s on 1 thread, %.1f GB/s on %d threads (measured in this "
         "run)\n",
         bw1, bwn, threads);
  printf("replay    a   ms/commit  ms/token   state MB   GB/s  of 1-thr bw  of %d-thr bw    "
         "loop MB   GB/s   one-pass ms  GB/s  of 1-thr bw\n",
         threads);
  double sink = 0;
  float *check = malloc((size_t)L_LAYERS * REC * sizeof(float));
  if (!check) return 1;
  for (int64_t a = 1; a <= CAP; a++) {
    double t[31], u[31];
    replay_seq(&seqs[0], a); /* warm the code */
    for (int r = 0; r < repeats; r++) {
      const double t0 = roofline_now();
      for (int q = 0; q < n_seqs; q++) replay_seq(&seqs[q], a);
      t[r] = (roofline_now() - t0) / n_seqs;
    }
    memcpy(check, seqs[0].rec_dst, (size_t)L_LAYERS * REC * sizeof(float));
    for (int r = 0; r < repeats; r++) {
      const double t0 = roofline_now();
      for (int q = 0; q < n_seqs; q++) replay_seq_onepass(&seqs[q], a);
      u[r] = (roofline_now() - t0) / n_seqs;
    }
    if (memcmp(check, seqs[0].rec_dst, (size_t)L_LAYERS * REC * sizeof(float)) != 0) {
      fprintf(stderr, "bench_replay: the one-pass replay differs from the library's at a = %lld\n",
              (long long)a);
      return 1;
    }
    const double sec = roofline_median(t, repeats), sec1 = roofline_median(u, repeats);
    sink += seqs[0].rec_dst[a];
    const double state = L_LAYERS * (2 * rec_b + 2 * conv_b + (double)a * slot_b);
    const double loop =
        L_LAYERS * ((2.0 + 2.0 * (double)a) * rec_b + 2 * conv_b + (double)a * slot_b);
    printf(
        "          %lld  %9.3f  %8.3f  %9.1f  %5.1f  %11.3f  %11.3f  %9.1f  %5.1f  %12.3f  %4.1f  "
        "%11.3f\n",
        (long long)a, sec * 1e3, sec * 1e3 / (double)a, state / 1e6, state / sec / 1e9,
        state / sec / 1e9 / bw1, state / sec / 1e9 / bwn, loop / 1e6, loop / sec / 1e9, sec1 * 1e3,
        state / sec1 / 1e9, state / sec1 / 1e9 / bw1);
  }
  free(check);
  printf("(median of %d repeats over %d sequences' buffers; checksum %g)\n", repeats, n_seqs, sink);
  for (int q = 0; q < n_seqs; q++) {
    free(seqs[q].rec_src);
    free(seqs[q].rec_dst);
    free(seqs[q].capsule);
    free(seqs[q].conv_src);
    free(seqs[q].conv_dst);
    free(seqs[q].values);
  }
  free(seqs);
  return 0;
}
