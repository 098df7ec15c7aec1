/* The environment report (`zoffload env`, engine/cli/env.c), what DeepSpeed's
 * ds_report and `accelerate env` print: the version and the build's
 * features (CUDA and its architectures, NCCL, MPI, io_uring, hwloc, ISA-L,
 * the BLAS and the core it runs on, the SIMD kernels the CPU gets), the GPU
 * the CUDA backend sees with its free memory and the driver, host memory and
 * the memlock limit, NUMA nodes, and for a given NVMe path its free space
 * and whether O_DIRECT and io_uring work there. It reads and probes; it
 * changes nothing but a probe file it removes. */
#ifndef ZO_ENV_H
#define ZO_ENV_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the report to out. nvme_path (may be NULL: no NVMe section) must be
 * an existing directory: a probe file is created in it with O_DIRECT,
 * written, and removed, and the NVMe tier is set up there once to see its
 * I/O engine. Returns 0, or -errno when nvme_path is missing or not a
 * directory (nothing is created then), with a message. */
int zo_env_report(FILE *out, const char *nvme_path);

#ifdef __cplusplus
}
#endif
#endif /* ZO_ENV_H */
