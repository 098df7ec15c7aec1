/* Checkpoints: our own directory format (model.safetensors and config.json
 * as a Hugging Face directory, engine/store/hf_dir.c; the optimizer states; and
 * trainer_state.json), its transactions across ranks, loads and retention.
 * Saves are atomic directories whose files are listed with their CRC32 in
 * trainer_state.json (written last); loads verify every CRC before reading a
 * single tensor. AdamW8bit states are stored as flat code / absmax / fp32
 * segments in table order; states are never converted between formats. */
#include "zo/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zo/adamw8bit.h"
#include "zo/fsutil.h"
#include "zo/run_tokenizer.h"
#include "zo/run_settings.h"
#include "zo/hf.h"
#include "zo/safetensors.h"
#include "zo/state.h"

#include "../model/arch.h"
#include "state_files.h"
#include "zo/lora_ckpt.h"

/* Every checkpoint's files besides the optimizer's: optimizer.safetensors,
 * or one optimizer-<r>-of-<N>.safetensors per rank of a sharded run. */
static const char *const ckpt_files[] = {"model.safetensors", "config.json"};
#define N_CKPT_FILES 2
/* A LoRA run's instead (zo/lora_ckpt.h): a PEFT adapter directory and the adapters' m, v. */
static const char *const lora_files[] = {"adapter_model.safetensors", "adapter_config.json", ZO_LORA_OPTIM_FILE};
static const char *model_file(bool lora, int i) { return lora ? lora_files[i] : i < N_CKPT_FILES ? ckpt_files[i] : NULL; }

/* CRC32 of a whole file, read with read(2) through a bounded buffer: a
 * mapping read end to end would count the whole file, model or optimizer
 * states, in the process's resident set (RssFile) until unmapped. */
#define CRC_BUF ((size_t)4 << 20)
static int file_crc(const char *path, uint32_t *crc) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return zo_error(-errno, "%s: %s", path, strerror(errno));
  int err = 0;
  uint8_t *buf = malloc(CRC_BUF);
  if (!buf) {
    err = zo_error(-ENOMEM, "%s: out of host memory for a %zu-byte checksum buffer", path, CRC_BUF);
    goto out_close;
  }
  *crc = zo_crc32(0, NULL, 0);
  for (;;) {
    const ssize_t r = read(fd, buf, CRC_BUF);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      err = zo_error(-errno, "%s: read: %s", path, strerror(errno));
      break;
    }
    if (r == 0) break;
    *crc = zo_crc32(*crc, buf, (size_t)r);
  }
  free(buf);
out_close:
  close(fd);
  return err;
}

/* The io's write of [data, data + nbytes), a slice of a read-only file
 * mapping, in bounded slices, each slice's whole pages dropped from the
 * resident set once written (advice: a failure costs memory only). */
#define LOAD_SLICE ((size_t)16 << 20)
static int io_write_mapped(const struct zo_state_io *io, enum zo_state_part part, size_t off, const uint8_t *data,
                           size_t nbytes) {
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  for (size_t pos = 0; pos < nbytes;) {
    const size_t n = nbytes - pos < LOAD_SLICE ? nbytes - pos : LOAD_SLICE;
    int err = io->write(io->ctx, part, off + pos, data + pos, n);
    if (err) return err;
    const uintptr_t lo = ((uintptr_t)(data + pos) + page - 1) / page * page, hi = (uintptr_t)(data + pos + n) / page * page;
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
    pos += n;
  }
  return 0;
}

static int parse_step(const char *name, long *step) {
  char *end;
  if (strncmp(name, "checkpoint-", 11) != 0) return -1;
  errno = 0;
  long v = strtol(name + 11, &end, 10);
  if (errno || end == name + 11 || *end || v < 0) return -1;
  *step = v;
  return 0;
}

static int cmp_long(const void *a, const void *b) {
  long x = *(const long *)a, y = *(const long *)b;
  return (x > y) - (x < y);
}

/* Steps of the checkpoint-<step> directories under dir, ascending. */
static int list_steps(const char *dir, long **steps, int *n) {
  *steps = NULL;
  *n = 0;
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? 0 : zo_error(-errno, "%s: %s", dir, strerror(errno));
  int cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    long s;
    if (parse_step(e->d_name, &s)) continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 16;
      long *p = realloc(*steps, (size_t)cap * sizeof *p);
      if (!p) {
        closedir(d);
        free(*steps);
        *steps = NULL;
        return zo_error(-ENOMEM, "out of memory listing %s", dir);
      }
      *steps = p;
    }
    (*steps)[(*n)++] = s;
  }
  closedir(d);
  if (*n > 1) qsort(*steps, (size_t)*n, sizeof **steps, cmp_long);
  return 0;
}

int zo_checkpoint_list(const char *dir, long **steps, int *n) { return list_steps(dir, steps, n); }

/* Whether checkpoint directory path is whole: trainer_state.json and every
 * file it lists are there (sizes and checksums are the load's to check). */
static bool checkpoint_is_whole(const char *path) {
  char p[PATH_MAX];
  if (join(p, sizeof p, path, "trainer_state.json")) return false;
  json_t *j = json_load_file(p, 0, NULL);
  if (!j) return false;
  json_t *files = json_object_get(j, "files");
  bool whole = json_is_object(files) && json_object_size(files) > 0;
  const char *name;
  json_t *v;
  json_object_foreach(files, name, v) {
    if (!whole) break;
    whole = !strchr(name, '/') && join(p, sizeof p, path, name) == 0 && access(p, F_OK) == 0;
  }
  json_decref(j);
  return whole;
}

