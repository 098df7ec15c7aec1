/* Tests for offload/host.c and offload/topology.c: carving alignment, peak and
 * reset accounting, the host_memory_budget message, pinning (VmLck grows by
 * the pool), the pageable fallback with exactly one warning (in a child that
 * drops CAP_IPC_LOCK by becoming nobody, since root ignores RLIMIT_MEMLOCK),
 * NUMA placement checked against get_mempolicy, OpenMP binding checked with
 * sched_getaffinity on every thread, and the first-touch cost init pays, side by side with the
 * same writes to a fresh mapping. Machines with one NUMA node only show that
 * node 0 works; nothing here needs a second node. */
#include "zo/host.h"
#include "zo/topology.h"

#include <dirent.h>
#include <errno.h>
#include <numaif.h>
#include <omp.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "zo_test.h"

#ifndef MPOL_PREFERRED_MANY
#define MPOL_PREFERRED_MANY 5
#endif

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static bool check(bool ok, const char *what, int line) {
  if (!ok)
    fprintf(stderr, "  %s:%d: check failed: %s\n    last error: %s\n", __FILE__, line, what,
            zo_last_error());
  return ok;
}
#define CHECK(cond) check((cond), #cond, __LINE__)

static bool error_has(const char *needle) {
  bool ok = strstr(zo_last_error(), needle) != NULL;
  if (!ok) fprintf(stderr, "  expected \"%s\" in the message \"%s\"\n", needle, zo_last_error());
  return ok;
}

/* VmLck of this process in bytes, or -1. */
static long long vm_locked(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL) return -1;
  char line[256];
  long long kib = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmLck: %lld kB", &kib) == 1) break;
  fclose(f);
  return kib < 0 ? -1 : kib * 1024;
}

static bool all_zero(const char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return false;
  return true;
}

