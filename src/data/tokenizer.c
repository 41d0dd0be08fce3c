/* Tokenizers (data.h): byte-level (token = byte) and GPT-2's byte-level BPE.
 * GPT-2's files spell every token's bytes through its byte-to-unicode map
 * (printable Latin-1 bytes stand for themselves, the other 68 bytes for
 * U+0100..U+0143: ' ' is 'Ġ'); loading maps them back to raw bytes, so the
 * encoder is bytes -> id and a merge is a pair of ids -> (rank, merged id).
 * Encoding: pre-tokens (pretokenize.c), each started as its bytes' ids and
 * merged as GPT-2's bpe() does: the adjacent pair of lowest rank, every
 * occurrence left to right, until no pair has a rank. */
#define _GNU_SOURCE
#include <jansson.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "data/pretokenize.h"
#include "strata/data.h"

#define MAX_VOCAB (1 << 24)
#define BPE_FILE_MAX ((size_t)256 << 20)

struct st_tokenizer {
  bool bpe;
  int64_t vocab, eot;
  char **bytes;          /* [vocab] each token's raw bytes (BPE) */
  uint32_t *len;         /* [vocab] their lengths */
  uint32_t byte_id[256]; /* the token of each single byte */
  uint64_t *pkey;        /* [pcap] pair (a << 32 | b) + 1; 0 = empty slot */
  uint32_t *prank, *pres; /* [pcap] the merge's rank and resulting id */
  size_t pcap;
  locale_t loc;          /* UTF-8 character classes, or 0 */
};

/* GPT-2's bytes_to_unicode: byte b is spelt as code point cs[b]. */
static void byte_map(int32_t cs[256]) {
  int n = 0;
  for (int b = 0; b < 256; b++) {
    bool keep = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    cs[b] = keep ? b : 256 + n++;
  }
}

static uint64_t hash_bytes(const char *p, size_t n) { /* FNV-1a, then mixed */
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
  return h ^ (h >> 29);
}

static uint64_t hash_pair(uint64_t k) {
  k *= 0x9e3779b97f4a7c15ull;
  return k ^ (k >> 31);
}

/* The token spelt by the GPT-2 string s (UTF-8) as raw bytes into out (cap
 * >= strlen(s)); false when a character is not in the byte map. */
static bool unmap(const char *s, const int16_t *inv, char *out, size_t *n) {
  const unsigned char *p = (const unsigned char *)s;
  *n = 0;
  while (*p) {
    int32_t cp;
    if (p[0] < 0x80) cp = *p++;
    else if ((p[0] & 0xe0) == 0xc0 && p[1]) cp = (p[0] & 0x1f) << 6 | (p[1] & 0x3f), p += 2;
    else return false; /* the map's code points are all below U+0800 */
    if (cp >= 324 || inv[cp] < 0) return false;
    out[(*n)++] = (char)inv[cp];
  }
  return true;
}

/* ---- encoder.json: bytes -> id (an open-addressing index over bytes[]) ---- */

typedef struct str_index {
  int32_t *slot; /* [cap] id or -1 */
  size_t cap;
} str_index;

static int32_t index_find(const st_tokenizer *t, const str_index *x, const char *p, size_t n) {
  for (size_t h = hash_bytes(p, n) & (x->cap - 1);; h = (h + 1) & (x->cap - 1)) {
    int32_t id = x->slot[h];
    if (id < 0) return -1;
    if (t->len[id] == n && !memcmp(t->bytes[id], p, n)) return id;
  }
}

static void index_add(const st_tokenizer *t, str_index *x, int32_t id) {
  size_t h = hash_bytes(t->bytes[id], t->len[id]) & (x->cap - 1);
  while (x->slot[h] >= 0) h = (h + 1) & (x->cap - 1);
  x->slot[h] = id;
}

