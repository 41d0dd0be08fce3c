#!/usr/bin/env bash
# Scripted fuzz of `strata train` output-path combinations (issue 17): the
# same file twice, through links, nested directories, special files, inputs
# as outputs. tests/output_path_fuzz.py says what must hold; the suite runs
# STRATA_PATH_FUZZ_CASES cases (default 150, a few seconds); the acceptance
# run used 10,000 (`STRATA_PATH_FUZZ_CASES=10000`).
set -u
exec /usr/bin/python3 "${STRATA_SOURCE_DIR:?set by CTest}/tests/output_path_fuzz.py" \
  "${STRATA_CLI:?set by CTest}" "${STRATA_PATH_FUZZ_CASES:-150}" "${STRATA_PATH_FUZZ_SEED:-17}"
