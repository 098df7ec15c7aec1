/* The layer-major order with everything on the device (issue 49, piece 2):
 * a training step's forward and backward for K micro-batches over K
 * contexts, unit by unit across the micro-batches -- the embedding for all
 * K, block l's forward for all K before block l + 1's, the head's forward
 * and backward micro-batch by micro-batch, the blocks' backward in reverse
 * for all K, the embedding's backward for all K. Reachable from tests only
 * (engine.schedule = layer_major is still refused by the planner).
 * Invariant: the accumulated gradient has today's bits. Today (the
 * scheduler's hooks, engine/sched/hooks.c) each micro-batch's gradient is
 * computed into zeroed memory -- the first micro-batch's into the
 * accumulator, the others' into the model's gradient buffer -- and added
 * into the accumulator whole, in micro-batch order. Here each unit's range is
 * computed the same way and added as soon as its micro-batch's part is
 * complete: a block's range after its backward, the tail range after the
 * head's backward, the head range (the embedding) after the embedding's
 * backward. A tied head's gradient has two parts per micro-batch, the head's
 * and the lookup's, summed in that order before the add: each micro-batch
 * after the first keeps its head range apart (the caller's head_grads) until
 * its lookup's part joins it. Does not run hooks, slots, host checkpoints,
 * the head in pieces or a frozen base: those are refused by name. */
#include <errno.h>

#include "zo/model.h"

size_t zo_model_layer_major_head_grads_numel(const struct zo_model *m, int K) {
  /* Only a tied head writes the head range before the embedding's backward. */
  return K > 1 && m->cfg.tie_embeddings ? (size_t)(K - 1) * m->head_numel : 0;
}

static int refuse(const char *what) {
  return zo_error(-ENOTSUP, "the layer-major order (issue 49) runs everything on the device with every block "
                            "checkpointed; %s is not built",
                  what);
}

static int check(const struct zo_model *m, int K, const struct zo_model_ctx *cs, const float *head_grads) {
  const struct zo_model_layout *lo = &m->layout;
  if (!m->training) return refuse("a model without training buffers");
  if (lo->frozen) return refuse("a frozen base (LoRA: layout.frozen = true)");
  if (lo->param_slots || lo->grad_slots)
    return zo_error(-ENOTSUP, "the layer-major order with parameter or gradient slots (layout.param_slots = %d, "
                              "grad_slots = %d) is not built: it needs 0 and 0, everything on the device",
                    lo->param_slots, lo->grad_slots);
  if (m->hooks) return refuse("a model with hooks (the scheduler's)");
  if (lo->ckpt_on_host) return refuse("checkpoints on the host (layout.ckpt_on_host = true)");
  if (lo->ckpt_blocks != m->cfg.n_layer)
    return zo_error(-ENOTSUP, "the layer-major order needs every block checkpointed: layout.ckpt_blocks = %d, "
                              "valid: %d (model.n_layer)",
                    lo->ckpt_blocks, m->cfg.n_layer);
  if (m->head_pieces > 1) return refuse("the LM head in pieces");
  if (K < 1) return zo_error(-EINVAL, "the layer-major order: K = %d micro-batches, valid: K >= 1", K);
  if (K > 1 && !m->grads_acc)
    return zo_error(-EINVAL, "the layer-major order over K = %d micro-batches needs the gradient accumulator "
                             "(layout.grad_accum = true)",
                    K);
  if (zo_model_layer_major_head_grads_numel(m, K) > 0 && !head_grads)
    return zo_error(-EINVAL, "the layer-major order over K = %d micro-batches with a tied head needs head_grads "
                             "(zo_model_layer_major_head_grads_numel elements)",
                    K);
  for (int k = 0; k < K; k++)
    for (int j = 0; j < k; j++)
      if (&cs[j] == &cs[k] || cs[j].block_in[1] == cs[k].block_in[1])
        return zo_error(-EINVAL, "the layer-major order: contexts %d and %d share their block inputs", j, k);
  return 0;
}

/* acc[0, n) += micro[0, n): the one fp32 rounding today's whole add makes. */
static void add(struct zo_model *m, float *acc, const float *micro, size_t n, zo_stream_t s) {
  m->backend->residual_forward(acc, acc, micro, n, ZO_F32, s);
}

static void zero(struct zo_model *m, float *p, size_t n, zo_stream_t s) {
  ZO_ASSERT(m->backend->memset_async(p, 0, n * sizeof(float), s) == 0);
}

int zo_model_train_layer_major(struct zo_model *m, struct zo_model_ctx *cs, int K, const int32_t *const *inputs,
                               const int32_t *const *targets, int B, int T, float dloss, float *head_grads,
                               zo_stream_t s) {
  int err = check(m, K, cs, head_grads);
  if (err) return err;
  const struct zo_tensor_table *t = &m->table;
  const int L = m->cfg.n_layer;
  const size_t hn = m->head_numel, tn = m->tail_numel, toff = t->numel - tn, ln = t->layer_numel;
  float *acc = K > 1 ? m->grads_acc : m->grads, *micro = m->grads;
  zero(m, acc, t->numel, s);
  for (int k = 0; k < K; k++) zo_model_unit_embed_forward(m, &cs[k], inputs[k], targets[k], B, T, true, s);
  for (int l = 0; l < L; l++)
    for (int k = 0; k < K; k++) zo_model_unit_block_forward(m, &cs[k], l, s);
  for (int k = 0; k < K; k++) {
    /* The head range of micro-batch k: the head's part (tied) then the lookup's. */
    float *head = k == 0 ? acc : m->cfg.tie_embeddings ? head_grads + (size_t)(k - 1) * hn : micro;
    float *tail = k == 0 ? acc + toff : micro + toff;
    if (k > 0) zero(m, tail, tn, s);
    if (k > 0 && m->cfg.tie_embeddings) zero(m, head, hn, s);
    zo_model_bind_resident_grads(m, head, tail);
    zo_model_unit_head_forward(m, &cs[k], s);
    zo_model_unit_head_backward(m, &cs[k], dloss, s);
    if (k > 0) add(m, acc + toff, tail, tn, s);
  }
  for (int l = L - 1; l >= 0; l--)
    for (int k = 0; k < K; k++) {
      float *g = (k == 0 ? acc : micro) + t->layer_offset[l];
      if (k > 0) zero(m, g, ln, s);
      zo_model_bind_block(m, l, NULL, g);
      zo_model_unit_block_backward(m, &cs[k], l, s);
      if (k > 0) add(m, acc + t->layer_offset[l], g, ln, s);
    }
  for (int k = 0; k < K; k++) {
    float *head = k == 0 ? acc : m->cfg.tie_embeddings ? head_grads + (size_t)(k - 1) * hn : micro;
    if (k > 0 && !m->cfg.tie_embeddings) zero(m, head, hn, s);
    zo_model_bind_resident_grads(m, head, micro + toff);
    zo_model_unit_embed_backward(m, &cs[k], s);
    if (k > 0) add(m, acc, head, hn, s);
  }
  /* Back to the views today's passes expect: the model's gradient buffer. */
  zo_model_bind_resident_grads(m, m->grads, m->grads + toff);
  for (int l = 0; l < L; l++) zo_model_bind_block(m, l, NULL, m->grads + t->layer_offset[l]);
  return 0;
}
