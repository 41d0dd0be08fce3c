/* libFuzzer target: token shards and the pre-tokenizer. The input is read as
 * a token shard (st_dataset_from_token_files: header, size and token checks,
 * then every window of a pass, unshuffled and shuffled), and as text cut
 * into GPT-2 pre-tokens (st__pretoken_end: every cut inside the text and
 * moving forward) and through the byte-level tokenizer and back. */
#include "data/pretokenize.h"
#include "fuzz_common.h"
#include "strata/data.h"

static st_fuzz_file tokens_fuzz_file_;

static void tokens_fuzz_read_(bool shuffle) {
  st_token_dataset_options o = st_token_dataset_default_options();
  o.seq_len = 3;
  o.vocab = 300;
  o.shuffle = shuffle;
  st_dataset *ds = NULL;
  const char *files[] = {tokens_fuzz_file_.path};
  if (st_dataset_from_token_files(files, 1, &o, &ds) != ST_OK) return;
  st_iterator *it = NULL;
  if (st_dataset_iterate(ds, &it) == ST_OK) {
    st_batch b;
    bool end = false;
    int64_t n = 0;
    while (st_iterator_next(it, &b, &end) == ST_OK && !end) {
      if (b.x[0] >= 300 || b.y[2] >= 300) abort(); /* checked against vocab */
      n++;
    }
    if (n != st_dataset_cardinality(ds)) abort();
  }
  st_iterator_destroy(it);
  st_dataset_destroy(ds);
}

static void tokens_fuzz_text_(const uint8_t *data, size_t size) {
  for (size_t i = 0; i < size;) {
    size_t e = st__pretoken_end((locale_t)0, data, size, i);
    if (e <= i || e > size) abort();
    i = e;
  }
  st_tokenizer *t = NULL;
  uint32_t *ids = NULL;
  size_t n = 0, len = 0;
  char *back = NULL;
  if (st_tokenizer_create_bytes(&t) != ST_OK) abort();
  if (st_tokenizer_encode(t, (const char *)data, size, &ids, &n) != ST_OK || n != size) abort();
  if (st_tokenizer_decode(t, ids, n, &back, &len) != ST_OK || len != size ||
      (size && memcmp(back, data, size)))
    abort();
  free(ids);
  free(back);
  st_tokenizer_destroy(t);
}

int st_fuzz_tokens(const uint8_t *data, size_t size) {
  st_fuzz_init_once();
  st_fuzz_file_put(&tokens_fuzz_file_, "tokens", data, size);
  tokens_fuzz_read_(false);
  tokens_fuzz_read_(true);
  tokens_fuzz_text_(data, size);
  return 0;
}

#ifndef STRATA_FUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return st_fuzz_tokens(data, size); }
#endif
