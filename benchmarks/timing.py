"""How the loss-scaling benchmark measures: interleaving, statistics, cells.

Repetitions are interleaved at the step level: each repetition calls every
contender's step once, in a fresh random order, and times each call on its
own, so machine noise slower than one repetition hits all contenders alike
and no contender always runs after the same one. Cells of up to
`instances_max_vars` variables build several instances of every contender
(fresh variables, optimizer and trace): two instances of the same step can
differ by a few percent for as long as they live, which no number of
repetitions averages away. A contender's time in a repetition is the median
over its instances. Its overhead is the median over repetitions of (its
time / bare's time in the same repetition) - 1, with the standard error of
that median (bootstrap); the spread (half the inter-quartile range of the
ratio) and each instance's own overhead are in the JSON.

Memory: every contender of `MEMORY_CONTENDERS` runs alone in a fresh process
(`memory_probe.py`; tf_keras's with `TF_USE_LEGACY_KERAS=1`): its peak over
the steps after the first call (CPU: the process's resident-set high-water
mark, and in another fresh process TensorFlow's own allocator's peak, on
which the bound is judged; GPU: `get_memory_info("GPU:0")["peak"]`).
"""

import gc
import json
import os
import statistics
import subprocess
import sys
import time

import contenders
from contenders import BATCH, CONTENDERS, FIT_CONTENDERS, MEMORY_CONTENDERS
from contenders import initial_values, make_step, sync, tf_keras, unavailable

import keras
import numpy as np
import tensorflow as tf


# -------------------------------------------------------------- settings --


class Settings:
  """Sizes and repetition counts of one run."""

  def __init__(self, quick):
    self.quick = quick
    # Repetitions per cell: fixed (`--reps`), or as many as fit in `cell_s`
    # seconds of timed steps, within [min_reps, max_reps].
    self.reps = None
    self.min_reps, self.max_reps = 21, 3000
    if quick:
      self.wide = (10, 64)
      self.many = (16, 16)
      self.scaling = ((8, 16),)
      self.reps, self.cell_s, self.warmup = 3, 0., 0
      self.instances, self.instances_max_vars = 1, None
      self.jit_max_vars = None
      self.mirrored_max_vars = None
      self.fit_reps, self.fit_steps, self.fit_units = 2, 3, 32
      self.memory = (4, 256, 2)
      # Every mode once ("many" runs them all) and every workload in
      # tf.function, rather than every pairing.
      self.modes = {"wide": ("function",), "scaling": ("function",),
                    "fit": ("function", "mirrored")}
    else:
      self.wide = (10, 1000)
      self.many = (400, 32)
      self.scaling = ((10, 64), (100, 64), (1000, 64))
      self.cell_s, self.warmup = 45., 2
      # Tracing and compiling several instances of 400- and 1000-layer
      # steps would take most of an hour.
      self.instances, self.instances_max_vars = 3, 100
      # XLA compiles each contender's 1000-layer step for minutes: jit cells
      # go up to 400 variables unless --jit-max-vars says otherwise.
      self.jit_max_vars = 400
      # Likewise, setting up 1000-layer replicated steps for every contender
      # takes over 20 minutes on 2 cores (--mirrored-max-vars).
      self.mirrored_max_vars = 400
      self.fit_reps, self.fit_steps, self.fit_units = 15, 20, 1024
      # Variables, width, steps: 768 MiB of Adam state.
      self.memory = (16, 2048, 5)
      self.modes = {}  # Workload -> its modes, where not every one.

  def modes_of(self, workload, modes):
    """Those of `modes` this run measures `workload` in."""
    return [m for m in modes if m in self.modes.get(workload, modes)]

  def instances_for(self, num_vars):
    """Instances of each contender built for a cell of `num_vars`."""
    if self.instances_max_vars is not None and (
        num_vars > self.instances_max_vars):
      return 1
    return self.instances

  def as_dict(self):
    return dict(vars(self))


# ----------------------------------------------------- interleaved timing --


