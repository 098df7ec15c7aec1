/* The training loop end to end on the CPU backend: exact resume from a
 * checkpoint, gradient accumulation equivalence, Hugging Face save/load round
 * trip, refusal of corrupt checkpoints and mismatched weights, and the
 * forward-only evaluation's smaller device footprint. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zo/checkpoint.h"
#include "zo/hf.h"
#include "zo/safetensors.h"
#include "zo_engine_test.h"

static char tmpdir[256];
static char data_path[300];

/* A config for a tiny model on the test's token file, plus extra overrides. */
static int load(struct zo_config *cfg, const char *const *extra, int n_extra) {
  static char train_set[400], val_set[400];
  snprintf(train_set, sizeof train_set, "data.train=%s", data_path);
  snprintf(val_set, sizeof val_set, "data.val=%s", data_path);
  const char *base[] = {"model.n_layer=2", "model.n_head=3", "model.n_embd=24",
                        "model.vocab_size=256", "model.max_seq_len=16", "data.seq_len=12",
                        "data.format=u16", "data.shuffle=false", "train_micro_batch_size_per_gpu=4",
                        "steps=6", "optimizer.params.lr=0.003", "gradient_clipping=1.0",
                        "engine.device=cpu", "log.every=100", train_set, val_set};
  return zo_etest_config_load(cfg, base, ZO_ARRAY_LEN(base), extra, n_extra);
}

static int load_params(const char *ckpt, float **params, size_t *n) {
  struct zo_model_config mc;
  if (zo_model_config_from_pretrained(ckpt, 3, &mc)) return -1;
  struct zo_model *m = zo_model_init_inference(&mc, zo_backend_cpu(), 1, 1);
  if (!m) return -1;
  *n = m->table.numel;
  *params = malloc(*n * sizeof(float));
  float *mm = malloc(*n * sizeof(float)), *vv = malloc(*n * sizeof(float));
  struct zo_train_state st;
  int err = zo_checkpoint_load(ckpt, m, *params, mm, vv, &st);
  free(mm);
  free(vv);
  zo_model_free(m);
  return err;
}

static int test_resume_is_bit_exact(void) {
  char dir_a[400], dir_b[400], set_a[500], set_b[500], met_a[500], met_b[500], ck[500];
  snprintf(dir_a, sizeof dir_a, "%s/run-a", tmpdir);
  snprintf(dir_b, sizeof dir_b, "%s/run-b", tmpdir);
  snprintf(set_a, sizeof set_a, "checkpoint.dir=%s", dir_a);
  snprintf(set_b, sizeof set_b, "checkpoint.dir=%s", dir_b);
  snprintf(met_a, sizeof met_a, "log.metrics_path=%s/a.jsonl", tmpdir);
  snprintf(met_b, sizeof met_b, "log.metrics_path=%s/b.jsonl", tmpdir);
  struct zo_config cfg;
  struct zo_train_opts opts = {0};
  /* Uninterrupted: 6 steps, shuffled data, 2 accumulation steps. */
  const char *a[] = {set_a, met_a, "checkpoint.every=3", "checkpoint.keep=0", "data.shuffle=true",
                     "gradient_accumulation_steps=2"};
  CHECK(load(&cfg, a, ZO_ARRAY_LEN(a)) == 0);
  CHECK(zo_train(&cfg, &opts) == 0);
  zo_config_free(&cfg);
  /* Interrupted: stop after 3, resume to 6. */
  const char *b3[] = {set_b, met_b, "checkpoint.every=3", "checkpoint.keep=0", "data.shuffle=true",
                      "gradient_accumulation_steps=2", "steps=3"};
  CHECK(load(&cfg, b3, ZO_ARRAY_LEN(b3)) == 0);
  CHECK(zo_train(&cfg, &opts) == 0);
  zo_config_free(&cfg);
  snprintf(ck, sizeof ck, "%s/checkpoint-3", dir_b);
  const char *b6[] = {set_b, met_b, "checkpoint.every=3", "checkpoint.keep=0", "data.shuffle=true",
                      "gradient_accumulation_steps=2"};
  CHECK(load(&cfg, b6, ZO_ARRAY_LEN(b6)) == 0);
  opts.resume = ck;
  CHECK(zo_train(&cfg, &opts) == 0);
  zo_config_free(&cfg);

  char pa[500], pb[500], path[500];
  double la[16], lb[16];
  snprintf(path, sizeof path, "%s/a.jsonl", tmpdir);
  int na = zo_etest_read_metric(path, "loss", la, 16);
  snprintf(path, sizeof path, "%s/b.jsonl", tmpdir);
  int nb = zo_etest_read_metric(path, "loss", lb, 16);
  CHECK(na == 6 && nb == 6);
  for (int i = 0; i < 6; i++) CHECK(la[i] == lb[i]);
  snprintf(pa, sizeof pa, "%s/checkpoint-6", dir_a);
  snprintf(pb, sizeof pb, "%s/checkpoint-6", dir_b);
  float *wa, *wb;
  size_t n1, n2;
  CHECK(load_params(pa, &wa, &n1) == 0);
  CHECK(load_params(pb, &wb, &n2) == 0);
  CHECK(n1 == n2 && memcmp(wa, wb, n1 * sizeof(float)) == 0);
  free(wa);
  free(wb);
  return 0;
}

