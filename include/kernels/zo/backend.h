/* zo_backend: the compute backend interface, a table of function pointers
 * chosen at run time (CPU: OpenMP + SIMD + BLAS; CUDA: cuBLASLt + kernels).
 *
 * Streams and events have CUDA semantics on every backend: operations queued on
 * one stream run in order, operations on different streams are unordered unless
 * an event orders them, and the host sees results only after a synchronize.
 * The CPU backend runs each stream on a worker thread. The NULL stream is the
 * backend's default stream: on the CPU it runs the operation on the calling
 * thread before returning; on CUDA it is the legacy default stream.
 *
 * Pointers passed to ops are device pointers (on the CPU backend, host memory).
 * Op argument order is outputs, inputs, shape letters, dtype, stream (llm.c).
 * Ops compute in fp32 over fp32, bf16 or fp16 storage (see "ops" below).
 * Gradient outputs named d<param> accumulate (+=) and are always fp32;
 * activation gradients overwrite unless the comment says +=.
 * No op allocates device memory: scratch space is passed in by the caller.
 * (The CPU backend converts bf16/fp16 operands into per-thread fp32 tiles of
 * at most a few MiB, allocated once per thread, as OpenBLAS keeps its own
 * packing buffers.) */
#ifndef ZO_BACKEND_H
#define ZO_BACKEND_H

#include "zo/common.h"
#include "zo/quant4.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zo_stream *zo_stream_t;
typedef struct zo_event *zo_event_t;
typedef const struct zo_backend *zo_backend_t;

enum zo_copy_kind { ZO_COPY_H2D, ZO_COPY_D2H, ZO_COPY_D2D, ZO_COPY_H2H };

struct zo_backend {
  const char *name; /* "cpu", "cuda" */

  /* ---- lifetime and memory ---------------------------------------------- */
  /* Device memory: one call per arena, at start-up. Returns 0 or -ENOMEM
   * (message names bytes asked, free and total). */
  int (*mem_alloc)(void **ptr, size_t nbytes);
  void (*mem_free)(void *ptr);
  /* Free and total device memory in bytes. Returns 0 or -errno. */
  int (*mem_info)(size_t *free_bytes, size_t *total_bytes);
  /* Number of worker threads ops may use (OpenMP on the CPU backend; on
   * CUDA the OpenMP team of the calling thread and of host functions, which
   * run the CPU optimizer). */
  void (*set_threads)(int n_threads);
  /* Registers [ptr, ptr + nbytes) of host memory (page aligned, resident)
   * with the device so that copies from and to it are asynchronous DMA
   * (cudaHostRegister); unregister undoes it. NULL on the CPU backend, where
   * locking the pages is all pinning means. Returns 0 or -errno. */
  int (*host_register)(void *ptr, size_t nbytes);
  void (*host_unregister)(void *ptr);
  /* The device's PCI bus id ("0000:3b:00.0") into buf, for placing host
   * memory on the nearest NUMA node. NULL on the CPU backend. Returns 0 or
   * -errno. */
  int (*device_pci_bus_id)(char *buf, size_t size);

