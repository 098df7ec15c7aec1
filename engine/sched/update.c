/* The optimizer's arithmetic: the global gradient norm (per-tensor sums of
 * squares added in table order, the association every placement shares),
 * AdamW or AdamW8bit on a unit's tensors in host memory (cpu tier), and the
 * same queued on the device's optimizer stream (optimizer on the device).
 * In mixed precision the fp32 master is updated and rounded into the
 * working copy span by span while it is in cache. */
#include "internal.h"

#include <math.h>

#include "zo/adamw8bit.h"
#include "zo/cpu.h"

/* ---- optimizer ----------------------------------------------------------- */

/* Per-tensor sums of squares in table order: the association every placement shares. */
static double grad_sumsq(const struct zo_tensor_table *t, const float *grads) {
  double sum = 0.0;
  for (int i = 0; i < t->n_tensors; i++)
    sum += zo_sumsq(grads + t->tensors[i].offset, t->tensors[i].numel);
  return sum;
}

/* Optimizer stream. With the optimizer on the device the per-tensor sums
 * were computed there (backend sumsq) and copied to norm_host before this
 * runs; the host only adds them, in the same table order. */
void sched_norm_fn(void *arg) {
  const struct task *a = arg;
  struct zo_sched *s = a->s;
  struct step_args *sa = &s->step[a->parity];
  double t0 = zo_time_s();
  double sum = 0.0;
  if (s->sharded) {
    /* Each rank's tensors' sums, zeros elsewhere, summed over the ranks and
     * then added in table order: x + 0 is x, so the norm is the bits one
     * process computes from the same gradients, whatever the rank count. */
    for (int i = 0; i < s->t->n_tensors; i++) {
      const struct zo_tensor_info *ti = &s->t->tensors[i];
      s->norm_parts[i] = i < s->sh.t_lo || i >= s->sh.t_hi ? 0.0
                         : s->norm_host                    ? s->norm_host[i]
                                                           : zo_sumsq(grads_at(s, ti->offset), ti->numel);
    }
    const double tc = zo_time_s();
    int err = zo_comm_allreduce(s->grad_comm, s->norm_parts, (size_t)s->t->n_tensors, ZO_F64, ZO_COMM_SUM);
    atomic_fetch_add(&s->comm_ns, ns_since(tc));
    if (err) async_fail(s, error_prefixed(err, "summing the gradient norm over the ranks"));
    for (int i = 0; i < s->t->n_tensors; i++) sum += s->norm_parts[i];
  } else if (s->norm_host) {
    for (int i = 0; i < s->t->n_tensors; i++) sum += s->norm_host[i];
  } else {
    sum = grad_sumsq(s->t, opt_grads(s));
  }
  /* The gradients carry the loss scale: the norm, the clip and the skip
   * are decided on the unscaled values, and the update's grad_scale takes
   * the scale out again. The sum of squares is a double: finite floats
   * never overflow it, so it is finite exactly when every gradient is. */
  sa->norm = sqrt(sum) / sa->loss_scale;
  sa->skip = sa->skip_nonfinite && !isfinite(sa->norm);
  sa->coef = (float)((double)zo_clip_coef(sa->norm, sa->max_norm) / sa->loss_scale);
  atomic_fetch_add(&s->opt_ns, ns_since(t0));
}

/* Elements of one update-then-round pass in mixed precision: the rounding
 * reads the master weights while they are still in cache, and the pass is
 * large enough for the update's own parallel loop. A multiple of every
 * quantization block size (ZO_ADAMW8BIT_BLOCK_MAX divides it). */
#define ZO_SCHED_CAST_SPAN ((size_t)1 << 18)

/* AdamW on one piece of tensor ti: n elements at p (fp32 master), g; its m,
 * v state at ms, vs (fp32, or codes then absmax when q). With work (mixed
 * precision) the updated p is rounded into work (n elements of the working
 * dtype) span by span; spans split 8-bit states at block multiples from the
 * piece's first element, which is exact (blocks are independent). */
