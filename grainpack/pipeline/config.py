"""``PipelineConfig``: everything that decides which tokens a slot yields, validated once."""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from grainpack.corpus.native import MAX_TOKEN_ID
from grainpack.curriculum.protocols import BindsToSource, describe_selector
from grainpack.curriculum.selectors import PerSource
from grainpack.index.blocked import BlockedOrder
from grainpack.index.checks import check_bool, check_float, check_int, check_seed
from grainpack.index.exact import ExactOrder
from grainpack.index.orders import SequenceSelector
from grainpack.index.schedule import MixtureSchedule, Stage, WeightSchedule, probabilities_at
from grainpack.index.weights import content_probabilities

Unit = Literal["documents", "windows"]
Layout = Literal["full", "compact"]
Packing = Literal["concat", "best_fit"]

# Every process plans each row of a global batch (int64 arrays of global_batch_size a step):
# 2^24 rows (128 MiB an array) is far past any real batch; 2**62 failed in next() with
# numpy's "array is too big", 2**40 with a MemoryError.
MAX_GLOBAL_BATCH_SIZE = 1 << 24


# names other loaders use for PipelineConfig's fields
_ALIASES = {
    "batch_size": "global_batch_size",
    "seq_len": "block",
    "seq_length": "block",
    "sequence_length": "block",
    "max_seq_len": "block",
    "context_length": "block",
    "probabilities": "weights",
    "eos_id": "boundary_id",
}


def _meant(name: str, known: list[str]) -> str | None:
    """The field that ``name`` (not a field) most likely meant, if any."""
    return _ALIASES.get(name) or next(iter(difflib.get_close_matches(name, known, 1)), None)


def _suggest(name: str, known: list[str]) -> str:
    """``name`` (not a field) with the field it most likely meant."""
    guess = _meant(name, known)
    return repr(name) if guess is None else f"{name!r} (did you mean {guess!r}?)"


