"""TF 2.3/2.4's Keras `LossScaleOptimizer`, wrapping Keras 3 optimizers.

`LossScaleOptimizer(inner_optimizer, dynamic=True, initial_scale=None,
dynamic_growth_steps=None)` is TF 2.4's class and `LossScaleOptimizerV1(
optimizer, loss_scale)` the experimental one of TF 2.3 (a subclass, as in TF
2.4). Both run on TF 2.21, where `tf.keras` is Keras 3.

Design
------

*Two conventions, one cross-replica step.* TF 2.4 code scales the loss with
`get_scaled_loss`, unscales the gradients with `get_unscaled_gradients` and
passes UNSCALED gradients to `apply_gradients`. Keras 3's trainer
(`Model.fit`) instead calls `optimizer.scale_loss(loss)` and passes the SCALED
gradients to `apply_gradients` / `apply`. The two are told apart explicitly,
never guessed from the gradient values:

* `scale_loss(loss)` is Keras 3's entry point. Besides scaling, it leaves a
  mark for the calling thread and graph (the outermost `tf.function` graph
  being traced, or eager). MirroredStrategy runs each replica in its own
  thread, so the mark is per replica.
* The next `apply_gradients` / `apply` on the same thread and graph consumes
  the mark and unscales the gradients (in the replica, exactly as
  `get_unscaled_gradients` would) before anything else happens.
* `get_unscaled_gradients` clears the mark: gradients that went through it
  are unscaled, so mixing `scale_loss` with it still unscales once.
* `get_scaled_loss` leaves no mark: TF 2.4 code keeps its exact meaning.

From there both conventions share TF 2.4's path: `apply_gradients` (replica
context only) builds the inner optimizer if needed and enters
`merge_call`; in cross-replica context the dynamic loss scale is updated from
the gradients of all replicas (`_distribute.all_finite`: one overflowing
replica skips the step everywhere), then either the inner optimizer applies
the gradients in every replica, or, on a non-finite step, nothing is applied
and only the inner optimizer's `iterations` is incremented, as TF 2.4.4 did.
In a `tf.function` step without a strategy or XLA, `_gated_apply` gets the
same result without making every update wait for the verdict.

*Clipping.* Under several replicas an inner Keras 3 optimizer's `clipnorm`,
`clipvalue` or `global_clipnorm` applies to the replicas' summed gradients,
as TF 2.4's did (Keras 3 alone clips each replica's part; see
`_clip_after_sum`).

*Not wrapped twice.* The class derives from `keras.optimizers.
LossScaleOptimizer` (without using its implementation), because Keras 3's
`compile()` wraps every optimizer that is not an instance of it when the
model's dtype policy is `mixed_float16`.

*Checkpoints.* As in TF 2.4, the wrapper is invisible to `tf.train.Checkpoint`:
its children are the inner optimizer's children plus `loss_scale` (holding
`current_loss_scale` and `good_steps`) when dynamic; restorations that must
wait for the inner optimizer's variables are queued on the inner optimizer.
So a bare optimizer's checkpoint restores into a wrapped one and back, and
TF 2.3.4/2.4.4 checkpoints restore the loss scale and counter exactly.

*Hyperparameters.* As TF 2.4, reading or setting a hyperparameter of the inner
optimizer through the wrapper reaches the inner optimizer; other attributes
(Adam's `epsilon`) do not. The hyperparameters of each Keras 3 optimizer are
the ones its TF 2.4 counterpart registered with `_set_hyper`.

*Configs.* `get_config()` returns TF 2.4's format; `from_config` also reads
TF 2.3's (`optimizer` + `loss_scale`) and Keras 2 inner optimizer configs,
converting `decay` to an equivalent `InverseTimeDecay` schedule.

Example:

>>> opt = LossScaleOptimizer(tf.keras.optimizers.SGD(0.25))
>>> var = tf.Variable(1.)
>>> with tf.GradientTape() as tape:
...   scaled_loss = opt.get_scaled_loss(var ** 2)
>>> (grad,) = opt.get_unscaled_gradients(tape.gradient(scaled_loss, [var]))
>>> _ = opt.apply_gradients([(grad, var)])
>>> float(var.numpy())
0.5
"""

import contextlib
import inspect
import threading

import keras
import numpy as np
import tensorflow as tf

from tf_mixed_precision_compat import _gated_apply
from tf_mixed_precision_compat import _v1_args
from tf_mixed_precision_compat import _grad_checks
from tf_mixed_precision_compat import dynamic_state
from tf_mixed_precision_compat import loss_scale as loss_scale_module
from tf_mixed_precision_compat.endpoints import export

try:  # Legacy Keras 2 optimizers, only when the user has tf_keras installed.
  import tf_keras as _tf_keras  # pylint: disable=g-import-not-at-top
except ImportError:  # pragma: no cover - tf_keras is optional
  _tf_keras = None

__all__ = ["LossScaleOptimizer", "LossScaleOptimizerV1"]

_DEFAULT_INITIAL_SCALE = 2**15
_DEFAULT_GROWTH_STEPS = 2000
_SERIALIZATION_PACKAGE = "tf_mixed_precision_compat"

# Hyperparameters (besides `learning_rate`) that TF 2.4's optimizers
# registered with `_set_hyper`, by Keras 3 class name. `decay` has no Keras 3
# counterpart.
_HYPERPARAMETERS = {
    "SGD": ("momentum",),
    "Adam": ("beta_1", "beta_2"),
    "Adamax": ("beta_1", "beta_2"),
    "Nadam": ("beta_1", "beta_2"),
    "RMSprop": ("rho", "momentum"),
    "Adadelta": ("rho",),
    "Adagrad": (),
    "Ftrl": ("learning_rate_power", "l1_regularization_strength",
             "l2_regularization_strength", "beta"),
}

# Keras 2 optimizer class names (as TF 2.3/2.4 serialized them) and the Keras
# 3 classes they become.
_KERAS2_OPTIMIZERS = {
    "sgd": "SGD",
    "adam": "Adam",
    "adamax": "Adamax",
    "nadam": "Nadam",
    "rmsprop": "RMSprop",
    "adadelta": "Adadelta",
    "adagrad": "Adagrad",
    "ftrl": "Ftrl",
}

# TF 2.4's slot names -> Keras 3's, by Keras 3 class name: checkpoints of
# TF 2.x jobs name their slots so, and so does their `get_slot(var, "m")`.
TF2_SLOT_NAMES = {
    "SGD": {"momentum": "momentum"},
    "Adam": {"m": "momentum", "v": "velocity", "vhat": "velocity_hat"},
    "AdamW": {"m": "momentum", "v": "velocity", "vhat": "velocity_hat"},
    "Adamax": {"m": "momentum", "v": "norm"},
    "Nadam": {"m": "momentum", "v": "velocity"},
    "RMSprop": {"rms": "velocity", "momentum": "momentum",
                "mg": "average_gradient"},
    "Adagrad": {"accumulator": "accumulator"},
    "Adadelta": {"accum_grad": "accumulated_grad",
                 "accum_var": "accumulated_delta_var"},
    "Ftrl": {"accumulator": "accumulator", "linear": "linear"},
}

