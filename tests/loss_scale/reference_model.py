"""A pure-Python model of dynamic loss scaling, the oracle of property tests.

Written from the algorithm's definition, not from the implementation: float32
arithmetic through numpy, so results can be compared bit for bit.
"""

import dataclasses
from typing import List, Tuple

import numpy as np


@dataclasses.dataclass
class ReferenceDynamicScale:
  """Dynamic loss scaling on Python values.

  Attributes:
    scale: Current loss scale (float32).
    counter: Consecutive finite steps since the last change.
    growth_steps: Finite steps before the scale grows.
    multiplier: Growth and shrink factor.
    reciprocal_shrink: Shrink as TF's graphs did (see below).
  """
  scale: np.float32
  growth_steps: int
  multiplier: float
  counter: int = 0
  # TF's own graphs shrink by a true division that Grappler turns into a
  # multiply by the constant's reciprocal (TF 2.3.4 in a tf.function or a
  # Session: 3.2 / 2.5 gives 1.28000009, eagerly 1.2799999).
  reciprocal_shrink: bool = False

  def step(self, finite: bool) -> bool:
    """Advances one step; returns whether the step's gradients apply."""
    mult = np.float32(self.multiplier)
    if finite:
      self.counter += 1
      if self.counter >= self.growth_steps:
        with np.errstate(over="ignore"):
          grown = np.float32(self.scale * mult)
        if np.isfinite(grown):
          self.scale = grown
        self.counter = 0
      return True
    shrunk = (np.float32(self.scale * np.float32(np.float32(1.) / mult))
              if self.reciprocal_shrink else np.float32(self.scale / mult))
    self.scale = max(shrunk, np.float32(1.))
    self.counter = 0
    return False

  def run(self, finite_flags) -> List[Tuple[bool, float, int]]:
    """Steps through `finite_flags`; returns (applied, scale, counter) each."""
    out = []
    for finite in finite_flags:
      applied = self.step(finite)
      out.append((applied, float(self.scale), self.counter))
    return out
