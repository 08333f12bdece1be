"""The ``grainpack`` command: build, inspect, verify, show-step, bench, demo."""

from grainpack.cli.main import main

__all__ = ["main"]
