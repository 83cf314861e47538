# Sourced by scripts/demo and scripts/test: a virtual environment and the package installed.
# Uses the active virtual environment if there is one, else creates .venv beside the repo.
# torch is pinned to the CPU build (2.13.0) when missing: an unpinned torch pulls a CUDA build.
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
if ! python -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is None)"; then
  pip_quiet "torch==2.13.0" "numpy>=1.24"
  python -c "import torch" || { echo "error: torch did not install; run: pip install torch==2.13.0" >&2; exit 1; }
fi
