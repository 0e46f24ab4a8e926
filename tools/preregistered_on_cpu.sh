#!/usr/bin/env bash
# The pre-registered pairs on the CPU (docs/study.md, "Amendment, 2026-12-06"): every run from the
# pinned commit, in a git worktree that changes on main do not reach; single runs, one at a time,
# in pair order (Baseline seed 3, KNA seed 3, Baseline seed 4, ...); each record copied into this
# checkout's results/field/ as it lands, to be committed at once. Run it again in a later session:
# recorded runs (in this checkout's results/field/ or under PREREG_ROOT) are skipped, and a stopped
# run resumes from its checkpoint (same --runs_dir).
#
#   PREREG_ROOT=/work/prereg bash tools/preregistered_on_cpu.sh     # in the background, nohup
#
# While "$PREREG_ROOT/PAUSE" exists no new run starts (to measure benchmarks on a quiet machine:
# touch it, then stop the running study with SIGTERM; it saves and exits 75, and resumes later).
set -u
PIN=67d63c46982ccd918e8e26ed105cd64c2b19eeec
repo=$(cd "$(dirname "$0")/.." && pwd)
root=${PREREG_ROOT:-/work/prereg}
tree=$root/worktree
mkdir -p "$root/runs" "$root/field"
if [ ! -d "$tree" ]; then
  git -C "$repo" worktree add --detach "$tree" "$PIN" || exit 1
fi
if [ "$(git -C "$tree" rev-parse HEAD)" != "$PIN" ] || [ -n "$(git -C "$tree" status --porcelain)" ]; then
  echo "error: $tree is not a clean checkout of $PIN; remove it (git worktree remove) and run again." >&2
  exit 1
fi
layout=gau_qk-separate__gau_heads-4__copy50__retrieval50
for seed in 3 4 5 6 7 8 9 10; do
  for config in baseline_rope kna_rope; do
    key=${config}__${layout}__seed${seed}
    if [ -e "$root/field/$key.json" ]; then
      cp -n "$root/field/$key.json" "$repo/results/field/"
    fi
    # Recorded: skipped (the run folders of an earlier session may be gone, the record is here).
    if [ -e "$repo/results/field/$key.json" ]; then continue; fi
    while [ -e "$root/PAUSE" ]; do sleep 30; done
    echo "$(date -u +%FT%TZ) start $key" >> "$root/drive.log"
    # Through keep_freed_memory.sh (from Baseline seed 7 on): faster steps on the CPU, the
    # same numbers (the allocator's setting changes no computation; BENCHMARKS.md).
    (cd "$tree" && "$repo/tools/keep_freed_memory.sh" python -m keynorm_jax.study --scale=cpu \
        --plan=preregistered --runs="$key" --runs_dir="$root/runs" --results="$root") \
        >> "$root/$key.log" 2>&1
    rc=$?
    echo "$(date -u +%FT%TZ) exit $rc $key" >> "$root/drive.log"
    if [ -e "$root/field/$key.json" ]; then
      cp -n "$root/field/$key.json" "$repo/results/field/"
    elif [ "$rc" = 75 ]; then
      while [ -e "$root/PAUSE" ]; do sleep 30; done  # paused: resume this run
      exec bash "$0"
    else
      echo "error: $key ended with exit $rc and no record; see $root/$key.log" >&2
      exit "$rc"
    fi
  done
done
echo "$(date -u +%FT%TZ) all 16 recorded" >> "$root/drive.log"