_V1_WARNING_PREFIX = (
    "tf.keras.mixed_precision.experimental.LossScaleOptimizer is deprecated. "
    "Please use tf.keras.mixed_precision.LossScaleOptimizer instead. ")


class _AlreadyWrappedError(ValueError, AttributeError):
  """A LossScaleOptimizer was given another one to wrap.

  TF 2.4 failed on this with an `AttributeError` (the wrapped optimizer
  lacked `_hyper`); this package has always raised `ValueError`. The error is
  both, so code catching either still catches it.
  """


def keras_class_name(optimizer):
  """The name of the built-in Keras 3 class `optimizer` is (or derives from)."""
  for klass in type(optimizer).__mro__:
    if getattr(keras.optimizers, klass.__name__, None) is klass:
      return klass.__name__
  return type(optimizer).__name__


def _is_legacy_optimizer(obj):
  return _tf_keras is not None and isinstance(
      obj, _tf_keras.optimizers.legacy.Optimizer)


def _hyperparameter_names(inner):
  if _is_legacy_optimizer(inner):
    return frozenset(inner._hyper)  # pylint: disable=protected-access
  names = {"learning_rate"}
  for klass in type(inner).__mro__:
    if getattr(keras.optimizers, klass.__name__, None) is klass:
      names.update(_HYPERPARAMETERS.get(klass.__name__, ()))
      break
  return frozenset(names)


def _supported_strategy_types():
  return (tf.distribute.MirroredStrategy,
          tf.compat.v1.distribute.MirroredStrategy,
          tf.distribute.OneDeviceStrategy,
          tf.compat.v1.distribute.OneDeviceStrategy,
          tf.distribute.MultiWorkerMirroredStrategy,
          tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy)


def _tpu_strategy_types():
  return (tf.distribute.TPUStrategy, tf.distribute.experimental.TPUStrategy,
          tf.compat.v1.distribute.experimental.TPUStrategy)


def strategy_supports_loss_scaling():
  """Whether the current `tf.distribute.Strategy` supports loss scaling.

  Loss scaling needs one variable copy per compute replica (gradients are
  unscaled once per replica), so only the default strategy, OneDevice,
  Mirrored and MultiWorkerMirrored strategies are supported, as in TF 2.4.

  Returns:
    A Python bool.
  """
  if not tf.distribute.has_strategy():
    return True
  return isinstance(tf.distribute.get_strategy(), _supported_strategy_types())


def _raise_if_strategy_unsupported():
  if strategy_supports_loss_scaling():
    return
  strategy = tf.distribute.get_strategy()
  if isinstance(strategy, _tpu_strategy_types()):
    raise ValueError(
        "Loss scaling is not supported with TPUStrategy. Loss scaling is "
        "unnecessary with TPUs, since they support bfloat16 instead of "
        "float16 and bfloat16 does not require loss scaling. You should "
        "remove the use of the LossScaleOptimizer when TPUs are used.")
  raise ValueError("Loss scaling is not supported with the "
                   f"tf.distribute.Strategy: {type(strategy).__name__}. Try "
                   "using a different Strategy, e.g. a MirroredStrategy")


def _multiply_gradient(gradient, factor):
  """Multiplies a dense or `tf.IndexedSlices` gradient, keeping it sparse."""
  factor = tf.cast(factor, gradient.dtype)
  if isinstance(gradient, tf.IndexedSlices):
    return tf.IndexedSlices(gradient.values * factor, gradient.indices,
                            dense_shape=gradient.dense_shape)
  return gradient * factor


def _graph_token():
  """What a `scale_loss` mark belongs to: None eagerly, else a graph.

  Nested graphs (a `tf.while_loop` body inside a step function) belong to the
  outermost `tf.function` graph being traced, so a loss scaled in one and
  gradients applied in another of the same step still pair up.
  """
  if tf.executing_eagerly():
    return None
  graph = tf.compat.v1.get_default_graph()
  while _is_func_graph(getattr(graph, "outer_graph", None)):
    graph = graph.outer_graph
  return graph


def _as_iterations(value):
  """`value` as the int64 value of a step counter.

  Raises:
    ValueError: If `value` is not a known non-negative integer scalar.
  """
  if isinstance(value, (tf.Variable, keras.Variable)):
    value = tf.convert_to_tensor(value)
  try:
    static = None if isinstance(value, bool) else tf.get_static_value(value)
  except (TypeError, ValueError):  # Not convertible to a tensor.
    static = None
  array = None if static is None else np.asarray(static)
  if (array is None or array.ndim != 0 or
      not np.issubdtype(array.dtype, np.integer) or array < 0):
    raise ValueError('"iterations" must be set to a non-negative integer '
                     f"scalar, but got: {value!r}")
  return np.int64(array)


def _is_func_graph(graph):
  return graph is not None and hasattr(graph, "outer_graph")


class _Holder:
  """Hides a list from `tf.distribute` so it passes through unchanged.

  `call_for_each_replica` would replace distributed variables by their
  per-replica components; Keras 3 optimizers expect the distributed ones.
  """

  __slots__ = ["value"]

  def __init__(self, value):
    self.value = value


class _VariableList(list):
  """A list of variables that can also be called, returning itself.

  TF 2.4's optimizers had a `variables()` method; Keras 3's have a
  `variables` property. Both spellings work on this list.
  """

  def __call__(self):
    return list(self)


def _smart_cond(pred, true_fn, false_fn):
  """`tf.cond` unless `pred` is known now (a bool, or eager)."""
  if isinstance(pred, bool):
    return true_fn() if pred else false_fn()
  static = tf.get_static_value(pred)
  if static is not None:
    return true_fn() if bool(static) else false_fn()

  def branch(fn):
    def wrapped():
      fn()
      return tf.constant(True)
    return wrapped

  return tf.cond(pred, branch(true_fn), branch(false_fn))


def _clips(inner):
  return any(getattr(inner, attr, None)
             for attr in ("clipnorm", "clipvalue", "global_clipnorm"))


_warned_clip_order: list[bool] = []


