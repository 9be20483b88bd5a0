#!/usr/bin/env bash
# A short fuzzing run of each target — decode_request (request frames), raft_frame (the
# controller port's Raft frames stepped into a voter) and sasl_preauth (what a SASL listener
# reads before authentication) — so no fuzz target can rot unnoticed:
# they are built and run by ./integration/run-all.sh (suite "fuzz-smoke"), not only by hand.
#
# - fuzz/Cargo.lock must be current (the crate is outside the workspace, so nothing else
#   notices when a dependency of kafkaiq is added): `cargo metadata --locked` fails otherwise.
# - With `cargo +nightly fuzz` installed, the run is the one fuzz/README.md describes
#   (AddressSanitizer, libFuzzer's -malloc_limit_mb). Otherwise the target is built with the
#   stable toolchain as cargo-fuzz would build it minus the sanitizer: SanitizerCoverage
#   instrumentation (so libFuzzer is coverage-guided), debug assertions, `--cfg fuzzing`; the
#   target's own allocator enforces the 64 MiB allocation bound that -malloc_limit_mb enforces
#   under a sanitizer, and -rss_limit_mb works in both. That build is optimised at level 1
#   without debug info: it takes about half the time of a full release build of the crate, and
#   a smoke run of this size does not need the faster code.
# - FUZZ_SMOKE_RUNS executions per target (default 500,000 for decode_request, a few seconds;
#   a tenth of it for raft_frame, whose every input builds a voter, and for sasl_preauth, whose
#   SCRAM inputs derive keys), seed 1, from 256 generated seed inputs (decode_request: every API
#   version's body, random bytes; raft_frame: random field bytes, and runs of chunk frames;
#   sasl_preauth: PLAIN and SCRAM exchanges) in a fresh corpus. Any crash (a panic, an abort, an oversized allocation) fails
#   with the input saved in fuzz/artifacts/<target>/; so does a run that did not execute all its
#   runs.
#
# With --build-only, only builds the targets (run-all.sh does that in the background at the
# lowest CPU priority while the other suites run, then runs this script again to fuzz).
#
# The figures mean little; a real campaign is `cargo +nightly fuzz run` (fuzz/README.md).
set -euo pipefail
build_only=0
if [[ "${1:-}" == --build-only ]]; then
    build_only=1
