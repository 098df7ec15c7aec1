/* Scaffolding shared by the engine-level tests (test-engine-train, -offload,
 * -memory, -adamw8bit, -dropout, -mixed, -trace, -report, ...): a CHECK that
 * names zo_last_error(), config loading from a base list of --set options
 * plus extras, the token file, the NVMe probe, the placement tests' files
 * and base options, metrics JSONL reading, a training run that keeps its
 * losses, final weights, stats and plan, the bit-for-bit comparison of two
 * runs (and of a run with its plan), one scheduler step on synthetic
 * tokens, the architecture dimension of the parametrized tests (run names,
 * the printed header), the re-run with random stream delays and the end of
 * such a test's main. Each test keeps its own model configs and cases; the
 * only options chosen here are the 20-step placement runs' base list.
 * Header-only (static inline), on zo_test.h and the public include/zo/ APIs. */
#ifndef ZO_ENGINE_TEST_H
#define ZO_ENGINE_TEST_H

#include <dirent.h>
#include <sys/wait.h>

#include "zo/data.h"
#include "zo/nvme.h"
#include "zo/plan.h"
#include "zo/sample.h"
#include "zo/sched.h"
#include "zo/train.h"
#include "zo_test.h"

/* Returns 1 from the calling case, printing file:line, the condition and
 * zo_last_error(). */
#define CHECK(cond) ZO_REQUIRE(cond)

#define ZO_ETEST_MAX_SETS 64  /* --set options in one config load */
#define ZO_ETEST_MAX_STEPS 64 /* losses kept by one run */

/* zo_config_load of base[0, n_base) then extra[0, n_extra), in that order.
 * NULL entries are skipped: an option a case leaves out (fp32's precision,
 * say) can stay in a list whose length the compiler counts (ZO_ARRAY_LEN). */
static inline int zo_etest_config_load(struct zo_config *cfg, const char *const *base, int n_base,
                                       const char *const *extra, int n_extra) {
  const char *sets[ZO_ETEST_MAX_SETS];
  if (n_base + n_extra > ZO_ETEST_MAX_SETS) {
    fprintf(stderr, "  %d --set options, the test allows %d\n", n_base + n_extra, ZO_ETEST_MAX_SETS);
    return -EINVAL;
  }
  int n = 0;
  for (int i = 0; i < n_base; i++)
    if (base[i]) sets[n++] = base[i];
  for (int i = 0; i < n_extra; i++)
    if (extra[i]) sets[n++] = extra[i];
  return zo_config_load(cfg, NULL, sets, n);
}

/* ---- architectures -------------------------------------------------------- */

/* One architecture a test runs its cases for: the model.* --set options of
 * that test's small model of it, loaded before the test's own base list. */
struct zo_etest_arch {
  const char *name;        /* "gpt2", "llama": prefixes run names */
  const char *const *sets; /* (n_sets) model.* options */
  int n_sets;
};

/* Whether the cases run for architecture name: ZO_TEST_ARCHS (a comma
 * separated list, e.g. "gpt2") limits them, unset runs all. scripts/test.sh
 * limits the ThreadSanitizer run to GPT-2 (the scheduler's threads and
 * events are mostly the same code for every architecture), then runs the
 * Llama cases whose untied embedding and LM head pieces take their own
 * hooks (ZO_TEST_CASES). */
static inline bool zo_etest_arch_selected(const char *name) {
  const char *env = getenv("ZO_TEST_ARCHS");
  if (!env || !env[0] || zo_test_in_list(env, name)) return true;
  printf("arch: %s skipped (ZO_TEST_ARCHS=%s)\n", name, env);
  return false;
}

/* A struct zo_etest_arch initialiser from a name and an array of options. */
#define ZO_ETEST_ARCH(name, sets) {name, sets, (int)ZO_ARRAY_LEN(sets)}

/* zo_etest_config_load of arch->sets, then base[0, n_base), then
 * extra[0, n_extra), in that order. */
static inline int zo_etest_config_load_arch(struct zo_config *cfg, const struct zo_etest_arch *arch,
                                            const char *const *base, int n_base, const char *const *extra,
                                            int n_extra) {
  const char *sets[ZO_ETEST_MAX_SETS];
  if (arch->n_sets + n_base > ZO_ETEST_MAX_SETS) {
    fprintf(stderr, "  %d base --set options, the test allows %d\n", arch->n_sets + n_base, ZO_ETEST_MAX_SETS);
    return -EINVAL;
  }
  int n = 0;
  for (int i = 0; i < arch->n_sets; i++) sets[n++] = arch->sets[i];
  for (int i = 0; i < n_base; i++) sets[n++] = base[i];
  return zo_etest_config_load(cfg, sets, n, extra, n_extra);
}

