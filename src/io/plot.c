/* Training curves as a self-contained SVG: two panels side by side, "Loss" and
 * "Accuracy", epoch on x, round ("nice") tick values on both axes, gridlines,
 * train curves solid and validation curves dashed (when present), a legend in
 * each panel's header row so it never covers the curves; the plot area keeps
 * an inset margin so markers never sit on its frame. Non-finite values are
 * skipped; one epoch or a constant series gets a padded range. The file
 * replaces path atomically (st__atomic_open/commit, base/fileio.h). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/args.h"
#include "strata/base.h"
#include "base/fileio.h"
#include "strata/train.h"

/* Page geometry in SVG user units (px). */
enum {
  PAGE_W = 1000, PAGE_H = 440, PANEL_W = PAGE_W / 2, PANEL_TOP = 48,
  PLOT_L = 78, PLOT_R = 24, PLOT_T = 40, PLOT_B = 58, INSET = 10
};
static const char *const TRAIN_COLOR = "#1f77b4", *const VAL_COLOR = "#e8710a";

typedef struct axis {
  double lo, hi, step; /* data range covered by the axis and the tick step */
  int decimals;        /* digits after the point in tick labels; -1 = %g */
} axis;

typedef struct panel {
  const char *name, *ylabel; /* "Loss", "loss" */
  int left;                  /* x offset of the panel on the page */
  bool accuracy;             /* which st_epoch_logs fields it draws */
} panel;

/* Plot-area box of a panel, in page px. */
typedef struct box { double x0, x1, y0, y1; } box;

/* ---- numbers -------------------------------------------------------------- */

/* Heckbert's nice number: 1, 2, 5 or 10 times a power of ten near x. */
static double nice_num(double x, bool round_it) {
  double e = floor(log10(x)), f = x / pow(10, e), nf;
  if (round_it) nf = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
  else nf = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
  return nf * pow(10, e);
}

static int tick_decimals(double step, double lo, double hi) {
  double mag = fmax(fabs(lo), fabs(hi));
  if (mag >= 1e5 || step < 1e-6) return -1;
  for (int d = 0; d <= 6; d++) {
    double s = step * pow(10, d);
    if (fabs(s - round(s)) < 1e-6 * fmax(1, s)) return d;
  }
  return -1;
}

/* A y axis covering [mn, mx] with about `target` nice ticks. */
static axis nice_axis(double mn, double mx, int target) {
  if (!isfinite(mn) || !isfinite(mx)) mn = 0, mx = 1; /* nothing finite */
  if (mx - mn <= 1e-12 * fmax(1, fabs(mx))) {          /* constant series */
    double pad = fmax(fabs(mx) * 0.05, 0.01);
    mn -= pad, mx += pad;
  }
  axis a;
  a.step = nice_num(nice_num(mx - mn, false) / (target - 1), true);
  a.lo = floor(mn / a.step + 1e-9) * a.step;
  a.hi = ceil(mx / a.step - 1e-9) * a.step;
  if (a.hi <= a.lo) a.hi = a.lo + a.step;
  a.decimals = tick_decimals(a.step, a.lo, a.hi);
  return a;
}

/* The epoch axis: integer ticks; a single epoch gets a range of one each side. */
static axis epoch_axis(const st_history *h) {
  double mn = INFINITY, mx = -INFINITY;
  for (int e = 0; e < h->epochs; e++) {
    mn = fmin(mn, h->logs[e].epoch + 1);
    mx = fmax(mx, h->logs[e].epoch + 1);
  }
  axis a = {mn, mx, 1, 0}; /* lo == hi (one epoch) is drawn centred */
  if (mx - mn > 10) a.step = fmax(1, round(nice_num((mx - mn) / 8, true)));
  return a;
}

static double value_of(const st_epoch_logs *l, bool accuracy, bool val) {
  if (val) return accuracy ? l->val_accuracy : l->val_loss;
  return accuracy ? l->accuracy : l->loss;
}

static void fmt_tick(char *buf, size_t n, double v, int decimals) {
  if (fabs(v) < 1e-12) v = 0; /* no "-0.0" */
  if (decimals < 0) snprintf(buf, n, "%g", v);
  else snprintf(buf, n, "%.*f", decimals, v);
}

/* ---- drawing ------------------------------------------------------------- */

