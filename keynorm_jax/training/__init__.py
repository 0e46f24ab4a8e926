"""Training: the loop (loop.train_and_evaluate), the optimizer, the device mesh and FSDP, metrics,
and which config changes a resumed run accepts."""
