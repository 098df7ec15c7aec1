/* safetensors reader and writer. The reader mmaps the file, parses the header
 * with jansson and checks every number in it against the file before any
 * tensor pointer is handed out: after zo_st_open succeeds, each tensor's
 * [data, data + nbytes) lies inside the mapping and no two tensors overlap.
 * The writer builds the header with jansson (insertion order kept) and
 * streams header and tensor bytes through one zo_atomic_file. Neither side
 * converts layouts or dtypes; zo_st_read_f32 widens F32/BF16/F16 to fp32. */
#include "zo/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zo/fsutil.h"

#define ST_METADATA_KEY "__metadata__"

struct zo_st_file {
  char *path;
  void *map;          /* whole file, read-only */
  size_t map_size;    /* bytes */
  json_t *root;       /* parsed header; tensor names and metadata point into it */
  size_t data_len;    /* bytes of the data buffer after the header */
  int n_tensors;
  struct zo_st_tensor *tensors;       /* (n_tensors) sorted by offset */
  const struct zo_st_tensor **by_name; /* (n_tensors) sorted by name */
  int64_t *shapes;                    /* every tensor's shape, back to back */
  int n_meta;
  const char **meta_keys;   /* (n_meta) */
  const char **meta_values; /* (n_meta) */
};

/* dtype names of the format; those without a zo_dtype are recognised only to
 * say "not supported" rather than "unknown". */
static const struct {
  const char *name;
  int dtype; /* enum zo_dtype, -1 when unsupported */
} st_dtypes[] = {
    {"F32", ZO_F32}, {"BF16", ZO_BF16}, {"F16", ZO_F16}, {"I32", ZO_I32}, {"U16", ZO_U16},
    {"U8", ZO_U8},   {"F64", ZO_F64},   {"I64", ZO_I64}, {"U64", -1},     {"U32", -1},
    {"I16", -1},     {"I8", -1},        {"BOOL", ZO_BOOL}, {"F8_E4M3", -1}, {"F8_E5M2", -1},
};

static char *str_dup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* ---- conversions ------------------------------------------------------- */

