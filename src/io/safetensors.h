/* Internal: the safetensors file format (https://huggingface.co/docs/safetensors):
 * 8-byte little-endian header length N, N bytes of JSON header
 * {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {"k": "v"}}, then the byte buffer. Only F32 tensors here.
 * Writing goes through st__atomic_open/commit (base/fileio.h): a temp file
 * beside `path`, fsync, rename, fsync of the directory: never a half-written
 * file at `path`.
 * Reading validates everything before trusting it: header length within the
 * file and under 100 MB, valid JSON without duplicate keys, known dtype, shape
 * product without overflow equal to the byte range, ranges inside the buffer,
 * not overlapping and covering it exactly. Errors name the file, the tensor and
 * the field or byte offset at fault. */
#ifndef STRATA_IO_SAFETENSORS_H
#define STRATA_IO_SAFETENSORS_H

#include "strata/data.h"

typedef struct st_named_tensor {
  char name[128];
  int rank;
  int64_t dims[ST_MAX_RANK];
  float *data; /* write: borrowed; read: owned by the st_safetensors */
} st_named_tensor;

/* Write n tensors (and optional metadata pairs, may be NULL/0) to path. */
st_status st__safetensors_write(const char *path, const st_named_tensor *t,
                                int n, const char *const *meta_keys,
                                const char *const *meta_values, int nmeta);

/* The same file, each tensor's data asked for as it is written (t[k].data
 * unused): fetch(arg, k, &data) points data at tensor k's floats, borrowed
 * until the next call. A failed fetch abandons the write (the file at path
 * is untouched) with fetch's status. */
st_status st__safetensors_write_fetch(const char *path, const st_named_tensor *t, int n,
                                      const char *const *meta_keys,
                                      const char *const *meta_values, int nmeta,
                                      st_status (*fetch)(void *arg, int k, const float **data),
                                      void *arg);

typedef struct st_safetensors {
  int n;
  st_named_tensor *tensors; /* [n], in file order */
  void *blob;               /* owns the tensors' data */
  /* st__safetensors_read_header only (NULL / 0 otherwise): */
  uint64_t *offsets;        /* [n] file offset of each tensor's first byte */
  uint64_t data_start, file_size;
} st_safetensors;
st_status st__safetensors_read(const char *path, st_safetensors *out);
/* The header alone, validated as st__safetensors_read validates it: names
 * and shapes, data NULL, each tensor's file offset in out->offsets. Its
 * tensors are then read one at a time into the caller's memory (a pipeline
 * stage reads only its own). */
st_status st__safetensors_read_header(const char *path, st_safetensors *out);
/* Tensor i of a header read from path into dst (room for its floats);
 * ST_ERR_FORMAT if the file's size changed since. */
st_status st__safetensors_read_tensor(const char *path, const st_safetensors *s, int i,
                                      float *dst);
/* One streamed pass over the file (1 MiB at a time): the CRC32C of all its
 * bytes and of each tensor's data (tensor_crc[n]), memory independent of
 * the file's size. */
st_status st__safetensors_checksums(const char *path, const st_safetensors *s,
                                    uint32_t *file_crc, uint32_t *tensor_crc);
/* Tensor by name or NULL. */
const st_named_tensor *st__safetensors_find(const st_safetensors *s,
                                            const char *name);
void st__safetensors_free(st_safetensors *s);

#endif
