/* Hugging Face model directories: model.safetensors (or the shards of
 * model.safetensors.index.json) and config.json, read into and written from
 * our parameter table. Our table stores Linear weights (out, in), fused
 * projections and the vocabulary padded to a multiple of 64 rows; each
 * architecture describes its Hugging Face tensors as views of ours
 * (engine/model/arch.h: a row range, transposed or not) and this file is the only
 * code that converts, driven by that list. Loads accept tensors in F32, BF16
 * or F16 and refuse a missing, misshapen or unknown tensor by name. Our own
 * checkpoint directories (optimizer states, trainer_state.json, checksums,
 * retention) are engine/store/checkpoint.c's. */
#include "zo/hf.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zo/cpu.h"
#include "zo/fsutil.h"
#include "zo/safetensors.h"
#include "zo/state.h"

#include "../model/arch.h"
#include "../model/family.h"
#include "state_files.h"

/* One Hugging Face tensor being written: a row range of one of ours, read
 * through the state io as the writer asks for it, or (transposed: GPT-2's
 * Conv1D, (cols, n_rows) in the file) read whole into the io's staging
 * buffer on the first request and transposed from there. */
struct hf_fill {
  const struct zo_state_io *io;
  size_t byte0;      /* the range's first byte in ZO_STATE_PARAMS */
  size_t n_rows, cols;
  bool transpose;
  int index;         /* of this view, for staged */
  int *staged;       /* the view whose rows the staging buffer holds, -1 none */
  enum zo_dtype dtype; /* in the file; F32 is our values as they are */
  float *cast;       /* (ZO_ST_FILL_CHUNK / 2) fp32 elements, for another dtype */
};

/* Elements [first, first + n) of the file's tensor as fp32 into d. */
static int fill_f32(const struct hf_fill *v, float *d, size_t first, size_t n) {
  const struct zo_state_io *io = v->io;
  if (!v->transpose) return io->read(io->ctx, ZO_STATE_PARAMS, v->byte0 + first * sizeof(float), d, n * sizeof(float));
  const float *src = io->stage;
  if (*v->staged != v->index) {
    *v->staged = -1;
    int err = io->read(io->ctx, ZO_STATE_PARAMS, v->byte0, io->stage, v->n_rows * v->cols * sizeof(float));
    if (err) return err;
    *v->staged = v->index;
  }
  for (size_t k = 0; k < n; k++) {
    const size_t e = first + k, r = e / v->n_rows, c = e % v->n_rows; /* element (r, c) of (cols, n_rows) */
    d[k] = src[c * v->cols + r];
  }
  return 0;
}

static int fill_hf(void *ctx, void *dst, size_t offset, size_t nbytes) {
  const struct hf_fill *v = ctx;
  const size_t es = zo_dtype_size(v->dtype), first = offset / es, n = nbytes / es;
  if (v->dtype == ZO_F32) return fill_f32(v, dst, first, n);
  /* Rounded once, to nearest even, as the working dtype is. */
  int err = fill_f32(v, v->cast, first, n);
  if (!err) zo_cpu_cast(dst, v->dtype, v->cast, ZO_F32, n);
  return err;
}

/* The architecture's Hugging Face tensors of m (allocated; free them). */
static int hf_list(const struct zo_model *m, struct zo_hf_tensor **out, int *n) {
  *n = m->arch->hf_tensors(m, NULL);
  *out = calloc((size_t)*n + 1, sizeof **out);
  if (!*out) return zo_error(-ENOMEM, "out of host memory listing the checkpoint's tensors");
  m->arch->hf_tensors(m, *out);
  return 0;
}

/* Columns of table tensor ti (1 for a 1-D tensor). */
static size_t tensor_cols(const struct zo_tensor_info *ti) { return ti->ndim == 2 ? (size_t)ti->shape[1] : 1; }

int zo_model_save_pretrained(const char *dir, const struct zo_model *m, const float *params) {
  struct zo_state_mem mem;
  struct zo_state_io io;
  int err = with_memory_io(m, NULL, params, NULL, NULL, &mem, &io);
  if (!err) err = zo_model_save_pretrained_io(dir, m, &io);
  zo_state_io_free(&io);
  return err;
}

int zo_model_save_pretrained_io(const char *dir, const struct zo_model *m, const struct zo_state_io *io) {
  const struct zo_hf_save_opts o = {.dtype = ZO_F32};
  return zo_model_save_pretrained_opts(dir, m, io, &o);
}

static const char *torch_dtype(enum zo_dtype dt) {
  return dt == ZO_BF16 ? "bfloat16" : dt == ZO_F16 ? "float16" : "float32";
}

/* Shard of each tensor (nbytes[i] bytes) under max bytes a shard (0: one
 * file), as transformers assigns them: in order, a new shard when the next
 * tensor would overflow this one; a tensor larger than max alone. Returns
 * the number of shards. */