static int test_carve_alignment_peak(void) {
  int bad = 0;
  struct zo_host_pool p;
  bad += !CHECK(zo_host_pool_init(&p, 1 * MiB + 1, 0, false, NULL) == 0);
  if (bad) return bad;
  bad += !CHECK(p.capacity == 1 * MiB + ZO_HOST_ALIGN && p.used == 0 && p.peak == 0);
  bad += !CHECK((uintptr_t)p.base % ZO_HOST_ALIGN == 0 && !p.pinned);
  bad += !CHECK(all_zero(p.base, p.capacity));
  static const size_t sizes[] = {1, 4097, 0, 8192, 100};
  static const char *names[] = {"master weights", "exp_avg", "empty", "exp_avg_sq", "grads"};
  void *q[5];
  size_t off = 0;
  for (int i = 0; i < 5; i++) {
    bad += !CHECK(zo_host_pool_alloc(&p, sizes[i], names[i], &q[i]) == 0);
    bad += !CHECK(q[i] == p.base + off && (uintptr_t)q[i] % ZO_HOST_ALIGN == 0);
    off += zo_host_round(sizes[i]);
    bad += !CHECK(p.used == off && p.peak == off);
    memset(q[i], 0xa5, sizes[i]);
  }
  bad += !CHECK(off == 4096 + 8192 + 0 + 8192 + 4096);
  bad += !CHECK(p.n_carves == 5);
  for (int i = 0; i < 5 && i < p.n_carves; i++)
    bad += !CHECK(strcmp(p.carves[i].purpose, names[i]) == 0 &&
                  p.base + p.carves[i].offset == (char *)q[i] &&
                  p.carves[i].nbytes == zo_host_round(sizes[i]));
  char long_name[100];
  memset(long_name, 'x', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';
  void *r;
  bad += !CHECK(zo_host_pool_alloc(&p, 1, long_name, &r) == 0);
  bad += !CHECK(strlen(p.carves[5].purpose) == sizeof p.carves[5].purpose - 1);
  /* Exactly the rest fits; one byte more does not. */
  bad +=
      !CHECK(zo_host_pool_alloc(&p, p.capacity - p.used, "rest", &r) == 0 && p.used == p.capacity);
  bad += !CHECK(zo_host_pool_alloc(&p, 1, "one more byte", &r) == -ENOMEM && r == NULL);
  bad += !CHECK(error_has("one more byte needs 4.00 KiB (4096 bytes) but only 0 B of") &&
                error_has("under-sized"));
  bad += !CHECK(zo_host_pool_alloc(&p, SIZE_MAX, "huge", &r) == -ENOMEM && r == NULL);
  bad += !CHECK(p.used == p.capacity && p.peak == p.capacity);
  zo_host_pool_print(&p, stdout);
  zo_host_pool_free(&p);
  bad += !CHECK(p.base == NULL && p.capacity == 0);
  zo_host_pool_free(&p); /* twice is fine */
  struct zo_host_pool empty;
  bad += !CHECK(zo_host_pool_init(&empty, 0, 0, true, NULL) == 0 && empty.base == NULL);
  bad += !CHECK(zo_host_pool_alloc(&empty, 0, "nothing", &r) == 0 && r == NULL);
  bad += !CHECK(zo_host_pool_alloc(&empty, 1, "something", &r) == -ENOMEM);
  zo_host_pool_free(&empty);
  return bad;
}

static int test_budget(void) {
  int bad = 0;
  struct zo_host_pool p;
  /* The plan alone is over the budget: init refuses. */
  bad += !CHECK(zo_host_pool_init(&p, 64 * KiB, 32 * KiB, false, NULL) == -ENOMEM);
  bad += !CHECK(p.base == NULL);
  bad += !CHECK(error_has("the plan needs 64.00 KiB (65536 bytes) of host memory") &&
                error_has("over engine.host_memory_budget = 32.00 KiB (32768 bytes)") &&
                error_has("zero_optimization.offload_optimizer.device = nvme"));
  /* The pool sized to the budget: the carve that passes it names itself. */
  bad += !CHECK(zo_host_pool_init(&p, 64 * KiB, 64 * KiB, false, zo_backend_cpu()) == 0);
  void *a, *b;
  bad += !CHECK(zo_host_pool_alloc(&p, 48 * KiB, "master weights", &a) == 0);
  bad += !CHECK(zo_host_pool_alloc(&p, 20 * KiB, "exp_avg", &b) == -ENOMEM && b == NULL);
  bad += !CHECK(error_has("host memory budget exceeded: exp_avg needs 20.00 KiB (20480 bytes) "
                          "with 48.00 KiB already allocated, over engine.host_memory_budget = "
                          "64.00 KiB (65536 bytes). Raise engine.host_memory_budget, or move the "
                          "optimizer states to NVMe (zero_optimization.offload_optimizer.device = "
                          "nvme)"));
  bad += !CHECK(p.used == 48 * KiB && p.n_carves == 1);
  bad += !CHECK(zo_host_pool_alloc(&p, 16 * KiB, "exp_avg", &b) == 0 && p.used == p.budget);
  zo_host_pool_free(&p);
  /* Budget 0 is unlimited. */
  bad += !CHECK(zo_host_pool_init(&p, 64 * KiB, 0, false, NULL) == 0 && p.budget == 0);
  zo_host_pool_free(&p);
  return bad;
}

static int test_reset(void) {
  int bad = 0;
  struct zo_host_pool p;
  bad += !CHECK(zo_host_pool_init(&p, 256 * KiB, 0, false, NULL) == 0);
  if (bad) return bad;
  void *a, *b, *c, *c2;
  bad += !CHECK(zo_host_pool_alloc(&p, 10000, "params", &a) == 0);
  const size_t mark = p.used;
  bad += !CHECK(zo_host_pool_alloc(&p, 5000, "scratch 1", &b) == 0);
  bad += !CHECK(zo_host_pool_alloc(&p, 70000, "scratch 2", &c) == 0);
  memset(b, 7, 5000);
  const size_t peak = p.peak;
  zo_host_pool_reset(&p, mark);
  bad += !CHECK(p.used == mark && p.peak == peak && p.n_carves == 1);
  bad += !CHECK(((char *)b)[4999] == 7); /* contents are kept */
  bad += !CHECK(zo_host_pool_alloc(&p, 1, "scratch again", &c2) == 0 && c2 == b);
  bad += !CHECK(p.n_carves == 2 && strcmp(p.carves[1].purpose, "scratch again") == 0);
  zo_host_pool_reset(&p, p.used); /* to the current mark: nothing changes */
  bad += !CHECK(p.n_carves == 2 && p.used == mark + 4096);
  zo_host_pool_reset(&p, 0);
  bad += !CHECK(p.used == 0 && p.peak == peak && p.n_carves == 0);

  /* More carves than rows: the last row becomes "(other)" and resets shrink it. */
  void *x;
  for (int i = 0; i < ZO_HOST_MAX_CARVES + 8; i++) {
    char name[32];
    snprintf(name, sizeof name, "layer %d", i);
    bad += !CHECK(zo_host_pool_alloc(&p, 4096, name, &x) == 0);
  }
  const struct zo_host_carve *last = &p.carves[ZO_HOST_MAX_CARVES - 1];
  bad += !CHECK(p.n_carves == ZO_HOST_MAX_CARVES && strcmp(last->purpose, "(other)") == 0);
  bad += !CHECK(last->offset == (ZO_HOST_MAX_CARVES - 1) * 4096 &&
                last->offset + last->nbytes == p.used);
  zo_host_pool_reset(&p, p.used - 3 * 4096);
  bad += !CHECK(p.n_carves == ZO_HOST_MAX_CARVES && last->offset + last->nbytes == p.used);
  zo_host_pool_reset(&p, (ZO_HOST_MAX_CARVES - 1) * 4096);
  bad += !CHECK(p.n_carves == ZO_HOST_MAX_CARVES - 1);
  zo_host_pool_free(&p);
  return bad;
}

static int test_pinned(void) {
  struct rlimit rl;
  const size_t n = 64 * MiB;
  if (geteuid() != 0 && getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      rl.rlim_cur < 2 * n) {
    printf("  skipped: RLIMIT_MEMLOCK %llu bytes is below %zu and this is not root\n",
           (unsigned long long)rl.rlim_cur, 2 * n);
    return 0;
  }
  int bad = 0;
  const long long before = vm_locked();
  bad += !CHECK(before >= 0);
  struct zo_host_pool p;
  bad += !CHECK(zo_host_pool_init(&p, n, 0, true, zo_backend_cpu()) == 0);
  if (bad) return bad;
  const long long during = vm_locked();
  bad += !CHECK(p.pinned);
  bad += !CHECK(during - before >= (long long)n);
  void *a;
  bad += !CHECK(zo_host_pool_alloc(&p, n, "master weights", &a) == 0 && all_zero(a, n));
  printf("  pinned %zu MiB: VmLck %+lld MiB, mlock and fault-in %.3f s (%.2f us per 4 KiB page)\n",
         n / MiB, (during - before) / (long long)MiB, p.fault_in_s,
         p.fault_in_s * 1e6 / (double)(n / 4096));
  zo_host_pool_free(&p);
  bad += !CHECK(vm_locked() == before);
  return bad;
}

/* In a child without CAP_IPC_LOCK and with RLIMIT_MEMLOCK at 64 KiB, two
 * pinned pools are refused the lock, work pageable, and stderr carries
 * exactly one warning. The parent never triggers the warning, so the child
 * starts with it unprinted. */
static int test_pageable_fallback(void) {
  int bad = 0;
  int fds[2];
  bad += !CHECK(pipe(fds) == 0);
  if (bad) return bad;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    struct rlimit rl = {.rlim_cur = 64 * KiB, .rlim_max = 64 * KiB};
    if (setrlimit(RLIMIT_MEMLOCK, &rl) < 0) _exit(10);
    if (geteuid() == 0 && (setgid(65534) < 0 || setuid(65534) < 0)) _exit(11);
    if (dup2(fds[1], STDERR_FILENO) < 0) _exit(12);
    struct zo_host_pool p1, p2;
    if (zo_host_pool_init(&p1, 1 * MiB, 0, true, zo_backend_cpu()) != 0) _exit(13);
    if (zo_host_pool_init(&p2, 4 * MiB, 0, true, NULL) != 0) _exit(14);
    if (p1.pinned || p2.pinned || vm_locked() != 0) _exit(15);
    void *a;
    if (zo_host_pool_alloc(&p2, 4 * MiB, "exp_avg", &a) != 0 || !all_zero(a, 4 * MiB)) _exit(16);
    memset(a, 1, 4 * MiB);
    zo_host_pool_free(&p1);
    zo_host_pool_free(&p2);
    _exit(0);
  }
  close(fds[1]);
  char out[4096];
  size_t len = 0;
  ssize_t got;
  while (len < sizeof out - 1 && (got = read(fds[0], out + len, sizeof out - 1 - len)) > 0)
    len += (size_t)got;
  out[len] = '\0';
  close(fds[0]);
  int status = 0;
  bad += !CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
  bad += !CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fprintf(stderr, "  child status %d\n", status);
  int n_warnings = 0;
  for (const char *s = out; (s = strstr(s, "warning")) != NULL; s++) n_warnings++;
  bad += !CHECK(n_warnings == 1);
  /* The one line, up to its newline, says what happened and what to do. */
  char line[1024] = "";
  const char *w = strstr(out, "zoffload: warning: ");
  if (w) snprintf(line, sizeof line, "%.*s", (int)strcspn(w, "\n"), w);
  bad += !CHECK(w != NULL && w[strlen(line)] == '\n');
  bad += !CHECK(strstr(line, "could not pin 1.00 MiB of host memory (mlock: ") != NULL);
  bad += !CHECK(strstr(line, "RLIMIT_MEMLOCK is 64 KiB") != NULL);
  bad += !CHECK(strstr(line, "continuing with pageable memory") != NULL);
  bad += !CHECK(strstr(line, "ulimit -l unlimited") != NULL && strstr(line, "limits.conf") != NULL);
  bad += !CHECK(strstr(line, "zero_optimization.offload_optimizer.pin_memory = false") != NULL);
  if (bad) fprintf(stderr, "  child stderr: %s\n", out);
  return bad;
}

