"""What the runner hands a probe: the records of the probes it builds on.

A probe names the probes whose data it reads in ``ProbeSpec.needs`` (and those it uses when
they are there in ``ProbeSpec.after``); the runner runs those first and hands the probe
their records, by probe name, as ``Inputs``. The data flows through the registry, not
through imports between probes or a per-scan cache: a probe reads its inputs, and its
judging part is a function of records alone, testable without a host.

The daemon's scheduler hands them the same way, from the latest results it holds. A probe
run without them (on its own, or where a probe it builds on was not chosen or, for an
``after`` probe, did not end ok) gets ``NO_INPUTS`` (or an ``Inputs`` without that record) and computes what
it needs itself, from probes/helpers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, TypeVar

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Inputs:
    """The frozen records of a probe's needs (and of its ``after`` probes that ended ok),
    by probe name; a probe that did not run, or did not end ok, is absent."""

    records: Mapping[str, Any] = field(default_factory=dict)

    def get(self, name: str, kind: type[R]) -> R | None:
        """The record of probe ``name`` when it ran ok and is a ``kind``, else None (a
        recording of another shape is treated as absent, so the probe reads for itself)."""
        record = self.records.get(name)
        return record if isinstance(record, kind) else None

    def __contains__(self, name: object) -> bool:
        return name in self.records

    def adding(self, name: str, record: object) -> "Inputs":
        """These inputs and ``record`` as probe ``name``'s: what a probe run without that
        record computed once at its start, so that every read after it takes the same one."""
        return Inputs({**self.records, name: record})


NO_INPUTS = Inputs()
