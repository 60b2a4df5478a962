r"""What the loss-scaling benchmark measures: its workloads and contenders.

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

Workloads: a tanh MLP over float32 variables of width x width (batch 64),
and for `fit` a Keras 3 `mixed_float16` model. Importing this module gives
the CPU two logical TensorFlow devices (for the mirrored cells).
"""

import contextlib
import os
import sys

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
MEMORY_CONTENDERS = ("bare", "floor_gated", "keras3", "ours_dynamic",
                     "ours_fixed", "tf_keras")
MODES = ("eager", "function", "jit", "mirrored")
SCALE = 2.**15
BATCH = 64
LR = 1e-4

def initial_values(num_vars, width, seed=0):
  rng = np.random.default_rng(seed)
  values = [
      (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
      for _ in range(num_vars)
  ]
  x = rng.standard_normal((BATCH, width)).astype(np.float32)
  return values, x


def loss_of(variables, x):
  h = x
  for w in variables:
    h = tf.tanh(tf.matmul(h, w))
  return tf.reduce_mean(tf.square(h))


class DynamicFloor:
  """`floor_dynamic` and `floor_cond`'s optimizer: Adam and a dynamic scale.

  The scale and counter are TF 2.4's (initial scale 2**15, growth every
  2000 finite steps by 2); under a strategy the first replica's update is
  kept, as TF 2.4's `ONLY_FIRST_REPLICA` variables did.
  """

  growth_steps = 2000
  multiplier = 2.

  def __init__(self):
    self.adam = keras.optimizers.Adam(LR)
    first = tf.VariableAggregation.ONLY_FIRST_REPLICA
    self.scale = tf.Variable(SCALE, trainable=False, aggregation=first)
    self.good_steps = tf.Variable(0, dtype=tf.int64, trainable=False,
                                  aggregation=first)

  def build(self, variables):
    self.adam.build(variables)


def make_optimizer(name):
  """The optimizer of contender `name`, or None when it is unavailable."""
  if name in ("bare", "floor", "floor_gated"):
    return keras.optimizers.Adam(LR)
  if name in ("floor_dynamic", "floor_cond"):
    return DynamicFloor()
  if name == "keras3":
    return keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(LR))
  if name == "ours_dynamic":
    return loss_scale_optimizer.LossScaleOptimizer(keras.optimizers.Adam(LR))
  if name == "ours_fixed":
    return loss_scale_optimizer.LossScaleOptimizer(
        keras.optimizers.Adam(LR), dynamic=False, initial_scale=SCALE)
  if name == "tf_keras":
    if tf_keras is None:
      return None
    return tf_keras.mixed_precision.LossScaleOptimizer(
        tf_keras.optimizers.Adam(LR))
  raise ValueError(f"unknown contender {name!r}")


def floor_scale(opt):
  """The loss scale of a floor contender: a constant, or the variable."""
  return opt.scale if isinstance(opt, DynamicFloor) else SCALE


def step_body(name, opt, variables, x, xla=False):
  """One training step of contender `name`, in replica context."""
  floors = ("floor", "floor_gated", "floor_dynamic", "floor_cond")
  with tf.GradientTape() as tape:
    loss = loss_of(variables, x)
    if name in floors:
      target = loss * floor_scale(opt)
    elif name == "keras3":
      target = opt.scale_loss(loss)
    elif name in ("ours_dynamic", "ours_fixed", "tf_keras"):
      target = opt.get_scaled_loss(loss)
    else:
      target = loss
  grads = tape.gradient(target, variables)
  if name in floors:
    inverse = 1. / floor_scale(opt)
    grads = [g * inverse for g in grads]
    # The package's check, the cheapest found in each mode, so that the
    # floors and ours differ only in what follows it.
    finite = _scaling.local_all_finite(grads)
    if name == "floor":
      # Returned so that it is computed: nothing else consumes it.
      opt.apply_gradients(zip(grads, variables))
      return loss, finite
    if isinstance(opt, DynamicFloor):
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
    # The loss alone, as every step but `floor`'s (returning the verdict
    # too made XLA's step faster: docs/performance.md).
    return loss
  if name == "keras3":
    opt.apply(grads, variables)
    return loss
  if name in ("ours_dynamic", "ours_fixed", "tf_keras"):
    grads = opt.get_unscaled_gradients(grads)
  opt.apply_gradients(zip(grads, variables))
  return loss


def unavailable(name, mode):
  """Why contender `name` is not measured in `mode`, or None if it is."""
  if name == "tf_keras" and tf_keras is None:
    return "tf_keras is not installed"
  if name == "floor_cond" and mode == "mirrored":
    # With replicas TF 2.4 took the verdict in cross-replica context and
    # applied in each replica inside the `cond`: that is ours' own step there.
    return "with replicas, TF 2.4's conditional is ours_dynamic's step"
  return None


def make_step(name, mode, values, x_value, strategy):
  """A zero-argument callable running one step, or None if unavailable."""
  if unavailable(name, mode) is not None:
    return None
  scope = strategy.scope() if strategy is not None else contextlib.nullcontext()
  with scope:
    opt = make_optimizer(name)
    variables = [tf.Variable(v) for v in values]
    # Slots are created up front, under the strategy's scope: creating them
    # inside the first replicated call is not supported by Keras 3.
    opt.build(variables)
  x = tf.constant(x_value)

  if mode == "eager":
    def step():
      return step_body(name, opt, variables, x)
    return step
  if mode == "mirrored":
    def replicated():
      return strategy.run(
          lambda: step_body(name, opt, variables, x))
    fn = tf.function(replicated)
  else:
    fn = tf.function(lambda: step_body(name, opt, variables, x,
                                        xla=(mode == "jit")),
                     jit_compile=(mode == "jit"))
  return fn


def sync(result):
  for t in tf.nest.flatten(result, expand_composites=True):
    if hasattr(t, "values") and isinstance(t, tf.distribute.DistributedValues):
      for v in t.values:
        v.numpy()
    elif hasattr(t, "numpy"):
      t.numpy()


# ------------------------------------------ models for fit and v1 sessions --


def fit_model(name, mode, units, strategy):
  scope = strategy.scope() if mode == "mirrored" else contextlib.nullcontext()
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
      opt = keras.optimizers.Adam(LR)
    else:
      opt = make_optimizer(name)
    model.compile(optimizer=opt, loss="mse", jit_compile=(mode == "jit"))
  return model


def v1_graph(name, values, x_value):
  graph = tf.Graph()
  with graph.as_default():
    variables = [tf.compat.v1.Variable(v, use_resource=True) for v in values]
    x = tf.constant(x_value)
    loss = loss_of(variables, x)
    opt = tf.compat.v1.train.AdamOptimizer(LR)
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
