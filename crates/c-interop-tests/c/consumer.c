/*
 * A C consumer of CPU device arrays, as a C library receiving data from
 * arrow-device would write one: it checks the device fields, walks the
 * buffers by hand (validity bitmaps, offsets, string offsets), renders what
 * it read as text for the Rust side to compare, and releases both structs
 * through their release callbacks.
 */
#include <string.h>

#include "batch.h"
#include "interop.h"

/* A NULL validity buffer means "all valid" (spec: the buffer may be omitted
 * when null_count is 0). */
static int slot_is_null(const struct ArrowArray* array, int64_t physical) {
  return array->buffers[0] != NULL && !interop_bit_is_set(array->buffers[0], physical);
}

/* Appends `n` bytes of `piece` to the NUL-terminated `text`; 0 when full. */
static int append(char* text, const char* piece, size_t n) {
  size_t used = strlen(text);
  if (used + n + 1 > INTEROP_TEXT) return 0;
  memcpy(text + used, piece, n);
  text[used + n] = '\0';
  return 1;
}

static int append_separator(char* text, int64_t j) { return j == 0 || append(text, "|", 1); }

static int append_int(char* text, int64_t value) {
  char digits[24];
  int n = 0, negative = value < 0;
  uint64_t magnitude = negative ? (uint64_t)0 - (uint64_t)value : (uint64_t)value;
  do {
    digits[sizeof(digits) - 1 - (size_t)n++] = (char)('0' + (int)(magnitude % 10));
    magnitude /= 10;
  } while (magnitude != 0);
  if (negative) digits[sizeof(digits) - 1 - (size_t)n++] = '-';
  return append(text, digits + sizeof(digits) - (size_t)n, (size_t)n);
}

/* The `n` logical elements of an int32 node, optionally inside a struct
 * `parent` whose validity and offset apply on top of the node's own. */
static int read_int32(const struct ArrowArray* node, const struct ArrowArray* parent, int64_t n,
                      struct interop_report* report, int64_t* nulls) {
  int64_t outer = parent != NULL ? parent->offset : 0;
  const int32_t* values;
  int64_t j;
  REQUIRE(node->n_buffers == 2);
  REQUIRE(node->n_children == 0);
  REQUIRE(node->buffers != NULL);
  REQUIRE(node->length >= outer + n);
  values = (const int32_t*)node->buffers[1];
  REQUIRE(n == 0 || values != NULL);
  for (j = 0; j < n; ++j) {
    int64_t physical = node->offset + outer + j;
    REQUIRE(append_separator(report->ints, j));
    if ((parent != NULL && slot_is_null(parent, parent->offset + j)) ||
        slot_is_null(node, physical)) {
      ++*nulls;
      REQUIRE(append(report->ints, "null", 4));
    } else {
      report->int_sum += values[physical];
      REQUIRE(append_int(report->ints, values[physical]));
    }
  }
  return 0;
}

/* The `n` logical elements of a utf8 node (int32 offsets into a data
 * buffer), optionally inside a struct `parent`. */
static int read_utf8(const struct ArrowArray* node, const struct ArrowArray* parent, int64_t n,
                     struct interop_report* report, int64_t* nulls) {
  int64_t outer = parent != NULL ? parent->offset : 0;
  const int32_t* offsets;
  const char* data;
  int64_t j;
  REQUIRE(node->n_buffers == 3);
  REQUIRE(node->n_children == 0);
  REQUIRE(node->buffers != NULL);
  REQUIRE(node->length >= outer + n);
  offsets = (const int32_t*)node->buffers[1];
  data = (const char*)node->buffers[2];
  REQUIRE(offsets != NULL);
  for (j = 0; j < n; ++j) {
    int64_t physical = node->offset + outer + j;
    int32_t start = offsets[physical], end = offsets[physical + 1];
    REQUIRE(append_separator(report->strs, j));
    if ((parent != NULL && slot_is_null(parent, parent->offset + j)) ||
        slot_is_null(node, physical)) {
      ++*nulls;
      REQUIRE(append(report->strs, "null", 4));
    } else {
      REQUIRE(0 <= start && start <= end);
      REQUIRE(start == end || data != NULL);
      REQUIRE(append(report->strs, data + start, (size_t)(end - start)));
    }
  }
  return 0;
}

static int read_struct(const struct ArrowArray* node, const struct ArrowSchema* schema,
                       struct interop_report* report) {
  int64_t i, nulls_in_children = 0;
  REQUIRE(node->n_buffers == 1);
  REQUIRE(node->buffers != NULL);
  REQUIRE(node->n_children == 2 && schema->n_children == 2);
  REQUIRE(node->children != NULL && schema->children != NULL);
  for (i = 0; i < node->length; ++i) {
    if (slot_is_null(node, node->offset + i)) report->counted_null_count++;
  }
  for (i = 0; i < 2; ++i) {
    const struct ArrowSchema* child_schema = schema->children[i];
    const struct ArrowArray* child = node->children[i];
    const char* name = child_schema->name != NULL ? child_schema->name : "";
    REQUIRE(child_schema->release != NULL && child->release != NULL);
    report->child_flags[i] = child_schema->flags;
    if (i > 0) REQUIRE(append(report->child_names, ",", 1));
    /* child_names is shorter than INTEROP_TEXT: keep room for both names. */
    REQUIRE(strlen(report->child_names) + strlen(name) + 1 < sizeof(report->child_names));
    strcat(report->child_names, name);
    if (strcmp(child_schema->format, "i") == 0) {
      PROPAGATE(read_int32(child, node, node->length, report, &nulls_in_children));
    } else if (strcmp(child_schema->format, "u") == 0) {
      PROPAGATE(read_utf8(child, node, node->length, report, &nulls_in_children));
    } else {
      return __LINE__;
    }
  }
  return 0;
}

