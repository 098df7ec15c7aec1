/* `zoffload env`: what this build can do and what this machine offers it,
 * in the order a bug report needs them (version and build features, BLAS,
 * CPU and its SIMD kernels, GPU, host memory, NUMA, an NVMe path). Build
 * features come from compile definitions engine/CMakeLists.txt gives this
 * file alone (ZO_ENV_*); the machine is read from /proc, sysconf, getrlimit,
 * the backends and offload/topology.c. No CUDA or hwloc type appears here:
 * the GPU is asked through the backend, the driver version read from
 * /proc/driver/nvidia. The only thing written is the O_DIRECT probe file
 * (and the NVMe tier's private directory), both removed before returning. */
#include "zo/env.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <zlib.h>

#include "zo/adamw8bit.h"
#include "zo/backend.h"
#include "zo/cpu.h"
#include "zo/env_vars.h"
#include "zo/nvme.h"
#include "zo/topology.h"

#ifndef ZO_ENV_VERSION
#define ZO_ENV_VERSION "unknown"
#endif
#ifndef ZO_ENV_BUILD_TYPE
#define ZO_ENV_BUILD_TYPE "unknown"
#endif
#ifndef ZO_ENV_NCCL
#define ZO_ENV_NCCL 0
#endif
#ifndef ZO_ENV_FAULT_INJECTION
#define ZO_ENV_FAULT_INJECTION 0
#endif
#ifndef ZO_ENV_NATIVE
#define ZO_ENV_NATIVE 0
#endif
#ifndef ZO_ENV_ISAL_VERSION
#define ZO_ENV_ISAL_VERSION "unknown"
#endif

/* OpenBLAS's introspection, when the linked BLAS is OpenBLAS (weak: another
 * BLAS leaves them NULL). */
extern char *openblas_get_config(void) __attribute__((weak));
extern char *openblas_get_corename(void) __attribute__((weak));
extern int openblas_get_num_threads(void) __attribute__((weak));
extern int openblas_get_parallel(void) __attribute__((weak));

static const char *yes_no(int v) { return v ? "yes" : "no"; }

/* The value of "key:" in a /proc-style file (first match, trimmed) into buf;
 * false when absent. */
static bool proc_field(const char *path, const char *key, char *buf, size_t size) {
  FILE *f = fopen(path, "r");
  if (!f) return false;
  char line[512];
  const size_t n = strlen(key);
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) {
    if (strncmp(line, key, n) != 0) continue;
    const char *v = line + n;
    while (*v == ' ' || *v == '\t') v++;
    if (*v != ':') continue;
    v++;
    while (*v == ' ' || *v == '\t') v++;
    snprintf(buf, size, "%s", v);
    buf[strcspn(buf, "\n")] = '\0';
    found = true;
  }
  fclose(f);
  return found;
}

static void print_build(FILE *out) {
  fprintf(out, "zoffload %s (%s build, C compiler %s)\n", ZO_ENV_VERSION, ZO_ENV_BUILD_TYPE, __VERSION__);
  fprintf(out, "build features:\n");
#ifdef ZO_ENV_CUDA
  fprintf(out, "  CUDA backend     yes, architectures %s\n", ZO_ENV_CUDA_ARCHS);
#else
  fprintf(out, "  CUDA backend     no (nvcc not found at configure time, or -DZO_CUDA=OFF)\n");
#endif
  fprintf(out, "  NCCL             %s\n", yes_no(ZO_ENV_NCCL));
#if ZO_ENV_MPI
  fprintf(out, "  MPI              yes (MPI %s)\n", ZO_ENV_MPI_VERSION);
#else
  fprintf(out, "  MPI              no (every run is one process)\n");
#endif
#if ZO_ENV_LIBURING
  fprintf(out, "  io_uring         yes (liburing %s)\n", ZO_ENV_LIBURING_VERSION);
#else
  fprintf(out, "  io_uring         no (liburing not found: the NVMe tier uses pread/pwrite threads)\n");
#endif
#if ZO_ENV_HWLOC
  fprintf(out, "  hwloc            yes (hwloc %s)\n", ZO_ENV_HWLOC_VERSION);
#else
  fprintf(out, "  hwloc            no (no NUMA placement of the host tier)\n");
#endif
  fprintf(out, "  ISA-L            yes (libisal %s: CRC32C of the NVMe tier)\n", ZO_ENV_ISAL_VERSION);
  fprintf(out, "  jansson %s, zlib %s, fault injection %s\n", JANSSON_VERSION, zlibVersion(),
          yes_no(ZO_ENV_FAULT_INJECTION));
#if defined(__AVX512F__)
  const char *isa = "AVX-512";
#elif defined(__AVX2__)
  const char *isa = "AVX2";
#elif defined(__x86_64__)
  const char *isa = "baseline x86-64 (SSE2)";
#else
  const char *isa = "this architecture's baseline";
#endif
  fprintf(out, "  compiled for     %s%s\n", isa, ZO_ENV_NATIVE ? " (-march=native of the build machine)" : "");
}

