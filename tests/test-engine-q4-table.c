/* The 4-bit parts of a frozen base (engine/model/q4_table.h): one per
 * Hugging Face Linear of the blocks (Llama with GQA and head_dim apart from
 * width/heads: q, k, v and gate, up apart on our fused tensors; Phi-3's
 * fused Linears whole; GPT-2's Conv1D as (out, in)), nothing else (no
 * embedding, norm or head), and the bytes counted from bitsandbytes' layout
 * by hand here: OC C / 2 codes, 4 bytes per block of absmax, or with double
 * quantization a byte per block, 4 per 256 blocks and the 256-float map;
 * the arena layout (256-aligned pieces) and the parts quantized into it. */
#include "../engine/model/q4_table.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zo/backend.h"

#include "zo_test.h"

#define EXPECT(cond) ZO_EXPECT(cond)

struct want {
  const char *path;
  int OC, C, row0;
};

static size_t align(size_t n) { return (n + 255) / 256 * 256; }

/* The arena by hand: per part its codes, then its absmax (fp32) or nested
 * codes and fp32 scales, each 256-aligned; the nested map at the end. */
static size_t want_bytes(const struct want *w, int n_layer, int n, int bs, bool nested) {
  size_t total = nested ? align(1024) : 0;
  for (int l = 0; l < n_layer; l++)
    for (int i = 0; i < n; i++) {
      const size_t numel = (size_t)w[i].OC * (size_t)w[i].C, nb = (numel + (size_t)bs - 1) / (size_t)bs;
      total += align((numel + 1) / 2) + (nested ? align(nb) + align(4 * ((nb + 255) / 256)) : align(4 * nb));
    }
  return total;
}

/* t holds exactly n_layer x n parts, each named prefix.L.path.weight with its
 * shape and rows, tensor by tensor tiling. */
static void expect_parts(const struct zo_q4_table *t, const char *prefix, int n_layer, const struct want *w, int n) {
  EXPECT(t->n_parts == n_layer * n);
  for (int l = 0; l < n_layer; l++)
    for (int i = 0; i < n; i++) {
      char name[ZO_TENSOR_NAME_MAX];
      snprintf(name, sizeof name, "%s.%d.%s.weight", prefix, l, w[i].path);
      int found = 0;
      for (int k = 0; k < t->n_parts; k++) {
        const struct zo_q4_part *p = &t->parts[k];
        if (strcmp(p->name, name)) continue;
        found++;
        EXPECT(p->OC == w[i].OC && p->C == w[i].C && p->row0 == w[i].row0);
        EXPECT(p->packed_nbytes == (size_t)w[i].OC * (size_t)w[i].C / 2);
        EXPECT(p->off_packed % 256 == 0 && p->off_absmax % 256 == 0 && p->off_absmax2 % 256 == 0);
        EXPECT(p->off_absmax >= p->off_packed + p->packed_nbytes);
        if (k > 0) EXPECT(p->off_packed >= t->parts[k - 1].off_absmax + t->parts[k - 1].absmax_nbytes);
        if (k > 0 && t->parts[k - 1].tensor == p->tensor)
          EXPECT(t->parts[k - 1].row0 + t->parts[k - 1].OC == p->row0);
      }
      if (found != 1) fprintf(stderr, "    %s: %d parts\n", name, found);
      EXPECT(found == 1);
    }
}

