"""Every option is honoured or refused: what a backend does not support is refused before anything starts."""

from __future__ import annotations

from collections import Counter

import pytest
from helpers import BackendUnderTest

from nbtrain.errors import SpecError
from nbtrain.flags import OPTIONS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


def test_unsupported_options_are_refused_naming_the_option_and_the_backend(under_test: BackendUnderTest) -> None:
    """Every option the options table says this backend does not honour, each with a non-default value."""
    refused = under_test.refused
    assert refused, f"the options table names no option that {under_test.name} does not honour"
    flags = {option.field: option.flag for option in OPTIONS if option.field}
    runs = under_test.store.root / "runs"
    problems: list[str] = []
    for option, overrides in refused.items():
        flag, value = flags[option], overrides[option]
        before = Counter(under_test.footprint())
        dirs_before = set(runs.iterdir()) if runs.is_dir() else set()
        try:
            run = under_test.submit("6 * 7\n", name="refused", **overrides)
        except SpecError as error:
            if flag not in str(error) or under_test.name not in str(error):
                problems.append(f"{flag} {value!r}: the SpecError does not name {flag} and {under_test.name}: {error}")
        else:
            run.cancel()
            problems.append(f"{flag} {value!r}: accepted and started run {run.id}")
            continue
        left = (set(runs.iterdir()) if runs.is_dir() else set()) - dirs_before
        if left:
            problems.append(f"{flag} {value!r}: the refusal left {sorted(p.name for p in left)} in the store")
        started = Counter(under_test.footprint()) - before
        if started:
            problems.append(f"{flag} {value!r}: the refusal still did {sorted(started)}")
    assert not problems, f"{under_test.name} must refuse before anything starts:\n" + "\n".join(problems)