static int consume(const struct ArrowDeviceArray* array, const struct ArrowSchema* schema,
                   struct interop_report* report) {
  const struct ArrowArray* root = &array->array;
  REQUIRE(root->release != NULL);
  REQUIRE(schema->release != NULL);

  report->device_type = array->device_type;
  report->device_id = array->device_id;
  report->sync_event_is_null = array->sync_event == NULL;
  report->reserved_all_zero =
      array->reserved[0] == 0 && array->reserved[1] == 0 && array->reserved[2] == 0;
  report->length = root->length;
  report->declared_null_count = root->null_count;
  report->root_flags = schema->flags;

  REQUIRE(schema->format != NULL);
  REQUIRE(strlen(schema->format) < sizeof(report->format));
  strcpy(report->format, schema->format);

  /* Only host memory may be read here. */
  REQUIRE(array->device_type == ARROW_DEVICE_CPU);
  REQUIRE(root->length >= 0 && root->offset >= 0);

  if (strcmp(schema->format, "i") == 0) {
    return read_int32(root, NULL, root->length, report, &report->counted_null_count);
  }
  if (strcmp(schema->format, "u") == 0) {
    return read_utf8(root, NULL, root->length, report, &report->counted_null_count);
  }
  if (strcmp(schema->format, "+s") == 0) {
    return read_struct(root, schema, report);
  }
  return __LINE__;
}

void interop_consume(struct ArrowDeviceArray* array, struct ArrowSchema* schema,
                     struct interop_report* report) {
  memset(report, 0, sizeof(*report));
  report->status = consume(array, schema, report);

  /* Done with the data: hand it back to the producer, base structs only
   * (the release of a parent releases its children). */
  if (array->array.release != NULL) {
    array->array.release(&array->array);
    report->array_release_nulled = array->array.release == NULL;
  }
  if (schema->release != NULL) {
    schema->release(schema);
    report->schema_release_nulled = schema->release == NULL;
  }
}

/* Reads one moved-out child on its own: its parent is gone by now. */
static int read_moved_child(const struct ArrowArray* child, const struct ArrowSchema* child_schema,
                            struct interop_report* report) {
  int64_t nulls = 0;
  REQUIRE(child->release != NULL && child_schema->release != NULL);
  if (strcmp(child_schema->format, "i") == 0) {
    return read_int32(child, NULL, child->length, report, &nulls);
  }
  if (strcmp(child_schema->format, "u") == 0) {
    return read_utf8(child, NULL, child->length, report, &nulls);
  }
  return __LINE__;
}

static int consume_moved_children(struct ArrowDeviceArray* array, struct ArrowSchema* schema,
                                  struct interop_report* report) {
  struct ArrowArray* root = &array->array;
  struct ArrowArray moved[2];
  struct ArrowSchema moved_schemas[2];
  int i, line = 0;
  REQUIRE(root->release != NULL && schema->release != NULL);
  REQUIRE(array->device_type == ARROW_DEVICE_CPU);
  REQUIRE(schema->format != NULL && strcmp(schema->format, "+s") == 0);
  REQUIRE(root->n_children == 2 && schema->n_children == 2);
  REQUIRE(root->offset == 0 && root->null_count == 0);
  strcpy(report->format, "+s");
  report->length = root->length;

  /* Move: bitwise copy, then mark the source released without calling its
   * release callback. */
  for (i = 0; i < 2; ++i) {
    moved[i] = *root->children[i];
    root->children[i]->release = NULL;
    moved_schemas[i] = *schema->children[i];
    schema->children[i]->release = NULL;
  }

  /* The parents go first; the moved children must stay valid. */
  root->release(root);
  report->array_release_nulled = root->release == NULL;
  schema->release(schema);
  report->schema_release_nulled = schema->release == NULL;

  for (i = 0; i < 2; ++i) {
    if (line == 0) line = read_moved_child(&moved[i], &moved_schemas[i], report);
    if (moved[i].release != NULL) {
      moved[i].release(&moved[i]);
      report->moved_children_released += moved[i].release == NULL;
    }
    if (moved_schemas[i].release != NULL) {
      moved_schemas[i].release(&moved_schemas[i]);
      report->moved_children_released += moved_schemas[i].release == NULL;
    }
  }
  return line;
}

void interop_consume_moved_children(struct ArrowDeviceArray* array, struct ArrowSchema* schema,
                                    struct interop_report* report) {
  memset(report, 0, sizeof(*report));
  report->status = consume_moved_children(array, schema, report);
  /* Release whatever an early failure left behind. */
  if (array->array.release != NULL) array->array.release(&array->array);
  if (schema->release != NULL) schema->release(schema);
}

size_t interop_report_size(void) { return sizeof(struct interop_report); }
