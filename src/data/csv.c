/* CSV reader: numeric columns and one label column into float tensors. The
 * file is read whole (memory is bounded by a small multiple of its size), then
 * parsed in two passes: the first checks structure (UTF-8 BOM skipped, CRLF or
 * LF line ends, a missing final newline, blank lines skipped, no NUL bytes, no
 * ragged rows, at most 100000 columns and 64 KiB per field) and counts rows,
 * the second converts cells with strtof and insists the whole cell is a number,
 * finite unless st_csv_options.allow_nonfinite (then "nan", "inf" and "-inf"
 * cells are kept; a finite literal beyond float32 range is still an error).
 * Rows are 1-based file lines and columns are 1-based in messages, so
 * an error reads "data.csv: row 3, column 2 ('abc'): not a number". Quoting is
 * limited to one pair of double quotes around a whole field. */
#define _POSIX_C_SOURCE 200809L
#include "base/args.h"
#include "strata/data.h"
#include "base/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CSV_MAX_FIELD 65536
#define CSV_MAX_COLS 100000

/* The whole file plus a cursor over its lines. */
typedef struct csv_text {
  const char *path;
  char *buf; /* [len + 1], NUL at len */
  size_t len;
  char delim;
  bool allow_nonfinite; /* keep NaN/Inf cells */
} csv_text;

/* One line without its line end; row is its 1-based line number. */
typedef struct csv_line {
  char *p;
  size_t n;
  int64_t row;
} csv_line;

st_csv_options st_csv_default_options(void) {
  st_csv_options o = {',', true, -1, NULL, false};
  return o;
}

/* Next line at *pos (advanced past its end); false at the end of the text. */
static bool next_line(const csv_text *t, size_t *pos, int64_t *row, csv_line *l) {
  if (*pos >= t->len) return false;
  char *p = t->buf + *pos;
  char *nl = memchr(p, '\n', t->len - *pos);
  size_t n = nl ? (size_t)(nl - p) : t->len - *pos;
  *pos += n + (nl != NULL);
  l->p = p;
  l->n = n > 0 && p[n - 1] == '\r' ? n - 1 : n;
  l->row = ++*row;
  return true;
}

static bool is_blank(const csv_line *l) {
  for (size_t i = 0; i < l->n; i++)
    if (l->p[i] != ' ' && l->p[i] != '\t') return false;
  return true;
}

/* Next non-blank line. */
static bool next_row(const csv_text *t, size_t *pos, int64_t *row, csv_line *l) {
  while (next_line(t, pos, row, l))
    if (!is_blank(l)) return true;
  return false;
}

/* Count fields of a line, checking the field length and column limits. */
static st_status count_fields(const csv_text *t, const csv_line *l, int *out) {
  size_t start = 0;
  int cols = 0;
  for (;;) {
    const char *d = memchr(l->p + start, t->delim, l->n - start);
    size_t end = d ? (size_t)(d - l->p) : l->n;
    if (++cols > CSV_MAX_COLS)
      return st_error(ST_ERR_FORMAT, "%s: row %lld: more than %d columns", t->path,
                      (long long)l->row, CSV_MAX_COLS);
    if (end - start > CSV_MAX_FIELD)
      return st_error(ST_ERR_FORMAT, "%s: row %lld, column %d: field of %zu bytes is longer "
                      "than the %d-byte limit", t->path, (long long)l->row, cols,
                      end - start, CSV_MAX_FIELD);
    if (!d) break;
    start = end + 1;
  }
  *out = cols;
  return ST_OK;
}

/* Trim blanks and one pair of surrounding double quotes. */
static void trim_field(char **p, size_t *n) {
  while (*n && (**p == ' ' || **p == '\t')) (*p)++, (*n)--;
  while (*n && ((*p)[*n - 1] == ' ' || (*p)[*n - 1] == '\t')) (*n)--;
  if (*n >= 2 && **p == '"' && (*p)[*n - 1] == '"') (*p)++, *n -= 2;
}

/* Fields of one line, left to right. */
typedef struct field_iter {
  char *s, *end;
  char delim;
  bool done;
} field_iter;