/* "<arch>-[bf16-|fp16-]<name>": a run's name, so that the metrics files and
 * checkpoint directories of every architecture and precision differ
 * (precision: NULL for fp32, else the --set enabling bf16 or fp16). Returns
 * one of 8 static buffers, reused in turn. */
static inline const char *zo_etest_run_name(const struct zo_etest_arch *arch, const char *precision,
                                            const char *name) {
  static char buf[8][160];
  static int next;
  char *b = buf[next++ % 8];
  const char *p = !precision ? "" : strstr(precision, "bf16") ? "bf16-" : "fp16-";
  snprintf(b, sizeof buf[0], "%s-%s%s", arch->name, p, name);
  return b;
}

/* Prints the architecture (and precision, when not NULL) a block of cases
 * runs for, with its model as the engine describes it. */
static inline void zo_etest_arch_print(const struct zo_etest_arch *arch, const char *precision) {
  struct zo_config cfg;
  char desc[256] = "(the model options do not load)";
  if (zo_config_load(&cfg, NULL, arch->sets, arch->n_sets) == 0) {
    struct zo_model_config mc = cfg.model.spec;
    if (zo_model_config_check(&mc) == 0) zo_model_describe(&mc, desc, sizeof desc);
    zo_config_free(&cfg);
  }
  printf("arch: %s: %s%s%s\n", arch->name, desc, precision ? "; precision: " : "", precision ? precision : "");
  fflush(stdout);
}

/* Writes n u16 tokens to path: the bytes of text repeated, each modulo
 * vocab_size. Returns 0, or -1 after printing zo_last_error(). */
static inline int zo_etest_write_tokens(const char *path, size_t n, const char *text, unsigned vocab_size) {
  uint16_t *tok = zo_test_xmalloc(n * sizeof *tok);
  const size_t len = strlen(text);
  for (size_t i = 0; i < n; i++) tok[i] = (uint16_t)((unsigned char)text[i % len] % vocab_size);
  const int err = zo_data_write_u16(path, tok, n);
  free(tok);
  if (err) fprintf(stderr, "%s\n", zo_last_error());
  return err ? -1 : 0;
}

/* Whether an NVMe store can be created under dir; when not, prints why the
 * NVMe cases will skip. */
static inline bool zo_etest_nvme_probe(const char *dir) {
  struct zo_nvme_config nc = {.dir = dir, .block_size = 4096, .queue_depth = 8};
  zo_nvme_t probe = zo_nvme_init(&nc);
  if (!probe) printf("NVMe cases skipped: the store cannot be created under %s: %s\n", dir, zo_last_error());
  zo_nvme_free(probe);
  return probe != NULL;
}

/* Reads the number after "<key>": of each line of a metrics JSONL file that
 * has one, at most cap. Returns how many, or -1 when path cannot be opened. */
static inline int zo_etest_read_metric(const char *path, const char *key, double *out, int cap) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[512], pat[64];
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  int n = 0;
  while (fgets(line, sizeof line, f) && n < cap) {
    const char *p = strstr(line, pat);
    if (p) out[n++] = strtod(p + strlen(pat), NULL);
  }
  fclose(f);
  return n;
}

/* ---- the placement tests' files and config ------------------------------ */

/* The placement tests' small models, as the initialisers of --set lists: a
 * GPT-2 of 3 layers of width 36 (3 heads), vocabulary 200, 16 positions; */
#define ZO_ETEST_GPT2_SMALL \
  "model.n_layer=3", "model.n_head=3", "model.n_embd=36", "model.vocab_size=200", "model.max_seq_len=16"
/* a Llama as wide: 6 query heads on 2 key/value heads of size 6, an MLP
 * width of 50 and an LM head of its own. */
#define ZO_ETEST_LLAMA_SMALL \
  "model.arch=llama", "model.n_layer=3", "model.n_head=6", "model.num_key_value_heads=2", "model.n_embd=36", \
      "model.intermediate_size=50", "model.vocab_size=200", "model.max_seq_len=16", \
      "model.tie_word_embeddings=false"

/* The files of a test that trains on a token file in a private temp
 * directory, with an NVMe store's directory beside it. */
