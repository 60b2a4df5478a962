"""`loss_scale` of the experimental (TF 2.3) LossScaleOptimizer, both ways.

`LossScaleValue` is the `LossScale` TF 2.3 code calls (`opt.loss_scale()`,
the scale at the call) and the float32 scale tensor TF 2.4 code reads
(`float(opt.loss_scale)`: the scale when the property was read, as TF 2.4's
property returned a tensor read then).

Example:

>>> from tf_mixed_precision_compat import loss_scale as loss_scale_module
>>> value = LossScaleValue(loss_scale_module.FixedLossScale(128))
>>> float(value()), float(value), float(value * 2)
(128.0, 128.0, 256.0)
"""

from typing import Any, Optional

import numpy as np
import tensorflow as tf

from tf_mixed_precision_compat import _private_api


def _tensor_method(name):
  """A method applying the float32 tensor's `name` to the current scale."""

  def method(self, *args):
    return getattr(self.tensor(), name)(*args)

  method.__name__ = name
  method.__doc__ = f"The current scale tensor's `{name}`."
  return method


class LossScaleValue:
  """The `LossScale` of an experimental LossScaleOptimizer, tensor-like.

  Callable as the `LossScale` (the scale at the call), with its attributes
  and `isinstance` class; and, wherever TF 2.4 code used a tensor
  (conversion, arithmetic, `float()`, `K.get_value`, `Session.run` fetches),
  the scale read when it was made: each read of the optimizer's
  `loss_scale` makes one, as TF 2.4's property read the variable.
  """

  # `tf.is_tensor` (and so `K.get_value`) treat it as the scale tensor.
  is_tensor_like = True

  def __init__(self, loss_scale: Any) -> None:
    """Wraps `loss_scale`, a TF 2.3 `LossScale`, and reads its scale now."""
    object.__setattr__(self, "_loss_scale", loss_scale)
    try:
      read: Any = tf.convert_to_tensor(loss_scale(), dtype=tf.float32)
    except (ValueError, TypeError, RuntimeError, tf.errors.OpError) as e:
      # Read where the scale cannot be (a graph its variable is not in):
      # TF 2.3 code only wants the `LossScale` there, and got it; using the
      # value as a tensor raises what the read raised, as TF 2.4's read did.
      read = e
    object.__setattr__(self, "_read", read)

  @property  # type: ignore[misc]
  def __class__(self):
    # `isinstance(opt.loss_scale, DynamicLossScale)`, as TF 2.3 code checks.
    return type(self._loss_scale)

  def __call__(self) -> tf.Tensor:
    """The current loss scale, a float32 scalar tensor (TF 2.3's call)."""
    return self._loss_scale()

  def __getattr__(self, name: str) -> Any:
    loss_scale = self.__dict__.get("_loss_scale")
    if name.startswith("__") or loss_scale is None:
      raise AttributeError(name)
    return getattr(loss_scale, name)

  def __setattr__(self, name: str, value: Any) -> None:
    setattr(self._loss_scale, name, value)

  def __repr__(self) -> str:
    return repr(self._loss_scale)

  def __hash__(self) -> int:
    return hash(self._loss_scale)

  def __reduce__(self):
    raise TypeError("The loss_scale of a LossScaleOptimizer cannot be pickled; "
                    "use its get_config() or float(loss_scale).")

  def tensor(self) -> tf.Tensor:
    """The loss scale read when this value was made, a float32 tensor."""
    if isinstance(self._read, Exception):
      raise self._read
    return self._read

  def __tf_tensor__(self, dtype: Optional[tf.DType] = None,
                    name: Optional[str] = None) -> tf.Tensor:
    return tf.convert_to_tensor(self.tensor(), dtype=dtype, name=name)

  @property
  def dtype(self) -> tf.DType:
    """float32, the dtype of the scale tensor."""
    return tf.float32

  @property
  def shape(self) -> tf.TensorShape:
    """The scalar shape of the scale tensor."""
    return tf.TensorShape([])

  def numpy(self) -> Any:
    """The current loss scale as a NumPy float32 (eagerly)."""
    return self.tensor().numpy()

  def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
    del copy
    return np.asarray(self.numpy(), dtype=dtype)

  def __float__(self) -> float:
    return float(self.numpy())

  def __int__(self) -> int:
    return int(self.numpy())

  def __format__(self, format_spec: str) -> str:
    if not format_spec:
      return str(self)
    return format(self.numpy(), format_spec)

  def __eq__(self, other: Any) -> Any:
    if isinstance(other, LossScaleValue) or other is self._loss_scale:
      return other is self._loss_scale or other._loss_scale is self._loss_scale
    return self.tensor() == other

  def __ne__(self, other: Any) -> Any:
    if isinstance(other, LossScaleValue) or other is self._loss_scale:
      return not self.__eq__(other)
    return self.tensor() != other


for _name in ("add", "radd", "sub", "rsub", "mul", "rmul", "truediv",
              "rtruediv", "floordiv", "rfloordiv", "mod", "pow", "rpow", "neg",
              "abs", "lt", "le", "gt", "ge"):
  setattr(LossScaleValue, f"__{_name}__", _tensor_method(f"__{_name}__"))
del _name

_private_api.register_session_fetch(LossScaleValue, LossScaleValue.tensor)
