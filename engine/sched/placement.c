/* Placement: where each state class lives, from the config's
 * zero_optimization keys, and the optimizer-state format (fp32 or 8-bit m
 * and v, the canonical layout of zo/sched.h). Sharding a data-parallel
 * optimizer: zo_shard_of cuts the table into runs of whole tensors,
 * balanced by elements. Pure functions of the config and the tensor table:
 * nothing here allocates or touches a device. */
#include "internal.h"

#include <errno.h>

#include "zo/adamw8bit.h"

struct zo_optim_format zo_optim_format_from_config(const struct zo_config *cfg) {
  return (struct zo_optim_format){.eightbit = cfg->optimizer.type == ZO_OPTIMIZER_ADAMW8BIT,
                                  .block = (size_t)cfg->optimizer.block_size,
                                  .min_numel = (size_t)cfg->optimizer.min_8bit_size};
}

bool zo_optim_is_8bit(const struct zo_optim_format *f, size_t numel) {
  return f->eightbit && numel >= f->min_numel && numel > 0;
}

size_t zo_optim_piece_nbytes(const struct zo_optim_format *f, bool q, size_t n) {
  if (!q) return n * sizeof(float);
  return round_up(n, 4) + sizeof(float) * zo_adamw8bit_n_blocks(n, f->block);
}

size_t zo_optim_tensor_offset(const struct zo_optim_format *f, const struct zo_tensor_table *t, int i) {
  size_t off = 0;
  for (int k = 0; k < i; k++)
    off += zo_optim_piece_nbytes(f, zo_optim_is_8bit(f, t->tensors[k].numel), t->tensors[k].numel);
  return off;
}

size_t zo_optim_state_nbytes(const struct zo_optim_format *f, const struct zo_tensor_table *t) {
  return zo_optim_tensor_offset(f, t, t->n_tensors);
}

size_t zo_optim_numel_8bit(const struct zo_optim_format *f, const struct zo_tensor_table *t) {
  size_t n = 0;
  for (int i = 0; i < t->n_tensors; i++)
    if (zo_optim_is_8bit(f, t->tensors[i].numel)) n += t->tensors[i].numel;
  return n;
}

void zo_optim_state_fresh(const struct zo_optim_format *f, const struct zo_tensor_table *t, void *adam_m,
                          void *adam_v) {
  const size_t nb = zo_optim_state_nbytes(f, t);
  if (adam_m) memset(adam_m, 0, nb);
  if (adam_v) memset(adam_v, 0, nb); /* v's code of 0.0 is 0 */
  if (!adam_m || !f->eightbit) return;
  size_t off = 0;
  for (int i = 0; i < t->n_tensors; i++) {
    const size_t n = t->tensors[i].numel;
    const bool q = zo_optim_is_8bit(f, n);
    if (q) memset((uint8_t *)adam_m + off, ZO_ADAMW8BIT_M_ZERO_CODE, n);
    off += zo_optim_piece_nbytes(f, q, n);
  }
}

/* ---- placement ----------------------------------------------------------- */

void zo_placement_set_ranks(struct zo_placement *pl, int rank, int n_ranks) {
  ZO_ASSERT(n_ranks >= 1 && rank >= 0 && rank < n_ranks);
  pl->dp_rank = rank;
  pl->dp_ranks = n_ranks;
  /* Over ranks the gradients are summed in the host pool (whole or this
   * rank's shard), but with the parameters on NVMe: each block's are summed
   * onto their owners, who keep their shard in their gradient file. */
  pl->grads_nvme = !pl->frozen && (pl->param_nvme || (n_ranks == 1 && pl->optimizer == ZO_OFFLOAD_NVME && pl->grads_on_host));
}

bool zo_placement_sharded(const struct zo_placement *pl) { return pl->dp_ranks > 1 && pl->zero_stage >= 1; }

/* First tensor of rank r's shard: the first whose middle lies at or beyond
 * r's even share of the elements. */
