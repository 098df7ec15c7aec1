/* `zoffload tokenizer train|encode|decode` and `zoffload bench tokenize`.
 * bench tokenize times zo_tokenizer_encode over a corpus split in documents
 * on N OpenMP threads and, in the same run, the reference library's
 * Tokenizer.encode_batch on the same documents with RAYON_NUM_THREADS=N (a
 * Python child process: ZO_HF_PYTHON, default /usr/bin/python3, with
 * ZO_HF_SITE or the build's hf-site from scripts/install-hf.sh on its path),
 * and checks that both produced the same ids. */
#include "tokenizer_cli.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <omp.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "zo/common.h"
#include "zo/fsutil.h"
#include "zo/tokenizer.h"

extern char **environ;

const char *const zo_cli_tokenizer_usage =
    "usage: zoffload tokenizer train --vocab-size N --out DIR [--pattern llama3|gpt2] [--special TOKEN]...\n"
    "                                [--min-frequency F] [--overwrite] FILE...\n"
    "         learn a byte-level BPE vocabulary of N ids (256 bytes, merges, \"<|endoftext|>\" and the\n"
    "         --special tokens) from text files; writes DIR/tokenizer.json and DIR/tokenizer_config.json\n"
    "         (eos = bos = \"<|endoftext|>\"), loadable by tokenizers and transformers' AutoTokenizer;\n"
    "         a DIR that already holds either file is refused unless --overwrite\n"
    "       zoffload tokenizer encode --tokenizer PATH [--special] [FILE]   ids of FILE (or stdin), one line\n"
    "       zoffload tokenizer decode --tokenizer PATH [--skip-special] [IDS...]   text of the ids (or stdin's)\n"
    "  PATH: a tokenizer.json or a directory holding one (Hugging Face format)\n";

const char *const zo_cli_bench_tokenize_usage =
    "usage: zoffload bench tokenize [--tokenizer PATH] [--threads N] [--reps R] [FILE...]\n"
    "  encoding MB/s of zoffload against tokenizers' encode_batch, same documents and thread count;\n"
    "  FILEs (default: the fortunes in /usr/share/games/fortunes) are split into documents at \"\\n%\\n\";\n"
    "  without --tokenizer one of 8192 ids is trained from them first\n";

static int usage_error(const char *usage, const char *msg, const char *arg) {
  fprintf(stderr, "zoffload: %s%s\n%s", msg, arg ? arg : "", usage);
  return 2;
}

static bool parse_size(const char *s, size_t lo, size_t hi, size_t *out) {
  char *end;
  errno = 0;
  const unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi) return false;
  *out = (size_t)v;
  return true;
}

/* Refuses an --out that is not a directory, or one that holds a tokenizer
 * (unless overwrite), before the training: tokenizers are not overwritten
 * silently. Returns 0 or the exit code. */
static int check_out_dir(const char *out, bool overwrite) {
  struct stat st;
  if (stat(out, &st) != 0) {
    if (errno == ENOENT) return 0; /* created with its parents */
    fprintf(stderr, "zoffload: tokenizer train: --out %s: %s\n", out, strerror(errno));
    return 1;
  }
  if (!S_ISDIR(st.st_mode)) {
    fprintf(stderr, "zoffload: tokenizer train: --out %s is not a directory (the tokenizer is written as "
                    "DIR/tokenizer.json and DIR/tokenizer_config.json)\n", out);
    return 2;
  }
  static const char *const names[] = {"tokenizer.json", "tokenizer_config.json"};
  for (int k = 0; k < 2 && !overwrite; k++) {
    char p[PATH_MAX];
    if ((size_t)snprintf(p, sizeof p, "%s/%s", out, names[k]) >= sizeof p) {
      fprintf(stderr, "zoffload: tokenizer train: --out %s: path too long\n", out);
      return 2;
    }
    if (lstat(p, &st) == 0) {
      fprintf(stderr, "zoffload: tokenizer train: %s already exists: give --overwrite to replace the tokenizer in "
                      "%s, or another --out\n", p, out);
      return 2;
    }
  }
  return 0;
}

