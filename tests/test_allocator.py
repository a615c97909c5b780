"""gaescale asks torch for huge pages when it is imported first, and leaves a user's choice alone."""
import os
import subprocess
import sys

import pytest

SHOW = "import os; print(os.environ.get('THP_MEM_ALLOC_ENABLE'))"


def _imported(prelude: str, env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    if env_value is not None:
        env["THP_MEM_ALLOC_ENABLE"] = env_value
    code = f"{prelude}; import gaescale; {SHOW}"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.parametrize(("prelude", "env_value", "expected"), [
    ("pass", None, "1"),  # gaescale first: asked for
    ("pass", "0", "0"),  # the user's choice kept
    ("import torch", None, "None"),  # torch first: too late, so not pretended
])
def test_huge_pages_are_asked_for_only_before_torch_and_never_over_the_user(prelude, env_value, expected):
    assert _imported(prelude, env_value) == expected
