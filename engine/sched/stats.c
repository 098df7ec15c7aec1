/* Measurement: the scheduler's counters, the memory report (each tier's
 * current and peak bytes by category, from the arenas, the host pool's
 * tagged carves and the NVMe files' sizes), and the I/O-alone timing of a
 * step's copies and NVMe traffic (zo_sched_time_io). */
#include "internal.h"

#include "../model/lora_attach.h"

#include <errno.h>
#include <sys/stat.h>

void zo_sched_stats(const struct zo_sched *s, struct zo_sched_stats *out) {
  memset(out, 0, sizeof *out);
  out->device_planned = s->m->arena.capacity + s->opt_arena.capacity + (s->lora ? s->lora->arena.capacity : 0);
  out->device_peak = s->m->arena.peak + s->opt_arena.peak + (s->lora ? s->lora->arena.peak : 0);
  out->host_planned = s->pool.capacity;
  out->host_peak = s->pool.peak;
  out->nvme_planned = s->nvme_planned;
  out->optimizer_s = (double)atomic_load(&s->opt_ns) * 1e-9;
  out->accumulate_s = (double)atomic_load(&s->acc_ns) * 1e-9;
  out->nvme_wait_s = (double)atomic_load(&s->nv_wait_ns) * 1e-9;
  out->comm_s = (double)atomic_load(&s->comm_ns) * 1e-9;
  out->pinned = s->pool.pinned;
  out->h2d_bytes = atomic_load(&s->h2d_bytes);
  out->d2h_bytes = atomic_load(&s->d2h_bytes);
  out->nvme_read_bytes = atomic_load(&s->nvme_read_bytes);
  out->nvme_write_bytes = atomic_load(&s->nvme_write_bytes);
}

int zo_sched_device_category(const char *group) {
  static const struct {
    const char *prefix;
    int cat;
  } map[] = {
      {"parameter slot", ZO_MEM_BUFFERS}, {"gradient slot", ZO_MEM_BUFFERS},
      {"parameters", ZO_MEM_PARAMS},      {"gradient", ZO_MEM_GRADS}, /* "gradients", "... accumulator" */
      {"AdamW m", ZO_MEM_ADAM_M},         {"AdamW8bit m", ZO_MEM_ADAM_M},
      {"AdamW v", ZO_MEM_ADAM_V},         {"AdamW8bit v", ZO_MEM_ADAM_V},
      {"master weights", ZO_MEM_MASTER},  {"activations", ZO_MEM_ACTIVATIONS},
      {"input tokens", ZO_MEM_ACTIVATIONS}, {"target tokens", ZO_MEM_ACTIVATIONS},
      {"logits", ZO_MEM_ACTIVATIONS},     {"losses", ZO_MEM_ACTIVATIONS},
      {"checkpoint input buffer", ZO_MEM_ACTIVATIONS}, {"backward scratch", ZO_MEM_WORKSPACE},
      {"workspace", ZO_MEM_WORKSPACE}, /* an architecture's constant tables (Llama's rotary cos, sin) */
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strncmp(group, map[i].prefix, strlen(map[i].prefix)) == 0) return map[i].cat;
  return -1;
}

static void device_memory(const struct zo_arena *a, struct zo_sched_mem *out) {
  const int D = ZO_TIER_DEVICE;
  for (int g = 0; g < a->n_groups; g++) {
    const int cat = zo_sched_device_category(a->groups[g].name);
    if (cat < 0) {
      out->unclassified[D] += a->groups[g].peak;
      continue;
    }
    out->current[D][cat] += a->groups[g].used;
    out->peak[D][cat] += a->groups[g].peak;
  }
  out->capacity[D] += a->capacity;
  out->used[D] += a->used;
  out->peak_total[D] += a->peak;
  out->n_device_carves += a->n_carves;
}

