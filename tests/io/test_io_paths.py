"""expand_paths and open_file on what the file system can throw at them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import cli_env
from safetensors.numpy import save_file

from maskcheck.errors import FileProblem
from maskcheck.io import SUFFIXES, TORCH_SUFFIXES, expand_paths, open_file


def mask_file(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({"attn_mask": np.ones((2, 2), bool)}, str(path))
    return path


def test_suffixes() -> None:
    assert set(SUFFIXES) == {".safetensors", ".pt", ".pth", ".bin", ".npy", ".npz"}
    assert set(TORCH_SUFFIXES) == {".pt", ".pth", ".bin"}


def test_directories_are_walked_sorted_for_mask_suffixes(tmp_path: Path) -> None:
    for rel in ["b/z.safetensors", "a/y.npy", "a/sub/x.npz", "top.pt", "c/notes.txt"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"x")
    files, problems = expand_paths([str(tmp_path)])
    found = [os.path.relpath(f, tmp_path) for f in files]
    assert found == sorted(found) == ["a/sub/x.npz", "a/y.npy", "b/z.safetensors", "top.pt"]
    assert problems == []


def test_explicit_files_are_kept_in_order_once(tmp_path: Path) -> None:
    a, b = mask_file(tmp_path / "b.safetensors"), mask_file(tmp_path / "a.safetensors")
    other = tmp_path / "notes.txt"
    other.write_text("hi")
    files, problems = expand_paths([str(a), str(b), str(a), str(other)])
    assert files == [str(a), str(b), str(other)] and problems == []
    with pytest.raises(FileProblem, match=r"unsupported file type '\.txt'"):
        open_file(str(other))


def test_missing_paths_and_broken_links(tmp_path: Path) -> None:
    (tmp_path / "dangling.npy").symlink_to(tmp_path / "gone.npy")
    files, problems = expand_paths([str(tmp_path / "nope.safetensors"),
                                    str(tmp_path / "dangling.npy")])
    assert files == []
    assert problems[0] == (str(tmp_path / "nope.safetensors"), "no such file or directory")
    assert problems[1][1].startswith("broken symlink (points to ")
    with pytest.raises(FileProblem, match="no such file or directory"):
        open_file(str(tmp_path / "nope.safetensors"))


def test_symlink_loops_terminate(tmp_path: Path) -> None:
    mask_file(tmp_path / "d" / "m.safetensors")
    (tmp_path / "d" / "up").symlink_to(tmp_path)  # a directory loop
    (tmp_path / "self.safetensors").symlink_to("self.safetensors")  # a file loop
    files, problems = expand_paths([str(tmp_path)])
    assert files == [str(tmp_path / "d" / "m.safetensors")]
    assert problems == [(str(tmp_path / "self.safetensors"),
                         "symlink loop (too many levels of symbolic links)")]
    with pytest.raises(FileProblem, match="symlink loop"):
        open_file(str(tmp_path / "self.safetensors"))


def test_directories_named_like_files(tmp_path: Path) -> None:
    empty = tmp_path / "x.safetensors"
    empty.mkdir()
    files, problems = expand_paths([str(empty) + "/"])
    assert files == [] and "is a directory, not a .safetensors file" in problems[0][1]
    with pytest.raises(FileProblem, match=r"is a directory, not a \.safetensors file"):
        open_file(str(empty))
    full = mask_file(tmp_path / "y.npz" / "inner.safetensors")
    assert expand_paths([str(tmp_path / "y.npz")]) == ([str(full)], [])
    files, problems = expand_paths([str(tmp_path)])
    assert files == [str(full)] and [p for p, _ in problems] == [str(empty)]


def test_empty_directory_is_reported(tmp_path: Path) -> None:
    (tmp_path / "e").mkdir()
    assert expand_paths([str(tmp_path / "e")]) == (
        [], [(str(tmp_path / "e"), "directory holds no mask files (.safetensors, .pt, .pth, "
                                   ".bin, .npy, .npz)")])


def test_non_utf8_names_are_found_and_read(tmp_path: Path) -> None:
    name = os.fsdecode(b"mask_\xff\xfe.safetensors")
    path = mask_file(tmp_path / name)
    files, problems = expand_paths([str(tmp_path)])
    assert files == [str(path)] and problems == []
    with open_file(files[0]) as loaded:
        assert loaded.tensors[0].read_rows(0, 2).all()


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    assert expand_paths([str(fifo)]) == ([], [(str(fifo), "is a named pipe, not a mask file")])
    with pytest.raises(FileProblem, match=r"is a named pipe, not a \.safetensors file"):
        open_file(str(fifo))


def _unreadable_check(path: Path) -> None:
    assert expand_paths([str(path)]) == (
        [], [(str(path), "permission denied (cannot open for reading)")])
    with pytest.raises(FileProblem, match="permission denied"):
        open_file(str(path))


def test_unreadable_file(shared_dir: Path, as_nobody: list[str]) -> None:
    path = mask_file(shared_dir / "locked.safetensors")
    path.chmod(0)
    if not as_nobody:  # not root: file modes already apply
        _unreadable_check(path)
        return
    code = (
        "import sys\n"
        "from maskcheck.io import expand_paths, open_file\n"
        "from maskcheck.errors import FileProblem\n"
        "print(expand_paths([sys.argv[1]])[1][0][1])\n"
        "try:\n    open_file(sys.argv[1])\nexcept FileProblem as e:\n    print(e.problem)\n"
    )
    r = subprocess.run([*as_nobody, sys.executable, "-c", code, str(path)], cwd="/",
                       env=cli_env(), capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["permission denied (cannot open for reading)"] * 2


def test_character_devices_are_not_mask_files() -> None:
    files, problems = expand_paths(["/dev/null"])
    assert files == [] and problems == [("/dev/null", "is a character device, not a mask file")]
