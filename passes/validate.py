"""Check the model on ONNX Runtime against stored torch outputs; the model is left as it is.

Rules:
- every case under ``ref`` (default: the run's ``--ref``) runs on one session; each output,
  mapped through any earlier output-changing pass (concat-outputs), must satisfy
  ``|ort - torch| <= atol + rtol * |torch|`` element-wise, NaN/Inf placed alike;
- floating outputs default to ``atol=1e-4, rtol=1e-3``; bool/int outputs are exact unless
  ``atol.NAME=`` / ``rtol.NAME=`` loosen that output;
- a case the model does not accept (missing input, wrong dtype, fixed dim) fails;
- on any failure the pass raises ValidationMismatch (exit 1) with the report attached;
  otherwise the model comes back unchanged.

    validate(atol=1e-3, atol.logits=1e-2)      model  ->  same model, plus a report:
    case             output  max abs  out of tol  result
    test_data_set_0  logits  1.5e-8   0           ok
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, ClassVar

import onnx

from onnxsurgery.errors import PassError, ValidationMismatch
from onnxsurgery.pipeline.contract import Diagnostic, Pass, PassContext, PassResult
from onnxsurgery.validation.against_references import validate
from onnxsurgery.validation.runtime import PROVIDERS
from onnxsurgery.validation.tolerances import DEFAULT_ATOL, DEFAULT_RTOL

__all__ = ["Validate"]


def _tolerance(what: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a number >= 0, got {value!r}")
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{what} must be a number >= 0, got {value!r}")
    return float(value)


class Validate(Pass):
    """Run the model on ONNX Runtime over the reference cases and compare with torch's outputs.

    Each output of each case must satisfy ``|ort - torch| <= atol + rtol * |torch|`` element-wise
    (bool and int outputs exactly, unless loosened per output); any mismatch, or a case the model
    does not accept, fails the run with exit 1. The model comes back unchanged.

    Options:
        ref (path, default: the run's --ref): Folder or .npz file of reference cases.
        atol (float): Absolute tolerance of floating outputs.
        rtol (float): Relative tolerance of floating outputs.
        provider (str, default: the run's --provider): ONNX Runtime provider: auto, cuda or cpu.
        atol.NAME (float): Absolute tolerance of output NAME, for bool/int outputs too.
        rtol.NAME (float): Relative tolerance of output NAME.

    Example:
        validate(atol=1e-3, atol.logits=1e-2)
    """

    name = "validate"
    weights_on_disk = True
    #: the pipeline skips its own validation after a chain holding this pass
    validates: ClassVar[bool] = True

    def __init__(
        self,
        *,
        ref: str | None = None,
        atol: float = DEFAULT_ATOL,
        rtol: float = DEFAULT_RTOL,
        provider: str | None = None,
        **per_output: float,
    ) -> None:
        super().__init__(ref=ref, atol=atol, rtol=rtol, provider=provider, **per_output)
        if ref is not None:
            if not isinstance(ref, (str, os.PathLike)):
                raise ValueError(f"ref must be a path, got {ref!r}")
            if not Path(ref).exists():
                raise ValueError(f"ref={str(ref)!r} does not exist")
        self.ref = Path(ref) if ref is not None else None
        self.atol = _tolerance("atol", atol)
        self.rtol = _tolerance("rtol", rtol)
        if provider is not None and str(provider).lower() not in PROVIDERS:
            raise ValueError(f"provider must be one of {', '.join(PROVIDERS)}, got {provider!r}")
        self.provider = provider
        self.tolerances: dict[str, tuple[float | None, float | None]] = {}
        for key, value in per_output.items():
            kind, dot, output = key.partition(".")
            if not dot or kind not in ("atol", "rtol") or not output:
                raise ValueError(
                    f"unknown option {key!r}; per-output tolerances are atol.NAME= or rtol.NAME= "
                    "(valid options: ref, atol, rtol, provider)"
                )
            a, r = self.tolerances.get(output, (None, None))
            number = _tolerance(key, value)
            self.tolerances[output] = (number, r) if kind == "atol" else (a, number)

    def run(self, model: onnx.ModelProto, ctx: PassContext) -> PassResult:
        references = self.ref if self.ref is not None else ctx.references
        if references is None:
            raise PassError(
                "no reference cases: give validate(ref=PATH) or --ref PATH", pass_name=self.name
            )
        cases = ctx.cases if self.ref is None and ctx.cases is not None else references
        report = validate(
            model,
            cases,
            label=str(references),
            provider=self.provider or ctx.provider,
            atol=self.atol,
            rtol=self.rtol,
            tolerances=self.tolerances,
            output_map=ctx.map_outputs,
            progress=ctx.stage,
        )
        if not report:
            raise ValidationMismatch(
                f"validation against {references} failed: {report.summary}", report=report
            )
        return PassResult(
            model,
            modified=False,
            diagnostics=[Diagnostic.info(report.summary)],
            report=report,
        )
