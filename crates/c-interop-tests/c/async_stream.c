/*
 * Both sides of an async device stream (CDeviceDataInterface.rst, "Async
 * Device Stream Interface"), written as a C library would write them, with
 * the struct layout of Arrow C++'s abi.h (no ArrowAsyncProducer.release):
 *
 * - interop_async_consumer_*: an ArrowAsyncDeviceStreamHandler that checks
 *   the schema, reads handler->producer (device_type, additional_metadata),
 *   requests credit from inside on_schema and on_next_task, extracts each
 *   task there or later from the caller's thread, reads CPU arrays by hand
 *   and only the metadata of device arrays, and records every protocol
 *   breach it can see: callbacks running concurrently or re-entrantly,
 *   tasks beyond the credit granted, callbacks after release.
 * - interop_async_producer_*: a producer on its own pthread that sends
 *   struct<a: int32, b: utf8> CPU batches to a handler while the handler's
 *   credit allows, honours cancel, can fail mid-stream, and counts every
 *   request, extract_data and release so that the Rust consumer can be
 *   shown to apply back-pressure and to clean each task up exactly once.
 *
 * Reading and building the batches is shared with stream.c (batch.c).
 *
 * POSIX only (pthreads, clock_gettime).
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "async_stream.h"

static void copy_text(char* dst, size_t cap, const char* src, size_t n) {
  if (n > cap - 1) n = cap - 1;
  memcpy(dst, src, n);
  dst[n] = '\0';
}

static void deadline_after(struct timespec* deadline, int64_t timeout_ms) {
  clock_gettime(CLOCK_REALTIME, deadline);
  deadline->tv_sec += (time_t)(timeout_ms / 1000);
  deadline->tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (deadline->tv_nsec >= 1000000000L) {
    deadline->tv_sec += 1;
    deadline->tv_nsec -= 1000000000L;
  }
}

/* ======================================================================== */
/* Consumer                                                                 */
/* ======================================================================== */

struct interop_async_consumer {
  /* First member: a callback finds the consumer from `self` alone, without
   * private_data, which release frees. So callbacks made after release are
   * still detected safely. */
  struct ArrowAsyncDeviceStreamHandler handler;
  struct interop_async_consumer_config config;
  /* Guards in_callback, released and handed_out. The report is written by
   * the (serialized) callbacks; entering and leaving each callback goes
   * through the mutex, which orders those writes for later readers. */
  pthread_mutex_t mutex;
  pthread_cond_t changed;
  int in_callback;
  int released;
  int handed_out;
  /* on_next_task calls with a task that returned. */
  int64_t tasks_done;
  /* Copies of the tasks, in extract_later mode. */
  struct ArrowAsyncTask* stored;
  int64_t n_stored;
  int64_t cap_stored;
  struct interop_async_consumer_report report;
};

/* Behind handler.private_data: what one stream needs, freed by release. */
struct handler_private {
  /* handler->producer as seen in on_schema (spec: the consumer "CANNOT
   * assume that this is valid until the on_schema callback is called"). */
  struct ArrowAsyncProducer* producer;
  int cancelled;
};

static struct interop_async_consumer* consumer_of(struct ArrowAsyncDeviceStreamHandler* self) {
  return (struct interop_async_consumer*)(void*)self;
}

static void fail(struct interop_async_consumer* c, int line) {
  if (c->report.status == 0) c->report.status = line;
}

/* Marks a callback as running. Returns 1 when the handler was released
 * already: the callback must then touch nothing but the counters. */
static int enter(struct interop_async_consumer* c, int needs_producer) {
  int released;
  pthread_mutex_lock(&c->mutex);
  /* Spec ("Thread safety"): handler callbacks are serialized. */
  if (c->in_callback > 0) c->report.violations++;
  c->in_callback++;
  released = c->released;
  if (released) {
    c->report.calls_after_release++;
  } else if (needs_producer && c->handler.producer == NULL) {
    c->report.producer_missing++;
  }
  pthread_mutex_unlock(&c->mutex);
  return released;
}

static void leave(struct interop_async_consumer* c) {
  pthread_mutex_lock(&c->mutex);
  c->in_callback--;
  pthread_mutex_unlock(&c->mutex);
}