static float bits_to_f32(uint32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

float zo_st_bf16_to_f32(uint16_t h) { return bits_to_f32((uint32_t)h << 16); }

float zo_st_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (mant << 13)); /* inf, NaN payload kept */
  if (exp != 0) return bits_to_f32(sign | ((exp + 112) << 23) | (mant << 13)); /* rebias 15 -> 127 */
  if (mant == 0) return bits_to_f32(sign);
  /* Subnormal mant * 2^-24: shift the leading one up to the implicit bit. */
  uint32_t e = 113;
  while (!(mant & 0x400u)) {
    mant <<= 1;
    e--;
  }
  return bits_to_f32(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

int zo_st_read_f32(const struct zo_st_tensor *t, float *out, size_t numel) {
  ZO_ASSERT(t && (out || numel == 0));
  if (numel != t->numel)
    return zo_error(-EINVAL, "%s: tensor \"%s\" has %zu elements, the destination %zu", t->file, t->name,
                    t->numel, numel);
  const unsigned char *p = t->data;
  switch (t->dtype) {
  case ZO_F32:
    if (numel) memcpy(out, p, numel * sizeof(float));
    return 0;
  case ZO_BF16:
    for (size_t i = 0; i < numel; i++) {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      out[i] = zo_st_bf16_to_f32(h);
    }
    return 0;
  case ZO_F16:
    for (size_t i = 0; i < numel; i++) {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      out[i] = zo_st_f16_to_f32(h);
    }
    return 0;
  default:
    return zo_error(-ENOTSUP, "%s: tensor \"%s\" is %s, not a floating-point dtype (F32, BF16, F16)",
                    t->file, t->name, zo_dtype_name(t->dtype));
  }
}

/* ---- reader ------------------------------------------------------------ */

static int cmp_by_offset(const void *a, const void *b) {
  const struct zo_st_tensor *x = a, *y = b;
  if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
  if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
  return 0;
}

static int cmp_by_name(const void *a, const void *b) {
  const struct zo_st_tensor *const *x = a, *const *y = b;
  return strcmp((*x)->name, (*y)->name);
}

/* Parses one tensor entry into t (shape into *shape_pool, advanced). Returns
 * 0 or -EINVAL with a message naming the file and tensor. */
static int parse_tensor(struct zo_st_file *f, const char *name, json_t *v, struct zo_st_tensor *t,
                        int64_t **shape_pool) {
  const char *path = f->path;
  if (!json_is_object(v))
    return zo_error(-EINVAL, "%s: tensor \"%s\": entry is not a JSON object", path, name);
  const char *key;
  json_t *field;
  json_object_foreach(v, key, field) {
    if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets"))
      return zo_error(-EINVAL, "%s: tensor \"%s\": unexpected field \"%s\" (fields: dtype, shape, data_offsets)",
                      path, name, key);
  }
  json_t *jdtype = json_object_get(v, "dtype");
  json_t *jshape = json_object_get(v, "shape");
  json_t *joffs = json_object_get(v, "data_offsets");
  if (!jdtype) return zo_error(-EINVAL, "%s: tensor \"%s\": missing \"dtype\"", path, name);
  if (!jshape) return zo_error(-EINVAL, "%s: tensor \"%s\": missing \"shape\"", path, name);
  if (!joffs) return zo_error(-EINVAL, "%s: tensor \"%s\": missing \"data_offsets\"", path, name);

  if (!json_is_string(jdtype))
    return zo_error(-EINVAL, "%s: tensor \"%s\": \"dtype\" is not a string", path, name);
  const char *dname = json_string_value(jdtype);
  int dtype = -2;
  for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++) {
    if (!strcmp(dname, st_dtypes[i].name)) dtype = st_dtypes[i].dtype;
  }
  if (dtype == -2)
    return zo_error(-EINVAL, "%s: tensor \"%s\": unknown dtype \"%s\"", path, name, dname);
  if (dtype == -1)
    return zo_error(-EINVAL, "%s: tensor \"%s\": dtype %s is not supported (supported: F32, BF16, F16, I32, U16, U8, F64, I64, BOOL)",
                    path, name, dname);
  size_t esize = zo_dtype_size((enum zo_dtype)dtype);

  if (!json_is_array(jshape))
    return zo_error(-EINVAL, "%s: tensor \"%s\": \"shape\" is not an array", path, name);
  size_t ndim = json_array_size(jshape);
  uint64_t numel = 1;
  bool overflow = false, has_zero = false;
  int64_t *shape = *shape_pool;
  for (size_t d = 0; d < ndim; d++) {
    json_t *jd = json_array_get(jshape, d);
    if (!json_is_integer(jd))
      return zo_error(-EINVAL, "%s: tensor \"%s\": shape[%zu] is not an integer", path, name, d);
    json_int_t dim = json_integer_value(jd);
    if (dim < 0)
      return zo_error(-EINVAL, "%s: tensor \"%s\": shape[%zu] = %lld is negative", path, name, d, (long long)dim);
    shape[d] = (int64_t)dim;
    has_zero |= dim == 0;
    overflow |= __builtin_mul_overflow(numel, (uint64_t)dim, &numel);
  }
  /* A zero dim makes the product 0 even when a prefix of it overflowed. */
  if (has_zero) numel = 0, overflow = false;
  uint64_t nbytes = 0;
  if (overflow || numel > SIZE_MAX || __builtin_mul_overflow(numel, (uint64_t)esize, &nbytes))
    return zo_error(-EINVAL, "%s: tensor \"%s\": shape overflows: its size does not fit in 64 bits", path, name);

  if (!json_is_array(joffs) || json_array_size(joffs) != 2)
    return zo_error(-EINVAL, "%s: tensor \"%s\": \"data_offsets\" is not an array [begin, end]", path, name);
  json_t *jb = json_array_get(joffs, 0), *je = json_array_get(joffs, 1);
  if (!json_is_integer(jb) || !json_is_integer(je))
    return zo_error(-EINVAL, "%s: tensor \"%s\": \"data_offsets\" are not integers", path, name);
  json_int_t begin = json_integer_value(jb), end = json_integer_value(je);
  if (begin < 0 || end < 0)
    return zo_error(-EINVAL, "%s: tensor \"%s\": negative data_offsets [%lld, %lld]", path, name,
                    (long long)begin, (long long)end);
  if (begin > end)
    return zo_error(-EINVAL, "%s: tensor \"%s\": data_offsets [%lld, %lld] end before they begin", path,
                    name, (long long)begin, (long long)end);
  if ((uint64_t)end > (uint64_t)f->data_len)
    return zo_error(-EINVAL, "%s: tensor \"%s\": data_offsets [%lld, %lld] out of bounds: the data buffer is %zu bytes",
                    path, name, (long long)begin, (long long)end, f->data_len);
  if ((uint64_t)(end - begin) != nbytes)
    return zo_error(-EINVAL, "%s: tensor \"%s\": shape and dtype %s make %llu bytes but data_offsets [%lld, %lld] span %lld",
                    path, name, dname, (unsigned long long)nbytes, (long long)begin, (long long)end,
                    (long long)(end - begin));

  t->name = name;
  t->file = f->path;
  t->dtype = (enum zo_dtype)dtype;
  t->ndim = (int)ndim;
  t->shape = shape;
  t->numel = (size_t)numel;
  t->nbytes = (size_t)nbytes;
  t->offset = (size_t)begin;
  t->data = NULL; /* set once the whole layout is checked */
  *shape_pool += ndim;
  return 0;
}

