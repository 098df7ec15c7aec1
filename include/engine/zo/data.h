/* Training data: token files mapped read-only and cut into micro-batches.
 * Four formats: raw UTF-8 text (each byte is one token, vocab 256), llm.c
 * token shards (256 x int32 header, then uint16 tokens for GPT-2's version 1
 * or uint32 tokens for Llama 3's version 7, as the header says) and flat
 * uint16 or uint32 token files (little-endian, no header). Files are mmap'ed
 * and validated once at open: a file that cannot give one micro-batch, or
 * holds a token id >= vocab_size, is refused there. Micro-batches are then
 * read with pread (one window each, never the whole file), so a file
 * truncated or rewritten under a running job is an error naming it, never a
 * SIGBUS or an id beyond the vocabulary.
 * The order of micro-batches is a pure function of (file, B, T, shuffle, seed,
 * micro-batch index), so resuming at a position reproduces the stream exactly.
 * A loss mask may sit beside a token file: PATH.mask (ZO_DATA_MASK_SUFFIX),
 * one byte per token, 1 where the token is trained as a target and 0 where
 * it is not (the prompt of instruction data, zoffload prepare). The loader
 * then sets the target of every masked token to -1 (no target: no loss, no
 * gradient); the training loss is the mean over the targets left, over the
 * whole step (every micro-batch and rank: zo_data_count_targets).
 * One handle is used by one thread at a time. */
#ifndef ZO_DATA_H
#define ZO_DATA_H

#include "zo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

enum zo_data_format {
  ZO_DATA_TEXT, /* raw bytes; token = byte value (0..255) */
  ZO_DATA_LLMC, /* llm.c shard: header int32[256] = {magic, version, n_tokens, 0...}, then
                 uint16 (version 1) or uint32 (version 7) tokens */
  ZO_DATA_U16,  /* flat little-endian uint16 tokens, no header */
  ZO_DATA_U32,  /* flat little-endian uint32 tokens, no header */
};

/* llm.c's two headers: {magic, version} decide the token width. */
#define ZO_LLMC_MAGIC 20240520   /* GPT-2 shards: uint16 tokens */
#define ZO_LLMC_VERSION 1
#define ZO_LLMC32_MAGIC 20240801 /* Llama 3 shards: uint32 tokens */
#define ZO_LLMC32_VERSION 7
#define ZO_LLMC_HEADER_INTS 256 /* int32 words; 1024 bytes */

/* The loss mask beside a token file: its path with this appended. */
#define ZO_DATA_MASK_SUFFIX ".mask"

struct zo_data;

/* Opens path as a token file of format fmt for micro-batches of B rows of T
 * tokens. vocab_size: every token id must be below it. shuffle, seed: see
 * "Order" below. Maps the file read-only and scans every token once (OpenMP;
 * skipped when vocab_size exceeds every id the format can hold).
 * Returns the handle, or NULL with a message for zo_last_error() that names
 * the file and the problem: missing or unreadable, a directory, empty, llm.c
 * magic or version wrong (found vs the valid pairs), llm.c header token count
 * vs file size (truncated, or trailing bytes), a uint16 file of odd size or a
 * uint32 file whose size is not a multiple of 4, fewer than B*T+1 tokens, or
 * the first token id >= vocab_size (its value and index; a uint32 id above
 * INT32_MAX is named as not fitting the int32 micro-batches).
 * B >= 1, T >= 1 and vocab_size >= 1 are contracts (abort).
 *
 * Order. Let N be the number of tokens, BT = B*T, and i the micro-batch index
 * (micro-batches handed out since position 0, counting from 0 across steps
 * and epochs). Micro-batch i reads a window of BT+1 tokens w[0..BT]: inputs
 * row r = w[r*T .. r*T+T), targets row r = w[r*T+1 .. r*T+T+1), i.e. the flat
 * (B,T) targets are the flat inputs shifted by one token.
 *  - shuffle false: w[k] = token[(i*BT + k) mod N]. The token stream is read
 *    as if the file repeated forever: a window that straddles the end takes
 *    the file's last tokens and continues from token 0 (no token is skipped
 *    or padded), and later windows continue from where that one ended, so
 *    when BT does not divide N the windows of the second pass start at
 *    different offsets than those of the first.
 *  - shuffle true: the file is cut into n_windows = floor((N-1)/BT) windows;
 *    window j is token[j*BT .. j*BT+BT] (consecutive windows share one token,
 *    their inputs do not overlap; the last N-1 - n_windows*BT tokens are never
 *    read). Epoch e = i / n_windows reads window perm_e[i mod n_windows], where
 *    perm_e is a Fisher-Yates shuffle of 0..n_windows-1 (for k from
 *    n_windows-1 down to 1 swap k with a uniform j in [0, k], Lemire's
 *    unbiased bounded draw) driven by xoshiro256** seeded through splitmix64
 *    from (seed, e). Every epoch visits each window exactly once; the same
 *    seed gives the same stream, another seed another one. */
struct zo_data *zo_data_open(const char *path, enum zo_data_format fmt, int vocab_size, int B, int T,
                             bool shuffle, uint64_t seed);