/* ---- reading arrays ------------------------------------------------------ */

/* Records one array's metadata and, for CPU data, the sum of child 0. */
static int read_array(struct interop_async_consumer* c, const struct ArrowDeviceArray* array) {
  struct interop_async_consumer_report* r = &c->report;
  struct interop_batch_seen seen;
  int64_t index = r->batches++;
  int line = interop_read_struct_batch(array, r->producer_device_type, &c->config.schema, &seen);
  r->device_type_mismatches += seen.device_type_mismatch;
  r->sync_events += seen.has_sync_event;
  r->total_rows += seen.rows;
  r->sum += seen.sum;
  if (index < INTEROP_ASYNC_BATCHES) r->device_ids[index] = array->device_id;
  return line;
}

/* Extracts `task` (a copy of the producer's) into an array of ours, reads
 * it and releases it (spec: "this array must be released separately"). */
static void extract_and_read(struct interop_async_consumer* c, struct ArrowAsyncTask* task) {
  struct ArrowDeviceArray array;
  int code, line;
  memset(&array, 0, sizeof(array));
  if (task->extract_data == NULL) {
    fail(c, __LINE__);
    return;
  }
  code = task->extract_data(task, &array);
  if (code != 0) {
    c->report.extract_failures++;
    return;
  }
  c->report.extracted++;
  pthread_mutex_lock(&c->mutex);
  if (c->released) c->report.extracted_after_release++;
  pthread_mutex_unlock(&c->mutex);
  line = read_array(c, &array);
  if (line != 0) fail(c, line);
  if (array.array.release != NULL) {
    array.array.release(&array.array);
    c->report.arrays_release_nulled += array.array.release == NULL;
  }
}

/* ---- the handler's callbacks --------------------------------------------- */

/* Decodes additional_metadata (encoded like ArrowSchema.metadata: an int32
 * count, then per pair an int32 length and the bytes of the key, and the
 * same for the value) far enough to find config.metadata_key. */
static int read_metadata(struct interop_async_consumer* c, const char* metadata) {
  const char* p = metadata;
  int32_t n, i;
  if (metadata == NULL) {
    c->report.metadata_pairs = -1;
    return 0;
  }
  memcpy(&n, p, sizeof(n));
  p += sizeof(n);
  REQUIRE(n >= 0);
  c->report.metadata_pairs = n;
  for (i = 0; i < n; ++i) {
    const char* key = c->config.metadata_key;
    const char* found;
    int32_t key_len, value_len;
    memcpy(&key_len, p, sizeof(key_len));
    p += sizeof(key_len);
    REQUIRE(key_len >= 0);
    found = p;
    p += key_len;
    memcpy(&value_len, p, sizeof(value_len));
    p += sizeof(value_len);
    REQUIRE(value_len >= 0);
    if (key != NULL && strlen(key) == (size_t)key_len && memcmp(found, key, (size_t)key_len) == 0) {
      copy_text(c->report.metadata_value, sizeof(c->report.metadata_value), p, (size_t)value_len);
      c->report.metadata_key_found = 1;
    }
    p += value_len;
  }
  return 0;
}

/* Grants `n` more tasks (passed on even when n <= 0, which the producer
 * must refuse with on_error). */
static void request(struct interop_async_consumer* c, struct handler_private* priv, int64_t n) {
  c->report.request_calls++;
  if (n > 0) c->report.credit_granted += n;
  priv->producer->request(priv->producer, n);
}

static void cancel(struct interop_async_consumer* c, struct handler_private* priv) {
  struct ArrowAsyncProducer* producer = priv->producer;
  priv->cancelled = 1;
  producer->cancel(producer);
  /* Spec: after cancel, request "must be a NOP, but allowed", and cancel is
   * idempotent; neither may bring more tasks or an on_error. */
  producer->request(producer, 1);
  producer->cancel(producer);
  c->report.request_calls++;
  c->report.cancel_calls += 2;
}