static int shard_first_tensor(const struct zo_tensor_table *t, int r, int n_ranks) {
  if (r <= 0) return 0;
  if (r >= n_ranks) return t->n_tensors;
  const double cut = (double)t->numel * r / n_ranks;
  int i = 0;
  while (i < t->n_tensors && (double)t->tensors[i].offset + 0.5 * (double)t->tensors[i].numel < cut) i++;
  return i;
}

struct zo_shard zo_shard_of(const struct zo_optim_format *f, const struct zo_tensor_table *t, int rank,
                            int n_ranks) {
  struct zo_shard sh = {.t_lo = shard_first_tensor(t, rank, n_ranks),
                        .t_hi = shard_first_tensor(t, rank + 1, n_ranks)};
  /* Element ranges cover the table: gaps between tensors go with the tensor
   * after them, the tail with the last rank. */
  sh.lo = rank == 0 ? 0 : sh.t_lo < t->n_tensors ? t->tensors[sh.t_lo].offset : t->numel;
  sh.hi = rank == n_ranks - 1 ? t->numel : sh.t_hi < t->n_tensors ? t->tensors[sh.t_hi].offset : t->numel;
  sh.slo = zo_optim_tensor_offset(f, t, sh.t_lo);
  sh.shi = sh.slo;
  for (int i = sh.t_lo; i < sh.t_hi; i++)
    sh.shi += zo_optim_piece_nbytes(f, zo_optim_is_8bit(f, t->tensors[i].numel), t->tensors[i].numel);
  return sh;
}

struct zo_shard zo_placement_shard(const struct zo_placement *pl, const struct zo_tensor_table *t) {
  return zo_placement_sharded(pl) ? zo_shard_of(&pl->opt, t, pl->dp_rank, pl->dp_ranks)
                                  : zo_shard_of(&pl->opt, t, 0, 1);
}

