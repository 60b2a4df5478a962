"""LossScaleOptimizer under Keras 3's `compile`/`fit`, both scaling conventions.

Also replays the TF 2.4.4-recorded trajectories (tools/gen_tf24_lso_fixtures.py)
and checks scale, counter, iterations and variables exactly.
"""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import testing
from tf_mixed_precision_compat.optimizers.loss_scale_optimizer import (
    LossScaleOptimizer)

INF = testing.INF
NAN = testing.NAN


def _load_sequences():
  with open(testing.fixture_path("keras_lso", "sequences_tf24.json")) as f:
    return json.load(f)


def _num(x):
  return float(x) if not isinstance(x, str) else float(x)


@pytest.fixture
def mixed_float16():
  previous = keras.config.dtype_policy()
  keras.config.set_dtype_policy("mixed_float16")
  yield
  keras.config.set_dtype_policy(previous)


# ----------------------------------------------------------- differential --


class TestAgainstTf244:

  @pytest.mark.parametrize("name", ["apply_sgd", "apply_sgd_momentum"])
  @pytest.mark.parametrize("mode", ["eager", "function", "jit"])
  def test_apply_sequence(self, name, mode):
    seq = _load_sequences()[name]
    v1 = tf.Variable(seq["initial_variables"][0])
    v2 = tf.Variable(seq["initial_variables"][1])
    opt = LossScaleOptimizer(
        keras.optimizers.SGD(seq["learning_rate"], momentum=seq["momentum"]),
        initial_scale=seq["initial_scale"],
        dynamic_growth_steps=seq["dynamic_growth_steps"])

    def step(g1, g2):
      opt.apply_gradients(zip([g1, g2], [v1, v2]))

    if mode != "eager":
      step = tf.function(step, jit_compile=(mode == "jit"))
    for expected in seq["steps"]:
      g1, g2 = expected["grads"]
      g1 = tf.constant([_num(x) for x in g1])
      g2 = None if g2 is None else tf.constant([_num(x) for x in g2])
      step(g1, g2)
      assert float(opt.loss_scale) == expected["loss_scale"]
      assert int(opt.dynamic_counter.numpy()) == expected["counter"]
      assert int(opt.iterations.numpy()) == expected["iterations"]
      for var, values in zip([v1, v2], expected["variables"]):
        if mode == "jit":
          # XLA fuses the momentum update (fewer roundings); the rounding
          # differences accumulate over the steps.
          np.testing.assert_allclose(var.numpy(), np.float32(values),
                                     rtol=1e-5, atol=1e-6)
        else:
          np.testing.assert_array_equal(var.numpy(), np.float32(values))

  @pytest.mark.parametrize("convention", ["tf24", "keras3"])
  def test_tape_sequence(self, convention):
    seq = _load_sequences()["tape_sgd"]
    var = tf.Variable(seq["initial_variables"][0])
    opt = LossScaleOptimizer(
        keras.optimizers.SGD(seq["learning_rate"]),
        initial_scale=seq["initial_scale"],
        dynamic_growth_steps=seq["dynamic_growth_steps"])

    @tf.function
    def step(c):
      with tf.GradientTape() as tape:
        loss = tf.reduce_sum(c * var * var)
        if convention == "tf24":
          scaled = opt.get_scaled_loss(loss)
        else:
          scaled = opt.scale_loss(loss)
      grads = tape.gradient(scaled, [var])
      if convention == "tf24":
        grads = opt.get_unscaled_gradients(grads)
      opt.apply_gradients(zip(grads, [var]))

    for expected in seq["steps"]:
      step(tf.constant(expected["coefficient"]))
      assert float(opt.loss_scale) == expected["loss_scale"]
      assert int(opt.dynamic_counter.numpy()) == expected["counter"]
      assert int(opt.iterations.numpy()) == expected["iterations"]
      np.testing.assert_array_equal(var.numpy(),
                                    np.float32(expected["variables"][0]))


# ------------------------------------------------------------ conventions --


