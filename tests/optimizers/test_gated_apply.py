"""The gated apply equals TF 2.4's conditional apply, bit for bit.

`_gated_apply.apply_when_finite` writes every tensor at once when all fit
the memory budget (the smallest in place, the others out of place) and
restores them on a non-finite step; with no large tensor it keeps the
variables that fit and masks the others' writes after the verdict; under
XLA it masks the writes of large tensors and defers small ones when there
are many. Otherwise the step is TF 2.4's conditional, its large updates two
at a time. Here every vetted Keras 3 optimizer runs the same gradient
sequence (with non-finite steps) through each way and through the plain
conditional path, with small and large variables, in tf.function and under
XLA; the bytes of every variable, slot, `iterations` and the loss scale must
be equal after every step. Eagerly and under MirroredStrategy the plain
conditional is used (`supported` says so) and gives the same trajectory.
(What the budget bounds: test_step_memory.py.)"""

import contextlib
from unittest import mock

from absl.testing import parameterized
import keras
import numpy as np
import tensorflow as tf

from tf_mixed_precision_compat import _version_check
from tf_mixed_precision_compat.optimizers import _gated_apply
from tf_mixed_precision_compat.optimizers import loss_scale_optimizer

# (3, 4) and (5,) are small (written in place); (128, 128) has exactly
# `out_of_place_min_elements` elements, so it is written out of place;
# (256, 256) has exactly `large_min_elements`, so it is large (in the
# conditional, or masked under XLA).
_SHAPES = ((3, 4), (256, 256), (5,), (128, 128))
_NON_FINITE_STEPS = (1, 4, 5)
# Optimizers whose XLA-compiled update rounds differently once masked.
_XLA_REORDERS = ("rmsprop_centered",)
# XLA does not promise two programs the same rounding, and its releases
# change how they fuse: on releases newer than the newest verified (the
# canary's nightlies: Nadam, Adam with clipnorm and a schedule, within
# 2.4e-7) values are held to closeness, the scale, counter and skipped steps
# to identity. Verified releases are held to bit-identity.
_XLA_UNVERIFIED = _version_check.parse(tf.__version__) > _version_check.parse(
    _version_check.NEWEST_VERIFIED["TensorFlow"])
_STEPS = 8

_OPTIMIZERS = {
    "adam": lambda: keras.optimizers.Adam(0.01),
    "adam_amsgrad": lambda: keras.optimizers.Adam(0.01, amsgrad=True),
    "sgd": lambda: keras.optimizers.SGD(0.1),
    "sgd_nesterov": lambda: keras.optimizers.SGD(0.1, momentum=0.9,
                                                 nesterov=True),
    "rmsprop_centered": lambda: keras.optimizers.RMSprop(
        0.01, momentum=0.5, centered=True),
    "adagrad": lambda: keras.optimizers.Adagrad(0.1),
    "adadelta": lambda: keras.optimizers.Adadelta(1.0),
    "adamax": lambda: keras.optimizers.Adamax(0.01),
    "nadam": lambda: keras.optimizers.Nadam(0.01),
    "lion": lambda: keras.optimizers.Lion(0.001),
    "adam_clipnorm_schedule": lambda: keras.optimizers.Adam(
        keras.optimizers.schedules.ExponentialDecay(0.01, 2, 0.5),
        clipnorm=1.0),
}


def _gradients(step, scale=1.0):
  rng = np.random.default_rng(step)
  grads = [(rng.standard_normal(s) * scale).astype(np.float32)
           for s in _SHAPES]
  if step in _NON_FINITE_STEPS:
    grads[step % len(grads)].flat[3] = np.inf if step % 2 else np.nan
  return grads