int zo_checkpoint_refuse_unchecked(const char *path) {
  char p[PATH_MAX];
  int err = join(p, sizeof p, path, "trainer_state.json");
  if (err || access(p, F_OK) == 0) return err;
  /* Ours without it: named checkpoint-<step>, or holding optimizer state. */
  snprintf(p, sizeof p, "%s", path);
  for (size_t n = strlen(p); n > 1 && p[n - 1] == '/'; n--) p[n - 1] = '\0';
  const char *slash = strrchr(p, '/'), *base = slash ? slash + 1 : p;
  long step;
  char tail;
  const bool ours = sscanf(base, "checkpoint-%ld%c", &step, &tail) == 1;
  const char *why = ours ? "its name says a zoffload checkpoint" : NULL;
  DIR *d = opendir(path);
  for (const struct dirent *e; !why && d && (e = readdir(d));)
    if (!strcmp(e->d_name, "optimizer.safetensors") || !strncmp(e->d_name, "optimizer-", 10))
      why = "it holds optimizer state";
  if (d) closedir(d);
  if (!why) return 0; /* a Hugging Face directory */
  return zo_error(-EINVAL, "%s: a checkpoint without trainer_state.json (%s): that file holds the checksums of the "
                           "others and is written last, so the save did not finish or the file was removed, and "
                           "its weights cannot be checked; use an earlier checkpoint", path, why);
}

/* Removes dir/name, saying so on log with why. */
static int remove_leftover(const char *dir, const char *name, const char *why, FILE *log) {
  char p[PATH_MAX];
  int err = join(p, sizeof p, dir, name);
  if (!err) err = zo_remove_tree(p);
  if (err) return zo_error(err, "cannot remove %s (%s): %s", name, why, zo_last_error());
  if (log) fprintf(log, "removed %s: %s\n", p, why);
  return 0;
}

int zo_checkpoint_clean_leftovers(const char *dir, FILE *log) {
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? 0 : zo_error(-errno, "%s: %s", strerror(errno), dir);
  int err = 0;
  struct dirent *e;
  /* Names first: removing while listing may skip entries. */
  char (*names)[256] = NULL;
  const char **whys = NULL;
  int n = 0, cap = 0;
  while ((e = readdir(d))) {
    const char *nm = e->d_name, *why = NULL;
    long step;
    if (!strncmp(nm, ".checkpoint-", 12) && strstr(nm, ".tmp-"))
      why = "a save that did not finish (the process was killed or crashed)";
    else if (!strncmp(nm, ".checkpoint-", 12) && strstr(nm, ".prune-"))
      why = "a checkpoint whose removal by checkpoint.keep did not finish";
    else if (parse_step(nm, &step) == 0) {
      char p[PATH_MAX];
      if (join(p, sizeof p, dir, nm) == 0 && !checkpoint_is_whole(p))
        why = "an incomplete checkpoint (files missing: left half removed by a killed run)";
    }
    if (!why) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 8;
      void *a = realloc(names, (size_t)cap * sizeof *names), *b = a ? realloc(whys, (size_t)cap * sizeof *whys) : NULL;
      if (a) names = a;
      if (b) whys = b;
      if (!a || !b) {
        err = zo_error(-ENOMEM, "out of host memory listing %s", dir);
        break;
      }
    }
    snprintf(names[n], sizeof names[n], "%s", nm);
    whys[n++] = why;
  }
  closedir(d);
  for (int i = 0; i < n && !err; i++) err = remove_leftover(dir, names[i], whys[i], log);
  free(names);
  free(whys);
  return err;
}

int zo_checkpoint_remove_all(const char *dir, FILE *log) {
  long *steps;
  int n, err = list_steps(dir, &steps, &n);
  for (int i = 0; i < n && !err; i++) {
    char name[64];
    snprintf(name, sizeof name, "checkpoint-%ld", steps[i]);
    err = remove_leftover(dir, name, "--overwrite", log);
  }
  free(steps);
  return err;
}

int zo_checkpoint_latest(const char *dir, char *out_path, size_t out_size) {
  long *steps;
  int n, err = list_steps(dir, &steps, &n);
  if (err) return err;
  if (n == 0) return zo_error(-ENOENT, "%s: no checkpoint-<step> directory to resume from", dir);
  snprintf(out_path, out_size, "%s/checkpoint-%ld", dir, steps[n - 1]);
  free(steps);
  return 0;
}

/* ---- optimizer states ----------------------------------------------------
 * An AdamW8bit state in the canonical layout (zo/sched.h) is stored as three
 * flat tensors per state, each the concatenation in table order of one kind
 * of segment: the 8-bit tensors' codes, their absmax, the others' fp32. */
enum seg_kind { SEG_CODE, SEG_ABSMAX, SEG_FP32, SEG_KINDS };
static const char *const seg_suffix[SEG_KINDS] = {"code", "absmax", "fp32"};
static const enum zo_dtype seg_dtype[SEG_KINDS] = {ZO_U8, ZO_F32, ZO_F32};

/* Tensor i's segment of kind k: its bytes (0: none) and offset in the
 * canonical layout, given the tensor's canonical offset soff. */
static size_t seg_of(const struct zo_optim_format *f, const struct zo_tensor_info *ti, enum seg_kind k,
                     size_t soff, size_t *off) {
  const bool q = zo_optim_is_8bit(f, ti->numel);
  *off = soff;
  if (k == SEG_FP32) return q ? 0 : ti->numel * sizeof(float);
  if (!q) return 0;
  if (k == SEG_CODE) return ti->numel;
  *off = soff + (ti->numel + 3) / 4 * 4;
  return zo_adamw8bit_n_blocks(ti->numel, f->block) * sizeof(float);
}

/* Bytes of kind k over tensors [lo, hi). */
static size_t seg_total(const struct zo_optim_format *f, const struct zo_tensor_table *t, enum seg_kind k, int lo,
                        int hi) {
  size_t n = 0, off;
  for (int i = lo; i < hi; i++) n += seg_of(f, &t->tensors[i], k, 0, &off);
  return n;
}

/* The segments of kind k of tensors [lo, hi) (an optimizer file of a
 * sharded run holds one rank's run of tensors). */
struct seg_view {
  const struct zo_optim_format *f;
  const struct zo_tensor_table *t;
  const struct zo_state_io *io;
  enum zo_state_part part;
  enum seg_kind kind;
  int lo, hi;
};

