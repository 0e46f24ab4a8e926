"""The evaluator: restores a run's parameters, scores windows at any length under any inference-time
method, records diagnostics, and writes tables and plots (eval.py runs command.py)."""
