/*
 * The C side of the c-interop-tests crate: what src/lib.rs declares with
 * `extern "C"`. Every struct here has a #[repr(C)] twin in src/lib.rs.
 */
#ifndef C_INTEROP_TESTS_INTEROP_H
#define C_INTEROP_TESTS_INTEROP_H

#include <stddef.h>
#include <stdint.h>

#include "arrow_device.h"

/* ---- layout.c: sizeof / offsetof / alignment seen through the header ---- */

/* One row per struct (field == "" and offset == 0) and one per member. */
struct interop_layout_entry {
  const char* type_name;
  const char* field;
  size_t offset;
  size_t size;
  size_t align;
};

/* The whole table; `*n` receives its length. */
const struct interop_layout_entry* interop_layout_table(size_t* n);

struct interop_macro_entry {
  const char* name;
  int64_t value;
};

/* The ARROW_DEVICE_* macros (and the ARROW_FLAG_* ones) as the header
 * defines them. */
const struct interop_macro_entry* interop_device_type_macros(size_t* n);
const struct interop_macro_entry* interop_flag_macros(size_t* n);

/* ---- coexist_*.c and header_check.cpp ---- */

/* Each returns sizeof(struct ArrowDeviceArray) as seen by a translation unit
 * that included our header together with another project's copy of the same
 * definitions (ours first / theirs first), or by a C++ translation unit. */
size_t interop_coexist_ours_first(void);
size_t interop_coexist_theirs_first(void);
size_t interop_cpp_sizeof_device_array(void);
/* Reads the device fields of `array` from C++ code: returns device_type and
 * stores device_id; proves the structs are usable (not just declared) in
 * C++ with C linkage. */
int32_t interop_cpp_read_device_fields(const struct ArrowDeviceArray* array,
                                       int64_t* device_id);

/* ---- producer.c: C producers written like the spec's examples ---- */

/* Release bookkeeping is kept per slot so that tests running in parallel
 * threads each read their own counters. */
#define INTEROP_SLOTS 1024

/* How many times the release callback of the base ArrowArray / ArrowSchema
 * produced for `slot` ran. */
int64_t interop_array_releases(int slot);
int64_t interop_schema_releases(int slot);
/* How many times the release callback of a child ArrowArray / ArrowSchema
 * ran (whether called by the parent's release or by the consumer after
 * moving the child out). */
int64_t interop_child_array_releases(int slot);
int64_t interop_child_schema_releases(int slot);
/* malloc calls minus free calls made for `slot`: 0 once all is released. */
int64_t interop_live_allocations(int slot);

/* Each producer fills a consumer-allocated ArrowDeviceArray and ArrowSchema
 * on the CPU (device_id -1, sync_event NULL, reserved zero) and returns 0, or
 * ENOMEM / EINVAL with both structs left released. */

/* int32 [1, null, 3, null, 5, 6, 7] with a validity bitmap, exported with
 * ArrowArray.offset = `offset` and length 7 - offset (0 <= offset <= 7). The
 * null slots hold -999 so that a consumer reading them is caught. */
int interop_produce_int32(int slot, int64_t offset, struct ArrowDeviceArray* out,
                          struct ArrowSchema* schema);
/* utf8 ["hello", "", null, "arrow", "device"]. */
int interop_produce_utf8(int slot, struct ArrowDeviceArray* out,
                         struct ArrowSchema* schema);
/* struct<ints: int32, strs: utf8> of length 5 with no struct-level nulls:
 * ints [1, null, 3, null, 5], strs ["hello", "", null, "arrow", "device"]
 * (the strs child reports null_count -1, "unknown", as the spec's example
 * does). */
int interop_produce_struct(int slot, struct ArrowDeviceArray* out,
                           struct ArrowSchema* schema);

/* Malformed producers: each breaks one rule of the C Data Interface. */
/* int32 whose ArrowArray.n_buffers is 1 instead of 2 (the buffers array
 * still holds two entries, so an importer that ignores n_buffers reads
 * valid memory and the test fails instead of crashing). */
int interop_produce_int32_wrong_n_buffers(int slot, struct ArrowDeviceArray* out,
                                          struct ArrowSchema* schema);
/* struct whose schema has two children but whose array has one. */
int interop_produce_struct_missing_child(int slot, struct ArrowDeviceArray* out,
                                         struct ArrowSchema* schema);
/* utf8 whose offsets decrease ([0, 5, 5, 5, 3, 16]) at a valid slot. (A
 * last offset past the end of the data cannot be detected by a consumer:
 * the C Data Interface carries no buffer sizes, the last offset *is* the
 * data buffer's size.) */
int interop_produce_utf8_decreasing_offsets(int slot, struct ArrowDeviceArray* out,
                                            struct ArrowSchema* schema);

/* The data pointer (buffers[1]) of a produced int32 array, for zero-copy
 * checks. */
const void* interop_int32_values_pointer(const struct ArrowDeviceArray* array);

/* ---- consumer.c: a C consumer of CPU device arrays ---- */

#define INTEROP_TEXT 512

/* What the consumer saw. `status` is 0, or the source line of the first
 * check that failed. Values are rendered as text, joined by '|', with nulls
 * written as "null"; a struct's children are rendered into `ints` (the "i"
 * child) and `strs` (the "u" child). */
struct interop_report {
  int32_t status;
  int32_t device_type;
  int64_t device_id;
  int32_t sync_event_is_null;
  int32_t reserved_all_zero;
  int64_t length;
  /* ArrowArray.null_count as declared, and as counted from the bitmap. */
  int64_t declared_null_count;
  int64_t counted_null_count;
  /* Sum of the non-null int32 values (of the root, or of the "i" child). */
  int64_t int_sum;
  /* 1 when the release callback set the release member to NULL. */
  int32_t array_release_nulled;
  int32_t schema_release_nulled;
  /* interop_consume_moved_children only: how many moved-out children
   * (arrays and schemas) were read after their parents were released and
   * then released themselves, their release member set to NULL. */
  int32_t moved_children_released;
  /* ArrowSchema.flags of the root and of the first two children. */
  int64_t root_flags;
  int64_t child_flags[2];
  char format[16];
  char child_names[64];
  char ints[INTEROP_TEXT];
  char strs[INTEROP_TEXT];
};

/* Reads an int32 ("i"), utf8 ("u") or struct-of-those ("+s") CPU device
 * array, then releases both structs (always, if they were not released). */
void interop_consume(struct ArrowDeviceArray* array, struct ArrowSchema* schema,
                     struct interop_report* report);

/* For a struct ("+s") array without top-level nulls or offset: moves both
 * children (array and schema) out of their parents as the spec's "Moving
 * child arrays" allows, releases the parents first, and only then reads and
 * releases the children. */
void interop_consume_moved_children(struct ArrowDeviceArray* array, struct ArrowSchema* schema,
                                    struct interop_report* report);

/* sizeof(struct interop_report), to check the Rust mirror. */
size_t interop_report_size(void);

#endif /* C_INTEROP_TESTS_INTEROP_H */
