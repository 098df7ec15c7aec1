/* The collectives interface (zo/comm.h). Driver (started by ctest): the
 * single-process implementation (size 1, collectives leave buffers as they
 * are, allgather copies, dup, "auto" outside a launcher, bad kinds refused),
 * then itself under mpirun as 3 ranks, once as is and once with
 * ZO_COMM_MAX_COUNT=7 (every collective split into pieces of 7 elements).
 * Ranks: sums, maxima and minima of known values in every dtype; float sums
 * of random values against a float64 sum computed independently on every
 * rank (within 2 ulp of the float result's rounding) and bit-identical on
 * every rank; broadcast from a rank other than 0; allgather; reduce to
 * each root, reduce-scatter and allgather over uneven ranges, send and
 * receive in a ring, bad peers and tags refused; barrier; a
 * duplicate used from a second thread while the first reduces on the
 * original (MPI_THREAD_MULTIPLE). A failed check on a rank aborts the job,
 * so the driver sees a non-zero exit. Without MPI or mpiexec the
 * single-process cases run and the test reports skipped (77). */
#include <pthread.h>

#include "zo_mpi_test.h"
#include "zo_test.h"

#define CHECK(cond) ZO_REQUIRE(cond)

/* ---- single process ------------------------------------------------------ */

static int test_single(void) {
  zo_comm_t c = zo_comm_init("single");
  CHECK(c);
  CHECK(strcmp(zo_comm_name(c), "single") == 0);
  CHECK(zo_comm_rank(c) == 0 && zo_comm_size(c) == 1);
  CHECK(zo_comm_local_rank(c) == 0 && zo_comm_local_size(c) == 1);
  float f[5] = {1.5f, -2.0f, 3.25f, 0.0f, 1e30f}, f0[5];
  memcpy(f0, f, sizeof f);
  CHECK(zo_comm_allreduce(c, f, 5, ZO_F32, ZO_COMM_SUM) == 0);
  CHECK(memcmp(f, f0, sizeof f) == 0);
  int64_t i64[2] = {-7, 1ll << 40};
  CHECK(zo_comm_allreduce(c, i64, 2, ZO_I64, ZO_COMM_MAX) == 0);
  CHECK(i64[0] == -7 && i64[1] == 1ll << 40);
  char b[8] = "abcdefg";
  CHECK(zo_comm_broadcast(c, b, sizeof b, 0) == 0);
  CHECK(strcmp(b, "abcdefg") == 0);
  double send = 2.5, recv = 0.0;
  CHECK(zo_comm_allgather(c, &send, sizeof send, &recv) == 0);
  CHECK(recv == 2.5);
  CHECK(zo_comm_reduce(c, f, 5, ZO_F32, ZO_COMM_SUM, 0) == 0 && memcmp(f, f0, sizeof f) == 0);
  const size_t one[1] = {5};
  CHECK(zo_comm_reduce_scatter(c, f, one, ZO_F32) == 0 && memcmp(f, f0, sizeof f) == 0);
  CHECK(zo_comm_allgatherv(c, b, (const size_t[1]){sizeof b}) == 0 && strcmp(b, "abcdefg") == 0);
  CHECK(zo_comm_send(c, b, 1, 0, 0) == -EINVAL);
  CHECK(zo_comm_barrier(c) == 0);
  zo_comm_t d;
  CHECK(zo_comm_dup(c, &d) == 0);
  CHECK(zo_comm_size(d) == 1 && zo_comm_allreduce(d, f, 5, ZO_F32, ZO_COMM_SUM) == 0);
  zo_comm_free(d);
  zo_comm_free(c);
  zo_comm_free(NULL);
  return 0;
}

static int test_auto_outside_launcher(void) {
  if (zo_comm_launched()) return ZO_TEST_SKIP;
  zo_comm_t c = zo_comm_init("auto");
  CHECK(c);
  CHECK(strcmp(zo_comm_name(c), "single") == 0 && zo_comm_size(c) == 1);
  zo_comm_free(c);
  return 0;
}