static int cmd_train(int argc, char **argv) {
  struct zo_tokenizer_train_opts o = {0};
  const char *out = NULL;
  bool overwrite = false;
  const char **files = calloc((size_t)argc, sizeof(*files));
  const char **specials = calloc((size_t)argc, sizeof(*specials));
  size_t n_files = 0;
  int rc = 2;
  if (!files || !specials) {
    fprintf(stderr, "zoffload: out of memory\n");
    rc = 1;
    goto out;
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const bool has_val = i + 1 < argc;
    if (!strcmp(a, "--vocab-size") && has_val) {
      if (!parse_size(argv[++i], 257, INT32_MAX, &o.vocab_size)) {
        rc = usage_error(zo_cli_tokenizer_usage, "--vocab-size must be an integer in [257, 2^31): ", argv[i]);
        goto out;
      }
    } else if (!strcmp(a, "--out") && has_val) {
      out = argv[++i];
    } else if (!strcmp(a, "--overwrite")) {
      overwrite = true;
    } else if (!strcmp(a, "--pattern") && has_val) {
      o.pattern = argv[++i];
    } else if (!strcmp(a, "--special") && has_val) {
      specials[o.n_specials++] = argv[++i];
    } else if (!strcmp(a, "--min-frequency") && has_val) {
      if (!parse_size(argv[++i], 1, SIZE_MAX / 2, &o.min_frequency)) {
        rc = usage_error(zo_cli_tokenizer_usage, "--min-frequency must be a positive integer: ", argv[i]);
        goto out;
      }
    } else if (a[0] == '-' && a[1]) {
      rc = usage_error(zo_cli_tokenizer_usage, "unknown option or missing value: ", a);
      goto out;
    } else {
      files[n_files++] = a;
    }
  }
  o.specials = specials;
  if (!o.vocab_size || !out || !n_files) {
    rc = usage_error(zo_cli_tokenizer_usage, "tokenizer train needs --vocab-size, --out and at least one FILE", NULL);
    goto out;
  }
  if ((rc = check_out_dir(out, overwrite))) goto out;
  rc = 2;
  const double t0 = zo_time_s();
  size_t n_vocab = 0;
  const int err = zo_tokenizer_train(files, n_files, &o, out, &n_vocab);
  if (err) {
    fprintf(stderr, "zoffload: tokenizer train: %s\n", zo_last_error());
    rc = err == -EINVAL || err == -ENOTSUP ? 2 : 1;
    goto out;
  }
  printf("tokenizer train: %zu ids (asked %zu) from %zu files in %.2f s: %s/tokenizer.json, %s/tokenizer_config.json\n",
         n_vocab, o.vocab_size, n_files, zo_time_s() - t0, out, out);
  rc = 0;
out:
  free(files);
  free(specials);
  return rc;
}

static int read_all(const char *path, char **data, size_t *n) {
  if (path) return zo_read_file(path, (void **)data, n, (size_t)1 << 34);
  size_t cap = 1 << 16;
  *n = 0;
  *data = malloc(cap);
  if (!*data) return -ENOMEM;
  for (;;) {
    if (*n + 4096 + 1 > cap) {
      char *p = realloc(*data, cap *= 2);
      if (!p) return -ENOMEM;
      *data = p;
    }
    const size_t r = fread(*data + *n, 1, cap - *n - 1, stdin);
    *n += r;
    if (r == 0) break;
  }
  (*data)[*n] = '\0';
  return ferror(stdin) ? -EIO : 0;
}

/* One id of `tokenizer decode`: a decimal integer in [0, 2^31), the whole
 * word (n bytes at s); anything else is refused naming the word and where it
 * came from. Returns 0 or 2 (a usage error, already printed). */