/* zo_st_fill_fn: bytes [offset, offset + nbytes) of the concatenated
 * segments, read through the io. */
static int fill_segments(void *ctx, void *dst, size_t offset, size_t nbytes) {
  const struct seg_view *v = ctx;
  size_t pos = 0, soff = zo_optim_tensor_offset(v->f, v->t, v->lo);
  for (int i = v->lo; i < v->hi && nbytes; i++) {
    const struct zo_tensor_info *ti = &v->t->tensors[i];
    size_t at;
    const size_t len = seg_of(v->f, ti, v->kind, soff, &at);
    soff += zo_optim_piece_nbytes(v->f, zo_optim_is_8bit(v->f, ti->numel), ti->numel);
    if (offset < pos + len) {
      const size_t skip = offset - pos, take = len - skip < nbytes ? len - skip : nbytes;
      int err = v->io->read(v->io->ctx, v->part, at + skip, dst, take);
      if (err) return err;
      dst = (char *)dst + take;
      offset += take;
      nbytes -= take;
    }
    pos += len;
  }
  ZO_ASSERT(nbytes == 0);
  return 0;
}

/* Adds one state (part, named name) to w: fp32 AdamW as one flat tensor,
 * which is the canonical layout itself (one segment of kind SEG_FP32). */
static int add_state(struct zo_st_writer *w, const char *name, const struct zo_optim_format *f,
                     const struct zo_tensor_table *t, const struct zo_state_io *io, enum zo_state_part part,
                     struct seg_view views[SEG_KINDS], int lo, int hi) {
  if (!f->eightbit) {
    const int64_t shape[1] = {(int64_t)(seg_total(f, t, SEG_FP32, lo, hi) / sizeof(float))};
    views[SEG_FP32] = (struct seg_view){f, t, io, part, SEG_FP32, lo, hi};
    return zo_st_writer_add_fill(w, name, ZO_F32, 1, shape, fill_segments, &views[SEG_FP32]);
  }
  for (int k = 0; k < SEG_KINDS; k++) {
    const size_t nb = seg_total(f, t, (enum seg_kind)k, lo, hi);
    const int64_t shape[1] = {(int64_t)(nb / zo_dtype_size(seg_dtype[k]))};
    char tn[64];
    snprintf(tn, sizeof tn, "%s.%s", name, seg_suffix[k]);
    views[k] = (struct seg_view){f, t, io, part, (enum seg_kind)k, lo, hi};
    int err = zo_st_writer_add_fill(w, tn, seg_dtype[k], 1, shape, fill_segments, &views[k]);
    if (err) return err;
  }
  return 0;
}

int zo_checkpoint_save(const char *dir, const struct zo_model *m, const float *params,
                       const struct zo_optim_format *opt, const void *adam_m, const void *adam_v,
                       const struct zo_train_state *state, int keep, char *out_path, size_t out_size) {
  const struct zo_optim_format fp32 = {.block = ZO_ADAMW8BIT_BLOCK, .min_numel = ZO_ADAMW8BIT_MIN_NUMEL};
  const struct zo_optim_format *f = opt ? opt : &fp32;
  struct zo_state_mem mem;
  struct zo_state_io io;
  int err = with_memory_io(m, f, params, adam_m, adam_v, &mem, &io);
  if (!err) err = zo_checkpoint_save_io(dir, m, f, &io, state, keep, out_path, out_size);
  zo_state_io_free(&io);
  return err;
}

int zo_checkpoint_begin(const char *dir, long step, struct zo_checkpoint_txn *x) {
  memset(x, 0, sizeof *x);
  int err = zo_mkdir_p(dir, 0755);
  if (err) return err;
  char name[64];
  snprintf(name, sizeof name, ".checkpoint-%ld.tmp-%ld", step, (long)getpid());
  if ((err = join(x->tmp, sizeof x->tmp, dir, name))) return err;
  if ((err = join(x->final, sizeof x->final, dir, name + 1))) return err;
  *strstr(x->final + strlen(dir), ".tmp-") = '\0';
  snprintf(x->dir, sizeof x->dir, "%s", dir);
  zo_remove_tree(x->tmp); /* a leftover of a crashed save with the same pid */
  return zo_mkdir_p(x->tmp, 0755);
}

void zo_checkpoint_abort(const struct zo_checkpoint_txn *x) {
  /* The error that made the save fail is the one to report: a failed
   * removal (a read-only file system, a directory never created) only adds
   * a warning. */
  char first[1024];
  snprintf(first, sizeof first, "%s", zo_last_error());
  struct stat st;
  if (x->tmp[0] && lstat(x->tmp, &st) == 0 && zo_remove_tree(x->tmp) != 0)
    fprintf(stderr, "zoffload: warning: %s\n", zo_last_error());
  zo_error(-EIO, "%s", first);
}

/* "saving checkpoint-N: why": the reason first, the full path (which may
 * fill the message) only inside it. */
static int txn_fail(const struct zo_checkpoint_txn *x, int err) {
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", zo_last_error());
  const char *base = strrchr(x->final, '/');
  return zo_error(err, "saving %s: %s", base ? base + 1 : x->final, msg);
}

/* The parameters a save reads are checked finite as they stream by: a
 * checkpoint with a NaN or infinite weight is never written. */
struct finite_io {
  const struct zo_state_io *inner;
  const struct zo_tensor_table *t;
};

static int finite_read(void *ctx, enum zo_state_part p, size_t off, void *dst, size_t nbytes) {
  const struct finite_io *f = ctx;
  int err = f->inner->read(f->inner->ctx, p, off, dst, nbytes);
  if (err || p != ZO_STATE_PARAMS) return err;
  const float *v = dst;
  for (size_t i = 0; i < nbytes / sizeof(float); i++) {
    if (isfinite(v[i])) continue;
    const size_t e = off / sizeof(float) + i;
    const char *name = "?";
    for (int k = 0; k < f->t->n_tensors; k++)
      if (e >= f->t->tensors[k].offset && e < f->t->tensors[k].offset + f->t->tensors[k].numel)
        name = f->t->tensors[k].name;
    return zo_error(-ERANGE, "parameter %s holds %g (element %zu of the table): a checkpoint with non-finite "
                             "weights is never written", name, (double)v[i], e);
  }
  return 0;
}