/* Rank `rank` of n_ranks data-parallel ranks: the micro-batches are those
 * of zo_data_open with n_ranks * B rows (the global micro-batch: the
 * "Order" above with BT = n_ranks * B * T, its checks too), and this handle
 * hands out rows [rank * B, (rank + 1) * B) of each, B rows of T tokens.
 * So, with shuffle on or off, the ranks together read exactly what one
 * process with micro-batch n_ranks * B reads, row for row, and the position
 * counts global micro-batches (seek and resume are rank-count independent
 * for the same global micro-batch). zo_data_open is rank 0 of 1.
 * 0 <= rank < n_ranks is a contract. */
struct zo_data *zo_data_open_rank(const char *path, enum zo_data_format fmt, int vocab_size, int B, int T,
                                  bool shuffle, uint64_t seed, int rank, int n_ranks);
/* With a loss mask beside path (PATH.mask, see above) the handle reads it
 * too: it must hold exactly one byte per token, each 0 or 1, else NULL with a
 * message naming both files and the sizes or the byte. */
/* Unmaps and frees. Accepts NULL. */
void zo_data_close(struct zo_data *d);

/* Fills inputs and targets, each (B,T) int32, with micro-batch number
 * zo_data_position(d) (this rank's rows of it) and advances the position by one. Synchronous, no
 * allocation. Returns 0 (the stream never ends: it wraps, see "Order"), or,
 * when the file changed since open, -EIO (truncated: the file, its size then
 * and now) or -EINVAL (a token id >= vocab_size), with the message. */
int zo_data_next(struct zo_data *d, int32_t *inputs, int32_t *targets);
/* Whether the file has a loss mask (then masked targets are -1). */
bool zo_data_has_mask(const struct zo_data *d);
/* Targets trained in global micro-batches [first, first + n) (all ranks'
 * rows): with a mask, the mask bytes of their targets summed; without,
 * n * ranks * B * T. Every rank computes the same count from the file alone,
 * so the step's loss can be the mean over its trained targets before any of
 * them is computed. Does not move the position. Returns 0 or -errno (the
 * mask file changed). */
int zo_data_count_targets(struct zo_data *d, uint64_t first, int n, size_t *n_targets);
/* Micro-batches handed out so far (the index of the next one). */
uint64_t zo_data_position(const struct zo_data *d);
/* Makes micro_batch_index the next micro-batch, for exact resume: after
 * seek(k) the stream equals that of a fresh handle after k calls to next.
 * O(1); with shuffle the epoch's permutation is rebuilt on the next call
 * (O(n_windows)). Returns 0. */
int zo_data_seek(struct zo_data *d, uint64_t micro_batch_index);
/* Tokens in the file (N above). */
size_t zo_data_n_tokens(const struct zo_data *d);

/* "text", "llmc", "u16", "u32" <-> enum. parse returns 0, or -EINVAL with a message
 * listing the valid names. */
int zo_data_format_parse(const char *name, enum zo_data_format *fmt);
const char *zo_data_format_name(enum zo_data_format fmt);

/* Reads and checks the llm.c header of path (magic, version, token count vs
 * file size). Returns 0 and sets *n_tokens and, when token_nbytes is not
 * NULL, *token_nbytes (2 for version 1, 4 for version 7), or a negative errno
 * with a message (-ENOENT, -EISDIR, -EINVAL for a bad header or size, -EIO). */
int zo_data_read_llmc_header(const char *path, size_t *n_tokens, size_t *token_nbytes);

/* Write n tokens atomically (zo_atomic_file: a temporary file beside path,
 * fsync, rename, fsync of the directory): as an llm.c shard with a version 1
 * (uint16) or version 7 (uint32) header, or as a flat uint16 or uint32 file.
 * The uint32 writers refuse a token id above INT32_MAX (the readers would).
 * Returns 0 or a negative errno with a message; -EINVAL for more than
 * INT32_MAX tokens in a shard or an id that does not fit int32. */
int zo_data_write_llmc(const char *path, const uint16_t *tokens, size_t n);
int zo_data_write_llmc32(const char *path, const uint32_t *tokens, size_t n);
int zo_data_write_u16(const char *path, const uint16_t *tokens, size_t n);
int zo_data_write_u32(const char *path, const uint32_t *tokens, size_t n);
/* The loss mask of a token file written by one of the above: n bytes, each 0
 * or 1, to token_path + ZO_DATA_MASK_SUFFIX, atomically. Returns 0 or -errno. */
int zo_data_write_mask(const char *token_path, const uint8_t *mask, size_t n);

/* `zoffload prepare`: concatenates the bytes of n_paths text files (in the
 * order given) into one byte-level token stream and writes it as two flat
 * uint16 files: the first n_train tokens to out_train and the last
 * n_val = floor(total * val_fraction) tokens to out_val (a cut at a byte
 * boundary; it may split a UTF-8 sequence). val_fraction in [0, 1); out_val
 * may be NULL only when val_fraction is 0, and when given its split must not
 * be empty. Both files are written in full under temporary names and then
 * committed atomically (see zo_data_write_llmc), train first: an error leaves
 * no temporary file, and an error before the commits (bad input, full disk)
 * leaves the old outputs unchanged. Streams the inputs through a fixed 1 MiB buffer. n_train, n_val (tokens)
 * may be NULL. Returns 0 or a negative errno with a message naming the file;
 * -EINVAL for bad arguments or an empty split. */
int zo_data_prepare(const char *const *text_paths, int n_paths, const char *out_train, const char *out_val,
                    double val_fraction, size_t *n_train, size_t *n_val);

#ifdef __cplusplus
}
#endif
#endif /* ZO_DATA_H */
