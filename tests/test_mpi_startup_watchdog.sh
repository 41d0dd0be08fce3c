#!/usr/bin/env bash
# Issue 29 D7: under `mpirun --enable-recovery` a rank that stops (or dies)
# during MPI's start-up left the others in MPI_Init_thread forever
# (--collective-timeout never applied; reliability-3.md). Rank 1 stops
# itself before it starts Strata: rank 0 must exit 3 within
# --collective-timeout + 10 s (the CLI's start-up watchdog), saying why.
# Skips (77) when mpirun is missing or Strata was built without MPI.
source "$(dirname "${BASH_SOURCE[0]}")/mpi_common.bash"
cd "$tmp" || exit 1
cat > rank.sh <<'SH'
#!/bin/sh
echo $$ > "pid.$OMPI_COMM_WORLD_RANK"
[ "$OMPI_COMM_WORLD_RANK" = 1 ] && kill -STOP $$
"$@"; rc=$?; echo $rc > "rc.$OMPI_COMM_WORLD_RANK"; exit $rc
SH
chmod +x rank.sh
for strategy in pipeline multi_worker_mirrored; do
  rm -f rc.* pid.*
  t0=$(date +%s)
  timeout 90 mpirun --enable-recovery -np 2 ./rank.sh "$cli" train --model mlp --data probe-data \
    --strategy $strategy --collective-timeout 3 --quiet > out 2> err &
  job=$!
  for _ in $(seq 600); do [ -e rc.0 ] && break; sleep 0.1; done
  elapsed=$(( $(date +%s) - t0 ))
  [ -e pid.1 ] && kill -9 "$(cat pid.1)" 2>/dev/null
  wait $job 2>/dev/null
  check "$strategy: rank 1 stopped in start-up: rank 0 exits 3 within 3 + 10 s (+ slack) (${elapsed}s, exit $(cat rc.0 2>/dev/null))" \
    "[ \"\$(cat rc.0 2>/dev/null)\" = 3 ] && [ $elapsed -le 30 ]"
  check "$strategy: ... naming the start-up" "grep -q 'start-up (MPI_Init, .*) did not finish within 13 s' err"
done
exit $fail
