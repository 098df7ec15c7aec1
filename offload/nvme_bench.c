/* Throughput of the NVMe tier: a sequential write then read of one file
 * through a fresh store, the way the optimizer streams its states, with the
 * CRC32C work included. The bytes come from a few registered buffers of
 * CHUNK bytes each, reused round-robin, with several requests queued so the
 * store always has queue_depth blocks to keep in flight. Measures; prints
 * only a warning when the buffers cannot be registered (benchmarks/bench-nvme.c
 * and `zoffload bench nvme` print the figures). */
#include "zo/nvme.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define CHUNK (64u << 20) /* bytes per request */
#define N_BUFS 4          /* requests queued at once */

/* Fills n bytes with splitmix64 output so no layer below can compress them. */
static void fill_pattern(void *buf, size_t n, uint64_t seed) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  unsigned char *p = buf;
  for (size_t i = 0; i < n; i += 8) {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    memcpy(p + i, &z, n - i < 8 ? n - i : 8);
  }
}

/* One pass over the file: op on every chunk, N_BUFS requests in flight. */
static int pass(zo_nvme_t nv, int file, enum zo_nvme_op op, void *bufs[], size_t chunk,
                size_t nbytes, double *seconds) {
  struct zo_nvme_req reqs[N_BUFS];
  const size_t n_chunks = (nbytes + chunk - 1) / chunk;
  int err = 0;
  size_t i = 0;
  const double t0 = zo_time_s();
  for (; i < n_chunks && err == 0; i++) {
    const size_t k = i % N_BUFS;
    if (i >= N_BUFS) err = zo_nvme_wait(nv, &reqs[k]);
    if (err) break;
    const uint64_t off = (uint64_t)i * chunk;
    const size_t len = nbytes - off < chunk ? nbytes - off : chunk;
    err = op == ZO_NVME_WRITE ? zo_nvme_write_async(nv, file, off, bufs[k], len, &reqs[k])
                              : zo_nvme_read_async(nv, file, off, bufs[k], len, &reqs[k]);
  }
  /* Wait for everything started, even after an error: the buffers are about
   * to be reused or freed. */
  const size_t started = i < N_BUFS ? i : N_BUFS;
  for (size_t k = 0; k < started; k++) {
    const int e = zo_nvme_wait(nv, &reqs[k]);
    if (err == 0) err = e;
  }
  *seconds = zo_time_s() - t0;
  return err;
}

int zo_nvme_bench(const char *dir, size_t nbytes, size_t block, int qd, double *write_gb_s,
                  double *read_gb_s) {
  if (nbytes == 0) return zo_error(-EINVAL, "nvme bench: --bytes must be positive");
  const struct zo_nvme_config cfg = {.dir = dir, .block_size = block, .queue_depth = qd};
  zo_nvme_t nv = zo_nvme_init(&cfg);
  if (nv == NULL) return errno ? -errno : -EIO;
  /* Requests start on block boundaries: a chunk is a whole number of blocks. */
  size_t chunk = CHUNK / block * block;
  if (chunk == 0) chunk = block;
  if (chunk > nbytes) chunk = (nbytes + block - 1) / block * block;
  void *bufs[N_BUFS] = {0};
  struct zo_nvme_buffer regs[N_BUFS];
  int err = 0, file;
  for (int k = 0; k < N_BUFS; k++) {
    bufs[k] = zo_nvme_buffer_alloc(chunk);
    if (bufs[k] == NULL) {
      char b[32];
      err = zo_error(-ENOMEM, "nvme bench: out of memory allocating %d buffers of %s", N_BUFS,
                     zo_format_bytes(chunk, b));
      goto out_free;
    }
    fill_pattern(bufs[k], chunk, (uint64_t)k + 1);
    regs[k] = (struct zo_nvme_buffer){.base = bufs[k], .nbytes = chunk};
  }
  /* Unregistered buffers still work, only with a little more CPU per block. */
  if (zo_nvme_register_buffers(nv, regs, N_BUFS) != 0)
    fprintf(stderr, "zoffload: warning: %s\n", zo_last_error());
  err = zo_nvme_file_create(nv, "bench", nbytes, &file);
  if (err) goto out_free;
  double tw = 0, tr = 0;
  err = pass(nv, file, ZO_NVME_WRITE, bufs, chunk, nbytes, &tw);
  if (err) goto out_free;
  err = pass(nv, file, ZO_NVME_READ, bufs, chunk, nbytes, &tr);
  if (err) goto out_free;
  *write_gb_s = (double)nbytes / tw * 1e-9;
  *read_gb_s = (double)nbytes / tr * 1e-9;

out_free:
  zo_nvme_free(nv); /* before the buffers: it waits for I/O still in flight */
  for (int k = 0; k < N_BUFS; k++) zo_nvme_buffer_free(bufs[k]);
  return err;
}
