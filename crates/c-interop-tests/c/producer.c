/*
 * C producers of CPU device arrays, written the way the specification's
 * producer examples are ("Exporting a simple int32 device array" and, in the
 * C Data Interface, "Exporting a struct<float32, utf8> array"): the producer
 * malloc()s the buffers, the children and its private data, fills a
 * consumer-allocated ArrowDeviceArray / ArrowSchema, and frees everything in
 * the release callbacks, which finally mark the struct released.
 *
 * Unlike the examples, every allocation and every release is counted per
 * "slot" so that the Rust tests can check that the consumer released each
 * struct exactly once and that nothing leaked.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "interop.h"

/* ---- bookkeeping --------------------------------------------------------- */

static int64_t array_releases[INTEROP_SLOTS];
static int64_t schema_releases[INTEROP_SLOTS];
static int64_t child_array_releases[INTEROP_SLOTS];
static int64_t child_schema_releases[INTEROP_SLOTS];
static int64_t live_allocations[INTEROP_SLOTS];

static int slot_ok(int slot) { return slot >= 0 && slot < INTEROP_SLOTS; }

int64_t interop_array_releases(int slot) { return slot_ok(slot) ? array_releases[slot] : -1; }
int64_t interop_schema_releases(int slot) { return slot_ok(slot) ? schema_releases[slot] : -1; }
int64_t interop_child_array_releases(int slot) {
  return slot_ok(slot) ? child_array_releases[slot] : -1;
}
int64_t interop_child_schema_releases(int slot) {
  return slot_ok(slot) ? child_schema_releases[slot] : -1;
}
int64_t interop_live_allocations(int slot) {
  return slot_ok(slot) ? live_allocations[slot] : -1;
}

static void* counted_calloc(int slot, size_t size) {
  void* p = calloc(1, size == 0 ? 1 : size);
  if (p != NULL) live_allocations[slot]++;
  return p;
}

static void counted_free(int slot, void* p) {
  if (p != NULL) {
    free(p);
    live_allocations[slot]--;
  }
}

/* What a release callback needs; stored in private_data. The release
 * callbacks free what was allocated (recorded here), not what the struct's
 * counts claim, so that the malformed producers free correctly too. */
#define MAX_OWNED 3
struct node_private {
  int slot;
  int is_root;
  int64_t n_children_allocated;
  int n_owned;
  void* owned[MAX_OWNED];
};

/* ---- ArrowSchema --------------------------------------------------------- */

static void release_schema(struct ArrowSchema* schema) {
  struct node_private* priv = (struct node_private*)schema->private_data;
  int slot = priv->slot;
  int64_t i;
  for (i = 0; i < priv->n_children_allocated; ++i) {
    struct ArrowSchema* child = schema->children[i];
    /* A consumer may have moved the child out and released it already. */
    if (child->release != NULL) child->release(child);
    counted_free(slot, child);
  }
  counted_free(slot, schema->children);
  if (priv->is_root) {
    schema_releases[slot]++;
  } else {
    child_schema_releases[slot]++;
  }
  counted_free(slot, priv);
  /* Mark released. */
  schema->release = NULL;
}

/* Fills `schema` with static format/name strings and `n_children` zeroed,
 * malloc()ed children. Returns 0 or ENOMEM (with `schema` released). */
static int init_schema(struct ArrowSchema* schema, int slot, int is_root, const char* format,
                       const char* name, int64_t flags, int64_t n_children) {
  struct node_private* priv = (struct node_private*)counted_calloc(slot, sizeof(*priv));
  int64_t i;
  memset(schema, 0, sizeof(*schema));
  if (priv == NULL) return ENOMEM;
  priv->slot = slot;
  priv->is_root = is_root;
  *schema = (struct ArrowSchema){
      /* Type description */
      .format = format,
      .name = name,
      .metadata = NULL,
      .flags = flags,
      .n_children = n_children,
      .children = NULL,
      .dictionary = NULL,
      /* Bookkeeping */
      .release = &release_schema,
      .private_data = priv,
  };
  if (n_children > 0) {
    schema->children = (struct ArrowSchema**)counted_calloc(
        slot, sizeof(struct ArrowSchema*) * (size_t)n_children);
    if (schema->children == NULL) goto fail;
    for (i = 0; i < n_children; ++i) {
      schema->children[i] = (struct ArrowSchema*)counted_calloc(slot, sizeof(struct ArrowSchema));
      if (schema->children[i] == NULL) goto fail;
      /* A zeroed child is a released one, which release_schema skips. */
      priv->n_children_allocated = i + 1;
    }
  }
  return 0;

fail:
  release_schema(schema);
  return ENOMEM;
}

