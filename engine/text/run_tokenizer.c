/* The tokenizer files a run carries: found from the config
 * (model.tokenizer, else model.init_from's directory), copied into every
 * checkpoint (the trainer passes them to each save in struct
 * zo_checkpoint_opts) and every export, so that a checkpoint or exported
 * directory is a whole Hugging Face model directory (AutoTokenizer loads
 * it) and eval and sample find the tokenizer next to the weights. Nothing here parses a tokenizer
 * (zo/tokenizer.h does). */
#include "zo/run_tokenizer.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "zo/common.h"
#include "zo/fsutil.h"

const char *const zo_tokenizer_files[ZO_TOKENIZER_N_FILES] = {"tokenizer.json", "tokenizer_config.json",
                                                              "special_tokens_map.json", "generation_config.json"};

bool zo_tokenizer_json_of(const char *path, char *json, size_t size) {
  struct stat st;
  if (!path || !path[0] || stat(path, &st) != 0) return false;
  if (S_ISREG(st.st_mode)) return snprintf(json, size, "%s", path) < (int)size;
  if (!S_ISDIR(st.st_mode)) return false;
  if (snprintf(json, size, "%s/tokenizer.json", path) >= (int)size) return false;
  return stat(json, &st) == 0 && S_ISREG(st.st_mode);
}

/* The directory of file path into dir ("." when it has none). */
static void dir_of(const char *path, char *dir, size_t size) {
  snprintf(dir, size, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash) snprintf(dir, size, ".");
  else if (slash == dir) slash[1] = '\0';
  else *slash = '\0';
}

int zo_run_tokenizer(const struct zo_config *cfg, char *json, size_t size) {
  json[0] = '\0';
  const char *tk = cfg->model.tokenizer, *init = cfg->model.init_from;
  if (tk && tk[0]) {
    if (!zo_tokenizer_json_of(tk, json, size))
      return zo_error(-ENOENT, "model.tokenizer %s: neither a tokenizer.json file nor a directory holding one", tk);
    return 0;
  }
  if (init && init[0]) {
    struct stat st;
    char dir[PATH_MAX];
    if (stat(init, &st) == 0 && S_ISREG(st.st_mode)) dir_of(init, dir, sizeof dir);
    else snprintf(dir, sizeof dir, "%s", init);
    if (!zo_tokenizer_json_of(dir, json, size)) json[0] = '\0';
  }
  return 0;
}

static int copy_file(const char *src, const char *dir, const char *name) {
  char dst[PATH_MAX];
  if (snprintf(dst, sizeof dst, "%s/%s", dir, name) >= (int)sizeof dst)
    return zo_error(-ENAMETOOLONG, "%s/%s: path too long", dir, name);
  void *data;
  size_t n;
  int err = zo_read_file(src, &data, &n, (size_t)1 << 30);
  if (err) return zo_error(err, "cannot copy the tokenizer file %s: %s", src, zo_last_error());
  err = zo_write_file_atomic(dst, data, n);
  free(data);
  return err ? zo_error(err, "cannot write %s: %s", dst, zo_last_error()) : 0;
}

int zo_tokenizer_copy_files(const char *json, const char *dir) {
  int err = copy_file(json, dir, zo_tokenizer_files[0]);
  char src_dir[PATH_MAX], src[PATH_MAX + 64];
  dir_of(json, src_dir, sizeof src_dir);
  for (int k = 1; k < ZO_TOKENIZER_N_FILES && !err; k++) {
    struct stat st;
    snprintf(src, sizeof src, "%s/%s", src_dir, zo_tokenizer_files[k]);
    if (stat(src, &st) == 0 && S_ISREG(st.st_mode)) err = copy_file(src, dir, zo_tokenizer_files[k]);
  }
  return err;
}
