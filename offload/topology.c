/* Topology on hwloc: one topology per process, loaded on first use with PCI
 * devices (so a GPU's bus id finds its node) and read-only afterwards, which
 * makes every function here thread-safe. Memory is bound with hwloc's
 * non-strict BIND, i.e. Linux MPOL_PREFERRED: the node is filled first and a
 * pool larger than the node spills rather than failing at start-up.
 * Without hwloc, or when hwloc cannot load, binding is a no-op announced once. */
#include "zo/topology.h"

#include <errno.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef ZO_HAVE_HWLOC
#include <hwloc.h>
#include <pthread.h>
#endif

static atomic_flag unbound_noted = ATOMIC_FLAG_INIT;

static void note_unbound(const char *why) {
  if (atomic_flag_test_and_set(&unbound_noted)) return;
  fprintf(stderr,
          "zoffload: note: %s: host memory and OpenMP threads are not bound to a NUMA node\n", why);
}

/* Parses 1 to 8 hex digits at *s, advancing it. */
static bool parse_hex(const char **s, unsigned *v) {
  int n = 0;
  *v = 0;
  for (; n < 8; n++, (*s)++) {
    const char c = **s;
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0) break;
    *v = *v << 4 | (unsigned)d;
  }
  return n > 0;
}

/* "dddd:bb:dd.f" (any domain width, e.g. CUDA's 8 digits) or "bb:dd.f". */
static bool parse_bus_id(const char *s, unsigned *domain, unsigned *bus, unsigned *dev,
                         unsigned *func) {
  unsigned f[3];
  int n = 0;
  while (n < 3 && parse_hex(&s, &f[n])) {
    n++;
    if (*s != ':') break;
    s++;
  }
  if ((n != 2 && n != 3) || *s++ != '.' || !parse_hex(&s, func) || *s != '\0') return false;
  *domain = n == 3 ? f[0] : 0;
  *bus = f[n - 2];
  *dev = f[n - 1];
  return *bus <= 0xff && *dev <= 0x1f && *func <= 7;
}

#ifdef ZO_HAVE_HWLOC

static bool user_placed_omp(void) {
  return getenv("OMP_PROC_BIND") != NULL || getenv("OMP_PLACES") != NULL;
}

static hwloc_topology_t topo;  /* NULL when loading failed */
static char topo_failure[160]; /* why, when topo is NULL */
static pthread_once_t topo_once = PTHREAD_ONCE_INIT;

static void topo_load(void) {
  hwloc_topology_t t;
  if (hwloc_topology_init(&t) < 0) {
    snprintf(topo_failure, sizeof topo_failure, "hwloc_topology_init failed: %s", strerror(errno));
    return;
  }
  /* All PCI devices, so that any GPU is found by bus id; bridges only where
   * they lead to a device, OS devices (disks, NICs) not at all: they cost
   * load time and say nothing about locality. */
  hwloc_topology_set_type_filter(t, HWLOC_OBJ_PCI_DEVICE, HWLOC_TYPE_FILTER_KEEP_ALL);
  hwloc_topology_set_type_filter(t, HWLOC_OBJ_BRIDGE, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(t) < 0) {
    snprintf(topo_failure, sizeof topo_failure, "hwloc_topology_load failed: %s", strerror(errno));
    hwloc_topology_destroy(t);
    return;
  }
  topo = t;
}

static hwloc_topology_t topology(void) {
  pthread_once(&topo_once, topo_load);
  return topo;
}

static hwloc_obj_t numa_node_obj(hwloc_topology_t t, int node) {
  if (node < 0) return NULL;
  return hwloc_get_numanode_obj_by_os_index(t, (unsigned)node);
}

static int first_node(hwloc_topology_t t) {
  hwloc_obj_t obj = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, 0);
  return obj ? (int)obj->os_index : 0;
}

