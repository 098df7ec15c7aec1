/* zo_config_load_quiet: the load the planner uses for its candidates. On a
 * config that makes zo_config_load warn twice (a DeepSpeed key without
 * effect, an explicit total_num_steps that differs from steps) it prints
 * nothing and gives the same config (the same dump); errors are the same;
 * and a quiet load leaves the next plain load's warnings as they were (no
 * setting survives the call). */
#include "zo/config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zo_test.h"

static char tmpdir[256];

static const char warns[] = "{\"steps\": 100, \"zero_optimization\": {\"reduce_bucket_size\": 5e8},"
                            " \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"total_num_steps\": 50,"
                            " \"warmup_num_steps\": 10}}}";
static const char bad[] = "{\"optimizer\": {\"params\": {\"lr\": -1}}}";

/* Writes text to tmpdir/name.json and loads it (quietly or not); *printed:
 * what the load wrote on stderr (malloc'd); *dump: the loaded config's dump
 * (malloc'd, "" on error). */
static int load(const char *name, const char *text, bool quiet, char **printed, char **dump) {
  char path[512], errpath[512];
  snprintf(path, sizeof path, "%s/%s.json", tmpdir, name);
  snprintf(errpath, sizeof errpath, "%s/stderr.txt", tmpdir);
  FILE *f = fopen(path, "w");
  FILE *e = fopen(errpath, "w+");
  const int saved = dup(STDERR_FILENO);
  if (!f || !e || saved < 0) {
    perror(path);
    exit(1);
  }
  fputs(text, f);
  fclose(f);
  fflush(stderr);
  dup2(fileno(e), STDERR_FILENO);
  struct zo_config cfg;
  const int err = quiet ? zo_config_load_quiet(&cfg, path, NULL, 0) : zo_config_load(&cfg, path, NULL, 0);
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  const long n = fseek(e, 0, SEEK_END) == 0 ? ftell(e) : -1;
  *printed = n >= 0 ? calloc((size_t)n + 1, 1) : NULL;
  if (!*printed || fseek(e, 0, SEEK_SET) != 0 || fread(*printed, 1, (size_t)n, e) != (size_t)n) {
    perror(errpath);
    exit(1);
  }
  fclose(e);
  size_t len = 0;
  FILE *m = open_memstream(dump, &len);
  if (!m) {
    perror("open_memstream");
    exit(1);
  }
  if (!err) zo_config_dump(&cfg, m);
  fclose(m);
  if (!err) zo_config_free(&cfg);
  return err;
}

static int test_quiet_prints_nothing(void) {
  char *p_loud, *d_loud, *p_quiet, *d_quiet, *p_again, *d_again;
  ZO_REQUIRE(load("warns", warns, false, &p_loud, &d_loud) == 0);
  ZO_REQUIRE(load("warns", warns, true, &p_quiet, &d_quiet) == 0);
  ZO_REQUIRE(load("warns", warns, false, &p_again, &d_again) == 0);
  /* the plain load warns about both, once each */
  ZO_REQUIRE(strstr(p_loud, "zero_optimization.reduce_bucket_size") != NULL);
  ZO_REQUIRE(strstr(p_loud, "total_num_steps = 50 but the run has 100 steps") != NULL);
  ZO_REQUIRE(p_quiet[0] == '\0');
  ZO_REQUIRE(strcmp(p_again, p_loud) == 0);
  ZO_REQUIRE(d_loud[0] != '\0' && strcmp(d_loud, d_quiet) == 0 && strcmp(d_loud, d_again) == 0);
  free(p_loud), free(d_loud), free(p_quiet), free(d_quiet), free(p_again), free(d_again);
  return 0;
}

static int test_quiet_same_errors(void) {
  char *p, *d;
  ZO_REQUIRE(load("bad", bad, false, &p, &d) == -EINVAL);
  char loud[512];
  snprintf(loud, sizeof loud, "%s", zo_last_error());
  free(p), free(d);
  ZO_REQUIRE(load("bad", bad, true, &p, &d) == -EINVAL);
  ZO_REQUIRE(strcmp(loud, zo_last_error()) == 0 && strstr(loud, "optimizer.params.lr = -1") != NULL);
  free(p), free(d);
  return 0;
}

int main(void) {
  if (zo_test_mkdtemp(tmpdir, sizeof tmpdir, "config-quiet")) return 1;
  static const struct zo_test tests[] = {ZO_TEST(quiet_prints_nothing), ZO_TEST(quiet_same_errors)};
  struct zo_test_counts counts = zo_test_run(tests, ZO_ARRAY_LEN(tests));
  zo_test_rmtree(tmpdir);
  return zo_test_report(counts);
}