static int test_topology_query(void) {
  int bad = 0;
  struct zo_topology t;
  bad += !CHECK(zo_topology_query(&t) == 0);
  bad += !CHECK(t.n_numa_nodes >= 1 && t.n_cores >= 1 && t.n_pus >= t.n_cores);
  int node = -1, n_pus = 0;
  bad += !CHECK(zo_topology_node_near(NULL, &node) == 0 && node >= 0);
  bad += !CHECK(zo_topology_node_pus(node, &n_pus) == 0 && n_pus >= 1 && n_pus <= t.n_pus);
  printf(
      "  hwloc %s, %d NUMA node(s), %d cores, %d logical CPUs; this thread's node %d has %d CPUs\n",
      t.has_hwloc ? "yes" : "no", t.n_numa_nodes, t.n_cores, t.n_pus, node, n_pus);
  bad += !CHECK(zo_topology_node_pus(-1, &n_pus) == -EINVAL);
  bad += !CHECK(zo_topology_node_pus(4096, &n_pus) == -EINVAL);
  bad +=
      !CHECK(zo_topology_node_near("not a bus id", &node) == -EINVAL && error_has("not a bus id"));
  bad += !CHECK(zo_topology_node_near("0000:3b:00.0x", &node) == -EINVAL);
  if (!t.has_hwloc) return bad;
  bad +=
      !CHECK(zo_topology_node_near("ffff:ff:1f.7", &node) == -ENODEV && error_has("ffff:ff:1f.7"));
  /* Every PCI device sysfs lists is on the node sysfs says (any node when -1). */
  DIR *d = opendir("/sys/bus/pci/devices");
  int n_devices = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[512];
    snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/numa_node", e->d_name);
    FILE *f = fopen(path, "r");
    int sys_node = -1;
    if (f) {
      if (fscanf(f, "%d", &sys_node) != 1) sys_node = -1;
      fclose(f);
    }
    node = -2;
    bad += !CHECK(zo_topology_node_near(e->d_name, &node) == 0);
    bad += !CHECK(sys_node >= 0 ? node == sys_node : zo_topology_node_pus(node, &n_pus) == 0);
    n_devices++;
  }
  if (d) closedir(d);
  printf("  %d PCI device(s) mapped to their NUMA node\n", n_devices);
  return bad;
}

