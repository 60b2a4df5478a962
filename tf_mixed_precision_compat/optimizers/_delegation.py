"""The inner optimizer seen through a loss-scale wrapper, as in TF 2.4.

`InnerDelegation` hands hyperparameters, variables, slots, TF 2.4's `weights`
and checkpoint dependencies to the wrapped optimizer.
"""

import numpy as np
import tensorflow as tf

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat.optimizers import _inner
from tf_mixed_precision_compat.optimizers import _tf24_weights


def _delegated_property(name):
  """A property reading and writing the inner optimizer's `name`."""

  def getter(self):
    return getattr(self._optimizer, name)

  def setter(self, value):
    inner = self.__dict__.get("_optimizer")
    # Keras 3's constructor sets these on the wrapper before it wraps.
    if inner is not None:
      setattr(inner, name, value)

  return property(getter, setter, doc=f"The inner optimizer's {name}.")


class InnerDelegation:
  """Mixin: the inner optimizer's hyperparameters, variables and trackables.

  Only hyperparameters reach the inner optimizer through attribute access.
  The class sets `_optimizer` and `_adapter` and may define
  `_wrapper_children()`, its own checkpoint children.
  """

  def __getattr__(self, name):
    # Only reached when normal lookup fails: TF 2.4 then tried the inner
    # optimizer's hyperparameters.
    adapter = self.__dict__.get("_adapter")
    if (adapter is not None and not name.startswith("__") and
        name in adapter.hyperparameter_names()):
      return getattr(adapter.optimizer, name)
    raise AttributeError(
        f"'{type(self).__name__}' object has no attribute '{name}'")

  def __setattr__(self, name, value):
    adapter = self.__dict__.get("_adapter")
    if (adapter is not None and name not in ("_optimizer", "_adapter") and
        name in adapter.hyperparameter_names() and
        name not in self.__dict__ and not hasattr(type(self), name)):
      setattr(adapter.optimizer, name, value)
      return
    if adapter is not None and name == "iterations":
      # Straight to the inner optimizer: Keras' attribute tracking would
      # first read `iterations`, which creates a tf_keras OptimizerV2's
      # counter, and OptimizerV2 then refuses to have it set (TF 2.4 did not).
      adapter.set_iterations(value)
      return
    super().__setattr__(name, value)

  def __dir__(self):
    result = set(super().__dir__())
    adapter = self.__dict__.get("_adapter")
    if adapter is not None:
      result |= adapter.hyperparameter_names()
      result -= adapter.dir_hidden
    return sorted(result)

  @property
  def iterations(self):
    """The inner optimizer's step counter (settable, as in TF 2.4)."""
    return self._optimizer.iterations

  @iterations.setter
  def iterations(self, value):
    adapter = self.__dict__.get("_adapter")
    if adapter is None:  # Keras 3's constructor, before there is an inner one.
      return
    adapter.set_iterations(value)

  learning_rate = _delegated_property("learning_rate")
  lr = learning_rate
  clipnorm = _delegated_property("clipnorm")
  clipvalue = _delegated_property("clipvalue")
  global_clipnorm = _delegated_property("global_clipnorm")

  @property
  def variables(self):
    """The inner optimizer's variables; also callable, as TF 2.4's method."""
    return self._adapter.variables()

  def _tf24_weights(self):
    """`(description, variable)` of TF 2.4's `weights`, in its order."""
    if not isinstance(self._adapter, _inner.Keras3Inner):
      # A tf_keras OptimizerV2 lists TF 2.4's weights itself.
      return [(v.name, v) for v in self._optimizer.weights]
    return _tf24_weights.layout(self._adapter)

  @property
  def weights(self):
    """The inner optimizer's weights as TF 2.4 listed them.

    `[iterations] + slots` in TF 2.4's order (Adam: every `m`, then every
    `v`); Keras 3's own list is `variables`.
    """
    return [v for _, v in self._tf24_weights()]

  def get_weights(self):
    """The values of `weights` (TF 2.4's layout), as NumPy arrays."""
    return [np.asarray(v.numpy()) for v in self.weights]

  def set_weights(self, weights):
    """Sets `weights` (TF 2.4's layout) from a list of arrays.

    Raises:
      ValueError: If the length or a shape does not match TF 2.4's layout
        (the message lists it); nothing is assigned then.
    """
    _tf24_weights.set_values(self._tf24_weights(), weights)

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
    return self._adapter.add_weight(name, shape, dtype, initializer,
                                    aggregation)

  def add_slot(self, var, slot_name, initializer="zeros"):
    """Adds a per-variable optimizer variable named after `var`."""
    return self._adapter.add_slot(var, slot_name, initializer)

  def get_slot(self, var, slot_name):
    """The inner optimizer's variable `slot_name` for `var`.

    Keras 3's slot names and TF 2.x's (see `get_slot_names`) are both
    accepted, so `get_slot(var, "m")` of TF 2.4 code finds Adam's moment.

    Args:
      var: A variable the inner optimizer updates.
      slot_name: A slot name, Keras 3's or TF 2.x's.

    Returns:
      The slot variable.

    Raises:
      KeyError: If there is no such slot.

    Example:

    >>> from tf_mixed_precision_compat import LossScaleOptimizer
    >>> opt = LossScaleOptimizer(tf.keras.optimizers.Adam())
    >>> var = tf.Variable([1.0])
    >>> _ = opt.apply_gradients([(tf.constant([0.5]), var)])
    >>> opt.get_slot(var, "m") is opt.get_slot(var, "momentum")
    True
    """
    return self._adapter.get_slot(var, slot_name)

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
    return self._adapter.get_slot_names()

  def _trackable_children(self, save_type="checkpoint", **kwargs):
    children = dict(_private_api.trackable_children(self._optimizer,
                                                    save_type, **kwargs))
    children.update(self._wrapper_children())
    return children

  def _lookup_dependency(self, name, cached_dependencies=None):
    if cached_dependencies:
      return cached_dependencies.get(name)
    own = self._wrapper_children()
    if name in own:
      return own[name]
    return _private_api.lookup_dependency(self._optimizer, name)

  @property
  def _deferred_dependencies(self):
    # Restorations waiting for variables the inner optimizer creates later
    # (Keras 3 builds lazily) must be found by the inner optimizer.
    adapter = self.__dict__.get("_adapter")
    if adapter is None:
      return self._self_unconditional_deferred_dependencies
    return _private_api.deferred_dependencies(adapter.optimizer)

  @property
  def _create_or_restore_slot_variable(self):
    # TF's restore hands the slots saved under this wrapper to this hook: a
    # tf_keras OptimizerV2 keeps them until its slots exist. Keras 3 has none.
    adapter = self.__dict__.get("_adapter")
    restorer = None if adapter is None else adapter.slot_restorer()
    if restorer is None:
      raise AttributeError("_create_or_restore_slot_variable")
    return restorer

  def _wrapper_children(self):
    """The wrapper's own checkpoint children, by name."""
    return {}
