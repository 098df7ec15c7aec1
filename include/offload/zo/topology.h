/* Machine topology for placing the host tier: NUMA nodes, cores, the node
 * nearest a PCI device (the GPU), and binding of memory and OpenMP threads to
 * a node. Built on hwloc, whose types stay inside offload/topology.c. Without
 * hwloc (ZO_HAVE_HWLOC undefined) every binding is a no-op announced by one
 * note line per process, counts come from sysconf, and node queries say 0.
 * NUMA node numbers are the operating system's (those of numactl and
 * /sys/devices/system/node). The hwloc topology is loaded once per process,
 * on first use (tens of ms), and is read-only afterwards. */
#ifndef ZO_TOPOLOGY_H
#define ZO_TOPOLOGY_H

#include "zo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

struct zo_topology {
  int n_numa_nodes; /* NUMA nodes, >= 1 */
  int n_cores;      /* physical cores, >= 1 */
  int n_pus;        /* logical CPUs (hardware threads), >= n_cores */
  bool has_hwloc;   /* false: no hwloc in this build or it failed to load;
                       binding calls are no-ops */
};

/* Fills t. Thread-safe. Returns 0 or -errno. */
int zo_topology_query(struct zo_topology *t);

/* The NUMA node nearest the PCI device pci_bus_id ("0000:3b:00.0", as
 * cudaDeviceGetPCIBusId writes it; case and domain width do not matter), or,
 * when pci_bus_id is NULL, the node of the CPU the calling thread last ran on
 * (0 without hwloc). A device attached to no particular node (a VM, or a
 * single-node machine) gives the first node. Returns 0, or -ENODEV when no
 * such device is present, -EINVAL when pci_bus_id does not parse. */
int zo_topology_node_near(const char *pci_bus_id, int *node);

/* Number of logical CPUs of node into *n_pus. Returns 0 or -EINVAL when the
 * node does not exist. */
int zo_topology_node_pus(int node, int *n_pus);

/* Sets the memory policy of [addr, addr + nbytes) to prefer node: pages
 * faulted in afterwards come from node while it has free memory and from
 * other nodes rather than failing when it has not. Call before the pages are
 * first touched; pages already present do not move. addr must be page
 * aligned. Returns 0 (also as a no-op without hwloc), or -errno with a
 * message. */
int zo_topology_bind_memory(void *addr, size_t nbytes, int node);

/* Where the pages of [addr, addr + nbytes) are: *node is the node when they
 * all are on one node, -1 when they are spread over several. Queries every
 * page (move_pages): for tests and diagnostics, not for a training step.
 * Returns 0, -ENODATA when no page of the range is resident, or -ENOTSUP
 * without hwloc. */
int zo_topology_memory_node(const void *addr, size_t nbytes, int *node);

/* Binds every thread of the OpenMP pool to the logical CPUs of node (the
 * whole node, not one CPU per thread: threads the main thread creates later,
 * such as stream workers, inherit its binding and must not be squeezed onto
 * one CPU). Opens its own parallel region with omp_get_max_threads() threads,
 * so it must be called from the main thread outside any parallel region, after
 * the thread count is set; libgomp keeps its threads between regions of the
 * same size, so the binding lasts. When the user chose a placement (the
 * OMP_PROC_BIND or OMP_PLACES environment variable is set) nothing is changed.
 * *n_bound (may be NULL) receives the number of threads bound. Returns 0 (also
 * as a no-op without hwloc), -EINVAL for an unknown node, or -errno from the
 * first thread whose binding failed, with a message. */
int zo_topology_bind_omp(int node, int *n_bound);

#ifdef __cplusplus
}
#endif
#endif /* ZO_TOPOLOGY_H */
