"""A griffe extension (mkdocs.yml, mkdocstrings ``extensions``): grainpack's docstrings in
the Markdown that mkdocstrings renders.

The docstrings are Google style with reStructuredText roles, as Grain's are, and are run by
``pytest --doctest-modules``. Three spellings differ from what griffe's Google parser reads:

* ``text::`` and a line of ``::`` alone introduce reStructuredText's literal block (the
  indented lines that follow, which Markdown reads as code too): ``text:`` and nothing.

* ``Example:`` (one example, singular) is an examples section: its ``>>>`` lines become a
  code block rather than prose (where ``[[1, 2]]`` would read as a Markdown link).
* A role (``:func:`~grainpack.make_dataset```, ``:meth:`state_dict```, any role) names an
  object as Python would from the docstring's scope. It becomes a link where the API
  reference documents that object (a ``:::`` directive of ``docs/api/``, or one of its
  public members with a docstring), else code; its text is the last name with ``~``, the
  name as written without.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import griffe

API = Path(__file__).parent / "api"
_EXAMPLE = re.compile(r"^(\s*)Example:[ \t]*$", re.M)
UNRESOLVED = (griffe.AliasResolutionError, griffe.NameResolutionError)
_LITERAL = re.compile(r"^([ \t]*)::[ \t]*$|(?<=\S)::$", re.M)
_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj|const):`(~?)([\w.]+)`")


def markdown(docstring: str, target: Callable[[str], str | None] = lambda name: None) -> str:
    """``docstring`` with its examples sections and roles in mkdocstrings' spelling.

    Args:
      docstring: a docstring as written.
      target: the identifier a role's name links to, or ``None`` for code without a link.

    Example:
      >>> print(markdown("See :func:`~grainpack.make_dataset`::\\n\\n  1 + 1\\n\\nExample:\\n  2"))
      See `make_dataset`:
      <BLANKLINE>
        1 + 1
      <BLANKLINE>
      Examples:
        2
    """

    def role(match: re.Match[str]) -> str:
        short, name = match.groups()
        text = f"`{name.rsplit('.', 1)[-1] if short else name}`"
        identifier = target(name)
        return text if identifier is None else f"[{text}][{identifier}]"

    literal = _LITERAL.sub(lambda m: "" if m[1] is not None else ":", docstring)
    return _ROLE.sub(role, _EXAMPLE.sub(r"\1Examples:", literal))


def documented() -> set[str]:
    """The identifiers of the ``:::`` directives of the API reference pages."""
    return {
        line.split()[1]
        for page in API.glob("*.md")
        for line in page.read_text().splitlines()
        if line.startswith("::: ")
    }


def _objects(obj: griffe.Object) -> Iterator[griffe.Object]:
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(member)


class GrainpackDocstrings(griffe.Extension):
    """Rewrites every docstring of the package with :func:`markdown`, once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        pages = documented()

        def linkable(obj: griffe.Object) -> bool:
            # a directive's object (a module's only without members: its docstring, no heading)
            if obj.path in pages:
                return not obj.is_module
            parent = obj.parent
            return (
                parent is not None
                and not obj.name.startswith("_")
                and obj.has_docstrings
                and linkable(parent)
            )

        for obj in _objects(pkg):
            if obj.docstring is None:
                continue

            def target(name: str, scope: griffe.Object = obj) -> str | None:
                try:
                    if name.split(".")[0] == pkg.name:
                        found = pkg[name.partition(".")[2]] if "." in name else pkg
                    else:
                        found = pkg[scope.resolve(name).partition(".")[2]]
                    if found.is_alias:
                        found = found.final_target
                except (KeyError, ValueError, *UNRESOLVED):
                    return None
                return found.path if linkable(found) else None

            obj.docstring.value = markdown(obj.docstring.value, target)
