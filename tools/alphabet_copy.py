r"""Which characters does a trained run copy? Random strings of each alphabet, tiled, after text.

Each prompt is held-out text up to LEAD tokens, then a random string of PERIOD characters of one
alphabet (digits, lowercase or uppercase letters) tiled to the end of the window. From the second
copy on, every character is given by the copy PERIOD tokens back, so a model that copies predicts
it; one that does not is near chance (1 in 10 or 26) or below it, if it does not even expect that
alphabet there. Byte-level runs only (one token a character).

  python tools/alphabet_copy.py --workdir=runs/probe --name=gau_kna_rope_..._alphabets \
      --what="..." --command="python train.py ..."

writes results/retrieval_recipe/<name>.json: for each alphabet, greedy accuracy on the later
copies and the mean probability the model gives the alphabet's characters there; and prints it.
"""

import argparse
import json
import pathlib
import string
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FOLDER = ROOT / "results" / "retrieval_recipe"
ALPHABETS = {"digits": string.digits, "lowercase": string.ascii_lowercase,
             "uppercase": string.ascii_uppercase}
LENGTH, LEAD, PERIOD, PROMPTS = 512, 256, 24, 16


def prompts(text_tokens, alphabet: str, *, seed: int = 0, count: int = PROMPTS,
            length: int = LENGTH, lead: int = LEAD, period: int = PERIOD):
  """(int32 [count, length + 1] windows, bool [count, length] scored target positions)."""
  rng = np.random.default_rng(seed)
  text_tokens = np.asarray(text_tokens, np.int32)
  windows = np.zeros([count, length + 1], np.int32)
  for n in range(count):
    start = int(rng.integers(0, len(text_tokens) - length))
    windows[n, :lead] = text_tokens[start:start + lead]
    characters = rng.choice(list(alphabet), size=period)
    windows[n, lead:] = np.resize([ord(c) for c in characters], length + 1 - lead)
  scored = np.zeros([count, length], bool)
  scored[:, lead + period - 1:] = True   # targets lead + period .. : each copies one period back
  return windows, scored


def copy_scores(logits_fn, windows, scored, alphabet: str) -> dict:
  """logits_fn: int32 [B, T] -> float [B, T, vocab]. Greedy accuracy (%) on the scored targets,
  and the mean probability (%) given there to the alphabet's characters."""
  logits = np.asarray(logits_fn(windows[:, :-1]), np.float64)
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  targets = windows[:, 1:]
  correct = logits.argmax(-1) == targets
  on_alphabet = probs[..., [ord(c) for c in alphabet]].sum(-1)
  return {"copy_accuracy": round(100 * float(correct[scored].mean()), 2),
          "alphabet_probability": round(100 * float(on_alphabet[scored].mean()), 2),
          "chance": round(100 / len(alphabet), 2)}


def measure(workdir) -> tuple[int, dict]:
  """(the step evaluated, {alphabet: copy_scores}) for the newest checkpoint of a byte-level run."""
  import jax  # pylint: disable=g-import-not-at-top
  from keynorm_jax import run_config  # pylint: disable=g-import-not-at-top
  from keynorm_jax.evaluation.evaluate import held_out_tokens  # pylint: disable=g-import-not-at-top
  from keynorm_jax.runs import load_run  # pylint: disable=g-import-not-at-top
  run = load_run(workdir)
  if run.config.data.get("tokenizer", ""):
    sys.exit(f"error: {workdir} uses a tokenizer ({run.config.data.tokenizer}); this probe writes "
             f"characters as bytes, so it takes byte-level runs only.")
  model = run_config.build_model(run.config)
  apply = jax.jit(lambda tokens: model.apply({"params": run.params}, tokens))
  text = held_out_tokens(run.config)
  return run.step, {name: copy_scores(apply, *prompts(text, alphabet), alphabet)
                    for name, alphabet in ALPHABETS.items()}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--workdir", required=True)
  parser.add_argument("--name", required=True)
  parser.add_argument("--what", required=True)
  parser.add_argument("--command", required=True, help="how the run was trained")
  parser.add_argument("--folder", default=str(FOLDER))
  args = parser.parse_args(argv)
  step, scores = measure(args.workdir)
  from keynorm_jax.study.provenance import commit  # pylint: disable=g-import-not-at-top
  out = pathlib.Path(args.folder) / f"{args.name}.json"
  out.write_text(json.dumps({
      "what": args.what, "train_command": args.command, "step": step,
      "code": (commit() or "unknown")[:7],
      "prompt": {"length": LENGTH, "text_lead": LEAD, "period": PERIOD, "prompts": PROMPTS},
      "alphabets": scores}, indent=1) + "\n")
  print(json.dumps({"step": step, **scores}))
  print(out)


if __name__ == "__main__":
  main()
