/* Fault injection (zo/fault.h): the rules of ZO_FAULT or zo_fault_set, a
 * call counter per operation, and the decision for each counted call.
 * Compiled to nothing without ZO_FAULT_INJECTION. Rules are replaced only
 * between runs (tests), so readers take them under a mutex that is never
 * contended in practice; counters are atomics so that the NVMe threads count
 * in one sequence per operation. */
#include "zo/fault.h"

#ifdef ZO_FAULT_INJECTION
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "zo/common.h"

#define FAULT_MAX_RULES 16

struct fault_rule {
  enum zo_fault_op op;
  uint64_t nth;   /* 1-based call index */
  bool and_later; /* "N+": every call from the Nth on */
  int err;        /* -errno to fail with, 0 for a short transfer, 2 to log the call only */
};

static const char *const op_names[ZO_FAULT_N_OPS] = {"nvme-read", "nvme-write", "write", "fsync",
                                                      "rename"};

static pthread_mutex_t rules_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static struct fault_rule rules[FAULT_MAX_RULES];
static int n_rules;
static _Atomic bool armed; /* any rule in force: the fast path reads only this */
static _Atomic uint64_t calls[ZO_FAULT_N_OPS];
static _Atomic uint64_t fired;

static int parse_rule(const char *s, size_t len, struct fault_rule *r) {
  char buf[64];
  if (len == 0 || len >= sizeof buf) return -EINVAL;
  memcpy(buf, s, len);
  buf[len] = '\0';
  char *c1 = strchr(buf, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
  if (!c1 || !c2) return -EINVAL;
  *c1 = *c2 = '\0';
  int op = -1;
  for (int i = 0; i < ZO_FAULT_N_OPS; i++)
    if (strcmp(buf, op_names[i]) == 0) op = i;
  if (op < 0) return -EINVAL;
  char *end;
  errno = 0;
  const unsigned long long nth = strtoull(c1 + 1, &end, 10);
  if (errno || end == c1 + 1 || nth == 0 || c1[1] == '-') return -EINVAL;
  r->and_later = *end == '+';
  if (*end != '\0' && !(r->and_later && end[1] == '\0')) return -EINVAL;
  const char *kind = c2 + 1;
  static const struct {
    const char *name;
    int err;
  } kinds[] = {{"eio", -EIO}, {"enospc", -ENOSPC}, {"edquot", -EDQUOT}, {"efbig", -EFBIG}, {"short", 0}, {"log", 2}};
  r->err = 1;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (strcmp(kind, kinds[i].name) == 0) r->err = kinds[i].err;
  if (r->err == 1) return -EINVAL;
  /* fsync and rename move no bytes: they cannot be short. */
  if (r->err == 0 && (op == ZO_FAULT_FSYNC || op == ZO_FAULT_RENAME)) return -EINVAL;
  r->op = (enum zo_fault_op)op;
  r->nth = nth;
  return 0;
}

static int fault_set(const char *spec) {
  struct fault_rule parsed[FAULT_MAX_RULES];
  int n = 0, err = 0;
  for (const char *p = spec ? spec : ""; *p && err == 0;) {
    const char *comma = strchr(p, ',');
    const size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (n == FAULT_MAX_RULES)
      err = zo_error(-EINVAL, "ZO_FAULT: more than %d faults", FAULT_MAX_RULES);
    else if (parse_rule(p, len, &parsed[n]) != 0)
      err = zo_error(-EINVAL,
                     "ZO_FAULT: '%.*s' is not op:N:kind (op: nvme-read, nvme-write, write, "
                     "fsync, rename; N: 1, 2, ... or N+ for that call and every later one; kind: "
                     "eio, enospc, edquot, efbig, log, or short for reads and writes)",
                     (int)len, p);
    else
      n++;
    p += len + (comma != NULL);
  }
  pthread_mutex_lock(&rules_mu);
  n_rules = err ? 0 : n;
  memcpy(rules, parsed, sizeof rules[0] * (size_t)n_rules);
  for (int i = 0; i < ZO_FAULT_N_OPS; i++) atomic_store(&calls[i], 0);
  atomic_store(&fired, 0);
  atomic_store(&armed, n_rules > 0);
  pthread_mutex_unlock(&rules_mu);
  return err;
}

/* ZO_FAULT_COUNTS=1: how many calls of each op the process made, at exit,
 * so that a test can place its faults inside a step or a save. */
static void print_counts(void) {
  fprintf(stderr, "zoffload: fault calls:");
  for (int i = 0; i < ZO_FAULT_N_OPS; i++)
    fprintf(stderr, " %s=%llu", op_names[i], (unsigned long long)atomic_load(&calls[i]));
  fputc('\n', stderr);
}

static void read_env(void) {
  const char *counts = getenv("ZO_FAULT_COUNTS");
  if (counts && strcmp(counts, "1") == 0) atexit(print_counts);
  const char *spec = getenv("ZO_FAULT");
  if (spec && spec[0] && fault_set(spec) != 0) {
    /* A test that sets a fault it cannot have must not pass by accident. */
    fprintf(stderr, "zoffload: %s\n", zo_last_error());
    abort();
  }
}

int zo_fault_set(const char *spec) {
  pthread_once(&env_once, read_env); /* so that ZO_FAULT cannot replace these later */
  return fault_set(spec);
}

ssize_t zo_fault_io(enum zo_fault_op op, size_t n, size_t align) {
  pthread_once(&env_once, read_env);
  const uint64_t call = atomic_fetch_add_explicit(&calls[op], 1, memory_order_relaxed) + 1;
  if (!atomic_load_explicit(&armed, memory_order_acquire)) return (ssize_t)n;
  int err = 1;
  pthread_mutex_lock(&rules_mu);
  for (int i = 0; i < n_rules && err == 1; i++) {
    const struct fault_rule *r = &rules[i];
    if (r->op == op && (call == r->nth || (r->and_later && call > r->nth))) err = r->err;
  }
  pthread_mutex_unlock(&rules_mu);
  if (err == 1) return (ssize_t)n;
  if (err == 2) {
    fprintf(stderr, "zoffload: fault log: %s call %llu of %zu bytes\n", op_names[op], (unsigned long long)call, n);
    return (ssize_t)n;
  }
  size_t k = n;
  if (err == 0 && n > align) {
    k = n / 2 / align * align;
    if (k < align) k = align;
  }
  atomic_fetch_add(&fired, 1);
  fprintf(stderr, "zoffload: fault injected: %s call %llu of %zu bytes: %s (ZO_FAULT)\n", op_names[op],
          (unsigned long long)call, n, err ? strerror(-err) : "short transfer");
  return err ? err : (ssize_t)k;
}

uint64_t zo_fault_calls(enum zo_fault_op op) { return atomic_load(&calls[op]); }
uint64_t zo_fault_fired(void) { return atomic_load(&fired); }

#else
/* ISO C wants a translation unit to declare something. */
typedef int zo_fault_unused;
#endif
