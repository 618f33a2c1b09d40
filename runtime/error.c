/* error.c - the one-line error message of a failed call. */
#include <stdarg.h>
#include <stdio.h>

#include "ff_error.h"

int ff_fail(ff_error *err, int code, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->code = code;
  }
  return code;
}
