#!/usr/bin/env bash
# The fuzz targets of fuzz/ (cargo-fuzz, libFuzzer, AddressSanitizer) on the
# nightly toolchain.
#
#   scripts/fuzz.sh short [SECONDS]      every target for SECONDS (default 20)
#                                        from its committed corpus and seeds:
#                                        what CI runs
#   scripts/fuzz.sh campaign RUNS [TARGET ...]
#                                        the long campaign: each target (all
#                                        when none is named) until RUNS
#                                        executions, one process per target,
#                                        as many at once as cores; stats in
#                                        target/fuzz-campaign/TARGET.log,
#                                        new inputs in target/fuzz-campaign/
#                                        TARGET/, summed up by `report`;
#                                        FUZZ_MAX_SECONDS=N stops each
#                                        target after N seconds instead
#   scripts/fuzz.sh report               the README's table from those logs
#   scripts/fuzz.sh cmin [TARGET ...]    minimizes committed corpus + campaign
#                                        inputs into fuzz/corpus/TARGET
#
# Without a nightly toolchain every mode says so and exits 0: the corpus
# replay (`cargo test -p arrow-device-fuzz`) runs the same harnesses on
# stable. cargo-fuzz is installed from crates.io when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-short}
shift || true

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz.sh: skipped: no nightly toolchain (cargo fuzz needs one)"
    exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --version '^0.13' --locked >&2
fi

targets() {
    if [ $# -gt 0 ]; then
        echo "$@"
    else
        sed -n 's/^name = "\([a-z_]*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^arrow-device-fuzz$'
    fi
}

work=target/fuzz-campaign
# Options common to every run: a hang is an input that takes 10 s; the
# memory limit catches a claim that makes the library allocate without
# bound (2 GiB is far above any case the decoders build).
opts=(-timeout=10 -rss_limit_mb=4096 -malloc_limit_mb=2048 -print_final_stats=1)

build() {
    cargo +nightly fuzz build --features libfuzzer "$@" >&2
}

seeds() {
    # The seeds are written by the harness library itself, on stable, in
    # the dev profile: the build the test command made already.
    cargo run -q -p arrow-device-fuzz --bin write-seeds -- "$work/seeds" "$@" >&2
}

case "$mode" in
short)
    seconds=${1:-20}
    list=$(targets)
    build
    seeds
    for t in $list; do
        mkdir -p "$work/short/$t"
        echo "fuzz.sh: $t for ${seconds}s" >&2
        # New inputs go to the scratch directory; the committed corpus and
        # the seeds are read only.
        cargo +nightly fuzz run --features libfuzzer "$t" \
            "$work/short/$t" "fuzz/corpus/$t" "$work/seeds/$t" -- \
            "${opts[@]}" -max_total_time="$seconds" 2>&1 | grep -E '^(#[0-9]+ *DONE|Done|stat::|==[0-9]+==|SUMMARY|thread|panicked|artifact)' || true
        # cargo fuzz exits non-zero on a crash; pipefail is off for grep's
        # sake above, so check the artifacts instead.
        if compgen -G "fuzz/artifacts/$t/*" >/dev/null; then
            echo "fuzz.sh: $t found a crash: fuzz/artifacts/$t/" >&2
            ls -l "fuzz/artifacts/$t" >&2
            exit 1
        fi
    done
    ;;
campaign)
    runs=${1:?usage: fuzz.sh campaign RUNS [TARGET ...]}
    shift
    list=$(targets "$@")
    build
    seeds
    # One libFuzzer process per target, as many targets at a time as there
    # are cores: each process's counts are then its target's alone.
    jobs=$(nproc)
    campaign_one() {
        local t=$1 start
        mkdir -p "$work/$t"
        start=$(date +%s)
        cargo +nightly fuzz run --features libfuzzer "$t" \
            "$work/$t" "fuzz/corpus/$t" "$work/seeds/$t" -- \
            "${opts[@]}" -runs="$runs" ${FUZZ_MAX_SECONDS:+-max_total_time=$FUZZ_MAX_SECONDS} \
            >"$work/$t.log" 2>&1 || true
        echo "seconds: $(( $(date +%s) - start ))" >>"$work/$t.log"
        echo "fuzz.sh: $t: $(grep -E '^#[0-9]+' "$work/$t.log" | tail -n 1)" >&2
    }
    for t in $list; do
        while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 5; done
        echo "fuzz.sh: $t to $runs runs" >&2
        campaign_one "$t" &
    done
    wait
    found=0
    for t in $list; do
        if compgen -G "fuzz/artifacts/$t/*" >/dev/null; then
            echo "fuzz.sh: $t found a crash: fuzz/artifacts/$t/" >&2
            found=1
        fi
    done
    exit $found
    ;;
report)
    python3 scripts/fuzz-report.py "$work"
    ;;
cmin)
    list=$(targets "$@")
    build
    for t in $list; do
        tmp=$(mktemp -d)
        cp fuzz/corpus/"$t"/* "$tmp"/ 2>/dev/null || true
        cp "$work/$t"/* "$work/seeds/$t"/* "$tmp"/ 2>/dev/null || true
        rm -rf "fuzz/corpus/$t.new" && mkdir -p "fuzz/corpus/$t.new"
        cargo +nightly fuzz cmin --features libfuzzer "$t" "$tmp" >&2
        cp "$tmp"/* "fuzz/corpus/$t.new/"
        # Named regression inputs (each a crash once found) stay, whatever
        # cmin thinks of their coverage.
        cp fuzz/corpus/"$t"/regression-* fuzz/corpus/"$t".new/ 2>/dev/null || true
        rm -rf "fuzz/corpus/$t" "$tmp"
        mv "fuzz/corpus/$t.new" "fuzz/corpus/$t"
        echo "fuzz.sh: $t: $(ls "fuzz/corpus/$t" | wc -l) inputs" >&2
    done
    ;;
*)
    echo "usage: fuzz.sh short [SECONDS] | campaign RUNS [TARGET ...] | report | cmin [TARGET ...]" >&2
    exit 2
    ;;
esac
