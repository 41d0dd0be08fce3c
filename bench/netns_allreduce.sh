#!/usr/bin/env bash
# All-reduce between emulated hosts: 2 and 3 network namespaces joined by a
# bridge (tests/netns_common.bash, as tests/test_netns.sh makes them; each
# host pinned to one core), one process per host started by mpirun through
# a stand-in for ssh. In the same processes and run, alternating per size:
# MPI_Allreduce, Strata's MPI transport (over btl tcp between the hosts) and
# the Gloo transport of TF_CONFIG launches (TCP between the hosts), from 4 KiB
# to MAX bytes: bench/mpi_allreduce_bench.c with gloo=1 (its columns).
#   sudo bench/netns_allreduce.sh [TRIALS=5] [MAX=268435456] [MIN=4096] [HOSTS="2 3"]
# Needs root, ip, mpicc/mpirun and a build with MPI and Gloo (make).
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
trials=${1:-5} max=${2:-268435456} min=${3:-4096} nhosts=${4:-2 3}
skip() { echo "netns_allreduce: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces)"
for t in ip mpicc mpirun taskset; do command -v $t >/dev/null || skip "$t not found"; done
data=/dev/null
. "$src/tests/netns_common.bash"
netns_launch_host
bin=$tmp/mpi_allreduce_bench
mpicc -O2 -std=c11 -I"$src/include" -I"$src/build/include" -I"$src/src" "$src/bench/mpi_allreduce_bench.c" \
  "$src/build/libstrata.a" -lpthread -lm -ldl -lz -ljansson -lprotobuf-c -lzmq -lgloo -lstdc++ -o "$bin" ||
  skip "cannot build the benchmark (make first; needs MPI and Gloo)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for n in $nhosts; do
  h=$(IFS=,; echo "${hosts[*]:0:$n}")
  echo "# $n hosts ${hosts[*]:0:$n} (namespaces, one core each), trials $trials"
  timeout 3600 "${mpi_base[@]}" -np $n -H "$h" -x STRATA_BENCH_HOSTS="$h" "$bin" "$trials" 0 "$min" "$max" 1 ||
    echo "# $n hosts: the benchmark failed"
done
