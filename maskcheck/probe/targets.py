"""What the probe runs: a factory's module or callable `f(x, keep)`, or a tiny Hugging Face
model. Each target makes random content for positions and turns (content, keep) into
per-position outputs (N, L, D) in float64 on the CPU.

torch is imported inside the functions (the package imports without it); transformers only
for `hf:` targets.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from maskcheck.errors import MaskcheckError

if TYPE_CHECKING:
    import torch

DEFAULT_EMBED_DIM = 16
# Token ids are drawn from this range: clear of the special ids of common vocabularies
# (0-3) and inside every vocabulary.
TOKEN_LOW = 10
TOKEN_SPAN = 1000


class TargetError(MaskcheckError):
    """The target could not be imported, built or called on the first probe batch (exit 2)."""


class TargetCallError(Exception):
    """The target raised (or returned something unusable) on one probe batch."""


def one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    text = text if len(text) <= 300 else text[:297] + "..."
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


@dataclass
class Target:
    """The common part: a label, a dtype, a device and a forward-pass counter."""

    label: str
    dtype: str
    device: str
    calls: int = 0
    seconds: float = 0.0  # spent in forward passes
    notes: list[str] = field(default_factory=list)

    def random(self, shape: tuple[int, int], gen: torch.Generator) -> torch.Tensor:
        raise NotImplementedError

    def fresh(self, old: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """Content of the same shape that differs from `old` at every position."""
        raise NotImplementedError

    def forward(self, content: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def __call__(self, content: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """(N, L, D) float64 CPU outputs; TargetCallError when the target fails."""
        self.calls += 1
        import torch

        started = time.perf_counter()
        try:
            with torch.no_grad():
                out = self.forward(content, keep)
        except TargetCallError:
            raise
        except Exception as e:  # whatever the user's code raises is that batch's result
            raise TargetCallError(one_line(e)) from e
        finally:
            self.seconds += time.perf_counter() - started
        return per_position(out, keep.shape[0], keep.shape[1])


def torch_dtype(name: str) -> torch.dtype:
    import torch

    value = getattr(torch, name)
    assert isinstance(value, torch.dtype)
    return value


def first_tensor(result: Any) -> torch.Tensor | None:
    """The output tensor: the result itself, the first tensor of a tuple/list, or the first
    tensor value of a mapping / ModelOutput."""
    import torch

    if isinstance(result, torch.Tensor):
        return result
    if isinstance(result, Mapping):
        result = list(result.values())
    if isinstance(result, (tuple, list)):
        for item in result:
            if isinstance(item, torch.Tensor):
                return item
    return None


def per_position(result: Any, n: int, length: int) -> torch.Tensor:
    import torch

    out = first_tensor(result)
    if out is None:
        raise TargetCallError(f"returned {type(result).__name__}, not a tensor (N, L, ...)")
    if out.dim() < 2 or tuple(out.shape[:2]) != (n, length):
        raise TargetCallError(
            f"returned shape {tuple(out.shape)}; expected (N, L, ...) = ({n}, {length}, ...)")
    if not out.is_floating_point() and not out.is_complex():
        out = out.to(torch.float64)
    return out.detach().reshape(n, length, -1).to("cpu", torch.float64)


@dataclass
class CallableTarget(Target):
    """`f(x, keep)`: x float (N, L, E) in the probe dtype, keep bool (N, L), True = real."""

    fn: Callable[..., Any] | None = None
    embed_dim: int = DEFAULT_EMBED_DIM

    def random(self, shape: tuple[int, int], gen: torch.Generator) -> torch.Tensor:
        import torch

        return torch.randn(*shape, self.embed_dim, generator=gen, dtype=torch.float32)

    def fresh(self, old: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        import torch

        # A new draw, shifted so that it can never equal the old content by chance.
        return torch.randn(old.shape, generator=gen, dtype=old.dtype) + 0.5

    def forward(self, content: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        assert self.fn is not None
        x = content.to(self.device, torch_dtype(self.dtype))
        result: torch.Tensor = self.fn(x, keep.to(self.device))
        return result


@dataclass
class HfTarget(Target):
    """A transformers model: content is token ids; keep becomes attention_mask and the
    position ids follow the padding (0, 1, 2, ... over the real tokens)."""

    model: Any = None
    vocab: int = TOKEN_LOW + TOKEN_SPAN
    takes_position_ids: bool = False
    takes_use_cache: bool = False
    packs_by_position_ids: bool = False

    def random(self, shape: tuple[int, int], gen: torch.Generator) -> torch.Tensor:
        import torch

        return torch.randint(TOKEN_LOW, self.high, shape, generator=gen)

    @property
    def high(self) -> int:
        return min(self.vocab, TOKEN_LOW + TOKEN_SPAN)

    def fresh(self, old: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        import torch

        span = self.high - TOKEN_LOW
        step = torch.randint(1, span, old.shape, generator=gen)
        return (old - TOKEN_LOW + step) % span + TOKEN_LOW

    def forward(self, content: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        kwargs: dict[str, Any] = {
            "input_ids": content.to(self.device),
            "attention_mask": keep.to(self.device, dtype=content.dtype),
        }
        if self.takes_position_ids:
            kwargs["position_ids"] = positions_following_padding(keep).to(self.device)
        if self.takes_use_cache:
            kwargs["use_cache"] = False
        result: torch.Tensor = self.model(**kwargs)
        return result

    def packed(self, content: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """The real tokens of every sequence in one row, position ids restarting at each
        sequence, no attention_mask (transformers' padding-free format): (1, T, D)."""
        import torch

        ids = content[keep][None]
        positions = torch.cat([torch.arange(int(n)) for n in keep.sum(1).tolist()])[None]
        self.calls += 1
        started = time.perf_counter()
        try:
            with torch.no_grad():
                out = self.model(input_ids=ids.to(self.device),
                                 position_ids=positions.to(self.device), use_cache=False)
        except Exception as e:
            raise TargetCallError(one_line(e)) from e
        finally:
            self.seconds += time.perf_counter() - started
        return per_position(out, 1, ids.shape[1])

    def implementation(self) -> str:
        return str(getattr(self.model.config, "_attn_implementation", "") or "")

    def set_implementation(self, name: str) -> None:
        try:
            self.model.set_attn_implementation(name)
        except Exception as e:
            raise TargetCallError(one_line(e)) from e


def positions_following_padding(keep: torch.Tensor) -> torch.Tensor:
    """0, 1, 2, ... over each sequence's real tokens; pads get 0 (never judged)."""
    return (keep.long().cumsum(-1) - 1).clamp(min=0)


# Attribute names of the sizes to shrink, as the config classes of transformers spell them.
TINY_CONFIG: dict[str, int] = {
    "hidden_size": 32, "d_model": 32, "n_embd": 32, "dim": 32,
    "num_hidden_layers": 2, "num_layers": 2, "n_layer": 2, "n_layers": 2,
    "num_decoder_layers": 2,
    "num_attention_heads": 2, "num_heads": 2, "n_head": 2, "n_heads": 2,
    "num_key_value_heads": 1,
    "intermediate_size": 64, "d_ff": 64, "n_inner": 64, "hidden_dim": 64, "ffn_dim": 64,
    "d_kv": 16, "head_dim": 16,
}


def load_target(spec: Any, *, dtype: str, device: str) -> Target:
    """A target from `file.py:FACTORY`, `package.module:FACTORY`, `hf:MODEL_TYPE`, `hf:PATH`,
    or (Python API) a module or callable given directly."""
    if isinstance(spec, str):
        if spec.startswith("hf:"):
            return hf_target(spec, spec[3:], dtype=dtype, device=device)
        return wrap_callable(spec, build_from_factory(spec), dtype=dtype, device=device)
    label = getattr(spec, "__qualname__", None) or type(spec).__name__
    return wrap_callable(label, spec, dtype=dtype, device=device)


def build_from_factory(spec: str) -> Any:
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise TargetError(f"{spec}: a target is file.py:FACTORY, package.module:FACTORY, "
                          "hf:MODEL_TYPE or hf:PATH")
    module = import_module_from(spec, where)
    factory = getattr(module, name, None)
    if factory is None:
        raise TargetError(f"{spec}: {where} has no attribute {name!r}")
    if not callable(factory):
        raise TargetError(f"{spec}: {name} is not callable")
    try:
        return factory()
    except Exception as e:
        raise TargetError(f"{spec}: {name}() raised {one_line(e)}") from None


def import_module_from(spec: str, where: str) -> Any:
    try:
        if where.endswith(".py") or "/" in where or "\\" in where:
            path = Path(where)
            if not path.is_file():
                raise TargetError(f"{spec}: no such file {where}")
            module_name = f"maskcheck_probe_target_{abs(hash(str(path.resolve())))}"
            loader_spec = importlib.util.spec_from_file_location(module_name, path)
            if loader_spec is None or loader_spec.loader is None:
                raise TargetError(f"{spec}: cannot load {where} as a Python file")
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[module_name] = module  # dataclasses and pickling look it up there
            loader_spec.loader.exec_module(module)
            return module
        return importlib.import_module(where)
    except TargetError:
        raise
    except SyntaxError as e:
        raise TargetError(f"{spec}: cannot import {where}: SyntaxError at line {e.lineno}: "
                          f"{e.msg}") from None
    except Exception as e:
        raise TargetError(f"{spec}: cannot import {where}: {one_line(e)}") from None


def wrap_callable(label: str, obj: Any, *, dtype: str, device: str) -> CallableTarget:
    import torch

    if not callable(obj):
        raise TargetError(f"{label}: the factory returned {type(obj).__name__}, "
                          "not a module or a callable f(x, keep)")
    embed_dim = getattr(obj, "embed_dim", DEFAULT_EMBED_DIM)
    if not isinstance(embed_dim, int) or isinstance(embed_dim, bool) or embed_dim < 1:
        raise TargetError(f"{label}: embed_dim must be a positive int, not {embed_dim!r}")
    if isinstance(obj, torch.nn.Module):
        try:
            obj = obj.to(device=device, dtype=torch_dtype(dtype)).eval()
        except Exception as e:
            raise TargetError(f"{label}: cannot move the module to {device}/{dtype}: "
                              f"{one_line(e)}") from None
    return CallableTarget(label, dtype, device, fn=obj, embed_dim=embed_dim)


def hf_target(label: str, name: str, *, dtype: str, device: str) -> HfTarget:
    try:
        import transformers
    except ImportError:
        raise TargetError(f"{label}: hf: targets need transformers "
                          "(pip install transformers)") from None
    model, how = _hf_model(label, name, transformers)
    try:
        model = model.to(device=device, dtype=torch_dtype(dtype)).eval()
    except Exception as e:
        raise TargetError(f"{label}: cannot move the model to {device}/{dtype}: "
                          f"{one_line(e)}") from None
    params = inspect.signature(model.forward).parameters
    modeling = sys.modules.get(type(model).__module__)
    target = HfTarget(
        label, dtype, device, model=model,
        vocab=int(getattr(model.config, "vocab_size", 0) or TOKEN_LOW + TOKEN_SPAN),
        takes_position_ids="position_ids" in params,
        takes_use_cache="use_cache" in params,
        # Models whose masks come from transformers' masking_utils read packed sequences from
        # position ids (find_packed_sequence_indices) when there is no attention_mask and no
        # cache; the others cannot run padding-free.
        packs_by_position_ids=hasattr(modeling, "create_causal_mask")
        and "position_ids" in params and "use_cache" in params,
    )
    target.notes.append(how)
    return target


def _hf_model(label: str, name: str, transformers: Any) -> tuple[Any, str]:
    import torch

    path = Path(name)
    try:
        if path.is_dir():
            config = transformers.AutoConfig.from_pretrained(str(path))
            model = transformers.AutoModel.from_pretrained(
                str(path), use_safetensors=True, trust_remote_code=False)
            how = f"loaded from {path} (safetensors weights)"
        else:
            config_cls = type(transformers.AutoConfig.for_model(name))
            accepted = inspect.signature(config_cls.__init__).parameters
            config = config_cls(**{k: v for k, v in TINY_CONFIG.items() if k in accepted})
            torch.manual_seed(0)
            model = transformers.AutoModel.from_config(config)
            # Read back, not assumed: a config class may spell its sizes in other names.
            layers = getattr(config, "num_hidden_layers", "?")
            hidden = getattr(config, "hidden_size", "?")
            how = (f"tiny random-init {type(model).__name__} from {config_cls.__name__} "
                   f"({layers} layers, hidden {hidden})")
    except Exception as e:
        raise TargetError(f"{label}: cannot build the model: {one_line(e)}") from None
    if getattr(config, "is_encoder_decoder", False) and hasattr(model, "get_encoder"):
        model = model.get_encoder()
        how += "; its encoder is probed"
    return model, how