static int on_schema(struct interop_async_consumer* c, struct handler_private* priv,
                     struct ArrowAsyncProducer* producer, struct ArrowSchema* schema) {
  struct ArrowSchema moved;
  int line;
  REQUIRE(c->report.on_schema_calls == 1);
  REQUIRE(c->report.tasks == 0 && c->report.end_markers == 0);
  REQUIRE(schema != NULL && schema->release != NULL);
  /* Spec ("Result lifetimes"): the schema is moved to a consumer-owned
   * struct and released independently; the pointer is not kept. */
  moved = *schema;
  schema->release = NULL;
  line = interop_check_struct_schema(&moved, &c->config.schema);
  moved.release(&moved);
  c->report.schema_release_nulled = moved.release == NULL;
  if (line != 0) return line;

  REQUIRE(producer != NULL && producer->request != NULL && producer->cancel != NULL);
  priv->producer = producer;
  c->report.producer_device_type = producer->device_type;
  PROPAGATE(read_metadata(c, producer->additional_metadata));
  /* Spec: request "MUST be valid to call synchronously from within ...
   * on_schema". cancel_after == 0 cancels before asking for anything. */
  if (c->config.cancel_after == 0) {
    cancel(c, priv);
  } else {
    request(c, priv, c->config.initial_request);
  }
  return 0;
}

static int consumer_on_schema(struct ArrowAsyncDeviceStreamHandler* self,
                              struct ArrowSchema* schema) {
  struct interop_async_consumer* c = consumer_of(self);
  int line;
  if (enter(c, 1)) {
    leave(c);
    return EINVAL;
  }
  c->report.on_schema_calls++;
  line = on_schema(c, (struct handler_private*)self->private_data, self->producer, schema);
  if (line != 0) fail(c, line);
  leave(c);
  /* Spec: after a non-zero result the producer may only call release. */
  return line == 0 ? 0 : EINVAL;
}

static int store(struct interop_async_consumer* c, const struct ArrowAsyncTask* task) {
  if (c->n_stored == c->cap_stored) {
    int64_t cap = c->cap_stored == 0 ? 8 : 2 * c->cap_stored;
    struct ArrowAsyncTask* grown =
        (struct ArrowAsyncTask*)realloc(c->stored, sizeof(*grown) * (size_t)cap);
    if (grown == NULL) return ENOMEM;
    c->stored = grown;
    c->cap_stored = cap;
  }
  c->stored[c->n_stored++] = *task;
  return 0;
}

static int on_task(struct interop_async_consumer* c, struct handler_private* priv,
                   struct ArrowAsyncTask* task) {
  struct interop_async_consumer_report* r = &c->report;
  struct ArrowAsyncTask copy;
  r->tasks++;
  /* Spec: on_next_task only "up to a maximum of the total sum of calls to
   * [request]". */
  if (r->tasks > r->credit_granted) r->credit_exceeded++;
  if (priv->cancelled) r->tasks_after_cancel++;
  if (r->end_markers > 0 || r->on_schema_calls != 1) fail(c, __LINE__);
  /* Spec: the task "is only valid during the lifetime of this function
   * call"; a copy of its contents is what we keep. */
  copy = *task;
  if (c->config.extract_later) {
    if (store(c, &copy) != 0) {
      if (copy.extract_data != NULL) copy.extract_data(&copy, NULL);
      fail(c, __LINE__);
      return ENOMEM;
    }
  } else {
    extract_and_read(c, &copy);
  }
  if (priv->cancelled) return 0;
  if (c->config.cancel_after > 0 && r->tasks >= c->config.cancel_after) {
    cancel(c, priv);
  } else if (c->config.stall_after >= 0 && r->tasks >= c->config.stall_after) {
    return 0;
  } else {
    /* Spec: request "MUST be valid to call synchronously from within
     * on_next_task", and must not call on_next_task itself. */
    request(c, priv, 1);
  }
  return 0;
}

static int consumer_on_next_task(struct ArrowAsyncDeviceStreamHandler* self,
                                 struct ArrowAsyncTask* task, const char* metadata) {
  struct interop_async_consumer* c = consumer_of(self);
  int code = 0;
  (void)metadata;
  if (enter(c, 1)) {
    leave(c);
    return EINVAL;
  }
  if (task == NULL) {
    c->report.end_markers++;
  } else {
    code = on_task(c, (struct handler_private*)self->private_data, task);
    pthread_mutex_lock(&c->mutex);
    c->tasks_done++;
    pthread_cond_broadcast(&c->changed);
    pthread_mutex_unlock(&c->mutex);
  }
  leave(c);
  return code;
}

