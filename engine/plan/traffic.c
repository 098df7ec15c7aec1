/* The bytes one optimizer step of a plan moves (zo/plan.h: zo_plan_traffic),
 * counted as zo_sched_stats counts them: every host-to-device and
 * device-to-host copy and every NVMe request where it is issued. The cost
 * model (cost.c) turns these bytes into times; `zoffload plan` and bench
 * step print them beside the measured counters.
 *
 * Exact (the counters equal it, tests/test-engine-bytes.c): LoRA's frozen
 * base on the device, streamed from the host or read from NVMe, and full
 * fine-tuning, fp32 or bf16 with fp32 AdamW on one rank, with everything on
 * the device or the optimizer, gradients and parameters on the host. The
 * parameter slots' loads (the LM head's pieces too) are counted by
 * replaying the scheduler's ring (engine/sched/hooks.c) for any placement.
 * The other placements (NVMe files, host checkpoints, fp16, AdamW8bit, ranks)
 * keep approximations -- the NVMe traffic from the files' sizes (chunk
 * padding makes the requests smaller), the rest unchecked: labelled
 * approximate. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "zo/plan.h"

/* The ring entry needed at position i of a micro-batch over N entries:
 * F0..F(N-1), B(N-1)..B0 (hooks.c's need_at). */
static int need_at(int N, int i) { return i < N ? i : 2 * N - 1 - i; }

/* Loads of ring entry l into slot l % S, unless the slot holds it. */
static void ensure(int *owner, int S, int l, uint64_t *loads) {
  if (owner[l % S] == l) return;
  owner[l % S] = l;
  loads[l]++;
}

/* How many times each of the N ring entries (the L blocks, then the LM
 * head's streamed pieces) is loaded into one of S parameter slots per
 * step of K micro-batches in the micro-batch-major order, as the
 * scheduler issues them: the previous step's end invalidates every slot
 * and loads entries 0 .. S-1 (sched_slots_invalidate), and each entry
 * acquired forward and backward loads the next S needed ahead
 * (slots_acquire). Returns 0 or -ENOMEM. */
static int slot_loads(int N, int S, int K, uint64_t *loads) {
  int *owner = malloc((size_t)S * sizeof *owner);
  if (!owner) return -1;
  for (int k = 0; k < S; k++) owner[k] = -1;
  memset(loads, 0, (size_t)N * sizeof *loads);
  for (int l = 0; l < S; l++) ensure(owner, S, l, loads);
  for (int k = 0; k < K; k++)
    for (int pos = 0; pos < 2 * N; pos++)
      for (int i = pos; i < pos + S && i < 2 * N; i++) ensure(owner, S, need_at(N, i), loads);
  free(owner);
  return 0;
}

/* Elements of ring entry l: a block, or the LM head's piece l - L. */
static uint64_t entry_numel(const struct zo_tensor_table *t, int l, int rows, uint64_t C) {
  if (l < t->n_layer) return t->layer_numel;
  const uint64_t head_rows = t->tensors[t->n_tensors - 1].numel / C, r0 = (uint64_t)(l - t->n_layer) * (uint64_t)rows;
  return (head_rows - r0 < (uint64_t)rows ? head_rows - r0 : (uint64_t)rows) * C;
}

/* The blocks' and head pieces' slot loads: bytes in, and the bytes of those
 * read from the parameter file (param_nvme: the blocks max_in_cpu does not
 * keep in host memory). */
static int slot_bytes(const struct zo_plan *p, const struct zo_tensor_table *t, bool streamed_head, uint64_t *in,
                      uint64_t *file) {
  const struct zo_placement *pl = &p->placement;
  const uint64_t e = zo_dtype_size(pl->dtype), C = (uint64_t)p->model.n_embd;
  int rows = 0;
  const int n_hp = streamed_head ? zo_model_head_pieces(t, &rows) : 0, N = t->n_layer + n_hp;
  uint64_t *loads = calloc((size_t)N, sizeof *loads);
  if (!loads || slot_loads(N, pl->param_slots, pl->grad_accum, loads) != 0) {
    free(loads);
    return zo_error(-ENOMEM, "out of host memory counting the parameter slots' loads");
  }
  const uint64_t in_cpu = pl->param_nvme && t->layer_numel ? pl->param_max_in_cpu / t->layer_numel : 0;
  *in = *file = 0;
  for (int l = 0; l < N; l++) {
    const uint64_t nb = loads[l] * entry_numel(t, l, rows, C) * e;
    *in += nb;
    if (pl->param_nvme && l < t->n_layer && (uint64_t)l >= in_cpu) *file += nb;
  }
  free(loads);
  return 0;
}

