"""Deprecation warnings worded as TensorFlow 2.4 worded them.

Logged once per callable through `tf.get_logger()` with TF's fixed phrases,
which users filter on.
"""

from __future__ import annotations

import inspect
import os
import threading
import types
from typing import Hashable

import tensorflow as tf

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_warned: set[Hashable] = set()
_lock = threading.Lock()


def _caller_location() -> str:
  """Returns 'file:line' of the first frame outside this package."""
  # None where Python keeps no frames.
  frame: types.FrameType | None = inspect.currentframe()
  while frame is not None:
    filename = frame.f_code.co_filename
    if not os.path.abspath(filename).startswith(_PACKAGE_DIR):
      return f"{filename}:{frame.f_lineno}"
    frame = frame.f_back
  return "<unknown>"


def deprecation_message(qualname: str, module: str, instructions: str) -> str:
  """The body of TensorFlow's `deprecated(None, instructions)` warning."""
  return (f"{qualname} (from {module}) is deprecated and will be removed in a "
          f"future version.\nInstructions for updating:\n{instructions}")


def warn_once(key: Hashable, message: str) -> None:
  """Logs `message` ("From file:line: " added) the first time `key` is seen."""
  with _lock:
    if key in _warned:
      return
    _warned.add(key)
  tf.get_logger().warning("From %s: %s", _caller_location(), message)


def reset_for_testing() -> None:
  """Forgets which warnings were logged, so tests can observe them again."""
  with _lock:
    _warned.clear()