# "function" keeps every tensor's old value (they all fit the default
# budget); "function_partial" counts no tensor large and keeps the updates
# of (128, 128), (5,) and (3, 4), whose bytes and slots' fit 200 KiB, while
# (256, 256)'s waits for the verdict and masks its writes;
# "function_conditional" has budget 0: the step is then TF 2.4's
# conditional, its large updates two at a time. "jit_deferred" makes XLA
# steps defer their small tensors to the conditional (they do when a step
# writes many; these tests' steps write few, masked under plain "jit").
_MODES = ("function", "function_partial", "jit", "jit_deferred",
          "function_conditional")
_CONFIGS = {
    "function_partial": _gated_apply.StepConfig(
        overlap_budget=200 * 2**10, large_min_elements=1 << 30),
    "jit_deferred": _gated_apply.StepConfig(xla_masked_small_max=0),
    "function_conditional": _gated_apply.StepConfig(overlap_budget=0),
}


def _jit(mode):
  return mode.startswith("jit")


def _as_mode(mode):
  """Steps traced in this block use `mode`'s `StepConfig`."""
  if mode not in _CONFIGS:
    return contextlib.nullcontext()
  return mock.patch.object(_gated_apply, "default_config",
                           return_value=_CONFIGS[mode])


def _differing(got, want):
  """Indices of the steps and tensors whose bytes differ (no slow diffs)."""
  return [(step, i) for step, (g, w) in enumerate(zip(got, want))
          for i, (a, b) in enumerate(zip(g, w)) if a != b]


# Where `_state` puts `iterations`: the optimizer's first variable, after
# the model's.
_ITERATIONS = len(_SHAPES)


def _state(opt, variables):
  """Bytes of every variable, slot, counter and the loss scale."""
  tensors = list(variables) + list(opt.variables) + [opt.loss_scale]
  return [np.asarray(t).tobytes() for t in tensors]


def _run(make_inner, mode, strategy=None, gated=True):
  """States after each step of a dynamic LossScaleOptimizer."""
  scope = strategy.scope() if strategy else contextlib.nullcontext()
  with scope:
    rng = np.random.default_rng(42)
    variables = [tf.Variable(rng.standard_normal(s).astype(np.float32))
                 for s in _SHAPES]
    opt = loss_scale_optimizer.LossScaleOptimizer(
        make_inner(), initial_scale=8., dynamic_growth_steps=2)
    opt.build(variables)

  def apply(grads):
    opt.apply_gradients(zip(grads, variables))

  if mode == "mirrored":
    # Each replica gets half the gradient; their exact sum is the gradient.
    # (Computed in the replica, on its device.)
    step = tf.function(lambda g: strategy.run(
        lambda: apply([tf.identity(x) * 0.5 for x in g])))
  elif mode == "eager":
    step = apply
  else:
    step = tf.function(apply, jit_compile=_jit(mode))
  states = []
  patch = (mock.patch.object(_gated_apply, "supported", return_value=False)
           if not gated else contextlib.nullcontext())
  with patch, _as_mode(mode):
    for i in range(_STEPS):
      step([tf.constant(g) for g in _gradients(i)])
      states.append(_state(opt, variables))
  return states


