#!/bin/bash
# The cores sweep on a machine lent for minutes, with no Rust toolchain: each step runs only
# if the time left allows it, and everything it wrote ends in one archive (such machines
# may send back only a few files). Build and carry the binary first, on a machine with
# cargo and clang (clang gives umt-bpf):
#   cargo build --release -p umt-bench && mkdir -p dev16 && strip -o dev16/umt-bench target/release/umt-bench
# Usage, there: OUT=DIR [BUDGET=seconds] [BIN=path] bash docs/scale-lent-machine.sh
# Writes $OUT/scale.tgz: per step, the log and scale.json/.md/.svg (steps.txt says which ran
# and how long each took); heat and FWI calibrated on all the cores, medians of 3 repeats at
# the largest count, single runs at 4 and 8 cores.
set -u
: "${OUT:?set OUT to a directory for the results}"
BIN=${BIN:-$(cd "$(dirname "$0")/.." && pwd)/dev16/umt-bench}
BUDGET=${BUDGET:-420}
N=$(nproc)
S=$(mktemp -d "${TMPDIR:-/var/tmp}/umt-scale.XXXXXX")
R=$OUT/r
mkdir -p "$R"
finish() {
  rm -rf "$S"
  tar czf "$OUT/scale.tgz" -C "$OUT" r && rm -rf "$R"
}
trap finish EXIT
{ nproc; uname -r; grep -m1 "model name" /proc/cpuinfo; id -u; df -h "$S"; } > "$R/machine.txt" 2>&1
T0=$SECONDS
# step WANT NAME ARGS...: runs `umt-bench scale ARGS` if WANT seconds are left.
step() {
  local want=$1 name=$2 left=$((BUDGET - (SECONDS - T0)))
  shift 2
  if ((left < want)); then
    echo "skip $name ($left s left)" >> "$R/steps.txt"
    return
  fi
  local s=$SECONDS
  timeout $((left - 5)) "$BIN" scale --out "$R/$name" --dir "$S" "$@" > "$R/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - s)) s" >> "$R/steps.txt"
}
RTS=--runtimes=baseline,umt-bpf,umt-perf,io-uring,rayon-4x,rayon-8x,tokio
step 40 "heat$N" --cores-list "$N" --workloads heat --repeat 3 $RTS
step 30 "fwi$N" --cores-list "$N" --workloads fwi --repeat 3 $RTS
step 60 "scan$N" --cores-list "$N" --workloads scan --repeat 3 $RTS
step 60 all4 --cores-list 4 --repeat 1 $RTS
step 60 all8 --cores-list 8 --repeat 1 $RTS
