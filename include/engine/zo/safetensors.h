/* safetensors files (the Hugging Face weight format): an 8-byte little-endian
 * header length N, N bytes of JSON {"name": {"dtype", "shape",
 * "data_offsets": [begin, end]}, "__metadata__": {string: string}} padded
 * with spaces to a multiple of 8, then the byte buffer the offsets index.
 * The reader maps the file read-only and validates the whole header before
 * returning, so a lying header is an error naming the file and tensor, never
 * an out-of-bounds read. The writer streams host buffers into one atomic file
 * (zo_atomic_file) without copying them. Dtypes outside enum zo_dtype (F64,
 * I64, BOOL, ...) are rejected. Handles are not shared between threads. */
#ifndef ZO_SAFETENSORS_H
#define ZO_SAFETENSORS_H

#include "zo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZO_ST_MAX_HEADER ((size_t)100000000) /* bytes; the Hugging Face library's limit */

struct zo_st_tensor {
  const char *name;     /* e.g. "h.0.attn.c_attn.weight" */
  const char *file;     /* path of the file holding it, for messages */
  enum zo_dtype dtype;
  int ndim;             /* 0 for a scalar */
  const int64_t *shape; /* (ndim), each >= 0 */
  size_t numel;         /* product of shape, 1 for a scalar */
  size_t nbytes;        /* numel * zo_dtype_size(dtype) */
  size_t offset;        /* bytes from the start of the data buffer */
  const void *data;     /* into the mapping; read-only. Aligned to the dtype
                           only when the writer aligned it: load via memcpy or
                           zo_st_read_f32 */
};

struct zo_st_file;

/* ---- reader ------------------------------------------------------------ */

/* Maps path and validates its header: length within the file and at most
 * ZO_ST_MAX_HEADER, JSON syntax, no duplicate keys, each tensor's dtype known
 * and supported, shape entries non-negative integers whose product times the
 * dtype size equals end - begin without overflow, offsets inside the data
 * buffer and covering it exactly (no overlap, gap or trailing bytes),
 * metadata values strings. Returns NULL with zo_last_error() naming the file
 * and tensor on any violation. The mapping lives until zo_st_close; a file
 * truncated by someone else while mapped raises SIGBUS on access. */
struct zo_st_file *zo_st_open(const char *path);
/* Unmaps and frees; every pointer obtained from f dies. Accepts NULL. */
void zo_st_close(struct zo_st_file *f);

/* The tensor called name, NULL when absent (no message set). O(log n). */
const struct zo_st_tensor *zo_st_find(const struct zo_st_file *f, const char *name);
/* Number of tensors; zo_st_tensor_at(f, i) walks them in data-offset order,
 * which is the order a writer added them. */
int zo_st_n_tensors(const struct zo_st_file *f);
const struct zo_st_tensor *zo_st_tensor_at(const struct zo_st_file *f, int i);
/* Metadata value for key, NULL when absent. */
const char *zo_st_metadata(const struct zo_st_file *f, const char *key);
/* Number of metadata entries; zo_st_metadata_at gives the i-th key and value
 * in header order. */
int zo_st_n_metadata(const struct zo_st_file *f);
void zo_st_metadata_at(const struct zo_st_file *f, int i, const char **key, const char **value);
/* The path f was opened with. */
const char *zo_st_path(const struct zo_st_file *f);

/* Converts t (F32, BF16 or F16) to fp32 into out, which holds numel floats;
 * numel must equal t->numel. BF16 widens exactly (bits << 16); F16 converts
 * exactly, subnormals, infinities and NaNs included. Returns 0, -EINVAL on a
 * numel mismatch or -ENOTSUP for other dtypes, with a message. */
int zo_st_read_f32(const struct zo_st_tensor *t, float *out, size_t numel);
/* Exact scalar conversions used by zo_st_read_f32. */
float zo_st_bf16_to_f32(uint16_t h);
float zo_st_f16_to_f32(uint16_t h);

/* ---- writer ------------------------------------------------------------ */

struct zo_st_writer;

/* An empty writer with metadata {"format": "pt"} (what transformers expects
 * from PyTorch weights). NULL on OOM with a message. */
struct zo_st_writer *zo_st_writer_init(void);
/* Frees the writer (not the tensor data it points to). Accepts NULL. */
void zo_st_writer_free(struct zo_st_writer *w);

/* Adds a tensor: name and shape are copied; data (numel * dtype size bytes,
 * host memory) is borrowed and must stay valid and unchanged until
 * zo_st_writer_write returns. Tensors are written in the order added, packed
 * without padding. Returns 0, -EINVAL (empty, duplicate or non-UTF-8 name,
 * "__metadata__", negative dim, size overflow, NULL data with bytes to write)
 * or -ENOMEM. */
int zo_st_writer_add(struct zo_st_writer *w, const char *name, enum zo_dtype dtype, int ndim,
                     const int64_t *shape, const void *data);
/* Produces bytes [offset, offset + nbytes) of a tensor's serialized data
 * into dst. Called while the file is written, in increasing offset order,
 * with chunks of at most ZO_ST_FILL_CHUNK bytes (multiples of the dtype size
 * except possibly the last). Returns 0, or -errno with a message: the write
 * then fails with it and path is left as it was. */
typedef int (*zo_st_fill_fn)(void *ctx, void *dst, size_t offset, size_t nbytes);
#define ZO_ST_FILL_CHUNK (1 << 20)

/* Adds a tensor whose bytes fill produces while writing (a transposed or
 * converted copy that need not exist in memory at once). ctx must stay
 * valid until zo_st_writer_write returns. Same checks as zo_st_writer_add. */
int zo_st_writer_add_fill(struct zo_st_writer *w, const char *name, enum zo_dtype dtype, int ndim,
                          const int64_t *shape, zo_st_fill_fn fill, void *ctx);

/* Sets a metadata entry, replacing an existing one; value NULL removes it.
 * Returns 0, -EINVAL (key or value not UTF-8) or -ENOMEM. */
int zo_st_writer_set_metadata(struct zo_st_writer *w, const char *key, const char *value);
/* Writes everything to path atomically: path holds the old contents or the
 * complete new file, never a partial one. Returns 0 or -errno with a message. */
int zo_st_writer_write(struct zo_st_writer *w, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* ZO_SAFETENSORS_H */