/* One encoder entry key -> id into t (ids checked unique and in range). */
static st_status add_token(st_tokenizer *t, const char *path, const char *key, json_t *v,
                           const int16_t *inv) {
  if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= t->vocab)
    return st_error(ST_ERR_FORMAT, "%s: key \"%s\": the id is not an integer in 0..%lld", path,
                    key, (long long)t->vocab - 1);
  int64_t id = json_integer_value(v);
  if (t->bytes[id])
    return st_error(ST_ERR_FORMAT, "%s: key \"%s\": id %lld is also the id of another key", path,
                    key, (long long)id);
  size_t n;
  if (!(t->bytes[id] = malloc(strlen(key) + 1)))
    return st_error(ST_ERR_NOMEM, "%s: out of memory", path);
  if (!unmap(key, inv, t->bytes[id], &n) || n == 0)
    return st_error(ST_ERR_FORMAT, "%s: key \"%s\": not a token in GPT-2's byte-to-unicode "
                    "spelling", path, key);
  t->len[id] = (uint32_t)n;
  if (n == 1) t->byte_id[(unsigned char)t->bytes[id][0]] = (uint32_t)id;
  if (n == 13 && !memcmp(t->bytes[id], "<|endoftext|>", 13)) t->eot = id;
  return ST_OK;
}

static st_status load_encoder(st_tokenizer *t, const char *path, const int16_t *inv) {
  char *text = NULL;
  size_t len = 0;
  st_status s = st_read_file(path, BPE_FILE_MAX, &text, &len);
  if (s != ST_OK) return s;
  json_error_t je;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  free(text);
  if (!root)
    return st_error(ST_ERR_FORMAT, "%s: line %d column %d: not valid JSON: %s", path, je.line,
                    je.column, je.text);
  if (!json_is_object(root) || json_object_size(root) == 0 || json_object_size(root) > MAX_VOCAB) {
    json_decref(root);
    return st_error(ST_ERR_FORMAT, "%s: expected GPT-2's encoder.json, an object of 1 to 2^24 "
                    "entries token -> id", path);
  }
  t->vocab = (int64_t)json_object_size(root);
  t->bytes = calloc((size_t)t->vocab, sizeof *t->bytes);
  t->len = calloc((size_t)t->vocab, sizeof *t->len);
  if (!t->bytes || !t->len) s = st_error(ST_ERR_NOMEM, "%s: out of memory", path);
  for (int b = 0; b < 256; b++) t->byte_id[b] = UINT32_MAX;
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (s != ST_OK) break;
    s = add_token(t, path, key, v, inv);
  }
  json_decref(root);
  for (int b = 0; s == ST_OK && b < 256; b++)
    if (t->byte_id[b] == UINT32_MAX)
      s = st_error(ST_ERR_FORMAT, "%s: no token for the byte 0x%02x (a byte-level BPE has all "
                   "256)", path, b);
  return s;
}

/* ---- vocab.bpe: merges by rank ---- */

static void pair_put(st_tokenizer *t, uint32_t a, uint32_t b, uint32_t rank, uint32_t res) {
  uint64_t key = ((uint64_t)a << 32 | b) + 1;
  size_t h = hash_pair(key) & (t->pcap - 1);
  while (t->pkey[h] && t->pkey[h] != key) h = (h + 1) & (t->pcap - 1);
  if (t->pkey[h]) return; /* a repeated merge keeps its first (lowest) rank */
  t->pkey[h] = key, t->prank[h] = rank, t->pres[h] = res;
}

/* The slot of pair (a, b), or -1. */
static long pair_find(const st_tokenizer *t, uint32_t a, uint32_t b) {
  uint64_t key = ((uint64_t)a << 32 | b) + 1;
  for (size_t h = hash_pair(key) & (t->pcap - 1);; h = (h + 1) & (t->pcap - 1)) {
    if (t->pkey[h] == key) return (long)h;
    if (!t->pkey[h]) return -1;
  }
}

