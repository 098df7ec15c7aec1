/* Device collectives (zo/dcomm.h) on one GPU: a one-rank NCCL communicator
 * over the single-process host communicator (what a machine with one GPU
 * can run; several ranks need one GPU each). Every collective, in place
 * and out of place, in fp32, bf16 and int64, queued on a CUDA backend
 * stream behind an upload and before a download on the same stream, so that
 * the order is part of what is checked; the output is poisoned first, so
 * an unwritten element fails. Refusals: the CPU backend (-ENOTSUP). Skips
 * (77) with the reason without NCCL in the build or without a GPU. */
#include "zo/dcomm.h"
#include "zo_test.h"

#define CHECK(cond) ZO_REQUIRE(cond)

static zo_backend_t gpu;
static zo_comm_t host;
static zo_dcomm_t dc;
static zo_stream_t st;

enum { N = 4099 };

/* send: N elements of e bytes from src; recv poisoned; op; compare recv with want. */
static int roundtrip(const void *src, size_t e, int kind, const void *want) {
  void *dsend = NULL, *drecv = NULL;
  unsigned char *out = malloc(N * e);
  CHECK(out);
  CHECK(gpu->mem_alloc(&dsend, N * e) == 0 && gpu->mem_alloc(&drecv, N * e) == 0);
  CHECK(gpu->memcpy_async(dsend, src, N * e, ZO_COPY_H2D, st) == 0);
  CHECK(gpu->memset_async(drecv, 0xff, N * e, st) == 0);
  const enum zo_dtype dt = e == 2 ? ZO_BF16 : e == 4 ? ZO_F32 : ZO_I64;
  void *dst = kind == 3 ? dsend : drecv; /* 3: in place */
  switch (kind) {
  case 0: CHECK(zo_dcomm_allreduce(dc, dsend, drecv, N, dt, ZO_COMM_SUM, st) == 0); break;
  case 1: CHECK(zo_dcomm_reduce(dc, dsend, drecv, N, dt, ZO_COMM_MAX, 0, st) == 0); break;
  case 2: CHECK(zo_dcomm_broadcast(dc, dsend, drecv, N * e, 0, st) == 0); break;
  case 3: CHECK(zo_dcomm_allreduce(dc, dsend, dsend, N, dt, ZO_COMM_MIN, st) == 0); break;
  }
  CHECK(gpu->memcpy_async(out, dst, N * e, ZO_COPY_D2H, st) == 0);
  CHECK(gpu->stream_synchronize(st) == 0);
  CHECK(zo_dcomm_check(dc) == 0);
  CHECK(memcmp(out, want, N * e) == 0);
  gpu->mem_free(dsend);
  gpu->mem_free(drecv);
  free(out);
  return 0;
}

static int test_one_rank(void) {
  CHECK(zo_dcomm_rank(dc) == 0 && zo_dcomm_size(dc) == 1);
  return 0;
}

/* Over one rank every reduction is the identity and a broadcast a copy. */
static int test_collectives(void) {
  float f[N];
  uint16_t b[N];
  int64_t q[N];
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < N; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    f[i] = (float)((double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    b[i] = (uint16_t)(0x3f80 + (x & 0x7f)); /* bf16 values in [1, 2) */
    q[i] = (int64_t)(x >> 1) - (int64_t)(1ll << 61);
  }
  for (int kind = 0; kind < 4; kind++) {
    CHECK(roundtrip(f, 4, kind, f) == 0);
    CHECK(roundtrip(b, 2, kind, b) == 0);
    CHECK(roundtrip(q, 8, kind, q) == 0);
  }
  return 0;
}

static int test_cpu_backend_refused(void) {
  zo_dcomm_t d = NULL;
  CHECK(zo_dcomm_init(host, zo_backend_cpu(), &d) == -ENOTSUP && d == NULL);
  return 0;
}

int main(void) {
  if (!zo_dcomm_has_nccl()) {
    zo_dcomm_t d;
    printf("SKIP: %d (%s)\n", zo_dcomm_init(NULL, NULL, &d), zo_last_error());
    return 77;
  }
  gpu = zo_backend_cuda();
  if (!gpu) {
    printf("SKIP: %s\n", zo_last_error());
    return 77;
  }
  printf("NCCL %d\n", zo_dcomm_nccl_version());
  host = zo_comm_init("single");
  if (!host || gpu->stream_create(&st) != 0 || zo_dcomm_init(host, gpu, &dc) != 0) {
    fprintf(stderr, "setup: %s\n", zo_last_error());
    return 1;
  }
  static const struct zo_test tests[] = {ZO_TEST(one_rank), ZO_TEST(collectives), ZO_TEST(cpu_backend_refused)};
  const int rc = ZO_TEST_MAIN(tests);
  zo_dcomm_free(dc);
  gpu->stream_destroy(st);
  zo_comm_free(host);
  return rc;
}
