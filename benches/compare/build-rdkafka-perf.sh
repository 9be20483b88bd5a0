#!/usr/bin/env bash
# Builds librdkafka's rdkafka_performance (a C load generator that costs far less CPU per record
# than the Java perf tools) from the librdkafka source the rdkafka-sys crate ships, with
# librdkafka's own configure and make and OpenSSL (TLS and librdkafka's built-in SASL: PLAIN,
# SCRAM, OAUTHBEARER), once, into target/rdkafka-perf-tls/. Prints the binary's path.
#   benches/compare/build-rdkafka-perf.sh
# Needs a C compiler, make and OpenSSL's headers (libssl-dev, installed here when missing); the crate source comes from `cargo fetch` (it is a dependency of
# the tests), so a fresh clone builds it without network beyond the crate registry.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
out="$target/rdkafka-perf-tls"
bin="$out/rdkafka_performance"
mkdir -p "$out"
# One build at a time; a second caller waits and then finds the binary.
exec 9>"$out/.lock"
flock 9
if [[ -x "$bin" ]]; then
    echo "$bin"
    exit 0
fi
src="$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/rdkafka-sys-*/librdkafka 2>/dev/null | sort | tail -1 || true)"
if [[ -z "$src" ]]; then
    (cd "$root" && cargo fetch -q) >&2
    src="$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/rdkafka-sys-*/librdkafka | sort | tail -1)"
fi
mkdir -p "$out"
work="$out/librdkafka"
rm -rf "$work"
cp -r "$src" "$work"
chmod -R u+w "$work"
if [[ ! -e /usr/include/openssl/ssl.h ]]; then
    echo "build-rdkafka-perf: installing libssl-dev (OpenSSL's headers)" >&2
    sudo=()
    [[ $(id -u) -eq 0 ]] || sudo=(sudo -n)
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libssl-dev >&2
fi
jobs="${CARGO_BUILD_JOBS:-2}"
(
    set -e
    cd "$work"
    # OpenSSL only: no Cyrus SASL, compression libraries or HTTP client beyond what is built in.
    ./configure --enable-ssl --disable-gssapi --disable-sasl --disable-curl \
        --disable-zstd --disable-lz4-ext --disable-zlib --disable-regex-ext
    make -j"$jobs" -C src librdkafka.a
    cc -O2 -Isrc examples/rdkafka_performance.c src/librdkafka.a -o "$bin.tmp" -lssl -lcrypto \
        -lpthread -lm -ldl -lrt
) >"$out/build.log" 2>&1 || { echo "rdkafka_performance build failed; see $out/build.log" >&2; tail -20 "$out/build.log" >&2; exit 1; }
mv "$bin.tmp" "$bin"
echo "$bin"