static void consumer_on_error(struct ArrowAsyncDeviceStreamHandler* self, int code,
                              const char* message, const char* metadata) {
  struct interop_async_consumer* c = consumer_of(self);
  (void)metadata;
  if (enter(c, 1)) {
    leave(c);
    return;
  }
  c->report.on_error_calls++;
  c->report.error_code = code;
  /* Spec: the message is only valid during this call: copy it. */
  if (message != NULL) {
    copy_text(c->report.error_message, sizeof(c->report.error_message), message,
              strlen(message));
  }
  leave(c);
}

static void consumer_release(struct ArrowAsyncDeviceStreamHandler* self) {
  struct interop_async_consumer* c = consumer_of(self);
  if (enter(c, 0)) {
    leave(c);
    return;
  }
  c->report.release_calls++;
  free(self->private_data);
  self->private_data = NULL;
  self->release = NULL;
  pthread_mutex_lock(&c->mutex);
  c->released = 1;
  pthread_mutex_unlock(&c->mutex);
  leave(c);
}

/* ---- the consumer's API -------------------------------------------------- */

struct interop_async_consumer* interop_async_consumer_new(
    const struct interop_async_consumer_config* config) {
  struct interop_async_consumer* c;
  struct handler_private* priv;
  if (config == NULL) return NULL;
  c = (struct interop_async_consumer*)calloc(1, sizeof(*c));
  priv = (struct handler_private*)calloc(1, sizeof(*priv));
  if (c == NULL || priv == NULL || pthread_mutex_init(&c->mutex, NULL) != 0) {
    free(c);
    free(priv);
    return NULL;
  }
  if (pthread_cond_init(&c->changed, NULL) != 0) {
    pthread_mutex_destroy(&c->mutex);
    free(c);
    free(priv);
    return NULL;
  }
  c->config = *config;
  c->report.metadata_pairs = -1;
  /* Spec: the handler "should be able to handle callbacks as soon as it is
   * passed to the producer": everything is ready here. */
  c->handler.on_schema = &consumer_on_schema;
  c->handler.on_next_task = &consumer_on_next_task;
  c->handler.on_error = &consumer_on_error;
  c->handler.release = &consumer_release;
  c->handler.producer = NULL;
  c->handler.private_data = priv;
  return c;
}

struct ArrowAsyncDeviceStreamHandler* interop_async_consumer_handler(
    struct interop_async_consumer* c) {
  pthread_mutex_lock(&c->mutex);
  c->handed_out = 1;
  pthread_mutex_unlock(&c->mutex);
  return &c->handler;
}

int64_t interop_async_consumer_extract_stored(struct interop_async_consumer* c) {
  struct ArrowAsyncTask* tasks;
  int64_t n, i;
  pthread_mutex_lock(&c->mutex);
  tasks = c->stored;
  n = c->n_stored;
  c->stored = NULL;
  c->n_stored = 0;
  c->cap_stored = 0;
  pthread_mutex_unlock(&c->mutex);
  for (i = 0; i < n; ++i) extract_and_read(c, &tasks[i]);
  free(tasks);
  return n;
}

int interop_async_consumer_wait_tasks(struct interop_async_consumer* c, int64_t n,
                                      int64_t timeout_ms) {
  struct timespec deadline;
  int rc = 0, result;
  deadline_after(&deadline, timeout_ms);
  pthread_mutex_lock(&c->mutex);
  while (c->tasks_done < n && rc == 0) {
    rc = pthread_cond_timedwait(&c->changed, &c->mutex, &deadline);
  }
  result = c->tasks_done >= n ? 0 : ETIMEDOUT;
  pthread_mutex_unlock(&c->mutex);
  return result;
}

