"""`migrate`'s Keras 3 form of fixed and run-time loss scales.

TF 2.3/2.4's fixed wrapper becomes the inner optimizer with Keras 3's own
`loss_scale_factor`. These tests check where `migrate` writes that form,
where it must not, and that the optimizer it gives computes TF's steps bit
for bit (TF 2.21's own `tf.compat.v1` loss-scale optimizer, which has TF
2.x's formulas, is the oracle) eagerly, in `tf.function`, under two
replicas and in `fit`. The reductions (tests/cli/test_reductions.py) run
whole jobs with it against real TF 2.4.4/2.3.4.
"""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_mixed_precision_compat.cli import _rewrite
from tf_mixed_precision_compat.cli import _rewrite_fixed
from tf_mixed_precision_compat.cli import _rewrite_grads

_LOOP = (
    "with tf.GradientTape() as tape:",
    "  loss = opt.get_scaled_loss(model(x))",
    "grads = opt.get_unscaled_gradients(tape.gradient(loss, variables))",
    "opt.apply_gradients(zip(grads, variables))")


def _job(*lines):
  return "\n".join((
      "import tensorflow as tf",
      "import tf_mixed_precision_compat.auto",
      "from tensorflow.keras.mixed_precision import experimental as mp",
      "inner = tf.keras.optimizers.SGD()") + lines) + "\n"


def _migrated(source):
  """The migrated code: no manual use, idempotent, compiles."""
  code, findings = _rewrite.migrate_source(source)
  assert {f.status for f in findings} <= {"rewrite", "native"}, [
      (f.api, f.change) for f in findings if f.status == "manual"]
  assert _rewrite.migrate_source(code)[0] == code
  compile(code, "job.py", "exec")
  assert "tf_mixed_precision_compat" not in code
  return code


@pytest.mark.parametrize("wrap, scale", [
    ("tf.keras.mixed_precision.LossScaleOptimizer(inner, dynamic=False, "
     "initial_scale=128)", "128"),
    ("tf.keras.mixed_precision.LossScaleOptimizer(inner, initial_scale="
     "FLAGS.loss_scale, dynamic=False)", "FLAGS.loss_scale"),
    ("mp.LossScaleOptimizer(inner, 128)", "128"),
    ("mp.LossScaleOptimizer(inner, loss_scale=mp.FixedLossScale(1024))",
     "1024"),
])
def test_a_fixed_scale_becomes_the_inner_optimizers_loss_scale_factor(
    wrap, scale):
  code = _migrated(_job(f"opt = {wrap}", *_LOOP))
  assert f"opt = _fixed_loss_scale(inner, {scale})\n" in code
  # Keras 3 scales and unscales a loss_scale_factor as its wrapper does.
  assert "loss = opt.scale_loss(model(x))\n" in code
  assert "grads = tape.gradient(loss, variables)\n" in code
  assert "opt.apply_gradients(zip(grads, variables))" in code
  assert "optimizer.loss_scale_factor = _FixedScale(scale)" in code
  assert "import math\n" in code
  assert "_loss_scale_optimizer" not in code


@pytest.mark.parametrize("lines", [
    ("opt = mp.LossScaleOptimizer(inner, 128)", "model.compile(opt, 'mse')"),
    ("def make(inner):", "  opt = mp.LossScaleOptimizer(inner, 128)",
     "  return opt"),
    ("opt = mp.LossScaleOptimizer(inner, 128)",
     "opt.apply_gradients(zip(grads, variables))"),
])
def test_the_factor_goes_wherever_the_optimizer_goes(lines):
  # fit() scales with it, and callers in other files get an optimizer
  # whose scale_loss and apply do what TF's fixed wrapper did.
  code = _migrated(_job(*lines))
  assert "_fixed_loss_scale(inner, 128)" in code


def test_a_run_time_scale_builds_either_form_at_run_time():
  code = _migrated(_job(
      "class Runner:", "  def __init__(self, flags):",
      "    self.model = tf.keras.Sequential([tf.keras.layers.Dense(1)])",
      "    self.opt = mp.LossScaleOptimizer(inner, flags.loss_scale)",
      "  def step(self, x):",
      *("    " + line.replace("opt.", "self.opt.").replace(
          "variables", "self.model.trainable_variables") for line in _LOOP)))
  assert "self.opt = _loss_scale_optimizer(inner, flags.loss_scale)\n" in code
  # Keras 3's dynamic one, if that is what it builds, has its scale
  # variable before the first step, as TF's had.
  assert "self.opt.build(self.model.trainable_variables)\n" in code
  assert "def _loss_scale_optimizer(optimizer, loss_scale):" in code
  assert "loss = self.opt.scale_loss(model(x))" in code