static int finite_write(void *ctx, enum zo_state_part p, size_t off, const void *src, size_t nbytes) {
  const struct finite_io *f = ctx;
  return f->inner->write(f->inner->ctx, p, off, src, nbytes);
}

int zo_checkpoint_write_model(const struct zo_checkpoint_txn *x, const struct zo_model *m,
                              const struct zo_state_io *io) {
  const struct finite_io fctx = {io, &m->table};
  const struct zo_state_io fio = {.ctx = (void *)(uintptr_t)&fctx, .read = finite_read, .write = finite_write,
                                  .stage = io->stage, .stage_bytes = io->stage_bytes};
  int err = zo_model_save_pretrained_io(x->tmp, m, &fio);
  return err ? txn_fail(x, err) : 0;
}

void zo_checkpoint_shard_name(int shard, int n_shards, char *buf, size_t size) {
  if (n_shards <= 0) snprintf(buf, size, "optimizer.safetensors");
  else snprintf(buf, size, "optimizer-%05d-of-%05d.safetensors", shard + 1, n_shards);
}

int zo_checkpoint_write_optimizer(const struct zo_checkpoint_txn *x, const struct zo_model *m,
                                  const struct zo_optim_format *f, const struct zo_state_io *io, int shard,
                                  int n_shards, int t_lo, int t_hi, uint32_t *crc) {
  ZO_ASSERT(0 <= t_lo && t_lo <= t_hi && t_hi <= m->table.n_tensors);
  char fname[64], path[PATH_MAX];
  zo_checkpoint_shard_name(shard, n_shards, fname, sizeof fname);
  struct zo_st_writer *w = zo_st_writer_init();
  if (!w) return txn_fail(x, zo_error(-ENOMEM, "out of host memory saving the optimizer state"));
  struct seg_view views[2][SEG_KINDS];
  char bs[32], mn[32], lo[32], nt[32];
  snprintf(bs, sizeof bs, "%zu", f->block);
  snprintf(mn, sizeof mn, "%zu", f->min_numel);
  snprintf(lo, sizeof lo, "%d", t_lo);
  snprintf(nt, sizeof nt, "%d", t_hi - t_lo);
  int err;
  if (!(err = join(path, sizeof path, x->tmp, fname)) &&
      !(err = add_state(w, "exp_avg", f, &m->table, io, ZO_STATE_M, views[0], t_lo, t_hi)) &&
      !(err = add_state(w, "exp_avg_sq", f, &m->table, io, ZO_STATE_V, views[1], t_lo, t_hi)) &&
      !(err = zo_st_writer_set_metadata(w, "layout", zo_model_arch_name(m->cfg.arch))) &&
      !(err = zo_st_writer_set_metadata(w, "optimizer", f->eightbit ? "AdamW8bit" : "AdamW")) &&
      (n_shards <= 0 || (!(err = zo_st_writer_set_metadata(w, "first_tensor", lo)) &&
                         !(err = zo_st_writer_set_metadata(w, "n_tensors", nt)))) &&
      (!f->eightbit || (!(err = zo_st_writer_set_metadata(w, "block_size", bs)) &&
                        !(err = zo_st_writer_set_metadata(w, "min_8bit_size", mn)))))
    err = zo_st_writer_write(w, path);
  zo_st_writer_free(w);
  if (!err && crc) err = file_crc(path, crc);
  return err ? txn_fail(x, err) : 0;
}

/* trainer_state.json's "settings": each recorded key's value string. */
static int add_settings(json_t *j, const struct zo_run_settings *s) {
  json_t *o = json_object();
  int bad = !o;
  for (int i = 0; i < zo_run_settings_n() && !bad; i++) {
    const char *v = zo_run_settings_value(s, i);
    json_t *js = v ? json_string(v) : NULL;
    if (v && !js && o) {
      json_decref(o);
      return zo_error(-EINVAL, "%s = %s: not UTF-8, and trainer_state.json records it as a string: give a path in "
                               "UTF-8", zo_run_settings_key(i), v);
    }
    if (v) bad = json_object_set_new(o, zo_run_settings_key(i), js);
  }
  if (!bad) bad = json_object_set_new(j, "settings", o);
  else json_decref(o);
  return bad ? zo_error(-ENOMEM, "out of memory building trainer_state.json's settings") : 0;
}