/* One merge line "A B" (GPT-2 spelling) of rank r. */
static st_status add_merge(st_tokenizer *t, const str_index *x, const char *path, int line,
                           char *text, uint32_t r, const int16_t *inv, char *buf) {
  char *sp = strchr(text, ' ');
  if (!sp || strchr(sp + 1, ' ') || sp == text || !sp[1])
    return st_error(ST_ERR_FORMAT, "%s: line %d: \"%s\": expected two tokens and one space", path,
                    line, text);
  *sp = '\0';
  size_t na, nb;
  bool ok = unmap(text, inv, buf, &na) && unmap(sp + 1, inv, buf + na, &nb);
  int32_t a = ok ? index_find(t, x, buf, na) : -1, b = ok ? index_find(t, x, buf + na, nb) : -1;
  int32_t m = a >= 0 && b >= 0 ? index_find(t, x, buf, na + nb) : -1;
  *sp = ' ';
  if (m < 0)
    return st_error(ST_ERR_FORMAT, "%s: line %d: merge \"%s\": %s is not in the encoder", path,
                    line, text, a < 0 ? "its first part" : b < 0 ? "its second part" : "the merged token");
  pair_put(t, (uint32_t)a, (uint32_t)b, r, (uint32_t)m);
  return ST_OK;
}

static st_status load_merges(st_tokenizer *t, const char *path, const int16_t *inv) {
  char *text = NULL;
  size_t len = 0;
  st_status s = st_read_file(path, BPE_FILE_MAX, &text, &len);
  if (s != ST_OK) return s;
  str_index x = {NULL, 1};
  while (x.cap < 2 * (size_t)t->vocab) x.cap <<= 1;
  t->pcap = 1;
  while (t->pcap < 2 * (size_t)t->vocab) t->pcap <<= 1;
  x.slot = malloc(x.cap * sizeof *x.slot);
  t->pkey = calloc(t->pcap, sizeof *t->pkey);
  t->prank = calloc(t->pcap, sizeof *t->prank);
  t->pres = calloc(t->pcap, sizeof *t->pres);
  char *buf = malloc(len + 1);
  if (!x.slot || !t->pkey || !t->prank || !t->pres || !buf)
    s = st_error(ST_ERR_NOMEM, "%s: out of memory", path);
  for (size_t i = 0; s == ST_OK && i < x.cap; i++) x.slot[i] = -1;
  for (int64_t id = 0; s == ST_OK && id < t->vocab; id++) index_add(t, &x, (int32_t)id);
  uint32_t rank = 0;
  int line = 0;
  for (char *p = text, *nl; s == ST_OK && p < text + len; p = nl + 1) {
    nl = memchr(p, '\n', (size_t)(text + len - p));
    if (!nl) nl = text + len;
    *nl = '\0';
    line++;
    if (nl > p && nl[-1] == '\r') nl[-1] = '\0';
    if (!*p || (line == 1 && !strncmp(p, "#version", 8))) continue;
    s = add_merge(t, &x, path, line, p, rank++, inv, buf);
  }
  if (s == ST_OK && rank == 0) s = st_error(ST_ERR_FORMAT, "%s: no merges", path);
  free(buf);
  free(x.slot);
  free(text);
  return s;
}

/* ---- the API ---- */

static st_status make(bool bpe, st_tokenizer **out) {
  st_tokenizer *t = calloc(1, sizeof *t);
  if (!t) return st_error(ST_ERR_NOMEM, "tokenizer: out of memory");
  t->bpe = bpe;
  t->vocab = 256;
  t->eot = -1;
  for (int b = 0; b < 256; b++) t->byte_id[b] = (uint32_t)b;
  *out = t;
  return ST_OK;
}

st_status st_tokenizer_create_bytes(st_tokenizer **out) {
  ST_REQUIRE(out);
  *out = NULL;
  return make(false, out);
}

st_status st_tokenizer_create_gpt2(const char *encoder_json, const char *vocab_bpe,
                                   st_tokenizer **out) {
  ST_REQUIRE(encoder_json);
  ST_REQUIRE(vocab_bpe);
  ST_REQUIRE(out);
  *out = NULL;
  st_tokenizer *t = NULL;
  st_status s = make(true, &t);
  if (s != ST_OK) return s;
  int32_t cs[256];
  int16_t inv[324];
  byte_map(cs);
  for (int i = 0; i < 324; i++) inv[i] = -1;
  for (int b = 0; b < 256; b++) inv[cs[b]] = (int16_t)b;
  t->vocab = 0;
  if ((s = load_encoder(t, encoder_json, inv)) == ST_OK) s = load_merges(t, vocab_bpe, inv);
  if (s != ST_OK) {
    st_tokenizer_destroy(t);
    return s;
  }
  t->loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
  *out = t;
  return ST_OK;
}