static int parse_metadata(struct zo_st_file *f, json_t *meta) {
  if (!json_is_object(meta))
    return zo_error(-EINVAL, "%s: \"%s\" is not a JSON object", f->path, ST_METADATA_KEY);
  size_t n = json_object_size(meta);
  f->meta_keys = calloc(n ? n : 1, sizeof *f->meta_keys);
  f->meta_values = calloc(n ? n : 1, sizeof *f->meta_values);
  if (!f->meta_keys || !f->meta_values) return zo_error(-ENOMEM, "%s: out of host memory", f->path);
  const char *key;
  json_t *v;
  json_object_foreach(meta, key, v) {
    if (!json_is_string(v))
      return zo_error(-EINVAL, "%s: metadata \"%s\": value is not a string", f->path, key);
    f->meta_keys[f->n_meta] = key;
    f->meta_values[f->n_meta] = json_string_value(v);
    f->n_meta++;
  }
  return 0;
}

/* Sorted by offset, tensors must tile [0, data_len) exactly, as the format
 * requires: an overlap would alias two tensors, a gap or tail hides bytes. */
static int check_layout(struct zo_st_file *f) {
  size_t pos = 0;
  const struct zo_st_tensor *prev = NULL;
  for (int i = 0; i < f->n_tensors; i++) {
    const struct zo_st_tensor *t = &f->tensors[i];
    if (prev && t->offset < pos)
      return zo_error(-EINVAL, "%s: tensors \"%s\" [%zu, %zu] and \"%s\" [%zu, %zu] overlap", f->path,
                      prev->name, prev->offset, prev->offset + prev->nbytes, t->name, t->offset,
                      t->offset + t->nbytes);
    if (t->offset > pos)
      return zo_error(-EINVAL, "%s: tensor \"%s\" starts at byte %zu, leaving a gap of %zu bytes after byte %zu of the data buffer",
                      f->path, t->name, t->offset, t->offset - pos, pos);
    pos = t->offset + t->nbytes;
    prev = t;
  }
  if (pos != f->data_len)
    return zo_error(-EINVAL, "%s: the data buffer is %zu bytes but its tensors cover %zu (trailing bytes)",
                    f->path, f->data_len, pos);
  return 0;
}