static int parse_id(const char *s, size_t n, const char *where, size_t word, int32_t *id) {
  unsigned long long v = 0;
  size_t i = 0;
  for (; i < n && s[i] >= '0' && s[i] <= '9' && v <= INT32_MAX; i++) v = v * 10 + (unsigned)(s[i] - '0');
  if (n && i == n && v <= INT32_MAX) {
    *id = (int32_t)v;
    return 0;
  }
  const bool digits = n && strspn(s, "0123456789") >= n;
  fprintf(stderr, "zoffload: tokenizer decode: %s word %zu \"%.*s%s\" is not an id: %s\n", where, word,
          n > 64 ? 64 : (int)n, s, n > 64 ? "..." : "",
          digits ? "ids are below 2^31 (2147483648)" : "ids are decimal integers from 0, separated by white space");
  return 2;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

static int push_id(int32_t **ids, size_t *n_ids, size_t *cap, int32_t v) {
  if (*n_ids == *cap) {
    const size_t c = *cap ? 2 * *cap : 64;
    int32_t *p = realloc(*ids, c * sizeof(*p));
    if (!p) return -ENOMEM;
    *ids = p;
    *cap = c;
  }
  (*ids)[(*n_ids)++] = v;
  return 0;
}

static int cmd_encode_decode(int argc, char **argv, bool encode) {
  const char *path = NULL, *file = NULL;
  bool flag = false;
  int32_t *ids = NULL;
  size_t n_ids = 0, cap = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) path = argv[++i];
    else if (!strcmp(argv[i], encode ? "--special" : "--skip-special")) flag = true;
    else if (argv[i][0] == '-' && argv[i][1] && !(argv[i][1] >= '0' && argv[i][1] <= '9'))
      return usage_error(zo_cli_tokenizer_usage, "unknown option or missing value: ", argv[i]);
    else if (encode && !file) file = argv[i];
    else if (!encode) {
      int32_t v;
      if (parse_id(argv[i], strlen(argv[i]), "argument", n_ids + 1, &v)) {
        free(ids);
        return 2;
      }
      if (push_id(&ids, &n_ids, &cap, v)) {
        free(ids);
        return 1;
      }
    } else return usage_error(zo_cli_tokenizer_usage, "one FILE at most: ", argv[i]);
  }
  if (!path) {
    free(ids);
    return usage_error(zo_cli_tokenizer_usage, "--tokenizer PATH is required", NULL);
  }
  struct zo_tokenizer *tk;
  int err = zo_tokenizer_load(path, &tk);
  if (err) {
    free(ids);
    fprintf(stderr, "zoffload: %s\n", zo_last_error());
    return err == -ENOTSUP || err == -EINVAL ? 2 : 1;
  }
  char *data = NULL;
  size_t n = 0;
  int rc = 1;
  if (encode || !n_ids) {
    if ((err = read_all(encode ? file : NULL, &data, &n))) {
      fprintf(stderr, "zoffload: reading %s: %s\n", file ? file : "stdin", strerror(-err));
      goto out;
    }
  }
  if (encode) {
    if ((err = zo_tokenizer_encode(tk, data, n, flag, &ids, &n_ids, &cap))) {
      fprintf(stderr, "zoffload: %s\n", zo_last_error());
      goto out;
    }
    for (size_t i = 0; i < n_ids; i++) printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
  } else {
    if (!n_ids) {
      size_t i = 0, word = 0;
      for (;;) {
        while (i < n && is_space(data[i])) i++;
        if (i == n) break;
        size_t k = 0; /* a NUL byte is part of a word, and refused there */
        while (i + k < n && !is_space(data[i + k])) k++;
        int32_t v;
        if (parse_id(data + i, k, "stdin", ++word, &v)) {
          rc = 2;
          goto out;
        }
        if (push_id(&ids, &n_ids, &cap, v)) goto out;
        i += k;
      }
    }
    /* decode skips an id it has no token for, as tokenizers' does; asked
     * here for those ids, that would hide a wrong id. */
    for (size_t i = 0; i < n_ids; i++)
      if (!zo_tokenizer_id_to_token(tk, ids[i])) {
        fprintf(stderr, "zoffload: tokenizer decode: id %d (word %zu) is not in %s (a vocabulary of %zu ids)\n", (int)ids[i],
                i + 1, path, zo_tokenizer_vocab_size(tk));
        rc = 2;
        goto out;
      }
    char *text;
    size_t len;
    if ((err = zo_tokenizer_decode(tk, ids, n_ids, flag, &text, &len))) {
      fprintf(stderr, "zoffload: %s\n", zo_last_error());
      rc = err == -EINVAL ? 2 : 1; /* an id the tokenizer does not have */
      goto out;
    }
    fwrite(text, 1, len, stdout);
    free(text);
  }
  rc = 0;
