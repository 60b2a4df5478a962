"""A loss-scaled step's peak memory, from TensorFlow's allocator.

`peak_probe.py` runs each case in a fresh interpreter whose CPU allocator
keeps statistics (`TF_CPU_ALLOCATOR_USE_BFC=true`) and reports the
allocator's peak over three steps above its level before them: the bytes of
tensors alive at once, which unlike the process's resident set do not move
between runs. 8 Adam variables of 2048x2048: 384 MiB of optimizer state,
128 MiB of gradients.

The bound, per replica: bare Adam's peak + the gradients + max(5% of the
optimizer state, 32 MiB). An exact skip-on-overflow holds every gradient
until the last one is checked, which bare Adam need not (TF 2.4's
conditional held them too; docs/performance.md, "Memory"); the allowance
covers the rest (what the gated apply keeps until the verdict, at most half
of it by default, and short-lived temporaries).
"""

import concurrent.futures
import json
import os
import subprocess
import sys

import pytest

from tests import testing
from tf_mixed_precision_compat.optimizers import _gated_apply

_VARS, _WIDTH = 8, 2048
_GRADIENTS = _VARS * _WIDTH * _WIDTH * 4
_STATE = 3 * _GRADIENTS
# The package's own allowance (`_gated_apply.keep_budget` keeps half).
_ALLOWANCE = max(_gated_apply.StepConfig().state_share * _STATE,
                 _gated_apply.StepConfig().min_allowance)

# Each loss-scaled case and the bare one it is measured against.
_CASES = {
    ("tf24", "eager"): "bare",
    ("tf24", "function"): "bare",
    ("tf24", "jit"): "bare",
    ("tf24", "mirrored"): "bare",
    ("tf23", "function"): "bare",
    ("tf23", "jit"): "bare",
    ("fit_tf24", "function"): "fit_bare",
    ("fit_tf24", "jit"): "fit_bare",
}


def _measure(case, env):
  """The allocator's peak over resting for `case`, in its own interpreter."""
  kind, mode = case
  proc = subprocess.run(
      [sys.executable, os.path.join(os.path.dirname(__file__),
                                    "peak_probe.py"),
       "--case", f"{kind}:{mode}", "--vars", str(_VARS),
       "--width", str(_WIDTH)],
      capture_output=True, text=True, env=env, check=False, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])["extra_peak_bytes"]


@pytest.fixture(scope="module")
def peaks():
  """(kind, mode) -> the allocator's peak above its resting level, bytes.

  Each case in a fresh interpreter: the allocator counts whole chunks, and a
  chunk an earlier case left free can serve a later request whole, so the
  same case measured after others came out up to 100 MiB higher, varying
  from run to run. Alone, a case measured the same bytes every time.
  """
  wanted = sorted(set(_CASES) | {(bare, mode)
                                 for (_, mode), bare in _CASES.items()},
                  key=lambda c: (c[1], c[0]))
  env = dict(os.environ, TF_CPU_ALLOCATOR_USE_BFC="true",
             TF_CPP_MIN_LOG_LEVEL="3")
  env["PYTHONPATH"] = os.pathsep.join(
      [str(testing.REPO_ROOT)] +
      ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
  env.pop("TF_USE_LEGACY_KERAS", None)
  # Two at a time: each probe runs its steps on one thread.
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    extras = list(pool.map(lambda case: _measure(case, env), wanted))
  return dict(zip(wanted, extras))


@pytest.mark.parametrize("kind,mode", sorted(_CASES))
def test_step_needs_at_most_bare_plus_gradients_plus_allowance(
    peaks, kind, mode):
  bare = peaks[(_CASES[(kind, mode)], mode)]
  extra = peaks[(kind, mode)] - bare
  assert extra <= _GRADIENTS + _ALLOWANCE, (
      f"{kind} in {mode}: {extra / 2**20:.1f} MiB over bare's peak, more "
      f"than the gradients ({_GRADIENTS / 2**20:.0f} MiB) and the allowance "
      f"({_ALLOWANCE / 2**20:.0f} MiB)")


def test_the_allocator_counts_what_a_step_holds(peaks):
  # An eager step holds the whole list of gradients while Adam updates: if
  # the allocator did not see them, the bound above would prove nothing.
  assert peaks[("bare", "eager")] >= _GRADIENTS
  assert peaks[("bare", "function")] > 0
