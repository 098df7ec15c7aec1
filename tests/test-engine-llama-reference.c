/* The Llama engine against PyTorch (tests/reference/llama_tiny.safetensors
 * and llama_tiny_tied.safetensors, written by make_llama_reference.py in
 * plain torch ops; layout in tests/reference/README.md). Each file holds the
 * initial parameters under their Hugging Face names, one reference batch
 * (logits, loss, every gradient) and a ten-step AdamW run with clipping and
 * 2-step accumulation. The parameters enter the engine the way a user's do:
 * written here as a sharded Hugging Face directory (config.json, two
 * model-0000k-of-00002.safetensors, the index) and read back with
 * zo_model_config_from_pretrained and zo_model_load_safetensors; gradients
 * and final parameters leave it through zo_model_save_pretrained, so both
 * directions of the name and layout mapping are under test. Tolerances:
 * logits and gradients 1e-4 of each tensor's max |value|, losses 1e-5
 * relative, final parameters 1e-4 of each tensor's max |value|. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo/adamw.h"
#include "zo/lr_schedule.h"
#include "zo/checkpoint.h"
#include "zo/cpu.h"
#include "zo/hf.h"
#include "zo/model.h"
#include "zo/safetensors.h"
#include "zo_test.h"

#define TOL_LOGITS 1e-4
#define TOL_GRADS 1e-4
#define TOL_LOSS 1e-5
#define TOL_NORM 1e-4
#define TOL_FINAL 1e-4

struct ref {
  const char *path;
  struct zo_st_file *f;
  json_t *cfg_json;
  struct zo_model_config cfg;
  int B, T, n_steps, grad_accum, warmup_steps, total_steps;
  double lr, min_lr, beta1, beta2, eps, weight_decay, max_norm;
  char dir[400];   /* the Hugging Face directory written from the file */
};

static char tmpdir[256];
static zo_backend_t BE;

static const struct zo_st_tensor *need(const struct ref *r, const char *name) {
  const struct zo_st_tensor *t = zo_st_find(r->f, name);
  if (!t) fprintf(stderr, "  %s: no tensor %s\n", r->path, name);
  return t;
}

static bool is_param(const char *name) {
  return strncmp(name, "ref.", 4) && strncmp(name, "grad.", 5) && strncmp(name, "train.", 6) &&
         strncmp(name, "final.", 6);
}

