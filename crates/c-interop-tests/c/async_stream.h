/*
 * The C side of the async device stream tests (async_stream.c): a C
 * ArrowAsyncDeviceStreamHandler that consumes a Rust producer, and a C
 * producer running on its own pthread that feeds a Rust handler. Every
 * struct here has a #[repr(C)] twin in src/async_stream.rs.
 *
 * Both sides may be called from several threads (the Rust side runs on a
 * tokio pool, the C producer on a pthread); each object guards its counters
 * with its own mutex, and the getters below return consistent snapshots.
 */
#ifndef C_INTEROP_TESTS_ASYNC_STREAM_H
#define C_INTEROP_TESTS_ASYNC_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "arrow_device.h"
#include "batch.h"

/* ---- consumer ------------------------------------------------------------ */

/* Per-array details are kept for this many arrays; later ones are counted. */
#define INTEROP_ASYNC_BATCHES 16
#define INTEROP_ASYNC_TEXT 512

/* How the consumer behaves. The pointers are read during the callbacks and
 * must outlive the stream. */
struct interop_async_consumer_config {
  /* on_schema expects this "+s" and refuses anything else with EINVAL. */
  struct interop_struct_expect schema;
  /* The n of the request made from inside on_schema. Values <= 0 are passed
   * as they are: the producer must answer them with on_error. */
  int64_t initial_request;
  /* 0: on_next_task extracts the task (and reads the array) itself;
   * 1: it only copies the task, and interop_async_consumer_extract_stored
   * extracts the copies later, from the caller's thread. */
  int32_t extract_later;
  /* After this many tasks, on_next_task calls cancel (then request(1) and
   * cancel again, which the spec makes NOPs) and requests nothing more; 0:
   * on_schema cancels instead of requesting; -1: never. */
  int64_t cancel_after;
  /* After this many tasks, on_next_task stops requesting (without
   * cancelling), so the producer waits for credit; -1: never. */
  int64_t stall_after;
  /* The additional_metadata key whose value is copied to the report; NULL:
   * none. */
  const char* metadata_key;
};

/* What the consumer saw. `status` is 0, or the line of async_stream.c or
 * batch.c whose check failed first. */
struct interop_async_consumer_report {
  int32_t status;
  /* ArrowAsyncProducer.device_type, read in on_schema. */
  int32_t producer_device_type;
  int32_t on_schema_calls;
  int32_t on_error_calls;
  int32_t release_calls;
  /* on_next_task calls with a NULL task (the end of the stream). */
  int32_t end_markers;
  /* Callbacks entered while another callback was running, on this thread
   * (re-entrancy) or another one (concurrency). */
  int32_t violations;
  /* Callbacks entered after release. */
  int32_t calls_after_release;
  /* Callbacks other than release entered with handler->producer NULL
   * (spec: it "MUST be populated before calling any methods other than
   * release"). */
  int32_t producer_missing;
  /* on_error's code, and 1 when the schema's release set release to NULL. */
  int32_t error_code;
  int32_t schema_release_nulled;
  /* cancel calls made (the idempotence check makes it 2 per cancel). */
  int32_t cancel_calls;
  /* Pairs in additional_metadata; -1 when it was NULL. */
  int32_t metadata_pairs;
  /* 1 when metadata_key was found. */
  int32_t metadata_key_found;
  /* on_next_task calls with a task. */
  int64_t tasks;
  /* The sum of the n > 0 requested before cancel, and request calls made. */
  int64_t credit_granted;
  int64_t request_calls;
  /* Tasks that arrived with no credit left (spec: on_next_task only "up to
   * a maximum of the total sum" of request calls). */
  int64_t credit_exceeded;
  int64_t tasks_after_cancel;
  /* extract_data calls that returned 0 / non-zero. */
  int64_t extracted;
  int64_t extract_failures;
  /* Stored tasks extracted once the handler was released. */
  int64_t extracted_after_release;
  /* Arrays read, their rows, and (CPU only) the sum of child 0. */
  int64_t batches;
  int64_t total_rows;
  int64_t sum;
  /* Arrays whose device_type differed from the producer's. */
  int64_t device_type_mismatches;
  /* Arrays with a non-NULL sync_event. */
  int64_t sync_events;
  /* Arrays whose release callback set release to NULL. */
  int64_t arrays_release_nulled;
  /* Per array: device_id. */
  int64_t device_ids[INTEROP_ASYNC_BATCHES];
  char metadata_value[INTEROP_ASYNC_TEXT];
  char error_message[INTEROP_ASYNC_TEXT];
};

struct interop_async_consumer;

/* A new consumer, or NULL when out of memory. Its handler's private_data is
 * malloc'd here and freed by the handler's release. */
struct interop_async_consumer* interop_async_consumer_new(
    const struct interop_async_consumer_config* config);

/* The handler to give the producer; valid until interop_async_consumer_free. */
struct ArrowAsyncDeviceStreamHandler* interop_async_consumer_handler(
    struct interop_async_consumer* consumer);