static field_iter fields(const csv_text *t, const csv_line *l) {
  field_iter it = {l->p, l->p + l->n, t->delim, false};
  return it;
}

static bool next_field(field_iter *it, char **p, size_t *n) {
  if (it->done) return false;
  char *d = memchr(it->s, it->delim, (size_t)(it->end - it->s));
  *p = it->s;
  *n = (size_t)((d ? d : it->end) - it->s);
  if (d) it->s = d + 1;
  else it->done = true;
  trim_field(p, n);
  return true;
}

/* Parse one trimmed cell (p[n] is inside the buffer and restored). */
static st_status parse_cell(const csv_text *t, int64_t row, int col, char *p, size_t n,
                            float *out) {
  char save = p[n], *e = NULL;
  p[n] = '\0';
  errno = 0;
  float v = strtof(p, &e);
  int err = errno;
  bool full = n > 0 && e == p + n;
  p[n] = save;
  int shown = n > 40 ? 40 : (int)n;
  const char *more = n > 40 ? "..." : "";
  if (!full)
    return st_error(ST_ERR_FORMAT, "%s: row %lld, column %d ('%.*s%s'): not a number", t->path,
                    (long long)row, col + 1, shown, p, more);
  bool literal_nonfinite = isnan(v) || (isinf(v) && err != ERANGE);
  if (literal_nonfinite && t->allow_nonfinite) return *out = v, ST_OK;
  if (literal_nonfinite)
    return st_error(ST_ERR_NONFINITE, "%s: row %lld, column %d ('%.*s%s'): not finite "
                    "(NaN/Inf cells are rejected by default)", t->path, (long long)row, col + 1,
                    shown, p, more);
  if (isinf(v))
    return st_error(ST_ERR_FORMAT, "%s: row %lld, column %d ('%.*s%s'): out of float32 range",
                    t->path, (long long)row, col + 1, shown, p, more);
  *out = v;
  return ST_OK;
}

/* Which column is the label: by header name, or by index (-1 = last). */
static st_status find_label(const csv_text *t, const st_csv_options *o, const csv_line *first,
                            int cols, int *label) {
  if (o->label_name && o->header) {
    field_iter it = fields(t, first);
    char *p;
    size_t n;
    size_t want = strlen(o->label_name);
    for (int c = 0; next_field(&it, &p, &n); c++)
      if (n == want && memcmp(p, o->label_name, n) == 0) return *label = c, ST_OK;
    return st_error(ST_ERR_INVALID, "%s: row %lld: no column named '%s' in the header",
                    t->path, (long long)first->row, o->label_name);
  }
  if (o->label_name)
    return st_error(ST_ERR_INVALID, "%s: label column '%s' given by name but the file has no "
                    "header row", t->path, o->label_name);
  *label = o->label_column < 0 ? cols - 1 : o->label_column;
  if (o->label_column < -1 || *label >= cols)
    return st_error(ST_ERR_INVALID, "%s: label column %d out of range (the file has %d "
                    "columns; -1 means the last)", t->path, o->label_column, cols);
  return ST_OK;
}

/* Structure of the file: columns, label, where data starts, how many rows. */
typedef struct csv_layout {
  int cols, label;
  size_t data_pos;
  int64_t data_row, rows;
} csv_layout;

static st_status check_nul(const csv_text *t) {
  const char *z = memchr(t->buf, '\0', t->len);
  if (!z) return ST_OK;
  int64_t row = 1;
  for (const char *q = t->buf; q < z; q++) row += *q == '\n';
  return st_error(ST_ERR_FORMAT, "%s: row %lld: embedded NUL byte at offset %zu", t->path,
                  (long long)row, (size_t)(z - t->buf));
}

