/* Host pool: one anonymous mapping, placed, locked and faulted in at init,
 * then carved by a bump pointer; it never grows, so an allocation either fits
 * the plan or fails. Order matters at init: the NUMA policy is set before any
 * page exists (pages never move afterwards), and locking faults the pages in
 * in the same pass. The mapping is 2 MiB aligned and advised for transparent
 * huge pages, which makes the first touch one fault per 2 MiB instead of 512
 * (6x faster measured here); carves stay 4 KiB aligned.
 * On a backend that registers host memory (CUDA) the pool is always
 * registered, which also locks it, whatever pin says and without mlock: a
 * copy from pageable memory is not ordered behind the host functions that
 * fill it, so the scheduler's pipelines would be wrong, not merely slow. A
 * refused registration refuses the pool. */
#include "zo/host.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "zo/topology.h"

#define HUGE_PAGE ((size_t)2 << 20) /* bytes; x86-64 and arm64 (4 KiB granule) THP size */

static atomic_flag pageable_warned = ATOMIC_FLAG_INIT;
static atomic_flag unplaced_noted = ATOMIC_FLAG_INIT;

static const char budget_hint[] =
    "Raise engine.host_memory_budget, or move the optimizer states to NVMe "
    "(zero_optimization.offload_optimizer.device = nvme)";
static const char no_room_hint[] =
    "The plan's host tier does not fit this machine: move the optimizer states to NVMe "
    "(zero_optimization.offload_optimizer.device = nvme), offload less to the host, or lower "
    "train_micro_batch_size_per_gpu";

size_t zo_host_round(size_t nbytes) {
  return (nbytes + ZO_HOST_ALIGN - 1) / ZO_HOST_ALIGN * ZO_HOST_ALIGN;
}

/* Available and total physical memory, for messages. */
static void host_memory(char avail[32], char total[32]) {
  long page = sysconf(_SC_PAGESIZE);
  long av = sysconf(_SC_AVPHYS_PAGES), tot = sysconf(_SC_PHYS_PAGES);
  zo_format_bytes(av > 0 && page > 0 ? (size_t)av * (size_t)page : 0, avail);
  zo_format_bytes(tot > 0 && page > 0 ? (size_t)tot * (size_t)page : 0, total);
}

static void warn_pageable(size_t nbytes, int err) {
  if (atomic_flag_test_and_set(&pageable_warned)) return;
  struct rlimit rl;
  char want[32], limit[64];
  if (getrlimit(RLIMIT_MEMLOCK, &rl) < 0)
    snprintf(limit, sizeof limit, "unknown");
  else if (rl.rlim_cur == RLIM_INFINITY)
    snprintf(limit, sizeof limit, "unlimited");
  else
    snprintf(limit, sizeof limit, "%llu KiB", (unsigned long long)(rl.rlim_cur / 1024));
  fprintf(stderr,
          "zoffload: warning: could not pin %s of host memory (mlock: %s; RLIMIT_MEMLOCK is %s): "
          "continuing with pageable memory, so host<->device copies will not overlap compute. "
          "Raise the limit with 'ulimit -l unlimited' or a memlock line in "
          "/etc/security/limits.conf, or set zero_optimization.offload_optimizer.pin_memory = "
          "false\n",
          zo_format_bytes(nbytes, want), strerror(err), limit);
}

/* Locks [base, base + nbytes), which also faults every page in for writing.
 * Through syscall(): the sanitizer runtimes intercept mlock() as a no-op. */
static int lock_pages(char *base, size_t nbytes) {
  if (syscall(SYS_mlock, base, nbytes) == 0) return 0;
  int err = errno;
  syscall(SYS_munlock, base, nbytes); /* a refusal may come after part of the range */
  return -err;
}

/* Faults every page in for writing (a read fault would map the shared zero
 * page and defer the real cost to the first step). */
static int populate_pages(char *base, size_t nbytes) {
#ifdef MADV_POPULATE_WRITE
  if (madvise(base, nbytes, MADV_POPULATE_WRITE) == 0) return 0;
  if (errno != EINVAL) return -errno; /* EINVAL: kernel older than 5.14 */
#endif
  for (size_t i = 0; i < nbytes; i += ZO_HOST_ALIGN) ((volatile char *)base)[i] = 0;
  return 0;
}