int zo_topology_query(struct zo_topology *t) {
  hwloc_topology_t h = topology();
  if (h == NULL) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    *t = (struct zo_topology){.n_numa_nodes = 1,
                              .n_cores = n > 0 ? (int)n : 1,
                              .n_pus = n > 0 ? (int)n : 1,
                              .has_hwloc = false};
    return 0;
  }
  int n_nodes = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_NUMANODE);
  int n_pus = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_PU);
  int n_cores = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_CORE);
  t->n_numa_nodes = n_nodes > 0 ? n_nodes : 1;
  t->n_pus = n_pus > 0 ? n_pus : 1;
  t->n_cores = n_cores > 0 ? n_cores : t->n_pus;
  t->has_hwloc = true;
  return 0;
}

int zo_topology_node_near(const char *pci_bus_id, int *node) {
  *node = 0;
  hwloc_topology_t h = topology();
  unsigned domain = 0, bus = 0, dev = 0, func = 0;
  if (pci_bus_id && !parse_bus_id(pci_bus_id, &domain, &bus, &dev, &func))
    return zo_error(-EINVAL,
                    "PCI bus id '%s' does not parse: expected domain:bus:device.function "
                    "in hex, e.g. 0000:3b:00.0",
                    pci_bus_id);
  if (h == NULL) return 0;
  *node = first_node(h);
  if (pci_bus_id == NULL) {
    hwloc_bitmap_t where = hwloc_bitmap_alloc();
    if (where == NULL) return zo_error(-ENOMEM, "hwloc_bitmap_alloc: out of memory");
    if (hwloc_get_last_cpu_location(h, where, HWLOC_CPUBIND_THREAD) == 0) {
      hwloc_obj_t obj = NULL;
      while ((obj = hwloc_get_next_obj_by_type(h, HWLOC_OBJ_NUMANODE, obj)) != NULL) {
        if (hwloc_bitmap_intersects(obj->cpuset, where)) {
          *node = (int)obj->os_index;
          break;
        }
      }
    }
    hwloc_bitmap_free(where);
    return 0;
  }
  hwloc_obj_t pci = hwloc_get_pcidev_by_busid(h, domain, bus, dev, func);
  if (pci == NULL)
    return zo_error(-ENODEV,
                    "no PCI device %s on this machine (hwloc lists none at that bus id; "
                    "lspci -D shows the devices present)",
                    pci_bus_id);
  hwloc_obj_t anchor = hwloc_get_non_io_ancestor_obj(h, pci);
  int first = anchor && anchor->nodeset ? hwloc_bitmap_first(anchor->nodeset) : -1;
  if (first >= 0) *node = first;
  return 0;
}

int zo_topology_node_pus(int node, int *n_pus) {
  *n_pus = 0;
  hwloc_topology_t h = topology();
  if (h == NULL) {
    if (node != 0)
      return zo_error(-EINVAL, "NUMA node %d does not exist (no hwloc: only node 0)", node);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    *n_pus = n > 0 ? (int)n : 1;
    return 0;
  }
  hwloc_obj_t obj = numa_node_obj(h, node);
  if (obj == NULL) return zo_error(-EINVAL, "NUMA node %d does not exist on this machine", node);
  *n_pus = hwloc_bitmap_weight(obj->cpuset);
  return 0;
}

int zo_topology_bind_memory(void *addr, size_t nbytes, int node) {
  hwloc_topology_t h = topology();
  if (h == NULL) {
    note_unbound(topo_failure);
    return 0;
  }
  hwloc_obj_t obj = numa_node_obj(h, node);
  if (obj == NULL) return zo_error(-EINVAL, "NUMA node %d does not exist on this machine", node);
  if (nbytes == 0) return 0;
  if (hwloc_set_area_membind(h, addr, nbytes, obj->nodeset, HWLOC_MEMBIND_BIND,
                             HWLOC_MEMBIND_BYNODESET) < 0) {
    int err = errno ? errno : EINVAL;
    char b[32];
    return zo_error(-err, "binding %s of host memory to NUMA node %d: %s",
                    zo_format_bytes(nbytes, b), node, strerror(err));
  }
  return 0;
}