struct zo_etest_files {
  char tmpdir[256];
  char data_path[300]; /* <tmpdir>/tokens.u16 */
  char nvme_dir[300];  /* <tmpdir>/nvme */
  bool have_nvme;      /* an NVMe store can be created there */
};

/* Creates f's temp directory (zo-test-<tag>-*), writes 6000 tokens of "a
 * stitch in time saves nine; 123 " (vocabulary 200) to f->data_path and
 * probes f->nvme_dir (printing why NVMe cases skip). Returns 0, or -1 after
 * saying why. */
static inline int zo_etest_files_init(struct zo_etest_files *f, const char *tag) {
  if (zo_test_mkdtemp(f->tmpdir, sizeof f->tmpdir, tag)) return -1;
  snprintf(f->data_path, sizeof f->data_path, "%s/tokens.u16", f->tmpdir);
  if (zo_etest_write_tokens(f->data_path, 6000, "a stitch in time saves nine; 123 ", 200)) return -1;
  snprintf(f->nvme_dir, sizeof f->nvme_dir, "%s/nvme", f->tmpdir);
  f->have_nvme = zo_etest_nvme_probe(f->nvme_dir);
  return 0;
}

/* zo_etest_config_load_arch of arch's model, the options every 20-step
 * placement run shares (3 micro-batches of 11 tokens from f->data_path, 2
 * accumulation steps, clipping active, AdamW with weight decay, 4 KiB NVMe
 * blocks under f->nvme_dir, 2 parameter slots), then own[0, n_own) (the
 * test's options: precision, optimizer; NULL entries skipped), then
 * extra[0, n_extra) (the case's). */
static inline int zo_etest_placement_load(struct zo_config *cfg, const struct zo_etest_files *f,
                                          const struct zo_etest_arch *arch, const char *const *own, int n_own,
                                          const char *const *extra, int n_extra) {
  static char train_set[400], nvme_set[400];
  snprintf(train_set, sizeof train_set, "data.train=%s", f->data_path);
  snprintf(nvme_set, sizeof nvme_set, "zero_optimization.offload_optimizer.nvme_path=%s", f->nvme_dir);
  const char *base[ZO_ETEST_MAX_SETS] = {"data.seq_len=11", "data.format=u16", "data.shuffle=true",
                                         "train_micro_batch_size_per_gpu=3", "gradient_accumulation_steps=2",
                                         "steps=20", "optimizer.params.lr=0.01",
                                         "optimizer.params.weight_decay=0.1", "gradient_clipping=0.5",
                                         "engine.device=cpu", "log.every=100", "aio.block_size=4096",
                                         "zero_optimization.offload_param.buffer_count=2", train_set, nvme_set};
  int n = 15;
  if (n + n_own > ZO_ETEST_MAX_SETS) {
    fprintf(stderr, "  %d own --set options, the test allows %d\n", n_own, ZO_ETEST_MAX_SETS - n);
    return -EINVAL;
  }
  for (int i = 0; i < n_own; i++) base[n++] = own[i];
  return zo_etest_config_load_arch(cfg, arch, base, n, extra, n_extra);
}

/* ---- training runs ------------------------------------------------------ */

typedef int (*zo_etest_load_fn)(struct zo_config *cfg, const char *const *extra, int n_extra);

struct zo_etest_run {
  double losses[ZO_ETEST_MAX_STEPS]; /* per step, from the metrics file */
  float *params;                     /* (n) final weights; the caller frees */
  size_t n;
  struct zo_sched_stats stats;
  struct zo_plan plan;
};

/* Trains the config load(extra, log.metrics_path=<dir>/<name>.jsonl), from
 * checkpoint resume when not NULL, on backend be (NULL: engine.device's,
 * zo_train_backend), filling r; fails unless it logged exactly n_steps
 * losses. r->plan is planned with the backend the run uses (CUDA carves its
 * per-stream cuBLASLt workspaces in the device arena, the CPU backend none),
 * so that its totals are what the run measures. */
