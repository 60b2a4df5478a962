r"""Splits the cost of the gated apply into its parts, on small steps.

`bench_loss_scaling.py` finds ours above 1.5x the floor's overhead in
`tf.function` steps of 10 and 100 variables of 64x64. This measures where
that comes from, side by side in one process (interleaved repetitions, as
in bench_loss_scaling.py), with variants of `ours_dynamic` that are wrong on
purpose and exist only to be timed:

* `no_restore`: the old values are neither kept nor restored (a non-finite
  step would corrupt the variables): what the rest of ours costs.
* `keep_only`: the old values are kept alive until every write is done, but
  never restored: the cost of saving (each in-place write copies its tensor
  first, as a resource variable copies on write while a read is alive).
* `ours_dynamic`: saving plus the restoring `If` ops.

`bare`, `floor` and `floor_gated` (the other way to gate: every write waits
for the verdict) are timed alongside, as in bench_loss_scaling.py.

Usage:

  python benchmarks/gate_costs.py [--vars 10] [--reps 21]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_loss_scaling as bench  # pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position

from tf_mixed_precision_compat import _gated_apply  # pylint: disable=g-import-not-at-top,wrong-import-position


def _no_restore(finite, originals):
  del finite, originals
  return []


def _keep_only(finite, originals):
  del finite
  if not originals:
    return []
  # One op holding every saved value until the writes are done.
  return [tf.raw_ops.IdentityN(input=[o for _, o in originals])[0].op]


_VARIANTS = {"no_restore": _no_restore, "keep_only": _keep_only}

# Contenders of bench_loss_scaling.py timed alongside: `floor_gated` is the
# other way to gate (wait for the verdict before any write).
_CONTENDERS = ("bare", "floor", "floor_gated")
_NAMES = _CONTENDERS + ("ours_dynamic", "no_restore", "keep_only")


def make_steps(num_vars, width):
  """Step functions of bare, floor, ours and the variants, by name."""
  values, x = bench._initial_values(num_vars, width)  # pylint: disable=protected-access
  steps = {}
  real = _gated_apply._restore_unless  # pylint: disable=protected-access
  for name in _NAMES:
    contender = name if name in _CONTENDERS else "ours_dynamic"
    _gated_apply._restore_unless = _VARIANTS.get(name, real)  # pylint: disable=protected-access
    try:
      step = bench._make_step(contender, "function", values, x, None)  # pylint: disable=protected-access
      bench._sync(step())  # Traced while the variant is in place.  # pylint: disable=protected-access
    finally:
      _gated_apply._restore_unless = real  # pylint: disable=protected-access
    steps[name] = step
  return steps


def measure(num_vars, width, reps):
  """Overheads over bare of floor, ours and the variants; a dict."""
  steps = make_steps(num_vars, width)
  block = bench._block(steps["bare"], bench.Settings(quick=False))  # pylint: disable=protected-access
  times = bench._interleaved(steps, reps, block)  # pylint: disable=protected-access
  return bench._summarize(times)  # pylint: disable=protected-access


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--vars", type=int, default=10)
  parser.add_argument("--width", type=int, default=64)
  parser.add_argument("--reps", type=int, default=21)
  args = parser.parse_args()
  summary = measure(args.vars, args.width, args.reps)
  print(f"tf.function step, {args.vars} variables of {args.width}x"
        f"{args.width}, {args.reps} interleaved repetitions")
  for name, s in summary.items():
    print(f"{name:14s} {s['step_ms']:8.3f} ms  {100 * s['overhead']:+6.1f}%"
          f" ±{100 * s['overhead_spread']:.1f}")


if __name__ == "__main__":
  main()
