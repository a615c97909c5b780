#!/usr/bin/env bash
# Screenshot of the run report (docs/report.png), taken by headless Chromium with no network.
#
#   docs/make_report_screenshots.sh RUN_DIR [OUT_PNG]
#
# RUN_DIR is the --out directory of a finished 'gaescale train'. The screenshots in docs/ come from Cora:
#   .venv/bin/python -c "import gaescale; gaescale.train(edges='../shared/data/cora.npz', out='/tmp/cora-run',
#       epochs=200, self_loops=True, loss='weighted-bce', dense='exact', hidden='32', dim=16, quiet=True)"
#   docs/make_report_screenshots.sh /tmp/cora-run
#
# Needs Chromium (Debian: apt-get install chromium). The browser runs inside 'unshare -n' (a network namespace
# with no interfaces; as root, or 'unshare -rn' as a user) so the page is shown exactly as it renders offline.
set -euo pipefail

run_dir=${1:?usage: $0 RUN_DIR [OUT_PNG]}
here=$(cd "$(dirname "$0")" && pwd)
out_png=${2:-$here/report.png}
python=${PYTHON:-$here/../.venv/bin/python}
chromium=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome)}

html=$("$python" -c "import sys; from gaescale.report import write_report; print(write_report(sys.argv[1]))" "$run_dir")
html=$(realpath "$html")

if unshare -n true 2>/dev/null; then offline=(unshare -n)
elif unshare -rn true 2>/dev/null; then offline=(unshare -rn)
else offline=(); echo "warning: unshare is not permitted here; the screenshot is taken with the network up" >&2
fi

profile=$(mktemp -d)
tall=$(mktemp --suffix=.png)
trap 'rm -rf "$profile" "$tall"' EXIT
# a window taller than the page; the empty background below the page is cropped off afterwards
"${offline[@]}" "$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --user-data-dir="$profile" \
    --hide-scrollbars --force-device-scale-factor=1 --window-size=1280,4000 --screenshot="$tall" \
    "file://$html" 2>/dev/null >/dev/null

"$python" - "$tall" "$out_png" <<'EOF'
import sys
import numpy as np
from PIL import Image

img = Image.open(sys.argv[1]).convert("RGB")
px = np.asarray(img)
background = px[-1, 0]
rows = np.flatnonzero((px != background).any(axis=(1, 2)))
height = min(px.shape[0], int(rows[-1]) + 28) if rows.size else px.shape[0]
img.crop((0, 0, px.shape[1], height)).save(sys.argv[2], optimize=True)
print(f"{sys.argv[2]}: {px.shape[1]} x {height}")
EOF