out:
  free(data);
  free(ids);
  zo_tokenizer_free(tk);
  return rc;
}

int zo_cli_tokenizer(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    if (argc < 2) return usage_error(zo_cli_tokenizer_usage, "missing train, encode or decode", NULL);
    fputs(zo_cli_tokenizer_usage, stdout);
    return 0;
  }
  if (!strcmp(argv[1], "train")) return cmd_train(argc - 1, argv + 1);
  if (!strcmp(argv[1], "encode")) return cmd_encode_decode(argc - 1, argv + 1, true);
  if (!strcmp(argv[1], "decode")) return cmd_encode_decode(argc - 1, argv + 1, false);
  return usage_error(zo_cli_tokenizer_usage, "unknown tokenizer command: ", argv[1]);
}

/* ---- bench tokenize ------------------------------------------------------ */

static const char reference_py[] =
    "import json, os, struct, sys, time\n"
    "import tokenizers\n"
    "from tokenizers import Tokenizer\n"
    "path, docs_path, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])\n"
    "raw = open(docs_path, 'rb').read()\n"
    "docs, i = [], 0\n"
    "while i < len(raw):\n"
    "    (n,) = struct.unpack_from('<Q', raw, i)\n"
    "    docs.append(raw[i + 8:i + 8 + n].decode('utf-8', 'replace'))\n"
    "    i += 8 + n\n"
    "tk = Tokenizer.from_file(os.path.join(path, 'tokenizer.json') if os.path.isdir(path) else path)\n"
    "tk.encode_batch(docs[:64], add_special_tokens=False)\n"
    "times = []\n"
    "for _ in range(reps):\n"
    "    t0 = time.perf_counter()\n"
    "    enc = tk.encode_batch(docs, add_special_tokens=False)\n"
    "    times.append(time.perf_counter() - t0)\n"
    "h, n = 0, 0\n"
    "for e in enc:\n"
    "    for x in e.ids:\n"
    "        h = (h * 1000003 + x) & 0xFFFFFFFFFFFFFFFF\n"
    "    n += len(e.ids)\n"
    "print(json.dumps({'version': tokenizers.__version__, 'times': times, 'n_ids': n, 'hash': h}))\n";

struct docs {
  char *text;          /* all documents back to back */
  size_t nbytes;
  size_t *start;       /* (n + 1) offsets */
  size_t n, cap;
};

static int docs_add(struct docs *d, size_t end) {
  if (d->n + 2 > d->cap) {
    d->cap = d->cap ? 2 * d->cap : 4096;
    size_t *p = realloc(d->start, d->cap * sizeof(*p));
    if (!p) return -ENOMEM;
    d->start = p;
  }
  d->start[++d->n] = end;
  return 0;
}

static int docs_read(struct docs *d, const char *const *files, size_t n_files) {
  for (size_t f = 0; f < n_files; f++) {
    char *data;
    size_t n;
    int err = zo_read_file(files[f], (void **)&data, &n, (size_t)1 << 34);
    if (err) return zo_error(err, "%s: %s", files[f], strerror(-err));
    char *p = realloc(d->text, d->nbytes + n + 1);
    if (!p) {
      free(data);
      return -ENOMEM;
    }
    d->text = p;
    if (!d->start) {
      d->cap = 4096;
      if (!(d->start = malloc(d->cap * sizeof(*d->start)))) {
        free(data);
        return -ENOMEM;
      }
      d->start[0] = 0;
    }
    /* Documents end at "\n%\n" (the separator dropped) or at the end of the file. */
    size_t i = 0;
    while (i < n) {
      const char *sep = memmem(data + i, n - i, "\n%\n", 3);
      const size_t end = sep ? (size_t)(sep - data) + 1 : n;
      memcpy(d->text + d->nbytes, data + i, end - i);
      d->nbytes += end - i;
      if (end > i && docs_add(d, d->nbytes)) {
        free(data);
        return -ENOMEM;
      }
      i = sep ? end + 2 : n;
    }
    free(data);
  }
  return 0;
}

