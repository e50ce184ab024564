"""Run-to-run spread of a repeated measurement: the noise floor a comparison holds it to."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from doctor.values import finite_float


def spread(values: Sequence[float]) -> float | None:
    """(max - min) / median of the repeats, a fraction; None with fewer than two repeats (one
    run has no spread, which is not a spread of zero) or a median that is not positive.

    The range, not the standard deviation: with 2-10 repeats it is what was seen, and a
    change smaller than it is inside what the same host gives twice running.
    """
    if len(values) < 2:
        return None
    middle = statistics.median(values)
    if not middle > 0:
        return None
    return round((max(values) - min(values)) / middle, 4)


def read_spread(value: object) -> float | None:
    """A spread as a kernel's result (or a recording of one) holds it: a finite fraction of
    zero or more, else None. Recordings from before the kernels reported one have none."""
    number = finite_float(value)
    return number if number is not None and number >= 0 else None
