#!/usr/bin/env bash
# Two (or more) builds of the Gloo transport side by side between emulated
# hosts: the network namespaces of bench/netns_allreduce.sh (one core each),
# bench/gloo_ab_bench.c linked against each given libstrata.a, run in turn
# on 2 and 3 hosts, ROUNDS times (the builds alternate run by run; inside a
# run the MPI transport and the Gloo transport alternate trial by trial).
#   sudo bench/gloo_ab.sh TRIALS ROUNDS NAME=path/to/libstrata.a[,VAR=VALUE...]...
# e.g. bench/gloo_ab.sh 5 3 before=/tmp/old/libstrata.a after=build/libstrata.a
# (VAR=VALUE: set in that build's processes, so one build can be run two
# ways where it reads a setting from the environment).
# HOSTS="2 3" (the default) picks the host counts (up to 9), MIN=BYTES
# skips the sizes below it.
# Needs root, ip, mpicc/mpirun, taskset; prints bench/gloo_ab_bench.c's rows
# tagged NAME.rROUND.
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
trials=${1:?TRIALS} rounds=${2:?ROUNDS}; shift 2
[ $# -ge 1 ] || { echo "gloo_ab: give NAME=libstrata.a for each build" >&2; exit 2; }
skip() { echo "gloo_ab: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces)"
for t in ip mpicc mpirun taskset; do command -v $t >/dev/null || skip "$t not found"; done
data=/dev/null
. "$src/tests/netns_common.bash"
netns_launch_host
for n in ${HOSTS:-2 3}; do # more hosts than the three made: host i on core i % cores
  while [ ${#hosts[@]} -lt "$n" ]; do
    i=${#hosts[@]}
    mkhost $i $net.1$i || skip "cannot create namespace/veth: $(cat "$tmp/ip.err")"
    hosts+=($net.1$i)
    echo "strata-$id-$i $i" >"$tmp/map.$net.1$i"
  done
done
names=()
declare -A envs
for b in "$@"; do
  name=${b%%=*} lib=${b#*=} envs[$name]=
  case $lib in *,*) envs[$name]=${lib#*,} lib=${lib%%,*} ;; esac
  mpicc -O2 -std=c11 -I"$src/include" -I"$src/build/include" -I"$src/src" "$src/bench/gloo_ab_bench.c" \
    "$lib" -lpthread -lm -ldl -lz -ljansson -lprotobuf-c -lzmq -lgloo -lstdc++ -o "$tmp/ab_$name" ||
    skip "cannot build against $lib"
  names+=("$name")
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for r in $(seq "$rounds"); do
  for n in ${HOSTS:-2 3}; do
    h=$(IFS=,; echo "${hosts[*]:0:$n}")
    for name in "${names[@]}"; do
      xs=()
      IFS=, read -ra kv <<<"${envs[$name]}"
      for e in "${kv[@]}"; do xs+=(-x "$e"); done
      timeout 1200 "${mpi_base[@]}" -np $n -H "$h" -x STRATA_BENCH_HOSTS="$h" "${xs[@]}" \
        "$tmp/ab_$name" "$trials" "$name.r$r" "${MIN:-0}" || echo "# $name on $n hosts failed"
    done
  done
done