static void print_blas(FILE *out) {
  const char *ct = getenv("OPENBLAS_CORETYPE");
  fprintf(out, "BLAS:\n");
  if (zo_env_var_check("ZO_CPU_GEMM"))
    fprintf(out, "  bf16 GEMM        none chosen: %s\n", zo_last_error());
  else
    fprintf(out, "  bf16 GEMM        %s\n", zo_cpu_gemm_kernel());
  if (!openblas_get_config) {
    fprintf(out, "  not OpenBLAS (no openblas_get_config in the linked BLAS)\n");
    return;
  }
  static const char *const par[] = {"sequential", "pthreads", "OpenMP"};
  const int p = openblas_get_parallel ? openblas_get_parallel() : -1;
  fprintf(out, "  OpenBLAS         %s\n", openblas_get_config());
  fprintf(out, "  core type        %s (OPENBLAS_CORETYPE %s)\n",
          openblas_get_corename ? openblas_get_corename() : "unknown", ct && ct[0] ? ct : "unset: detected");
  fprintf(out, "  threading        %s, %d threads\n", p >= 0 && p <= 2 ? par[p] : "unknown",
          openblas_get_num_threads ? openblas_get_num_threads() : 0);
}

/* The variables zo_env_vars_check validates: the first invalid one is named
 * here (and `zoffload env` exits 2 after the report). */
static void print_vars(FILE *out) {
  fprintf(out, "environment:\n");
  if (zo_env_vars_check())
    fprintf(out, "  INVALID          %s\n", zo_last_error());
  else
    fprintf(out, "  variables        valid (ZO_CPU_GEMM, ZO_CUDA_GEMM, ZO_CUDA_SYNC, ZO_STREAM_DELAY_US, "
                 "OMP_NUM_THREADS)\n");
}

static void print_cpu(FILE *out) {
  char model[256] = "unknown";
  proc_field("/proc/cpuinfo", "model name", model, sizeof model);
  fprintf(out, "CPU:\n");
  fprintf(out, "  model            %s, %ld logical CPUs online\n", model, sysconf(_SC_NPROCESSORS_ONLN));
#if defined(__x86_64__)
  __builtin_cpu_init();
  fprintf(out, "  SIMD             avx2 %s, fma %s, avx512f %s, avx512bw %s, avx512vl %s, avx512dq %s, "
               "avx512vbmi %s\n",
          yes_no(__builtin_cpu_supports("avx2")), yes_no(__builtin_cpu_supports("fma")),
          yes_no(__builtin_cpu_supports("avx512f")), yes_no(__builtin_cpu_supports("avx512bw")),
          yes_no(__builtin_cpu_supports("avx512vl")), yes_no(__builtin_cpu_supports("avx512dq")),
          yes_no(__builtin_cpu_supports("avx512vbmi")));
#endif
  const char *k = zo_adamw8bit_kernel();
  fprintf(out, "  AdamW8bit kernel %s%s\n", k,
          strcmp(k, "avx512") == 0 ? "" : " (the AVX-512 one needs avx512f, bw, vl, dq and vbmi)");
  const char *omp = getenv("OMP_NUM_THREADS");
  fprintf(out, "  OpenMP threads   %d (OMP_NUM_THREADS %s; engine.threads overrides)\n", omp_get_max_threads(),
          omp && omp[0] ? omp : "unset");
}

/* Whether two PCI bus ids name one device: the domain's width and the case
 * differ between CUDA ("0000:3B:00.0") and /proc ("0000:3b:00.0"). */
