r"""Splits ours' overhead into its parts, on small `tf.function` or XLA steps.

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
* `ours_dynamic`: saving the old values and the restoring `If` ops. Below
  16384 elements each in-place write then copies its tensor first, as a
  resource variable copies on write while a read is alive; larger tensors
  are written out of place even in `no_restore`. (Saving cannot be timed
  apart: an op that only holds the saved values, consuming nothing, is
  pruned by Grappler, and one that consumes them is itself a function call
  like the `If`.)
* `floor_gated`: the other way to gate: the floor with every write waiting
  for the verdict.

`no_scale_update` (wrong), chosen with `--variants`, is ours dynamic
whose loss scale neither grows nor shrinks and whose counter stays: the
check and the gated apply without the update TF 2.4's loss scale made too,
and `floor_gated` leaves out. `floor_dynamic`, likewise chosen, is
`floor_gated` with that update (bench_loss_scaling.py's contender).

`ours_conditional`, chosen with `--variants`, is ours with a budget of 0:
in `tf.function` TF 2.4's conditional instead of keeping old values (under
XLA still masked), the step ours takes when the state does not fit.

Two more variants, chosen with `--variants`, time the two ways of keeping a
small tensor's old value while the variable takes the new one, whatever its
size: `in_place` (every small tensor updated in place, so the write copies
it first) and `out_of_place` (every small one computed into a new tensor
that the variable adopts: no copy, one op more). Ours switches from the
first to the second at `StepConfig.out_of_place_min_elements`.

After the table, the script prints what 1.5x the floor would allow above
the floor for each of the tensors the step writes (three per Adam variable),
against what keeping them costs (`ours_dynamic` - `no_restore`).

`--profile` also runs every variant's step under TensorFlow's profiler and
prints the time its ops take per step, by op type: where the time goes, not
only how much there is.

Usage:

  python benchmarks/gate_costs.py [--vars 10] [--width 64] [--reps 2000]
      [--instances 3] [--variants bare,floor,...] [--mode jit] [--profile]
      [--device gpu]
"""

import argparse
import bisect
import collections
import contextlib
import os
import sys
import tempfile
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import contenders  # pylint: disable=g-import-not-at-top,wrong-import-position
import report  # pylint: disable=g-import-not-at-top,wrong-import-position
import timing  # pylint: disable=g-import-not-at-top,wrong-import-position

import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position

from tf_mixed_precision_compat.loss_scale import _distribute  # pylint: disable=g-import-not-at-top,wrong-import-position
from tf_mixed_precision_compat.loss_scale import dynamic_state  # pylint: disable=g-import-not-at-top,wrong-import-position
from tf_mixed_precision_compat.optimizers import _gated_apply  # pylint: disable=g-import-not-at-top,wrong-import-position


def _apply_always(inner, grads, variables, finite, config):
  del finite, config
  inner.apply_gradients(list(zip(grads, variables)))


def _no_restore(finite, originals, chunk_size):
  del finite, originals, chunk_size
  return []


def _config(**knobs):
  """A stand-in for `_gated_apply.default_config` returning `knobs`' config."""
  return lambda: _gated_apply.StepConfig(**knobs)


def _check_only(scale, counter, grads, growth_steps, multiplier):
  del scale, counter, growth_steps, multiplier
  return tf.constant(False), _distribute.all_finite(grads)


# name -> (contender of bench_loss_scaling.py, {(module, attribute): its
# stand-in while the step is traced}).
_VARIANTS = {
    "bare": ("bare", {}),
    "ours_fixed": ("ours_fixed", {}),
    "floor": ("floor", {}),
    "dyn_nogate": ("ours_dynamic",
                   {(_gated_apply, "apply_when_finite"): _apply_always}),
    "no_restore": ("ours_dynamic",
                   {(_gated_apply, "_restore_unless"): _no_restore}),
    "ours_dynamic": ("ours_dynamic", {}),
    "floor_gated": ("floor_gated", {}),
    "floor_dynamic": ("floor_dynamic", {}),
    "in_place": ("ours_dynamic", {(_gated_apply, "default_config"): _config(
        out_of_place_min_elements=float("inf"))}),
    "out_of_place": ("ours_dynamic", {(_gated_apply, "default_config"):
                                      _config(out_of_place_min_elements=0)}),
    "ours_conditional": ("ours_dynamic", {(_gated_apply, "default_config"):
                                          _config(overlap_budget=0)}),
    "no_scale_update": ("ours_dynamic",
                        {(dynamic_state, "update_variables"): _check_only}),
}
_DEFAULT_VARIANTS = ("bare", "ours_fixed", "floor", "dyn_nogate",
                     "no_restore", "ours_dynamic", "floor_gated")


