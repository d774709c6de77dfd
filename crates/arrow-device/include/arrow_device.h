/*
 * arrow_device.h: the structs of the Apache Arrow C Data Interface, the C
 * Stream Interface and the C Device Data Interface (with its device stream and
 * async device stream), as exchanged by the arrow-device Rust crate.
 *
 * Licensed under the Apache License, Version 2.0.
 *
 * Every block sits under the canonical guard the Arrow specification names
 * for it, spelled exactly as the specification spells it. Another header that
 * copies the same definitions (Arrow C++'s abi.h, nanoarrow.h, ...) uses the
 * same guards, so this file can be included before or after it and each
 * struct is defined once.
 *
 * The header declares no functions: it only describes memory layouts. The
 * layouts match `arrow_device::abi` field by field; the crate's tests compare
 * sizeof/offsetof computed here with the Rust definitions.
 */
#ifndef ARROW_DEVICE_RS_ARROW_DEVICE_H
#define ARROW_DEVICE_RS_ARROW_DEVICE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* C Data Interface                                                          */
/* ------------------------------------------------------------------------ */

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

/* Values for ArrowSchema.flags (bit flags). */
#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

/* The type of an array: a format string plus children and dictionary. */
struct ArrowSchema {
  /* Type description. */
  const char* format;
  const char* name;
  const char* metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema** children;
  struct ArrowSchema* dictionary;

  /* Frees what the producer allocated; NULL marks a released struct. */
  void (*release)(struct ArrowSchema*);
  /* Owned by the producer, for use by release. */
  void* private_data;
};

/* The data of an array. On a device, only the values in `buffers` are device
 * pointers; the struct itself and the arrays it points to are host memory. */
struct ArrowArray {
  /* Data description. */
  int64_t length;
  int64_t null_count;
  int64_t offset;
  int64_t n_buffers;
  int64_t n_children;
  const void** buffers;
  struct ArrowArray** children;
  struct ArrowArray* dictionary;

  /* Frees what the producer allocated; NULL marks a released struct. */
  void (*release)(struct ArrowArray*);
  /* Owned by the producer, for use by release. */
  void* private_data;
};

#endif /* ARROW_C_DATA_INTERFACE */

/* ------------------------------------------------------------------------ */
/* C Stream Interface                                                        */
/* ------------------------------------------------------------------------ */

#ifndef ARROW_C_STREAM_INTERFACE
#define ARROW_C_STREAM_INTERFACE

/* A pull-style stream of host arrays sharing one schema. Callbacks return 0
 * or an errno-compatible error code. */
struct ArrowArrayStream {
  int (*get_schema)(struct ArrowArrayStream*, struct ArrowSchema* out);
  /* A released `out` marks the end of the stream. */
  int (*get_next)(struct ArrowArrayStream*, struct ArrowArray* out);
  /* Message of the last error, valid until the next call on the stream. */
  const char* (*get_last_error)(struct ArrowArrayStream*);

  /* NULL once released. */
  void (*release)(struct ArrowArrayStream*);
  void* private_data;
};

#endif /* ARROW_C_STREAM_INTERFACE */

/* ------------------------------------------------------------------------ */
/* C Device Data Interface                                                   */
/* ------------------------------------------------------------------------ */

#ifndef ARROW_C_DEVICE_DATA_INTERFACE
#define ARROW_C_DEVICE_DATA_INTERFACE

/* Kind of device the buffers live on. A plain int32_t with macro values
 * rather than an enum, so that the storage size never depends on the
 * compiler. The values are DLPack's kDL* values. */
typedef int32_t ArrowDeviceType;

/* Host memory; same as a plain ArrowArray. */
#define ARROW_DEVICE_CPU 1
/* CUDA device memory (cudaMalloc / cuMemAlloc). */
#define ARROW_DEVICE_CUDA 2
/* Page-locked host memory from cudaMallocHost / cuMemAllocHost. */
#define ARROW_DEVICE_CUDA_HOST 3
/* OpenCL device memory. */
#define ARROW_DEVICE_OPENCL 4
/* Vulkan buffers. */
#define ARROW_DEVICE_VULKAN 7
/* Apple GPUs through Metal. */
#define ARROW_DEVICE_METAL 8
/* Verilog simulator buffers. */
#define ARROW_DEVICE_VPI 9
/* AMD GPUs through ROCm. */
#define ARROW_DEVICE_ROCM 10
/* Page-locked host memory from hipMallocHost. */
#define ARROW_DEVICE_ROCM_HOST 11
/* Escape hatch for devices not listed here; the producer documents what it
 * means (the arrow-device crate's emulated device uses it). */