  /* ---- streams and events ----------------------------------------------- */
  /* Returns 0 or -errno. */
  int (*stream_create)(zo_stream_t *stream);
  /* Waits for queued work, then frees. Accepts NULL. */
  void (*stream_destroy)(zo_stream_t stream);
  /* Names the stream for the timeline (zo/trace.h); NULL where the backend
   * records no timeline. */
  void (*stream_set_name)(zo_stream_t stream, const char *name);
  /* Blocks the host until all work queued on stream so far has finished
   * (on CUDA the thread sleeps on a blocking-sync event; it does not spin). */
  int (*stream_synchronize)(zo_stream_t stream);
  int (*event_create)(zo_event_t *event);
  void (*event_destroy)(zo_event_t event);
  /* Captures the work queued on stream so far; the event completes when it
   * has run. Re-recording an event replaces what it captures. */
  int (*event_record)(zo_event_t event, zo_stream_t stream);
  /* Work queued on stream after this call waits for event's capture. An
   * event never recorded is complete. */
  int (*stream_wait_event)(zo_stream_t stream, zo_event_t event);
  /* Blocks the host until event's capture has run (sleeping, as above). */
  int (*event_synchronize)(zo_event_t event);
  /* Asynchronous copy ordered on stream. Host memory should be pinned for
   * overlap on CUDA; any host memory is correct: on CUDA a copy from or to
   * pageable (unregistered) memory first waits for the stream's queued work
   * (whose event waits a host function may satisfy later, which CUDA does not
   * order a pageable copy behind) and returns when it is done. Returns 0 or
   * -errno. */
  int (*memcpy_async)(void *dst, const void *src, size_t nbytes, enum zo_copy_kind kind,
                      zo_stream_t stream);
  /* Sets nbytes of device memory to byte value, ordered on stream. */
  int (*memset_async)(void *dst, int value, size_t nbytes, zo_stream_t stream);
  /* Copies rows rows of width bytes, device to device, ordered on stream:
   * row i from src + i * spitch to dst + i * dpitch (the LM head's vocabulary
   * pieces in and out of the logits). Returns 0 or -errno. */
  int (*memcpy2d_async)(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t rows,
                        zo_stream_t stream);
  /* Runs fn(arg) on a host thread, ordered on stream like any other work
   * (cudaLaunchHostFunc semantics): later work on stream waits for it. fn must
   * not synchronize on, or queue work to, the stream it runs on; on CUDA it
   * must not call the backend at all (CUDA forbids it; the backend aborts,
   * naming the call). fn runs with the thread count of set_threads for its
   * OpenMP regions. */
  int (*launch_host_func)(zo_stream_t stream, void (*fn)(void *arg), void *arg);
  /* The backend's own handle of stream (a cudaStream_t) for libraries that
   * queue work on it themselves (NCCL, zo/dcomm.h). NULL on the CPU backend. */
  void *(*native_stream)(zo_stream_t stream);
  /* Bytes of device scratch each stream that runs ops needs (CUDA: its
   * cuBLASLt workspace, which ops also use for partial sums between GEMMs);
   * 0 on the CPU backend. The engine plans one per op-running stream in the
   * device arena's workspace category (zo_model_layout.stream_workspace) and
   * gives it with stream_set_workspace; a stream never given one allocates
   * its own on its first op that needs it, outside any plan (tests, tools),
   * and says so once on stderr. */
  size_t stream_workspace_bytes;
  /* Makes ptr (device, stream_workspace_bytes, 256-byte aligned) stream's
   * workspace. Call before queuing ops on stream; the memory must outlive
   * the stream's queued work. NULL on the CPU backend. */
  void (*stream_set_workspace)(zo_stream_t stream, void *ptr);

  /* ---- ops -------------------------------------------------------------- */
  /* Every op over activations and working parameters takes their dtype dt:
   * ZO_F32, ZO_BF16 or ZO_F16 (mixed precision). Pointers declared void *
   * hold dt elements; float * ones are fp32 whatever dt is: parameter
   * gradients (d<param>), norm statistics, rotary tables, losses.
   * Arithmetic is fp32 (GEMMs accumulate in fp32, softmax and norm
   * statistics are fp32); a dt output is rounded once, to nearest even, when
   * stored. An fp32 result is computed exactly as it was before dtypes
   * existed. */

