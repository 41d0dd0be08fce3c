/* GPT-2's pre-tokenizer regex matched by hand (pretokenize.h): at each
 * position the first alternative that matches, as Python's regex.findall
 * takes it. Where the classes of non-ASCII characters come from, and where
 * they differ from Unicode's \p{L} / \p{N} / \s: docs/FORMATS.md. */
#define _GNU_SOURCE
#include "data/pretokenize.h"

#include <stdint.h>
#include <string.h>
#include <wctype.h>

enum { C_SPACE, C_LETTER, C_NUMBER, C_OTHER };

/* The code point at s[i] and its length in bytes (invalid UTF-8: 1 byte, -1). */
static int32_t decode(const unsigned char *s, size_t n, size_t i, size_t *len) {
  unsigned c = s[i];
  int k = c < 0x80 ? 0 : c >= 0xc2 && c < 0xe0 ? 1 : c >= 0xe0 && c < 0xf0 ? 2
          : c >= 0xf0 && c < 0xf5 ? 3 : -1; /* continuation bytes that follow */
  *len = 1;
  if (k == 0) return (int32_t)c;
  if (k < 0 || i + (size_t)k >= n) return -1;
  int32_t cp = (int32_t)(c & (0x3f >> k));
  for (int j = 1; j <= k; j++) {
    if ((s[i + j] & 0xc0) != 0x80) return -1;
    cp = cp << 6 | (s[i + j] & 0x3f);
  }
  /* overlong 3/4-byte forms, surrogates, beyond U+10FFFF */
  if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return -1;
  *len = (size_t)k + 1;
  return cp;
}

static int class_of(locale_t loc, int32_t cp) {
  if (cp < 0) return C_OTHER;
  if (cp < 0x80) {
    if (cp == ' ' || (cp >= '\t' && cp <= '\r')) return C_SPACE;
    if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return C_LETTER;
    if (cp >= '0' && cp <= '9') return C_NUMBER;
    return C_OTHER;
  }
  if (cp == 0x85 || cp == 0xa0 || cp == 0x2007 || cp == 0x202f) return C_SPACE;
  if (!loc) return C_LETTER;
  if (iswspace_l((wint_t)cp, loc)) return C_SPACE;
  if (iswdigit_l((wint_t)cp, loc)) return C_NUMBER;
  if (iswalpha_l((wint_t)cp, loc)) return C_LETTER;
  return C_OTHER;
}

static int class_at(locale_t loc, const unsigned char *s, size_t n, size_t i, size_t *len) {
  return class_of(loc, decode(s, n, i, len));
}

/* The end of the run of characters of class c starting at i. */
static size_t run(locale_t loc, const unsigned char *s, size_t n, size_t i, int c) {
  size_t len;
  while (i < n && class_at(loc, s, n, i, &len) == c) i += len;
  return i;
}

static size_t contraction(const unsigned char *s, size_t n, size_t i) {
  static const char *const sfx[] = {"s", "t", "re", "ve", "m", "ll", "d"};
  for (int k = 0; k < 7; k++) {
    size_t m = strlen(sfx[k]);
    if (i + 1 + m <= n && !memcmp(s + i + 1, sfx[k], m)) return i + 1 + m;
  }
  return 0;
}

size_t st__pretoken_end(locale_t loc, const unsigned char *s, size_t n, size_t i) {
  size_t len, e;
  if (s[i] == '\'' && (e = contraction(s, n, i))) return e;
  size_t j = i + (s[i] == ' ' && i + 1 < n);
  int c = class_at(loc, s, n, j, &len);
  if (c != C_SPACE) return run(loc, s, n, j, c); /* ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+` */
  /* whitespace: \s+(?!\S) leaves the run's last character to the next
   * pre-token when something follows; a single one followed by more is \s+ */
  size_t last = i, k = i, chars = 0;
  while (k < n && class_at(loc, s, n, k, &len) == C_SPACE) last = k, k += len, chars++;
  return k == n || chars < 2 ? k : last;
}
