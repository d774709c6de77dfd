#!/usr/bin/env bash
# The GPU check: everything Rust is built here into a kit, and the kit is run
# on a machine with an NVIDIA GPU (which may have no Rust toolchain).
#
#   bash scripts/gpu-check.sh kit               build target/gpu-kit (no GPU needed)
#   bash scripts/gpu-check.sh run [REPORT_DIR]  run the kit, write REPORT_DIR/gpu-report.md
#
# kit: release builds with the `cuda` feature of the library's unit tests and
# its GPU integration tests (tests/cuda_gpu.rs, tests/cuda_interop_gpu.rs,
# tests/cuda_share.rs), the
# golden IPC streams (for the Python suite), the `gpu_bench` example, the
# CLI and the Python wheel (abi3), binaries stripped of debug info and gzipped, plus
# MANIFEST (git revision, date, files). The kit must stay well under 60 MiB:
# it travels to the GPU machine beside the working tree.
#
# run: nvidia-smi, the wheel installed into /tmp/arrow-device-site, each Rust
# test binary (--test-threads=1), the Python GPU tests, the CLI on the GPU
# (batch and --stream) and the benchmark. Every step runs even when an
# earlier one failed; the exit status is non-zero when any step failed. A
# Rust test that prints "skipped" while nvidia-smi sees a GPU is a failure:
# the tests could not use the GPU. REPORT_DIR defaults to $OUT (set on the
# lent GPU machines) or docs/gpu. PYTHON chooses the interpreter (python3).
set -uo pipefail

caller_dir=$PWD
cd "$(dirname "$0")/.." || exit 1
root=$PWD
kit=target/gpu-kit

die() {
    echo "gpu-check: $*" >&2
    exit 1
}

# --- kit -------------------------------------------------------------------

# The revision without running git (the working tree may hold uncommitted
# changes on top of it).
git_rev() {
    local git_dir=.git head ref
    if [ -f .git ]; then
        git_dir=$(sed -n 's/^gitdir: //p' .git)
    fi
    head=$(cat "$git_dir/HEAD" 2>/dev/null) || { echo unknown; return; }
    case $head in
    ref:*)
        ref=${head#ref: }
        local common=$git_dir
        [ -f "$git_dir/commondir" ] && common="$git_dir/$(cat "$git_dir/commondir")"
        if [ -f "$git_dir/$ref" ]; then
            echo "$(cat "$git_dir/$ref") ($ref)"
        elif [ -f "$common/$ref" ]; then
            echo "$(cat "$common/$ref") ($ref)"
        else
            local packed
            packed=$(awk -v r="$ref" '$2 == r { print $1 }' "$common/packed-refs" 2>/dev/null)
            echo "${packed:-unknown} ($ref)"
        fi
        ;;
    *) echo "$head (detached)" ;;
    esac
}

# Executables of a `cargo --message-format=json` log, one per line.
executables() {
    jq -r 'select(.reason == "compiler-artifact" and .executable != null)
           | "\(.target.name) \(.target.kind[0]) \(.executable)"' "$1"
}

strip_into() {
    local src=$1 dst=$2
    objcopy --strip-debug "$src" "$dst" || die "strip $src failed"
    chmod +x "$dst"
}

