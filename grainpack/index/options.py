"""``OptionError``: a bad keyword option, named in its message the way the caller spells it."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

__all__ = ["OptionError"]


class OptionError(ValueError):
    """A bad value of a keyword option, or a problem that an option fixes.

    The message names options as ``{name}`` (the option) and ``{name=}`` (the option and its
    value). ``str()`` spells them as keyword arguments; :meth:`spelled` spells them as a
    command line's flags, so an API caller and a command-line user each read what they type.

    Example:
        >>> err = OptionError("{vocab_size=} needs {dtype=}", vocab_size=70000, dtype="uint32")
        >>> str(err)
        "vocab_size=70000 needs dtype='uint32'"
        >>> err.spelled({"vocab_size": "--vocab-size", "dtype": "--dtype"})
        '--vocab-size 70000 needs --dtype uint32'
    """

    def __init__(self, template: str, **options: Any) -> None:
        self.template, self.options = template, options
        super().__init__(self.spelled({}))

    def spelled(self, flags: Mapping[str, str]) -> str:
        """The message with the options in ``flags`` (name -> flag) spelled as those flags
        (a ``True`` value as the flag alone), the others as keyword arguments."""
        text = self.template
        for name, value in self.options.items():
            flag = flags.get(name)
            if flag is None:
                named, given = name, f"{name}={value!r}"
            else:
                named = flag
                given = flag if value is True else f"{flag} {shlex.quote(str(value))}"
            text = text.replace(f"{{{name}=}}", given).replace(f"{{{name}}}", named)
        return text
