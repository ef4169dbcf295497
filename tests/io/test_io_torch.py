"""The .pt loader (torch.load(weights_only=True) only) and live torch tensors."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, fingerprint, read_all

from maskcheck.errors import FileProblem
from maskcheck.io import open_file
from maskcheck.io.torch_files import NEEDS_TORCH

torch = pytest.importorskip("torch")


class WritesMarker:
    """Unpickling runs open(marker, 'w'): the file must never appear."""

    marker = ""

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.marker, "w"))


def test_nested_containers_flatten_to_dotted_names(tmp_path: Path) -> None:
    obj = {"layers": [{"mask": torch.ones(2, 2, dtype=torch.bool)},
                      {"mask": torch.zeros(2, 2, dtype=torch.bool)}],
           "pair": (torch.arange(3), "text"), "step": 7}
    path = tmp_path / "ckpt.pt"
    torch.save(obj, path)
    with open_file(str(path)) as loaded:
        names = [s.name for s in loaded.tensors]
        assert names == ["layers.0.mask", "layers.1.mask", "pair.0"]
        assert dict(loaded.skipped) == {"pair.1": "not a tensor (str)",
                                        "step": "not a tensor (int)"}
        assert read_all(loaded.tensors[1]).tolist() == [[False, False], [False, False]]


def test_a_bare_tensor_is_named_after_the_file(tmp_path: Path) -> None:
    path = tmp_path / "attention_mask.pth"
    torch.save(torch.ones(2, 5, dtype=torch.int64), path)
    with open_file(str(path)) as loaded:
        assert [(s.name, s.dtype) for s in loaded.tensors] == [("attention_mask", "int64")]


def test_bf16_and_float8_widen_exactly(tmp_path: Path) -> None:
    bits = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    tensors = {"bf": torch.randn(4, 8).bfloat16(), "f8": bits.view(torch.float8_e5m2)}
    path = tmp_path / "m.bin"
    torch.save(tensors, path)
    with open_file(str(path)) as loaded:
        got = {s.name: (s.dtype, read_all(s)) for s in loaded.tensors}
    assert got["bf"][0] == "bfloat16" and got["f8"][0] == "float8_e5m2"
    for name, t in tensors.items():
        assert np.array_equal(got[name][1].view(np.uint32), t.float().numpy().view(np.uint32))


def test_legacy_non_zip_files_load_without_mmap(tmp_path: Path) -> None:
    path = tmp_path / "legacy.pt"
    torch.save({"attn_mask": torch.eye(3, dtype=torch.bool)}, path,
               _use_new_zipfile_serialization=False)
    with open_file(str(path)) as loaded:
        assert read_all(loaded.tensors[0]).tolist() == np.eye(3, dtype=bool).tolist()


@pytest.mark.parametrize("legacy", [False, True])
def test_malicious_pickle_is_refused_and_never_runs(tmp_path: Path, legacy: bool) -> None:
    marker = tmp_path / "pwned"
    WritesMarker.marker = str(marker)
    path = tmp_path / "evil.pt"
    if legacy:
        path.write_bytes(pickle.dumps({"mask": WritesMarker()}, protocol=2))
    else:
        torch.save({"mask": WritesMarker()}, path)
    assert not marker.exists()
    with pytest.raises(FileProblem) as e:
        open_file(str(path))
    assert e.value.problem.startswith("refused by torch.load(weights_only=True): ")
    assert "\n" not in e.value.problem
    assert not marker.exists()


def test_html_and_truncated_files_are_one_line_problems(tmp_path: Path) -> None:
    (tmp_path / "page.pt").write_text("<html><body>Access denied</body></html>")
    with pytest.raises(FileProblem, match=r"not a torch\.save file.*HTML"):
        open_file(str(tmp_path / "page.pt"))
    good = tmp_path / "good.pt"
    torch.save({"m": torch.ones(64, 64)}, good)
    cut = tmp_path / "cut.pt"
    cut.write_bytes(good.read_bytes()[:300])
    with pytest.raises(FileProblem, match=r"not a readable torch\.save file") as e:
        open_file(str(cut))
    assert "\n" not in e.value.problem


def test_unsupported_tensors_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "odd.pt"
    torch.save({"c": torch.ones(2, dtype=torch.complex64),
                "sparse": torch.eye(3).to_sparse(), "m": torch.ones(2, dtype=torch.bool)}, path)
    with open_file(str(path)) as loaded:
        assert [s.name for s in loaded.tensors] == ["m"]
        assert dict(loaded.skipped) == {"c": "dtype complex64 cannot hold a mask",
                                        "sparse": "sparse_coo layout"}


def test_pt_input_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "m.pt"
    torch.save({"m": torch.ones(4, 4)}, path)
    before = fingerprint([path])
    with open_file(str(path)) as loaded:
        read_all(loaded.tensors[0])
    assert fingerprint([path]) == before


def test_live_tensor_sources() -> None:
    from maskcheck.io.torch_files import torch_tensor_source

    base = torch.randn(6, 4)
    cases = {
        "bfloat16": base.bfloat16(), "float8_e4m3fn": base.to(torch.float8_e4m3fn),
        "bool": base > 0, "float16": base.half(), "int64": (base > 0).long(),
    }
    for dtype, t in cases.items():
        src = torch_tensor_source("m", t.t())  # non-contiguous on purpose
        assert src.dtype == dtype and src.shape == (4, 6)
        want = t.t().float() if dtype in ("bfloat16", "float8_e4m3fn") else t.t()
        assert np.array_equal(src.read_rows(0, 4), want.numpy())
    scalar = torch_tensor_source("s", torch.tensor(True))
    assert scalar.shape == () and scalar.read_rows(0, 1).tolist() == [[True]]


def test_without_torch_pt_files_say_how_to_install(tmp_path: Path) -> None:
    path = tmp_path / "m.pt"
    torch.save({"m": torch.ones(2)}, path)
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from maskcheck.io import open_file\n"
        "from maskcheck.errors import FileProblem\n"
        f"try:\n    open_file({str(path)!r})\n"
        "except FileProblem as e:\n    print(e.problem)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == NEEDS_TORCH


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_live_cuda_tensors_are_moved_to_the_cpu() -> None:
    from maskcheck.io.torch_files import torch_tensor_source

    t = torch.randn(3, 5, device="cuda").bfloat16()
    src = torch_tensor_source("m", t)
    assert src.dtype == "bfloat16" and src.shape == (3, 5)
    got = src.read_rows(0, 3)
    assert np.array_equal(got.view(np.uint32), t.float().cpu().numpy().view(np.uint32))