int zo_sched_memory(const struct zo_sched *s, struct zo_sched_mem *out) {
  memset(out, 0, sizeof *out);
  /* Each group's peak is its own high-water mark; summed per category they
   * are the category's peak because the arenas are carved once and never
   * reset while the scheduler lives. */
  device_memory(&s->m->arena, out);
  device_memory(&s->opt_arena, out);
  if (s->lora) device_memory(&s->lora->arena, out);

  const int H = ZO_TIER_HOST;
  for (int i = 0; i < s->pool.n_carves; i++) {
    const int cat = s->pool_tags.cat[i];
    if (cat < 0)
      out->unclassified[H] += s->pool.carves[i].nbytes;
    else
      out->current[H][cat] += s->pool.carves[i].nbytes;
  }
  memcpy(out->peak[H], s->pool_tags.peak, sizeof out->peak[H]);
  out->capacity[H] = s->pool.capacity;
  out->used[H] = s->pool.used;
  out->peak_total[H] = s->pool.peak;

  if (!s->nv) return 0;
  const int N = ZO_TIER_NVME;
  static const int nv_cat[NV_FILES] = {ZO_MEM_MASTER, ZO_MEM_ADAM_M, ZO_MEM_ADAM_V};
  for (int f = 0; f < NV_FILES; f++) {
    if (s->file_id[f] < 0) continue; /* a rank owning no tensor */
    struct stat st;
    const char *path = zo_nvme_file_path(s->nv, s->file_id[f]);
    if (stat(path, &st) != 0)
      return zo_error(-errno, "memory report: cannot stat NVMe state file %s: %s", path, strerror(errno));
    out->current[N][nv_cat[f]] += (size_t)st.st_size;
    out->peak[N][nv_cat[f]] += (size_t)st.st_size;
    out->used[N] += (size_t)st.st_size;
  }
  const int tier_ids[2] = {s->pfile_id, s->gfile_id}, tier_cat[2] = {ZO_MEM_PARAMS, ZO_MEM_GRADS};
  for (int f = 0; f < 2; f++) {
    if (tier_ids[f] < 0) continue;
    struct stat st;
    const char *path = zo_nvme_file_path(s->nv, tier_ids[f]);
    if (stat(path, &st) != 0)
      return zo_error(-errno, "memory report: cannot stat NVMe file %s: %s", path, strerror(errno));
    out->current[N][tier_cat[f]] += (size_t)st.st_size;
    out->peak[N][tier_cat[f]] += (size_t)st.st_size;
    out->used[N] += (size_t)st.st_size;
  }
  out->capacity[N] = out->peak_total[N] = out->used[N];
  return 0;
}

