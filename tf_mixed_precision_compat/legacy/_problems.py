"""Restore problems as records: the matcher makes them, `RestoreError`
carries them, and `inspect` explains them from their kind and fields, so
rewording a message (the one `__str__`) never changes what `inspect` says."""

import dataclasses
from typing import Any

# The kinds, and the fields each sets besides `key`.
SHAPE = "shape"  # target; found, expected: the value's and target's shapes.
DTYPE = "dtype"  # target; found, expected: the value's and target's dtypes.
TWICE = "twice"  # target; other: the key that restores it already.
AMBIGUOUS = "ambiguous"  # target: the Keras 3 variables the key's paths reach.
STRUCTURE = "structure"  # found: the key's own layer; target: the one reached.
VALUE = "value"  # reason: why the value itself cannot be restored.
NO_MATCH = "no match"  # target: a model none of whose weights matched; no key.

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
  """A checkpoint value that cannot be restored exactly, and why.

  Attributes:
    kind: One of the kinds above, which says the fields it sets.
    key: The checkpoint key (H5: the weight's name).
    target: The path of the Keras 3 object the value was to restore.
    found, expected: The checkpoint's and the target's shape or dtype.
    other, reason: See the kinds above.

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
