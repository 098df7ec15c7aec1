/* The state I/O (zo_sched_state_*): random access to parameters, m and v
 * where each placement keeps them (device, host pool, NVMe files through a
 * one-chunk cache), for fp32 AdamW and AdamW8bit states, fp32 and bf16.
 * Properties checked against plain host buffers holding the same bytes:
 * every read of a random range returns the buffer's bytes, interleaved
 * random writes land exactly (the 8-bit codes' padding reads as zero),
 * working copies are re-derived so an eval after partial parameter writes
 * equals an all-device scheduler given the whole buffer, checkpoints saved
 * through the io are byte-identical to saves from host buffers and load back
 * into another placement exactly, a state read failing its CRC fails the save
 * and leaves the previous checkpoint intact, zo_model_init_range matches the
 * whole-model initialisation on any range, a forward-only model's io
 * rounds into the working dtype exactly once, and the host plan holds one
 * staging buffer, not a copy of the state. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zo/checkpoint.h"
#include "zo/cpu.h"
#include "zo/host.h"
#include "zo_engine_test.h"

static char tmpdir[256];
static char nvme_dir[300];
static bool have_nvme;

/* 3 layers of width 32, vocab 500 (wte 16384 elements: longer than an NVMe
 * chunk, cut inside), 8-bit block 96 (partial last blocks); tensors of at
 * least 1024 elements get 8-bit states. */
static int load(struct zo_config *cfg, const char *const *extra, int n_extra) {
  static char nvme_set[400];
  snprintf(nvme_set, sizeof nvme_set, "zero_optimization.offload_optimizer.nvme_path=%s", nvme_dir);
  const char *base[] = {"model.n_layer=3", "model.n_head=2", "model.n_embd=32", "model.vocab_size=500",
                        "model.max_seq_len=16", "data.seq_len=11", "train_micro_batch_size_per_gpu=3",
                        "engine.device=cpu", "aio.block_size=4096", "optimizer.params.block_size=96",
                        "optimizer.params.min_8bit_size=1024", "zero_optimization.offload_param.buffer_count=2",
                        nvme_set};
  return zo_etest_config_load(cfg, base, ZO_ARRAY_LEN(base), extra, n_extra);
}

struct placement {
  const char *name;
  bool nvme;
  const char *sets[4]; /* unused entries NULL */
};

