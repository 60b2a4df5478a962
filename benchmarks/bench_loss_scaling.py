r"""Side-by-side benchmark of loss scaling optimizers: the command line.

Measures, in one process and with interleaved repetitions, the training step
time of the contenders of `contenders.py` (bare Adam, the floors a
skip-on-overflow scaler cannot go below, TF 2.4's design, Keras 3's,
tf_keras's and this package's `LossScaleOptimizer`) on the workloads "wide"
(10 variables of 1000x1000), "many" (400 of 32x32), "scaling" (10, 100 and
1000 of 64x64), "fit" (a `mixed_float16` model trained with `fit`) and "v1"
(`tf.compat.v1` sessions), eagerly ("many" only), in `tf.function`, under
XLA and under MirroredStrategy over two logical CPUs (the strategy made only
when the mirrored cells, which run after all others, need it); and
("memory") each contender's peak memory alone in a fresh process. How it
times: `timing.py`; the report: `report.py`.

Usage:

  python benchmarks/bench_loss_scaling.py [--quick] [--out results.json]
  python benchmarks/bench_loss_scaling.py --only memory [--device gpu]

`--quick` uses fewer repetitions and smaller sizes, and measures every mode
and workload once rather than every pairing (reported in the output); it
finishes in a few minutes on two cores. `--out` writes everything,
the markdown report included (`report`), as JSON.
"""

import argparse
import functools
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import contenders  # pylint: disable=g-import-not-at-top,wrong-import-position
import report  # pylint: disable=g-import-not-at-top,wrong-import-position
import timing  # pylint: disable=g-import-not-at-top,wrong-import-position

import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position


def _parse_args(argv):
  """The command line, checked: (parser, args)."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--quick", action="store_true",
                      help="fewer repetitions and smaller sizes (< 2 min)")
  parser.add_argument("--out", help="write the results as JSON to this path")
  parser.add_argument("--jit-max-vars", type=int, default=None,
                      help="largest variable count measured with jit_compile "
                      "(default: 400 in a full run, all in --quick)")
  parser.add_argument("--mirrored-max-vars", type=int, default=None,
                      help="largest variable count measured under "
                      "MirroredStrategy (default: 400 in a full run, all in "
                      "--quick)")
  parser.add_argument("--modes", default="",
                      help="comma-separated modes to run (eager, function, "
                      "jit, mirrored); default all")
  parser.add_argument("--reps", type=int, default=None,
                      help="step-level repetitions per cell (default: as "
                      "many as fill --cell-seconds, 21 to 3000, in a full "
                      "run; 3 in --quick)")
  parser.add_argument("--cell-seconds", type=float, default=None,
                      help="timed seconds per cell when --reps is not given "
                      "(default 45)")
  parser.add_argument("--instances", type=int, default=None,
                      help="instances of every contender in cells of up to "
                      "--instances-max-vars variables (default 3 in a full "
                      "run, 1 in --quick)")
  parser.add_argument("--instances-max-vars", type=int, default=None,
                      help="largest variable count with several instances "
                      "(default 100)")
  parser.add_argument("--only", default="",
                      help="comma-separated workloads to run (wide, many, "
                      "scaling, fit, v1, memory); default all")
  parser.add_argument("--device", default="cpu", choices=("cpu", "gpu"),
                      help="where the steps run (gpu: the first GPU, and the "
                      "first two under MirroredStrategy; memory from "
                      "TensorFlow's GPU allocator)")
  args = parser.parse_args(argv)
  if args.device == "gpu" and not tf.config.list_physical_devices("GPU"):
    parser.error("--device gpu: TensorFlow sees no GPU here")
  return parser, args

def _settings(parser, args):
  """The run's `timing.Settings`, from the command line."""
  settings = timing.Settings(args.quick)
  if args.jit_max_vars is not None:
    settings.jit_max_vars = args.jit_max_vars
  if args.mirrored_max_vars is not None:
    settings.mirrored_max_vars = args.mirrored_max_vars
  if args.reps is not None:
    if args.reps < 1:
      parser.error(f"--reps must be at least 1, got {args.reps}")
    settings.reps = args.reps
  if args.cell_seconds is not None:
    if not args.cell_seconds > 0:
      parser.error(f"--cell-seconds must be positive, got {args.cell_seconds}")
    settings.cell_s = args.cell_seconds
  if args.instances is not None:
    if args.instances < 1:
      parser.error(f"--instances must be at least 1, got {args.instances}")
    settings.instances = args.instances
  if args.instances_max_vars is not None:
    settings.instances_max_vars = args.instances_max_vars
  return settings


# Each workload's modes in a full run.
_MODES = {"wide": ("function", "jit", "mirrored"),
          "many": ("eager", "function", "jit", "mirrored"),
          "scaling": ("function", "jit", "mirrored"),
          "fit": ("function", "jit", "mirrored")}


