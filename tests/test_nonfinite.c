/* The non-finite input policy of the readers (RELIABILITY.md row D3): NaN/Inf
 * in float32 IDX payloads and CSV cells are rejected by default, naming the
 * file and element/offset or row/column, and kept as they are with
 * allow_nonfinite; st_mnist_load_ex takes float32 images (u8 still works) and
 * passes the option to all four files. The CLI side (--allow-nonfinite, a NaN
 * loss) is in tests/test_bad_inputs.sh. */
#define _POSIX_C_SOURCE 200809L
#include "strata/data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "tmpdir.h"


static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  CHECK(fputs(text, f) >= 0);
  fclose(f);
}

/* The status is `want` and the message holds every needle. */
static void check_err(st_status got, st_status want, const char *a, const char *b) {
  const char *msg = st_last_error();
  CHECK_MSG(got == want && strstr(msg, a) && (!b || strstr(msg, b)), "status %s, message '%s'",
            st_status_string(got), msg);
}

static void test_idx(void) {
  float v[4] = {1.5f, NAN, -INFINITY, 2.0f};
  st_tensor t = {ST_F32, 1, {4}, v}, r;
  CHECK_OK(st_idx_write(tmp_path("nan.idx.gz"), &t));
  /* default: rejected, the first non-finite element named with its offset */
  check_err(st_idx_read(tmp_path("nan.idx.gz"), &r), ST_ERR_NONFINITE, "nan.idx.gz: offset 12",
            "element 1 is NaN");
  CHECK(r.data == NULL);
  check_err(st_idx_read_ex(tmp_path("nan.idx.gz"), NULL, &r), ST_ERR_NONFINITE, "element 1", NULL);
  st_idx_options o = {0};
  check_err(st_idx_read_ex(tmp_path("nan.idx.gz"), &o, &r), ST_ERR_NONFINITE, "element 1", NULL);
  /* allowed: the values as written */
  o.allow_nonfinite = true;
  CHECK_OK(st_idx_read_ex(tmp_path("nan.idx.gz"), &o, &r));
  if (r.data) {
    const float *f = r.data;
    CHECK(r.dtype == ST_F32 && r.rank == 1 && r.dims[0] == 4);
    CHECK(f[0] == 1.5f && isnan(f[1]) && isinf(f[2]) && f[2] < 0 && f[3] == 2.0f);
  }
  st_tensor_destroy(&r);
  /* Inf alone, plain file */
  float w[2] = {0.0f, INFINITY};
  st_tensor ti = {ST_F32, 1, {2}, w};
  CHECK_OK(st_idx_write(tmp_path("inf.idx"), &ti));
  check_err(st_idx_read(tmp_path("inf.idx"), &r), ST_ERR_NONFINITE, "inf.idx: offset 12",
            "element 1 is Inf");
  /* the option does not loosen anything else */
  unsigned char bad[] = {0, 0, 0x0D, 0x01, 0, 0, 0, 2, 0x3f, 0x80, 0, 0};
  FILE *f = fopen(tmp_path("short.idx"), "wb");
  if (f) {
    fwrite(bad, 1, sizeof bad, f);
    fclose(f);
  }
  check_err(st_idx_read_ex(tmp_path("short.idx"), &o, &r), ST_ERR_FORMAT, "short.idx",
            "truncated");
}

static void test_csv(void) {
  st_tensor x, y;
  st_csv_options o = st_csv_default_options();
  CHECK(!o.allow_nonfinite);
  write_text(tmp_path("nf.csv"), "a,b,label\n1,2,0\n3,nan,1\n-inf,4,2\n");
  check_err(st_csv_read(tmp_path("nf.csv"), &o, &x, &y), ST_ERR_NONFINITE,
            "nf.csv: row 3, column 2 ('nan')", "not finite");
  CHECK(x.data == NULL && y.data == NULL);
  check_err(st_csv_read(tmp_path("nf.csv"), NULL, &x, &y), ST_ERR_NONFINITE, "row 3, column 2",
            NULL);
  o.allow_nonfinite = true;
  CHECK_OK(st_csv_read(tmp_path("nf.csv"), &o, &x, &y));
  if (x.data && y.data) {
    const float *xv = x.data, *yv = y.data;
    CHECK(x.dims[0] == 3 && x.dims[1] == 2);
    CHECK(xv[0] == 1 && xv[1] == 2 && xv[2] == 3 && isnan(xv[3]) && isinf(xv[4]) && xv[4] < 0);
    CHECK(yv[0] == 0 && yv[1] == 1 && yv[2] == 2);
  }
  st_tensor_destroy(&x);
  st_tensor_destroy(&y);
  /* a label cell too */
  write_text(tmp_path("nfl.csv"), "1,2,inf\n");
  o = st_csv_default_options();
  o.header = false;
  check_err(st_csv_read(tmp_path("nfl.csv"), &o, &x, &y), ST_ERR_NONFINITE, "row 1, column 3",
            NULL);
  /* allowed: literal nan/inf only; a finite literal beyond float32 is still an error, and
   * so is text */
  o.allow_nonfinite = true;
  CHECK_OK(st_csv_read(tmp_path("nfl.csv"), &o, &x, &y));
  if (y.data) CHECK(isinf(((const float *)y.data)[0]));
  st_tensor_destroy(&x);
  st_tensor_destroy(&y);
  write_text(tmp_path("big.csv"), "1,1e50,0\n");
  check_err(st_csv_read(tmp_path("big.csv"), &o, &x, &y), ST_ERR_FORMAT, "row 1, column 2",
            "out of float32 range");
  write_text(tmp_path("txt.csv"), "1,abc,0\n");
  check_err(st_csv_read(tmp_path("txt.csv"), &o, &x, &y), ST_ERR_FORMAT, "row 1, column 2",
            "not a number");
}