static const struct placement placements[] = {
    {"device", false, {NULL}},
    {"opt-cpu", false, {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu"}},
    {"param-cpu", false,
     {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu",
      "zero_optimization.offload_param.device=cpu"}},
    {"opt-nvme", true, {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=nvme"}},
    {"param-cpu-opt-nvme", true,
     {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=nvme",
      "zero_optimization.offload_param.device=cpu"}},
    {"opt-nvme-chunks-700", true,
     {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=nvme",
      "zero_optimization.sub_group_size=700"}},
};
#define N_PLACEMENTS ((int)ZO_ARRAY_LEN(placements))

/* Optimizer format x precision variants. */
static const char *const variants[][2] = {
    {"optimizer.type=AdamW", "bf16.enabled=false"},
    {"optimizer.type=AdamW8bit", "bf16.enabled=false"},
    {"optimizer.type=AdamW", "bf16.enabled=true"},
    {"optimizer.type=AdamW8bit", "bf16.enabled=true"},
};
#define N_VARIANTS ((int)ZO_ARRAY_LEN(variants))

static struct zo_sched *make_sched(const struct placement *pl, int variant, struct zo_plan *plan) {
  const char *sets[ZO_ARRAY_LEN(pl->sets) + ZO_ARRAY_LEN(variants[0])];
  memcpy(sets, pl->sets, sizeof pl->sets);
  memcpy(sets + ZO_ARRAY_LEN(pl->sets), variants[variant], sizeof variants[variant]);
  struct zo_config cfg;
  if (load(&cfg, sets, ZO_ARRAY_LEN(sets))) return NULL; /* NULL entries skipped */
  struct zo_model_config mc = cfg.model.spec;
  struct zo_sched *s = NULL;
  if (zo_plan_build(&cfg, &mc, zo_backend_cpu(), plan) == 0) {
    const struct zo_sched_config sc = {.model = mc, .B = plan->B, .T = plan->T, .placement = plan->placement,
                                       .backend = zo_backend_cpu()};
    s = zo_sched_init(&sc);
  }
  zo_config_free(&cfg);
  return s;
}

/* A host copy of a whole state, the truth the scheduler is checked against. */
struct state {
  size_t nbytes[ZO_STATE_N_PARTS];
  uint8_t *part[ZO_STATE_N_PARTS];
};

static void state_alloc(struct state *st, const struct zo_sched *s) {
  const struct zo_model *m = zo_sched_model((struct zo_sched *)s);
  const struct zo_optim_format f = zo_sched_placement(s)->opt;
  st->nbytes[ZO_STATE_PARAMS] = m->table.numel * sizeof(float);
  st->nbytes[ZO_STATE_M] = st->nbytes[ZO_STATE_V] = zo_optim_state_nbytes(&f, &m->table);
  for (int p = 0; p < ZO_STATE_N_PARTS; p++) st->part[p] = zo_test_xmalloc(st->nbytes[p]);
}

static void state_free(struct state *st) {
  for (int p = 0; p < ZO_STATE_N_PARTS; p++) free(st->part[p]);
}

/* Zeroes the padding after each 8-bit tensor's codes in [off, off + n) of
 * an m or v buffer holding part bytes [off, off + n). */
static void zero_padding(const struct zo_sched *s, uint8_t *buf, size_t off, size_t n) {
  const struct zo_tensor_table *t = &zo_sched_model((struct zo_sched *)s)->table;
  const struct zo_optim_format *f = &zo_sched_placement(s)->opt;
  for (int i = 0; i < t->n_tensors; i++) {
    const size_t numel = t->tensors[i].numel;
    if (!zo_optim_is_8bit(f, numel)) continue;
    const size_t a = zo_optim_tensor_offset(f, t, i) + numel, b = zo_optim_tensor_offset(f, t, i) + (numel + 3) / 4 * 4;
    for (size_t k = a; k < b; k++)
      if (k >= off && k < off + n) buf[k - off] = 0;
  }
}

/* Random bytes for part p at [off, off + n): sane floats for parameters
 * (an eval runs on them), anything for m and v but zero padding. Assumes
 * wte is the first tensor (GPT-2). */
static void random_bytes(const struct zo_sched *s, enum zo_state_part p, uint8_t *buf, size_t off, size_t n) {
  if (p == ZO_STATE_PARAMS) {
    /* Padded vocabulary rows stay zero, as checkpoints assume (they are
     * not stored). */
    const struct zo_model *m = zo_sched_model((struct zo_sched *)s);
    const size_t pad0 = (size_t)m->cfg.vocab_size * (size_t)m->cfg.n_embd,
                 pad1 = (size_t)m->cfg.padded_vocab_size * (size_t)m->cfg.n_embd;
    for (size_t k = 0; k < n / sizeof(float); k++) {
      const size_t e = off / sizeof(float) + k;
      const float x = e >= pad0 && e < pad1 ? 0.0f : zo_rng_float(-0.08f, 0.08f);
      memcpy(buf + k * sizeof(float), &x, sizeof x);
    }
    return;
  }
  for (size_t k = 0; k < n; k++) buf[k] = (uint8_t)zo_rng_u32();
  zero_padding(s, buf, off, n);
}

/* A random range of part p: offsets and lengths in floats for parameters,
 * bytes for m and v, lengths up to three chunks' worth. */
static void random_range(const struct state *st, enum zo_state_part p, size_t *off, size_t *n) {
  const size_t unit = p == ZO_STATE_PARAMS ? sizeof(float) : 1, total = st->nbytes[p] / unit;
  *off = zo_rng_u32() % total;
  const size_t max = total - *off < 40000 ? total - *off : 40000;
  *n = (zo_rng_u32() % (max + 1)) * unit;
  *off *= unit;
}

static int check_equal(struct zo_sched *s, const struct state *want, const char *what) {
  struct state got;
  state_alloc(&got, s);
  int ret = 0;
  if (zo_sched_get_state(s, (float *)(void *)got.part[0], got.part[1], got.part[2]) != 0) {
    ret = zo_test_fail("%s: get_state: %s", what, zo_last_error());
  } else {
    for (int p = 0; p < ZO_STATE_N_PARTS; p++) {
      size_t k = 0;
      while (k < want->nbytes[p] && got.part[p][k] == want->part[p][k]) k++;
      if (k < want->nbytes[p])
        ret = zo_test_fail("%s: part %d differs first at byte %zu of %zu", what, p, k, want->nbytes[p]);
    }
  }
  state_free(&got);
  return ret;
}

/* Mean loss of one fixed batch. */
static void fixed_tokens(int32_t *in, int32_t *tg, size_t BT, int V) {
  for (size_t i = 0; i < BT; i++) {
    in[i] = (int32_t)((i * 7 + 3) % (size_t)V);
    tg[i] = (int32_t)((i * 11 + 5) % (size_t)V);
  }
}

static int eval_loss(struct zo_sched *s, double *loss) {
  int32_t *in, *tg;
  zo_sched_batch(s, &in, &tg);
  const struct zo_model *m = zo_sched_model(s);
  fixed_tokens(in, tg, (size_t)m->B * (size_t)m->T, m->cfg.vocab_size);
  return zo_sched_eval(s, loss);
}

/* One placement and variant: fresh state, whole writes, random reads,
 * interleaved random writes and reads, then the eval against the
 * all-device scheduler given the same bytes. */
static int random_access(const struct placement *pl, int variant) {
  char what[160];
  snprintf(what, sizeof what, "%s / %s / %s", pl->name, variants[variant][0], variants[variant][1]);
  struct zo_plan plan;
  struct zo_sched *s = make_sched(pl, variant, &plan);
  if (!s) return zo_test_fail("%s: %s", what, zo_last_error());
  struct state st;
  state_alloc(&st, s);
  const struct zo_model *m = zo_sched_model(s);
  const struct zo_optim_format f = zo_sched_placement(s)->opt;
  zo_rng_seed(1000 + (uint64_t)variant);
  int ret = 0;

  /* A fresh state reads as zo_optim_state_fresh's bytes. */
  zo_optim_state_fresh(&f, &m->table, st.part[1], st.part[2]);
  random_bytes(s, ZO_STATE_PARAMS, st.part[0], 0, st.nbytes[0]);
  if (zo_sched_state_write(s, ZO_STATE_PARAMS, 0, st.part[0], st.nbytes[0]) ||
      zo_sched_state_fresh(s, ZO_STATE_M) || zo_sched_state_fresh(s, ZO_STATE_V) || zo_sched_state_done(s)) {
    ret = zo_test_fail("%s: fresh state: %s", what, zo_last_error());
    goto out;
  }
  if ((ret = check_equal(s, &st, "fresh"))) goto out;

  /* A whole random state, then random reads. */
  random_bytes(s, ZO_STATE_M, st.part[1], 0, st.nbytes[1]);
  random_bytes(s, ZO_STATE_V, st.part[2], 0, st.nbytes[2]);
  if (zo_sched_set_state(s, (const float *)(void *)st.part[0], st.part[1], st.part[2])) {
    ret = zo_test_fail("%s: set_state: %s", what, zo_last_error());
    goto out;
  }
  uint8_t *buf = zo_test_xmalloc(40000 * sizeof(float));
  for (int it = 0; it < 300 && !ret; it++) {
    const enum zo_state_part p = (enum zo_state_part)(zo_rng_u32() % ZO_STATE_N_PARTS);
    size_t off, n;
    random_range(&st, p, &off, &n);
    const bool write = it >= 100 && zo_rng_u32() % 2;
    if (write) {
      random_bytes(s, p, buf, off, n);
      memcpy(st.part[p] + off, buf, n);
      if (zo_sched_state_write(s, p, off, buf, n))
        ret = zo_test_fail("%s: write %d [%zu, +%zu): %s", what, p, off, n, zo_last_error());
    } else if (zo_sched_state_read(s, p, off, buf, n)) {
      ret = zo_test_fail("%s: read %d [%zu, +%zu): %s", what, p, off, n, zo_last_error());
    } else if (n && memcmp(buf, st.part[p] + off, n) != 0) {
      ret = zo_test_fail("%s: read %d [%zu, +%zu) differs from what was written (step %d)", what, p, off, n, it);
    }
    /* Now and then the session ends (the NVMe cache is written back). */
    if (!ret && it % 37 == 36 && zo_sched_state_done(s))
      ret = zo_test_fail("%s: state_done: %s", what, zo_last_error());
  }
  free(buf);
  if (!ret && zo_sched_state_done(s)) ret = zo_test_fail("%s: state_done: %s", what, zo_last_error());
  if (ret || (ret = check_equal(s, &st, what))) goto out;

  /* The working copies follow the partial writes: the same loss as an
   * all-device scheduler set from the whole buffer. */
  struct zo_plan plan0;
  struct zo_sched *s0 = make_sched(&placements[0], variant, &plan0);
  double l0 = 0, l1 = 0;
  if (!s0 || zo_sched_set_state(s0, (const float *)(void *)st.part[0], st.part[1], st.part[2]) ||
      eval_loss(s0, &l0) || eval_loss(s, &l1))
    ret = zo_test_fail("%s: eval: %s", what, zo_last_error());
  else if (l0 != l1)
    ret = zo_test_fail("%s: eval loss %.9g after state writes, all-device %.9g", what, l1, l0);
  zo_sched_free(s0);
out:
  state_free(&st);
  zo_sched_free(s);
  return ret;
}

static int run_placements(bool nvme) {
  if (nvme && !have_nvme) return ZO_TEST_SKIP;
  int ret = 0;
  for (int i = 0; i < N_PLACEMENTS; i++) {
    if (placements[i].nvme != nvme) continue;
    for (int v = 0; v < N_VARIANTS; v++)
      if (random_access(&placements[i], v)) ret = 1;
  }
  return ret;
}

static int test_random_access_device_host(void) { return run_placements(false); }
static int test_random_access_nvme(void) { return run_placements(true); }

static uint8_t *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = zo_test_xmalloc(*n + 1);
  if (fread(b, 1, *n, f) != *n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  return b;
}

static int same_file(const char *a, const char *b) {
  size_t na = 0, nb = 0;
  uint8_t *x = read_file(a, &na), *y = read_file(b, &nb);
  const int same = x && y && na == nb && memcmp(x, y, na) == 0;
  free(x);
  free(y);
  return same;
}

/* Checkpoints saved through each placement's io are the bytes of a save
 * from host buffers, and load into every other placement exactly. */
static int test_checkpoint_through_io(void) {
  int ret = 0;
  for (int v = 0; v < N_VARIANTS && !ret; v += 1) {
    struct zo_plan plan;
    struct zo_sched *s0 = make_sched(&placements[0], v, &plan);
    CHECK(s0);
    struct state st;
    state_alloc(&st, s0);
    zo_rng_seed(77 + (uint64_t)v);
    for (int p = 0; p < ZO_STATE_N_PARTS; p++) random_bytes(s0, (enum zo_state_part)p, st.part[p], 0, st.nbytes[p]);
    const struct zo_optim_format f = zo_sched_placement(s0)->opt;
    const struct zo_train_state ts = {.step = 5, .applied_steps = 5, .data_position = 12, .seed = 1,
                                      .scaler = {.scale = 1.0}};
    char ref_dir[400], path[PATH_MAX];
    snprintf(ref_dir, sizeof ref_dir, "%s/ckpt-ref-%d", tmpdir, v);
    CHECK(zo_checkpoint_save(ref_dir, zo_sched_model(s0), (const float *)(void *)st.part[0], &f, st.part[1],
                             st.part[2], &ts, 0, path, sizeof path) == 0);
    zo_sched_free(s0);
    for (int i = 0; i < N_PLACEMENTS && !ret; i++) {
      if (placements[i].nvme && !have_nvme) continue;
      struct zo_sched *s = make_sched(&placements[i], v, &plan);
      CHECK(s);
      struct zo_state_io io;
      zo_sched_state_io(s, &io);
      char dir[400], got[PATH_MAX];
      snprintf(dir, sizeof dir, "%s/ckpt-%s-%d", tmpdir, placements[i].name, v);
      CHECK(zo_sched_set_state(s, (const float *)(void *)st.part[0], st.part[1], st.part[2]) == 0);
      CHECK(zo_checkpoint_save_io(dir, zo_sched_model(s), &f, &io, &ts, 0, got, sizeof got) == 0);
      CHECK(zo_sched_state_done(s) == 0);
      const char *files[] = {"model.safetensors", "optimizer.safetensors", "config.json", "trainer_state.json"};
      for (int k = 0; k < 4; k++) {
        char a[PATH_MAX + 32], b[PATH_MAX + 32];
        snprintf(a, sizeof a, "%s/%s", path, files[k]);
        snprintf(b, sizeof b, "%s/%s", got, files[k]);
        if (!same_file(a, b)) ret = zo_test_fail("%s variant %d: %s differs from the host-buffer save", placements[i].name, v, files[k]);
      }
      zo_sched_free(s);
      /* ...and the reference loads into the next placement exactly. */
      const struct placement *next = &placements[(i + 1) % N_PLACEMENTS];
      if (next->nvme && !have_nvme) continue;
      struct zo_sched *s2 = make_sched(next, v, &plan);
      CHECK(s2);
      struct zo_state_io io2;
      zo_sched_state_io(s2, &io2);
      struct zo_train_state back;
      CHECK(zo_checkpoint_load_io(path, zo_sched_model(s2), &f, &io2, true, &back) == 0);
      CHECK(zo_sched_state_done(s2) == 0);
      CHECK(back.step == 5 && back.data_position == 12);
      if (check_equal(s2, &st, next->name)) ret = 1;
      zo_sched_free(s2);
    }
    state_free(&st);
  }
  return ret;
}

/* A state read that fails its CRC during a save fails the save; the previous
 * checkpoint stays complete and loadable, nothing half-written is left. */
static int test_save_read_error(void) {
  if (!have_nvme) return ZO_TEST_SKIP;
  struct zo_plan plan;
  struct zo_sched *s = make_sched(&placements[3], 0, &plan);
  CHECK(s);
  struct state st;
  state_alloc(&st, s);
  zo_rng_seed(5);
  for (int p = 0; p < ZO_STATE_N_PARTS; p++) random_bytes(s, (enum zo_state_part)p, st.part[p], 0, st.nbytes[p]);
  CHECK(zo_sched_set_state(s, (const float *)(void *)st.part[0], st.part[1], st.part[2]) == 0);
  const struct zo_optim_format f = zo_sched_placement(s)->opt;
  struct zo_state_io io;
  zo_sched_state_io(s, &io);
  char dir[400], path[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/ckpt-crc", tmpdir);
  struct zo_train_state ts = {.step = 1, .applied_steps = 1, .seed = 1, .scaler = {.scale = 1.0}};
  CHECK(zo_checkpoint_save_io(dir, zo_sched_model(s), &f, &io, &ts, 0, path, sizeof path) == 0);
  CHECK(zo_sched_state_done(s) == 0);
  /* One byte of the master file's second block, flipped on disk. */
  char master[700] = "";
  DIR *d = opendir(nvme_dir);
  CHECK(d);
  struct dirent *e;
  while ((e = readdir(d)))
    if (strncmp(e->d_name, "zoffload-nvme-", 14) == 0) snprintf(master, sizeof master, "%s/%s/master", nvme_dir, e->d_name);
  closedir(d);
  FILE *mf = fopen(master, "r+b");
  CHECK(mf);
  CHECK(fseek(mf, 4096 + 17, SEEK_SET) == 0);
  const int c = fgetc(mf);
  CHECK(fseek(mf, 4096 + 17, SEEK_SET) == 0 && fputc(c ^ 0x5a, mf) != EOF && fclose(mf) == 0);
  ts.step = ts.applied_steps = 2;
  const int err = zo_checkpoint_save_io(dir, zo_sched_model(s), &f, &io, &ts, 0, path, sizeof path);
  printf("  save over a corrupt block: %s\n", zo_last_error());
  CHECK(err == -EBADMSG); /* the NVMe store's CRC mismatch */
  CHECK(strstr(zo_last_error(), "CRC") != NULL);
  (void)zo_sched_state_done(s);
  char p2[500];
  snprintf(p2, sizeof p2, "%s/checkpoint-2", dir);
  struct stat sb;
  CHECK(stat(p2, &sb) != 0);
  int entries = 0;
  d = opendir(dir);
  CHECK(d);
  while ((e = readdir(d))) entries += e->d_name[0] != '.' || strstr(e->d_name, ".tmp-") != NULL;
  closedir(d);
  CHECK(entries == 1); /* checkpoint-1 only, no temporary directory */
  snprintf(p2, sizeof p2, "%s/checkpoint-1", dir);
  float *params = zo_test_xmalloc(st.nbytes[0]);
  uint8_t *mm = zo_test_xmalloc(st.nbytes[1]), *vv = zo_test_xmalloc(st.nbytes[2]);
  struct zo_train_state back;
  CHECK(zo_checkpoint_load_optim(p2, zo_sched_model(s), params, &f, mm, vv, &back) == 0);
  CHECK(memcmp(params, st.part[0], st.nbytes[0]) == 0 && memcmp(mm, st.part[1], st.nbytes[1]) == 0 &&
        memcmp(vv, st.part[2], st.nbytes[2]) == 0);
  free(params);
  free(mm);
  free(vv);
  state_free(&st);
  zo_sched_free(s);
  return 0;
}

/* Any range of zo_model_init_range is that range of the whole-model
 * initialisation, and zo_sched_state_init writes exactly it. */
static int test_init_range(void) {
  struct zo_plan plan;
  struct zo_sched *s = make_sched(&placements[2], 0, &plan);
  CHECK(s);
  const struct zo_model *m = zo_sched_model(s);
  const size_t n = m->table.numel;
  float *full = zo_test_xmalloc(n * sizeof *full), *part = zo_test_xmalloc(n * sizeof *part);
  zo_model_init_params(m, full, 42);
  size_t zeros = 0, ones = 0;
  for (size_t i = 0; i < n; i++) zeros += full[i] == 0.0f, ones += full[i] == 1.0f;
  CHECK(zeros > 0 && ones > 0 && zeros + ones < n / 2); /* biases, norm weights, then mostly draws */
  zo_rng_seed(9);
  for (int it = 0; it < 200; it++) {
    const size_t off = zo_rng_u32() % n, k = zo_rng_u32() % (n - off + 1);
    zo_model_init_range(m, 42, off, part, k);
    if (memcmp(part, full + off, k * sizeof *part) != 0) return zo_test_fail("init range [%zu, +%zu) differs", off, k);
  }
  CHECK(zo_sched_state_init(s, 42) == 0 && zo_sched_state_fresh(s, ZO_STATE_M) == 0 &&
        zo_sched_state_fresh(s, ZO_STATE_V) == 0 && zo_sched_state_done(s) == 0);
  CHECK(zo_sched_get_state(s, part, NULL, NULL) == 0);
  CHECK(memcmp(part, full, n * sizeof *part) == 0);
  free(full);
  free(part);
  zo_sched_free(s);
  return 0;
}

/* The k-th value of one splitmix64 stream walked with its state, on one
 * thread: the truth the position-addressed draw is checked against. */
static uint64_t stream_next(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* The parallel initialisation (pieces on OpenMP's threads) is the serial
 * draw bit for bit: the whole table with pieces of 1, 2, 3 (pieces starting
 * on either element of a Box-Muller pair), odd sizes and the default, odd
 * ranges at odd offsets, for GPT-2 and a Llama with odd shapes; and GPT-2's
 * first tensor (wte, N(0, 0.02), stream position 0) is one splitmix64 stream
 * of Box-Muller pairs walked in order on one thread. */
static int test_init_parallel_is_serial(void) {
  const struct zo_model_config cfgs[2] = {
      {.arch = ZO_ARCH_GPT2, .n_layer = 2, .n_head = 3, .n_embd = 33, .vocab_size = 301, .max_seq_len = 17},
      {.arch = ZO_ARCH_LLAMA, .n_layer = 2, .n_head = 6, .n_kv_head = 3, .n_embd = 36, .intermediate_size = 51,
       .vocab_size = 203, .max_seq_len = 16}};
  for (int c = 0; c < 2; c++) {
    struct zo_model_config mc = cfgs[c];
    struct zo_tensor_table t;
    CHECK(zo_model_config_check(&mc) == 0 && zo_model_build_table(&mc, &t) == 0);
    const size_t n = t.numel;
    float *serial = zo_test_xmalloc(n * sizeof(float)), *par = zo_test_xmalloc(n * sizeof(float));
    zo_model_init_table_range(&mc, &t, 77, 0, serial, n, 0);
    const size_t pieces[] = {1, 2, 3, 7, 64, 1001, ZO_MODEL_INIT_PIECE, n - 1};
    for (size_t p = 0; p < ZO_ARRAY_LEN(pieces); p++) {
      memset(par, 0xff, n * sizeof(float));
      zo_model_init_table_range(&mc, &t, 77, 0, par, n, pieces[p]);
      if (memcmp(par, serial, n * sizeof(float)) != 0)
        return zo_test_fail("arch %d: pieces of %zu differ from the serial draw", c, pieces[p]);
    }
    zo_rng_seed(5);
    for (int it = 0; it < 40; it++) {
      const size_t off = (zo_rng_u32() % n) | 1, k = off < n ? (zo_rng_u32() % (n - off + 1)) | 1 : 0;
      const size_t piece = 1 + 2 * (zo_rng_u32() % 50);
      if (off + k > n) continue;
      zo_model_init_table_range(&mc, &t, 77, off, par, k, piece);
      if (memcmp(par, serial + off, k * sizeof(float)) != 0)
        return zo_test_fail("arch %d: range [%zu, +%zu) in pieces of %zu differs", c, off, k, piece);
    }
    if (c == 0) {
      CHECK(strcmp(t.tensors[0].name, "transformer.wte.weight") == 0 && t.tensors[0].offset == 0);
      uint64_t state = 77;
      const size_t real = (size_t)mc.vocab_size * mc.n_embd;
      for (size_t e = 0; e < real; e += 2) {
        const double u1 = ((double)(stream_next(&state) >> 11) + 1.0) * 0x1.0p-53;
        const double u2 = (double)(stream_next(&state) >> 11) * 0x1.0p-53;
        const double r = sqrt(-2.0 * log(u1)) * 0.02;
        const float want[2] = {(float)(r * cos(2.0 * M_PI * u2)), (float)(r * sin(2.0 * M_PI * u2))};
        for (size_t j = 0; j < 2 && e + j < real; j++)
          if (memcmp(&serial[e + j], &want[j], sizeof(float)) != 0)
            return zo_test_fail("wte[%zu] = %.9g, the stream walked in order gives %.9g", e + j, serial[e + j], want[j]);
      }
    }
    free(serial), free(par);
    zo_tensor_table_free(&t);
  }
  return 0;
}

/* A Llama with a padding index, initialised from scratch: the embedding's
 * padding row is zero (transformers' _init_weights zeroes
 * weight[padding_idx]), every other element is the draw without a padding
 * index (the row's draws are still consumed), in any pieces; tied and
 * untied (the untied head's row is drawn). */
static int test_init_padding_row(void) {
  for (int tied = 0; tied < 2; tied++) {
    struct zo_model_config plain = {.arch = ZO_ARCH_LLAMA, .n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_embd = 24,
                                    .intermediate_size = 37, .vocab_size = 101, .max_seq_len = 16,
                                    .tie_embeddings = tied};
    struct zo_model_config pad = plain;
    pad.has_padding_idx = true;
    pad.padding_idx = 41;
    struct zo_tensor_table t;
    CHECK(zo_model_config_check(&plain) == 0 && zo_model_config_check(&pad) == 0);
    CHECK(zo_model_build_table(&pad, &t) == 0);
    const size_t n = t.numel, C = (size_t)pad.n_embd, r0 = (size_t)pad.padding_idx * C;
    float *want = zo_test_xmalloc(n * sizeof(float)), *got = zo_test_xmalloc(n * sizeof(float));
    zo_model_init_table_range(&plain, &t, 77, 0, want, n, 0);
    for (size_t e = r0; e < r0 + C; e++) {
      if (want[e] == 0.0f) return zo_test_fail("the draw without a padding index has a zero at %zu", e);
      want[e] = 0.0f;
    }
    const size_t pieces[] = {0, 1, 7, 64, r0 + 5};
    for (size_t p = 0; p < ZO_ARRAY_LEN(pieces); p++) {
      memset(got, 0xff, n * sizeof(float));
      zo_model_init_table_range(&pad, &t, 77, 0, got, n, pieces[p]);
      if (memcmp(got, want, n * sizeof(float)) != 0)
        return zo_test_fail("tied %d, pieces of %zu: not the plain draw with row %d zeroed", tied, pieces[p],
                            pad.padding_idx);
    }
    free(want), free(got);
    zo_tensor_table_free(&t);
  }
  return 0;
}

/* A forward-only model's io (eval, sample): writes land in the working
 * dtype rounded once (fp32 exactly), reads widen them back, ranges at any
 * float offset; m and v are refused. */
static int test_model_io(void) {
  const enum zo_dtype dts[2] = {ZO_F32, ZO_BF16};
  struct zo_model_config mc = {.arch = ZO_ARCH_GPT2, .n_layer = 2, .n_head = 2, .n_embd = 32, .vocab_size = 300,
                               .max_seq_len = 16};
  CHECK(zo_model_config_check(&mc) == 0);
  for (int d = 0; d < 2; d++) {
    const struct zo_model_layout lo = {.training = false, .dtype = dts[d]};
    struct zo_model *m = zo_model_init_layout(&mc, zo_backend_cpu(), 2, 8, &lo);
    CHECK(m);
    const size_t n = m->table.numel;
    float *src = zo_test_xmalloc(n * sizeof *src), *want = zo_test_xmalloc(n * sizeof *want),
          *got = zo_test_xmalloc(n * sizeof *got);
    uint16_t *half = zo_test_xmalloc(n * sizeof *half);
    zo_rng_seed(31);
    for (size_t i = 0; i < n; i++) src[i] = zo_rng_float(-1.0f, 1.0f);
    if (dts[d] == ZO_F32) {
      memcpy(want, src, n * sizeof *want);
    } else {
      zo_cpu_cast(half, ZO_BF16, src, ZO_F32, n);
      zo_cpu_cast(want, ZO_F32, half, ZO_BF16, n);
    }
    struct zo_state_io io;
    CHECK(zo_state_io_model(&io, m) == 0);
    /* Written in three uneven pieces, out of order. */
    const size_t a = n / 3 + 1, b = 2 * n / 3 + 5;
    CHECK(io.write(io.ctx, ZO_STATE_PARAMS, b * 4, src + b, (n - b) * 4) == 0);
    CHECK(io.write(io.ctx, ZO_STATE_PARAMS, 0, src, a * 4) == 0);
    CHECK(io.write(io.ctx, ZO_STATE_PARAMS, a * 4, src + a, (b - a) * 4) == 0);
    CHECK(io.read(io.ctx, ZO_STATE_PARAMS, 0, got, n * 4) == 0);
    CHECK(memcmp(got, want, n * sizeof *got) == 0);
    CHECK(zo_model_download_params(m, got) == 0 && memcmp(got, want, n * sizeof *got) == 0);
    CHECK(io.write(io.ctx, ZO_STATE_M, 0, src, 4) == -EINVAL);
    zo_state_io_free(&io);
    free(src);
    free(want);
    free(got);
    free(half);
    zo_model_free(m);
  }
  return 0;
}

/* The host plan of a GPT-2 124M run with everything offloaded holds one
 * staging buffer (its largest Conv1D weight, c_fc), not 12 bytes per
 * parameter of full copies. */
static int test_plan_staging_is_small(void) {
  struct zo_config cfg;
  char nv[400];
  snprintf(nv, sizeof nv, "zero_optimization.offload_optimizer.nvme_path=%s", nvme_dir);
  const char *sets[] = {"model.n_layer=12", "model.n_head=12", "model.n_embd=768", "model.vocab_size=50257",
                        "model.max_seq_len=1024", "data.seq_len=64", "train_micro_batch_size_per_gpu=1",
                        "engine.device=cpu", "zero_optimization.stage=3",
                        "zero_optimization.offload_optimizer.device=nvme", "zero_optimization.offload_param.device=cpu",
                        "bf16.enabled=true", nv};
  CHECK(zo_config_load(&cfg, NULL, sets, ZO_ARRAY_LEN(sets)) == 0);
  struct zo_model_config mc = cfg.model.spec;
  struct zo_plan plan;
  CHECK(zo_plan_build(&cfg, &mc, NULL, &plan) == 0);
  struct zo_tensor_table t;
  CHECK(zo_model_config_check(&mc) == 0 && zo_model_build_table(&mc, &t) == 0);
  const size_t stage = zo_state_stage_bytes(&t), c_fc = 3072 * 768 * sizeof(float);
  printf("  124M: %zu parameters, state staging %zu bytes, host total %zu\n", t.numel, stage,
         plan.total[ZO_TIER_HOST]);
  CHECK(stage == c_fc);
  CHECK(plan.bytes[ZO_TIER_HOST][ZO_SCHED_MEM_STAGE] == zo_host_round(stage));
  CHECK(plan.bytes[ZO_TIER_HOST][ZO_SCHED_MEM_STAGE] < t.numel * sizeof(float) / 40);
  zo_tensor_table_free(&t);
  zo_config_free(&cfg);
  return 0;
}

int main(void) {
  if (zo_test_mkdtemp(tmpdir, sizeof tmpdir, "state")) return 1;
  snprintf(nvme_dir, sizeof nvme_dir, "%s/nvme", tmpdir);
  have_nvme = zo_etest_nvme_probe(nvme_dir);
  static const struct zo_test tests[] = {
      ZO_TEST(init_range),
      ZO_TEST(init_parallel_is_serial),
      ZO_TEST(init_padding_row),
      ZO_TEST(random_access_device_host),
      ZO_TEST(random_access_nvme),
      ZO_TEST(checkpoint_through_io),
      ZO_TEST(save_read_error),
      ZO_TEST(model_io),
      ZO_TEST(plan_staging_is_small),
  };
  struct zo_test_counts counts = zo_test_run(tests, sizeof tests / sizeof tests[0]);
  zo_test_rmtree(tmpdir);
  return zo_test_report(counts);
}