static inline int zo_etest_train_on(zo_etest_load_fn load, const char *dir, const char *name,
                                    const char *const *extra, int n_extra, int n_steps, const char *resume,
                                    zo_backend_t be, struct zo_etest_run *r) {
  char met[600];
  snprintf(met, sizeof met, "log.metrics_path=%s/%s.jsonl", dir, name);
  const char *sets[16];
  CHECK(n_extra < 16);
  for (int i = 0; i < n_extra; i++) sets[i] = extra[i];
  sets[n_extra] = met;
  struct zo_config cfg;
  CHECK(load(&cfg, sets, n_extra + 1) == 0);
  struct zo_model_config mc = cfg.model.spec;
  struct zo_tensor_table t;
  CHECK(zo_model_build_table(&mc, &t) == 0);
  r->n = t.numel;
  zo_tensor_table_free(&t);
  r->params = malloc(r->n * sizeof(float));
  CHECK(r->params);
  zo_backend_t run_be = be ? be : zo_train_backend(&cfg, NULL);
  if (!run_be) fprintf(stderr, "  %s: %s\n", name, zo_last_error());
  CHECK(run_be);
  CHECK(zo_plan_build(&cfg, &mc, run_be, &r->plan) == 0);
  struct zo_train_opts opts = {.resume = resume, .stats = &r->stats, .final_params = r->params, .backend = be};
  int err = zo_train(&cfg, &opts);
  zo_config_free(&cfg);
  CHECK(err == 0);
  char path[600];
  snprintf(path, sizeof path, "%s/%s.jsonl", dir, name);
  CHECK(zo_etest_read_metric(path, "loss", r->losses, ZO_ETEST_MAX_STEPS) == n_steps);
  return 0;
}

static inline int zo_etest_train(zo_etest_load_fn load, const char *dir, const char *name,
                                 const char *const *extra, int n_extra, int n_steps, const char *resume,
                                 struct zo_etest_run *r) {
  return zo_etest_train_on(load, dir, name, extra, n_extra, n_steps, resume, NULL, r);
}

/* Whether the measured peaks and planned pools of r equal its plan on every
 * tier; says which did not. */
static inline bool zo_etest_peaks_match(const char *name, const struct zo_etest_run *r) {
  const struct zo_sched_stats *s = &r->stats;
  const size_t *t = r->plan.total;
  if (s->device_peak == t[ZO_TIER_DEVICE] && s->device_planned == t[ZO_TIER_DEVICE] &&
      s->host_peak == t[ZO_TIER_HOST] && s->host_planned == t[ZO_TIER_HOST] &&
      s->nvme_planned == t[ZO_TIER_NVME])
    return true;
  fprintf(stderr, "  %s: device peak %zu planned %zu, host peak %zu planned %zu, nvme planned %zu; plan %zu %zu %zu\n",
          name, s->device_peak, s->device_planned, s->host_peak, s->host_planned, s->nvme_planned,
          t[ZO_TIER_DEVICE], t[ZO_TIER_HOST], t[ZO_TIER_NVME]);
  return false;
}

/* Compares r's n losses with want's from step first + 1, and r's final
 * weights with want's, bit for bit. Returns 0, or 1 after printing the first
 * differing step and element against want_name. */
static inline int zo_etest_same_run(const char *name, const struct zo_etest_run *r,
                                    const struct zo_etest_run *want, const char *want_name, int first, int n) {
  int ret = 0;
  for (int i = 0; i < n; i++)
    if (memcmp(&r->losses[i], &want->losses[first + i], sizeof(double)) != 0) {
      fprintf(stderr, "  %s: step %d loss %.17g, %s %.17g\n", name, first + i + 1, r->losses[i], want_name,
              want->losses[first + i]);
      ret = 1;
      break;
    }
  if (r->n != want->n || memcmp(r->params, want->params, r->n * sizeof(float)) != 0) {
    size_t i = 0;
    while (i < r->n && i < want->n && memcmp(&r->params[i], &want->params[i], sizeof(float)) == 0) i++;
    fprintf(stderr, "  %s: final weights differ from %s first at element %zu (of %zu, %zu)\n", name, want_name, i,
            r->n, want->n);
    ret = 1;
  }
  return ret;
}

/* Trains the --set options sets for n_steps as name into r and compares
 * the run with ref (named ref_name) bit for bit, and its measured peaks
 * with its plan. Returns 0, or 1 after saying what failed or differed; the
 * caller frees r->params, which is NULL when the run itself failed (r then
 * holds nothing to inspect). */
static inline int zo_etest_train_same(zo_etest_load_fn load, const char *dir, const char *name,
                                      const char *const *sets, int n_sets, int n_steps,
                                      const struct zo_etest_run *ref, const char *ref_name,
                                      struct zo_etest_run *r) {
  r->params = NULL;
  if (zo_etest_train(load, dir, name, sets, n_sets, n_steps, NULL, r) != 0) {
    free(r->params);
    r->params = NULL;
    return 1;
  }
  int ret = zo_etest_same_run(name, r, ref, ref_name, 0, n_steps);
  if (!zo_etest_peaks_match(name, r)) ret = 1;
  return ret;
}

