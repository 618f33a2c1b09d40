/* ff_error.h - status codes and the message buffer every library call fills.
 * Library code never exits: it returns 0 or a negative FF_E* status and
 * leaves one line in an ff_error for the caller (only main prints it). */
#ifndef FF_ERROR_H
#define FF_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

enum {
  FF_OK = 0,
  FF_EINVAL = -1,  /* bad argument or description */
  FF_EIO = -2,     /* a file could not be read or written */
  FF_EFORMAT = -3, /* a malformed safetensors / .npy file */
  FF_ENOMEM = -4,  /* an allocation failed or a size overflowed */
  FF_ETOKEN = -5,  /* a token id outside the vocabulary */
  FF_ELENGTH = -6, /* a sequence length of 0, above T, or T above max_seq */
  FF_ESHAPE = -7,  /* a tensor or array with the wrong shape, rank or dtype */
  FF_EMISSING = -8 /* a tensor the model needs is not in the weights file */
};

#define FF_ERROR_MAX 512

typedef struct ff_error {
  int code;
  char msg[FF_ERROR_MAX];
} ff_error;

/* Formats the message into err (if not NULL) and returns code.  The
 * arguments may include err->msg itself (a prefix added to a message), and
 * control characters come out escaped (\n, \x1b): one inert line. */
int ff_fail(ff_error *err, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#ifdef __cplusplus
}
#endif

#endif
