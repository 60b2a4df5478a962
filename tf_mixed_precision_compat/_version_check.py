"""Fails early, with the fix, when TensorFlow or Keras is missing or too old.

TensorFlow is not an install requirement (its CPU and full wheels are
different distributions), so its minimum is enforced here; keep the minimums
equal to setup.cfg's pins and docs/support.md.
"""

from __future__ import annotations

import importlib

MIN_TENSORFLOW = (2, 18)
MIN_KERAS = (3, 7)

_TF_HINT = ("Install one with `pip install tf_mixed_precision_compat[cpu]` "
            "(tensorflow-cpu) or `pip install tf_mixed_precision_compat"
            "[tensorflow]` (the full wheel).")
_KERAS_HINT = "Install a newer one with `pip install -U keras`."


def parse(version: str) -> tuple[int, int]:
  """The (major, minor) of a version string such as '2.18.1' or '3.7.0rc1'.

  Args:
    version: A release's version string.

  Returns:
    Its first two numeric parts; a missing or non-numeric part counts as 0.
  """
  major, minor = (int("".join(c for c in p if c.isdigit()) or 0)
                  for p in (version.split(".")[:2] + ["0", "0"])[:2])
  return major, minor


def _require(module: str, label: str, minimum: tuple[int, int],
             hint: str) -> None:
  wanted = f"{label} >= {minimum[0]}.{minimum[1]}"
  try:
    found = importlib.import_module(module).__version__
  except ImportError as e:
    raise ImportError(
        f"tf_mixed_precision_compat needs {wanted}. {hint}") from e
  if parse(found) < minimum:
    raise ImportError(f"tf_mixed_precision_compat needs {wanted}, found "
                      f"{found}. {hint}")


def check() -> None:
  """Raises ImportError unless supported TensorFlow and Keras are importable.

  Raises:
    ImportError: TensorFlow or Keras is missing or older than the oldest
      supported release; the message says which and how to install one.
  """
  _require("tensorflow", "TensorFlow", MIN_TENSORFLOW, _TF_HINT)
  _require("keras", "Keras", MIN_KERAS, _KERAS_HINT)