void interop_async_consumer_report(struct interop_async_consumer* c,
                                   struct interop_async_consumer_report* out) {
  pthread_mutex_lock(&c->mutex);
  *out = c->report;
  pthread_mutex_unlock(&c->mutex);
}

int interop_async_consumer_free(struct interop_async_consumer* c) {
  int64_t i;
  int busy;
  if (c == NULL) return 0;
  pthread_mutex_lock(&c->mutex);
  busy = c->handed_out && !c->released;
  pthread_mutex_unlock(&c->mutex);
  if (busy) return EBUSY;
  /* Spec: a consumer that does not want a task's data "must still call
   * extract_data" with NULL so that the producer can clean up. */
  for (i = 0; i < c->n_stored; ++i) {
    if (c->stored[i].extract_data != NULL) c->stored[i].extract_data(&c->stored[i], NULL);
  }
  free(c->stored);
  if (!c->released) free(c->handler.private_data);
  pthread_cond_destroy(&c->changed);
  pthread_mutex_destroy(&c->mutex);
  free(c);
  return 0;
}

size_t interop_async_consumer_report_size(void) {
  return sizeof(struct interop_async_consumer_report);
}

/* ======================================================================== */
/* Producer                                                                 */
/* ======================================================================== */

struct task_private;

struct interop_async_producer {
  struct interop_async_producer_config config;
  struct ArrowAsyncDeviceStreamHandler* handler;
  /* Reports to `counters` (through add, which locks); copied into every
   * array and schema handed out. Set before the thread starts. */
  struct interop_batch_counter counter;
  pthread_t thread;
  int thread_started;
  /* Only touched by the thread that calls join and free. */
  int joined;
  /* Guards everything below; `changed` is broadcast on every change. */
  pthread_mutex_t mutex;
  pthread_cond_t changed;
  struct interop_async_producer_counters counters;
  /* Valid requests minus tasks sent. */
  int64_t credit;
  /* Batches let through a gated producer. */
  int64_t allowed;
  int cancelled;
  int has_invalid;
  int64_t invalid_n;
  /* on_next_task calls with a task that returned. */
  int64_t delivered;
  /* Every task handed out: the consumer may extract its copy from any
   * thread at any time, even after the handler's release, and a repeated
   * extract_data must find the task to refuse it. */
  struct task_private* tasks;
};

/* The ArrowAsyncProducer and the metadata it points to. The thread frees it
 * right after releasing the handler (spec: the producer "must clean it up
 * *after* calling the release callback"). */
struct producer_box {
  struct ArrowAsyncProducer producer;
  char metadata[64];
};

struct task_private {
  struct interop_async_producer* owner;
  /* The batch, until extract_data moves it out or releases it. */
  struct ArrowDeviceArray array;
  int extracted;
  struct task_private* next;
};

static void lock(struct interop_async_producer* p) { pthread_mutex_lock(&p->mutex); }

static void unlock(struct interop_async_producer* p) {
  pthread_cond_broadcast(&p->changed);
  pthread_mutex_unlock(&p->mutex);
}

static void add(struct interop_async_producer* p, int64_t* counter, int64_t delta) {
  lock(p);
  *counter += delta;
  unlock(p);
}

/* Counts what the arrays and the schema handed out report, from whichever
 * thread releases them. Child schemas are not counted. */
static void count_event(void* owner, enum interop_batch_event event) {
  struct interop_async_producer* p = (struct interop_async_producer*)owner;
  switch (event) {
    case INTEROP_ALLOCATED:
      add(p, &p->counters.live_allocations, 1);
      break;
    case INTEROP_FREED:
      add(p, &p->counters.live_allocations, -1);
      break;
    case INTEROP_ARRAY_RELEASED:
      add(p, &p->counters.array_releases, 1);
      break;
    case INTEROP_CHILD_ARRAY_RELEASED:
      add(p, &p->counters.child_array_releases, 1);
      break;
    case INTEROP_SCHEMA_RELEASED:
      add(p, &p->counters.schema_releases, 1);
      break;
    case INTEROP_CHILD_SCHEMA_RELEASED:
      break;
  }
}

/* ---- the producer's callbacks -------------------------------------------- */

static struct interop_async_producer* producer_of(struct ArrowAsyncProducer* self) {
  return (struct interop_async_producer*)self->private_data;
}