/* The node of the page at addr and the policy governing it, by system call
 * (libnuma is not linked). */
static int page_node(const void *addr) {
  int node = -1;
  if (syscall(SYS_get_mempolicy, &node, NULL, 0UL, addr, MPOL_F_NODE | MPOL_F_ADDR) < 0) return -1;
  return node;
}

static int test_placement(void) {
  int bad = 0;
  struct zo_topology t;
  zo_topology_query(&t);
  int near = -1;
  bad += !CHECK(zo_topology_node_near(NULL, &near) == 0);
  struct zo_host_pool p;
  const size_t n = 8 * MiB;
  bad += !CHECK(zo_host_pool_init(&p, n, 0, true, zo_backend_cpu()) == 0);
  if (bad) return bad;
  if (!t.has_hwloc) {
    bad += !CHECK(p.numa_node == -1);
    int node;
    bad += !CHECK(zo_topology_memory_node(p.base, n, &node) == -ENOTSUP);
    zo_host_pool_free(&p);
    return bad;
  }
  bad += !CHECK(p.numa_node == near);
  int node = -2;
  bad += !CHECK(zo_topology_memory_node(p.base, n, &node) == 0 && node == p.numa_node);
  for (size_t off = 0; off < n; off += n / 8) bad += !CHECK(page_node(p.base + off) == p.numa_node);
  int mode = -1;
  unsigned long mask[16] = {0};
  bad += !CHECK(syscall(SYS_get_mempolicy, &mode, mask, 16 * 8 * sizeof(unsigned long), p.base,
                        MPOL_F_ADDR) == 0);
  bad += !CHECK(mode == MPOL_PREFERRED || mode == MPOL_PREFERRED_MANY);
  bad += !CHECK(p.numa_node < 1024 && (mask[p.numa_node / 64] >> (p.numa_node % 64) & 1) == 1);
  printf("  8 MiB pool on NUMA node %d (policy %s), pages checked by get_mempolicy\n", p.numa_node,
         mode == MPOL_PREFERRED ? "MPOL_PREFERRED" : "MPOL_PREFERRED_MANY");
  zo_host_pool_free(&p);

  bad += !CHECK(zo_topology_bind_memory(NULL, 4096, -3) == -EINVAL);
  /* memory_node on pages never touched. */
  char *fresh = mmap(NULL, 1 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  bad += !CHECK(fresh != MAP_FAILED);
  if (fresh != MAP_FAILED) {
    bad += !CHECK(zo_topology_bind_memory(fresh, 1 * MiB, near) == 0);
    bad += !CHECK(zo_topology_memory_node(fresh, 1 * MiB, &node) == -ENODATA && node == -1);
    memset(fresh, 1, 1 * MiB);
    bad += !CHECK(zo_topology_memory_node(fresh, 1 * MiB, &node) == 0 && node == near);
    munmap(fresh, 1 * MiB);
  }
  return bad;
}

/* Threads of this process whose affinity is exactly n_pus CPUs, and all
 * threads (sanitizer runtimes add their own), read from /proc/self/task by this thread: no OpenMP
 * region, whose fork and join the thread sanitizer cannot see. */
static void count_affinity(int n_pus, int *n_match, int *n_tasks) {
  *n_match = *n_tasks = 0;
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    cpu_set_t set;
    CPU_ZERO(&set);
    (*n_tasks)++;
    if (sched_getaffinity((pid_t)atoi(e->d_name), sizeof set, &set) == 0 &&
        CPU_COUNT(&set) == n_pus)
      (*n_match)++;
  }
  if (d) closedir(d);
}

