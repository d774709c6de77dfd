#!/usr/bin/env bash
# Fetch over Arrow Flight onto each device, through loopback: one
# `arrow-device serve` of the embedded dataset, then `arrow-device fetch`
# of it RUNS times onto every DEVICE, interleaved, each fetch a whole
# command (connect, do_get, every batch landed and its copy waited for).
# The CLI prints each fetch's report (rows, bytes, throughput, the time to
# the first batch on the device); the closing table gives the median
# throughput per device (GB/s received, from the schema to the last batch
# synchronized on the device). Part of `scripts/gpu-check.sh run`.
#
#   bash scripts/gpu-flight-fetch.sh CLI [ROWS [RUNS [DEVICE ...]]]
#
# Defaults: 10000000 rows, 3 runs, devices cpu and cuda.
set -uo pipefail

cli=${1:?usage: gpu-flight-fetch.sh CLI [ROWS [RUNS [DEVICE ...]]]}
rows=${2:-10000000}
runs=${3:-3}
shift $(($# < 3 ? $# : 3))
devices=("$@")
[ ${#devices[@]} -gt 0 ] || devices=(cpu cuda)

port=$((20000 + RANDOM % 20000))
location=grpc://127.0.0.1:$port
work=$(mktemp -d)
trap 'exec 3>&- 2>/dev/null; wait; rm -rf "$work"' EXIT

# The server stops when its standard input (fd 3 here) closes.
exec 3> >(exec "$cli" serve --listen "127.0.0.1:$port" --rows "$rows" \
    --until-stdin-closes 2>"$work/serve.log")
for _ in $(seq 100); do
    (exec 9<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
done
if ! (exec 9<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "the server did not listen on $location:" >&2
    cat "$work/serve.log" >&2
    exit 1
fi

failed=0
for run in $(seq "$runs"); do
    for device in "${devices[@]}"; do
        echo "== fetch $run of $runs onto $device"
        if "$cli" fetch "$location" embedded --device "$device" --no-progress \
            >"$work/out" 2>&1; then
            cat "$work/out"
            sed -nE 's/^throughput .* ([0-9.]+) GB\/s received.*/\1/p' "$work/out" >>"$work/$device"
        else
            cat "$work/out"
            failed=1
        fi
    done
done

echo
echo "| device | fetches | median GB/s | min GB/s | max GB/s |"
echo "|---|---:|---:|---:|---:|"
for device in "${devices[@]}"; do
    [ -s "$work/$device" ] || continue
    sort -n "$work/$device" | awk -v d="$device" '
        { v[NR] = $1 }
        END {
            m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
            printf "| %s | %d | %.2f | %.2f | %.2f |\n", d, NR, m, v[1], v[NR]
        }'
done
exit "$failed"
