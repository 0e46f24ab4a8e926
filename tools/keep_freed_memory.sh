#!/bin/sh
# Runs a command with glibc's malloc set to keep the memory XLA's CPU runtime frees, for its next
# call: tools/keep_freed_memory.sh python train.py --config=kna_rope
#
# XLA's CPU runtime allocates each call's temporaries as one block (0.45 GiB for the `cpu` size's
# training step) and frees it when the call ends; glibc serves a block that large from a fresh mmap
# and unmaps it on free, so every step faults in and zeroes it again: about a fifth of a `cpu`
# training step on the project's 2-core CPU (benchmarks/PROFILE_NOTES.md, rounds 4 and 5). One
# arena, no mmap and a 2 GiB trim threshold keep the block on the heap for the next step. The price
# is memory: a `cpu` GAU training process held 2.2-2.6 GiB resident with it, 1.31 GiB without.
# Not for long evaluation, whose bound is its peak memory; not measured on accelerator hosts.
# Settings already in GLIBC_TUNABLES are kept after these (glibc takes the last of each).
KEEP="glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=2147483647"
GLIBC_TUNABLES="$KEEP${GLIBC_TUNABLES:+:$GLIBC_TUNABLES}" exec "$@"
