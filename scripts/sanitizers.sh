#!/usr/bin/env bash
# Runs the unsafe-heavy test suites under a sanitizer (issue 13):
#
#   bash scripts/sanitizers.sh asan   AddressSanitizer + LeakSanitizer on the
#                                     library's unit tests, the FFI suites and
#                                     the C interop tests (C compiled with ASan
#                                     too). Part of scripts/test.sh: about 3.5
#                                     minutes on 2 cores from a cold target/asan.
#   bash scripts/sanitizers.sh miri   Miri (Stacked Borrows) on the tests that
#                                     make no system call: schema, ABI, CAI,
#                                     DLPack, and the CPU cases of malformed,
#                                     roundtrip, stream and async_stream.
#   bash scripts/sanitizers.sh miri-short
#                                     the part of `miri` the test command
#                                     runs (see the mode).
#   bash scripts/sanitizers.sh tsan   ThreadSanitizer (std rebuilt with it) on
#                                     the library's unit tests (the emulated
#                                     device's workers) and async_stream.
#
# Each mode builds into its own target/<mode>, so the normal build is never
# invalidated, and for --target x86_64-unknown-linux-gnu, so that RUSTFLAGS
# reach the tests' code but not build scripts or proc macros. A sanitizer
# report fails the run. Without nightly Rust (or the component a mode needs)
# the mode prints "skipped: ..." and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
target=x86_64-unknown-linux-gnu

skip() {
    echo "sanitizers.sh $mode: skipped: $*"
    exit 0
}

# The toolchain and components a mode needs; skips when one is missing.
need_nightly() {
    [ "$(uname -s -m)" = "Linux x86_64" ] || skip "the sanitizer runs target $target only"
    command -v rustup >/dev/null 2>&1 || skip "no rustup, so no nightly toolchain"
    rustup toolchain list | grep -q '^nightly-' \
        || skip "no nightly toolchain (rustup toolchain install nightly)"
    local component
    for component in "$@"; do
        rustup +nightly component list --installed 2>/dev/null | grep -q "^$component" \
            || skip "no $component component (rustup +nightly component add $component)"
    done
}

case "$mode" in
asan)
    need_nightly
    export RUSTFLAGS="-Zsanitizer=address"
    # The C interop tests' C and C++ objects (built by the `cc` crate, which
    # reads these) are instrumented too: gcc's and clang's ASan calls are the
    # ones the Rust runtime (compiler-rt) provides, so C reads out of bounds
    # and C use-after-free are caught, not only Rust's.
    export CFLAGS_x86_64_unknown_linux_gnu="-fsanitize=address -fno-omit-frame-pointer"
    export CXXFLAGS_x86_64_unknown_linux_gnu="$CFLAGS_x86_64_unknown_linux_gnu"
    # detect_stack_use_after_return: a C callback keeping a pointer into a
    # returned Rust frame (or the reverse) is an error, not a silent read.
    export ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=1:halt_on_error=1"
    cargo_asan=(cargo +nightly test --locked --no-fail-fast --target "$target" --target-dir target/asan)
    status=0
    # Nothing is skipped: the emulated device's test whose forked child dies
    # of SIGSEGV on a PROT_NONE page passes under ASan (the child restores
    # the default handler, and ASan's shadow of the mapping is addressable),
    # so do malformed's isolated_test!s (their children run under ASan too,
    # a report there fails the test), and emulated_pool's 40,000 mappings
    # stay under the kernel's limit (valgrind's own push it over).
    "${cargo_asan[@]}" -p arrow-device --lib \
        --test malformed --test roundtrip --test stream --test async_stream \
        --test dlpack --test cai --test emulated_pool --test staging || status=1
    "${cargo_asan[@]}" -p c-interop-tests --tests || status=1
    exit $status
    ;;