#define ARROW_DEVICE_EXT_DEV 12
/* CUDA managed (unified) memory from cudaMallocManaged. */
#define ARROW_DEVICE_CUDA_MANAGED 13
/* oneAPI unified shared memory on a non-partitioned device. */
#define ARROW_DEVICE_ONEAPI 14
/* WebGPU. */
#define ARROW_DEVICE_WEBGPU 15
/* Qualcomm Hexagon DSP. */
#define ARROW_DEVICE_HEXAGON 16

/* An ArrowArray plus where its buffers live. Releasing is done through
 * `array.release`, which also frees `sync_event`. */
struct ArrowDeviceArray {
  struct ArrowArray array;
  /* Which device of `device_type`; -1 by convention for the CPU. */
  int64_t device_id;
  ArrowDeviceType device_type;
  /* NULL, or a pointer to the device's event (cudaEvent_t*, hipEvent_t*,
   * ...) to wait on before touching the buffers. Owned by the producer. */
  void* sync_event;

  /* Room for future fields; producers must set it to zero. */
  int64_t reserved[3];
};

#endif /* ARROW_C_DEVICE_DATA_INTERFACE */

/* ------------------------------------------------------------------------ */
/* C Device Stream Interface                                                 */
/* ------------------------------------------------------------------------ */

#ifndef ARROW_C_DEVICE_STREAM_INTERFACE
#define ARROW_C_DEVICE_STREAM_INTERFACE

/* A pull-style stream of device arrays sharing one schema and one device
 * type (device ids may differ between arrays). Callbacks return 0 or an
 * errno-compatible error code. */
struct ArrowDeviceArrayStream {
  ArrowDeviceType device_type;

  int (*get_schema)(struct ArrowDeviceArrayStream*, struct ArrowSchema*);
  /* A released `out` marks the end of the stream. */
  int (*get_next)(struct ArrowDeviceArrayStream*, struct ArrowDeviceArray*);
  /* Message of the last error, valid until the next call on the stream. */
  const char* (*get_last_error)(struct ArrowDeviceArrayStream*);

  /* NULL once released. */
  void (*release)(struct ArrowDeviceArrayStream*);
  void* private_data;
};

#endif /* ARROW_C_DEVICE_STREAM_INTERFACE */

/* ------------------------------------------------------------------------ */
/* C Device Async Stream Interface                                           */
/* ------------------------------------------------------------------------ */

/* Laid out as in Arrow C++'s arrow/c/abi.h, the shipping implementation:
 * ArrowAsyncProducer has no `release` member and extract_data takes a
 * `struct ArrowAsyncTask*`. The listing in the specification's text differs
 * on both points; following abi.h keeps the ABI compatible with Arrow C++. */
#ifndef ARROW_C_ASYNC_STREAM_INTERFACE
#define ARROW_C_ASYNC_STREAM_INTERFACE

/* One unit of data handed to on_next_task. */
struct ArrowAsyncTask {
  /* Moves the task's array into `out` (or just frees it when `out` is
   * NULL). Called exactly once per task; returns 0 or an errno code. */
  int (*extract_data)(struct ArrowAsyncTask* self, struct ArrowDeviceArray* out);

  void* private_data;
};

/* The producer's side of an async stream, given to the handler. */
struct ArrowAsyncProducer {
  ArrowDeviceType device_type;

  /* Allows `n` more calls to on_next_task; n <= 0 is an error reported
   * through on_error. */
  void (*request)(struct ArrowAsyncProducer* self, int64_t n);
  /* Asks the producer to stop; safe to call more than once. */
  void (*cancel)(struct ArrowAsyncProducer* self);

  /* NULL, or key/value pairs encoded like ArrowSchema.metadata. */
  const char* additional_metadata;
  void* private_data;
};

/* The consumer's side of an async stream: callbacks the producer invokes. */
struct ArrowAsyncDeviceStreamHandler {
  /* Called once, first. Returns 0 or an errno code. */
  int (*on_schema)(struct ArrowAsyncDeviceStreamHandler* self,
                   struct ArrowSchema* stream_schema);
  /* Called per task; a NULL task marks the end of the stream. */
  int (*on_next_task)(struct ArrowAsyncDeviceStreamHandler* self,
                      struct ArrowAsyncTask* task, const char* metadata);
  /* Called at most once, on error; release follows. */
  void (*on_error)(struct ArrowAsyncDeviceStreamHandler* self, int code,
                   const char* message, const char* metadata);

  /* Called exactly once, last. */
  void (*release)(struct ArrowAsyncDeviceStreamHandler* self);

  /* Set by the producer before the first callback. */
  struct ArrowAsyncProducer* producer;

  /* Owned by the consumer. */
  void* private_data;
};

#endif /* ARROW_C_ASYNC_STREAM_INTERFACE */

#ifdef __cplusplus
}
#endif

#endif /* ARROW_DEVICE_RS_ARROW_DEVICE_H */
