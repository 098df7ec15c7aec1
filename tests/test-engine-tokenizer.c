/* engine/text/tokenizer.c: refusals by name, a hand-made BPE, invalid UTF-8, the
 * Digits pre-tokenizer; and,
 * with --cases FILE (written by tests/hf/test_tokenizer_exact.py from the
 * reference tokenizers library), exactness: ids with and without special
 * tokens, decodes with and without skipping them, round trips, also encoded
 * from several threads at once. Zero mismatches pass. */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zo/common.h"
#include "zo/tokenizer.h"
#include "zo_test.h"

static char tmpdir[200];

static int write_json(const char *name, const char *text, char *path, size_t cap) {
  snprintf(path, cap, "%s/%s", tmpdir, name);
  return zo_test_write_file(path, text);
}

#define TINY_MODEL                                                                                              \
  "\"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\": null," \
  " \"end_of_word_suffix\": null, \"fuse_unk\": false, \"byte_fallback\": false,"                              \
  " \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"c\": 3, \"abc\": 4, \"\xc3\xaf\": 5},"             \
  " \"merges\": [\"a b\", \"ab c\"]}"

static int expect_refusal(const char *json, const char *needle1, const char *needle2) {
  char path[512];
  if (write_json("refuse.json", json, path, sizeof(path))) return 1;
  struct zo_tokenizer *tk = NULL;
  const int err = zo_tokenizer_load(path, &tk);
  if (err != -ENOTSUP || tk || !strstr(zo_last_error(), needle1) || !strstr(zo_last_error(), needle2)) {
    fprintf(stderr, "  expected a refusal naming %s and %s, got %d: %s\n", needle1, needle2, err, zo_last_error());
    zo_tokenizer_free(tk);
    return 1;
  }
  return 0;
}