static double jnum(json_t *j, const char *key) {
  json_t *v = json_object_get(j, key);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

/* Writes the parameters as a Hugging Face directory: config.json, two shards and the index. */
static int write_hf_dir(struct ref *r) {
  static int n_dirs;
  snprintf(r->dir, sizeof r->dir, "%s/hf-%d", tmpdir, n_dirs++);
  if (mkdir(r->dir, 0700)) return -1;
  struct zo_st_writer *w[2] = {zo_st_writer_init(), zo_st_writer_init()};
  json_t *map = json_object();
  int k = 0, ret = 0;
  for (int i = 0; i < zo_st_n_tensors(r->f); i++) {
    const struct zo_st_tensor *t = zo_st_tensor_at(r->f, i);
    if (!is_param(t->name)) continue;
    const int s = k++ % 2;
    char shard[64];
    snprintf(shard, sizeof shard, "model-%05d-of-00002.safetensors", s + 1);
    json_object_set_new(map, t->name, json_string(shard));
    if (zo_st_writer_add(w[s], t->name, t->dtype, t->ndim, t->shape, t->data)) ret = -1;
  }
  for (int s = 0; s < 2 && !ret; s++) {
    char p[600];
    snprintf(p, sizeof p, "%s/model-%05d-of-00002.safetensors", r->dir, s + 1);
    if (zo_st_writer_write(w[s], p)) ret = -1;
  }
  zo_st_writer_free(w[0]);
  zo_st_writer_free(w[1]);
  char p[600];
  snprintf(p, sizeof p, "%s/model.safetensors.index.json", r->dir);
  json_t *index = json_pack("{s:{s:i}, s:o}", "metadata", "total_size", 0, "weight_map", map);
  if (!index || json_dump_file(index, p, 0)) ret = -1;
  json_decref(index);
  /* config.json: the generator's own Hugging Face config (the metadata),
   * less the run's settings stored beside it (the loader refuses keys it
   * does not know). */
  static const char *const run_keys[] = {"B", "T", "n_steps", "grad_accum", "warmup_steps", "total_steps", "lr",
                                         "min_lr", "beta1", "beta2", "eps", "weight_decay", "max_norm", "schedule",
                                         "seed"};
  json_t *hc = json_deep_copy(r->cfg_json);
  for (size_t i = 0; hc && i < sizeof run_keys / sizeof *run_keys; i++) json_object_del(hc, run_keys[i]);
  snprintf(p, sizeof p, "%s/config.json", r->dir);
  if (!hc || json_dump_file(hc, p, JSON_INDENT(2))) ret = -1;
  json_decref(hc);
  if (ret) fprintf(stderr, "  writing %s failed: %s\n", r->dir, zo_last_error());
  return ret;
}

static int ref_open(struct ref *r, const char *path) {
  memset(r, 0, sizeof *r);
  r->path = path;
  r->f = zo_st_open(path);
  if (!r->f) {
    fprintf(stderr, "%s\n", zo_last_error());
    return -1;
  }
  const char *cs = zo_st_metadata(r->f, "config");
  json_error_t je;
  r->cfg_json = cs ? json_loads(cs, 0, &je) : NULL;
  if (!r->cfg_json) {
    fprintf(stderr, "%s: no readable \"config\" metadata\n", path);
    return -1;
  }
  json_t *j = r->cfg_json;
  r->B = (int)jnum(j, "B"), r->T = (int)jnum(j, "T"), r->n_steps = (int)jnum(j, "n_steps");
  r->grad_accum = (int)jnum(j, "grad_accum"), r->warmup_steps = (int)jnum(j, "warmup_steps");
  r->total_steps = (int)jnum(j, "total_steps");
  r->lr = jnum(j, "lr"), r->min_lr = jnum(j, "min_lr"), r->beta1 = jnum(j, "beta1"), r->beta2 = jnum(j, "beta2");
  r->eps = jnum(j, "eps"), r->weight_decay = jnum(j, "weight_decay"), r->max_norm = jnum(j, "max_norm");
  if (write_hf_dir(r)) return -1;
  /* The engine reads the shapes from config.json as for any Hugging Face model. */
  if (zo_model_config_from_pretrained(r->dir, 0, &r->cfg)) {
    fprintf(stderr, "%s: %s\n", path, zo_last_error());
    return -1;
  }
  const struct zo_model_config *c = &r->cfg;
  if (c->arch != ZO_ARCH_LLAMA || c->n_layer != (int)jnum(j, "num_hidden_layers") ||
      c->n_head != (int)jnum(j, "num_attention_heads") || c->n_kv_head != (int)jnum(j, "num_key_value_heads") ||
      c->n_embd != (int)jnum(j, "hidden_size") || c->intermediate_size != (int)jnum(j, "intermediate_size") ||
      c->vocab_size != (int)jnum(j, "vocab_size") || c->max_seq_len != (int)jnum(j, "max_position_embeddings") ||
      c->rms_norm_eps != jnum(j, "rms_norm_eps") || c->rope_theta != jnum(j, "rope_theta") ||
      c->tie_embeddings != json_is_true(json_object_get(j, "tie_word_embeddings"))) {
    fprintf(stderr, "%s: config.json read back differs from the generator's config\n", path);
    return -1;
  }
  return 0;
}

static void ref_close(struct ref *r) {
  zo_st_close(r->f);
  json_decref(r->cfg_json);
}

/* max |a - b| / max |b| over n elements, the index of the worst in *at. */
static double max_rel(const float *a, const float *b, size_t n, size_t *at) {
  double mx = 0.0, worst = 0.0;
  *at = 0;
  for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs((double)b[i]));
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (isnan(d)) d = INFINITY;
    if (d > worst) worst = d, *at = i;
  }
  return mx > 0 ? worst / mx : worst;
}

static int copy_to_host(void *dst, const void *src, size_t nbytes, zo_stream_t s) {
  if (BE->memcpy_async(dst, src, nbytes, ZO_COPY_D2H, s) || BE->stream_synchronize(s)) {
    fprintf(stderr, "  copy to host: %s\n", zo_last_error());
    return -1;
  }
  return 0;
}

/* The model of r's config, parameters loaded from r's directory (host copy
 * in *host, owned by the caller). */
