/*
 * ad_cli_passthrough: a C consumer-and-producer of the Arrow C Device Data
 * Interface, used by the `arrow-device` command to prove that what the Rust
 * exporter hands over is readable by plain C and can be passed on.
 *
 * It walks the ArrowDeviceArray / ArrowSchema pair, checks the structure of
 * every node against its schema's format string, and then MOVES both structs
 * to the caller's `out` pointers (spec, "Moving an array": a bitwise copy,
 * after which the source is marked released by setting its release callback
 * to NULL). Ownership on return:
 *   - 0: `out` and `schema_out` own the data; `in` and `schema_in` are
 *        released (their release is NULL) and must not be released again.
 *   - non-zero (an errno code): nothing moved, `err` holds a message naming
 *        the node; the caller still owns `in` and `schema_in`.
 *
 * Buffer pointers are device pointers: they are dereferenced only when the
 * array's device_type is ARROW_DEVICE_CPU (spec: "the consumer MUST NOT
 * dereference a pointer to non-CPU memory").
 *
 * The check itself (ad_cli_check_array, declared in ad_cli.h) is shared with
 * the stream relay in relay.c, which applies it to every array of a stream.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "ad_cli.h"

struct walk {
  int32_t device_type;
  struct ad_cli_counts* counts;
  char* err;
  size_t err_len;
  char path[512];
};

static int fail(struct walk* w, const char* fmt, ...) {
  if (w->err != NULL && w->err_len > 0) {
    int n = snprintf(w->err, w->err_len, "%s: ", w->path[0] ? w->path : "array");
    if (n >= 0 && (size_t)n < w->err_len) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(w->err + n, w->err_len - (size_t)n, fmt, ap);
      va_end(ap);
    }
  }
  return EINVAL;
}

/* Expected buffer and child counts for a format string; -1 where the format
 * allows several values (checked separately) or is not known to this walker. */
struct shape {
  int64_t n_buffers;     /* exact count, or -1 */
  int64_t min_buffers;   /* lower bound when n_buffers is -1 */
  int64_t n_children;    /* exact count, or -1 (struct: from the schema) */
  int offsets32;         /* 1: buffer 1 holds int32 offsets; 2: int64 */
};

static int shape_of(const char* f, struct shape* s) {
  s->n_buffers = -1;
  s->min_buffers = 0;
  s->n_children = 0;
  s->offsets32 = 0;
  if (f == NULL || f[0] == '\0') return 0;
  switch (f[0]) {
    case 'n': s->n_buffers = 0; return 1;
    case 'b': case 'c': case 'C': case 's': case 'S': case 'i': case 'I':
    case 'l': case 'L': case 'e': case 'f': case 'g':
      s->n_buffers = f[1] == '\0' ? 2 : -1;
      return f[1] == '\0';
    case 'd': case 'w': s->n_buffers = 2; return 1; /* decimal, fixed binary */
    case 'u': case 'z': s->n_buffers = 3; s->offsets32 = 1; return f[1] == '\0';
    case 'U': case 'Z': s->n_buffers = 3; s->offsets32 = 2; return f[1] == '\0';
    case 'v': /* vu / vz: views, data buffers, then the variadic sizes */
      s->min_buffers = 3;
      return f[1] == 'u' || f[1] == 'z';
    case 't': s->n_buffers = 2; return 1; /* dates, times, timestamps, ... */
    case '+':
      switch (f[1]) {
        case 'l': s->n_buffers = 2; s->n_children = 1; s->offsets32 = 1; return 1;
        case 'L': s->n_buffers = 2; s->n_children = 1; s->offsets32 = 2; return 1;
        case 'v': s->n_buffers = 3; s->n_children = 1; return 1; /* +vl, +vL */
        case 'w': s->n_buffers = 1; s->n_children = 1; return 1;
        case 'm': s->n_buffers = 2; s->n_children = 1; s->offsets32 = 1; return 1;
        case 's': s->n_buffers = 1; s->n_children = -1; return 1;
        case 'r': s->n_buffers = 0; s->n_children = 2; return 1;
        case 'u':
          s->n_buffers = f[2] == 'd' ? 2 : 1;
          s->n_children = -1;
          return f[2] == 'd' || f[2] == 's';
        default: return 0;
      }
    default: return 0;
  }
}

static int walk_node(struct walk* w, const struct ArrowArray* a,
                     const struct ArrowSchema* s, int64_t depth);

