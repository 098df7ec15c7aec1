/* Host pool: the host tier as one reservation, sized at start-up by the plan
 * and carved by a bump pointer, like the device arena. The pages are placed on
 * the NUMA node nearest the GPU, pinned when asked (falling back to pageable
 * memory with one warning per process when the system refuses), and faulted in
 * at init, so the first-touch cost (~12 us a page on the development VMs) is
 * paid once at start-up and never inside a step. Carves are page aligned so
 * that O_DIRECT NVMe I/O can use them as buffers directly. Nothing here is
 * thread-safe: init, alloc, reset and free belong to the start-up thread; the
 * carved memory itself may be used from any thread. */
#ifndef ZO_HOST_H
#define ZO_HOST_H

#include <stdio.h>

#include "zo/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZO_HOST_ALIGN 4096    /* bytes; every carve starts on this boundary */
#define ZO_HOST_MAX_CARVES 32 /* carves listed by name; later ones share one "(other)" row */

struct zo_host_carve {
  char purpose[40]; /* "master weights", "exp_avg", ... (truncated to fit) */
  size_t offset;    /* bytes from base */
  size_t nbytes;    /* bytes, a multiple of ZO_HOST_ALIGN */
};

struct zo_host_pool {
  zo_backend_t backend; /* may be NULL */
  char *base;           /* capacity bytes, ZO_HOST_ALIGN aligned; NULL when capacity is 0 */
  size_t capacity;      /* bytes, a multiple of ZO_HOST_ALIGN */
  size_t used;          /* bytes carved so far */
  size_t peak;          /* high-water mark of used */
  size_t budget;        /* bytes, 0 = unlimited (engine.host_memory_budget) */
  bool pinned;          /* page-locked; false: pageable (not asked, or refused) */
  bool registered;      /* also registered with the device (backend host_register) */
  int numa_node;        /* node the pages are placed on; -1 when unplaced (no hwloc) */
  double fault_in_s;    /* seconds init spent making every page resident */
  int n_carves;         /* rows of carves[] in use */
  struct zo_host_carve carves[ZO_HOST_MAX_CARVES]; /* in offset order */
};

/* Rounds nbytes up to ZO_HOST_ALIGN. */
size_t zo_host_round(size_t nbytes);

/* Reserves capacity bytes (rounded up to ZO_HOST_ALIGN) of zeroed host memory,
 * places it on the NUMA node nearest the device (on the CPU backend, or with
 * backend NULL, the node the calling thread runs on), locks it when pin is true
 * and faults every page in, timing that in p->fault_in_s. A refused lock
 * (RLIMIT_MEMLOCK) is not an error: the pool stays pageable and the first
 * refusal in the process prints one warning line naming the limit and how to
 * raise it. On a backend with host_register (CUDA) the pool is registered
 * instead of mlocked, whatever pin says (registration locks the pages; copies
 * are DMA, overlap compute and are ordered on their stream like other work,
 * which copies from pageable memory are not); a refused registration is an
 * error (the return value of host_register, the message saying why and
 * what to change), since the scheduler's host functions fill pool memory
 * that copies queued earlier read. The NUMA node is the one
 * nearest the device's PCI bus id when the backend tells it (CUDA), else the
 * calling thread's. The engine binds its OpenMP threads to
 * the same node with zo_topology_bind_omp(p->numa_node). budget is
 * engine.host_memory_budget (0 = unlimited). Returns 0, or -ENOMEM with a
 * message naming the bytes asked, the budget or the memory available, and the
 * config keys to change. */
int zo_host_pool_init(struct zo_host_pool *p, size_t capacity, size_t budget, bool pin,
                      zo_backend_t backend);

/* Unmaps the memory (which unlocks it). Accepts a zeroed or freed pool. */
void zo_host_pool_free(struct zo_host_pool *p);

/* Carves nbytes (rounded up to ZO_HOST_ALIGN) for purpose, recorded in
 * carves[] for the memory report. Returns 0, or -ENOMEM with a message naming
 * purpose and the bytes asked and either engine.host_memory_budget (when the
 * carve would pass the budget) or the bytes left (when the plan under-sized
 * the pool, a bug); *out is NULL then. */
int zo_host_pool_alloc(struct zo_host_pool *p, size_t nbytes, const char *purpose, void **out);

/* Releases everything carved since mark (a previous value of p->used; LIFO
 * only). The memory stays resident and locked; its contents are kept. */
void zo_host_pool_reset(struct zo_host_pool *p, size_t mark);

/* Writes the memory report: one summary line (capacity, used, peak, budget,
 * pinned or pageable, NUMA node, fault-in time), then one line per carve. */
void zo_host_pool_print(const struct zo_host_pool *p, FILE *out);

#ifdef __cplusplus
}
#endif
#endif /* ZO_HOST_H */
