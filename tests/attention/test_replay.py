"""replay on the committed captures (fixtures/captures) and on bad files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = ROOT / "fixtures" / "captures"
sys.path.insert(0, str(CAPTURES))
from make_captures import EXPECTED  # noqa: E402

PY = sys.executable


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "maskcheck", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def run_main(*args: str) -> tuple[int, str, str]:
    """The CLI in-process (torch is already imported): rc, stdout, stderr."""
    import contextlib
    import io

    from maskcheck.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(args))
    return rc, out.getvalue(), err.getvalue()


def replay_json(path: Path, *extra: str) -> tuple[int, dict]:
    import contextlib
    import io

    from maskcheck.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["replay", str(path), "--format", "json", *extra])
    return rc, json.loads(buf.getvalue())


def codes(doc: dict) -> set[str]:
    f = doc["files"][0]
    out = {x["code"] for x in f["findings"]}
    for t in f["tensors"]:
        out |= {x["code"] for x in t["findings"]}
    return out


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_committed_capture_names_its_failure(name: str) -> None:
    must, must_not = EXPECTED[name]
    rc, doc = replay_json(CAPTURES / name)
    found = codes(doc)
    assert must <= found, (name, found)
    assert not (must_not & found), (name, found)
    from maskcheck.rules.registry import get_rule

    errors = {c for c in found if (r := get_rule(c)) is not None and r.severity.value == "error"}
    assert rc == (1 if errors else 0)


def test_json_shape_per_contract() -> None:
    _rc, doc = replay_json(CAPTURES / "mha_fully_padded.safetensors")
    assert doc["schema"] == 1 and doc["tool"]["name"] == "maskcheck"
    (f,) = doc["files"]
    assert f["path"].endswith("mha_fully_padded.safetensors") and f["error"] is None
    assert [t["name"] for t in f["tensors"]] == ["key_padding_mask"]
    paths = {r["path"]: r for r in f["runs"]}
    assert {"need_weights", "no_weights", "fast_path", "reference"} <= set(paths)
    for r in f["runs"]:
        assert set(r) >= {"api", "path", "device", "dtype", "status", "error", "nan_rows",
                          "zero_rows", "max_abs_err", "masked_weight"}
        assert r["status"] in ("ok", "nan", "error")
    # pytorch/pytorch#41508 on torch 2.x CPU: NaN with weights, zeros without.
    assert paths["need_weights"]["status"] == "nan"
    assert [1, 0] in paths["need_weights"]["nan_rows"]
    assert [1, 0] in paths["no_weights"]["zero_rows"]
    assert paths["fast_path"]["fast_path_ran"] is True
    mc062 = [x for x in f["findings"] if x["code"] == "MC062"]
    assert mc062 and mc062[0]["where"][0] == [1, 0]
    assert doc["summary"]["error"] >= 1


def test_fp16_finfo_min_leak_is_measured() -> None:
    _, doc = replay_json(CAPTURES / "sdpa_fp16_finfo_min.safetensors")
    runs = {r["path"]: r for r in doc["files"][0]["runs"]}
    assert runs["math"]["dtype"] == "float16"
    # every weight of the fully-masked rows lands on the keys the mask hides
    assert runs["math"]["masked_weight"] > 0.99
    assert runs["default"]["leak_rows"]
    assert runs["reference"]["status"] == "nan"


def test_causal_with_mask_math_refuses() -> None:
    _, doc = replay_json(CAPTURES / "sdpa_causal_with_mask.safetensors")
    runs = {r["path"]: r for r in doc["files"][0]["runs"]}
    assert runs["math"]["status"] == "error"
    assert "is_causal" in runs["math"]["error"]
    (mc060,) = [x for x in doc["files"][0]["findings"] if x["code"] == "MC060"]
    assert "math raised" in mc060["message"]


def test_text_report_names_paths_and_findings() -> None:
    res = run_cli("replay", str(CAPTURES / "mha_fully_padded.safetensors"), "--width", "100")
    assert res.returncode == 1, res.stderr
    for word in ("need_weights", "no_weights", "fast_path", "reference", "MC062", "NaN",
                 "zeros"):
        assert word in res.stdout
    assert "\x1b[" not in res.stdout  # not a terminal: no escape codes


def test_fail_on_and_ignore(tmp_path: Path) -> None:
    rc, _ = replay_json(CAPTURES / "sdpa_causal_with_mask.safetensors")
    assert rc == 0  # MC060 is a warning
    rc, _ = replay_json(CAPTURES / "sdpa_causal_with_mask.safetensors", "--fail-on", "warning")
    assert rc == 1
    rc, doc = replay_json(CAPTURES / "mha_fully_padded.safetensors", "--ignore", "MC002,MC062")
    assert rc == 0 and not codes(doc)


def test_svg_and_html(tmp_path: Path) -> None:
    svg, html = tmp_path / "r.svg", tmp_path / "r.html"
    rc, _, err = run_main("replay", str(CAPTURES / "sdpa_correct.safetensors"), "--svg",
                          str(svg), "--html", str(html))
    assert rc == 0, err
    assert svg.read_text().lstrip().startswith("<svg")
    assert "reference" in html.read_text()


def test_mask_file_gets_generated_qkv(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    kpm = torch.tensor([[False, False, False], [True, True, True]])
    save_file({"key_padding_mask": kpm}, str(tmp_path / "kpm.safetensors"))
    rc, doc = replay_json(tmp_path / "kpm.safetensors", "--heads", "2", "--dim", "4")
    f = doc["files"][0]
    assert {r["path"] for r in f["runs"]} >= {"need_weights", "no_weights", "fast_path"}
    assert "MC062" in codes(doc) and rc == 1
    assert f["replay"]["generated"] is True


# ----------------------------------------------------------------------------- bad input


def _bad_files(tmp_path: Path) -> dict[str, Path]:
    import torch
    from safetensors.torch import save_file

    out = {}
    q = torch.randn(1, 2, 4, 8)
    save_file({"query": q, "value": q.clone()}, str(tmp_path / "no_key.safetensors"),
              metadata={"maskcheck.api": "sdpa"})
    out["no_key"] = tmp_path / "no_key.safetensors"
    save_file({"query": q, "key": torch.randn(1, 2, 4, 6), "value": torch.randn(1, 2, 4, 8)},
              str(tmp_path / "bad_e.safetensors"), metadata={"maskcheck.api": "sdpa"})
    out["bad_e"] = tmp_path / "bad_e.safetensors"
    save_file({"query": q, "key": q.clone(), "value": q.clone(),
               "attn_mask": torch.ones(3, 5, dtype=torch.bool)},
              str(tmp_path / "bad_mask.safetensors"), metadata={"maskcheck.api": "sdpa"})
    out["bad_mask"] = tmp_path / "bad_mask.safetensors"
    x = torch.randn(2, 3, 8)
    save_file({"query": x, "key": x.clone(), "value": x.clone()},
              str(tmp_path / "mha_noweights.safetensors"),
              metadata={"maskcheck.api": "mha", "maskcheck.kwargs": '{"batch_first": true}'})
    out["mha_no_num_heads"] = tmp_path / "mha_noweights.safetensors"
    save_file({"query": x, "key": x.clone(), "value": x.clone(),
               "key_padding_mask": torch.zeros(5, 5, dtype=torch.bool)},
              str(tmp_path / "mha_bad_kpm.safetensors"),
              metadata={"maskcheck.api": "mha", "maskcheck.kwargs": '{"num_heads": 2}'})
    out["mha_bad_kpm"] = tmp_path / "mha_bad_kpm.safetensors"
    save_file({"query": q, "key": q.clone(), "value": q.clone()},
              str(tmp_path / "bad_json.safetensors"),
              metadata={"maskcheck.api": "sdpa", "maskcheck.kwargs": "{not json"})
    out["bad_json"] = tmp_path / "bad_json.safetensors"
    (tmp_path / "garbage.safetensors").write_bytes(b"\x00\x01garbage")
    out["garbage"] = tmp_path / "garbage.safetensors"
    out["missing"] = tmp_path / "missing.safetensors"
    return out


def test_bad_capture_files_exit_2_one_line(tmp_path: Path) -> None:
    import contextlib
    import io

    from maskcheck.cli import main

    for label, path in _bad_files(tmp_path).items():
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(["replay", str(path)])
        lines = err.getvalue().strip().splitlines()
        assert rc == 2, (label, err.getvalue())
        assert len(lines) == 1 and str(path.name) in lines[0], (label, lines)
        assert "Traceback" not in err.getvalue()


def test_bad_file_subprocess_and_json(tmp_path: Path) -> None:
    bad = _bad_files(tmp_path)["bad_mask"]
    res = run_cli("replay", str(bad))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    rc, out, _ = run_main("replay", str(bad), "--format", "json")
    assert rc == 2
    doc = json.loads(out)
    assert doc["files"][0]["error"] and doc["files"][0]["tensors"] == []


def test_missing_device_exit_2() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    rc, _, err = run_main("replay", str(CAPTURES / "sdpa_correct.safetensors"), "--device",
                          "cuda")
    assert rc == 2
    assert "cuda" in err.lower() and "Traceback" not in err and len(err.splitlines()) == 1


@pytest.mark.cuda
def test_replay_on_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _rc, doc = replay_json(CAPTURES / "mha_fully_padded.safetensors", "--device", "cuda")
    runs = doc["files"][0]["runs"]
    assert all(r["device"] == "cuda" for r in runs if r["path"] != "reference")
    assert "MC002" in codes(doc)


def test_capture_from_another_writer_without_weights_or_aliases(tmp_path: Path) -> None:
    """CONTRACT-only capture: no mha.* weights, q/k/v stored as equal copies, batch-first."""
    import torch
    from safetensors.torch import save_file

    x = torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(0))
    kpm = torch.tensor([[False, False, True, True], [True, True, True, True]])
    save_file({"query": x, "key": x.clone(), "value": x.clone(), "key_padding_mask": kpm},
              str(tmp_path / "ext.safetensors"),
              metadata={"maskcheck.api": "mha",
                        "maskcheck.kwargs": json.dumps({"num_heads": 2, "batch_first": True})})
    rc, doc = replay_json(tmp_path / "ext.safetensors")
    f = doc["files"][0]
    runs = {r["path"]: r for r in f["runs"]}
    assert rc == 1 and {"MC002", "MC062"} <= codes(doc)
    assert f["replay"]["self_attention"] is True and f["replay"]["kwargs"]["weights_generated"]
    assert runs["fast_path"]["fast_path_ran"] is True and runs["fast_path"]["status"] == "nan"
    assert runs["no_weights"]["status"] == "ok"


def test_mask_file_with_mha_pair_replays_both(tmp_path: Path) -> None:
    """pytorch/pytorch#41508: banded float attn_mask + bool key_padding_mask."""
    import torch
    from safetensors.torch import save_file

    inf = float("-inf")
    am = torch.tensor([[0, inf, inf, inf], [0, 0, inf, inf], [inf, 0, 0, inf],
                       [inf, inf, 0, 0]])
    kpm = torch.tensor([[False, False, False, False], [False, False, True, True]])
    save_file({"attn_mask": am, "key_padding_mask": kpm}, str(tmp_path / "pair.safetensors"))
    rc, doc = replay_json(tmp_path / "pair.safetensors")
    runs = {r["path"]: r for r in doc["files"][0]["runs"]}
    assert rc == 1 and {"MC002", "MC062"} <= codes(doc)
    assert runs["need_weights"]["nan_rows"] == [[1, 3]]
    assert runs["no_weights"]["zero_rows"] == [[1, 3]]
    assert runs["fast_path"]["fast_path_ran"] is False  # a float mask: torch skips it


def test_pad_queries_of_a_left_padded_causal_mask_are_info(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    real = torch.tensor([[False, False, True, True], [True, True, True, True]])
    mask = causal[None, None] & real[:, None, None, :]
    save_file({"attn_mask": mask}, str(tmp_path / "left.safetensors"))
    _, doc = replay_json(tmp_path / "left.safetensors", "--api", "sdpa", "--heads", "2",
                         "--dim", "4")
    f = doc["files"][0]
    mc002 = [x for x in f["findings"] if x["code"] == "MC002"]
    assert mc002 and {x["severity"] for x in mc002} == {"info"}, mc002
    assert "pad query" in mc002[0]["message"]