def _replica_step(opt, var, convention):
  """One replica step computing loss = sum(c * var), c per replica."""

  def step(c):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(c * var)
      if convention == "keras3":
        scaled = opt.scale_loss(loss)
      elif convention == "mixed":
        scaled = opt.scale_loss(loss)
      else:
        scaled = opt.get_scaled_loss(loss)
    grads = tape.gradient(scaled, [var])
    if convention in ("tf24", "mixed"):
      grads = opt.get_unscaled_gradients(grads)
    if convention == "keras3":
      opt.apply(grads, [var])
    else:
      opt.apply_gradients(zip(grads, [var]))

  return step


class TestConventionsUnderReplicas:

  @pytest.mark.parametrize("convention", ["tf24", "keras3", "mixed"])
  @pytest.mark.parametrize("use_function", [False, True])
  def test_mirrored(self, mirrored_strategy, convention, use_function):
    with mirrored_strategy.scope():
      var = tf.Variable([1.0, 2.0])
      opt = LossScaleOptimizer(keras.optimizers.SGD(0.125),
                               initial_scale=8, dynamic_growth_steps=2)
      opt.build([var])
    step = _replica_step(opt, var, convention)

    def run(c):
      mirrored_strategy.run(step, args=(c,))

    if use_function:
      run = tf.function(run)
    expected_var = np.array([1.0, 2.0], np.float32)
    trajectory = [((1., 1.), True, 8., 1), ((1., INF), False, 4., 0),
                  ((NAN, 2.), False, 2., 0), ((0.5, 1.5), True, 2., 1),
                  ((1., 3.), True, 4., 0)]
    for step_no, (values, applied, scale, counter) in enumerate(trajectory):
      run(testing.per_replica(mirrored_strategy, values))
      if applied:
        expected_var -= np.float32(0.125) * np.float32(sum(values))
      np.testing.assert_array_equal(var.numpy(), expected_var)
      assert float(opt.loss_scale) == scale
      assert int(opt.dynamic_counter.numpy()) == counter
      assert int(opt.iterations.numpy()) == step_no + 1
      for component in mirrored_strategy.experimental_local_results(var):
        np.testing.assert_array_equal(component.numpy(), expected_var)

  def test_stale_mark_from_other_graph_is_ignored(self):
    var = tf.Variable([1.0])
    opt = LossScaleOptimizer(keras.optimizers.SGD(1.0), initial_scale=4)

    @tf.function
    def only_scale():
      return opt.scale_loss(tf.constant(1.0))

    only_scale()
    # An eager apply with unscaled gradients is not unscaled again.
    opt.apply_gradients([(tf.constant([1.0]), var)])
    np.testing.assert_array_equal(var.numpy(), [0.0])


# -------------------------------------------------------------------- fit --


def _make_model(seed=3):
  keras.utils.set_random_seed(seed)
  inputs = keras.Input((4,))
  hidden = keras.layers.Dense(8, activation="relu")(inputs)
  outputs = keras.layers.Dense(1, dtype="float32")(hidden)
  return keras.Model(inputs, outputs)


def _data(n=64):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(n, 4)).astype(np.float32)
  y = (x @ np.array([[1.], [-2.], [0.5], [3.]], np.float32)).astype(
      np.float32)
  return x, y


class _Recorder(keras.callbacks.Callback):

  def __init__(self, opt):
    super().__init__()
    self.opt = opt
    self.trace = []

  def on_train_batch_end(self, batch, logs=None):
    self.trace.append((float(self.opt.loss_scale),
                       int(self.opt.dynamic_counter.numpy()),
                       int(self.opt.iterations.numpy())))


def _custom_loop(model, opt, x, y, batch_size, strategy=None):
  """The loop `fit` must equal: TF 2.4's convention, per replica."""
  strategy = strategy or tf.distribute.get_strategy()

  def replica_step(xb, yb):
    with tf.GradientTape() as tape:
      y_pred = model(xb, training=True)
      loss = model.compute_loss(x=xb, y=yb, y_pred=y_pred, training=True)
      scaled = opt.get_scaled_loss(loss)
    grads = opt.get_unscaled_gradients(
        tape.gradient(scaled, model.trainable_variables))
    opt.apply_gradients(zip(grads, model.trainable_variables))

  @tf.function(jit_compile=False)
  def step(batch):
    strategy.run(replica_step, args=batch)

  dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)
  if (strategy is not tf.distribute.get_strategy() or
      tf.distribute.has_strategy()):
    dataset = strategy.experimental_distribute_dataset(dataset)
  trace = []
  for batch in dataset:
    step(batch)
    trace.append((float(opt.loss_scale), int(opt.dynamic_counter.numpy()),
                  int(opt.iterations.numpy())))
  return trace


