"""The command-line modules' docstring examples run and print what they say.

(Kept here, not in tests/test_docstrings.py, so tests/cli is self-contained.)
"""

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", [
    "cli", "cli._api_table", "cli._ckpt", "cli._files", "cli._plan",
    "cli._rewrite"])
def test_examples_run(name):
  module = importlib.import_module(f"tf_mixed_precision_compat.{name}")
  result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
  assert result.attempted > 0, f"{name} has no runnable example"
  assert result.failed == 0
