/* TensorBoard event files: scalars a run logs (loss, learning rate, gradient
 * norm, tokens/s, validation loss), one Event per call, in the format
 * TensorBoard and tf.summary read: TFRecord framing (length, masked CRC32C
 * of the length, the serialized Event, masked CRC32C of it) around Event
 * protobufs (engine/train/proto/event.proto, serialized by protobuf-c), the first
 * one carrying file_version "brain.Event:2". Each record goes to the file in
 * one write(2) as it is logged, so a killed run keeps every event before the
 * kill. Not thread-safe: one writer per thread. */
#ifndef ZO_TENSORBOARD_H
#define ZO_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>

typedef struct zo_tb *zo_tb_t;

struct zo_tb_scalar {
  const char *tag;  /* e.g. "train/loss" */
  double value;     /* stored as float (TensorBoard's simple_value) */
};

/* Creates DIR when missing (with its parents) and a new event file in it,
 * events.out.tfevents.<unix seconds>.<host>.<pid> (every file of a
 * directory is read as one run, so a resumed run adds its own file), and
 * writes the file-version event. Returns NULL, with the reason (naming
 * `key`, the config key of DIR, and the path) for zo_last_error(). */
zo_tb_t zo_tb_init(const char *dir, const char *key);

/* Appends one Event at `step` with wall time `wall_time` (Unix seconds)
 * holding the n scalars. Returns 0 or -errno (a write that failed or fell
 * short, named with the file). */
int zo_tb_write(zo_tb_t tb, long step, double wall_time, const struct zo_tb_scalar *v, size_t n);

/* The event file's path. */
const char *zo_tb_path(zo_tb_t tb);

/* Closes the file. Accepts NULL. */
void zo_tb_free(zo_tb_t tb);

/* TFRecord's masked CRC32C: ((crc >> 15) | (crc << 17)) + 0xa282ead8 over
 * the Castagnoli CRC of the n bytes (ISA-L's crc32_iscsi). */
uint32_t zo_tb_masked_crc32c(const void *data, size_t n);

#endif
