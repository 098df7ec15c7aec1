/* Token files: mmap'ed read-only and validated once at open, then cut into
 * (B,T) micro-batches read with pread and converted to int32 on the fly: a
 * file truncated under a running job is an -EIO naming it, never a SIGBUS
 * from a mapped page that no longer exists (the map lives only during open). The micro-batch order is a pure
 * function of the micro-batch index (see zo/data.h), so seek is O(1) and a
 * resumed run reads exactly what an uninterrupted one would. Deliberately no
 * prefetch thread: copying B*T tokens from the page cache costs microseconds
 * next to a training step. Tokens are 1, 2 or 4 bytes wide (text, uint16,
 * uint32; an llm.c shard's header picks 2 or 4). Also `zoffload prepare`
 * (text -> uint16 files) and the token-file writers it and the tests use.
 * Assumes a little-endian host, as llm.c's files do. */
#include "zo/data.h"
#include "zo/fsutil.h"
#include "zo/prepare.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token files are little-endian");

#define LLMC_HEADER_NBYTES (ZO_LLMC_HEADER_INTS * sizeof(int32_t))

__extension__ typedef unsigned __int128 u128;

struct zo_data {
  enum zo_data_format fmt;
  void *map;          /* the whole file, PROT_READ; open only, NULL after */
  size_t map_nbytes;  /* bytes */
  const void *tokens;  /* (n_tokens,) of uint8, uint16 or uint32, inside map; open only */
  int fd;              /* the file, read by zo_data_next */
  char *path;          /* for messages (owned) */
  size_t file_nbytes;  /* bytes at open */
  size_t data_off;     /* bytes: file offset of token 0 */
  uint8_t *stage;      /* (rank_BT + 1) tokens of the file's width: one window */
  uint32_t vocab;      /* vocab_size: every id read is below it */
  size_t token_nbytes; /* 1, 2 or 4 */
  size_t n_tokens;
  int B, T;
  size_t BT;       /* tokens of inputs per global micro-batch (all ranks' rows) */
  size_t rank_off; /* tokens: this rank's first row in the global micro-batch */
  size_t rank_BT;  /* tokens of inputs this rank reads per micro-batch */
  bool shuffle;
  uint64_t seed;
  uint64_t position; /* micro-batches handed out */
  uint64_t n_windows; /* shuffle only: floor((n_tokens-1)/BT) */
  uint64_t *perm;     /* shuffle only: (n_windows,) window order of perm_epoch */
  uint64_t perm_epoch;
  bool perm_valid;
  int mask_fd;         /* the loss mask beside the file (zo/data.h), -1: none */
  char *mask_path;     /* for messages (owned), NULL: none */
  uint8_t *mask_stage; /* (BT + 1) mask bytes: one global window */
};

/* ---- random permutation ------------------------------------------------- */