int zo_checkpoint_commit(const struct zo_checkpoint_txn *x, const struct zo_train_state *state, int n_shards,
                         const uint32_t *shard_crcs, const struct zo_checkpoint_opts *o, char *out_path,
                         size_t out_size) {
  const int keep = o->keep;
  char path[PATH_MAX];
  int err = 0;
  json_t *files = json_object();
  for (int i = 0; i < (o->lora ? 3 : N_CKPT_FILES) && files && !err; i++) {
    uint32_t crc;
    if ((err = join(path, sizeof path, x->tmp, model_file(o->lora, i))) || (err = file_crc(path, &crc))) break;
    json_object_set_new(files, model_file(o->lora, i), json_integer(crc));
  }
  /* The run's tokenizer files, so the checkpoint is a whole model directory. */
  const char *tok = o->tokenizer ? o->tokenizer : "";
  if (tok[0] && files && !err) err = zo_tokenizer_copy_files(tok, x->tmp);
  for (int i = 0; i < ZO_TOKENIZER_N_FILES && tok[0] && files && !err; i++) {
    uint32_t crc;
    struct stat tst;
    if ((err = join(path, sizeof path, x->tmp, zo_tokenizer_files[i]))) break;
    if (stat(path, &tst) != 0) continue;
    if ((err = file_crc(path, &crc))) break;
    json_object_set_new(files, zo_tokenizer_files[i], json_integer(crc));
  }
  if (n_shards == 0 && !o->lora && files && !err) {
    uint32_t crc;
    if (!(err = join(path, sizeof path, x->tmp, "optimizer.safetensors")) && !(err = file_crc(path, &crc)))
      json_object_set_new(files, "optimizer.safetensors", json_integer(crc));
  }
  for (int r = 0; r < n_shards && files; r++) {
    char fname[64];
    zo_checkpoint_shard_name(r, n_shards, fname, sizeof fname);
    json_object_set_new(files, fname, json_integer(shard_crcs[r]));
  }
  if (err) {
    json_decref(files);
    return txn_fail(x, err);
  }
  const struct zo_loss_scaler *ls = &state->scaler;
  json_t *j = files ? json_pack("{s:I, s:I, s:I, s:I, s:f, s:i, s:I, s:I, s:I, s:I, s:i, s:i, s:o}", "step",
                                (json_int_t)state->step, "applied_steps", (json_int_t)state->applied_steps,
                                "skipped_steps", (json_int_t)state->skipped_steps, "data_position",
                                (json_int_t)state->data_position, "loss_scale", ls->scale,
                                "loss_scale_hysteresis_left", ls->hysteresis_left, "loss_scale_iter",
                                (json_int_t)ls->iter, "loss_scale_last_overflow",
                                (json_int_t)ls->last_overflow, "seed", (json_int_t)state->seed,
                                "batch_rows", (json_int_t)state->batch_rows, "world_size", state->world_size,
                                "optimizer_shards", n_shards > 0 ? n_shards : 0, "files", files)
                    : NULL;
  if (!j) return txn_fail(x, zo_error(-ENOMEM, "out of memory building trainer_state.json"));
  if (n_shards < 0) json_object_set_new(j, "weights_only", json_true());
  if (o->lora) json_object_set_new(j, "lora", json_true());
  if (o->settings && (err = add_settings(j, o->settings))) {
    json_decref(j);
    return txn_fail(x, err);
  }
  const struct zo_run_inputs *in = &state->inputs;
  if (in->data_known)
    json_object_set_new(j, "data_train", json_pack("{s:s, s:I, s:I}", "path", in->data_path, "bytes",
                                                   (json_int_t)in->data_bytes, "fingerprint",
                                                   (json_int_t)in->data_crc));
  err = join(path, sizeof path, x->tmp, "trainer_state.json");
  if (!err) err = write_json(path, j);
  json_decref(j);
  if (err) return txn_fail(x, err);

  /* Replaces an existing checkpoint of the same step atomically (exchange). */
  if ((err = zo_rename_atomic_dir(x->tmp, x->final))) return txn_fail(x, err);
  if (out_path) snprintf(out_path, out_size, "%s", x->final);

  if (keep > 0) {
    /* Only checkpoints older than this one go, the keep - 1 newest of them
     * stay: the one just written (finite, finite_read saw to it) is never
     * removed, whatever steps other directories carry. Each goes by a
     * rename first, so that a kill mid-removal leaves a name the next run
     * recognises (zo_checkpoint_clean_leftovers), never a half checkpoint. */
    long *steps;
    int n;
    if (list_steps(x->dir, &steps, &n) == 0) {
      int older = 0;
      while (older < n && steps[older] < state->step) older++;
      for (int i = 0; i + (keep - 1) < older; i++) {
        char old[64], doomed[96], dpath[PATH_MAX];
        snprintf(old, sizeof old, "checkpoint-%ld", steps[i]);
        snprintf(doomed, sizeof doomed, ".checkpoint-%ld.prune-%ld", steps[i], (long)getpid());
        if (join(path, sizeof path, x->dir, old) || join(dpath, sizeof dpath, x->dir, doomed)) continue;
        if (rename(path, dpath) != 0)
          fprintf(stderr, "zoffload: warning: could not remove old checkpoint %s: %s\n", path, strerror(errno));
        else if (zo_remove_tree(dpath))
          fprintf(stderr, "zoffload: warning: could not remove old checkpoint: %s\n", zo_last_error());
      }
      free(steps);
    }
  }
  return 0;
}

int zo_checkpoint_save_opts(const char *dir, const struct zo_model *m, const struct zo_optim_format *f,
                            const struct zo_state_io *io, const struct zo_train_state *state,
                            const struct zo_checkpoint_opts *o, char *out_path, size_t out_size) {
  struct zo_checkpoint_txn x;
  int err = zo_checkpoint_begin(dir, state->step, &x);
  if (!err) err = zo_checkpoint_write_model(&x, m, io);
  if (!err && f) err = zo_checkpoint_write_optimizer(&x, m, f, io, 0, 0, 0, m->table.n_tensors, NULL);
  if (!err) err = zo_checkpoint_commit(&x, state, f ? 0 : -1, NULL, o, out_path, out_size);
  if (err) zo_checkpoint_abort(&x);
  return err;
}

int zo_checkpoint_save_io(const char *dir, const struct zo_model *m, const struct zo_optim_format *f,
                          const struct zo_state_io *io, const struct zo_train_state *state, int keep,
                          char *out_path, size_t out_size) {
  ZO_ASSERT(f != NULL);
  const struct zo_checkpoint_opts o = {.keep = keep};
  return zo_checkpoint_save_opts(dir, m, f, io, state, &o, out_path, out_size);
}

int zo_checkpoint_save_weights_io(const char *dir, const struct zo_model *m, const struct zo_state_io *io,
                                  const struct zo_train_state *state, int keep, char *out_path, size_t out_size) {
  const struct zo_checkpoint_opts o = {.keep = keep};
  return zo_checkpoint_save_opts(dir, m, NULL, io, state, &o, out_path, out_size);
}

/* Checks that optimizer.safetensors (f, at p) holds states of format opt and
 * writes them through io (canonical layout), unless io is NULL (check only). */
