/* Dropout in training (model.dropout; Philox masks, zo/philox.h): 20 steps
 * of a small model with dropout 0.2 give bit-identical losses and final
 * weights in every offload placement, with activation checkpointing (the
 * recomputed blocks regenerate their masks), with checkpoints kept on the
 * host, and across a checkpoint resume, each against the all-on-device run
 * with dropout; model.dropout = 0 is bit-identical to a run without the key,
 * and 0.2 changes the losses (the masks are applied). GPT-2 and a Llama with
 * grouped-query attention, in fp32 and bf16. The gradient with dropout
 * against a central difference of the dropped-out loss, and eval without
 * dropout (test_gradient_fd). Run twice, the second time (fp32) with
 * ZO_STREAM_DELAY_US=200 (random sleeps before every CPU stream task). NVMe cases skip (the reason
 * printed) when the store cannot be created. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo/fsutil.h"
#include "zo/hf.h"
#include "zo/train.h"
#include "zo_engine_test.h"

static struct zo_etest_files fx;
static const char *precision; /* NULL: fp32, else the --set that enables bf16 */
static const char *dropout;   /* the model.dropout --set, NULL: none */

static const char *const gpt2_model[] = {ZO_ETEST_GPT2_SMALL};
static const char *const llama_model[] = {ZO_ETEST_LLAMA_SMALL};
static const struct zo_etest_arch archs[] = {ZO_ETEST_ARCH("gpt2", gpt2_model),
                                             ZO_ETEST_ARCH("llama", llama_model)};
static const struct zo_etest_arch *arch;

#define N_STEPS 20

static int load(struct zo_config *cfg, const char *const *extra, int n_extra) {
  const char *own[] = {precision, dropout};
  return zo_etest_placement_load(cfg, &fx, arch, own, ZO_ARRAY_LEN(own), extra, n_extra);
}

static int train(const char *name, const char *const *extra, int n_extra, struct zo_etest_run *r) {
  return zo_etest_train(load, fx.tmpdir, name, extra, n_extra, N_STEPS, NULL, r);
}

static const char *run_name(const char *name) { return zo_etest_run_name(arch, precision, name); }

static struct zo_etest_run ref; /* all on the device, dropout 0.2 */

static int test_device_reference(void) {
  free(ref.params);
  ref.params = NULL;
  dropout = "model.dropout=0.2";
  CHECK(train(run_name("drop-device"), NULL, 0, &ref) == 0);
  CHECK(ref.losses[N_STEPS - 1] < ref.losses[0]);
  return 0;
}

/* p = 0 runs no op: bit-identical to a config without the key; 0.2 differs. */
static int test_zero_is_no_dropout(void) {
  struct zo_etest_run none, zero;
  dropout = NULL;
  CHECK(train(run_name("drop-none"), NULL, 0, &none) == 0);
  dropout = "model.dropout=0";
  CHECK(train(run_name("drop-zero"), NULL, 0, &zero) == 0);
  dropout = "model.dropout=0.2";
  int ret = zo_etest_same_run(run_name("drop-zero"), &zero, &none, "no model.dropout", 0, N_STEPS);
  int differ = 0;
  for (int i = 0; i < N_STEPS; i++) differ += none.losses[i] != ref.losses[i];
  if (differ < N_STEPS - 1) {
    fprintf(stderr, "  dropout 0.2 changed only %d of %d losses\n", differ, N_STEPS);
    ret = 1;
  }
  free(none.params);
  free(zero.params);
  return ret;
}

static int check_same(const char *name, const char *const *sets, int n_sets) {
  struct zo_etest_run r;
  const int ret = zo_etest_train_same(load, fx.tmpdir, run_name(name), sets, n_sets, N_STEPS, &ref,
                                      "all-device with dropout", &r);
  free(r.params);
  return ret;
}

