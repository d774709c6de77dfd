#!/usr/bin/env bash
# Instructions per exchange under callgrind, which repeat exactly from run to
# run (criterion medians on a shared machine move by ±5% or more).
#
#   scripts/profile.sh [CASE ...]        table of instructions per exchange
#   scripts/profile.sh top CASE SIDE     the profile's top functions (inclusive)
#
# CASE: int64 utf8 batch100 (default: all three). Each figure is
# (Ir(N=1001) - Ir(N=1)) / 1000 over `measured` in
# crates/arrow-device/examples/profile_exchange.rs, built with the bench
# profile (release + line tables).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "profile.sh: valgrind is not installed" >&2; exit 1; }
cargo build --quiet --profile bench -p arrow-device --example profile_exchange
bin=target/release/examples/profile_exchange
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

count() { # case side n -> total Ir inside measured
    valgrind --tool=callgrind --toggle-collect='*measured*' \
        --callgrind-out-file="$out/cg.$1.$2.$3" "$bin" "$1" "$2" "$3" >/dev/null 2>&1
    callgrind_annotate "$out/cg.$1.$2.$3" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }'
}

per_exchange() {
    local one many
    one=$(count "$1" "$2" 1)
    many=$(count "$1" "$2" 1001)
    echo $(( (many - one) / 1000 ))
}

if [[ "${1:-}" == top ]]; then
    case=$2 side=$3
    valgrind --tool=callgrind --toggle-collect='*measured*' \
        --callgrind-out-file="$out/top" "$bin" "$case" "$side" 1001 >/dev/null 2>&1
    callgrind_annotate --inclusive=yes "$out/top" 2>/dev/null | sed -n '1,60p'
    exit 0
fi

cases=("$@")
[[ ${#cases[@]} -gt 0 ]] || cases=(int64 utf8 batch100)
printf '| case | side | ours | arrow-rs | ratio |\n|---|---|---:|---:|---:|\n'
for case in "${cases[@]}"; do
    for side in "" -export -import; do
        ours=$(per_exchange "$case" "ours$side")
        theirs=$(per_exchange "$case" "arrow-rs$side")
        name=${side#-}
        printf '| %s | %s | %s | %s | %s× |\n' "$case" "${name:-round trip}" "$ours" "$theirs" \
            "$(python3 -c "print(f'{$ours/$theirs:.2f}')")"
    done
done