def interleave_steps(steps, reps, warmup=2, seed=0):
  """Times one call of every step per repetition, each in its own timer.

  Every repetition calls the steps in a fresh random order, so that noise
  slower than a repetition hits them alike and no step always follows the
  same one (whose allocations and cache footprint it would inherit).

  Args:
    steps: Dict key -> zero-argument step callable.
    reps: Number of timed repetitions.
    warmup: Untimed repetitions first.
    seed: Seed of the shuffles.

  Returns:
    Dict key -> list of seconds, one per timed repetition.
  """
  keys = list(steps)
  rng = np.random.default_rng(seed)
  times = {k: [] for k in keys}
  for rep in range(warmup + reps):
    for index in rng.permutation(len(keys)):
      key = keys[index]
      start = time.perf_counter()
      sync(steps[key]())
      if rep >= warmup:
        times[key].append(time.perf_counter() - start)
  return times


def interleave_instances(steps, reps, warmup=2):
  """`interleave_steps` over steps keyed (name, instance), grouped by name.

  Returns:
    Dict name -> list (one per instance) of lists of seconds, as
    `summarize` takes them.
  """
  times = {}
  for (name, _), seconds in interleave_steps(steps, reps, warmup).items():
    times.setdefault(name, []).append(seconds)
  return times


def reps_for(steps, settings):
  """Repetitions for `steps`: fixed, or filling `settings.cell_s` seconds."""
  if settings.reps is not None:
    return settings.reps
  start = time.perf_counter()
  for step in steps.values():
    sync(step())
  seconds = time.perf_counter() - start
  return int(min(settings.max_reps, max(
      settings.min_reps, settings.cell_s / max(seconds, 1e-6))))


def _quartiles(values):
  if len(values) == 1:
    return values[0], values[0], values[0]
  q = statistics.quantiles(values, n=4, method="inclusive")
  return q[0], statistics.median(values), q[2]


def _median_se(values, resamples=300, seed=0):
  """Bootstrap standard error of the median of `values`."""
  values = np.asarray(values)
  if len(values) < 2:
    return 0.
  rng = np.random.default_rng(seed)
  picks = rng.integers(0, len(values), (resamples, len(values)))
  return float(np.std(np.median(values[picks], axis=1)))


def summarize(times, baseline="bare"):
  """Medians, spreads and paired overheads of interleaved step times.

  Args:
    times: Dict name -> list (one per instance) of lists of seconds (one per
      repetition).
    baseline: The name overheads are relative to.

  Returns:
    Dict name -> statistics.
  """
  def per_repetition(runs):
    # The median over instances: a step that hits a burst of machine noise
    # would drag a mean with it.
    return np.median(np.asarray(runs), axis=0)

  base = per_repetition(times[baseline])
  out = {}
  for name, runs in times.items():
    ts = per_repetition(runs)
    lo, med, hi = _quartiles(list(ts))
    ratios = ts / base
    rlo, rmed, rhi = _quartiles(list(ratios))
    out[name] = {
        "step_ms": med * 1e3,
        "step_ms_iqr": [lo * 1e3, hi * 1e3],
        "overhead": rmed - 1.,
        "overhead_se": _median_se(ratios),
        "overhead_spread": (rhi - rlo) / 2.,
        "instance_overheads": [
            float(np.median(np.asarray(run) / base)) - 1. for run in runs],
        "samples_ms": [float(t) * 1e3 for t in ts],
    }
  return out


def run_cell(workload, mode, num_vars, width, settings, strategy, log):
  """Measures every contender on one workload and mode."""
  values, x = initial_values(num_vars, width)
  instances = settings.instances_for(num_vars)
  steps, trace_s, notes, orders = {}, {}, {}, []
  # Each instance builds the contenders in a fresh random order: under XLA
  # a step's speed depended on when it was built (400 variables of 32x32:
  # the same program 7 points faster built before another than after it),
  # which a fixed order would hand the same contender in every run.
  rng = np.random.default_rng()
  for index in range(instances):
    orders.append([CONTENDERS[i] for i in rng.permutation(len(CONTENDERS))])
    for name in orders[-1]:
      step = make_step(name, mode, values, x,
                        strategy if mode == "mirrored" else None)
      if step is None:
        notes[name] = unavailable(name, mode)
        continue
      start = time.perf_counter()
      sync(step())
      if index == 0:
        trace_s[name] = time.perf_counter() - start
      sync(step())  # A second warm-up: some caches fill on the 2nd call.
      steps[(name, index)] = step
  reps = reps_for(steps, settings)
  measured = summarize(interleave_instances(steps, reps, settings.warmup))
  summary = {n: measured[n] for n in CONTENDERS if n in measured}
  for name in summary:
    summary[name]["first_call_s"] = trace_s[name]
  cell = {
      "workload": workload,
      "mode": mode,
      "num_vars": num_vars,
      "width": width,
      "reps": reps,
      "instances": instances,
      "build_orders": orders,
      "contenders": summary,
      "notes": notes,
  }
  log(cell_line(cell))
  del steps
  gc.collect()
  return cell


