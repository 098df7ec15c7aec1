/* `zoffload prepare --tokenizer`: documents -> token files of one of the
 * existing formats (u16, u32, llmc), with the tokenizer's end-of-text token
 * after each document and, for instruction data, a loss mask beside each
 * file (PATH.mask, zo/data.h) that trains only the completion tokens.
 * Documents are plain text files (one per file, or cut at a separator) or
 * JSON lines (one object a line: a text field, or a prompt and a completion
 * field). The inputs are mapped read-only and cut into documents first; the
 * documents are then encoded in batches over OpenMP threads and written in
 * their input order, so the output does not depend on the thread count.
 * The last val_fraction of the documents (whole documents) go to out_val.
 * The chat form (a list of {role, content} messages a line) is rendered
 * with the tokenizer's chat template (zo/chat_template.h): the text each
 * assistant message adds to the rendering is trained, the rest is not. */
#include "zo/prepare.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zo/chat_template.h"
#include "zo/data.h"
#include "zo/fsutil.h"
#include "zo/tokenizer.h"

struct doc {
  int file;          /* index into the inputs */
  size_t off, len;   /* bytes of the file: the text, or the JSON line */
  size_t line;       /* 1-based line number (JSON lines), for messages */
};

struct input {
  const char *path;
  const char *map; /* NULL for an empty file */
  size_t nbytes;
};

/* One encoded document: ids, and mask bytes when instruction data. */
struct encoded {
  int32_t *ids;
  size_t n, cap;
  uint8_t *mask; /* (n,) or NULL */
  int err;
  char msg[512];
};

struct out_file {
  struct zo_atomic_file tok, mask;
  size_t n;      /* tokens written */
  bool open;
};

