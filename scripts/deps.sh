#!/usr/bin/env bash
# Install the Debian packages Strata needs to build and test, if any are missing.
#   scripts/deps.sh          build + test: compiler, CMake, OpenBLAS, zlib, jansson,
#                            Fashion-MNIST, OpenMPI (openmpi-bin, libopenmpi-dev), Gloo
#                            (libgloo-dev), python3, the GPT demo corpus (jargon-text)
#   scripts/deps.sh --bench  also the PyTorch peer (python3-torch, python3-numpy)
#   scripts/deps.sh --mpi    the same as no option (OpenMPI is always installed now)
#   scripts/deps.sh --test   what `make test` uses: also valgrind, and python3-torch for
#                            tests/test_torch_layers.py (layers against PyTorch; ~180 MB
#                            of packages, ~800 MB installed)
# Quiet when nothing is missing. Installs as root, or through `sudo -n` when that
# works without a password; otherwise prints the exact command and exits 1.
set -euo pipefail

# OpenMPI is part of the default build so that multi_worker_mirrored is always
# there (CMake builds without it, saying why, when its headers are missing).
# python3: the tests' helper scripts (data makers, checkers, scripts/gen_api_doc.py).
pkgs=(cmake make gcc pkg-config libopenblas-dev zlib1g-dev libjansson-dev dataset-fashion-mnist
      openmpi-bin libopenmpi-dev python3
      protobuf-c-compiler libprotobuf-c-dev libzmq3-dev)
pkgs+=(python3-dev python3-numpy python3-pytest) # the Python package strata and its tests (issue 14)
pkgs+=(libgloo-dev) # the Gloo transport: multi-worker jobs launched from TF_CONFIG (issue 30)
pkgs+=(g++) # tests/cuda_emu: the CUDA module's kernels built as C++ host code (issue 16; skipped without)
# The GPT demo corpus (issue 31): the Jargon File 4.4.7, public-domain English prose
# (1.7 MB at /usr/share/doc/jargon-text/jargon.txt.gz), tokenized by `make demo-gpt`.
pkgs+=(jargon-text)
for arg in "$@"; do
  case "$arg" in
    --bench) pkgs+=(python3-torch python3-numpy) ;;
    --mpi) ;;
    --test) pkgs+=(valgrind python3-torch) ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "deps.sh: unknown argument '$arg' (expected --bench, --mpi or --test)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${pkgs[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [ "$status" = "installed" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

export DEBIAN_FRONTEND=noninteractive
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n env DEBIAN_FRONTEND=noninteractive)
else
  echo "deps.sh: missing packages: ${missing[*]}" >&2
  echo "Install them with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi

echo "deps.sh: installing ${missing[*]}" >&2
${sudo[@]+"${sudo[@]}"} apt-get update -qq >&2
${sudo[@]+"${sudo[@]}"} apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