int zo_placement_from_config(const struct zo_config *cfg, int n_layer, struct zo_placement *pl) {
  const struct zo_config_zero *z = &cfg->zero;
  memset(pl, 0, sizeof *pl);
  pl->optimizer = z->offload_optimizer.device;
  pl->grad_accum = cfg->grad_accum;
  pl->grad_slots = cfg->engine.grad_slots ? cfg->engine.grad_slots : ZO_SCHED_GRAD_SLOTS; /* 0: a config not read from JSON */
  if (pl->grad_slots < 1 || pl->grad_slots > ZO_SCHED_GRAD_SLOTS)
    return zo_error(-EINVAL, "engine.grad_slots = %d: need 1 .. %d", pl->grad_slots, ZO_SCHED_GRAD_SLOTS);
  pl->nvme_buffers = z->offload_optimizer.buffer_count;
  pl->nvme_chunk = (size_t)z->sub_group_size;
  pl->nvme_block = cfg->aio.block_size;
  pl->nvme_queue_depth = cfg->aio.queue_depth;
  pl->nvme_path = z->offload_optimizer.nvme_path;
  pl->pin = z->offload_optimizer.pin_memory;
  pl->opt = zo_optim_format_from_config(cfg);
  pl->dtype = cfg->bf16 ? ZO_BF16 : cfg->fp16.enabled ? ZO_F16 : ZO_F32;
  if (pl->opt.eightbit && (pl->opt.block < 1 || pl->opt.block > ZO_ADAMW8BIT_BLOCK_MAX))
    return zo_error(-EINVAL, "optimizer.params.block_size = %zu: need 1..%d", pl->opt.block,
                    ZO_ADAMW8BIT_BLOCK_MAX);
  /* LoRA (the lora section on): the base is frozen (zo_placement_check_lora
   * says what is built with it); its parameters may leave the device alone,
   * to the host or to a read-only parameter file on NVMe. */
  pl->frozen = cfg->lora.r > 0 || (cfg->lora.init_from && cfg->lora.init_from[0]);
  if (z->offload_param.device == ZO_OFFLOAD_NVME) {
    const char *pp = z->offload_param.nvme_path;
    if (pl->frozen && pl->optimizer != ZO_OFFLOAD_NVME) {
      /* The adapters' optimizer stays on the device (zo_placement_check_lora
       * refuses it elsewhere): the store is the base's alone, its path unset
       * taking offload_optimizer's, as the config does. */
      pl->nvme_path = pp && pp[0] ? pp : pl->nvme_path;
      if (!pl->nvme_path || !pl->nvme_path[0])
        return zo_error(-EINVAL, "zero_optimization.offload_param.nvme_path: needed for device \"nvme\" (the "
                                 "LoRA run's frozen base is written there once, then only read)");
    } else if (pl->optimizer != ZO_OFFLOAD_NVME) {
      return zo_error(-ENOTSUP, "zero_optimization.offload_param.device = \"nvme\" needs the optimizer on "
                                "NVMe too: set zero_optimization.offload_optimizer.device to \"nvme\"");
    }
    if (pp && pp[0] && pl->nvme_path && pl->nvme_path[0] && strcmp(pp, pl->nvme_path) != 0)
      return zo_error(-ENOTSUP, "zero_optimization.offload_param.nvme_path = \"%s\" differs from "
                                "zero_optimization.offload_optimizer.nvme_path = \"%s\": the tier keeps one "
                                "store; leave offload_param.nvme_path unset or equal", pp, pl->nvme_path);
    if (z->offload_param.buffer_count < 2)
      return zo_error(-EINVAL, "zero_optimization.offload_param.buffer_count = %d: parameters on NVMe need "
                               ">= 2 ring buffers (one loading while the next is read)",
                      z->offload_param.buffer_count);
    pl->param_nvme = true;
    pl->param_max_in_cpu = (size_t)z->offload_param.max_in_cpu;
  }
  if (z->offload_param.device != ZO_OFFLOAD_NONE) {
    if (pl->optimizer == ZO_OFFLOAD_NONE && !pl->frozen)
      return zo_error(-ENOTSUP, "zero_optimization.offload_param.device = \"cpu\" needs the "
                                "optimizer offloaded too: set zero_optimization.offload_optimizer."
                                "device to \"cpu\" or \"nvme\"");
    if (z->offload_param.buffer_count < 1)
      return zo_error(-EINVAL, "zero_optimization.offload_param.buffer_count = %d: need >= 1",
                      z->offload_param.buffer_count);
    pl->param_slots = z->offload_param.buffer_count < n_layer ? z->offload_param.buffer_count
                                                              : n_layer;
    pl->pin = pl->pin || z->offload_param.pin_memory;
  }
  const struct zo_config_checkpointing *ac = &cfg->activation_checkpointing;
  if (ac->enabled) {
    if (ac->number_checkpoints < 0 || ac->number_checkpoints > n_layer)
      return zo_error(-EINVAL, "activation_checkpointing.number_checkpoints = %d: need 0 (every "
                               "block) .. model.n_layer = %d", ac->number_checkpoints, n_layer);
    pl->ckpt_blocks = ac->number_checkpoints ? ac->number_checkpoints : n_layer;
    pl->ckpt_cpu = ac->cpu_checkpointing;
  }
  pl->grads_on_host = pl->optimizer != ZO_OFFLOAD_NONE && z->stage >= 2;
  pl->zero_stage = z->stage;
  pl->overlap_comm = z->overlap_comm;
  pl->dp_ranks = 1;
  /* A frozen base has no gradients: its parameter file is the only one. */
  pl->grads_nvme = !pl->frozen && (pl->param_nvme || (pl->optimizer == ZO_OFFLOAD_NVME && pl->grads_on_host));
  if (pl->optimizer == ZO_OFFLOAD_NVME) {
    if (pl->nvme_buffers < 2)
      return zo_error(-EINVAL, "zero_optimization.offload_optimizer.buffer_count = %d: the NVMe "
                               "tier needs >= 2 (one updating while the next is read)",
                      pl->nvme_buffers);
    if (!pl->nvme_path || !pl->nvme_path[0])
      return zo_error(-EINVAL, "zero_optimization.offload_optimizer.nvme_path: needed for "
                               "device \"nvme\"");
  }
  return 0;
}

