/* Writes the seed corpora of tests/fuzz/corpus/ (run once; the outputs are
 * committed). Build against any build of the library, from the repo root:
 *   cc -std=c11 -Iinclude -Isrc tests/fuzz/gen_corpus.c build/libstrata.a \
 *      $(pkg-config --libs jansson) -lz -lm -ldl -lpthread -o /tmp/gen_corpus
 *   /tmp/gen_corpus tests/fuzz/corpus
 * IDX, CSV and checkpoint seeds are built here; Keras seeds are the fixtures of
 * tests/keras/ (copied by hand); safetensors seeds come from
 * st__safetensors_write. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "strata/train.h"
#include "io/safetensors.h"

static const char *root;

static void put(const char *target, const char *name, const void *data, size_t n) {
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", root, target);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/%s/%s", root, target, name);
  FILE *f = fopen(p, "wb");
  if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
    perror(p);
    exit(1);
  }
}

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(1);
  }
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)len + 1);
  *n = fread(b, 1, (size_t)len, f);
  fclose(f);
  return b;
}

/* A byte prepended to data (the selector byte of csv_fuzz / checkpoint_fuzz). */
static void put_sel(const char *target, const char *name, unsigned char sel, const void *data,
                    size_t n) {
  unsigned char *b = malloc(n + 1);
  b[0] = sel;
  memcpy(b + 1, data, n);
  put(target, name, b, n + 1);
  free(b);
}

static void put_gz(const char *target, const char *name, const void *data, size_t n) {
  uLong cap = compressBound(n) + 32;
  unsigned char *out = malloc(cap);
  z_stream z = {0};
  deflateInit2(&z, 9, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY);
  z.next_in = (Bytef *)data, z.avail_in = (uInt)n, z.next_out = out, z.avail_out = (uInt)cap;
  deflate(&z, Z_FINISH);
  put(target, name, out, cap - z.avail_out);
  deflateEnd(&z);
  free(out);
}

static size_t idx(unsigned char *b, int type, int rank, const unsigned *dims, size_t elem) {
  size_t n = 4, count = 1;
  b[0] = 0, b[1] = 0, b[2] = (unsigned char)type, b[3] = (unsigned char)rank;
  for (int i = 0; i < rank; i++) {
    b[n++] = dims[i] >> 24, b[n++] = dims[i] >> 16, b[n++] = dims[i] >> 8, b[n++] = dims[i];
    count *= dims[i];
  }
  for (size_t i = 0; i < count * elem; i++) b[n++] = (unsigned char)(i * 37 + 11);
  return n;
}

static void gen_idx(void) {
  unsigned char b[4096];
  size_t n;
  unsigned d1[] = {4}, d2[] = {2, 3}, d3[] = {3, 2, 2}, d4[] = {1, 2, 2, 1}, mn[] = {1, 28, 28};
  n = idx(b, 0x08, 1, d1, 1), put("idx_fuzz", "labels_u8_r1", b, n), put_gz("idx_fuzz", "labels_u8_r1.gz", b, n);
  n = idx(b, 0x08, 3, d3, 1), put("idx_fuzz", "images_u8_r3", b, n);
  n = idx(b, 0x08, 3, mn, 1), put("idx_fuzz", "mnist_1x28x28", b, n), put_gz("idx_fuzz", "mnist_1x28x28.gz", b, n);
  n = idx(b, 0x08, 4, d4, 1), put("idx_fuzz", "u8_r4", b, n);
  n = idx(b, 0x0C, 1, d1, 4), put("idx_fuzz", "i32_r1", b, n);
  /* f32 [2,3] with real big-endian floats (1.5, -2, 0, 3.25, 1e-3, 100) */
  float v[6] = {1.5f, -2.f, 0.f, 3.25f, 1e-3f, 100.f};
  n = idx(b, 0x0D, 2, d2, 4);
  for (int i = 0; i < 6; i++) {
    uint32_t u;
    memcpy(&u, &v[i], 4);
    b[12 + 4 * i] = u >> 24, b[13 + 4 * i] = u >> 16, b[14 + 4 * i] = u >> 8, b[15 + 4 * i] = u;
  }
  put("idx_fuzz", "f32_r2", b, n), put_gz("idx_fuzz", "f32_r2.gz", b, n);
  n = idx(b, 0x08, 1, d1, 1);
  put("idx_fuzz", "u8_short_payload", b, n - 1); /* invalid: one byte short */
}

