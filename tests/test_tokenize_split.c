/* The tokenizers without GPT-2's files (issue 31 part 3): the pre-tokenizer
 * (src/data/pretokenize.c) cuts text where GPT-2's regex
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * cuts it (the expected pieces are what that regex finds, as JavaScript's
 * String.match with the same pattern gives them; the invalid UTF-8 case is ours),
 * and the byte-level tokenizer encodes any bytes one a token and decodes
 * them back; decode refuses an id beyond the vocabulary, naming its place. */
#define _GNU_SOURCE
#include "strata/data.h"

#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data/pretokenize.h"

/* The pieces of text joined by '|'. */
static void split(locale_t loc, const char *text, char *out, size_t cap) {
  const unsigned char *s = (const unsigned char *)text;
  size_t n = strlen(text), o = 0;
  for (size_t i = 0; i < n;) {
    size_t e = st__pretoken_end(loc, s, n, i);
    if (e <= i) { /* no progress: a bug */
      snprintf(out, cap, "STUCK at %zu", i);
      return;
    }
    o += (size_t)snprintf(out + o, cap - o, "%s%.*s", i ? "|" : "", (int)(e - i), text + i);
    i = e;
  }
}

static void test_pretokenize(void) {
  locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
  static const char *const cases[][2] = {
      {"Hello world", "Hello| world"},
      {"I'm here, aren't you?", "I|'m| here|,| aren|'t| you|?"},
      {"they'll've 'S 'st", "they|'ll|'ve| '|S| '|st"},
      {"a  b", "a| | b"},
      {"a   \n\nb", "a|   \n|\n|b"},
      {"x\n\n y", "x|\n\n| y"},
      {"end  ", "end|  "},
      {"12,345.67 abc123", "12|,|345|.|67| abc|123"},
      {"tab\tsep", "tab|\t|sep"},
      {"!!! ?? ok", "!!!| ??| ok"},
      {"caf\xc3\xa9 na\xc3\xafve \xe4\xb8\xad\xe6\x96\x87", "caf\xc3\xa9| na\xc3\xafve| \xe4\xb8\xad\xe6\x96\x87"},
      {"\xe2\x80\x9cquoted\xe2\x80\x9d", "\xe2\x80\x9c|quoted|\xe2\x80\x9d"},
      {"e\xcc\x81!", "e|\xcc\x81!"}, /* a combining mark is not a letter */
      {"a\xc2\xa0" "b", "a|\xc2\xa0|b"}, /* no-break space is \s */
      {"bad \xff\xfe bytes", "bad| \xff\xfe| bytes"},
  };
  char got[256];
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    split(loc, cases[k][0], got, sizeof got);
    CHECK_MSG(!strcmp(got, cases[k][1]), "\"%s\": got \"%s\", want \"%s\"", cases[k][0], got,
              cases[k][1]);
  }
  if (loc) freelocale(loc);
}

static void test_bytes(void) {
  st_tokenizer *t = NULL;
  CHECK_OK(st_tokenizer_create_bytes(&t));
  CHECK_EQ(st_tokenizer_vocab_size(t), 256);
  CHECK_EQ(st_tokenizer_eot(t), -1);
  unsigned char text[300];
  for (int i = 0; i < 300; i++) text[i] = (unsigned char)(i * 7);
  uint32_t *ids = NULL;
  size_t n = 0;
  CHECK_OK(st_tokenizer_encode(t, (const char *)text, sizeof text, &ids, &n));
  CHECK_EQ(n, sizeof text);
  int bad = 0;
  for (size_t i = 0; ids && i < n; i++) bad += ids[i] != text[i];
  CHECK_EQ(bad, 0);
  char *back = NULL;
  size_t len = 0;
  CHECK_OK(st_tokenizer_decode(t, ids, n, &back, &len));
  CHECK(len == sizeof text && back && !memcmp(back, text, len));
  free(back);
  ids[5] = 256;
  CHECK_EQ(st_tokenizer_decode(t, ids, n, &back, &len), ST_ERR_INVALID);
  CHECK(strstr(st_last_error(), "token 5 is 256"));
  free(ids);
  CHECK_OK(st_tokenizer_encode(t, "", 0, &ids, &n)); /* empty text: no tokens */
  CHECK_EQ(n, 0);
  free(ids);
  st_tokenizer_destroy(t);
  st_tokenizer_destroy(NULL);
  CHECK_EQ(st_tokenizer_vocab_size(NULL), 0);
  CHECK_EQ(st_tokenizer_create_gpt2("/nonexistent/encoder.json", "/nonexistent/vocab.bpe", &t),
           ST_ERR_IO);
  CHECK(strstr(st_last_error(), "/nonexistent/encoder.json: cannot open"));
}

int main(int argc, char **argv) {
  static const check_case cases[] = {CHECK_CASE(test_pretokenize), CHECK_CASE(test_bytes)};
  return CHECK_MAIN(argc, argv, cases);
}
