/* The safetensors reader (engine/store/safetensors.c): header length, JSON header,
 * dtypes, shapes, offsets and metadata of a whole file, then every float
 * tensor of up to 64 Ki elements read as F32. */
#include "fuzz_common.h"
#include "zo/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  char path[128];
  fuzz_write(fuzz_path("f.safetensors", path, sizeof path), data, n);
  struct zo_st_file *f = zo_st_open(path);
  if (!f) return 0;
  static float buf[1 << 16];
  for (int i = 0; i < zo_st_n_tensors(f); i++) {
    const struct zo_st_tensor *t = zo_st_tensor_at(f, i);
    if (zo_st_find(f, t->name) != t) abort();
    if ((t->dtype == ZO_F32 || t->dtype == ZO_BF16 || t->dtype == ZO_F16) && t->numel <= 1 << 16)
      zo_st_read_f32(t, buf, t->numel);
  }
  for (int i = 0; i < zo_st_n_metadata(f); i++) {
    const char *key, *value;
    zo_st_metadata_at(f, i, &key, &value);
    if (zo_st_metadata(f, key) == NULL) abort();
  }
  zo_st_close(f);
  return 0;
}
