"""What a learner is told about a hidden case must not leak (issue 42): the seed both hidden-message tests use, and
the check that a message holds none of a case's numbers (tests/units/test_hidden_messages.py in-process,
tests/judged/test_hidden_messages_judged.py through the judge and runner)."""
from __future__ import annotations

import re

SEED = 4242


def _absent(message: str, *numbers) -> None:
    """None of ``numbers`` appears in ``message`` as a number of its own (fp16's 16 is not the number 16), nor a
    tolerance (some are scaled by the case's sizes or values)."""
    assert not re.search(r"atol=\d", message), message
    for n in numbers:
        assert not re.search(rf"(?<![\w.]){re.escape(str(n))}(?![\w])", message), (n, message)
