# Sourced by scripts/demo and scripts/test: a virtual environment and the package installed.
# Uses the active virtual environment if there is one, else creates .venv beside the repo.
# torch 2.13.0 is installed when missing: the CPU build from download.pytorch.org's CPU index
# when that answers within a few seconds; else from the configured index, saying so first
# and showing pip's progress (on Linux x86-64 PyPI's torch is the CUDA build, several GB).
# The probe is find_spec, not `import torch`: torch imported before numpy is installed
# warns "Failed to initialize NumPy"; numpy is installed with torch for the same reason.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
if [[ -z "${VIRTUAL_ENV:-}" ]]; then
  [[ -x .venv/bin/python ]] || python3 -m venv .venv
  # shellcheck disable=SC1091
  source .venv/bin/activate
fi
pip_quiet() { python -m pip install --disable-pip-version-check -q "$@" 2>&1 | grep -v '^WARNING: Location' || true; }
cpu_index() {  # the CPU wheel index when it answers in time, else nothing
  local probe='import urllib.request as r; r.urlopen("https://download.pytorch.org/whl/cpu/", timeout=3); print("https://download.pytorch.org/whl/cpu")'
  if command -v timeout >/dev/null; then timeout 5 python - <<<"$probe" 2>/dev/null || true
  else python - <<<"$probe" 2>/dev/null || true; fi
}
if ! python -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is None)"; then
  index="$(cpu_index)"
  if [[ -n "$index" ]]; then
    echo "installing torch 2.13.0 (the CPU build) from $index" >&2
    pip_quiet --index-url "$index" "torch==2.13.0" "numpy>=1.24"
  else
    echo "installing torch 2.13.0 from the configured package index: download.pytorch.org's CPU index did not answer, and on Linux x86-64 PyPI's torch is the CUDA build (several GB)" >&2
    python -m pip install --disable-pip-version-check "torch==2.13.0" "numpy>=1.24" 2>&1 \
      | grep -v '^WARNING: Location' || true
  fi
  python -c "import torch" || { echo "error: torch did not install; run: pip install torch==2.13.0" >&2; exit 1; }
fi
