"""Fault injection on tiny runs: each fault a real cluster causes, the message it must give, and
that nothing is lost (checkpoints intact, losses identical to an uninterrupted run).

Tests run as root here and in CI, and chmod does not stop root: read-only folders are injected
by making the writability probe raise the error a read-only mount gives (EROFS), or by a path
under a regular file (which no user can create), never by chmod.
"""