miri)
    need_nightly miri rust-src
    cargo +nightly miri setup
    # CAI pointers are integers by the spec, and the DLPack tests hand over
    # addresses as integers: casts Miri accepts with a warning per site.
    export MIRIFLAGS="-Zmiri-permissive-provenance -Zmiri-env-forward=ARROW_DEVICE_MALFORMED_ISOLATED"
    cargo_miri=(cargo +nightly miri test --locked -p arrow-device)
    # Miri stops at the first call it cannot run (memfd_create and mprotect
    # of the emulated device, madvise of array::host_memory; processes), so
    # the tests that make one are skipped by name below; a new test that
    # makes one stops the run with "unsupported operation" and joins a list.
    #
    # The unit tests of the modules that make no system call. Also skipped:
    # the walk over all 85,000 format strings of up to 3 characters (minutes
    # under Miri; the parser has no unsafe code, so the normal run covers it).
    # The conformance checker's swapped and followed release callbacks run
    # on the CPU exports (its emulated-device tests are skipped). A share
    # handle's decoders and the layout's tree rebuilt over allocations run
    # too, but not the 100,000-level handles (minutes under Miri; they only
    # check that decoding stops at the nesting limit).
    "${cargo_miri[@]}" --lib -- abi:: array::layout array::node device::sync_event \
        dlpack::dtype error:: schema:: conformance:: \
        share::codec share::layout share::backend \
        --skip no_short_string_makes_the_parser_panic --skip emulated_device \
        --skip nested_past_the_import_limit
    # Every CAI test (typestr, entries, plan, import of host memory).
    "${cargo_miri[@]}" --test cai
    # DLPack on the CPU; the skipped tests use the emulated device.
    "${cargo_miri[@]}" --test dlpack -- \
        --skip a_hand_made_ext_dev_tensor_is_read_through_the_device \
        --skip an_emulated_device_array_round_trips_without_host_access \
        --skip dlpack_device_reports_cpu_as_id_zero_and_devices_by_their_id \
        --skip export_waits_on_the_producers_sync_event_unless_told_not_to
    # The malformed-input suite: hand-built structs through the importer.
    # Miri cannot spawn processes, so the isolated_test!s run in-process
    # (the variable their child would see); copies:: uses the emulated
    # device; the 2^20-node DAG walk takes many minutes here and runs the
    # code the small trees run.
    ARROW_DEVICE_MALFORMED_ISOLATED=1 "${cargo_miri[@]}" --test malformed -- \
        --skip copies:: --skip a_dag_that_unfolds_into_too_many_nodes_is_rejected
    # Export and import on the CPU; the skipped tests use the emulated device.
    "${cargo_miri[@]}" --test roundtrip -- \
        --skip a_device_copy_lets_go_of_its_host_source_once_the_copy_has_run \
        --skip a_re_export_of_an_emulated_array_re_imports_equal \
        --skip a_record_batch_becomes_a_device_array_and_back_with_its_metadata \
        --skip a_record_batch_round_trips_through_the_emulated_device \
        --skip a_string_view_with_a_variadic_buffer_imports_from_the_emulated_device \
        --skip an_emulated_array_released_without_being_read_is_released_once \
        --skip arrow_rs_data_becomes_a_device_array_safely_as_the_import_of_its_export_would \
        --skip every_already_sliced_array_round_trips_through_the_emulated_device \
        --skip every_type_copies_to_a_peer_emulated_device_and_back_to_the_cpu \
        --skip every_type_round_trips_through_the_emulated_device_in_strict_delayed_mode \
        --skip every_type_sliced_on_the_emulated_device_copies_back_equal
    # Streams and the C stream bridges on the CPU; the skipped tests also
    # stream from the emulated device.
    "${cargo_miri[@]}" --test stream -- \
        --skip a_stream_without_batches_has_a_schema_and_ends_at_once \
        --skip an_error_in_the_middle_reaches_the_consumer_with_its_message_and_ends_the_stream \
        --skip device_batches_arrive_on_the_device_with_their_own_event \
        --skip every_type_and_the_schema_metadata_round_trip_on_the_cpu_and_the_emulated_device \
        --skip only_cpu_device_streams_become_c_streams \
        --skip zero_row_batches_and_a_zero_column_schema_stream_through
    # The async stream on tokio's multithreaded runtime (Miri runs threads).
    # Skipped: the emulated device, and the 1,000-run stress test (not done
    # after minutes here; the asan and tsan modes run it).
    "${cargo_miri[@]}" --test async_stream -- \
        --skip batches_copied_to_the_emulated_device_round_trip \
        --skip stress_every_run_terminates_and_releases_everything_once
    ;;
miri-short)
    # What the test command runs: the unit tests of the code without system
    # calls, and the tests that caught the aliasing bugs Miri found (a
    # Box moved after its pointer was exported; a pointer taken before a
    # &mut call), a few minutes where the whole `miri` mode takes ten.
    need_nightly miri rust-src
    cargo +nightly miri setup -q 2>/dev/null || cargo +nightly miri setup
    export MIRIFLAGS="-Zmiri-permissive-provenance"
    cargo_miri=(cargo +nightly miri test --locked -p arrow-device)
    # With the conformance checker's swapped and followed release callbacks
    # (its CPU tests: about 10 s here).
    "${cargo_miri[@]}" --lib -- abi:: array::layout device::sync_event dlpack::dtype \
        error:: schema:: conformance:: \
        --skip no_short_string_makes_the_parser_panic --skip emulated_device
    "${cargo_miri[@]}" --test roundtrip -- \
        a_re_export_of_an_imported_cpu_array_round_trips_and_keeps_the_original_alive
    "${cargo_miri[@]}" --test stream -- bridges_carry_errors_with_code_and_message_both_ways \
        c_streams_bridge_to_device_streams_and_back
    "${cargo_miri[@]}" --test async_stream -- additional_metadata_round_trips
    ;;
tsan)
    need_nightly rust-src
    export RUSTFLAGS="-Zsanitizer=thread"
    # A report makes the run exit 66 once every test ran.
    export TSAN_OPTIONS="halt_on_error=0:second_deadlock_stack=1"
    # A panic's backtrace takes over 10 s to symbolize in this build, longer
    # than the async tests wait for the error a panicking source becomes.
    export RUST_BACKTRACE=0
    cargo_tsan=(cargo +nightly test --locked -Zbuild-std --target "$target" --target-dir target/tsan -p arrow-device)
    status=0
    # The emulated device's workers (device::emulated), and every other unit
    # test with threads (array::host_memory's page touching) for free.
    "${cargo_tsan[@]}" --lib || status=1
    "${cargo_tsan[@]}" --test async_stream || status=1
    exit $status
    ;;
*)
    echo "usage: $0 asan|miri|miri-short|tsan" >&2
    exit 2
    ;;
esac
