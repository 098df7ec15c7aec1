/* Scaffolding of the libFuzzer targets (tests/fuzz/fuzz-*.c): a private
 * directory per process, removed at exit, and writing an input to a file in
 * it, since every parser under test reads files. Header-only. */
#ifndef ZO_FUZZ_COMMON_H
#define ZO_FUZZ_COMMON_H

#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_dir_path[64];

static inline int fuzz_rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st;
  (void)type;
  (void)ftw;
  return remove(path);
}

static inline void fuzz_dir_remove(void) {
  nftw(fuzz_dir_path, fuzz_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The process's private directory (created on first use, removed at exit). */
static inline const char *fuzz_dir(void) {
  if (!fuzz_dir_path[0]) {
    snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "/tmp/zo-fuzz-XXXXXX");
    if (!mkdtemp(fuzz_dir_path)) {
      perror("mkdtemp");
      abort();
    }
    atexit(fuzz_dir_remove);
  }
  return fuzz_dir_path;
}

/* "<fuzz_dir>/<name>" into out (cap bytes). */
static inline const char *fuzz_path(const char *name, char *out, size_t cap) {
  snprintf(out, cap, "%s/%s", fuzz_dir(), name);
  return out;
}

/* Writes n bytes to path, replacing it. */
static inline void fuzz_write(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
    perror(path);
    abort();
  }
}

/* Splits data at NUL bytes into at most cap NUL-terminated strings (malloc'd
 * copies in one block, *block: free it). Returns how many. */
static inline int fuzz_split(const uint8_t *data, size_t n, char **parts, int cap, char **block) {
  char *b = malloc(n + 1);
  if (!b) abort();
  memcpy(b, data, n);
  b[n] = '\0';
  int k = 0;
  for (size_t i = 0; k < cap;) {
    parts[k++] = b + i;
    const char *z = memchr(b + i, '\0', n + 1 - i);
    i = (size_t)(z - b) + 1;
    if (i > n) break;
  }
  *block = b;
  return k;
}

#endif