/* Appends a path segment, walks the child, and restores the path. */
static int walk_child(struct walk* w, const struct ArrowArray* a,
                      const struct ArrowSchema* s, int64_t depth,
                      const char* fmt, int64_t index, const char* name) {
  size_t len = strlen(w->path);
  snprintf(w->path + len, sizeof(w->path) - len, "%s", len ? " > " : "");
  size_t len2 = strlen(w->path);
  if (name != NULL && name[0] != '\0' && strcmp(fmt, "field") == 0) {
    /* Same rendering as arrow_device::error::Path. */
    snprintf(w->path + len2, sizeof(w->path) - len2, "field \"%s\"", name);
  } else if (name != NULL && name[0] != '\0') {
    snprintf(w->path + len2, sizeof(w->path) - len2, "%s %lld \"%s\"", fmt,
             (long long)index, name);
  } else if (index >= 0) {
    snprintf(w->path + len2, sizeof(w->path) - len2, "%s %lld", fmt, (long long)index);
  } else {
    snprintf(w->path + len2, sizeof(w->path) - len2, "%s", fmt);
  }
  int rc = walk_node(w, a, s, depth);
  w->path[len] = '\0';
  return rc;
}

static int walk_node(struct walk* w, const struct ArrowArray* a,
                     const struct ArrowSchema* s, int64_t depth) {
  if (a == NULL) return fail(w, "array pointer is NULL");
  if (s == NULL) return fail(w, "schema pointer is NULL");
  if (a->release == NULL) return fail(w, "array is released (release is NULL)");
  if (s->format == NULL) return fail(w, "schema format is NULL");

  w->counts->nodes += 1;
  if (depth > w->counts->max_depth) w->counts->max_depth = depth;

  if (a->length < 0) return fail(w, "length is %lld, expected >= 0", (long long)a->length);
  if (a->offset < 0) return fail(w, "offset is %lld, expected >= 0", (long long)a->offset);
  if (a->null_count < -1) {
    return fail(w, "null_count is %lld, expected >= -1", (long long)a->null_count);
  }
  if (a->n_buffers < 0) return fail(w, "n_buffers is %lld", (long long)a->n_buffers);
  if (a->n_buffers > 0 && a->buffers == NULL) {
    return fail(w, "n_buffers is %lld but buffers is NULL", (long long)a->n_buffers);
  }
  if (a->n_children != s->n_children) {
    return fail(w, "n_children is %lld, schema (format \"%s\") has %lld",
                (long long)a->n_children, s->format, (long long)s->n_children);
  }
  if (a->n_children > 0 && (a->children == NULL || s->children == NULL)) {
    return fail(w, "n_children is %lld but a children pointer is NULL",
                (long long)a->n_children);
  }

  struct shape shape;
  int known = shape_of(s->format, &shape);
  if (known) {
    if (shape.n_buffers >= 0 && a->n_buffers != shape.n_buffers) {
      return fail(w, "format \"%s\" has %lld buffers, found n_buffers %lld", s->format,
                  (long long)shape.n_buffers, (long long)a->n_buffers);
    }
    if (shape.n_buffers < 0 && a->n_buffers < shape.min_buffers) {
      return fail(w, "format \"%s\" has at least %lld buffers, found n_buffers %lld",
                  s->format, (long long)shape.min_buffers, (long long)a->n_buffers);
    }
    if (shape.n_children >= 0 && a->n_children != shape.n_children) {
      return fail(w, "format \"%s\" has %lld children, found n_children %lld", s->format,
                  (long long)shape.n_children, (long long)a->n_children);
    }
  }

  /* Buffer slots: only the pointer values are looked at here. */
  w->counts->buffers += a->n_buffers;
  for (int64_t i = 0; i < a->n_buffers; i++) {
    if (a->buffers[i] == NULL) {
      w->counts->null_buffers += 1;
      /* Spec: the validity bitmap MAY be NULL only if null_count is 0. */
      if (i == 0 && a->n_buffers > 0 && a->null_count > 0 && s->format[0] != 'n' &&
          !(s->format[0] == '+' && (s->format[1] == 'u' || s->format[1] == 'r'))) {
        return fail(w, "validity buffer is NULL but null_count is %lld",
                    (long long)a->null_count);
      }
    }
  }

  /* Offsets: readable only on the CPU. The first and last offsets of the
   * viewed slice must be ordered and non-negative. */
  if (w->device_type == ARROW_DEVICE_CPU && known && shape.offsets32 != 0 &&
      a->n_buffers >= 2 && a->buffers[1] != NULL && a->length > 0) {
    int64_t first, last;
    if (shape.offsets32 == 1) {
      const int32_t* offsets = (const int32_t*)a->buffers[1];
      first = offsets[a->offset];
      last = offsets[a->offset + a->length];
    } else {
      const int64_t* offsets = (const int64_t*)a->buffers[1];
      first = offsets[a->offset];
      last = offsets[a->offset + a->length];
    }
    if (first < 0 || last < first) {
      return fail(w, "offsets run from %lld to %lld, expected 0 <= first <= last",
                  (long long)first, (long long)last);
    }
    w->counts->host_checked += 1;
  }

  for (int64_t i = 0; i < a->n_children; i++) {
    const struct ArrowSchema* child_schema = s->children[i];
    const char* name = child_schema != NULL ? child_schema->name : NULL;
    int rc = walk_child(w, a->children[i], child_schema, depth + 1,
                        depth == 1 && s->format[0] == '+' && s->format[1] == 's' ? "field"
                                                                                   : "child",
                        i, name);
    if (rc != 0) return rc;
  }

  if ((s->dictionary == NULL) != (a->dictionary == NULL)) {
    return fail(w, "schema %s a dictionary but the array %s",
                s->dictionary ? "has" : "has no", a->dictionary ? "has one" : "has none");
  }
  if (s->dictionary != NULL) {
    w->counts->dictionaries += 1;
    int rc = walk_child(w, a->dictionary, s->dictionary, depth + 1, "dictionary", -1, NULL);
    if (rc != 0) return rc;
  }
  return 0;
}

