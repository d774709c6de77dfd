/*
 * Includes another project's copy of the Arrow C definitions first and then
 * arrow_device.h: our header must skip every block the other copy already
 * defined. This file only compiles if it does.
 */
#include "other_project_abi.h"
#include "arrow_device.h"

#include "interop.h"

#define STATIC_CHECK(name, cond) typedef char static_check_##name[(cond) ? 1 : -1]

STATIC_CHECK(handler_size, sizeof(struct ArrowAsyncDeviceStreamHandler) == 48 || sizeof(void*) != 8);
STATIC_CHECK(nullable_value, ARROW_FLAG_NULLABLE == 2);

size_t interop_coexist_theirs_first(void) {
  struct ArrowDeviceArray array;
  struct ArrowDeviceArrayStream stream;
  struct ArrowArrayStream host_stream;
  struct ArrowAsyncTask task;
  struct ArrowAsyncProducer producer;
  struct ArrowAsyncDeviceStreamHandler handler;
  struct ArrowSchema schema;
  (void)array;
  (void)stream;
  (void)host_stream;
  (void)task;
  (void)producer;
  (void)handler;
  (void)schema;
  return sizeof(struct ArrowDeviceArray);
}
