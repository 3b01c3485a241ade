"""The program's clock: the time this run of the program read first (`now()`), read once, so
every value derived from it is the same throughout the run. What the program derives from it is
coarse (the renewal period a credential is checked in, `period_start`), so a second `up` soon
after derives the same inputs and changes nothing. Tests and tools fix it (`frozen`) and can
play the program at any date."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

# Periods are counted from this instant (a Monday, 00:00 UTC): the same on every machine.
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)

_taken: list[datetime] = []
_fixed: list[datetime] = []


def now() -> datetime:
    """The program's time: a frozen one, else the wall clock as first read by this process."""
    if _fixed:
        return _fixed[-1]
    if not _taken:
        _taken.append(datetime.now(UTC))
    return _taken[0]


@contextlib.contextmanager
def frozen(at: datetime) -> Iterator[None]:
    """Within: `now()` is `at` (an aware datetime)."""
    if at.tzinfo is None:
        raise ValueError(f"{at!r}: the program's clock takes an aware datetime (UTC)")
    _fixed.append(at)
    try:
        yield
    finally:
        _fixed.pop()


def period_start(days: int, at: datetime | None = None) -> str:
    """The first day (YYYY-MM-DD) of the `days`-long period, counted from EPOCH, that holds `at`
    (default `now()`): it changes once every `days` days."""
    elapsed = (at or now()) - EPOCH
    return (EPOCH + timedelta(days=days * (elapsed.days // days))).date().isoformat()
