/* libFuzzer target: the IDX reader (st_idx_read), plain and gzip.
 * Every input is read as it is (so gzip-compressed inputs fuzz zlib's side of
 * the reader); when its first byte is even (every real IDX file starts with a
 * zero byte) it is also gzip-compressed in memory and read again, so the
 * header and payload checks are fuzzed through the gzip path too. */
#include <zlib.h>

#include "fuzz_common.h"
#include "strata/data.h"

static st_fuzz_file idx_fuzz_file_;

static void idx_fuzz_read_(void) {
  st_tensor t;
  memset(&t, 0, sizeof t);
  if (st_idx_read(idx_fuzz_file_.path, &t) == ST_OK) {
    /* Touch the payload so a short allocation shows up under ASan. */
    size_t bytes = st_tensor_count(&t) * st_dtype_size(t.dtype);
    volatile unsigned char sink = 0;
    if (bytes) sink ^= ((unsigned char *)t.data)[0] ^ ((unsigned char *)t.data)[bytes - 1];
    (void)sink;
  }
  st_tensor_destroy(&t);
}

int st_fuzz_idx(const uint8_t *data, size_t size) {
  st_fuzz_init_once();
  st_fuzz_file_put(&idx_fuzz_file_, "idx", data, size);
  idx_fuzz_read_();
  if (size == 0 || (data[0] & 1)) return 0;

  /* gzip-wrap the whole input (deflate with a gzip header: windowBits 16+15). */
  z_stream z;
  memset(&z, 0, sizeof z);
  if (deflateInit2(&z, 1, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY) != Z_OK) abort();
  uLong cap = deflateBound(&z, (uLong)size);
  unsigned char *gz = malloc(cap);
  if (!gz) abort();
  z.next_in = (Bytef *)data;
  z.avail_in = (uInt)size;
  z.next_out = gz;
  z.avail_out = (uInt)cap;
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) abort();
  size_t gz_size = cap - z.avail_out;
  deflateEnd(&z);
  st_fuzz_file_put(&idx_fuzz_file_, "idx", gz, gz_size);
  free(gz);
  idx_fuzz_read_();
  return 0;
}

#ifndef STRATA_FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return st_fuzz_idx(data, size); }
#endif
