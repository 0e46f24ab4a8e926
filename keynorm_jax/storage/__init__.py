"""What a run keeps on disk, safe against faults: Orbax checkpoints with checksums, an asynchronous
writer, the workdir lock and the disk checks."""