static bool same_pci(const char *a, const char *b) {
  const char *x = strchr(a, ':'), *y = strchr(b, ':');
  return x && y && strcasecmp(x, y) == 0 && strtoul(a, NULL, 16) == strtoul(b, NULL, 16);
}

/* The GPU through the CUDA backend; its PCI bus id into pci (empty when none). */
static void print_gpu(FILE *out, char *pci, size_t pci_size) {
  pci[0] = '\0';
  fprintf(out, "GPU:\n");
  char driver[256] = "";
  FILE *f = fopen("/proc/driver/nvidia/version", "r");
  if (f) {
    if (fgets(driver, sizeof driver, f)) driver[strcspn(driver, "\n")] = '\0';
    fclose(f);
  }
  zo_backend_t be = zo_backend_cuda();
  if (!be) {
    fprintf(out, "  no GPU: %s\n", zo_last_error());
  } else {
    size_t free_b = 0, total_b = 0;
    char fb[32], tb[32];
    if (be->device_pci_bus_id && be->device_pci_bus_id(pci, pci_size) != 0) pci[0] = '\0';
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (be->mem_info(&free_b, &total_b) == 0)
      fprintf(out, "  device           %s (CUDA_VISIBLE_DEVICES %s): %s free of %s\n", pci[0] ? pci : "?",
              vis ? vis : "unset", zo_format_bytes(free_b, fb), zo_format_bytes(total_b, tb));
    else
      fprintf(out, "  device           %s: free memory unknown (%s)\n", pci[0] ? pci : "?", zo_last_error());
  }
  /* Every GPU the driver knows, whether CUDA_VISIBLE_DEVICES shows it or not. */
  DIR *d = opendir("/proc/driver/nvidia/gpus");
  for (const struct dirent *e; d && (e = readdir(d));) {
    char p[PATH_MAX], model[128];
    if (e->d_name[0] == '.' ||
        snprintf(p, sizeof p, "/proc/driver/nvidia/gpus/%s/information", e->d_name) >= (int)sizeof p ||
        !proc_field(p, "Model", model, sizeof model))
      continue;
    fprintf(out, "  GPU %-12s %s%s\n", e->d_name, model,
            same_pci(pci, e->d_name) ? " (the CUDA backend's device)" : "");
  }
  if (d) closedir(d);
  fprintf(out, "  driver           %s\n", driver[0] ? driver : "none (/proc/driver/nvidia/version absent)");
}

static void print_host(FILE *out) {
  char a[32], t[32], l[32];
  struct rlimit rl;
  fprintf(out, "host memory:\n");
  fprintf(out, "  MemAvailable     %s of MemTotal %s\n", zo_format_bytes(zo_meminfo_bytes("MemAvailable"), a),
          zo_format_bytes(zo_meminfo_bytes("MemTotal"), t));
  if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0)
    fprintf(out, "  memlock limit    unknown (%s)\n", strerror(errno));
  else if (rl.rlim_cur == RLIM_INFINITY)
    fprintf(out, "  memlock limit    unlimited (pinned host memory is not limited)\n");
  else
    fprintf(out, "  memlock limit    %s (ulimit -l): a larger pinned host pool stays pageable and its copies "
                 "do not overlap compute; raise it with 'ulimit -l unlimited'\n",
            zo_format_bytes((size_t)rl.rlim_cur, l));
}

static void print_numa(FILE *out, const char *pci) {
  struct zo_topology t;
  fprintf(out, "NUMA:\n");
  if (zo_topology_query(&t) != 0) {
    fprintf(out, "  unknown: %s\n", zo_last_error());
    return;
  }
  fprintf(out, "  nodes            %d, %d cores, %d logical CPUs (%s)\n", t.n_numa_nodes, t.n_cores, t.n_pus,
          t.has_hwloc ? "hwloc" : "no hwloc: counts from sysconf, no binding");
  for (int n = 0; n < t.n_numa_nodes; n++) {
    int pus = 0;
    if (zo_topology_node_pus(n, &pus) == 0) fprintf(out, "  node %-3d         %d logical CPUs\n", n, pus);
  }
  int node = 0;
  if (pci[0] && zo_topology_node_near(pci, &node) == 0) fprintf(out, "  GPU %s is nearest node %d\n", pci, node);
}

