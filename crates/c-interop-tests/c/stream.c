/*
 * Both sides of a sync device stream (CDeviceDataInterface.rst, "Device
 * Stream Interface"), written as a C library would write them:
 *
 * - interop_consume_stream: a consumer of a stream arrow-device exports. It
 *   checks get_schema against what it is told to expect, pulls batches
 *   until the end (a released array) or an error (whose get_last_error
 *   message it copies), reads CPU batches by hand and only the metadata of
 *   device batches, keeps one batch past the stream's release (the results'
 *   lifetimes are not tied to the stream's) and releases everything.
 * - interop_make_stream: a producer of struct<a: int32, b: utf8> CPU batches
 *   built by batch.c with its own release callbacks, which counts every
 *   release so that the Rust consumer can be shown to release each struct
 *   exactly once.
 *
 * Reading and building the batches is shared with async_stream.c (batch.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "stream.h"

/* ======================================================================== */
/* Consumer                                                                 */
/* ======================================================================== */

/* Records one batch's metadata and, for CPU data, the sum of child 0. */
static int check_batch(const struct ArrowDeviceArrayStream* stream,
                       const struct ArrowDeviceArray* batch,
                       const struct interop_stream_expect* expect,
                       struct interop_stream_report* report) {
  struct interop_batch_seen seen;
  int64_t index = report->batches;
  int line = interop_read_struct_batch(batch, stream->device_type, &expect->schema, &seen);
  report->device_type_mismatches += seen.device_type_mismatch;
  report->sync_events += seen.has_sync_event;
  report->total_rows += seen.rows;
  report->sum += seen.sum;
  if (index < INTEROP_STREAM_BATCHES) {
    report->lengths[index] = batch->array.length;
    report->n_children[index] = batch->array.n_children;
    report->device_ids[index] = batch->device_id;
  }
  return line;
}

/* Copies get_last_error's message (valid only until the next call on the
 * stream) into the report. */
static void record_error(struct ArrowDeviceArrayStream* stream, int code,
                         struct interop_stream_report* report) {
  const char* message = stream->get_last_error(stream);
  report->code = code;
  if (message != NULL) {
    size_t n = strlen(message);
    if (n > sizeof(report->message) - 1) n = sizeof(report->message) - 1;
    memcpy(report->message, message, n);
    report->message[n] = '\0';
  }
}

static int consume_stream(struct ArrowDeviceArrayStream* stream,
                          const struct interop_stream_expect* expect,
                          struct interop_stream_report* report, struct ArrowDeviceArray* kept) {
  struct ArrowSchema schema;
  int code, line;
  REQUIRE(stream->release != NULL);
  REQUIRE(stream->get_schema != NULL && stream->get_next != NULL &&
          stream->get_last_error != NULL);
  report->stream_device_type = stream->device_type;

  memset(&schema, 0, sizeof(schema));
  code = stream->get_schema(stream, &schema);
  if (code != 0) {
    record_error(stream, code, report);
    return 0;
  }
  line = interop_check_struct_schema(&schema, &expect->schema);
  /* Spec ("Result lifetimes"): the schema is released on its own. */
  if (schema.release != NULL) {
    schema.release(&schema);
    report->schema_release_nulled = schema.release == NULL;
  }
  if (line != 0) return line;

  for (;;) {
    struct ArrowDeviceArray batch;
    memset(&batch, 0, sizeof(batch));
    code = stream->get_next(stream, &batch);
    if (code != 0) {
      /* Spec: after an error only release may be called. */
      record_error(stream, code, report);
      return 0;
    }
    /* Spec: a released embedded array marks the end of the stream. */
    if (batch.array.release == NULL) return 0;

    line = check_batch(stream, &batch, expect, report);
    if (report->batches == expect->keep_batch) {
      /* Move (C Data Interface, "Moving an array"): a bitwise copy, then
       * the source is marked released without calling its callback. */
      *kept = batch;
      batch.array.release = NULL;
    }
    report->batches++;
    if (batch.array.release != NULL) {
      batch.array.release(&batch.array);
      report->batches_release_nulled += batch.array.release == NULL;
    }
    if (line != 0) return line;
  }
}

void interop_consume_stream(struct ArrowDeviceArrayStream* stream,
                            const struct interop_stream_expect* expect,
                            struct interop_stream_report* report) {
  struct ArrowDeviceArray kept;
  memset(report, 0, sizeof(*report));
  memset(&kept, 0, sizeof(kept));
  if (stream == NULL || expect == NULL) {
    report->status = __LINE__;
    return;
  }
  report->status = consume_stream(stream, expect, report, &kept);

  if (stream->release != NULL) {
    stream->release(stream);
    report->stream_release_nulled = stream->release == NULL;
  }

  /* The kept batch outlives the stream it came from. */
  if (kept.array.release != NULL) {
    report->kept_after_stream_release = 1;
    if (report->stream_device_type == ARROW_DEVICE_CPU &&
        kept.device_type == ARROW_DEVICE_CPU && interop_struct_summable(&expect->schema)) {
      int line = interop_sum_child0(&kept.array, expect->schema.formats[0], &report->kept_sum);
      if (report->status == 0) report->status = line;
    }
    kept.array.release(&kept.array);
    report->kept_release_nulled = kept.array.release == NULL;
    report->batches_release_nulled += kept.array.release == NULL;
  }
}

size_t interop_stream_report_size(void) { return sizeof(struct interop_stream_report); }