int zo_topology_memory_node(const void *addr, size_t nbytes, int *node) {
  *node = -1;
  hwloc_topology_t h = topology();
  if (h == NULL)
    return zo_error(-ENOTSUP, "where memory lives is unknown without hwloc (%s)", topo_failure);
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (set == NULL) return zo_error(-ENOMEM, "hwloc_bitmap_alloc: out of memory");
  int err = 0;
  if (hwloc_get_area_memlocation(h, addr, nbytes, set, HWLOC_MEMBIND_BYNODESET) < 0) {
    err = errno ? errno : EINVAL;
    err = zo_error(-err, "locating the pages of %p (%zu bytes): %s", addr, nbytes, strerror(err));
  } else if (hwloc_bitmap_iszero(set)) {
    err = zo_error(-ENODATA, "no page of %p (%zu bytes) is resident", addr, nbytes);
  } else if (hwloc_bitmap_weight(set) == 1) {
    *node = hwloc_bitmap_first(set);
  }
  hwloc_bitmap_free(set);
  return err;
}

int zo_topology_bind_omp(int node, int *n_bound) {
  ZO_ASSERT(!omp_in_parallel());
  if (n_bound) *n_bound = 0;
  hwloc_topology_t h = topology();
  if (h == NULL) {
    note_unbound(topo_failure);
    return 0;
  }
  hwloc_obj_t obj = numa_node_obj(h, node);
  if (obj == NULL) return zo_error(-EINVAL, "NUMA node %d does not exist on this machine", node);
  if (user_placed_omp()) return 0;
  hwloc_const_cpuset_t cpus = obj->cpuset;
  /* Atomics rather than an OpenMP reduction: the sanitizers see these, not
   * libgomp's barrier. */
  atomic_int n_ok = 0, first_err = 0;
#pragma omp parallel
  {
    if (hwloc_set_cpubind(h, cpus, HWLOC_CPUBIND_THREAD) == 0) {
      atomic_fetch_add(&n_ok, 1);
    } else {
      int expected = 0;
      atomic_compare_exchange_strong(&first_err, &expected, errno ? -errno : -EINVAL);
    }
  }
  int err = atomic_load(&first_err);
  if (n_bound) *n_bound = atomic_load(&n_ok);
  if (err)
    return zo_error(err, "binding OpenMP threads to the CPUs of NUMA node %d: %s", node,
                    strerror(-err));
  return 0;
}

#else /* !ZO_HAVE_HWLOC */

static const char no_hwloc[] = "built without hwloc (install libhwloc-dev and rebuild)";

int zo_topology_query(struct zo_topology *t) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  *t = (struct zo_topology){.n_numa_nodes = 1,
                            .n_cores = n > 0 ? (int)n : 1,
                            .n_pus = n > 0 ? (int)n : 1,
                            .has_hwloc = false};
  return 0;
}

int zo_topology_node_near(const char *pci_bus_id, int *node) {
  *node = 0;
  unsigned domain = 0, bus = 0, dev = 0, func = 0;
  if (pci_bus_id && !parse_bus_id(pci_bus_id, &domain, &bus, &dev, &func))
    return zo_error(-EINVAL,
                    "PCI bus id '%s' does not parse: expected domain:bus:device.function "
                    "in hex, e.g. 0000:3b:00.0",
                    pci_bus_id);
  return 0;
}

int zo_topology_node_pus(int node, int *n_pus) {
  *n_pus = 0;
  if (node != 0)
    return zo_error(-EINVAL, "NUMA node %d does not exist (no hwloc: only node 0)", node);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  *n_pus = n > 0 ? (int)n : 1;
  return 0;
}

int zo_topology_bind_memory(void *addr, size_t nbytes, int node) {
  note_unbound(no_hwloc);
  return 0;
}

int zo_topology_memory_node(const void *addr, size_t nbytes, int *node) {
  *node = -1;
  return zo_error(-ENOTSUP, "where memory lives is unknown without hwloc (%s)", no_hwloc);
}

int zo_topology_bind_omp(int node, int *n_bound) {
  ZO_ASSERT(!omp_in_parallel());
  if (n_bound) *n_bound = 0;
  note_unbound(no_hwloc);
  return 0;
}

#endif /* ZO_HAVE_HWLOC */
