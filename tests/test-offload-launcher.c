/* zo_launcher_rank_env (zo/launcher.h): the rank and size each launcher's
 * variables state (Open MPI, MPICH's Hydra, PMIx; PMIx with the rank only),
 * none set, empty ones, and every inconsistency refused with a message that
 * names the variables: bad numbers, a rank not below the size, two
 * launchers that disagree. zo_comm_launched and zo_comm_init("auto") follow
 * it. The cases set the variables themselves and clear them all first. */
#include <stdlib.h>

#include "zo/comm.h"
#include "zo/launcher.h"
#include "zo_test.h"

static const char *const all_vars[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",
                                       "PMI_SIZE",             "PMIX_RANK",            "PMIX_SIZE"};

static void clear(void) {
  for (size_t i = 0; i < ZO_ARRAY_LEN(all_vars); i++) unsetenv(all_vars[i]);
}

/* Clears every variable, then sets the pairs name, value of vars (NULL-terminated). */
static void set(const char *const *vars) {
  clear();
  for (; vars[0]; vars += 2) setenv(vars[0], vars[1], 1);
}

/* zo_launcher_rank_env after set(vars): its return and values. */
static int read_env(const char *const *vars, int *rank, int *size) {
  set(vars);
  *rank = -7, *size = -7;
  return zo_launcher_rank_env(rank, size);
}

static int test_none(void) {
  int r, s;
  ZO_REQUIRE(read_env((const char *[]){NULL}, &r, &s) == 0 && r == 0 && s == 1);
  ZO_REQUIRE(!zo_comm_launched());
  /* empty counts as unset */
  ZO_REQUIRE(read_env((const char *[]){"OMPI_COMM_WORLD_SIZE", "", "PMIX_RANK", "", NULL}, &r, &s) == 0 && r == 0 &&
             s == 1);
  zo_comm_t c = zo_comm_init("auto");
  ZO_REQUIRE(c && zo_comm_size(c) == 1 && strcmp(zo_comm_name(c), "single") == 0);
  zo_comm_free(c);
  return 0;
}

static int test_each_launcher(void) {
  static const struct {
    const char *vars[7];
    int rank, size;
  } cases[] = {
      {{"OMPI_COMM_WORLD_RANK", "3", "OMPI_COMM_WORLD_SIZE", "4", NULL}, 3, 4},
      {{"PMI_RANK", "1", "PMI_SIZE", "2", NULL}, 1, 2},
      {{"PMIX_RANK", "5", "PMIX_SIZE", "8", NULL}, 5, 8},
      {{"PMIX_RANK", "2", NULL}, 2, 0},               /* a PMIx server that gives the rank only */
      {{"OMPI_COMM_WORLD_SIZE", "2", NULL}, 0, 2},    /* the size only: rank 0 */
      {{"OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "1", NULL}, 0, 1},
      /* Open MPI 5 under PMIx sets both, alike */
      {{"OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2", "PMIX_RANK", "1", NULL}, 1, 2},
  };
  for (size_t i = 0; i < ZO_ARRAY_LEN(cases); i++) {
    int r, s;
    const int got = read_env(cases[i].vars, &r, &s);
    if (got != 1 || r != cases[i].rank || s != cases[i].size) {
      fprintf(stderr, "    case %zu (%s=%s): returned %d, rank %d, size %d; want 1, %d, %d\n", i, cases[i].vars[0],
              cases[i].vars[1], got, r, s, cases[i].rank, cases[i].size);
      return 1;
    }
    ZO_REQUIRE(zo_comm_launched());
  }
  return 0;
}

static int test_inconsistent(void) {
  static const struct {
    const char *vars[7];
    const char *says; /* in the message */
  } cases[] = {
      {{"OMPI_COMM_WORLD_RANK", "x", "OMPI_COMM_WORLD_SIZE", "2", NULL}, "OMPI_COMM_WORLD_RANK=\"x\""},
      {{"PMI_SIZE", "0", NULL}, "PMI_SIZE=\"0\": the MPI launcher's size must be a whole number >= 1"},
      {{"PMI_RANK", "-1", "PMI_SIZE", "2", NULL}, "PMI_RANK=\"-1\""},
      {{"PMIX_RANK", "2x", NULL}, "PMIX_RANK=\"2x\""},
      {{"OMPI_COMM_WORLD_SIZE", "99999999999", NULL}, "OMPI_COMM_WORLD_SIZE=\"99999999999\""},
      {{"OMPI_COMM_WORLD_RANK", "2", "OMPI_COMM_WORLD_SIZE", "2", NULL},
       "OMPI_COMM_WORLD_RANK=2 is not below OMPI_COMM_WORLD_SIZE=2"},
      {{"PMIX_RANK", "4", "PMI_SIZE", "3", NULL}, "PMIX_RANK=4 is not below PMI_SIZE=3"},
      {{"OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2", "PMIX_RANK", "0", NULL},
       "OMPI_COMM_WORLD_RANK=1 but PMIX_RANK=0"},
      {{"OMPI_COMM_WORLD_SIZE", "4", "PMI_SIZE", "2", NULL}, "OMPI_COMM_WORLD_SIZE=4 but PMI_SIZE=2"},
  };
  for (size_t i = 0; i < ZO_ARRAY_LEN(cases); i++) {
    int r, s;
    const int got = read_env(cases[i].vars, &r, &s);
    if (got != -EINVAL || !strstr(zo_last_error(), cases[i].says)) {
      fprintf(stderr, "    case %zu: returned %d (%s); want -EINVAL saying %s\n", i, got, zo_last_error(),
              cases[i].says);
      return 1;
    }
    /* launched, but "auto" refuses to guess */
    ZO_REQUIRE(zo_comm_launched());
    ZO_REQUIRE(zo_comm_init("auto") == NULL && strstr(zo_last_error(), cases[i].says));
  }
  return 0;
}

int main(void) {
  static const struct zo_test tests[] = {ZO_TEST(none), ZO_TEST(each_launcher), ZO_TEST(inconsistent)};
  struct zo_test_counts counts = zo_test_run(tests, ZO_ARRAY_LEN(tests));
  clear();
  return zo_test_report(counts);
}
