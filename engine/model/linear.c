/* The model's linear entry (engine/model/linear.h): a projection with its
 * LoRA adapters, forward and backward, over the backend's matmul and strided
 * scaled add. */
#include "linear.h"

#include "arch.h"

size_t zo_linear_work_numel(int N, int C, int r_max, int out_max) {
  /* t = x A^T (N, r), u = t B^T (N, out) or du, dt (N, r), dx_a (N, C) */
  return (size_t)N * (2 * (size_t)r_max + (size_t)out_max + (size_t)C);
}

/* The workspace's four views for p (element offsets in dt). */
struct work {
  void *t, *u, *dt, *dx;
};

static struct work work_views(const struct zo_linear *p, int N, enum zo_dtype dt) {
  int r_max = 0, out_max = 0;
  for (int i = 0; i < p->n_adapters; i++) {
    if (p->adapters[i].r > r_max) r_max = p->adapters[i].r;
    if (p->adapters[i].out > out_max) out_max = p->adapters[i].out;
  }
  for (int i = 0; i < p->n_q4; i++)
    if (p->q4[i].w.OC > out_max) out_max = p->q4[i].w.OC;
  const size_t es = zo_dtype_size(dt), n = (size_t)N;
  char *w = p->work;
  struct work v;
  v.t = w;
  v.u = w + n * (size_t)r_max * es;
  v.dt = w + n * ((size_t)r_max + (size_t)out_max) * es;
  v.dx = w + n * (2 * (size_t)r_max + (size_t)out_max) * es;
  return v;
}

/* A 4-bit base's parts tile rows [0, OC) in order, each C wide; the base is
 * frozen. */
static void q4_check(const struct zo_linear *p) {
  ZO_ASSERT(p->weight == NULL && p->dweight == NULL && p->dbias == NULL);
  int row = 0;
  for (int i = 0; i < p->n_q4; i++) {
    ZO_ASSERT(p->q4[i].row0 == row && p->q4[i].w.C == p->C && p->q4[i].w.OC > 0);
    row += p->q4[i].w.OC;
  }
  ZO_ASSERT(row == p->OC);
}

static void q4_forward(zo_backend_t be, const struct zo_linear *p, void *out, const void *inp, int N,
                       enum zo_dtype dt, zo_stream_t s) {
  q4_check(p);
  if (p->n_q4 == 1) {
    be->matmul_q4_forward(out, inp, p->q4[0].w, p->bias, N, dt, s);
    return;
  }
  const size_t es = zo_dtype_size(dt);
  const struct work w = work_views(p, N, dt);
  ZO_ASSERT(be->memset_async(out, 0, (size_t)N * (size_t)p->OC * es, s) == 0);
  for (int i = 0; i < p->n_q4; i++) {
    const struct zo_linear_q4 *q = &p->q4[i];
    const void *bias = p->bias ? (const char *)p->bias + (size_t)q->row0 * es : NULL;
    be->matmul_q4_forward(w.u, inp, q->w, bias, N, dt, s);
    be->scaled_add_forward(out, w.u, 1.0f, N, q->w.OC, p->OC, q->row0, dt, s);
  }
}

/* dinp = sum over the parts of dout[:, rows] W_part, in part order. */
static void q4_backward(zo_backend_t be, const struct zo_linear *p, void *dinp, const void *dout, int N,
                        enum zo_dtype dt, zo_stream_t s) {
  q4_check(p);
  if (!dinp) return;
  if (p->n_q4 == 1) {
    be->matmul_q4_backward_dx(dinp, dout, p->q4[0].w, N, dt, s);
    return;
  }
  const struct work w = work_views(p, N, dt);
  for (int i = 0; i < p->n_q4; i++) {
    const struct zo_linear_q4 *q = &p->q4[i];
    be->scaled_add_backward(w.u, dout, 1.0f, N, q->w.OC, p->OC, q->row0, dt, s);
    be->matmul_q4_backward_dx(i == 0 ? dinp : w.dx, w.u, q->w, N, dt, s);
    if (i > 0) be->residual_forward(dinp, dinp, w.dx, (size_t)N * (size_t)p->C, dt, s);
  }
}

