"""Bad input to eval.py, `python -m keynorm_jax.reproduce`, `python -m keynorm_jax.study` and
`python -m keynorm_jax.export_hf`: a nonzero exit with one last line `error: <message>` naming the
flag (every command alike, no error type before the message), no traceback, and no work done (no
training, no run folder); and the data sources' bad folders, in one line each.

The CLIs' cases run in one subprocess per CLI (one JAX import each): DRIVER parses each case's
flags and calls the CLI's main, with training replaced by a marker.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from keynorm_jax import run_config
from keynorm_jax.data import corpora
from keynorm_jax.evaluation.command import make_columns
from faults.helpers import REPO

DRIVER = r"""
import contextlib, importlib, io, json, runpy, sys, traceback
from absl import flags

target, cases = sys.argv[1], json.loads(sys.argv[2])
if target.endswith(".py"):
  main = runpy.run_path(target, run_name="cli_under_test")["main"]
else:
  main = importlib.import_module(target).main
trained = []
for name in ("keynorm_jax.reproduce.run", "keynorm_jax.study.runner", "keynorm_jax.study.groups"):
  if name in sys.modules:
    sys.modules[name].train_and_evaluate = lambda *a, **k: trained.append(1) or sys.exit(1)
found = []
for args in cases:
  flags.FLAGS.unparse_flags()
  stderr, code = io.StringIO(), 0
  with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
    try:
      main(flags.FLAGS([target, *args]))
    except SystemExit as e:
      code = e.code
    except BaseException:
      traceback.print_exc()
      code = 1
  text = stderr.getvalue()
  if isinstance(code, str):  # what the interpreter prints for sys.exit(message)
    text, code = text + code + "\n", 1
  found.append({"code": code or 0, "stderr": text, "trained": bool(trained)})
  trained.clear()
print(json.dumps(found))
"""

# cli -> (target, base flags); {case} is the case's own folder, {file} a regular file.
CLIS = {
    "eval": ("eval.py", ["--workdir={case}/runs", "--output={case}/out"]),
    "reproduce": ("keynorm_jax.reproduce.run",
                  ["--scale=tiny", "--runs_dir={case}/runs", "--data_dir={case}/tfds"]),
    "study": ("keynorm_jax.study.__main__",
              ["--scale=tiny", "--runs_dir={case}/runs", "--results={case}/results",
               "--data_dir={case}/tfds"]),
    "export": ("keynorm_jax.export_hf", ["--out={case}/out"]),
}

# (cli, flags, the flag the error names)
BAD = [
    ("eval", ["--lengths=256,abc"], "--lengths"),
    ("eval", ["--lengths="], "--lengths"),
    ("eval", ["--depths=0.5,x"], "--depths"),
    ("eval", ["--num_windows=0"], "--num_windows"),
    ("eval", ["--beta_fast=-1"], "--beta_fast"),
    ("eval", ["--beta_fast=1", "--beta_slow=2"], "--beta_fast"),
    ("eval", ["--beta_slow=0"], "--beta_slow"),
    ("eval", ["--window=0"], "--window"),
    ("eval", ["--methods="], "--methods"),
    ("eval", ["--repeat_period=0"], "--repeat_period"),
    ("eval", ["--workdir="], "--workdir"),
    ("eval", ["--output="], "--output"),
    ("eval", ["--workdir= "], "--workdir"),                      # a folder named by a space
    ("eval", ["--length=0"], "--length"),
    ("eval", ["--lengths=512,-1"], "--lengths"),
    ("eval", ["--factor=0", "--rope_scaling=linear"],
     "--factor must be at least 1 (or left unset for the default, length / train_length), got 0."),
    ("eval", ["--hf_train_length=4096"], "--hf_train_length"),   # without --hf_checkpoint
    ("eval", ["--hf_dtype=bfloat16", "--data_dir=x"], "--hf_dtype, --data_dir"),
    ("eval", ["--hf_checkpoint={file}"], "--workdir"),   # with --output too: nothing reads it
    ("eval", ["--output=  "], "--output"),
    ("reproduce", ["--num_train_steps=-5"], "--num_train_steps"),
    ("reproduce", ["--runs_dir={file}"], "--runs_dir"),
    ("reproduce", ["--runs_dir="], "--runs_dir"),
    ("reproduce", ["--output={file}"], "--output"),
    ("reproduce", ["--variants="], "--variants"),
    ("reproduce", ["--variants=kna_rope,no_such_variant"], "--variants"),
    ("reproduce", ["--data_dir={file}"], "--data_dir"),
    ("study", ["--runs_dir={file}"], "--runs_dir"),
    ("study", ["--runs_dir= "], "--runs_dir"),
    ("study", ["--results={file}"], "--results"),
    ("study", ["--runs=no_such_key"], "--runs"),
    ("study", ["--runs="], "--runs"),
    ("study", ["--max_runs=-1"], "--max_runs"),
    ("study", ["--shard=2/2"], "--shard"),
    ("study", ["--plan=preregistered", "--shard=999/1000"], "--shard"),   # an empty shard
    ("study", ["--data_dir={file}"], "--data_dir"),
    ("study", ["--plan=preregistered", "--dtype=bfloat16"], "--dtype"),   # they train in float32
    ("export", ["--workdir={case}/runs"], "--workdir"),           # no run there
]
# Accepted options reach their work: the harness sees training (or, for eval, no runs to evaluate:
# exit 1, where --workdir is missing or, in EMPTY's case, an empty folder).
GOOD = [
    ("reproduce", ["--variants=kna_rope", "--num_train_steps=2"]),
    ("study", ["--runs=kna_alibi__seed0", "--max_runs=1"]),
    ("study", ["--plan=preregistered", "--group_seeds", "--max_runs=2"]),  # one group of 2
    ("eval", ["--methods=none,yarn", "--beta_fast=16", "--repeat_period=8"]),
    ("eval", ["--num_windows=1"]),
]
EMPTY = GOOD[-1]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
  """{cli: [outcome per case of BAD then GOOD]}, each CLI's cases in one subprocess, run once."""
  root = tmp_path_factory.mktemp("cli_input")
  (root / "a_file").write_text("not a folder")
  found = {}

  def run(cli):
    if cli not in found:
      target, base = CLIS[cli]
      cases = [args for c, args, *_ in BAD + GOOD if c == cli]
      argv = [[a.format(case=root / cli / str(i), file=root / "a_file") for a in base + args]
              for i, args in enumerate(cases)]
      if cli == EMPTY[0]:
        (root / cli / str(cases.index(EMPTY[1])) / "runs").mkdir(parents=True)
      env = dict(os.environ, JAX_PLATFORMS="cpu")
      result = subprocess.run([sys.executable, "-c", DRIVER, target, json.dumps(argv)], cwd=REPO,
                              capture_output=True, text=True, timeout=300, env=env, check=False)
      assert result.returncode == 0, result.stderr[-3000:]
      found[cli] = (json.loads(result.stdout.strip().splitlines()[-1]), root / cli)
    return found[cli]

  return run