static int assign_shards(const size_t *nbytes, int n, size_t max, int *shard) {
  int s = 0;
  size_t used = 0;
  for (int i = 0; i < n; i++) {
    if (max && used > 0 && used + nbytes[i] > max) {
      s++;
      used = 0;
    }
    shard[i] = s;
    used += nbytes[i];
  }
  return s + 1;
}

static void shard_name(char *buf, size_t size, int s, int n_shards) {
  if (n_shards == 1) snprintf(buf, size, "model.safetensors");
  else snprintf(buf, size, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
}

/* model.safetensors.index.json: the total bytes of tensor data and the
 * shard of each tensor. */
static int write_index(const char *dir, const struct zo_hf_tensor *hf, const int *shard, int n, int n_shards,
                       size_t total) {
  char path[PATH_MAX], file[64];
  json_t *j = json_object(), *meta = json_object(), *map = json_object();
  int err = !j || !meta || !map ? zo_error(-ENOMEM, "out of memory building %s's index", dir) : 0;
  if (!err) {
    json_object_set_new(meta, "total_size", json_integer((json_int_t)total));
    json_object_set_new(j, "metadata", meta);
    json_object_set_new(j, "weight_map", map);
    meta = map = NULL;
    for (int i = 0; i < n; i++) {
      shard_name(file, sizeof file, shard[i], n_shards);
      json_object_set_new(json_object_get(j, "weight_map"), hf[i].name, json_string(file));
    }
    err = join(path, sizeof path, dir, "model.safetensors.index.json");
    if (!err) err = write_json(path, j);
  }
  json_decref(meta);
  json_decref(map);
  json_decref(j);
  return err;
}

/* Writes the Hugging Face tensors hf[0..n_hf) of m to dir as o asks (the
 * shards, their index, config.json), tensor i's bytes produced by
 * fill(ctx_i), ctx_i = ctxs + i * ctx_size. */
static int write_hf_dir(const char *dir, const struct zo_model *m, const struct zo_hf_tensor *hf, int n_hf,
                        const struct zo_hf_save_opts *o, zo_st_fill_fn fill, void *ctxs, size_t ctx_size) {
  ZO_ASSERT(o->dtype == ZO_F32 || o->dtype == ZO_BF16 || o->dtype == ZO_F16);
  char path[PATH_MAX];
  int err = zo_mkdir_p(dir, 0755);
  if (err) return err;
  int n_shards = 1;
  size_t *nbytes = calloc((size_t)n_hf + 1, sizeof *nbytes), total = 0;
  int *shard = calloc((size_t)n_hf + 1, sizeof *shard);
  struct zo_st_writer *w = NULL;
  const size_t es = zo_dtype_size(o->dtype);
  if (!nbytes || !shard) {
    err = zo_error(-ENOMEM, "out of host memory saving %s", dir);
    goto out;
  }
  for (int i = 0; i < n_hf; i++) {
    size_t numel = 1;
    for (int k = 0; k < hf[i].ndim; k++) numel *= (size_t)hf[i].shape[k];
    nbytes[i] = numel * es;
    total += nbytes[i];
  }
  n_shards = assign_shards(nbytes, n_hf, o->max_shard_bytes, shard);
  for (int s = 0; s < n_shards && !err; s++) {
    char file[64];
    if (!(w = zo_st_writer_init())) {
      err = zo_error(-ENOMEM, "out of host memory saving %s", dir);
      goto out;
    }
    for (int i = 0; i < n_hf; i++) {
      if (shard[i] != s) continue;
      const struct zo_hf_tensor *h = &hf[i];
      if ((err = zo_st_writer_add_fill(w, h->name, o->dtype, h->ndim, h->shape, fill,
                                       (char *)ctxs + (size_t)i * ctx_size)))
        goto out;
    }
    shard_name(file, sizeof file, s, n_shards);
    if ((err = join(path, sizeof path, dir, file)) || (err = zo_st_writer_set_metadata(w, "format", "pt")) ||
        (err = zo_st_writer_write(w, path)))
      goto out;
    zo_st_writer_free(w);
    w = NULL;
  }
  if (n_shards > 1 && (err = write_index(dir, hf, shard, n_hf, n_shards, total))) goto out;

  json_t *j = m->arch->hf_config(&m->cfg);
  if (!j) {
    err = zo_error(-ENOMEM, "out of memory building %s/config.json", dir);
    goto out;
  }
  json_object_set_new(j, "torch_dtype", json_string(torch_dtype(o->dtype)));
  err = join(path, sizeof path, dir, "config.json");
  if (!err) err = write_json(path, j);
  json_decref(j);
out:
  zo_st_writer_free(w);
  free(shard);
  free(nbytes);
  return err;
}

int zo_model_save_pretrained_opts(const char *dir, const struct zo_model *m, const struct zo_state_io *io,
                                  const struct zo_hf_save_opts *o) {
  struct zo_hf_tensor *hf = NULL;
  int n_hf = 0, staged = -1;
  struct hf_fill *views = NULL;
  float *cast = NULL;
  int err = hf_list(m, &hf, &n_hf);
  if (err) return err;
  views = calloc((size_t)n_hf + 1, sizeof *views);
  if (o->dtype != ZO_F32) cast = malloc(ZO_ST_FILL_CHUNK / 2 * sizeof(float));
  if (!views || (o->dtype != ZO_F32 && !cast)) {
    err = zo_error(-ENOMEM, "out of host memory saving %s", dir);
    goto out;
  }
  for (int i = 0; i < n_hf; i++) {
    const struct zo_hf_tensor *h = &hf[i];
    const struct zo_tensor_info *ti = &m->table.tensors[h->tensor];
    const size_t cols = tensor_cols(ti);
    /* A transposed view is a whole hf_transposed tensor: zo_state_stage_bytes holds it. */
    ZO_ASSERT(!h->transpose || (ti->hf_transposed && (size_t)h->rows * cols * sizeof(float) <= io->stage_bytes));
    /* A row range is contiguous (the padded vocabulary rows are left out). */
    views[i] = (struct hf_fill){io, (ti->offset + (size_t)h->row0 * cols) * sizeof(float), (size_t)h->rows, cols,
                                h->transpose, i, &staged, o->dtype, cast};
  }
  err = write_hf_dir(dir, m, hf, n_hf, o, fill_hf, views, sizeof *views);
out:
  free(cast);
  free(views);
  free(hf);
  return err;
}

/* The safetensors files of a checkpoint: one file, or the shards that
 * model.safetensors.index.json names. */
#define MAX_SHARDS 256

struct source {
  int n;
  struct zo_st_file *files[MAX_SHARDS];
  char where[PATH_MAX]; /* for messages: the file or the index */
  char dir[PATH_MAX];   /* of the index's shards */
  json_t *map;          /* the index's weight_map (a reference), or NULL for one file */
};

static void source_close(struct source *src) {
  for (int i = 0; i < src->n; i++) zo_st_close(src->files[i]);
  src->n = 0;
  json_decref(src->map);
  src->map = NULL;
}

/* The shard opened for a weight_map file name, or NULL. */
static const struct zo_st_file *source_shard(const struct source *src, const char *file) {
  char p[PATH_MAX];
  if (join(p, sizeof p, src->dir, file)) return NULL;
  for (int i = 0; i < src->n; i++)
    if (strcmp(zo_st_path(src->files[i]), p) == 0) return src->files[i];
  return NULL;
}

/* The index is the truth: each tensor of a shard is the one the weight_map
 * assigns to that shard (a tensor present in two shards is in one it is not
 * assigned to), and each tensor the weight_map assigns is in its shard. */
static int check_index(const struct source *src) {
  for (int k = 0; k < src->n; k++) {
    const struct zo_st_file *f = src->files[k];
    for (int i = 0; i < zo_st_n_tensors(f); i++) {
      const char *name = zo_st_tensor_at(f, i)->name;
      const char *want = json_string_value(json_object_get(src->map, name));
      if (!want)
        return zo_error(-EINVAL, "%s: tensor %s is in %s, but the weight_map does not list it", src->where, name,
                        zo_st_path(f));
      if (source_shard(src, want) != f)
        return zo_error(-EINVAL, "%s: tensor %s is in %s, but the weight_map assigns it to %s/%s (the index is "
                                 "the truth: a tensor belongs in one shard, the one the index names)",
                        src->where, name, zo_st_path(f), src->dir, want);
    }
  }
  const char *key;
  json_t *v;
  json_object_foreach(src->map, key, v) {
    const struct zo_st_file *f = source_shard(src, json_string_value(v));
    if (!f || !zo_st_find(f, key))
      return zo_error(-EINVAL, "%s: the weight_map assigns tensor %s to %s/%s, which does not hold it",
                      src->where, key, src->dir, json_string_value(v));
  }
  return 0;
}

static int source_add(struct source *src, const char *path) {
  for (int i = 0; i < src->n; i++)
    if (strcmp(zo_st_path(src->files[i]), path) == 0) return 0;
  if (src->n == MAX_SHARDS) return zo_error(-EINVAL, "%s: more than %d shards", src->where, MAX_SHARDS);
  struct zo_st_file *f = zo_st_open(path);
  if (!f) return zo_error(-EINVAL, "%s", zo_last_error());
  src->files[src->n++] = f;
  return 0;
}

/* The index p's text, in a malloc'd string (NULL on failure, the error set). */
static char *read_text(const char *p) {
  FILE *f = fopen(p, "rb");
  if (!f) {
    zo_error(-errno, "cannot open %s: %s", p, strerror(errno));
    return NULL;
  }
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n + 4096 + 1 > cap) {
      char *b = realloc(buf, cap = 2 * cap + 4096 + 1);
      if (!b) break;
      buf = b;
    }
    const size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0) break;
  }
  const bool bad = ferror(f) || !buf;
  if (fclose(f) != 0 || bad) {
    free(buf);
    zo_error(-EIO, "cannot read %s", p);
    return NULL;
  }
  buf[n] = 0;
  return buf;
}

