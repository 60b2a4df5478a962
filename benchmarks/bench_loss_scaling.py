r"""Side-by-side benchmark of loss scaling optimizers.

Measures, in one process and with interleaved repetitions, the training step
time of:

* `bare`: the inner optimizer (Keras 3 Adam) without any loss scaling;
* `floor`: bare plus the least a loss scaler must do: scale the loss by a
  constant, unscale the gradients and check that all of them are finite
  (the verdict is returned, so it is computed, but gates nothing);
* `floor_gated`: the floor whose apply waits (a control dependency, no
  `cond`) for the verdict: the ordering every skip-on-overflow optimizer
  must pay, since no variable may change before all gradients are checked
  (or its old value must be kept). XLA orders ops by their data alone, so
  under `jit_compile` the gradients reach the apply through a select on the
  verdict instead (`where(finite, g, 0)`, fused into the update);
* `floor_dynamic`: `floor_gated` with a dynamic loss scale, as TF 2.4's
  design had: the loss scaled by a variable, the gradients unscaled by its
  reciprocal, and the scale and its good-steps counter updated from the
  verdict (the package's `_scaling.dynamic_update`, TF 2.4's arithmetic),
  the least a dynamic skip-on-overflow scaler must do;
* `floor_cond`: TF 2.4's design whole: `floor_dynamic` with its apply in a
  `tf.cond` on the verdict, so that an overflowing step is skipped (the
  floors before it apply every step). Not with replicas, where TF 2.4's
  conditional is ours' own step;
* `keras3`: Keras 3's `keras.optimizers.LossScaleOptimizer` (its own
  convention: `scale_loss`, scaled gradients to `apply`);
* `ours_dynamic` / `ours_fixed`: this package's TF 2.4 `LossScaleOptimizer`,
  dynamic and `dynamic=False`, used as TF 2.4 code uses it
  (`get_scaled_loss`, `get_unscaled_gradients`, `apply_gradients`);
* `tf_keras`: tf_keras's `LossScaleOptimizer`, when `tf_keras` is installed;
* in `tf.compat.v1` sessions: `tf.compat.v1.train.AdamOptimizer` bare and
  wrapped in our `MixedPrecisionLossScaleOptimizer` (dynamic).

The floors check the gradients with the package's own check, so that they
and ours differ only in what follows it. Every step but `floor`'s returns
the loss alone, as a training step does.

Workloads: "wide" (10 float32 variables of 1000x1000, a tanh MLP, batch 64),
"many" (400 variables of 32x32), "scaling" (10, 100 and 1000 variables of
64x64) and "fit" (a Keras 3 `mixed_float16` model trained with `fit`). Modes:
eager ("many" only), `tf.function`, `tf.function(jit_compile=True)` and
`MirroredStrategy` over two logical CPUs (configured at start-up; the
strategy itself is made only when the mirrored cells, which run after all
others, need it).

Repetitions are interleaved at the step level: each repetition calls every
contender's step once, in a fresh random order, and times each call on its
own, so machine noise slower than one repetition hits all contenders alike
and no contender always runs after the same one. Cells of up to
`--instances-max-vars` variables build several instances of every contender
(fresh variables, optimizer and trace; `--instances`): two instances of the
same step can differ by a few percent for as long as they live, which no
number of repetitions averages away. A contender's time
in a repetition is the median over its instances. Its overhead is the median
over repetitions of (its time / bare's time in the same repetition) - 1,
reported with the standard error of that median (bootstrap); the spread
(half the inter-quartile range of the ratio) and each instance's own
overhead are in the JSON.

Also reported: the first-call (trace) time of every contender with the most
variables and the overhead per variable across the "scaling" sizes.

Memory ("memory" workload): every contender of `MEMORY_CONTENDERS` runs
alone in a fresh process (`memory_probe.py`; tf_keras's with
`TF_USE_LEGACY_KERAS=1`), on 16 variables of 2048² with Adam (768 MiB of
optimizer state, 256 MiB of gradients): its peak memory over five steps
after the first call (CPU: the process's resident-set high-water mark,
reset after the first call; GPU:
`tf.config.experimental.get_memory_info("GPU:0")["peak"]`, reset likewise),
beside the median time of those steps. On CPU each contender runs again in
another fresh process for the peak of TensorFlow's own allocator (the bytes
of live tensors, steady between runs), on which the bound bare + gradients
+ max(5% of the state, 32 MiB) is judged. Eagerly, in `tf.function`, under
XLA and under MirroredStrategy (2 replicas), or the modes given by
`--modes`.

`--device gpu` runs every step on the first GPU (the first two under
MirroredStrategy) and measures memory from TensorFlow's GPU allocator; the
device is printed with the results.

Usage:

  python benchmarks/bench_loss_scaling.py [--quick] [--out results.json]
  python benchmarks/bench_loss_scaling.py --only memory [--device gpu]

`--quick` uses fewer repetitions and smaller sizes (reported in the output)
and finishes in under two minutes on two cores.
"""