static int test_llama_gqa(void) {
  const int before = zo_test_n_expect_failed;
  enum { L = 2, NH = 4, NKV = 2, C = 32, I = 48, HD = 12 };
  struct zo_model_config mc = {.arch = ZO_ARCH_LLAMA, .n_layer = L, .n_head = NH, .n_kv_head = NKV,
                                     .n_embd = C, .intermediate_size = I, .head_dim = HD, .vocab_size = 64,
                                     .max_seq_len = 16, .rope_theta = 1e4};
  EXPECT(zo_model_config_check(&mc) == 0);
  const struct want w[] = {{"self_attn.q_proj", NH * HD, C, 0},         {"self_attn.k_proj", NKV * HD, C, NH * HD},
                           {"self_attn.v_proj", NKV * HD, C, (NH + NKV) * HD}, {"self_attn.o_proj", C, NH * HD, 0},
                           {"mlp.gate_proj", I, C, 0},                  {"mlp.up_proj", I, C, I},
                           {"mlp.down_proj", C, I, 0}};
  for (int nested = 0; nested <= 1; nested++) {
    struct zo_q4_table t;
    EXPECT(zo_q4_table_build(&mc, 64, ZO_QUANT4_NF4, nested, &t) == 0);
    expect_parts(&t, "model.layers", L, w, 7);
    EXPECT(t.nbytes == want_bytes(w, L, 7, 64, nested));
    zo_q4_table_free(&t);
  }
  return zo_test_expect_failed_since(before);
}

static int test_phi3_fused(void) {
  const int before = zo_test_n_expect_failed;
  enum { L = 1, NH = 4, C = 32, I = 64 };
  struct zo_model_config mc = {.arch = ZO_ARCH_LLAMA, .family = ZO_FAMILY_PHI3, .n_layer = L, .n_head = NH,
                                     .n_kv_head = NH, .n_embd = C, .intermediate_size = I, .vocab_size = 64,
                                     .max_seq_len = 16, .rope_theta = 1e4};
  EXPECT(zo_model_config_check(&mc) == 0);
  const struct want w[] = {{"self_attn.qkv_proj", 3 * C, C, 0}, {"self_attn.o_proj", C, C, 0},
                           {"mlp.gate_up_proj", 2 * I, C, 0},    {"mlp.down_proj", C, I, 0}};
  struct zo_q4_table t;
  EXPECT(zo_q4_table_build(&mc, 128, ZO_QUANT4_FP4, false, &t) == 0);
  expect_parts(&t, "model.layers", L, w, 4);
  EXPECT(t.nbytes == want_bytes(w, L, 4, 128, false));
  zo_q4_table_free(&t);
  return zo_test_expect_failed_since(before);
}

static int test_gpt2_conv1d(void) {
  const int before = zo_test_n_expect_failed;
  enum { L = 3, C = 32 };
  struct zo_model_config mc = {.arch = ZO_ARCH_GPT2, .n_layer = L, .n_head = 4, .n_embd = C,
                                     .vocab_size = 64, .max_seq_len = 16};
  EXPECT(zo_model_config_check(&mc) == 0);
  const struct want w[] = {{"attn.c_attn", 3 * C, C, 0}, {"attn.c_proj", C, C, 0},
                           {"mlp.c_fc", 4 * C, C, 0},    {"mlp.c_proj", C, 4 * C, 0}};
  struct zo_q4_table t;
  EXPECT(zo_q4_table_build(&mc, 64, ZO_QUANT4_NF4, true, &t) == 0);
  expect_parts(&t, "transformer.h", L, w, 4);
  EXPECT(t.nbytes == want_bytes(w, L, 4, 64, true));
  zo_q4_table_free(&t);
  return zo_test_expect_failed_since(before);
}

/* Every part of a GQA Llama quantized into a host arena: its descriptor, read
 * by matmul_q4_forward over the identity (out = W^T, exact), gives the
 * weight that zo_quant4_quantize / zo_quant4_dequantize (nested: through
 * zo_quant4_nested_*) make of the part's rows on their own. */