def _fit_and_loop(strategy, initial_scale):
  x, y = _data()

  def build():
    model = _make_model()
    opt = LossScaleOptimizer(keras.optimizers.SGD(0.01, momentum=0.5),
                             initial_scale=initial_scale,
                             dynamic_growth_steps=3)
    model.compile(optimizer=opt, loss="mse", jit_compile=False)
    return model, opt

  with strategy.scope():
    fit_model, fit_opt = build()
  recorder = _Recorder(fit_opt)
  fit_model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0,
                callbacks=[recorder])
  with strategy.scope():
    loop_model, loop_opt = build()
    loop_opt.build(loop_model.trainable_variables)
  loop_trace = []
  for _ in range(2):
    loop_trace += _custom_loop(loop_model, loop_opt, x, y, 8,
                               strategy if strategy.num_replicas_in_sync > 1
                               else None)
  return fit_model, fit_opt, recorder.trace, loop_model, loop_trace


class TestFit:

  def test_not_wrapped_twice(self, mixed_float16):
    model = _make_model()
    opt = LossScaleOptimizer(keras.optimizers.SGD(0.01))
    model.compile(optimizer=opt, loss="mse")
    assert model.optimizer is opt

  @pytest.mark.parametrize("distributed", [False, True])
  def test_fit_equals_custom_loop(self, mixed_float16, mirrored_strategy,
                                  distributed):
    strategy = (mirrored_strategy if distributed
                else tf.distribute.get_strategy())
    # 2**20 overflows float16 gradients: the first steps are skipped, which
    # only happens if fit really scales the loss.
    fit_model, fit_opt, fit_trace, loop_model, loop_trace = _fit_and_loop(
        strategy, 2.**20)
    assert fit_model.optimizer is fit_opt
    assert fit_trace == loop_trace
    scales = [s for s, _, _ in fit_trace]
    assert scales[0] < 2.**20  # the first step overflowed
    assert [i for _, _, i in fit_trace] == list(range(1, len(fit_trace) + 1))
    assert max(c for _, c, _ in fit_trace) >= 1
    for a, b in zip(fit_model.get_weights(), loop_model.get_weights()):
      np.testing.assert_array_equal(a, b)
    assert fit_model.layers[1].kernel.dtype == "float32"
    assert fit_model.layers[1].compute_dtype == "float16"

  def test_skipped_steps_leave_weights(self, mixed_float16):
    x, y = _data(8)
    model = _make_model()
    opt = LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=2.**60)
    model.compile(optimizer=opt, loss="mse", jit_compile=False)
    before = model.get_weights()
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    for a, b in zip(before, model.get_weights()):
      np.testing.assert_array_equal(a, b)
    assert float(opt.loss_scale) == 2.**59
    assert int(opt.iterations.numpy()) == 1

  def test_keras_file_round_trip(self, tmp_path):
    x, y = _data(16)
    model = _make_model()
    opt = LossScaleOptimizer(keras.optimizers.Adam(0.01), initial_scale=2.**20,
                             dynamic_growth_steps=5)
    model.compile(optimizer=opt, loss="mse")
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    opt._loss_scale.current_loss_scale.assign(1536.)  # pylint: disable=protected-access
    opt.dynamic_counter.assign(3)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    lopt = loaded.optimizer
    assert type(lopt) is LossScaleOptimizer
    assert (lopt.initial_scale, lopt.dynamic_growth_steps) == (2.**20, 5)
    assert float(lopt.loss_scale) == 1536.
    assert int(lopt.dynamic_counter.numpy()) == 3
    assert int(lopt.iterations.numpy()) == int(opt.iterations.numpy())
    for a, b in zip(opt.variables, lopt.variables):
      np.testing.assert_array_equal(a.numpy(), b.numpy())