/* capacity bytes of fresh mapping, HUGE_PAGE aligned when it is that large. */
static char *reserve(size_t capacity) {
  size_t slack = capacity >= HUGE_PAGE ? HUGE_PAGE : 0;
  char *raw =
      mmap(NULL, capacity + slack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  if (slack == 0) return raw;
  char *base = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
  size_t head = (size_t)(base - raw), tail = slack - head;
  if (head) munmap(raw, head);
  if (tail) munmap(base + capacity, tail);
  madvise(base, capacity, MADV_HUGEPAGE); /* best effort: a kernel without THP says EINVAL */
  return base;
}

int zo_host_pool_init(struct zo_host_pool *p, size_t capacity, size_t budget, bool pin,
                      zo_backend_t backend) {
  memset(p, 0, sizeof *p);
  p->backend = backend;
  p->budget = budget;
  p->numa_node = -1;
  char asked[32], lim[32], avail[32], total[32];
  if (capacity > SIZE_MAX - HUGE_PAGE - ZO_HOST_ALIGN)
    return zo_error(-ENOMEM, "host pool: %zu bytes asked is not a plausible size (a bug)",
                    capacity);
  capacity = zo_host_round(capacity);
  if (budget && capacity > budget)
    return zo_error(-ENOMEM,
                    "host pool: the plan needs %s (%zu bytes) of host memory, over "
                    "engine.host_memory_budget = %s (%zu bytes). %s",
                    zo_format_bytes(capacity, asked), capacity, zo_format_bytes(budget, lim),
                    budget, budget_hint);
  if (capacity == 0) return 0;

  char *base = reserve(capacity);
  if (base == NULL) {
    int err = errno;
    host_memory(avail, total);
    return zo_error(-ENOMEM, "host pool: could not map %s (%zu bytes): %s; %s available of %s. %s",
                    zo_format_bytes(capacity, asked), capacity, strerror(err), avail, total,
                    no_room_hint);
  }

  struct zo_topology topo;
  int node = 0;
  zo_topology_query(&topo);
  /* The node nearest the device; on the CPU backend the calling thread's. */
  char bus[64] = "";
  const bool have_bus = backend && backend->device_pci_bus_id && backend->device_pci_bus_id(bus, sizeof bus) == 0;
  int err = zo_topology_node_near(have_bus ? bus : NULL, &node);
  if (err == 0) err = zo_topology_bind_memory(base, capacity, node);
  if (err == 0 && topo.has_hwloc)
    p->numa_node = node;
  else if (err && !atomic_flag_test_and_set(&unplaced_noted))
    fprintf(stderr, "zoffload: note: host pool not placed on a NUMA node: %s\n", zo_last_error());

  double t0 = zo_time_s();
  const bool registers = backend && backend->host_register;
  if (pin && !registers) {
    err = lock_pages(base, capacity);
    if (err == 0)
      p->pinned = true;
    else
      warn_pageable(capacity, -err);
  }
  if (!p->pinned) {
    err = populate_pages(base, capacity);
    if (err) goto out_unmap;
  }
  if (registers) {
    err = backend->host_register(base, capacity);
    if (err) {
      char why[256];
      snprintf(why, sizeof why, "%s", zo_last_error());
      munmap(base, capacity);
      return zo_error(err,
                      "host pool: could not register %s (%zu bytes) of host memory with the %s "
                      "device (%s). Offloading to host memory on it needs registered pages: "
                      "copies from pageable memory are not ordered behind the host functions "
                      "that fill them. Check the memory locked by other processes, lower the "
                      "host tier (zero_optimization.offload_*), or keep everything on the "
                      "device",
                      zo_format_bytes(capacity, asked), capacity, backend->name, why);
    }
    p->registered = true;
    p->pinned = true; /* registration locks the pages */
  }
  p->fault_in_s = zo_time_s() - t0;
  p->base = base;
  p->capacity = capacity;
  return 0;

out_unmap:
  munmap(base, capacity);
  host_memory(avail, total);
  return zo_error(
      -ENOMEM, "host pool: could not fault in %s (%zu bytes): %s; %s available of %s. %s",
      zo_format_bytes(capacity, asked), capacity, strerror(-err), avail, total, no_room_hint);
}

void zo_host_pool_free(struct zo_host_pool *p) {
  if (p->registered) p->backend->host_unregister(p->base);
  p->registered = false;
  if (p->base) munmap(p->base, p->capacity);
  p->base = NULL;
  p->capacity = p->used = 0;
  p->n_carves = 0;
  p->pinned = false;
}

static void record(struct zo_host_pool *p, const char *purpose, size_t offset, size_t nbytes) {
  struct zo_host_carve *c;
  if (p->n_carves < ZO_HOST_MAX_CARVES) {
    c = &p->carves[p->n_carves++];
    snprintf(c->purpose, sizeof c->purpose, "%s", purpose);
    c->offset = offset;
    c->nbytes = nbytes;
    return;
  }
  /* Table full: the last row becomes "(other)" and absorbs every later carve,
   * which works because carves are contiguous. */
  c = &p->carves[ZO_HOST_MAX_CARVES - 1];
  snprintf(c->purpose, sizeof c->purpose, "(other)");
  c->nbytes = offset + nbytes - c->offset;
}

int zo_host_pool_alloc(struct zo_host_pool *p, size_t nbytes, const char *purpose, void **out) {
  *out = NULL;
  size_t need = nbytes > SIZE_MAX - ZO_HOST_ALIGN ? SIZE_MAX : zo_host_round(nbytes);
  if (need > p->capacity - p->used) {
    char asked[32], lim[32], used[32], left[32], cap[32];
    if (p->budget && (p->used > p->budget || need > p->budget - p->used))
      return zo_error(-ENOMEM,
                      "host memory budget exceeded: %s needs %s (%zu bytes) with %s already "
                      "allocated, over engine.host_memory_budget = %s (%zu bytes). %s",
                      purpose, zo_format_bytes(need, asked), need, zo_format_bytes(p->used, used),
                      zo_format_bytes(p->budget, lim), p->budget, budget_hint);
    return zo_error(-ENOMEM,
                    "host pool: %s needs %s (%zu bytes) but only %s of %s are left: the plan "
                    "under-sized the host pool (a bug)",
                    purpose, zo_format_bytes(need, asked), need,
                    zo_format_bytes(p->capacity - p->used, left),
                    zo_format_bytes(p->capacity, cap));
  }
  *out = p->base ? p->base + p->used : NULL;
  record(p, purpose, p->used, need);
  p->used += need;
  if (p->used > p->peak) p->peak = p->used;
  return 0;
}

void zo_host_pool_reset(struct zo_host_pool *p, size_t mark) {
  ZO_ASSERT(mark <= p->used && mark % ZO_HOST_ALIGN == 0);
  p->used = mark;
  while (p->n_carves > 0 && p->carves[p->n_carves - 1].offset >= mark) p->n_carves--;
  if (p->n_carves > 0) {
    struct zo_host_carve *last = &p->carves[p->n_carves - 1];
    if (last->offset + last->nbytes > mark) last->nbytes = mark - last->offset;
  }
}

void zo_host_pool_print(const struct zo_host_pool *p, FILE *out) {
  char cap[32], used[32], peak[32], budget[32], node[16];
  if (p->numa_node >= 0)
    snprintf(node, sizeof node, "%d", p->numa_node);
  else
    snprintf(node, sizeof node, "unplaced");
  fprintf(
      out,
      "host pool: %s, used %s, peak %s, budget %s, %s, NUMA node %s, paged in at init in %.3f s\n",
      zo_format_bytes(p->capacity, cap), zo_format_bytes(p->used, used),
      zo_format_bytes(p->peak, peak), p->budget ? zo_format_bytes(p->budget, budget) : "unlimited",
      p->pinned ? "pinned" : "pageable", node, p->fault_in_s);
  for (int i = 0; i < p->n_carves; i++) {
    char nb[32];
    fprintf(out, "  %-40s %12zu  %s\n", p->carves[i].purpose, p->carves[i].offset,
            zo_format_bytes(p->carves[i].nbytes, nb));
  }
}
