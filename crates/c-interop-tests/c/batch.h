/*
 * What the C consumers and producers of struct batches share (batch.c):
 * the line-number checks, reading a "+s" schema and batch the way a C
 * consumer would (summing an integer child by hand, honouring validity
 * bitmaps and offsets), and building the struct<a: int32, b: utf8> CPU
 * batches of the C producers, with release callbacks that report every
 * allocation and release to their owner.
 *
 * Used by consumer.c, stream.c (sync stream) and async_stream.c. Plain C99:
 * no threads here; an owner that is called from several threads locks in
 * its own counting callback.
 */
#ifndef C_INTEROP_TESTS_BATCH_H
#define C_INTEROP_TESTS_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "arrow_device.h"

/* Each check returns the line number of the first failure, or 0. */
#define REQUIRE(cond)             \
  do {                            \
    if (!(cond)) return __LINE__; \
  } while (0)

#define PROPAGATE(expr)           \
  do {                            \
    int line_ = (expr);           \
    if (line_ != 0) return line_; \
  } while (0)

/* Bit `i` of a validity bitmap (least significant bit first). */
int interop_bit_is_set(const void* bitmap, int64_t i);

/* ---- reading ------------------------------------------------------------- */

/* A "+s" schema as a consumer expects it: `n_children` children of these
 * formats and names. Its Rust twin is RawStructExpect in src/lib.rs. */
struct interop_struct_expect {
  int64_t n_children;
  const char* const* formats;
  const char* const* names;
};

/* Checks that `schema` is an unreleased "+s" with the expected children. */
int interop_check_struct_schema(const struct ArrowSchema* schema,
                                const struct interop_struct_expect* expect);

/* Whether child 0 holds integers ("i" or "l") a consumer can sum. */
int interop_struct_summable(const struct interop_struct_expect* expect);

/* Adds the non-null values of child 0 ("i" or "l", per `format`) of a CPU
 * struct array to `sum`. A struct slot that is null hides the child's
 * value; the struct's offset applies on top of the child's own (C Data
 * Interface, "Struct layout"). */
int interop_sum_child0(const struct ArrowArray* root, const char* format, int64_t* sum);

/* What interop_read_struct_batch saw of one batch, filled as far as it got
 * before a failed check. */
struct interop_batch_seen {
  /* 1 when the batch's device_type differed from the stream's. */
  int32_t device_type_mismatch;
  int32_t has_sync_event;
  /* The batch's length (0 when it was negative), and (CPU only) the sum of
   * child 0. */
  int64_t rows;
  int64_t sum;
};

/* Reads one batch of a stream of `stream_device_type` whose schema is
 * `expect`: checks its metadata and, when both the stream and the batch are
 * on the CPU and child 0 is summable, sums child 0. Device buffers are never
 * touched: they are not host memory, and the data is only ready once
 * sync_event has completed. */
int interop_read_struct_batch(const struct ArrowDeviceArray* batch, int32_t stream_device_type,
                              const struct interop_struct_expect* expect,
                              struct interop_batch_seen* seen);

/* ---- building ------------------------------------------------------------ */

/* What the structs built here report to their owner, from whichever thread
 * releases them. */
enum interop_batch_event {
  INTEROP_ALLOCATED,
  INTEROP_FREED,
  INTEROP_ARRAY_RELEASED,
  INTEROP_CHILD_ARRAY_RELEASED,
  INTEROP_SCHEMA_RELEASED,
  INTEROP_CHILD_SCHEMA_RELEASED
};

/* The owner's counting callback and its context, copied into every struct
 * built: the owner must outlive each of them. */
struct interop_batch_counter {
  void (*count)(void* owner, enum interop_batch_event event);
  void* owner;
};

/* calloc / free that report INTEROP_ALLOCATED / INTEROP_FREED. `counter`
 * may lie inside the memory freed. */
void* interop_counted_calloc(const struct interop_batch_counter* counter, size_t size);
void interop_counted_free(const struct interop_batch_counter* counter, void* p);

/* Fills `out` with the schema struct<a: int32, b: utf8>, both children
 * nullable. Returns 0, or ENOMEM with `out` released. */
int interop_make_ab_schema(const struct interop_batch_counter* counter, struct ArrowSchema* out);

/* Fills `out` with a CPU batch (device_id -1, no sync_event) of `rows` rows:
 * struct<a: int32, b: utf8> with a = first, first + 1, ... and b = "x<a>";
 * with `n_children` 1 only child a. first + rows must fit int32. Returns 0,
 * or ENOMEM with `out` left as it was. */
int interop_make_ab_batch(const struct interop_batch_counter* counter, int64_t first,
                          int64_t rows, int64_t n_children, struct ArrowDeviceArray* out);

#endif /* C_INTEROP_TESTS_BATCH_H */
