"""Shared by the scripts here (each runs under mpiexec with this directory on sys.path)."""
import sys


def say(line):
    """Print one line in one write: the launcher forwards each rank's output as it comes,
    and print's separate write of the newline could let another rank's line in between."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