static struct zo_model *model_load(const struct ref *r, const struct zo_model_layout *lo, float **host) {
  const struct zo_model_config cfg = r->cfg;
  struct zo_model_layout l = lo ? *lo : (struct zo_model_layout){.training = true};
  struct zo_model *m = zo_model_init_layout(&cfg, BE, r->B, r->T, &l);
  *host = m ? malloc(m->table.numel * sizeof(float)) : NULL;
  if (!m || !*host || zo_model_load_safetensors(r->dir, m, *host) || zo_model_upload_params(m, *host)) {
    fprintf(stderr, "  model: %s\n", zo_last_error());
    free(*host);
    *host = NULL;
    zo_model_free(m);
    return NULL;
  }
  return m;
}

/* Saves buf (table order) through zo_model_save_pretrained and compares each
 * Hugging Face tensor with prefix + name of r's file. */
static int compare_saved(const struct ref *r, const struct zo_model *m, const float *buf, const char *prefix,
                         double tol, const char *what) {
  char dir[600], path[700];
  static int n;
  snprintf(dir, sizeof dir, "%s/saved-%d", tmpdir, n++);
  if (zo_model_save_pretrained(dir, m, buf)) {
    fprintf(stderr, "  save_pretrained: %s\n", zo_last_error());
    return -1;
  }
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  struct zo_st_file *f = zo_st_open(path);
  if (!f) return -1;
  int ret = 0, count = 0;
  double worst = 0.0;
  const char *worst_name = "";
  for (int i = 0; i < zo_st_n_tensors(f); i++) {
    const struct zo_st_tensor *got = zo_st_tensor_at(f, i);
    char name[200];
    snprintf(name, sizeof name, "%s%s", prefix, got->name);
    const struct zo_st_tensor *want = need(r, name);
    if (!want || want->numel != got->numel) {
      ret = -1;
      continue;
    }
    count++;
    size_t at;
    const double rel = max_rel(got->data, want->data, got->numel, &at);
    if (rel > worst) worst = rel, worst_name = got->name;
    if (!(rel <= tol)) {
      fprintf(stderr, "  %s %s: max |diff| / max |value| = %.2e at %zu: got %.7g, want %.7g\n", what, got->name,
              rel, at, (double)((const float *)got->data)[at], (double)((const float *)want->data)[at]);
      ret = -1;
    }
  }
  printf("  %s: %d tensors, worst %.2e in %s (tolerance %.0e)\n", what, count, worst, worst_name, tol);
  zo_st_close(f);
  return ret;
}

static int check_logits(const struct ref *r, const struct zo_model *m, const float *logits, double tol,
                        const char *what) {
  const int V = r->cfg.vocab_size, Vp = r->cfg.padded_vocab_size, BT = r->B * r->T;
  const struct zo_st_tensor *t = need(r, "ref.logits");
  if (!t) return -1;
  float *real = malloc((size_t)BT * V * sizeof(float));
  for (int i = 0; i < BT; i++) memcpy(real + (size_t)i * V, logits + (size_t)i * Vp, (size_t)V * sizeof(float));
  size_t at;
  const double rel = max_rel(real, t->data, (size_t)BT * V, &at);
  printf("  %s: max |diff| / max |logit| = %.2e (tolerance %.0e)\n", what, rel, tol);
  free(real);
  (void)m;
  return rel <= tol ? 0 : -1;
}

static int case_logits_loss_grads(const struct ref *r) {
  float *host;
  struct zo_model *m = model_load(r, NULL, &host);
  if (!m) return -1;
  const struct zo_st_tensor *in = need(r, "ref.inputs"), *tg = need(r, "ref.targets"), *loss_t = need(r, "ref.loss");
  if (!in || !tg || !loss_t) return -1;
  const size_t BT = (size_t)r->B * r->T, Vp = (size_t)m->cfg.padded_vocab_size;
  float *logits = malloc(BT * Vp * sizeof(float)), *grads = malloc(m->table.numel * sizeof(float));
  int ret = 0;
  zo_model_zero_grad(m, NULL);
  zo_model_forward(m, in->data, tg->data, r->B, r->T, NULL);
  if (copy_to_host(logits, m->logits, BT * Vp * sizeof(float), NULL) ||
      check_logits(r, m, logits, TOL_LOGITS, "logits"))
    ret = -1;
  double loss;
  if (zo_model_mean_loss(m, tg->data, r->B, r->T, NULL, &loss)) ret = -1;
  const double want = ((const float *)loss_t->data)[0], rel = fabs(loss - want) / fabs(want);
  printf("  loss %.7f, reference %.7f, relative %.2e (tolerance %.0e)\n", loss, want, rel, TOL_LOSS);
  if (!(rel <= TOL_LOSS)) ret = -1;
  zo_model_backward(m, r->B, r->T, 1.0f / (float)BT, NULL);
  if (copy_to_host(grads, m->grads, m->table.numel * sizeof(float), NULL) ||
      compare_saved(r, m, grads, "grad.", TOL_GRADS, "gradients"))
    ret = -1;
  /* The parameters leave as they came: the saver's output equals the input bit for bit. */
  if (compare_saved(r, m, host, "", 0.0, "parameters round trip")) ret = -1;
  /* Padded vocabulary rows: no gradient. */
  const size_t C = (size_t)m->cfg.n_embd, V = (size_t)m->cfg.vocab_size;
  for (size_t i = V * C; i < Vp * C; i++)
    if (grads[m->table.tensors[0].offset + i] != 0.0f) {
      fprintf(stderr, "  padded embedding row %zu has a gradient\n", i / C);
      ret = -1;
      break;
    }
  free(logits);
  free(grads);
  free(host);
  zo_model_free(m);
  return ret;
}

