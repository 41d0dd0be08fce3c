/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) as TFRecord and
 * TensorFlow checkpoints use it. Portable slicing-by-8 tables built once
 * (pthread_once); on x86-64 with SSE4.2 the crc32 instruction is used instead,
 * chosen at run time. Both give identical results; any thread may call. */
#include "base/crc32c.h"

#include <pthread.h>
#include <string.h>

#include "strata/base.h"

#define CRC32C_POLY 0x82F63B78u

static uint32_t crc_table[8][256]; /* [slice][byte], filled by init_tables */
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static bool crc_use_hw;

static bool cpu_has_sse42(void);

static void init_tables(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (CRC32C_POLY & (0u - (c & 1u)));
    crc_table[0][i] = c;
  }
  for (int s = 1; s < 8; s++)
    for (int i = 0; i < 256; i++) {
      uint32_t prev = crc_table[s - 1][i];
      crc_table[s][i] = (prev >> 8) ^ crc_table[0][prev & 0xff];
    }
  crc_use_hw = cpu_has_sse42();
}

static uint32_t load_le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

/* c is the running (inverted) register, not the public value. */
static uint32_t crc_sw(uint32_t c, const unsigned char *p, size_t n) {
  while (n >= 8) {
    uint32_t lo = c ^ load_le32(p), hi = load_le32(p + 4);
    c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
        crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^
        crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
        crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
  return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>

static bool cpu_has_sse42(void) { return __builtin_cpu_supports("sse4.2"); }

__attribute__((target("sse4.2")))
static uint32_t crc_hw(uint32_t c, const unsigned char *p, size_t n) {
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8); /* x86-64 is little-endian, as the CRC wants */
    c64 = _mm_crc32_u64(c64, w);
    p += 8;
    n -= 8;
  }
  c = (uint32_t)c64;
  while (n--) c = _mm_crc32_u8(c, *p++);
  return c;
}
#else
static bool cpu_has_sse42(void) { return false; }
static uint32_t crc_hw(uint32_t c, const unsigned char *p, size_t n) {
  return crc_sw(c, p, n);
}
#endif

uint32_t st__crc32c_portable(uint32_t crc, const void *data, size_t n) {
  pthread_once(&crc_once, init_tables);
  return ~crc_sw(~crc, data, n);
}

bool st__crc32c_hardware(void) {
  pthread_once(&crc_once, init_tables);
  return crc_use_hw;
}

uint32_t st_crc32c(uint32_t crc, const void *data, size_t n) {
  if (!data) return crc; /* nothing to add */
  pthread_once(&crc_once, init_tables);
  if (crc_use_hw) return ~crc_hw(~crc, data, n);
  return ~crc_sw(~crc, data, n);
}
