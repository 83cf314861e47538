#!/usr/bin/env bash
# Fetch, on a machine with the package index, the wheels devtools/gpu_run.sh installs on a
# GPU machine without one: the project's dependencies its image lacks, and the GPU JPEG
# decoders (torchcodec, nvImageCodec with nvJPEG), for that machine's Python and CUDA.
#   devtools/gpu_wheels.sh [PYTHON_VERSION] [CUDA_MAJOR]     # default: 3.12 13
# Writes .gpu-wheels/ (git-ignored), one version of each, about 40 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
python_version="${1:-3.12}"
cuda="${2:-13}"
wheels=.gpu-wheels
rm -rf "$wheels" && mkdir -p "$wheels"
platforms=()
for n in 17 24 27 28 31 34; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
PIP_CONFIG_FILE=/dev/null python3 -m pip download -q --no-deps --only-binary=:all: \
  --python-version "$python_version" --implementation cp "${platforms[@]}" -d "$wheels" \
  simplejpeg lmdb webdataset braceexpand "torchcodec==0.16.*" "nvidia-nvimgcodec-cu${cuda}" \
  "nvidia-nvjpeg" --disable-pip-version-check
du -sh "$wheels"
ls "$wheels"