import argparse
import functools
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position

tf.get_logger().setLevel("ERROR")  # Retracing notices of the many steps.

_CPU = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    _CPU, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # pylint: disable=g-import-not-at-top,wrong-import-position

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tf_mixed_precision_compat.optimizers import loss_scale_optimizer  # pylint: disable=g-import-not-at-top,wrong-import-position
from tf_mixed_precision_compat.optimizers import compat_v1_optimizer  # pylint: disable=g-import-not-at-top,wrong-import-position
from tf_mixed_precision_compat import loss_scale as loss_scale_module  # pylint: disable=g-import-not-at-top,wrong-import-position
from tf_mixed_precision_compat.loss_scale import _scaling  # pylint: disable=g-import-not-at-top,wrong-import-position

try:  # Optional contender.
  import tf_keras  # pylint: disable=g-import-not-at-top
except ImportError:
  tf_keras = None

CONTENDERS = ("bare", "floor", "floor_gated", "floor_dynamic", "floor_cond",
              "keras3", "ours_dynamic", "ours_fixed", "tf_keras")
FIT_CONTENDERS = ("bare", "keras3", "ours_dynamic", "ours_fixed")
MODES = ("eager", "function", "jit", "mirrored")
_SCALE = 2.**15
_BATCH = 64
_LR = 1e-4


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
      self.scaling = ((2, 16), (8, 16))
      self.reps, self.cell_s, self.warmup = 3, 0., 0
      self.instances, self.instances_max_vars = 1, None
      self.jit_max_vars = None
      self.mirrored_max_vars = None
      self.fit_reps, self.fit_steps, self.fit_units = 2, 3, 32
      self.memory = (4, 256, 2)
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

  def instances_for(self, num_vars):
    """Instances of each contender built for a cell of `num_vars`."""
    if self.instances_max_vars is not None and (
        num_vars > self.instances_max_vars):
      return 1
    return self.instances

  def as_dict(self):
    return {k: v for k, v in vars(self).items()}


# ------------------------------------------------------------- workloads --


def _initial_values(num_vars, width, seed=0):
  rng = np.random.default_rng(seed)
  values = [
      (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
      for _ in range(num_vars)
  ]
  x = rng.standard_normal((_BATCH, width)).astype(np.float32)
  return values, x


def _loss(variables, x):
  h = x
  for w in variables:
    h = tf.tanh(tf.matmul(h, w))
  return tf.reduce_mean(tf.square(h))


class _DynamicFloor:
  """`floor_dynamic` and `floor_cond`'s optimizer: Adam and a dynamic scale.

  The scale and counter are TF 2.4's (initial scale 2**15, growth every
  2000 finite steps by 2); under a strategy the first replica's update is
  kept, as TF 2.4's `ONLY_FIRST_REPLICA` variables did.
  """

  growth_steps = 2000
  multiplier = 2.

  def __init__(self):
    self.adam = keras.optimizers.Adam(_LR)
    first = tf.VariableAggregation.ONLY_FIRST_REPLICA
    self.scale = tf.Variable(_SCALE, trainable=False, aggregation=first)
    self.good_steps = tf.Variable(0, dtype=tf.int64, trainable=False,
                                  aggregation=first)

  def build(self, variables):
    self.adam.build(variables)


def _make_optimizer(name):
  """The optimizer of contender `name`, or None when it is unavailable."""
  if name in ("bare", "floor", "floor_gated"):
    return keras.optimizers.Adam(_LR)
  if name in ("floor_dynamic", "floor_cond"):
    return _DynamicFloor()
  if name == "keras3":
    return keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(_LR))
  if name == "ours_dynamic":
    return loss_scale_optimizer.LossScaleOptimizer(keras.optimizers.Adam(_LR))
  if name == "ours_fixed":
    return loss_scale_optimizer.LossScaleOptimizer(
        keras.optimizers.Adam(_LR), dynamic=False, initial_scale=_SCALE)
  if name == "tf_keras":
    if tf_keras is None:
      return None
    return tf_keras.mixed_precision.LossScaleOptimizer(
        tf_keras.optimizers.Adam(_LR))
  raise ValueError(f"unknown contender {name!r}")