static uint64_t splitmix64_next(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro256ss_next(uint64_t s[4]) {
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

/* Uniform in [0, range), range >= 1, without modulo bias (Lemire 2019). */
static uint64_t uniform_below(uint64_t s[4], uint64_t range) {
  u128 m = (u128)xoshiro256ss_next(s) * range;
  uint64_t low = (uint64_t)m;
  if (low < range) {
    uint64_t threshold = -range % range;
    while (low < threshold) {
      m = (u128)xoshiro256ss_next(s) * range;
      low = (uint64_t)m;
    }
  }
  return (uint64_t)(m >> 64);
}

static void build_permutation(struct zo_data *d, uint64_t epoch) {
  /* Epoch e's generator is keyed by a hash of (seed, e), not seed + e, so
   * that consecutive epochs are not shifted copies of one splitmix stream. */
  uint64_t mixed_epoch = epoch;
  uint64_t key = d->seed ^ splitmix64_next(&mixed_epoch);
  uint64_t s[4];
  for (int k = 0; k < 4; k++) s[k] = splitmix64_next(&key);
  uint64_t n = d->n_windows;
  for (uint64_t k = 0; k < n; k++) d->perm[k] = k;
  for (uint64_t k = n - 1; k >= 1; k--) {
    uint64_t j = uniform_below(s, k + 1);
    uint64_t tmp = d->perm[k];
    d->perm[k] = d->perm[j];
    d->perm[j] = tmp;
  }
  d->perm_epoch = epoch;
  d->perm_valid = true;
}

/* ---- open and validate -------------------------------------------------- */

int zo_data_format_parse(const char *name, enum zo_data_format *fmt) {
  static const struct {
    const char *name;
    enum zo_data_format fmt;
  } names[] = {{"text", ZO_DATA_TEXT}, {"llmc", ZO_DATA_LLMC}, {"u16", ZO_DATA_U16}, {"u32", ZO_DATA_U32}};
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
    if (strcmp(name, names[k].name) == 0) {
      *fmt = names[k].fmt;
      return 0;
    }
  }
  return zo_error(-EINVAL, "data format '%s' is unknown; valid: \"text\" (raw bytes), \"llmc\" (llm.c shard, "
                           "uint16 or uint32 tokens), \"u16\" (flat uint16 tokens), \"u32\" (flat uint32 tokens)",
                  name);
}

const char *zo_data_format_name(enum zo_data_format fmt) {
  switch (fmt) {
  case ZO_DATA_TEXT: return "text";
  case ZO_DATA_LLMC: return "llmc";
  case ZO_DATA_U16: return "u16";
  case ZO_DATA_U32: return "u32";
  }
  return "?";
}

/* The valid llm.c headers, for messages. */
#define LLMC_VALID_HEADERS \
  "{magic 20240520, version 1} (uint16 tokens) or {magic 20240801, version 7} (uint32 tokens)"

/* Checks an llm.c header: head holds the file's first min(nbytes, 1024)
 * bytes, nbytes is the file size. Sets *n_tokens and *token_nbytes (2 or 4). */
static int llmc_check(const char *path, const uint8_t *head, size_t nbytes, size_t *n_tokens,
                      size_t *token_nbytes) {
  int32_t magic = 0, version = 0, count = 0;
  if (nbytes < sizeof magic)
    return zo_error(-EINVAL, "data file '%s' is truncated: %zu bytes, but an llm.c shard starts with a %zu-byte header",
                    path, nbytes, LLMC_HEADER_NBYTES);
  memcpy(&magic, head, sizeof magic);
  if (magic != ZO_LLMC_MAGIC && magic != ZO_LLMC32_MAGIC)
    return zo_error(-EINVAL, "data file '%s' is not an llm.c token shard: wrong magic %d, expected %d (uint16 "
                             "tokens) or %d (uint32 tokens) (a flat uint16 file is format \"u16\", a flat uint32 "
                             "file \"u32\", raw text \"text\")",
                    path, (int)magic, ZO_LLMC_MAGIC, ZO_LLMC32_MAGIC);
  if (nbytes < LLMC_HEADER_NBYTES)
    return zo_error(-EINVAL, "data file '%s' is truncated: %zu bytes, shorter than the %zu-byte llm.c header", path,
                    nbytes, LLMC_HEADER_NBYTES);
  memcpy(&version, head + 4, sizeof version);
  const bool wide = magic == ZO_LLMC32_MAGIC;
  const int32_t want_version = wide ? ZO_LLMC32_VERSION : ZO_LLMC_VERSION;
  if (version != want_version)
    return zo_error(-EINVAL, "data file '%s': llm.c shard with magic %d has wrong version %d, expected %d; valid "
                             "headers: " LLMC_VALID_HEADERS,
                    path, (int)magic, (int)version, (int)want_version);
  const size_t width = wide ? sizeof(uint32_t) : sizeof(uint16_t);
  const char *type = wide ? "uint32" : "uint16";
  memcpy(&count, head + 8, sizeof count);
  if (count < 0)
    return zo_error(-EINVAL, "data file '%s': llm.c header holds a negative token count %d", path, (int)count);
  size_t expected = LLMC_HEADER_NBYTES + (size_t)count * width;
  size_t payload = nbytes - LLMC_HEADER_NBYTES;
  if (nbytes < expected) {
    /* A version 1 payload under a version 7 header is the likely mistake of
     * a hand-written converter: say so. */
    const bool narrow_payload = wide && payload == (size_t)count * sizeof(uint16_t);
    return zo_error(-EINVAL, "data file '%s' is truncated: its llm.c header (version %d, %s tokens) says %d tokens "
                             "(%zu bytes), the file has %zu bytes (%zu tokens)%s",
                    path, (int)version, type, (int)count, expected, nbytes, payload / width,
                    narrow_payload ? "; the payload is exactly that many uint16 tokens: a uint16 shard needs "
                                     "the version 1 header {magic 20240520, version 1}"
                                   : "");
  }
  if (nbytes > expected)
    return zo_error(-EINVAL, "data file '%s': its llm.c header (version %d, %s tokens) says %d tokens (%zu bytes), "
                             "but the file has %zu bytes: %zu bytes too many",
                    path, (int)version, type, (int)count, expected, nbytes, nbytes - expected);
  *n_tokens = (size_t)count;
  *token_nbytes = width;
  return 0;
}

/* Opens path for reading and checks it is a non-empty regular file. */
static int open_regular(const char *path, int *fd_out, size_t *nbytes) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    return zo_error(-err, "cannot open data file '%s': %s", path, strerror(err));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return zo_error(-err, "cannot stat data file '%s': %s", path, strerror(err));
  }
  if (S_ISDIR(st.st_mode)) {
    close(fd);
    return zo_error(-EISDIR, "data file '%s' is a directory, not a token file", path);
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return zo_error(-EINVAL, "data file '%s' is not a regular file", path);
  }
  if (st.st_size == 0) {
    close(fd);
    return zo_error(-EINVAL, "data file '%s' is empty (0 bytes)", path);
  }
  *fd_out = fd;
  *nbytes = (size_t)st.st_size;
  return 0;
}