int ad_cli_check_array(const struct ArrowDeviceArray* in, const struct ArrowSchema* schema_in,
                       struct ad_cli_counts* counts, char* err, size_t err_len) {
  struct ad_cli_counts local;
  memset(&local, 0, sizeof(local));
  struct walk w;
  memset(&w, 0, sizeof(w));
  w.counts = &local;
  w.err = err;
  w.err_len = err_len;
  if (err != NULL && err_len > 0) err[0] = '\0';

  if (in == NULL || schema_in == NULL) return fail(&w, "NULL argument");
  if (schema_in->release == NULL) return fail(&w, "schema is released (release is NULL)");
  if (in->device_type <= 0) {
    return fail(&w, "device_type is %d, expected a positive ArrowDeviceType",
                (int)in->device_type);
  }
  /* Spec: "These bytes MUST be zero'd out". */
  for (int i = 0; i < 3; i++) {
    if (in->reserved[i] != 0) {
      return fail(&w, "reserved[%d] is %lld, expected 0", i, (long long)in->reserved[i]);
    }
  }
  if (in->device_type == ARROW_DEVICE_CPU && in->device_id != -1) {
    return fail(&w, "device_id is %lld on the CPU, expected -1", (long long)in->device_id);
  }
  if (in->device_type == ARROW_DEVICE_CPU && in->sync_event != NULL) {
    return fail(&w, "sync_event is set on a CPU array, expected NULL");
  }
  w.device_type = in->device_type;

  int rc = walk_node(&w, &in->array, schema_in, 1);
  if (rc != 0) return rc;
  if (counts != NULL) *counts = local;
  return 0;
}

void ad_cli_counts_add(struct ad_cli_counts* total, const struct ad_cli_counts* one) {
  total->nodes += one->nodes;
  total->buffers += one->buffers;
  total->null_buffers += one->null_buffers;
  total->dictionaries += one->dictionaries;
  if (one->max_depth > total->max_depth) total->max_depth = one->max_depth;
  total->host_checked += one->host_checked;
}

int ad_cli_passthrough(struct ArrowDeviceArray* in, struct ArrowSchema* schema_in,
                       struct ArrowDeviceArray* out, struct ArrowSchema* schema_out,
                       struct ad_cli_counts* counts, char* err, size_t err_len) {
  if (out == NULL || schema_out == NULL) {
    if (err != NULL && err_len > 0) snprintf(err, err_len, "array: NULL argument");
    return EINVAL;
  }
  int rc = ad_cli_check_array(in, schema_in, counts, err, err_len);
  if (rc != 0) return rc;

  /* Spec, "Moving an array": bitwise copy, then mark the source released. */
  memcpy(out, in, sizeof(*out));
  in->array.release = NULL;
  memcpy(schema_out, schema_in, sizeof(*schema_out));
  schema_in->release = NULL;
  return 0;
}