def _floor_scale(opt):
  """The loss scale of a floor contender: a constant, or the variable."""
  return opt.scale if isinstance(opt, _DynamicFloor) else _SCALE


def _step_body(name, opt, variables, x, xla=False):
  """One training step of contender `name`, in replica context."""
  floors = ("floor", "floor_gated", "floor_dynamic", "floor_cond")
  with tf.GradientTape() as tape:
    loss = _loss(variables, x)
    if name in floors:
      target = loss * _floor_scale(opt)
    elif name == "keras3":
      target = opt.scale_loss(loss)
    elif name in ("ours_dynamic", "ours_fixed", "tf_keras"):
      target = opt.get_scaled_loss(loss)
    else:
      target = loss
  grads = tape.gradient(target, variables)
  if name in floors:
    inverse = 1. / _floor_scale(opt)
    grads = [g * inverse for g in grads]
    # The package's check, the cheapest found in each mode (under XLA one
    # reduction per dtype: one per gradient took minutes to compile 400
    # variables unless the verdict was also an output of the step), so
    # that the floors and ours differ only in what follows it.
    finite = _scaling.local_all_finite(grads)
    if name == "floor":
      # Returned so that it is computed: nothing else consumes it.
      opt.apply_gradients(zip(grads, variables))
      return loss, finite
    if isinstance(opt, _DynamicFloor):
      new_scale, new_count = _scaling.dynamic_update(
          opt.scale, opt.good_steps, finite, opt.growth_steps, opt.multiplier)
      opt.scale.assign(new_scale, read_value=False)
      opt.good_steps.assign(new_count, read_value=False)
      opt = opt.adam
    if name == "floor_cond":
      def apply():
        opt.apply_gradients(zip(grads, variables))
        return tf.constant(True)

      def skip():  # TF 2.4.4 counted a skipped step.
        opt.iterations.assign_add(1)
        return tf.constant(False)

      tf.cond(finite, apply, skip)
      return loss
    # What any skip-on-overflow optimizer must wait for: no variable may
    # change before every gradient is known finite. (Ordering only; the
    # apply is not actually skipped.) XLA schedules by data dependencies
    # alone, so there the verdict must flow into the gradients.
    if xla:
      grads = [tf.where(finite, g, 0.) for g in grads]
    with tf.control_dependencies([finite]):
      opt.apply_gradients(zip(grads, variables))
    # The loss alone, as every step but `floor`'s: under XLA a step that
    # also returned its verdict measured 1-2 points faster on "wide".
    return loss
  if name == "keras3":
    opt.apply(grads, variables)
    return loss
  if name in ("ours_dynamic", "ours_fixed", "tf_keras"):
    grads = opt.get_unscaled_gradients(grads)
  opt.apply_gradients(zip(grads, variables))
  return loss


def _unavailable(name, mode):
  """Why contender `name` is not measured in `mode`, or None if it is."""
  if name == "tf_keras" and tf_keras is None:
    return "tf_keras is not installed"
  if name == "floor_cond" and mode == "mirrored":
    # With replicas TF 2.4 took the verdict in cross-replica context and
    # applied in each replica inside the `cond`: that is ours' own step there.
    return "with replicas, TF 2.4's conditional is ours_dynamic's step"
  return None


