"""`migrate`'s inserted builds: Keras 3 optimizers built where TF 2.x's were.

Inserted after the optimizer when the file says which model's variables it
trains, reported otherwise.
"""

from __future__ import annotations

from typing import Any, Optional

import libcst as cst
from libcst import matchers as m

from tf_mixed_precision_compat.cli._facts import code
from tf_mixed_precision_compat.cli._rewrite_base import Finding
from tf_mixed_precision_compat.cli._rewrite_base import RewriterBase

_BUILT = (
    "Keras 3 creates the scale variable when the optimizer is built; built "
    "here, scale_loss in a tf.function reads the (restored) variable "
    "instead of baking in initial_scale, and `dynamic_scale` exists before "
    "the first step")


_TAPE_GRADIENT = m.Call(func=m.Attribute(attr=m.Name("gradient")),
                        args=[m.Arg(), m.Arg()])


class BuildRewrites(RewriterBase):
  """Builds after loss-scale optimizers and before checkpoints of them."""

  tape_sources: set[str] = set()

  def scan_tape_sources(self, module: cst.Module) -> None:
    """What the file's tapes differentiate against (`tape.gradient(l, X)`'s
    X): where its optimizers' gradients come from."""
    self.tape_sources = {
        code(call.args[1].value)  # type: ignore[attr-defined]
        for call in m.findall(module, _TAPE_GRADIENT)}

  def _build_attribute(self, name: str, scope: str
                       ) -> Optional[cst.BaseStatement]:
    """`self.optimizer.build(self.model.trainable_variables)`, if one model.

    Only where the same method bound exactly one model before the optimizer.
    """
    line = next(at for n, at, where in self.facts.lso_sites
                if (n, where) == (name, scope))
    models = self.facts.self_models(scope, line)
    # The variables its apply_gradients names, if the same method bound
    # their owner before the optimizer (self.generator, self._model, ...).
    root, _, attr = self.facts.apply_vars.get(name, "").rpartition(".")
    found = self.facts.assigned.get((scope, root))
    if attr in ("trainable_variables", "trainable_weights") and \
        root.startswith("self.") and found is not None and found.line < line:
      models = [root]
    if len(models) != 1:
      self._build_reported(name, line, "<the model's trainable variables>",
                           "which model it trains is not known here")
      return None
    return self._build_inserted(name, line,
                                f"{models[0]}.trainable_variables")

  def _build_inserted(self, name: str, line: int, var_list: str
                      ) -> cst.BaseStatement:
    self.findings.append(Finding(
        line, 1, f"{name} = LossScaleOptimizer(...)",
        f"{name}.build({var_list}) inserted after it", _BUILT, "rewrite"))
    return cst.parse_statement(f"{name}.build({var_list})\n")

  def _build_reported(self, name: str, line: int, var_list: str,
                      why: str) -> None:
    # A note on Keras 3 code: it does not keep the package's import.
    self.findings.append(Finding(
        line, 1, f"{name} = LossScaleOptimizer(...)", "(none)",
        f"build it once {var_list} exist, before the first step: "
        f"`{name}.build({var_list})` (Keras 3 creates the scale variable "
        "when the optimizer is built; unbuilt, scale_loss in a tf.function "
        f"bakes in initial_scale). Not inserted: {why}", "manual", False))

  def _build_after(self, name: str, scope: str
                   ) -> Optional[cst.BaseStatement]:
    """`opt.build(model.trainable_variables)` right after the optimizer."""
    if name in self.facts.built_after:
      return None
    if "." in name:
      return self._build_attribute(name, scope)
    var_list = self.facts.apply_vars.get(name)
    found = self.facts.lookup(scope, name)
    if var_list is None and found is not None:
      var_list = self._tape_model_variables(scope, found.line)
    if var_list is None or found is None:
      return None
    root, _, attr = var_list.partition(".")
    line = found.line
    if self.facts.is_factory(scope) and (scope, root) not in \
        self.facts.assigned:
      return None  # Built where the factory's caller keeps the optimizer.
    if attr not in ("trainable_variables", "trainable_weights") or \
        not self.facts.is_model(root, scope, line):
      self._build_reported(
          name, line, var_list,
          f"{var_list} is not known to be a model's variables here")
      return None
    return self._build_inserted(name, line, var_list)

  def _tape_model_variables(self, scope: str, line: int) -> Optional[str]:
    """`M.trainable_variables` if every tape of the file differentiates
    against it and `M` is a model; None otherwise (no guess, no note)."""
    if len(self.tape_sources) != 1 or self.facts.has_compile:
      return None  # fit() builds a compiled model's optimizer itself.
    (var_list,) = self.tape_sources
    root, _, attr = var_list.partition(".")
    if attr in ("trainable_variables", "trainable_weights") and \
        self.facts.is_model(root, scope, line):
      return var_list
    return None

  def _build_for_checkpoint(self, call: Any, line: int
                            ) -> Optional[cst.BaseStatement]:
    """A compiled model's optimizer, built before a checkpoint names it."""
    if not any(n in ("tf.train.Checkpoint", "tf.compat.v2.train.Checkpoint")
               for n in self._names(call.func)):
      return None
    for arg in call.args:
      if arg.keyword is not None and arg.keyword.value == "optimizer" and \
          m.matches(arg.value, m.Attribute(value=m.Name(),
                                           attr=m.Name("optimizer"))):
        model = arg.value.value.value
        if model in self.facts.built_guards or model == "self":
          return None
        self.findings.append(Finding(
            line, 1, f"tf.train.Checkpoint(optimizer={model}.optimizer)",
            f"{model}.optimizer built before it (if not yet)",
            "Keras 3 creates a compiled model's optimizer variables at its "
            "first step; built first, the checkpoint restores (or saves) "
            "them as TF 2.x's did", "rewrite"))
        return cst.parse_statement(
            f"if not {model}.optimizer.built: {model}.optimizer.build("
            f"{model}.trainable_variables)\n")
    return None