void sched_piece_update(const struct zo_sched *s, const struct step_args *sa, const struct zo_tensor_info *ti,
                         bool q, float *p, const float *g, uint8_t *ms, uint8_t *vs, size_t n, void *work) {
  const size_t span = work ? ZO_SCHED_CAST_SPAN : n, cb = round_up(n, 4), blk = s->pl.opt.block;
  const size_t e = zo_dtype_size(s->pl.dtype);
  for (size_t a = 0; a < n; a += span) {
    const size_t k = n - a < span ? n - a : span;
    if (!q)
      zo_cpu_adamw_update(p + a, g + a, (float *)ms + a, (float *)vs + a, k, sa->hp.lr, sa->hp.beta1, sa->hp.beta2,
                          sa->hp.eps, sa->hp.weight_decay, ti->decay, sa->t, sa->coef);
    else
      zo_adamw8bit_update(p + a, g + a, ms + a, (float *)(ms + cb) + a / blk, vs + a, (float *)(vs + cb) + a / blk,
                          k, blk, &sa->hp, ti->decay, sa->t, sa->coef);
    if (work) zo_cpu_cast((uint8_t *)work + a * e, s->pl.dtype, p + a, ZO_F32, k);
  }
}

/* Optimizer on the cpu tier: unit u's tensors, whole, with states in the
 * canonical layout. */
void sched_opt_unit_fn(void *arg) {
  const struct task *a = arg;
  struct zo_sched *s = a->s;
  if (atomic_load(&s->err)) return;
  const struct step_args *sa = &s->step[a->parity];
  if (sa->skip) return;
  const struct range r = unit_range(s->t, a->index);
  double t0 = zo_time_s();
  /* The host master; in mixed precision rounded into the host working copy
   * (fp32 with slots: the master is the slots' source). This rank's tensors
   * only. */
  uint8_t *work = s->pl.dtype != ZO_F32 ? s->h.params : NULL;
  for (int i = s->sh.t_lo; i < s->sh.t_hi; i++) {
    const struct zo_tensor_info *ti = &s->t->tensors[i];
    if (ti->offset < r.off || ti->offset >= r.off + r.numel) continue;
    float *p = master_at(s, ti->offset);
    sched_piece_update(s, sa, ti, zo_optim_is_8bit(&s->pl.opt, ti->numel), p, grads_at(s, ti->offset), state_at(s, s->st_m, i),
                       state_at(s, s->st_v, i), ti->numel, work ? host_params_at(s, ti->offset) : NULL);
  }
  atomic_fetch_add(&s->opt_ns, ns_since(t0));
}

/* Optimizer on the device: unit u's tensors updated by the backend's AdamW
 * or AdamW8bit on the optimizer stream, states in the canonical layout,
 * never touched by the host; in mixed precision the fp32 master is updated
 * and rounded into the working copy by the backend's cast. */
void sched_queue_device_update(struct zo_sched *s, const struct step_args *sa, int u) {
  const struct range r = unit_range(s->t, u);
  float *p = s->m->master ? s->m->master : (float *)s->m->params;
  const struct zo_adamw_hparams *hp = &sa->hp;
  for (int i = s->sh.t_lo; i < s->sh.t_hi; i++) {
    const struct zo_tensor_info *ti = &s->t->tensors[i];
    if (ti->offset < r.off || ti->offset >= r.off + r.numel) continue;
    const size_t o = ti->offset, n = ti->numel;
    uint8_t *ms = state_at(s, s->st_m, i), *vs = state_at(s, s->st_v, i);
    if (zo_optim_is_8bit(&s->pl.opt, n)) {
      const size_t cb = round_up(n, 4);
      s->be->adamw8bit_update(p + o, s->acc + o, ms, (float *)(ms + cb), vs, (float *)(vs + cb), n, s->pl.opt.block,
                              hp->lr, hp->beta1, hp->beta2, hp->eps, hp->weight_decay, ti->decay, sa->t, sa->coef,
                              s->optim);
    } else {
      s->be->adamw_update(p + o, s->acc + o, (float *)ms, (float *)vs, n, hp->lr, hp->beta1, hp->beta2, hp->eps,
                          hp->weight_decay, ti->decay, sa->t, sa->coef, s->optim);
    }
    if (s->m->master) s->be->cast(zo_model_at(s->m, s->m->params, o), s->m->dtype, p + o, ZO_F32, n, s->optim);
  }
}
