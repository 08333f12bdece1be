#!/usr/bin/env bash
# grainpack bench --device on an accelerator host, in one command (issue 36, acceptance 2).
#
# On any accelerator host with grainpack installed, the check is just:
#   grainpack bench --device --json device.json
# This script runs the same on a bare host without network access whose Python (3.12, with
# jax, numba, tqdm and absl) lacks grain, under a time budget.
#
# 1. On a machine with the network, once: download the wheels that host lacks into .whl/
#    (about 4.5 MB; ignored by git through .git/info/exclude):
#      bash benchmarks/device_check.sh --wheels
# 2. On the accelerator host, with this tree and its .whl/ copied there:
#      bash benchmarks/device_check.sh
#    It installs the wheels into /tmp/site, runs grainpack from this tree, prints the
#    devices, then runs grainpack bench --device for at most BUDGET seconds (default 480:
#    an estimated 3 minutes on 16 cores). The figures are printed as they are measured, and
#    $OUT/device.json is rewritten after each section, so a run cut short still leaves what
#    it measured; $OUT/device.log holds the whole output.
#    Extra arguments go to grainpack bench --device (--quick: a smoke test of ~30 s).
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--wheels" ]; then
  mkdir -p .git/info .whl
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >>.git/info/exclude
  # grain 0.2.18 and what it imports that the image lacks, for CPython 3.12 on x86-64
  exec python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    grain==0.2.18 array-record==0.8.6 portpicker==1.6.0 importlib_resources==7.1.0
fi

out=${OUT:-/tmp/grainpack-device}
budget=${BUDGET:-480}
mkdir -p "$out"
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
pip=(python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site)
if [ -d .whl ] && ! python3 -c "import grain" 2>/dev/null; then
  "${pip[@]}" --no-compile --upgrade .whl/*.whl || exit 1
fi
python3 - <<'EOF' || exit 1
# grainpack runs from this tree; its version (grainpack --version, the parser) is read from
# installed metadata: a stub of it, as building a wheel needs what the image may lack
import pathlib, tomllib
version = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["project"]["version"]
info = pathlib.Path(f"/tmp/site/grainpack-{version}.dist-info")
info.mkdir(parents=True, exist_ok=True)
(info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: grainpack\nVersion: {version}\n")
import jax, grain, grainpack.pipeline.fast as fast
print(f"jax {jax.__version__}: {jax.devices()}; grain {getattr(grain, '__version__', '?')}; "
      f"numba kernels {'on' if fast.kernels() is not None else 'off'}")
EOF
# SIGINT at the budget: grainpack stops as after ^C, the JSON holds every finished section
timeout -s INT -k 30 "$budget" python3 -m grainpack bench --device --directory /tmp/grainpack-bench \
  --json "$out/device.json" "$@" 2>&1 | tee "$out/device.log"
