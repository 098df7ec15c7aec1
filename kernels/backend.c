/* Backend selection: "auto" takes CUDA when the build has it and a GPU and
 * driver answer, the CPU backend otherwise, and says which in one line. */
#include "zo/backend.h"

#include <stdio.h>
#include <string.h>

#ifndef ZO_HAVE_CUDA
zo_backend_t zo_backend_cuda(void) {
  zo_error(-95, "this build has no CUDA backend (nvcc was not found at configure time; "
                "reconfigure with -DZO_CUDA=ON on a machine with the CUDA toolkit)");
  return NULL;
}
#endif

zo_backend_t zo_backend_init(const char *device, int n_threads) {
  zo_backend_t be = NULL;
  if (strcmp(device, "cpu") == 0) {
    be = zo_backend_cpu();
  } else if (strcmp(device, "cuda") == 0) {
    be = zo_backend_cuda();
    if (!be) return NULL;
  } else if (strcmp(device, "auto") == 0) {
    be = zo_backend_cuda();
    if (!be) {
      fprintf(stderr, "zoffload: device auto: using the CPU backend (%s)\n", zo_last_error());
      be = zo_backend_cpu();
    }
  } else {
    zo_error(-22, "engine.device: '%s' is not a device; valid: \"auto\", \"cpu\", \"cuda\"", device);
    return NULL;
  }
  if (be && n_threads > 0) be->set_threads(n_threads);
  return be;
}
