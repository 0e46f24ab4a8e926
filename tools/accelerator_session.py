r"""What a session does with a lent accelerator, in order of value, resuming where the last call stopped.

Entry (the device tool's command line; it installs the carried wheels and sets the GPU settings):

  bash tools/accelerator_session.sh

Each step below is one command line (edit them here). A step runs under what is left of the call's
deadline (--deadline_s, or DEADLINE_S for the .sh); at the deadline its processes get SIGTERM (the
study and train.py save and exit 75), then SIGKILL 30 s later. Each step writes its marker
`<results>/markers/<step>.json` (done, stopped, failed or dry_run, with its exit code, seconds and
command) and its log `<results>/logs/<step>.log`; a later call skips the steps marked done (and,
without --retry_failed, those that failed), and reruns the stopped ones, which resume from their
checkpoints (the study from its records, runs and saved stages). The folders persist on a machine
kept warm between calls: --work (checkpoints, scratch) and --results (markers, logs, records,
benchmark JSON) are under runs/, which git ignores, so the tool keeps them there. After every step
the small files of --results (no checkpoints) are packed into `<out>/accelerator_session.tgz` with
`<out>/summary.md` (the markers as a table): under $OUT they come back, even from a call stopped
at its limit.

  --size=tiny                  every step at the tiny size with a couple of steps (for the test)
  --dry_run=b_eval_*           print these steps' commands instead of running them (fnmatch
                               patterns, comma-separated; the marker says dry_run)
  --only=b_*                   run only these steps
"""

import argparse
import fnmatch
import json
import os
import pathlib
import shlex
import signal
import subprocess
import sys
import tarfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent

B_CONFIGS = ("baseline_rope", "kna_rope", "transformer_baseline_rope", "transformer_kna_rope")

# (step, processes, command): run in the repository root, in this order; {placeholders} are the
# SIZES entry's and --work / --results. processes > 1 starts that many copies at once, the i-th
# with {shard} = i/processes (e.g. --shard={shard} for a study whose runs may be split).
STEPS = [
    # (The pre-registered pairs are not a step: they run on the CPU, all from one commit and one
    # device kind, tools/preregistered_on_cpu.sh; docs/study.md, the amendment of 2026-12-06.)
    # (b) text-only Baseline RoPE and KNA RoPE, 3 seeds as one group, both architectures; each
    # evaluated at 1x and 8x, the model as trained and a window of the training length beside
    *[(f"b_train_{c}", 1, "{python} train.py --config=CONFIG --config.model_size={size} --config.num_seeds=3 --workdir={work}/b/CONFIG{train_extra}".replace("CONFIG", c)) for c in B_CONFIGS],
    *[(f"b_eval_{c}", 1, "{python} eval.py --workdir={work}/b/CONFIG --lengths={eval_lengths} --methods=none,window --window={train_length} --output={results}/b_eval/CONFIG{eval_extra}".replace("CONFIG", c)) for c in B_CONFIGS],
    # (c) long contexts, bfloat16 so that a GPU takes cuDNN's fused attention where it can
    ("c_long_context_gau", 1, "{python} benchmarks/long_context.py --config=tools/session_configs/kna_rope_bf16.py --model_size={long_size} --lengths={long_lengths} --windows=1"),
    ("c_long_context_transformer", 1, "{python} benchmarks/long_context.py --config=tools/session_configs/transformer_kna_rope_bf16.py --model_size={long_size} --lengths={long_lengths} --windows=1"),
    # (d) a seed group of N against N single runs, N up to 16
    ("d_seed_groups_gau", 1, "{python} benchmarks/seed_groups.py --architecture=gau {groups_extra} --out={results}/d_seed_groups/gau.json"),
    ("d_seed_groups_transformer", 1, "{python} benchmarks/seed_groups.py --architecture=transformer {groups_extra} --out={results}/d_seed_groups/transformer.json"),
]

# The placeholders of each --size. full: what the lent GPU runs; tiny: seconds a step, for the test.
SIZES = {
    "full": dict(study_scale="cpu", study_extra="", size="medium",
                 train_length=512, train_extra="", eval_lengths="512,4096", eval_extra="",
                 long_size="seed", long_lengths="16384,65536",
                 groups_extra="--model_size=cpu --train_length=512 --num_seeds=1,2,4,8,16 "
                              "--steps=10 --repeats=3"),
    "tiny": dict(study_scale="tiny", study_extra="", size="tiny",
                 train_length=32,
                 # one layer: RoPE's layers are alike (the suite's tiny runs, train_helpers)
                 train_extra=" --config.train_length=32 --config.batch_size=2 "
                             "--config.num_train_steps=2 --config.checkpoint_every_steps=2 "
                             "--config.log_every_steps=1 --config.eval_windows=2 "
                             "--config.model.kernel=reference --config.model.num_layers=1",
                 eval_lengths="32,256", eval_extra=" --num_windows=2", long_size="tiny",
                 long_lengths="64",
                 groups_extra="--model_size=tiny --train_length=32 --num_seeds=1,2 --steps=2 "
                              "--repeats=1"),
}

GRACE_S = 30        # between SIGTERM and SIGKILL
RESERVE_S = 15      # kept at the end of the call for packing the results
MIN_START_S = 20    # a step is not started with less than this left
PACKED_MAX_BYTES = 2 << 20  # files above this stay out of the packed results


def _marker(results, step):
  return results / "markers" / f"{step}.json"


def _read_marker(results, step):
  try:
    return json.loads(_marker(results, step).read_text())
  except (OSError, ValueError):
    return None


def _commands(processes, template, values):
  return [template.format(**values, shard=f"{i}/{processes}") for i in range(processes)]


