/* zoffload common definitions: error reporting, contract checks, dtypes.
 * Library functions return 0 or a negative errno; constructors return NULL and
 * leave a message for zo_last_error(). Broken contracts (bad handle, shape
 * mismatch) abort through ZO_ASSERT with file:line and the failed condition.
 * Nothing here allocates; the last-error buffer is thread-local. */
#ifndef ZO_COMMON_H
#define ZO_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The last three exist so that files holding them (the boolean attention
 * masks in published GPT-2 checkpoints) can be opened and skipped; no op
 * computes in them. */
enum zo_dtype { ZO_F32, ZO_BF16, ZO_F16, ZO_I32, ZO_U16, ZO_U8, ZO_F64, ZO_I64, ZO_BOOL };

/* Bytes of one element of dtype. */
size_t zo_dtype_size(enum zo_dtype dtype);
/* "F32", "BF16", ... as in safetensors. */
const char *zo_dtype_name(enum zo_dtype dtype);

/* Sets the calling thread's last error message (printf format). Returns err
 * unchanged so that `return zo_error(-ENOMEM, "...")` reads naturally. */
int zo_error(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The calling thread's last error message, "" when none. */
const char *zo_last_error(void);

#ifdef __cplusplus
#define ZO_NORETURN [[noreturn]]
#else
#define ZO_NORETURN _Noreturn
#endif

/* Aborts with file:line and the message. Used by ZO_ASSERT. */
ZO_NORETURN void zo_abort(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define ZO_ASSERT(cond)                                                         \
  do {                                                                          \
    if (!(cond)) zo_abort(__FILE__, __LINE__, "assertion failed: %s", #cond);   \
  } while (0)

/* Human-readable byte count ("1.50 GiB") into buf; returns buf. */
const char *zo_format_bytes(size_t nbytes, char buf[32]);

/* The /proc/meminfo entry key ("MemTotal", "MemAvailable", ...) in bytes
 * (its kB figure x 1024); 0 when the file or the entry is missing. The one
 * reader of that file: the CPU backend, the host check and `zoffload env`
 * call it. Any thread. */
size_t zo_meminfo_bytes(const char *key);

/* Median of x[0..n) (n >= 1); sorts x in place. For benchmark figures. */
double zo_median(double *x, int n);

/* Monotonic time in seconds. */
double zo_time_s(void);

#ifdef __cplusplus
}
#endif
#endif /* ZO_COMMON_H */
