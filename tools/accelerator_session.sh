#!/usr/bin/env bash
# The device tool's entry for a lent GPU: installs the wheels carried in .whl/ (once per machine),
# sets the settings earlier leases used, and runs tools/accelerator_session.py within the call's
# deadline (DEADLINE_S: the call's timeout_s less a minute for this start and the transfers;
# default 540 for timeout_s=600). Extra arguments go to the driver (e.g. --only=b_*).
# The call (docs/study.md, "On a lent accelerator"):
#   command: bash tools/accelerator_session.sh     carry: [".whl"]     timeout_s: 600
set -u
cd "$(dirname "$0")/.."
start=$SECONDS
if ls .whl/*.whl >/dev/null 2>&1; then
  if [ ! -f /tmp/site/.keynorm_wheels ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl || exit 1
    touch /tmp/site/.keynorm_wheels
  fi
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
case "${XLA_FLAGS:-}" in *xla_gpu_autotune_level*) ;; *)
  export XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_autotune_level=0" ;; esac
exec python3 tools/accelerator_session.py --deadline_s=$(( ${DEADLINE_S:-540} - (SECONDS - start) )) "$@"
