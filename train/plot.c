/* plot.c - the loss curves as a hand-written SVG: the training loss per
 * step (averaged into at most 1000 points), the held-out loss where it was
 * measured, axes with round ticks.  The same history gives the same bytes. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_internal.h"

#define W 720
#define H 420
#define LEFT 70
#define RIGHT 20
#define TOP 40
#define BOTTOM 50
#define MAX_POINTS 1000

/* a text buffer that grows */
typedef struct {
  char *s;
  size_t n, cap;
  int failed;
} text;

static void put(text *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void put(text *t, const char *fmt, ...) {
  va_list ap;
  for (int tries = 0; tries < 2 && !t->failed; tries++) {
    va_start(ap, fmt);
    int k = vsnprintf(t->s ? t->s + t->n : NULL, t->s ? t->cap - t->n : 0, fmt, ap);
    va_end(ap);
    if (k < 0) {
      t->failed = 1;
      return;
    }
    if (t->s && t->n + (size_t)k < t->cap) {
      t->n += (size_t)k;
      return;
    }
    size_t cap = (t->cap + (size_t)k + 1) * 2;
    char *s = realloc(t->s, cap);
    if (!s) {
      t->failed = 1;
      return;
    }
    t->s = s, t->cap = cap;
  }
}

/* a round step for about n ticks over span */
static double tick_step(double span, int n) {
  double raw = span / n, p = pow(10.0, floor(log10(raw))), f = raw / p;
  return p * (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10);
}

typedef struct {
  double x0, x1, y0, y1;
} frame;

static double px(const frame *f, double x) { return LEFT + (x - f->x0) / (f->x1 - f->x0) * (W - LEFT - RIGHT); }
static double py(const frame *f, double y) { return H - BOTTOM - (y - f->y0) / (f->y1 - f->y0) * (H - TOP - BOTTOM); }

static void axes(text *t, const frame *f, const char *title) {
  put(t, "<text x=\"%d\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">%s</text>\n", W / 2, title);
  put(t, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#444\"/>\n", LEFT, TOP,
      W - LEFT - RIGHT, H - TOP - BOTTOM);
  double sx = tick_step(f->x1 - f->x0, 6), sy = tick_step(f->y1 - f->y0, 5);
  for (double x = ceil(f->x0 / sx) * sx; x <= f->x1 + 1e-9 * sx; x += sx)
    put(t, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%d\" "
           "font-size=\"11\" text-anchor=\"middle\">%g</text>\n", px(f, x), TOP, px(f, x), H - BOTTOM, px(f, x),
        H - BOTTOM + 16, x);
  for (double y = ceil(f->y0 / sy) * sy; y <= f->y1 + 1e-9 * sy; y += sy)
    put(t, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%d\" y=\"%.1f\" "
           "font-size=\"11\" text-anchor=\"end\">%g</text>\n", LEFT, py(f, y), W - RIGHT, py(f, y), LEFT - 6,
        py(f, y) + 4, fabs(y) < 1e-12 * sy ? 0.0 : y);
  put(t, "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\">step</text>\n", (LEFT + W - RIGHT) / 2,
      H - 12);
  put(t, "<text x=\"16\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 16 %d)\">loss"
         "</text>\n", (TOP + H - BOTTOM) / 2, (TOP + H - BOTTOM) / 2);
}

int ff_trainer_plot(const ff_trainer *t, const char *path, ff_error *err) {
  int64_t n = t->step;
  if (t->rank) return 0; /* data-parallel: rank 0 writes */
  if (n == 0) return ff_fail(err, FF_EINVAL, "%s: no steps to plot", path);
  frame f = {0.0, (double)n, 0.0, 0.0};
  for (int64_t i = 0; i < n; i++)
    if (isfinite(t->history[i * 4]) && t->history[i * 4] > f.y1) f.y1 = t->history[i * 4];
  for (int i = 0; i < t->n_valid; i++)
    if (isfinite(t->valid[i].loss) && t->valid[i].loss > f.y1) f.y1 = t->valid[i].loss;
  f.y1 = f.y1 > 0 ? f.y1 * 1.05 : 1.0;
  if (n == 1) f.x1 = 2.0;
  text s = {0};
  put(&s, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
          "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H, W, H);
  char title[FF_NAME_MAX + 64];
  snprintf(title, sizeof title, "%s: loss over %lld steps", t->c->name, (long long)n);
  axes(&s, &f, title);
  /* training: the mean of each bucket of steps, at the bucket's middle */
  int64_t per = (n + MAX_POINTS - 1) / MAX_POINTS;
  put(&s, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"");
  for (int64_t a = 0; a < n; a += per) {
    int64_t b = a + per < n ? a + per : n;
    double sum = 0.0;
    for (int64_t i = a; i < b; i++) sum += t->history[i * 4];
    put(&s, "%s%.1f,%.1f", a ? " " : "", px(&f, (double)(a + b + 1) / 2.0), py(&f, sum / (double)(b - a)));
  }
  put(&s, "\"/>\n");
  if (t->n_valid > 0) {
    put(&s, "<polyline fill=\"none\" stroke=\"#d62728\" stroke-width=\"1.5\" points=\"");
    for (int i = 0; i < t->n_valid; i++)
      put(&s, "%s%.1f,%.1f", i ? " " : "", px(&f, t->valid[i].step), py(&f, t->valid[i].loss));
    put(&s, "\"/>\n");
    for (int i = 0; i < t->n_valid; i++)
      put(&s, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#d62728\"/>\n", px(&f, t->valid[i].step),
          py(&f, t->valid[i].loss));
  }
  int lx = W - RIGHT - 170;
  put(&s, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#1f77b4\" stroke-width=\"2\"/><text x=\"%d\" "
          "y=\"%d\" font-size=\"12\">training loss</text>\n", lx, TOP + 16, lx + 24, TOP + 16, lx + 30, TOP + 20);
  if (t->n_valid > 0)
    put(&s, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#d62728\" stroke-width=\"2\"/><text x=\"%d\" "
            "y=\"%d\" font-size=\"12\">held-out loss</text>\n", lx, TOP + 34, lx + 24, TOP + 34, lx + 30, TOP + 38);
  put(&s, "</svg>\n");
  int rc = s.failed ? ff_fail(err, FF_ENOMEM, "out of memory for the plot") : ff_write_file_atomic(path, s.s, s.n, err);
  free(s.s);
  return rc;
}
