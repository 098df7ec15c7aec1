/* engine/text/chat_template.c: chat templates rendered as transformers'
 * apply_chat_template does (Jinja with trim_blocks and lstrip_blocks).
 * Without arguments: built-in cases (ChatML with a default system prompt,
 * Llama 3, Zephyr's newline-laid-out template, Llama 2's system folding and
 * raise_exception) against renderings made by jinja2 3.1, and refusals of
 * unsupported constructs by name. With FILE: renders every case of a JSON
 * file [{"template", "messages", "add_generation_prompt", "bos_token",
 * "eos_token"}] and prints a JSON list of the results (a string, or
 * {"error": message}) for tests/hf/test_chat_template.py, which compares
 * them with jinja2 itself over the templates of several hub models. Also:
 * hostile templates refused by the interpreter's limits (depth, output,
 * loop iterations, memory). */
#include <jansson.h>

#include "zo/chat_template.h"
#include "zo_test.h"

static const struct zo_chat_message conv[] = {
    {"user", "Hi there"}, {"assistant", " Hello! "}, {"user", "What is 2+2?"}, {"assistant", "4"}};

static int render_eq(const char *tmpl, const struct zo_chat_message *m, size_t n, bool gen, const char *want) {
  char *out;
  size_t len;
  int err = zo_chat_render(tmpl, m, n, gen, "<s>", "</s>", &out, &len);
  if (err) {
    fprintf(stderr, "  render failed: %s\n", zo_last_error());
    return 1;
  }
  int bad = strcmp(out, want) != 0 || len != strlen(want);
  if (bad) fprintf(stderr, "  got  [%s]\n  want [%s]\n", out, want);
  free(out);
  return bad;
}

static int test_chatml(void) {
  const char *t = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
                  "'<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + "
                  "message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if "
                  "add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  return render_eq(t, conv, 2, true,
                   "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi "
                   "there<|im_end|>\n<|im_start|>assistant\n Hello! <|im_end|>\n<|im_start|>assistant\n");
}

static int test_llama3(void) {
  const char *t = "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
                  "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
                  "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ "
                  "content }}{% endfor %}{% if add_generation_prompt %}{{ "
                  "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
  return render_eq(t, conv, 2, false,
                   "<s><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant"
                   "<|end_header_id|>\n\nHello!<|eot_id|>");
}

static int test_zephyr_layout(void) {
  const char *t = "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + "
                  "message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + "
                  "message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ "
                  "'<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and "
                  "add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";
  return render_eq(t, conv, 3, true,
                   "<|user|>\nHi there</s>\n<|assistant|>\n Hello! </s>\n<|user|>\nWhat is 2+2?</s>\n"
                   "<|assistant|>\n");
}

static const char *llama2 =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif "
    "%}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
    "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
    "loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if "
    "message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] "
    "== 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";

static int test_llama2_system_and_raise(void) {
  const struct zo_chat_message sys[] = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}};
  int bad = render_eq(llama2, sys, 3, false, "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello </s>");
  const struct zo_chat_message two_users[] = {{"user", "a"}, {"user", "b"}};
  char *out;
  size_t len;
  int err = zo_chat_render(llama2, two_users, 2, false, "<s>", "</s>", &out, &len);
  if (err != -EINVAL || !strstr(zo_last_error(), "must alternate")) {
    fprintf(stderr, "  raise_exception: got %d (%s)\n", err, zo_last_error());
    bad = 1;
  }
  return bad;
}