def _run(commands, log, seconds):
  """Runs the commands at once, each in its own process group; (exit codes, stopped by deadline)."""
  log.parent.mkdir(parents=True, exist_ok=True)
  with open(log, "a") as out:
    procs = []
    for command in commands:
      out.write(f"$ {command}\n")
      out.flush()
      procs.append(subprocess.Popen(shlex.split(command), cwd=REPO, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True))
    deadline = time.monotonic() + seconds
    stopped = False
    for proc in procs:
      try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
      except subprocess.TimeoutExpired:
        stopped = True
        break
    if stopped:  # SIGTERM to every process group still running, SIGKILL after the grace
      for proc in procs:
        if proc.poll() is None:
          os.killpg(proc.pid, signal.SIGTERM)
      for proc in procs:
        try:
          proc.wait(timeout=max(1.0, GRACE_S))
        except subprocess.TimeoutExpired:
          os.killpg(proc.pid, signal.SIGKILL)
          proc.wait()
    return [proc.returncode for proc in procs], stopped


def _pack(results, out):
  """The small files of `results` into <out>/accelerator_session.tgz, and <out>/summary.md."""
  out.mkdir(parents=True, exist_ok=True)
  rows = ["| step | status | exit codes | seconds (last call) | calls |", "|---|---|---|---|---|"]
  for step, _, _ in STEPS:
    m = _read_marker(results, step) or {"status": "not started"}
    rows.append(f"| {step} | {m['status']} | {m.get('exit_codes', '')} | "
                f"{m.get('seconds', '')} | {m.get('calls', '')} |")
  (out / "summary.md").write_text("\n".join(rows) + "\n")
  staging = out / "accelerator_session.tgz.partial"
  with tarfile.open(staging, "w:gz") as tar:
    for path in sorted(results.rglob("*")):
      if (path.is_file() and "checkpoints" not in path.parts
          and path.stat().st_size <= PACKED_MAX_BYTES):
        tar.add(path, arcname=str(path.relative_to(results.parent)))
  staging.replace(out / "accelerator_session.tgz")


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--deadline_s", type=float, default=float(os.environ.get("DEADLINE_S", 540)),
                      help="seconds this call may take in all (default $DEADLINE_S or 540)")
  parser.add_argument("--size", choices=sorted(SIZES), default="full")
  parser.add_argument("--work", default="runs/accelerator_session/work",
                      help="checkpoints and scratch (kept on a warm machine)")
  parser.add_argument("--results", default="runs/accelerator_session/results",
                      help="markers, logs, records, figures (kept on a warm machine)")
  parser.add_argument("--out", default=os.environ.get("OUT", "runs/accelerator_session/out"),
                      help="where the packed results go (default $OUT)")
  parser.add_argument("--dry_run", default="", help="steps (fnmatch patterns) only printed")
  parser.add_argument("--only", default="*", help="steps (fnmatch patterns) to consider")
  parser.add_argument("--retry_failed", action="store_true", help="rerun steps marked failed")
  parser.add_argument("--data_dir", default="", help="TFDS data dir for training and the study")
  args = parser.parse_args(argv)
  started = time.monotonic()
  work, results, out = (pathlib.Path(p).resolve() for p in (args.work, args.results, args.out))
  values = dict(SIZES[args.size], python=shlex.quote(sys.executable), work=work, results=results)
  if args.data_dir:
    values["train_extra"] += f" --config.data.data_dir={args.data_dir}"
    values["study_extra"] += f" --data_dir={args.data_dir}"
  dry = [p for p in args.dry_run.split(",") if p]
  only = [p for p in args.only.split(",") if p]
  print(f"accelerator session: size={args.size} deadline={args.deadline_s:.0f} s results={results}",
        flush=True)
  for step, processes, template in STEPS:
    if not any(fnmatch.fnmatch(step, p) for p in only):
      continue
    previous = _read_marker(results, step) or {}
    status = previous.get("status")
    is_dry = any(fnmatch.fnmatch(step, p) for p in dry)
    if status == "done" or (status == "dry_run" and is_dry) or (status == "failed" and
                                                                not args.retry_failed):
      print(f"{step}: skipped ({status} in an earlier call)", flush=True)
      continue
    commands = _commands(processes, template, values)
    left = args.deadline_s - (time.monotonic() - started) - RESERVE_S - GRACE_S
    if not is_dry and left < MIN_START_S:
      print(f"{step}: not started ({left:.0f} s left)", flush=True)
      continue
    step_started = time.monotonic()
    if is_dry:
      for command in commands:
        print(f"{step} (dry run): {command}", flush=True)
      codes, stopped = [], False
      status = "dry_run"
    else:
      print(f"{step}: {len(commands)} process(es), {left:.0f} s: {commands[0]}", flush=True)
      codes, stopped = _run(commands, results / "logs" / f"{step}.log", left)
      status = ("done" if not stopped and all(c == 0 for c in codes) else
                "stopped" if stopped or any(c == 75 for c in codes) else "failed")
    marker = {"step": step, "status": status, "exit_codes": codes,
              "seconds": round(time.monotonic() - step_started, 1),
              "calls": previous.get("calls", 0) + 1, "commands": commands}
    _marker(results, step).parent.mkdir(parents=True, exist_ok=True)
    _marker(results, step).write_text(json.dumps(marker, indent=2))
    print(f"{step}: {status} {codes} in {marker['seconds']} s", flush=True)
    _pack(results, out)
  _pack(results, out)
  print(f"accelerator session: {time.monotonic() - started:.0f} s; {out / 'summary.md'}:\n"
        + (out / "summary.md").read_text(), flush=True)


if __name__ == "__main__":
  main()
