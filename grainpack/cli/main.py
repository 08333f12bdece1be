"""The ``grainpack`` command: build, merge, inspect, verify, show-step, bench and demo.

Exit codes: 0 success, 1 the data or the request is bad (the message says what and how to
fix it), 2 the command line is malformed.
"""

from __future__ import annotations

import difflib
import os
import sys
import warnings
from collections.abc import Sequence

from grainpack.cli import commands
from grainpack.cli.parser import command_parser, flags, parser
from grainpack.index.options import OptionError

COMMANDS = {
    "build": commands.build,
    "merge": commands.merge,
    "inspect": commands.inspect,
    "verify": commands.verify,
    "show-step": commands.show_step,
    "bench": commands.bench,
    "demo": commands.demo,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``grainpack`` console script; returns the exit code."""
    top = parser()
    first = next(iter(sys.argv[1:] if argv is None else argv), "")
    if first.startswith("-") and not any(
        o.startswith(first) for o in ("-h", "--help", "--version")
    ):
        top.error(f"unrecognized arguments: {first} (options follow the command)")
    args, unknown = top.parse_known_args(argv)
    if unknown:  # the command's own usage, and the option meant
        command = command_parser(top, args.command)
        known = [f for a in command._actions for f in a.option_strings if f.startswith("--")]
        typo = next((u.split("=")[0] for u in unknown if u.startswith("--")), "")
        close = difflib.get_close_matches(typo, known, n=1) if typo else []
        hint = f" (did you mean {close[0]}?)" if close else ""
        command.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    formatwarning = warnings.formatwarning  # warnings as messages, not source lines
    warnings.formatwarning = lambda message, *_, **__: (
        f"grainpack {args.command}: warning: {message}\n"
    )
    try:
        COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print(f"\ngrainpack {args.command}: interrupted{commands.kept(args)}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader (| head) stopped reading: no traceback, no message
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (ValueError, OSError) as error:  # the library's user errors; a bug stays a traceback
        if isinstance(error, OptionError):  # options named as this command's flags
            message = error.spelled(flags(top, args.command))
        else:
            message = str(error)
        print(f"grainpack {args.command}: error: {message}", file=sys.stderr)
        return 1
    finally:
        warnings.formatwarning = formatwarning
    return 0


if __name__ == "__main__":
    sys.exit(main())