# The newest glibc symbol version the kit's binaries need.
glibc_needed() {
    local dir
    dir=$(mktemp -d)
    unzip -q -o "$kit"/wheel/*.whl '*.so' -d "$dir" 2>/dev/null
    find "$kit/bin" "$dir" -type f -exec objdump -T {} + 2>/dev/null |
        grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1
    rm -rf "$dir"
}

build_kit() {
    command -v cargo >/dev/null || die "cargo not found: build the kit on a machine with Rust (bash scripts/gpu-check.sh kit)"
    command -v jq >/dev/null || die "jq not found (apt-get install jq)"
    rm -rf "$kit"
    mkdir -p "$kit/bin" "$kit/wheel"
    local log=target/gpu-kit-cargo.json

    echo "== Rust test binaries (release, --features cuda)" >&2
    cargo test -p arrow-device --features cuda --release --no-run --lib --test cuda_gpu \
        --test cuda_interop_gpu --test cuda_share --test staging \
        --message-format=json >"$log" || die "building the test binaries failed"
    local name kind exe
    while read -r name kind exe; do
        case $kind in
        lib) strip_into "$exe" "$kit/bin/arrow-device-lib-tests" ;;
        test) strip_into "$exe" "$kit/bin/$name" ;;
        esac
    done < <(executables "$log")
    [ -x "$kit/bin/arrow-device-lib-tests" ] || die "no lib test executable in $log"
    [ -x "$kit/bin/cuda_gpu" ] || die "no cuda_gpu test executable in $log"
    [ -x "$kit/bin/cuda_interop_gpu" ] || die "no cuda_interop_gpu test executable in $log"
    [ -x "$kit/bin/cuda_share" ] || die "no cuda_share test executable in $log"
    [ -x "$kit/bin/staging" ] || die "no staging test executable in $log"
    # Arrow Flight onto and from the GPU (crates/arrow-device-flight).
    cargo test -p arrow-device-flight --features cuda --release --no-run --test cuda \
        --message-format=json >"$log" || die "building the Flight GPU tests failed"
    exe=$(executables "$log" | awk '$1 == "cuda" && $2 == "test" { print $3 }')
    [ -n "$exe" ] || die "no Flight cuda test executable in $log"
    strip_into "$exe" "$kit/bin/flight_cuda"

    # The golden IPC streams live beside the checkout, which travels alone
    # to a lent GPU machine: the Python suite reads this copy there.
    if [ -d ../shared/golden ]; then
        mkdir -p "$kit/golden"
        cp ../shared/golden/*.stream "$kit/golden/"
    fi

    echo "== gpu_bench example" >&2
    cargo build -p arrow-device --features cuda --release --example gpu_bench \
        --message-format=json >"$log" || die "building gpu_bench failed"
    exe=$(executables "$log" | awk '$1 == "gpu_bench" { print $3 }')
    [ -n "$exe" ] || die "no gpu_bench executable in $log"
    strip_into "$exe" "$kit/bin/gpu_bench"

    echo "== CLI with CUDA" >&2
    local cli_features=(--features cuda) cli_note="built with --features cuda"
    if ! grep -Eq '^cuda[[:space:]]*=' crates/arrow-device-cli/Cargo.toml; then
        cli_features=()
        cli_note="built WITHOUT CUDA: crates/arrow-device-cli has no 'cuda' feature yet, so --device cuda will fail"
        echo "gpu-check: warning: $cli_note" >&2
    fi
    cargo build --release -p arrow-device-cli "${cli_features[@]}" --message-format=json >"$log" ||
        die "building the CLI failed"
    exe=$(executables "$log" | awk '$1 == "arrow-device" && $2 == "bin" { print $3 }')
    [ -n "$exe" ] || die "no arrow-device executable in $log"
    strip_into "$exe" "$kit/bin/arrow-device"
    rm -f "$log"

    # The wheel the test command tests: scripts/python-env.sh builds it
    # (release, manylinux_2_27, linked by zig without a symbol table) into
    # the kit, and installs it into its environment.
    echo "== Python wheel" >&2
    ARROW_DEVICE_WHEELS="$kit/wheel" bash scripts/python-env.sh >/dev/null ||
        die "scripts/python-env.sh failed (it builds the wheel)"
    ls "$kit"/wheel/*.whl >/dev/null 2>&1 || die "scripts/python-env.sh wrote no wheel"

    {
        local changed=""
        if command -v git >/dev/null && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
            changed=", with uncommitted changes to tracked files"
        fi
        echo "git revision: $(git_rev)$changed"
        echo "built: $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(uname -n) ($(uname -m))"
        echo "rustc: $(rustc --version 2>/dev/null || echo unknown)"
        echo "cli: $cli_note"
        echo "needs: x86-64 Linux with glibc >= $(glibc_needed)"
        echo "files:"
        (cd "$kit" && find . -type f ! -name MANIFEST -printf '%P %s bytes\n' | sort)
    } >"$kit/MANIFEST"
    # The binaries keep their symbols (a panic's backtrace names functions)
    # and travel gzipped, about a third of their size: the kit must fit
    # beside the working tree. `run` unpacks them.
    gzip -9 "$kit"/bin/* || die "gzip of the kit's binaries failed"

    local bytes
    bytes=$(du -sb "$kit" | cut -f1)
    echo "kit: $kit, $((bytes / 1024 / 1024)) MiB ($bytes bytes)"
    cat "$kit/MANIFEST"
    if [ "$bytes" -gt $((60 * 1024 * 1024)) ]; then
        die "the kit is over 60 MiB: it would not travel beside the working tree"
    fi
}

# --- run -------------------------------------------------------------------

report=
steps_dir=
summary=()
failed=0
gpu_present=0
started=
# A lent machine runs one command for at most 10 minutes: every step's limit
# is cut to what is left of this budget, and the report is rewritten after
# each step, so a run cut short still leaves one.
deadline=$(($(date +%s) + ${GPU_CHECK_BUDGET_S:-540}))

# step TITLE TIMEOUT_S CHECK COMMAND...: runs the command in the repository root,
# records its exit status, time and output; CHECK (a function name, or empty)
# may turn a zero exit into a failure and adds a note to the summary.
step() {
    local title=$1 limit=$2 check=$3
    shift 3
    local n=$((${#summary[@]} + 1))
    local out="$steps_dir/$n.out"
    local left=$((deadline - $(date +%s) - 5))
    [ "$left" -lt "$limit" ] && limit=$left
    echo "== $n. $title: $*" >&2
    local start end status note=""
    start=$(date +%s.%N)
    if [ "$limit" -gt 0 ]; then
        timeout --kill-after=5 "$limit" "$@" >"$out" 2>&1
        status=$?
    else
        echo "not run: the time budget (GPU_CHECK_BUDGET_S) is spent" >"$out"
        status=124
    fi
    end=$(date +%s.%N)
    local seconds
    seconds=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
    [ "$status" -eq 124 ] && note="timed out after ${limit} s"
    [ "$limit" -le 0 ] && note="not run: out of time"
    if [ -n "$check" ]; then
        local checked
        checked=$("$check" "$out" "$status")
        local check_status=$?
        note="${note:+$note; }$checked"
        [ "$status" -eq 0 ] && [ "$check_status" -ne 0 ] && status="0 (but failed the check)"
    fi
    local verdict=passed
    [ "$status" != 0 ] && { verdict=FAILED; failed=1; }
    summary+=("| $n | $title | \`$*\` | $status | $seconds s | $verdict${note:+: $note} |")
    {
        echo "### $n. $title"
        echo
        echo "\`$*\` (in the repository root): exit status $status, $seconds s${note:+; $note}"
        echo
        echo '````text'
        cat "$out"
        echo '````'
        echo
    } >>"$steps_dir/steps.md"
    echo "   exit $status, $seconds s${note:+, $note}" >&2
    write_report
}

# Checks of a Rust test binary's output: totals, and "skipped" lines, which
# are a failure when a GPU is present.
check_rust_tests() {
    local out=$1
    local passed failed_count ignored skipped
    passed=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) if ($(i+1) ~ /^passed/) s += $i } END { print s + 0 }' "$out")
    failed_count=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) if ($(i+1) ~ /^failed/) s += $i } END { print s + 0 }' "$out")
    ignored=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) if ($(i+1) ~ /^ignored/) s += $i } END { print s + 0 }' "$out")
    skipped=$(grep -Eci 'skipped|skipping' "$out")
    echo -n "$passed passed, $failed_count failed, $ignored ignored, $skipped printed 'skipped'"
    if ! grep -q '^test result:' "$out"; then
        echo -n " (no test result line)"
        return 1
    fi
    if [ "$skipped" -gt 0 ] && [ "$gpu_present" -eq 1 ]; then
        echo -n " (a GPU is present: skips mean the tests could not use it)"
        return 1
    fi
    [ "$skipped" -gt 0 ] && echo -n " (no GPU)"
    return 0
}

# pytest's summary line and its skip reasons (-rs).
check_pytest() {
    local out=$1
    local line skips
    line=$(grep -E '(passed|failed|skipped|error|no tests ran)' "$out" | grep -Ev '^(SKIPPED|FAILED|ERROR) ' | tail -n 1)
    skips=$(grep -c '^SKIPPED' "$out")
    echo -n "${line:-no pytest summary line}"
    if [ "$skips" -gt 0 ]; then
        echo -n "; $skips skip line(s), see the output"
        [ "$gpu_present" -eq 1 ] && echo -n " (a GPU is present: check the reasons)"
    fi
    return 0
}

# compute-sanitizer's verdict: its error summary line(s).
check_sanitizer() {
    local summaries
    summaries=$(grep -c 'ERROR SUMMARY: 0 errors' "$1")
    echo -n "$summaries clean error summaries; $(grep -c '^test result: ok' "$1") test binaries passed"
    ! grep -Eq 'ERROR SUMMARY: [1-9]' "$1"
}

# The benchmark must measure something where a GPU is present.
check_bench() {
    local tables
    tables=$(grep -c '^|---' "$1")
    echo -n "$tables table(s)"
    if [ "$tables" -eq 0 ] && [ "$gpu_present" -eq 1 ]; then
        echo -n " (a GPU is present, yet nothing was measured)"
        return 1
    fi
    return 0
}

# `nvidia-smi`'s table names no "GPU 0:" line; `nvidia-smi -L` does, and
# gpu_present was read from it before the steps.
check_gpu() {
    if [ "$2" -eq 0 ] && [ "$gpu_present" -eq 1 ]; then
        echo -n "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU [0-9]') GPU(s)"
    else
        echo -n "no GPU seen"
        return 1
    fi
}

machine_section() {
    echo "## Machine"
    echo
    if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
        local cuda_version driver
        driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
        cuda_version=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -n 1)
        echo "- GPUs (\`nvidia-smi -L\`):"
        nvidia-smi -L | sed 's/^/  - /'
        echo "- driver: ${driver:-unknown}; CUDA version (as nvidia-smi reports it): ${cuda_version:-unknown}"
    else
        echo "- no NVIDIA GPU: \`nvidia-smi\` is missing or sees no device"
    fi
    echo "- host: $(uname -n), $(uname -m), $(nproc) CPUs, kernel $(uname -r)"
    echo "- python: $("$python" --version 2>&1)"
    echo
}

write_report() {
    local bench_out="$steps_dir/bench.out"
    {
        echo "# GPU check report"
        echo
        echo "Written by \`bash scripts/gpu-check.sh run\`, started $started."
        echo
        machine_section
        echo "## Kit"
        echo
        echo '```text'
        cat "$kit/MANIFEST"
        echo '```'
        echo
        echo "## Summary"
        echo
        if [ "$failed" -ne 0 ]; then
            echo "**At least one step FAILED.**"
        elif [ -f "$bench_out" ]; then
            echo "Every step passed."
        else
            echo "Incomplete: the run stopped before its last step."
        fi
        echo
        echo "| # | step | command | exit | time | result |"
        echo "|---|---|---|---|---|---|"
        printf '%s\n' "${summary[@]}"
        echo
        echo "## Benchmark"
        echo
        if [ ! -f "$bench_out" ]; then
            echo "Not run yet."
        elif grep -q '^|' "$bench_out"; then
            cat "$bench_out"
        else
            echo "No tables: $(head -n 1 "$bench_out")"
        fi
        echo
        echo "## Steps, with their raw output"
        echo
        cat "$steps_dir/steps.md" 2>/dev/null
    } >"$report"
}

run_suite() {
    local report_dir
    if [ -n "${1:-}" ]; then
        report_dir=$1
        case $report_dir in /*) ;; *) report_dir="$caller_dir/$report_dir" ;; esac
    elif [ -n "${OUT:-}" ]; then
        report_dir=$OUT
    else
        report_dir="$root/docs/gpu"
    fi
    mkdir -p "$report_dir" || die "cannot create $report_dir"
    report="$report_dir/gpu-report.md"
    python=${PYTHON:-python3}

    if [ ! -f "$kit/MANIFEST" ]; then
        if command -v cargo >/dev/null; then
            echo "gpu-check: no kit in $kit, building it first" >&2
            build_kit >&2
        else
            die "no kit in $kit and no cargo here: run 'bash scripts/gpu-check.sh kit' on a machine with Rust and carry $kit"
        fi
    fi
    local packed
    for packed in "$kit"/bin/*.gz; do
        [ -e "$packed" ] || continue
        gunzip -f "$packed" || die "cannot unpack $packed"
    done

    steps_dir=$(mktemp -d)
    started=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
    if nvidia-smi -L 2>/dev/null | grep -q '^GPU [0-9]'; then gpu_present=1; fi

    step "GPU and driver (nvidia-smi)" 30 check_gpu nvidia-smi

    local site=/tmp/arrow-device-site
    rm -rf "$site"
    step "install the wheel" 60 "" \
        "$python" -m pip install -q --disable-pip-version-check --root-user-action=ignore \
        --no-index --no-deps --target "$site" "$kit"/wheel/*.whl
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    export RUST_BACKTRACE=1

    # Test binaries run from the package directory, as cargo runs them.
    step "Rust unit tests of arrow-device (--features cuda)" 150 check_rust_tests \
        env -C crates/arrow-device "../../$kit/bin/arrow-device-lib-tests" --test-threads=1 --show-output
    step "Rust GPU tests (tests/cuda_gpu.rs)" 150 check_rust_tests \
        env -C crates/arrow-device "../../$kit/bin/cuda_gpu" --test-threads=1 --show-output
    step "Rust GPU tests (tests/cuda_interop_gpu.rs)" 150 check_rust_tests \
        env -C crates/arrow-device "../../$kit/bin/cuda_interop_gpu" --test-threads=1 --show-output
    step "Rust GPU tests (tests/cuda_share.rs)" 120 check_rust_tests \
        env -C crates/arrow-device "../../$kit/bin/cuda_share" --test-threads=1 --show-output
    step "Rust GPU tests (tests/staging.rs: pinned staging)" 60 check_rust_tests \
        env -C crates/arrow-device "../../$kit/bin/staging" --test-threads=1 --show-output
    if [ -d "$kit/golden" ] && [ ! -d ../shared/golden ]; then
        export ARROW_DEVICE_GOLDEN_DIR="$root/$kit/golden"
    fi
    step "Rust GPU tests (arrow-device-flight tests/cuda.rs)" 120 check_rust_tests \
        env -C crates/arrow-device-flight "../../$kit/bin/flight_cuda" --test-threads=1 --show-output
    step "Python GPU tests" 150 check_pytest \
        "$python" -m pytest -q -rs -p no:cacheprovider crates/arrow-device-python/tests/test_cuda_gpu.py
    step "CLI on the GPU" 90 "" "$kit/bin/arrow-device" --device cuda --no-progress
    step "CLI on the GPU, one device stream" 90 "" "$kit/bin/arrow-device" --device cuda --stream --no-progress
    step "Flight fetch onto the GPU (loopback, 10M rows)" 120 "" \
        bash scripts/gpu-flight-fetch.sh "$kit/bin/arrow-device" 10000000 3 cpu cuda
    # The CUDA tests again under compute-sanitizer (memcheck: out-of-bounds
    # and misaligned device accesses, leaked device allocations; synccheck:
    # barrier misuse in our kernels), where the image has it. API errors are
    # not reported: the hostile-input tests provoke some on purpose (a
    # forged pointer makes cuMemGetAddressRange answer CUDA_ERROR_NOT_FOUND)
    # and assert on each; the sanitizer would count them as errors.
    if command -v compute-sanitizer >/dev/null; then
        local tool
        for tool in memcheck synccheck; do
            step "compute-sanitizer $tool (Rust GPU tests)" 240 check_sanitizer \
                env -C crates/arrow-device compute-sanitizer --tool "$tool" --error-exitcode 9 --report-api-errors no \
                $([ "$tool" = memcheck ] && echo --leak-check full) \
                sh -c '"$1" --test-threads=1 && "$2" --test-threads=1 && "$3" --test-threads=1' sh \
                "../../$kit/bin/cuda_gpu" "../../$kit/bin/cuda_interop_gpu" "../../$kit/bin/staging"
        done
    fi
    step "benchmark (gpu_bench)" 240 check_bench "$kit/bin/gpu_bench"
    cp "$steps_dir/${#summary[@]}.out" "$steps_dir/bench.out"
    write_report
    rm -rf "$steps_dir"
    echo "report: $report" >&2
    return "$failed"
}

case ${1:-} in
kit) build_kit ;;
run) run_suite "${2:-}" ;;
*)
    echo "usage: bash scripts/gpu-check.sh kit | run [REPORT_DIR]" >&2
    exit 2
    ;;
esac
