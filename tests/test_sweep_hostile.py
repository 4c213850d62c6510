"""tests/sweep_hostile.py, its quick families in make test-slow: what make hands the shell (1), report
folders (2), calibrations (3), a file's counts (4), option bounds and modes (10), markup at every string
of a result (11). The others start runs, stop them and fill disks: `python -m tests.sweep_hostile`."""
from __future__ import annotations

import pytest

from tests import sweep_hostile

QUICK = (1, 2, 3, 4, 10, 11)


@pytest.mark.parametrize("family", QUICK)
def test_every_hostile_case_of_a_quick_family_holds(family, capsys):
    assert sweep_hostile.main(["--family", str(family)]) == 0, capsys.readouterr().out[-4000:]


def test_the_sweep_has_its_three_hundred_cases():
    assert len(sweep_hostile.CASES) >= 300 and {f for f, _, _ in sweep_hostile.CASES} == set(range(1, 12))