/* Spec: request must not call on_next_task or on_error synchronously; it
 * only updates the credit and wakes the producer's thread. */
static void producer_request(struct ArrowAsyncProducer* self, int64_t n) {
  struct interop_async_producer* p = producer_of(self);
  lock(p);
  p->counters.request_calls++;
  if (p->cancelled) {
    /* Spec: "After cancel is called, additional calls to this function
     * must be a NOP". */
    p->counters.requests_after_cancel++;
  } else if (n <= 0) {
    /* Spec: "Producers should error (e.g. call on_error)". */
    p->counters.invalid_requests++;
    if (!p->has_invalid) {
      p->has_invalid = 1;
      p->invalid_n = n;
    }
  } else {
    if (p->counters.credit_total == 0) p->counters.first_request = n;
    p->counters.credit_total += n;
    p->credit += n;
  }
  unlock(p);
}

static void producer_cancel(struct ArrowAsyncProducer* self) {
  struct interop_async_producer* p = producer_of(self);
  lock(p);
  p->counters.cancel_calls++;
  p->cancelled = 1;
  unlock(p);
}

/* Moves the batch into `out`, or releases it for a NULL `out`; refuses a
 * second call on the same task. May run on any thread, at any time. */
static int task_extract_data(struct ArrowAsyncTask* self, struct ArrowDeviceArray* out) {
  struct task_private* tp;
  struct interop_async_producer* p;
  int first;
  if (self == NULL || self->private_data == NULL) return EINVAL;
  tp = (struct task_private*)self->private_data;
  p = tp->owner;
  lock(p);
  p->counters.extract_calls++;
  first = !tp->extracted;
  if (!first) {
    p->counters.extract_repeated++;
  } else if (out == NULL) {
    p->counters.extract_null++;
  } else {
    p->counters.extract_moved++;
  }
  tp->extracted = 1;
  unlock(p);
  /* Spec: "It is only valid to call this method exactly once." */
  if (!first) return EINVAL;
  if (out == NULL) {
    tp->array.array.release(&tp->array.array);
  } else {
    *out = tp->array;
  }
  memset(&tp->array, 0, sizeof(tp->array));
  return 0;
}

/* ---- the producer's thread ----------------------------------------------- */

enum action { ACTION_SEND, ACTION_END, ACTION_FAIL, ACTION_INVALID, ACTION_STOP };

/* What to do for batch `index`; waits (with the lock held) until there is
 * something to do. An error or the end needs no credit. */
static enum action next_action(struct interop_async_producer* p, int64_t index) {
  for (;;) {
    if (p->has_invalid) return ACTION_INVALID;
    if (p->cancelled && (!p->config.drain_after_cancel || p->credit == 0)) return ACTION_STOP;
    if (index == p->config.fail_at) return ACTION_FAIL;
    if (index >= p->config.n_batches) return ACTION_END;
    if (p->credit > 0 && (!p->config.gated || p->allowed > index)) return ACTION_SEND;
    pthread_cond_wait(&p->changed, &p->mutex);
  }
}

static void fill_producer(struct interop_async_producer* p, struct producer_box* box) {
  char value[32];
  int32_t n = 1, key_len = 4, value_len;
  char* w = box->metadata;
  value_len = (int32_t)snprintf(value, sizeof(value), "%" PRId64,
                                p->config.n_batches * p->config.rows_per_batch);
  memcpy(w, &n, sizeof(n));
  w += sizeof(n);
  memcpy(w, &key_len, sizeof(key_len));
  w += sizeof(key_len);
  memcpy(w, "rows", 4);
  w += 4;
  memcpy(w, &value_len, sizeof(value_len));
  w += sizeof(value_len);
  memcpy(w, value, (size_t)value_len);
  box->producer.device_type = p->config.device_type;
  box->producer.request = &producer_request;
  box->producer.cancel = &producer_cancel;
  box->producer.additional_metadata = box->metadata;
  box->producer.private_data = p;
}

/* Sends batch `index` in a stack task (spec: the task is only valid during
 * the call; its private data outlives it). Returns on_next_task's result. */