class GatedApplyTest(parameterized.TestCase):

  @parameterized.named_parameters(
      (f"{name}_{mode}", name, mode)
      for name in _OPTIMIZERS for mode in _MODES)
  def test_bit_identical_to_the_conditional_apply(self, name, mode):
    calls = []

    def spy(*args):
      calls.append(1)
      return real(*args)

    used = ("large_updates_two_at_a_time" if mode == "function_conditional"
            else "apply_when_finite")
    real = getattr(_gated_apply, used)
    with mock.patch.object(_gated_apply, used, spy):
      gated = _run(_OPTIMIZERS[name], mode)
    self.assertTrue(calls, f"{used} was not used")
    reference = _run(_OPTIMIZERS[name], mode, gated=False)
    self.assertLen(gated, _STEPS)
    if _jit(mode) and (name in _XLA_REORDERS or _XLA_UNVERIFIED):
      # XLA compiles the masked and the conditional update differently, and
      # the centered denominator (a difference of near-equal numbers)
      # magnifies the rounding; XLA's conditional differs from the
      # uncompiled apply just as much. The scale, the counter and the
      # skipped steps stay exact.
      exact = lambda states: [(s[_ITERATIONS], s[-1]) for s in states]
      self.assertEqual(exact(gated), exact(reference))
      for got, want in zip(gated, reference):
        for a, b in zip(got, want):
          np.testing.assert_allclose(np.frombuffer(a, np.float32),
                                     np.frombuffer(b, np.float32),
                                     rtol=1e-4, atol=1e-6)
      return
    self.assertEqual(_differing(gated, reference), [])

  @parameterized.product(mode=_MODES,
                         name=("adam", "sgd_nesterov", "adadelta"))
  def test_non_finite_step_changes_only_iterations_and_scale(self, mode,
                                                              name):
    self.enter_context(_as_mode(mode))
    rng = np.random.default_rng(0)
    variables = [tf.Variable(rng.standard_normal(s).astype(np.float32))
                 for s in _SHAPES]
    opt = loss_scale_optimizer.LossScaleOptimizer(_OPTIMIZERS[name]())
    opt.build(variables)
    step = tf.function(lambda g: opt.apply_gradients(zip(g, variables)),
                       jit_compile=_jit(mode))
    step([tf.constant(g) for g in _gradients(0)])
    # Negative zeros must survive a skipped step too (x + 0. would turn
    # them positive). Adam subtracts from its variables, Adadelta adds to
    # them, SGD with momentum assigns its momentum.
    for v in variables + [w for w in opt.inner_optimizer.variables
                          if w.dtype == "float32" and len(w.shape)]:
      value = np.array(v)
      value.flat[::2] = -0.
      v.assign(value)
    before = [np.asarray(t).tobytes() for t in list(variables) +
              [w for w in opt.inner_optimizer.variables
               if w is not opt.iterations]]
    iterations = int(opt.iterations.numpy())
    for bad in (np.nan, np.inf, -np.inf):
      grads = _gradients(0)
      grads[1][7, 9] = bad  # a deferred (large) gradient
      grads[0][0, 0] = 1.0
      step([tf.constant(g) for g in grads])
      grads = _gradients(0)
      grads[0][2, 1] = bad  # a small one
      step([tf.constant(g) for g in grads])
      grads = _gradients(0)
      grads[3][100, 5] = bad  # one written out of place
      step([tf.constant(g) for g in grads])
    after = [np.asarray(t).tobytes() for t in list(variables) +
             [w for w in opt.inner_optimizer.variables
              if w is not opt.iterations]]
    self.assertEqual(_differing([before], [after]), [])
    self.assertEqual(int(opt.iterations.numpy()), iterations + 9)
    self.assertEqual(float(opt.loss_scale.numpy()), 2.**15 / 2.**9)

  @parameterized.parameters("eager", "mirrored")
  def test_other_modes_use_the_conditional_with_the_same_result(self, mode):
    strategy = (tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
                if mode == "mirrored" else None)
    with mock.patch.object(_gated_apply, "apply_when_finite") as gated:
      got = _run(_OPTIMIZERS["adam"], mode, strategy=strategy)
    gated.assert_not_called()
    want = _run(_OPTIMIZERS["adam"], "function")
    self.assertLen(got, _STEPS)
    self.assertEqual(_differing(got, want), [])

  @parameterized.parameters(*_MODES)
  def test_a_variable_written_twice_in_one_step(self, mode):
    # Listing a variable twice makes the optimizer write it and its slots
    # twice; the second write must build on the first, and a non-finite step
    # must restore the value from before both, not the one in between.
    def run(gated):
      variables = [
          tf.Variable(np.linspace(-1., 1., np.prod(s), dtype=np.float32)
                      .reshape(s)) for s in _SHAPES]
      opt = loss_scale_optimizer.LossScaleOptimizer(keras.optimizers.Adam(0.1))
      opt.build(variables)
      step = tf.function(
          lambda g, h: opt.apply_gradients(
              list(zip(g, variables)) + list(zip(h, variables))),
          jit_compile=_jit(mode))
      patch = (contextlib.nullcontext() if gated else mock.patch.object(
          _gated_apply, "supported", return_value=False))
      states = []
      with patch, _as_mode(mode):
        for i, bad in enumerate((1., np.inf, 1., np.nan, 1.)):
          first = [tf.fill(s, 0.5 * i + 1.) for s in _SHAPES]
          second = [tf.fill(s, -2. * bad) for s in _SHAPES]
          step(first, second)
          states.append(_state(opt, variables))
      return states

    gated, reference = run(True), run(False)
    self.assertLen(gated, 5)
    self.assertNotEqual(gated[0], gated[2])
    self.assertEqual(gated[1][:_ITERATIONS], gated[0][:_ITERATIONS])
    self.assertEqual(_differing(gated, reference), [])

  def test_writes_in_place_below_the_threshold_and_out_of_place_above(self):
    small, medium = (3, 4), (128, 128)
    variables = [tf.Variable(tf.zeros(s)) for s in (small, medium)]
    opt = loss_scale_optimizer.LossScaleOptimizer(keras.optimizers.Adam(0.01))
    opt.build(variables)
    step = tf.function(lambda g: opt.apply_gradients(zip(g, variables)))
    graph = step.get_concrete_function(
        [tf.TensorSpec(v.shape) for v in variables]).graph
    writes = {}
    for op in graph.get_operations():
      if op.type.startswith("Assign") and op.type.endswith("VariableOp"):
        shape = tuple(op.inputs[1].shape)
        writes.setdefault(shape, []).append(op)
    # Adam writes m and v with assign_add and the variable with assign_sub.
    self.assertCountEqual([op.type for op in writes[small]], [
        "AssignAddVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"])
    self.assertEqual([op.type for op in writes[medium]],
                     ["AssignVariableOp"] * 3)
    # The assign is the only consumer of the new value, so the variable can
    # adopt its buffer rather than copy it.
    for op in writes[medium]:
      self.assertEqual(op.inputs[1].consumers(), [op])

  @parameterized.parameters(("jit", False), ("jit_deferred", True))
  def test_under_xla_few_small_tensors_are_masked_many_deferred(
      self, mode, conditional):
    variables = [tf.Variable(tf.zeros(s)) for s in _SHAPES]
    opt = loss_scale_optimizer.LossScaleOptimizer(keras.optimizers.Adam(0.01))
    opt.build(variables)
    step = tf.function(lambda g: opt.apply_gradients(zip(g, variables)),
                       jit_compile=True)
    with _as_mode(mode):
      graph = step.get_concrete_function(
          [tf.TensorSpec(v.shape) for v in variables]).graph
    types = [op.type for op in graph.get_operations()]
    # Masked: a select in each of Adam's three writes of every variable, and
    # no conditional (not even one re-assigning masked slots); deferred: the
    # small ones assigned by the commit's conditional.
    self.assertEqual(bool({"If", "StatelessIf"} & set(types)), conditional)
    if conditional:
      self.assertLess(types.count("SelectV2"), 3 * len(_SHAPES))
    else:
      self.assertGreaterEqual(types.count("SelectV2"), 3 * len(_SHAPES))

  def test_keras_variables_of_a_model(self):
    def run(gated):
      keras.utils.set_random_seed(3)
      model = keras.Sequential([keras.Input((300,)), keras.layers.Dense(256),
                                keras.layers.Dense(3)])
      opt = loss_scale_optimizer.LossScaleOptimizer(keras.optimizers.Adam(0.01))
      opt.build(model.trainable_variables)
      x = tf.constant(np.random.default_rng(0).standard_normal(
          (4, 300)).astype(np.float32))

      @tf.function
      def step(poison):
        with tf.GradientTape() as tape:
          loss = tf.reduce_sum(model(x) ** 2) * poison
          scaled = opt.get_scaled_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        opt.apply_gradients(zip(opt.get_unscaled_gradients(grads),
                                model.trainable_variables))

      patch = (contextlib.nullcontext() if gated else mock.patch.object(
          _gated_apply, "supported", return_value=False))
      states = []
      with patch:
        for poison in (1., np.inf, 1., 1.):
          step(tf.constant(poison))
          states.append([np.asarray(v).tobytes()
                         for v in model.weights + opt.variables])
      return states

    gated, reference = run(True), run(False)
    self.assertLen(gated, 4)
    self.assertEqual(_differing(gated, reference), [])

  def test_write_methods_are_restored_even_after_an_error(self):
    inner = keras.optimizers.Adam(0.01)
    variables = [tf.Variable(tf.ones(s)) for s in _SHAPES]
    inner.build(variables)
    config = _gated_apply.StepConfig()

    @tf.function
    def step():
      grads = [tf.ones(s) for s in _SHAPES]
      _gated_apply.apply_when_finite(inner, grads, variables,
                                     tf.constant(True), config)
      with mock.patch.object(type(inner), "update_step",
                             side_effect=RuntimeError("boom")):
        with self.assertRaisesRegex(RuntimeError, "boom"):
          _gated_apply.apply_when_finite(inner, grads, variables,
                                         tf.constant(True), config)

    step()
    for name in ("assign", "assign_add", "assign_sub", "update_step"):
      self.assertNotIn(name, vars(inner))
    self.assertEqual(int(inner.iterations.numpy()), 1)