static int fortune_files(char ***out, size_t *n) {
  const char *dir = "/usr/share/games/fortunes";
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "find %s -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' 2>/dev/null | LC_ALL=C sort",
           dir);
  FILE *p = popen(cmd, "r");
  if (!p) return zo_error(-errno, "listing %s: %s", dir, strerror(errno));
  char line[PATH_MAX];
  *n = 0;
  *out = NULL;
  while (fgets(line, sizeof(line), p)) {
    line[strcspn(line, "\n")] = '\0';
    char **q = realloc(*out, (*n + 1) * sizeof(*q));
    if (!q || !(q[*n] = strdup(line))) {
      pclose(p);
      return -ENOMEM;
    }
    *out = q;
    (*n)++;
  }
  pclose(p);
  if (!*n) return zo_error(-ENOENT, "no fortune files in %s: install them with 'apt-get install fortunes' or name FILEs", dir);
  return 0;
}

/* The build's hf-site (build/hf-site next to build/<preset>/zoffload), "" when none. */
static void find_site(char *site, size_t cap) {
  const char *env = getenv("ZO_HF_SITE");
  if (env) {
    snprintf(site, cap, "%s", env);
    return;
  }
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  site[0] = '\0';
  if (n <= 0) return;
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (!slash) return;
  *slash = '\0';
  static const char *const rel[] = {"/../hf-site", "/hf-site", "/../build/hf-site"};
  for (int i = 0; i < 3; i++) {
    char c[PATH_MAX + 32];
    snprintf(c, sizeof(c), "%s%s", exe, rel[i]);
    struct stat st;
    if (!stat(c, &st) && S_ISDIR(st.st_mode)) {
      if ((size_t)snprintf(site, cap, "%s", c) >= cap) site[0] = '\0';
      return;
    }
  }
}

static uint64_t ids_hash(uint64_t h, const int32_t *ids, size_t n) {
  for (size_t i = 0; i < n; i++) h = h * 1000003u + (uint64_t)ids[i];
  return h;
}

