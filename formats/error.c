/* error.c - the one-line error message of a failed call. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ff_error.h"

/* Control characters (a newline, ESC of a terminal sequence, DEL) come from
 * descriptions and weight files; they become \n, \x1b, ... so a message
 * stays one inert line.  Bytes >= 0x80 (UTF-8) pass through. */
static void escape_into(char *dst, size_t cap, const char *src) {
  static const char hex[] = "0123456789abcdef";
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)src; *p && n + 1 < cap; p++) {
    if (*p >= 0x20 && *p != 0x7f) {
      dst[n++] = (char)*p;
      continue;
    }
    char esc[5] = {'\\', 0, 0, 0, 0};
    if (*p == '\n') esc[1] = 'n';
    else if (*p == '\t') esc[1] = 't';
    else if (*p == '\r') esc[1] = 'r';
    else esc[1] = 'x', esc[2] = hex[*p >> 4], esc[3] = hex[*p & 15];
    size_t len = strlen(esc);
    if (n + len + 1 > cap) break;
    memcpy(dst + n, esc, len);
    n += len;
  }
  dst[n] = 0;
}

int ff_fail(ff_error *err, int code, const char *fmt, ...) {
  if (err) {
    /* formatted apart first: the arguments may be err->msg itself (a prefix added to a message) */
    char text[FF_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    escape_into(err->msg, sizeof err->msg, text);
    err->code = code;
  }
  return code;
}
