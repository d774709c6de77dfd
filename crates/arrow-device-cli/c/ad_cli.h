/*
 * What the C side of the `arrow-device` command shares between its files:
 * the walk counts and the check every array goes through, used by both the
 * per-array hand-off (passthrough.c) and the stream relay (relay.c).
 */
#ifndef AD_CLI_H
#define AD_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "arrow_device.h"

/* What the walk found; filled in on success. Mirrored by `HandoffCounts` in
 * src/handoff.rs (same field order, all int64_t). */
struct ad_cli_counts {
  int64_t nodes;          /* array nodes, dictionaries included */
  int64_t buffers;        /* buffer slots (n_buffers summed) */
  int64_t null_buffers;   /* slots holding NULL (allowed for empty buffers) */
  int64_t dictionaries;   /* dictionary-encoded nodes */
  int64_t max_depth;      /* deepest node, the root being 1 */
  int64_t host_checked;   /* offset buffers read on the host (CPU arrays) */
};

/* Checks `array` against `schema` the way a C consumer would before using
 * it: the device fields, then every node's structure against its format
 * string. Reads buffer contents only when the array is on the CPU. Takes no
 * ownership and changes nothing. Returns 0 and fills `counts` (may be NULL),
 * or EINVAL with a message naming the node in `err`. */
int ad_cli_check_array(const struct ArrowDeviceArray* array, const struct ArrowSchema* schema,
                       struct ad_cli_counts* counts, char* err, size_t err_len);

/* Adds `one` to `total` (the maximum for max_depth). */
void ad_cli_counts_add(struct ad_cli_counts* total, const struct ad_cli_counts* one);

#endif /* AD_CLI_H */
