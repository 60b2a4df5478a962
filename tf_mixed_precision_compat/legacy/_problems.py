"""Restore problems as records: what does not fit, and where.

The matcher and the wait stage make `Problem`s, `RestoreError` carries them,
and `inspect` explains them from their kind and fields, so that rewording a
message (one `__str__`) never changes what `inspect` says.
"""

import dataclasses
from typing import Any

# The kinds of problem, each with the fields it sets besides `key`.
SHAPE = "shape"  # found, expected: the value's and `target`'s shapes.
DTYPE = "dtype"  # found, expected: the value's and `target`'s dtypes.
TWICE = "twice"  # other: a second key that restores `target` too.
AMBIGUOUS = "ambiguous"  # target: the Keras 3 variables the key's paths reach.
STRUCTURE = "structure"  # found: the key's own layer, `target` the one reached.
VALUE = "value"  # reason: why the value itself cannot be restored.
NO_MATCH = "no match"  # target: a model none of whose weights matched (no key).

_TEXT = {
    SHAPE: "{key}: shape {found} in the checkpoint, {expected} for {target}",
    DTYPE: "{key}: dtype {found} in the checkpoint, {expected} for {target}",
    TWICE: "{key} and {other} both restore {target}",
    AMBIGUOUS: "{key}: its paths lead to different Keras 3 variables: "
               "{target}",
    STRUCTURE: "{key}: the checkpoint's layer '{found}' would restore into "
               "Keras 3 layer '{target}', while the model also has a layer "
               "named '{found}'; the models differ in structure.",
    VALUE: "{key}: {reason}",
    NO_MATCH: "none of model '{target}''s weights matches the checkpoint's "
              "entries for it, so nothing (not even the optimizer's step or "
              "loss scale) is restored; is it the same architecture?",
}


@dataclasses.dataclass(frozen=True)
class Problem:
  """One value that cannot be restored exactly, and why.

  Attributes:
    kind: One of the kinds above (`SHAPE`, `DTYPE`, ...).
    key: The checkpoint key (or H5 weight name) concerned; "" for `NO_MATCH`.
    target: The Keras 3 object the value was to restore (its path).
    found: What the checkpoint holds (a shape, dtype or layer name).
    expected: What `target` has instead (a shape or dtype).
    other: `TWICE`: the key already restoring `target`.
    reason: `VALUE`: the sentence saying what is wrong with the value.

  Example:

  >>> print(Problem(SHAPE, "model/kernel", "dense/kernel", (3, 2), (4, 2)))
  model/kernel: shape (3, 2) in the checkpoint, (4, 2) for dense/kernel
  """
  kind: str
  key: str = ""
  target: str = ""
  found: Any = None
  expected: Any = None
  other: str = ""
  reason: str = ""

  def __str__(self) -> str:
    return _TEXT[self.kind].format(**vars(self))