@pytest.mark.parametrize("wrap", [
    "tf.keras.mixed_precision.LossScaleOptimizer(inner, dynamic=False, "
    "initial_scale=8)", "tf.keras.mixed_precision.LossScaleOptimizer(inner)",
    "make_optimizer()"])
def test_isinstance_checks_say_what_they_said(wrap):
  # Also where the file builds no fixed one: another file's may reach it.
  code, findings = _rewrite.migrate_source(_job(
      f"opt = {wrap}",
      "if isinstance(opt, tf.keras.mixed_precision.LossScaleOptimizer):",
      *("  " + line for line in _LOOP)))
  assert "if _is_loss_scaled(opt):\n" in code
  assert [f.status for f in findings if f.api.startswith("isinstance")] == [
      "rewrite"]
  assert "def _is_loss_scaled(optimizer):" in code


@pytest.mark.parametrize("lines, reason", [
    (("opt = mp.LossScaleOptimizer(inner, 128)", "print(opt.dynamic_counter)",
      *_LOOP), "reads the wrapper's `dynamic_counter`"),
    (("opt = mp.LossScaleOptimizer(inner, 1000)", *_LOOP),
     "1000 is not a power of two"),
    (("opt = tf.keras.mixed_precision.LossScaleOptimizer(inner, "
      "dynamic=False, initial_scale=3.7)", *_LOOP),
     "3.7 is not a power of two"),
])
def test_no_factor_where_it_would_not_keep_the_steps(lines, reason):
  code, findings = _rewrite.migrate_source(_job(*lines))
  (manual,) = [f for f in findings if f.status == "manual" and
               f.api.endswith("LossScaleOptimizer")]
  assert "loss_scale_factor" in manual.change
  assert reason in manual.change
  assert "_fixed_loss_scale" not in code


def _helpers():
  namespace = {"tf": tf, "keras": keras, "math": math}
  text = _rewrite_grads.HELPER + (
      _rewrite_fixed.FIXED_HELPER + _rewrite_fixed.IS_LOSS_SCALED_HELPER
      + _rewrite_fixed.RUN_TIME_HELPER).replace(
          "LOSS_SCALE_OPTIMIZER", "keras.optimizers.LossScaleOptimizer")
  exec(text, namespace)  # pylint: disable=exec-used
  return namespace


def _problem(dense_only=False):
  """float32 variables computing in float16, a dense and a sparse gradient.

  Replicas all-reduce IndexedSlices by concatenating them, so TF 2.x's
  sparse updates under two replicas were two half steps: `dense_only` for
  the comparison with one replica's oracle.
  """
  v = tf.Variable(np.linspace(-3, 3, 5).astype("float32"))
  table = tf.Variable(np.linspace(0.5, 2, 8).reshape(4, 2).astype("float32"))

  def loss():
    half = tf.cast(v, tf.float16)
    picked = tf.cast(tf.gather(table, [1, 3]), tf.float16)
    return tf.cast(tf.reduce_sum(half * half * tf.constant(0.37, tf.float16))
                   + tf.reduce_sum(picked * picked) *
                   tf.constant(1e-3, tf.float16), tf.float32)
  if dense_only:
    return [v], lambda: tf.cast(tf.reduce_sum(tf.cast(v, tf.float16) ** 2),
                                tf.float32)
  return [v, table], loss


def _oracle(scale, steps, lr=0.3, dense_only=False):
  """TF's own fixed loss-scale optimizer (TF 2.x's formulas), in a graph."""
  with tf.Graph().as_default():
    variables, loss = _problem(dense_only)
    oracle = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(lr), loss_scale=scale)
    step = oracle.minimize(loss(), var_list=variables)
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      for _ in range(steps):
        session.run(step)
      return session.run(variables)


def _keras_steps(opt, variables, loss, steps, function):
  def step():
    with tf.GradientTape() as tape:
      scaled = opt.scale_loss(loss())
    grads = tape.gradient(scaled, variables)
    opt.apply_gradients(zip(grads, variables))
  step = tf.function(step) if function else step
  for _ in range(steps):
    step()


