#!/usr/bin/env bash
# GPT under data parallelism (issue 31): the small config trained by one
# device with 2 threads, by mirrored x2 and by 2 MPI workers
# (multi_worker_mirrored under mpirun -np 2, each its slice of every batch)
# gives the same weights bytes; token shards are split by file between the
# workers (two shards: each worker trains on its own) and only worker 0 writes.
source "$(dirname "$0")/mpi_common.bash"
head -c 60000 "$src/README.md" >"$tmp/t.txt"
S=(--model gpt --gpt-layers 2 --gpt-heads 2 --gpt-width 32 --seq-len 16 --steps 6
   --eval-every 3 --batch-size 8 --quiet)
"$cli" train "${S[@]}" --text "$tmp/t.txt" --threads 2 --save "$tmp/one.st" >/dev/null 2>&1
check "one device, 2 threads (exit 0)" "[ $? -eq 0 ]"
"$cli" train "${S[@]}" --text "$tmp/t.txt" --strategy mirrored --replicas 2 --save "$tmp/m2.st" >/dev/null 2>&1
check "mirrored x2 = one device's bytes" "cmp -s $tmp/one.st $tmp/m2.st"
mpirun -np 2 "$cli" train "${S[@]}" --text "$tmp/t.txt" --strategy multi_worker_mirrored \
  --save "$tmp/mw.st" >"$tmp/mw.out" 2>&1
check "mpirun -np 2 multi_worker_mirrored (exit 0)" "[ $? -eq 0 ]"
check "2 MPI workers = one device's bytes" "cmp -s $tmp/one.st $tmp/mw.st"
"$cli" tokenize "$tmp/t.txt" -o "$tmp/a" --val-fraction 0.1 >/dev/null 2>&1
head -c 30000 "$src/README.md" | tail -c 20000 >"$tmp/u.txt"
"$cli" tokenize "$tmp/u.txt" -o "$tmp/b" --val-fraction 0 >/dev/null 2>&1
mpirun -np 2 "$cli" train "${S[@]}" --data "$tmp/[ab]_*.bin" --strategy multi_worker_mirrored \
  --report "$tmp/r.json" >"$tmp/sh.out" 2>&1
check "token shards split by file between 2 workers (exit 0)" "[ $? -eq 0 ]"
check "fit does not shard them again" "! grep -q 'sharding by data' $tmp/sh.out"
check "worker 0 alone wrote the report" "[ -s $tmp/r.json ] && [ \$(grep -c '\"history\"' $tmp/r.json) -eq 1 ]"
exit $fail
