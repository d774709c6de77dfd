/*
 * ad_cli_stream_relay: a C consumer-and-producer of the Arrow C Device
 * Stream Interface, used by `arrow-device --stream`.
 *
 * It takes ownership of a producer's ArrowDeviceArrayStream by MOVING it
 * (spec, "Moving an array" applies to streams alike: a bitwise copy, after
 * which the source is marked released by setting its release callback to
 * NULL) and hands back a new stream, on the same device type, that relays
 * the producer's: each get_next pulls the producer's next array straight
 * into the caller's `out`, checks it with ad_cli_check_array (metadata only
 * on non-CPU devices: "the consumer MUST NOT dereference a pointer to non-CPU
 * memory"), counts it and passes it on. An array that fails the check is
 * released here, as a consumer must release what it was handed, and the
 * relay fails with EINVAL from then on (spec: after an error only release
 * may be called).
 *
 * Ownership on return of ad_cli_stream_relay:
 *   - 0: `out` owns the relay, which owns the producer's stream; `in` is
 *        released (its release is NULL) and must not be released again.
 *        Releasing `out` releases the producer's stream.
 *   - non-zero (an errno code): nothing moved, `err` holds a message; the
 *        caller still owns `in`.
 *
 * `stats`, if not NULL, is written by every get_next and must outlive the
 * relay's last get_next call. `now_ns` is the caller's monotonic clock, so
 * the time spent inside the producer's get_next and in the relay's checks
 * are measured on the same clock as the caller's stages.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ad_cli.h"

/* What the relay saw. Mirrored by `RelayStats` in src/relay.rs (same field
 * order, all int64_t). */
struct ad_cli_relay_stats {
  int64_t batches;        /* arrays passed on (the end marker not counted) */
  int64_t rows;           /* their lengths, summed */
  int64_t upstream_ns;    /* time inside the producer's get_next */
  int64_t check_ns;       /* time in the relay's own checks */
  struct ad_cli_counts counts; /* ad_cli_check_array's counts, summed */
};

typedef int64_t (*ad_cli_clock_ns)(void);

struct relay {
  struct ArrowDeviceArrayStream upstream; /* moved in; released by relay_release */
  struct ArrowSchema schema;              /* upstream's get_schema, to check arrays against */
  ad_cli_clock_ns now_ns;
  struct ad_cli_relay_stats* stats;       /* may be NULL */
  int failed;                             /* errno of a failed get_next, else 0 */
  char last_error[1024];                  /* "" when the last call succeeded */
};

static void set_error(char* buf, size_t len, const char* fmt, ...) {
  if (buf == NULL || len == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, len, fmt, ap);
  va_end(ap);
}

/* The relay behind a live stream, or NULL for a NULL or released one. */
static struct relay* live(struct ArrowDeviceArrayStream* self) {
  if (self == NULL || self->release == NULL || self->private_data == NULL) return NULL;
  return (struct relay*)self->private_data;
}

static const char* upstream_message(struct relay* r) {
  const char* message = r->upstream.get_last_error(&r->upstream);
  return message != NULL ? message : "(no message)";
}

static int relay_get_schema(struct ArrowDeviceArrayStream* self, struct ArrowSchema* out) {
  struct relay* r = live(self);
  if (r == NULL) return EINVAL;
  r->last_error[0] = '\0';
  if (out == NULL) {
    set_error(r->last_error, sizeof(r->last_error), "C relay: get_schema's out is NULL");
    return EINVAL;
  }
  /* The producer writes a fresh schema the caller owns. */
  int rc = r->upstream.get_schema(&r->upstream, out);
  if (rc != 0) {
    set_error(r->last_error, sizeof(r->last_error),
              "C relay: upstream get_schema failed (errno %d): %s", rc, upstream_message(r));
  }
  return rc;
}