static void gen_csv(void) {
  static const struct {
    const char *name;
    unsigned char sel; /* bit0 header, bit1 ';', bits2-3 label column choice */
    const char *text;
  } c[] = {
      {"header_last", 0x01, "x1,x2,label\n1,2,0\n3.5,-4,1\n0,1e-3,2\n"},
      {"noheader_last", 0x00, "1,2,0\n3,4,1\n5,6,2\n"},
      {"noheader_first", 0x04, "0,0.5,0.25\n1,1.5,1.25\n"},
      {"noheader_second", 0x08, "0.5,1,0.25\n1.5,0,1.25\n"},
      {"header_named", 0x0D, "a,label,b\n1,0,2\n3,1,4\n"},
      {"semicolon", 0x03, "a;b;label\n1;2;0\n3;4;1\n"},
      {"crlf_nofinal", 0x01, "a,b,label\r\n1,2,0\r\n3,4,1"},
      {"bom_blank", 0x01, "\xEF\xBB\xBF" "a,b,label\n\n1,2,0\n\n3,4,1\n"},
      {"quoted", 0x01, "\"a\",\"b\",\"label\"\n\"1\",2,\"0\"\n3,\"4\",1\n"},
      {"single_col", 0x00, "1\n2\n3\n"},
      {"bad_ragged", 0x01, "a,b,label\n1,2,0\n3,4\n"},
      {"bad_nan", 0x00, "1,nan,0\ninf,2,1\n"},
  };
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
    put_sel("csv_fuzz", c[i].name, c[i].sel, c[i].text, strlen(c[i].text));
}

static void gen_safetensors(const char *tmp) {
  float data[64];
  for (int i = 0; i < 64; i++) data[i] = (float)i * 0.25f - 3.f;
  char p[1024];
  st_named_tensor t[4] = {0};
  snprintf(t[0].name, sizeof t[0].name, "dense/kernel");
  t[0].rank = 2, t[0].dims[0] = 5, t[0].dims[1] = 4, t[0].data = data;
  snprintf(t[1].name, sizeof t[1].name, "dense/bias");
  t[1].rank = 1, t[1].dims[0] = 4, t[1].data = data + 20;
  snprintf(t[2].name, sizeof t[2].name, "conv2d/kernel");
  t[2].rank = 4, t[2].dims[0] = 3, t[2].dims[1] = 3, t[2].dims[2] = 1, t[2].dims[3] = 2,
  t[2].data = data + 24;
  snprintf(t[3].name, sizeof t[3].name, "scalar_like");
  t[3].rank = 1, t[3].dims[0] = 1, t[3].data = data + 60;
  const char *mk[] = {"format", "step"}, *mv[] = {"pt", "17"};
  struct {
    const char *name;
    int n, nmeta;
  } f[] = {{"one_tensor", 1, 0}, {"two_tensors", 2, 0}, {"four_with_meta", 4, 2}, {"empty", 0, 0}};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    snprintf(p, sizeof p, "%s/%s", tmp, f[i].name);
    if (st__safetensors_write(p, t, f[i].n, mk, mv, f[i].nmeta) != ST_OK) {
      fprintf(stderr, "%s\n", st_last_error());
      exit(1);
    }
    size_t n;
    unsigned char *b = slurp(p, &n);
    put("safetensors_fuzz", f[i].name, b, n);
    free(b);
    remove(p);
  }
}

