"""Fails early, with the fix, when TensorFlow is missing or too old.

TensorFlow is not an install requirement of the package (see setup.cfg: the
CPU and full wheels are different distributions), so this is where the
requirement is enforced.
"""

_MIN_VERSION = (2, 16)
_HINT = ("Install one with `pip install tf_mixed_precision_compat[cpu]` "
         "(tensorflow-cpu) or `pip install tf_mixed_precision_compat"
         "[tensorflow]` (the full wheel).")


def check():
  """Raises ImportError unless TensorFlow >= 2.16 is importable."""
  try:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(
        f"tf_mixed_precision_compat needs TensorFlow >= 2.16. {_HINT}") from e
  parts = tf.__version__.split(".")
  version = tuple(int("".join(c for c in p if c.isdigit()) or 0)
                  for p in parts[:2])
  if version < _MIN_VERSION:
    raise ImportError(f"tf_mixed_precision_compat needs TensorFlow >= 2.16, "
                      f"found {tf.__version__}. {_HINT}")