/* ---- ArrowArray ---------------------------------------------------------- */

static void release_array(struct ArrowArray* array) {
  struct node_private* priv = (struct node_private*)array->private_data;
  int slot = priv->slot;
  int64_t i;
  int b;
  /* Free children */
  for (i = 0; i < priv->n_children_allocated; ++i) {
    struct ArrowArray* child = array->children[i];
    if (child->release != NULL) child->release(child);
    counted_free(slot, child);
  }
  counted_free(slot, array->children);
  /* Free buffers */
  for (b = 0; b < priv->n_owned; ++b) counted_free(slot, priv->owned[b]);
  counted_free(slot, (void*)array->buffers);
  if (priv->is_root) {
    array_releases[slot]++;
  } else {
    child_array_releases[slot]++;
  }
  counted_free(slot, priv);
  /* Mark released */
  array->release = NULL;
}

/* Fills `array` with zeroed buffer pointers (room for `buffer_slots` of
 * them, at least `n_buffers`) and `n_children` zeroed children. */
static int init_array(struct ArrowArray* array, int slot, int is_root, int64_t length,
                      int64_t null_count, int64_t offset, int64_t n_buffers, int64_t buffer_slots,
                      int64_t n_children) {
  struct node_private* priv = (struct node_private*)counted_calloc(slot, sizeof(*priv));
  int64_t i;
  memset(array, 0, sizeof(*array));
  if (priv == NULL) return ENOMEM;
  priv->slot = slot;
  priv->is_root = is_root;
  *array = (struct ArrowArray){
      /* Data description */
      .length = length,
      .null_count = null_count,
      .offset = offset,
      .n_buffers = n_buffers,
      .n_children = n_children,
      .buffers = NULL,
      .children = NULL,
      .dictionary = NULL,
      /* Bookkeeping */
      .release = &release_array,
      .private_data = priv,
  };
  /* Allocate list of buffers */
  array->buffers = (const void**)counted_calloc(slot, sizeof(void*) * (size_t)buffer_slots);
  if (array->buffers == NULL) goto fail;
  /* Allocate list of children arrays */
  if (n_children > 0) {
    array->children = (struct ArrowArray**)counted_calloc(
        slot, sizeof(struct ArrowArray*) * (size_t)n_children);
    if (array->children == NULL) goto fail;
    for (i = 0; i < n_children; ++i) {
      array->children[i] = (struct ArrowArray*)counted_calloc(slot, sizeof(struct ArrowArray));
      if (array->children[i] == NULL) goto fail;
      priv->n_children_allocated = i + 1;
    }
  }
  return 0;

fail:
  release_array(array);
  return ENOMEM;
}

/* Copies `size` bytes into a buffer owned by `array` and stores it as
 * buffers[index]. */
static int set_buffer(struct ArrowArray* array, int64_t index, const void* data, size_t size) {
  struct node_private* priv = (struct node_private*)array->private_data;
  void* copy;
  if (priv->n_owned == MAX_OWNED) return EINVAL;
  copy = counted_calloc(priv->slot, size);
  if (copy == NULL) return ENOMEM;
  memcpy(copy, data, size);
  priv->owned[priv->n_owned++] = copy;
  array->buffers[index] = copy;
  return 0;
}

/* ---- the device wrapper -------------------------------------------------- */

/* Wraps an already filled ArrowArray as a CPU device array, as the spec's
 * example does: zero everything, then fill in the device fields. */