int zo_data_read_llmc_header(const char *path, size_t *n_tokens, size_t *token_nbytes) {
  int fd;
  size_t nbytes;
  int err = open_regular(path, &fd, &nbytes);
  if (err) return err;
  uint8_t head[LLMC_HEADER_NBYTES];
  size_t want = nbytes < sizeof head ? nbytes : sizeof head, got = 0;
  while (got < want) {
    ssize_t r = pread(fd, head + got, want - got, (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      err = r < 0 ? -errno : -EIO;
      close(fd);
      return zo_error(err, "cannot read data file '%s': %s", path, r < 0 ? strerror(-err) : "file shrank");
    }
    got += (size_t)r;
  }
  close(fd);
  size_t width;
  err = llmc_check(path, head, nbytes, n_tokens, &width);
  if (!err && token_nbytes) *token_nbytes = width;
  return err;
}

static uint32_t token_at(const struct zo_data *d, size_t k) {
  switch (d->token_nbytes) {
  case 1: return ((const uint8_t *)d->tokens)[k];
  case 2: return ((const uint16_t *)d->tokens)[k];
  default: return ((const uint32_t *)d->tokens)[k];
  }
}

/* Index of the first token >= limit in [lo, hi), or hi. One loop per width
 * so that each vectorizes. */
static size_t first_at_or_above(const struct zo_data *d, uint32_t limit, size_t lo, size_t hi) {
  size_t k = lo;
  if (d->token_nbytes == 1) {
    const uint8_t *t = d->tokens;
    while (k < hi && t[k] < limit) k++;
  } else if (d->token_nbytes == 2) {
    const uint16_t *t = d->tokens;
    while (k < hi && t[k] < limit) k++;
  } else {
    const uint32_t *t = d->tokens;
    while (k < hi && t[k] < limit) k++;
  }
  return k;
}

/* Index of the first token >= vocab_size, or n when there is none. Scans
 * every token (one pass over the file) in 64 Ki-token chunks in parallel. */
static size_t first_bad_token(const struct zo_data *d, int vocab_size) {
  const size_t chunk = (size_t)1 << 16;
  size_t n = d->n_tokens, n_chunks = (n + chunk - 1) / chunk, first = n;
  uint32_t vocab = (uint32_t)vocab_size;
#pragma omp parallel for schedule(static) reduction(min : first)
  for (size_t c = 0; c < n_chunks; c++) {
    size_t lo = c * chunk, hi = lo + chunk < n ? lo + chunk : n;
    size_t k = first_at_or_above(d, vocab, lo, hi);
    if (k < hi && k < first) first = k;
  }
  return first;
}


/* ---- loss mask ---------------------------------------------------------- */

/* pread of exactly n bytes at off; -EIO naming what at end of file. */
static int pread_full(int fd, void *buf, size_t n, off_t off, const char *path) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = pread(fd, (uint8_t *)buf + got, n - got, off + (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int err = r < 0 ? errno : EIO;
      return zo_error(-err, "cannot read %zu bytes at offset %lld of '%s': %s (the file changed under the "
                            "running job? restore it and resume from the last checkpoint)",
                      n - got, (long long)off + (long long)got, path, r < 0 ? strerror(err) : "end of file");
    }
    got += (size_t)r;
  }
  return 0;
}

/* Opens d->path + ".mask" when it exists: one byte per token, each 0 or 1,
 * as many as the token file holds. Returns 0 (also when there is none). */