static int test_unsupported_named(void) {
  static const struct {
    const char *tmpl, *names;
  } cases[] = {
      {"{% macro f() %}x{% endmacro %}", "macro"},
      {"{{ messages | tojson }}", "tojson"},
      {"{% set ns = namespace(a=1) %}", "namespace"},
      {"{{ x is divisibleby 3 }}", "divisibleby"},
      {"{% for a, b in x %}{% endfor %}", "unpacking"},
  };
  int bad = 0;
  for (size_t k = 0; k < ZO_ARRAY_LEN(cases); k++) {
    char *out;
    size_t len;
    int err = zo_chat_render(cases[k].tmpl, conv, 1, false, NULL, NULL, &out, &len);
    if (err != -ENOTSUP || !strstr(zo_last_error(), cases[k].names)) {
      fprintf(stderr, "  %s: got %d (%s), want -ENOTSUP naming %s\n", cases[k].tmpl, err, zo_last_error(),
              cases[k].names);
      bad = 1;
      if (!err) free(out);
    }
  }
  return bad;
}

/* A template of pre + mid * n + post (malloc'd). */
static char *repeat(const char *pre, const char *open, const char *mid, const char *close, const char *post, int n) {
  size_t len = strlen(pre) + strlen(mid) + strlen(post) + (size_t)n * (strlen(open) + strlen(close)) + 1;
  char *t = malloc(len), *p = t;
  p += sprintf(p, "%s", pre);
  for (int k = 0; k < n; k++) p += sprintf(p, "%s", open);
  p += sprintf(p, "%s", mid);
  for (int k = 0; k < n; k++) p += sprintf(p, "%s", close);
  sprintf(p, "%s", post);
  return t;
}

/* Hostile templates fail by name (the limit and its value), never crash the
 * stack or fill host memory; templates within the limits still render. */
static int test_limits(void) {
  static const char list10[] = "[0,1,2,3,4,5,6,7,8,9]";
  char loops[1024] = "", *q = loops;
  for (int k = 0; k < 12; k++) q += sprintf(q, "{%% for a%d in %s %%}", k, list10);
  q += sprintf(q, "x");
  for (int k = 0; k < 12; k++) q += sprintf(q, "{%% endfor %%}");
  char *doubling = repeat("{% set s = 'ab' %}", "{% set s = s + s %}", "{{ s }}", "", "", 40);
  char *emit80 = repeat("{% set s = 'ab' %}", "{% set s = s + s %}", "", "", "", 20); /* 2 MiB */
  char *emit_loop = malloc(strlen(emit80) + 200);
  sprintf(emit_loop, "%s{%% for a in %s %%}{%% for b in [1,2,3,4] %%}{{ s }}{%% endfor %%}{%% endfor %%}", emit80,
          list10);
  char *arena_loop = malloc(strlen(emit80) + 300);
  sprintf(arena_loop,
          "%s{%% for a in %s %%}{%% for b in %s %%}{%% for c in %s %%}{%% set t = s ~ b %%}{%% endfor %%}{%% endfor "
          "%%}{%% endfor %%}",
          emit80, list10, list10, list10);
  struct {
    char *tmpl;
    const char *names;
  } cases[] = {
      {repeat("{{ ", "(", "1", ")", " }}", 2000), "nesting deeper than the limit of 256"},
      {repeat("{{ ", "[", "1", "]", " }}", 2000), "nesting deeper than the limit of 256"},
      {repeat("{{ ", "not ", "true", "", " }}", 2000), "nesting deeper than the limit of 256"},
      {repeat("{{ ", "-", "1", "", " }}", 2000), "nesting deeper than the limit of 256"},
      {repeat("{{ ", "x[", "0", "]", " }}", 2000), "nesting deeper than the limit of 256"},
      {repeat("", "{% if true %}", "x", "{% endif %}", "", 2000), "nesting deeper than the limit of 256"},
      {repeat("", "{% for m in messages %}", "x", "{% endfor %}", "", 2000), "nesting deeper than the limit of 256"},
      {doubling, "a string beyond the output limit of"},
      {strdup(loops), "more loop iterations than the limit of 1000000"},
      {emit_loop, "output beyond the limit of"},
      {arena_loop, "working space beyond the limit of 256 MiB"},
  };
  int bad = 0;
  for (size_t k = 0; k < ZO_ARRAY_LEN(cases); k++) {
    char *out;
    size_t len;
    int err = zo_chat_render(cases[k].tmpl, conv, 1, false, NULL, NULL, &out, &len);
    if (err != -EINVAL || !strstr(zo_last_error(), cases[k].names)) {
      fprintf(stderr, "  case %zu (%.40s...): got %d (%s), want -EINVAL naming \"%s\"\n", k, cases[k].tmpl, err,
              err ? zo_last_error() : "", cases[k].names);
      bad = 1;
      if (!err) free(out);
    }
    free(cases[k].tmpl);
  }
  free(emit80);
  /* A block's end outside its block is an error naming it, not "unsupported". */
  static const char *const stray[][2] = {{"x{% endfor %}", "{% endfor %} without its {% for %}"},
                                         {"{% endif %}", "{% endif %} without its {% if %}"},
                                         {"{% else %}", "{% else %} without its {% if %}"}};
  for (size_t k = 0; k < ZO_ARRAY_LEN(stray); k++) {
    char *out;
    size_t len;
    int err = zo_chat_render(stray[k][0], conv, 1, false, NULL, NULL, &out, &len);
    if (err != -EINVAL || !strstr(zo_last_error(), stray[k][1])) {
      fprintf(stderr, "  %s: got %d (%s), want -EINVAL naming \"%s\"\n", stray[k][0], err, err ? zo_last_error() : "",
              stray[k][1]);
      bad = 1;
      if (!err) free(out);
    }
  }
  /* Within the limits: 100 levels of each nesting render. */
  char *ok[] = {repeat("{{ ", "(", "7", ")", " }}", 100), repeat("{{ ", "not ", "not true", "", " }}", 100),
                repeat("", "{% if true %}", "7", "{% endif %}", "", 100)};
  static const char *const want[] = {"7", "False", "7"};
  for (size_t k = 0; k < ZO_ARRAY_LEN(ok); k++) {
    bad |= render_eq(ok[k], conv, 1, false, want[k]);
    free(ok[k]);
  }
  return bad;
}