/* B=4 with one micro-batch and B=2 with two read the same rows in the same
 * order (shuffle off), so the mean gradient and the losses must agree. */
static int test_accumulation_matches_big_batch(void) {
  char ma[500], mb[500], path[500];
  snprintf(ma, sizeof ma, "log.metrics_path=%s/acc1.jsonl", tmpdir);
  snprintf(mb, sizeof mb, "log.metrics_path=%s/acc2.jsonl", tmpdir);
  struct zo_config cfg;
  struct zo_train_opts opts = {0};
  const char *a[] = {ma};
  CHECK(load(&cfg, a, ZO_ARRAY_LEN(a)) == 0);
  CHECK(zo_train(&cfg, &opts) == 0);
  zo_config_free(&cfg);
  const char *b[] = {mb, "train_micro_batch_size_per_gpu=2", "gradient_accumulation_steps=2"};
  CHECK(load(&cfg, b, ZO_ARRAY_LEN(b)) == 0);
  CHECK(zo_train(&cfg, &opts) == 0);
  zo_config_free(&cfg);
  double la[16], lb[16];
  snprintf(path, sizeof path, "%s/acc1.jsonl", tmpdir);
  int na = zo_etest_read_metric(path, "loss", la, 16);
  snprintf(path, sizeof path, "%s/acc2.jsonl", tmpdir);
  int nb = zo_etest_read_metric(path, "loss", lb, 16);
  CHECK(na == 6 && nb == 6);
  for (int i = 0; i < 6; i++) {
    double rel = fabs(la[i] - lb[i]) / fabs(la[i]);
    if (rel > 1e-5) {
      fprintf(stderr, "step %d: loss %.8f (B=4) vs %.8f (B=2 x 2), rel %.2e\n", i + 1, la[i], lb[i], rel);
      return 1;
    }
  }
  CHECK(la[5] < la[0]); /* it trains */
  return 0;
}

static int test_corrupt_checkpoint_is_refused(void) {
  char dir[400], set[500], ck[500], file[600];
  snprintf(dir, sizeof dir, "%s/run-c", tmpdir);
  snprintf(set, sizeof set, "checkpoint.dir=%s", dir);
  struct zo_config cfg;
  struct zo_train_opts opts = {0};
  const char *a[] = {set, "steps=2"};
  CHECK(load(&cfg, a, ZO_ARRAY_LEN(a)) == 0);
  CHECK(zo_train(&cfg, &opts) == 0);
  snprintf(ck, sizeof ck, "%s/checkpoint-2", dir);
  snprintf(file, sizeof file, "%s/model.safetensors", ck);
  FILE *f = fopen(file, "r+b");
  CHECK(f);
  CHECK(fseek(f, -5, SEEK_END) == 0);
  int c = fgetc(f);
  CHECK(fseek(f, -5, SEEK_END) == 0);
  fputc(c ^ 0x40, f);
  fclose(f);
  opts.resume = ck;
  const char *b[] = {set, "steps=4"};
  zo_config_free(&cfg);
  CHECK(load(&cfg, b, ZO_ARRAY_LEN(b)) == 0);
  int err = zo_train(&cfg, &opts);
  zo_config_free(&cfg);
  CHECK(err == -EIO);
  CHECK(strstr(zo_last_error(), "checksum mismatch") != NULL);
  CHECK(strstr(zo_last_error(), "model.safetensors") != NULL);
  /* Truncation is caught the same way. */
  CHECK(truncate(file, 100) == 0);
  CHECK(load(&cfg, b, ZO_ARRAY_LEN(b)) == 0);
  err = zo_train(&cfg, &opts);
  zo_config_free(&cfg);
  CHECK(err == -EIO);
  return 0;
}