static int open_mask(struct zo_data *d) {
  const size_t n = strlen(d->path) + sizeof ZO_DATA_MASK_SUFFIX;
  if (!(d->mask_path = malloc(n))) return zo_error(-ENOMEM, "out of host memory opening '%s'", d->path);
  snprintf(d->mask_path, n, "%s" ZO_DATA_MASK_SUFFIX, d->path);
  int fd = open(d->mask_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    free(d->mask_path);
    d->mask_path = NULL;
    return 0;
  }
  if (fd < 0) {
    const int err = errno;
    return zo_error(-err, "cannot open the loss mask '%s' of data file '%s': %s", d->mask_path, d->path,
                    strerror(err));
  }
  d->mask_fd = fd;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    return zo_error(-err, "cannot stat the loss mask '%s': %s", d->mask_path, strerror(err));
  }
  if ((size_t)st.st_size != d->n_tokens)
    return zo_error(-EINVAL, "loss mask '%s' holds %lld bytes but data file '%s' holds %zu tokens: a mask has one "
                             "byte (0 or 1) per token; prepare both again, or remove the mask to train on "
                             "every token",
                    d->mask_path, (long long)st.st_size, d->path, d->n_tokens);
  /* Every byte 0 or 1, in 1 MiB reads. */
  enum { CHUNK = 1 << 20 };
  uint8_t *buf = malloc(CHUNK);
  if (!buf) return zo_error(-ENOMEM, "out of host memory checking '%s'", d->mask_path);
  int err = 0;
  size_t n_trained = 0;
  for (size_t off = 0; off < d->n_tokens && !err; off += CHUNK) {
    const size_t k = d->n_tokens - off < CHUNK ? d->n_tokens - off : CHUNK;
    if ((err = pread_full(fd, buf, k, (off_t)off, d->mask_path))) break;
    for (size_t j = 0; j < k; j++) {
      if (buf[j] > 1) {
        err = zo_error(-EINVAL, "loss mask '%s': byte %zu is %u, a mask holds 0 (not trained) or 1 (trained)",
                       d->mask_path, off + j, (unsigned)buf[j]);
        break;
      }
      n_trained += buf[j];
    }
  }
  free(buf);
  if (err) return err;
  /* Every step would train nothing and log a loss of 0: a wrong mask, never
   * what was meant. */
  if (n_trained == 0)
    return zo_error(-EINVAL, "loss mask '%s' of data file '%s' trains no target: 0 of %zu tokens trained (every "
                             "byte 0); prepare the data again (a completion field that is empty?), or remove the "
                             "mask to train on every token",
                    d->mask_path, d->path, d->n_tokens);
  if (!(d->mask_stage = malloc(d->BT + 1)))
    return zo_error(-ENOMEM, "out of host memory for one micro-batch of '%s'", d->mask_path);
  return 0;
}

/* dst[k] = mask[(start + k) mod N] for k < n. */
static int read_mask(const struct zo_data *d, uint8_t *dst, size_t start, size_t n) {
  while (n > 0) {
    const size_t run = d->n_tokens - start < n ? d->n_tokens - start : n;
    int err = pread_full(d->mask_fd, dst, run, (off_t)start, d->mask_path);
    if (err) return err;
    dst += run;
    n -= run;
    start = 0;
  }
  return 0;
}

struct zo_data *zo_data_open(const char *path, enum zo_data_format fmt, int vocab_size, int B, int T,
                             bool shuffle, uint64_t seed) {
  return zo_data_open_rank(path, fmt, vocab_size, B, T, shuffle, seed, 0, 1);
}

