/* The MPI launcher's rank and size variables (zo/launcher.h). */
#include "zo/launcher.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>

static const struct {
  const char *rank, *size;
} launchers[] = {
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, /* Open MPI */
    {"PMI_RANK", "PMI_SIZE"},                         /* MPICH's Hydra */
    {"PMIX_RANK", "PMIX_SIZE"},                       /* PMIx */
};

/* One variable: 0 when unset or empty, 1 with its value in *out, or -EINVAL
 * when it is not a whole number in [min, INT_MAX]. */
static int read_var(const char *name, long min, long *out) {
  const char *v = getenv(name);
  if (!v || !*v) return 0;
  char *end;
  errno = 0;
  const long n = strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || n < min || n > INT_MAX)
    return zo_error(-EINVAL, "%s=\"%s\": the MPI launcher's %s must be a whole number >= %ld", name, v,
                    min == 0 ? "rank" : "size", min);
  *out = n;
  return 1;
}

/* Reads the rank (what = 0) or the size (what = 1) from every launcher's
 * variable: 0 when none is set, 1 with the value in *out and the variable
 * that gave it in *from, -EINVAL when one is bad or two disagree. */
static int read_all(int what, long *out, const char **from) {
  *from = NULL;
  for (size_t i = 0; i < sizeof launchers / sizeof launchers[0]; i++) {
    const char *name = what == 0 ? launchers[i].rank : launchers[i].size;
    long n = 0;
    const int got = read_var(name, what == 0 ? 0 : 1, &n);
    if (got < 0) return got;
    if (!got) continue;
    if (*from && n != *out)
      return zo_error(-EINVAL, "the MPI launcher's variables disagree: %s=%ld but %s=%ld (a launcher started "
                               "inside another's job?): unset the outer launcher's %s",
                      *from, *out, name, n, what == 0 ? "rank" : "size");
    if (!*from) *out = n, *from = name;
  }
  return *from != NULL;
}

int zo_launcher_rank_env(int *rank, int *size) {
  ZO_ASSERT(rank != NULL && size != NULL);
  long r = 0, s = 0;
  const char *r_from, *s_from;
  const int has_r = read_all(0, &r, &r_from);
  if (has_r < 0) return has_r;
  const int has_s = read_all(1, &s, &s_from);
  if (has_s < 0) return has_s;
  if (!has_r && !has_s) {
    *rank = 0, *size = 1;
    return 0;
  }
  if (has_r && has_s && r >= s)
    return zo_error(-EINVAL, "the MPI launcher's variables disagree: %s=%ld is not below %s=%ld (ranks count "
                             "from 0)",
                    r_from, r, s_from, s);
  *rank = (int)r, *size = (int)s;
  return 1;
}
