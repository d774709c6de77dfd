// Compiles arrow_device.h as C++11 (with warnings as errors) and gives the
// structs C linkage from C++ code, as a C++ consumer would.
#include <stddef.h>

#include "arrow_device.h"

static_assert(sizeof(ArrowDeviceType) == 4, "ArrowDeviceType is int32_t");
static_assert(sizeof(void*) != 8 || sizeof(ArrowSchema) == 72, "ArrowSchema");
static_assert(sizeof(void*) != 8 || sizeof(ArrowArray) == 80, "ArrowArray");
static_assert(sizeof(void*) != 8 || sizeof(ArrowArrayStream) == 40, "ArrowArrayStream");
static_assert(sizeof(void*) != 8 || sizeof(ArrowDeviceArray) == 128, "ArrowDeviceArray");
static_assert(sizeof(void*) != 8 || offsetof(ArrowDeviceArray, device_id) == 80, "device_id");
static_assert(sizeof(void*) != 8 || offsetof(ArrowDeviceArray, device_type) == 88,
              "device_type");
static_assert(sizeof(void*) != 8 || offsetof(ArrowDeviceArray, sync_event) == 96,
              "sync_event");
static_assert(sizeof(void*) != 8 || offsetof(ArrowDeviceArray, reserved) == 104, "reserved");
static_assert(sizeof(void*) != 8 || sizeof(ArrowDeviceArrayStream) == 48,
              "ArrowDeviceArrayStream");
static_assert(sizeof(void*) != 8 || sizeof(ArrowAsyncTask) == 16, "ArrowAsyncTask");
static_assert(sizeof(void*) != 8 || sizeof(ArrowAsyncProducer) == 40, "ArrowAsyncProducer");
static_assert(sizeof(void*) != 8 || sizeof(ArrowAsyncDeviceStreamHandler) == 48,
              "ArrowAsyncDeviceStreamHandler");
static_assert(ARROW_DEVICE_CPU == 1 && ARROW_DEVICE_HEXAGON == 16, "device type values");

extern "C" size_t interop_cpp_sizeof_device_array(void) { return sizeof(ArrowDeviceArray); }

extern "C" int32_t interop_cpp_read_device_fields(const ArrowDeviceArray* array,
                                                  int64_t* device_id) {
  *device_id = array->device_id;
  return array->device_type;
}
