#!/usr/bin/env bash
# The whole GPU check in one call, on a machine that reaches no network: install the
# wheels devtools/gpu_wheels.sh fetched into .gpu-wheels/ (nothing else), build the
# compiled cropped decode where a compiler and libjpeg's headers are, run
# devtools/gpu_check.py, and leave its report and logs in $OUT.
#   OUT=/tmp/out devtools/gpu_run.sh [gpu_check arguments]
#   OUT=/tmp/out devtools/gpu_run.sh --device cpu --count 300    # a dry run without a GPU
# PYTHON picks the interpreter (default python3: the one that holds the machine's torch).
set -uo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
out="${OUT:-gpu-out}"
wheels="${GPU_WHEELS:-.gpu-wheels}"
site="${GPU_SITE:-/tmp/gpu-site}"
mkdir -p "$out"
if compgen -G "$wheels/*.whl" >/dev/null; then
  # by name, so pip takes the wheel that fits this Python or names the one that does not
  names=$(ls "$wheels"/*.whl | xargs -n1 basename | cut -d- -f1 | sort -u)
  # shellcheck disable=SC2086
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --disable-pip-version-check --find-links "$wheels" --target "$site" $names \
    >"$out/install.log" 2>&1 || {
    echo "error: installing the carried wheels failed (see $out/install.log; fetch them for" \
         "this machine's Python with devtools/gpu_wheels.sh)" >&2; exit 1; }
fi
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
if "$python" -c "import packer.imaging._cropjpeg" >"$out/build.log" 2>&1; then
  echo "the compiled cropped decode is already built" >>"$out/build.log"
else
  "$python" setup.py -q build_ext --inplace >>"$out/build.log" 2>&1 \
    || echo "note: the compiled cropped decode did not build (see $out/build.log)" >&2
fi
{ nvidia-smi || echo "no nvidia-smi"; } >"$out/nvidia-smi.txt" 2>&1
"$python" -m devtools.gpu_check --out "$out/gpu_check.md" "$@" 2>&1 | tee "$out/gpu_check.log"
exit "${PIPESTATUS[0]}"