def cell_line(cell):
  parts = [f"{cell['workload']}[{cell['num_vars']}x{cell['width']}]",
           cell["mode"]]
  for name, s in cell["contenders"].items():
    if name == "bare":
      parts.append(f"bare={s['step_ms']:.2f}ms")
    else:
      parts.append(f"{name}={100 * s['overhead']:+.1f}%")
  parts.append("first calls " + " ".join(
      f"{s['first_call_s']:.1f}" for s in cell["contenders"].values()) + " s")
  return "  ".join(parts)


# ------------------------------------------------------------------ fit --


class _StepTimer(keras.callbacks.Callback):
  """Records the time between consecutive training batches' ends."""

  def __init__(self):
    super().__init__()
    self.ends = []

  def on_train_batch_end(self, batch, logs=None):
    self.ends.append(time.perf_counter())


def run_fit_cell(mode, settings, strategy, log):
  """Steps per second of `Model.fit` for every fit contender."""
  units = settings.fit_units
  rng = np.random.default_rng(1)
  n = BATCH * (settings.fit_steps + 1)
  x = rng.standard_normal((n, units)).astype(np.float32)
  y = rng.standard_normal((n, 1)).astype(np.float32)
  dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(
      BATCH, drop_remainder=True).repeat()
  models = {}
  trace_s = {}
  for name in FIT_CONTENDERS:
    model = contenders.fit_model(name, mode, units, strategy)
    start = time.perf_counter()
    model.fit(dataset, epochs=1, steps_per_epoch=2, verbose=0)
    trace_s[name] = time.perf_counter() - start
    models[name] = model

  # `fit` runs whole epochs, so its repetitions are blocks of steps (the
  # median gap between batches), in a fresh random order each time.
  times = {n: [] for n in models}
  names = list(models)
  rng = np.random.default_rng(0)
  for _ in range(settings.fit_reps):
    for name in (names[i] for i in rng.permutation(len(names))):
      timer = _StepTimer()
      models[name].fit(dataset, epochs=1, steps_per_epoch=settings.fit_steps,
                       verbose=0, callbacks=[timer])
      gaps = np.diff(timer.ends)
      times[name].append(float(np.median(gaps)))
  summary = summarize({n: [ts] for n, ts in times.items()})
  for name in summary:
    summary[name]["steps_per_s"] = 1e3 / summary[name]["step_ms"]
    summary[name]["first_call_s"] = trace_s[name]
  cell = {
      "workload": "fit",
      "mode": mode,
      "num_vars": len(models["bare"].trainable_variables),
      "width": units,
      "reps": settings.fit_reps,
      "instances": 1,
      "contenders": summary,
      "notes": {"tf_keras": "tf_keras is not installed"} if tf_keras is None
               else {},
  }
  log(cell_line(cell))
  return cell


# ---------------------------------------------------------------- memory --


_PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "memory_probe.py")


