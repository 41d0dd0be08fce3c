/* The CLI's token-shard loader (tools/data_tokens.c, cli_load_tokens: what
 * `strata train --model gpt --data 'shards/x_*.bin'` calls): training and
 * validation shards told apart by name, FILE sharding over 2 workers (each
 * reads its own files, disjoint, covering all, with half the batch), llm.c's
 * order without shuffling, exit 2 for bad input (a malformed shard, a
 * token >= vocab, no files, only validation files, an uneven batch), and the
 * demo corpus loaded with no --data (cli_load_demo_tokens), nothing left on
 * disk. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "cli.h"
#include "tmpdir.h"

/* shard with n tokens, token i = base + i */
static void shard(const char *name, int n, uint32_t base) {
  st_token_writer *w = NULL;
  CHECK_OK(st_token_writer_create(tmp_path(name), false, &w));
  for (int i = 0; i < n; i++) {
    uint32_t t = base + (uint32_t)i;
    CHECK_OK(st_token_writer_write(w, &t, 1));
  }
  CHECK_OK(st_token_writer_close(w));
}

static cli_tokens_args args(const char *pattern) {
  static char buf[512];
  snprintf(buf, sizeof buf, "%s", pattern);
  cli_tokens_args a = {.pattern = buf, .seq_len = 4, .vocab = 50257, .batch = 8, .seed = 1,
                       .shard = ST_AUTO_SHARD_FILE, .worker = 0, .workers = 1};
  return a;
}

/* Which shards (token / 1000) the windows of ds come from, as a bit mask. */
static unsigned shards_read(st_dataset *ds, int *batch) {
  st_iterator *it = NULL;
  unsigned mask = 0;
  *batch = 0;
  if (st_dataset_iterate(ds, &it) != ST_OK) return 0;
  st_batch b;
  bool end = false;
  while (st_iterator_next(it, &b, &end) == ST_OK && !end) {
    if (b.size > *batch) *batch = b.size;
    for (int i = 0; i < b.size; i++) mask |= 1u << (int)(b.x[i * 4] / 1000);
  }
  st_iterator_destroy(it);
  return mask;
}

static void test_split_and_shards(void) {
  char pattern[512];
  snprintf(pattern, sizeof pattern, "%s", tmp_path("t_*.bin"));
  cli_tokens_args a = args(pattern);
  unsigned masks[2] = {0, 0};
  for (int r = 0; r < 2; r++) {
    a.workers = 2;
    a.worker = r;
    cli_data d;
    CHECK_EQ(cli_load_tokens("train", &a, &d), EXIT_OK);
    int batch;
    CHECK_EQ(st_dataset_token_file_count(d.train), 2);
    masks[r] = shards_read(d.train, &batch);
    CHECK_EQ(batch, 4); /* 8 over 2 workers */
    CHECK(d.val && d.test);
    CHECK_EQ(shards_read(d.val, &batch), 1u << 9); /* t_val_000000.bin: tokens 9000.. */
    CHECK_EQ(batch, 8);
    CHECK(strstr(d.fingerprint, "2 files"));
    st_dataset_destroy(d.train);
    st_dataset_destroy(d.val);
    st_dataset_destroy(d.test);
  }
  CHECK_EQ(masks[0] & masks[1], 0u);
  CHECK_EQ(masks[0] | masks[1], 0x0fu);
}

static void test_llmc_order(void) {
  cli_tokens_args a = args(tmp_path("t_train_000001.bin"));
  a.no_shuffle = true;
  cli_data d;
  CHECK_EQ(cli_load_tokens("train", &a, &d), EXIT_OK);
  CHECK(d.val == NULL && d.test == NULL);
  st_iterator *it = NULL;
  st_batch b;
  bool end = false;
  CHECK_OK(st_dataset_iterate(d.train, &it));
  CHECK_OK(st_iterator_next(it, &b, &end));
  int bad = 0;
  for (int i = 0; i < 8 * 4; i++) bad += b.x[i] != 1000 + i || b.y[i] != 1001 + i;
  CHECK_EQ(bad, 0);
  st_iterator_destroy(it);
  st_dataset_destroy(d.train);
}