/* jansson refused the index p for a key listed twice (JSON_REJECT_DUPLICATES,
 * stopped at byte pos, just past the key): the refusal, naming the tensor and
 * the files each of its entries names. */
static int duplicate_entry(const char *p, int line, size_t pos) {
  char *text = read_text(p);
  if (!text) return -EINVAL;
  size_t end = pos < strlen(text) ? pos : strlen(text);
  while (end > 0 && text[end - 1] != '"') end--;
  size_t start = end ? end - 1 : 0;
  while (start > 0 && text[start - 1] != '"') start--;
  char name[ZO_TENSOR_NAME_MAX + 32] = "", files[2 * PATH_MAX] = "";
  if (end > start) snprintf(name, sizeof name, "%.*s", (int)(end - 1 - start), text + start);
  /* Each entry "name": "file" of the text. */
  char quoted[sizeof name + 2];
  snprintf(quoted, sizeof quoted, "\"%s\"", name);
  for (const char *q = strstr(text, quoted); name[0] && q; q = strstr(q + 1, quoted)) {
    const char *v = q + strlen(quoted);
    while (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r') v++;
    if (*v++ != ':') continue;
    while (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r') v++;
    const char *close = *v == '"' ? strchr(v + 1, '"') : NULL;
    if (!close) continue;
    const size_t used = strlen(files);
    snprintf(files + used, sizeof files - used, "%s%.*s", used ? " and " : "", (int)(close - v - 1), v + 1);
  }
  free(text);
  return zo_error(-EINVAL, "%s:%d: the weight_map lists tensor %s twice (%s): a tensor belongs in one shard",
                  p, line, name[0] ? name : "(unknown)", files[0] ? files : "files unknown");
}

/* path: a .safetensors file, or a directory holding model.safetensors or
 * model.safetensors.index.json (whose "weight_map" names the shards, files
 * in the same directory). */
static int source_open(struct source *src, const char *path) {
  memset(src, 0, sizeof *src);
  snprintf(src->where, sizeof src->where, "%s", path);
  struct stat st;
  if (stat(path, &st) != 0) return zo_error(-errno, "%s: %s", path, strerror(errno));
  if (!S_ISDIR(st.st_mode)) return source_add(src, path);
  char p[PATH_MAX];
  int err = join(p, sizeof p, path, "model.safetensors");
  if (err) return err;
  if (access(p, F_OK) == 0) {
    snprintf(src->where, sizeof src->where, "%s", p);
    return source_add(src, p);
  }
  if ((err = join(p, sizeof p, path, "model.safetensors.index.json"))) return err;
  snprintf(src->where, sizeof src->where, "%s", p);
  snprintf(src->dir, sizeof src->dir, "%s", path);
  json_error_t je;
  /* A tensor listed twice is refused (jansson stops just past the second
   * key; duplicate_entry names it and both its files). */
  json_t *j = json_load_file(p, JSON_REJECT_DUPLICATES, &je);
  if (!j && strstr(je.text, "duplicate object key")) return duplicate_entry(p, je.line, (size_t)je.position);
  if (!j && je.line < 0)
    return zo_error(-ENOENT, "%s holds neither model.safetensors nor a readable model.safetensors.index.json "
                             "(%s)", path, je.text);
  if (!j)
    return zo_error(-ENOENT, "%s holds neither model.safetensors nor a readable model.safetensors.index.json "
                             "(%s:%d: %s)", path, p, je.line, je.text);
  json_t *map = json_object_get(j, "weight_map");
  if (!json_is_object(map)) {
    json_decref(j);
    return zo_error(-EINVAL, "%s: no \"weight_map\" object", p);
  }
  const char *key;
  json_t *v;
  json_object_foreach(map, key, v) {
    const char *file = json_string_value(v);
    char sp[PATH_MAX];
    if (!file || strchr(file, '/')) {
      err = zo_error(-EINVAL, "%s: weight_map[\"%s\"] is not a file name in the same directory", p, key);
      break;
    }
    if ((err = join(sp, sizeof sp, path, file)) || (err = source_add(src, sp))) break;
  }
  src->map = json_incref(map);
  json_decref(j);
  if (!err && src->n == 0) err = zo_error(-EINVAL, "%s: the weight_map is empty", p);
  if (!err) err = check_index(src);
  if (err) source_close(src);
  return err;
}

/* name from its one file, or from the shard the index assigns it to. */
static const struct zo_st_tensor *source_find(const struct source *src, const char *name) {
  if (!src->map) return src->n ? zo_st_find(src->files[0], name) : NULL;
  const char *file = json_string_value(json_object_get(src->map, name));
  const struct zo_st_file *f = file ? source_shard(src, file) : NULL;
  return f ? zo_st_find(f, name) : NULL;
}

/* name, or the architecture's other spelling of it. */
static const struct zo_st_tensor *find_hf(const struct zo_model *m, const struct source *src, const char *name) {
  const struct zo_st_tensor *t = source_find(src, name);
  char buf[ZO_TENSOR_NAME_MAX + 32];
  const char *alias = !t && m->arch->hf_alias ? m->arch->hf_alias(name, buf, sizeof buf) : NULL;
  return alias ? source_find(src, alias) : t;
}

static void shape_str(char *buf, size_t size, int ndim, const int64_t *shape) {
  int n = snprintf(buf, size, "(");
  for (int k = 0; k < ndim && k < 4 && n > 0 && (size_t)n < size; k++)
    n += snprintf(buf + n, size - (size_t)n, "%s%" PRId64, k ? ", " : "", shape[k]);
  if (n > 0 && (size_t)n < size) snprintf(buf + n, size - (size_t)n, ")");
}

/* The file's tensor for view h, present with h's shape, into *t. */
static int check_tensor(const struct zo_model *m, const struct source *src, const struct zo_hf_tensor *h,
                        const struct zo_st_tensor **t_out) {
  const struct zo_st_tensor *t = find_hf(m, src, h->name);
  if (!t) return zo_error(-EINVAL, "%s: tensor %s is missing", src->where, h->name);
  if (t->ndim != h->ndim || t->shape[0] != h->shape[0] || (h->ndim == 2 && t->shape[1] != h->shape[1])) {
    char got[64], want[64];
    shape_str(got, sizeof got, t->ndim, t->shape);
    shape_str(want, sizeof want, h->ndim, h->shape);
    return zo_error(-EINVAL, "%s: tensor %s has shape %s, the model needs %s", src->where, t->name, got, want);
  }
  *t_out = t;
  return 0;
}

/* Every tensor of the files must be one of ours or known to carry nothing. */
static int check_unexpected(const struct zo_model *m, const struct source *src, const struct zo_hf_tensor *hf,
                            int n_hf) {
  for (int k = 0; k < src->n; k++) {
    for (int i = 0; i < zo_st_n_tensors(src->files[k]); i++) {
      const struct zo_st_tensor *t = zo_st_tensor_at(src->files[k], i);
      bool known = m->arch->hf_ignored && m->arch->hf_ignored(&m->cfg, t->name);
      char buf[ZO_TENSOR_NAME_MAX + 32];
      for (int h = 0; h < n_hf && !known; h++) {
        const char *alias = m->arch->hf_alias ? m->arch->hf_alias(hf[h].name, buf, sizeof buf) : NULL;
        known = strcmp(hf[h].name, t->name) == 0 || (alias && strcmp(alias, t->name) == 0);
      }
      if (!known) {
        char desc[160];
        return zo_error(-EINVAL, "%s: unexpected tensor %s (the model is %s)", zo_st_path(src->files[k]), t->name,
                        zo_model_describe(&m->cfg, desc, sizeof desc));
      }
    }
  }
  return 0;
}

int zo_model_load_safetensors(const char *path, const struct zo_model *m, float *params) {
  struct zo_state_mem mem;
  struct zo_state_io io;
  int err = with_memory_io(m, NULL, params, NULL, NULL, &mem, &io);
  if (!err) err = zo_model_load_safetensors_io(path, m, &io);
  zo_state_io_free(&io);
  return err;
}

/* Writes n zero bytes of part at off through io, from its staging buffer. */
static int write_zeros(const struct zo_state_io *io, enum zo_state_part part, size_t off, size_t n) {
  memset(io->stage, 0, n < io->stage_bytes ? n : io->stage_bytes);
  for (size_t k = 0; k < n;) {
    const size_t take = n - k < io->stage_bytes ? n - k : io->stage_bytes;
    int err = io->write(io->ctx, part, off + k, io->stage, take);
    if (err) return err;
    k += take;
  }
  return 0;
}

/* Elements [e0, e0 + n) of t converted to fp32 into out. */
static int read_f32_range(const struct zo_st_tensor *t, size_t e0, size_t n, float *out) {
  struct zo_st_tensor v = *t;
  v.numel = n;
  v.nbytes = n * zo_dtype_size(t->dtype);
  v.data = (const char *)t->data + e0 * zo_dtype_size(t->dtype);
  return zo_st_read_f32(&v, out, n);
}

/* Drops the whole pages of [p, p + n), read-only file mapping, from the
 * resident set: clean file pages, faulted back in if read again (advice: a
 * failure costs memory only). */
static void drop_pages(const void *p, size_t n) {
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  const uintptr_t lo = ((uintptr_t)p + page - 1) / page * page, hi = ((uintptr_t)p + n) / page * page;
  if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* Hugging Face tensor t into view h of ours, through the io's staging
 * buffer, the pages of t read dropped as it goes (a load's resident memory
 * stays near its buffers whatever the model's size): straight rows in
 * pieces; a transposed one (cols, rows) in blocks of our rows, each gathered
 * from the file's columns, its pages dropped at the end (zo_state_stage_bytes
 * holds a whole transposed tensor). */
static int load_view(const struct zo_state_io *io, const struct zo_tensor_info *ti, const struct zo_hf_tensor *h,
                     const struct zo_st_tensor *t) {
  const size_t cols = tensor_cols(ti), rows = (size_t)h->rows;
  const size_t byte0 = (ti->offset + (size_t)h->row0 * cols) * sizeof(float);
  const size_t stage_n = io->stage_bytes / sizeof(float);
  float *stage = io->stage;
  int err = 0;
  if (!h->transpose) {
    const size_t n = rows * cols;
    for (size_t e = 0; e < n && !err; e += stage_n) {
      const size_t k = n - e < stage_n ? n - e : stage_n;
      if (!(err = read_f32_range(t, e, k, stage)))
        err = io->write(io->ctx, ZO_STATE_PARAMS, byte0 + e * sizeof(float), stage, k * sizeof(float));
      drop_pages((const char *)t->data + e * zo_dtype_size(t->dtype), k * zo_dtype_size(t->dtype));
    }
    return err;
  }
  /* A block of rb of our rows and one file row's slice of rb elements. */
  const size_t rb = stage_n / (cols + 1);
  ZO_ASSERT(rb >= 1);
  float *slice = stage + rb * cols;
  for (size_t r0 = 0; r0 < rows && !err; r0 += rb) {
    const size_t nr = rows - r0 < rb ? rows - r0 : rb;
    for (size_t c = 0; c < cols && !err; c++) {
      if ((err = read_f32_range(t, c * rows + r0, nr, slice))) break;
      for (size_t r = 0; r < nr; r++) stage[r * cols + c] = slice[r];
    }
    if (!err)
      err = io->write(io->ctx, ZO_STATE_PARAMS, byte0 + r0 * cols * sizeof(float), stage, nr * cols * sizeof(float));
  }
  drop_pages(t->data, rows * cols * zo_dtype_size(t->dtype));
  return err;
}

int zo_model_load_safetensors_io(const char *path, const struct zo_model *m, const struct zo_state_io *io) {
  struct source src;
  int err = source_open(&src, path);
  if (err) return err;
  struct zo_hf_tensor *hf = NULL;
  int n_hf = 0;
  int *filled = NULL;
  if ((err = hf_list(m, &hf, &n_hf))) goto out;
  /* Rows of each table tensor the checkpoint fills; the rest (padded
   * vocabulary rows) is zeroed. */
  filled = calloc((size_t)m->table.n_tensors, sizeof *filled);
  if (!filled) {
    err = zo_error(-ENOMEM, "out of host memory loading %s", src.where);
    goto out;
  }
  for (int i = 0; i < n_hf && !err; i++) {
    const struct zo_hf_tensor *h = &hf[i];
    const struct zo_tensor_info *ti = &m->table.tensors[h->tensor];
    const struct zo_st_tensor *t;
    if ((err = check_tensor(m, &src, h, &t))) break;
    err = load_view(io, ti, h, t);
    if (h->row0 + h->rows > filled[h->tensor]) filled[h->tensor] = h->row0 + h->rows;
  }
  for (int i = 0; i < m->table.n_tensors && !err; i++) {
    const struct zo_tensor_info *ti = &m->table.tensors[i];
    const size_t rows = ti->ndim == 2 ? (size_t)ti->shape[0] : ti->numel, cols = tensor_cols(ti);
    if ((size_t)filled[i] < rows)
      err = write_zeros(io, ZO_STATE_PARAMS, (ti->offset + (size_t)filled[i] * cols) * sizeof(float),
                        (rows - (size_t)filled[i]) * cols * sizeof(float));
  }
  if (!err) err = check_unexpected(m, &src, hf, n_hf);
out:
  free(filled);
  free(hf);
  source_close(&src);
  return err;
}

/* One tensor being exported: t converted to dtype as the writer asks for its
 * bytes. The pages of t read so far are dropped from the mapping (they are
 * clean file pages: reading them again faults them back in), so an export's
 * resident memory stays near its buffers whatever the model's size. */
struct hf_copy {
  const struct zo_st_tensor *t;
  enum zo_dtype dtype; /* in the output file */
  float *cast;         /* (ZO_ST_FILL_CHUNK / 2) fp32 elements, for another dtype than F32 */
};

static int fill_copy(void *ctx, void *dst, size_t offset, size_t nbytes) {
  const struct hf_copy *c = ctx;
  const size_t es = zo_dtype_size(c->dtype), first = offset / es, n = nbytes / es;
  /* Rounded once, to nearest even, as a model of that dtype would hold it. */
  float *f = c->dtype == ZO_F32 ? dst : c->cast;
  int err = read_f32_range(c->t, first, n, f);
  if (err) return err;
  if (c->dtype != ZO_F32) zo_cpu_cast(dst, c->dtype, f, ZO_F32, n);
  const size_t src_es = zo_dtype_size(c->t->dtype);
  drop_pages((const char *)c->t->data + first * src_es, n * src_es);
  return 0;
}

int zo_model_export_pretrained(const char *src_path, const char *dir, const struct zo_model_config *cfg,
                               const struct zo_hf_save_opts *o, size_t *read_bytes) {
  struct zo_model m = {.cfg = *cfg, .arch = zo_arch_of(cfg->arch)};
  int err = zo_model_build_table(cfg, &m.table);
  if (err) return err;
  struct source src;
  if ((err = source_open(&src, src_path))) {
    zo_tensor_table_free(&m.table);
    return err;
  }
  struct zo_hf_tensor *hf = NULL;
  struct hf_copy *copies = NULL;
  float *cast = NULL;
  int n_hf = 0;
  if ((err = hf_list(&m, &hf, &n_hf))) goto out;
  copies = calloc((size_t)n_hf + 1, sizeof *copies);
  cast = malloc(ZO_ST_FILL_CHUNK / 2 * sizeof(float));
  if (!copies || !cast) {
    err = zo_error(-ENOMEM, "out of host memory exporting %s", src.where);
    goto out;
  }
  *read_bytes = 0;
  for (int i = 0; i < n_hf && !err; i++) {
    const struct zo_st_tensor *t;
    if (!(err = check_tensor(&m, &src, &hf[i], &t))) {
      copies[i] = (struct hf_copy){t, o->dtype, cast};
      *read_bytes += t->nbytes;
    }
  }
  if (!err) err = check_unexpected(&m, &src, hf, n_hf);
  if (!err) err = write_hf_dir(dir, &m, hf, n_hf, o, fill_copy, copies, sizeof *copies);
out:
  free(cast);
  free(copies);
  free(hf);
  source_close(&src);
  zo_tensor_table_free(&m.table);
  return err;
}

/* Whether tensors a and b hold the same values: same shape, and the same
 * bytes (one dtype) or the same fp32 values (compared in pieces). */
static int same_values(const struct zo_st_tensor *a, const struct zo_st_tensor *b, bool *same) {
  *same = a->ndim == b->ndim && a->numel == b->numel;
  for (int k = 0; k < a->ndim && *same; k++) *same = a->shape[k] == b->shape[k];
  if (!*same) return 0;
  if (a->dtype == b->dtype) {
    *same = memcmp(a->data, b->data, a->nbytes) == 0;
    return 0;
  }
  enum { PIECE = 1 << 18 };
  float *x = malloc(2 * (size_t)PIECE * sizeof *x);
  if (!x) return zo_error(-ENOMEM, "comparing %s with %s: no memory for 2 MiB", a->name, b->name);
  int err = 0;
  for (size_t e = 0; e < a->numel && *same && !err; e += PIECE) {
    const size_t n = a->numel - e < PIECE ? a->numel - e : PIECE;
    if (!(err = read_f32_range(a, e, n, x)) && !(err = read_f32_range(b, e, n, x + PIECE)))
      *same = memcmp(x, x + PIECE, n * sizeof *x) == 0;
  }
  free(x);
  return err;
}

/* A tied model (config.json's tie_word_embeddings true; GPT-2 always) whose
 * files also hold an lm_head.weight: transformers 5's rule. The same values
 * as the embedding: tied, as before. Other values: transformers 5 loads the
 * two untied (with a warning); a Llama here does the same and says so in one
 * line, a GPT-2 (tied only here) is refused. (transformers 4.36 loads
 * lm_head.weight into the shared tensor, so both become the head; 4.54 to
 * 4.57 reportedly tie after loading, dropping it: transformers PR 42612.) */
static int tied_head_resolve(const char *path, struct zo_model_config *cfg) {
  if (!cfg->tie_embeddings) return 0;
  struct source src;
  /* Files that do not open (none yet, or damaged: checksums are checked
   * first where there are some) are the loader's to report. */
  if (source_open(&src, path) != 0) return 0;
  int err = 0;
  const bool gpt2 = cfg->arch == ZO_ARCH_GPT2;
  const struct zo_model m0 = {.arch = gpt2 ? &zo_arch_gpt2 : &zo_arch_llama};
  const char *emb_name = gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight";
  const struct zo_st_tensor *head = source_find(&src, "lm_head.weight"), *emb = find_hf(&m0, &src, emb_name);
  bool same = true;
  if (head && emb) err = same_values(head, emb, &same);
  if (!err && !same && gpt2)
    err = zo_error(-ENOTSUP, "%s: lm_head.weight differs from %s, and a GPT-2 here always uses the embedding as "
                             "its head: transformers 5 would load the two untied (4.36 loads lm_head.weight into "
                             "both): remove lm_head.weight from the file to use the embedding as the head",
                   head->file, emb->name);
  if (!err && !same && !gpt2) {
    cfg->tie_embeddings = false;
    fprintf(stderr, "zoffload: note: %s: lm_head.weight differs from %s although config.json says "
                    "tie_word_embeddings: true: loaded untied, the head from lm_head.weight, as transformers 5 does "
                    "(4.36 would load lm_head.weight into both)\n", head->file, emb->name);
  }
  source_close(&src);
  return err;
}

/* A directory with a PEFT adapter (adapter_config.json) and no config.json
 * is an adapter, not a model: said so, with how it is used. 0 otherwise. */
static int refuse_adapter_dir(const char *path) {
  char c[PATH_MAX], a[PATH_MAX];
  if (join(c, sizeof c, path, "config.json") || join(a, sizeof a, path, "adapter_config.json")) return 0;
  if (access(c, F_OK) == 0 || access(a, F_OK) != 0) return 0;
  return zo_error(-EINVAL, "%s is a PEFT adapter (adapter_config.json, no config.json), not a model: give it as "
                           "lora.init_from (or eval --adapter DIR) with its base model as model.init_from (docs/finetune.md)",
                  path);
}

/* config.json's quantization_config: a checkpoint transformers saved
 * quantized (bitsandbytes 4-bit: a packed uint8 `weight` per Linear plus its
 * quant_state tensors). Loading one is not built (issue 48): refused by
 * name, whatever the family. */
static int refuse_quantized(const char *p, json_t *q) {
  const char *method = json_string_value(json_object_get(q, "quant_method"));
  const bool four =
      json_is_true(json_object_get(q, "load_in_4bit")) || json_is_true(json_object_get(q, "_load_in_4bit"));
  return zo_error(-ENOTSUP, "%s: quantization_config (quant_method \"%s\"%s): a checkpoint saved quantized (packed "
                            "weights plus quant_state tensors) does not load here; give model.init_from the model's "
                            "fp32/bf16 weights (the config's quantization section names the 4-bit settings: "
                            "docs/config.md)", p, method ? method : "?", four ? ", load_in_4bit" : "");
}

int zo_model_config_from_pretrained(const char *path, int n_head, struct zo_model_config *cfg) {
  struct stat st;
  if (stat(path, &st) != 0) return zo_error(-errno, "%s: %s", path, strerror(errno));
  memset(cfg, 0, sizeof *cfg);
  if (S_ISDIR(st.st_mode)) {
    char p[PATH_MAX];
    int jerr = refuse_adapter_dir(path);
    if (!jerr) jerr = join(p, sizeof p, path, "config.json");
    if (jerr) return jerr;
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    if (!j && je.line < 0) return zo_error(-EINVAL, "%s: %s", path, je.text);
    if (!j) return zo_error(-EINVAL, "%s:%d:%d: %s", p, je.line, je.column, je.text);
    json_t *mt = json_object_get(j, "model_type");
    const char *type = json_string_value(mt);
    /* No model_type: GPT-2's older files. */
    const struct zo_family *f = zo_family_find(type ? type : "gpt2");
    int err = 0;
    char built[128];
    if (mt && !type) {
      char *v = json_dumps(mt, JSON_ENCODE_ANY | JSON_COMPACT);
      err = zo_error(-EINVAL, "%s: model_type = %s: a string (%s) is needed", p, v ? v : "(not a string)",
                     zo_family_list(built, sizeof built));
      free(v);
    } else if (!f || f->refusal)
      err = zo_family_refuse(p, type);
    else if (json_object_get(j, "quantization_config") && !json_is_null(json_object_get(j, "quantization_config")))
      err = refuse_quantized(p, json_object_get(j, "quantization_config"));
    else
      err = zo_arch_of(f->arch)->hf_config_parse(j, p, cfg);
    json_decref(j);
    if (err) return err;
  } else {
    /* A bare GPT-2 safetensors file: shapes from the tensors, n_head given. */
    struct source src;
    int err = source_open(&src, path);
    if (err) return err;
    struct zo_model m0 = {.arch = &zo_arch_gpt2};
    const struct zo_st_tensor *wte = find_hf(&m0, &src, "transformer.wte.weight");
    const struct zo_st_tensor *wpe = find_hf(&m0, &src, "transformer.wpe.weight");
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2) {
      const bool llama = source_find(&src, "model.embed_tokens.weight") != NULL;
      source_close(&src);
      if (llama)
        return zo_error(-EINVAL, "%s: a Llama checkpoint's shapes come from its config.json: give the directory "
                                 "that holds both", path);
      return zo_error(-EINVAL, "%s: not a GPT-2 checkpoint (needs 2-D transformer.wte.weight and "
                               "transformer.wpe.weight)", path);
    }
    int L = 0;
    char name[64];
    for (;; L++) {
      snprintf(name, sizeof name, "transformer.h.%d.ln_1.weight", L);
      if (!find_hf(&m0, &src, name)) break;
    }
    *cfg = (struct zo_model_config){.arch = ZO_ARCH_GPT2, .family = ZO_FAMILY_GPT2, .n_layer = L, .n_head = n_head,
                                    .n_embd = (int)wte->shape[1], .vocab_size = (int)wte->shape[0],
                                    .max_seq_len = (int)wpe->shape[0]};
    source_close(&src);
  }
  int err = zo_model_config_check(cfg);
  if (err) return zo_error(err, "%s: %s", path, zo_last_error());
  return tied_head_resolve(path, cfg);
}
