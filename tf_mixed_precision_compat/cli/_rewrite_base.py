"""What the parts of `migrate`'s transformer share: findings, bookkeeping."""

from __future__ import annotations

import dataclasses
from typing import Optional

import libcst as cst
from libcst.metadata import PositionProvider
from libcst.metadata import QualifiedNameProvider

from tf_mixed_precision_compat.cli import _api_table as table
from tf_mixed_precision_compat.cli import _facts


@dataclasses.dataclass
class Finding:
  """One API use: where, what, its replacement, and whether it was rewritten.

  `status` is "rewrite" (keeps behaviour; applied with --write), "native"
  (Keras 3 has the name; left as is), "manual" (no exact rewrite: the
  change says what to do) or "deviation" (with --deviate: the closest
  native form written, the change says what differs).
  """
  line: int
  column: int
  api: str
  replacement: str
  change: str
  status: str
  old_api: bool = True  # False: a note on Keras 3 code (no TF 2.x API left)
  cell: Optional[int] = None  # A notebook's cell (1-based; `line` within it)


class RewriterBase(cst.CSTTransformer):
  """Findings, the current scope and statements to add: every part's state."""

  METADATA_DEPENDENCIES = (QualifiedNameProvider, PositionProvider)

  def __init__(self, facts: _facts.Facts, deviate: bool = False) -> None:
    super().__init__()
    self.facts = facts
    self.deviate = deviate
    self.marks: dict[int, str] = {}  # line: what --deviate changed there
    # Optimizers (as code) whose applies take what TF 2.x's wrapper applied,
    # and the wrappers made for them that never unscale (_rewrite_grads).
    self.rescaled: set[str] = set()
    self.given_as_is: set[cst.Call] = set()
    # LossScaleOptimizer calls written in plain code (_rewrite_fixed):
    # -> ("fixed" | "run time", the argument giving the scale).
    self.fixed: dict[cst.Call, tuple[str, cst.Arg]] = {}
    self.not_plain: dict[cst.Call, str] = {}  # the others: why not
    self.findings: list[Finding] = []
    self.needs_keras = False
    self.needs_tf = False
    self.needs_helper = False  # the exact forms' helper functions
    self._scopes: list[str] = ["<module>"]
    self._call_funcs: set[cst.CSTNode] = set()
    self._before: list[cst.BaseStatement] = []  # for the current statement

  def _names(self, node: cst.CSTNode) -> list[str]:
    return sorted(table.normalise(q.name) for q in
                  self.get_metadata(QualifiedNameProvider, node, set()))

  def _pos(self, node: cst.CSTNode) -> tuple[int, int]:
    pos = self.get_metadata(PositionProvider, node).start
    return pos.line, pos.column + 1

  def _add(self, node: cst.CSTNode, api: str, replacement: Optional[str],
           change: str, status: str) -> None:
    self.findings.append(Finding(*self._pos(node), api,
                                 replacement if replacement is not None
                                 else "(none)", change, status))

  def _deviation(self, node: cst.CSTNode, api: str, replacement: str,
                 change: str, mark: str) -> None:
    """A --deviate rewrite: reported, and its line marked with `mark`."""
    self._add(node, api, replacement, change, "deviation")
    self.marks[self._pos(node)[0]] = mark

  def _drop_findings_in(self, node: cst.CSTNode) -> None:
    """Forgets findings inside an argument the rewrite removes."""
    start = self.get_metadata(PositionProvider, node)
    first = (start.start.line, start.start.column + 1)
    last = (start.end.line, start.end.column + 1)
    self.findings = [f for f in self.findings
                     if not first <= (f.line, f.column) <= last]

  def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
    self._scopes.append(f"{node.name.value}@{self._pos(node)[0]}")

  def leave_FunctionDef(self, original: cst.FunctionDef,
                        updated: cst.FunctionDef) -> cst.FunctionDef:
    self._scopes.pop()
    return updated

  @property
  def scope(self) -> str:
    return self._scopes[-1]


class Substitute(cst.CSTTransformer):
  """Puts expressions in place of a template's upper-case names."""

  def __init__(self, values: dict[str, cst.BaseExpression]) -> None:
    super().__init__()
    self._values = values

  def leave_Name(self, original: cst.Name, updated: cst.Name
                 ) -> cst.BaseExpression:
    return self._values.get(original.value, updated)
