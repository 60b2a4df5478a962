r"""Splits ours' overhead into its parts, on small `tf.function` steps.

Where `bench_loss_scaling.py` finds ours above 1.5x the floor's overhead, this
measures what each part of a dynamic loss scaler costs, side by side in one
process (step-level interleaving and several instances of every contender,
as in bench_loss_scaling.py). Each of the first six variants adds one part to
the one before; the ones marked "wrong" exist only to be timed:

* `bare`: Keras 3 Adam, no scaling;
* `ours_fixed`: scale the loss and unscale the gradients (by a variable);
* `floor`: scale, unscale and check that all gradients are finite (the
  verdict gates nothing);
* `dyn_nogate` (wrong): ours dynamic, but the inner optimizer applies every
  step, finite or not: the check plus the scale and counter update, the part
  every dynamic loss scaler adds to the floor;
* `no_restore` (wrong): ours' gated apply without keeping or restoring the
  old values: its bookkeeping;
* `ours_dynamic`: saving the old values (each in-place write then copies
  its tensor first, as a resource variable copies on write while a read is
  alive) and the restoring `If` ops. (Saving cannot be timed apart: an op
  that only holds the saved values, consuming nothing, is pruned by
  Grappler, and one that consumes them is itself a function call like the
  `If`.)
* `floor_gated`: the other way to gate: the floor with every write waiting
  for the verdict.

Usage:

  python benchmarks/gate_costs.py [--vars 10] [--reps 2000] [--instances 3]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_loss_scaling as bench  # pylint: disable=g-import-not-at-top,wrong-import-position

from tf_mixed_precision_compat import _gated_apply  # pylint: disable=g-import-not-at-top,wrong-import-position


def _apply_always(inner, grads, variables, finite):
  del finite
  inner.apply_gradients(list(zip(grads, variables)))


def _no_restore(finite, originals):
  del finite, originals
  return []


# name -> (contender of bench_loss_scaling.py, {_gated_apply attribute: its
# stand-in while the step is traced}).
_VARIANTS = {
    "bare": ("bare", {}),
    "ours_fixed": ("ours_fixed", {}),
    "floor": ("floor", {}),
    "dyn_nogate": ("ours_dynamic", {"apply_when_finite": _apply_always}),
    "no_restore": ("ours_dynamic", {"_restore_unless": _no_restore}),
    "ours_dynamic": ("ours_dynamic", {}),
    "floor_gated": ("floor_gated", {}),
}


def make_steps(num_vars, width, names=tuple(_VARIANTS)):
  """Step functions of the variants `names`, by name."""
  values, x = bench._initial_values(num_vars, width)  # pylint: disable=protected-access
  steps = {}
  for name in names:
    contender, patches = _VARIANTS[name]
    real = {attr: getattr(_gated_apply, attr) for attr in patches}
    for attr, stand_in in patches.items():
      setattr(_gated_apply, attr, stand_in)
    try:
      step = bench._make_step(contender, "function", values, x, None)  # pylint: disable=protected-access
      bench._sync(step())  # Traced while the stand-ins are in place.  # pylint: disable=protected-access
    finally:
      for attr, function in real.items():
        setattr(_gated_apply, attr, function)
    steps[name] = step
  return steps


def measure(num_vars, width, reps, instances):
  """Overheads over bare of every variant; a dict of statistics by name."""
  steps = {}
  for index in range(instances):
    for name, step in make_steps(num_vars, width).items():
      steps[(name, index)] = step
  return bench._summarize(bench.interleave_instances(steps, reps))  # pylint: disable=protected-access


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--vars", type=int, default=10)
  parser.add_argument("--width", type=int, default=64)
  parser.add_argument("--reps", type=int, default=2000)
  parser.add_argument("--instances", type=int, default=3)
  args = parser.parse_args()
  summary = measure(args.vars, args.width, args.reps, args.instances)
  print(f"tf.function step, {args.vars} variables of {args.width}x"
        f"{args.width}, {args.reps} step-level interleaved repetitions, "
        f"{args.instances} instances each")
  bare_us = summary["bare"]["step_ms"] * 1e3
  for name, s in summary.items():
    instances = " ".join(f"{100 * o:+.1f}" for o in s["instance_overheads"])
    print(f"{name:14s} {s['step_ms']:8.3f} ms  {100 * s['overhead']:+6.1f}%"
          f" ±{100 * s['overhead_se']:.1f} ({s['overhead'] * bare_us:+7.1f} "
          f"µs)  instances: {instances}")


if __name__ == "__main__":
  main()
