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
 *   with its own release callbacks, which counts every release so that the
 *   Rust consumer can be shown to release each struct exactly once.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stream.h"

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

/* ======================================================================== */
/* Consumer                                                                 */
/* ======================================================================== */

static int bit_is_set(const void* bitmap, int64_t i) {
  const uint8_t* bytes = (const uint8_t*)bitmap;
  return (bytes[i / 8] >> (i % 8)) & 1;
}

/* Whether child 0 holds integers the consumer can sum. */
static int summable(const struct interop_stream_expect* expect) {
  return expect->n_children > 0 &&
         (strcmp(expect->formats[0], "i") == 0 || strcmp(expect->formats[0], "l") == 0);
}

/* Adds the non-null values of child 0 of a CPU struct array to `sum`. A
 * struct slot that is null hides the child's value; the struct's offset
 * applies on top of the child's own (C Data Interface, "Struct layout"). */
static int sum_child0(const struct ArrowArray* root, const char* format, int64_t* sum) {
  const struct ArrowArray* child;
  const void* struct_validity;
  int64_t j;
  REQUIRE(root->n_buffers == 1 && root->buffers != NULL);
  REQUIRE(root->n_children >= 1 && root->children != NULL);
  child = root->children[0];
  REQUIRE(child != NULL && child->release != NULL);
  REQUIRE(child->n_buffers == 2 && child->buffers != NULL);
  REQUIRE(child->length >= root->offset + root->length);
  REQUIRE(root->length == 0 || child->buffers[1] != NULL);
  struct_validity = root->buffers[0];
  for (j = 0; j < root->length; ++j) {
    int64_t outer = root->offset + j;
    int64_t physical = child->offset + outer;
    if (struct_validity != NULL && !bit_is_set(struct_validity, outer)) continue;
    if (child->buffers[0] != NULL && !bit_is_set(child->buffers[0], physical)) continue;
    if (format[0] == 'l') {
      *sum += ((const int64_t*)child->buffers[1])[physical];
    } else {
      *sum += ((const int32_t*)child->buffers[1])[physical];
    }
  }
  return 0;
}

static int check_schema(const struct ArrowSchema* schema,
                        const struct interop_stream_expect* expect) {
  int64_t i;
  REQUIRE(schema->release != NULL);
  REQUIRE(schema->format != NULL && strcmp(schema->format, "+s") == 0);
  REQUIRE(schema->n_children == expect->n_children);
  REQUIRE(schema->n_children == 0 || schema->children != NULL);
  for (i = 0; i < schema->n_children; ++i) {
    const struct ArrowSchema* child = schema->children[i];
    REQUIRE(child != NULL && child->release != NULL);
    REQUIRE(child->format != NULL && strcmp(child->format, expect->formats[i]) == 0);
    REQUIRE(child->name != NULL && strcmp(child->name, expect->names[i]) == 0);
  }
  return 0;
}

/* Records one batch's metadata and, for CPU data, sums child 0. Device
 * buffers are never touched: their pointers are not host memory, and the
 * data is only ready once sync_event has completed. */
