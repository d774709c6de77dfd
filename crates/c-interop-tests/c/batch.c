/*
 * The struct-batch helpers shared by the C consumers and producers (see
 * batch.h), written as a C library would write them: buffers walked by hand
 * on the reading side; on the building side, producer-owned buffers,
 * children and private data freed by release callbacks that mark the struct
 * released and report each allocation and release to the owner.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"

int interop_bit_is_set(const void* bitmap, int64_t i) {
  const uint8_t* bytes = (const uint8_t*)bitmap;
  return (bytes[i / 8] >> (i % 8)) & 1;
}

/* ======================================================================== */
/* Reading                                                                  */
/* ======================================================================== */

int interop_check_struct_schema(const struct ArrowSchema* schema,
                                const struct interop_struct_expect* expect) {
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

int interop_struct_summable(const struct interop_struct_expect* expect) {
  return expect->n_children > 0 &&
         (strcmp(expect->formats[0], "i") == 0 || strcmp(expect->formats[0], "l") == 0);
}

int interop_sum_child0(const struct ArrowArray* root, const char* format, int64_t* sum) {
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
    if (struct_validity != NULL && !interop_bit_is_set(struct_validity, outer)) continue;
    if (child->buffers[0] != NULL && !interop_bit_is_set(child->buffers[0], physical)) continue;
    if (format[0] == 'l') {
      *sum += ((const int64_t*)child->buffers[1])[physical];
    } else {
      *sum += ((const int32_t*)child->buffers[1])[physical];
    }
  }
  return 0;
}

int interop_read_struct_batch(const struct ArrowDeviceArray* batch, int32_t stream_device_type,
                              const struct interop_struct_expect* expect,
                              struct interop_batch_seen* seen) {
  const struct ArrowArray* root = &batch->array;
  memset(seen, 0, sizeof(*seen));
  REQUIRE(root->release != NULL);
  /* Spec: every array of a stream is on the stream's (or, async, the
   * ArrowAsyncProducer's) device_type. */
  seen->device_type_mismatch = batch->device_type != stream_device_type;
  seen->has_sync_event = batch->sync_event != NULL;
  REQUIRE(root->length >= 0 && root->offset >= 0);
  seen->rows = root->length;
  REQUIRE(root->n_children == expect->n_children);
  REQUIRE(batch->reserved[0] == 0 && batch->reserved[1] == 0 && batch->reserved[2] == 0);
  if (stream_device_type == ARROW_DEVICE_CPU && batch->device_type == ARROW_DEVICE_CPU &&
      interop_struct_summable(expect)) {
    PROPAGATE(interop_sum_child0(root, expect->formats[0], &seen->sum));
  }
  return 0;
}

/* ======================================================================== */
/* Building                                                                 */
/* ======================================================================== */

void* interop_counted_calloc(const struct interop_batch_counter* counter, size_t size) {
  void* p = calloc(1, size == 0 ? 1 : size);
  if (p != NULL) counter->count(counter->owner, INTEROP_ALLOCATED);
  return p;
}

void interop_counted_free(const struct interop_batch_counter* counter, void* p) {
  /* A copy: `counter` may live in the memory freed. */
  struct interop_batch_counter c = *counter;
  if (p != NULL) {
    free(p);
    c.count(c.owner, INTEROP_FREED);
  }
}

#define MAX_BUFFERS 3
#define MAX_CHILDREN 2

/* ---- arrays -------------------------------------------------------------- */

/* Behind ArrowArray.private_data: the buffer pointer list and the children
 * list live here, so one free releases both. */
struct array_private {
  struct interop_batch_counter counter;
  int is_root;
  int64_t n_children_allocated;
  const void* buffers[MAX_BUFFERS];
  void* owned[MAX_BUFFERS];
  struct ArrowArray* children[MAX_CHILDREN];
};

/* May run on any thread: consumers release arrays where they like. */
static void release_array(struct ArrowArray* array) {
  struct array_private* priv = (struct array_private*)array->private_data;
  /* A copy: priv is freed before the last report. */
  struct interop_batch_counter counter = priv->counter;
  int64_t i;
  int b;
  for (i = 0; i < priv->n_children_allocated; ++i) {
    struct ArrowArray* child = priv->children[i];
    /* A consumer may have moved the child out (and released it) already. */
    if (child->release != NULL) child->release(child);
    interop_counted_free(&counter, child);
  }
  for (b = 0; b < MAX_BUFFERS; ++b) interop_counted_free(&counter, priv->owned[b]);
  counter.count(counter.owner,
                priv->is_root ? INTEROP_ARRAY_RELEASED : INTEROP_CHILD_ARRAY_RELEASED);
  interop_counted_free(&counter, priv);
  array->release = NULL;
}

