#!/usr/bin/env bash
# Create (or reuse) <repo>/.venv-bench with the benchmark's pinned dependencies and gaescale (editable).
# Idempotent: a marker holding a hash of the inputs skips pip when nothing changed.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.venv-bench"
reqs="$repo/bench/requirements.txt"
marker="$venv/.bench-installed"
python="${PYTHON:-python3}"

if [[ ! -x "$venv/bin/python" ]]; then
    echo "creating $venv" >&2
    "$python" -m venv "$venv"
fi

# The inputs that decide what gets installed: the pins, gaescale's own metadata and constraints and the interpreter.
stamp="$(cat "$reqs" "$repo/pyproject.toml" "$repo/constraints.txt" <("$venv/bin/python" -VV) | sha256sum | cut -d' ' -f1)"

if [[ -f "$marker" && "$(cat "$marker")" == "$stamp" ]] \
    && "$venv/bin/python" -c "from importlib.metadata import version as v
for d in ('torch', 'torch_geometric', 'psutil', 'pytest', 'gaescale'): v(d)" 2>/dev/null; then
    echo "$venv is up to date" >&2
    exit 0
fi

rm -f "$marker"
"$venv/bin/python" -m pip install --quiet -r "$reqs"
"$venv/bin/python" -m pip install --quiet -e "$repo[all]" -c "$repo/constraints.txt"  # with every extra (Cluster-GCN, ...), at CI's versions
"$venv/bin/python" - <<'PY'
import torch, torch_geometric, psutil, gaescale
print(f"torch {torch.__version__}, torch_geometric {torch_geometric.__version__}, "
      f"psutil {psutil.__version__}, gaescale {gaescale.__version__}")
PY
echo "$stamp" > "$marker"
echo "ready: $venv/bin/python" >&2