def probe_memory(name, mode, settings, device, source="rss"):
  """`memory_probe.py`'s figures for one contender, in a fresh process."""
  num_vars, width, steps = settings.memory
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env["PYTHONPATH"] = os.pathsep.join(
      [root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
  if name == "tf_keras":
    # tf_keras as a job using it would: the legacy Keras behind tf.keras.
    env["TF_USE_LEGACY_KERAS"] = "1"
  if source == "allocator" and device == "cpu":
    # Set here, the probe need not restart itself to turn it on.
    env["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
  proc = subprocess.run(
      [sys.executable, _PROBE, "--contender", name, "--mode", mode,
       "--vars", str(num_vars), "--width", str(width), "--steps", str(steps),
       "--device", device] + (["--source", source] if device == "cpu" else []),
      capture_output=True, text=True, env=env, check=False)
  if proc.returncode != 0:
    return {"contender": name, "error": proc.stderr.strip()[-2000:]}
  return json.loads(proc.stdout.strip().splitlines()[-1])


def bound_bytes(state, replicas=1):
  """What an exact skip-on-overflow may need over bare, per replica.

  The gradients (a third of Adam's `state` bytes), which it holds until the
  verdict, and max(5% of the optimizer state, 32 MiB).
  """
  return replicas * (state // 3 + max(0.05 * state, 32 * 2**20))


def run_memory(modes, settings, device, log):
  """Peak memory and step time of every contender, each in its own process.

  On CPU each contender runs twice, each time in a fresh process: once for
  the process's peak resident set, once for the peak of TensorFlow's own
  allocator (`memory_probe.py --source allocator`), which counts the bytes
  of live tensors and hardly moves between runs.

  Returns:
    Dict mode -> contender -> `memory_probe.py`'s result, with the extra
    peak over bare's (`extra_bytes`), on CPU the allocator run's result
    (`allocator`) and its extra (`allocator_extra_bytes`), and the bound
    bare + gradients + max(5% of the optimizer state, 32 MiB) as an extra
    over bare (`bound_bytes`).
  """
  out = {}
  for mode in modes:
    by_name = {}
    for name in MEMORY_CONTENDERS:
      by_name[name] = probe_memory(name, mode, settings, device)
      if device == "cpu" and "steps_peak_bytes" in by_name[name]:
        by_name[name]["allocator"] = probe_memory(
            name, mode, settings, device, source="allocator")
    bare = by_name["bare"]
    for result in by_name.values():
      if "steps_peak_bytes" not in result or "steps_peak_bytes" not in bare:
        continue
      result["extra_bytes"] = result["steps_peak_bytes"] - bare[
          "steps_peak_bytes"]
      result["bound_bytes"] = bound_bytes(result["optimizer_state_bytes"],
                                           result.get("replicas", 1))
      allocator = result.get("allocator", {})
      if "steps_peak_bytes" in allocator and "steps_peak_bytes" in bare.get(
          "allocator", {}):
        result["allocator_extra_bytes"] = (
            allocator["steps_peak_bytes"] -
            bare["allocator"]["steps_peak_bytes"])
    out[mode] = by_name
    log(f"memory[{settings.memory[0]}x{settings.memory[1]}]  {mode}  " +
        "  ".join(_memory_log(n, r) for n, r in by_name.items()))
  return out


def _memory_log(name, result):
  if "steps_peak_bytes" not in result:
    return f"{name}=n/a"
  text = f"{name}={result['steps_peak_bytes'] / 2**20:.0f}MiB"
  if "allocator_extra_bytes" in result:
    text += f"(alloc {result['allocator_extra_bytes'] / 2**20:+.0f})"
  return text


def run_v1_cell(workload, num_vars, width, settings, strategy, log):
  """Bare v1 Adam against our v1 loss-scale optimizer, in sessions."""
  del strategy  # Sessions run on one device.
  values, x = initial_values(num_vars, width)
  sessions, steps, trace_s = [], {}, {}
  for name in ("v1_bare", "v1_ours"):
    start = time.perf_counter()
    session, step = contenders.v1_graph(name, values, x)
    step()
    trace_s[name] = time.perf_counter() - start
    sessions.append(session)
    steps[name] = step
  reps = reps_for(steps, settings)
  times = interleave_steps(steps, reps, settings.warmup)
  summary = summarize({n: [ts] for n, ts in times.items()},
                       baseline="v1_bare")
  for name in summary:
    summary[name]["first_call_s"] = trace_s[name]
  for session in sessions:
    session.close()
  cell = {
      "workload": workload,
      "mode": "session",
      "num_vars": num_vars,
      "width": width,
      "reps": reps,
      "instances": 1,
      "contenders": summary,
      "notes": {},
  }
  log(f"{workload}[{num_vars}x{width}]  session  "
      f"v1_bare={summary['v1_bare']['step_ms']:.2f}ms  "
      f"v1_ours={100 * summary['v1_ours']['overhead']:+.1f}%")
  return cell