static int test_quantize_arena(void) {
  const int before = zo_test_n_expect_failed;
  enum { L = 2, NH = 4, NKV = 2, C = 32, I = 48, HD = 12 };
  struct zo_model_config mc = {.arch = ZO_ARCH_LLAMA, .n_layer = L, .n_head = NH, .n_kv_head = NKV, .n_embd = C,
                               .intermediate_size = I, .head_dim = HD, .vocab_size = 64, .max_seq_len = 16,
                               .rope_theta = 1e4};
  EXPECT(zo_model_config_check(&mc) == 0);
  zo_backend_t be = zo_backend_cpu();
  uint64_t rng = 48;
  for (int nested = 0; nested <= 1; nested++) {
    struct zo_q4_table t;
    EXPECT(zo_q4_table_build(&mc, 64, ZO_QUANT4_NF4, nested, &t) == 0);
    char *arena = aligned_alloc(256, t.nbytes);
    ZO_ASSERT(arena);
    for (int k = 0; k < t.n_parts; k++) {
      struct zo_q4_part *p = &t.parts[k];
      const size_t numel = (size_t)p->OC * (size_t)p->C, nb = (numel + 63) / 64;
      float *rows = zo_test_xmalloc(numel * sizeof *rows), *want = zo_test_xmalloc(numel * sizeof *want);
      for (size_t e = 0; e < numel; e++) {
        rng = rng * 6364136223846793005u + 1442695040888963407u;
        rows[e] = (float)((double)(rng >> 11) / 9007199254740992.0 - 0.5);
      }
      EXPECT(zo_q4_part_quantize(&t, p, arena, rows, ZO_F32) == 0);
      /* the truth: the library on these rows alone */
      uint8_t *packed = zo_test_xmalloc(numel / 2), qabs[64];
      float absmax[64], absmax2[1];
      ZO_ASSERT(nb <= 64);
      zo_quant4_quantize(packed, absmax, rows, ZO_F32, numel, 64, ZO_QUANT4_NF4);
      if (nested) {
        struct zo_quant4_nested nq = {.qabsmax = qabs, .absmax2 = absmax2};
        zo_quant4_nested_quantize(&nq, absmax, nb, zo_quant4_nested_map());
        zo_quant4_nested_dequantize(absmax, &nq, nb, zo_quant4_nested_map());
      }
      zo_quant4_dequantize(want, packed, absmax, numel, 64, ZO_QUANT4_NF4);
      float *eye = zo_test_xmalloc((size_t)p->C * (size_t)p->C * sizeof *eye);
      float *wt = zo_test_xmalloc((size_t)p->C * (size_t)p->OC * sizeof *wt);
      for (int a = 0; a < p->C; a++)
        for (int b = 0; b < p->C; b++) eye[a * p->C + b] = a == b;
      be->matmul_q4_forward(wt, eye, zo_q4_part_weight(&t, p, arena), NULL, p->C, ZO_F32, NULL);
      int bad = 0;
      for (int o = 0; o < p->OC; o++)
        for (int c = 0; c < p->C; c++) bad += wt[c * p->OC + o] != want[o * p->C + c];
      if (bad) fprintf(stderr, "    %s (nested %d): %d of %zu elements differ\n", p->name, nested, bad, numel);
      EXPECT(bad == 0);
      free(rows), free(want), free(packed), free(eye), free(wt);
    }
    free(arena);
    zo_q4_table_free(&t);
  }
  return zo_test_expect_failed_since(before);
}

static int test_blocksize_refused(void) {
  const int before = zo_test_n_expect_failed;
  struct zo_model_config mc = {.arch = ZO_ARCH_GPT2, .n_layer = 1, .n_head = 4, .n_embd = 32,
                                     .vocab_size = 64, .max_seq_len = 16};
  struct zo_q4_table t;
  EXPECT(zo_q4_table_build(&mc, 48, ZO_QUANT4_NF4, false, &t) == -EINVAL && strstr(zo_last_error(), "blocksize 48"));
  EXPECT(t.n_parts == 0 && t.parts == NULL);
  return zo_test_expect_failed_since(before);
}

int main(void) {
  static const struct zo_test tests[] = {ZO_TEST(llama_gqa), ZO_TEST(phi3_fused), ZO_TEST(gpt2_conv1d),
                                         ZO_TEST(quantize_arena), ZO_TEST(blocksize_refused)};
  return ZO_TEST_MAIN(tests);
}