/* A directory of the four MNIST files with n images of h x w, float or u8. */
static void write_mnist(const char *dir, st_dtype dt, int n, float poison) {
  char p[300];
  size_t count = (size_t)n * 28 * 28;
  void *img = calloc(count, dt == ST_F32 ? 4 : 1);
  uint8_t *lab = calloc((size_t)n, 1);
  if (!img || !lab) {
    CHECK(0);
    free(img);
    free(lab);
    return;
  }
  for (size_t i = 0; i < count; i++) {
    if (dt == ST_F32) ((float *)img)[i] = (float)(i % 7) * 0.25f;
    else ((uint8_t *)img)[i] = (uint8_t)(i % 251);
  }
  if (dt == ST_F32) ((float *)img)[count - 1] = poison;
  for (int i = 0; i < n; i++) lab[i] = (uint8_t)(i % 10);
  st_tensor x = {dt, 3, {n, 28, 28}, img}, y = {ST_U8, 1, {n}, lab};
  const char *names[2][2] = {{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"},
                             {"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}};
  for (int k = 0; k < 2; k++) {
    snprintf(p, sizeof p, "%s/%s", dir, names[k][0]);
    CHECK_OK(st_idx_write(p, &x));
    snprintf(p, sizeof p, "%s/%s", dir, names[k][1]);
    CHECK_OK(st_idx_write(p, &y));
  }
  free(img);
  free(lab);
}

static void test_mnist(void) {
  char dir[128];
  st_mnist m;
  /* float32 images with finite values: loaded as they are */
  snprintf(dir, sizeof dir, "%s/f32", g_dir);
  CHECK(mkdir(dir, 0755) == 0);
  write_mnist(dir, ST_F32, 3, 1.75f);
  CHECK_OK(st_mnist_load(dir, &m));
  CHECK(m.train_x.dtype == ST_F32 && m.test_x.dtype == ST_F32 && m.train_x.dims[0] == 3);
  if (m.train_x.data) CHECK(((const float *)m.train_x.data)[3 * 784 - 1] == 1.75f);
  CHECK(m.train_y.dtype == ST_U8);
  st_mnist_destroy(&m);
  /* NaN: rejected by default naming the file, element and offset; allowed with the option */
  snprintf(dir, sizeof dir, "%s/nan", g_dir);
  CHECK(mkdir(dir, 0755) == 0);
  write_mnist(dir, ST_F32, 2, NAN);
  check_err(st_mnist_load(dir, &m), ST_ERR_NONFINITE, "train-images-idx3-ubyte.gz: offset 6284",
            "element 1567 is NaN");
  CHECK(m.train_x.data == NULL && m.test_x.data == NULL);
  st_idx_options o = {.allow_nonfinite = true};
  CHECK_OK(st_mnist_load_ex(dir, &o, &m));
  if (m.test_x.data) CHECK(isnan(((const float *)m.test_x.data)[2 * 784 - 1]));
  st_mnist_destroy(&m);
  /* u8 images still load, through both entry points */
  snprintf(dir, sizeof dir, "%s/u8", g_dir);
  CHECK(mkdir(dir, 0755) == 0);
  write_mnist(dir, ST_U8, 2, 0);
  CHECK_OK(st_mnist_load_ex(dir, NULL, &m));
  CHECK(m.train_x.dtype == ST_U8 && m.test_x.dims[0] == 2);
  st_mnist_destroy(&m);
}

static const check_case cases[] = {CHECK_CASE(test_idx), CHECK_CASE(test_csv),
                                   CHECK_CASE(test_mnist)};

int main(int argc, char **argv) {
  if (!tmpdir_make("strata_test_nonfinite")) return 1;
  int rc = CHECK_MAIN(argc, argv, cases);
  tmpdir_remove();
  return rc;
}
