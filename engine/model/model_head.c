/* The LM head of a training or inference pass (after the final norm): over
 * row chunks of the final norm's output, or, for an untied head larger than
 * a block (m->head_pieces > 1), in vocabulary pieces (include/engine/zo/model.h,
 * zo_model_head_pieces). Called by engine/model/model.c between unit n_layer's
 * hooks. */
#include "arch.h"

/* The LM head over row chunks of the final norm's output: logits, then with
 * targets the losses, and with backward dlogits in place (dloss applied),
 * the chunk's rows of d(final output) into scratch[1] and its part of the
 * head weight's gradient (accumulated). A row's logits and loss do not
 * depend on the chunking; the weight gradient sums the chunks in order (the
 * chunk size changes only its rounding). */
static void head_chunks(struct zo_model *m, int B, int T, bool targets, bool backward, float dloss,
                        zo_stream_t s) {
  zo_backend_t be = m->backend;
  const int C = m->cfg.n_embd, V = m->cfg.vocab_size, Vp = m->cfg.padded_vocab_size, BT = B * T;
  const enum zo_dtype dt = m->dtype;
  const int hw = m->arch->head_tensor(&m->cfg);
  for (int r = 0; r < BT; r += m->head_rows) {
    const int n = BT - r < m->head_rows ? BT - r : m->head_rows;
    const void *x = zo_model_at(m, m->fin[0], (size_t)r * (size_t)C);
    be->matmul_forward(m->logits, x, m->pv[hw], NULL, n, C, Vp, dt, s);
    if (targets)
      be->crossentropy_forward(m->losses + r, backward ? m->logits : NULL, m->logits, m->targets + r,
                               backward ? dloss : 0.0f, n, V, Vp, dt, s);
    if (backward)
      be->matmul_backward(zo_model_at(m, m->scratch[1], (size_t)r * (size_t)C), m->gv[hw], NULL, m->logits, x,
                          m->pv[hw], n, C, Vp, dt, s);
    m->head_row0 = r;
  }
}

/* ---- the LM head in vocabulary pieces (m->head_pieces > 1) ---- */

int zo_model_piece_rows(const struct zo_model *m, int p) {
  const int Vp = m->cfg.padded_vocab_size, r0 = p * m->head_piece_rows;
  return Vp - r0 < m->head_piece_rows ? Vp - r0 : m->head_piece_rows;
}

/* head_w, head_g at piece p of the head's views, then the hook. */
static void piece_begin(struct zo_model *m, int p, enum zo_model_phase ph, zo_stream_t s) {
  const int hw = m->arch->head_tensor(&m->cfg);
  const size_t off = (size_t)p * (size_t)m->head_piece_rows * (size_t)m->cfg.n_embd;
  m->head_w = m->pv[hw] ? zo_model_at(m, m->pv[hw], off) : NULL;
  m->head_g = m->gv[hw] ? m->gv[hw] + off : NULL;
  if (m->hooks && m->hooks->head_begin) m->hooks->head_begin(m->hooks->ctx, m, p, ph, s);
  ZO_ASSERT(m->head_w && (ph == ZO_MODEL_FORWARD || m->head_g || m->layout.frozen)); /* frozen: no gradient */
}

static void piece_end(struct zo_model *m, int p, enum zo_model_phase ph, zo_stream_t s) {
  if (m->hooks && m->hooks->head_end) m->hooks->head_end(m->hooks->ctx, m, p, ph, s);
}

/* Every row's logits, piece by piece: each piece's GEMM over a row chunk
 * into head_tmp, copied into its columns. */
