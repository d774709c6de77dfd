#!/usr/bin/env bash
# Runs the unsafe-heavy test suites under valgrind's memcheck: invalid reads
# or writes, and definite leaks, fail the run. Needs valgrind (apt-get install
# valgrind). Not part of CI: it takes minutes on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind >/dev/null; }

bins=$(cargo test --workspace --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])')

status=0
for bin in $bins; do
    case "$(basename "$bin")" in
        cli-*|arrow_device_cli-*) continue ;;  # spawns the binary; nothing unsafe of its own
        compile_fail-*) continue ;;  # runs cargo on code that must not compile; nothing runs
    esac
    echo "== $(basename "$bin")"
    # The skipped test crashes a forked child on purpose (strict mode proof);
    # 500 worker threads need a higher thread limit than valgrind's default.
    valgrind --max-threads=2000 --error-exitcode=99 --leak-check=full \
        --errors-for-leak-kinds=definite -q "$bin" --test-threads=2 \
        --skip a_host_read_of_a_strict_device_pointer_dies_with_sigsegv || status=1
done
exit $status
