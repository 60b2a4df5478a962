"""Graph/eager and strategy plumbing shared by the ported TF 2.4 tests.

TF's own tests ran each case in a TF1 graph and eagerly
(`run_in_graph_and_eager_modes`) and with the default strategy and a
MirroredStrategy; here a case takes `mode` and `strategy` parameters and uses
`Evaluator` where TF used `self.evaluate`.
"""

import contextlib

import keras
import numpy as np
import tensorflow as tf

MODES = ("graph", "eager")
STRATEGIES = ("default", "mirrored")
NUM_REPLICAS = 2


def make_strategy(name):
  """The default strategy, or a MirroredStrategy over the 2 logical CPUs."""
  if name == "default":
    return tf.distribute.get_strategy()
  strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
  assert strategy.num_replicas_in_sync == NUM_REPLICAS
  return strategy


class Evaluator:
  """Evaluates tensors in a tf.compat.v1 Session (graph mode) or eagerly."""

  def __init__(self, session):
    self.session = session

  @property
  def graph_mode(self):
    return self.session is not None

  def __call__(self, value):
    if self.session is not None:
      return self.session.run(value)
    return tf.nest.map_structure(_to_numpy, value)

  def init(self):
    """Initializes the graph's global variables (nothing eagerly)."""
    if self.session is not None:
      self.session.run(tf.compat.v1.global_variables_initializer())

  def run_if_graph(self, op):
    """Runs `op` in graph mode; eagerly it already ran when it was built."""
    if self.session is not None:
      self.session.run(op)


def _to_numpy(value):
  if isinstance(value, (tf.Tensor, tf.Variable)):
    return value.numpy()
  if hasattr(value, "numpy"):
    return value.numpy()
  return np.asarray(value) if value is not None else None


@contextlib.contextmanager
def mode_context(mode):
  """Yields an Evaluator inside a fresh TF1 graph + Session, or eagerly."""
  if mode == "graph":
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
      yield Evaluator(sess)
  else:
    assert mode == "eager", mode
    yield Evaluator(None)


def identity_with_grad_check(expected_grad):
  """An identity whose gradient asserts the incoming gradient's value.

  The check runs in the backward pass, as TF 2.4's
  `mixed_precision.test_util.create_identity_with_grad_check_fn` did:
  `expected_grad` may be a number or a variable read when the gradient runs.

  Args:
    expected_grad: What the upstream gradient must equal.

  Returns:
    A function of one tensor.
  """

  @tf.custom_gradient
  def identity(x):

    def grad(dx):
      expected = tf.cast(tf.convert_to_tensor(expected_grad), dx.dtype)
      check = tf.debugging.assert_equal(
          dx, tf.broadcast_to(expected, tf.shape(dx)),
          message="unexpected gradient")
      with tf.control_dependencies([check]):
        return tf.identity(dx)

    return tf.identity(x), grad

  return identity


def minimize_with_grad_check(strategy, var, opt, expected_grad):
  """A replica step minimizing `var` whose scaled gradient is checked."""
  check = identity_with_grad_check(expected_grad)
  loss = lambda: check(var) / strategy.num_replicas_in_sync
  return lambda: opt.minimize(loss, var_list=[var])


class Runner:
  """Builds replica steps for one mode and runs them, as TF's tests did.

  Modes: "graph" (a TF1 graph and session), "eager" and "function" (a
  `tf.function`). In graph mode a step is built once (its op is what
  `minimize` returned) and run in the session; variables are initialized
  when first needed.
  """

  def __init__(self, mode, strategy, evaluate):
    self.mode = mode
    self.strategy = strategy
    self.evaluate = evaluate

  def step(self, fn):
    """A callable running `fn` on every replica once per call."""
    if self.mode == "graph":
      op = self.strategy.run(fn)
      for local in self.strategy.experimental_local_results(op):
        assert isinstance(local, tf.Operation), local
      return lambda: self._run_graph(op)
    call = lambda: self.strategy.run(fn)
    return tf.function(call) if self.mode == "function" else call

  def run(self, fn):
    self.step(fn)()

  def _run_graph(self, op):
    session = self.evaluate.session
    uninitialized = set(session.run(
        tf.compat.v1.report_uninitialized_variables()))
    new = [v for v in tf.compat.v1.global_variables()
           if v.op.name.encode() in uninitialized]
    session.run(tf.compat.v1.variables_initializer(new))
    session.run(op)

  def value(self, x):
    if self.mode == "graph":
      if isinstance(x, keras.Variable):
        x = x.value
      return self.evaluate.session.run(x)
    return x.numpy() if hasattr(x, "numpy") else x
