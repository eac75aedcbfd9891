/* rng — small deterministic random numbers (splitmix64 seeding a xoshiro256** stream).
 *
 * Same seed, same sequence, on every platform: used for tiny-model weights and randomized
 * tests, never for anything secret. Header-only, no state outside the struct.
 */
#ifndef PH_BASE_RNG_H
#define PH_BASE_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct rng {
  uint64_t s[4];
} rng;

static inline uint64_t rng_splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static inline rng rng_seed(uint64_t seed) {
  rng r;
  for (int i = 0; i < 4; i++) r.s[i] = rng_splitmix64(&seed);
  return r;
}

static inline uint64_t rng_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t rng_next(rng *r) {
  uint64_t *s = r->s;
  uint64_t result = rng_rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rng_rotl(s[3], 45);
  return result;
}

/* Uniform in [0, 1) with 24 random bits: exactly representable in f32. */
static inline float rng_uniform(rng *r) {
  return (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

/* Uniform in [lo, hi). */
static inline float rng_range(rng *r, float lo, float hi) {
  return lo + (hi - lo) * rng_uniform(r);
}

/* Uniform integer in [0, n), n > 0. */
static inline uint64_t rng_below(rng *r, uint64_t n) { return rng_next(r) % n; }

#endif /* PH_BASE_RNG_H */
