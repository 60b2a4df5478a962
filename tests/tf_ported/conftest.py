"""Set-up for the ported TF 2.4 unit tests.

Every test here runs with the package installed (the ported tests reach the
classes through `tf.*` as TF 2.4's users did) and leaves the install state
and Keras' global dtype policy as it found them.
"""

import keras
import pytest

import tf_mixed_precision_compat as mp
from tests.tf_ported import harness


@pytest.fixture(autouse=True)
def _installed_for_test():
  was_installed = mp.installed()
  policy = keras.config.dtype_policy()
  if not was_installed:
    mp.install()
  try:
    yield
  finally:
    if not was_installed:
      mp.uninstall()
    keras.config.set_dtype_policy(policy)


@pytest.fixture(name="runner_for")
def _runner_for():
  """`runner_for(mode, strategy_name)` enters the mode and the strategy."""
  stack = []

  def enter(mode, strategy_name):
    context = harness.mode_context("graph" if mode == "graph" else "eager")
    evaluate = context.__enter__()
    stack.append(context)
    strategy = harness.make_strategy(strategy_name)
    scope = strategy.scope()
    scope.__enter__()
    stack.append(scope)
    return harness.Runner(mode, strategy, evaluate)

  yield enter
  while stack:
    stack.pop().__exit__(None, None, None)