static int send_batch(struct interop_async_producer* p,
                      struct ArrowAsyncDeviceStreamHandler* handler, int64_t index) {
  struct task_private* tp = (struct task_private*)calloc(1, sizeof(*tp));
  struct ArrowAsyncTask task;
  int code;
  int64_t rows = p->config.rows_per_batch;
  if (tp == NULL || interop_make_ab_batch(&p->counter, index * rows, rows, 2, &tp->array) != 0) {
    free(tp);
    handler->on_error(handler, ENOMEM, "c async producer: out of memory", NULL);
    return ENOMEM;
  }
  tp->owner = p;
  lock(p);
  tp->next = p->tasks;
  p->tasks = tp;
  unlock(p);
  task.extract_data = &task_extract_data;
  task.private_data = tp;
  code = handler->on_next_task(handler, &task, NULL);
  lock(p);
  p->delivered++;
  if (code != 0 && p->counters.on_next_task_code == 0) p->counters.on_next_task_code = code;
  unlock(p);
  return code;
}

static void run(struct interop_async_producer* p, struct ArrowAsyncDeviceStreamHandler* handler) {
  struct ArrowSchema schema;
  char message[96];
  int64_t index;
  int code = interop_make_ab_schema(&p->counter, &schema);
  if (code != 0) {
    handler->on_error(handler, code, "c async producer: out of memory", NULL);
    return;
  }
  code = handler->on_schema(handler, &schema);
  /* A consumer that did not move the schema out left it to us. */
  if (schema.release != NULL) schema.release(&schema);
  lock(p);
  p->counters.on_schema_code = code;
  unlock(p);
  /* Spec: after a non-zero on_schema, nothing but release. */
  if (code != 0) return;

  for (index = 0;; ++index) {
    enum action action;
    int64_t in_flight, invalid_n;
    lock(p);
    action = next_action(p, index);
    invalid_n = p->invalid_n;
    switch (action) {
      case ACTION_SEND:
        p->credit--;
        p->counters.tasks_sent++;
        if (p->cancelled) p->counters.tasks_after_cancel++;
        in_flight = p->counters.tasks_sent -
                    (p->counters.credit_total - p->counters.first_request);
        if (in_flight > p->counters.max_in_flight) p->counters.max_in_flight = in_flight;
        break;
      case ACTION_END:
        p->counters.end_markers++;
        break;
      case ACTION_FAIL:
      case ACTION_INVALID:
        p->counters.on_error_calls++;
        break;
      case ACTION_STOP:
        break;
    }
    unlock(p);
    switch (action) {
      case ACTION_SEND:
        /* Spec: a non-zero on_next_task is followed by release alone. */
        if (send_batch(p, handler, index) != 0) return;
        break;
      case ACTION_END:
        handler->on_next_task(handler, NULL, NULL);
        return;
      case ACTION_FAIL:
        snprintf(message, sizeof(message), "c async producer failed at batch %" PRId64, index);
        handler->on_error(handler, EIO, message, NULL);
        return;
      case ACTION_INVALID:
        snprintf(message, sizeof(message), "c async producer: request(%" PRId64 ") is invalid",
                 invalid_n);
        handler->on_error(handler, EINVAL, message, NULL);
        return;
      case ACTION_STOP:
        /* Spec: cancelling "MUST NOT result in ... on_error"; just release. */
        return;
    }
  }
}

static void* producer_main(void* arg) {
  struct interop_async_producer* p = (struct interop_async_producer*)arg;
  struct ArrowAsyncDeviceStreamHandler* handler = p->handler;
  struct producer_box* box = (struct producer_box*)calloc(1, sizeof(*box));
  if (box != NULL) {
    fill_producer(p, box);
    /* Spec: "MUST populate the ArrowAsyncProducer member before calling
     * [on_schema]", and before any callback but release. */
    handler->producer = &box->producer;
    run(p, handler);
  }
  /* The last call on the handler, whose memory belongs to the consumer. */
  handler->release(handler);
  lock(p);
  p->counters.handler_releases++;
  unlock(p);
  free(box);
  lock(p);
  p->counters.finished = 1;
  unlock(p);
  return NULL;
}