class SupportedTest(parameterized.TestCase):

  def _check(self, inner, grads=None, variables=None, expect=False,
             jit_compile=False):
    variables = variables or [tf.Variable(tf.ones([2]))]
    grads = grads or [tf.ones([2])]
    results = []

    @tf.function(jit_compile=jit_compile)
    def traced():
      results.append(_gated_apply.supported(inner, grads, variables))
      return tf.constant(0)

    traced()
    self.assertEqual(results, [expect])

  def test_vetted_optimizer_in_a_function(self):
    self._check(keras.optimizers.Adam(), expect=True)

  def test_not_eagerly(self):
    self.assertFalse(_gated_apply.supported(
        keras.optimizers.Adam(), [tf.ones([2])], [tf.Variable(tf.ones([2]))]))

  def test_under_xla(self):
    self._check(keras.optimizers.Adam(), jit_compile=True, expect=True)

  def test_not_under_a_strategy(self):
    with tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
      self._check(keras.optimizers.Adam())

  @parameterized.named_parameters(
      ("weight_decay", lambda: keras.optimizers.AdamW()),
      ("adam_weight_decay", lambda: keras.optimizers.Adam(weight_decay=0.1)),
      ("ema", lambda: keras.optimizers.Adam(use_ema=True)),
      ("accumulation", lambda: keras.optimizers.Adam(
          gradient_accumulation_steps=2)),
      ("subclass", lambda: type("MyAdam", (keras.optimizers.Adam,), {})()),
      ("keras3_wrapper", lambda: keras.optimizers.LossScaleOptimizer(
          keras.optimizers.Adam())),
  )
  def test_unvetted_optimizers(self, make):
    self._check(make())

  def test_sparse_gradients(self):
    self._check(keras.optimizers.Adam(), grads=[tf.IndexedSlices(
        tf.ones([1]), tf.constant([0]), tf.constant([2]))])

  def test_constrained_variable(self):
    self._check(keras.optimizers.Adam(), variables=[tf.Variable(
        tf.ones([2]), constraint=lambda v: v)])


if __name__ == "__main__":
  from absl.testing import absltest  # pylint: disable=g-import-not-at-top
  absltest.main()
