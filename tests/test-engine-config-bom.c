/* A config file that starts with a UTF-8 byte-order mark (Windows editors
 * write one) loads like the same file without it; a mark anywhere else is
 * still a syntax error, and a file holding only the mark is an empty file. */
#include "zo/config.h"
#include "zo_test.h"

static char tmp_dir[256];

static int write_text(const char *name, const char *text, char *path, size_t cap) {
  snprintf(path, cap, "%s/%s", tmp_dir, name);
  return zo_test_write_file(path, text);
}

static int test_bom_accepted(void) {
  char path[512];
  ZO_REQUIRE(write_text("bom.json", "\xEF\xBB\xBF{\"steps\": 7, \"model\": {\"n_layer\": 3}}\n", path, sizeof path) == 0);
  struct zo_config cfg;
  ZO_REQUIRE(zo_config_load(&cfg, path, NULL, 0) == 0);
  ZO_REQUIRE(cfg.steps == 7 && cfg.model.spec.n_layer == 3);
  zo_config_free(&cfg);
  return 0;
}

static int test_bom_then_space(void) {
  char path[512];
  ZO_REQUIRE(write_text("bom-space.json", "\xEF\xBB\xBF\n  {\"steps\": 9}\n", path, sizeof path) == 0);
  struct zo_config cfg;
  ZO_REQUIRE(zo_config_load(&cfg, path, NULL, 0) == 0);
  ZO_REQUIRE(cfg.steps == 9);
  zo_config_free(&cfg);
  return 0;
}

static int test_bom_only_is_empty(void) {
  char path[512];
  ZO_REQUIRE(write_text("bom-only.json", "\xEF\xBB\xBF", path, sizeof path) == 0);
  struct zo_config cfg;
  ZO_REQUIRE(zo_config_load(&cfg, path, NULL, 0) == -EINVAL);
  ZO_REQUIRE(strstr(zo_last_error(), "empty file"));
  return 0;
}

static int test_bom_elsewhere_rejected(void) {
  char path[512];
  ZO_REQUIRE(write_text("bom-mid.json", "{\"steps\": 7}\xEF\xBB\xBF", path, sizeof path) == 0);
  struct zo_config cfg;
  ZO_REQUIRE(zo_config_load(&cfg, path, NULL, 0) == -EINVAL);
  ZO_REQUIRE(strstr(zo_last_error(), "syntax error"));
  return 0;
}

int main(void) {
  static const struct zo_test tests[] = {
      ZO_TEST(bom_accepted),
      ZO_TEST(bom_then_space),
      ZO_TEST(bom_only_is_empty),
      ZO_TEST(bom_elsewhere_rejected),
  };
  if (zo_test_mkdtemp(tmp_dir, sizeof tmp_dir, "config-bom")) return 1;
  struct zo_test_counts counts = zo_test_run(tests, ZO_ARRAY_LEN(tests));
  zo_test_rmtree(tmp_dir);
  return zo_test_report(counts);
}