int64_t st_tokenizer_vocab_size(const st_tokenizer *t) { return t ? t->vocab : 0; }
int64_t st_tokenizer_eot(const st_tokenizer *t) { return t ? t->eot : -1; }

/* GPT-2's bpe() on the ids w[0..n) in place; returns the new length. */
static size_t bpe_merge(const st_tokenizer *t, uint32_t *w, size_t n) {
  while (n > 1) {
    long best = -1;
    for (size_t i = 0; i + 1 < n; i++) {
      long h = pair_find(t, w[i], w[i + 1]);
      if (h >= 0 && (best < 0 || t->prank[h] < t->prank[best])) best = h;
    }
    if (best < 0) break;
    uint32_t a = (uint32_t)((t->pkey[best] - 1) >> 32), b = (uint32_t)(t->pkey[best] - 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
      if (i + 1 < n && w[i] == a && w[i + 1] == b) w[o++] = t->pres[best], i++;
      else w[o++] = w[i];
    }
    n = o;
  }
  return n;
}

st_status st_tokenizer_encode(const st_tokenizer *t, const char *text, size_t n,
                              uint32_t **tokens, size_t *count) {
  ST_REQUIRE(t);
  ST_REQUIRE(text);
  ST_REQUIRE(tokens);
  ST_REQUIRE(count);
  *tokens = NULL;
  *count = 0;
  uint32_t *w = malloc((n ? n : 1) * sizeof *w); /* at most one token a byte */
  if (!w) return st_error(ST_ERR_NOMEM, "tokenizer: out of memory for %zu tokens", n);
  const unsigned char *s = (const unsigned char *)text;
  size_t k = 0;
  for (size_t i = 0; i < n;) {
    size_t e = t->bpe ? st__pretoken_end(t->loc, s, n, i) : n;
    for (size_t j = i; j < e; j++) w[k + j - i] = t->byte_id[s[j]];
    k += t->bpe ? bpe_merge(t, w + k, e - i) : e - i;
    i = e;
  }
  *tokens = w;
  *count = k;
  return ST_OK;
}

st_status st_tokenizer_decode(const st_tokenizer *t, const uint32_t *tokens, size_t n,
                              char **text, size_t *len) {
  ST_REQUIRE(t);
  ST_REQUIRE(tokens);
  ST_REQUIRE(text);
  ST_REQUIRE(len);
  *text = NULL;
  *len = 0;
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    if ((int64_t)tokens[i] >= t->vocab)
      return st_error(ST_ERR_INVALID, "tokenizer: token %zu is %u, beyond the vocabulary "
                      "(%lld ids)", i, tokens[i], (long long)t->vocab);
    total += t->bpe ? t->len[tokens[i]] : 1;
  }
  char *out = malloc(total + 1);
  if (!out) return st_error(ST_ERR_NOMEM, "tokenizer: out of memory for %zu bytes", total);
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    if (!t->bpe) out[o++] = (char)tokens[i];
    else {
      memcpy(out + o, t->bytes[tokens[i]], t->len[tokens[i]]);
      o += t->len[tokens[i]];
    }
  }
  out[o] = '\0';
  *text = out;
  *len = o;
  return ST_OK;
}

void st_tokenizer_destroy(st_tokenizer *t) {
  if (!t) return;
  for (int64_t i = 0; t->bytes && i < t->vocab; i++) free(t->bytes[i]);
  free(t->bytes);
  free(t->len);
  free(t->pkey);
  free(t->prank);
  free(t->pres);
  if (t->loc) freelocale(t->loc);
  free(t);
}