const char *zo_placement_describe(const struct zo_placement *pl, char *buf, size_t size) {
  static const char *const dev[] = {"device", "cpu", "nvme"};
  char slots[96] = "device";
  if (pl->param_nvme)
    snprintf(slots, sizeof slots, "nvme (%d host ring buffers, %d device slots; max_in_cpu %zu elements)",
             pl->param_slots, pl->param_slots, pl->param_max_in_cpu);
  else if (pl->param_slots)
    snprintf(slots, sizeof slots, "host (%d device slots)", pl->param_slots);
  char fmt[96] = "";
  if (pl->opt.eightbit)
    snprintf(fmt, sizeof fmt, " (AdamW8bit: block %zu, tensors >= %zu elements)", pl->opt.block,
             pl->opt.min_numel);
  char ck[96] = "";
  if (pl->ckpt_blocks)
    snprintf(ck, sizeof ck, ", activation checkpointing of %d blocks (inputs on %s)", pl->ckpt_blocks,
             pl->ckpt_cpu ? "host" : "device");
  const char *prec = pl->dtype == ZO_BF16 ? ", bf16 mixed precision"
                     : pl->dtype == ZO_F16  ? ", fp16 mixed precision (dynamic loss scaling)"
                                            : "";
  char dp[160] = "";
  if (zo_placement_sharded(pl)) {
    const bool p3 = pl->param_slots > 0; /* the working parameters sharded too */
    const int z = p3 ? 3 : pl->zero_stage < 2 ? 1 : 2;
    snprintf(dp, sizeof dp, ", ZeRO-%d: optimizer%s sharded over %d ranks%s", z, p3 ? " and parameters" : "",
             pl->dp_ranks,
             z < 2                                   ? ""
             : pl->grads_on_host && pl->overlap_comm ? " (gradients reduce-scattered block by block during the backward)"
                                                     : " (gradients reduce-scattered)");
  }
  if (pl->frozen) {
    char base[160] = "on the device";
    if (pl->param_nvme)
      snprintf(base, sizeof base, "on NVMe (a read-only parameter file; %d host ring buffers, %d device slots; "
               "max_in_cpu %zu elements)", pl->param_slots, pl->param_slots, pl->param_max_in_cpu);
    else if (pl->param_slots) snprintf(base, sizeof base, "on the host, streamed through %d device slots", pl->param_slots);
    snprintf(buf, size, "LoRA: the base frozen %s (no gradients or optimizer state), the adapters' "
             "gradients, fp32 master, m and v on the device%s%s", base, ck, prec);
    return buf;
  }
  snprintf(buf, size, "optimizer states on %s, gradients on %s, parameters on %s%s%s%s%s",
           dev[pl->optimizer], pl->grads_nvme ? "nvme" : pl->grads_on_host ? "host" : "device", slots, fmt, ck, prec, dp);
  return buf;
}

struct zo_model_layout zo_placement_layout(const struct zo_placement *pl) {
  return (struct zo_model_layout){
      .dtype = pl->dtype,
      .master = pl->dtype != ZO_F32 && pl->optimizer == ZO_OFFLOAD_NONE && !pl->frozen,
      .training = true,
      .frozen = pl->frozen,
      .param_slots = pl->param_slots,
      .grad_slots = pl->grads_on_host ? pl->grad_slots : 0,
      /* One process: over ranks the resident gradients are reduced whole. */
      .embed_grads_host = pl->grads_on_host && pl->dp_ranks <= 1,
      .embed_params_host = pl->param_slots > 0 && pl->dp_ranks <= 1,
      /* and the LM head, when in pieces, through the slots */
      .head_stream = pl->param_slots > 0 && pl->grads_on_host && pl->dp_ranks <= 1,
      .grad_accum = !pl->grads_on_host && pl->grad_accum > 1,
      .optimizer = pl->optimizer == ZO_OFFLOAD_NONE && !pl->opt.eightbit,
      .ckpt_blocks = pl->ckpt_blocks,
      .ckpt_on_host = pl->ckpt_cpu,
      .stream_workspace = pl->stream_workspace,
  };
}