int zo_plan_traffic(const struct zo_plan *p, bool layer_major, struct zo_plan_traffic *tr) {
  memset(tr, 0, sizeof *tr);
  const struct zo_placement *pl = &p->placement;
  struct zo_tensor_table t;
  int err = zo_model_build_table(&p->model, &t);
  if (err) return err;
  const uint64_t e = zo_dtype_size(pl->dtype), K = (uint64_t)pl->grad_accum, BT = (uint64_t)p->B * (uint64_t)p->T;
  const uint64_t C = (uint64_t)p->model.n_embd, L = (uint64_t)t.n_layer, N = t.numel;
  const uint64_t resident = N - L * t.layer_numel, emb = t.layer_offset[0], rows = BT * C * e;
  const struct zo_model_layout lo = zo_placement_layout(pl);
  const bool emb_p = zo_model_embed_params_host(&t, &lo), emb_g = zo_model_embed_grads_host(&t, &lo);
  const uint64_t shead = zo_model_streamed_head_numel(&t, &lo);
  const bool offloaded = pl->optimizer != ZO_OFFLOAD_NONE;

  /* Every micro-batch: its tokens and targets (int32) in, its losses (fp32)
   * out; an untied embedding kept on the host sends its rows in. */
  tr->h2d = K * BT * 2 * sizeof(int32_t) + (emb_p ? K * rows : 0);
  tr->d2h = K * BT * sizeof(float);
  /* The norm's sums of squares (fp64) computed on the device: the adapters'
   * one, or one per tensor. */
  if (pl->frozen) tr->d2h += sizeof(double);
  else if (!offloaded) tr->d2h += (uint64_t)t.n_tensors * sizeof(double);

  /* The parameter slots: the blocks (and a streamed head's pieces). The
   * layer-major order (not built) loads each once forward and backward. */
  uint64_t loads_in = 0, loads_file = 0;
  if (pl->param_slots && layer_major) {
    loads_in = 2 * (L * t.layer_numel + shead) * e;
    loads_file = pl->param_nvme ? 2 * (uint64_t)p->bytes[ZO_TIER_NVME][ZO_MEM_PARAMS] : 0;
  } else if (pl->param_slots && (err = slot_bytes(p, &t, shead > 0, &loads_in, &loads_file))) {
    zo_tensor_table_free(&t);
    return err;
  }
  tr->h2d += loads_in;
  tr->nvme_read = loads_file;
  /* Exact where test-engine-bytes checks it: LoRA on every base placement;
   * full fine-tuning, fp32 or bf16 with fp32 AdamW, all on the device or
   * with the optimizer, gradients (stage 2) and parameters on the host, the
   * LM head in pieces included (no NVMe file, no checkpoints on the host). */
  const bool plain = !pl->ckpt_cpu && pl->dtype != ZO_F16 && !pl->opt.eightbit;
  const bool host_opt = pl->optimizer == ZO_OFFLOAD_CPU && pl->grads_on_host && !pl->param_nvme;
  tr->exact = (pl->frozen || (plain && ((!offloaded && !pl->param_slots) || host_opt))) && !layer_major &&
              pl->dp_ranks <= 1;
  if (pl->frozen) { /* nothing of the base is updated, no gradient of it leaves the device */
    zo_tensor_table_free(&t);
    return 0;
  }

  /* Full fine-tuning (approximate where offloaded): the updated parameters
   * the slots do not load come in once per step; the gradients leave per
   * micro-batch from the slots (once per step accumulated on the device),
   * an embedding's on the host as d(embedding output). */
  const uint64_t Kx = layer_major ? 1 : K;
  if (offloaded) tr->h2d += ((pl->param_slots ? resident - shead : N) - (emb_p ? emb : 0)) * e;
  if (pl->grads_on_host) tr->d2h += Kx * (N - (emb_g ? emb : 0)) * sizeof(float) + (emb_g ? K * rows : 0);
  else if (offloaded) tr->d2h += N * sizeof(float);
  if ((pl->ckpt_blocks || layer_major) && pl->ckpt_cpu) {
    const uint64_t ckb = K * (layer_major ? L : (uint64_t)pl->ckpt_blocks) * rows;
    tr->d2h += ckb;
    tr->h2d += ckb;
  }
  /* NVMe, from the files' sizes: master, m and v read and written once by
   * the chunk updates; the parameter file written by the update; the
   * gradient file written by every micro-batch, read back by the next
   * one's accumulation and by the update. */
  const size_t *nvb = p->bytes[ZO_TIER_NVME];
  const uint64_t st = nvb[ZO_MEM_MASTER] + nvb[ZO_MEM_ADAM_M] + nvb[ZO_MEM_ADAM_V];
  const uint64_t P = nvb[ZO_MEM_PARAMS], G = nvb[ZO_MEM_GRADS];
  tr->nvme_state = st;
  tr->nvme_read_end = st + G;
  tr->nvme_write_end = st + P;
  tr->nvme_read += tr->nvme_read_end + (Kx - 1) * G;
  tr->nvme_write = tr->nvme_write_end + Kx * G;
  zo_tensor_table_free(&t);
  return 0;
}
