/* Counter-based random numbers: Philox4x32-10 (Salmon et al., SC'11, as in
 * Random123) and a small sequential generator over its blocks. The 128-bit
 * counter block is (lo32(counter), hi32(counter), lo32(stream), hi32(stream)) and
 * the 64-bit key is (lo32(seed), hi32(seed)), so (seed, stream, counter) picks one
 * block of 4 words deterministically. st_philox4x32 is pure and thread-safe; an
 * st_rng belongs to one thread at a time. */
#include "strata/base.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline void philox_round(uint32_t c[4], const uint32_t k[2]) {
  uint64_t p0 = (uint64_t)PHILOX_M0 * c[0];
  uint64_t p1 = (uint64_t)PHILOX_M1 * c[2];
  uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
  uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
  uint32_t n0 = hi1 ^ c[1] ^ k[0];
  uint32_t n2 = hi0 ^ c[3] ^ k[1];
  c[0] = n0;
  c[1] = lo1;
  c[2] = n2;
  c[3] = lo0;
}

void st_philox4x32(uint64_t seed, uint64_t stream, uint64_t counter,
                   uint32_t out[4]) {
  if (!out) return;
  uint32_t c[4] = {(uint32_t)counter, (uint32_t)(counter >> 32),
                   (uint32_t)stream, (uint32_t)(stream >> 32)};
  uint32_t k[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  for (int r = 0; r < 10; r++) {
    if (r > 0) {
      k[0] += PHILOX_W0;
      k[1] += PHILOX_W1;
    }
    philox_round(c, k);
  }
  for (int i = 0; i < 4; i++) out[i] = c[i];
}

st_rng st_rng_make(uint64_t seed, uint64_t stream) {
  st_rng r = {.seed = seed, .stream = stream, .counter = 0, .pos = 4};
  return r;
}

uint32_t st_rng_u32(st_rng *r) {
  if (!r) return 0;
  if (r->pos >= 4) {
    st_philox4x32(r->seed, r->stream, r->counter++, r->buf);
    r->pos = 0;
  }
  return r->buf[r->pos++];
}

/* Low word first. */
uint64_t st_rng_u64(st_rng *r) {
  if (!r) return 0;
  uint64_t lo = st_rng_u32(r);
  uint64_t hi = st_rng_u32(r);
  return lo | (hi << 32);
}

float st_rng_uniform(st_rng *r) { return r ? st_u32_to_unit(st_rng_u32(r)) : 0.0f; }

/* Box-Muller from two fresh uniforms; u1 in (0, 1] so log(u1) is finite. */
float st_rng_normal(st_rng *r) {
  if (!r) return 0.0f;
  double u1 = ((double)(st_rng_u32(r) >> 8) + 1.0) * (1.0 / 16777216.0);
  double u2 = (double)(st_rng_u32(r) >> 8) * (1.0 / 16777216.0);
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2));
}

/* Rejection sampling: draws below `threshold` ((2^w - n) mod n of them) are
 * rejected, leaving a whole number of copies of [0, n). n must be > 0. */
uint64_t st_rng_below(st_rng *r, uint64_t n) {
  if (!r || n == 0) return 0;
  if (n <= UINT32_MAX) {
    uint32_t n32 = (uint32_t)n;
    uint32_t threshold = (uint32_t)(-n32) % n32;
    for (;;) {
      uint32_t x = st_rng_u32(r);
      if (x >= threshold) return x % n32;
    }
  }
  uint64_t threshold = (-n) % n;
  for (;;) {
    uint64_t x = st_rng_u64(r);
    if (x >= threshold) return x % n;
  }
}