/* ---- the producer's API -------------------------------------------------- */

struct interop_async_producer* interop_async_producer_start(
    const struct interop_async_producer_config* config,
    struct ArrowAsyncDeviceStreamHandler* handler) {
  struct interop_async_producer* p;
  if (handler == NULL) return NULL;
  p = (struct interop_async_producer*)calloc(1, sizeof(*p));
  /* Row values and string offsets must fit int32. */
  if (p == NULL || config == NULL || config->n_batches < 0 || config->rows_per_batch < 0 ||
      config->n_batches > 1000000 || config->rows_per_batch > 1000000 ||
      config->n_batches * config->rows_per_batch > 1000000) {
    free(p);
    handler->release(handler);
    return NULL;
  }
  p->config = *config;
  p->handler = handler;
  p->counter.count = &count_event;
  p->counter.owner = p;
  if (pthread_mutex_init(&p->mutex, NULL) != 0) {
    free(p);
    handler->release(handler);
    return NULL;
  }
  if (pthread_cond_init(&p->changed, NULL) != 0) {
    pthread_mutex_destroy(&p->mutex);
    free(p);
    handler->release(handler);
    return NULL;
  }
  if (pthread_create(&p->thread, NULL, &producer_main, p) != 0) {
    pthread_cond_destroy(&p->changed);
    pthread_mutex_destroy(&p->mutex);
    free(p);
    handler->release(handler);
    return NULL;
  }
  p->thread_started = 1;
  return p;
}

void interop_async_producer_allow(struct interop_async_producer* p, int64_t n) {
  lock(p);
  p->allowed += n;
  unlock(p);
}

int interop_async_producer_wait_sent(struct interop_async_producer* p, int64_t n,
                                     int64_t timeout_ms) {
  struct timespec deadline;
  int rc = 0, result;
  deadline_after(&deadline, timeout_ms);
  pthread_mutex_lock(&p->mutex);
  while (p->delivered < n && !p->counters.finished && rc == 0) {
    rc = pthread_cond_timedwait(&p->changed, &p->mutex, &deadline);
  }
  result = p->delivered >= n ? 0 : p->counters.finished ? ESRCH : ETIMEDOUT;
  pthread_mutex_unlock(&p->mutex);
  return result;
}

int interop_async_producer_join(struct interop_async_producer* p, int64_t timeout_ms) {
  struct timespec deadline;
  int rc = 0, finished;
  if (!p->thread_started || p->joined) return 0;
  deadline_after(&deadline, timeout_ms);
  pthread_mutex_lock(&p->mutex);
  while (!p->counters.finished && rc == 0) {
    rc = pthread_cond_timedwait(&p->changed, &p->mutex, &deadline);
  }
  finished = p->counters.finished;
  pthread_mutex_unlock(&p->mutex);
  if (!finished) return ETIMEDOUT;
  pthread_join(p->thread, NULL);
  p->joined = 1;
  return 0;
}

void interop_async_producer_counters(struct interop_async_producer* p,
                                     struct interop_async_producer_counters* out) {
  pthread_mutex_lock(&p->mutex);
  *out = p->counters;
  pthread_mutex_unlock(&p->mutex);
}

int interop_async_producer_free(struct interop_async_producer* p) {
  struct task_private* tp;
  int64_t live;
  if (p == NULL) return 0;
  if (p->thread_started && !p->joined) return EBUSY;
  /* Tasks the consumer never extracted (spec: it should have) still own
   * their batches. */
  for (tp = p->tasks; tp != NULL; tp = tp->next) {
    if (tp->array.array.release != NULL) tp->array.array.release(&tp->array.array);
  }
  lock(p);
  live = p->counters.live_allocations;
  unlock(p);
  if (live != 0) return EBUSY;
  while (p->tasks != NULL) {
    tp = p->tasks;
    p->tasks = tp->next;
    free(tp);
  }
  pthread_cond_destroy(&p->changed);
  pthread_mutex_destroy(&p->mutex);
  free(p);
  return 0;
}

size_t interop_async_producer_counters_size(void) {
  return sizeof(struct interop_async_producer_counters);
}
