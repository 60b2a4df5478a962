"""TF 2.3.4's experimental LossScaleOptimizer cases, for both Keras targets.

The fixture tests/fixtures/keras_lso/v1_tf23.json was recorded by
tools/gen_tf23_lso_v1_fixtures.py under TF 2.3.4; these helpers replay its
custom loop with this package's classes, reached as a TF 2.3 job reaches them
(`tf.keras.mixed_precision.experimental.LossScaleOptimizer` and
`tf.mixed_precision.experimental.*LossScale` after `install()`), so the same
code serves the Keras 3 and the tf_keras target.
"""

import json

import numpy as np
import tensorflow as tf

from tests import testing
from tests.loss_scale import tf23_custom_loss_scale

CASES = ("dynamic", "fixed", "multiplier_4", "custom")


def fixture():
  with open(testing.fixture_path("keras_lso", "v1_tf23.json")) as f:
    return json.load(f)


def custom_class():
  """The user `LossScale` of the fixture, on TF 2.3's public base class."""
  return tf23_custom_loss_scale.define(
      tf.mixed_precision.experimental.LossScale, tf)


def make_loss_scale(case):
  """The `loss_scale` argument of `case`, as the TF 2.3 job wrote it."""
  if case == "dynamic":
    return "dynamic"
  if case == "fixed":
    return 128
  if case == "multiplier_4":
    return tf.mixed_precision.experimental.DynamicLossScale(
        initial_loss_scale=8, increment_period=2, multiplier=4)
  return custom_class()(1024.)


def holder():
  """The fixture job's model: a layer whose weight `var` is the variable."""

  class Holder(tf.keras.layers.Layer):

    def __init__(self):
      super().__init__()
      self.var = self.add_weight(name="var", shape=(2,), initializer="zeros")

    def call(self, x):
      return x * self.var

  return Holder()


def make_optimizer(case):
  return tf.keras.mixed_precision.experimental.LossScaleOptimizer(
      tf.keras.optimizers.SGD(0.1, momentum=0.9), make_loss_scale(case))


def gradients():
  return [[float(x) for x in g] for g in fixture()["gradients"]]


def step_fn(opt, var):
  """The fixture job's step: TF 2.3's custom loop, `loss_scale()` called."""

  def step(grad):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(var * grad)
      scaled = opt.get_scaled_loss(loss)
    (scaled_grad,) = tape.gradient(scaled, [var])
    (unscaled,) = opt.get_unscaled_gradients([scaled_grad])
    scale_in_step = opt.loss_scale()
    opt.apply_gradients([(unscaled, var)])
    return scale_in_step

  return step


def _loss_scale_variables(opt):
  children = opt.loss_scale._trackable_children("checkpoint")  # pylint: disable=protected-access
  return {name: float(v.numpy()) for name, v in children.items()
          if isinstance(v, tf.Variable)}


def _as_float(x):
  return float(x) if not isinstance(x, str) else float(x)


def check_rows(opt, var, step, grads, expected_rows):
  """Runs `step` on `grads`, comparing every step with the TF 2.3.4 rows."""
  for i, (grad, row) in enumerate(zip(grads, expected_rows)):
    scale_in_step = step(tf.constant(grad, tf.float32))
    where = f"step {i + 1}"
    assert float(scale_in_step) == _as_float(row["scale_in_step"]), where
    assert float(opt.loss_scale()) == _as_float(row["loss_scale"]), where
    assert int(opt.iterations.numpy()) == row["iterations"], where
    np.testing.assert_array_equal(var.numpy(),
                                  np.float32(row["var"]), err_msg=where)
    if hasattr(opt, "get_slot"):  # tf_keras's current optimizers have none.
      np.testing.assert_array_equal(
          opt.get_slot(var, "momentum").numpy(), np.float32(row["momentum"]),
          err_msg=where)
    assert _loss_scale_variables(opt) == {
        k: _as_float(v) for k, v in row["loss_scale_variables"].items()
    }, where


def check_trajectory(opt, function, rows):
  """`opt` steps a fresh variable as TF 2.3.4's recorded `rows` did.

  Args:
    opt: The experimental LossScaleOptimizer of the case.
    function: Whether the step runs in a `tf.function`.
    rows: The case's recorded trajectory for that mode.
  """
  var = tf.Variable([1.0, -2.0])
  step = step_fn(opt, var)
  check_rows(opt, var, tf.function(step) if function else step,
             gradients(), rows)


def check_trajectory_mirrored(strategy, make_opt, rows):
  """The recorded `rows` again, the step run on the strategy's 2 replicas."""
  with strategy.scope():
    opt = make_opt()
    var = tf.Variable([1.0, -2.0])
  step = step_fn(opt, var)

  @tf.function
  def distributed(grad):
    # Each of the 2 replicas gets half the gradient: their sum is the step's.
    scale = strategy.run(step, args=(grad / 2.,))
    return strategy.experimental_local_results(scale)[0]

  check_rows(opt, var, distributed, gradients(), rows)


def check_resumes_checkpoint(case, opt):
  """`opt` restores TF 2.3.4's checkpoint of `case` and continues as it did."""
  data = fixture()
  record = data[case]
  model = holder()
  tf.train.Checkpoint(model=model, optimizer=opt).restore(
      testing.fixture_path("keras_lso", record["checkpoint"]["prefix"]))
  model(tf.ones([2]))  # Keras 3 layers restore once built.
  after = data["save_after"]
  rows = record["trajectory_eager"]
  assert float(opt.loss_scale()) == float(rows[after - 1]["loss_scale"])
  check_rows(opt, model.var, step_fn(opt, model.var),
             gradients()[after:], rows[after:])


