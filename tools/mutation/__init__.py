"""Mutation score of the test suite: `python -m tools.mutation --sample 85 --bash-sample 43`.

Python mutants (components/, policies/) come from cosmic-ray's operators (PyPI `cosmic-ray`);
bash mutants (components/hosts/scripts/) from a small line mutator of our own
(`tools.mutation.bash`). A seeded sample of mutants is run, one at a time, in a private copy of
the work tree against the test files that can see the mutated line; a mutant is killed when
those tests fail. The report gives the kill rate per file and every survivor with its diff.
A benchmark, not a CI gate: a full sample takes tens of minutes.

Why: docs/decisions/022-mutation-tests-run-only-the-tests-that-can-see-a-mutant.md
"""
