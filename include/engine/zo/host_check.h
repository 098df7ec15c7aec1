/* What host memory the machine can give (engine/plan/host_check.c):
 * MemAvailable, the cgroup limit, RLIMIT_MEMLOCK for the pinned part; and
 * the check train makes with it before anything is allocated (plan runs
 * its memory half). */
#ifndef ZO_HOST_CHECK_H
#define ZO_HOST_CHECK_H

#include <stdbool.h>
#include <stddef.h>

#include "zo/config.h"
#include "zo/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

struct zo_host_limit {
  size_t mem_available;  /* MemAvailable of /proc/meminfo, bytes; 0 = unknown */
  size_t cgroup_free;    /* the cgroup's memory.max - memory.current; 0 = no limit */
  size_t memlock;        /* RLIMIT_MEMLOCK bytes; SIZE_MAX = unlimited */
  size_t limit;          /* the smaller of the known ones (0 = unknown) */
  char limit_src[64];    /* "MemAvailable", "cgroup memory.max" */
};

/* Reads the limits. Returns 0 (fields it cannot read stay 0). */
int zo_host_limit_read(struct zo_host_limit *h);

/* train's check before anything is allocated: that cfg's data files exist
 * and are readable, and that plan p's host bytes (plus its device bytes when
 * the backend's device is host memory, cpu_backend) fit what the machine can
 * give. -ENOMEM names the bytes needed and available, and lists the changes
 * that fit (zo_plan_check re-planned with that host budget). A pinned part
 * over RLIMIT_MEMLOCK is not refused: the host pool warns and stays pageable.
 * Returns 0 or -errno. */
int zo_host_check(const struct zo_config *cfg, const struct zo_plan *p, bool cpu_backend);

/* The data half of zo_host_check: data.train given, it and data.val (when
 * set) readable. train's "auto" settings run it before the planner's search. */
int zo_host_check_data(const struct zo_config *cfg);

/* The memory half of zo_host_check (plan runs it: no data files needed). */
int zo_host_machine_check(const struct zo_config *cfg, const struct zo_plan *p, bool cpu_backend);

#ifdef __cplusplus
}
#endif
#endif /* ZO_HOST_CHECK_H */
