/*
 * Includes arrow_device.h first and then another project's copy of the same
 * definitions: the canonical guards must make the second copy vanish. This
 * file only compiles if they do (a second definition of a struct is an
 * error in C).
 */
#include "arrow_device.h"
#include "other_project_abi.h"

#include "interop.h"

/* C99 static assertion: a negative array size fails the build. */
#define STATIC_CHECK(name, cond) typedef char static_check_##name[(cond) ? 1 : -1]

STATIC_CHECK(device_array_size, sizeof(struct ArrowDeviceArray) == 128 || sizeof(void*) != 8);
STATIC_CHECK(hexagon_value, ARROW_DEVICE_HEXAGON == 16);

size_t interop_coexist_ours_first(void) {
  /* Use every struct so that each must be complete here. */
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