/* Extracts (and reads, then releases) every stored task, oldest first;
 * returns how many. */
int64_t interop_async_consumer_extract_stored(struct interop_async_consumer* consumer);

/* Waits until on_next_task returned for at least `n` tasks; returns 0, or
 * ETIMEDOUT after `timeout_ms`. */
int interop_async_consumer_wait_tasks(struct interop_async_consumer* consumer, int64_t n,
                                      int64_t timeout_ms);

/* A copy of the report. Only consistent while no callback runs: read it
 * once the producer released the handler. */
void interop_async_consumer_report(struct interop_async_consumer* consumer,
                                   struct interop_async_consumer_report* out);

/* Frees the consumer: tasks still stored are extracted with NULL first.
 * Returns 0, or EBUSY (and frees nothing) when the handler was handed out
 * and not released yet, as a producer may still call it. */
int interop_async_consumer_free(struct interop_async_consumer* consumer);

size_t interop_async_consumer_report_size(void);

/* ---- producer ------------------------------------------------------------ */

/* How the producer behaves. Batch i (0-based) is a CPU struct<a: int32,
 * b: utf8> of `rows_per_batch` rows, with a = i * rows_per_batch + r and
 * b = "x" followed by a, for row r. additional_metadata holds one pair,
 * "rows" = n_batches * rows_per_batch. */
struct interop_async_producer_config {
  int64_t n_batches;
  int64_t rows_per_batch;
  /* Instead of batch `fail_at`: on_error(EIO, "c async producer failed at
   * batch <fail_at>", NULL), then release; -1: never. */
  int64_t fail_at;
  /* ArrowAsyncProducer.device_type. The arrays are CPU arrays whatever it
   * says. */
  int32_t device_type;
  /* 1: batch i is only sent once interop_async_producer_allow granted more
   * than i batches (on top of the consumer's credit). */
  int32_t gated;
  /* After cancel: 1 sends batches while credit remains (spec: "finish out
   * any remaining tasks"), 0 releases at once. Neither calls on_error. */
  int32_t drain_after_cancel;
};

/* What the producer and the structs it handed out did. */
struct interop_async_producer_counters {
  int64_t request_calls;
  /* The sum of the valid n, and the n of the first valid request. */
  int64_t credit_total;
  int64_t first_request;
  int64_t invalid_requests;
  int64_t requests_after_cancel;
  int64_t cancel_calls;
  /* on_next_task calls with a task, those made after cancel, and with NULL. */
  int64_t tasks_sent;
  int64_t tasks_after_cancel;
  int64_t end_markers;
  int64_t on_error_calls;
  /* extract_data calls: all, with NULL out, with a non-NULL out, and calls
   * on a task extracted before (refused with EINVAL). */
  int64_t extract_calls;
  int64_t extract_null;
  int64_t extract_moved;
  int64_t extract_repeated;
  /* Release calls on the root arrays, their children, the root schema. */
  int64_t array_releases;
  int64_t child_array_releases;
  int64_t schema_releases;
  /* The most tasks sent but not yet credited back: tasks_sent minus the
   * credit requested after the first request. */
  int64_t max_in_flight;
  /* malloc minus free for arrays and schemas: 0 once all are released. */
  int64_t live_allocations;
  /* What on_schema returned, and the first non-zero on_next_task result. */
  int32_t on_schema_code;
  int32_t on_next_task_code;
  /* handler->release calls made, and 1 once the thread freed its
   * ArrowAsyncProducer and ended. */
  int32_t handler_releases;
  int32_t finished;
};

struct interop_async_producer;

/* Starts the producer's thread on `handler` (whose release it calls, once,
 * last). Returns NULL when out of memory or the thread did not start; the
 * handler is then released. */
struct interop_async_producer* interop_async_producer_start(
    const struct interop_async_producer_config* config,
    struct ArrowAsyncDeviceStreamHandler* handler);

/* Lets `n` more batches through a gated producer. */
void interop_async_producer_allow(struct interop_async_producer* producer, int64_t n);

/* Waits until at least `n` tasks were sent (or the thread ended); returns 0,
 * or ETIMEDOUT after `timeout_ms`. */
int interop_async_producer_wait_sent(struct interop_async_producer* producer, int64_t n,
                                     int64_t timeout_ms);

/* Joins the thread; returns 0, or ETIMEDOUT (thread left running) when it
 * did not end within `timeout_ms`. */
int interop_async_producer_join(struct interop_async_producer* producer, int64_t timeout_ms);

void interop_async_producer_counters(struct interop_async_producer* producer,
                                     struct interop_async_producer_counters* out);

/* Frees the producer. Returns 0, or EBUSY (and frees nothing) while its
 * thread runs or arrays it handed out are alive. */
int interop_async_producer_free(struct interop_async_producer* producer);

size_t interop_async_producer_counters_size(void);

#endif /* C_INTEROP_TESTS_ASYNC_STREAM_H */