def model_under_loss_scale_policy(build):
  """`(build(), policy)`: a model built under a TF 2.3 policy with a LossScale.

  The policy is mixed_float16 with a DynamicLossScale (initial 8, period 2,
  multiplier 4); the global policy is float32 again afterwards.
  """
  experimental = tf.keras.mixed_precision.experimental
  policy = experimental.Policy(
      "mixed_float16",
      loss_scale=tf.mixed_precision.experimental.DynamicLossScale(
          initial_loss_scale=8, increment_period=2, multiplier=4))
  experimental.set_policy(policy)
  try:
    model = build()
  finally:
    experimental.set_policy("float32")
  return model, policy


def fit_and_check_policy_loss_scale(model, policy):
  """One epoch of 2 steps; the policy's LossScale is the optimizer's."""
  model.fit(np.ones((4, 2), np.float32), np.ones((4, 1), np.float32),
            batch_size=2, epochs=1, verbose=0)
  # TF 2.3: the policy's LossScale is the optimizer's, one state, callable.
  assert model.optimizer.loss_scale == policy.loss_scale
  assert float(policy.loss_scale()) == float(model.optimizer.loss_scale()) == (
      32.)


# --- A second wrapper around one optimizer (tools/gen_double_wrap_fixtures.py
# recorded TF 2.4.4's and TF 2.3.4's refusals in double_wrap.json).

WRAPPERS = ("dynamic", "fixed", "tf23", "tf23_fixed")
WRAPPER_PAIRS = [(first, second) for first in WRAPPERS for second in WRAPPERS]


def wrap(kind, inner):
  """Wraps `inner` as a TF 2.3/2.4 job does (see the fixture's script)."""
  mp = tf.keras.mixed_precision
  if kind == "dynamic":
    return mp.LossScaleOptimizer(inner)
  if kind == "fixed":
    return mp.LossScaleOptimizer(inner, dynamic=False, initial_scale=8.)
  return mp.experimental.LossScaleOptimizer(
      inner, "dynamic" if kind == "tf23" else 8.)


def double_wrap_fixture():
  with open(testing.fixture_path("keras_lso", "double_wrap.json")) as f:
    return json.load(f)


def expected_refusal(first, second):
  """The `[type, message]` TF raised for `second` around `first`'s inner.

  The experimental class is TF 2.3's, whose checkpoint holds every loss
  scale, fixed ones too, under "loss_scale": with only experimental wrappers
  the record is TF 2.3.4's, else TF 2.4.4's, whose experimental class held
  no fixed scale; a fixed experimental wrapper with a dynamic one therefore
  clashes on "loss_scale" where TF 2.4.4 said "base_optimizer"
  (docs/api_differences.md).
  """
  data = double_wrap_fixture()
  if first.startswith("tf23") and second.startswith("tf23"):
    return data["tf23"][f"{first} {second}"]["alive"]
  kind, message = data["tf24"][f"{first} {second}"]["alive"]
  if {first, second} == {"dynamic", "tf23_fixed"}:
    message = message.replace("'base_optimizer'", "'loss_scale'")
  return kind, message


def check_second_wrapper_refused(first, second, make_inner, collected,
                                 context=None):
  """`second` around `first`'s inner raises as TF did; alive or collected.

  Args:
    first, second: Wrapper kinds (`WRAPPERS`).
    make_inner: Builds the inner optimizer.
    collected: Whether the first wrapper is deleted and garbage-collected
      before the second wrap.
    context: Optional context manager factory both wraps run in (a
      strategy's scope).
  """
  import contextlib  # pylint: disable=g-import-not-at-top
  import gc  # pylint: disable=g-import-not-at-top
  context = context or contextlib.nullcontext
  with context():
    inner = make_inner()
    kept = wrap(first, inner)
  if collected:
    del kept
    gc.collect()
  kind, message = expected_refusal(first, second)
  with context():
    try:
      wrap(second, inner)
    except Exception as e:  # pylint: disable=broad-except
      raised = e
    else:
      raise AssertionError(f"{second} around {first}'s inner: no error")
  assert type(raised).__name__ == kind
  # TF's text first, then the deliberate way.
  assert str(raised).startswith(message), str(raised)
  assert "type(opt).from_config(opt.get_config())" in str(raised)
  # A fresh copy of the same configuration is the deliberate way.
  copy = type(inner).from_config(inner.get_config())
  with context():
    wrapper = wrap(second, copy)
  assert wrapper.inner_optimizer is copy


def check_second_wrapper_refused_in_tf_function(first, second, inner,
                                                collected, name):
  """A second wrap traced in a `tf.function` raises TF's error naming `name`.

  Args:
    first, second: Wrapper kinds (`WRAPPERS`).
    inner: The inner optimizer.
    collected: Whether the first wrapper is garbage-collected first.
    name: The dependency name TF's message gives (`loss_scale` or
      `base_optimizer`).
  """
  import gc  # pylint: disable=g-import-not-at-top
  kept = wrap(first, inner)
  if collected:
    del kept
    gc.collect()

  @tf.function
  def wrap_again():
    wrap(second, inner)
    return tf.constant(1.)

  try:
    wrap_again()
  except ValueError as e:
    assert (f"Called Trackable._track_trackable() with name='{name}'"
            in str(e)), str(e)
  else:
    raise AssertionError(f"{second} around {first}'s inner: no error")
