"""Black-box tests of an attention module or model: change inputs, watch outputs.

`maskcheck.probe(target, "causal", ...)` calls this package: a subpackage becomes an attribute
of its parent when imported (replacing any function of that name), so the package itself is
made callable. Importing it imports neither torch nor transformers; calling it does.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from maskcheck.probe.report import ProbeReport

__all__ = ["probe"]


def probe(target: Any, intent: str = "causal", **options: Any) -> ProbeReport:
    """Probe a module, a callable f(x, keep) or a target string; see
    `maskcheck.probe.runner.probe` for the options."""
    from maskcheck.probe.runner import probe as _probe

    return _probe(target, intent, **options)


class _CallablePackage(types.ModuleType):
    def __call__(self, target: Any, intent: str = "causal", **options: Any) -> ProbeReport:
        return probe(target, intent, **options)


sys.modules[__name__].__class__ = _CallablePackage
