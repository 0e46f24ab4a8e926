"""SIGINT and SIGTERM during an evaluation: one line and exit code 75 at any moment, nothing
half-written, never an evaluation that goes on to exit 0. eval.py had no handler: Ctrl-C in its
first seconds gave a KeyboardInterrupt traceback 7 times in 12, and was swallowed 5 times (the
evaluation ran on to exit 0)."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from keynorm_jax.evaluation import command, evaluate, outputs, result_sets
from keynorm_jax.evaluation.command import EvalRequest, evaluate_runs, make_columns
from keynorm_jax.runs import load_run, workdir_source
from keynorm_jax.training import preemption
from faults.helpers import REPO

pytestmark = pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                                reason="signal handlers can only be installed in the main thread")

NOTHING = (r"nothing was written \(the results are written all at once, at the end\)\. Run the "
           r"same command again to evaluate\.")


def _signalled(real, sig=signal.SIGINT):
  """`real`, sending `sig` to this process at its first call (then doing its work)."""
  calls = []

  def call(*args, **kwargs):
    calls.append(1)
    if len(calls) == 1:
      os.kill(os.getpid(), sig)
    return real(*args, **kwargs)

  return call


# moment: (module, attribute, the stop line after "Stopped by SIG...")
MOMENTS = {
    "restoring": (command, "held_out_tokens", r"while evaluating (\w+) \(\1 L=32 repeated "
                                              rf"none\): {NOTHING}"),
    "scoring": (evaluate, "score_windows", r"while evaluating (\w+) \(\1 L=32 non_repeated "
                                           rf"none\): {NOTHING}"),
    "writing": (command, "write_results", r"after the results were written in full to .*out "
                                          r"\(one set: .*out/\.written\); nothing is left to do\."),
}


@pytest.mark.parametrize("moment", sorted(MOMENTS))
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_evaluation_at_its_next_safe_point(installed, straight_run, tmp_path,
                                                               monkeypatch, capfd, moment, sig):
  """The signal while the text is read, while the first windows are scored, or while the files
  are written: Preempted (exit 75) with its line at the next safe point; before the files, none
  is written and the folder the evaluation made is gone; in the files, the set is finished whole
  (one set, no journal, no temporary file) and the stop said after it."""
  module, name, line = MOMENTS[moment]
  monkeypatch.setattr(module, name, _signalled(getattr(module, name), sig))
  output = tmp_path / "new" / "out"
  request = EvalRequest(lengths=[32], columns=make_columns(["none"]), num_windows=2)
  with pytest.raises(preemption.Preempted, match=rf"^Stopped by {sig.name} {line}$") as stopped:
    evaluate_runs(workdir_source(straight_run, warn=lambda _: None), request, output=output,
                  echo=lambda _: None, stop=preemption.check)
  assert stopped.value.exit_code == 75
  assert f"{sig.name} received: stopping at the next safe point" in capfd.readouterr().err
  if moment == "writing":
    names = sorted(p.name for p in output.iterdir())
    assert names == sorted(["results.json", "results.csv", "results.md",
                            "accuracy_by_position.png", outputs.MANIFEST])
    result_sets.check_set(output)                                 # one whole set
  else:
    assert not (tmp_path / "new").exists()                    # nor the folders it made


def test_a_signal_while_a_run_loads_is_not_taken_for_its_failure(installed, straight_run,
                                                                  tmp_path, monkeypatch):
  """A failed run does not stop the others; a stop is not a failure: it ends the evaluation."""
  monkeypatch.setattr(command, "with_kernel", _signalled(command.with_kernel))
  with pytest.raises(preemption.Preempted, match=r"^Stopped by SIGINT while evaluating "):
    evaluate_runs(workdir_source(straight_run, warn=lambda _: None),
                  EvalRequest(lengths=[32], columns=make_columns(["none"]), num_windows=2,
                              kernel="reference"),
                  output=tmp_path / "out", echo=lambda _: None, stop=preemption.check)
  assert not (tmp_path / "out").exists()
  assert load_run(straight_run).step == 6                    # the run itself untouched


def _eval(straight_run, output, data_dir):
  return subprocess.Popen(
      [sys.executable, str(REPO / "eval.py"), f"--workdir={straight_run}", "--lengths=32,48",
       "--num_windows=2", f"--output={output}", "--methods=none,ntk"],
      cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      env=dict(os.environ, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1"))


# Both signals at the first moment (where a handler installed late would show: Python's own
# KeyboardInterrupt, or death by SIGTERM) and at the last; one each between (one handler takes both,
# and the in-process test above sends both at each of its moments). The moments after the imports
# are taken from what eval.py prints, not from a clock: an idle machine ran the whole evaluation in
# under 2.5 s, and a signal after its exit tells nothing.
PRINTED = {"restored": "[1/1] ", "scoring": "  evaluating "}
CLI_MOMENTS = [(0.2, signal.SIGINT), (0.2, signal.SIGTERM), (1.0, signal.SIGTERM),
               ("restored", signal.SIGINT), ("scoring", signal.SIGINT),
               ("scoring", signal.SIGTERM)]


@pytest.mark.slow
@pytest.mark.parametrize("moment, sig", CLI_MOMENTS,
                         ids=[f"{moment}-{sig.name}" for moment, sig in CLI_MOMENTS])
def test_cli_a_signal_at_any_moment_is_one_line_and_75(straight_run, tmp_path, data_dir,
                                                        moment, sig):
  """SIGINT or SIGTERM into eval.py at several moments: after 0.2 and 1 s (the imports), once it
  names the restored run, and once it says it scores (in-process above: in its files). Exit 75, the
  last line `Stopped by ...`, no traceback, KeyboardInterrupt or ignored exception; the output
  folder absent, or one whole set where the signal came as the files were written."""
  output = tmp_path / "out"
  process = _eval(straight_run, output, data_dir)
  if isinstance(moment, float):
    time.sleep(moment)
  else:
    for line in process.stdout:
      if line.startswith(PRINTED[moment]):
        break
    else:
      pytest.fail(f"eval.py never printed {PRINTED[moment]!r}: {process.communicate()}")
  process.send_signal(sig)
  out, err = process.communicate(timeout=240)
  assert process.returncode == 75, (out + err)[-3000:]
  for noise in ("Traceback", "Exception ignored", "KeyboardInterrupt"):
    assert noise not in out + err
  last = err.strip().splitlines()[-1]
  assert last.startswith(f"Stopped by {sig.name} "), last
  if output.exists():
    result_sets.check_set(output)
    assert "after the results were written in full" in last
  else:
    assert "nothing was" in last