static st_status layout(const csv_text *t, const st_csv_options *o, csv_layout *L) {
  size_t pos = t->len >= 3 && memcmp(t->buf, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
  int64_t row = 0;
  csv_line first, l;
  st_status s = check_nul(t);
  if (s != ST_OK) return s;
  L->data_pos = pos;
  L->data_row = 0;
  if (!next_row(t, &pos, &row, &first))
    return st_error(ST_ERR_FORMAT, "%s: empty file (no rows)", t->path);
  if ((s = count_fields(t, &first, &L->cols)) != ST_OK) return s;
  if (L->cols < 2)
    return st_error(ST_ERR_FORMAT, "%s: row %lld has 1 column; need at least 2 (features "
                    "and a label)", t->path, (long long)first.row);
  if ((s = find_label(t, o, &first, L->cols, &L->label)) != ST_OK) return s;
  if (o->header) L->data_pos = pos, L->data_row = row;
  size_t p2 = L->data_pos;
  int64_t r2 = L->data_row;
  for (L->rows = 0; next_row(t, &p2, &r2, &l); L->rows++) {
    int k;
    if ((s = count_fields(t, &l, &k)) != ST_OK) return s;
    if (k != L->cols)
      return st_error(ST_ERR_FORMAT, "%s: row %lld has %d columns, expected %d (as in row %lld)",
                      t->path, (long long)l.row, k, L->cols, (long long)first.row);
  }
  if (L->rows == 0)
    return st_error(ST_ERR_FORMAT, "%s: no data rows (only the header, row %lld)", t->path,
                    (long long)first.row);
  return ST_OK;
}

/* Second pass: convert every cell. x [rows, cols-1], y [rows]. */
static st_status parse_rows(const csv_text *t, const csv_layout *L, float *x, float *y) {
  size_t pos = L->data_pos;
  int64_t row = L->data_row;
  csv_line l;
  for (int64_t r = 0; next_row(t, &pos, &row, &l); r++) {
    field_iter it = fields(t, &l);
    float *xr = x + (size_t)r * (size_t)(L->cols - 1);
    char *p;
    size_t n;
    for (int c = 0; next_field(&it, &p, &n); c++) {
      float *dst = c == L->label ? &y[r] : xr++;
      st_status s = parse_cell(t, l.row, c, p, n, dst);
      if (s != ST_OK) return s;
    }
  }
  return ST_OK;
}

static st_status alloc_out(const csv_text *t, const csv_layout *L, st_tensor *x, st_tensor *y) {
  size_t nx;
  if (!st_mul_size((size_t)L->rows, (size_t)(L->cols - 1) * sizeof(float), &nx))
    return st_error(ST_ERR_FORMAT, "%s: %lld rows x %d columns overflow size_t", t->path,
                    (long long)L->rows, L->cols);
  x->dtype = y->dtype = ST_F32;
  x->rank = 2;
  x->dims[0] = y->dims[0] = L->rows;
  x->dims[1] = L->cols - 1;
  y->rank = 1;
  x->data = st_alloc(nx);
  y->data = x->data ? st_alloc((size_t)L->rows * sizeof(float)) : NULL;
  return y->data ? ST_OK : ST_ERR_NOMEM;
}

st_status st_csv_read(const char *path, const st_csv_options *o, st_tensor *x,
                      st_tensor *y) {
  ST_REQUIRE(path);
  ST_REQUIRE(x);
  ST_REQUIRE(y);
  st_csv_options def = st_csv_default_options();
  if (!o) o = &def;
  memset(x, 0, sizeof *x);
  memset(y, 0, sizeof *y);
  char d = o->delimiter;
  if (d == '\0' || d == '\n' || d == '\r' || d == '"' || d == ' ')
    return st_error(ST_ERR_INVALID, "%s: unusable CSV delimiter 0x%02x", path, (unsigned char)d);
  csv_text t = {path, NULL, 0, d, o->allow_nonfinite};
  csv_layout L;
  st_status s = st__read_all(path, SIZE_MAX, &t.buf, &t.len);
  if (s == ST_OK) s = layout(&t, o, &L);
  if (s == ST_OK) s = alloc_out(&t, &L, x, y);
  if (s == ST_OK) s = parse_rows(&t, &L, x->data, y->data);
  free(t.buf);
  if (s != ST_OK) {
    st_tensor_destroy(x);
    st_tensor_destroy(y);
  }
  return s;
}
