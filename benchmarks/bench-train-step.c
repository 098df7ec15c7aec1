/* Training-step throughput on the CPU backend: forward, backward, global grad
 * norm and clipping, AdamW, for GPT-2 shapes (124M by default) at B=4, T=256.
 * Prints a table of per-phase times and one machine-readable line
 * `zoffload ms_per_step=... tokens_per_s=...` (median over the timed steps,
 * the first step is warm-up and not timed). Random tokens, seeded. */
#include "zo/adamw.h"
#include "zo/model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void) {
  fprintf(stderr, "usage: bench-train-step [--B 4] [--T 256] [--steps 5] [--threads 0] "
                  "[--layers 12] [--embd 768] [--heads 12] [--vocab 50257]\n");
  exit(2);
}

int main(int argc, char **argv) {
  int B = 4, T = 256, steps = 5, threads = 0;
  struct zo_model_config cfg = {.n_layer = 12, .n_head = 12, .n_embd = 768, .vocab_size = 50257,
                               .max_seq_len = 1024};
  for (int i = 1; i < argc; i++) {
    if (i + 1 >= argc) usage();
    int v = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--B")) B = v;
    else if (!strcmp(argv[i], "--T")) T = v;
    else if (!strcmp(argv[i], "--steps")) steps = v;
    else if (!strcmp(argv[i], "--threads")) threads = v;
    else if (!strcmp(argv[i], "--layers")) cfg.n_layer = v;
    else if (!strcmp(argv[i], "--embd")) cfg.n_embd = v;
    else if (!strcmp(argv[i], "--heads")) cfg.n_head = v;
    else if (!strcmp(argv[i], "--vocab")) cfg.vocab_size = v;
    else usage();
    i++;
  }
  if (B < 1 || T < 1 || steps < 1) usage();
  if (T > cfg.max_seq_len) cfg.max_seq_len = T;

  zo_backend_t be = zo_backend_init("cpu", threads);
  struct zo_model *m = be ? zo_model_init(&cfg, be, B, T) : NULL;
  if (!m) {
    fprintf(stderr, "bench-train-step: %s\n", zo_last_error());
    return 1;
  }
  const size_t n = m->table.numel, BT = (size_t)B * (size_t)T;
  float *host = malloc(n * sizeof(float));
  float *mom = calloc(n, sizeof(float)), *var = calloc(n, sizeof(float));
  int32_t *inputs = malloc(BT * sizeof(int32_t)), *targets = malloc(BT * sizeof(int32_t));
  double *t_step = calloc((size_t)steps, sizeof(double)), *t_fwd = calloc((size_t)steps, sizeof(double)),
         *t_bwd = calloc((size_t)steps, sizeof(double)), *t_opt = calloc((size_t)steps, sizeof(double));
  if (!host || !mom || !var || !inputs || !targets || !t_step || !t_fwd || !t_bwd || !t_opt) {
    fprintf(stderr, "bench-train-step: out of host memory\n");
    return 1;
  }
  zo_model_init_params(m, host, 1337);
  zo_model_upload_params(m, host);
  uint64_t s = 42;
  for (size_t i = 0; i < BT; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    inputs[i] = (int32_t)((s >> 33) % (uint64_t)cfg.vocab_size);
  }
  for (size_t i = 0; i < BT; i++) targets[i] = inputs[(i + 1) % BT];

  zo_stream_t stream;
  if (be->stream_create(&stream)) {
    fprintf(stderr, "bench-train-step: %s\n", zo_last_error());
    return 1;
  }
  struct zo_adamw_hparams hp = {.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                .weight_decay = 0.1f};
  double loss = 0.0;
  printf("GPT-2 L=%d C=%d NH=%d V=%d, %.1fM parameters, B=%d T=%d, %s backend\n", cfg.n_layer,
         cfg.n_embd, cfg.n_head, cfg.vocab_size, (double)n / 1e6, B, T, be->name);
  for (int step = 0; step <= steps; step++) {
    double t0 = zo_time_s();
    zo_model_zero_grad(m, stream);
    /* The training loop's path: the chunked LM head computes each chunk's
     * logits, loss and gradient at once (no logits recomputed in backward). */
    zo_model_forward_train(m, inputs, targets, B, T, 1.0f / (float)BT, stream);
    be->stream_synchronize(stream);
    double t1 = zo_time_s();
    zo_model_backward(m, B, T, 1.0f / (float)BT, stream);
    zo_model_mean_loss(m, targets, B, T, stream, &loss);
    double t2 = zo_time_s();
    double norm = sqrt(zo_sumsq(m->grads, n));
    float coef = zo_clip_coef(norm, 1.0);
    for (int i = 0; i < m->table.n_tensors; i++) {
      const struct zo_tensor_info *ti = &m->table.tensors[i];
      zo_adamw_update((float *)m->params + ti->offset, m->grads + ti->offset, mom + ti->offset,
                      var + ti->offset, ti->numel, &hp, ti->decay, step + 1, coef);
    }
    double t3 = zo_time_s();
    if (step == 0) continue; /* warm-up: first touch of every buffer */
    t_fwd[step - 1] = t1 - t0;
    t_bwd[step - 1] = t2 - t1;
    t_opt[step - 1] = t3 - t2;
    t_step[step - 1] = t3 - t0;
    printf("step %d: loss %.4f, %.1f ms\n", step, loss, 1e3 * (t3 - t0));
  }
  double ms = 1e3 * zo_median(t_step, steps);
  double tps = (double)BT / (ms / 1e3);
  double tflops = zo_model_flops_per_token(&m->cfg, T) * tps / 1e12;
  printf("\n| phase                     | median ms |\n|---------------------------|-----------|\n");
  printf("| forward + LM head fwd/bwd | %9.1f |\n| backward (blocks)         | %9.1f |\n"
         "| AdamW                     | %9.1f |\n| step                      | %9.1f |\n",
         1e3 * zo_median(t_fwd, steps), 1e3 * zo_median(t_bwd, steps), 1e3 * zo_median(t_opt, steps), ms);
  printf("tokens/s %.0f, %.3f TFLOP/s\n", tps, tflops);
  printf("zoffload ms_per_step=%.1f tokens_per_s=%.0f\n", ms, tps);
  be->stream_destroy(stream);
  zo_model_free(m);
  free(host); free(mom); free(var); free(inputs); free(targets);
  free(t_step); free(t_fwd); free(t_bwd); free(t_opt);
  return 0;
}
