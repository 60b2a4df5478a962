"""`migrate`'s plain-code form of fixed and run-time loss scales.

TF 2.3/2.4's fixed wrapper is, in a custom loop, the inner optimizer plus
two products; these tests check where `migrate` writes that form, where it
must not, and that its helpers compute TF's products bit for bit (TF
2.21's own `tf.compat.v1` loss-scale optimizer, which has the same
formulas, is the oracle). The reductions (tests/cli/test_reductions.py) run
whole jobs with it against real TF 2.4.4/2.3.4.
"""

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
    ("mp.LossScaleOptimizer(inner, loss_scale=mp.FixedLossScale(1000))",
     "1000"),
])
def test_a_fixed_scale_in_a_custom_loop_becomes_plain_code(wrap, scale):
  code = _migrated(_job(f"opt = {wrap}", *_LOOP))
  assert f"opt = _fixed_loss_scale(inner, {scale})\n" in code
  assert "loss = _scaled_loss(model(x), opt)\n" in code
  assert "grads = _unscaled(tape.gradient(loss, variables), opt)\n" in code
  assert "opt.apply_gradients(_as_given(zip(grads, variables), opt))" in code
  assert "1 / _loss_scale(optimizer)" in code  # Fixed scales unscale too.
  assert "_loss_scale_optimizer" not in code


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
  assert "loss = _scaled_loss(model(x), self.opt)" in code


def test_isinstance_checks_say_what_they_said():
  code = _migrated(_job(
      "opt = tf.keras.mixed_precision.LossScaleOptimizer(inner, "
      "dynamic=False, initial_scale=8)",
      "if isinstance(opt, tf.keras.mixed_precision.LossScaleOptimizer):",
      *("  " + line for line in _LOOP)))
  assert "if _is_loss_scaled(opt):\n" in code
  assert "def _is_loss_scaled(optimizer):" in code


@pytest.mark.parametrize("lines, reason", [
    (("opt = mp.LossScaleOptimizer(inner, 128)", "model.compile(opt, 'mse')",
      *_LOOP), "compiles a model"),
    (("def make(inner):", "  opt = mp.LossScaleOptimizer(inner, 128)",
      "  return opt", *_LOOP), "make returns it to its callers"),
    (("opt = mp.LossScaleOptimizer(inner, 128)", "print(opt.dynamic_counter)",
      *_LOOP), "reads the wrapper's `dynamic_counter`"),
    (("opt = mp.LossScaleOptimizer(inner, 128)",
      "opt.minimize(loss, variables)", *_LOOP), "minimize()"),
    (("opt = mp.LossScaleOptimizer(inner, 128)",
      "opt.apply_gradients(zip(grads, variables))"), "no loop of this file"),
])
def test_no_plain_form_where_the_file_does_not_hold_the_loop(lines, reason):
  code, findings = _rewrite.migrate_source(_job(*lines))
  (manual,) = [f for f in findings if f.status == "manual" and
               f.api.endswith("LossScaleOptimizer")]
  assert "a fixed loss scale has no Keras 3 counterpart" in manual.change
  assert reason in manual.change
  assert "_fixed_loss_scale" not in code


def _helpers():
  namespace = {"tf": tf, "keras": keras}
  text = _rewrite_grads.HELPER.replace("1 / _scale(", "1 / _loss_scale(")
  text += (_rewrite_fixed.FIXED_HELPER + _rewrite_fixed.IS_LOSS_SCALED_HELPER
           + _rewrite_fixed.RUN_TIME_HELPER).replace(
               "LOSS_SCALE_OPTIMIZER", "keras.optimizers.LossScaleOptimizer")
  exec(text, namespace)  # pylint: disable=exec-used
  return namespace


@pytest.mark.parametrize("scale", [1000, 128, 3.7])
def test_helpers_compute_tfs_fixed_products_bit_for_bit(scale):
  helpers = _helpers()
  # float32 variables computing in float16, a float32 loss: mixed_float16.
  v = tf.Variable(np.linspace(-3, 3, 5).astype("float32"))
  sparse_table = tf.Variable(np.ones((4, 2), "float32"))

  def loss():
    half = tf.cast(v, tf.float16)
    picked = tf.cast(tf.gather(sparse_table, [1, 3]), tf.float16)
    return tf.cast(tf.reduce_sum(half * half * tf.constant(0.37, tf.float16))
                   + tf.reduce_sum(picked) * tf.constant(1e-3, tf.float16),
                   tf.float32)

  oracle = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
      tf.compat.v1.train.GradientDescentOptimizer(1.0), loss_scale=scale)
  expected = oracle.compute_gradients(loss, [v, sparse_table])
  opt = helpers["_fixed_loss_scale"](keras.optimizers.SGD(1.0), scale)
  with tf.GradientTape() as tape:
    scaled = helpers["_scaled_loss"](loss(), opt)
  grads = helpers["_unscaled"](tape.gradient(scaled, [v, sparse_table]), opt)
  for (want, _), got in zip(expected, grads, strict=True):
    assert type(want) is type(got)
    want = tf.convert_to_tensor(want).numpy()
    np.testing.assert_array_equal(tf.convert_to_tensor(got).numpy(), want)
  callable_loss = helpers["_scaled_loss"](loss, opt)
  assert callable(callable_loss)
  np.testing.assert_array_equal(callable_loss().numpy(), scaled.numpy())
  assert helpers["_is_loss_scaled"](opt)
  assert not helpers["_is_loss_scaled"](keras.optimizers.SGD())
  assert helpers["_loss_scale"](opt).dtype == tf.float32


def test_the_plain_optimizer_applies_every_step_as_tfs_fixed_wrapper_did():
  helpers = _helpers()
  v = keras.Variable(np.ones((2,), "float32"))
  opt = helpers["_fixed_loss_scale"](keras.optimizers.SGD(0.5), 64)
  grads = [tf.constant([np.inf, 1.0], tf.float32)]
  opt.apply_gradients(helpers["_as_given"](zip(grads, [v]), opt))
  # TF 2.x's fixed scale applied non-finite steps too: no skip.
  assert np.isinf(v.numpy()[0]) and v.numpy()[1] == 0.5
  assert int(opt.iterations) == 1


@pytest.mark.parametrize("loss_scale, kind", [
    ("dynamic", keras.optimizers.LossScaleOptimizer), (128, None),
    (0.5, None)])
def test_run_time_helper_builds_what_tf_2_3_built(loss_scale, kind):
  helpers = _helpers()
  inner = keras.optimizers.SGD()
  opt = helpers["_loss_scale_optimizer"](inner, loss_scale)
  if kind is None:
    assert opt is inner
    assert float(helpers["_loss_scale"](opt)) == float(loss_scale)
  else:
    assert isinstance(opt, kind) and opt.inner_optimizer is inner
    assert opt.initial_scale == 2 ** 15


@pytest.mark.parametrize("bad", ["auto", None, True, [128]])
def test_run_time_helper_rejects_what_it_was_not_written_for(bad):
  helpers = _helpers()
  inner = keras.optimizers.SGD()
  with pytest.raises(ValueError, match="loss_scale must be 'dynamic' or a "
                     "number"):
    helpers["_loss_scale_optimizer"](inner, bad)
  assert id(inner) not in helpers["_FIXED_LOSS_SCALES"]