/* Checks the checkpoint the first run left at step 10 (dir checkpoint-10)
 * beyond the resume itself; returns 0 when it is as expected. */
typedef int (*zo_etest_inspect_fn)(const char *ckpt_dir, const struct zo_etest_run *first);

/* Trains n_steps with the --set options sets plus a checkpoint every 10
 * steps under <dir>/ck-<name>, expects it to equal ref, inspects the step-10
 * checkpoint (inspect may be NULL), resumes from it and expects the
 * remaining steps and the final weights to equal ref bit for bit; both runs'
 * measured peaks must equal their plans. */
static inline int zo_etest_checkpoint_resume(zo_etest_load_fn load, const char *dir, const char *name,
                                             const char *const *sets, int n_sets, int n_steps,
                                             const struct zo_etest_run *ref, zo_etest_inspect_fn inspect) {
  char ckset[400], sub[500], na[100], nb[100];
  snprintf(ckset, sizeof ckset, "checkpoint.dir=%s/ck-%s", dir, name);
  snprintf(sub, sizeof sub, "%s/ck-%s/checkpoint-10", dir, name);
  snprintf(na, sizeof na, "%s-ck", name);
  snprintf(nb, sizeof nb, "%s-resume", name);
  const char *s[16];
  int n = 0;
  CHECK(n_sets + 3 <= 15);
  for (int i = 0; i < n_sets; i++) s[n++] = sets[i];
  s[n++] = ckset;
  s[n++] = "checkpoint.every=10";
  s[n++] = "checkpoint.keep=0";
  struct zo_etest_run a, b;
  CHECK(zo_etest_train(load, dir, na, s, n, n_steps, NULL, &a) == 0);
  CHECK(zo_etest_same_run(na, &a, ref, "all-device", 0, n_steps) == 0);
  CHECK(zo_etest_peaks_match(na, &a));
  CHECK(!inspect || inspect(sub, &a) == 0);
  CHECK(zo_etest_train(load, dir, nb, s, n, n_steps - 10, sub, &b) == 0);
  CHECK(zo_etest_same_run(nb, &b, ref, "all-device", 10, n_steps - 10) == 0);
  CHECK(zo_etest_peaks_match(nb, &b));
  free(a.params);
  free(b.params);
  return 0;
}


/* ---- quality on real text ------------------------------------------------ */

/* The byte-level corpus of Debian's fortune files, prepared as u16 tokens. */
struct zo_etest_corpus {
  char train[400], val[400];
};

/* Prepares the corpus under dir (sorted file list, 5% validation). Returns
 * 0, 77 with the reason printed when the files are absent, or 1. */
static inline int zo_etest_prepare_fortunes(const char *dir, struct zo_etest_corpus *c) {
  const char *fdir = "/usr/share/games/fortunes";
  DIR *d = opendir(fdir);
  if (!d) {
    printf("quality cases skipped: %s is absent (install fortune-mod's data files)\n", fdir);
    return 77;
  }
  static char names[64][300];
  const char *paths[64];
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < 64) {
    /* The plain-text files: no extension (.dat indexes, .u8 duplicates). */
    if (e->d_name[0] == '.' || strchr(e->d_name, '.')) continue;
    snprintf(names[n], sizeof names[n], "%s/%s", fdir, e->d_name);
    FILE *f = fopen(names[n], "r");
    if (!f) continue;
    fclose(f);
    n++;
  }
  closedir(d);
  if (n == 0) {
    printf("quality cases skipped: no plain-text fortune files under %s\n", fdir);
    return 77;
  }
  /* Sorted: the corpus must not depend on directory order. */
  qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
  for (int i = 0; i < n; i++) paths[i] = names[i];
  snprintf(c->train, sizeof c->train, "%s/fortunes-train.u16", dir);
  snprintf(c->val, sizeof c->val, "%s/fortunes-val.u16", dir);
  size_t nt = 0, nv = 0;
  CHECK(zo_data_prepare(paths, n, c->train, c->val, 0.05, &nt, &nv) == 0);
  printf("fortune corpus: %d files, %zu training and %zu validation tokens\n", n, nt, nv);
  return 0;
}

#define ZO_ETEST_Q_STEPS 300

/* A 3-layer width-128 byte-level GPT on the corpus for ZO_ETEST_Q_STEPS
 * steps with the --set options extra (metrics under dir/name.jsonl): the
 * final validation loss in *val. */
