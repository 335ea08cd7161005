"""How `make test` spreads the suite over its workers (tests/conftest.py)."""

import pytest

from tests.conftest import work_unit


def test_make_test_hands_each_worker_whole_units(request):
    """Under `make test` (pytest-xdist, ``--dist loadgroup``) every test is sent with its work unit's group,
    so that a file's module fixtures are built by one worker. A pytest that drops the group (pytest 9.2
    with pytest-xdist 3.8 did) fails here rather than making the suite silently slower."""
    if not getattr(request.config.option, "loadgroup", False):  # (set in the workers by pytest-xdist)
        pytest.skip("checks `make test`'s distribution: run under pytest -n N --dist loadgroup")
    assert request.node.nodeid.endswith("@" + work_unit(request.node))