  /* out (B,T,C) = wte[inp[b,t]] + wpe[t]. inp (B,T) token ids < rows of wte;
   * wte (V,C), wpe (maxT,C) with T <= maxT. wpe NULL (no position
   * embedding, Llama): out = wte[inp[b,t]], a copy of the row. */
  void (*encoder_forward)(void *out, const int32_t *inp, const void *wte, const void *wpe, int B,
                          int T, int C, enum zo_dtype dt, zo_stream_t stream);
  /* dwte (V,C) += scatter of dout by token; dwpe (maxT,C) += sum over b
   * (dwpe NULL skips it). Positions whose token is padding_idx add nothing
   * to dwte (PyTorch's nn.Embedding padding_idx: that row's lookup gradient
   * is 0), still to dwpe; padding_idx < 0: none. */
  void (*encoder_backward)(float *dwte, float *dwpe, const void *dout, const int32_t *inp, int B,
                           int T, int C, int padding_idx, enum zo_dtype dt, zo_stream_t stream);
  /* out (N,C) = (inp - mean) * rstd * weight + bias; mean, rstd (N) saved for
   * backward. eps = 1e-5, biased variance (PyTorch LayerNorm). */
  void (*layernorm_forward)(void *out, float *mean, float *rstd, const void *inp,
                            const void *weight, const void *bias, int N, int C, enum zo_dtype dt,
                            zo_stream_t stream);
  /* dinp (N,C) += (accumulates: it is the residual stream's gradient);
   * dweight, dbias (C) +=. dweight NULL and/or dbias NULL skips that sum (a
   * frozen norm: with both NULL no column reduction runs at all); dinp is
   * the same bits whichever are NULL. */
  void (*layernorm_backward)(void *dinp, float *dweight, float *dbias, const void *dout,
                             const void *inp, const void *weight, const float *mean,
                             const float *rstd, int N, int C, enum zo_dtype dt,
                             zo_stream_t stream);
  /* RMSNorm (Hugging Face LlamaRMSNorm in fp32): out (N,C) = inp * rstd *
   * weight with rstd (N, fp32) = 1 / sqrt(mean over C of inp^2 + eps), saved
   * for backward. One rounding of out (Hugging Face rounds inp * rstd to a
   * 16-bit input dtype before the weight multiply: within one more rounding). */
  void (*rmsnorm_forward)(void *out, float *rstd, const void *inp, const void *weight, float eps,
                          int N, int C, enum zo_dtype dt, zo_stream_t stream);
  /* dinp (N,C) += (accumulates: it is the residual stream's gradient);
   * dweight (C) +=, summed in an order that does not depend on the thread
   * count or the run (deterministic). rstd as saved by rmsnorm_forward.
   * dweight NULL skips the column reduction (a frozen norm); dinp is the
   * same bits either way. */
  void (*rmsnorm_backward)(void *dinp, float *dweight, const void *dout, const void *inp,
                           const void *weight, const float *rstd, int N, int C, enum zo_dtype dt,
                           zo_stream_t stream);
  /* RMSNorm of each attention head (Qwen3's q_norm, k_norm): N tokens of H
   * rows of D elements, row (n, h) at inp + n ld_inp + h D and out + n
   * ld_out + h D (the q or the k heads inside a fused qkv row), normalised
   * as rmsnorm_forward's rows with one weight (D) for every head; rstd
   * (N, H) fp32. out may be inp (ld_out == ld_inp). */
  void (*rmsnorm_heads_forward)(void *out, float *rstd, const void *inp, const void *weight, float eps,
                                int N, int H, int D, int ld_out, int ld_inp, enum zo_dtype dt,
                                zo_stream_t stream);
  /* dinp (overwrites, rows at n ld_d + h D; may be dout, whose rows share
   * ld_d) = d(inp) of rmsnorm_heads_forward; inp its input (rows at n ld_inp
   * + h D), rstd as it saved. dweight (D) += the sum over every row of every
   * token, in an order independent of the thread count and the run; NULL
   * skips it (a frozen norm), dinp the same bits either way. */
  void (*rmsnorm_heads_backward)(void *dinp, float *dweight, const void *dout, const void *inp,
                                 const void *weight, const float *rstd, int N, int H, int D, int ld_d,
                                 int ld_inp, enum zo_dtype dt, zo_stream_t stream);
  /* out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC); bias may be NULL. */
  void (*matmul_forward)(void *out, const void *inp, const void *weight, const void *bias, int N,
                         int C, int OC, enum zo_dtype dt, zo_stream_t stream);
  /* dinp (N,C) = dout (N,OC) @ weight (overwrites; NULL skips);
   * dweight (OC,C) += dout^T @ inp (NULL skips: a frozen weight, no weight-gradient GEMM);
   * dbias (OC) += column sums of dout (NULL skips). */
  void (*matmul_backward)(void *dinp, float *dweight, float *dbias, const void *dout,
                          const void *inp, const void *weight, int N, int C, int OC,
                          enum zo_dtype dt, zo_stream_t stream);
  /* A frozen 4-bit base (QLoRA): out (N,OC) = inp (N,C) @ W^T + bias (OC,
   * NULL: none) with W (OC,C) = w dequantized (zo/quant4.h) and, for dt !=
   * F32, rounded once to dt: matmul_forward over that weight, the same bits
   * on the CPU backend whatever its thread count (fp32: as matmul_forward
   * gives them on one thread; W is dequantized a panel of rows at a time into
   * per-thread scratch; the weight is never widened whole). CUDA keeps its
   * panels in the stream's workspace (stream_workspace_bytes) beyond the
   * part its cuBLASLt GEMMs use; agreement within the GEMM tolerance. */
  void (*matmul_q4_forward)(void *out, const void *inp, struct zo_quant4_weight w, const void *bias,
                            int N, enum zo_dtype dt, zo_stream_t stream);
  /* dinp (N,C) = dout (N,OC) @ W (overwrites), W as above: matmul_backward's
   * dinp over that weight, the same bits on the CPU backend (as above). The base has no
   * gradient: there is no dweight or dbias. */
  void (*matmul_q4_backward_dx)(void *dinp, const void *dout, struct zo_quant4_weight w, int N,
                                enum zo_dtype dt, zo_stream_t stream);
  /* Causal self-attention with grouped-query heads. qkv (B,T,(NH+2*NKV)*hs):
   * each row holds q (NH heads of hs), then k (NKV heads), then v (NKV
   * heads); NH % NKV == 0 and query head h attends with key/value head
   * h / (NH/NKV) (Hugging Face's repeat_kv order). NKV == NH is multi-head
   * attention (GPT-2: NKV = NH, hs = C/NH). out (B,T,NH*hs) heads
   * concatenated; att (B,NH,T,T) softmax probabilities, saved for backward
   * (entries above the diagonal are written as 0). Scale 1/sqrt(hs); scores
   * and softmax fp32. With dt != F32 the probabilities are rounded to dt
   * before they weight v. */
  void (*attention_forward)(void *out, void *att, const void *qkv, int B, int T, int NH, int NKV,
                            int hs, enum zo_dtype dt, zo_stream_t stream);
  /* The same with a sliding window (Mistral's sliding_window): query t
   * attends to keys (t - window, t] only; the probabilities outside are
   * stored as 0, so attention_backward is its backward too. window >= 1
   * (window >= T is attention_forward). */
  void (*attention_window_forward)(void *out, void *att, const void *qkv, int B, int T, int NH, int NKV,
                                   int hs, int window, enum zo_dtype dt, zo_stream_t stream);
  /* dqkv (B,T,(NH+2*NKV)*hs) overwritten; the dk and dv of a key/value head
   * sum over the query heads of its group in fp32 (one rounding). datt
   * (B,NH,T,T) is scratch (with dt != F32 the gradient of the scores is
   * rounded to dt there before the dq, dk GEMMs read it). */
  void (*attention_backward)(void *dqkv, void *datt, const void *dout, const void *qkv,
                             const void *att, int B, int T, int NH, int NKV, int hs,
                             enum zo_dtype dt, zo_stream_t stream);
  /* Rotary position embedding (Hugging Face's rotate_half layout), in place
   * on the q and k heads of qkv (the attention layout above; v untouched) at
   * positions t = 0..T-1. With h2 = hs/2 (hs even), c = cos[t*h2+i],
   * s = sin[t*h2+i], each head's pair (x[i], x[i+h2]), i < h2, becomes
   * (x[i] c - x[i+h2] s, x[i+h2] c + x[i] s). cos, sin (maxT, hs/2) fp32
   * device tables with T <= maxT, given by the caller. */
  void (*rope_forward)(void *qkv, const float *cos, const float *sin, int B, int T, int NH, int NKV,
                       int hs, enum zo_dtype dt, zo_stream_t stream);
  /* The transpose rotation, in place on the q and k parts of dqkv (v
   * untouched): (d[i], d[i+h2]) becomes (d[i] c + d[i+h2] s, d[i+h2] c - d[i] s). */
  void (*rope_backward)(void *dqkv, const float *cos, const float *sin, int B, int T, int NH,
                        int NKV, int hs, enum zo_dtype dt, zo_stream_t stream);
  /* SwiGLU: inp (N,2I) rows [gate (I) | up (I)]; out (N,I) = silu(gate) * up,
   * silu(x) = x / (1 + e^-x). */
  void (*swiglu_forward)(void *out, const void *inp, size_t N, int I, enum zo_dtype dt,
                         zo_stream_t stream);
  /* dinp (N,2I) overwritten: dgate = dout * up * silu'(gate),
   * dup = dout * silu(gate). dinp must not overlap inp or dout. */
  void (*swiglu_backward)(void *dinp, const void *inp, const void *dout, size_t N, int I,
                          enum zo_dtype dt, zo_stream_t stream);
  /* out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) over N elements. */
  void (*gelu_forward)(void *out, const void *inp, size_t N, enum zo_dtype dt, zo_stream_t stream);
  /* dinp = gelu'(inp) * dout, overwritten; dinp may alias dout. */
  void (*gelu_backward)(void *dinp, const void *inp, const void *dout, size_t N, enum zo_dtype dt,
                        zo_stream_t stream);
  /* out = inp1 + inp2 over N elements; out may alias either input. */
  void (*residual_forward)(void *out, const void *inp1, const void *inp2, size_t N,
                           enum zo_dtype dt, zo_stream_t stream);
  /* dinp1 += dout; dinp2 += dout. */
  void (*residual_backward)(void *dinp1, void *dinp2, const void *dout, size_t N, enum zo_dtype dt,
                            zo_stream_t stream);
  /* Strided scaled add (a LoRA adapter's output into its projection's
   * columns of a fused output): y (N, ld_y) columns [col0, col0 + M) +=
   * s * v (N, M), i.e. y[:, col0:col0+M] += s * v. Each element is
   * y + s * v in fp32, rounded once to dt; other columns of y are not
   * touched. 0 <= col0, col0 + M <= ld_y; y and v must not overlap. */
  void (*scaled_add_forward)(void *y, const void *v, float s, int N, int M, int ld_y, int col0,
                             enum zo_dtype dt, zo_stream_t stream);
  /* Its backward: dv (N, M) = s * dy (N, ld_y) columns [col0, col0 + M),
   * overwritten (an activation gradient), each s * dy in fp32 rounded once
   * to dt. dv and dy must not overlap. */
  void (*scaled_add_backward)(void *dv, const void *dy, float s, int N, int M, int ld_y, int col0,
                              enum zo_dtype dt, zo_stream_t stream);
  /* Inverted dropout over N elements: out[i] = inp[i] / (1 - p) when element
   * i is kept, else 0; kept when draw i of zo_philox_dropout_draws(seed,
   * site) (zo/philox.h: Philox4x32-10, counter (i / 4, site), key seed) is
   * >= zo_philox_dropout_threshold(p). p in [0, 1); the scale is the fp32
   * 1 / (1 - p), applied in fp32 and rounded once to dt. The mask is a pure
   * function of (seed, site, i): the backward is this op on the gradient
   * with the same seed and site, and every backend draws the same mask.
   * out may alias inp. */
  void (*dropout)(void *out, const void *inp, size_t N, float p, uint64_t seed, uint64_t site,
                  enum zo_dtype dt, zo_stream_t stream);
  /* Fused softmax + cross-entropy over the rows of logits (N,Vp) whose first V
   * columns are real (columns V..Vp-1 are padding and never enter the softmax).
   * losses (N, fp32) = -log softmax(row)[targets[n]]; a row whose target is -1
   * gets loss 0 and zero gradient. If dlogits is not NULL it receives
   * (softmax(row) - onehot(target)) * dloss with padded columns 0; dlogits may
   * alias logits. targets must be -1 or in [0, V). Infinite logits (fp16
   * overflow), the same on every backend: -inf columns of a row with a
   * finite max add nothing (their gradient is 0; a -inf target's loss is
   * +inf); a row whose logits are all -inf (with a target) has no softmax:
   * its loss and its gradient over [0, V) are NaN (the float64 formula's
   * answer), so the step's loss and gradient norm are non-finite and the
   * engine skips the update (fp16's loss scaler, engine.on_nonfinite);
   * padding stays 0. */
  void (*crossentropy_forward)(float *losses, void *dlogits, const void *logits,
                               const int32_t *targets, float dloss, int N, int V, int Vp,
                               enum zo_dtype dt, zo_stream_t stream);
  /* dst (n elements of dst_dt) = src (n elements of src_dt), each of F32, BF16,
   * F16; narrowing rounds to nearest even (NaN stays NaN, overflow gives inf),
   * widening is exact. dst and src must not overlap unless equal with equal
   * dtypes. */
  void (*cast)(void *dst, enum zo_dtype dst_dt, const void *src, enum zo_dtype src_dt, size_t n,
               zo_stream_t stream);
  /* One AdamW step over n elements, in place on p, m, v (fp32); g is read
   * only. Exactly zo_adamw_update's arithmetic (zo/adamw.h: PyTorch's
   * single-tensor order, g scaled by grad_scale, decoupled weight decay
   * when decay, bias corrections from the 1-based step t). The CPU backend
   * is bit-identical to zo_adamw_update; CUDA agrees to within an ulp and is
   * expected to be bit-identical (kernels/cuda/adamw.cu says why). */
  void (*adamw_update)(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                       float beta2, float eps, float weight_decay, bool decay, long t,
                       float grad_scale, zo_stream_t stream);
  /* AdamW8bit over n elements of one tensor, in place on p and the 8-bit
   * states: zo_adamw8bit_update's arithmetic and layout (zo/adamw8bit.h:
   * m_code, v_code (n) uint8, m_absmax, v_absmax (ceil(n / block)) fp32,
   * block in [1, 4096]). The CPU backend is zo_adamw8bit_update; CUDA uses
   * the same map values, thresholds and IEEE-rounded operations, expected
   * bit-identical. */
  void (*adamw8bit_update)(float *p, const float *g, uint8_t *m_code, float *m_absmax, uint8_t *v_code,
                           float *v_absmax, size_t n, size_t block, float lr, float beta1, float beta2,
                           float eps, float weight_decay, bool decay, long t, float grad_scale,
                           zo_stream_t stream);
  /* *out (one double, device memory) = sum of x[i]^2 over n elements,
   * accumulated in double in ZO_SUMSQ_CHUNKS fixed chunks combined in chunk
   * order: the same value on every run, whatever the thread count. The CPU
   * backend is bit-identical to zo_sumsq; CUDA associates within a chunk
   * differently (relative difference ~1e-15). */
  void (*sumsq)(double *out, const float *x, size_t n, zo_stream_t stream);
};

/* Chunks of the deterministic sum of squares (sumsq, zo_sumsq). */
#define ZO_SUMSQ_CHUNKS 64

/* The CPU backend (always available). Its ops called directly on the calling
 * thread, outside streams: zo/cpu.h. */
zo_backend_t zo_backend_cpu(void);

/* The CUDA backend, or NULL with zo_last_error() set when the build has no
 * CUDA, no driver or no GPU is present, or the backend is not complete. */
zo_backend_t zo_backend_cuda(void);

/* "auto", "cpu" or "cuda". auto takes CUDA when usable and the CPU otherwise,
 * printing one line that says why. Returns NULL (zo_last_error set) when the
 * named backend is unavailable. */
zo_backend_t zo_backend_init(const char *device, int n_threads);

#ifdef __cplusplus
}
#endif
#endif /* ZO_BACKEND_H */
