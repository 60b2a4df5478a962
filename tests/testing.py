"""Shared test helpers."""

import contextlib
import logging
import os

import tensorflow as tf

from tf_mixed_precision_compat import _deprecation
from tf_mixed_precision_compat import _device_check

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO_ROOT, "tests", "fixtures")

INF = float("inf")
NAN = float("nan")


def fixture_path(*parts):
  """Absolute path of a committed fixture under tests/fixtures/."""
  return os.path.join(FIXTURES, *parts)


def per_replica(strategy, values):
  """A distributed value holding `values[i]` on replica i."""
  values = list(values)
  return strategy.experimental_distribute_values_from_function(
      lambda ctx: tf.constant(values[ctx.replica_id_in_sync_group]))


def named_product(**axes):
  """Like `parameterized.product`, but every case gets a readable name.

  Args:
    **axes: Parameter name -> sequence of values (str, bool, int or float).

  Returns:
    A list of dicts for `parameterized.named_parameters`.
  """
  cases = [{}]
  for key, values in axes.items():
    cases = [dict(case, **{key: value}) for case in cases for value in values]
  for case in cases:
    case["testcase_name"] = "_".join(f"{k}_{v}" for k, v in case.items())
  return cases


class _Capture(logging.Handler):

  def __init__(self):
    super().__init__()
    self.messages = []

  def emit(self, record):
    self.messages.append(record.getMessage())


@contextlib.contextmanager
def capture_tf_log():
  """Collects what is logged to TF's logger; once-only warnings log again.

  (TF 2.4's deprecation warnings, and its `mixed_float16` device check.)

  Yields:
    The list the messages are appended to.
  """
  handler = _Capture()
  logger = tf.get_logger()
  logger.addHandler(handler)
  _deprecation.reset_for_testing()
  _device_check.logged = False  # Also logged once per process, as in TF 2.4.
  try:
    yield handler.messages
  finally:
    logger.removeHandler(handler)


def argspec(func):
  """`func`'s parameters as (name, kind, default): a signature without types.

  TF's API goldens compare argspecs; our public API adds type hints, which
  `inspect.signature` equality would count as a difference.
  """
  import inspect  # pylint: disable=g-import-not-at-top
  return [(p.name, p.kind, p.default)
          for p in inspect.signature(func).parameters.values()]