def _make_step(name, mode, values, x_value, strategy):
  """A zero-argument callable running one step, or None if unavailable."""
  if _unavailable(name, mode) is not None:
    return None
  scope = strategy.scope() if strategy is not None else _NullScope()
  with scope:
    opt = _make_optimizer(name)
    variables = [tf.Variable(v) for v in values]
    # Slots are created up front, under the strategy's scope: creating them
    # inside the first replicated call is not supported by Keras 3.
    opt.build(variables)
  x = tf.constant(x_value)

  if mode == "eager":
    def step():
      return _step_body(name, opt, variables, x)
    return step
  if mode == "mirrored":
    def replicated():
      return strategy.run(
          lambda: _step_body(name, opt, variables, x))
    fn = tf.function(replicated)
  else:
    fn = tf.function(lambda: _step_body(name, opt, variables, x,
                                        xla=(mode == "jit")),
                     jit_compile=(mode == "jit"))
  return fn


class _NullScope:

  def __enter__(self):
    return self

  def __exit__(self, *args):
    return False


def _sync(result):
  for t in tf.nest.flatten(result, expand_composites=True):
    if hasattr(t, "values") and isinstance(t, tf.distribute.DistributedValues):
      for v in t.values:
        v.numpy()
    elif hasattr(t, "numpy"):
      t.numpy()


# --------------------------------------------------------------- timing --


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
      _sync(steps[key]())
      if rep >= warmup:
        times[key].append(time.perf_counter() - start)
  return times


def interleave_instances(steps, reps, warmup=2):
  """`interleave_steps` over steps keyed (name, instance), grouped by name.

  Returns:
    Dict name -> list (one per instance) of lists of seconds, as
    `_summarize` takes them.
  """
  times = {}
  for (name, _), seconds in interleave_steps(steps, reps, warmup).items():
    times.setdefault(name, []).append(seconds)
  return times


def _reps(steps, settings):
  """Repetitions for `steps`: fixed, or filling `settings.cell_s` seconds."""
  if settings.reps is not None:
    return settings.reps
  start = time.perf_counter()
  for step in steps.values():
    _sync(step())
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


def _summarize(times, baseline="bare"):
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
  values, x = _initial_values(num_vars, width)
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
      step = _make_step(name, mode, values, x,
                        strategy if mode == "mirrored" else None)
      if step is None:
        notes[name] = _unavailable(name, mode)
        continue
      start = time.perf_counter()
      _sync(step())
      if index == 0:
        trace_s[name] = time.perf_counter() - start
      _sync(step())  # A second warm-up: some caches fill on the 2nd call.
      steps[(name, index)] = step
  reps = _reps(steps, settings)
  measured = _summarize(interleave_instances(steps, reps, settings.warmup))
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
  log(_cell_line(cell))
  del steps
  gc.collect()
  return cell


def _cell_line(cell):
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


def _fit_model(name, mode, units, strategy):
  scope = strategy.scope() if mode == "mirrored" else _NullScope()
  with scope:
    # Layers compute in float16; the model itself keeps the float32 policy
    # so that Keras does not wrap the bare optimizer on `compile`.
    inputs = keras.Input((units,))
    h = inputs
    for _ in range(4):
      h = keras.layers.Dense(units, activation="tanh",
                             dtype="mixed_float16")(h)
    outputs = keras.layers.Dense(1, dtype="float32")(h)
    model = keras.Model(inputs, outputs)
    if name == "bare":
      opt = keras.optimizers.Adam(_LR)
    else:
      opt = _make_optimizer(name)
    model.compile(optimizer=opt, loss="mse", jit_compile=(mode == "jit"))
  return model


def run_fit_cell(mode, settings, strategy, log):
  """Steps per second of `Model.fit` for every fit contender."""
  units = settings.fit_units
  rng = np.random.default_rng(1)
  n = _BATCH * (settings.fit_steps + 1)
  x = rng.standard_normal((n, units)).astype(np.float32)
  y = rng.standard_normal((n, 1)).astype(np.float32)
  dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(
      _BATCH, drop_remainder=True).repeat()
  models = {}
  trace_s = {}
  for name in FIT_CONTENDERS:
    model = _fit_model(name, mode, units, strategy)
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
  summary = _summarize({n: [ts] for n, ts in times.items()})
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
  log(_cell_line(cell))
  return cell


