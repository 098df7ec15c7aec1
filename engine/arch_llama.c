/* Llama as an architecture description (engine/arch.h). Placeholder until
 * the RMSNorm, rotary and SwiGLU ops land: refuses the configuration. */
#include <errno.h>

#include "arch.h"

static int llama_config_check(struct zo_model_config *cfg) {
  (void)cfg;
  return zo_error(-ENOTSUP, "model.arch = \"llama\": not supported yet; use \"gpt2\"");
}

const struct zo_arch zo_arch_llama = {
    .id = ZO_ARCH_LLAMA,
    .name = "Llama",
    .config_check = llama_config_check,
};
