/* The trained set of a frozen base (LoRA, issue 46): the adapters attached
 * to the scheduler's model (engine/model/lora_attach.h), with their fp32
 * master, gradients, m and v on the device. The base has no gradients,
 * master weights or optimizer state (the model's layout is frozen); the
 * linear entry accumulates every micro-batch's dA, dB into the adapters'
 * gradients, and the step is queued here on the optimizer stream: the
 * gradients' sum of squares (the norm over the adapters only, as
 * torch.nn.utils.clip_grad_norm_ over PEFT's trainable parameters), the
 * clip coefficient, one AdamW over every adapter tensor (each is 2-D, so
 * each takes the weight decay, as torch.optim.AdamW does), the working
 * copy rounded from the master in mixed precision, the gradients zeroed
 * for the next step. The base lives on the device or, with
 * offload_param "cpu", in a host working copy streamed through the
 * parameter slots, or, with offload_param "nvme", in a parameter file read
 * into the slots (base_nvme.c): read only, nothing of it is ever written
 * back; the placements not built with LoRA are refused by name
 * (zo_placement_check_lora). */
#include "internal.h"

#include <errno.h>
#include <math.h>

#include "../model/lora_attach.h"

int zo_placement_check_lora(const struct zo_placement *pl) {
  const char *why = NULL, *key = NULL;
  if (pl->optimizer != ZO_OFFLOAD_NONE)
    key = "zero_optimization.offload_optimizer", why = "the adapters' optimizer state stays on the device";
  else if (pl->dp_ranks > 1)
    key = "data parallelism (several ranks)", why = "LoRA trains in one process";
  else if (pl->opt.eightbit)
    key = "optimizer.type = AdamW8bit", why = "the adapters take fp32 AdamW (their m and v are small)";
  else if (pl->dtype == ZO_F16)
    key = "fp16.enabled", why = "use bf16.enabled or fp32";
  else if (pl->ckpt_cpu)
    key = "activation_checkpointing.cpu_checkpointing", why = "activation checkpointing on the device works";
  if (!key) return 0;
  return zo_error(-ENOTSUP, "lora: %s is not built with LoRA training yet (%s): remove it to train the "
                  "adapters with the base on the device, streamed from host RAM or read from NVMe", key, why);
}

int sched_lora_attach(struct zo_sched *s, const struct zo_sched_config *c) {
  ZO_ASSERT(s->pl.frozen && c->lora && c->lora_params);
  int err = zo_placement_check_lora(&s->pl);
  if (!err) err = zo_lora_attach(s->m, c->lora, c->lora_params, &s->lora);
  if (err) return err;
  s->lora_numel = c->lora->numel;
  return 0;
}

void sched_lora_free(struct zo_sched *s) { zo_lora_detach(s->m, s->lora); }

/* Optimizer stream: the norm from the device's sum of squares (copied to
 * lora_sumsq), the clip coefficient and the skip, as sched_norm_fn. */
static void lora_norm_fn(void *arg) {
  const struct task *a = arg;
  struct zo_sched *s = a->s;
  struct step_args *sa = &s->step[a->parity];
  sa->norm = sqrt(s->lora_sumsq) / sa->loss_scale;
  sa->skip = sa->skip_nonfinite && !isfinite(sa->norm);
  sa->coef = (float)((double)zo_clip_coef(sa->norm, sa->max_norm) / sa->loss_scale);
}

int sched_lora_queue_optimizer(struct zo_sched *s) {
  zo_backend_t be = s->be;
  struct zo_lora_device *d = s->lora;
  struct step_args *sa = &s->step[s->parity];
  const size_t n = s->lora_numel;
  CHECK_Q(be->stream_wait_event(s->optim, s->grads_ready));
  be->sumsq(d->sumsq, d->grads, n, s->optim);
  CHECK_Q(sched_copy(s, &s->lora_sumsq, d->sumsq, sizeof(double), ZO_COPY_D2H, s->optim));
  zo_trace_next("norm", -1, 0, 0);
  CHECK_Q(be->launch_host_func(s->optim, lora_norm_fn, &s->norm_tasks[s->parity]));
  CHECK_Q(be->event_record(s->norm_done, s->optim));
  /* The device update takes the clip coefficient as an argument. */
  int err = be->event_synchronize(s->norm_done);
  if (err) return err;
  if (!sa->skip) {
    const struct zo_adamw_hparams *hp = &sa->hp;
    be->adamw_update(d->params, d->grads, d->adam_m, d->adam_v, n, hp->lr, hp->beta1, hp->beta2, hp->eps,
                     hp->weight_decay, true, sa->t, sa->coef, s->optim);
    if (d->wparams != d->params) be->cast(d->wparams, s->m->dtype, d->params, ZO_F32, n, s->optim);
  }
  CHECK_Q(be->memset_async(d->grads, 0, n * sizeof(float), s->optim));
  /* The next forward's hooks wait for these: every block reads the adapters. */
  for (int u = 0; u < s->U; u++) {
    CHECK_Q(be->event_record(s->opt_done[u], s->optim));
    CHECK_Q(be->event_record(s->param_ready[u], s->optim));
  }
  return 0;
}

/* Synchronous copies of the adapters' state (zo/sched.h). */
static int lora_copy(struct zo_sched *s, float *const host[3], bool write) {
  struct zo_lora_device *d = s->lora;
  ZO_ASSERT(d);
  float *dev[3] = {d->params, d->adam_m, d->adam_v};
  const size_t nb = s->lora_numel * sizeof(float);
  int err = zo_sched_synchronize(s);
  for (int i = 0; i < 3 && !err; i++)
    if (host[i]) err = sched_copy_sync(s, write ? (void *)dev[i] : host[i], write ? (void *)host[i] : dev[i], nb,
                                       write ? ZO_COPY_H2D : ZO_COPY_D2H);
  if (!err && write && host[0] && d->wparams != d->params) {
    s->be->cast(d->wparams, s->m->dtype, d->params, ZO_F32, s->lora_numel, s->compute);
    err = s->be->stream_synchronize(s->compute);
  }
  return err ? error_prefixed(err, write ? "writing the LoRA adapters' state" : "reading the LoRA adapters' state")
             : 0;
}

int zo_sched_lora_read(struct zo_sched *s, float *params, float *adam_m, float *adam_v) {
  float *const host[3] = {params, adam_m, adam_v};
  return lora_copy(s, host, false);
}

int zo_sched_lora_write(struct zo_sched *s, const float *params, const float *adam_m, const float *adam_v) {
  float *const host[3] = {(float *)params, (float *)adam_m, (float *)adam_v};
  return lora_copy(s, host, true);
}
