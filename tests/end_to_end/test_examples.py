"""Each example is a TF 2.3/2.4-era script plus one line, and runs on TF 2.21.

Every script is run twice in a subprocess: as committed, it must succeed and
print what its job promises (an overflow skipped, the loss scale moving, the
loss going down, a checkpoint resumed with its loss scale); with the install
line removed (the script as its authors wrote it), today's TensorFlow must
reject it, which shows that the one line is what makes it run. (The TF1
session job is the exception: TF 2.21 still has tf.compat.v1's optimizer, so
there the original must agree with the installed run.)
"""

import concurrent.futures
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from tests import testing

EXAMPLES = os.path.join(
    testing.REPO_ROOT, "examples")
INSTALL_LINE = ("import tf_mixed_precision_compat.auto  "
                "# pylint: disable=unused-import")
NAMES = ("tf1_session", "tf23_custom_loop", "tf23_fit",
         "tf24_custom_loop_mirrored", "tf24_fit_mirrored")


def _source(name):
  with open(os.path.join(EXAMPLES, name + ".py")) as f:
    return f.read()


def _original(name):
  """The script without the install line, as its TF 2.3/2.4 authors had it."""
  return "".join(line for line in _source(name).splitlines(keepends=True)
                 if line.strip() != INSTALL_LINE)


def _run(code):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  return subprocess.run([sys.executable, "-c", code], capture_output=True,
                        text=True, env=env, cwd=EXAMPLES)


@pytest.fixture(scope="module")
def runs():
  """Both variants of every example, run two at a time (2 cores)."""
  jobs = {}
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    for name in NAMES:
      jobs[name] = pool.submit(_run, _source(name))
      jobs[name + " original"] = pool.submit(_run, _original(name))
    return {key: job.result() for key, job in jobs.items()}


def _ok(runs, name):
  result = runs[name]
  assert result.returncode == 0, result.stderr[-3000:]
  return result.stdout


def _numbers(pattern, text):
  match = re.search(pattern, text)
  assert match, (pattern, text)
  return [float(g) for g in match.groups()]


def test_the_install_line_is_the_only_addition():
  assert sorted(f[:-3] for f in os.listdir(EXAMPLES)
                if f.endswith(".py")) == sorted(NAMES)
  for name in NAMES:
    lines = [line for line in _source(name).splitlines()
             if "tf_mixed_precision_compat" in line]
    assert lines == [INSTALL_LINE], name
    # It comes right after `import tensorflow as tf`, before any use.
    source_lines = _source(name).splitlines()
    at = source_lines.index(INSTALL_LINE)
    assert source_lines[at - 1] == "import tensorflow as tf", name
    compile(_original(name), name, "exec")


@pytest.mark.parametrize("name", [n for n in NAMES if n != "tf1_session"])
def test_original_fails_without_the_install_line(runs, name):
  result = runs[name + " original"]
  assert result.returncode != 0, result.stdout
  assert re.search(r"(AttributeError|ImportError|ModuleNotFoundError)",
                   result.stderr), result.stderr[-2000:]


def test_tf23_custom_loop(runs):
  out = _ok(runs, "tf23_custom_loop")
  assert "Compute dtype: float16" in out
  assert "Variable dtype: float32" in out
  (overflows,) = _numbers(r"overflowed \(skipped\) steps: (\d+)", out)
  assert overflows >= 1
  first, last = _numbers(r"loss: ([\d.]+) -> ([\d.]+)", out)
  assert last < first / 4


def test_tf23_fit(runs):
  out = _ok(runs, "tf23_fit")
  assert "optimizer: LossScaleOptimizer" in out  # compile wrapped it
  assert "first layer output dtype: float16" in out
  first, last = _numbers(r"loss: ([\d.]+) -> ([\d.]+)", out)
  assert last < first
  assert _numbers(r"restored iterations: (\d+)", out) == [32.]
  (restored,) = _numbers(r"restored evaluation loss: ([\d.]+)", out)
  (original,) = _numbers(r"original evaluation loss: ([\d.]+)", out)
  assert restored == original


def test_tf24_custom_loop_mirrored(runs):
  out = _ok(runs, "tf24_custom_loop_mirrored")
  assert "replicas: 2" in out
  (skipped,) = _numbers(r"skipped steps: (\d+)", out)
  assert skipped >= 1
  start, low, end = _numbers(r"loss scale: (\d+) -> min (\d+) -> (\d+)", out)
  assert start == 32768 and low < start and end > low  # shrank, then grew
  first, last = _numbers(r"loss: ([\d.]+) -> ([\d.]+)", out)
  assert last < first / 4


def test_tf24_fit_mirrored(runs):
  out = _ok(runs, "tf24_fit_mirrored")
  assert "replicas: 2" in out
  first, last = _numbers(r"loss: ([\d.]+) -> ([\d.]+)", out)
  assert last < first
  scale, counter, iterations = _numbers(
      r"\nloss scale: (\d+), dynamic counter: (\d+), iterations: (\d+)", out)
  resumed = _numbers(
      r"resumed loss scale: (\d+), dynamic counter: (\d+), iterations: (\d+)",
      out)
  # One more epoch (8 steps) continues the restored state: the counter goes
  # on from the restored one unless a step overflowed and halved the scale.
  assert resumed[2] == iterations + 8
  assert resumed[:2] == [scale, counter + 8] or resumed[0] == scale / 2
  assert scale < 32768  # some early step overflowed


def test_tf1_session(runs):
  out = _ok(runs, "tf1_session")
  steps, applied, skipped = _numbers(
      r"steps run: (\d+), applied: (\d+), skipped: (\d+)", out)
  assert skipped >= 1 and applied + skipped == steps
  start, end = _numbers(r"loss scale: (\d+) -> (\d+)", out)
  assert start == 32768 and end < start
  first, last = _numbers(r"loss: ([\d.]+) -> ([\d.]+)", out)
  assert last < first / 10
  assert _numbers(r"restored global step: (\d+), loss scale: (\d+)",
                  out) == [applied, end]


def test_tf1_session_agrees_with_tf_own_v1_optimizer(runs):
  # TF 2.21 still ships tf.compat.v1's MixedPrecisionLossScaleOptimizer, so
  # the original runs without the install line too: on TF's class. Ours makes
  # the same decisions (TF 2.3.4 printed the same lines, losses aside).
  ours, theirs = _ok(runs, "tf1_session"), _ok(runs, "tf1_session original")
  pattern = (r"steps run: (\d+), applied: (\d+), skipped: (\d+)\n"
             r"loss scale: (\d+) -> (\d+)")
  assert _numbers(pattern, ours) == _numbers(pattern, theirs)
  np.testing.assert_allclose(_numbers(r"loss: ([\d.]+) -> ([\d.]+)", ours),
                             _numbers(r"loss: ([\d.]+) -> ([\d.]+)", theirs),
                             rtol=1e-2)