def make_steps(num_vars, width, names=_DEFAULT_VARIANTS, mode="function"):
  """Step functions of the variants `names`, by name.

  `mode` is "function" (`tf.function`) or "jit" (compiled with XLA).
  """
  values, x = contenders.initial_values(num_vars, width)
  steps = {}
  for name in names:
    contender, patches = _VARIANTS[name]
    with contextlib.ExitStack() as stand_ins:
      for (module, attr), stand_in in patches.items():
        stand_ins.enter_context(mock.patch.object(module, attr, stand_in))
      step = contenders.make_step(contender, mode, values, x, None)
      contenders.sync(step())  # Traced while the stand-ins are in place.
    steps[name] = step
  return steps


def measure(num_vars, width, reps, instances, names=_DEFAULT_VARIANTS,
            mode="function"):
  """Overheads over bare of every variant; a dict of statistics by name."""
  steps = {}
  for index in range(instances):
    for name, step in make_steps(num_vars, width, names, mode).items():
      steps[(name, index)] = step
  return timing.summarize(timing.interleave_instances(steps, reps))


# Profiler events of kernels that carry no op type, by event name.
_UNTYPED_KERNELS = {"IfOp": "If"}


def profile(steps, reps, warmup=5):
  """Time and count of ops per step by op type, from TF's profiler.

  The steps run interleaved as in `timing.interleave_steps` (profiling one
  variant after another let the machine's drift show as differences between
  them), and each kernel is attributed to the step call it ran in.

  Args:
    steps: Dict name -> step, a `tf.function` taking no arguments.
    reps: Profiled calls of every step.
    warmup: Unprofiled calls first.

  Returns:
    Dict name -> {op type: (µs per step, ops per step)}. The time is the
    ops' own, summed over both threads, so it says where the work goes, not
    how long the step takes; tracing every kernel slows them all, so compare
    variants rather than read the times as absolute.
  """
  # The profiler writes an XSpace protocol buffer; TF exports no public
  # reader for it, so its generated module is imported from where TF ships
  # it. Only this option needs it.
  from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=g-import-not-at-top
  by_function = {step.get_concrete_function().name.decode(): name
                 for name, step in steps.items()}
  timing.interleave_steps(steps, warmup, warmup=0)
  with tempfile.TemporaryDirectory() as logdir:
    tf.profiler.experimental.start(logdir)
    timing.interleave_steps(steps, reps, warmup=0)
    tf.profiler.experimental.stop()
    paths = [os.path.join(d, f) for d, _, files in os.walk(logdir)
             for f in files if f.endswith(".xplane.pb")]
    space = xplane_pb2.XSpace()
    with open(paths[0], "rb") as f:
      space.ParseFromString(f.read())
  time_ps = {name: collections.Counter() for name in steps}
  count = {name: collections.Counter() for name in steps}
  for plane in space.planes:
    # The calling thread's events name the function each call ran; a kernel
    # belongs to the call whose time span holds its start.
    calls = []
    for line in plane.lines:
      for event in line.events:
        label = plane.event_metadata[event.metadata_id].name
        function = label.partition("EagerLocalExecute: ")[2]
        if function in by_function:
          start = line.timestamp_ns * 1000 + event.offset_ps
          calls.append((start, start + event.duration_ps,
                        by_function[function]))
    calls.sort()
    starts = [c[0] for c in calls]
    for line in plane.lines:
      for event in line.events:
        # Kernels carry their op type as display name; the executor's own
        # bookkeeping events have none, nor has the `If` kernel's.
        metadata = plane.event_metadata[event.metadata_id]
        op_type = metadata.display_name or _UNTYPED_KERNELS.get(metadata.name)
        if not op_type:
          continue
        start = line.timestamp_ns * 1000 + event.offset_ps
        index = bisect.bisect_right(starts, start) - 1
        if index >= 0 and start < calls[index][1]:
          name = calls[index][2]
          time_ps[name][op_type] += event.duration_ps
          count[name][op_type] += 1
  return {name: {t: (time_ps[name][t] / reps / 1e6, count[name][t] / reps)
                 for t in time_ps[name]} for name in steps}


