/*
 * Stream producers: `int NAME(struct ArrowDeviceArrayStream* out)`, as
 * `arrow-device check --stream --symbol NAME` calls them. `correct_stream`
 * follows every rule; each other one swaps one callback for a flawed one
 * and breaks exactly the rule its comment names.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "producers.h"

#define STREAM_BATCHES 3

struct stream_state {
  int next;         /* batches given so far */
  int schema_calls; /* get_schema calls so far */
};

static struct stream_state* state_of(struct ArrowDeviceArrayStream* stream) {
  return stream->private_data;
}

static int get_schema(struct ArrowDeviceArrayStream* stream, struct ArrowSchema* out) {
  state_of(stream)->schema_calls++;
  tree_batch_schema(out, "b");
  return 0;
}

/* Batch `next` on the CPU, or a released array (the end) once all are out. */
static int get_next(struct ArrowDeviceArrayStream* stream, struct ArrowDeviceArray* out) {
  struct stream_state* state = state_of(stream);
  memset(out, 0, sizeof *out);
  if (state->next >= STREAM_BATCHES) return 0;
  tree_batch(&out->array, state->next, NULL, 0);
  tree_on_cpu(out);
  state->next++;
  return 0;
}

/* No call of this stream fails, so there is never a message. */
static const char* get_last_error(struct ArrowDeviceArrayStream* stream) {
  (void)stream;
  return NULL;
}

static void release(struct ArrowDeviceArrayStream* stream) {
  free(stream->private_data);
  stream->release = NULL;
}

static void export_stream(struct ArrowDeviceArrayStream* out) {
  out->device_type = ARROW_DEVICE_CPU;
  out->get_schema = get_schema;
  out->get_next = get_next;
  out->get_last_error = get_last_error;
  out->release = release;
  out->private_data = tree_alloc(sizeof(struct stream_state));
}

int correct_stream(struct ArrowDeviceArrayStream* out) {
  export_stream(out);
  return 0;
}

/* device_stream.get_schema_stable: the second call names child 1 "c". */
static int get_schema_renaming(struct ArrowDeviceArrayStream* stream, struct ArrowSchema* out) {
  int call = ++state_of(stream)->schema_calls;
  tree_batch_schema(out, call == 1 ? "b" : "c");
  return 0;
}

int stream_unstable_schema(struct ArrowDeviceArrayStream* out) {
  export_stream(out);
  out->get_schema = get_schema_renaming;
  return 0;
}

/* device_stream.end_repeats: after the end, the stream starts over and
 * gives batch 0 again. */
static int get_next_restarting(struct ArrowDeviceArrayStream* stream,
                               struct ArrowDeviceArray* out) {
  struct stream_state* state = state_of(stream);
  if (state->next >= STREAM_BATCHES) {
    memset(out, 0, sizeof *out);
    state->next = 0;
    return 0;
  }
  return get_next(stream, out);
}

int stream_restarts_after_end(struct ArrowDeviceArrayStream* out) {
  export_stream(out);
  out->get_next = get_next_restarting;
  return 0;
}

/* device_stream.device: the stream says EXT_DEV, its arrays are on the CPU. */
int stream_batches_on_another_device(struct ArrowDeviceArrayStream* out) {
  export_stream(out);
  out->device_type = ARROW_DEVICE_EXT_DEV;
  return 0;
}

/* device_stream.last_error: get_next fails at batch 1, and get_last_error
 * then gives bytes that are not UTF-8. (The failing get_next is itself
 * reported, as device_stream.valid_full.) */
static int get_next_failing(struct ArrowDeviceArrayStream* stream,
                            struct ArrowDeviceArray* out) {
  if (state_of(stream)->next == 1) return EIO;
  return get_next(stream, out);
}

static const char* get_last_error_not_utf8(struct ArrowDeviceArrayStream* stream) {
  (void)stream;
  return "read failed at \xff\xfe";
}

int stream_last_error_not_utf8(struct ArrowDeviceArrayStream* out) {
  export_stream(out);
  out->get_next = get_next_failing;
  out->get_last_error = get_last_error_not_utf8;
  return 0;
}

/* device_stream.stream_release: release frees the stream but does not
 * mark it released. */
static void release_unmarked(struct ArrowDeviceArrayStream* stream) {
  free(stream->private_data);
  stream->private_data = NULL;
}

int stream_release_not_marked(struct ArrowDeviceArrayStream* out) {
  export_stream(out);
  out->release = release_unmarked;
  return 0;
}

/* device_stream.callbacks: a live stream without get_last_error. */
int stream_without_get_last_error(struct ArrowDeviceArrayStream* out) {
  export_stream(out);
  out->get_last_error = NULL;
  return 0;
}