static void test_bad_input(void) {
  cli_data d;
  cli_tokens_args a = args(tmp_path("t_*.bin"));
  a.vocab = 3000; /* shards 3.. hold tokens >= 3000 */
  CHECK_EQ(cli_load_tokens("train", &a, &d), EXIT_USAGE);
  CHECK(d.train == NULL);
  a = args(tmp_path("none_*.bin"));
  CHECK_EQ(cli_load_tokens("train", &a, &d), EXIT_USAGE);
  a = args(tmp_path("t_val_*.bin"));
  CHECK_EQ(cli_load_tokens("train", &a, &d), EXIT_USAGE);
  a = args(tmp_path("t_*.bin"));
  a.workers = 3;
  a.batch = 8;
  CHECK_EQ(cli_load_tokens("train", &a, &d), EXIT_USAGE);
  FILE *f = fopen(tmp_path("bad_train.bin"), "wb");
  if (f) fputs("not a shard", f), fclose(f);
  a = args(tmp_path("bad_train.bin"));
  CHECK_EQ(cli_load_tokens("train", &a, &d), EXIT_USAGE);
  CHECK(cli_is_token_data("shards/*.bin") && cli_is_token_data("tokens:x") &&
        !cli_is_token_data("fashion-mnist") && !cli_is_token_data(NULL));
}

/* --model gpt without --data: the demo corpus, tokenized into a temp
 * directory that is gone again once loaded. */
static void test_demo(void) {
  if (access(CLI_GPT_DEMO_CORPUS, R_OK) != 0) {
    printf("# skip test_demo: %s not installed (apt-get install jargon-text)\n", CLI_GPT_DEMO_CORPUS);
    return;
  }
  setenv("TMPDIR", tmp_path("demo"), 1);
  CHECK(mkdir(tmp_path("demo"), 0700) == 0);
  cli_tokens_args a = args("ignored");
  cli_data d;
  CHECK_EQ(cli_load_demo_tokens("train", &a, &d), EXIT_OK);
  CHECK_EQ(st_dataset_token_count(d.train), 1513635);
  CHECK_EQ(st_dataset_token_count(d.val), 168182);
  CHECK_EQ(st_dataset_cardinality(d.train), ((1513635 - 1) / 4 + 7) / 8);
  CHECK(strstr(d.fingerprint, "jargon.txt.gz"));
  st_iterator *it = NULL;
  st_batch b;
  bool end = false;
  CHECK_OK(st_dataset_iterate(d.val, &it)); /* the mapping outlives the removed file */
  CHECK_OK(st_iterator_next(it, &b, &end));
  CHECK(!end && b.x[0] == ' ' && b.y[31] == 'T'); /* 32 spaces, then "The Jargon File" */
  st_iterator_destroy(it);
  st_dataset_destroy(d.train);
  st_dataset_destroy(d.val);
  st_dataset_destroy(d.test);
  char **left = NULL;
  int n = 0;
  CHECK_EQ(st_list_files(tmp_path("demo/*"), false, 0, &left, &n), ST_ERR_INVALID); /* none */
  st_list_files_free(left, n);
  unsetenv("TMPDIR");
}

int main(int argc, char **argv) {
  if (!tmpdir_make("strata_tokens_cli")) return 1;
  for (int i = 0; i < 4; i++) {
    char name[64];
    snprintf(name, sizeof name, "t_train_%06d.bin", i);
    shard(name, 101 + 8 * i, 1000u * (uint32_t)i);
  }
  shard("t_val_000000.bin", 90, 9000);
  static const check_case cases[] = {CHECK_CASE(test_split_and_shards),
                                     CHECK_CASE(test_llmc_order), CHECK_CASE(test_bad_input),
                                     CHECK_CASE(test_demo)};
  int rc = CHECK_MAIN(argc, argv, cases);
  tmpdir_remove();
  return rc;
}