def _print_profile(profiles, min_us=5.):
  """Op types whose time per step differs from bare's by min_us or more."""
  names = list(profiles)
  bare = profiles.get("bare", {})
  types = sorted({t for p in profiles.values() for t in p},
                 key=lambda t: -max(p.get(t, (0, 0))[0]
                                    for p in profiles.values()))
  print("\nOps' own time per step (µs) and count per step, by op type:")
  print(f"{'op type':26s}" + "".join(f"{n:>22s}" for n in names))
  for t in types:
    row = [profiles[n].get(t, (0., 0.)) for n in names]
    if max(abs(us - bare.get(t, (0., 0.))[0]) for us, _ in row) < min_us:
      continue
    print(f"{t[:26]:26s}" + "".join(f"{us:13.1f} ({c:5.0f})" for us, c in row))
  print(f"{'all ops':26s}" + "".join(
      f"{sum(us for us, _ in profiles[n].values()):13.1f}{'':9s}"
      for n in names))


def _print_allowance(summary, num_vars):
  """What 1.5x the floor allows per written tensor, against keeping's cost."""
  needed = ("bare", "floor", "no_restore", "ours_dynamic")
  if not all(n in summary for n in needed):
    return
  bare_us = summary["bare"]["step_ms"] * 1e3
  floor_us = summary["floor"]["overhead"] * bare_us
  keep_us = (summary["ours_dynamic"]["overhead"] -
             summary["no_restore"]["overhead"]) * bare_us
  tensors = 3 * num_vars  # Adam writes each variable and its two slots.
  print(f"\n1.5x the floor allows {0.5 * floor_us:+.1f} µs above the floor: "
        f"{0.5 * floor_us / tensors:.2f} µs for each of the {tensors} "
        f"tensors written; keeping their old values costs "
        f"{keep_us:+.1f} µs, {keep_us / tensors:.2f} µs each "
        f"(ours_dynamic - no_restore).")


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--vars", type=int, default=10)
  parser.add_argument("--width", type=int, default=64)
  parser.add_argument("--reps", type=int, default=2000)
  parser.add_argument("--instances", type=int, default=3)
  parser.add_argument("--variants", default=",".join(_DEFAULT_VARIANTS),
                      help="comma-separated, from: " + ",".join(_VARIANTS))
  parser.add_argument("--mode", default="function",
                      choices=("function", "jit"),
                      help="tf.function steps, or compiled with XLA")
  parser.add_argument("--profile", action="store_true",
                      help="also profile 30 steps of each variant")
  parser.add_argument("--device", default="cpu", choices=("cpu", "gpu"),
                      help="where the steps run (gpu: the first GPU)")
  args = parser.parse_args()
  if args.device == "gpu" and not tf.config.list_physical_devices("GPU"):
    parser.error("--device gpu: TensorFlow sees no GPU here")
  with tf.device("/GPU:0" if args.device == "gpu" else "/CPU:0"):
    _run(args, parser)


def _run(args, parser):
  """`main` on the chosen device."""
  names = tuple(args.variants.split(","))
  unknown = sorted(set(names) - set(_VARIANTS))
  if unknown or "bare" not in names:
    parser.error(f"--variants must include bare and name only variants "
                 f"from {', '.join(_VARIANTS)}; got {args.variants!r}")
  if args.profile and args.mode == "jit":
    # XLA runs a step as one compiled cluster: there are no TensorFlow ops
    # to attribute time to.
    parser.error("--profile: tf.function steps only (--mode function)")
  summary = measure(args.vars, args.width, args.reps, args.instances, names,
                    args.mode)
  print(f"Device: {report.device(args.device)}")
  kind = "XLA" if args.mode == "jit" else "tf.function"
  print(f"{kind} step, {args.vars} variables of {args.width}x"
        f"{args.width}, {args.reps} step-level interleaved repetitions, "
        f"{args.instances} instances each")
  bare_us = summary["bare"]["step_ms"] * 1e3
  for name, s in summary.items():
    instances = " ".join(f"{100 * o:+.1f}" for o in s["instance_overheads"])
    print(f"{name:14s} {s['step_ms']:8.3f} ms  {100 * s['overhead']:+6.1f}%"
          f" ±{100 * s['overhead_se']:.1f} ({s['overhead'] * bare_us:+7.1f} "
          f"µs)  instances: {instances}")
  _print_allowance(summary, args.vars)
  if args.profile:
    _print_profile(profile(
        make_steps(args.vars, args.width, names, args.mode), 30))


if __name__ == "__main__":
  main()
