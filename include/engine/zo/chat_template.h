/* Chat templates (tokenizer_config.json's chat_template) rendered in C by a
 * small Jinja-subset interpreter (engine/text/chat_template.c), as transformers'
 * apply_chat_template renders them (trim_blocks and lstrip_blocks on). The
 * subset covers the common templates (ChatML, Llama 2 and 3, Zephyr /
 * TinyLlama, Mistral); a construct outside it is refused naming it, never
 * rendered differently. */
#ifndef ZO_CHAT_TEMPLATE_H
#define ZO_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct zo_chat_message {
  const char *role;    /* "system", "user", "assistant", ... */
  const char *content; /* NUL-terminated UTF-8 */
};

/* Renders tmpl with messages[0, n_msgs) (each a {role, content} mapping),
 * add_generation_prompt, bos_token and eos_token (NULL: undefined) bound.
 * *out is malloc'd and NUL-terminated, *len its bytes. Returns 0, or
 * -ENOTSUP naming an unsupported construct, -EINVAL for a template error or
 * its raise_exception (with the message), -ENOMEM; message in zo_last_error. */
int zo_chat_render(const char *tmpl, const struct zo_chat_message *msgs, size_t n_msgs, bool add_generation_prompt,
                   const char *bos_token, const char *eos_token, char **out, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* ZO_CHAT_TEMPLATE_H */