static int load_states(const struct zo_st_file *f, const char *p, const struct zo_tensor_table *t,
                       const struct zo_optim_format *opt, const struct zo_state_io *io, int lo, int hi) {
  const char *kind = zo_st_metadata(f, "optimizer");
  const bool file8 = zo_st_find(f, "exp_avg.code") != NULL || (kind && strcmp(kind, "AdamW8bit") == 0);
  if (file8 != opt->eightbit)
    return zo_error(-EINVAL, "%s holds %s optimizer states but optimizer.type is \"%s\": resume with "
                             "optimizer.type = \"%s\" (states are not converted between the formats)",
                    p, file8 ? "8-bit (AdamW8bit)" : "fp32 (AdamW)", opt->eightbit ? "AdamW8bit" : "AdamW",
                    file8 ? "AdamW8bit" : "AdamW");
  if (opt->eightbit) {
    const char *bs = zo_st_metadata(f, "block_size"), *mn = zo_st_metadata(f, "min_8bit_size");
    char want_bs[32], want_mn[32];
    snprintf(want_bs, sizeof want_bs, "%zu", opt->block);
    snprintf(want_mn, sizeof want_mn, "%zu", opt->min_numel);
    if (!bs || !mn || strcmp(bs, want_bs) != 0 || strcmp(mn, want_mn) != 0)
      return zo_error(-EINVAL, "%s: 8-bit states with block_size %s and min_8bit_size %s, the config has "
                               "optimizer.params.block_size = %zu and min_8bit_size = %zu: set them to the "
                               "checkpoint's values to resume",
                      p, bs ? bs : "(missing)", mn ? mn : "(missing)", opt->block, opt->min_numel);
  }
  const char *names[2] = {"exp_avg", "exp_avg_sq"};
  const enum zo_state_part parts[2] = {ZO_STATE_M, ZO_STATE_V};
  static const uint8_t zeros[4];
  int err;
  for (int s = 0; s < 2; s++) {
    const size_t base = zo_optim_tensor_offset(opt, t, lo); /* canonical bytes before tensor lo */
    if (!opt->eightbit) {
      const struct zo_st_tensor *x = zo_st_find(f, names[s]);
      const size_t want = seg_total(opt, t, SEG_FP32, lo, hi) / sizeof(float);
      if (!x || x->dtype != ZO_F32 || x->numel != want)
        return zo_error(-EINVAL, "%s: tensor %s missing or not F32 of %zu elements", p, names[s], want);
      if (io && (err = io_write_mapped(io, parts[s], base, x->data, x->nbytes))) return err;
      continue;
    }
    for (int k = 0; k < SEG_KINDS; k++) {
      char tn[64];
      snprintf(tn, sizeof tn, "%s.%s", names[s], seg_suffix[k]);
      const size_t want = seg_total(opt, t, (enum seg_kind)k, lo, hi);
      const struct zo_st_tensor *x = zo_st_find(f, tn);
      if (!x || x->dtype != seg_dtype[k] || x->nbytes != want)
        return zo_error(-EINVAL, "%s: tensor %s missing or not %s of %zu bytes", p, tn,
                        k == SEG_CODE ? "U8" : "F32", want);
      if (!io) continue;
      size_t pos = 0, soff = base;
      for (int i = lo; i < hi; i++) {
        const struct zo_tensor_info *ti = &t->tensors[i];
        size_t at;
        const size_t len = seg_of(opt, ti, (enum seg_kind)k, soff, &at);
        if (len && (err = io_write_mapped(io, parts[s], at, (const uint8_t *)x->data + pos, len))) return err;
        pos += len;
        soff += zo_optim_piece_nbytes(opt, zo_optim_is_8bit(opt, ti->numel), ti->numel);
      }
    }
    if (io) {
      /* Padding after the codes: zero, as in a fresh state. */
      size_t soff = base;
      for (int i = lo; i < hi; i++) {
        const size_t n = t->tensors[i].numel;
        const bool q = zo_optim_is_8bit(opt, n);
        if (q && (n + 3) / 4 * 4 > n && (err = io->write(io->ctx, parts[s], soff + n, zeros, (n + 3) / 4 * 4 - n)))
          return err;
        soff += zo_optim_piece_nbytes(opt, q, n);
      }
    }
  }
  return 0;
}

int zo_checkpoint_load(const char *path, const struct zo_model *m, float *params, float *adam_m,
                       float *adam_v, struct zo_train_state *state) {
  return zo_checkpoint_load_optim(path, m, params, NULL, adam_m, adam_v, state);
}

int zo_checkpoint_load_optim(const char *path, const struct zo_model *m, float *params,
                             const struct zo_optim_format *opt_in, void *adam_m, void *adam_v,
                             struct zo_train_state *state) {
  const struct zo_optim_format fp32 = {.block = ZO_ADAMW8BIT_BLOCK, .min_numel = ZO_ADAMW8BIT_MIN_NUMEL};
  const struct zo_optim_format *opt = opt_in ? opt_in : &fp32;
  /* Either both states or none (a forward-only load). */
  ZO_ASSERT(!adam_m == !adam_v);
  struct zo_state_mem mem;
  struct zo_state_io io;
  int err = with_memory_io(m, opt, params, adam_m, adam_v, &mem, &io);
  if (!err) err = zo_checkpoint_load_io(path, m, opt, &io, adam_m != NULL, state);
  zo_state_io_free(&io);
  return err;
}

/* Every file trainer_state.json lists (the model, the tokenizer's, and
 * n_opt optimizer files) is there with its recorded CRC32. */
static int verify_checksums(const char *path, json_t *j, long n_shards, int n_opt, bool lora) {
  json_t *files = json_object_get(j, "files");
  char p[PATH_MAX];
  for (int i = 0; i < (lora ? 3 : N_CKPT_FILES + n_opt); i++) {
    char fname[64];
    if (lora || i < N_CKPT_FILES) snprintf(fname, sizeof fname, "%s", model_file(lora, i));
    else zo_checkpoint_shard_name(i - N_CKPT_FILES, (int)n_shards, fname, sizeof fname);
    json_t *v = json_object_get(files, fname);
    uint32_t crc;
    int err = join(p, sizeof p, path, fname);
    if (err) return err;
    if (!json_is_integer(v)) return zo_error(-EINVAL, "%s/trainer_state.json: no checksum for %s", path, fname);
    if ((err = file_crc(p, &crc))) return err;
    if ((json_int_t)crc != json_integer_value(v))
      return zo_error(-EIO, "%s: checksum mismatch (CRC32 %08x, recorded %08llx): the file is "
                            "corrupt or truncated; resume from an earlier checkpoint",
                      p, crc, (unsigned long long)json_integer_value(v));
  }
  return 0;
}