static int test_bad_kind(void) {
  CHECK(zo_comm_init("nccl") == NULL);
  CHECK(strstr(zo_last_error(), "\"nccl\"") != NULL);
  return 0;
}

/* ---- ranks ---------------------------------------------------------------- */

static zo_comm_t world;

static int test_ranks(void) {
  const int rank = zo_comm_rank(world), size = zo_comm_size(world);
  CHECK(size == 3 && strcmp(zo_comm_name(world), "mpi") == 0);
  int all[3] = {-1, -1, -1};
  CHECK(zo_comm_allgather(world, &rank, sizeof rank, all) == 0);
  CHECK(all[0] == 0 && all[1] == 1 && all[2] == 2);
  /* One machine: every rank is local. */
  CHECK(zo_comm_local_size(world) == 3 && zo_comm_local_rank(world) == rank);
  return 0;
}

static int test_known_values(void) {
  const int r = zo_comm_rank(world);
  enum { N = 100 };
  float f[N];
  double d[N];
  int32_t i[N];
  int64_t l[N];
  for (int k = 0; k < N; k++) {
    f[k] = (float)((r + 1) * k) + 0.5f;
    d[k] = (r + 1) * 0.25 * k;
    i[k] = (r - 1) * k;
    l[k] = ((int64_t)r << 33) + k;
  }
  CHECK(zo_comm_allreduce(world, f, N, ZO_F32, ZO_COMM_SUM) == 0);
  CHECK(zo_comm_allreduce(world, d, N, ZO_F64, ZO_COMM_MAX) == 0);
  CHECK(zo_comm_allreduce(world, i, N, ZO_I32, ZO_COMM_MIN) == 0);
  CHECK(zo_comm_allreduce(world, l, N, ZO_I64, ZO_COMM_SUM) == 0);
  for (int k = 0; k < N; k++) {
    CHECK(f[k] == (float)(6 * k) + 1.5f);
    CHECK(d[k] == 0.75 * k);
    CHECK(i[k] == -k);
    CHECK(l[k] == (3ll << 33) + 3 * k);
  }
  return 0;
}

/* Random floats of very different magnitudes: the float sum of three, in
 * whatever order, is two roundings of partial sums no larger than the sum
 * of magnitudes S, so within 2 * 2^-24 * S of the float64 sum (exact for
 * three floats of these ranges); and the same bits on every rank. */
static int test_float_sum_against_float64(void) {
  const int r = zo_comm_rank(world), size = zo_comm_size(world);
  enum { N = 50000 };
  float *x = zo_test_xmalloc(N * sizeof *x);
  double *ref = zo_test_xmalloc(N * sizeof *ref), *mag = zo_test_xmalloc(N * sizeof *mag);
  for (int k = 0; k < N; k++) ref[k] = mag[k] = 0.0;
  for (int q = 0; q < size; q++) {
    zo_rng_seed(100 + (uint64_t)q);
    for (int k = 0; k < N; k++) {
      const float v = zo_rng_float(-1.0f, 1.0f) * ldexpf(1.0f, (int)(zo_rng_u32() % 40) - 20);
      ref[k] += v;
      mag[k] += fabs(v);
      if (q == r) x[k] = v;
    }
  }
  CHECK(zo_comm_allreduce(world, x, N, ZO_F32, ZO_COMM_SUM) == 0);
  int bad = 0;
  for (int k = 0; k < N && !bad; k++) {
    if (fabs((double)x[k] - ref[k]) > 2.0 * 0x1.0p-24 * mag[k]) bad = k + 1;
  }
  if (bad) fprintf(stderr, "  rank %d: element %d: %.9g vs float64 %.17g\n", r, bad - 1, x[bad - 1], ref[bad - 1]);
  uint64_t h = 1469598103934665603ull, all[3];
  const unsigned char *p = (const unsigned char *)x;
  for (size_t k = 0; k < N * sizeof *x; k++) h = (h ^ p[k]) * 1099511628211ull;
  CHECK(zo_comm_allgather(world, &h, sizeof h, all) == 0);
  free(x);
  free(ref);
  free(mag);
  CHECK(!bad);
  CHECK(all[0] == all[1] && all[1] == all[2]);
  return 0;
}

