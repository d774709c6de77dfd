/*
 * Producers of the C Device Data Interface for tests/check.rs: one correct
 * array producer, one correct stream producer, and one producer per rule
 * of `arrow-device check` that breaks exactly that rule. tests/check.rs
 * compiles tree.c, arrays.c and streams.c into one shared library and runs
 * `arrow-device check --lib ... --symbol NAME [--stream]` on each symbol.
 *
 * Every batch is a CPU struct<a: int32, b: utf8> of TREE_ROWS rows with
 * nulls in both children. Each node of a tree is a separate allocation
 * owned by its own release callback, as the spec's "Moving child arrays"
 * needs: a consumer may move a child out and release it after its parent.
 */
#ifndef AD_CHECK_PRODUCERS_H
#define AD_CHECK_PRODUCERS_H

#include <stddef.h>
#include <stdint.h>

#include "arrow_device.h"

#define TREE_ROWS 4

/* What one array node's release frees: its buffers (`owned`, of `sizes`
 * bytes; what `buffers` points to may start later, see `misalign`). */
struct node {
  const void* buffers[3];
  void* owned[3];
  size_t sizes[3];
};

/* calloc, aborting on failure: a half-built tree is of no use to a test. */
void* tree_alloc(size_t size);

/* The correct release: releases every child and the dictionary (unless
 * moved out, i.e. already released), frees them, frees this node's
 * buffers and marks the struct released. */
void tree_release_array(struct ArrowArray* array);
/* Frees this node's own buffers and marks it released; no children. */
void tree_free_node(struct ArrowArray* array);
/* The correct release of a schema tree. */
void tree_release_schema(struct ArrowSchema* schema);

/* Batch `batch` of the stream (0 for the single array): a = [10k+1, null,
 * 10k+3, 10k+4], b = ["x", "yy", null, "zzz"]. `b_offsets` replaces b's
 * offsets when not NULL; `misalign` shifts a's values by that many bytes
 * from malloc's alignment. */
void tree_batch(struct ArrowArray* out, int batch, const int32_t* b_offsets, size_t misalign);
/* The schema of `tree_batch`, the second child named `b_name`. */
void tree_batch_schema(struct ArrowSchema* out, const char* b_name);
/* dictionary<int32, utf8>: keys [0, 1, null, 0], values ["x", "yy"]. */
void tree_dictionary(struct ArrowArray* out);
void tree_dictionary_schema(struct ArrowSchema* out);
/* The device fields of a CPU array: device_id -1, NULL sync_event,
 * reserved zero. */
void tree_on_cpu(struct ArrowDeviceArray* out);

#endif