/* trainer_state.json's counters into state, each in the range a run can
 * produce: an edited or damaged file is refused, not resumed from. A step
 * reads at most 2^20 micro-batches (a generous gradient_accumulation_steps). */
static int read_trainer_state(const char *path, json_t *j, struct zo_train_state *state) {
  long step = 0, applied = 0, skipped = 0, pos = 0, hleft = 0, siter = 0, slast = 0, seed = 0;
  int err;
  if ((err = zo_arch_json_int(j, "step", path, &step)) ||
      (err = zo_arch_json_int(j, "applied_steps", path, &applied)) ||
      (err = zo_arch_json_int(j, "skipped_steps", path, &skipped)) ||
      (err = zo_arch_json_int(j, "data_position", path, &pos)) ||
      (err = zo_arch_json_int(j, "loss_scale_hysteresis_left", path, &hleft)) ||
      (err = zo_arch_json_int(j, "loss_scale_iter", path, &siter)) ||
      (err = zo_arch_json_int(j, "loss_scale_last_overflow", path, &slast)) ||
      (err = zo_arch_json_int(j, "seed", path, &seed)))
    return err;
  json_t *ls = json_object_get(j, "loss_scale");
  if (!json_is_number(ls) || !(json_number_value(ls) > 0))
    return zo_error(-EINVAL, "%s/trainer_state.json: \"loss_scale\" is missing or not positive", path);
  if (applied + skipped != step || applied < 0 || skipped < 0)
    return zo_error(-EINVAL, "%s/trainer_state.json: applied_steps %ld + skipped_steps %ld != step %ld", path,
                    applied, skipped, step);
  const char *bad = NULL;
  char range[96] = "";
  long v = 0;
  if (step < 0 || step > (1l << 40)) bad = "step", v = step, snprintf(range, sizeof range, "0 to 2^40");
  else if (pos < 0 || pos > step * (1l << 20))
    bad = "data_position", v = pos, snprintf(range, sizeof range, "0 to step x 2^20 = %ld micro-batches", step << 20);
  else if (hleft < 0 || hleft > INT_MAX)
    bad = "loss_scale_hysteresis_left", v = hleft, snprintf(range, sizeof range, "0 to %d", INT_MAX);
  else if (siter < 0 || siter > step)
    bad = "loss_scale_iter", v = siter, snprintf(range, sizeof range, "0 to step = %ld", step);
  else if (slast < -1 || slast >= siter + (siter == 0))
    bad = "loss_scale_last_overflow", v = slast,
    snprintf(range, sizeof range, "-1 to loss_scale_iter - 1 = %ld", siter - 1);
  else if (seed < 0) bad = "seed", v = seed, snprintf(range, sizeof range, "0 to 2^63 - 1");
  if (bad)
    return zo_error(-EINVAL, "%s/trainer_state.json: \"%s\" = %ld is out of range (%s): the file was edited or "
                             "damaged; resume from another checkpoint", path, bad, v, range);
  if (!isfinite(json_number_value(ls)))
    return zo_error(-EINVAL, "%s/trainer_state.json: \"loss_scale\" is not finite", path);
  /* The scaler's settings come from the config (zo_loss_scaler_init); the
   * checkpoint restores where it stands. */
  state->step = step;
  state->applied_steps = applied;
  state->skipped_steps = skipped;
  state->data_position = (uint64_t)pos;
  state->scaler.scale = json_number_value(ls);
  state->scaler.hysteresis_left = (int)hleft;
  state->scaler.iter = siter;
  state->scaler.last_overflow = slast;
  state->seed = (uint64_t)seed;
  /* Informational, absent from older checkpoints: the state does not depend
   * on the rank count. */
  json_t *rows = json_object_get(j, "batch_rows"), *ws = json_object_get(j, "world_size");
  state->batch_rows = json_is_integer(rows) ? (long)json_integer_value(rows) : 0;
  state->world_size = json_is_integer(ws) ? (int)json_integer_value(ws) : 0;
  /* What the run trained on (absent from older checkpoints: not known). */
  json_t *d = json_object_get(j, "data_train"), *tk = json_object_get(json_object_get(j, "files"), "tokenizer.json");
  json_t *dp = json_object_get(d, "path"), *db = json_object_get(d, "bytes"), *df = json_object_get(d, "fingerprint");
  struct zo_run_inputs *in = &state->inputs;
  *in = (struct zo_run_inputs){.data_known = json_is_string(dp) && json_is_integer(db) && json_is_integer(df),
                               .tokenizer = json_is_integer(tk)};
  if (in->data_known) {
    snprintf(in->data_path, sizeof in->data_path, "%s", json_string_value(dp));
    in->data_bytes = (uint64_t)json_integer_value(db);
    in->data_crc = (uint32_t)json_integer_value(df);
  }
  if (in->tokenizer) in->tokenizer_crc = (uint32_t)json_integer_value(tk);
  return 0;
}

/* The checkpoint's config.json describes the config's model. */
static int check_same_model(const char *path, const struct zo_model *m) {
  struct zo_model_config c;
  int err = zo_model_config_from_pretrained(path, m->cfg.n_head, &c);
  if (err) return err;
  if (c.arch != m->cfg.arch || c.n_layer != m->cfg.n_layer || c.n_head != m->cfg.n_head ||
      c.n_kv_head != m->cfg.n_kv_head || c.n_embd != m->cfg.n_embd ||
      c.intermediate_size != m->cfg.intermediate_size || c.vocab_size != m->cfg.vocab_size ||
      c.max_seq_len != m->cfg.max_seq_len || c.tie_embeddings != m->cfg.tie_embeddings) {
    char have[160], want[160];
    return zo_error(-EINVAL, "%s: the checkpoint's model (%s, max_seq_len %d) differs from the config's (%s, "
                             "max_seq_len %d)",
                    path, zo_model_describe(&c, have, sizeof have), c.max_seq_len,
                    zo_model_describe(&m->cfg, want, sizeof want), m->cfg.max_seq_len);
  }
  return 0;
}