static int relay_get_next(struct ArrowDeviceArrayStream* self, struct ArrowDeviceArray* out) {
  struct relay* r = live(self);
  if (r == NULL) return EINVAL;
  r->last_error[0] = '\0';
  if (out == NULL) {
    set_error(r->last_error, sizeof(r->last_error), "C relay: get_next's out is NULL");
    return EINVAL;
  }
  if (r->failed != 0) {
    set_error(r->last_error, sizeof(r->last_error),
              "C relay: the stream failed earlier; only release may follow");
    return r->failed;
  }
  int64_t batch = r->stats != NULL ? r->stats->batches : -1;

  int64_t t0 = r->now_ns();
  int rc = r->upstream.get_next(&r->upstream, out);
  int64_t t1 = r->now_ns();
  if (r->stats != NULL) r->stats->upstream_ns += t1 - t0;
  if (rc != 0) {
    set_error(r->last_error, sizeof(r->last_error),
              "C relay: upstream get_next failed (errno %d): %s", rc, upstream_message(r));
    r->failed = rc;
    return rc;
  }
  if (out->array.release == NULL) return 0; /* the end of the stream, passed on */

  /* Spec: every array of a stream is on the stream's device type. */
  char message[768];
  message[0] = '\0';
  struct ad_cli_counts counts;
  memset(&counts, 0, sizeof(counts));
  if (out->device_type != r->upstream.device_type) {
    set_error(message, sizeof(message), "array: device_type is %d, the stream's is %d",
              (int)out->device_type, (int)r->upstream.device_type);
    rc = EINVAL;
  } else {
    rc = ad_cli_check_array(out, &r->schema, &counts, message, sizeof(message));
  }
  if (rc != 0) {
    /* The relay was handed the array: it releases what it will not pass on. */
    out->array.release(&out->array);
    set_error(r->last_error, sizeof(r->last_error), "C relay rejected batch %lld: %s",
              (long long)batch, message);
    r->failed = rc;
    return rc;
  }
  if (r->stats != NULL) {
    r->stats->batches += 1;
    r->stats->rows += out->array.length;
    ad_cli_counts_add(&r->stats->counts, &counts);
    r->stats->check_ns += r->now_ns() - t1;
  }
  return 0;
}

static const char* relay_get_last_error(struct ArrowDeviceArrayStream* self) {
  struct relay* r = live(self);
  if (r == NULL || r->last_error[0] == '\0') return NULL;
  return r->last_error;
}

static void relay_release(struct ArrowDeviceArrayStream* self) {
  struct relay* r = live(self);
  if (r == NULL) return;
  if (r->upstream.release != NULL) r->upstream.release(&r->upstream);
  if (r->schema.release != NULL) r->schema.release(&r->schema);
  free(r);
  self->get_schema = NULL;
  self->get_next = NULL;
  self->get_last_error = NULL;
  self->private_data = NULL;
  self->release = NULL;
}

int ad_cli_stream_relay(struct ArrowDeviceArrayStream* in, struct ArrowDeviceArrayStream* out,
                        ad_cli_clock_ns now_ns, struct ad_cli_relay_stats* stats, char* err,
                        size_t err_len) {
  if (err != NULL && err_len > 0) err[0] = '\0';
  if (in == NULL || out == NULL || now_ns == NULL) {
    set_error(err, err_len, "stream: NULL argument");
    return EINVAL;
  }
  if (in->release == NULL) {
    set_error(err, err_len, "stream: the stream is released (release is NULL)");
    return EINVAL;
  }
  if (in->get_schema == NULL || in->get_next == NULL || in->get_last_error == NULL) {
    set_error(err, err_len, "stream: get_schema, get_next and get_last_error must be non-NULL");
    return EINVAL;
  }
  if (in->device_type <= 0) {
    set_error(err, err_len, "stream: device_type is %d, expected a positive ArrowDeviceType",
              (int)in->device_type);
    return EINVAL;
  }
  struct relay* r = (struct relay*)calloc(1, sizeof(struct relay));
  if (r == NULL) {
    set_error(err, err_len, "stream: out of memory for the relay");
    return ENOMEM;
  }
  int rc = in->get_schema(in, &r->schema);
  if (rc != 0 || r->schema.release == NULL) {
    const char* message = in->get_last_error(in);
    set_error(err, err_len, "stream: get_schema %s (errno %d): %s",
              rc != 0 ? "failed" : "returned a released schema", rc,
              message != NULL ? message : "(no message)");
    free(r);
    return rc != 0 ? rc : EINVAL;
  }
  r->now_ns = now_ns;
  r->stats = stats;

  /* Spec, "Moving an array" (streams alike): bitwise copy, then mark the
   * source released. */
  memcpy(&r->upstream, in, sizeof(r->upstream));
  in->release = NULL;

  out->device_type = r->upstream.device_type;
  out->get_schema = relay_get_schema;
  out->get_next = relay_get_next;
  out->get_last_error = relay_get_last_error;
  out->release = relay_release;
  out->private_data = r;
  return 0;
}
