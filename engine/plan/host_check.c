/* What host memory the machine can give and the check train makes with it
 * before anything is allocated (see zo/host_check.h). */
#include "zo/host_check.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>


/* A number from a cgroup file; 0 for "max", absent or unreadable. */
static size_t read_size(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char buf[64] = "";
  const bool ok = fgets(buf, sizeof buf, f) != NULL;
  fclose(f);
  if (!ok || !strncmp(buf, "max", 3)) return 0;
  unsigned long long v = strtoull(buf, NULL, 10);
  return v >= (1ull << 60) ? 0 : (size_t)v; /* v1 writes a huge number for "no limit" */
}

static size_t cgroup_free(void) {
  char rel[1200] = "";
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (f) {
    char line[1200];
    while (fgets(line, sizeof line, f))
      if (!strncmp(line, "0::", 3)) {
        snprintf(rel, sizeof rel, "%s", line + 3);
        rel[strcspn(rel, "\n")] = '\0';
      }
    fclose(f);
  }
  char p[1300];
  size_t lim = 0, cur = 0;
  /* cgroup v2: the process's own group, else the root of the mount (a container's). */
  for (int k = 0; k < 2 && !lim; k++) {
    const char *r = k == 0 && rel[0] && strcmp(rel, "/") ? rel : "";
    snprintf(p, sizeof p, "/sys/fs/cgroup%.1200s/memory.max", r);
    lim = read_size(p);
    snprintf(p, sizeof p, "/sys/fs/cgroup%.1200s/memory.current", r);
    cur = read_size(p);
  }
  if (!lim) {
    lim = read_size("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    cur = read_size("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  }
  if (!lim) return 0;
  return lim > cur ? lim - cur : 1;
}

int zo_host_limit_read(struct zo_host_limit *h) {
  memset(h, 0, sizeof *h);
  h->mem_available = zo_meminfo_bytes("MemAvailable");
  h->cgroup_free = cgroup_free();
  struct rlimit rl;
  h->memlock = getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (size_t)rl.rlim_cur : SIZE_MAX;
  h->limit = h->mem_available;
  snprintf(h->limit_src, sizeof h->limit_src, "MemAvailable");
  if (h->cgroup_free && (!h->limit || h->cgroup_free < h->limit)) {
    h->limit = h->cgroup_free;
    snprintf(h->limit_src, sizeof h->limit_src, "the cgroup's memory.max less its usage");
  }
  return 0;
}

static int check_readable(const char *key, const char *path) {
  if (!path || !path[0]) return 0;
  if (access(path, R_OK) != 0)
    return zo_error(-errno, "%s = %s: %s (checked before any memory is allocated)", key, path, strerror(errno));
  return 0;
}

int zo_host_check_data(const struct zo_config *cfg) {
  if (!cfg->data.train || !cfg->data.train[0])
    return zo_error(-EINVAL, "data.train: no training data given (a token file path)");
  int err = check_readable("data.train", cfg->data.train);
  return err ? err : check_readable("data.val", cfg->data.val);
}

int zo_host_check(const struct zo_config *cfg, const struct zo_plan *p, bool cpu_backend) {
  int err = zo_host_check_data(cfg);
  return err ? err : zo_host_machine_check(cfg, p, cpu_backend);
}

int zo_host_machine_check(const struct zo_config *cfg, const struct zo_plan *p, bool cpu_backend) {
  struct zo_host_limit h;
  zo_host_limit_read(&h);
  const size_t dev = cpu_backend ? p->total[ZO_TIER_DEVICE] : 0, need = p->total[ZO_TIER_HOST] + dev;
  char a[32], b[32], c[32];
  if (h.limit && need > h.limit) {
    char detail[96] = "";
    if (cpu_backend)
      snprintf(detail, sizeof detail, " (host pool %s + the CPU backend's device arena %s)",
               zo_format_bytes(p->total[ZO_TIER_HOST], a), zo_format_bytes(dev, b));
    char head[400];
    snprintf(head, sizeof head, "the plan needs %s of host memory%s but this machine gives %s (%s)",
             zo_format_bytes(need, c), detail, zo_format_bytes(h.limit, a), h.limit_src);
    /* The changes that fit: zo_plan_check's, re-planned with what is there. */
    struct zo_config v = *cfg;
    v.engine.host_memory_budget = h.limit > dev ? h.limit - dev : 1;
    struct zo_plan vp;
    const char *changes = "";
    if (zo_plan_build(&v, &p->model, p->backend, &vp) == 0) {
      if (!vp.budget[ZO_TIER_DEVICE] && p->budget[ZO_TIER_DEVICE]) {
        vp.budget[ZO_TIER_DEVICE] = p->budget[ZO_TIER_DEVICE];
        vp.fits[ZO_TIER_DEVICE] = vp.total[ZO_TIER_DEVICE] <= vp.budget[ZO_TIER_DEVICE];
      }
      if (zo_plan_check(&v, &vp) != 0) {
        const char *m = strstr(zo_last_error(), ". Changes that fit:");
        if (m) changes = m;
      }
    }
    char tail[1200];
    snprintf(tail, sizeof tail, "%s", changes);
    return zo_error(-ENOMEM, "%s; refused before anything is allocated (the kernel would end the run)%s. "
                             "`zoffload plan CONFIG --auto` ranks the combinations that fit",
                    head, tail);
  }
  return 0;
}
