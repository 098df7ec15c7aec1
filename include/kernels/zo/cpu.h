/* The CPU backend's direct entry points: ops run now, on the calling thread
 * (its OpenMP team), on host memory, outside any stream, for host-side work
 * that must round exactly as the backend's ops do. Implemented in
 * kernels/cpu/; the backend's op table and streams are zo_backend_cpu()
 * (zo/backend.h). */
#ifndef ZO_CPU_H
#define ZO_CPU_H

#include "zo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CPU backend's adamw_update and sumsq run now on the calling thread
 * (its OpenMP team) on host memory: what offload/adamw.c's zo_adamw_update
 * and zo_sumsq are, so the optimizer on every tier is one code. */
void zo_cpu_adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr,
                         float beta1, float beta2, float eps, float weight_decay, bool decay,
                         long t, float grad_scale);
double zo_cpu_sumsq(const float *x, size_t n);
/* The CPU backend's cast, now, on host memory (OpenMP inside): host-side
 * conversions of the engine (uploads, checkpoints, sampling) are the same
 * rounding as every op's. */
void zo_cpu_cast(void *dst, enum zo_dtype dst_dt, const void *src, enum zo_dtype src_dt, size_t n);
/* The CPU backend's encoder_forward and encoder_backward, now, on host
 * memory: the scheduler gathers an untied embedding's rows and sums its
 * gradient on the host, as the device's ops do. */
void zo_cpu_encoder_forward(void *out, const int32_t *inp, const void *wte, const void *wpe, int B,
                            int T, int C, enum zo_dtype dt);
void zo_cpu_encoder_backward(float *dwte, float *dwpe, const void *dout, const int32_t *inp, int B,
                             int T, int C, int padding_idx, enum zo_dtype dt);

/* The kernel the CPU backend's bf16 GEMMs run on, in words ("oneDNN 2.6.3
 * matmul, AMX-BF16", or the fallback's fp32 tiles), chosen once per process
 * from the CPU and ZO_CPU_GEMM (auto, onednn, fallback). */
const char *zo_cpu_gemm_kernel(void);

#ifdef __cplusplus
}
#endif
#endif /* ZO_CPU_H */