static void put_escaped(FILE *f, const char *s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    switch (c) {
      case '&': fputs("&amp;", f); break;
      case '<': fputs("&lt;", f); break;
      case '>': fputs("&gt;", f); break;
      case '"': fputs("&quot;", f); break;
      case '\'': fputs("&apos;", f); break;
      default:
        if (c >= 0x20 || c == '\t') fputc(c, f); /* XML 1.0 forbids other controls */
        else fputc(' ', f);
    }
  }
}

static double map_x(const box *b, const axis *a, double v) {
  if (a->hi <= a->lo) return (b->x0 + b->x1) / 2;
  return b->x0 + INSET + (v - a->lo) / (a->hi - a->lo) * (b->x1 - b->x0 - 2 * INSET);
}
static double map_y(const box *b, const axis *a, double v) {
  return b->y1 - INSET - (v - a->lo) / (a->hi - a->lo) * (b->y1 - b->y0 - 2 * INSET);
}

static void draw_grid(FILE *f, const box *b, const axis *xa, const axis *ya) {
  char lab[64];
  fputs("<g class=\"grid\" stroke=\"#e3e3e3\" stroke-width=\"1\">\n", f);
  int ny = (int)llround((ya->hi - ya->lo) / ya->step);
  for (int i = 0; i <= ny; i++) {
    double y = map_y(b, ya, ya->lo + i * ya->step);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", b->x0, y, b->x1, y);
  }
  fputs("</g>\n<g class=\"ticks\" font-size=\"12\" fill=\"#444\">\n", f);
  for (int i = 0; i <= ny; i++) {
    double v = ya->lo + i * ya->step;
    fmt_tick(lab, sizeof lab, v, ya->decimals);
    fprintf(f, "<text class=\"ytick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
            b->x0 - 8, map_y(b, ya, v) + 4, lab);
  }
  double first = ceil(xa->lo / xa->step) * xa->step;
  for (double v = first; v <= xa->hi + 1e-9; v += xa->step) {
    double x = map_x(b, xa, v);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\"/>\n", x,
            b->y1, x, b->y1 + 5);
    fprintf(f, "<text class=\"xtick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n",
            x, b->y1 + 19, v);
  }
  fputs("</g>\n", f);
}

static void draw_frame(FILE *f, const box *b, const panel *p) {
  fprintf(f,
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
          "stroke=\"#888\" stroke-width=\"1\"/>\n",
          b->x0, b->y0, b->x1 - b->x0, b->y1 - b->y0);
  fprintf(f, "<text class=\"xlabel\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
             "font-size=\"13\" fill=\"#333\">epoch</text>\n",
          (b->x0 + b->x1) / 2, b->y1 + 40);
  double cx = p->left + 24, cy = (b->y0 + b->y1) / 2;
  fprintf(f, "<text class=\"ylabel\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
             "font-size=\"13\" fill=\"#333\" transform=\"rotate(-90 %.1f %.1f)\">%s</text>\n",
          cx, cy, cx, cy, p->ylabel);
  fprintf(f, "<text class=\"panel-title\" x=\"%.1f\" y=\"%.1f\" font-size=\"15\" "
             "font-weight=\"bold\" fill=\"#222\">%s</text>\n",
          b->x0, b->y0 - 14, p->name);
}

/* One series: a polyline through its finite points plus a marker per point. */
static void draw_series(FILE *f, const st_history *h, const box *b, const axis *xa,
                        const axis *ya, const panel *p, bool val) {
  const char *color = val ? VAL_COLOR : TRAIN_COLOR;
  const char *who = val ? "validation" : "train";
  double r = h->epochs <= 40 ? 3.5 : h->epochs <= 150 ? 2 : 0;
  int n = 0;
  for (int e = 0; e < h->epochs; e++) n += !!isfinite(value_of(&h->logs[e], p->accuracy, val));
  if (n == 0) return;
  n = 0;
  fprintf(f, "<g class=\"series %s\">\n<polyline fill=\"none\" stroke=\"%s\" "
             "stroke-width=\"2\" stroke-linejoin=\"round\"%s points=\"",
          who, color, val ? " stroke-dasharray=\"7 4\"" : "");
  for (int e = 0; e < h->epochs; e++) {
    double v = value_of(&h->logs[e], p->accuracy, val);
    if (isfinite(v))
      fprintf(f, "%s%.2f,%.2f", n++ ? " " : "", map_x(b, xa, h->logs[e].epoch + 1),
              map_y(b, ya, v));
  }
  fputs("\"/>\n", f);
  for (int e = 0; r > 0 && e < h->epochs; e++) {
    double v = value_of(&h->logs[e], p->accuracy, val);
    if (!isfinite(v)) continue;
    fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"%.1f\" fill=\"%s\" stroke=\"%s\" "
               "stroke-width=\"1.5\"><title>%s %s, epoch %d: %.6g</title></circle>\n",
            map_x(b, xa, h->logs[e].epoch + 1), map_y(b, ya, v), r, val ? "#fff" : color,
            color, who, p->ylabel, h->logs[e].epoch + 1, v);
  }
  fputs("</g>\n", f);
}

