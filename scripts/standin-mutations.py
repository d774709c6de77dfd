#!/usr/bin/env python3
"""Proof that the CUDA tests can fail: applies, one at a time, mutations that
break a rule of the driver (each a bug the CUDA module could have), runs the
CUDA suites against the driver stand-in, and reports which tests caught it.
Every mutation must be caught; the source is restored after each, also on
Ctrl-C. Run from anywhere: python3 scripts/standin-mutations.py
(about a minute per mutation: the suites are rebuilt each time)."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = "crates/arrow-device/src"

# (name, file, original text, mutated text)
MUTATIONS = [
    (
        "no cuStreamWaitEvent on the producer's event before reading offsets",
        f"{SRC}/array/device_reads.rs",
        "            unsafe { device.stream_wait_sync_event(&own_stream, sync_event) }?;\n"
        "            &own_stream",
        "            let _ = sync_event;\n"
        "            &own_stream",
    ),
    (
        "no context pushed around a driver call",
        f"{SRC}/device/cuda/driver.rs",
        "        call(\"cuCtxPushCurrent\", || {\n"
        "            // SAFETY: `self.ctx` is a primary context retained for the life\n"
        "            // of the process.\n"
        "            unsafe { sys::cuCtxPushCurrent_v2(self.ctx) }.result()\n"
        "        })\n"
        "        .map_err(for_call)?;\n"
        "        let _pop = Pushed;\n",
        "",
    ),
    (
        "a copy's destination memory freed before its event",
        f"{SRC}/array/copy.rs",
        "        smallvec![memory],\n        sources,",
        "        {\n            drop(memory);\n            smallvec![]\n        },\n        sources,",
    ),
    (
        "CUDA called from the cuLaunchHostFunc callback (payload dropped there)",
        f"{SRC}/device/cuda/release.rs",
        "        let payload = unsafe { Box::from_raw(user_data.cast::<Payload>()) };\n",
        "        let payload = unsafe { Box::from_raw(user_data.cast::<Payload>()) };\n"
        "        if user_data as usize != 0 {\n            drop(payload);\n            return;\n        }\n",
    ),
    (
        "the sync event recorded before the copies (on a stream they are not on)",
        f"{SRC}/array/copy.rs",
        ".and_then(|event| device.record_event(&event, &stream).map(|()| event));",
        ".and_then(|event| device.record_event(&event, &device.create_stream()?).map(|()| event));",
    ),
]

SUITES = ["--test", "cuda_gpu", "--test", "cuda_interop_gpu"]


def run_suites(env):
    cmd = ["cargo", "test", "-p", "arrow-device", "--features", "cuda", *SUITES,
           "--", "--test-threads=1"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    out = done.stdout + "\n" + done.stderr
    failed = re.findall(r"^test (\S+) \.\.\. FAILED", out, re.M)
    failed += [f"{n} (failed)" for n in re.findall(r"^---- (\S+) stdout ----", out, re.M)
               if n not in failed]
    # A test that aborts the binary (a fatal violation) prints no result:
    # it is the last one started.
    started = re.findall(r"^test (\S+) \.\.\. ?$", out, re.M)
    if "signal: 6" in out or "SIGABRT" in out:
        failed.append(f"{started[-1] if started else '?'} (aborted by the stand-in)")
    violations = sorted(set(re.findall(r"cuda-standin: VIOLATION: ([^\n]{0,120})", out)))
    return done.returncode, sorted(set(failed)), violations, out


def main():
    standin = subprocess.run(["bash", "scripts/cuda-standin.sh"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout.strip()
    env = dict(os.environ, LD_LIBRARY_PATH=standin, ARROW_DEVICE_REQUIRE_GPU="1")
    code, failed, _, out = run_suites(env)
    if code != 0:
        print(out[-4000:])
        sys.exit("the suites fail without any mutation: fix that first")
    print("unmutated: all CUDA suites pass against the stand-in")
    missed = 0
    for name, path, old, new in MUTATIONS:
        full = os.path.join(ROOT, path)
        with open(full) as f:
            original = f.read()
        if original.count(old) != 1:
            sys.exit(f"mutation '{name}': its text is not found once in {path}: update this script")
        try:
            with open(full, "w") as f:
                f.write(original.replace(old, new))
            code, failed, violations, out = run_suites(env)
        finally:
            with open(full, "w") as f:
                f.write(original)
        caught = code != 0
        missed += not caught
        print(f"\n{'CAUGHT' if caught else 'MISSED'}: {name} ({path})")
        for test in failed:
            print(f"  failed: {test}")
        for message in violations[:3]:
            print(f"  stand-in: {message}")
        if caught and not failed:
            print("  (the build or run failed without naming a test:)\n" + out[-1500:])
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