@contextlib.contextmanager
def _clip_after_sum(inner, distribution):
  """Makes a Keras 3 `inner` clip the replicas' sum, as TF 2.4 did.

  TF 2.4's optimizers summed the gradients over replicas, then clipped the
  sum; Keras 3's clip each replica's gradients, then sum them, so with
  several replicas a clipped step moves further (TF 2.4's own clipping test
  gives [-3.] instead of [1.] on two replicas). For the duration of the
  apply, the inner optimizer's clipping is moved after its all-reduce by
  shadowing, on the instance, the two Keras 3 methods that do them (the
  technique `_gated_apply` uses for writes). With one replica, or a legacy
  tf_keras optimizer (which sums first itself), nothing changes. If this
  Keras lacks the methods, the order cannot be had: a warning says so, once.
  """
  if (distribution.num_replicas_in_sync == 1 or
      _is_legacy_optimizer(inner) or not _clips(inner)):
    yield
    return
  clip = getattr(type(inner), "_clip_gradients", None)
  all_reduce = getattr(type(inner), "_all_reduce_sum_gradients", None)
  if clip is None or all_reduce is None:
    if not _warned_clip_order:
      _warned_clip_order.append(True)
      tf.get_logger().warning(
          "LossScaleOptimizer: this Keras version clips each replica's "
          "gradients before summing them, where TF 2.4 clipped their sum; "
          "with clipnorm, clipvalue or global_clipnorm the steps differ "
          "from TF 2.4's under several replicas.")
    yield
    return

  def sum_then_clip(grads_and_vars):
    summed = list(all_reduce(inner, grads_and_vars))
    clipped = clip(inner, [g for g, _ in summed])
    return list(zip(clipped, [v for _, v in summed]))

  inner.__dict__["_clip_gradients"] = lambda grads: grads
  inner.__dict__["_all_reduce_sum_gradients"] = sum_then_clip
  try:
    yield
  finally:
    del inner.__dict__["_clip_gradients"]
    del inner.__dict__["_all_reduce_sum_gradients"]