static int test_refusals(void) {
  int bad = 0;
  bad += expect_refusal("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "model.type", "WordPiece");
  bad += expect_refusal("{\"normalizer\": {\"type\": \"Lowercase\"}, " TINY_MODEL "}", "normalizer", "Lowercase");
  bad += expect_refusal("{\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"_\", \"split\": false}, " TINY_MODEL "}",
                        "pre_tokenizer", "split");
  bad += expect_refusal("{\"pre_tokenizer\": {\"type\": \"Whitespace\"}, " TINY_MODEL "}", "pre_tokenizer", "Whitespace");
  bad += expect_refusal("{\"truncation\": {\"max_length\": 5}, " TINY_MODEL "}", "truncation", "null");
  bad += expect_refusal("{\"added_tokens\": [{\"id\": 6, \"content\": \"x\", \"single_word\": true}], " TINY_MODEL "}",
                        "added_tokens[0]", "single_word");
  bad += expect_refusal("{\"decoder\": {\"type\": \"WordPiece\"}, " TINY_MODEL "}", "decoder", "WordPiece");
  bad += expect_refusal("{\"frobnicate\": 1, " TINY_MODEL "}", "(top level)", "frobnicate");
  return bad;
}

static int encode_eq(const struct zo_tokenizer *tk, const char *text, size_t n, const int32_t *want, size_t n_want) {
  int32_t *ids = NULL;
  size_t n_ids = 0, cap = 0;
  const int err = zo_tokenizer_encode(tk, text, n, true, &ids, &n_ids, &cap);
  int bad = err || n_ids != n_want || (n_ids && memcmp(ids, want, n_ids * sizeof(*ids)));
  if (bad) {
    fprintf(stderr, "  encode(\"%.*s\"): err %d, %zu ids:", (int)n, text, err, n_ids);
    for (size_t i = 0; i < n_ids; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
  }
  free(ids);
  return bad;
}

/* Merges by rank: "abcab" is abc + ab; a character without a token vanishes
 * (no unk), so "abxc" is abc; an invalid byte is U+FFFD, EF BF BD, of whose
 * byte-level characters only the first (U+00EF) is a token here. */
static int test_tiny_bpe(void) {
  char path[512];
  if (write_json("tiny.json",
                 "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 6, \"content\": \"<e>\", \"special\": true,"
                 " \"normalized\": false}], \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false,"
                 " \"use_regex\": false}, \"decoder\": {\"type\": \"ByteLevel\"}, " TINY_MODEL "}",
                 path, sizeof(path)))
    return 1;
  struct zo_tokenizer *tk;
  if (zo_tokenizer_load(path, &tk)) {
    fprintf(stderr, "  %s\n", zo_last_error());
    return 1;
  }
  int bad = 0;
  bad += encode_eq(tk, "abcab", 5, (const int32_t[]){4, 2}, 2);
  bad += encode_eq(tk, "abxc<e>ba", 9, (const int32_t[]){4, 6, 1, 0}, 4);
  bad += encode_eq(tk, "\xff", 1, (const int32_t[]){5}, 1);
  bad += encode_eq(tk, "\xe2\x82", 2, (const int32_t[]){5}, 1);
  bad += zo_tokenizer_vocab_size(tk) != 7 || zo_tokenizer_eos_id(tk) != -1 || zo_tokenizer_token_to_id(tk, "<e>") != 6;
  char *out;
  size_t len;
  bad += zo_tokenizer_decode(tk, (const int32_t[]){4, 6, 2, 99}, 4, false, &out, &len) || strcmp(out, "abc<e>ab");
  free(out);
  bad += zo_tokenizer_decode(tk, (const int32_t[]){4, 6, 2}, 3, true, &out, &len) || strcmp(out, "abcab");
  free(out);
  zo_tokenizer_free(tk);
  return bad;
}

/* GPT-2's and Qwen's files spell "no prefix" as ""; ignore_merges (Llama 3's
 * files, tokenizers >= 0.19) takes a piece that is a token whole, so "abc"
 * is one token although no merge reaches it. */
static int test_model_options(void) {
  int bad = 0;
  for (int ignore = 0; ignore < 2; ignore++) {
    char json[1024], path[512];
    snprintf(json, sizeof json,
             "{\"model\": {\"type\": \"BPE\", \"continuing_subword_prefix\": \"\", \"end_of_word_suffix\": \"\","
             " \"ignore_merges\": %s, \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"ab\": 3, \"abc\": 4},"
             " \"merges\": [\"a b\"]}}",
             ignore ? "true" : "false");
    if (write_json("options.json", json, path, sizeof(path))) return 1;
    struct zo_tokenizer *tk;
    if (zo_tokenizer_load(path, &tk)) {
      fprintf(stderr, "  %s\n", zo_last_error());
      return 1;
    }
    bad += ignore ? encode_eq(tk, "abc", 3, (const int32_t[]){4}, 1) : encode_eq(tk, "abc", 3, (const int32_t[]){3, 2}, 2);
    zo_tokenizer_free(tk);
  }
  bad += expect_refusal("{\"model\": {\"continuing_subword_prefix\": \"##\", \"vocab\": {}, \"merges\": []}}",
                        "continuing_subword_prefix", "null");
  /* A merge whose result is not in the vocabulary names that result (it
   * once printed "(t", the literal cut to the pair's length). */
  bad += expect_refusal("{\"model\": {\"vocab\": {\"a\": 0, \"c\": 1}, \"merges\": [\"a c\"]}}", "model.merges",
                        "merged token \"ac\"");
  bad += expect_refusal("{\"model\": {\"vocab\": {\"a\": 0, \"ac\": 1}, \"merges\": [\"a cz\"]}}", "model.merges",
                        "\"cz\" is not in model.vocab");
  return bad;
}

/* The Digits pre-tokenizer over a vocabulary whose merges would join across
 * its boundaries: "a1" and "12" are tokens, so "a12" is a + 1 + 2 with
 * individual_digits, a + 12 without (a run of numeric characters is one
 * piece), a1 + 2 with no pre-tokenizer. Numeric is Rust's char::is_numeric:
 * Arabic-Indic U+0663 and full-width U+FF15 (Nd), U+2167 (Nl), U+00BD (No)
 * split off; U+00AA (a letter, Lo) does not. The ids are tokenizers 0.15.2's
 * for the same file. Refusals name the key. */
static int test_digits(void) {
  static const char *const model =
      "\"model\": {\"type\": \"BPE\", \"unk_token\": \"?\", \"vocab\": {\"?\": 0, \"a\": 1, \"1\": 2, \"2\": 3,"
      " \"a1\": 4, \"12\": 5, \"\xd9\xa3\": 6, \"\xef\xbc\x95\": 7, \"\xd9\xa3\xef\xbc\x95\": 8, \"\xc2\xaa\": 9,"
      " \"a\xc2\xaa\": 10}, \"merges\": [\"a 1\", \"1 2\", \"\xd9\xa3 \xef\xbc\x95\", \"a \xc2\xaa\"]}";
  static const char *const pres[3] = {"null", "{\"type\": \"Digits\", \"individual_digits\": true}",
                                      "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", "
                                      "\"individual_digits\": false}]}"};
  /* "a12", "a\u0663\uFF15", "\u2167\u00BD" (no tokens: unk each), "a\u00AA1" */
  static const char *const text[4] = {"a12", "a\xd9\xa3\xef\xbc\x95", "\xe2\x85\xa7\xc2\xbd", "a\xc2\xaa" "1"};
  static const int32_t want[3][4][4] = {
      {{4, 3}, {1, 8}, {0, 0}, {10, 2}},      /* no pre-tokenizer: a1 2, a U+0663U+FF15, two unks, aª 1 */
      {{1, 2, 3}, {1, 6, 7}, {0, 0}, {10, 2}}, /* individual: every numeric character alone */
      {{1, 5}, {1, 8}, {0, 0}, {10, 2}},      /* runs: 12 and U+0663U+FF15 one piece each; Nl then No two unks */
  };
  static const size_t n_want[3][4] = {{2, 2, 2, 2}, {3, 3, 2, 2}, {2, 2, 2, 2}};
  int bad = 0;
  for (int k = 0; k < 3; k++) {
    char json[2048], path[512];
    snprintf(json, sizeof json, "{\"pre_tokenizer\": %s, %s}", pres[k], model);
    if (write_json("digits.json", json, path, sizeof(path))) return 1;
    struct zo_tokenizer *tk;
    if (zo_tokenizer_load(path, &tk)) {
      fprintf(stderr, "  %s\n", zo_last_error());
      return 1;
    }
    for (int i = 0; i < 4; i++) bad += encode_eq(tk, text[i], strlen(text[i]), want[k][i], n_want[k][i]);
    zo_tokenizer_free(tk);
  }
  bad += expect_refusal("{\"pre_tokenizer\": {\"type\": \"Digits\"}, " TINY_MODEL "}", "pre_tokenizer",
                        "\"individual_digits\" is missing; it must be true or false");
  bad += expect_refusal("{\"pre_tokenizer\": {\"type\": \"Digits\", \"individual_digits\": 1}, " TINY_MODEL "}",
                        "pre_tokenizer", "\"individual_digits\" is 1; it must be true or false");
  bad += expect_refusal("{\"pre_tokenizer\": {\"type\": \"Digits\", \"individual_digits\": \"yes\"}, " TINY_MODEL "}",
                        "pre_tokenizer", "\"individual_digits\" is \"yes\"; it must be true or false");
  bad += expect_refusal("{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"ByteLevel\"},"
                        " {\"type\": \"Digits\", \"individual_digits\": true, \"min_run\": 2}]}, " TINY_MODEL "}",
                        "pre_tokenizer.pretokenizers[1]", "key \"min_run\" is not supported");
  return bad;
}

/* A directory: tokenizer_config.json's eos_token (a string or an AddedToken
 * object), bos_token and chat_template; without the config, the fallbacks by name. */
static int test_directory_config(void) {
  char dir[512], path[600];
  snprintf(dir, sizeof dir, "%s/tkdir", tmpdir);
  if (mkdir(dir, 0700)) return 1;
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  FILE *f = fopen(path, "w");
  if (!f) return 1;
  fputs("{\"added_tokens\": [{\"id\": 2, \"content\": \"</s>\", \"special\": true, \"normalized\": false},"
        " {\"id\": 3, \"content\": \"<s>\", \"special\": true, \"normalized\": false},"
        " {\"id\": 4, \"content\": \"<|eot|>\", \"special\": true, \"normalized\": false}],"
        " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": []}}", f);
  if (fclose(f)) return 1;
  struct zo_tokenizer *tk;
  ZO_REQUIRE(zo_tokenizer_load(dir, &tk) == 0);
  int bad = zo_tokenizer_eos_id(tk) != 2 || zo_tokenizer_bos_id(tk) != 3 || zo_tokenizer_chat_template(tk) != NULL;
  zo_tokenizer_free(tk);
  snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
  if (!(f = fopen(path, "w"))) return 1;
  fputs("{\"eos_token\": {\"content\": \"<|eot|>\", \"lstrip\": false}, \"bos_token\": \"</s>\","
        " \"chat_template\": \"{{ messages }}\"}", f);
  if (fclose(f)) return 1;
  ZO_REQUIRE(zo_tokenizer_load(dir, &tk) == 0);
  bad += zo_tokenizer_eos_id(tk) != 4 || zo_tokenizer_bos_id(tk) != 2 || !zo_tokenizer_chat_template(tk) ||
         strcmp(zo_tokenizer_chat_template(tk), "{{ messages }}");
  bad += zo_tokenizer_token_to_id(tk, "b") != 1 || zo_tokenizer_token_to_id(tk, "zz") != -1 ||
         strcmp(zo_tokenizer_id_to_token(tk, 4), "<|eot|>") || zo_tokenizer_id_to_token(tk, 5) != NULL;
  if (bad) fprintf(stderr, "  eos %d bos %d template %s\n", zo_tokenizer_eos_id(tk), zo_tokenizer_bos_id(tk),
                   zo_tokenizer_chat_template(tk) ? zo_tokenizer_chat_template(tk) : "(none)");
  zo_tokenizer_free(tk);
  return bad;
}

static unsigned char *unhex(const char *h, size_t *n) {
  *n = strlen(h) / 2;
  unsigned char *b = malloc(*n + 1);
  for (size_t i = 0; i < *n; i++) sscanf(h + 2 * i, "%2hhx", &b[i]);
  b[*n] = 0;
  return b;
}

static int ids_eq(json_t *want, const int32_t *ids, size_t n) {
  if (json_array_size(want) != n) return 0;
  for (size_t i = 0; i < n; i++)
    if (json_integer_value(json_array_get(want, i)) != ids[i]) return 0;
  return 1;
}

static void show(const char *what, const char *tk_name, const unsigned char *text, size_t n, json_t *want,
                 const int32_t *ids, size_t n_ids) {
  fprintf(stderr, "MISMATCH %s [%s] text (%zu bytes) \"%.*s\"\n  want:", what, tk_name, n, n > 200 ? 200 : (int)n,
          (const char *)text);
  for (size_t i = 0; i < json_array_size(want) && i < 60; i++) fprintf(stderr, " %lld", json_integer_value(json_array_get(want, i)));
  fprintf(stderr, "\n  got: ");
  for (size_t i = 0; i < n_ids && i < 60; i++) fprintf(stderr, " %d", ids[i]);
  fprintf(stderr, "\n");
}

static long check_decode(const struct zo_tokenizer *tk, const char *name, const int32_t *ids, size_t n, bool skip,
                         const char *want_hex, const char *what) {
  size_t wn;
  unsigned char *want = unhex(want_hex, &wn);
  char *out = NULL;
  size_t len = 0;
  const int err = zo_tokenizer_decode(tk, ids, n, skip, &out, &len);
  long bad = err || len != wn || memcmp(out, want, wn);
  if (bad) fprintf(stderr, "MISMATCH %s [%s]: want \"%s\"\n  got  \"%s\" (err %d)\n", what, name, want, out ? out : "", err);
  free(out);
  free(want);
  return bad;
}

struct mt_arg {
  const struct zo_tokenizer *tk;
  json_t *cases;
  int first, stride;
  long bad;
};

/* Encodes every stride-th text case from first on, with special tokens, against the reference. */
static void *mt_encode(void *p) {
  struct mt_arg *a = p;
  const long n_cases = (long)json_array_size(a->cases);
  for (long c = a->first; c < n_cases; c += a->stride) {
    json_t *cs = json_array_get(a->cases, (size_t)c);
    json_t *h = json_object_get(cs, "text");
    if (!h) continue;
    size_t n;
    unsigned char *text = unhex(json_string_value(h), &n);
    int32_t *ids = NULL;
    size_t n_ids = 0, cap = 0;
    if (zo_tokenizer_encode(a->tk, (const char *)text, n, true, &ids, &n_ids, &cap) ||
        !ids_eq(json_object_get(cs, "ids_special"), ids, n_ids))
      a->bad++;
    free(ids);
    free(text);
  }
  return NULL;
}

static int run_cases(const char *path) {
  json_error_t je;
  json_t *root = json_load_file(path, 0, &je);
  if (!root) {
    fprintf(stderr, "%s:%d: %s\n", path, je.line, je.text);
    return 1;
  }
  long total_bad = 0, total = 0;
  size_t i;
  json_t *t;
  json_array_foreach(json_object_get(root, "tokenizers"), i, t) {
    const char *name = json_string_value(json_object_get(t, "name"));
    struct zo_tokenizer *tk;
    if (zo_tokenizer_load(json_string_value(json_object_get(t, "path")), &tk)) {
      fprintf(stderr, "[%s] load: %s\n", name, zo_last_error());
      total_bad++;
      continue;
    }
    json_t *eos = json_object_get(t, "eos"), *bos = json_object_get(t, "bos");
    if ((eos && json_integer_value(eos) != zo_tokenizer_eos_id(tk)) || (bos && json_integer_value(bos) != zo_tokenizer_bos_id(tk))) {
      fprintf(stderr, "MISMATCH [%s] eos/bos: want %lld/%lld (transformers), got %d/%d\n", name, json_integer_value(eos),
              json_integer_value(bos), zo_tokenizer_eos_id(tk), zo_tokenizer_bos_id(tk));
      total_bad++;
    }
    json_t *cases = json_object_get(t, "cases");
    const long n_cases = (long)json_array_size(cases);
    long bad = 0, roundtrips = 0, thread_bad = 0;
    for (long c = 0; c < n_cases; c++) {
      json_t *cs = json_array_get(cases, (size_t)c);
      json_t *dids = json_object_get(cs, "decode_ids");
      if (dids) {
        const size_t n = json_array_size(dids);
        int32_t *ids = malloc((n + 1) * sizeof(*ids));
        for (size_t k = 0; k < n; k++) ids[k] = (int32_t)json_integer_value(json_array_get(dids, k));
        bad += check_decode(tk, name, ids, n, false, json_string_value(json_object_get(cs, "decoded")), "decode(random ids)");
        bad += check_decode(tk, name, ids, n, true, json_string_value(json_object_get(cs, "decoded_skip")),
                            "decode(random ids, skip_special)");
        free(ids);
        continue;
      }
      size_t n;
      unsigned char *text = unhex(json_string_value(json_object_get(cs, "text")), &n);
      for (int sp = 0; sp < 2; sp++) {
        int32_t *ids = NULL;
        size_t n_ids = 0, cap = 0;
        json_t *want = json_object_get(cs, sp ? "ids_special" : "ids");
        const int err = zo_tokenizer_encode(tk, (const char *)text, n, sp, &ids, &n_ids, &cap);
        if (err || !ids_eq(want, ids, n_ids)) {
          if (bad < 10) show(sp ? "encode(add_special)" : "encode", name, text, n, want, ids, n_ids);
          bad++;
        } else if (!sp) {
          bad += check_decode(tk, name, ids, n_ids, false, json_string_value(json_object_get(cs, "decoded")), "decode");
          if (json_is_true(json_object_get(cs, "roundtrip"))) {
            char *out = NULL;
            size_t len;
            if (zo_tokenizer_decode(tk, ids, n_ids, false, &out, &len) || len != n || memcmp(out, text, n)) {
              fprintf(stderr, "MISMATCH round trip [%s]: \"%s\"\n", name, text);
              bad++;
            }
            free(out);
            roundtrips++;
          }
        } else {
          bad += check_decode(tk, name, ids, n_ids, true, json_string_value(json_object_get(cs, "decoded_skip")),
                              "decode(skip_special)");
        }
        free(ids);
      }
      free(text);
    }
    /* The same texts encoded from 4 threads at once on one tokenizer (pthreads,
     * not OpenMP, so that ThreadSanitizer sees them). */
    struct mt_arg args[4];
    pthread_t th[4];
    int started = 0;
    for (int k = 0; k < 4; k++) {
      args[k] = (struct mt_arg){tk, cases, k, 4, 0};
      if (pthread_create(&th[k], NULL, mt_encode, &args[k]) == 0) started++;
      else args[k].bad = n_cases;
    }
    for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
    for (int k = 0; k < 4; k++) thread_bad += args[k].bad;
    printf("[%s] %ld cases, %ld round trips, %ld mismatches, %ld under 4 threads (vocab %zu, eos %d, bos %d)\n", name,
           n_cases, roundtrips, bad, thread_bad, zo_tokenizer_vocab_size(tk), zo_tokenizer_eos_id(tk),
           zo_tokenizer_bos_id(tk));
    total_bad += bad + thread_bad;
    total += n_cases;
    zo_tokenizer_free(tk);
  }
  json_decref(root);
  printf("%ld cases, %ld mismatches\n", total, total_bad);
  return total_bad ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--cases")) return run_cases(argv[2]);
  if (zo_test_mkdtemp(tmpdir, sizeof tmpdir, "tokenizer")) return 1;
  static const struct zo_test tests[] = {
      ZO_TEST(refusals),
      ZO_TEST(tiny_bpe),
      ZO_TEST(model_options),
      ZO_TEST(digits),
      ZO_TEST(directory_config),
  };
  const int rc = ZO_TEST_MAIN(tests);
  zo_test_rmtree(tmpdir);
  return rc;
}
