#!/usr/bin/env bash
# The device session (calibration/device_session.py) on a lent GPU machine, from the repository root.
# Here first: `make device-wheels` (the packages the device image lacks, into .whl/). Then one call:
#   run(command="bash calibration/device_session.sh", carry=[".whl"], timeout_s=540)
# Extra arguments go to the session (python -m servesim.calibration.device_session --help).
set -u
out="${OUT:-results/device-session}"
mkdir -p "$out"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "installing .whl/ failed" | tee "$out/log.txt"; exit 1; }
  export PYTHONPATH="/tmp/site"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python3 -m servesim.calibration.device_session --out "$out" "$@" 2>&1 | tee "$out/log.txt"
exit "${PIPESTATUS[0]}"