/* Whether a file in dir can be opened with O_DIRECT and written: a probe
 * file, removed again. reason gets the error when not. */
static bool probe_direct(const char *dir, char *reason, size_t size) {
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/.zoffload-env-probe-%ld", dir, (long)getpid()) >= (int)sizeof path) {
    snprintf(reason, size, "the path is too long");
    return false;
  }
  void *buf = NULL;
  if (posix_memalign(&buf, ZO_NVME_ALIGN, ZO_NVME_ALIGN) != 0) {
    snprintf(reason, size, "out of memory");
    return false;
  }
  memset(buf, 0x5a, ZO_NVME_ALIGN);
  bool ok = false;
  int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0) {
    snprintf(reason, size, "open: %s%s", strerror(errno),
             errno == EINVAL ? " (the file system does not support it)" : "");
  } else {
    const ssize_t w = write(fd, buf, ZO_NVME_ALIGN);
    if (w == (ssize_t)ZO_NVME_ALIGN) ok = true;
    else snprintf(reason, size, "write: %s", w < 0 ? strerror(errno) : "short write");
    close(fd);
    unlink(path);
  }
  free(buf);
  return ok;
}

static const char *fs_name(long type) {
  switch ((unsigned long)type) {
  case 0xEF53: return "ext4";
  case 0x58465342: return "xfs";
  case 0x9123683E: return "btrfs";
  case 0x01021994: return "tmpfs";
  case 0x794c7630: return "overlayfs";
  case 0x6969: return "nfs";
  case 0x2FC12FC1: return "zfs";
  case 0x65735546: return "fuse";
  default: return NULL;
  }
}

static void print_nvme(FILE *out, const char *dir) {
  fprintf(out, "NVMe path %s:\n", dir);
  struct statvfs vs;
  struct statfs fs;
  char fb[32], tb[32], ty[32];
  if (statfs(dir, &fs) == 0) {
    const char *n = fs_name((long)fs.f_type);
    if (n) snprintf(ty, sizeof ty, "%s", n);
    else snprintf(ty, sizeof ty, "type 0x%lx", (unsigned long)fs.f_type);
  } else {
    snprintf(ty, sizeof ty, "unknown");
  }
  if (statvfs(dir, &vs) == 0)
    fprintf(out, "  file system      %s, %s free of %s\n", ty,
            zo_format_bytes((size_t)vs.f_bavail * (size_t)vs.f_frsize, fb),
            zo_format_bytes((size_t)vs.f_blocks * (size_t)vs.f_frsize, tb));
  char reason[256] = "";
  const bool direct = probe_direct(dir, reason, sizeof reason);
  fprintf(out, "  O_DIRECT         %s%s%s\n", direct ? "yes" : "no: ", direct ? "" : reason,
          direct ? "" : " (the NVMe tier falls back to buffered I/O, through the page cache)");
  const struct zo_nvme_config nc = {.dir = dir, .block_size = (size_t)1 << 20, .queue_depth = 4};
  zo_nvme_t nv = zo_nvme_init(&nc);
  if (nv) {
    fprintf(out, "  NVMe tier        %s, %s\n", zo_nvme_engine(nv), zo_nvme_is_direct(nv) ? "O_DIRECT" : "buffered");
    zo_nvme_free(nv);
  } else {
    fprintf(out, "  NVMe tier        cannot start here: %s\n", zo_last_error());
  }
}

int zo_env_report(FILE *out, const char *nvme_path) {
  char pci[64];
  struct stat st;
  /* Checked first, so that a typo prints nothing but the error. */
  if (nvme_path && stat(nvme_path, &st) != 0)
    return zo_error(-errno, "--nvme-path %s: %s", nvme_path, strerror(errno));
  if (nvme_path && !S_ISDIR(st.st_mode)) return zo_error(-ENOTDIR, "--nvme-path %s: not a directory", nvme_path);
  print_build(out);
  print_vars(out);
  print_blas(out);
  print_cpu(out);
  print_gpu(out, pci, sizeof pci);
  print_host(out);
  print_numa(out, pci);
  if (nvme_path) print_nvme(out, nvme_path);
  return 0;
}