def _case(outcomes, cli, args):
  results, folder = outcomes(cli)
  index = [a for c, a, *_ in BAD + GOOD if c == cli].index(args)
  return results[index], folder / str(index)


@pytest.mark.parametrize("cli, args, flag", BAD, ids=[f"{c} {' '.join(a)}" for c, a, _ in BAD])
def test_bad_input_is_one_line_naming_the_flag_before_any_work(outcomes, cli, args, flag):
  found, case = _case(outcomes, cli, args)
  assert found["code"] != 0
  assert "Traceback" not in found["stderr"], found["stderr"]
  last = found["stderr"].strip().splitlines()[-1]
  assert last.startswith("error: ") and flag in last, last
  assert not re.match(r"error: \w+Error: ", last), last      # export said `error: ConfigError: `
  assert not found["trained"]
  assert not (case / "runs").exists() and not (case / "out").exists()
  assert not (case / "results").exists()              # the study's records folder (--results)


@pytest.mark.parametrize("cli, args", GOOD, ids=[f"{c} {' '.join(a)}" for c, a in GOOD])
def test_good_input_reaches_its_work(outcomes, cli, args):
  found, case = _case(outcomes, cli, args)
  if cli == "eval":
    assert found["code"] == 1
    assert found["stderr"].strip().splitlines()[-1].startswith("error: No trained runs under")
  else:
    assert found["trained"], found["stderr"]


def test_methods_named_twice_make_one_column_each():
  columns = make_columns(["none", "yarn", "none", "yarn"], posthoc_logn=True)
  assert [c.label for c in columns] == ["none", "none+logn", "yarn", "yarn+logn"]


def _data(**kwargs):
  data = run_config.load_config("kna_rope").data
  data.update(kwargs)
  return data


def test_a_text_folder_that_is_a_file_is_not_a_folder(tmp_path):
  (tmp_path / "corpus").write_text("text")
  with pytest.raises(corpora.DataError, match=r"'.*corpus' is not a folder; set "
                                              r"--config.data.text_folder"):
    corpora.load_documents(_data(dataset="text_folder", text_folder=str(tmp_path / "corpus")),
                           "train")


def test_a_dangling_link_in_the_text_folder_is_named(tmp_path):
  for i in range(3):
    (tmp_path / f"{i}.txt").write_text(f"document {i}")
  (tmp_path / "3.txt").symlink_to(tmp_path / "gone.txt")
  with pytest.raises(corpora.DataError) as e:
    corpora.load_documents(_data(dataset="text_folder", text_folder=str(tmp_path)), "test")
  assert str(e.value) == (f"{tmp_path / '3.txt'} is a symbolic link to {tmp_path / 'gone.txt'}, "
                          f"which does not exist; fix the link or remove it from the text folder.")


@pytest.mark.parametrize("under", [False, True], ids=["a file", "under a file"])
def test_a_data_dir_that_is_not_a_folder_is_refused_before_tfds(tmp_path, under):
  (tmp_path / "file").write_text("x")
  data_dir = tmp_path / "file" / "tfds" if under else tmp_path / "file"
  with pytest.raises(corpora.DataError) as e:
    corpora.load_documents(_data(data_dir=str(data_dir)), "train")
  assert str(e.value).startswith(f"--config.data.data_dir={data_dir} "
                                 f"{'lies under the file ' if under else 'is a file'}")
  assert "\n" not in str(e.value)