/* Runs the reference; fills *ref_s (median seconds), version, n_ids, hash. Returns 0, or 1 with why. */
static int run_reference(const char *tmp, const char *tok_path, int threads, int reps, double *ref_s, char *version,
                         size_t vcap, size_t *n_ids, uint64_t *hash, char *why, size_t why_cap) {
  char script[PATH_MAX], docs[PATH_MAX], outp[PATH_MAX], site[PATH_MAX], reps_s[16], pp[2 * PATH_MAX];
  snprintf(script, sizeof(script), "%s/reference.py", tmp);
  snprintf(docs, sizeof(docs), "%s/docs.bin", tmp);
  snprintf(outp, sizeof(outp), "%s/reference.out", tmp);
  snprintf(reps_s, sizeof(reps_s), "%d", reps);
  if (zo_write_file_atomic(script, reference_py, sizeof(reference_py) - 1)) {
    if ((size_t)snprintf(why, why_cap, "cannot write %s", script) >= why_cap) why[why_cap - 1] = '\0';
    return 1;
  }
  find_site(site, sizeof(site));
  const char *py = getenv("ZO_HF_PYTHON") ? getenv("ZO_HF_PYTHON") : "/usr/bin/python3";
  const char *old = getenv("PYTHONPATH");
  snprintf(pp, sizeof(pp), "%s%s%s", site, old && *old ? ":" : "", old ? old : "");
  char th[16];
  snprintf(th, sizeof(th), "%d", threads);
  setenv("PYTHONPATH", pp, 1);
  setenv("RAYON_NUM_THREADS", th, 1);
  setenv("TOKENIZERS_PARALLELISM", "true", 1);
  fflush(stdout);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, outp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  char *args[] = {(char *)py, script, (char *)tok_path, docs, reps_s, NULL};
  pid_t pid;
  int err = posix_spawn(&pid, py, &fa, NULL, args, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (err) {
    snprintf(why, why_cap, "cannot run %s: %s", py, strerror(err));
    return 1;
  }
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  char *out = NULL;
  size_t n = 0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) || zo_read_file(outp, (void **)&out, &n, 1 << 20)) {
    snprintf(why, why_cap, "%s with PYTHONPATH=%s failed (tokenizers not installed? scripts/install-hf.sh)", py, site);
    free(out);
    return 1;
  }
  /* {"version": "0.15.2", "times": [..], "n_ids": N, "hash": H} */
  double t[64];
  int nt = 0;
  const char *v = strstr(out, "\"version\": \""), *ts = strstr(out, "\"times\": ["), *ni = strstr(out, "\"n_ids\": "),
             *hs = strstr(out, "\"hash\": ");
  if (!v || !ts || !ni || !hs) {
    snprintf(why, why_cap, "unexpected output from the reference: %.200s", out);
    free(out);
    return 1;
  }
  snprintf(version, vcap, "%.*s", (int)strcspn(v + 12, "\""), v + 12);
  for (const char *p = ts + 10; nt < 64;) {
    char *end;
    t[nt] = strtod(p, &end);
    if (end == p) break;
    nt++;
    p = end + strspn(end, ", ");
  }
  *n_ids = strtoull(ni + 9, NULL, 10);
  *hash = strtoull(hs + 8, NULL, 10);
  free(out);
  if (!nt) {
    snprintf(why, why_cap, "the reference printed no times");
    return 1;
  }
  *ref_s = zo_median(t, nt);
  return 0;
}

