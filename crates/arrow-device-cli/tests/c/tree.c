/*
 * Building and releasing the struct trees every producer of producers.h
 * exports. Strings (formats, names) are static; everything else is
 * allocated per export and freed by the release callbacks.
 */
#include <stdlib.h>
#include <string.h>

#include "producers.h"

void* tree_alloc(size_t size) {
  void* p = calloc(1, size == 0 ? 1 : size);
  if (p == NULL) abort();
  return p;
}

/* Starts `out` as a node of `n_buffers` buffers and `n_children` children
 * (each child struct allocated, still to be filled). */
static struct node* node_new(struct ArrowArray* out, int64_t length, int64_t null_count,
                             int64_t n_buffers, int64_t n_children) {
  struct node* node = tree_alloc(sizeof *node);
  memset(out, 0, sizeof *out);
  out->length = length;
  out->null_count = null_count;
  out->n_buffers = n_buffers;
  out->buffers = node->buffers;
  out->n_children = n_children;
  if (n_children > 0) {
    out->children = tree_alloc((size_t)n_children * sizeof *out->children);
    for (int64_t i = 0; i < n_children; i++) {
      out->children[i] = tree_alloc(sizeof(struct ArrowArray));
    }
  }
  out->private_data = node;
  out->release = tree_release_array;
  return node;
}

/* Buffer `i` of `node`: a copy of `size` bytes of `data`, starting `shift`
 * bytes into its allocation. */
static void node_buffer(struct node* node, int i, const void* data, size_t size, size_t shift) {
  uint8_t* owned = tree_alloc(size + shift);
  memcpy(owned + shift, data, size);
  node->owned[i] = owned;
  node->sizes[i] = size;
  node->buffers[i] = owned + shift;
}

void tree_free_node(struct ArrowArray* array) {
  struct node* node = array->private_data;
  for (int i = 0; i < 3; i++) free(node->owned[i]);
  free(node);
  array->release = NULL;
}

void tree_release_array(struct ArrowArray* array) {
  for (int64_t i = 0; i < array->n_children; i++) {
    struct ArrowArray* child = array->children[i];
    /* A moved child is released (NULL release): its new owner releases it. */
    if (child->release != NULL) child->release(child);
    free(child);
  }
  free(array->children);
  if (array->dictionary != NULL) {
    if (array->dictionary->release != NULL) array->dictionary->release(array->dictionary);
    free(array->dictionary);
  }
  tree_free_node(array);
}

static void int32_node(struct ArrowArray* out, const int32_t* values, uint8_t valid,
                       size_t misalign) {
  int64_t nulls = 0;
  for (int i = 0; i < TREE_ROWS; i++) nulls += !((valid >> i) & 1);
  struct node* node = node_new(out, TREE_ROWS, nulls, 2, 0);
  node_buffer(node, 0, &valid, 1, 0);
  node_buffer(node, 1, values, TREE_ROWS * sizeof(int32_t), misalign);
}

static void utf8_node(struct ArrowArray* out, const int32_t* offsets, const char* data,
                      uint8_t valid) {
  int64_t nulls = 0;
  for (int i = 0; i < TREE_ROWS; i++) nulls += !((valid >> i) & 1);
  struct node* node = node_new(out, TREE_ROWS, nulls, 3, 0);
  node_buffer(node, 0, &valid, 1, 0);
  node_buffer(node, 1, offsets, (TREE_ROWS + 1) * sizeof(int32_t), 0);
  node_buffer(node, 2, data, strlen(data), 0);
}

void tree_batch(struct ArrowArray* out, int batch, const int32_t* b_offsets, size_t misalign) {
  const int32_t a[TREE_ROWS] = {10 * batch + 1, 0, 10 * batch + 3, 10 * batch + 4};
  static const int32_t offsets[TREE_ROWS + 1] = {0, 1, 3, 3, 6};
  /* Bit i is row i: a is null at row 1, b at row 2. */
  node_new(out, TREE_ROWS, 0, 1, 2);
  int32_node(out->children[0], a, 0x0D, misalign);
  utf8_node(out->children[1], b_offsets != NULL ? b_offsets : offsets, "xyyzzz", 0x0B);
}

void tree_dictionary(struct ArrowArray* out) {
  const int32_t keys[TREE_ROWS] = {0, 1, 0, 0};
  static const int32_t offsets[TREE_ROWS + 1] = {0, 1, 3, 3, 3};
  int32_node(out, keys, 0x0B, 0);
  out->dictionary = tree_alloc(sizeof(struct ArrowArray));
  utf8_node(out->dictionary, offsets, "xyy", 0x03);
  /* Two values, not TREE_ROWS: the offsets past them are unused. */
  out->dictionary->length = 2;
  out->dictionary->null_count = 0;
}

static void schema_node(struct ArrowSchema* out, const char* format, const char* name,
                        int64_t flags, int64_t n_children) {
  memset(out, 0, sizeof *out);
  out->format = format;
  out->name = name;
  out->flags = flags;
  out->n_children = n_children;
  if (n_children > 0) {
    out->children = tree_alloc((size_t)n_children * sizeof *out->children);
    for (int64_t i = 0; i < n_children; i++) {
      out->children[i] = tree_alloc(sizeof(struct ArrowSchema));
    }
  }
  out->release = tree_release_schema;
}

void tree_release_schema(struct ArrowSchema* schema) {
  for (int64_t i = 0; i < schema->n_children; i++) {
    struct ArrowSchema* child = schema->children[i];
    if (child->release != NULL) child->release(child);
    free(child);
  }
  free(schema->children);
  if (schema->dictionary != NULL) {
    if (schema->dictionary->release != NULL) schema->dictionary->release(schema->dictionary);
    free(schema->dictionary);
  }
  schema->release = NULL;
}

void tree_batch_schema(struct ArrowSchema* out, const char* b_name) {
  schema_node(out, "+s", "", 0, 2);
  schema_node(out->children[0], "i", "a", ARROW_FLAG_NULLABLE, 0);
  schema_node(out->children[1], "u", b_name, ARROW_FLAG_NULLABLE, 0);
}

void tree_dictionary_schema(struct ArrowSchema* out) {
  schema_node(out, "i", "tag", ARROW_FLAG_NULLABLE, 0);
  out->dictionary = tree_alloc(sizeof(struct ArrowSchema));
  schema_node(out->dictionary, "u", "", ARROW_FLAG_NULLABLE, 0);
}

void tree_on_cpu(struct ArrowDeviceArray* out) {
  out->device_id = -1;
  out->device_type = ARROW_DEVICE_CPU;
  out->sync_event = NULL;
  memset(out->reserved, 0, sizeof out->reserved);
}