static int test_broadcast(void) {
  const int r = zo_comm_rank(world);
  char buf[1000];
  for (int k = 0; k < 1000; k++) buf[k] = (char)(r == 2 ? k * 7 : -1);
  CHECK(zo_comm_broadcast(world, buf, sizeof buf, 2) == 0);
  for (int k = 0; k < 1000; k++) CHECK(buf[k] == (char)(k * 7));
  CHECK(zo_comm_barrier(world) == 0);
  return 0;
}

/* Reduce to each root, reduce-scatter and allgather over uneven ranges (one
 * of them empty), point to point both ways: against values every rank
 * computes itself. Integer-valued floats, so the sums are exact. */
static int test_ranges_and_point_to_point(void) {
  const int r = zo_comm_rank(world);
  enum { N = 23 };
  const size_t counts[3] = {10, 0, 13};
  float v[N];
  for (int root = 0; root < 3; root++) {
    for (int k = 0; k < N; k++) v[k] = (float)(100 * r + k);
    CHECK(zo_comm_reduce(world, v, N, ZO_F32, ZO_COMM_SUM, root) == 0);
    for (int k = 0; k < N; k++) CHECK(v[k] == (r == root ? (float)(300 + 3 * k) : (float)(100 * r + k)));
  }
  for (int k = 0; k < N; k++) v[k] = (float)(100 * r + k);
  CHECK(zo_comm_reduce_scatter(world, v, counts, ZO_F32) == 0);
  const size_t lo = r == 0 ? 0 : r == 1 ? 10 : 10, hi = r == 0 ? 10 : r == 1 ? 10 : 23;
  for (int k = 0; k < N; k++)
    CHECK(v[k] == ((size_t)k >= lo && (size_t)k < hi ? (float)(300 + 3 * k) : (float)(100 * r + k)));
  /* Each rank's range holds its own values, the rest garbage; after the
   * allgather everybody holds every range. */
  unsigned char b[N];
  const size_t nb[3] = {10, 0, 13};
  for (int k = 0; k < N; k++) b[k] = (size_t)k >= lo && (size_t)k < hi ? (unsigned char)(k * 3) : 0xee;
  CHECK(zo_comm_allgatherv(world, b, nb) == 0);
  for (int k = 0; k < N; k++) CHECK(b[k] == (unsigned char)(k * 3));
  /* A ring of sends: rank r to r + 1, each message 1000 bytes plus r. */
  const int to = (r + 1) % 3, from = (r + 2) % 3;
  unsigned char out[1003], in[1003];
  for (int k = 0; k < 1000 + r; k++) out[k] = (unsigned char)(r * 31 + k);
  if (r == 0) {
    CHECK(zo_comm_send(world, out, 1000 + (size_t)r, to, 5) == 0);
    CHECK(zo_comm_recv(world, in, 1000 + (size_t)from, from, 5) == 0);
  } else {
    CHECK(zo_comm_recv(world, in, 1000 + (size_t)from, from, 5) == 0);
    CHECK(zo_comm_send(world, out, 1000 + (size_t)r, to, 5) == 0);
  }
  for (int k = 0; k < 1000 + from; k++) CHECK(in[k] == (unsigned char)(from * 31 + k));
  /* Refused before MPI sees them: oneself, a rank out of range, a bad tag. */
  CHECK(zo_comm_send(world, out, 1, r, 5) == -EINVAL);
  CHECK(zo_comm_recv(world, in, 1, 3, 5) == -EINVAL);
  CHECK(zo_comm_send(world, out, 1, to, 40000) == -EINVAL);
  CHECK(zo_comm_barrier(world) == 0);
  return 0;
}