int zo_sched_time_io(struct zo_sched *s, double *seconds) {
  int err = zo_sched_synchronize(s);
  if (err) return err;
  const double t0 = zo_time_s();
  if (s->nvb) {
    /* The step's pipeline without the update: d chunks read ahead, each
     * chunk written back as soon as read, its buffer refilled once the
     * write is done. */
    const int n = s->n_chunks, d = s->nv_depth, nbuf = s->pl.nvme_buffers;
    for (int j = 0; j < d && !err; j++) err = sched_nv_read_async(s, j, &s->nvb[j % nbuf]);
    for (int j = 0; j < n && !err; j++) {
      struct nv_buffer *b = &s->nvb[j % nbuf];
      err = sched_nv_wait_all(s, b->rreq);
      b->reading = false;
      if (!err) err = sched_nv_write_async(s, j, b);
      if (!err && j + d < n) {
        struct nv_buffer *nb = &s->nvb[(j + d) % nbuf];
        if (!(err = sched_nv_drain_writes(s, b)) && !(err = sched_nv_drain_writes(s, nb))) err = sched_nv_read_async(s, j + d, nb);
      }
    }
    for (int b = 0; b < nbuf; b++) {
      int e = sched_nv_buffer_drain(s, &s->nvb[b]);
      if (e && !err) err = e;
    }
  } else if (s->pl.optimizer != ZO_OFFLOAD_NONE) {
    /* Gradients out, parameters in (slot loads: forward and backward of
     * every micro-batch), each on its own stream as in a step. */
    const size_t nb = s->t->numel * sizeof(float), e = s->m->esize;
    CHECK_Q(sched_copy(s, s->overlap ? s->h.stage_res : s->h.grads, s->acc ? s->acc : s->m->grads,
                                s->pl.grads_on_host ? zo_model_grads_numel(s->m) * sizeof(float) : nb,
                                ZO_COPY_D2H, s->d2h));
    for (int u = 0; u < s->U; u++) {
      const struct range r = unit_range(s->t, u);
      void *dev = dev_unit_params(s, u);
      size_t a = r.off, b = r.off + r.numel;
      /* a sharded master or working copy: this rank's part */
      if (!s->h.params || s->pshard) unit_owned(s, u, &a, &b);
      if (b > a) b = a + dev_unit_part(s, u, a - r.off, b - a); /* not a streamed LM head */
      if (dev && b > a)
        CHECK_Q(sched_copy(s, (uint8_t *)dev + (a - r.off) * e,
                                    s->h.params ? host_params_at(s, a) : (void *)master_at(s, a), (b - a) * e,
                                    ZO_COPY_H2D, s->h2d));
      if (s->pl.grads_on_host && u > 0 && u < s->U - 1)
        for (int k = 0; k < s->pl.grad_accum; k++)
          CHECK_Q(sched_copy(s, s->h.stage[0] ? s->h.stage[0] : s->h.grads + r.off, s->m->grad_slots[0],
                                      r.numel * sizeof(float), ZO_COPY_D2H, s->d2h));
      if (!dev && u > 0 && u < s->U - 1) /* a block (unit 0 without a device copy: the embedding on the host) */
        for (int k = 0; k < 2 * s->pl.grad_accum; k++)
          CHECK_Q(sched_copy(s, s->m->param_slots[0], s->pshard ? block_gather_buf(s, 0) : host_params_at(s, r.off),
                                      r.numel * e, ZO_COPY_H2D, s->h2d));
    }
    for (int p = 0; p < s->n_hp; p++) { /* a streamed LM head's pieces, like blocks */
      const struct range r = head_piece(s, p);
      for (int k = 0; k < s->pl.grad_accum; k++)
        CHECK_Q(sched_copy(s, s->h.stage[0] ? s->h.stage[0] : grads_at(s, r.off),
                                    s->m->grad_slots[0], r.numel * sizeof(float), ZO_COPY_D2H, s->d2h));
      for (int k = 0; k < 2 * s->pl.grad_accum; k++)
        CHECK_Q(sched_copy(s, s->m->param_slots[0], head_src(s, r.off),
                                    r.numel * e, ZO_COPY_H2D, s->h2d));
    }
    if (!err) err = s->be->stream_synchronize(s->h2d);
    if (!err) err = s->be->stream_synchronize(s->d2h);
  }
  *seconds = zo_time_s() - t0;
  for (int k = 0; k < s->n_slots; k++) s->slot_owner[k] = -1; /* slot 0 was overwritten */
  sched_nv_reprime(s);
  return err;
}

void zo_sched_trace_counters(const struct zo_sched *s) {
  if (!zo_trace_on()) return;
  const uint64_t now = zo_trace_now();
  zo_trace_counter("device bytes in use",
                   s->m->arena.used + s->opt_arena.used + (s->lora ? s->lora->arena.used : 0), now);
  zo_trace_counter("host bytes in use", s->pool.used, now);
  zo_trace_counter("nvme bytes in use", s->nvme_planned, now);
  /* The bytes issued so far (zo_sched_stats; names zo_trace_summarize reads). */
  zo_trace_counter("h2d bytes issued", atomic_load(&s->h2d_bytes), now);
  zo_trace_counter("d2h bytes issued", atomic_load(&s->d2h_bytes), now);
  zo_trace_counter("nvme read bytes issued", atomic_load(&s->nvme_read_bytes), now);
  zo_trace_counter("nvme write bytes issued", atomic_load(&s->nvme_write_bytes), now);
}