# --------------------------------------------------------------- memory --

MEMORY_CONTENDERS = ("bare", "floor_gated", "keras3", "ours_dynamic",
                     "ours_fixed", "tf_keras")
_PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "memory_probe.py")


def _probe_memory(name, mode, settings, device, source="rss"):
  """`memory_probe.py`'s figures for one contender, in a fresh process."""
  num_vars, width, steps = settings.memory
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env["PYTHONPATH"] = os.pathsep.join(
      [root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
  if name == "tf_keras":
    # tf_keras as a job using it would: the legacy Keras behind tf.keras.
    env["TF_USE_LEGACY_KERAS"] = "1"
  proc = subprocess.run(
      [sys.executable, _PROBE, "--contender", name, "--mode", mode,
       "--vars", str(num_vars), "--width", str(width), "--steps", str(steps),
       "--device", device] + (["--source", source] if device == "cpu" else []),
      capture_output=True, text=True, env=env, check=False)
  if proc.returncode != 0:
    return {"contender": name, "error": proc.stderr.strip()[-2000:]}
  return json.loads(proc.stdout.strip().splitlines()[-1])


def _bound_bytes(state, replicas=1):
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
      by_name[name] = _probe_memory(name, mode, settings, device)
      if device == "cpu" and "steps_peak_bytes" in by_name[name]:
        by_name[name]["allocator"] = _probe_memory(
            name, mode, settings, device, source="allocator")
    bare = by_name["bare"]
    for result in by_name.values():
      if "steps_peak_bytes" not in result or "steps_peak_bytes" not in bare:
        continue
      result["extra_bytes"] = result["steps_peak_bytes"] - bare[
          "steps_peak_bytes"]
      result["bound_bytes"] = _bound_bytes(result["optimizer_state_bytes"],
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


def _mib(num_bytes, sign=True):
  return "" if num_bytes is None else (
      f"{num_bytes / 2**20:+.0f} MiB" if sign else
      f"{num_bytes / 2**20:.0f} MiB")


def _memory_markdown(memory):
  """The memory table: each contender alone in a process."""
  lines = [""]
  first = next((r for m in memory.values() for r in m.values()
                if "device" in r), None)
  if first is None:
    return lines + ["Memory: no contender ran (see the JSON for errors)."]
  state = first["optimizer_state_bytes"]
  on_cpu = first.get("source", "rss") == "rss"
  lines.append(
      f"Peak memory, each contender alone in a fresh process "
      f"({first['num_vars']} variables of {first['width']}², Adam: "
      f"{state / 2**20:.0f} MiB of optimizer state, "
      f"{state / 3 / 2**20:.0f} MiB of gradients; {first['steps']} steps "
      f"after the first call), measured on {first['device']}. Peak of the "
      "steps (reset after the first call) and its extra over bare's; step "
      "time: median of the same steps, in the same process" +
      ("; allocator: the same contender again in another fresh process, "
       "TensorFlow's CPU allocator's peak (live tensors) over bare's:"
       if on_cpu else ":"))
  lines.append("")
  if on_cpu:
    lines.append("| mode | contender | step | peak RSS | extra over bare | "
                 "allocator: extra over bare | within bound |")
    lines.append("|---|---|---|---|---|---|---|")
  else:
    lines.append("| mode | contender | step | peak | extra over bare | "
                 "within bound |")
    lines.append("|---|---|---|---|---|---|")
  for mode, by_name in memory.items():
    for name, r in by_name.items():
      if "steps_peak_bytes" not in r:
        why = r.get("skipped") or "failed (see JSON)"
        lines.append(f"| {mode} | {name} | {why} |" + " |" * (
            4 if on_cpu else 3))
        continue
      # Judged on the allocator's figure where there is one: the process's
      # resident set moves by tens of MiB between runs.
      extra = r.get("allocator_extra_bytes", r.get("extra_bytes"))
      within = "" if extra is None or name == "bare" else (
          "yes" if extra <= r["bound_bytes"] else "**no**")
      cells = [mode, name, f"{r['step_ms']:.1f} ms",
               _mib(r["steps_peak_bytes"], sign=False),
               _mib(r.get("extra_bytes"))]
      if on_cpu:
        cells.append(_mib(r.get("allocator_extra_bytes")))
      cells.append(within)
      lines.append("| " + " | ".join(cells) + " |")
  lines.append("")
  lines.append(
      f"Bound over bare: the gradients ({state / 3 / 2**20:.0f} MiB), which "
      "an exact skip-on-overflow holds until the verdict, + max(5% of the "
      f"state, 32 MiB) = {_bound_bytes(state) / 2**20:.0f} MiB" +
      (" (judged on the allocator's figure)." if on_cpu else "."))
  return lines


# ------------------------------------------------------------ v1 session --


def _v1_graph(name, values, x_value):
  graph = tf.Graph()
  with graph.as_default():
    variables = [tf.compat.v1.Variable(v, use_resource=True) for v in values]
    x = tf.constant(x_value)
    loss = _loss(variables, x)
    opt = tf.compat.v1.train.AdamOptimizer(_LR)
    if name == "v1_ours":
      opt = compat_v1_optimizer.MixedPrecisionLossScaleOptimizer(
          opt, loss_scale_module.DynamicLossScale())
    train_op = opt.minimize(loss, var_list=variables)
    init = tf.compat.v1.global_variables_initializer()
  session = tf.compat.v1.Session(graph=graph)
  session.run(init)

  def step():
    session.run(train_op)
  return session, step


def run_v1_cell(workload, num_vars, width, settings, strategy, log):
  """Bare v1 Adam against our v1 loss-scale optimizer, in sessions."""
  del strategy  # Sessions run on one device.
  values, x = _initial_values(num_vars, width)
  sessions, steps, trace_s = [], {}, {}
  for name in ("v1_bare", "v1_ours"):
    start = time.perf_counter()
    session, step = _v1_graph(name, values, x)
    step()
    trace_s[name] = time.perf_counter() - start
    sessions.append(session)
    steps[name] = step
  reps = _reps(steps, settings)
  times = interleave_steps(steps, reps, settings.warmup)
  summary = _summarize({n: [ts] for n, ts in times.items()},
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


# --------------------------------------------------------------- report --


def _pct(s):
  return f"{100 * s['overhead']:+.1f}% ±{100 * s['overhead_se']:.1f}"


def _label(cell):
  if cell["workload"] == "fit":
    return f"fit (mixed_float16, {cell['num_vars']} vars)"
  return f"{cell['workload']} ({cell['num_vars']}x{cell['width']}²)"


def markdown(results):
  """The report tables, as markdown text."""
  lines = []
  lines.append("Overhead = step time / bare step time - 1 (median over "
               "step-level interleaved repetitions, ± its standard error).")
  lines.append("")
  header = ["workload", "mode", "bare step"] + list(CONTENDERS[1:])
  lines.append("| " + " | ".join(header) + " |")
  lines.append("|" + "---|" * len(header))
  for cell in results["cells"]:
    if cell["mode"] == "session":
      continue
    c = cell["contenders"]
    bare = c["bare"]
    if cell["workload"] == "fit":
      base = f"{bare['step_ms']:.2f} ms ({bare['steps_per_s']:.0f} steps/s)"
    else:
      base = f"{bare['step_ms']:.2f} ms"
    row = [_label(cell), cell["mode"], base]
    for name in CONTENDERS[1:]:
      if name in c:
        row.append(_pct(c[name]))
      elif name in cell["notes"]:
        row.append("n/a¹")
      else:
        row.append("—")
    lines.append("| " + " | ".join(row) + " |")
  lines.append("")
  footnote = "— : not applicable (no floor or tf_keras run for `fit`)."
  reasons = sorted({f"{name} ({why})" for cell in results["cells"]
                    for name, why in cell["notes"].items()})
  if reasons:
    footnote = f"n/a¹: not measured: {'; '.join(reasons)}. " + footnote
  lines.append(footnote)
  v1 = [c for c in results["cells"] if c["mode"] == "session"]
  if v1:
    lines.append("")
    lines.append("tf.compat.v1 sessions: `MixedPrecisionLossScaleOptimizer` "
                 "(dynamic) around `tf.compat.v1.train.AdamOptimizer`.")
    lines.append("")
    lines.append("| workload | bare v1 Adam step | ours v1 overhead |")
    lines.append("|---|---|---|")
    for cell in v1:
      c = cell["contenders"]
      lines.append(f"| {_label(cell)} | {c['v1_bare']['step_ms']:.2f} ms | "
                   f"{_pct(c['v1_ours'])} |")
  if results.get("trace"):
    t = results["trace"]
    lines.append("")
    lines.append(f"First call (trace + build) with {t['num_vars']} variables, "
                 "tf.function:")
    lines.append("")
    lines.append("| contender | first call | / bare |")
    lines.append("|---|---|---|")
    for name, seconds in t["first_call_s"].items():
      lines.append(f"| {name} | {seconds:.2f} s | "
                   f"{seconds / t['first_call_s']['bare']:.2f}x |")
  if results.get("per_variable"):
    lines.append("")
    lines.append("Overhead per variable (µs per step per variable, "
                 "scaling workload):")
    lines.append("")
    pv = results["per_variable"]
    sizes = sorted({int(k) for m in pv.values() for k in m["ours_dynamic"]})
    lines.append("| mode | contender | " +
                 " | ".join(f"{s} vars" for s in sizes) + " |")
    lines.append("|---|---|" + "---|" * len(sizes))
    for mode, by_name in pv.items():
      for name in ("floor", "floor_gated", "floor_dynamic", "floor_cond",
                   "keras3", "ours_dynamic", "ours_fixed"):
        if name not in by_name:
          continue
        lines.append(f"| {mode} | {name} | " + " | ".join(
            f"{by_name[name].get(str(s), float('nan')):.2f}" for s in sizes) +
                     " |")
  if results.get("memory"):
    lines.extend(_memory_markdown(results["memory"]))
  return "\n".join(lines)


def _derived(results):
  """Trace-time, per-variable and memory summaries of the cells."""
  cells = results["cells"]
  scaling = [
      c for c in cells if c["workload"] == "scaling" and c["mode"] != "session"
  ]
  if scaling:
    biggest = max(c["num_vars"] for c in scaling)
    for c in scaling:
      if c["num_vars"] == biggest and c["mode"] == "function":
        results["trace"] = {
            "num_vars": biggest,
            "first_call_s": {
                n: s["first_call_s"] for n, s in c["contenders"].items()
            },
        }
    per_variable = {}
    for c in scaling:
      bare_ms = c["contenders"]["bare"]["step_ms"]
      for name, s in c["contenders"].items():
        if name == "bare":
          continue
        extra_us = s["overhead"] * bare_ms * 1e3
        per_variable.setdefault(c["mode"], {}).setdefault(
            name, {})[str(c["num_vars"])] = extra_us / c["num_vars"]
    results["per_variable"] = per_variable


def _device(kind):
  """What the steps run on, as printed."""
  if kind == "gpu":
    gpu = tf.config.list_physical_devices("GPU")[0]
    name = tf.config.experimental.get_device_details(gpu).get(
        "device_name", gpu.name)
    return f"GPU:0 ({name})"
  return f"CPU ({os.cpu_count()} CPUs; 2 logical TensorFlow CPU devices)"


def _mirrored_devices(kind):
  if kind == "gpu":
    count = len(tf.config.list_logical_devices("GPU"))
    return [f"/gpu:{i}" for i in range(min(count, 2))]
  return ["/cpu:0", "/cpu:1"]


def _machine():
  model = platform.processor()
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          model = line.split(":", 1)[1].strip()
          break
  except OSError:
    pass
  return {
      "cpu_model": model,
      "cpu_count": os.cpu_count(),
      "tensorflow": tf.__version__,
      "keras": keras.__version__,
      "python": platform.python_version(),
      "tf_keras": getattr(tf_keras, "__version__", None),
  }


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


def main(argv=None):
  parser, args = _parse_args(argv)
  settings = Settings(args.quick)
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
  only = set(filter(None, args.only.split(",")))

  started = time.perf_counter()

  def wanted(workload):
    return not only or workload in only

  modes = set(filter(None, args.modes.split(",")))

  def _modes(*names):
    return [m for m in names if not modes or m in modes]

  def log(line):
    print(f"[{time.perf_counter() - started:6.1f}s] {line}", file=sys.stderr,
          flush=True)

  # The cells in the table's order, as (mode, function of the strategy and
  # the log).
  plan = []
  if wanted("wide"):
    for mode in _modes("function", "jit", "mirrored"):
      plan.append((mode, functools.partial(
          run_cell, "wide", mode, *settings.wide, settings)))
  if wanted("many"):
    for mode in _modes("eager", "function", "jit", "mirrored"):
      plan.append((mode, functools.partial(
          run_cell, "many", mode, *settings.many, settings)))
  if wanted("scaling"):
    for mode in _modes("function", "jit", "mirrored"):
      for num_vars, width in settings.scaling:
        limit = {"jit": settings.jit_max_vars,
                 "mirrored": settings.mirrored_max_vars}.get(mode)
        if limit is not None and num_vars > limit:
          log(f"scaling[{num_vars}x{width}]  {mode}  skipped "
              f"(--{mode}-max-vars)")
          continue
        plan.append((mode, functools.partial(
            run_cell, "scaling", mode, num_vars, width, settings)))
  if wanted("fit"):
    for mode in _modes("function", "jit", "mirrored"):
      plan.append((mode, functools.partial(run_fit_cell, mode, settings)))
  if wanted("v1"):
    v1_sizes = [("wide", *settings.wide), ("many", *settings.many),
                ("scaling", *settings.scaling[-1])]
    for workload, num_vars, width in v1_sizes:
      plan.append(("session", functools.partial(
          run_v1_cell, workload, num_vars, width, settings)))

  # Once a MirroredStrategy exists, gated steps without one ran dearer in
  # the same process (under XLA, "wide" with ours and floor_gated about a
  # point further above the floor), which a single-device job never pays:
  # so the strategy is made only for the mirrored cells, and they run last.
  run_order = sorted(range(len(plan)), key=lambda i: plan[i][0] == "mirrored")
  strategy = None
  done, cells = {}, []
  device = _device(args.device)
  log(f"device: {device}")

  for index in run_order:
    mode, run = plan[index]
    if mode == "mirrored" and strategy is None:
      strategy = tf.distribute.MirroredStrategy(_mirrored_devices(args.device))
    with tf.device("/GPU:0" if args.device == "gpu" else "/CPU:0"):
      done[index] = run(strategy, log)
    cells = [done[i] for i in sorted(done)]
    # Written after each cell, so that a long run that dies (out of memory,
    # say) keeps what it measured.
    if args.out:
      with open(args.out, "w") as f:
        json.dump({"partial": True, "settings": settings.as_dict(),
                   "cells": cells}, f, indent=1)
  memory = {}
  if wanted("memory"):
    memory_modes = ([m for m in MODES if m in modes] if modes else
                    ["function"] if args.quick else
                    ["eager", "function", "jit", "mirrored"])
    memory = run_memory(memory_modes, settings, args.device, log)
  results = {
      "machine": dict(_machine(), device=device),
      "settings": settings.as_dict(),
      "command": "python benchmarks/bench_loss_scaling.py" +
                 (" --quick" if args.quick else ""),
      "cells": cells,
      "notes": {} if tf_keras is not None else {
          "tf_keras": "tf_keras is not installed; its LossScaleOptimizer is "
                      "not measured."},
  }
  _derived(results)
  results["memory"] = memory
  results["wall_s"] = time.perf_counter() - started
  text = markdown(results)
  print(text)
  m = results["machine"]
  print(f"\nDevice: {m['device']}.")
  print(f"Machine: {m['cpu_count']} CPUs, {m['cpu_model']}; TensorFlow "
        f"{m['tensorflow']}, Keras {m['keras']}; run took "
        f"{results['wall_s']:.0f} s.")
  if args.out:
    with open(args.out, "w") as f:
      json.dump(results, f, indent=1)
  return results


if __name__ == "__main__":
  main()
