#!/usr/bin/env bash
# Issue 18's memory acceptance: a synthetic TFRecord set of BYTES bytes
# (default 5 GB) written to a temp dir, one epoch of the mlp trained on it with
# `strata train --data tfrecord:...`, peak RSS from wait4 checked against
# min(300 MB, BYTES / 2); the set is deleted after. It is tests/test_tfrecord_memory.c
# (192 MiB in the ctest suite) with a size.
#   usage: bench/tfrecord_memory.sh [BUILD_DIR] [BYTES] [gzip]
set -eu
build=${1:-build}
bytes=${2:-5000000000}
gz=0; [ "${3:-}" = gzip ] && gz=1
STRATA_CLI=$build/strata STRATA_TFR_BYTES=$bytes STRATA_TFR_GZIP=$gz "$build/test_tfrecord_memory"