@pytest.mark.parametrize("function", [False, True], ids=["eager", "function"])
@pytest.mark.parametrize("scale", [1024, 128, 1])
def test_the_factor_steps_as_tfs_fixed_wrapper_bit_for_bit(scale, function):
  helpers = _helpers()
  variables, loss = _problem()
  opt = helpers["_fixed_loss_scale"](keras.optimizers.SGD(0.3), scale)
  _keras_steps(opt, variables, loss, 3, function)
  for got, want in zip(variables, _oracle(scale, 3), strict=True):
    np.testing.assert_array_equal(got.numpy(), want)
  assert int(opt.iterations) == 3
  assert helpers["_is_loss_scaled"](opt)
  assert not helpers["_is_loss_scaled"](keras.optimizers.SGD())
  assert helpers["_is_loss_scaled"](keras.optimizers.LossScaleOptimizer(
      keras.optimizers.SGD()))


def test_the_factor_steps_as_tfs_fixed_wrapper_on_two_replicas(
    mirrored_strategy):
  helpers = _helpers()
  with mirrored_strategy.scope():
    variables, loss = _problem(dense_only=True)
    opt = helpers["_fixed_loss_scale"](keras.optimizers.SGD(0.3), 1024)

  @tf.function
  def step():
    def replica():
      with tf.GradientTape() as tape:
        # Each replica's loss is half the job's, as a global batch splits.
        scaled = opt.scale_loss(loss() / 2)
      opt.apply_gradients(zip(tape.gradient(scaled, variables), variables))
    mirrored_strategy.run(replica)

  for _ in range(3):
    step()
  for got, want in zip(variables, _oracle(1024, 3, dense_only=True),
                       strict=True):
    for replica in mirrored_strategy.experimental_local_results(got):
      np.testing.assert_array_equal(replica.numpy(), want)


def test_fit_scales_with_the_factor_and_applies_every_step():
  helpers = _helpers()
  keras.utils.set_random_seed(3)
  x = np.linspace(-1, 1, 16).reshape(8, 2).astype("float32")
  y = x.sum(axis=1, keepdims=True) * 3

  def trained(optimizer):
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer, "mse")
    model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    return model

  scaled = trained(helpers["_fixed_loss_scale"](keras.optimizers.SGD(0.1),
                                                2.0 ** 12))
  plain = trained(keras.optimizers.SGD(0.1))
  # float32 products by a power of two are exact: fit's steps are the
  # unscaled steps, bit for bit, every one applied.
  for a, b in zip(scaled.get_weights(), plain.get_weights(), strict=True):
    np.testing.assert_array_equal(a, b)
  assert int(scaled.optimizer.iterations) == 4


def test_the_factor_applies_non_finite_steps_as_tfs_fixed_wrapper_did():
  helpers = _helpers()
  v = keras.Variable(np.ones((2,), "float32"))
  opt = helpers["_fixed_loss_scale"](keras.optimizers.SGD(0.5), 64)
  grads = [tf.constant([np.inf, 64.0], tf.float32)]
  opt.apply_gradients(zip(grads, [v]))
  # TF 2.x's fixed scale applied non-finite steps too: no skip.
  assert np.isinf(v.numpy()[0]) and v.numpy()[1] == 0.5
  assert int(opt.iterations) == 1


@pytest.mark.parametrize("loss_scale, kind", [
    ("dynamic", keras.optimizers.LossScaleOptimizer), (128, None),
    (1.0, None)])
def test_run_time_helper_builds_what_tf_2_3_built(loss_scale, kind):
  helpers = _helpers()
  inner = keras.optimizers.SGD()
  opt = helpers["_loss_scale_optimizer"](inner, loss_scale)
  if kind is None:
    assert opt is inner
    assert opt.loss_scale_factor == float(loss_scale)
    assert 1 / opt.loss_scale_factor == 1 / float(loss_scale)
    assert float(helpers["_scale"](opt)) == float(loss_scale)
  else:
    assert isinstance(opt, kind) and opt.inner_optimizer is inner
    assert opt.initial_scale == 2 ** 15


@pytest.mark.parametrize("bad, message", [
    ("auto", "'dynamic' or a number"), (None, "'dynamic' or a number"),
    (True, "'dynamic' or a number"), ([128], "'dynamic' or a number"),
    (1000, "power of two"), (0.5, "at least 1"), (0, "power of two"),
    (-8, "power of two")])
def test_run_time_helper_rejects_what_it_was_not_written_for(bad, message):
  helpers = _helpers()
  inner = keras.optimizers.SGD()
  with pytest.raises(ValueError, match="loss_scale must be") as raised:
    helpers["_loss_scale_optimizer"](inner, bad)
  assert message in str(raised.value)
  assert inner.loss_scale_factor is None  # Nothing half-changed.