def _plan(settings, wanted, modes, log):
  """The cells in the table's order, as (mode, function of the strategy and
  the log)."""
  each = lambda workload: modes(*settings.modes_of(workload,
                                                   _MODES[workload]))
  plan = []
  if wanted("wide"):
    for mode in each("wide"):
      plan.append((mode, functools.partial(
          timing.run_cell, "wide", mode, *settings.wide, settings)))
  if wanted("many"):
    for mode in each("many"):
      plan.append((mode, functools.partial(
          timing.run_cell, "many", mode, *settings.many, settings)))
  if wanted("scaling"):
    for mode in each("scaling"):
      for num_vars, width in settings.scaling:
        limit = {"jit": settings.jit_max_vars,
                 "mirrored": settings.mirrored_max_vars}.get(mode)
        if limit is not None and num_vars > limit:
          log(f"scaling[{num_vars}x{width}]  {mode}  skipped "
              f"(--{mode}-max-vars)")
          continue
        plan.append((mode, functools.partial(
            timing.run_cell, "scaling", mode, num_vars, width, settings)))
  if wanted("fit"):
    for mode in each("fit"):
      plan.append((mode, functools.partial(timing.run_fit_cell, mode,
                                           settings)))
  if wanted("v1"):
    v1_sizes = [("wide", *settings.wide), ("many", *settings.many),
                ("scaling", *settings.scaling[-1])]
    for workload, num_vars, width in v1_sizes:
      plan.append(("session", functools.partial(
          timing.run_v1_cell, workload, num_vars, width, settings)))
  return plan


def _run(plan, device_kind, settings, out, log):
  """Runs `plan`'s cells, the mirrored ones last: (cells, run order)."""
  # Once a MirroredStrategy exists, gated steps without one ran dearer in
  # the same process, which a single-device job never pays: so the strategy
  # is made only for the mirrored cells, and they run last.
  run_order = sorted(range(len(plan)), key=lambda i: plan[i][0] == "mirrored")
  strategy = None
  done, cells, ran = {}, [], []
  for index in run_order:
    mode, run = plan[index]
    if mode == "mirrored" and strategy is None:
      strategy = tf.distribute.MirroredStrategy(
          report.mirrored_devices(device_kind))
    with tf.device("/GPU:0" if device_kind == "gpu" else "/CPU:0"):
      done[index] = run(strategy, log)
    ran.append([done[index]["workload"], done[index]["mode"],
                done[index]["num_vars"]])
    cells = [done[i] for i in sorted(done)]
    # Written after each cell, so that a long run that dies (out of memory,
    # say) keeps what it measured.
    if out:
      with open(out, "w") as f:
        json.dump({"partial": True, "settings": settings.as_dict(),
                   "cells": cells}, f, indent=1)
  return cells, ran


def main(argv=None):
  """Runs the benchmark; returns the results (also `--out`'s JSON)."""
  parser, args = _parse_args(argv)
  settings = _settings(parser, args)
  only = set(filter(None, args.only.split(",")))
  modes = set(filter(None, args.modes.split(",")))
  started = time.perf_counter()

  def log(line):
    print(f"[{time.perf_counter() - started:6.1f}s] {line}", file=sys.stderr,
          flush=True)

  wanted = lambda workload: not only or workload in only
  plan = _plan(settings, wanted,
               lambda *names: [m for m in names if not modes or m in modes],
               log)
  device = report.device(args.device)
  log(f"device: {device}")
  cells, ran = _run(plan, args.device, settings, args.out, log)
  memory = {}
  if wanted("memory"):
    memory_modes = ([m for m in contenders.MODES if m in modes] if modes else
                    ["function"] if args.quick else list(contenders.MODES))
    memory = timing.run_memory(memory_modes, settings, args.device, log)
  results = {
      "machine": dict(report.machine(), device=device),
      "settings": settings.as_dict(),
      "command": "python benchmarks/bench_loss_scaling.py" +
                 (" --quick" if args.quick else ""),
      "cells": cells,
      "run_order": ran + ([["memory", m, settings.memory[0]] for m in memory]),
      "notes": {} if contenders.tf_keras is not None else {
          "tf_keras": "tf_keras is not installed; its LossScaleOptimizer is "
                      "not measured."},
  }
  report.derived(results)
  results["memory"] = memory
  results["wall_s"] = time.perf_counter() - started
  results["report"] = report.markdown(results) + "\n\n" + report.footer(
      results)
  print(results["report"])
  if args.out:
    with open(args.out, "w") as f:
      json.dump(results, f, indent=1)
  return results


if __name__ == "__main__":
  main()