def _no_json(field: str, value: Any) -> None:
    raise ValueError(
        f"{field}={value!r} is a Python object, which has no JSON form: to_dict cannot write "
        f"it. Write the config without it, e.g. dataclasses.replace(config, {field}=None)"
        ".to_dict(), and set it in code"
    )


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """A grainpack pipeline: sources, row shape, batch size, seed and mixture.

    Attributes:
      sources: name -> corpus path; the mapping order is the source order (source ``j`` is
        seeded ``seed + j``). One entry means no mixing.
      block: model sequence length; every row holds ``block + 1`` tokens.
      global_batch_size: rows per global batch (all processes together).
      seed: non-negative int below 2**64.
      weights: name -> probability of a slot choosing that source (token share); equal
        when omitted. Same names as ``sources``; must sum to 1. Or a schedule by global
        step: a list of stages ``(start_step, {name: weight})`` or
        ``gp.Stage(start_step, {name: weight}, ramp=steps)``, starting at step 0 with
        increasing starts; each stage's weights hold until the next stage, and with a ramp
        they move linearly from the previous stage's over ``ramp`` steps (a weight may be 0
        in some stages). Or an online schedule, :class:`~grainpack.curriculum.MixtureBandit`.
        See "Schedules" in docs/concepts/mixing.md.
      premiums: content mode instead of ``weights``: name -> tokens that source needs per
        unit of content; probabilities are then ``premium / sum(premiums)`` (see
        :func:`grainpack.mixing.content_probabilities`). Also a list of stages of premiums (a ramp
        then moves the probabilities).
      unit: ``"documents"`` (shuffled documents, concatenated and chunked, as
        ``pack_documents``) or ``"windows"`` (permuted fixed windows of the stored token
        stream, as ``PackedStream``).
      boundary_id: documents unit: token inserted between consecutive documents.
      pad_id: token of padding positions (the last row of a documents epoch).
      sequence_selector: documents unit: curriculum hook ``(order, seed, epoch) -> order``.
        Must be picklable (a module-level function or a small object) and have a stable
        ``repr`` (it is part of the config fingerprint). A selector with a
        ``bind(name, source)`` method is bound to each source before use (the ready-made
        ones in :mod:`grainpack.curriculum` read document lengths that way).
      provenance: also emit, per row, ``source`` and ``epoch``, and per segment of the row's
        ``block + 1`` tokens (index ``segment_id - 1``) ``segment_document`` and
        ``segment_offset`` (the document id and the offset of the segment's first token in
        it; -1 past the row's last segment). A segment made of the row's last token only (a
        target, after a boundary token) has an entry but no position in ``segment_ids``.
        Does not change any token (not part of the fingerprint).
      order: ``"exact"`` (the specification's orders, bit for bit: ``O(N)`` memory per
        source and process; stored as :class:`~grainpack.index.exact.ExactOrder`) or a
        :class:`~grainpack.BlockedOrder` (blocks of documents permuted by a keyed bijection,
        documents permuted inside windows of blocks: ``O(N / C + K * C)``). See
        docs/concepts/orders.md and docs/scale.md.
      layout: ``"full"``: batches hold the five int32 model arrays. ``"compact"``: batches
        hold the rows in the corpus dtype plus a few bytes per row (``tokens``,
        ``segment_starts``, ``filled``), expanded on the accelerator by
        :func:`grainpack.expand` into exactly the full layout's arrays. Does not change
        any token (not part of the fingerprint: a checkpoint restores in either layout).
      packing: ``"concat"`` (the default, the specifications' rule: documents laid end to
        end and cut every ``block + 1`` tokens) or ``"best_fit"`` (documents unit: each
        window of the order, or each epoch of the exact order, packed by best-fit decreasing;
        no document that fits a row is cut, see :mod:`grainpack.index.bestfit` and
        docs/concepts/packing.md). Part of the fingerprint when not the default.
      max_segments: ``packing="best_fit"`` only: at most this many documents per row
        (``None``: no limit). Part of the fingerprint when set.

    Example:
      >>> cfg = PipelineConfig(sources={"en": "/data/en", "fr": "/data/fr"}, block=2048,
      ...                      global_batch_size=256, weights={"en": 0.7, "fr": 0.3})
      >>> cfg.probabilities
      (0.7, 0.3)
    """

    sources: Mapping[str, str | os.PathLike[str]]
    block: int
    global_batch_size: int
    _: dataclasses.KW_ONLY  # the options
    seed: int = 0
    weights: Mapping[str, float] | Sequence[Stage] | WeightSchedule | None = None
    premiums: Mapping[str, float] | Sequence[Stage] | None = None
    unit: Unit = "documents"
    boundary_id: int | None = None
    pad_id: int = 0
    sequence_selector: SequenceSelector | None = None
    provenance: bool = False
    order: Literal["exact"] | ExactOrder | BlockedOrder = "exact"
    layout: Layout = "full"
    packing: Packing = "concat"
    max_segments: int | None = None

    def __new__(cls, *args: Any, **fields: Any) -> PipelineConfig:
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(fields) - set(known))  # __init__'s own error names no field
        if unknown:
            raise TypeError(
                f"PipelineConfig has no field {', '.join(_suggest(n, known) for n in unknown)}; "
                f"its fields are {', '.join(known)}"
            )
        return super().__new__(cls)

    def __post_init__(self) -> None:
        if not isinstance(self.sources, Mapping):
            raise TypeError(
                f"sources must be a non-empty mapping name -> corpus path; got {self.sources!r}"
            )
        if not self.sources:
            raise ValueError("sources must be a non-empty mapping name -> corpus path; got {}")
        object.__setattr__(self, "provenance", check_bool("provenance", self.provenance))
        for name, path in self.sources.items():
            if not isinstance(name, str) or not isinstance(path, str | os.PathLike):
                raise TypeError(f"sources must map str -> path; got {name!r}: {path!r}")
        object.__setattr__(self, "sources", {k: os.fspath(v) for k, v in self.sources.items()})
        # numpy integers are accepted and stored as ints (the fingerprint is JSON of them)
        for name, minimum in (("block", 1), ("global_batch_size", 1)):
            object.__setattr__(self, name, check_int(name, getattr(self, name), minimum))
        if self.global_batch_size > MAX_GLOBAL_BATCH_SIZE:
            raise ValueError(
                f"global_batch_size must be at most 2**24 = {MAX_GLOBAL_BATCH_SIZE:,} rows "
                "(every process plans each row of a global batch, 8 bytes and more a row), "
                f"got global_batch_size={self.global_batch_size:,}; it counts rows (sequences "
                "of block + 1 tokens) of all processes together, not tokens"
            )
        object.__setattr__(self, "seed", check_seed("seed", self.seed))
        for token in ("pad_id", "boundary_id"):
            value = getattr(self, token)
            if value is None and token == "boundary_id":  # none: documents follow directly
                continue
            object.__setattr__(self, token, check_int(token, value, minimum=0))
            if value > MAX_TOKEN_ID:
                raise ValueError(
                    f"{token} must be < 2**31 (batches hold int32 token ids); got {token}={value}"
                )
        if self.layout not in ("full", "compact"):
            raise ValueError(
                f"layout must be 'full' (five int32 arrays) or 'compact' (tokens expanded on "
                f"the accelerator by grainpack.expand); got {self.layout!r}"
            )
        if self.unit not in ("documents", "windows"):
            raise ValueError(f"unit must be 'documents' or 'windows'; got {self.unit!r}")
        self._check_packing()
        if self.order == "exact":
            object.__setattr__(self, "order", ExactOrder())
        if not isinstance(self.order, ExactOrder | BlockedOrder):
            raise (ValueError if isinstance(self.order, str) else TypeError)(
                f"order must be 'exact' or a gp.BlockedOrder(block_docs=..., window_blocks=...); "
                f"got {self.order!r}"
            )
        if self.unit == "windows" and (
            self.boundary_id is not None or self.sequence_selector is not None
        ):
            raise ValueError(
                "boundary_id and sequence_selector apply to unit='documents' only: windows "
                "are cut from the stored token stream; drop them or use unit='documents'"
            )
        selector = self.sequence_selector
        if selector is not None and not (callable(selector) or isinstance(selector, BindsToSource)):
            raise TypeError(
                "sequence_selector must be callable (order, seed, epoch) -> order or bind to "
                f"sources (gp.curriculum.PerSource); got {selector!r}"
            )
        described = describe_selector(selector) if selector is not None else ""
        if re.search(r" at 0x[0-9a-fA-F]+", described):
            raise TypeError(
                f"sequence_selector's repr {described!r} holds a memory "
                "address, which differs in every process: the config fingerprint would change "
                "and no checkpoint would restore. Give the selector's class a __repr__ naming "
                "its parameters (a dataclass has one), or pass a module-level function (a "
                "functools.partial names its function's address: use a dataclass instead; a "
                "closure's or a bound method's values are part of the text too)"
            )
        if isinstance(selector, PerSource):  # its keys are source names
            selector.check_sources(list(self.sources))
        if self.weights is not None and self.premiums is not None:
            raise ValueError("give either weights (token mode) or premiums (content mode)")
        for field in ("weights", "premiums"):
            value = getattr(self, field)
            if isinstance(value, Mapping):
                object.__setattr__(self, field, self._per_source(field, value))
            elif field == "weights" and isinstance(value, WeightSchedule):
                self._check_online(value)
            elif value is not None:
                object.__setattr__(self, field, self._stages(field, value))
        object.__setattr__(self, "_schedule", self._compute_schedule())
        object.__setattr__(self, "_validated", self._mappings())

    def _check_packing(self) -> None:
        if self.packing not in ("concat", "best_fit"):
            raise ValueError(
                "packing must be 'concat' (documents end to end, cut every block + 1 tokens) "
                f"or 'best_fit' (whole documents packed into rows); got {self.packing!r}"
            )
        if self.packing == "best_fit" and self.unit != "documents":
            raise ValueError(
                f"packing='best_fit' packs documents, but unit={self.unit!r} cuts fixed "
                "windows of the stored token stream, which hold no whole documents; use "
                "unit='documents' with best_fit, or packing='concat' with windows"
            )
        if self.max_segments is not None:
            if self.packing != "best_fit":
                raise ValueError(
                    f"max_segments={self.max_segments!r} applies to packing='best_fit' only "
                    f"(packing={self.packing!r} lays documents end to end); drop it or set "
                    "packing='best_fit'"
                )
            object.__setattr__(
                self, "max_segments", check_int("max_segments", self.max_segments, minimum=1)
            )

    def _mappings(self) -> str:
        """The mappings as validated (a schedule object is checked, not its state)."""
        weights = None if isinstance(self.weights, WeightSchedule) else self.weights
        return repr((self.sources, weights, self.premiums))

    def check_unchanged(self) -> None:
        """Raises ``ValueError`` if ``sources``, ``weights`` or ``premiums`` were changed in
        place since the config was built (and validated); every pipeline checks it."""
        if self._mappings() != self._validated:
            raise ValueError(
                "this PipelineConfig's sources, weights or premiums were changed in place after "
                "it was built, so they were never checked; build a new config instead, e.g. "
                "dataclasses.replace(config, weights={...})"
            )

    def _per_source(self, field: str, value: Any, *, zero: bool = False) -> dict[str, float]:
        if not isinstance(value, Mapping):
            raise TypeError(f"{field} must be a mapping name -> number; got {value!r}")
        if set(value) != set(self.sources):
            raise ValueError(
                f"{field} must name exactly the sources {list(self.sources)}; got {list(value)}"
            )
        return {
            name: check_float(
                f"{name!r} in {field}" if " stage " in field else f"{field}[{name!r}]",
                value[name],
                0.0,
                math.inf,
                closed_low=zero,
                fix="a weight may be 0 in some stages" if zero else "drop a source instead",
            )
            for name in self.sources
        }

    def _stages(self, field: str, value: Any) -> tuple[Stage, ...]:
        """A schedule of stages, validated: each stage's mapping names exactly the sources."""
        plain_list = isinstance(value, Sequence) and all(
            isinstance(x, int | float) for x in value
        )  # numbers in source order: the mapping form was meant
        if isinstance(value, str | bytes) or not isinstance(value, Sequence) or plain_list:
            raise TypeError(
                f"{field} must be a mapping name -> number, or a schedule: a non-empty list of "
                f"stages (start_step, {{name: {field[:-1]}}}) or gp.Stage(start_step, "
                f"{{...}}, ramp=steps); got {value!r}"
            )
        stages = []
        for k, stage in enumerate(value):
            if isinstance(stage, str | bytes) or not isinstance(stage, Sequence):
                raise TypeError(
                    f"{field} stage {k} must be (start_step, {{name: {field[:-1]}}}[, ramp]); "
                    f"got {stage!r}"
                )
            if len(stage) not in (2, 3):
                raise ValueError(
                    f"{field} stage {k} must be (start_step, {{name: {field[:-1]}}}[, ramp]); "
                    f"got {len(stage)} items: {stage!r}"
                )
            mapping = self._per_source(f"{field} stage {k}", stage[1], zero=field == "weights")
            stages.append(Stage(stage[0], mapping, *stage[2:]))
        if field == "weights":
            never = [k for k in self.sources if all(s.weights[k] == 0.0 for s in stages)]
            if never:
                raise ValueError(
                    f"sources {never} have weight 0 in every stage of weights; drop them"
                )
        return tuple(stages)

    def _check_online(self, schedule: Any) -> None:
        names = getattr(schedule, "sources", None)
        if names is None or list(names) != list(self.sources):
            raise ValueError(
                f"a schedule object as weights must name the sources {list(self.sources)} in "
                f"this order (gp.curriculum.MixtureBandit(list(sources), ...)); "
                f"got {schedule!r}. Give "
                "fixed stages as a list of (start_step, {name: weight})"
            )

    def _compute_schedule(self) -> WeightSchedule:
        n = len(self.sources)
        if isinstance(self.weights, WeightSchedule):
            return self.weights
        if isinstance(self.premiums, Mapping):
            return MixtureSchedule(
                [(0, content_probabilities([self.premiums[k] for k in self.sources]))]
            )
        if self.premiums is not None:
            stages = [
                Stage(s.start, content_probabilities([s.weights[k] for k in self.sources]), s.ramp)
                for s in self.premiums
            ]
            return _schedule("premiums", stages)
        if self.weights is None:
            return MixtureSchedule([(0, tuple([1.0 / n] * n))])
        if isinstance(self.weights, Mapping):
            return MixtureSchedule([(0, self._sum_to_one("weights", self.weights))])
        stages = [
            Stage(s.start, self._sum_to_one(f"weights stage {k}", s.weights), s.ramp)
            for k, s in enumerate(self.weights)
        ]
        return _schedule("weights", stages)

    def _sum_to_one(self, field: str, weights: Mapping[str, float]) -> tuple[float, ...]:
        probs = tuple(weights[k] for k in self.sources)
        if abs(sum(probs) - 1.0) > 1e-6:
            raise ValueError(
                f"{field} must sum to 1 (within 1e-6); got {dict(weights)} summing to "
                f"{sum(probs)!r}: divide each weight by their sum"
            )
        return probs

    @property
    def schedule(self) -> WeightSchedule:
        """The mixture weights by global step: a
        :class:`~grainpack.index.schedule.MixtureSchedule` (one stage for fixed weights), or
        the online schedule given as ``weights``. Refused if the weights were changed in place
        (:meth:`check_unchanged`): the schedule is the one built from the checked weights."""
        self.check_unchanged()
        return self._schedule  # type: ignore[attr-defined]

    @property
    def constant_probabilities(self) -> tuple[float, ...] | None:
        """The probabilities if they never change with the step, else ``None``."""
        schedule = self.schedule
        return schedule.constant if isinstance(schedule, MixtureSchedule) else None

    @property
    def probabilities(self) -> tuple[float, ...]:
        """Probability of a slot choosing each source, in source order (with a schedule:
        those of step 0; see :meth:`probabilities_at`)."""
        return self.constant_probabilities or self.probabilities_at(0)

    def probabilities_at(self, step: int) -> tuple[float, ...]:
        """Probability of a slot of global step ``step`` choosing each source, in source order.

        Example:
          >>> cfg = PipelineConfig(sources={"en": "/data/en", "fr": "/data/fr"}, block=8,
          ...                      global_batch_size=4,
          ...                      weights=[(0, {"en": 0.75, "fr": 0.25}),
          ...                               Stage(100, {"en": 0.25, "fr": 0.75}, ramp=10)])
          >>> cfg.probabilities_at(99), cfg.probabilities_at(105), cfg.probabilities_at(110)
          ((0.75, 0.25), (0.5, 0.5), (0.25, 0.75))
        """
        step = check_int("step", step)
        return probabilities_at(self.schedule.segments(step, step + 1)[0], step)

    def to_dict(self) -> dict[str, Any]:
        """Every field as JSON-able data: the inverse of :meth:`from_dict`.

        Paths are strings, schedules are lists ``[start, {name: weight}, ramp]`` and a blocked
        order is ``{"kind": "blocked", "block_docs": C, "window_blocks": K}``. Python objects
        have no JSON form, so a ``sequence_selector`` or an online schedule as ``weights``
        (:class:`~grainpack.curriculum.MixtureBandit`) cannot round-trip and are refused.

        Raises:
          ValueError: the config holds a ``sequence_selector`` or an online schedule.

        Example:
          >>> cfg = PipelineConfig(sources={"en": "/data/en"}, block=8, global_batch_size=4)
          >>> cfg.to_dict()["sources"], cfg.to_dict()["order"]
          ({'en': '/data/en'}, 'exact')
          >>> PipelineConfig.from_dict(cfg.to_dict()) == cfg
          True
        """
        if self.sequence_selector is not None:
            _no_json("sequence_selector", self.sequence_selector)
        if isinstance(self.weights, WeightSchedule):  # online: a bandit
            _no_json("weights", self.weights)
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for field in ("weights", "premiums"):
            if isinstance(fields[field], tuple):  # stages
                fields[field] = [[s.start, dict(s.weights), s.ramp] for s in fields[field]]
            elif fields[field] is not None:
                fields[field] = dict(fields[field])
        fields["sources"] = dict(self.sources)
        fields["order"] = self.order.description()
        return fields

    @classmethod
    def from_dict(cls, fields: Mapping[str, Any]) -> PipelineConfig:
        """A config from its fields as JSON-able data (e.g. a ``run.json``): the inverse of
        :meth:`to_dict`.

        Accepts what ``to_dict`` writes, and the same data with defaults left out, schedule
        stages without a ramp (``[start, {name: weight}]``) and a blocked order without its
        ``"kind"`` (``{"block_docs": C, "window_blocks": K}``), so also what
        ``dataclasses.asdict(config)`` writes. Values are validated as by the constructor.

        Raises:
          ValueError: ``fields`` names an unknown field (the error suggests the one meant),
            lacks ``sources``, ``block`` or ``global_batch_size``, or gives an ``order``
            that is neither ``"exact"`` nor a blocked order.
          TypeError: ``fields`` is not a mapping.

        Example:
          >>> cfg = PipelineConfig.from_dict({
          ...     "sources": {"en": "/data/en", "fr": "/data/fr"}, "block": 8,
          ...     "global_batch_size": 4, "weights": [[0, {"en": 0.75, "fr": 0.25}],
          ...                                         [100, {"en": 0.25, "fr": 0.75}, 10]],
          ...     "order": {"block_docs": 64, "window_blocks": 16}})
          >>> cfg.probabilities_at(105), cfg.order
          ((0.5, 0.5), BlockedOrder(block_docs=64, window_blocks=16))
        """
        known = [f.name for f in dataclasses.fields(cls)]
        if not isinstance(fields, Mapping):
            raise TypeError(
                f"expected a JSON object of PipelineConfig fields ({', '.join(sorted(known))}), "
                f"got a {type(fields).__name__}"
            )
        unknown = sorted(set(fields) - set(known))
        if unknown:
            hint = ", ".join(repr(_meant(n, known)) for n in unknown if _meant(n, known))
            raise ValueError(
                f"unknown PipelineConfig fields {unknown}"
                + (f" (did you mean {hint}?)" if hint else "")
                + f"; the fields are {', '.join(sorted(known))}"
            )
        missing = [k for k in ("sources", "block", "global_batch_size") if k not in fields]
        if missing:
            raise ValueError(f"PipelineConfig needs {', '.join(missing)}; none given")
        fields = dict(fields)
        order = fields.get("order")
        if isinstance(order, Mapping):  # as description() or dataclasses.asdict write it
            kind, spec = (
                order.get("kind", "blocked"),
                {k: v for k, v in order.items() if k != "kind"},
            )
            if kind == "exact" and not spec:
                fields["order"] = ExactOrder()
            elif kind == "blocked" and not set(spec) - {"block_docs", "window_blocks"}:
                fields["order"] = BlockedOrder(**spec)
            else:
                raise ValueError(
                    f'"order" must be "exact" or {{"block_docs": C, "window_blocks": K}} '
                    f"(a BlockedOrder); got {order}"
                )
        return cls(**fields)

    def description(self) -> dict[str, Any]:
        """Everything that determines the tokens, as JSON-able data (paths excluded; the
        exact order adds nothing, so fingerprints of saved checkpoints stay valid)."""
        selector = self.sequence_selector
        if selector is not None:
            # A function's name is quoted, an object's repr is not (fingerprints of saved
            # checkpoints depend on this text).
            text = describe_selector(selector)
            selector = repr(text) if hasattr(selector, "__qualname__") else text
        # Fixed weights (and schedules whose weights never change) keep the "probabilities"
        # entry of every checkpoint saved before schedules existed.
        schedule, constant = self.schedule, self.constant_probabilities
        if constant is not None:
            mixture: dict[str, Any] = {"probabilities": list(constant)}
        elif isinstance(schedule, MixtureSchedule):
            mixture = {"schedule": schedule.description()}
        else:  # online: its configuration (its state is checkpointed apart)
            mixture = {"schedule": repr(schedule)}
        return (
            {
                "sources": list(self.sources),
                "block": self.block,
                "global_batch_size": self.global_batch_size,
                "seed": self.seed,
                **mixture,
                "unit": self.unit,
                "boundary_id": self.boundary_id,
                "pad_id": self.pad_id,
                "sequence_selector": selector,
            }
            | self.order.fingerprint()
            | self._packing_description()
        )

    def _packing_description(self) -> dict[str, Any]:
        """Nothing for the default ``concat`` (fingerprints of saved checkpoints stay valid),
        else the packing and its ``max_segments``."""
        if self.packing == "concat":
            return {}
        return {"packing": self.packing, "max_segments": self.max_segments}


def _schedule(field: str, stages: list[Stage]) -> MixtureSchedule:
    try:
        return MixtureSchedule(stages)
    except (TypeError, ValueError) as err:
        raise type(err)(f"{field}: {err}") from None