/* Legend in the panel header, right-aligned above the plot area. */
static void draw_legend(FILE *f, const box *b, bool has_val) {
  double y = b->y0 - 19, x = b->x1 - (has_val ? 190 : 70);
  fputs("<g class=\"legend\" font-size=\"12\" fill=\"#333\">\n", f);
  for (int i = 0; i < (has_val ? 2 : 1); i++) {
    const char *color = i ? VAL_COLOR : TRAIN_COLOR;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
               "stroke-width=\"2\"%s/>\n",
            x, y, x + 28, y, color, i ? " stroke-dasharray=\"7 4\"" : "");
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\" stroke=\"%s\" "
               "stroke-width=\"1.5\"/>\n",
            x + 14, y, i ? "#fff" : color, color);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", x + 34, y + 4,
            i ? "validation" : "train");
    x += 86;
  }
  fputs("</g>\n", f);
}

static void draw_panel(FILE *f, const st_history *h, const panel *p, bool has_val) {
  box b = {p->left + PLOT_L, p->left + PANEL_W - PLOT_R, PANEL_TOP + PLOT_T, PAGE_H - PLOT_B};
  double mn = INFINITY, mx = -INFINITY;
  for (int e = 0; e < h->epochs; e++)
    for (int v = 0; v < (has_val ? 2 : 1); v++) {
      double x = value_of(&h->logs[e], p->accuracy, v);
      if (isfinite(x)) mn = fmin(mn, x), mx = fmax(mx, x);
    }
  axis ya = nice_axis(mn, mx, 6), xa = epoch_axis(h);
  fprintf(f, "<g class=\"panel\" id=\"%s\">\n", p->accuracy ? "accuracy" : "loss");
  draw_grid(f, &b, &xa, &ya);
  draw_frame(f, &b, p);
  draw_series(f, h, &b, &xa, &ya, p, false);
  if (has_val) draw_series(f, h, &b, &xa, &ya, p, true);
  draw_legend(f, &b, has_val);
  fputs("</g>\n", f);
}

static void write_svg(FILE *f, const st_history *h, const char *title) {
  bool has_val = false;
  for (int e = 0; e < h->epochs; e++) has_val |= h->logs[e].has_validation;
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
             "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
             "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
             "<title>",
          PAGE_W, PAGE_H, PAGE_W, PAGE_H);
  put_escaped(f, title);
  fprintf(f, "</title>\n<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n"
             "<text class=\"title\" x=\"%d\" y=\"30\" text-anchor=\"middle\" font-size=\"18\" "
             "font-weight=\"bold\" fill=\"#111\">",
          PAGE_W / 2);
  put_escaped(f, title);
  fputs("</text>\n", f);
  const panel panels[2] = {{"Loss", "loss", 0, false}, {"Accuracy", "accuracy", PANEL_W, true}};
  for (int i = 0; i < 2; i++) draw_panel(f, h, &panels[i], has_val);
  fputs("</svg>\n", f);
}

/* ---- the file ------------------------------------------------------------ */

st_status st_plot_history_svg(const st_history *h, const char *title, const char *path) {
  ST_REQUIRE(h);
  ST_REQUIRE(path);
  if (!path[0]) return st_error(ST_ERR_INVALID, "st_plot_history_svg: path is empty");
  if (h->epochs <= 0 || !h->logs)
    return st_error(ST_ERR_INVALID, "%s: nothing to plot (history has no epochs)", path);
  st__atomic_file a;
  st_status s = st__atomic_open(&a, path);
  if (s != ST_OK) return s;
  write_svg(a.f, h, title ? title : "");
  return st__atomic_commit(&a, ferror(a.f) ? errno : 0); /* errno of the failed write */
}