static void wrap_cpu(struct ArrowDeviceArray* out, const struct ArrowArray* array) {
  memset(out, 0, sizeof(*out));
  *out = (struct ArrowDeviceArray){
      .array = *array,
      /* No intrinsic device id on the CPU: -1 by convention. */
      .device_id = -1,
      .device_type = ARROW_DEVICE_CPU,
      /* Host memory needs no synchronization. */
      .sync_event = NULL,
  };
  /* The designated initializer zeroed reserved[]; say so explicitly since
   * the spec requires it. */
  out->reserved[0] = out->reserved[1] = out->reserved[2] = 0;
}

/* On failure leave both output structs released. */
static int fail_both(int code, struct ArrowDeviceArray* out, struct ArrowSchema* schema) {
  if (out->array.release != NULL) out->array.release(&out->array);
  if (schema->release != NULL) schema->release(schema);
  return code;
}

/* ---- the data ------------------------------------------------------------ */

/* [1, null, 3, null, 5, 6, 7]; null slots hold -999. */
static const int32_t int32_values[7] = {1, -999, 3, -999, 5, 6, 7};
/* Bits 0, 2, 4, 5, 6 set (least significant bit first). */
static const uint8_t int32_validity[1] = {0x75};

/* ["hello", "", null, "arrow", "device"] */
static const int32_t utf8_offsets[6] = {0, 5, 5, 5, 10, 16};
static const char utf8_data[16] = {'h', 'e', 'l', 'l', 'o', 'a', 'r', 'r',
                                   'o', 'w', 'd', 'e', 'v', 'i', 'c', 'e'};
/* Bits 0, 1, 3, 4 set. */
static const uint8_t utf8_validity[1] = {0x1B};

static int64_t count_nulls(const uint8_t* validity, int64_t offset, int64_t length) {
  int64_t i, nulls = 0;
  for (i = offset; i < offset + length; ++i) {
    if (((validity[i / 8] >> (i % 8)) & 1) == 0) nulls++;
  }
  return nulls;
}

static int fill_int32(struct ArrowArray* array, int slot, int is_root, int64_t offset,
                      int64_t length, int64_t n_buffers) {
  int rc = init_array(array, slot, is_root, length,
                      count_nulls(int32_validity, offset, length), offset, n_buffers,
                      /*buffer_slots=*/2, /*n_children=*/0);
  if (rc == 0) rc = set_buffer(array, 0, int32_validity, sizeof(int32_validity));
  if (rc == 0) rc = set_buffer(array, 1, int32_values, (size_t)(offset + length) * 4);
  return rc;
}

/* `patched_offsets` (may be NULL) replaces the offsets of the valid data. */
static int fill_utf8(struct ArrowArray* array, int slot, int is_root, int64_t null_count,
                     const int32_t* patched_offsets) {
  const int32_t* offsets = patched_offsets != NULL ? patched_offsets : utf8_offsets;
  int rc = init_array(array, slot, is_root, 5, null_count, 0, 3, 3, 0);
  if (rc == 0) rc = set_buffer(array, 0, utf8_validity, sizeof(utf8_validity));
  if (rc == 0) rc = set_buffer(array, 1, offsets, sizeof(utf8_offsets));
  if (rc == 0) rc = set_buffer(array, 2, utf8_data, sizeof(utf8_data));
  return rc;
}

/* ---- the producers ------------------------------------------------------- */

int interop_produce_int32(int slot, int64_t offset, struct ArrowDeviceArray* out,
                          struct ArrowSchema* schema) {
  struct ArrowArray array;
  int rc;
  memset(out, 0, sizeof(*out));
  memset(schema, 0, sizeof(*schema));
  if (!slot_ok(slot) || offset < 0 || offset > 7) return EINVAL;
  rc = init_schema(schema, slot, 1, "i", "", ARROW_FLAG_NULLABLE, 0);
  if (rc != 0) return rc;
  rc = fill_int32(&array, slot, 1, offset, 7 - offset, 2);
  wrap_cpu(out, &array);
  return rc == 0 ? 0 : fail_both(rc, out, schema);
}