void zo_linear_forward(zo_backend_t be, const struct zo_linear *p, void *out, const void *inp, int N, enum zo_dtype dt,
                       zo_stream_t s) {
  if (p->n_q4 > 0)
    q4_forward(be, p, out, inp, N, dt, s);
  else
    be->matmul_forward(out, inp, p->weight, p->bias, N, p->C, p->OC, dt, s);
  if (p->n_adapters == 0) return;
  const struct work w = work_views(p, N, dt);
  for (int i = 0; i < p->n_adapters; i++) {
    const struct zo_linear_adapter *a = &p->adapters[i];
    be->matmul_forward(w.t, inp, a->a, NULL, N, p->C, a->r, dt, s);
    be->matmul_forward(w.u, w.t, a->b, NULL, N, a->r, a->out, dt, s);
    be->scaled_add_forward(out, w.u, a->scale, N, a->out, p->OC, a->row0, dt, s);
  }
}

void zo_linear_backward(zo_backend_t be, const struct zo_linear *p, void *dinp, const void *dout, const void *inp,
                        int N, enum zo_dtype dt, zo_stream_t s) {
  if (p->n_q4 > 0)
    q4_backward(be, p, dinp, dout, N, dt, s);
  else
    be->matmul_backward(dinp, p->dweight, p->dbias, dout, inp, p->weight, N, p->C, p->OC, dt, s);
  if (p->n_adapters == 0) return;
  const struct work w = work_views(p, N, dt);
  for (int i = 0; i < p->n_adapters; i++) {
    const struct zo_linear_adapter *a = &p->adapters[i];
    /* du = scale * dy[:, row0:row0+out]; t recomputed; dt = du B, dB += du^T t;
     * dx_a = dt A, dA += dt^T x; dinp += dx_a. */
    be->matmul_forward(w.t, inp, a->a, NULL, N, p->C, a->r, dt, s);
    be->scaled_add_backward(w.u, dout, a->scale, N, a->out, p->OC, a->row0, dt, s);
    be->matmul_backward(w.dt, a->db, NULL, w.u, w.t, a->b, N, a->r, a->out, dt, s);
    be->matmul_backward(dinp ? w.dx : NULL, a->da, NULL, w.dt, inp, a->a, N, p->C, a->r, dt, s);
    if (dinp) be->residual_forward(dinp, dinp, w.dx, (size_t)N * (size_t)p->C, dt, s);
  }
}

static struct zo_linear model_linear(const struct zo_model *m, int tensor, int bias, int C, int OC) {
  const struct zo_model_adapters *ad = m->adapters;
  const bool frozen = ad && ad->frozen_base;
  struct zo_linear p = {
      .weight = m->pv[tensor],
      .bias = bias >= 0 ? m->pv[bias] : NULL,
      .dweight = frozen ? NULL : m->gv[tensor],
      .dbias = frozen || bias < 0 ? NULL : m->gv[bias],
      .C = C,
      .OC = OC,
  };
  if (ad) {
    p.n_adapters = ad->first[tensor + 1] - ad->first[tensor];
    p.adapters = ad->list + ad->first[tensor];
    p.work = ad->work;
  }
  return p;
}

void zo_model_linear_forward(const struct zo_model *m, int tensor, int bias, void *out, const void *inp, int N, int C,
                             int OC, zo_stream_t s) {
  const struct zo_linear p = model_linear(m, tensor, bias, C, OC);
  zo_linear_forward(m->backend, &p, out, inp, N, m->dtype, s);
}

void zo_model_linear_backward(const struct zo_model *m, int tensor, int bias, void *dinp, const void *dout,
                              const void *inp, int N, int C, int OC, zo_stream_t s) {
  const struct zo_linear p = model_linear(m, tensor, bias, C, OC);
  zo_linear_backward(m->backend, &p, dinp, dout, inp, N, m->dtype, s);
}
