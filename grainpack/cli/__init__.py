"""The ``grainpack`` command: build, merge, inspect, verify, show-step, bench, demo."""

from grainpack.cli.main import main

__all__ = ["main"]