static bool ends_with(const char *s, const char *suffix) {
  const size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int map_inputs(struct input *in, const char *const *paths, int n) {
  for (int k = 0; k < n; k++) {
    in[k].path = paths[k];
    /* O_NONBLOCK: a FIFO opens at once (then refused below) instead of waiting for a writer. */
    int fd = open(paths[k], O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return zo_error(-errno, "prepare: cannot open '%s': %s", paths[k], strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
      const int err = errno;
      close(fd);
      return zo_error(-err, "prepare: cannot stat '%s': %s", paths[k], strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
      close(fd);
      return zo_error(S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL, "prepare: input '%s' is %s: inputs are regular "
                      "files (prepare maps them); copy it into a file first", paths[k], zo_file_kind(st.st_mode));
    }
    in[k].nbytes = (size_t)st.st_size;
    if (in[k].nbytes) {
      void *m = mmap(NULL, in[k].nbytes, PROT_READ, MAP_PRIVATE, fd, 0);
      if (m == MAP_FAILED) {
        const int err = errno;
        close(fd);
        return zo_error(-err, "prepare: cannot map '%s': %s", paths[k], strerror(err));
      }
      in[k].map = m;
    }
    close(fd);
  }
  return 0;
}

static int push_doc(struct doc **docs, size_t *n, size_t *cap, struct doc d) {
  if (*n == *cap) {
    size_t c = *cap ? 2 * *cap : 1024;
    struct doc *p = realloc(*docs, c * sizeof *p);
    if (!p) return zo_error(-ENOMEM, "prepare: out of host memory for the document list");
    *docs = p;
    *cap = c;
  }
  (*docs)[(*n)++] = d;
  return 0;
}

/* Cuts every input into documents: JSON lines (non-blank lines), or text
 * files whole or at every occurrence of sep (empty pieces dropped). */
static int cut_documents(const struct input *in, int n_in, bool jsonl, const char *sep, struct doc **docs,
                         size_t *n_docs) {
  size_t cap = 0;
  const size_t sep_n = sep ? strlen(sep) : 0;
  for (int f = 0; f < n_in; f++) {
    const char *p = in[f].map;
    const size_t n = in[f].nbytes;
    if (jsonl) {
      size_t line = 0;
      /* A UTF-8 byte-order mark before the first line (as configs accept one). */
      const size_t bom = n >= 3 && !memcmp(p, "\xEF\xBB\xBF", 3) ? 3 : 0;
      for (size_t a = bom; a < n;) {
        const char *nl = memchr(p + a, '\n', n - a);
        const size_t b = nl ? (size_t)(nl - p) : n;
        line++;
        size_t k = a;
        while (k < b && (p[k] == ' ' || p[k] == '\t' || p[k] == '\r')) k++;
        if (k < b) {
          int err = push_doc(docs, n_docs, &cap, (struct doc){f, a, b - a, line});
          if (err) return err;
        }
        a = b + 1;
      }
    } else if (!sep_n) {
      if (n) {
        int err = push_doc(docs, n_docs, &cap, (struct doc){f, 0, n, 0});
        if (err) return err;
      }
    } else {
      for (size_t a = 0; a <= n;) {
        const char *hit = a < n ? memmem(p + a, n - a, sep, sep_n) : NULL;
        const size_t b = hit ? (size_t)(hit - p) : n;
        if (b > a) {
          int err = push_doc(docs, n_docs, &cap, (struct doc){f, a, b - a, 0});
          if (err) return err;
        }
        a = b + sep_n;
        if (!hit) break;
      }
    }
  }
  return 0;
}

static int enc_append(struct encoded *e, const struct zo_tokenizer *tk, const char *s, size_t n, bool special,
                      uint8_t trained) {
  const size_t n0 = e->n;
  if (zo_tokenizer_encode(tk, s, n, special, &e->ids, &e->n, &e->cap)) return -ENOMEM;
  if (e->mask || !trained) {
    uint8_t *m = realloc(e->mask, e->cap ? e->cap : 1);
    if (!m) return -ENOMEM;
    if (!e->mask) memset(m, 1, n0);
    e->mask = m;
    memset(e->mask + n0, trained, e->n - n0);
  }
  return 0;
}

static int enc_eos(struct encoded *e, int32_t eos, uint8_t trained) {
  if (e->n == e->cap) {
    size_t c = e->cap ? 2 * e->cap : 16;
    int32_t *p = realloc(e->ids, c * sizeof *p);
    if (!p) return -ENOMEM;
    e->ids = p;
    e->cap = c;
    if (e->mask) {
      uint8_t *m = realloc(e->mask, c);
      if (!m) return -ENOMEM;
      e->mask = m;
    }
  }
  if (e->mask) e->mask[e->n] = trained;
  e->ids[e->n++] = eos;
  return 0;
}

/* A string field of a JSON object line, or a message in e->msg. */
static const char *json_field(struct encoded *e, json_t *obj, const char *key, const struct input *in,
                              const struct doc *d, size_t *len) {
  json_t *v = json_object_get(obj, key);
  if (!v || !json_is_string(v)) {
    snprintf(e->msg, sizeof e->msg, "%s:%zu: %s \"%s\" (the object's keys are what --field, --prompt-field "
                                    "and --completion-field name)",
             in->path, d->line, v ? "not a string:" : "no key", key);
    return NULL;
  }
  *len = json_string_length(v);
  return json_string_value(v);
}

/* Renders messages[0, n) into *out (freed first), reporting to e. */
static int render(struct encoded *e, const char *tmpl, const struct zo_chat_message *m, size_t n, bool gen,
                  const char *bos, const char *eos, char **out, size_t *len, const struct input *in,
                  const struct doc *d) {
  free(*out);
  *out = NULL;
  int err = zo_chat_render(tmpl, m, n, gen, bos, eos, out, len);
  if (err) snprintf(e->msg, sizeof e->msg, "%s:%zu: %s", in->path, d->line, zo_last_error());
  return err;
}

/* The chat form: segments of the rendering, encoded one after the other
 * without special tokens added (the template writes them), as
 * apply_chat_template(tokenize=True) does. For each assistant message j the
 * rendering of messages[0, j) with the generation prompt must extend what
 * came before it, and that of messages[0, j] must extend it in turn: the
 * difference is the completion (trained); everything else is prompt. */
static int encode_chat(struct encoded *e, const struct zo_tokenizer *tk, json_t *msgs, const struct input *in,
                       const struct doc *d) {
  const char *tmpl = zo_tokenizer_chat_template(tk);
  if (!tmpl) {
    snprintf(e->msg, sizeof e->msg, "%s:%zu: the tokenizer has no chat_template (tokenizer_config.json) to render "
                                    "messages with; give --prompt-field and --completion-field instead",
             in->path, d->line);
    return -EINVAL;
  }
  const size_t n = json_array_size(msgs);
  struct zo_chat_message *m = calloc(n + 1, sizeof *m);
  if (!m) return -ENOMEM;
  for (size_t k = 0; k < n; k++) {
    json_t *x = json_array_get(msgs, k), *role = json_object_get(x, "role"), *content = json_object_get(x, "content");
    if (!json_is_string(role) || !json_is_string(content)) {
      snprintf(e->msg, sizeof e->msg, "%s:%zu: message %zu is not an object with string \"role\" and \"content\"",
               in->path, d->line, k);
      free(m);
      return -EINVAL;
    }
    m[k].role = json_string_value(role);
    m[k].content = json_string_value(content);
  }
  const int32_t bos_id = zo_tokenizer_bos_id(tk), eos_id = zo_tokenizer_eos_id(tk);
  const char *bos = bos_id >= 0 ? zo_tokenizer_id_to_token(tk, bos_id) : NULL;
  const char *eos = eos_id >= 0 ? zo_tokenizer_id_to_token(tk, eos_id) : NULL;
  char *a = NULL, *b = NULL, *prev = NULL; /* prev: the last full rendering, its first done bytes encoded */
  size_t done = 0, na = 0, nb = 0;
  int err = 0;
  for (size_t j = 0; j <= n && !err; j++) {
    if (j < n && strcmp(m[j].role, "assistant") != 0) continue;
    /* j == n: the tail after the last assistant message, not trained. */
    if ((err = render(e, tmpl, m, j, j < n, bos, eos, &a, &na, in, d))) break;
    if (na < done || (done && memcmp(a, prev, done) != 0)) {
      snprintf(e->msg, sizeof e->msg, "%s:%zu: the chat template's rendering of messages 0..%zu does not begin with "
                                      "that of the conversation before it: completions cannot be masked",
               in->path, d->line, j);
      err = -EINVAL;
      break;
    }
    if ((err = enc_append(e, tk, a + done, na - done, false, 0))) break;
    done = na;
    if (j == n) break;
    if ((err = render(e, tmpl, m, j + 1, false, bos, eos, &b, &nb, in, d))) break;
    if (nb < done || memcmp(b, a, done) != 0) {
      snprintf(e->msg, sizeof e->msg, "%s:%zu: the chat template's rendering with assistant message %zu does not "
                                      "begin with the rendering before it plus the generation prompt: completions "
                                      "cannot be masked",
               in->path, d->line, j);
      err = -EINVAL;
      break;
    }
    if ((err = enc_append(e, tk, b + done, nb - done, false, 1))) break;
    done = nb;
    free(prev);
    prev = b;
    b = NULL;
  }
  free(prev);
  if (!err && done == 0 && n == 0) {
    snprintf(e->msg, sizeof e->msg, "%s:%zu: an empty message list", in->path, d->line);
    err = -EINVAL;
  }
  free(a);
  free(b);
  free(m);
  return err;
}

static void encode_doc(struct encoded *e, const struct zo_tokenizer *tk, const struct zo_prepare_opts *o,
                       const struct input *in, const struct doc *d, int32_t eos) {
  const char *text = in->map + d->off;
  int err = 0;
  if (!o->jsonl) {
    err = enc_append(e, tk, text, d->len, true, 1);
  } else {
    json_error_t je;
    json_t *obj = json_loadb(text, d->len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!obj || !json_is_object(obj)) {
      snprintf(e->msg, sizeof e->msg, "%s:%zu: %s", in->path, d->line,
               obj ? "not a JSON object" : je.text);
      e->err = -EINVAL;
      json_decref(obj);
      return;
    }
    size_t n1 = 0, n2 = 0;
    if (o->messages_field) {
      json_t *msgs = json_object_get(obj, o->messages_field);
      if (!json_is_array(msgs)) {
        snprintf(e->msg, sizeof e->msg, "%s:%zu: %s \"%s\" (--messages-field names a list of {role, content})",
                 in->path, d->line, msgs ? "not a list:" : "no key", o->messages_field);
        err = -EINVAL;
      } else {
        err = encode_chat(e, tk, msgs, in, d);
      }
      json_decref(obj);
      /* The conversation's own end is the template's; the separator after
       * it is not a completion token. */
      if (!err && (e->n == 0 || e->ids[e->n - 1] != eos)) err = enc_eos(e, eos, 0);
      if (err == -ENOMEM) snprintf(e->msg, sizeof e->msg, "out of host memory encoding %s", in->path);
      e->err = err;
      return;
    }
    if (o->prompt_field) {
      const char *p = json_field(e, obj, o->prompt_field, in, d, &n1);
      const char *c = p ? json_field(e, obj, o->completion_field, in, d, &n2) : NULL;
      if (!p || !c) err = -EINVAL;
      if (!err) err = enc_append(e, tk, p, n1, true, 0);
      if (!err) err = enc_append(e, tk, c, n2, false, 1);
    } else {
      const char *t = json_field(e, obj, o->field ? o->field : "text", in, d, &n1);
      err = t ? enc_append(e, tk, t, n1, true, 1) : -EINVAL;
    }
    json_decref(obj);
  }
  /* After a completion the end-of-text is trained: the model learns to stop. */
  if (!err) err = enc_eos(e, eos, 1);
  if (err == -ENOMEM) snprintf(e->msg, sizeof e->msg, "out of host memory encoding %s", in->path);
  e->err = err;
}

static int out_begin(struct out_file *f, const char *path, enum zo_data_format fmt, bool masked) {
  int err = zo_atomic_file_begin(&f->tok, path);
  if (err) return err;
  f->open = true;
  if (fmt == ZO_DATA_LLMC) {
    const int32_t header[ZO_LLMC_HEADER_INTS] = {0}; /* written again at the end */
    if ((err = zo_atomic_file_write(&f->tok, header, sizeof header))) return err;
  }
  if (masked) {
    char mp[PATH_MAX];
    snprintf(mp, sizeof mp, "%s" ZO_DATA_MASK_SUFFIX, path);
    if ((err = zo_atomic_file_begin(&f->mask, mp))) return err;
  }
  return 0;
}

/* Appends one document's tokens in the file's width; an id the width cannot
 * hold is refused naming it. */
static int out_write(struct out_file *f, const struct encoded *e, size_t width, const char *path,
                     const struct input *in, const struct doc *d, void *buf, bool masked) {
  for (size_t k = 0; k < e->n; k++) {
    const uint32_t id = (uint32_t)e->ids[k];
    if (width == 2 && id > UINT16_MAX)
      return zo_error(-ERANGE, "prepare: token id %u (of a document of %s%s%zu) does not fit the uint16 tokens of "
                               "'%s' (largest 65535): the tokenizer has more ids; use --format u32 or llmc32",
                      id, in->path, d->line ? ":" : "", d->line ? d->line : 0, path);
    if (width == 2) ((uint16_t *)buf)[k] = (uint16_t)id;
    else ((uint32_t *)buf)[k] = id;
  }
  int err = zo_atomic_file_write(&f->tok, buf, e->n * width);
  if (!err && masked) {
    if (e->mask) {
      err = zo_atomic_file_write(&f->mask, e->mask, e->n);
    } else {
      memset(buf, 1, e->n);
      err = zo_atomic_file_write(&f->mask, buf, e->n);
    }
  }
  f->n += e->n;
  return err;
}

/* The llm.c header's token count, once all are written. */
static int out_header(struct out_file *f, enum zo_data_format fmt, bool wide, const char *path) {
  if (fmt != ZO_DATA_LLMC) return 0;
  if (f->n > INT32_MAX)
    return zo_error(-EINVAL, "prepare: %zu tokens exceed the llm.c header's int32 count ('%s')", f->n, path);
  const int32_t header[3] = {wide ? ZO_LLMC32_MAGIC : ZO_LLMC_MAGIC, wide ? ZO_LLMC32_VERSION : ZO_LLMC_VERSION,
                             (int32_t)f->n};
  if (pwrite(f->tok.fd, header, sizeof header, 0) != (ssize_t)sizeof header)
    return zo_error(-errno, "prepare: cannot write the header of '%s': %s", path, strerror(errno));
  return 0;
}

/* Every output (train, val, their masks) replaced together or none. */
static int out_commit_all(struct out_file *train, struct out_file *val, const struct zo_prepare_opts *o, bool wide,
                          bool masked) {
  int err = out_header(train, o->format, wide, o->out_train);
  if (!err && o->out_val) err = out_header(val, o->format, wide, o->out_val);
  if (err) return err;
  struct zo_atomic_file *files[4];
  int n = 0;
  files[n++] = &train->tok;
  if (masked) files[n++] = &train->mask;
  if (o->out_val) {
    files[n++] = &val->tok;
    if (masked) files[n++] = &val->mask;
  }
  const char *outs[2] = {o->out_train, o->out_val};
  return zo_prepare_commit_outputs(files, n, outs, 2, masked);
}

int zo_prepare_commit_outputs(struct zo_atomic_file *const *files, int n, const char *const *outs, int n_outs,
                              bool masked) {
  char masks[8][PATH_MAX];
  const char *remove[8];
  int n_remove = 0;
  for (int k = 0; !masked && k < n_outs && n_remove < 8; k++) {
    if (!outs[k]) continue;
    if (snprintf(masks[n_remove], PATH_MAX, "%s" ZO_DATA_MASK_SUFFIX, outs[k]) >= PATH_MAX)
      return zo_error(-ENAMETOOLONG, "prepare: the mask path of '%s' is too long", outs[k]);
    remove[n_remove] = masks[n_remove];
    n_remove++;
  }
  return zo_atomic_files_commit(files, n, remove, n_remove);
}

int zo_prepare_check_outputs(const char *const *outs, int n_outs, const char *const *inputs, int n_inputs) {
  for (int k = 0; k < n_outs; k++) {
    if (!outs[k]) continue;
    char mask[PATH_MAX];
    if (snprintf(mask, sizeof mask, "%s" ZO_DATA_MASK_SUFFIX, outs[k]) >= (int)sizeof mask)
      return zo_error(-ENAMETOOLONG, "prepare: the mask path of '%s' is too long", outs[k]);
    int err = zo_output_check(outs[k]);
    if (!err) err = zo_output_check(mask);
    if (err) return err;
    for (int j = 0; j < k; j++)
      if (outs[j] && (!strcmp(outs[j], outs[k]) || zo_same_file(outs[j], outs[k])))
        return zo_error(-EINVAL, "prepare: the outputs '%s' and '%s' are the same file; give two files", outs[j],
                        outs[k]);
    for (int i = 0; i < n_inputs; i++) {
      const char *hit = zo_same_file(outs[k], inputs[i]) ? outs[k] : zo_same_file(mask, inputs[i]) ? mask : NULL;
      if (hit)
        return zo_error(-EINVAL, "prepare: output '%s' is the input '%s' (the same file): it would be overwritten "
                                 "with tokens; give another output path", hit, inputs[i]);
    }
    /* Leftovers of a killed prepare: theirs, never a live writer's. */
    if ((err = zo_atomic_sweep_stale(outs[k])) < 0 || (err = zo_atomic_sweep_stale(mask)) < 0) return err;
  }
  return 0;
}

static void out_abort(struct out_file *f) {
  if (!f->open) return;
  zo_atomic_file_abort(&f->tok);
  zo_atomic_file_abort(&f->mask);
}

enum { BATCH_DOCS = 2048 };

int zo_prepare_tokenized(const char *const *paths, int n_paths, const struct zo_prepare_opts *o,
                         struct zo_prepare_result *res) {
  if (n_paths < 1) return zo_error(-EINVAL, "prepare: no input files given");
  if (!o->out_train) return zo_error(-EINVAL, "prepare: no output file for the train split given");
  if (!(o->val_fraction >= 0.0 && o->val_fraction < 1.0))
    return zo_error(-EINVAL, "prepare: val fraction %g is outside [0, 1)", o->val_fraction);
  if (o->out_val && !strcmp(o->out_train, o->out_val))
    return zo_error(-EINVAL, "prepare: train and val outputs are the same file '%s'", o->out_train);
  if (o->messages_field && o->prompt_field)
    return zo_error(-EINVAL, "prepare: --messages-field and --prompt-field exclude each other");
  if (!!o->prompt_field != !!o->completion_field)
    return zo_error(-EINVAL, "prepare: --prompt-field and --completion-field go together");
  if (o->format != ZO_DATA_U16 && o->format != ZO_DATA_U32 && o->format != ZO_DATA_LLMC)
    return zo_error(-EINVAL, "prepare: --format %s: valid: u16, u32, llmc (uint16 ids), llmc32 (uint32 ids)",
                    zo_data_format_name(o->format));
  const bool wide = o->format == ZO_DATA_U32 || o->wide_llmc;
  const size_t width = wide ? 4 : 2;
  const bool masked = o->prompt_field != NULL || o->messages_field != NULL;
  const char *outs[2] = {o->out_train, o->out_val};
  int err = zo_prepare_check_outputs(outs, 2, paths, n_paths);
  if (err) return err;

  struct zo_tokenizer *tk = NULL;
  if ((err = zo_tokenizer_load(o->tokenizer, &tk))) return err;
  const int32_t eos = zo_tokenizer_eos_id(tk);
  if (eos < 0) {
    zo_tokenizer_free(tk);
    return zo_error(-EINVAL, "prepare: tokenizer %s has no end-of-text token (tokenizer_config.json's eos_token, "
                             "or one of <|endoftext|>, <|end_of_text|>, </s>); prepare puts one after every "
                             "document", o->tokenizer);
  }
  struct input *in = calloc((size_t)n_paths, sizeof *in);
  struct doc *docs = NULL;
  size_t n_docs = 0;
  struct encoded *enc = calloc(BATCH_DOCS, sizeof *enc);
  void *buf = NULL;
  size_t buf_cap = 0;
  struct out_file train = {0}, val = {0};
  train.tok.fd = train.mask.fd = val.tok.fd = val.mask.fd = -1;
  if (!in || !enc) {
    err = zo_error(-ENOMEM, "prepare: out of host memory");
    goto out;
  }
  if ((err = map_inputs(in, paths, n_paths))) goto out;
  if ((err = cut_documents(in, n_paths, o->jsonl, o->separator, &docs, &n_docs))) goto out;
  if (n_docs == 0) {
    err = zo_error(-EINVAL, "prepare: the %d input file(s) hold no document", n_paths);
    goto out;
  }
  size_t n_val_docs = o->out_val ? (size_t)((double)n_docs * o->val_fraction) : 0;
  if (o->out_val && o->val_fraction > 0 && n_val_docs == 0) n_val_docs = 1;
  if (o->out_val && n_val_docs >= n_docs) {
    err = zo_error(-EINVAL, "prepare: %zu document(s) cannot be split into train and val (val fraction %g); add "
                            "documents, or give no --out-val", n_docs, o->val_fraction);
    goto out;
  }
  const size_t n_train_docs = n_docs - n_val_docs;
  if ((err = out_begin(&train, o->out_train, o->format, masked))) goto out;
  if (o->out_val && (err = out_begin(&val, o->out_val, o->format, masked))) goto out;

  size_t bytes_done = 0, bytes_total = 0, n_trained = 0;
  for (size_t k = 0; k < n_docs; k++) bytes_total += docs[k].len; /* separators and blank lines not counted */
  const double t0 = zo_time_s();
  double last_print = t0;
  const bool tty = isatty(STDERR_FILENO);
  for (size_t b0 = 0; b0 < n_docs && !err; b0 += BATCH_DOCS) {
    const size_t nb = n_docs - b0 < BATCH_DOCS ? n_docs - b0 : BATCH_DOCS;
#pragma omp parallel for schedule(dynamic, 8)
    for (size_t j = 0; j < nb; j++) {
      enc[j].n = 0;
      enc[j].err = 0;
      free(enc[j].mask);
      enc[j].mask = NULL;
      encode_doc(&enc[j], tk, o, &in[docs[b0 + j].file], &docs[b0 + j], eos);
    }
    for (size_t j = 0; j < nb && !err; j++) {
      const struct doc *d = &docs[b0 + j];
      if (enc[j].err) {
        err = zo_error(enc[j].err, "prepare: %s", enc[j].msg);
        break;
      }
      if (enc[j].n * width > buf_cap) {
        buf_cap = enc[j].n * width * 2;
        void *p = realloc(buf, buf_cap);
        if (!p) {
          err = zo_error(-ENOMEM, "prepare: out of host memory");
          break;
        }
        buf = p;
      }
      const bool to_val = b0 + j >= n_train_docs;
      err = out_write(to_val ? &val : &train, &enc[j], width, to_val ? o->out_val : o->out_train, &in[d->file], d,
                      buf, masked);
      if (enc[j].mask)
        for (size_t k = 0; k < enc[j].n; k++) n_trained += enc[j].mask[k];
      else
        n_trained += enc[j].n;
      bytes_done += d->len;
    }
    const double now = zo_time_s();
    if (!err && o->progress && (now - last_print > (tty ? 0.2 : 10.0) || b0 + nb == n_docs)) {
      last_print = now;
      fprintf(stderr, "%sprepare: %zu/%zu documents, %zu tokens, %.1f MB of %.1f MB, %.1f MB/s%s", tty ? "\r" : "",
              b0 + nb, n_docs, train.n + val.n, (double)bytes_done / 1e6, (double)bytes_total / 1e6,
              (double)bytes_done / 1e6 / (now - t0 > 1e-9 ? now - t0 : 1e-9), tty && b0 + nb < n_docs ? "" : "\n");
    }
  }
  /* A mask of zeros trains nothing: training on it would log a loss of 0
   * at every step. */
  if (!err && masked && n_trained == 0)
    err = zo_error(-EINVAL, "prepare: the loss masks of '%s'%s%s%s train no token: 0 of %zu tokens trained (every "
                            "completion empty?); nothing written",
                   o->out_train, o->out_val ? " and '" : "", o->out_val ? o->out_val : "", o->out_val ? "'" : "",
                   train.n + val.n);
  if (!err) err = out_commit_all(&train, &val, o, wide, masked);
  if (!err && res)
    *res = (struct zo_prepare_result){.n_docs = n_docs, .n_val_docs = n_val_docs, .n_train = train.n,
                                      .n_val = val.n, .n_trained = n_trained,
                                      .vocab_size = zo_tokenizer_vocab_size(tk), .eos_id = eos, .masked = masked};
out:
  out_abort(&val);
  out_abort(&train);
  for (size_t j = 0; enc && j < BATCH_DOCS; j++) {
    free(enc[j].ids);
    free(enc[j].mask);
  }
  free(enc);
  free(buf);
  free(docs);
  for (int k = 0; in && k < n_paths; k++)
    if (in[k].map) munmap((void *)in[k].map, in[k].nbytes);
  free(in);
  zo_tokenizer_free(tk);
  return err;
}

bool zo_prepare_is_jsonl_path(const char *path) {
  return ends_with(path, ".jsonl") || ends_with(path, ".ndjson") || ends_with(path, ".jsonl.txt");
}
