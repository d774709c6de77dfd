/*
 * The C side of the sync device stream tests (stream.c): a C consumer of an
 * ArrowDeviceArrayStream and a hand-written C producer of one. Every struct
 * here has a #[repr(C)] twin in src/stream.rs.
 */
#ifndef C_INTEROP_TESTS_STREAM_H
#define C_INTEROP_TESTS_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "arrow_device.h"
#include "batch.h"

/* ---- consumer ------------------------------------------------------------ */

/* Per-batch details are kept for this many batches; later ones are only
 * counted. */
#define INTEROP_STREAM_BATCHES 16
#define INTEROP_STREAM_TEXT 512

/* What the consumer is told to expect: get_schema's "+s" and its
 * children, and the batch to keep. */
struct interop_stream_expect {
  struct interop_struct_expect schema;
  /* The batch moved out of the stream's output (bitwise copy, source marked
   * released) and kept until after the stream is released; -1 for none. */
  int64_t keep_batch;
};

/* What the consumer saw. `status` is 0, or the line of stream.c or batch.c
 * whose check failed; `code` is 0, or the non-zero code get_schema / get_next returned,
 * with get_last_error's message in `message` ("" for NULL). */
struct interop_stream_report {
  int32_t status;
  int32_t code;
  int32_t stream_device_type;
  /* 1 when the schema's release callback set release to NULL. */
  int32_t schema_release_nulled;
  /* Batches received (end of stream and errors excluded). */
  int64_t batches;
  int64_t total_rows;
  /* CPU streams only: sum of the non-null values of child 0 ("i" or "l"),
   * honouring validity bitmaps and offsets of the struct and the child. */
  int64_t sum;
  /* Batches whose device_type differed from the stream's. */
  int64_t device_type_mismatches;
  /* Batches with a non-NULL sync_event. */
  int64_t sync_events;
  /* Batches (the kept one included) whose release set release to NULL. */
  int64_t batches_release_nulled;
  /* Per batch: length, n_children, device_id. */
  int64_t lengths[INTEROP_STREAM_BATCHES];
  int64_t n_children[INTEROP_STREAM_BATCHES];
  int64_t device_ids[INTEROP_STREAM_BATCHES];
  /* The kept batch: 1 when it was held past the stream's release, its sum
   * of child 0 re-read then (CPU only), and 1 when its release (on the
   * moved copy) set release to NULL. */
  int32_t kept_after_stream_release;
  int32_t kept_release_nulled;
  int64_t kept_sum;
  /* 1 when the stream's release callback set release to NULL. */
  int32_t stream_release_nulled;
  char message[INTEROP_STREAM_TEXT];
};

/* Reads `stream` to its end or its first error, then releases it (always,
 * if it was not released). Buffers are only read when the stream's
 * device_type is ARROW_DEVICE_CPU; otherwise only the metadata is. */
void interop_consume_stream(struct ArrowDeviceArrayStream* stream,
                            const struct interop_stream_expect* expect,
                            struct interop_stream_report* report);

size_t interop_stream_report_size(void);

/* ---- producer ------------------------------------------------------------ */

/* What the producer's callbacks did; owned by the caller, who keeps it alive
 * until the stream and every array and schema it produced are released.
 * Only the thread using the stream touches it. */
struct interop_stream_counters {
  /* Release calls on get_next's root arrays and on their children. */
  int64_t array_releases;
  int64_t child_array_releases;
  /* Release calls on get_schema's root schemas and on their children. */
  int64_t schema_releases;
  int64_t child_schema_releases;
  int64_t stream_releases;
  int64_t get_next_calls;
  /* Batches handed out (not counting the end of the stream). */
  int64_t batches_produced;
  /* malloc calls minus free calls: 0 once everything is released. */
  int64_t live_allocations;
};

/* How the producer behaves. Batch i (0-based) is a struct<a: int32,
 * b: utf8> of `rows_per_batch` rows, with a = i * rows_per_batch + r and
 * b = "x" followed by a, for row r. */
struct interop_stream_config {
  int64_t n_batches;
  int64_t rows_per_batch;
  /* get_next for this batch index returns EIO, with get_last_error
   * "c producer failed at batch <index>", and so do later calls; -1: never. */
  int64_t fail_at;
  /* This batch has only child "a" (n_children 1), unlike get_schema; -1:
   * never. */
  int64_t one_child_at;
  /* The stream's declared device_type. The arrays are CPU arrays
   * (device_type ARROW_DEVICE_CPU) whatever it says. */
  int32_t device_type;
};

/* Fills `out` with a new stream; returns 0, or ENOMEM / EINVAL with `out`
 * left released. */
int interop_make_stream(const struct interop_stream_config* config,
                        struct interop_stream_counters* counters,
                        struct ArrowDeviceArrayStream* out);

size_t interop_stream_counters_size(void);

#endif /* C_INTEROP_TESTS_STREAM_H */