/* The main thread starts confined to one CPU, so that the OpenMP workers are
 * born with that mask and binding them to the node visibly widens it, even
 * on a machine whose one node holds every CPU. */
static int test_bind_omp(void) {
  int bad = 0;
  struct zo_topology t;
  zo_topology_query(&t);
  int node = -1, n_pus = 0, n_bound = -1;
  bad += !CHECK(zo_topology_node_near(NULL, &node) == 0 && zo_topology_node_pus(node, &n_pus) == 0);
  bad += !CHECK(zo_topology_bind_omp(-1, &n_bound) == (t.has_hwloc ? -EINVAL : 0));
  cpu_set_t saved, one;
  bad += !CHECK(sched_getaffinity(0, sizeof saved, &saved) == 0);
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &saved)) {
      CPU_SET(c, &one);
      break;
    }
  bad += !CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
  bad += !CHECK(zo_topology_bind_omp(node, &n_bound) == 0);
  const bool user_placed = getenv("OMP_PROC_BIND") || getenv("OMP_PLACES");
  const int n_threads = omp_get_max_threads();
  int n_match = 0, n_tasks = 0;
  count_affinity(n_pus, &n_match, &n_tasks);
  if (!t.has_hwloc || user_placed) {
    bad += !CHECK(n_bound == 0);
    printf("  OpenMP threads left unbound (%s)\n",
           t.has_hwloc ? "OMP_PROC_BIND/OMP_PLACES set" : "no hwloc");
  } else {
    bad += !CHECK(n_bound == n_threads);
    bad += !CHECK(n_match >= n_threads); /* runtime threads (TSan's) may keep other masks */
    printf("  %d OpenMP thread(s) bound to the %d CPU(s) of NUMA node %d (%d of %d threads of "
           "the process have that mask)\n",
           n_bound, n_pus, node, n_match, n_tasks);
  }
  bad += !CHECK(sched_setaffinity(0, sizeof saved, &saved) == 0);
  return bad;
}

