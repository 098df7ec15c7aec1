/* The model's linear entry: every projection of an architecture's block
 * (GPT-2's Conv1D, the Llama family's fused qkv / gate_up, o_proj, down)
 * runs through it. y = x W^T + b and, for each LoRA adapter on the
 * projection (PEFT's module: A (r, C), B (out, r), both in the working
 * dtype), y[:, row0:row0+out] += scale * (x A^T) B^T. Without adapters it
 * queues exactly the matmul it replaces (the bits of a model without LoRA
 * are unchanged). The backward gives dx, dA and dB (fp32, accumulated) and
 * skips the base's weight gradient when the base is frozen. A frozen base
 * may instead be 4-bit (QLoRA): parts of NF4/FP4 rows (one per Hugging Face
 * Linear of a fused tensor) run on matmul_q4_forward / matmul_q4_backward_dx.
 * Private to the engine. */
#ifndef ZO_ENGINE_LINEAR_H
#define ZO_ENGINE_LINEAR_H

#include "zo/model.h"

/* One adapter on a projection's output columns [row0, row0 + out). */
struct zo_linear_adapter {
  const void *a;  /* (r, C) working dtype */
  const void *b;  /* (out, r) working dtype */
  float *da, *db; /* fp32 gradients (r, C) and (out, r), accumulated; NULL skips */
  int r, out, row0;
  float scale;    /* alpha / r, or alpha / sqrt(r) (rsLoRA) */
};

/* A 4-bit part of a frozen base: the projection's weight rows [row0,
 * row0 + w.OC), w.C == the projection's C. */
struct zo_linear_q4 {
  struct zo_quant4_weight w;
  int row0;
};

/* One projection: out (N, OC) = inp (N, C) weight^T + bias. */
struct zo_linear {
  const void *weight; /* (OC, C) working dtype; NULL when the base is 4-bit */
  const void *bias;   /* (OC) or NULL */
  float *dweight;     /* NULL: frozen (no weight-gradient GEMM) */
  float *dbias;       /* NULL: skipped */
  int C, OC;
  int n_adapters;
  const struct zo_linear_adapter *adapters;
  void *work;         /* zo_linear_work_numel elements of the working dtype (adapters, or q4 parts > 1) */
  /* A 4-bit base (weight NULL, dweight and dbias NULL): n_q4 parts tiling
   * rows [0, OC) in order. One part: the q4 ops straight into out / dinp;
   * more: each through work (out_max >= the widest part), out's columns
   * zeroed, then copied (y = 0 + 1 * v) and the parts' dx summed in order. */
  int n_q4;
  const struct zo_linear_q4 *q4;
};

/* Workspace elements for N rows, adapters of rank at most r_max and at most
 * out_max columns (and q4 parts of at most out_max rows), inputs of at most
 * C columns. */
size_t zo_linear_work_numel(int N, int C, int r_max, int out_max);

/* out (N, OC) = the projection of inp (N, C), adapters added. */
void zo_linear_forward(zo_backend_t be, const struct zo_linear *p, void *out, const void *inp, int N, enum zo_dtype dt,
                       zo_stream_t s);
/* dinp (N, C) overwritten (NULL skips it and the adapters' dx), dweight and
 * dbias accumulated as matmul_backward does, every adapter's da and db
 * accumulated. x A^T is recomputed from inp. */
void zo_linear_backward(zo_backend_t be, const struct zo_linear *p, void *dinp, const void *dout, const void *inp,
                        int N, enum zo_dtype dt, zo_stream_t s);

/* A model's adapters by table tensor: tensor i's are list[first[i]] ..
 * list[first[i + 1] - 1] (first has table.n_tensors + 1 entries). */
struct zo_model_adapters {
  int *first;
  struct zo_linear_adapter *list;
  bool frozen_base; /* the base's weight and bias gradients are skipped */
  void *work;       /* zo_linear_work_numel for the model's (B * T, widest input, ranks, outputs) */
};

/* The architectures' call: table tensor `tensor` (its weight m->pv[tensor],
 * gradient m->gv[tensor]) as a projection with bias tensor `bias` (-1: none),
 * with m->adapters' entries for it. */
void zo_model_linear_forward(const struct zo_model *m, int tensor, int bias, void *out, const void *inp, int N, int C,
                             int OC, zo_stream_t s);
void zo_model_linear_backward(const struct zo_model *m, int tensor, int bias, void *dinp, const void *dout,
                              const void *inp, int N, int C, int OC, zo_stream_t s);

#endif /* ZO_ENGINE_LINEAR_H */