struct dup_arg {
  zo_comm_t c;
  int bad;
};

static void *dup_thread(void *p) {
  struct dup_arg *a = p;
  for (int it = 0; it < 200; it++) {
    double v[64];
    for (int k = 0; k < 64; k++) v[k] = zo_comm_rank(a->c) + it + k;
    if (zo_comm_allreduce(a->c, v, 64, ZO_F64, ZO_COMM_SUM) != 0 || v[63] != 3.0 * (it + 63) + 3.0) a->bad++;
  }
  return NULL;
}

/* The scheduler's pattern: gradients on a duplicate from the optimizer
 * thread, losses on the original from the main thread, at the same time. */
static int test_dup_from_another_thread(void) {
  struct dup_arg a = {0};
  CHECK(zo_comm_dup(world, &a.c) == 0);
  CHECK(zo_comm_rank(a.c) == zo_comm_rank(world) && zo_comm_size(a.c) == 3);
  pthread_t th;
  CHECK(pthread_create(&th, NULL, dup_thread, &a) == 0);
  int bad = 0;
  for (int it = 0; it < 200; it++) {
    int64_t v = zo_comm_rank(world) * 10 + it;
    if (zo_comm_allreduce(world, &v, 1, ZO_I64, ZO_COMM_MAX) != 0 || v != 20 + it) bad++;
  }
  pthread_join(th, NULL);
  zo_comm_free(a.c);
  CHECK(bad == 0 && a.bad == 0);
  return 0;
}

static int rank_main(void) {
  world = zo_comm_init("auto");
  if (!world) {
    fprintf(stderr, "rank: %s\n", zo_last_error());
    return 1;
  }
  static const struct zo_test tests[] = {
      ZO_TEST(ranks), ZO_TEST(known_values), ZO_TEST(float_sum_against_float64), ZO_TEST(broadcast),
      ZO_TEST(ranges_and_point_to_point), ZO_TEST(dup_from_another_thread),
  };
  /* Only rank 0 prints the runner's lines; a failure anywhere ends the job. */
  const int rank = zo_comm_rank(world);
  for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
    const double t0 = zo_test_now_s();
    if (tests[i].fn() != 0) {
      fprintf(stderr, "rank %d: FAIL %s\n", rank, tests[i].name);
      zo_comm_abort(world, 1);
    }
    if (rank == 0) printf("  rank 0: ok %s (%.3f s)\n", tests[i].name, zo_test_now_s() - t0);
    fflush(stdout);
  }
  zo_comm_free(world);
  return 0;
}

static int launch(const char *env) {
  if (!zo_mpitest_available()) return ZO_TEST_SKIP;
  const char *e[1] = {env};
  CHECK(zo_mpitest_launch(3, NULL, 0, e, env ? 1 : 0) == 0);
  return 0;
}

static int test_mpi_3_ranks(void) { return launch(NULL); }
static int test_mpi_3_ranks_split_7(void) { return launch("ZO_COMM_MAX_COUNT=7"); }

int main(void) {
  if (zo_comm_launched()) return rank_main();
  printf("MPI support: %s; launcher: %s\n", zo_comm_has_mpi() ? "yes" : "no", ZO_MPIEXEC[0] ? ZO_MPIEXEC : "none");
  static const struct zo_test tests[] = {
      ZO_TEST(single), ZO_TEST(auto_outside_launcher), ZO_TEST(bad_kind), ZO_TEST(mpi_3_ranks),
      ZO_TEST(mpi_3_ranks_split_7),
  };
  const int rc = ZO_TEST_MAIN(tests);
  /* Without MPI the test as a whole is skipped, its single-process cases run. */
  return rc == 0 && !zo_mpitest_available() ? ZO_TEST_SKIP : rc;
}