/* The forward-only model, in fp32 and in bf16 (one rounding per op: the
 * logits within 2e-2 of fp32's). */
static int case_inference(const struct ref *r) {
  int ret = 0;
  const enum zo_dtype dts[2] = {ZO_F32, ZO_BF16};
  for (int k = 0; k < 2; k++) {
    const struct zo_model_layout lo = {.training = false, .dtype = dts[k]};
    float *host;
    struct zo_model *m = model_load(r, &lo, &host);
    if (!m) return -1;
    const size_t BT = (size_t)r->B * r->T, Vp = (size_t)m->cfg.padded_vocab_size;
    void *raw = malloc(BT * Vp * m->esize);
    float *logits = malloc(BT * Vp * sizeof(float));
    zo_model_forward(m, need(r, "ref.inputs")->data, NULL, r->B, r->T, NULL);
    if (copy_to_host(raw, m->logits, BT * Vp * m->esize, NULL)) ret = -1;
    zo_cpu_cast(logits, ZO_F32, raw, dts[k], BT * Vp);
    if (check_logits(r, m, logits, k == 0 ? TOL_LOGITS : 2e-2, k == 0 ? "inference logits" : "bf16 inference logits"))
      ret = -1;
    free(raw);
    free(logits);
    free(host);
    zo_model_free(m);
  }
  return ret;
}

