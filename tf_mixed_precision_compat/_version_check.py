"""The TensorFlow/Keras version check made on import: refuse old, warn new.

TensorFlow is not an install requirement (its CPU and full wheels are
different distributions), so its minimum is enforced here; keep the minimums
equal to setup.cfg's pins and docs/support.md. Releases newer than the
newest the suite ran on are accepted with one warning (docs/support.md says
why warn rather than refuse).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import warnings
from typing import Optional

MIN_TENSORFLOW = (2, 18)
MIN_KERAS = (3, 7)

# The releases the suite ran on (.ci/run; docs/support.md): the oldest pair
# (the minimums above) and the newest stable releases.
OLDEST_VERIFIED = {"TensorFlow": "2.18.1", "Keras": "3.7.0",
                   "tf_keras": "2.18.0"}
NEWEST_VERIFIED = {"TensorFlow": "2.21.0", "Keras": "3.15.1",
                   "tf_keras": "2.21.0"}

# tf_keras is optional and importing it is slow, so its version is read from
# the installed distribution (stable or nightly) rather than the module.
_TF_KERAS_DISTRIBUTIONS = ("tf-keras", "tf-keras-nightly")

_TF_HINT = ("Install one with `pip install tf_mixed_precision_compat[cpu]` "
            "(tensorflow-cpu) or `pip install tf_mixed_precision_compat"
            "[tensorflow]` (the full wheel).")
_KERAS_HINT = "Install a newer one with `pip install -U keras`."


class UnverifiedVersionWarning(UserWarning):
  """TensorFlow, Keras or tf_keras is newer than the newest verified release.

  Example:

  >>> import warnings
  >>> with warnings.catch_warnings():  # Silenced for this block only.
  ...   warnings.simplefilter("ignore", UnverifiedVersionWarning)
  ...   check()
  """


def parse(version: str) -> tuple[int, int]:
  """The (major, minor) of a version string; a missing part counts as 0.

  Example:

  >>> parse("2.23.0.dev20261026")
  (2, 23)
  """
  major, minor = (int("".join(c for c in p if c.isdigit()) or 0)
                  for p in (version.split(".")[:2] + ["0", "0"])[:2])
  return major, minor


def _require(module: str, label: str, minimum: tuple[int, int],
             hint: str) -> str:
  wanted = f"{label} >= {minimum[0]}.{minimum[1]}"
  try:
    found = importlib.import_module(module).__version__
  except ImportError as e:
    raise ImportError(
        f"tf_mixed_precision_compat needs {wanted}. {hint}") from e
  if parse(found) < minimum:
    raise ImportError(f"tf_mixed_precision_compat needs {wanted}, found "
                      f"{found}. {hint}")
  return found


def _tf_keras_version() -> Optional[str]:
  for distribution in _TF_KERAS_DISTRIBUTIONS:
    try:
      return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
      continue
  return None


def unverified(found: dict[str, Optional[str]]) -> list[str]:
  """`found`'s versions (by label; None: absent) newer than the newest verified.

  By major.minor: TensorFlow and Keras change their APIs in minor releases.

  Example:

  >>> unverified({"TensorFlow": "2.23.0.dev20261026", "Keras": "3.15.0"})
  ['TensorFlow 2.23.0.dev20261026 (newest verified: 2.21.0)']
  """
  return [f"{label} {version} (newest verified: {NEWEST_VERIFIED[label]})"
          for label, version in found.items()
          if version is not None and
          parse(version) > parse(NEWEST_VERIFIED[label])]


def check() -> None:
  """Refuses old or missing TensorFlow and Keras; warns once for newer ones.

  Raises:
    ImportError: TensorFlow or Keras is missing or too old (says how to fix).

  Warns:
    UnverifiedVersionWarning: Naming every release newer than the verified.

  Example:

  >>> check()  # The versions the suite ran on: nothing to say.
  """
  found = {
      "TensorFlow": _require("tensorflow", "TensorFlow", MIN_TENSORFLOW,
                             _TF_HINT),
      "Keras": _require("keras", "Keras", MIN_KERAS, _KERAS_HINT),
      "tf_keras": _tf_keras_version(),
  }
  newer = unverified(found)
  if newer:
    warnings.warn(
        "tf_mixed_precision_compat has not been verified with "
        f"{', '.join(newer)}. It is used as is; if a TF 2.3/2.4 behaviour "
        "differs, install the newest verified releases "
        f"(TensorFlow {NEWEST_VERIFIED['TensorFlow']}, Keras "
        f"{NEWEST_VERIFIED['Keras']}, tf_keras {NEWEST_VERIFIED['tf_keras']}) "
        "and report it.", UnverifiedVersionWarning, stacklevel=2)