/* The checkpoint_fuzz model (input 5 -> Dense 4 relu -> Dense 3, Adam), trained
 * 2 epochs on 16 random rows so state.json has history and the slots are not
 * zero; its files become seeds (plain and "fix checksums" selector bits). */
static void gen_checkpoint(const char *tmp) {
  st_model_options mo = st_model_default_options(st_shape1(5));
  mo.seed = 1;
  st_model *m = NULL;
  st_compile_options co = st_compile_default_options();
  co.loss = ST_LOSS_SPARSE_CE_LOGITS; /* the last Dense is linear: logits */
  st_layer *l = NULL;
  if (st_sequential_create(&mo, &m) || st_dense(4, ST_ACT_RELU, &l) || st_model_add(m, l) ||
      st_dense(3, ST_ACT_LINEAR, &l) || st_model_add(m, l) || st_model_compile(m, &co)) {
    fprintf(stderr, "%s\n", st_last_error());
    exit(1);
  }
  float xs[16 * 5], ys[16];
  for (int i = 0; i < 80; i++) xs[i] = (float)((i * 7) % 11) / 11.f;
  for (int i = 0; i < 16; i++) ys[i] = (float)(i % 3);
  st_tensor x = {.dtype = ST_F32, .rank = 2, .dims = {16, 5}, .data = xs};
  st_tensor y = {.dtype = ST_F32, .rank = 1, .dims = {16}, .data = ys};
  st_dataset *ds = NULL;
  if (st_dataset_from_tensor_slices(&x, &y, 1.f, false, &ds) || st_dataset_batch(ds, 4, false, &ds)) exit(1);
  st_fit_options fo = st_fit_default_options();
  fo.epochs = 2;
  st_history h = {0};
  if (st_model_fit(m, ds, &fo, &h)) {
    fprintf(stderr, "%s\n", st_last_error());
    exit(1);
  }
  st_history_destroy(&h);
  st_dataset_destroy(ds);
  char dir[1024], sub[1200], p[1400];
  snprintf(dir, sizeof dir, "%s/ckpt", tmp);
  st_checkpoint_options ko = st_checkpoint_default_options();
  if (st_checkpoint_save(m, dir, &ko) || st_checkpoint_latest(dir, sub, sizeof sub)) exit(1);
  const char *files[] = {"weights.safetensors", "optimizer.safetensors", "state.json"};
  const char *names[] = {"weights", "optimizer", "state"};
  for (int i = 0; i < 4; i++) {
    if (i < 3)
      snprintf(p, sizeof p, "%s/%s", sub, files[i]);
    else
      snprintf(p, sizeof p, "%s/latest", dir);
    size_t n;
    unsigned char *b = slurp(p, &n);
    char nm[64];
    snprintf(nm, sizeof nm, "%s", i < 3 ? names[i] : "latest");
    put_sel("checkpoint_fuzz", nm, (unsigned char)i, b, n);
    snprintf(nm, sizeof nm, "%s_fixcrc", i < 3 ? names[i] : "latest");
    put_sel("checkpoint_fuzz", nm, (unsigned char)(i | 4), b, n);
    if (i == 2) /* state.json with the pristine checkpoint's file and tensor CRCs */
      put_sel("checkpoint_fuzz", "state_fixcrc_keepfiles", 2 | 4 | 8, b, n);
    if (i < 2) { /* also a safetensors seed */
      put("safetensors_fuzz", names[i], b, n);
    }
    free(b);
  }
  /* a latest naming a checkpoint that does not exist (valid form) */
  put_sel("checkpoint_fuzz", "latest_missing_fixcrc", 7, "ckpt-000042", 11);
  st_model_destroy(m);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) exit(1);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: gen_corpus DIR\n");
    return 2;
  }
  root = argv[1];
  mkdir(root, 0755);
  char tmp[] = "/tmp/gen_corpus-XXXXXX";
  if (!mkdtemp(tmp)) return 1;
  gen_idx();
  gen_csv();
  gen_safetensors(tmp);
  gen_checkpoint(tmp);
  rmdir(tmp);
  return 0;
}