int zo_cli_bench_tokenize(int argc, char **argv) {
  const char *tok_path = NULL;
  size_t threads = (size_t)omp_get_max_threads(), reps = 5;
  char **files = NULL;
  size_t n_files = 0;
  bool own_files = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) tok_path = argv[++i];
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      if (!parse_size(argv[++i], 1, 1024, &threads))
        return usage_error(zo_cli_bench_tokenize_usage, "--threads must be in [1, 1024]: ", argv[i]);
    } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
      if (!parse_size(argv[++i], 1, 64, &reps)) return usage_error(zo_cli_bench_tokenize_usage, "--reps must be in [1, 64]: ", argv[i]);
    } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(zo_cli_bench_tokenize_usage, stdout);
      return 0;
    } else if (argv[i][0] == '-') {
      return usage_error(zo_cli_bench_tokenize_usage, "unknown option or missing value: ", argv[i]);
    } else {
      char **p = realloc(files, (n_files + 1) * sizeof(*p));
      if (!p) return 1;
      files = p;
      files[n_files++] = argv[i];
    }
  }
  int rc = 1, err;
  struct docs d = {0};
  struct zo_tokenizer *tk = NULL;
  char tmp[] = "/tmp/zo-bench-tokenize-XXXXXX";
  bool have_tmp = false;
  if (!n_files) {
    if ((err = fortune_files(&files, &n_files))) goto fail;
    own_files = true;
  }
  if ((err = docs_read(&d, (const char *const *)files, n_files))) goto fail;
  if (!mkdtemp(tmp)) {
    err = zo_error(-errno, "mkdtemp %s: %s", tmp, strerror(errno));
    goto fail;
  }
  have_tmp = true;
  char trained[PATH_MAX];
  if (!tok_path) {
    snprintf(trained, sizeof(trained), "%s/tokenizer", tmp);
    const struct zo_tokenizer_train_opts o = {.vocab_size = 8192};
    const double t0 = zo_time_s();
    if ((err = zo_tokenizer_train((const char *const *)files, n_files, &o, trained, NULL))) goto fail;
    printf("bench tokenize: trained a %d-id byte-level BPE (llama3 pattern) on the corpus in %.2f s\n", 8192,
           zo_time_s() - t0);
    tok_path = trained;
  }
  if ((err = zo_tokenizer_load(tok_path, &tk))) goto fail;
  /* The documents for the reference, length-prefixed. */
  {
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/docs.bin", tmp);
    FILE *f = fopen(p, "wb");
    if (!f) {
      err = zo_error(-errno, "%s: %s", p, strerror(errno));
      goto fail;
    }
    bool ok = true;
    for (size_t i = 0; i < d.n; i++) {
      const uint64_t len = d.start[i + 1] - d.start[i];
      ok = ok && fwrite(&len, 8, 1, f) == 1 && fwrite(d.text + d.start[i], 1, len, f) == len;
    }
    if (fclose(f) || !ok) {
      err = zo_error(-EIO, "writing %s failed", p);
      goto fail;
    }
  }
  omp_set_num_threads((int)threads);
  double times[64];
  size_t total_ids = 0;
  for (size_t r = 0; r < reps + 1; r++) { /* rep 0 warms the per-thread word caches, as the reference's warm-up does */
    size_t n_ids_all = 0;
    int bad = 0;
    const double t0 = zo_time_s();
#pragma omp parallel reduction(+ : n_ids_all, bad)
    {
      int32_t *ids = NULL;
      size_t cap = 0;
#pragma omp for schedule(dynamic, 16)
      for (size_t i = 0; i < d.n; i++) {
        size_t n = 0;
        if (zo_tokenizer_encode(tk, d.text + d.start[i], d.start[i + 1] - d.start[i], false, &ids, &n, &cap)) bad++;
        n_ids_all += n;
      }
      free(ids);
    }
    const double dt = zo_time_s() - t0;
    if (bad) {
      err = -ENOMEM;
      goto fail;
    }
    if (r) times[r - 1] = dt;
    total_ids = n_ids_all;
  }
  const double ours_s = zo_median(times, (int)reps);
  uint64_t hash = 0;
  {
    int32_t *ids = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < d.n; i++) {
      size_t n = 0;
      if ((err = zo_tokenizer_encode(tk, d.text + d.start[i], d.start[i + 1] - d.start[i], false, &ids, &n, &cap))) break;
      hash = ids_hash(hash, ids, n);
    }
    free(ids);
    if (err) goto fail;
  }
  const double mb = (double)d.nbytes / 1e6;
  double ref_s = 0;
  char version[32] = "?", why[512] = "";
  size_t ref_ids = 0;
  uint64_t ref_hash = 0;
  const int no_ref = run_reference(tmp, tok_path, (int)threads, (int)reps, &ref_s, version, sizeof(version), &ref_ids,
                                   &ref_hash, why, sizeof(why));
  printf("bench tokenize: %.2f MB in %zu documents, %zu threads, vocab %zu: zoffload %.1f MB/s", mb, d.n, threads,
         zo_tokenizer_vocab_size(tk), mb / ours_s);
  if (no_ref) {
    printf("; reference not run: %s\n", why);
    rc = 0;
    goto out;
  }
  const bool same = ref_ids == total_ids && ref_hash == hash;
  printf(", tokenizers %s encode_batch %.1f MB/s (RAYON_NUM_THREADS=%zu): %.2fx; ids %s (%zu ids)\n", version,
         mb / ref_s, threads, ref_s / ours_s, same ? "identical" : "DIFFER", total_ids);
  if (!same) fprintf(stderr, "zoffload: bench tokenize: the reference produced %zu ids, hash %llu; ours %zu, %llu\n",
                     ref_ids, (unsigned long long)ref_hash, total_ids, (unsigned long long)hash);
  rc = same ? 0 : 1;
  goto out;
fail:
  fprintf(stderr, "zoffload: bench tokenize: %s\n", zo_last_error());
out:
  zo_tokenizer_free(tk);
  if (have_tmp) {
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
    if (system(cmd)) fprintf(stderr, "zoffload: could not remove %s\n", tmp);
  }
  if (own_files)
    for (size_t i = 0; i < n_files; i++) free(files[i]);
  free(files);
  free(d.text);
  free(d.start);
  return rc;
}