int interop_produce_int32_wrong_n_buffers(int slot, struct ArrowDeviceArray* out,
                                          struct ArrowSchema* schema) {
  struct ArrowArray array;
  int rc;
  memset(out, 0, sizeof(*out));
  memset(schema, 0, sizeof(*schema));
  if (!slot_ok(slot)) return EINVAL;
  rc = init_schema(schema, slot, 1, "i", "", ARROW_FLAG_NULLABLE, 0);
  if (rc != 0) return rc;
  /* int32 has two buffers (validity, values); claim one. */
  rc = fill_int32(&array, slot, 1, 0, 7, 1);
  wrap_cpu(out, &array);
  return rc == 0 ? 0 : fail_both(rc, out, schema);
}

int interop_produce_utf8(int slot, struct ArrowDeviceArray* out, struct ArrowSchema* schema) {
  struct ArrowArray array;
  int rc;
  memset(out, 0, sizeof(*out));
  memset(schema, 0, sizeof(*schema));
  if (!slot_ok(slot)) return EINVAL;
  rc = init_schema(schema, slot, 1, "u", "", ARROW_FLAG_NULLABLE, 0);
  if (rc != 0) return rc;
  rc = fill_utf8(&array, slot, 1, 1, NULL);
  wrap_cpu(out, &array);
  return rc == 0 ? 0 : fail_both(rc, out, schema);
}

int interop_produce_utf8_decreasing_offsets(int slot, struct ArrowDeviceArray* out,
                                            struct ArrowSchema* schema) {
  /* Element 3 would span bytes 5..3. Every offset stays within the 16 data
   * bytes, so an importer that misses the defect reads no foreign memory. */
  static const int32_t decreasing[6] = {0, 5, 5, 5, 3, 16};
  struct ArrowArray array;
  int rc;
  memset(out, 0, sizeof(*out));
  memset(schema, 0, sizeof(*schema));
  if (!slot_ok(slot)) return EINVAL;
  rc = init_schema(schema, slot, 1, "u", "", ARROW_FLAG_NULLABLE, 0);
  if (rc != 0) return rc;
  rc = fill_utf8(&array, slot, 1, 1, decreasing);
  wrap_cpu(out, &array);
  return rc == 0 ? 0 : fail_both(rc, out, schema);
}

static int produce_struct(int slot, int64_t array_children, struct ArrowDeviceArray* out,
                          struct ArrowSchema* schema) {
  struct ArrowArray array;
  int rc;
  memset(out, 0, sizeof(*out));
  memset(schema, 0, sizeof(*schema));
  if (!slot_ok(slot)) return EINVAL;

  /* Type: struct<ints: int32, strs: utf8>, children nullable. */
  rc = init_schema(schema, slot, 1, "+s", "", 0, 2);
  if (rc == 0) {
    rc = init_schema(schema->children[0], slot, 0, "i", "ints", ARROW_FLAG_NULLABLE, 0);
  }
  if (rc == 0) {
    rc = init_schema(schema->children[1], slot, 0, "u", "strs", ARROW_FLAG_NULLABLE, 0);
  }
  if (rc != 0) {
    if (schema->release != NULL) schema->release(schema);
    return rc;
  }

  /* Data: a struct without a validity bitmap (no nulls, bitmap omitted). */
  rc = init_array(&array, slot, 1, 5, 0, 0, 1, 1, array_children);
  if (rc == 0) rc = fill_int32(array.children[0], slot, 0, 0, 5, 2);
  /* null_count -1: "unknown", as in the spec's struct example. */
  if (rc == 0 && array_children > 1) rc = fill_utf8(array.children[1], slot, 0, -1, NULL);
  wrap_cpu(out, &array);
  return rc == 0 ? 0 : fail_both(rc, out, schema);
}

int interop_produce_struct(int slot, struct ArrowDeviceArray* out, struct ArrowSchema* schema) {
  return produce_struct(slot, 2, out, schema);
}

int interop_produce_struct_missing_child(int slot, struct ArrowDeviceArray* out,
                                         struct ArrowSchema* schema) {
  return produce_struct(slot, 1, out, schema);
}

const void* interop_int32_values_pointer(const struct ArrowDeviceArray* array) {
  if (array->array.release == NULL || array->array.buffers == NULL) return NULL;
  return array->array.buffers[1];
}