/* Ten steps as the reference takes them: accumulation, norm, clip, schedule, AdamW. */
static int case_training(const struct ref *r) {
  float *p;
  struct zo_model *m = model_load(r, NULL, &p);
  if (!m) return -1;
  const size_t N = m->table.numel, BT = (size_t)r->B * r->T;
  float *g = malloc(N * sizeof(float)), *mo = calloc(N, sizeof(float)), *vo = calloc(N, sizeof(float));
  const struct zo_st_tensor *ti = need(r, "train.inputs"), *tt = need(r, "train.targets");
  const struct zo_st_tensor *tl = need(r, "train.loss"), *tn = need(r, "train.grad_norm"), *tr = need(r, "train.lr");
  if (!ti || !tt || !tl || !tn || !tr) return -1;
  const struct zo_lr_schedule sched = {.kind = ZO_LR_WARMUP_COSINE, .lr = r->lr, .min_lr = r->min_lr,
                                       .warmup_steps = r->warmup_steps, .total_steps = r->total_steps};
  const int K = r->grad_accum;
  int ret = 0, n_clipped = 0;
  for (int step = 1; step <= r->n_steps && !ret; step++) {
    zo_model_zero_grad(m, NULL);
    double loss_sum = 0.0;
    for (int k = 0; k < K; k++) {
      const size_t mb = (size_t)(step - 1) * K + (size_t)k;
      const int32_t *in = (const int32_t *)ti->data + mb * BT, *tg = (const int32_t *)tt->data + mb * BT;
      double loss;
      zo_model_forward(m, in, tg, r->B, r->T, NULL);
      zo_model_backward(m, r->B, r->T, 1.0f / (float)(BT * (size_t)K), NULL);
      if (zo_model_mean_loss(m, tg, r->B, r->T, NULL, &loss)) ret = -1;
      loss_sum += loss;
    }
    if (copy_to_host(g, m->grads, N * sizeof(float), NULL)) ret = -1;
    const double loss = loss_sum / K, norm = sqrt(zo_sumsq(g, N));
    const float coef = zo_clip_coef(norm, r->max_norm);
    const double lr = zo_lr_at(&sched, step);
    n_clipped += coef < 1.0f;
    const double lrel = fabs(loss - ((const float *)tl->data)[step - 1]) / ((const float *)tl->data)[step - 1];
    const double nrel = fabs(norm - ((const float *)tn->data)[step - 1]) / ((const float *)tn->data)[step - 1];
    const double rrel = fabs(lr - ((const float *)tr->data)[step - 1]) / ((const float *)tr->data)[step - 1];
    const bool ok = lrel <= TOL_LOSS && nrel <= TOL_NORM && rrel <= 1e-6;
    printf("  step %2d: loss %.6f (rel %.1e) grad norm %.5f (rel %.1e) clip %.4f lr %.4e%s\n", step, loss, lrel,
           norm, nrel, (double)coef, lr, ok ? "" : "  <-- MISMATCH");
    if (!ok) ret = -1;
    const struct zo_adamw_hparams hp = {.lr = (float)lr, .beta1 = (float)r->beta1, .beta2 = (float)r->beta2,
                                        .eps = (float)r->eps, .weight_decay = (float)r->weight_decay};
    for (int i = 0; i < m->table.n_tensors; i++) {
      const struct zo_tensor_info *t = &m->table.tensors[i];
      zo_adamw_update(p + t->offset, g + t->offset, mo + t->offset, vo + t->offset, t->numel, &hp, t->decay, step,
                      coef);
    }
    if (zo_model_upload_params(m, p)) ret = -1;
  }
  if (n_clipped == 0 || n_clipped == r->n_steps) {
    fprintf(stderr, "  clipping was active on %d of %d steps: the reference should clip some, not all\n",
            n_clipped, r->n_steps);
    ret = -1;
  }
  if (!ret && compare_saved(r, m, p, "final.", TOL_FINAL, "final parameters")) ret = -1;
  free(g);
  free(mo);
  free(vo);
  free(p);
  zo_model_free(m);
  return ret;
}

static struct ref untied, tied;

static int test_untied_forward_backward(void) { return case_logits_loss_grads(&untied); }
static int test_untied_inference(void) { return case_inference(&untied); }
static int test_untied_training(void) { return case_training(&untied); }
static int test_tied_forward_backward(void) { return case_logits_loss_grads(&tied); }
static int test_tied_training(void) { return case_training(&tied); }

/* A checkpoint whose tensors do not match the config is refused by name. */
static int test_mismatch_refused(void) {
  struct zo_model_config cfg = untied.cfg;
  cfg.intermediate_size += 2;
  struct zo_model *m = zo_model_init(&cfg, BE, untied.B, untied.T);
  float *host = m ? malloc(m->table.numel * sizeof(float)) : NULL;
  int ret = 0;
  if (!m || !host) return -1;
  const int err = zo_model_load_safetensors(untied.dir, m, host);
  printf("  refused: %s\n", zo_last_error());
  if (err != -EINVAL || !strstr(zo_last_error(), "mlp.gate_proj.weight")) ret = -1;
  free(host);
  zo_model_free(m);
  return ret;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  BE = zo_backend_cpu();
  if (zo_test_mkdtemp(tmpdir, sizeof tmpdir, "llama-ref")) return 1;
  if (ref_open(&untied, ZO_TEST_DIR "/reference/llama_tiny.safetensors") ||
      ref_open(&tied, ZO_TEST_DIR "/reference/llama_tiny_tied.safetensors"))
    return 1;
  char a[200], b[200];
  printf("references: %s; %s\n", zo_model_describe(&untied.cfg, a, sizeof a), zo_model_describe(&tied.cfg, b, sizeof b));
  static const struct zo_test tests[] = {
      ZO_TEST(untied_forward_backward), ZO_TEST(untied_inference), ZO_TEST(untied_training),
      ZO_TEST(tied_forward_backward),   ZO_TEST(tied_training),    ZO_TEST(mismatch_refused),
  };
  struct zo_test_counts counts = zo_test_run(tests, sizeof tests / sizeof tests[0]);
  ref_close(&untied);
  ref_close(&tied);
  zo_test_rmtree(tmpdir);
  return zo_test_report(counts);
}