static inline int zo_etest_quality_run(const struct zo_etest_corpus *c, const char *dir, const char *name,
                                       const char *const *extra, int n_extra, double *val) {
  char met[600], tr[500], va[500];
  snprintf(met, sizeof met, "log.metrics_path=%s/%s.jsonl", dir, name);
  snprintf(tr, sizeof tr, "data.train=%s", c->train);
  snprintf(va, sizeof va, "data.val=%s", c->val);
  const char *base[] = {"model.n_layer=3", "model.n_head=4", "model.n_embd=128", "model.vocab_size=256",
                        "model.max_seq_len=64", "data.seq_len=64", "data.format=u16",
                        "train_micro_batch_size_per_gpu=8", "steps=300", "optimizer.params.lr=2e-3",
                        "optimizer.params.betas=[0.9, 0.95]", "optimizer.params.weight_decay=0.1",
                        "scheduler.type=WarmupCosineLR", "scheduler.params.warmup_num_steps=20",
                        "scheduler.params.cos_min_ratio=0.1", "gradient_clipping=1.0", "engine.device=cpu",
                        "log.every=50", "engine.seed=7", met, tr, va};
  struct zo_config cfg;
  CHECK(zo_etest_config_load(&cfg, base, ZO_ARRAY_LEN(base), extra, n_extra) == 0);
  struct zo_train_opts opts = {0};
  const double t0 = zo_time_s();
  int err = zo_train(&cfg, &opts);
  zo_config_free(&cfg);
  CHECK(err == 0);
  char path[700];
  snprintf(path, sizeof path, "%s/%s.jsonl", dir, name);
  double vals[8];
  const int nv_read = zo_etest_read_metric(path, "val_loss", vals, 8);
  CHECK(nv_read >= 1);
  *val = vals[nv_read - 1];
  printf("%s: val loss %.4f after %d steps (%.1f s)\n", name, *val, ZO_ETEST_Q_STEPS, zo_time_s() - t0);
  return 0;
}

/* ---- the scheduler directly -------------------------------------------- */

/* Fills the B*T inputs and targets of one micro-batch. */
typedef void (*zo_etest_fill_fn)(int32_t *inputs, int32_t *targets, size_t BT, int vocab_size);

/* One optimizer step t of n_micro micro-batches, tokens from fill; the loss
 * in *loss. Returns zo_sched_step_end's result (asynchronous: the caller
 * synchronizes). */
static inline int zo_etest_sched_step(struct zo_sched *s, long t, int n_micro, const struct zo_adamw_hparams *hp,
                                      zo_etest_fill_fn fill, double *loss) {
  const struct zo_model *m = zo_sched_model(s);
  const size_t BT = (size_t)m->B * (size_t)m->T;
  for (int k = 0; k < n_micro; k++) {
    int32_t *in, *tg;
    zo_sched_batch(s, &in, &tg);
    fill(in, tg, BT, m->cfg.vocab_size);
    zo_sched_micro_batch(s, k);
  }
  return zo_sched_step_end(s, t, hp, 1.0, loss);
}

/* ---- random stream delays ----------------------------------------------- */

/* Whether this process runs with ZO_STREAM_DELAY_US set; prints the mode. */
static inline bool zo_etest_delay_mode(void) {
  const bool delay = getenv("ZO_STREAM_DELAY_US") != NULL;
  printf("mode: %s\n", delay ? "random stream delays (ZO_STREAM_DELAY_US set)" : "no stream delays");
  return delay;
}

/* Runs this binary again with ZO_STREAM_DELAY_US=200 (the CPU streams sleep
 * at random before each task, so a missing wait shows as a different
 * result). The variable is read at the first stream creation, hence a fresh
 * process. Returns 0 when the re-run passed, else 1. */
static inline int zo_etest_rerun_with_delays(char **argv) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("ZO_STREAM_DELAY_US", "200", 1);
    execv("/proc/self/exe", argv);
    perror("execv");
    _exit(1);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0) return 1;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

/* The end of main of a test that re-runs itself with stream delays: removes
 * tmpdir, prints counts and, when every case passed in the run without
 * delays (delay false), runs the binary again with them. Returns main's
 * exit code. */
static inline int zo_etest_finish(const char *tmpdir, struct zo_test_counts counts, bool delay, int argc,
                                  char **argv) {
  zo_test_rmtree(tmpdir);
  const int rc = zo_test_report(counts);
  if (rc != 0) return rc;
  if (!delay && argc >= 1) return zo_etest_rerun_with_delays(argv);
  return 0;
}

#endif /* ZO_ENGINE_TEST_H */