elif [[ $# -gt 0 ]]; then
    echo "fuzz-smoke: unknown argument $1 (the only one is --build-only)" >&2
    exit 2
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
runs="${FUZZ_SMOKE_RUNS:-500000}"
jobs="${CARGO_BUILD_JOBS:-2}"

if ! cargo metadata --locked --format-version 1 --manifest-path Cargo.toml >/dev/null; then
    echo "fuzz-smoke: fuzz/Cargo.lock is out of date; refresh it with" >&2
    echo "  cargo update --manifest-path fuzz/Cargo.toml --workspace" >&2
    exit 1
fi

# libfuzzer-sys compiles libFuzzer (C++) from source.
if ! command -v c++ >/dev/null && ! command -v g++ >/dev/null && ! command -v clang++ >/dev/null; then
    echo "fuzz-smoke: installing g++ (libfuzzer-sys builds libFuzzer)" >&2
    if [[ $(id -u) -eq 0 ]]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >&2
    else
        sudo -n env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >&2
    fi
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/fuzz-smoke.XXXXXX")"
trap 'rm -rf "$work"' EXIT
python3 - "$work/seeds" <<'PY'
import os, random, sys
r = random.Random(20260101)
os.makedirs(sys.argv[1], exist_ok=True)
for i in range(256):
    # An odd first byte: for decode_request the next two bytes pick an API version and the rest
    # is its body; for raft_frame the rest is read as message fields.
    body = bytes(r.getrandbits(8) for _ in range(r.randrange(0, 512)))
    open(f"{sys.argv[1]}/seed-{i:03d}", "wb").write(bytes([1, i >> 8, i & 0xff]) + body)
# raft_frame: raw chunk frames (an even first byte), a message cut in pieces as
# quorum::chunks lays them out (key 32002, version 0, id, client id, sender, size, position).
for i in range(16):
    message = bytes(r.getrandbits(8) for _ in range(r.randrange(8, 200)))
    pieces = [message[p:p + 48] for p in range(0, len(message), 48)]
    out = bytearray([0])
    for n, piece in enumerate(pieces):
        frame = (32002).to_bytes(2, "big") + bytes(4) + (1).to_bytes(2, "big") + b"f"
        frame += (2).to_bytes(8, "big") + len(message).to_bytes(4, "big")
        frame += (n * 48).to_bytes(4, "big") + piece
        out += len(frame).to_bytes(2, "big") + frame
    open(f"{sys.argv[1]}/seed-chunks-{i:02d}", "wb").write(bytes(out))
# sasl_preauth: an odd first byte, then the pick (mechanism in bits 0-1, handshake version in
# bit 2, authenticate version in bits 3-4) and the client's tokens separated by 0xFF.
exchanges = [
    (0b00100, [b"\0alice\0alice-secret"]),
    (0b10100, [b"admin\0alice\0wrong"]),
    (0b00000, [b"\0alice\0alice-secret"]),
    (0b10101, [b"n,,n=alice,r=fuzzclientnonce", b"c=biws,r=fuzzclientnonceXYZ,p=AAAA"]),
    (0b01110, [b"n,,n=bob,r=abc", b"c=biws,r=abc,p=="]),
    (0b00101, [b"n,a=alice,n=alice,r=x,extra=1", b"c=bixz,r=x,p=Zm9v"]),
    (0b10101, [b"n,,n=carol,r=n1"]),
    (0b00111, [b"n,,n=alice"]),
]
for i, (pick, tokens) in enumerate(exchanges):
    open(f"{sys.argv[1]}/seed-sasl-{i:02d}", "wb").write(bytes([1, pick]) + b"\xff".join(tokens))
PY

host="$(rustc -vV | sed -n 's/^host: //p')"
nightly=0
if cargo +nightly fuzz --version >/dev/null 2>&1; then
    nightly=1
    echo "fuzz-smoke: cargo +nightly fuzz (AddressSanitizer), as fuzz/README.md runs it" >&2
    if [[ $build_only -eq 1 ]]; then
        (cd "$here/.." && cargo +nightly fuzz build decode_request && cargo +nightly fuzz build raft_frame &&
            cargo +nightly fuzz build sasl_preauth)
    fi
else
    echo "fuzz-smoke: stable toolchain, SanitizerCoverage without AddressSanitizer" \
        "(no cargo +nightly fuzz here)" >&2
    # --target keeps RUSTFLAGS off build scripts and proc macros, as cargo-fuzz does.
    RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions" \
        cargo build --release --locked -j "$jobs" --manifest-path Cargo.toml --target "$host" \
        --config 'profile.release.opt-level=1' --config 'profile.release.debug=0' \
        --target-dir target/stable-sancov --bin decode_request --bin raft_frame --bin sasl_preauth
fi
if [[ $build_only -eq 1 ]]; then
    exit 0
fi

# smoke <target> <runs>: fails (returns 1) on a crash or a short run.
smoke() {
    local target="$1" runs="$2" status=0 out="$work/$1.out"
    mkdir -p "$work/corpus-$target" "artifacts/$target"
    local flags=(-runs="$runs" -seed=1 -max_len=4096 -malloc_limit_mb=64 -rss_limit_mb=1024
        -artifact_prefix="$here/artifacts/$target/" -print_final_stats=1)
    if [[ $nightly -eq 1 ]]; then
        (cd "$here/.." && cargo +nightly fuzz run "$target" "$work/corpus-$target" "$work/seeds" \
            -- "${flags[@]}") >"$out" 2>&1 || status=$?
    else
        "target/stable-sancov/$host/release/$target" "${flags[@]}" \
            "$work/corpus-$target" "$work/seeds" >"$out" 2>&1 || status=$?
    fi
    grep -E '^#[0-9]+\s+(INITED|DONE)|^stat::number_of_executed_units|^Done ' "$out" >&2 || true
    if [[ $status -ne 0 ]]; then
        tail -40 "$out" >&2
        echo "fuzz-smoke: FAIL: $target exited with $status (input saved under fuzz/artifacts/)" >&2
        return 1
    fi
    if ! grep -qE "^Done $runs runs" "$out"; then
        tail -20 "$out" >&2
        echo "fuzz-smoke: FAIL: $target did not report $runs runs" >&2
        return 1
    fi
    local covered
    covered="$(grep -oE 'cov: [0-9]+' "$out" | tail -1)"
    echo "fuzz-smoke: $target ok ($runs runs, $covered, corpus $(ls "$work/corpus-$target" | wc -l) inputs)" >&2
}

# libFuzzer runs on one thread: decode_request (the longest) runs beside the other two.
smoke decode_request "$runs" &
decode=$!
others=0
{ smoke raft_frame "$(( runs / 10 ))" && smoke sasl_preauth "$(( runs / 10 ))"; } || others=$?
decoded=0
wait "$decode" || decoded=$?
if [[ $decoded -ne 0 || $others -ne 0 ]]; then
    exit 1
fi
