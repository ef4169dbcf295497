"""hf: targets: tiny random-init transformers models (no download) are clean under their real
intent, and the probe sees what that intent means."""

from __future__ import annotations

from pathlib import Path

import pytest

import maskcheck

transformers = pytest.importorskip("transformers")

SMALL = {"seq": 6, "batch": 3, "pad": 2}


def failed(report: maskcheck.probe.report.ProbeReport) -> list[str]:
    return [f"{c.title}: {c.status}: {c.message}" for c in report.checks
            if c.status in ("fail", "error")]


@pytest.mark.parametrize(("target", "intent"), [
    ("hf:llama", "causal"),
    ("hf:bert", "bidirectional"),
    ("hf:t5", "bidirectional"),  # T5's encoder: the full model needs decoder inputs
])
def test_stock_models_are_clean(target: str, intent: str) -> None:
    report = maskcheck.probe(target, intent, **SMALL)
    assert report.findings == [], failed(report)
    assert failed(report) == []
    status = {(c.name, c.side): c.status for c in report.checks}
    assert status[("implementations", None)] == "pass"  # eager vs sdpa on real tokens
    expected_packed = "pass" if intent == "causal" else "skipped"
    assert status[("packed", None)] == expected_packed


def test_a_model_that_refuses_sdpa_has_nothing_to_compare_not_an_error() -> None:
    # Gemma2 in transformers 5.24 raises on forward with sdpa: not a probe error.
    report = maskcheck.probe("hf:gemma2", "causal", **SMALL)
    assert report.findings == [] and failed(report) == []
    impl = next(c for c in report.checks if c.name == "implementations")
    assert impl.status == "skipped" and "not supported by this model: sdpa" in impl.message


def test_a_causal_model_probed_as_bidirectional_shows_blind_spots() -> None:
    # The intent is declared, never guessed: declaring llama bidirectional makes every later
    # real position a position that "should" influence and does not.
    report = maskcheck.probe("hf:llama", "bidirectional", select=["MC075"], **SMALL)
    assert report.codes() == {"MC075"}
    blind = next(c for c in report.checks if c.code == "MC075")
    assert all(w[2] > w[1] for w in blind.where)  # only keys after the query


def test_local_model_directory(tmp_path: Path) -> None:
    import torch

    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=1, num_attention_heads=2,
                                      num_key_value_heads=1, head_dim=16, vocab_size=200)
    torch.manual_seed(0)
    transformers.LlamaModel(config).save_pretrained(tmp_path)
    report = maskcheck.probe(f"hf:{tmp_path}", "causal", padding_side="left",
                             select=["MC070", "MC071", "MC072", "MC076"], **SMALL)
    assert report.findings == [], failed(report)
    assert "loaded from" in report.notes[0]


def test_unknown_model_type_is_a_target_error() -> None:
    from maskcheck.probe.targets import TargetError

    with pytest.raises(TargetError, match="hf:no_such_model: cannot build the model"):
        maskcheck.probe("hf:no_such_model", "causal")
