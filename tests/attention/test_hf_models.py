"""guard and capture on real transformers models (tiny random-init configs, CPU, no download).

transformers is the pinned test-only extra; these tests skip where it is not installed.
Model builds are shared per module; sequences are 8 tokens.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import maskcheck  # noqa: E402
from maskcheck.attention.intercept import GuardError, MaskcheckWarning  # noqa: E402

L = 8
IMPLS = ("sdpa", "eager")


def _build(config: Any, model_cls: Any, impl: str) -> Any:
    torch.manual_seed(0)
    config._attn_implementation = impl
    return model_cls(config).eval()


def _llama(impl: str) -> Any:
    cfg = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return _build(cfg, transformers.LlamaForCausalLM, impl)


def _mistral(impl: str) -> Any:
    cfg = transformers.MistralConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        sliding_window=4)
    return _build(cfg, transformers.MistralForCausalLM, impl)


def _bert(impl: str) -> Any:
    cfg = transformers.BertConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=64)
    return _build(cfg, transformers.BertModel, impl)


def _t5(impl: str) -> Any:
    cfg = transformers.T5Config(
        vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
        num_heads=4, decoder_start_token_id=0, pad_token_id=0)
    return _build(cfg, transformers.T5ForConditionalGeneration, impl)


BUILDERS: dict[str, Callable[[str], Any]] = {
    "llama": _llama, "mistral": _mistral, "bert": _bert, "t5": _t5}
DECODERS = ("llama", "mistral")


@pytest.fixture(scope="module")
def models() -> dict[tuple[str, str], Any]:
    return {(name, impl): build(impl) for name, build in BUILDERS.items() for impl in IMPLS}


def _ids() -> Any:
    return torch.randint(1, 64, (2, L), generator=torch.Generator().manual_seed(1))


def _padding(side: str) -> Any:
    am = torch.ones(2, L, dtype=torch.long)
    if side == "left":
        am[1, :3] = 0
    elif side == "right":
        am[1, -3:] = 0
    return am


def _run(model: Any, name: str, attention_mask: Any) -> Any:
    ids = _ids()
    with torch.no_grad():
        if name == "t5":
            dec = torch.randint(1, 64, (2, 4), generator=torch.Generator().manual_seed(2))
            return model(input_ids=ids, attention_mask=attention_mask, decoder_input_ids=dec)
        return model(input_ids=ids, attention_mask=attention_mask)


def _error_codes(info: pytest.ExceptionInfo[GuardError]) -> set[str]:
    return {f.code for f in info.value.findings}


# ------------------------------------------------------------------- what the guard sees


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", list(BUILDERS))
def test_guard_sees_every_attention_call(models: dict[tuple[str, str], Any], name: str,
                                         impl: str) -> None:
    model = models[(name, impl)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaskcheckWarning)
        with maskcheck.guard() as g:
            _run(model, name, _padding("none"))
    # 2 layers; T5: 2 encoder self + 2 decoder self + 2 cross
    expected = 6 if name == "t5" else 2
    assert g.calls.total == expected
    assert g.calls.by_impl == {f"hf:{impl}": expected}
    layer0 = {"llama": "model.layers.0.self_attn", "mistral": "model.layers.0.self_attn",
              "bert": "encoder.layer.0.attention.self",
              "t5": "encoder.block.0.layer.0.SelfAttention"}[name]
    assert g.calls.by_module[layer0] == 1


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", list(BUILDERS))
def test_all_padding_sequence_is_an_error_naming_the_layer(
        models: dict[tuple[str, str], Any], name: str, impl: str) -> None:
    am = _padding("none")
    am[0] = 0
    with pytest.raises(GuardError) as info, maskcheck.guard(action="raise", fail_on="error"):
        _run(models[(name, impl)], name, am)
    assert "MC002" in _error_codes(info)
    message = str(info.value)
    assert "test_hf_models.py" in message.split(":")[0]  # the user's own line
    assert ".layer" in message or ".block." in message  # the module
    assert "(call 1, hf:" in message


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", DECODERS)
def test_inverted_padding_mask_is_an_error(models: dict[tuple[str, str], Any], name: str,
                                           impl: str) -> None:
    inverted = 1 - _padding("left")  # the unpadded sequence becomes all padding
    with pytest.raises(GuardError) as info, maskcheck.guard(action="raise", fail_on="error"):
        _run(models[(name, impl)], name, inverted)
    assert "MC002" in _error_codes(info)


def _fp16_minus_1e9_mask() -> Any:
    """A left-padded causal keep-mask made additive in fp16 with -1e9: masked cells -inf."""
    keep = torch.ones(L, L).tril().bool()[None, None] & _padding("left").bool()[:, None, None, :]
    return (1 - keep.half()) * -1e9


def test_fp16_minus_1e9_mask_on_eager_is_an_error_naming_the_nan() -> None:
    # Eager softmax makes the -inf pad-query rows NaN; the next layer multiplies those NaN
    # values by weight 0 and every real token of the padded sequence becomes NaN.
    model = _llama("eager").half()
    mask = _fp16_minus_1e9_mask()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaskcheckWarning)
        with maskcheck.guard(fail_on="info") as g:  # eager outputs are checked always
            out = _run(model, "llama", mask)
    assert bool(torch.isnan(out.logits[1, 3:]).all())  # the real tokens
    codes = {(r.module, r.finding.code, r.finding.severity.value) for r in g.reports}
    assert ("model.layers.0.self_attn", "MC002", "info") in codes  # the NaN pad rows
    assert ("model.layers.1.self_attn", "MC061", "error") in codes  # NaN reaches real rows
    with pytest.raises(GuardError), maskcheck.guard(action="raise", check_output=True):
        _run(model, "llama", mask)


def test_fp16_minus_1e9_mask_on_sdpa_real_tokens_stay_finite() -> None:
    # The same mask on SDPA: torch 2.13's CPU kernel gives zeros for the -inf pad rows, so no
    # real token is NaN; the guard reports the empty pad rows, nothing at error level.
    model = _llama("sdpa").half()
    with maskcheck.guard(check_output=True, fail_on="error") as g:
        out = _run(model, "llama", _fp16_minus_1e9_mask())
    assert bool(torch.isfinite(out.logits[1, 3:]).all())
    assert not g.reports


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", list(BUILDERS))
def test_correct_unpadded_batch_raises_nothing(models: dict[tuple[str, str], Any], name: str,
                                               impl: str) -> None:
    with maskcheck.guard(action="raise", check_output=True) as g:
        _run(models[(name, impl)], name, _padding("none"))
    assert g.calls.total > 0 and not g.reports


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", ["bert", "t5"])
def test_correct_right_padded_encoder_raises_nothing(models: dict[tuple[str, str], Any],
                                                    name: str, impl: str) -> None:
    with maskcheck.guard(action="raise", check_output=True) as g:
        _run(models[(name, impl)], name, _padding("right"))
    assert g.calls.total > 0 and not g.reports


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", DECODERS)
def test_correct_padded_decoder_batch_raises_nothing(models: dict[tuple[str, str], Any],
                                                     name: str, impl: str, side: str) -> None:
    # Left padding leaves pad-query rows empty by design (their outputs are discarded), and
    # Mistral's sliding window with right padding too: info, not error or warning.
    with maskcheck.guard(action="raise", check_output=True) as g:
        _run(models[(name, impl)], name, _padding(side))
    assert g.calls.total > 0 and not g.reports
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaskcheckWarning)
        with maskcheck.guard(fail_on="info") as g:
            _run(models[(name, impl)], name, _padding(side))
    assert all(r.finding.severity.value == "info" for r in g.reports)


@pytest.mark.parametrize("impl", IMPLS)
def test_left_padded_generate_raises_nothing(models: dict[tuple[str, str], Any],
                                             impl: str) -> None:
    model = models[("llama", impl)]
    model.generation_config.pad_token_id = 0
    with torch.no_grad(), maskcheck.guard(action="raise", check_output=True) as g:
        out = model.generate(input_ids=_ids(), attention_mask=_padding("left"),
                             max_new_tokens=3, do_sample=False)
    assert out.shape == (2, L + 3)
    assert g.calls.total == 2 * 3  # prefill + 2 decode steps, 2 layers each
    assert not g.reports


def test_flex_attention_path_is_seen_with_its_block_mask() -> None:
    model = _llama("flex_attention")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with maskcheck.guard(action="raise", fail_on="error") as g:
            _run(model, "llama", _padding("none"))
        assert g.calls.by_impl == {"hf:flex_attention": 2}
        am = _padding("none")
        am[0] = 0
        with pytest.raises(GuardError) as info, \
                maskcheck.guard(action="raise", fail_on="error"):
            _run(model, "llama", am)
    assert "MC002" in _error_codes(info) and "[block_mask]" in str(info.value)


def test_a_block_without_attention_calls_says_so() -> None:
    with pytest.warns(MaskcheckWarning, match="no attention call maskcheck can see"), \
            maskcheck.guard() as g:
        torch.nn.Linear(4, 4)(torch.randn(2, 4))
    assert g.calls.total == 0


# -------------------------------------------------------------------------- torch.compile


def test_compiled_model_guarded_and_all_padding_found() -> None:
    model = _llama("sdpa")
    compiled = torch.compile(model)  # default inductor
    am = _padding("none")
    am[0] = 0
    with pytest.raises(GuardError) as info, maskcheck.guard(action="raise", fail_on="error"):
        _run(compiled, "llama", am)
    assert "MC002" in _error_codes(info)
    assert "model.layers.0.self_attn" in str(info.value)  # not _orig_mod.model...
    with maskcheck.guard(fail_on="error") as g:  # the same graph again, no crash
        _run(compiled, "llama", _padding("none"))
    assert g.calls.total == 2


def test_fullgraph_compile_passes_through_with_one_warning() -> None:
    model = _llama("sdpa")
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    expected = _run(model, "llama", _padding("left")).logits
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with maskcheck.guard(action="raise") as g:
            out = _run(compiled, "llama", _padding("left")).logits
    assert torch.allclose(out, expected, atol=1e-5)
    notes = [str(w.message) for w in seen if issubclass(w.category, MaskcheckWarning)]
    assert len(notes) == 1 and "fullgraph=True" in notes[0]
    assert g.calls.total == 0 and g.calls.unchecked_compiled > 0


# -------------------------------------------------------------------------------- capture


def test_capture_picks_a_call_by_module_name(models: dict[tuple[str, str], Any],
                                             tmp_path: Path) -> None:
    path = tmp_path / "dec.safetensors"
    with maskcheck.capture(path, module="decoder.block.0.layer.0.SelfAttention") as st:
        _run(models[("t5", "eager")], "t5", _padding("right"))
    assert st.saved and st.saved_module == "decoder.block.0.layer.0.SelfAttention"
    assert st.saved_index == 3  # after the two encoder self-attention calls
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        q = f.get_tensor("query")
        mask = f.get_tensor("attn_mask")
    assert meta["maskcheck.impl"] == "hf:eager" and meta["maskcheck.call_index"] == "3"
    kwargs = json.loads(meta["maskcheck.kwargs"])
    assert kwargs["position_bias_added"] is True and kwargs["training"] is False
    assert tuple(q.shape) == (2, 4, 4, 8)  # decoder: 4 tokens, 4 heads, d_kv 8
    assert mask.shape[-2:] == (4, 4)


def test_capture_module_not_found_lists_modules_seen(models: dict[tuple[str, str], Any],
                                                     tmp_path: Path) -> None:
    with pytest.warns(MaskcheckWarning, match="modules seen: model.layers.0.self_attn"), \
            maskcheck.capture(tmp_path / "x.safetensors", module="nope.self_attn"):
        _run(models[("llama", "sdpa")], "llama", _padding("none"))


def test_gqa_scale_and_dropout_are_stored(tmp_path: Path) -> None:
    model = _llama("sdpa")
    model.config.attention_dropout = 0.25
    for layer in model.model.layers:
        layer.self_attn.attention_dropout = 0.25
    model.train()
    path = tmp_path / "train.safetensors"
    with maskcheck.capture(path, nth=2):
        model(input_ids=_ids(), attention_mask=_padding("right"))
    from maskcheck.attention.replay import replay_file

    result = replay_file(str(path))
    kw = result.info["kwargs"]
    assert kw["dropout_p"] == 0.25 and kw["enable_gqa"] is True and kw["training"] is True
    assert kw["scale"] == pytest.approx(8 ** -0.5)
    differs = " ".join(result.info["replay_differs"])
    assert "dropout_p=0.25" in differs and "replay runs without dropout" in differs
