"""TF 2.x `OptimizerV2` private methods that real jobs call on the wrapper.

TF 2.3/2.4's Keras loss-scale optimizers were `OptimizerV2`s, and jobs call
a few of its private methods on them: `_create_all_weights(var_list)` to
create the slots before a restore fills them, `_decayed_lr` to log the
learning rate, `_create_hypers` / `_create_slots`, `_get_hyper` /
`_set_hyper`. A wrapper of Keras 3's (or tf_keras's current) optimizers is no
`OptimizerV2`; `OptimizerV2Methods` gives each method what TF 2.3.4/2.4.4's
wrapper did (recorded in tests/fixtures/member_kinds/): slot creation, a
no-op, or TF's `AttributeError`, naming the call to make instead.

Example:

>>> import keras
>>> import tensorflow as tf
>>> from tf_mixed_precision_compat.optimizers import loss_scale_optimizer
>>> opt = loss_scale_optimizer.LossScaleOptimizer(keras.optimizers.Adam())
>>> var = tf.Variable([1.0, 2.0])
>>> opt._create_all_weights([var])
>>> opt.get_slot(var, "m").shape
TensorShape([2])
"""

from typing import Any, Callable, NoReturn, Sequence


def _refused(name: str, why: str, instead: str) -> Callable[..., NoReturn]:
  """A method raising TF 2.3/2.4's `AttributeError`, saying what to call."""

  def method(self, *args: Any, **kwargs: Any) -> NoReturn:
    del args, kwargs
    raise AttributeError(
        f"{type(self).__name__}.{name}(): TF 2.3/2.4's loss-scale optimizer "
        f"raised AttributeError here too ({why}). {instead}")

  method.__name__ = name
  method.__doc__ = f"Raises AttributeError, as TF 2.3/2.4 did: {instead}"
  return method


_NO_HYPERS = "it kept no hyperparameters of its own"


class OptimizerV2Methods:
  """Mixin: TF 2.x `OptimizerV2` private methods of a loss-scale optimizer.

  For classes with a `build(var_list)` that builds the inner optimizer.
  """

  build: Callable[[Sequence[Any]], None]

  def _create_all_weights(self, var_list: Sequence[Any]) -> None:
    """Creates the inner optimizer's iterations, hyperparameters and slots.

    What TF 2.3/2.4's wrapper did (it forwarded the call), so a restore that
    follows fills the slots: Keras 3 creates them by building the inner
    optimizer for `var_list`, once.
    """
    self.build(list(var_list))

  def _create_slots(self, var_list: Sequence[Any]) -> None:
    """Does nothing, as on TF 2.3/2.4's wrapper (`OptimizerV2`'s no-op).

    `_create_all_weights(var_list)` creates the slots.
    """
    del var_list

  _create_hypers = _refused(
      "_create_hypers", _NO_HYPERS,
      "Keras 3 creates an optimizer's variables when it is built: "
      "`optimizer._create_all_weights(var_list)` (TF 2.x) or "
      "`optimizer.build(var_list)`.")
  _decayed_lr = _refused(
      "_decayed_lr", _NO_HYPERS,
      "The learning rate at this step is `optimizer.learning_rate` (Keras 3 "
      "evaluates a schedule there, at `optimizer.iterations`).")
  _get_hyper = _refused(
      "_get_hyper", _NO_HYPERS,
      "Read the hyperparameter from the wrapper: `optimizer.learning_rate`, "
      "`optimizer.beta_1`, ...")
  _set_hyper = _refused(
      "_set_hyper", _NO_HYPERS + "; TF 2.3's silently kept the value unused",
      "Set it on the wrapper: `optimizer.learning_rate = value` (or "
      "`optimizer.learning_rate.assign(value)`).")


# The methods by name, for classes that cannot take the mixin.
METHODS = {name: method for name, method in vars(OptimizerV2Methods).items()
           if name.startswith("_") and not name.startswith("__")}
