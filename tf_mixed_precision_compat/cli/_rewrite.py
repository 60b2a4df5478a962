"""The libcst transformer behind `migrate`: finds and rewrites API uses.

libcst keeps every comment and all formatting outside the rewritten
expressions. Names are resolved through the file's imports
(`QualifiedNameProvider`), so `mixed_precision.Policy` after `from
tensorflow.keras.mixed_precision import experimental as mixed_precision` is
recognised. Methods (`get_scaled_loss`, ...) are recognised by name.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import libcst as cst
from libcst import matchers as m
from libcst.metadata import PositionProvider
from libcst.metadata import QualifiedNameProvider

from tf_mixed_precision_compat.cli import _api_table as table

_DYNAMIC_ARGS = {"initial_loss_scale": "initial_scale",
                 "increment_period": "dynamic_growth_steps"}


@dataclasses.dataclass
class Finding:
  """One API use: where, what, its replacement, and whether it was rewritten.

  `status` is "rewrite" (keeps behaviour; applied with --write), "native"
  (Keras 3 has the name; left as is) or "manual" (no exact rewrite).
  """
  line: int
  column: int
  api: str
  replacement: str
  change: str
  status: str


def _expr(code: str) -> cst.BaseExpression:
  return cst.parse_expression(code)


class Migrator(cst.CSTTransformer):
  """Collects `Finding`s and rewrites the uses that keep behaviour."""

  METADATA_DEPENDENCIES = (QualifiedNameProvider, PositionProvider)

  def __init__(self) -> None:
    super().__init__()
    self.findings: list[Finding] = []
    self.needs_keras = False
    self.lso_names: set[str] = set()
    self.apply_vars: dict[str, str] = {}
    self.lso_lines: set[tuple[str, int]] = set()

  def _names(self, node: cst.CSTNode) -> list[str]:
    return sorted(table.normalise(q.name) for q in
                  self.get_metadata(QualifiedNameProvider, node, set()))

  def _add(self, node: cst.CSTNode, api: str, replacement: Optional[str],
           change: str, status: str) -> None:
    pos = self.get_metadata(PositionProvider, node).start
    self.findings.append(Finding(pos.line, pos.column + 1, api,
                                 replacement if replacement is not None
                                 else "(none)", change, status))

  # Names: function and class endpoints.
  def leave_Call(self, original: cst.Call, updated: cst.Call
                 ) -> cst.BaseExpression:
    for name in self._names(original.func):
      if _special(name) and name.endswith("LossScaleOptimizer"):
        return self._lso(original, updated, name)
      if _special(name):
        return self._layer_policy(original, updated, name)
    if m.matches(original.func, m.Attribute(attr=m.Name("apply_gradients"))):
      self._note_apply(original)
    return self._method_call(original, updated)

  def leave_Attribute(self, original: cst.Attribute,
                      updated: cst.Attribute) -> cst.BaseExpression:
    for name in self._names(original):
      if name in table.NATIVE:
        self._add(original, name, "unchanged", "Keras 3 has it", "native")
      elif name in table.FUNCTIONS and not _special(name):
        return self._replace_name(original, updated, name)
    return self._method_attribute(original, updated)

  def leave_Name(self, original: cst.Name, updated: cst.Name
                 ) -> cst.BaseExpression:
    for name in self._names(original):
      if name in table.FUNCTIONS and not _special(name):
        return self._replace_name(original, updated, name)
    return updated

  def _replace_name(self, original: cst.CSTNode, updated: Any,
                    name: str) -> Any:
    replacement, change = table.FUNCTIONS[name]
    if replacement is None:
      self._add(original, name, None, change, "manual")
      return updated
    self._add(original, name, replacement, change, "rewrite")
    if replacement.startswith("keras."):
      self.needs_keras = True
    return _expr(replacement)

  # Imports: names there are declarations, not uses.
  def visit_Import(self, node: cst.Import) -> bool:
    return False

  def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
    return False

  def _lso_args(self, original: cst.Call, updated: cst.Call, name: str
                ) -> Optional[list[cst.Arg]]:
    """Keras 3 arguments for a TF 2.3/2.4 LossScaleOptimizer call, or None."""
    order = (["optimizer", "loss_scale"] if "experimental" in name else
             ["inner_optimizer", "dynamic", "initial_scale",
              "dynamic_growth_steps"])
    named: dict = {}
    for i, (arg, new) in enumerate(zip(original.args, updated.args)):
      if arg.star or i >= len(order) and arg.keyword is None:
        return None
      named[arg.keyword.value if arg.keyword else order[i]] = (arg, new)
    inner = named.pop(order[0], None)
    if inner is None:
      return None
    out = [inner[1]]
    if "loss_scale" in named:
      extra = self._loss_scale_args(named.pop("loss_scale")[0].value)
      if extra is None:
        return None
      out += extra
    dynamic = named.pop("dynamic", None)
    if dynamic is not None and not m.matches(dynamic[0].value,
                                             m.Name("True")):
      return None
    for key, (_, new) in named.items():
      out.append(cst.Arg(keyword=cst.Name(key), value=new.value,
                         equal=cst.AssignEqual(cst.SimpleWhitespace(""),
                                               cst.SimpleWhitespace(""))))
    return out

  def _loss_scale_args(self, value: cst.BaseExpression
                       ) -> Optional[list[cst.Arg]]:
    if isinstance(value, cst.SimpleString) and (
        value.evaluated_value == "dynamic"):
      return []
    if not (isinstance(value, cst.Call) and any(
        n.endswith("DynamicLossScale") for n in self._names(value.func))):
      return None
    out = []
    order = ["initial_loss_scale", "increment_period", "multiplier"]
    for i, arg in enumerate(value.args):
      key = arg.keyword.value if arg.keyword else order[i]
      if key == "multiplier":
        if not m.matches(arg.value, m.Integer("2") | m.Float("2.0")):
          return None
        continue
      out.append(cst.Arg(keyword=cst.Name(_DYNAMIC_ARGS[key]),
                         value=arg.value, equal=cst.AssignEqual(
                             cst.SimpleWhitespace(""),
                             cst.SimpleWhitespace(""))))
    pos = self.get_metadata(PositionProvider, value.func).start
    self.findings = [f for f in self.findings if (f.line, f.column) != (
        pos.line, pos.column + 1)]
    return out

  def _lso(self, original: cst.Call, updated: cst.Call, name: str
           ) -> cst.BaseExpression:
    replacement, change = table.FUNCTIONS[name]
    args = self._lso_args(original, updated, name)
    if args is None:
      self._add(original, name, replacement, "not rewritten: a fixed loss "
                "scale, a LossScale object or arguments Keras 3 cannot "
                "express (Keras 3's LossScaleOptimizer is dynamic only). "
                + change, "manual")
      return updated
    self._add(original, name, replacement, change, "rewrite")
    self.needs_keras = True
    # The kept arguments keep their own spacing; the last loses its comma
    # only when arguments after it were dropped.
    if len(args) < len(updated.args):
      args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return updated.with_changes(func=_expr(str(replacement)), args=args)

  def _layer_policy(self, original: cst.Call, updated: cst.Call, name: str
                    ) -> cst.BaseExpression:
    if len(updated.args) != 1 or updated.args[0].keyword is not None:
      self._add(original, name, None, table.FUNCTIONS[name][1], "manual")
      return updated
    self._add(original, name, "layer.dtype_policy", "same policy object",
              "rewrite")
    return cst.Attribute(value=updated.args[0].value,
                         attr=cst.Name("dtype_policy"))

  def _note_apply(self, call: cst.Call) -> None:
    func = call.func
    if not (isinstance(func, cst.Attribute) and isinstance(func.value,
                                                           cst.Name)):
      return
    if call.args and m.matches(call.args[0].value, m.Call(
        func=m.Name("zip"), args=[m.Arg(), m.Arg()])):
      vars_arg = call.args[0].value.args[1].value  # type: ignore
      self.apply_vars[func.value.value] = cst.Module([]).code_for_node(
          vars_arg)

  def _method_call(self, original: cst.Call, updated: cst.Call
                   ) -> cst.BaseExpression:
    func = original.func
    if not isinstance(func, cst.Attribute):
      return updated
    attr = func.attr.value
    if attr == "get_scaled_loss" and len(original.args) == 1:
      self._add(original, "LossScaleOptimizer.get_scaled_loss",
                "scale_loss", table.METHODS[attr][1], "rewrite")
      return updated.with_changes(func=updated.func.with_changes(
          attr=cst.Name("scale_loss")))
    if attr == "get_unscaled_gradients" and len(original.args) == 1:
      self._add(original, "LossScaleOptimizer.get_unscaled_gradients",
                "(the gradients as they are)", table.METHODS[attr][1],
                "rewrite")
      return updated.args[0].value
    new_func = updated.func
    if attr == "loss_scale" and not original.args and isinstance(
        new_func, cst.Attribute) and new_func.attr.value == "dynamic_scale":
      return new_func  # TF 2.3's `loss_scale()` call: the variable itself.
    return updated

  def _method_attribute(self, original: cst.Attribute,
                        updated: cst.Attribute) -> cst.BaseExpression:
    attr = original.attr.value
    if attr not in ("loss_scale", "dynamic_counter"):
      return updated
    replacement, change = table.METHODS[attr]
    receiver = original.value
    if isinstance(receiver, cst.Name) and receiver.value in self.lso_names \
        or m.matches(receiver, m.Attribute(attr=m.Name("optimizer"))):
      self._add(original, "LossScaleOptimizer." + attr, replacement, change,
                "rewrite")
      return updated.with_changes(attr=cst.Name(str(replacement)))
    self._add(original, "LossScaleOptimizer." + attr, replacement,
              "not rewritten: not known to be a loss-scale optimizer (a "
              "TF 2.3 Policy has `loss_scale` too). " + change, "manual")
    return updated

  def visit_Assign(self, node: cst.Assign) -> None:
    if isinstance(node.value, cst.Call) and any(
        n.endswith("LossScaleOptimizer") for n in self._names(
            node.value.func)):
      line = self.get_metadata(PositionProvider, node).start.line
      for target in node.targets:
        if isinstance(target.target, cst.Name):
          self.lso_names.add(target.target.value)
          self.lso_lines.add((target.target.value, line))

  def leave_Module(self, original: cst.Module, updated: cst.Module
                   ) -> cst.Module:
    manual = any(f.status == "manual" for f in self.findings)
    body: list = []
    assigned: set[str] = set()
    for before, statement in zip(original.body, updated.body):
      line = self.get_metadata(PositionProvider, before).start.line
      if _imports_package(statement):
        self.findings.append(Finding(
            line, 1, "import tf_mixed_precision_compat",
            "(kept: some uses need manual work)" if manual else "(removed)",
            "the package is no longer needed",
            "manual" if manual else "rewrite"))
        if not manual:
          continue
      body.append(statement)
      names = _assigned_names(statement)
      assigned |= names
      for name in sorted(n for n in names if (n, line) in self.lso_lines):
        build = self._build_statement(name, assigned, line)
        if build is not None:
          body.append(build)
    return updated.with_changes(body=body)

  def _build_statement(self, name: str, assigned: set[str], line: int
                       ) -> Optional[cst.SimpleStatementLine]:
    """`opt.build(model.trainable_variables)` right after the optimizer."""
    var_list = self.apply_vars.get(name)
    if var_list is None or var_list.split(".")[0] not in assigned:
      return None
    self.findings.append(Finding(
        line, 1, f"{name} = LossScaleOptimizer(...)",
        f"{name}.build({var_list}) inserted after it",
        "Keras 3 creates the scale variable when the optimizer is built; "
        "built here, scale_loss in a tf.function reads the (restored) "
        "variable instead of baking in initial_scale", "rewrite"))
    statement = cst.parse_statement(f"{name}.build({var_list})\n")
    assert isinstance(statement, cst.SimpleStatementLine)
    return statement


def _special(name: str) -> bool:
  """Names rewritten as whole calls (arguments change), not as names."""
  return name in table.FUNCTIONS and name.startswith("keras.") and (
      name.endswith(("LossScaleOptimizer", "get_layer_policy")))


def _imports_package(statement: cst.CSTNode) -> bool:
  if not isinstance(statement, cst.SimpleStatementLine):
    return False
  for small in statement.body:
    if isinstance(small, cst.Import) and any(
        cst.Module([]).code_for_node(a.name).startswith(
            "tf_mixed_precision_compat") for a in small.names):
      return True
    if isinstance(small, cst.ImportFrom) and small.module is not None and (
        cst.Module([]).code_for_node(small.module).startswith(
            "tf_mixed_precision_compat")):
      return True
  return False


def _assigned_names(statement: cst.CSTNode) -> set[str]:
  names: set[str] = set()
  if isinstance(statement, cst.SimpleStatementLine):
    for small in statement.body:
      if isinstance(small, cst.Assign):
        names |= {t.target.value for t in small.targets
                  if isinstance(t.target, cst.Name)}
  elif isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
    names.add(statement.name.value)
  return names


def migrate_source(source: str) -> tuple[str, list[Finding]]:
  """Rewrites `source`; returns the new code and every finding.

  Args:
    source: A Python module's text.

  Returns:
    `(new source, findings)`; the new source differs only where a finding
    has status "rewrite".

  Raises:
    libcst.ParserSyntaxError: If `source` is not valid Python.

  Example:

  >>> code, found = migrate_source(
  ...     "from tensorflow.keras.mixed_precision import experimental as mp\\n"
  ...     "mp.set_policy('mixed_float16')  # fp16\\n")
  >>> print(code, end="")
  import keras
  <BLANKLINE>
  keras.mixed_precision.set_global_policy('mixed_float16')  # fp16
  """
  # pylint: disable=g-import-not-at-top
  from libcst.codemod import CodemodContext
  from libcst.codemod.visitors import AddImportsVisitor
  from libcst.metadata import MetadataWrapper
  module = cst.parse_module(source)
  migrator = Migrator()
  new = MetadataWrapper(module).visit(migrator)
  context = CodemodContext()
  if migrator.needs_keras:
    AddImportsVisitor.add_needed_import(context, "keras")
    new = AddImportsVisitor(context).transform_module(new)
  new = _remove_unused_experimental(new, context)
  return new.code, sorted(migrator.findings,
                          key=lambda f: (f.line, f.column))


def _remove_unused_experimental(module: cst.Module, context: Any
                                ) -> cst.Module:
  # pylint: disable-next=g-import-not-at-top
  from libcst.codemod.visitors import RemoveImportsVisitor
  for statement in module.body:
    if not isinstance(statement, cst.SimpleStatementLine):
      continue
    for small in statement.body:
      if isinstance(small, cst.ImportFrom) and small.module is not None and \
          not isinstance(small.names, cst.ImportStar):
        mod = cst.Module([]).code_for_node(small.module)
        for alias in small.names:
          asname = alias.asname.name if alias.asname else None
          if alias.name.value == "experimental" and "mixed_precision" in mod \
              and (asname is None or isinstance(asname, cst.Name)):
            RemoveImportsVisitor.remove_unused_import(
                context, mod, "experimental",
                asname.value if isinstance(asname, cst.Name) else None)
  return RemoveImportsVisitor(context).transform_module(module)
