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
  """
  scale: np.float32
  growth_steps: int
  multiplier: float
  counter: int = 0

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
    self.scale = max(np.float32(self.scale / mult), np.float32(1.))
    self.counter = 0
    return False

  def run(self, finite_flags) -> List[Tuple[bool, float, int]]:
    """Steps through `finite_flags`; returns (applied, scale, counter) each."""
    out = []
    for finite in finite_flags:
      applied = self.step(finite)
      out.append((applied, float(self.scale), self.counter))
    return out
