"""What a mutant is, and the seeded sampling shared by the Python and bash mutators."""

from __future__ import annotations

import difflib
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    path: str  # relative to the work tree, e.g. "components/aws/network.py"
    line: int  # 1-based line of the change
    operator: str  # e.g. "core/ReplaceAndWithOr" or "bash/fatal-to-log"
    site: tuple[int, int]  # where in the file; mutants of one site are alternatives
    apply: Callable[[str], str | None]  # original text -> mutated text (None: not applicable)

    @property
    def key(self) -> str:
        return f"{self.path}:{self.line} {self.operator}"

    def diff(self, original: str) -> str:
        mutated = self.apply(original) or original
        lines = difflib.unified_diff(
            original.splitlines(),
            mutated.splitlines(),
            fromfile=f"a/{self.path}",
            tofile=f"b/{self.path}",
            lineterm="",
            n=0,
        )
        return "\n".join(line for line in lines if not line.startswith(("---", "+++", "@@")))


def sample(
    candidates: Iterable[Mutant],
    count: int,
    seed: int,
    valid: Callable[[Mutant], bool] = lambda _: True,
) -> list[Mutant]:
    """`count` mutants at distinct sites, chosen with random.Random(seed): sites first (so an
    operator with many variants per site, such as a binary operator, does not crowd out the
    rest), then one variant per site. Mutants `valid` refuses (bash that does not parse) are
    skipped and replaced by the next site. The same candidates and seed give the same sample."""
    by_site: dict[tuple[str, tuple[int, int]], list[Mutant]] = {}
    for mutant in candidates:
        by_site.setdefault((mutant.path, mutant.site), []).append(mutant)
    rng = random.Random(seed)
    sites = sorted(by_site)
    rng.shuffle(sites)
    chosen: list[Mutant] = []
    for site in sites:
        if len(chosen) == count:
            break
        variants = by_site[site]
        for mutant in rng.sample(variants, len(variants)):
            if valid(mutant):
                chosen.append(mutant)
                break
    return sorted(chosen, key=lambda m: (m.path, m.line, m.operator))