/* Optimizer shard r's tensor range [*lo, *hi): it must start where shard
 * r - 1 ended (next), and the last must end the table. */
static int shard_range(struct zo_st_file *of, const char *op, int r, int n_opt, long n_shards, int next,
                       const struct zo_model *m, int *lo, int *hi) {
  *lo = 0;
  *hi = m->table.n_tensors;
  if (n_shards == 0) return 0;
  const char *a = zo_st_metadata(of, "first_tensor"), *b = zo_st_metadata(of, "n_tensors");
  char *end1 = NULL, *end2 = NULL;
  const long la = a ? strtol(a, &end1, 10) : -1, lb = b ? strtol(b, &end2, 10) : -1;
  if (!a || !b || *end1 || *end2 || la != next || lb < 0 || la + lb > m->table.n_tensors ||
      (r == n_opt - 1 && la + lb != m->table.n_tensors))
    return zo_error(-EINVAL, "%s: shard %d of %ld holds tensors first_tensor=%s n_tensors=%s; expected "
                             "to start at tensor %d of %d (the shards must follow each other and cover "
                             "the model)",
                    op, r + 1, n_shards, a ? a : "(missing)", b ? b : "(missing)", next, m->table.n_tensors);
  *lo = (int)la;
  *hi = (int)(la + lb);
  return 0;
}

/* The parameters and the optimizer files into io. The files' formats are
 * checked (pass 0) before any state is written (pass 1): shard r holds the
 * tensors after shard r - 1's, the last ends the table. */
static int load_optimizer(const char *path, const struct zo_model *m, const struct zo_optim_format *opt,
                          const struct zo_state_io *io, long n_shards, int n_opt) {
  int err = 0;
  for (int pass = 0; pass < 2 && !err; pass++) {
    int next = 0;
    for (int r = 0; r < n_opt && !err; r++) {
      char fname[64], op[PATH_MAX], p[PATH_MAX];
      zo_checkpoint_shard_name(r, (int)n_shards, fname, sizeof fname);
      if ((err = join(op, sizeof op, path, fname))) break;
      struct zo_st_file *of = zo_st_open(op);
      if (!of) {
        err = zo_error(-EINVAL, "%s", zo_last_error());
        break;
      }
      int lo, hi;
      err = shard_range(of, op, r, n_opt, n_shards, next, m, &lo, &hi);
      if (!err && pass == 1 && r == 0) {
        /* The parameters first, as a one-file checkpoint loads them. */
        if (!(err = join(p, sizeof p, path, "model.safetensors"))) err = zo_model_load_safetensors_io(p, m, io);
      }
      if (!err) err = load_states(of, op, &m->table, opt, pass == 1 ? io : NULL, lo, hi);
      next = hi;
      zo_st_close(of);
    }
  }
  return err;
}

int zo_checkpoint_load_io(const char *path, const struct zo_model *m, const struct zo_optim_format *opt,
                          const struct zo_state_io *io, bool optimizer, struct zo_train_state *state) {
  ZO_ASSERT(io || !optimizer);
  char p[PATH_MAX];
  int err = join(p, sizeof p, path, "trainer_state.json");
  if (err) return err;
  json_error_t je;
  json_t *j = json_load_file(p, 0, &je);
  if (!j && je.line < 0) return zo_error(-EINVAL, "%s: not a complete checkpoint (%s)", path, je.text);
  if (!j)
    return zo_error(-EINVAL, "%s: not a complete checkpoint (%s:%d:%d: %s)", path, p, je.line,
                    je.column, je.text);
  /* The optimizer's files: one, or one per rank of a sharded run. */
  json_t *jsh = json_object_get(j, "optimizer_shards");
  const long n_shards = json_is_integer(jsh) ? (long)json_integer_value(jsh) : 0;
  const bool weights_only = json_is_true(json_object_get(j, "weights_only"));
  const int n_opt = weights_only ? 0 : n_shards > 0 ? (int)n_shards : 1;
  if (n_shards < 0 || n_shards > 65536)
    err = zo_error(-EINVAL, "%s/trainer_state.json: optimizer_shards = %ld: need 0 (one optimizer.safetensors) "
                            "to 65536", path, n_shards);
  else if (weights_only && optimizer)
    err = zo_error(-EINVAL, "%s holds the weights only (saved with checkpoint.save_optimizer = false): there is "
                            "no optimizer state to resume; start a new run from it with --set "
                            "model.init_from=%s", path, path);
  if (!err && json_is_true(json_object_get(j, "lora")) != (m == NULL))
    err = m ? zo_error(-EINVAL, "%s is a LoRA run's checkpoint (a PEFT adapter and its optimizer state, no "
                                "model.safetensors): give it as --adapter (eval, sample) over the base, resume it "
                                "with the lora section, or export it with --adapter or --merge", path)
            : zo_error(-EINVAL, "%s is not a LoRA run's checkpoint: this run has a lora section", path);
  if (!err) err = verify_checksums(path, j, n_shards, n_opt, m == NULL);
  struct zo_train_state st = *state;
  if (!err) err = read_trainer_state(path, j, &st);
  if (!err && m) err = check_same_model(path, m);
  if (!err && !m) { /* a LoRA run's: checked; lora_ckpt.c reads its files */
  } else if (!err && optimizer) err = load_optimizer(path, m, opt, io, n_shards, n_opt);
  else if (!err && io && !(err = join(p, sizeof p, path, "model.safetensors")))
    err = zo_model_load_safetensors_io(p, m, io);
  if (!err) *state = st;
  json_decref(j);
  return err;
}