/* What init's fault-in costs and buys: a fresh mapping's first write (one
 * fault per 4 KiB page: what step 1 would pay), the pool's fault-in at init
 * (huge pages where the kernel has them), and writing the pool after init.
 * The memory is warmed once first, so that neither side pays the hypervisor's
 * cost of backing guest pages never used before (the ~12 us a page of
 * DESIGN.md's "Performance facts"), which would land on whichever ran first. */
static int test_fault_in_cost(void) {
  int bad = 0;
  const size_t n = 128 * MiB;
  const double pages = (double)(n / 4096);
  char *fresh = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  bad += !CHECK(fresh != MAP_FAILED);
  if (bad) return bad;
  double t0 = zo_time_s();
  memset(fresh, 1, n);
  const double t_cold = zo_time_s() - t0;
  munmap(fresh, n);
  fresh = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  bad += !CHECK(fresh != MAP_FAILED);
  if (bad) return bad;
  t0 = zo_time_s();
  memset(fresh, 1, n);
  const double t_fresh = zo_time_s() - t0;
  munmap(fresh, n);
  struct zo_host_pool p;
  bad += !CHECK(zo_host_pool_init(&p, n, 0, false, NULL) == 0);
  if (bad) return bad;
  t0 = zo_time_s();
  memset(p.base, 1, n);
  const double t_pool = zo_time_s() - t0;
  printf("  128 MiB, per 4 KiB page: first write of never-used memory %.2f us; of a fresh mapping "
         "%.2f us; pool fault-in at init %.2f us (%.3f s); writing the pool after init %.3f us "
         "(%.1fx less than the fresh mapping)\n",
         t_cold * 1e6 / pages, t_fresh * 1e6 / pages, p.fault_in_s * 1e6 / pages, p.fault_in_s,
         t_pool * 1e6 / pages, t_fresh / (t_pool > 0 ? t_pool : 1e-9));
  bad += !CHECK(p.fault_in_s > 0);
#ifdef __SANITIZE_THREAD__
  printf("  (not compared under the thread sanitizer: its shadow memory faults on both sides)\n");
#else
  bad += !CHECK(t_pool < t_fresh); /* the fresh write takes the faults init already took */
#endif
  zo_host_pool_free(&p);
  return bad;
}

int main(void) {
  static const struct zo_test tests[] = {
      ZO_TEST(carve_alignment_peak),
      ZO_TEST(budget),
      ZO_TEST(reset),
      ZO_TEST(pinned),
      /* Before any OpenMP region: the child of fork() must be single-threaded. */
      ZO_TEST(pageable_fallback),
      ZO_TEST(topology_query),
      ZO_TEST(placement),
      ZO_TEST(bind_omp),
      ZO_TEST(fault_in_cost),
  };
  return ZO_TEST_MAIN(tests);
}
