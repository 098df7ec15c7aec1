/* bench-nvme: sequential write then read of N bytes through the NVMe tier
 * (zo_nvme_bench: O_DIRECT, io_uring, registered buffers, CRC32C per block).
 *   bench-nvme --path DIR [--bytes N] [--block N] [--qd N] [--json]
 * Sizes take K/M/G suffixes (powers of 1024). Prints GB/s (1e9 bytes/s) and,
 * with --json, a last line {"write_gb_s":..,"read_gb_s":..}.
 * benchmarks/fio-nvme.sh compares the figures with fio's on the same disk. */
#include "zo/nvme.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void) {
  fprintf(stderr, "usage: bench-nvme --path DIR [--bytes N] [--block N] [--qd N] [--json]\n"
                  "  sizes take K, M, G suffixes (powers of 1024); defaults: --bytes 2G "
                  "--block 1M --qd 32\n");
  return 2;
}

static int parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  const unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return -1;
  unsigned long long mul = 1;
  switch (*end) {
  case 'k':
  case 'K':
    mul = 1ull << 10;
    end++;
    break;
  case 'm':
  case 'M':
    mul = 1ull << 20;
    end++;
    break;
  case 'g':
  case 'G':
    mul = 1ull << 30;
    end++;
    break;
  default: break;
  }
  if (*end == 'i' && end[1] == 'B')
    end += 2;
  else if (*end == 'B')
    end++;
  if (*end != '\0' || v > SIZE_MAX / mul) return -1;
  *out = (size_t)(v * mul);
  return 0;
}

int main(int argc, char **argv) {
  const char *path = NULL;
  size_t nbytes = 2ull << 30, block = 1u << 20, qd = 32;
  bool json = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--json") == 0) {
      json = true;
    } else if (i + 1 < argc && strcmp(a, "--path") == 0) {
      path = argv[++i];
    } else if (i + 1 < argc && strcmp(a, "--bytes") == 0) {
      if (parse_size(argv[++i], &nbytes)) return usage();
    } else if (i + 1 < argc && strcmp(a, "--block") == 0) {
      if (parse_size(argv[++i], &block)) return usage();
    } else if (i + 1 < argc && strcmp(a, "--qd") == 0) {
      if (parse_size(argv[++i], &qd) || qd > ZO_NVME_MAX_QUEUE_DEPTH) return usage();
    } else {
      return usage();
    }
  }
  if (path == NULL) return usage();

  /* Which engine and I/O mode the measured store gets: a throwaway store asks. */
  const struct zo_nvme_config cfg = {.dir = path, .block_size = block, .queue_depth = (int)qd};
  zo_nvme_t probe = zo_nvme_init(&cfg);
  if (probe == NULL) {
    fprintf(stderr, "bench-nvme: %s\n", zo_last_error());
    return 1;
  }
  char b1[32], b2[32];
  printf("nvme bench: %s in %s, block %s, queue depth %zu, %s, %s\n", zo_format_bytes(nbytes, b1),
         path, zo_format_bytes(block, b2), qd, zo_nvme_engine(probe),
         zo_nvme_is_direct(probe) ? "O_DIRECT" : "buffered");
  zo_nvme_free(probe);

  double w = 0, r = 0;
  const int err = zo_nvme_bench(path, nbytes, block, (int)qd, &w, &r);
  if (err) {
    fprintf(stderr, "bench-nvme: %s\n", zo_last_error());
    return 1;
  }
  printf("write %.3f GB/s\nread  %.3f GB/s\n", w, r);
  if (json) printf("{\"write_gb_s\":%.4f,\"read_gb_s\":%.4f}\n", w, r);
  return 0;
}