static int parse_header(struct zo_st_file *f, const char *hdr, size_t hlen) {
  if (hlen == 0 || hdr[0] != '{')
    return zo_error(-EINVAL, "%s: header does not start with '{' (not a safetensors file?)", f->path);
  json_error_t jerr;
  f->root = json_loadb(hdr, hlen, JSON_REJECT_DUPLICATES, &jerr);
  if (!f->root)
    return zo_error(-EINVAL, "%s: header is not valid JSON: %s (line %d, column %d)", f->path, jerr.text,
                    jerr.line, jerr.column);
  if (!json_is_object(f->root))
    return zo_error(-EINVAL, "%s: header is not a JSON object", f->path);

  size_t n = json_object_size(f->root), total_dims = 0;
  const char *key;
  json_t *v;
  json_object_foreach(f->root, key, v) {
    json_t *shape = json_is_object(v) ? json_object_get(v, "shape") : NULL;
    if (strcmp(key, ST_METADATA_KEY) && json_is_array(shape)) total_dims += json_array_size(shape);
  }
  if (n > (size_t)INT32_MAX) return zo_error(-EINVAL, "%s: too many tensors (%zu)", f->path, n);
  f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
  f->by_name = calloc(n ? n : 1, sizeof *f->by_name);
  f->shapes = calloc(total_dims ? total_dims : 1, sizeof *f->shapes);
  if (!f->tensors || !f->by_name || !f->shapes) return zo_error(-ENOMEM, "%s: out of host memory", f->path);

  int64_t *pool = f->shapes;
  json_t *meta = NULL;
  json_object_foreach(f->root, key, v) {
    if (!strcmp(key, ST_METADATA_KEY)) {
      meta = v;
      continue;
    }
    int err = parse_tensor(f, key, v, &f->tensors[f->n_tensors], &pool);
    if (err < 0) return err;
    f->n_tensors++;
  }
  if (meta) {
    int err = parse_metadata(f, meta);
    if (err < 0) return err;
  }

  qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_by_offset);
  int err = check_layout(f);
  if (err < 0) return err;
  const unsigned char *data = (const unsigned char *)f->map + 8 + hlen;
  for (int i = 0; i < f->n_tensors; i++) {
    f->tensors[i].data = data + f->tensors[i].offset;
    f->by_name[i] = &f->tensors[i];
  }
  qsort(f->by_name, (size_t)f->n_tensors, sizeof *f->by_name, cmp_by_name);
  return 0;
}

struct zo_st_file *zo_st_open(const char *path) {
  ZO_ASSERT(path);
  struct zo_st_file *f = calloc(1, sizeof *f);
  if (!f || !(f->path = str_dup(path))) {
    free(f);
    zo_error(-ENOMEM, "opening %s: out of host memory", path);
    return NULL;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    zo_error(-e, "cannot open %s: %s", path, strerror(e));
    goto out_free;
  }
  struct stat st;
  if (fstat(fd, &st) < 0) {
    int e = errno;
    zo_error(-e, "cannot stat %s: %s", path, strerror(e));
    goto out_close;
  }
  if (!S_ISREG(st.st_mode)) {
    zo_error(-EINVAL, "%s is not a regular file", path);
    goto out_close;
  }
  size_t size = (size_t)st.st_size;
  if (size < 8) {
    zo_error(-EINVAL, "%s: file is %zu bytes, too short for the 8-byte header length (truncated?)", path, size);
    goto out_close;
  }
  f->map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (f->map == MAP_FAILED) {
    int e = errno;
    f->map = NULL;
    zo_error(-e, "cannot map %s (%zu bytes): %s", path, size, strerror(e));
    goto out_close;
  }
  f->map_size = size;
  close(fd);

  const unsigned char *b = f->map;
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
  if (hlen > size - 8) {
    zo_error(-EINVAL, "%s: header length %llu exceeds the %zu bytes after the length field (truncated file?)",
             path, (unsigned long long)hlen, size - 8);
    goto out_close_file;
  }
  if (hlen > ZO_ST_MAX_HEADER) {
    char a[32];
    zo_error(-EINVAL, "%s: header length %llu exceeds the %s limit", path, (unsigned long long)hlen,
             zo_format_bytes(ZO_ST_MAX_HEADER, a));
    goto out_close_file;
  }
  f->data_len = size - 8 - (size_t)hlen;
  if (parse_header(f, (const char *)b + 8, (size_t)hlen) < 0) goto out_close_file;
  return f;

out_close:
  close(fd);
out_free:
  free(f->path);
  free(f);
  return NULL;
out_close_file:
  zo_st_close(f);
  return NULL;
}

