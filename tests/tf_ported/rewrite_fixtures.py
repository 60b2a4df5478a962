"""The set-up and tear-down TF 2.4's graph-rewrite tests shared."""

import os

import pytest

from tf_mixed_precision_compat import graph_rewrite

IGNORE_PERF_VAR = "TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_IGNORE_PERFORMANCE"


@pytest.fixture(autouse=True)
def rewrite_state():
  """Lets Grappler rewrite on any GPU; turns the rewrite off afterwards."""
  original = os.environ.get(IGNORE_PERF_VAR)
  os.environ[IGNORE_PERF_VAR] = "1"
  try:
    yield
  finally:
    if original is None:
      del os.environ[IGNORE_PERF_VAR]
    else:
      os.environ[IGNORE_PERF_VAR] = original
    if graph_rewrite.rewrite_is_enabled():
      graph_rewrite.disable_mixed_precision_graph_rewrite_v1()