static int test_pretrained_round_trip_and_mismatch(void) {
  struct zo_model_config mc = {.n_layer = 2, .n_head = 3, .n_embd = 24, .vocab_size = 101, .max_seq_len = 16};
  struct zo_model *m = zo_model_init_inference(&mc, zo_backend_cpu(), 1, 4);
  CHECK(m);
  size_t n = m->table.numel;
  float *p = malloc(n * sizeof(float)), *q = malloc(n * sizeof(float));
  CHECK(p && q);
  zo_model_init_params(m, p, 7);
  for (size_t i = 0; i < n; i++) p[i] += 1e-3f * (float)(i % 13); /* biases and LN nonzero too */
  memset(p + (size_t)101 * 24, 0, (size_t)(128 - 101) * 24 * sizeof(float));
  char dir[400], file[500];
  snprintf(dir, sizeof dir, "%s/hf", tmpdir);
  CHECK(zo_model_save_pretrained(dir, m, p) == 0);
  snprintf(file, sizeof file, "%s/model.safetensors", dir);
  CHECK(zo_model_load_safetensors(file, m, q) == 0);
  CHECK(memcmp(p, q, n * sizeof(float)) == 0);
  struct zo_model_config got;
  CHECK(zo_model_config_from_pretrained(dir, 0, &got) == 0);
  CHECK(got.n_layer == 2 && got.n_head == 3 && got.n_embd == 24 && got.vocab_size == 101);
  CHECK(zo_model_config_from_pretrained(file, 3, &got) == 0);
  CHECK(got.n_layer == 2 && got.max_seq_len == 16 && got.vocab_size == 101);
  /* The published GPT-2 layout: no "transformer." prefix, boolean causal-mask
   * buffers per block and the tied head stored: loads to the same weights. */
  struct zo_st_file *f = zo_st_open(file);
  struct zo_st_writer *w = zo_st_writer_init();
  CHECK(f && w);
  char names[64][80];
  uint8_t mask[16 * 16];
  memset(mask, 1, sizeof mask);
  int64_t mask_shape[4] = {1, 1, 16, 16};
  for (int i = 0; i < zo_st_n_tensors(f); i++) {
    const struct zo_st_tensor *t = zo_st_tensor_at(f, i);
    snprintf(names[i], sizeof names[i], "%s", t->name + strlen("transformer."));
    CHECK(zo_st_writer_add(w, names[i], t->dtype, t->ndim, t->shape, t->data) == 0);
    if (strcmp(names[i], "wte.weight") == 0)
      CHECK(zo_st_writer_add(w, "lm_head.weight", t->dtype, t->ndim, t->shape, t->data) == 0);
  }
  CHECK(zo_st_writer_add(w, "h.0.attn.bias", ZO_BOOL, 4, mask_shape, mask) == 0);
  CHECK(zo_st_writer_add(w, "h.1.attn.bias", ZO_BOOL, 4, mask_shape, mask) == 0);
  char hub[500];
  snprintf(hub, sizeof hub, "%s/hub.safetensors", tmpdir);
  CHECK(zo_st_writer_write(w, hub) == 0);
  zo_st_writer_free(w);
  zo_st_close(f);
  memset(q, 0, n * sizeof(float));
  CHECK(zo_model_load_safetensors(hub, m, q) == 0);
  CHECK(memcmp(p, q, n * sizeof(float)) == 0);
  CHECK(zo_model_config_from_pretrained(hub, 3, &got) == 0);
  CHECK(got.n_layer == 2 && got.n_embd == 24);
  /* A directory loads its model.safetensors. */
  memset(q, 0, n * sizeof(float));
  CHECK(zo_model_load_safetensors(dir, m, q) == 0);
  CHECK(memcmp(p, q, n * sizeof(float)) == 0);
  zo_model_free(m);
  /* A model one layer wider refuses the file, naming a tensor and both shapes. */
  mc.n_embd = 27;
  m = zo_model_init_inference(&mc, zo_backend_cpu(), 1, 4);
  CHECK(m);
  float *r = malloc(m->table.numel * sizeof(float));
  CHECK(zo_model_load_safetensors(file, m, r) == -EINVAL);
  CHECK(strstr(zo_last_error(), "transformer.wte.weight has shape (101, 24), the model needs (101, 27)"));
  free(r);
  zo_model_free(m);
  free(p);
  free(q);
  return 0;
}

static int test_eval_uses_less_device_memory(void) {
  char dir[400], set[500];
  snprintf(dir, sizeof dir, "%s/run-e", tmpdir);
  snprintf(set, sizeof set, "checkpoint.dir=%s", dir);
  struct zo_config cfg;
  struct zo_train_opts opts = {0};
  const char *a[] = {set, "steps=2"};
  CHECK(load(&cfg, a, ZO_ARRAY_LEN(a)) == 0);
  CHECK(zo_train(&cfg, &opts) == 0);
  struct zo_eval_result res;
  CHECK(zo_eval(&cfg, NULL, 3, &res) == 0);
  zo_config_free(&cfg);
  CHECK(res.n_batches == 3);
  CHECK(res.loss > 0.0 && res.loss < 6.0);
  CHECK(res.device_bytes > 0 && res.device_bytes < res.train_device_bytes);
  fprintf(stderr, "eval device bytes %zu < training %zu\n", res.device_bytes, res.train_device_bytes);
  return 0;
}

int main(void) {
  if (zo_test_mkdtemp(tmpdir, sizeof tmpdir, "train")) return 1;
  /* Real-looking bytes: a repeating sentence with a counter, so there is
   * structure to learn. */
  snprintf(data_path, sizeof data_path, "%s/tokens.u16", tmpdir);
  if (zo_etest_write_tokens(data_path, 20000, "the quick brown fox jumps over the lazy dog; ", 256)) return 1;
  static const struct zo_test tests[] = {
      ZO_TEST(resume_is_bit_exact),
      ZO_TEST(accumulation_matches_big_batch),
      ZO_TEST(corrupt_checkpoint_is_refused),
      ZO_TEST(pretrained_round_trip_and_mismatch),
      ZO_TEST(eval_uses_less_device_memory),
  };
  struct zo_test_counts counts = zo_test_run(tests, sizeof tests / sizeof tests[0]);
  zo_test_rmtree(tmpdir);
  return zo_test_report(counts);
}