void zo_st_close(struct zo_st_file *f) {
  if (!f) return;
  if (f->map) munmap(f->map, f->map_size);
  json_decref(f->root);
  free(f->tensors);
  free(f->by_name);
  free(f->shapes);
  free(f->meta_keys);
  free(f->meta_values);
  free(f->path);
  free(f);
}

const struct zo_st_tensor *zo_st_find(const struct zo_st_file *f, const char *name) {
  ZO_ASSERT(f && name);
  struct zo_st_tensor key = {.name = name};
  const struct zo_st_tensor *kp = &key;
  const struct zo_st_tensor **hit =
      bsearch(&kp, f->by_name, (size_t)f->n_tensors, sizeof *f->by_name, cmp_by_name);
  return hit ? *hit : NULL;
}

int zo_st_n_tensors(const struct zo_st_file *f) {
  ZO_ASSERT(f);
  return f->n_tensors;
}

const struct zo_st_tensor *zo_st_tensor_at(const struct zo_st_file *f, int i) {
  ZO_ASSERT(f && i >= 0 && i < f->n_tensors);
  return &f->tensors[i];
}

const char *zo_st_metadata(const struct zo_st_file *f, const char *key) {
  ZO_ASSERT(f && key);
  for (int i = 0; i < f->n_meta; i++) {
    if (!strcmp(f->meta_keys[i], key)) return f->meta_values[i];
  }
  return NULL;
}

int zo_st_n_metadata(const struct zo_st_file *f) {
  ZO_ASSERT(f);
  return f->n_meta;
}

void zo_st_metadata_at(const struct zo_st_file *f, int i, const char **key, const char **value) {
  ZO_ASSERT(f && i >= 0 && i < f->n_meta && key && value);
  *key = f->meta_keys[i];
  *value = f->meta_values[i];
}

const char *zo_st_path(const struct zo_st_file *f) {
  ZO_ASSERT(f);
  return f->path;
}

/* ---- writer ------------------------------------------------------------ */

struct st_entry {
  char *name;
  enum zo_dtype dtype;
  int ndim;
  int64_t *shape;   /* (ndim) */
  const void *data; /* borrowed host memory, or NULL when fill produces it */
  zo_st_fill_fn fill; /* NULL, or produces the bytes in chunks while writing */
  void *fill_ctx;
  size_t nbytes;
};

struct zo_st_writer {
  int n, cap;
  struct st_entry *entries; /* (cap), n used, in the order added */
  json_t *metadata;         /* object of strings, insertion order */
};

struct zo_st_writer *zo_st_writer_init(void) {
  struct zo_st_writer *w = calloc(1, sizeof *w);
  if (!w) goto out_oom;
  w->metadata = json_object();
  if (!w->metadata || zo_st_writer_set_metadata(w, "format", "pt") < 0) goto out_free;
  return w;
out_free:
  zo_st_writer_free(w);
out_oom:
  zo_error(-ENOMEM, "safetensors writer: out of host memory");
  return NULL;
}

void zo_st_writer_free(struct zo_st_writer *w) {
  if (!w) return;
  for (int i = 0; i < w->n; i++) {
    free(w->entries[i].name);
    free(w->entries[i].shape);
  }
  free(w->entries);
  json_decref(w->metadata);
  free(w);
}

