"""TF 2.4's Keras `LossScaleOptimizer`, wrapping Keras 3 optimizers.

Takes TF 2.4's `get_scaled_loss` / `get_unscaled_gradients` steps and Keras
3's `scale_loss` (what `fit` calls) alike; checkpoints, configs and skipped
steps are TF 2.4.4's (docs/architecture.md has the design).

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

import threading
import weakref
from typing import Any, Iterable, Optional, Sequence

import keras
import tensorflow as tf

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat.endpoints import export
from tf_mixed_precision_compat.loss_scale import dynamic_state
from tf_mixed_precision_compat.optimizers import _delegation
from tf_mixed_precision_compat.optimizers import _inner
from tf_mixed_precision_compat.optimizers import _optimizer_v2_methods
from tf_mixed_precision_compat.optimizers import _step
from tf_mixed_precision_compat.optimizers import _experimental_args

__all__ = ["LossScaleOptimizer"]

SERIALIZATION_PACKAGE = "tf_mixed_precision_compat"


def serializable(cls: type) -> type:
  """Registers `cls` with Keras as "tf_mixed_precision_compat>ClassName"."""
  return keras.saving.register_keras_serializable(
      package=SERIALIZATION_PACKAGE)(cls)


# Inner optimizer -> the dependency names TF 2.4's wrapper declared on it;
# keyed on the inner optimizer, as TF refused a second wrapper for as long as
# the inner optimizer lived, whether or not the first wrapper did.
_DECLARED: "weakref.WeakKeyDictionary[Any, tuple[str, ...]]" = (
    weakref.WeakKeyDictionary())

_DUPLICATE_DEPENDENCY = (
    "Called Trackable._track_trackable() with name='{name}', but a "
    "Trackable with this name is already declared as a dependency. Names "
    "must be unique (or overwrite=True).")


def declared_names(tracks_loss_scale: bool) -> tuple[str, ...]:
  """The dependency names a wrapper declares on its inner optimizer, in order.

  "loss_scale" (TF 2.4's class when dynamic, TF 2.3's always), then
  "base_optimizer".
  """
  return (("loss_scale", "base_optimizer") if tracks_loss_scale else
          ("base_optimizer",))


def check_unwrapped(inner_optimizer: Any, tracks_loss_scale: bool,
                    wrapped_elsewhere: bool = False) -> None:
  """Raises TF 2.4's `ValueError` if a wrapper ever wrapped `inner_optimizer`.

  TF 2.4.4 and 2.3.4 refused a second Keras wrapper, alive or not the first:
  both would share its slots and iterations. The message starts with TF's
  text. `wrapped_elsewhere`: tf_keras's own wrapper marked it (taken as TF
  2.4's dynamic one).

  Example:

  >>> inner = tf.keras.optimizers.SGD()
  >>> _ = LossScaleOptimizer(inner)
  >>> check_unwrapped(inner, tracks_loss_scale=True)
  Traceback (most recent call last):
  ...
  ValueError: Called Trackable._track_trackable() with name='loss_scale', ...
  """
  try:
    previous = _DECLARED.get(inner_optimizer)
  except TypeError:  # Not weakly referenceable: nothing was recorded.
    return
  if previous is None and wrapped_elsewhere:
    previous = declared_names(True)
  if previous is None:
    return
  name = next(n for n in declared_names(tracks_loss_scale) if n in previous)
  raise ValueError(
      _DUPLICATE_DEPENDENCY.format(name=name) +
      f" The inner optimizer ({type(inner_optimizer).__name__} "
      f"{getattr(inner_optimizer, 'name', '')!r}) is already wrapped by a "
      "LossScaleOptimizer, alive or not, which shares its slots and "
      "iterations; to wrap it again deliberately, wrap a fresh copy (same "
      "configuration, new slots): `LossScaleOptimizer("
      "type(opt).from_config(opt.get_config()))`.")


def record_wrapped(inner_optimizer: Any, tracks_loss_scale: bool) -> None:
  """Records that a wrapper wraps `inner_optimizer` (see `check_unwrapped`)."""
  try:
    _DECLARED[inner_optimizer] = declared_names(tracks_loss_scale)
  except TypeError:  # Not weakly referenceable: cannot be checked later.
    pass


def _scale_arguments(dynamic, initial_scale, dynamic_growth_steps):
  """The checked `(initial_scale, dynamic_growth_steps)`, defaults filled in."""
  if dynamic:
    return (dynamic_state.check_initial_scale(
        _experimental_args.DEFAULT_INITIAL_SCALE
        if initial_scale is None else initial_scale, "initial_scale"),
            dynamic_state.check_growth_steps(
                _experimental_args.DEFAULT_GROWTH_STEPS
                if dynamic_growth_steps is None else dynamic_growth_steps,
                "dynamic_growth_steps"))
  if initial_scale is None:
    raise ValueError('"initial_scale" must be specified if "dynamic" is '
                     "False")
  if dynamic_growth_steps is not None:
    raise ValueError('"dynamic_growth_steps" must be None if "dynamic" '
                     f"is False, but got: {dynamic_growth_steps}")
  return dynamic_state.check_initial_scale(initial_scale,
                                           "initial_scale"), None


@export("keras.mixed_precision.LossScaleOptimizer",
        v1=("keras.mixed_precision.LossScaleOptimizer",))
@serializable
class LossScaleOptimizer(_delegation.InnerDelegation,
                         _optimizer_v2_methods.OptimizerV2Methods,
                         keras.optimizers.LossScaleOptimizer):
  """An optimizer that applies loss scaling to prevent numeric underflow.

  Wraps a Keras 3 optimizer with TF 2.4's API. With `dynamic=True` the scale
  halves (never below 1) on a step with a NaN or infinite gradient, which is
  skipped, and doubles after `dynamic_growth_steps` finite steps. Custom
  loops call `get_scaled_loss`, `get_unscaled_gradients`, `apply_gradients`;
  `model.fit` works too. The inner optimizer's hyperparameters are read and
  set through the wrapper (`opt.beta_1`); its other attributes are not.

  Example:

  >>> opt = LossScaleOptimizer(tf.keras.optimizers.SGD(0.25))
  >>> var = tf.Variable(1.)
  >>> _ = opt.minimize(lambda: var ** 2, var_list=[var])
  >>> float(var.numpy()), float(opt.loss_scale), int(opt.dynamic_counter)
  (0.5, 32768.0, 1)
  """

  _TRACKS_ANY_LOSS_SCALE = False  # TF 2.3's class: see `declared_names`.

  def __init__(self, inner_optimizer: Any, dynamic: bool = True,
               initial_scale: Optional[float] = None,
               dynamic_growth_steps: Optional[int] = None) -> None:
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
      ValueError: If `inner_optimizer` scales losses or was ever wrapped, an
        argument is missing, extra or out of range, or the strategy does
        not support loss scaling.
    """
    adapter = _inner.adapt(inner_optimizer)
    if not isinstance(dynamic, bool):
      raise TypeError('"dynamic" argument to LossScaleOptimizer.__init__ must '
                      f"be a bool, but got: {dynamic!r}")
    if getattr(inner_optimizer, "loss_scale_factor", None) is not None:
      raise ValueError(
          '"inner_optimizer" has loss_scale_factor='
          f"{inner_optimizer.loss_scale_factor}; the LossScaleOptimizer does "
          "the loss scaling, so create the inner optimizer without "
          "loss_scale_factor.")
    initial_scale, dynamic_growth_steps = _scale_arguments(
        dynamic, initial_scale, dynamic_growth_steps)
    _step.raise_if_strategy_unsupported()
    tracks_loss_scale = dynamic or self._TRACKS_ANY_LOSS_SCALE
    check_unwrapped(inner_optimizer, tracks_loss_scale)
    record_wrapped(inner_optimizer, tracks_loss_scale)

    # To checkpoints the wrapper looks like the inner optimizer (`_delegation`).
    object.__setattr__(self, "_self_setattr_tracking", False)
    # Only the isinstance relation is wanted of Keras's LossScaleOptimizer.
    keras.optimizers.Optimizer.__init__(self, learning_rate=0.0)
    self._optimizer = inner_optimizer
    self._adapter = adapter
    self._marks = threading.local()
    # TF 2.4's state object when dynamic, else the fixed scale (a float);
    # `self.dynamic` tells which, which a type checker cannot follow.
    self._loss_scale: Any = (
        dynamic_state.DynamicLossScaleState(
            initial_scale, dynamic_growth_steps, multiplier=2)
        if dynamic else initial_scale)
    self.built = bool(getattr(inner_optimizer, "built", False))

  @property
  def dynamic(self) -> bool:
    """Bool indicating whether dynamic loss scaling is used."""
    return not isinstance(self._loss_scale, float)

  @property
  def loss_scale(self) -> tf.Tensor:
    """The current loss scale as a float32 scalar tensor."""
    if self.dynamic:
      return tf.convert_to_tensor(self._loss_scale.current_loss_scale)
    return tf.convert_to_tensor(self._loss_scale, dtype=tf.float32)

  @property
  def dynamic_counter(self) -> Optional[tf.Variable]:
    """Finite steps since the scale last changed (int64 variable), or None."""
    return self._loss_scale.counter if self.dynamic else None

  @property
  def initial_scale(self) -> float:
    """The initial loss scale (the fixed scale when not dynamic)."""
    if self.dynamic:
      return self._loss_scale.initial_loss_scale
    return self._loss_scale

  @property
  def dynamic_growth_steps(self) -> Optional[int]:
    """Finite steps before the scale doubles, or None when not dynamic."""
    return self._loss_scale.growth_steps if self.dynamic else None

  @property
  def inner_optimizer(self) -> Any:
    """The optimizer this LossScaleOptimizer wraps."""
    return self._optimizer

  # The step-path methods are exempt from AutoGraph: they have no
  # tensor-dependent Python control flow, and converting them made tracing
  # markedly slower.

  @tf.autograph.experimental.do_not_convert
  def get_scaled_loss(self, loss: Any) -> Any:
    """Multiplies `loss` by the loss scale.

    Args:
      loss: A tensor, or a callable returning one.

    Returns:
      `loss * loss_scale` (the scale cast to the loss's dtype), or a callable
      returning it when `loss` is callable.
    """
    return _step.scaled_loss(loss, lambda: self.loss_scale)

  @tf.autograph.experimental.do_not_convert
  def get_unscaled_gradients(self, grads: Sequence[Any]) -> list[Any]:
    """Divides gradients by the loss scale (multiplying by its reciprocal).

    Args:
      grads: A list of tensors, `tf.IndexedSlices` (kept sparse) or None
        (kept None).

    Returns:
      A new list of the same length.
    """
    self._marks.pending = False
    return _step.unscale_gradients(grads, self.loss_scale)

  @tf.autograph.experimental.do_not_convert
  def scale_loss(self, loss: Any) -> Any:
    """Keras 3's hook: scales `loss`; gradients then arrive scaled.

    `Model.fit` passes the gradients of the result, still scaled, to
    `apply_gradients`; the call marks this thread (replica) and graph so the
    next `apply_gradients` there unscales them. Custom loops should use
    `get_scaled_loss` and `get_unscaled_gradients` instead.
    """
    scaled = self.get_scaled_loss(loss)
    self._marks.pending = True
    self._marks.graph = _step.graph_token()
    return scaled

  def _take_mark(self):
    pending = getattr(self._marks, "pending", False)
    self._marks.pending = False
    graph = getattr(self._marks, "graph", None)
    return pending and graph is _step.graph_token()

  def build(self, var_list: Sequence[Any]) -> None:
    """Creates the inner optimizer's variables for `var_list`."""
    self._adapter.build(var_list)
    self.built = True

  @tf.autograph.experimental.do_not_convert
  def _build_lifted(self, variables):
    with tf.init_scope():
      if not self.built:  # Another replica's merge_call may have built it.
        self.build(variables)

  def apply_gradients(self, grads_and_vars: Iterable[tuple[Any, Any]],
                      name: Optional[str] = None,
                      experimental_aggregate_gradients: bool = True) -> Any:
    """Updates the loss scale and applies the gradients if all are finite.

    Must be called in a replica context (eagerly, in a `tf.function`, or in
    `strategy.run`). On a step with a NaN or infinite gradient on any replica
    no variable changes, the dynamic scale halves, the counter resets and
    `iterations` still advances.

    Args:
      grads_and_vars: (gradient, variable) pairs; gradients unscaled, or
        scaled if the loss came from `scale_loss` in this step.
      name: Passed on, as TF 2.4 did, as the second positional argument of
        the inner optimizer's `apply_gradients` where it takes one.
      experimental_aggregate_gradients: Whether the inner optimizer sums the
        gradients over replicas. False (already summed) is only supported
        with one replica, as Keras 3 optimizers always aggregate.

    Returns:
      The inner `iterations` (in a `tf.compat.v1` graph: the step's op).

    Raises:
      ValueError: In cross-replica context, under an unsupported strategy,
        or for `experimental_aggregate_gradients=False` with replicas.
    """
    if tf.distribute.in_cross_replica_context():
      raise ValueError("apply_gradients() must be called in a replica context.")
    # The optimizer is often created outside the strategy's scope.
    _step.raise_if_strategy_unsupported()
    grads_and_vars = _step.check_grads_and_vars(
        tuple(grads_and_vars), self._adapter if self.built else None)
    grads = [g for g, _ in grads_and_vars]
    variables = [v for _, v in grads_and_vars]
    if self._take_mark():
      grads = self.get_unscaled_gradients(grads)
    self._adapter.check_aggregation(experimental_aggregate_gradients)
    if not self.built:
      # Lifted out of any tf.function, as TF 2.4 made its slots: Keras 3
      # otherwise fails to build on a first distributed tf.function step.
      # In the cross-replica context, so that a checkpoint restored before
      # fills every replica's copy of each slot, not the first one's only.
      tf.distribute.get_replica_context().merge_call(
          lambda _: self._build_lifted(variables))
    train_op = tf.distribute.get_replica_context().merge_call(
        _step.update_and_apply,
        args=(self._loss_scale if self.dynamic else None, self._adapter,
              grads, variables, name, experimental_aggregate_gradients))
    if train_op is not None and not tf.inside_function():
      return train_op  # In a `tf.compat.v1` graph, as TF 2.4.
    return self.iterations

  @tf.autograph.experimental.do_not_convert
  def apply(self, grads: Sequence[Any],
            trainable_variables: Optional[Sequence[Any]] = None) -> None:
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
      trainable_variables = self._adapter.built_variables()
    grads = list(grads)
    trainable_variables = list(trainable_variables)
    # zip() would silently drop the unmatched tail.
    if len(grads) != len(trainable_variables):
      raise ValueError(
          f'"grads" has {len(grads)} gradients but there are '
          f"{len(trainable_variables)} trainable_variables; apply() needs one "
          "gradient (or None) per variable, in the same order.")
    self.apply_gradients(zip(grads, trainable_variables))

  def minimize(self, loss: Any, var_list: Any, grad_loss: Any = None,
               name: Optional[str] = None,
               tape: Optional[tf.GradientTape] = None) -> Any:
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
      As `apply_gradients`.

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

  def get_gradients(self, loss: Any, params: Sequence[Any]) -> list[Any]:
    """Graph-mode gradients of the scaled `loss`, unscaled (`tf.gradients`).

    Raises:
      ValueError: If a variable has no gradient, as TF 2.4 did.
    """
    return _step.graph_gradients(self, loss, params)

  def get_updates(self, loss: Any, params: Sequence[Any]) -> list[Any]:
    """Graph-mode update ops, as TF 2.4's `get_updates`."""
    grads = self.get_gradients(loss, params)
    return [self.apply_gradients(zip(grads, params))]

  def _wrapper_children(self):
    # TF 2.4's checkpoint name for the loss scale state.
    return {"loss_scale": self._loss_scale} if self.dynamic else {}

  def save_own_variables(self, store: Any) -> None:
    """Saves the loss scale and counter for Keras 3 `.keras` files."""
    if self.dynamic:
      store["0"] = self._loss_scale.current_loss_scale.numpy()
      store["1"] = self._loss_scale.counter.numpy()

  def load_own_variables(self, store: Any) -> None:
    """Restores what `save_own_variables` saved."""
    if not self.dynamic:
      return
    if len(store.keys()) != 2:
      raise ValueError(
          f"Cannot load the loss scale of '{self.name}': expected 2 saved "
          f"values (loss scale, counter), got {len(store.keys())}.")
    self._loss_scale.current_loss_scale.assign(store["0"])
    self._loss_scale.counter.assign(store["1"])

  def stateless_apply(self, optimizer_variables: Any, grads: Any,
                      trainable_variables: Any) -> Any:
    raise ValueError(
        "stateless_apply is not supported by the TF 2.4 LossScaleOptimizer "
        "(nor by the TensorFlow backend of Keras 3).")

  def get_config(self) -> dict[str, Any]:
    """Returns the config in TF 2.4's format (inner optimizer by Keras 3)."""
    return {
        "inner_optimizer": self._adapter.serialize(),
        "dynamic": self.dynamic,
        "initial_scale": self.initial_scale,
        "dynamic_growth_steps": self.dynamic_growth_steps,
    }

  @classmethod
  def from_config(cls, config: dict[str, Any],
                  custom_objects: Optional[dict[str, Any]] = None) -> Any:
    """Creates the optimizer from a TF 2.4 or TF 2.3 config.

    Args:
      config: A `get_config` dict; or TF 2.3's `{"optimizer", "loss_scale"}`.
        The inner optimizer may be serialized by Keras 3 or by TF 2.3/2.4's
        Keras 2.
      custom_objects: Optional dict of user classes, by name.

    Raises:
      ValueError: If a TF 2.3 loss scale cannot be converted (multiplier not
        2, or neither fixed nor dynamic), or the inner optimizer config
        cannot be honoured by Keras 3.
    """
    config = dict(config)
    if "loss_scale" in config:
      config.update(
          _experimental_args.tf23_config_arguments(config.pop("loss_scale")))
      config["inner_optimizer"] = config.pop("optimizer")
    config["inner_optimizer"] = _inner.deserialize(
        config["inner_optimizer"], custom_objects)
    return cls(**config)


def loss_scale_state(optimizer: Any) -> Any:
  """The dynamic loss-scale state of a `LossScaleOptimizer`, else None.

  Its `current_loss_scale` and `counter` are what checkpoints hold under
  `optimizer/loss_scale`; found as that dependency, so that the class keeps
  exactly TF 2.4's API. None for a fixed or a user `LossScale`.
  """
  if not (isinstance(optimizer, LossScaleOptimizer) and optimizer.dynamic):
    return None
  state = _private_api.lookup_dependency(optimizer, "loss_scale")
  if isinstance(state, dynamic_state.DynamicLossScaleState):
    return state
  if isinstance(state, dynamic_state.DynamicScaleCore):
    return _CoreState(state)
  return None


class _CoreState:
  """A TF 2.3 `DynamicLossScale` under TF 2.4's state names."""

  def __init__(self, core):
    self._core = core

  @property
  def current_loss_scale(self):
    return _private_api.lookup_dependency(self._core, "current_loss_scale")

  @property
  def counter(self):
    return dynamic_state.counter_variable(self._core)
