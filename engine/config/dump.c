/* The dump of the effective config (zo_config_dump), and values as text
 * (shortest reals, JSON values in messages). */
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *enum_name(const struct zo_config_key *k, int value) {
  for (int i = 0; k->names[i]; i++)
    if (i == value) return k->names[i];
  return "?";
}

/* Shortest text that reads back as the same double. */
void zo_config_fmt_real(double x, char *buf, size_t cap) {
  if (x == floor(x) && fabs(x) < 1e15) {
    snprintf(buf, cap, "%.1f", x);
    return;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, cap, "%.*g", prec, x);
    if (strtod(buf, NULL) == x) return;
  }
}

/* A JSON value as it should appear in a message (shortest reals, cut at ~80). */
void zo_config_fmt_json(const json_t *v, char *buf, size_t cap) {
  if (json_is_real(v)) {
    zo_config_fmt_real(json_real_value(v), buf, cap);
    return;
  }
  if (json_is_array(v) && json_array_size(v) <= 8) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (size_t i = 0; i < json_array_size(v) && n + 1 < cap; i++) {
      if (i) n += (size_t)snprintf(buf + n, cap - n, ", ");
      if (n + 1 < cap) zo_config_fmt_json(json_array_get(v, i), buf + n, cap - n);
      n += strlen(buf + n);
    }
    if (n + 1 < cap) snprintf(buf + n, cap - n, "]");
    return;
  }
  char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
  if (!s) {
    snprintf(buf, cap, "?");
    return;
  }
  if (strlen(s) > 80) memcpy(s + 72, "...", 4);
  snprintf(buf, cap, "%s", s);
  free(s);
}

/* The lora section only when LoRA is on; with lora.init_from, only the keys
 * the config gave (the adapter's values win, and a dumped default would read
 * back as a conflicting value). */
static bool lora_dumped(const struct zo_config_lora *l, const char *path) {
  const bool from = l->init_from && l->init_from[0];
  if (!from && l->r == 0) return false;
  if (!from) return true;
  if (!strcmp(path, "lora.r")) return l->r_set;
  if (!strcmp(path, "lora.alpha")) return l->alpha_set;
  if (!strcmp(path, "lora.dropout")) return l->dropout_set;
  if (!strcmp(path, "lora.target_modules")) return l->target_modules_set;
  if (!strcmp(path, "lora.use_rslora")) return l->use_rslora_set;
  return true;
}

static bool dump_skips(const struct zo_config *cfg, const struct zo_config_key *k) {
  if (k->ignored) return true; /* no effect: not part of the effective config */
  /* derived: written, they would read back as given */
  if (!strcmp(k->path, "steps") && cfg->data.epochs > 0) return true;
  if (!strncmp(k->path, "lora", 4) && !lora_dumped(&cfg->lora, k->path)) return true;
  /* quantization only when on; the "_load_in_*" spellings are load_in_*'s */
  if (!strncmp(k->path, "quantization", 12) && (!cfg->quant.load_in_4bit || !strncmp(k->path + 12, "._", 2)))
    return true;
  if (!strcmp(k->path, "scheduler.params.total_num_steps") && !cfg->scheduler.total_num_steps_set) return true;
  if (cfg->scheduler.type == ZO_SCHEDULER_NONE && strncmp(k->path, "scheduler", 9) == 0)
    return true;
  return k->sched && !(k->sched & (1u << cfg->scheduler.type));
}

static void dump_string(FILE *out, const char *s) {
  fputc('"', out);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
    else if (c == '\n') fputs("\\n", out);
    else if (c == '\t') fputs("\\t", out);
    else if (c < 0x20) fprintf(out, "\\u%04x", c);
    else fputc(c, out);
  }
  fputc('"', out);
}

static void dump_leaf(const struct zo_config *cfg, const struct zo_config_key *k, FILE *out) {
  const char *src = (const char *)cfg + k->offset;
  char buf[64], buf2[64];
  switch (k->type) {
  case KEY_SECTION:
  case KEY_ANY:
    break;
  case KEY_INT: {
    long long x;
    if (k->size == sizeof(int)) {
      int i;
      memcpy(&i, src, sizeof i);
      x = i;
    } else {
      int64_t i;
      memcpy(&i, src, sizeof i);
      x = i;
    }
    fprintf(out, "%lld", x);
    break;
  }
  case KEY_REAL: {
    double x;
    memcpy(&x, src, sizeof x);
    zo_config_fmt_real(x, buf, sizeof buf);
    fputs(buf, out);
    break;
  }
  case KEY_PAIR: {
    double x[2];
    memcpy(x, src, sizeof x);
    zo_config_fmt_real(x[0], buf, sizeof buf);
    zo_config_fmt_real(x[1], buf2, sizeof buf2);
    fprintf(out, "[%s, %s]", buf, buf2);
    break;
  }
  case KEY_BOOL: {
    bool b;
    memcpy(&b, src, sizeof b);
    fputs(b ? "true" : "false", out);
    break;
  }
  case KEY_STRING: {
    const char *s;
    memcpy(&s, src, sizeof s);
    dump_string(out, s ? s : "");
    break;
  }
  case KEY_ENUM: {
    int i;
    memcpy(&i, src, sizeof i);
    dump_string(out, enum_name(k, i));
    break;
  }
  case KEY_NAMESET: {
    unsigned set;
    memcpy(&set, src, sizeof set);
    fputc('[', out);
    for (int i = 0, first = 1; k->names[i]; i++)
      if (set & (1u << i)) {
        fputs(first ? "" : ", ", out);
        dump_string(out, k->names[i]);
        first = 0;
      }
    fputc(']', out);
    break;
  }
  case KEY_BYTES: {
    size_t n;
    memcpy(&n, src, sizeof n);
    zo_config_fmt_bytes(n, buf, sizeof buf, true);
    fputs(buf, out);
    break;
  }
  }
}

void zo_config_fmt_value(const struct zo_config *cfg, const struct zo_config_key *k, char *buf, size_t cap) {
  FILE *f = fmemopen(buf, cap, "w");
  if (!f) {
    snprintf(buf, cap, "?");
    return;
  }
  dump_leaf(cfg, k, f);
  if (fclose(f) != 0) snprintf(buf, cap, "?");
}

/* Writes the members of the section at prefix ("" = top level) in table order. */
static void dump_section(const struct zo_config *cfg, const char *prefix, int depth, FILE *out) {
  size_t plen = strlen(prefix);
  bool first = true;
  fputs("{", out);
  for (size_t i = 0; i < zo_config_n_keys; i++) {
    const struct zo_config_key *k = &zo_config_schema[i];
    if (zo_config_key_parent_len(k->path) != plen || strncmp(k->path, prefix, plen) != 0) continue;
    if (dump_skips(cfg, k)) continue;
    fprintf(out, "%s\n%*s\"%s\": ", first ? "" : ",", 2 * (depth + 1), "", zo_config_key_leaf(k->path));
    first = false;
    if (k->type == KEY_SECTION) dump_section(cfg, k->path, depth + 1, out);
    else dump_leaf(cfg, k, out);
  }
  fprintf(out, "\n%*s}", 2 * depth, "");
}

int zo_config_dump(const struct zo_config *cfg, FILE *out) {
  ZO_ASSERT(cfg != NULL && out != NULL);
  dump_section(cfg, "", 0, out);
  fputc('\n', out);
  if (fflush(out) != 0 || ferror(out)) return zo_error(-EIO, "config dump: write failed");
  return 0;
}