def _forwarded_apply_arguments(apply_gradients, name,
                               experimental_aggregate_gradients):
  """What of TF 2.4's `apply_gradients` arguments `apply_gradients` accepts.

  Returns:
    `(args, kwargs)`: `name` as the second positional argument where the
    method has one, and `experimental_aggregate_gradients` where it names
    it. Not through a bare `**kwargs`: such overrides typically pass them on
    to Keras 3's `apply_gradients`, which takes none.
  """
  try:
    parameters = list(inspect.signature(apply_gradients).parameters.values())
  except (TypeError, ValueError):
    return (), {}
  positional = [p for p in parameters if p.kind in (
      p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  takes_varargs = any(p.kind == p.VAR_POSITIONAL for p in parameters)
  args = (name,) if len(positional) >= 2 or takes_varargs else ()
  kwargs = {}
  names = {p.name for p in positional[len(args) + 1:]} | {
      p.name for p in parameters if p.kind == p.KEYWORD_ONLY}
  if "experimental_aggregate_gradients" in names:
    kwargs["experimental_aggregate_gradients"] = (
        experimental_aggregate_gradients)
  return args, kwargs


def _deserialize_schedule(config):
  if isinstance(config, dict) and "module" not in config:
    return keras.optimizers.schedules.deserialize(config)
  return keras.saving.deserialize_keras_object(config)


def _keras2_optimizer_to_keras3(config, custom_objects):
  """Builds the Keras 3 optimizer equivalent to a Keras 2 optimizer config.

  Args:
    config: `{"class_name": ..., "config": {...}}` as TF 2.3/2.4 serialized
      optimizers.
    custom_objects: Optional dict of user classes, by name.

  Returns:
    A Keras 3 optimizer.

  Raises:
    ValueError: For an unknown class or options Keras 3 cannot honour.
  """
  class_name = config["class_name"]
  options = dict(config.get("config") or {})
  if custom_objects and class_name in custom_objects:
    return custom_objects[class_name].from_config(options)
  keras3_name = _KERAS2_OPTIMIZERS.get(class_name.lower())
  if keras3_name is None:
    raise ValueError(
        f"Unknown optimizer in a TF 2.3/2.4 config: {class_name!r}. Known: "
        f"{sorted(_KERAS2_OPTIMIZERS.values())}, or pass the class in "
        "custom_objects.")
  if "lr" in options:
    options.setdefault("learning_rate", options.pop("lr"))
    options.pop("lr", None)
  learning_rate = options.get("learning_rate", None)
  if isinstance(learning_rate, dict):
    learning_rate = _deserialize_schedule(learning_rate)
    options["learning_rate"] = learning_rate
  decay = options.pop("decay", 0.0) or 0.0
  if decay:
    if not isinstance(learning_rate, (int, float)):
      raise ValueError(
          f"Cannot convert the Keras 2 {class_name} config: it combines "
          f"decay={decay} with a learning-rate schedule, which Keras 3 "
          "optimizers cannot honour. Fold the decay into the schedule.")
    # Keras 2 used lr / (1 + decay * iterations): an inverse time decay.
    options["learning_rate"] = keras.optimizers.schedules.InverseTimeDecay(
        float(learning_rate), decay_steps=1, decay_rate=float(decay))
  cls = getattr(keras.optimizers, keras3_name)
  try:
    return cls.from_config(options)
  except (TypeError, ValueError) as e:
    raise ValueError(
        f"Keras 3's {keras3_name} cannot honour the TF 2.3/2.4 {class_name} "
        f"config {config.get('config')!r}: {e}") from e


def _deserialize_optimizer(config, custom_objects=None):
  """An optimizer from a Keras 3 or Keras 2 (TF 2.3/2.4) serialized form."""
  if isinstance(config, keras.optimizers.Optimizer) or _is_legacy_optimizer(
      config):
    return config
  if isinstance(config, str):
    return keras.optimizers.get(config)
  if not isinstance(config, dict) or "class_name" not in config:
    raise ValueError("inner_optimizer must be an optimizer or a serialized "
                     f"optimizer dict, got {config!r}.")
  if "module" in config or "registered_name" in config:
    return keras.optimizers.deserialize(
        dict(config), custom_objects=custom_objects)
  return _keras2_optimizer_to_keras3(config, custom_objects)


def _serializable(cls):
  return keras.saving.register_keras_serializable(
      package=_SERIALIZATION_PACKAGE)(cls)


@export("keras.mixed_precision.LossScaleOptimizer",
        v1=("keras.mixed_precision.LossScaleOptimizer",))
@_serializable
class LossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
  """An optimizer that applies loss scaling to prevent numeric underflow.

  Wraps a Keras 3 optimizer (`tf.keras.optimizers.*`, which on TF 2.21 is
  `keras.optimizers.*`) with TF 2.4's API. The loss is multiplied by the loss
  scale before differentiation and the gradients are divided by it before
  they are applied. With `dynamic=True` the scale halves (never below 1) on a
  step with a NaN or infinite gradient, which is then skipped, and doubles
  after `dynamic_growth_steps` consecutive finite steps.

  Custom loops use TF 2.4's convention: `get_scaled_loss`, then
  `get_unscaled_gradients`, then `apply_gradients` with unscaled gradients.
  `model.compile(optimizer=LossScaleOptimizer(...))` works too: Keras 3's
  `fit` uses `scale_loss` and passes scaled gradients, which the wrapper
  recognises and unscales (see the module docstring).

  Hyperparameters of the inner optimizer can be read and set through the
  wrapper (`opt.beta_1`); other attributes (Adam's `epsilon`) cannot.

  Example:

  >>> opt = LossScaleOptimizer(tf.keras.optimizers.SGD(0.25))
  >>> var = tf.Variable(1.)
  >>> _ = opt.minimize(lambda: var ** 2, var_list=[var])
  >>> float(var.numpy()), float(opt.loss_scale), int(opt.dynamic_counter)
  (0.5, 32768.0, 1)
  """

  def __init__(self, inner_optimizer, dynamic=True, initial_scale=None,
               dynamic_growth_steps=None):
    """Wraps `inner_optimizer`.

    Args:
      inner_optimizer: The Keras 3 optimizer to wrap (or a legacy `tf_keras`
        one when `tf_keras` is installed).
      dynamic: Python bool, whether the loss scale changes over time.
      initial_scale: The initial loss scale; defaults to 2**15 when dynamic
        and is required (as the fixed scale) when not. Finite and >= 1.
      dynamic_growth_steps: Consecutive finite steps before the scale
        doubles; defaults to 2000. Only with `dynamic=True`. At least 1.

    Raises:
      TypeError: If `inner_optimizer` is not an optimizer or `dynamic` is not
        a bool.
      ValueError: If `inner_optimizer` is already a loss scale optimizer
        (also an `AttributeError` as in TF 2.4) or
        scales losses itself, `initial_scale` is missing with
        `dynamic=False`, `dynamic_growth_steps` is given with
        `dynamic=False`, a number is out of range, or the current strategy
        does not support loss scaling.
    """
    if isinstance(inner_optimizer, keras.optimizers.LossScaleOptimizer) or (
        _is_legacy_optimizer(inner_optimizer) and
        "LossScaleOptimizer" in type(inner_optimizer).__name__):
      name = type(inner_optimizer).__name__
      raise _AlreadyWrappedError(
          f'"inner_optimizer" is already a LossScaleOptimizer ({name}); '
          "wrapping it again would scale the loss twice. Pass its "
          "inner_optimizer instead. (TF 2.4 failed here with AttributeError: "
          f"'{name}' object has no attribute '_hyper'.)")
    if not (isinstance(inner_optimizer, keras.optimizers.Optimizer) or
            _is_legacy_optimizer(inner_optimizer)):
      raise TypeError(
          '"inner_optimizer" must be an instance of '
          "`tf.keras.optimizers.Optimizer` (a Keras 3 optimizer) or of a "
          f"legacy tf_keras OptimizerV2, but got: {inner_optimizer}")
    if not isinstance(dynamic, bool):
      raise TypeError('"dynamic" argument to LossScaleOptimizer.__init__ must '
                      f"be a bool, but got: {dynamic!r}")
    if getattr(inner_optimizer, "loss_scale_factor", None) is not None:
      raise ValueError(
          '"inner_optimizer" has loss_scale_factor='
          f"{inner_optimizer.loss_scale_factor}; the LossScaleOptimizer does "
          "the loss scaling, so create the inner optimizer without "
          "loss_scale_factor.")
    if dynamic:
      initial_scale = dynamic_state.check_initial_scale(
          _DEFAULT_INITIAL_SCALE if initial_scale is None else initial_scale,
          "initial_scale")
      dynamic_growth_steps = dynamic_state.check_growth_steps(
          _DEFAULT_GROWTH_STEPS
          if dynamic_growth_steps is None else dynamic_growth_steps,
          "dynamic_growth_steps")
    else:
      if initial_scale is None:
        raise ValueError('"initial_scale" must be specified if "dynamic" is '
                         "False")
      if dynamic_growth_steps is not None:
        raise ValueError('"dynamic_growth_steps" must be None if "dynamic" '
                         f"is False, but got: {dynamic_growth_steps}")
      initial_scale = dynamic_state.check_initial_scale(initial_scale,
                                                        "initial_scale")
    _raise_if_strategy_unsupported()

    # The wrapper's own attributes are no checkpoint dependencies: to
    # `tf.train.Checkpoint` it looks like the inner optimizer (see
    # `_trackable_children`).
    object.__setattr__(self, "_self_setattr_tracking", False)
    # Keras 3's Optimizer constructor, not keras.optimizers.
    # LossScaleOptimizer's: only the isinstance relation is wanted from it.
    keras.optimizers.Optimizer.__init__(self, learning_rate=0.0)
    self._optimizer = inner_optimizer
    self._marks = threading.local()
    if dynamic:
      self._loss_scale = dynamic_state._DynamicLossScaleState(  # pylint: disable=protected-access
          initial_scale, dynamic_growth_steps, multiplier=2)
    else:
      self._loss_scale = initial_scale
    self.built = bool(getattr(inner_optimizer, "built", False))

  # ---------------------------------------------------------------- state --

  @property
  def dynamic(self):
    """Bool indicating whether dynamic loss scaling is used."""
    return not isinstance(self._loss_scale, float)

  @property
  def loss_scale(self):
    """The current loss scale as a float32 scalar tensor."""
    if self.dynamic:
      return tf.convert_to_tensor(self._loss_scale.current_loss_scale)
    return tf.convert_to_tensor(self._loss_scale, dtype=tf.float32)

  @property
  def dynamic_counter(self):
    """Finite steps since the scale last changed (int64 variable), or None."""
    return self._loss_scale.counter if self.dynamic else None

  @property
  def initial_scale(self):
    """The initial loss scale (the fixed scale when not dynamic)."""
    if self.dynamic:
      return self._loss_scale.initial_loss_scale
    return self._loss_scale

  @property
  def dynamic_growth_steps(self):
    """Finite steps before the scale doubles, or None when not dynamic."""
    return self._loss_scale.growth_steps if self.dynamic else None

  @property
  def inner_optimizer(self):
    """The optimizer this LossScaleOptimizer wraps."""
    return self._optimizer

  # ------------------------------------------------------- loss scaling --
  #
  # The step-path methods are exempt from AutoGraph: they have no
  # tensor-dependent Python control flow (the apply-or-skip decision is an
  # explicit `tf.cond`), and converting them made tracing a step with many
  # variables markedly slower than tracing the bare optimizer's.

  @tf.autograph.experimental.do_not_convert
  def get_scaled_loss(self, loss):
    """Multiplies `loss` by the loss scale.

    Args:
      loss: A tensor, or a callable returning one.

    Returns:
      `loss * loss_scale` (the scale cast to the loss's dtype), or a callable
      returning it when `loss` is callable.
    """
    if callable(loss):

      def scaled_loss():
        value = loss()
        return value * tf.cast(self.loss_scale, value.dtype)

      return scaled_loss
    return loss * tf.cast(self.loss_scale, loss.dtype)

  @tf.autograph.experimental.do_not_convert
  def get_unscaled_gradients(self, grads):
    """Divides gradients by the loss scale (multiplying by its reciprocal).

    Args:
      grads: A list of tensors, `tf.IndexedSlices` (kept sparse) or None
        (kept None).

    Returns:
      A new list of the same length.
    """
    self._marks.pending = False
    reciprocal = 1. / self.loss_scale
    return [
        None if g is None else _multiply_gradient(g, reciprocal)
        for g in grads
    ]

  @tf.autograph.experimental.do_not_convert
  def scale_loss(self, loss):
    """Keras 3's hook: scales `loss`; gradients then arrive scaled.

    Keras 3's `Model.fit` calls this and passes the gradients of the result,
    still scaled, to `apply_gradients`. The call marks the current thread
    (replica) and graph so that the next `apply_gradients` / `apply` there
    unscales them. Custom loops should use `get_scaled_loss` and
    `get_unscaled_gradients` instead.

    Args:
      loss: The loss tensor.

    Returns:
      `loss` multiplied by the loss scale.
    """
    scaled = self.get_scaled_loss(loss)
    self._marks.pending = True
    self._marks.graph = _graph_token()
    return scaled

  def _take_mark(self):
    pending = getattr(self._marks, "pending", False)
    self._marks.pending = False
    return pending and getattr(self._marks, "graph", None) is _graph_token()

  # ---------------------------------------------------------- applying --

  def build(self, var_list):
    """Creates the inner optimizer's variables for `var_list`."""
    if not getattr(self._optimizer, "built", True):
      self._optimizer.build(var_list)
    self.built = True

  @tf.autograph.experimental.do_not_convert
  def apply_gradients(self, grads_and_vars, name=None,
                      experimental_aggregate_gradients=True):
    """Updates the loss scale and applies the gradients if all are finite.

    Must be called in a replica context (eagerly, in a `tf.function`, or in
    `strategy.run`). On a step with a NaN or infinite gradient on any replica
    no variable changes, the dynamic scale halves, the counter resets and
    `iterations` still advances.

    Args:
      grads_and_vars: (gradient, variable) pairs; gradients unscaled, or
        scaled if the loss came from `scale_loss` in this step.
      name: Passed on, as TF 2.4 did, as the second positional argument of
        the inner optimizer's `apply_gradients` where it takes one (Keras
        3's own optimizers take none; their subclasses may).
      experimental_aggregate_gradients: Whether the inner optimizer sums the
        gradients over replicas. False (already summed) is only supported
        with one replica, as Keras 3 optimizers always aggregate.

    Returns:
      The inner optimizer's `iterations` variable.

    Raises:
      ValueError: In cross-replica context, under an unsupported strategy,
        or for `experimental_aggregate_gradients=False` with replicas.
    """
    if tf.distribute.in_cross_replica_context():
      raise ValueError("apply_gradients() must be called in a replica context.")
    # The optimizer is often created outside the strategy's scope.
    _raise_if_strategy_unsupported()
    grads_and_vars = self._check_grads_and_vars(tuple(grads_and_vars))
    grads = [g for g, _ in grads_and_vars]
    variables = [v for _, v in grads_and_vars]
    if self._take_mark():
      grads = self.get_unscaled_gradients(grads)
    if (not experimental_aggregate_gradients and
        not _is_legacy_optimizer(self._optimizer) and
        tf.distribute.get_strategy().num_replicas_in_sync > 1):
      raise ValueError(
          "experimental_aggregate_gradients=False is not supported with "
          "Keras 3 inner optimizers under several replicas: they always sum "
          "gradients across replicas. Pass unaggregated gradients instead.")
    if not self.built:
      # Lifted out of any tf.function being traced, as TF 2.4 created its
      # slots: Keras 3 optimizers otherwise fail to build on their first
      # distributed tf.function step (initial values inside the trace).
      with tf.init_scope():
        self.build(variables)
    tf.distribute.get_replica_context().merge_call(
        self._apply_cross_replica,
        args=(grads, variables, name, experimental_aggregate_gradients))
    return self.iterations

  def _check_grads_and_vars(self, grads_and_vars):
    """Raises what the inner optimizer would, before the loss scale changes.

    The loss scale is updated before the inner optimizer sees the gradients,
    so malformed input must be rejected first or it would leave a changed
    scale or counter behind.

    Returns:
      `grads_and_vars`, where in a graph an `IndexedSlices` gradient's values
      wait for the check of its indices (see `_grad_checks.check_sparse`).
    """
    checked = []
    for pair in grads_and_vars:
      if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        raise TypeError('"grads_and_vars" must be (gradient, variable) pairs, '
                        f"but got the element: {pair!r}")
      grad, var = pair
      if not isinstance(var, (tf.Variable, keras.Variable)):
        raise TypeError('"grads_and_vars" must pair each gradient with a '
                        "tf.Variable or keras.Variable, but got: "
                        f"{var!r}")
      if grad is not None:
        # Keras 3 optimizers would cast a gradient of another dtype, which
        # can overflow after the finite check; TF 2.4 refused it.
        _grad_checks.check_dtype(grad, var)
        grad = _grad_checks.check_sparse(grad, var)
      checked.append((grad, var))
      shape = getattr(grad, "shape", None)
      if (grad is not None and not isinstance(grad, tf.IndexedSlices) and
          shape is not None and
          not tf.TensorShape(shape).is_compatible_with(var.shape)):
        raise ValueError(f'"grads_and_vars": the gradient for {var.name} has '
                         f"shape {tf.TensorShape(shape)}, but the variable "
                         f"has shape {tf.TensorShape(var.shape)}.")
    present = [v for g, v in grads_and_vars if g is not None]
    if not present:
      # TF 2.4's message (raised there by the inner optimizer).
      raise ValueError("No gradients provided for any variable: %s." %
                       ([v.name for _, v in grads_and_vars],))
    if self.built and hasattr(self._optimizer, "_check_variables_are_known"):
      self._optimizer._check_variables_are_known(present)  # pylint: disable=protected-access
    return tuple(checked)

  @tf.autograph.experimental.do_not_convert
  def apply(self, grads, trainable_variables=None):
    """Keras 3's spelling of `apply_gradients` (gradients and variables).

    Args:
      grads: Gradients, in the order of `trainable_variables`.
      trainable_variables: The variables; defaults to those the inner
        optimizer was built with.

    Raises:
      ValueError: If there are more or fewer gradients than variables, or as
        `apply_gradients`.
    """
    if trainable_variables is None:
      if not self.built:
        raise ValueError(
            "apply(grads) without trainable_variables needs a built "
            "optimizer; call build(variables) or pass trainable_variables.")
      trainable_variables = self._optimizer._trainable_variables  # pylint: disable=protected-access
    grads = list(grads)
    trainable_variables = list(trainable_variables)
    # zip() would silently drop the unmatched tail.
    if len(grads) != len(trainable_variables):
      raise ValueError(
          f'"grads" has {len(grads)} gradients but there are '
          f"{len(trainable_variables)} trainable_variables; apply() needs one "
          "gradient (or None) per variable, in the same order.")
    self.apply_gradients(zip(grads, trainable_variables))

  def _apply_cross_replica(self, distribution, grads, variables, name,
                           experimental_aggregate_gradients):
    if self.dynamic:
      update_op, should_apply = self._loss_scale.update(grads)
    else:
      update_op, should_apply = None, True
    if (self.dynamic and not isinstance(should_apply, bool) and
        _gated_apply.supported(self._optimizer, grads, variables)):
      # Same result as the conditional below, without making every update
      # wait for the verdict (see _gated_apply).
      _gated_apply.apply_when_finite(self._optimizer, grads, variables,
                                     should_apply)
      return update_op

    def apply_fn():
      with _clip_after_sum(self._optimizer, distribution):
        distribution.extended.call_for_each_replica(
            self._apply_in_replica,
            args=(grads, _Holder(variables), name,
                  experimental_aggregate_gradients))

    def skip_fn():
      # The inner optimizer would have counted the step; TF 2.4.4 counts
      # skipped steps too.
      self._iterations_variable().assign_add(1)

    _smart_cond(should_apply, apply_fn, skip_fn)
    if update_op is not None and not tf.executing_eagerly():
      return update_op
    return None

  def _apply_in_replica(self, grads, holder, name,
                        experimental_aggregate_gradients):
    pairs = list(zip(grads, holder.value))
    if _is_legacy_optimizer(self._optimizer):
      self._optimizer.apply_gradients(
          pairs, name,
          experimental_aggregate_gradients=experimental_aggregate_gradients)
      return
    # TF 2.4 handed `name` on positionally: an inner optimizer subclass
    # whose `apply_gradients` takes a second argument (a clip norm, say)
    # received it there. Keras 3's own `apply_gradients` takes no such
    # argument.
    args, kwargs = _forwarded_apply_arguments(
        self._optimizer.apply_gradients, name,
        experimental_aggregate_gradients)
    self._optimizer.apply_gradients(pairs, *args, **kwargs)

  def _iterations_variable(self):
    variable = getattr(self._optimizer, "_iterations", None)
    return variable if variable is not None else self._optimizer.iterations

  def minimize(self, loss, var_list, grad_loss=None, name=None, tape=None):
    """Scales `loss`, differentiates, unscales and applies, as TF 2.4.

    Args:
      loss: A callable returning the loss, or a tensor (then `tape` must be
        the tape that recorded it).
      var_list: Variables (a list, a single variable, or a callable returning
        them) to minimize over.
      grad_loss: Optional gradient of the loss (passed to `tape.gradient`).
      name: Ignored by Keras 3 inner optimizers.
      tape: A `tf.GradientTape`; required when `loss` is a tensor.

    Returns:
      The inner optimizer's `iterations` variable.

    Raises:
      ValueError: If `loss` is a tensor and no `tape` is given.
    """
    if not callable(loss) and tape is None:
      raise ValueError("`tape` is required when a `Tensor` loss is passed.")
    tape = tape if tape is not None else tf.GradientTape()
    if callable(loss):
      with tape:
        if not callable(var_list):
          tape.watch(tf.nest.flatten(var_list))
        loss = loss()
    if callable(var_list):
      var_list = var_list()
    var_list = tf.nest.flatten(var_list)
    with tape:
      scaled_loss = self.get_scaled_loss(loss)
    grads = tape.gradient(scaled_loss, var_list, output_gradients=grad_loss)
    grads = self.get_unscaled_gradients(grads)
    return self.apply_gradients(zip(grads, var_list), name=name)

  def get_gradients(self, loss, params):
    """Graph-mode gradients of the scaled `loss`, unscaled (`tf.gradients`)."""
    scaled_loss = self.get_scaled_loss(loss)
    grads = tf.gradients(scaled_loss, params)
    return self.get_unscaled_gradients(grads)

  def get_updates(self, loss, params):
    """Graph-mode update ops, as TF 2.4's `get_updates`."""
    grads = self.get_gradients(loss, params)
    return [self.apply_gradients(zip(grads, params))]

  # ------------------------------------------------- delegated to inner --

  @property
  def iterations(self):
    """The inner optimizer's step counter (settable, as in TF 2.4)."""
    return self._optimizer.iterations

  @iterations.setter
  def iterations(self, value):
    inner = self.__dict__.get("_optimizer")
    if inner is None:  # Keras 3's constructor, before there is an inner one.
      return
    if _is_legacy_optimizer(inner):
      inner.iterations = value  # TF 2.4's rules, which tf_keras keeps.
      return
    # Keras 3 optimizers create their counter with themselves and cannot
    # replace it; TF 2.4 code setting it means its value.
    self._iterations_variable().assign(_as_iterations(value))

  @property
  def learning_rate(self):
    """The inner optimizer's learning rate (settable)."""
    return self._optimizer.learning_rate

  @learning_rate.setter
  def learning_rate(self, value):
    inner = self.__dict__.get("_optimizer")
    if inner is not None:
      inner.learning_rate = value

  lr = learning_rate

  def _delegated_property(name):  # pylint: disable=no-self-argument
    def getter(self):
      return getattr(self._optimizer, name)

    def setter(self, value):
      inner = self.__dict__.get("_optimizer")
      # Keras 3's constructor sets these on the wrapper before it wraps.
      if inner is not None:
        setattr(inner, name, value)

    return property(getter, setter, doc=f"The inner optimizer's {name}.")

  clipnorm = _delegated_property("clipnorm")  # type: ignore[arg-type]
  clipvalue = _delegated_property("clipvalue")  # type: ignore[arg-type]
  global_clipnorm = _delegated_property("global_clipnorm")  # type: ignore[arg-type]
  del _delegated_property

  @property
  def variables(self):
    """The inner optimizer's variables; also callable, as TF 2.4's method."""
    inner = self._optimizer.variables
    return _VariableList(inner() if callable(inner) else inner)

  @property
  def weights(self):
    """The inner optimizer's variables."""
    return list(self.variables)

  def get_weights(self):
    """The inner optimizer's variable values, as NumPy arrays."""
    return [v.numpy() for v in self.variables]

  def set_weights(self, weights):
    """Sets the inner optimizer's variable values."""
    return self._optimizer.set_weights(weights)

  def finalize_variable_values(self, var_list):
    self._optimizer.finalize_variable_values(var_list)

  def add_weight(self, name, shape, dtype=None, initializer="zeros",
                 trainable=None,
                 synchronization=tf.VariableSynchronization.AUTO,
                 aggregation=tf.VariableAggregation.NONE):
    """Adds a non-trainable variable to the inner optimizer.

    Keras 3 optimizer variables are never trainable and always synchronized
    on write; `trainable` and `synchronization` are accepted for TF 2.4 code.
    """
    del trainable, synchronization
    if _is_legacy_optimizer(self._optimizer):
      return self._optimizer.add_weight(name, shape, dtype, initializer)
    aggregation = {
        tf.VariableAggregation.NONE: "none",
        tf.VariableAggregation.SUM: "sum",
        tf.VariableAggregation.MEAN: "mean",
        tf.VariableAggregation.ONLY_FIRST_REPLICA: "only_first_replica",
    }.get(aggregation, aggregation)
    return self._optimizer.add_variable(
        shape, initializer=initializer, dtype=dtype, aggregation=aggregation,
        name=name)

  def add_slot(self, var, slot_name, initializer="zeros"):
    """Adds a per-variable optimizer variable named after `var`."""
    if _is_legacy_optimizer(self._optimizer):
      return self._optimizer.add_slot(var, slot_name, initializer)
    existing = self._find_slot(var, slot_name)
    if existing is not None:
      return existing
    return self._optimizer.add_variable_from_reference(
        var, name=slot_name, initializer=initializer)

  def _slot_prefix(self, var):
    if hasattr(var, "path"):
      return var.path.replace("/", "_") + "_"
    return str(var.name).replace("/", "_").replace(":", "_") + "_"

  def _find_slot(self, var, slot_name):
    wanted = self._slot_prefix(var) + slot_name
    for v in self.variables:
      if v.name == wanted:
        return v
    return None

  def get_slot(self, var, slot_name):
    """The inner optimizer's variable `slot_name` for `var`.

    For Keras 3 inner optimizers both Keras 3's slot names and the names TF
    2.x's optimizers gave the same slots are accepted (see
    `get_slot_names`), so `get_slot(var, "m")` of TF 2.4 code finds Adam's
    first moment.

    Args:
      var: A variable the inner optimizer updates.
      slot_name: A slot name, Keras 3's or TF 2.x's.

    Returns:
      The slot variable.

    Raises:
      KeyError: If there is no such slot.

    Example:

    >>> opt = LossScaleOptimizer(keras.optimizers.Adam())
    >>> var = tf.Variable([1.0])
    >>> _ = opt.apply_gradients([(tf.constant([0.5]), var)])
    >>> opt.get_slot(var, "m") is opt.get_slot(var, "momentum")
    True
    """
    if _is_legacy_optimizer(self._optimizer):
      return self._optimizer.get_slot(var, slot_name)
    slot = self._find_slot(var, slot_name)
    if slot is None:
      keras3_name = TF2_SLOT_NAMES.get(
          keras_class_name(self._optimizer), {}).get(slot_name)
      if keras3_name is not None:
        slot = self._find_slot(var, keras3_name)
    if slot is None:
      raise KeyError(f"No slot {slot_name!r} for variable {var.name!r}; "
                     f"slots: {self.get_slot_names()}")
    return slot

  def get_slot_names(self):
    """Names of the inner optimizer's per-variable variables (slots).

    For a Keras 3 inner optimizer these are Keras 3's names, the names its
    slot variables carry. `get_slot` also accepts the names TF 2.x's
    optimizers used for the same slots:

    | Optimizer | TF 2.x name -> Keras 3 name                          |
    |-----------|------------------------------------------------------|
    | SGD       | momentum -> momentum                                 |
    | Adam(W)   | m -> momentum, v -> velocity, vhat -> velocity_hat   |
    | Adamax    | m -> momentum, v -> norm                             |
    | Nadam     | m -> momentum, v -> velocity                         |
    | RMSprop   | rms -> velocity, momentum -> momentum,               |
    |           | mg -> average_gradient                               |
    | Adagrad   | accumulator -> accumulator                           |
    | Adadelta  | accum_grad -> accumulated_grad,                      |
    |           | accum_var -> accumulated_delta_var                   |
    | Ftrl      | accumulator -> accumulator, linear -> linear         |

    A tf_keras inner optimizer answers with its own names.

    Returns:
      A list of slot names, in the order the slots were created.
    """
    if _is_legacy_optimizer(self._optimizer):
      return self._optimizer.get_slot_names()
    prefixes = sorted(
        (self._slot_prefix(v)
         for v in getattr(self._optimizer, "_trainable_variables", [])),
        key=len, reverse=True)
    names = []
    for v in self.variables:
      for prefix in prefixes:
        if v.name.startswith(prefix):
          suffix = v.name[len(prefix):]
          if suffix not in names:
            names.append(suffix)
          break
    return names

  # -------------------------------------------------- hyperparameters --

  def __getattr__(self, name):
    # Only reached when normal lookup fails: TF 2.4 then tried the inner
    # optimizer's hyperparameters.
    inner = self.__dict__.get("_optimizer")
    if (inner is not None and not name.startswith("__") and
        name in _hyperparameter_names(inner)):
      return getattr(inner, name)
    raise AttributeError(
        f"'{type(self).__name__}' object has no attribute '{name}'")

  def __setattr__(self, name, value):
    inner = self.__dict__.get("_optimizer")
    if (inner is not None and name != "_optimizer" and
        name in _hyperparameter_names(inner) and name not in self.__dict__ and
        not hasattr(type(self), name)):
      setattr(inner, name, value)
      return
    super().__setattr__(name, value)

  def __dir__(self):
    result = set(super().__dir__())
    inner = self.__dict__.get("_optimizer")
    if inner is not None:
      result |= _hyperparameter_names(inner)
      if not _is_legacy_optimizer(inner):
        # tf.train.Checkpoint saves the slots of objects whose dir() has
        # `get_slot_names` a second time, as `.OPTIMIZER_SLOT` entries; Keras
        # 3 optimizers already checkpoint them as their own children.
        result.discard("get_slot_names")
    return sorted(result)

  # ------------------------------------------------------ checkpoints --

  def _trackable_children(self, save_type="checkpoint", **kwargs):
    children = dict(self._optimizer._trackable_children(save_type, **kwargs))  # pylint: disable=protected-access
    if self.dynamic:
      children["loss_scale"] = self._loss_scale
    return children

  def _lookup_dependency(self, name, cached_dependencies=None):
    if cached_dependencies:
      return cached_dependencies.get(name)
    if name == "loss_scale" and self.dynamic:
      return self._loss_scale
    return self._optimizer._lookup_dependency(name)  # pylint: disable=protected-access

  @property
  def _deferred_dependencies(self):
    # Restorations waiting for variables the inner optimizer creates later
    # (Keras 3 builds lazily) must be found by the inner optimizer.
    inner = self.__dict__.get("_optimizer")
    if inner is None:
      return self._self_unconditional_deferred_dependencies
    return inner._deferred_dependencies  # pylint: disable=protected-access

  def save_own_variables(self, store):
    """Saves the loss scale and counter for Keras 3 `.keras` files."""
    if self.dynamic:
      store["0"] = self._loss_scale.current_loss_scale.numpy()
      store["1"] = self._loss_scale.counter.numpy()

  def load_own_variables(self, store):
    """Restores what `save_own_variables` saved."""
    if not self.dynamic:
      return
    if len(store.keys()) != 2:
      raise ValueError(
          f"Cannot load the loss scale of '{self.name}': expected 2 saved "
          f"values (loss scale, counter), got {len(store.keys())}.")
    self._loss_scale.current_loss_scale.assign(store["0"])
    self._loss_scale.counter.assign(store["1"])

  def stateless_apply(self, optimizer_variables, grads, trainable_variables):
    raise ValueError(
        "stateless_apply is not supported by the TF 2.4 LossScaleOptimizer "
        "(nor by the TensorFlow backend of Keras 3).")

  # ----------------------------------------------------------- configs --

  def get_config(self):
    """Returns the config in TF 2.4's format.

    Returns:
      `{"inner_optimizer", "dynamic", "initial_scale",
      "dynamic_growth_steps"}`, the inner optimizer serialized by Keras 3.
    """
    if _is_legacy_optimizer(self._optimizer):
      inner = _tf_keras.optimizers.serialize(self._optimizer)
    else:
      inner = keras.optimizers.serialize(self._optimizer)
    return {
        "inner_optimizer": inner,
        "dynamic": self.dynamic,
        "initial_scale": self.initial_scale,
        "dynamic_growth_steps": self.dynamic_growth_steps,
    }

  @classmethod
  def from_config(cls, config, custom_objects=None):
    """Creates the optimizer from a TF 2.4 or TF 2.3 config.

    Args:
      config: A `get_config` dict; or TF 2.3's `{"optimizer", "loss_scale"}`.
        The inner optimizer may be serialized by Keras 3 or by TF 2.3/2.4's
        Keras 2.
      custom_objects: Optional dict of user classes, by name.

    Returns:
      A `LossScaleOptimizer`.

    Raises:
      ValueError: If a TF 2.3 loss scale cannot be converted (multiplier not
        2, or neither fixed nor dynamic), or the inner optimizer config
        cannot be honoured by Keras 3.
    """
    config = dict(config)
    if "loss_scale" in config:
      config.update(_tf23_loss_scale_args(config.pop("loss_scale")))
      config["inner_optimizer"] = config.pop("optimizer")
    config["inner_optimizer"] = _deserialize_optimizer(
        config["inner_optimizer"], custom_objects)
    return cls(**config)


def _tf23_loss_scale_args(serialized):
  """TF 2.4 constructor arguments equivalent to a TF 2.3 loss scale."""
  loss_scale = loss_scale_module.deserialize(serialized)
  if isinstance(loss_scale, (loss_scale_module.FixedLossScale,
                             tf.compat.v1.mixed_precision.FixedLossScale)):
    return {
        "dynamic": False,
        "initial_scale": loss_scale._loss_scale_value  # pylint: disable=protected-access
    }
  if isinstance(loss_scale, (loss_scale_module.DynamicLossScale,
                             tf.compat.v1.mixed_precision.DynamicLossScale)):
    if loss_scale.multiplier != 2:
      raise ValueError("Cannot deserialize LossScaleOptimizer with a "
                       "DynamicLossScale whose multiplier is not 2. Got "
                       f"DynamicLossScale: {loss_scale}")
    return {
        "dynamic": True,
        "initial_scale": loss_scale.initial_loss_scale,
        "dynamic_growth_steps": loss_scale.increment_period,
    }
  raise ValueError(
      "Serialized LossScaleOptimizers with a LossScale that is neither a "
      "FixedLossScale nor a DynamicLossScale can no longer be deserialized")


@export("keras.mixed_precision.experimental.LossScaleOptimizer",
        v1=("keras.mixed_precision.experimental.LossScaleOptimizer",),
        warning=_V1_WARNING_PREFIX.rstrip())
@_serializable
class LossScaleOptimizerV1(LossScaleOptimizer):
  """The deprecated experimental LossScaleOptimizer of TF 2.3.

  Identical to `LossScaleOptimizer` except for the constructor, which takes a
  `loss_scale` instead of `dynamic` / `initial_scale` /
  `dynamic_growth_steps`. Each construction logs how to write it with the
  non-experimental class.

  Example:

  >>> opt1 = LossScaleOptimizerV1(tf.keras.optimizers.SGD(), loss_scale=123)
  >>> opt2 = LossScaleOptimizer(tf.keras.optimizers.SGD(), dynamic=False,
  ...                           initial_scale=123)
  >>> opt1.get_config()["initial_scale"] == opt2.get_config()["initial_scale"]
  True
  """

  def __init__(self, optimizer, loss_scale):
    """Wraps `optimizer` with the loss scaling `loss_scale` describes.

    Args:
      optimizer: The Keras 3 optimizer to wrap.
      loss_scale: `"dynamic"`; an int or float (a fixed scale); a
        `FixedLossScale` or `DynamicLossScale` (ours or TF's `tf.compat.v1`
        ones; the multiplier must be 2); or a serialized loss scale dict.

    Raises:
      TypeError: For a `LossScale` that is neither fixed nor dynamic.
      ValueError: For a `DynamicLossScale` whose multiplier is not 2, or any
        other value.
    """
    kwargs, message = _v1_args.v1_arguments(loss_scale)
    super().__init__(optimizer, **kwargs)
    tf.get_logger().warning(message)

  @classmethod
  def from_config(cls, config, custom_objects=None):
    """Creates the optimizer from a TF 2.3 or TF 2.4 config.

    Args:
      config: TF 2.3's `{"optimizer", "loss_scale"}` or a TF 2.4
        `get_config` dict.
      custom_objects: Optional dict of user classes, by name.

    Returns:
      A `LossScaleOptimizerV1`.

    Raises:
      ValueError: If the loss scale is dynamic with a multiplier other than
        2, or the inner optimizer config cannot be honoured by Keras 3.
    """
    config = dict(config)
    if "loss_scale" in config:
      args = _tf23_loss_scale_args(config["loss_scale"])
      optimizer = config["optimizer"]
    else:
      args = {
          "dynamic": config["dynamic"],
          "initial_scale": config["initial_scale"],
          "dynamic_growth_steps": config["dynamic_growth_steps"],
      }
      optimizer = config["inner_optimizer"]
    if args["dynamic"]:
      loss_scale = {
          "class_name": "DynamicLossScale",
          "config": {
              "initial_loss_scale": args["initial_scale"],
              "increment_period": args["dynamic_growth_steps"],
              "multiplier": 2.0,
          }
      }
    else:
      loss_scale = float(args["initial_scale"])
    return cls(_deserialize_optimizer(optimizer, custom_objects), loss_scale)


def _deserialize_v1_as_v2():
  """Makes Keras deserialize a serialized V1 optimizer as `LossScaleOptimizer`.

  TF 2.4.4's `tf.keras.optimizers.deserialize` mapped the class name
  "LossScaleOptimizerV1" to `LossScaleOptimizer` (the experimental class was
  to be removed); `LossScaleOptimizerV1.from_config` called directly still
  returns a V1. V1 instances keep serializing under their own name: the
  second registration gives `LossScaleOptimizer` its own name back.
  """
  register = keras.saving.register_keras_serializable
  register(package=_SERIALIZATION_PACKAGE,
           name="LossScaleOptimizerV1")(LossScaleOptimizer)
  register(package=_SERIALIZATION_PACKAGE)(LossScaleOptimizer)


_deserialize_v1_as_v2()
