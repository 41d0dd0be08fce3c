/* Internal: GPT-2's pre-tokenizer (pretokenize.c), the regex
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * matched by hand over UTF-8 bytes. Characters are classed as ASCII says;
 * others through loc (a UTF-8 LC_CTYPE locale: iswspace_l, iswalpha_l,
 * iswdigit_l, plus the no-break spaces of Unicode's White_Space), or, when
 * loc is (locale_t)0, as letters. A byte that is not valid UTF-8 is a
 * one-byte "other" character. */
#ifndef STRATA_DATA_PRETOKENIZE_H
#define STRATA_DATA_PRETOKENIZE_H

#include <locale.h>
#include <stddef.h>

/* The end of the pre-token starting at s[i] (i < n): the regex's match there. */
size_t st__pretoken_end(locale_t loc, const unsigned char *s, size_t n, size_t i);

#endif