/* Fills `array` with NULL buffers and `n_children` zeroed (released)
 * children. Returns 0, or ENOMEM with `array` released. */
static int init_array(const struct interop_batch_counter* counter, struct ArrowArray* array,
                      int is_root, int64_t length, int64_t n_buffers, int64_t n_children) {
  struct array_private* priv =
      (struct array_private*)interop_counted_calloc(counter, sizeof(*priv));
  int64_t i;
  memset(array, 0, sizeof(*array));
  if (priv == NULL) return ENOMEM;
  priv->counter = *counter;
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
    priv->children[i] =
        (struct ArrowArray*)interop_counted_calloc(counter, sizeof(struct ArrowArray));
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
  void* buffer = interop_counted_calloc(&priv->counter, size);
  if (buffer == NULL) return NULL;
  priv->owned[index] = buffer;
  priv->buffers[index] = buffer;
  return buffer;
}

/* "a": int32 values first, first + 1, ... (no validity buffer). */
static int fill_a(const struct interop_batch_counter* counter, struct ArrowArray* array,
                  int64_t first, int64_t rows) {
  int32_t* values;
  int64_t r;
  int code = init_array(counter, array, 0, rows, 2, 0);
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
static int fill_b(const struct interop_batch_counter* counter, struct ArrowArray* array,
                  int64_t first, int64_t rows) {
  int32_t* offsets;
  char* data;
  char text[32];
  int32_t total = 0;
  int64_t r;
  int code = init_array(counter, array, 0, rows, 3, 0);
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

int interop_make_ab_batch(const struct interop_batch_counter* counter, int64_t first,
                          int64_t rows, int64_t n_children, struct ArrowDeviceArray* out) {
  struct ArrowArray root;
  int code;
  if (n_children < 1 || n_children > MAX_CHILDREN) return EINVAL;
  code = init_array(counter, &root, 1, rows, 1, n_children);
  if (code != 0) return code;
  code = fill_a(counter, root.children[0], first, rows);
  if (code == 0 && n_children > 1) code = fill_b(counter, root.children[1], first, rows);
  if (code != 0) {
    root.release(&root);
    return code;
  }
  memset(out, 0, sizeof(*out));
  out->array = root;
  out->device_id = -1;
  out->device_type = ARROW_DEVICE_CPU;
  out->sync_event = NULL;
  return 0;
}

/* ---- schemas ------------------------------------------------------------- */

struct schema_private {
  struct interop_batch_counter counter;
  int is_root;
  int64_t n_children_allocated;
  struct ArrowSchema* children[MAX_CHILDREN];
};

static void release_schema(struct ArrowSchema* schema) {
  struct schema_private* priv = (struct schema_private*)schema->private_data;
  struct interop_batch_counter counter = priv->counter;
  int64_t i;
  for (i = 0; i < priv->n_children_allocated; ++i) {
    struct ArrowSchema* child = priv->children[i];
    if (child->release != NULL) child->release(child);
    interop_counted_free(&counter, child);
  }
  counter.count(counter.owner,
                priv->is_root ? INTEROP_SCHEMA_RELEASED : INTEROP_CHILD_SCHEMA_RELEASED);
  interop_counted_free(&counter, priv);
  schema->release = NULL;
}

static int init_schema(const struct interop_batch_counter* counter, struct ArrowSchema* schema,
                       int is_root, const char* format, const char* name, int64_t flags,
                       int64_t n_children) {
  struct schema_private* priv =
      (struct schema_private*)interop_counted_calloc(counter, sizeof(*priv));
  int64_t i;
  memset(schema, 0, sizeof(*schema));
  if (priv == NULL) return ENOMEM;
  priv->counter = *counter;
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
    priv->children[i] =
        (struct ArrowSchema*)interop_counted_calloc(counter, sizeof(struct ArrowSchema));
    if (priv->children[i] == NULL) {
      release_schema(schema);
      return ENOMEM;
    }
    priv->n_children_allocated = i + 1;
  }
  return 0;
}

int interop_make_ab_schema(const struct interop_batch_counter* counter, struct ArrowSchema* out) {
  int code = init_schema(counter, out, 1, "+s", "", 0, MAX_CHILDREN);
  if (code == 0) {
    code = init_schema(counter, out->children[0], 0, "i", "a", ARROW_FLAG_NULLABLE, 0);
  }
  if (code == 0) {
    code = init_schema(counter, out->children[1], 0, "u", "b", ARROW_FLAG_NULLABLE, 0);
  }
  if (code != 0 && out->release != NULL) out->release(out);
  return code;
}