/* Driver mode for tests/hf/test_chat_template.py. */
static int render_file(const char *path) {
  json_error_t je;
  json_t *cases = json_load_file(path, 0, &je);
  if (!json_is_array(cases)) {
    fprintf(stderr, "%s: %s\n", path, je.text);
    return 2;
  }
  json_t *results = json_array();
  size_t i;
  json_t *cs;
  json_array_foreach(cases, i, cs) {
    json_t *msgs = json_object_get(cs, "messages");
    size_t n = json_array_size(msgs);
    struct zo_chat_message *m = calloc(n + 1, sizeof *m);
    for (size_t k = 0; k < n; k++) {
      m[k].role = json_string_value(json_object_get(json_array_get(msgs, k), "role"));
      m[k].content = json_string_value(json_object_get(json_array_get(msgs, k), "content"));
    }
    char *out;
    size_t len;
    int err = zo_chat_render(json_string_value(json_object_get(cs, "template")), m, n,
                             json_is_true(json_object_get(cs, "add_generation_prompt")),
                             json_string_value(json_object_get(cs, "bos_token")),
                             json_string_value(json_object_get(cs, "eos_token")), &out, &len);
    if (err) {
      json_array_append_new(results, json_pack("{s:s}", "error", zo_last_error()));
    } else {
      json_array_append_new(results, json_stringn(out, len));
      free(out);
    }
    free(m);
  }
  json_dumpf(results, stdout, JSON_ENSURE_ASCII);
  json_decref(results);
  json_decref(cases);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2) return render_file(argv[1]);
  static const struct zo_test tests[] = {ZO_TEST(chatml), ZO_TEST(llama3), ZO_TEST(zephyr_layout),
                                         ZO_TEST(llama2_system_and_raise), ZO_TEST(unsupported_named),
                                         ZO_TEST(limits)};
  return ZO_TEST_MAIN(tests);
}