static void pieces_forward(struct zo_model *m, int B, int T, zo_stream_t s) {
  zo_backend_t be = m->backend;
  const int C = m->cfg.n_embd, Vp = m->cfg.padded_vocab_size, BT = B * T;
  const size_t e = m->esize;
  for (int p = 0; p < m->head_pieces; p++) {
    piece_begin(m, p, ZO_MODEL_FORWARD, s);
    const int np = zo_model_piece_rows(m, p);
    for (int r = 0; r < BT; r += m->head_rows) {
      const int n = BT - r < m->head_rows ? BT - r : m->head_rows;
      be->matmul_forward(m->head_tmp, zo_model_at(m, m->fin[0], (size_t)r * (size_t)C), m->head_w, NULL, n, C, np,
                         m->dtype, s);
      ZO_ASSERT(be->memcpy2d_async(zo_model_at(m, m->logits, (size_t)r * Vp + (size_t)p * m->head_piece_rows),
                                   (size_t)Vp * e, m->head_tmp, (size_t)np * e, (size_t)np * e, (size_t)n, s) == 0);
    }
    piece_end(m, p, ZO_MODEL_FORWARD, s);
  }
  m->head_row0 = 0;
}

/* The cross-entropy over whole rows; with backward dlogits in place. */
static void pieces_loss(struct zo_model *m, int B, int T, bool backward, float dloss, zo_stream_t s) {
  m->backend->crossentropy_forward(m->losses, backward ? m->logits : NULL, m->logits, m->targets,
                                   backward ? dloss : 0.0f, B * T, m->cfg.vocab_size, m->cfg.padded_vocab_size,
                                   m->dtype, s);
}

/* The pieces in reverse: each chunk's dlogits columns into head_tmp, its
 * part of d(final output) into scratch[1] (the last piece) or head_dx then
 * added, its weight gradient accumulated. */
static void pieces_backward(struct zo_model *m, int B, int T, zo_stream_t s) {
  zo_backend_t be = m->backend;
  const int C = m->cfg.n_embd, Vp = m->cfg.padded_vocab_size, BT = B * T, P = m->head_pieces;
  const size_t e = m->esize;
  for (int p = P - 1; p >= 0; p--) {
    piece_begin(m, p, ZO_MODEL_BACKWARD, s);
    const int np = zo_model_piece_rows(m, p);
    for (int r = 0; r < BT; r += m->head_rows) {
      const int n = BT - r < m->head_rows ? BT - r : m->head_rows;
      void *dx = zo_model_at(m, m->scratch[1], (size_t)r * (size_t)C);
      ZO_ASSERT(be->memcpy2d_async(m->head_tmp, (size_t)np * e,
                                   zo_model_at(m, m->logits, (size_t)r * Vp + (size_t)p * m->head_piece_rows),
                                   (size_t)Vp * e, (size_t)np * e, (size_t)n, s) == 0);
      be->matmul_backward(p == P - 1 ? dx : m->head_dx, m->head_g, NULL, m->head_tmp,
                          zo_model_at(m, m->fin[0], (size_t)r * (size_t)C), m->head_w, n, C, np, m->dtype, s);
      if (p != P - 1) be->residual_forward(dx, dx, m->head_dx, (size_t)n * (size_t)C, m->dtype, s);
    }
    piece_end(m, p, ZO_MODEL_BACKWARD, s);
  }
}

void zo_model_head_forward(struct zo_model *m, int B, int T, bool targets, zo_stream_t s) {
  if (m->head_pieces > 1) {
    pieces_forward(m, B, T, s);
    if (targets) pieces_loss(m, B, T, false, 0.0f, s);
  } else {
    head_chunks(m, B, T, targets, false, 0.0f, s);
  }
}

void zo_model_head_forward_train(struct zo_model *m, int B, int T, zo_stream_t s) {
  if (m->head_pieces > 1) pieces_forward(m, B, T, s); /* a whole head runs fused in the backward */
}

void zo_model_head_backward(struct zo_model *m, int B, int T, float dloss, zo_stream_t s) {
  if (m->head_pieces > 1) { /* the logits of the forward, every row */
    pieces_loss(m, B, T, true, dloss, s);
    pieces_backward(m, B, T, s);
  } else {
    head_chunks(m, B, T, true, true, dloss, s);
  }
}
