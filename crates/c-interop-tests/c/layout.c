/*
 * The layout of every struct of arrow_device.h as a C compiler sees it, for
 * tests/layout.rs to compare with the Rust definitions in arrow_device::abi.
 */
#include "interop.h"

/* C99 has no alignof: the offset of a member placed after a char is the
 * member type's alignment. */
#define ALIGN_PROBE(T)       \
  struct align_probe_##T {   \
    char pad;                \
    struct T member;         \
  }

ALIGN_PROBE(ArrowSchema);
ALIGN_PROBE(ArrowArray);
ALIGN_PROBE(ArrowArrayStream);
ALIGN_PROBE(ArrowDeviceArray);
ALIGN_PROBE(ArrowDeviceArrayStream);
ALIGN_PROBE(ArrowAsyncTask);
ALIGN_PROBE(ArrowAsyncProducer);
ALIGN_PROBE(ArrowAsyncDeviceStreamHandler);

struct align_probe_device_type {
  char pad;
  ArrowDeviceType member;
};

#define STRUCT_ROW(T) \
  {#T, "", 0, sizeof(struct T), offsetof(struct align_probe_##T, member)}

#define MEMBER_SIZE(T, f) sizeof(((struct T*)0)->f)

#define FIELD_ROW(T, f) {#T, #f, offsetof(struct T, f), MEMBER_SIZE(T, f), 0}

static const struct interop_layout_entry layout_table[] = {
    {"ArrowDeviceType", "", 0, sizeof(ArrowDeviceType),
     offsetof(struct align_probe_device_type, member)},

    STRUCT_ROW(ArrowSchema),
    FIELD_ROW(ArrowSchema, format),
    FIELD_ROW(ArrowSchema, name),
    FIELD_ROW(ArrowSchema, metadata),
    FIELD_ROW(ArrowSchema, flags),
    FIELD_ROW(ArrowSchema, n_children),
    FIELD_ROW(ArrowSchema, children),
    FIELD_ROW(ArrowSchema, dictionary),
    FIELD_ROW(ArrowSchema, release),
    FIELD_ROW(ArrowSchema, private_data),

    STRUCT_ROW(ArrowArray),
    FIELD_ROW(ArrowArray, length),
    FIELD_ROW(ArrowArray, null_count),
    FIELD_ROW(ArrowArray, offset),
    FIELD_ROW(ArrowArray, n_buffers),
    FIELD_ROW(ArrowArray, n_children),
    FIELD_ROW(ArrowArray, buffers),
    FIELD_ROW(ArrowArray, children),
    FIELD_ROW(ArrowArray, dictionary),
    FIELD_ROW(ArrowArray, release),
    FIELD_ROW(ArrowArray, private_data),

    STRUCT_ROW(ArrowArrayStream),
    FIELD_ROW(ArrowArrayStream, get_schema),
    FIELD_ROW(ArrowArrayStream, get_next),
    FIELD_ROW(ArrowArrayStream, get_last_error),
    FIELD_ROW(ArrowArrayStream, release),
    FIELD_ROW(ArrowArrayStream, private_data),

    STRUCT_ROW(ArrowDeviceArray),
    FIELD_ROW(ArrowDeviceArray, array),
    FIELD_ROW(ArrowDeviceArray, device_id),
    FIELD_ROW(ArrowDeviceArray, device_type),
    FIELD_ROW(ArrowDeviceArray, sync_event),
    FIELD_ROW(ArrowDeviceArray, reserved),

    STRUCT_ROW(ArrowDeviceArrayStream),
    FIELD_ROW(ArrowDeviceArrayStream, device_type),
    FIELD_ROW(ArrowDeviceArrayStream, get_schema),
    FIELD_ROW(ArrowDeviceArrayStream, get_next),
    FIELD_ROW(ArrowDeviceArrayStream, get_last_error),
    FIELD_ROW(ArrowDeviceArrayStream, release),
    FIELD_ROW(ArrowDeviceArrayStream, private_data),

    STRUCT_ROW(ArrowAsyncTask),
    FIELD_ROW(ArrowAsyncTask, extract_data),
    FIELD_ROW(ArrowAsyncTask, private_data),

    STRUCT_ROW(ArrowAsyncProducer),
    FIELD_ROW(ArrowAsyncProducer, device_type),
    FIELD_ROW(ArrowAsyncProducer, request),
    FIELD_ROW(ArrowAsyncProducer, cancel),
    FIELD_ROW(ArrowAsyncProducer, additional_metadata),
    FIELD_ROW(ArrowAsyncProducer, private_data),

    STRUCT_ROW(ArrowAsyncDeviceStreamHandler),
    FIELD_ROW(ArrowAsyncDeviceStreamHandler, on_schema),
    FIELD_ROW(ArrowAsyncDeviceStreamHandler, on_next_task),
    FIELD_ROW(ArrowAsyncDeviceStreamHandler, on_error),
    FIELD_ROW(ArrowAsyncDeviceStreamHandler, release),
    FIELD_ROW(ArrowAsyncDeviceStreamHandler, producer),
    FIELD_ROW(ArrowAsyncDeviceStreamHandler, private_data),
};

const struct interop_layout_entry* interop_layout_table(size_t* n) {
  *n = sizeof(layout_table) / sizeof(layout_table[0]);
  return layout_table;
}

#define MACRO_ROW(m) {#m, (int64_t)(m)}

static const struct interop_macro_entry device_type_macros[] = {
    MACRO_ROW(ARROW_DEVICE_CPU),          MACRO_ROW(ARROW_DEVICE_CUDA),
    MACRO_ROW(ARROW_DEVICE_CUDA_HOST),    MACRO_ROW(ARROW_DEVICE_OPENCL),
    MACRO_ROW(ARROW_DEVICE_VULKAN),       MACRO_ROW(ARROW_DEVICE_METAL),
    MACRO_ROW(ARROW_DEVICE_VPI),          MACRO_ROW(ARROW_DEVICE_ROCM),
    MACRO_ROW(ARROW_DEVICE_ROCM_HOST),    MACRO_ROW(ARROW_DEVICE_EXT_DEV),
    MACRO_ROW(ARROW_DEVICE_CUDA_MANAGED), MACRO_ROW(ARROW_DEVICE_ONEAPI),
    MACRO_ROW(ARROW_DEVICE_WEBGPU),       MACRO_ROW(ARROW_DEVICE_HEXAGON),
};

const struct interop_macro_entry* interop_device_type_macros(size_t* n) {
  *n = sizeof(device_type_macros) / sizeof(device_type_macros[0]);
  return device_type_macros;
}

static const struct interop_macro_entry flag_macros[] = {
    MACRO_ROW(ARROW_FLAG_DICTIONARY_ORDERED),
    MACRO_ROW(ARROW_FLAG_NULLABLE),
    MACRO_ROW(ARROW_FLAG_MAP_KEYS_SORTED),
};

const struct interop_macro_entry* interop_flag_macros(size_t* n) {
  *n = sizeof(flag_macros) / sizeof(flag_macros[0]);
  return flag_macros;
}