static int test_optimizer_cpu_stage2(void) {
  const char *s[] = {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu"};
  return check_same("drop-opt-cpu-s2", s, ZO_ARRAY_LEN(s));
}

static int test_params_cpu_optimizer_cpu(void) {
  const char *s[] = {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu",
                     "zero_optimization.offload_param.device=cpu"};
  return check_same("drop-param-cpu-opt-cpu", s, ZO_ARRAY_LEN(s));
}

static int test_params_cpu_optimizer_nvme(void) {
  if (!fx.have_nvme) return 77;
  const char *s[] = {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=nvme",
                     "zero_optimization.offload_param.device=cpu",
                     "zero_optimization.offload_optimizer.buffer_count=2"};
  return check_same("drop-param-cpu-opt-nvme", s, ZO_ARRAY_LEN(s));
}

/* Recomputed blocks draw their masks again from the counter. */
static int test_activation_checkpointing(void) {
  const char *s[] = {"activation_checkpointing.enabled=true"};
  return check_same("drop-ckpt", s, ZO_ARRAY_LEN(s));
}

static int test_activation_checkpointing_on_host(void) {
  const char *s[] = {"activation_checkpointing.enabled=true", "activation_checkpointing.cpu_checkpointing=true",
                     "zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu",
                     "zero_optimization.offload_param.device=cpu"};
  return check_same("drop-ckpt-host", s, ZO_ARRAY_LEN(s));
}

/* Steps 11..20 after a resume from step 10 draw the masks the uninterrupted
 * run drew. */
static int test_checkpoint_resume(void) {
  return zo_etest_checkpoint_resume(load, fx.tmpdir, run_name("drop"), NULL, 0, N_STEPS, &ref, NULL);
}

/* The gradient with dropout is the gradient of the dropped-out loss: a
 * directional central difference of the mean loss (the same masks: same
 * seed and pass) along a random +-1 direction equals g . d, on a small fp32
 * model at p = 0.5 (GPT-2's three sites; Llama's the same). A backward that
 * ignored the masks would miss by far more than the tolerance: checked too,
 * against the no-dropout gradient's g . d. */
static int dropout_grad_dot(struct zo_model *m, const float *params, const float *dir, const int32_t *in,
                            const int32_t *tg, int B, int T, bool active, double *gd, double *loss) {
  zo_backend_t be = m->backend;
  const size_t n = m->table.numel;
  float *g = malloc(n * sizeof(float));
  CHECK(g);
  CHECK(zo_model_upload_params(m, params) == 0);
  zo_model_set_dropout(m, 4242, 7);
  zo_model_zero_grad(m, NULL);
  const float dloss = 1.0f / (float)(B * T);
  if (active) {
    zo_model_forward_train(m, in, tg, B, T, dloss, NULL);
  } else {
    zo_model_forward(m, in, tg, B, T, NULL);
  }
  CHECK(zo_model_mean_loss(m, tg, B, T, NULL, loss) == 0);
  zo_model_backward(m, B, T, dloss, NULL);
  CHECK(be->memcpy_async(g, m->grads, n * sizeof(float), ZO_COPY_D2H, NULL) == 0);
  CHECK(be->stream_synchronize(NULL) == 0);
  *gd = 0.0;
  for (size_t i = 0; i < n; i++) *gd += (double)g[i] * dir[i];
  free(g);
  return 0;
}

static int dropped_loss(struct zo_model *m, const float *params, const int32_t *in, const int32_t *tg, int B, int T,
                        double *loss) {
  CHECK(zo_model_upload_params(m, params) == 0);
  zo_model_set_dropout(m, 4242, 7);
  zo_model_forward_train(m, in, tg, B, T, 1.0f / (float)(B * T), NULL);
  CHECK(zo_model_mean_loss(m, tg, B, T, NULL, loss) == 0);
  return 0;
}

static int test_gradient_fd(void) {
  enum { B = 2, T = 8 };
  struct zo_model_config mc =
      arch == &archs[0]
          ? (struct zo_model_config){.arch = ZO_ARCH_GPT2, .n_layer = 2, .n_head = 2, .n_embd = 16, .vocab_size = 64,
                                     .max_seq_len = T}
          : (struct zo_model_config){.arch = ZO_ARCH_LLAMA, .n_layer = 2, .n_head = 4, .n_kv_head = 2,
                                     .n_embd = 16, .intermediate_size = 24, .vocab_size = 64, .max_seq_len = T};
  CHECK(zo_model_config_check(&mc) == 0);
  mc.embd_pdrop = mc.attn_pdrop = mc.resid_pdrop = 0.5f;
  struct zo_model *m = zo_model_init(&mc, zo_backend_cpu(), B, T);
  CHECK(m);
  const size_t n = m->table.numel;
  float *p = malloc(n * sizeof(float)), *q = malloc(n * sizeof(float)), *dir = malloc(n * sizeof(float));
  CHECK(p && q && dir);
  zo_model_init_params(m, p, 5);
  zo_rng_seed(77);
  for (size_t i = 0; i < n; i++) dir[i] = zo_rng_uniform() < 0.5 ? -1.0f : 1.0f;
  int32_t in[B * T], tg[B * T];
  for (int i = 0; i < B * T; i++) in[i] = (int32_t)(zo_rng_uniform() * 64), tg[i] = (int32_t)(zo_rng_uniform() * 64);
  double gd, gd_plain, l0, lp, lm;
  CHECK(dropout_grad_dot(m, p, dir, in, tg, B, T, true, &gd, &l0) == 0);
  CHECK(dropout_grad_dot(m, p, dir, in, tg, B, T, false, &gd_plain, &l0) == 0);
  const double eps = 5e-4;
  for (size_t i = 0; i < n; i++) q[i] = p[i] + (float)eps * dir[i];
  CHECK(dropped_loss(m, q, in, tg, B, T, &lp) == 0);
  for (size_t i = 0; i < n; i++) q[i] = p[i] - (float)eps * dir[i];
  CHECK(dropped_loss(m, q, in, tg, B, T, &lm) == 0);
  /* The difference converges to 1e-4 of the value from eps 6e-4 down (measured). */
  const double fd = (lp - lm) / (2 * eps), tol = 5e-3 * fabs(fd) + 1e-4;
  printf("  %s: d loss along d: central difference %.6f, backward %.6f (without dropout %.6f)\n", arch->name, fd,
         gd, gd_plain);
  int ret = 0;
  if (!(fabs(fd - gd) <= tol)) {
    fprintf(stderr, "  backward with dropout %.6f, central difference %.6f (tolerance %.2g)\n", gd, fd, tol);
    ret = 1;
  }
  if (!(fabs(fd - gd_plain) > 10 * tol)) {
    fprintf(stderr, "  the no-dropout gradient %.6f is as close: the check cannot tell\n", gd_plain);
    ret = 1;
  }
  /* Eval (zo_model_forward) runs without dropout: the loss of a model
   * without any, bit for bit. */
  struct zo_model_config mc0 = mc;
  mc0.embd_pdrop = mc0.attn_pdrop = mc0.resid_pdrop = 0.0f;
  struct zo_model *m0 = zo_model_init(&mc0, zo_backend_cpu(), B, T);
  double l_eval0, l_eval;
  CHECK(m0 && zo_model_upload_params(m0, p) == 0 && zo_model_upload_params(m, p) == 0);
  zo_model_forward(m0, in, tg, B, T, NULL);
  CHECK(zo_model_mean_loss(m0, tg, B, T, NULL, &l_eval0) == 0);
  zo_model_forward(m, in, tg, B, T, NULL);
  CHECK(zo_model_mean_loss(m, tg, B, T, NULL, &l_eval) == 0);
  if (memcmp(&l_eval, &l_eval0, sizeof l_eval) != 0) {
    fprintf(stderr, "  eval loss with dropout configured %.9g, without %.9g\n", l_eval, l_eval0);
    ret = 1;
  }
  zo_model_free(m0);
  free(p), free(q), free(dir);
  zo_model_free(m);
  return ret;
}

/* Writes text to <tmpdir>/<sub>/config.json. */
static int write_config(const char *sub, const char *text, char *dir, size_t size) {
  snprintf(dir, size, "%s/%s", fx.tmpdir, sub);
  char path[600];
  snprintf(path, sizeof path, "%s/config.json", dir);
  CHECK(zo_mkdir_p(dir, 0755) == 0);
  CHECK(zo_test_write_file(path, text) == 0);
  return 0;
}

/* The imported rates: GPT-2's three, Llama's attention_dropout; out of
 * range refused naming the key; model.hf_dropout takes them, model.dropout
 * otherwise; hf_dropout without init_from refused naming both keys. */
static int test_hf_rates(void) {
  char g[400], l[400], bad[400], set[500];
  CHECK(write_config("hf-gpt2", "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_head\": 2, \"n_embd\": 16, "
                                "\"vocab_size\": 64, \"n_positions\": 16, \"embd_pdrop\": 0.125, "
                                "\"attn_pdrop\": 0.25, \"resid_pdrop\": 0.375}", g, sizeof g) == 0);
  CHECK(write_config("hf-llama", "{\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"num_attention_heads\": "
                                 "2, \"hidden_size\": 16, \"intermediate_size\": 24, \"vocab_size\": 64, "
                                 "\"max_position_embeddings\": 16, \"attention_dropout\": 0.5}", l, sizeof l) == 0);
  CHECK(write_config("hf-bad", "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_head\": 2, \"n_embd\": 16, "
                               "\"vocab_size\": 64, \"n_positions\": 16, \"resid_pdrop\": 1.5}", bad, sizeof bad) == 0);
  struct zo_model_config mc;
  CHECK(zo_model_config_from_pretrained(g, 0, &mc) == 0);
  CHECK(mc.embd_pdrop == 0.125f && mc.attn_pdrop == 0.25f && mc.resid_pdrop == 0.375f);
  CHECK(zo_model_config_from_pretrained(l, 0, &mc) == 0);
  CHECK(mc.attn_pdrop == 0.5f && mc.embd_pdrop == 0.0f && mc.resid_pdrop == 0.0f);
  CHECK(zo_model_config_from_pretrained(bad, 0, &mc) == -EINVAL);
  CHECK(strstr(zo_last_error(), "resid_pdrop") && strstr(zo_last_error(), "[0, 1)"));
  struct zo_config cfg;
  snprintf(set, sizeof set, "model.init_from=%s", g);
  const char *imp[] = {set, "model.hf_dropout=true", "data.seq_len=8"};
  CHECK(zo_etest_config_load(&cfg, imp, 3, NULL, 0) == 0);
  CHECK(zo_train_model_config(&cfg, &mc) == 0);
  zo_config_free(&cfg);
  CHECK(mc.embd_pdrop == 0.125f && mc.attn_pdrop == 0.25f && mc.resid_pdrop == 0.375f);
  const char *own[] = {set, "model.dropout=0.0625", "data.seq_len=8"};
  CHECK(zo_etest_config_load(&cfg, own, 3, NULL, 0) == 0);
  CHECK(zo_train_model_config(&cfg, &mc) == 0);
  zo_config_free(&cfg);
  CHECK(mc.embd_pdrop == 0.0625f && mc.attn_pdrop == 0.0625f && mc.resid_pdrop == 0.0625f);
  const char *alone[] = {"model.hf_dropout=true"};
  CHECK(zo_etest_config_load(&cfg, alone, 1, NULL, 0) == 0);
  CHECK(zo_train_model_config(&cfg, &mc) == -EINVAL);
  zo_config_free(&cfg);
  CHECK(strstr(zo_last_error(), "model.hf_dropout") && strstr(zo_last_error(), "model.init_from"));
  const char *range[] = {"model.dropout=1"};
  CHECK(zo_etest_config_load(&cfg, range, 1, NULL, 0) != 0);
  CHECK(strstr(zo_last_error(), "model.dropout"));
  return 0;
}

int main(int argc, char **argv) {
  const bool delay = zo_etest_delay_mode();
  if (zo_etest_files_init(&fx, "dropout")) return 1;
  static const struct zo_test tests[] = {
      ZO_TEST(device_reference),
      ZO_TEST(zero_is_no_dropout),
      ZO_TEST(optimizer_cpu_stage2),
      ZO_TEST(params_cpu_optimizer_cpu),
      ZO_TEST(params_cpu_optimizer_nvme),
      ZO_TEST(activation_checkpointing),
      ZO_TEST(activation_checkpointing_on_host),
      ZO_TEST(checkpoint_resume),
  };
  static const struct zo_test once[] = {ZO_TEST(gradient_fd), ZO_TEST(hf_rates)};
  static const char *const precisions[] = {NULL, "bf16.enabled=true"};
  struct zo_test_counts counts = {0, 0, 0};
  for (size_t a = 0; a < ZO_ARRAY_LEN(archs); a++) {
    if (!zo_etest_arch_selected(archs[a].name)) continue;
    arch = &archs[a];
    /* The delayed rerun in fp32 only: the streams' order does not depend on the dtype. */
    for (size_t p = 0; p < (delay ? 1 : ZO_ARRAY_LEN(precisions)); p++) {
      precision = precisions[p];
      zo_etest_arch_print(arch, precision ? precision : "fp32");
      zo_test_counts_add(&counts, zo_test_run(tests, ZO_ARRAY_LEN(tests)));
    }
    precision = NULL;
    zo_test_counts_add(&counts, zo_test_run(once, ZO_ARRAY_LEN(once)));
  }
  free(ref.params);
  return zo_etest_finish(fx.tmpdir, counts, delay, argc, argv);
}
