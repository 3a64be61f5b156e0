"""Every option is honoured or refused: what a backend does not support is refused before anything starts."""

from __future__ import annotations

from collections import Counter

import pytest
from helpers import BackendUnderTest

from nbtrain.errors import SpecError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


def test_unsupported_options_are_refused_naming_the_option_and_the_backend(under_test: BackendUnderTest) -> None:
    assert under_test.refused, f"declare what {under_test.name} refuses in its BackendUnderTest"
    runs = under_test.store.root / "runs"
    problems: list[str] = []
    for option, value in under_test.refused.items():
        flag = "--" + option.replace("_", "-")
        before = Counter(under_test.footprint())
        dirs_before = set(runs.iterdir()) if runs.is_dir() else set()
        try:
            run = under_test.submit("6 * 7\n", name="refused", **{option: value})
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
