/* libFuzzer target: the TFRecord reader (framing, both error and skip modes,
 * the input read plain and as a gzip file: members, damage between them)
 * and tf.train.Example parsing (within its decode budget) (st_parse_example, through protobuf-c) of every
 * record it yields with two specs (a uint8 image + int64 label, and a float32
 * vector). The whole input is also parsed as one Example directly, so the
 * protobuf side is fuzzed without having to get the CRCs right first. */
#include "fuzz_common.h"
#include "strata/data.h"

static st_fuzz_file tfrecord_fuzz_file_;

static void tfrecord_fuzz_parse_(const void *d, size_t n) {
  static float x[64], y[4];
  st_example_spec a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  strcpy(a.x.name, "image");
  a.x.dtype = ST_FEATURE_UINT8;
  a.x.shape = (st_shape){3, {4, 4, 1}};
  strcpy(a.y.name, "label");
  a.y.dtype = ST_FEATURE_INT64;
  strcpy(b.x.name, "x");
  b.x.dtype = ST_FEATURE_FLOAT32;
  b.x.shape = (st_shape){1, {3}};
  (void)st_parse_example(d, n, &a, x, y);
  (void)st_parse_example(d, n, &b, x, y);
}

static void tfrecord_fuzz_read_(bool skip, bool gzip) {
  st_tfrecord_options o = st_tfrecord_default_options();
  o.skip_corrupt = skip;
  o.compression = gzip ? ST_COMPRESSION_GZIP : ST_COMPRESSION_NONE;
  o.buffer_size = 64;          /* records straddle refills */
  o.max_record_bytes = 1 << 16; /* a long length field meets the cap */
  st_tfrecord_reader *r = NULL;
  if (st_tfrecord_reader_create(tfrecord_fuzz_file_.path, &o, &r) != ST_OK) return;
  for (int k = 0; k < 4096; k++) {
    const void *d;
    size_t n;
    bool end;
    if (st_tfrecord_reader_next(r, &d, &n, &end) != ST_OK || end) break;
    tfrecord_fuzz_parse_(d, n);
  }
  st_tfrecord_reader_destroy(r);
}

int st_fuzz_tfrecord(const uint8_t *data, size_t size) {
  st_fuzz_init_once();
  st_fuzz_file_put(&tfrecord_fuzz_file_, "tfrecord", data, size);
  tfrecord_fuzz_read_(false, false);
  tfrecord_fuzz_read_(true, false);
  if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) { /* gzip inputs: both modes too */
    tfrecord_fuzz_read_(false, true);
    tfrecord_fuzz_read_(true, true);
  }
  tfrecord_fuzz_parse_(data, size);
  return 0;
}

#ifndef STRATA_FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return st_fuzz_tfrecord(data, size); }
#endif
