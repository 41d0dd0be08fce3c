/* libFuzzer target: the CSV reader (st_csv_read). The first byte picks the
 * options (bit 0: header row on/off; bit 1: ';' delimiter instead of ',';
 * bits 2-3: label column last / 0 / 1 / named "label" when there is a header),
 * the rest of the input is the file. */
#include "fuzz_common.h"
#include "strata/data.h"

static st_fuzz_file csv_fuzz_file_;

int st_fuzz_csv(const uint8_t *data, size_t size) {
  st_fuzz_init_once();
  if (size == 0) return 0;
  uint8_t sel = data[0];
  st_fuzz_file_put(&csv_fuzz_file_, "csv", data + 1, size - 1);
  st_csv_options o = st_csv_default_options();
  o.header = (sel & 1) != 0;
  if (sel & 2) o.delimiter = ';';
  switch ((sel >> 2) & 3) {
    case 0: o.label_column = -1; break;
    case 1: o.label_column = 0; break;
    case 2: o.label_column = 1; break;
    case 3: o.label_name = "label"; break;
  }
  st_tensor x, y;
  memset(&x, 0, sizeof x);
  memset(&y, 0, sizeof y);
  if (st_csv_read(csv_fuzz_file_.path, &o, &x, &y) == ST_OK) {
    size_t nx = st_tensor_count(&x), ny = st_tensor_count(&y);
    volatile float sink = 0;
    if (nx) sink += ((float *)x.data)[0] + ((float *)x.data)[nx - 1];
    if (ny) sink += ((float *)y.data)[0] + ((float *)y.data)[ny - 1];
    (void)sink;
  }
  st_tensor_destroy(&x);
  st_tensor_destroy(&y);
  return 0;
}

#ifndef STRATA_FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return st_fuzz_csv(data, size); }
#endif
