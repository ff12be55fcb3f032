#!/bin/bash
# Heat and FWI across 2 ranks on "two hosts": two network namespaces joined by a veth pair,
# mpirun and rank 0 in one, rank 1 in the other, the MPI traffic over TCP (as the test
# two_hosts_joined_by_a_network_match_the_reference). Each workload runs twice: the
# monitored runtimes with sleeping receives, then with --busy-mpi-recv. Needs root, ip and
# Open MPI; build first: cargo build --release -p umt-bench --features mpi
# Usage: sudo docs/mpi-two-hosts.sh   (R=repeats, RTS=runtimes of the first run, DIR=--dir)
set -u
BIN=${BIN:-$(cd "$(dirname "$0")/.." && pwd)/target/release/umt-bench}
A=umtm-a; B=umtm-b; VA=umtmva; VB=umtmvb; NET=10.213.77
ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null
ip netns add $A; ip netns add $B
trap 'ip netns del $A; ip netns del $B' EXIT
ip link add $VA type veth peer name $VB
ip link set $VA netns $A; ip link set $VB netns $B
ip -n $A addr add $NET.1/24 dev $VA; ip -n $A link set $VA up; ip -n $A link set lo up
ip -n $B addr add $NET.2/24 dev $VB; ip -n $B link set $VB up; ip -n $B link set lo up
run() { # workload args...
  local args=("$@")
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PMIX_MCA_ptl_tcp_if_include=$VA PMIX_MCA_ptl_tcp_remote_connections=1 \
  timeout 900 ip netns exec $A mpirun --oversubscribe --mca btl tcp,self --mca btl_tcp_if_include $NET.0/24 --mca oob_tcp_if_include $VA \
    -np 1 $BIN "${args[@]}" : -np 1 ip netns exec $B $BIN "${args[@]}"
}
HEAT=(heat --mpi --size 4096 --iters 20 --iof 2 --dir ${DIR:-/var/tmp} --verify)
FWI=(fwi --mpi --nx 256 --ny 256 --nz 64 --steps 20 --iof 2 --dir ${DIR:-/var/tmp} --verify)
R=${R:-3}
RTS=${RTS:-baseline,umt-perf,umt-bpf,umt-io,io-uring,rayon,rayon-4x}
for w in HEAT FWI; do
  eval "a=(\"\${$w[@]}\")"
  echo "== $w sleeping receives"; run "${a[@]}" --repeat $R --runtimes $RTS
  echo "== $w busy receives"; run "${a[@]}" --repeat $R --runtimes baseline,umt-perf,umt-bpf --busy-mpi-recv
done