static int add_entry(struct zo_st_writer *w, const char *name, enum zo_dtype dtype, int ndim,
                     const int64_t *shape, const void *data, zo_st_fill_fn fill, void *fill_ctx) {
  ZO_ASSERT(w && name && ndim >= 0 && (shape || ndim == 0));
  if (!*name) return zo_error(-EINVAL, "safetensors writer: empty tensor name");
  if (!strcmp(name, ST_METADATA_KEY))
    return zo_error(-EINVAL, "safetensors writer: \"%s\" is reserved, not a tensor name", name);
  json_t *probe = json_string(name); /* NULL for invalid UTF-8 (or OOM) */
  if (!probe) return zo_error(-EINVAL, "safetensors writer: tensor name \"%s\" is not valid UTF-8", name);
  json_decref(probe);
  for (int i = 0; i < w->n; i++) {
    if (!strcmp(w->entries[i].name, name))
      return zo_error(-EINVAL, "safetensors writer: tensor \"%s\" added twice", name);
  }
  uint64_t numel = 1;
  bool overflow = false, has_zero = false;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 0)
      return zo_error(-EINVAL, "safetensors writer: tensor \"%s\": shape[%d] = %lld is negative", name, d,
                      (long long)shape[d]);
    has_zero |= shape[d] == 0;
    overflow |= __builtin_mul_overflow(numel, (uint64_t)shape[d], &numel);
  }
  if (has_zero) numel = 0, overflow = false;
  uint64_t nbytes;
  if (overflow || __builtin_mul_overflow(numel, (uint64_t)zo_dtype_size(dtype), &nbytes) ||
      nbytes > (uint64_t)INT64_MAX)
    return zo_error(-EINVAL, "safetensors writer: tensor \"%s\": size overflows", name);
  if (nbytes && !data && !fill) return zo_error(-EINVAL, "safetensors writer: tensor \"%s\": NULL data", name);

  if (w->n == w->cap) {
    int cap = w->cap ? 2 * w->cap : 64;
    struct st_entry *e = realloc(w->entries, (size_t)cap * sizeof *e);
    if (!e) return zo_error(-ENOMEM, "safetensors writer: out of host memory");
    w->entries = e;
    w->cap = cap;
  }
  struct st_entry *e = &w->entries[w->n];
  e->name = str_dup(name);
  e->shape = malloc((ndim ? (size_t)ndim : 1) * sizeof *e->shape);
  if (!e->name || !e->shape) {
    free(e->name);
    free(e->shape);
    return zo_error(-ENOMEM, "safetensors writer: out of host memory");
  }
  if (ndim) memcpy(e->shape, shape, (size_t)ndim * sizeof *shape);
  e->dtype = dtype;
  e->ndim = ndim;
  e->data = data;
  e->fill = fill;
  e->fill_ctx = fill_ctx;
  e->nbytes = (size_t)nbytes;
  w->n++;
  return 0;
}

int zo_st_writer_add(struct zo_st_writer *w, const char *name, enum zo_dtype dtype, int ndim,
                     const int64_t *shape, const void *data) {
  return add_entry(w, name, dtype, ndim, shape, data, NULL, NULL);
}

int zo_st_writer_add_fill(struct zo_st_writer *w, const char *name, enum zo_dtype dtype, int ndim,
                          const int64_t *shape, zo_st_fill_fn fill, void *ctx) {
  ZO_ASSERT(fill != NULL);
  return add_entry(w, name, dtype, ndim, shape, NULL, fill, ctx);
}

/* Streams one produced tensor through a bounded buffer. */
static int write_filled(struct zo_atomic_file *af, const struct st_entry *e, unsigned char *chunk,
                        size_t chunk_size) {
  for (size_t off = 0; off < e->nbytes; off += chunk_size) {
    size_t n = e->nbytes - off < chunk_size ? e->nbytes - off : chunk_size;
    int err = e->fill(e->fill_ctx, chunk, off, n);
    if (err) {
      zo_atomic_file_abort(af);
      return err;
    }
    err = zo_atomic_file_write(af, chunk, n);
    if (err) return err;
  }
  return 0;
}