/* ======================================================================== */
/* Producer                                                                 */
/* ======================================================================== */

/* Counts what the arrays and schemas handed out report. Only the thread
 * using the stream touches the counters (see stream.h). */
static void count_event(void* owner, enum interop_batch_event event) {
  struct interop_stream_counters* counters = (struct interop_stream_counters*)owner;
  switch (event) {
    case INTEROP_ALLOCATED:
      counters->live_allocations++;
      break;
    case INTEROP_FREED:
      counters->live_allocations--;
      break;
    case INTEROP_ARRAY_RELEASED:
      counters->array_releases++;
      break;
    case INTEROP_CHILD_ARRAY_RELEASED:
      counters->child_array_releases++;
      break;
    case INTEROP_SCHEMA_RELEASED:
      counters->schema_releases++;
      break;
    case INTEROP_CHILD_SCHEMA_RELEASED:
      counters->child_schema_releases++;
      break;
  }
}

/* ---- the stream ---------------------------------------------------------- */

struct stream_private {
  struct interop_stream_config config;
  struct interop_stream_counters* counters;
  /* Reports to `counters`; copied into every array and schema handed out,
   * which outlive this struct. */
  struct interop_batch_counter counter;
  int64_t next_batch;
  /* Once set, every get_next fails with EIO and this message. */
  int failed;
  char last_error[128];
};

static int stream_get_schema(struct ArrowDeviceArrayStream* stream, struct ArrowSchema* out) {
  struct stream_private* priv;
  int code;
  if (stream == NULL || stream->release == NULL || out == NULL) return EINVAL;
  priv = (struct stream_private*)stream->private_data;
  code = interop_make_ab_schema(&priv->counter, out);
  if (code != 0) {
    snprintf(priv->last_error, sizeof(priv->last_error), "c producer: out of memory in get_schema");
  }
  return code;
}

/* Batch `index`: struct<a, b> (or just <a> when told to break the schema).
 * CPU data, whatever the stream declares: the mismatch test relies on it. */
static int make_batch(struct stream_private* priv, int64_t index, struct ArrowDeviceArray* out) {
  int64_t rows = priv->config.rows_per_batch;
  int64_t n_children = index == priv->config.one_child_at ? 1 : 2;
  return interop_make_ab_batch(&priv->counter, index * rows, rows, n_children, out);
}

static int stream_get_next(struct ArrowDeviceArrayStream* stream, struct ArrowDeviceArray* out) {
  struct stream_private* priv;
  int code;
  if (stream == NULL || stream->release == NULL || out == NULL) return EINVAL;
  priv = (struct stream_private*)stream->private_data;
  priv->counters->get_next_calls++;
  if (priv->failed) return EIO;
  priv->last_error[0] = '\0';
  if (priv->next_batch == priv->config.fail_at) {
    priv->failed = 1;
    snprintf(priv->last_error, sizeof(priv->last_error), "c producer failed at batch %" PRId64,
             priv->next_batch);
    return EIO;
  }
  if (priv->next_batch >= priv->config.n_batches) {
    /* The end of the stream: a released array. */
    memset(out, 0, sizeof(*out));
    return 0;
  }
  code = make_batch(priv, priv->next_batch, out);
  if (code != 0) {
    snprintf(priv->last_error, sizeof(priv->last_error),
             "c producer: out of memory at batch %" PRId64, priv->next_batch);
    return code;
  }
  priv->next_batch++;
  priv->counters->batches_produced++;
  return 0;
}

static const char* stream_get_last_error(struct ArrowDeviceArrayStream* stream) {
  struct stream_private* priv;
  if (stream == NULL || stream->release == NULL) return NULL;
  priv = (struct stream_private*)stream->private_data;
  return priv->last_error[0] != '\0' ? priv->last_error : NULL;
}

static void stream_release(struct ArrowDeviceArrayStream* stream) {
  struct stream_private* priv = (struct stream_private*)stream->private_data;
  struct interop_stream_counters* counters = priv->counters;
  counters->stream_releases++;
  interop_counted_free(&priv->counter, priv);
  stream->private_data = NULL;
  /* Mark released. Arrays and schemas already handed out stay valid: they
   * own their buffers (spec: "Result lifetimes"). */
  stream->release = NULL;
}

int interop_make_stream(const struct interop_stream_config* config,
                        struct interop_stream_counters* counters,
                        struct ArrowDeviceArrayStream* out) {
  struct stream_private* priv;
  struct interop_batch_counter counter;
  if (out == NULL) return EINVAL;
  memset(out, 0, sizeof(*out));
  if (config == NULL || counters == NULL) return EINVAL;
  /* Row values and string offsets must fit int32. */
  if (config->n_batches < 0 || config->rows_per_batch < 0 || config->n_batches > 1000000 ||
      config->rows_per_batch > 1000000 || config->n_batches * config->rows_per_batch > 1000000) {
    return EINVAL;
  }
  counter.count = &count_event;
  counter.owner = counters;
  priv = (struct stream_private*)interop_counted_calloc(&counter, sizeof(*priv));
  if (priv == NULL) return ENOMEM;
  priv->config = *config;
  priv->counters = counters;
  priv->counter = counter;
  out->device_type = config->device_type;
  out->get_schema = &stream_get_schema;
  out->get_next = &stream_get_next;
  out->get_last_error = &stream_get_last_error;
  out->release = &stream_release;
  out->private_data = priv;
  return 0;
}

size_t interop_stream_counters_size(void) { return sizeof(struct interop_stream_counters); }
