/*
 * Array producers: `int NAME(struct ArrowDeviceArray* out, struct
 * ArrowSchema* schema_out)`, as `arrow-device check --symbol NAME` calls
 * them. `correct_array` follows every rule; each other one breaks exactly
 * the rule its comment names (the check id tests/check.rs expects to fail).
 */
#include <errno.h>
#include <string.h>

#include "producers.h"

/* A correct export of batch 0 with its schema. */
static void export_batch(struct ArrowDeviceArray* out, struct ArrowSchema* schema_out,
                         const int32_t* b_offsets, size_t misalign) {
  memset(out, 0, sizeof *out);
  tree_batch(&out->array, 0, b_offsets, misalign);
  tree_on_cpu(out);
  tree_batch_schema(schema_out, "b");
}

int correct_array(struct ArrowDeviceArray* out, struct ArrowSchema* schema_out) {
  export_batch(out, schema_out, NULL, 0);
  return 0;
}

/* device_array.reserved: the spec says producers MUST zero these bytes. */
int array_reserved_nonzero(struct ArrowDeviceArray* out, struct ArrowSchema* schema_out) {
  export_batch(out, schema_out, NULL, 0);
  out->reserved[1] = 7;
  return 0;
}

/* device_array.device: the CPU has no device ids; its device_id is -1. */
int array_cpu_device_id_0(struct ArrowDeviceArray* out, struct ArrowSchema* schema_out) {
  export_batch(out, schema_out, NULL, 0);
  out->device_id = 0;
  return 0;
}

/* device_array.device: 999 is no ArrowDeviceType. */
int array_unknown_device_type(struct ArrowDeviceArray* out, struct ArrowSchema* schema_out) {
  export_batch(out, schema_out, NULL, 0);
  out->device_type = 999;
  out->device_id = 0;
  return 0;
}

/* device_array.sync_event: the CPU has no event type, so NULL. */
int array_cpu_sync_event(struct ArrowDeviceArray* out, struct ArrowSchema* schema_out) {
  static int not_an_event;
  export_batch(out, schema_out, NULL, 0);
  out->sync_event = &not_an_event;
  return 0;
}

/* device_array.valid_full: b's offsets decrease at row 1 (3 then 1); the
 * first and last offsets are those of the correct array, so only a full
 * validation sees it. */
int array_decreasing_offsets(struct ArrowDeviceArray* out, struct ArrowSchema* schema_out) {
  static const int32_t offsets[TREE_ROWS + 1] = {0, 3, 1, 3, 6};
  export_batch(out, schema_out, offsets, 0);
  return 0;
}

/* device_array.alignment (advisory): a's int32 values start one byte
 * past malloc's alignment. */
int array_misaligned_int32(struct ArrowDeviceArray* out, struct ArrowSchema* schema_out) {
  export_batch(out, schema_out, NULL, 1);
  return 0;
}

/* device_array.export: the producer fails. */
int array_failing_export(struct ArrowDeviceArray* out, struct ArrowSchema* schema_out) {
  (void)out;
  (void)schema_out;
  return EINVAL;
}

/* device_array.release_once: the root's release frees its own node but
 * never releases its dictionary (which leaks: the flaw under test). A
 * dictionary array has no children, so the moved-child rule does not
 * apply and this is the only rule broken; a struct with a flawed child
 * would also break device_array.child_move, which releases the parent
 * too. */
static void release_keeping_dictionary(struct ArrowArray* array) { tree_free_node(array); }

int array_dictionary_not_released(struct ArrowDeviceArray* out, struct ArrowSchema* schema_out) {
  memset(out, 0, sizeof *out);
  tree_dictionary(&out->array);
  out->array.release = release_keeping_dictionary;
  tree_on_cpu(out);
  tree_dictionary_schema(schema_out);
  return 0;
}

/* device_array.schema_release_once: the root schema's release marks it
 * released without releasing its children (which leak). */
static void release_schema_keeping_children(struct ArrowSchema* schema) {
  schema->release = NULL;
}

int array_schema_children_not_released(struct ArrowDeviceArray* out,
                                       struct ArrowSchema* schema_out) {
  export_batch(out, schema_out, NULL, 0);
  schema_out->release = release_schema_keeping_children;
  return 0;
}

/* device_array.child_move: the parent's release overwrites buffer 1 of
 * every child (a's values, b's offsets) with 0xFF before releasing it, including a child that was moved
 * out (its struct in the parent is marked released but still points to
 * its node). The moved child's buffers stay allocated, since the moved
 * child owns them until its own release, so the checker reads changed
 * values, not freed memory. */
static void release_scribbling_children(struct ArrowArray* array) {
  for (int64_t i = 0; i < array->n_children; i++) {
    struct ArrowArray* child = array->children[i];
    struct node* node = child->private_data;
    memset(node->owned[1], 0xFF, node->sizes[1]);
  }
  tree_release_array(array);
}

int array_parent_overwrites_children(struct ArrowDeviceArray* out,
                                     struct ArrowSchema* schema_out) {
  export_batch(out, schema_out, NULL, 0);
  out->array.release = release_scribbling_children;
  return 0;
}