static int check_batch(const struct ArrowDeviceArrayStream* stream,
                       const struct ArrowDeviceArray* batch,
                       const struct interop_stream_expect* expect,
                       struct interop_stream_report* report) {
  const struct ArrowArray* root = &batch->array;
  int64_t index = report->batches;
  /* Spec: every array of the stream is on the stream's device_type. */
  if (batch->device_type != stream->device_type) report->device_type_mismatches++;
  if (batch->sync_event != NULL) report->sync_events++;
  if (index < INTEROP_STREAM_BATCHES) {
    report->lengths[index] = root->length;
    report->n_children[index] = root->n_children;
    report->device_ids[index] = batch->device_id;
  }
  REQUIRE(root->length >= 0 && root->offset >= 0);
  report->total_rows += root->length;
  REQUIRE(root->n_children == expect->n_children);
  REQUIRE(batch->reserved[0] == 0 && batch->reserved[1] == 0 && batch->reserved[2] == 0);
  if (stream->device_type == ARROW_DEVICE_CPU && batch->device_type == ARROW_DEVICE_CPU &&
      summable(expect)) {
    PROPAGATE(sum_child0(root, expect->formats[0], &report->sum));
  }
  return 0;
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
  line = check_schema(&schema, expect);
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
        kept.device_type == ARROW_DEVICE_CPU && summable(expect)) {
      int line = sum_child0(&kept.array, expect->formats[0], &report->kept_sum);
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

static void* counted_calloc(struct interop_stream_counters* counters, size_t size) {
  void* p = calloc(1, size == 0 ? 1 : size);
  if (p != NULL) counters->live_allocations++;
  return p;
}

static void counted_free(struct interop_stream_counters* counters, void* p) {
  if (p != NULL) {
    free(p);
    counters->live_allocations--;
  }
}

/* ---- arrays -------------------------------------------------------------- */

#define MAX_BUFFERS 3
#define MAX_CHILDREN 2

/* Behind ArrowArray.private_data: the buffer pointer list and the children
 * list live here, so one free releases both. */
struct array_private {
  struct interop_stream_counters* counters;
  int is_root;
  int64_t n_children_allocated;
  const void* buffers[MAX_BUFFERS];
  void* owned[MAX_BUFFERS];
  struct ArrowArray* children[MAX_CHILDREN];
};

static void release_array(struct ArrowArray* array) {
  struct array_private* priv = (struct array_private*)array->private_data;
  struct interop_stream_counters* counters = priv->counters;
  int64_t i;
  int b;
  for (i = 0; i < priv->n_children_allocated; ++i) {
    struct ArrowArray* child = priv->children[i];
    /* A consumer may have moved the child out (and released it) already. */
    if (child->release != NULL) child->release(child);
    counted_free(counters, child);
  }
  for (b = 0; b < MAX_BUFFERS; ++b) counted_free(counters, priv->owned[b]);
  if (priv->is_root) {
    counters->array_releases++;
  } else {
    counters->child_array_releases++;
  }
  counted_free(counters, priv);
  array->release = NULL;
}

/* Fills `array` with NULL buffers and `n_children` zeroed (released)
 * children. Returns 0, or ENOMEM with `array` released. */
static int init_array(struct interop_stream_counters* counters, struct ArrowArray* array,
                      int is_root, int64_t length, int64_t n_buffers, int64_t n_children) {
  struct array_private* priv = (struct array_private*)counted_calloc(counters, sizeof(*priv));
  int64_t i;
  memset(array, 0, sizeof(*array));
  if (priv == NULL) return ENOMEM;
  priv->counters = counters;
  priv->is_root = is_root;
  array->length = length;
  array->null_count = 0;
  array->offset = 0;
  array->n_buffers = n_buffers;
  array->n_children = n_children;
  array->buffers = priv->buffers;
  array->children = n_children > 0 ? priv->children : NULL;
  array->dictionary = NULL;
  array->release = &release_array;
  array->private_data = priv;
  for (i = 0; i < n_children; ++i) {
    priv->children[i] = (struct ArrowArray*)counted_calloc(counters, sizeof(struct ArrowArray));
    if (priv->children[i] == NULL) {
      release_array(array);
      return ENOMEM;
    }
    priv->n_children_allocated = i + 1;
  }
  return 0;
}

/* A buffer of `size` zeroed bytes owned by `array`, stored as
 * buffers[index]. */
static void* add_buffer(struct ArrowArray* array, int index, size_t size) {
  struct array_private* priv = (struct array_private*)array->private_data;
  void* buffer = counted_calloc(priv->counters, size);
  if (buffer == NULL) return NULL;
  priv->owned[index] = buffer;
  priv->buffers[index] = buffer;
  return buffer;
}

/* "a": int32 values first, first + 1, ... (no validity buffer). */
static int fill_a(struct interop_stream_counters* counters, struct ArrowArray* array,
                  int64_t first, int64_t rows) {
  int32_t* values;
  int64_t r;
  int code = init_array(counters, array, 0, rows, 2, 0);
  if (code != 0) return code;
  values = (int32_t*)add_buffer(array, 1, sizeof(int32_t) * (size_t)rows);
  if (values == NULL) {
    release_array(array);
    return ENOMEM;
  }
  for (r = 0; r < rows; ++r) values[r] = (int32_t)(first + r);
  return 0;
}

/* "b": utf8 "x<first>", "x<first + 1>", ... */
static int fill_b(struct interop_stream_counters* counters, struct ArrowArray* array,
                  int64_t first, int64_t rows) {
  int32_t* offsets;
  char* data;
  char text[32];
  int32_t total = 0;
  int64_t r;
  int code = init_array(counters, array, 0, rows, 3, 0);
  if (code != 0) return code;
  offsets = (int32_t*)add_buffer(array, 1, sizeof(int32_t) * (size_t)(rows + 1));
  if (offsets == NULL) goto fail;
  for (r = 0; r < rows; ++r) {
    offsets[r] = total;
    total += (int32_t)snprintf(text, sizeof(text), "x%" PRId64, first + r);
  }
  offsets[rows] = total;
  /* One spare byte for the NUL snprintf writes after the last string. */
  data = (char*)add_buffer(array, 2, (size_t)total + 1);
  if (data == NULL) goto fail;
  for (r = 0; r < rows; ++r) {
    snprintf(data + offsets[r], (size_t)(offsets[r + 1] - offsets[r]) + 1, "x%" PRId64,
             first + r);
  }
  return 0;

fail:
  release_array(array);
  return ENOMEM;
}

/* ---- schemas ------------------------------------------------------------- */

struct schema_private {
  struct interop_stream_counters* counters;
  int is_root;
  int64_t n_children_allocated;
  struct ArrowSchema* children[MAX_CHILDREN];
};

static void release_schema(struct ArrowSchema* schema) {
  struct schema_private* priv = (struct schema_private*)schema->private_data;
  struct interop_stream_counters* counters = priv->counters;
  int64_t i;
  for (i = 0; i < priv->n_children_allocated; ++i) {
    struct ArrowSchema* child = priv->children[i];
    if (child->release != NULL) child->release(child);
    counted_free(counters, child);
  }
  if (priv->is_root) {
    counters->schema_releases++;
  } else {
    counters->child_schema_releases++;
  }
  counted_free(counters, priv);
  schema->release = NULL;
}

static int init_schema(struct interop_stream_counters* counters, struct ArrowSchema* schema,
                       int is_root, const char* format, const char* name, int64_t flags,
                       int64_t n_children) {
  struct schema_private* priv = (struct schema_private*)counted_calloc(counters, sizeof(*priv));
  int64_t i;
  memset(schema, 0, sizeof(*schema));
  if (priv == NULL) return ENOMEM;
  priv->counters = counters;
  priv->is_root = is_root;
  schema->format = format;
  schema->name = name;
  schema->metadata = NULL;
  schema->flags = flags;
  schema->n_children = n_children;
  schema->children = n_children > 0 ? priv->children : NULL;
  schema->dictionary = NULL;
  schema->release = &release_schema;
  schema->private_data = priv;
  for (i = 0; i < n_children; ++i) {
    priv->children[i] = (struct ArrowSchema*)counted_calloc(counters, sizeof(struct ArrowSchema));
    if (priv->children[i] == NULL) {
      release_schema(schema);
      return ENOMEM;
    }
    priv->n_children_allocated = i + 1;
  }
  return 0;
}

/* ---- the stream ---------------------------------------------------------- */

struct stream_private {
  struct interop_stream_config config;
  struct interop_stream_counters* counters;
  int64_t next_batch;
  /* Once set, every get_next fails with EIO and this message. */
  int failed;
  char last_error[128];
};

static int stream_get_schema(struct ArrowDeviceArrayStream* stream, struct ArrowSchema* out) {
  struct stream_private* priv;
  struct interop_stream_counters* counters;
  int code;
  if (stream == NULL || stream->release == NULL || out == NULL) return EINVAL;
  priv = (struct stream_private*)stream->private_data;
  counters = priv->counters;
  code = init_schema(counters, out, 1, "+s", "", 0, 2);
  if (code == 0) code = init_schema(counters, out->children[0], 0, "i", "a", ARROW_FLAG_NULLABLE, 0);
  if (code == 0) code = init_schema(counters, out->children[1], 0, "u", "b", ARROW_FLAG_NULLABLE, 0);
  if (code != 0) {
    if (out->release != NULL) out->release(out);
    snprintf(priv->last_error, sizeof(priv->last_error), "c producer: out of memory in get_schema");
  }
  return code;
}

/* Batch `index`: struct<a, b> (or just <a> when told to break the schema). */
static int make_batch(struct stream_private* priv, int64_t index, struct ArrowDeviceArray* out) {
  struct interop_stream_counters* counters = priv->counters;
  int64_t rows = priv->config.rows_per_batch;
  int64_t first = index * rows;
  int64_t n_children = index == priv->config.one_child_at ? 1 : 2;
  struct ArrowArray root;
  int code = init_array(counters, &root, 1, rows, 1, n_children);
  if (code != 0) return code;
  code = fill_a(counters, root.children[0], first, rows);
  if (code == 0 && n_children > 1) code = fill_b(counters, root.children[1], first, rows);
  if (code != 0) {
    root.release(&root);
    return code;
  }
  memset(out, 0, sizeof(*out));
  out->array = root;
  /* CPU data, whatever the stream declares: the mismatch test relies on
   * it. */
  out->device_id = -1;
  out->device_type = ARROW_DEVICE_CPU;
  out->sync_event = NULL;
  return 0;
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
  counted_free(counters, priv);
  stream->private_data = NULL;
  /* Mark released. Arrays and schemas already handed out stay valid: they
   * own their buffers (spec: "Result lifetimes"). */
  stream->release = NULL;
}

int interop_make_stream(const struct interop_stream_config* config,
                        struct interop_stream_counters* counters,
                        struct ArrowDeviceArrayStream* out) {
  struct stream_private* priv;
  if (out == NULL) return EINVAL;
  memset(out, 0, sizeof(*out));
  if (config == NULL || counters == NULL) return EINVAL;
  /* Row values and string offsets must fit int32. */
  if (config->n_batches < 0 || config->rows_per_batch < 0 || config->n_batches > 1000000 ||
      config->rows_per_batch > 1000000 || config->n_batches * config->rows_per_batch > 1000000) {
    return EINVAL;
  }
  priv = (struct stream_private*)counted_calloc(counters, sizeof(*priv));
  if (priv == NULL) return ENOMEM;
  priv->config = *config;
  priv->counters = counters;
  out->device_type = config->device_type;
  out->get_schema = &stream_get_schema;
  out->get_next = &stream_get_next;
  out->get_last_error = &stream_get_last_error;
  out->release = &stream_release;
  out->private_data = priv;
  return 0;
}

size_t interop_stream_counters_size(void) { return sizeof(struct interop_stream_counters); }