int zo_st_writer_set_metadata(struct zo_st_writer *w, const char *key, const char *value) {
  ZO_ASSERT(w && key);
  if (!value) {
    json_object_del(w->metadata, key);
    return 0;
  }
  json_t *jkey = json_string(key), *jvalue = json_string(value);
  json_decref(jkey);
  if (!jkey || !jvalue) {
    json_decref(jvalue);
    return zo_error(-EINVAL, "safetensors writer: metadata \"%s\": key or value is not valid UTF-8", key);
  }
  if (json_object_set_new(w->metadata, key, jvalue) < 0)
    return zo_error(-ENOMEM, "safetensors writer: metadata \"%s\": out of host memory", key);
  return 0;
}

/* The header JSON, compact, in the order added, metadata first. */
static char *build_header(const struct zo_st_writer *w, size_t *len) {
  json_t *root = json_object();
  if (!root) return NULL;
  if (json_object_size(w->metadata) && json_object_set(root, ST_METADATA_KEY, w->metadata) < 0) goto out_root;
  uint64_t pos = 0;
  for (int i = 0; i < w->n; i++) {
    const struct st_entry *e = &w->entries[i];
    json_t *shape = json_array();
    if (!shape) goto out_root;
    for (int d = 0; d < e->ndim; d++) {
      if (json_array_append_new(shape, json_integer((json_int_t)e->shape[d])) < 0) {
        json_decref(shape);
        goto out_root;
      }
    }
    json_t *t = json_pack("{s:s, s:o, s:[I,I]}", "dtype", zo_dtype_name(e->dtype), "shape", shape,
                          "data_offsets", (json_int_t)pos, (json_int_t)(pos + e->nbytes));
    if (!t || json_object_set_new(root, e->name, t) < 0) goto out_root;
    pos += e->nbytes;
  }
  char *s = json_dumps(root, JSON_COMPACT);
  json_decref(root);
  if (s) *len = strlen(s);
  return s;
out_root:
  json_decref(root);
  return NULL;
}

int zo_st_writer_write(struct zo_st_writer *w, const char *path) {
  ZO_ASSERT(w && path);
  uint64_t total = 0;
  for (int i = 0; i < w->n; i++) {
    if (__builtin_add_overflow(total, (uint64_t)w->entries[i].nbytes, &total) || total > (uint64_t)INT64_MAX)
      return zo_error(-EINVAL, "%s: tensors total more than 2^63 bytes", path);
  }
  size_t len = 0;
  char *hdr = build_header(w, &len);
  if (!hdr) return zo_error(-ENOMEM, "%s: cannot build the safetensors header (out of host memory)", path);
  /* Pad with spaces so the data buffer starts 8-byte aligned in the file. */
  size_t padded = (len + 7) & ~(size_t)7;
  char *buf = realloc(hdr, 8 + padded);
  if (!buf) {
    free(hdr);
    return zo_error(-ENOMEM, "%s: cannot build the safetensors header (out of host memory)", path);
  }
  memmove(buf + 8, buf, len);
  memset(buf + 8 + len, ' ', padded - len);
  for (int i = 0; i < 8; i++) buf[i] = (char)(unsigned char)((uint64_t)padded >> (8 * i));

  struct zo_atomic_file af;
  int err = zo_atomic_file_begin(&af, path);
  if (err < 0) goto out_buf;
  err = zo_atomic_file_write(&af, buf, 8 + padded);
  unsigned char *chunk = NULL;
  for (int i = 0; i < w->n && err == 0; i++) {
    const struct st_entry *e = &w->entries[i];
    if (!e->fill) {
      err = zo_atomic_file_write(&af, e->data, e->nbytes);
      continue;
    }
    if (!chunk && !(chunk = malloc(ZO_ST_FILL_CHUNK))) {
      err = zo_error(-ENOMEM, "%s: out of host memory for a %d-byte write buffer", path, ZO_ST_FILL_CHUNK);
      zo_atomic_file_abort(&af);
      break;
    }
    err = write_filled(&af, e, chunk, ZO_ST_FILL_CHUNK);
  }
  free(chunk);
  if (err == 0) err = zo_atomic_file_commit(&af);
out_buf:
  free(buf);
  return err;
}