struct zo_data *zo_data_open_rank(const char *path, enum zo_data_format fmt, int vocab_size, int B, int T,
                                  bool shuffle, uint64_t seed, int rank, int n_ranks) {
  ZO_ASSERT(path != NULL);
  ZO_ASSERT(B >= 1 && T >= 1 && vocab_size >= 1);
  ZO_ASSERT(n_ranks >= 1 && rank >= 0 && rank < n_ranks);
  ZO_ASSERT(fmt == ZO_DATA_TEXT || fmt == ZO_DATA_LLMC || fmt == ZO_DATA_U16 || fmt == ZO_DATA_U32);
  int fd;
  size_t nbytes;
  if (open_regular(path, &fd, &nbytes) != 0) return NULL;
  void *map = mmap(NULL, nbytes, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_errno = errno;
  if (map == MAP_FAILED) {
    zo_error(-map_errno, "cannot map data file '%s' (%zu bytes): %s", path, nbytes, strerror(map_errno));
    close(fd);
    return NULL;
  }
  struct zo_data *d = calloc(1, sizeof *d);
  if (!d || !(d->path = strdup(path))) {
    zo_error(-ENOMEM, "out of host memory opening data file '%s'", path);
    goto out_free;
  }
  d->fd = fd;
  d->mask_fd = -1;
  d->file_nbytes = nbytes;
  d->vocab = (uint32_t)vocab_size;
  d->fmt = fmt;
  d->map = map;
  d->map_nbytes = nbytes;
  d->B = B;
  d->T = T;
  d->BT = (size_t)n_ranks * (size_t)B * (size_t)T;
  d->rank_BT = (size_t)B * (size_t)T;
  d->rank_off = (size_t)rank * d->rank_BT;
  d->shuffle = shuffle;
  d->seed = seed;

  switch (fmt) {
  case ZO_DATA_TEXT:
    d->tokens = map;
    d->token_nbytes = 1;
    d->n_tokens = nbytes;
    break;
  case ZO_DATA_U16:
    if (nbytes % sizeof(uint16_t) != 0) {
      zo_error(-EINVAL, "data file '%s' is truncated: %zu bytes is odd, a uint16 token file holds 2 bytes per token",
               path, nbytes);
      goto out_free;
    }
    d->tokens = map;
    d->token_nbytes = sizeof(uint16_t);
    d->n_tokens = nbytes / sizeof(uint16_t);
    break;
  case ZO_DATA_U32:
    if (nbytes % sizeof(uint32_t) != 0) {
      zo_error(-EINVAL, "data file '%s' is truncated: %zu bytes is not a multiple of 4 (%zu tokens + %zu bytes), "
                        "a uint32 token file holds 4 bytes per token (a uint16 file is format \"u16\")",
               path, nbytes, nbytes / sizeof(uint32_t), nbytes % sizeof(uint32_t));
      goto out_free;
    }
    d->tokens = map;
    d->token_nbytes = sizeof(uint32_t);
    d->n_tokens = nbytes / sizeof(uint32_t);
    break;
  case ZO_DATA_LLMC:
    if (llmc_check(path, map, nbytes, &d->n_tokens, &d->token_nbytes) != 0) goto out_free;
    d->tokens = (const uint8_t *)map + LLMC_HEADER_NBYTES;
    break;
  }

  if (d->n_tokens < d->BT + 1) {
    if (n_ranks == 1)
      zo_error(-EINVAL, "data file '%s' is too short for one micro-batch: it holds %zu tokens, B*T+1 = %d*%d+1 = %zu "
                        "are needed (lower the micro-batch size or sequence length, or add data)",
               path, d->n_tokens, B, T, d->BT + 1);
    else
      zo_error(-EINVAL, "data file '%s' is too short for one global micro-batch: it holds %zu tokens, "
                        "ranks*B*T+1 = %d*%d*%d+1 = %zu are needed (lower the micro-batch size or sequence "
                        "length, or add data)",
               path, d->n_tokens, n_ranks, B, T, d->BT + 1);
    goto out_free;
  }
  /* The scan is skipped only when no id of this width can reach vocab_size;
   * uint32 ids always are scanned (vocab_size <= INT32_MAX < 2^32). */
  if (!(d->token_nbytes == 1 && vocab_size >= 256) && !(d->token_nbytes == 2 && vocab_size >= 65536)) {
    size_t bad = first_bad_token(d, vocab_size);
    if (bad < d->n_tokens) {
      uint32_t id = token_at(d, bad);
      if (id > INT32_MAX)
        zo_error(-EINVAL, "data file '%s': token id %u at index %zu does not fit int32 (micro-batches are int32; "
                          "the largest id is %d) and is >= vocab_size %d: not a token file of format \"%s\"",
                 path, (unsigned)id, bad, INT32_MAX, vocab_size, zo_data_format_name(fmt));
      else
        zo_error(-EINVAL, "data file '%s': token id %u at index %zu is >= vocab_size %d (wrong data format, or a "
                          "model vocab_size smaller than the tokenizer's)",
                 path, (unsigned)id, bad, vocab_size);
      goto out_free;
    }
  }
  if (shuffle) {
    d->n_windows = (d->n_tokens - 1) / d->BT;
    d->perm = malloc(d->n_windows * sizeof *d->perm);
    if (!d->perm) {
      char buf[32];
      zo_error(-ENOMEM, "out of host memory for the shuffle order of '%s' (%s for %llu windows)", path,
               zo_format_bytes(d->n_windows * sizeof *d->perm, buf), (unsigned long long)d->n_windows);
      goto out_free;
    }
  }
  d->data_off = (size_t)((const uint8_t *)d->tokens - (const uint8_t *)map);
  d->stage = malloc((d->rank_BT + 1) * d->token_nbytes);
  if (!d->stage) {
    zo_error(-ENOMEM, "out of host memory for one micro-batch of '%s'", path);
    goto out_free;
  }
  if (open_mask(d) != 0) goto out_free;
  munmap(map, nbytes);
  d->map = NULL;
  d->tokens = NULL;
  return d;

out_free:
  if (d) {
    if (d->mask_fd >= 0) close(d->mask_fd);
    free(d->mask_stage);
    free(d->mask_path);
    free(d->stage);
    free(d->perm);
    free(d->path);
  }
  free(d);
  munmap(map, nbytes);
  close(fd);
  return NULL;
}

void zo_data_close(struct zo_data *d) {
  if (!d) return;
  if (d->mask_fd >= 0) close(d->mask_fd);
  free(d->mask_stage);
  free(d->mask_path);
  free(d->perm);
  free(d->stage);
  free(d->path);
  close(d->fd);
  free(d);
}

/* ---- micro-batches ------------------------------------------------------ */

/* d->stage = token[(start + k) mod N] for k < n (n <= rank_BT + 1); start < N.
 * Returns 0, or -EIO (or pread's -errno) when the file no longer holds them. */
static int read_tokens(struct zo_data *d, size_t start, size_t n) {
  uint8_t *dst = d->stage;
  while (n > 0) {
    const size_t run = d->n_tokens - start < n ? d->n_tokens - start : n;
    const size_t want = run * d->token_nbytes;
    const off_t off = (off_t)(d->data_off + start * d->token_nbytes);
    size_t got = 0;
    while (got < want) {
      const ssize_t r = pread(d->fd, dst + got, want - got, off + (off_t)got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        const int err = r < 0 ? errno : EIO;
        struct stat st;
        const long long now = fstat(d->fd, &st) == 0 ? (long long)st.st_size : -1;
        return zo_error(-err,
                        "data file '%s' changed under the running job: reading %zu bytes at offset %lld "
                        "failed (%s); it held %zu bytes when opened and holds %lld now. Restore the file "
                        "(training must read the same tokens to resume exactly) and resume from the last "
                        "checkpoint",
                        d->path, want, (long long)off + (long long)got, r < 0 ? strerror(err) : "end of file",
                        d->file_nbytes, now);
      }
      got += (size_t)r;
    }
    dst += want;
    n -= run;
    start = 0;
  }
  /* The open-time scan vouched for the file as it was then; a file rewritten
   * since must not index past the embedding table. */
  const size_t n_read = (size_t)(dst - d->stage) / d->token_nbytes;
  for (size_t k = 0; k < n_read; k++) {
    uint32_t id = 0; /* little-endian: the low bytes */
    memcpy(&id, d->stage + k * d->token_nbytes, d->token_nbytes);
    if (id >= d->vocab)
      return zo_error(-EINVAL,
                      "data file '%s' changed under the running job: token id %u is >= vocab_size %u "
                      "(every id was below it when the file was opened). Restore the file and resume "
                      "from the last checkpoint",
                      d->path, (unsigned)id, (unsigned)d->vocab);
  }
  return 0;
}

/* dst[k] = stage token k + skip, for k < n. */
static void convert_tokens(const struct zo_data *d, int32_t *dst, size_t skip, size_t n) {
  if (d->token_nbytes == 1) {
    const uint8_t *src = d->stage + skip;
    for (size_t k = 0; k < n; k++) dst[k] = src[k];
  } else if (d->token_nbytes == 2) {
    const uint16_t *src = (const uint16_t *)(void *)d->stage + skip;
    for (size_t k = 0; k < n; k++) dst[k] = src[k];
  } else {
    /* every id was checked below vocab_size at open and by read_tokens */
    const uint32_t *src = (const uint32_t *)(void *)d->stage + skip;
    for (size_t k = 0; k < n; k++) dst[k] = (int32_t)src[k];
  }
}

/* First token of global micro-batch i's window (see "Order" in zo/data.h). */
static size_t window_start(struct zo_data *d, uint64_t i) {
  if (d->shuffle) {
    uint64_t epoch = i / d->n_windows;
    if (!d->perm_valid || d->perm_epoch != epoch) build_permutation(d, epoch);
    return (size_t)(d->perm[i % d->n_windows] * d->BT);
  }
  return (size_t)((u128)(i % d->n_tokens) * d->BT % d->n_tokens);
}

int zo_data_next(struct zo_data *d, int32_t *inputs, int32_t *targets) {
  ZO_ASSERT(d != NULL && inputs != NULL && targets != NULL);
  uint64_t i = d->position++;
  /* This rank's rows of the global window; start + rank_off can pass the
   * end only without shuffle, where the stream wraps. */
  const size_t start = (window_start(d, i) + d->rank_off) % d->n_tokens;
  int err = read_tokens(d, start, d->rank_BT + 1);
  if (err) return err;
  convert_tokens(d, inputs, 0, d->rank_BT);
  convert_tokens(d, targets, 1, d->rank_BT);
  if (d->mask_fd >= 0) {
    /* Target k is token k + 1 of the window: trained where its mask is 1. */
    if ((err = read_mask(d, d->mask_stage, start, d->rank_BT + 1))) return err;
    for (size_t k = 0; k < d->rank_BT; k++)
      if (!d->mask_stage[k + 1]) targets[k] = -1;
  }
  return 0;
}

bool zo_data_has_mask(const struct zo_data *d) { return d->mask_fd >= 0; }

int zo_data_count_targets(struct zo_data *d, uint64_t first, int n, size_t *n_targets) {
  ZO_ASSERT(d != NULL && n >= 0);
  size_t count = 0;
  for (int j = 0; j < n; j++) {
    if (d->mask_fd < 0) {
      count += d->BT;
      continue;
    }
    int err = read_mask(d, d->mask_stage, window_start(d, first + (uint64_t)j), d->BT + 1);
    if (err) return err;
    for (size_t k = 1; k <= d->BT; k++) count += d->mask_stage[k];
  }
  *n_targets = count;
  return 0;
}

uint64_t zo_data_position(const struct zo_data *d) { return d->position; }

int zo_data_seek(struct zo_data *d, uint64_t micro_batch_index) {
  ZO_ASSERT(d != NULL);
  d->position = micro_batch_index;
  return 0;
}

size_t zo_data_n_tokens(const struct zo_data *d) { return d->n_tokens; }

/* ---- writers ------------------------------------------------------------ */

static int write_tokens(const char *path, const void *header, size_t header_nbytes, const void *tokens,
                        size_t tokens_nbytes) {
  struct zo_atomic_file f;
  int err = zo_atomic_file_begin(&f, path);
  if (err) return err;
  if (header_nbytes) err = zo_atomic_file_write(&f, header, header_nbytes);
  if (!err) err = zo_atomic_file_write(&f, tokens, tokens_nbytes);
  if (!err) err = zo_atomic_file_commit(&f);
  zo_atomic_file_abort(&f);
  return err;
}

static int check_shard_count(const char *path, size_t n) {
  if (n > INT32_MAX)
    return zo_error(-EINVAL, "cannot write '%s': %zu tokens exceed the llm.c header's int32 count", path, n);
  return 0;
}

/* Refuses a uint32 id the readers would refuse, before anything is written. */
static int check_int32_ids(const char *path, const uint32_t *tokens, size_t n) {
  for (size_t k = 0; k < n; k++)
    if (tokens[k] > INT32_MAX)
      return zo_error(-EINVAL, "cannot write '%s': token id %u at index %zu does not fit int32 (the largest id is %d)",
                      path, (unsigned)tokens[k], k, INT32_MAX);
  return 0;
}

int zo_data_write_llmc(const char *path, const uint16_t *tokens, size_t n) {
  int err = check_shard_count(path, n);
  if (err) return err;
  int32_t header[ZO_LLMC_HEADER_INTS] = {ZO_LLMC_MAGIC, ZO_LLMC_VERSION, (int32_t)n};
  return write_tokens(path, header, sizeof header, tokens, n * sizeof *tokens);
}

int zo_data_write_llmc32(const char *path, const uint32_t *tokens, size_t n) {
  int err = check_shard_count(path, n);
  if (!err) err = check_int32_ids(path, tokens, n);
  if (err) return err;
  int32_t header[ZO_LLMC_HEADER_INTS] = {ZO_LLMC32_MAGIC, ZO_LLMC32_VERSION, (int32_t)n};
  return write_tokens(path, header, sizeof header, tokens, n * sizeof *tokens);
}

int zo_data_write_u16(const char *path, const uint16_t *tokens, size_t n) {
  return write_tokens(path, NULL, 0, tokens, n * sizeof *tokens);
}

int zo_data_write_u32(const char *path, const uint32_t *tokens, size_t n) {
  int err = check_int32_ids(path, tokens, n);
  if (err) return err;
  return write_tokens(path, NULL, 0, tokens, n * sizeof *tokens);
}

int zo_data_write_mask(const char *token_path, const uint8_t *mask, size_t n) {
  for (size_t k = 0; k < n; k++)
    if (mask[k] > 1) return zo_error(-EINVAL, "loss mask of '%s': byte %zu is %u, not 0 or 1", token_path, k, mask[k]);
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s" ZO_DATA_MASK_SUFFIX, token_path) >= (int)sizeof path)
    return zo_error(-ENAMETOOLONG, "loss mask path of '%s' is too long", token_path);
  return write_tokens(path, NULL, 0, mask, n);
}

/* ---- prepare ------------------------------------------------------------ */

enum { PREPARE_CHUNK = 1 << 20 }; /* bytes read at a time */

int zo_data_prepare(const char *const *text_paths, int n_paths, const char *out_train, const char *out_val,
                    double val_fraction, size_t *n_train_out, size_t *n_val_out) {
  if (n_paths < 1) return zo_error(-EINVAL, "prepare: no input text files given");
  if (!out_train) return zo_error(-EINVAL, "prepare: no output file for the train split given");
  if (!(val_fraction >= 0.0 && val_fraction < 1.0))
    return zo_error(-EINVAL, "prepare: val fraction %g is outside [0, 1)", val_fraction);
  if (!out_val && val_fraction > 0.0)
    return zo_error(-EINVAL, "prepare: val fraction %g but no output file for the val split", val_fraction);
  if (out_val && strcmp(out_train, out_val) == 0)
    return zo_error(-EINVAL, "prepare: train and val outputs are the same file '%s'", out_train);
  const char *outs[2] = {out_train, out_val};
  int err = zo_prepare_check_outputs(outs, 2, text_paths, n_paths);
  if (err) return err;

  size_t total = 0;
  for (int k = 0; k < n_paths; k++) {
    struct stat st;
    if (stat(text_paths[k], &st) != 0) {
      const int e = errno;
      return zo_error(-e, "prepare: cannot read text file '%s': %s", text_paths[k], strerror(e));
    }
    if (S_ISDIR(st.st_mode))
      return zo_error(-EISDIR, "prepare: '%s' is a directory, not a text file", text_paths[k]);
    if (!S_ISREG(st.st_mode))
      return zo_error(-EINVAL, "prepare: input '%s' is %s: inputs are regular files; copy it into a file first",
                      text_paths[k], zo_file_kind(st.st_mode));
    total += (size_t)st.st_size;
  }
  if (total == 0) return zo_error(-EINVAL, "prepare: the %d input file(s) are empty", n_paths);
  size_t n_val = (size_t)((double)total * val_fraction);
  if (n_val >= total) n_val = total - 1;
  size_t n_train = total - n_val;
  if (out_val && n_val == 0)
    return zo_error(-EINVAL, "prepare: the val split is empty: %zu bytes x val fraction %g < 1 token "
                             "(raise the val fraction, add text, or give no val output)", total, val_fraction);

  struct zo_atomic_file train = {.fd = -1}, val = {.fd = -1};
  uint8_t *in = malloc(PREPARE_CHUNK);
  uint16_t *out = malloc(PREPARE_CHUNK * sizeof *out);
  if (!in || !out) {
    err = zo_error(-ENOMEM, "prepare: out of host memory for a %d-byte buffer", PREPARE_CHUNK);
    goto out_free;
  }
  err = zo_atomic_file_begin(&train, out_train);
  if (!err && out_val) err = zo_atomic_file_begin(&val, out_val);
  if (err) goto out_abort;

  size_t done = 0; /* bytes of the whole stream written */
  for (int k = 0; k < n_paths && !err; k++) {
    const char *path = text_paths[k];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      int e = errno;
      err = zo_error(-e, "prepare: cannot open text file '%s': %s", path, strerror(e));
      break;
    }
    for (;;) {
      ssize_t r = read(fd, in, PREPARE_CHUNK);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        int e = errno;
        err = zo_error(-e, "prepare: cannot read text file '%s': %s", path, strerror(e));
        break;
      }
      if (r == 0) break;
      if (done + (size_t)r > total) {
        err = zo_error(-EIO, "prepare: text file '%s' grew while being read; run prepare again", path);
        break;
      }
      for (ssize_t j = 0; j < r; j++) out[j] = in[j];
      /* The train/val cut may fall inside this chunk. */
      size_t to_train = done < n_train ? n_train - done : 0;
      if (to_train > (size_t)r) to_train = (size_t)r;
      if (to_train) err = zo_atomic_file_write(&train, out, to_train * sizeof *out);
      if (!err && (size_t)r > to_train)
        err = zo_atomic_file_write(&val, out + to_train, ((size_t)r - to_train) * sizeof *out);
      done += (size_t)r;
      if (err) break;
    }
    if (close(fd) != 0 && !err) {
      int e = errno;
      err = zo_error(-e, "prepare: cannot close text file '%s': %s", path, strerror(e));
    }
  }
  if (!err && done != total)
    err = zo_error(-EIO, "prepare: the input files shrank while being read (%zu of %zu bytes); run prepare again",
                   done, total);
  /* Both or neither replaced; byte tokens have no mask, so an old one goes. */
  if (!err) err = zo_prepare_commit_outputs((struct zo_atomic_file *[]){&train, &val}, out_val ? 2 : 1, outs, 2, false);
  if (!err) {
    if (n_train_out) *n_train_out = n_train;
    if (n_val_out) *n_val_out = n_val;
  }
out_abort:
  zo_atomic_file_abort(&val);
  zo_atomic_file_abort(&train);
out_free:
  free(out);
  free(in);
  return err;
}
