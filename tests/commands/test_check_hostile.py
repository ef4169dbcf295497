"""`maskcheck check` on hostile file systems: special files, symlink loops, unreadable trees,
odd file names and encodings. Every run is a real CLI subprocess with a timeout (a hang fails
the test); none may exit 3, print a traceback or touch its inputs (sha256 and mtime)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from maskcheck.errors import FileProblem
from maskcheck.lint import reading
from maskcheck.lint.reading import MAX_SOURCE_BYTES, read_regular

ROOT = Path(__file__).resolve().parents[2]
GOOD = "def attend(scores, mask):\n    return scores.masked_fill(mask, -1e9)\n"
FINDING = ":2:37: MC501 "
FORMATS = ("concise", "json", "sarif", "github")


def _drop_read_override() -> list[str]:
    """A command prefix that takes away root's power to read any file, so that permission
    bits mean what they say (tests run as root here and in CI). Empty when not root."""
    if os.geteuid() != 0:
        return []
    caps = "-dac_override,-dac_read_search"
    candidates = [
        ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}"],
        ["capsh", "--drop=cap_dac_override,cap_dac_read_search", "--"],
    ]
    for prefix in candidates:
        probe = [*prefix, "-c", "true"] if prefix[0] == "capsh" else [*prefix, "true"]
        if shutil.which(prefix[0]) and subprocess.run(probe, capture_output=True,
                                                      timeout=30).returncode == 0:
            return prefix
    pytest.skip("root without a working setpriv or capsh (needs CAP_SETPCAP): cannot drop "
                "CAP_DAC_OVERRIDE to make a file unreadable")


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None,
        unprivileged: bool = False) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "maskcheck", "check", *args]
    if unprivileged:
        prefix = _drop_read_override()
        if prefix and prefix[0] == "capsh":
            import shlex

            command = [*prefix, "-c", shlex.join(command)]
        else:
            command = [*prefix, *command]
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    before = snapshot(cwd)
    r = subprocess.run(command, capture_output=True, cwd=cwd, timeout=60, env=full_env,
                       text=True, errors="backslashreplace")
    assert snapshot(cwd) == before  # no input touched
    assert r.returncode != 3 and "Traceback" not in r.stderr, r.stderr
    assert "internal error" not in r.stderr, r.stderr
    return r


def snapshot(top: Path) -> dict[str, tuple[str, int]]:
    """sha256 and mtime of every regular file under `top` (special files are not opened).
    Iterative: os.walk recurses, and one test builds a tree deeper than the recursion limit."""
    out: dict[str, tuple[str, int]] = {}
    stack = [str(top)]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                    continue
                st = os.stat(entry.path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_mode & 0o444:
                with open(entry.path, "rb") as f:
                    out[entry.path] = (hashlib.sha256(f.read()).hexdigest(), st.st_mtime_ns)
    return out


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "good.py").write_text(GOOD)
    # Runs in float16, where GOOD's -1e9 raises (MC501 reads the project for it).
    (tmp_path / "train.sh").write_text("python train.py --fp16\n")
    return tmp_path


def _lines_about(out: str, name: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(name)]


def test_a_fifo_named_on_the_command_line_is_refused_without_blocking(tree: Path) -> None:
    os.mkfifo(tree / "x.py")
    r = cli("x.py", "good.py", cwd=tree)
    assert r.returncode == 2
    assert _lines_about(r.stdout, "x.py") == [
        "x.py: error: is a named pipe, not a Python source: not read"]
    assert "good.py" + FINDING in r.stdout


def test_special_files_inside_a_scanned_tree_are_one_line_each(tree: Path) -> None:
    os.mkfifo(tree / "fifo.py")
    os.mkfifo(tree / "mask.npy")
    (tree / "zero.py").symlink_to("/dev/zero")
    (tree / "null.ipynb").symlink_to("/dev/null")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tree / "sock.py"))
        expected = {"fifo.py": "a named pipe", "mask.npy": "a named pipe",
                    "zero.py": "a character device",
                    "null.ipynb": "a character device", "sock.py": "a socket"}
        if os.geteuid() == 0:  # a device node made here, not only a link to one
            os.mknod(tree / "node.py", stat.S_IFCHR | 0o666, os.makedev(1, 5))
            expected["node.py"] = "a character device"
        r = cli("--fail-on", "warning", ".", cwd=tree)
    assert r.returncode == 2
    for name, kind in expected.items():
        (line,) = _lines_about(r.stdout, name)
        assert line.startswith(f"{name}: error: is {kind}, not a "), line
    assert "good.py" + FINDING in r.stdout


def test_dev_null_and_dev_zero_are_refused(tree: Path) -> None:
    r = cli("/dev/null", "/dev/zero", "good.py", cwd=tree)
    assert r.returncode == 2
    assert "/dev/null: error: is a character device, not a Python source: not read" in r.stdout
    assert "/dev/zero: error: is a character device, not a Python source: not read" in r.stdout
    assert "good.py" + FINDING in r.stdout


@pytest.mark.parametrize("config", ["", '[tool.maskcheck]\nexclude = ["skipped"]\n'])
def test_symlink_loops_are_one_line_and_the_rest_is_checked(tree: Path, config: str) -> None:
    if config:
        (tree / "pyproject.toml").write_text(config)
    (tree / "loop.py").symlink_to("loop.py")
    sub = tree / "sub"
    sub.mkdir()
    (sub / "a.py").symlink_to("b.py")
    (sub / "b.py").symlink_to("a.py")
    (sub / "up").symlink_to("..")  # a directory link back up: not followed
    (sub / "gone.py").symlink_to("nowhere.py")
    for args in (("loop.py", "good.py", "sub"), (".",)):
        r = cli(*args, cwd=tree)
        assert r.returncode == 2, r.stdout
        out = r.stdout
        for name in ("loop.py", "sub/a.py", "sub/b.py"):
            assert _lines_about(out, name) == [
                f"{name}: error: symlink loop (too many levels of symbolic links)"]
        assert _lines_about(out, "sub/gone.py") == [
            "sub/gone.py: error: broken symlink (its target does not exist)"]
        assert "good.py" + FINDING in out
        assert "sub/up" not in out


def test_an_unreadable_directory_or_file_fails_the_gate(tree: Path) -> None:
    # The tree must be reachable by the unprivileged run: pytest's tmp root is 0700.
    os.chmod(tree, 0o755)
    for parent in tree.parents:
        if parent == Path("/tmp") or parent == Path(os.sep):
            break
        os.chmod(parent, os.stat(parent).st_mode | 0o111)
    locked = tree / "locked"
    locked.mkdir()
    (locked / "hidden.py").write_text(GOOD)
    (tree / "secret.py").write_text(GOOD)
    os.chmod(tree / "secret.py", 0)
    os.chmod(locked, 0)
    try:
        r = cli(".", cwd=tree, unprivileged=True)
        named = cli("secret.py", "good.py", cwd=tree, unprivileged=True)
        inside = cli("locked/hidden.py", "good.py", cwd=tree, unprivileged=True)
    finally:
        os.chmod(locked, 0o755)
        os.chmod(tree / "secret.py", 0o644)
    assert r.returncode == 2, r.stdout
    assert _lines_about(r.stdout, "locked") == [
        "locked: error: cannot list directory: permission denied (cannot open for reading)"]
    assert _lines_about(r.stdout, "secret.py") == [
        "secret.py: error: permission denied (cannot open for reading)"]
    assert "good.py" + FINDING in r.stdout
    assert "could not be read" in r.stdout.splitlines()[-1]
    assert named.returncode == 2 and "good.py" + FINDING in named.stdout
    # a file in a directory that cannot be searched is not "missing": one line, the rest checked
    assert inside.returncode == 2 and "good.py" + FINDING in inside.stdout
    assert _lines_about(inside.stdout, "locked/hidden.py") == [
        "locked/hidden.py: error: permission denied (cannot open for reading)"]


def test_a_non_utf8_pyproject_is_one_line(tree: Path) -> None:
    (tree / "pyproject.toml").write_bytes(b'[tool.maskcheck]\nselect = ["MC5"]  # \xff\n')
    r = cli("good.py", cwd=tree)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1
    assert "pyproject.toml: not valid TOML: not UTF-8 (byte 0xff at offset 37)" in r.stderr


@pytest.mark.parametrize("value", ["[" * 100_000 + "]" * 100_000,
                                   "{a=" * 50_000 + "1" + "}" * 50_000])
def test_a_pyproject_nested_too_deeply_is_one_line(tree: Path, value: str) -> None:
    (tree / "pyproject.toml").write_text(f"[tool.maskcheck]\nx = {value}\n")
    r = cli("good.py", cwd=tree)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.endswith("pyproject.toml: not valid TOML: nested too deeply\n")
    assert r.stderr.count("\n") == 1


def test_a_fifo_pyproject_is_not_read(tree: Path) -> None:
    os.mkfifo(tree / "pyproject.toml")
    r = cli("good.py", cwd=tree)
    assert r.returncode == 0 and "good.py" + FINDING in r.stdout


ODD_NAMES = ("é.py", "new\nline.py", "sp ace#1%.py", "tab\there.py")


@pytest.mark.parametrize("fmt", FORMATS)
def test_odd_file_names_with_an_ascii_output_encoding(tree: Path, fmt: str) -> None:
    for name in ODD_NAMES:
        (tree / name).write_text(GOOD)
    (tree / os.fsdecode(b"bad\xff.py")).write_text(GOOD)
    (tree / "broken\nname.py").write_text("x.masked_fill(m, -1e9\n")  # a syntax error
    env = {"PYTHONIOENCODING": "ascii", "LC_ALL": "C"}
    r = cli("--fail-on", "warning", "--format", fmt, ".", cwd=tree, env=env)
    assert r.returncode == 2
    out = r.stdout
    assert out.isascii()
    if fmt == "concise":
        lines = out.splitlines()
        assert "\\xe9.py" + FINDING in out and "bad\\xff.py" + FINDING in out
        assert any(line.startswith("new\\nline.py" + FINDING) for line in lines)
        assert any(line.startswith("tab\\there.py" + FINDING) for line in lines)
        (error,) = [line for line in lines if ": error: " in line]
        assert error.startswith("broken\\nname.py: error: syntax error at line")
        assert len(lines) == 8  # six findings, one error, the summary: nothing split
    elif fmt == "json":
        paths = {f["path"] for f in json.loads(out)["files"]}
        assert {"new\nline.py", "\u00e9.py", "sp ace#1%.py"} <= paths
    elif fmt == "sarif":
        run = json.loads(out)["runs"][0]
        uris = {loc["physicalLocation"]["artifactLocation"]["uri"]
                for res in run["results"] for loc in res["locations"]}
        assert {"%C3%A9.py", "new%0Aline.py", "sp%20ace%231%25.py", "tab%09here.py",
                "bad%FF.py"} <= uris
        notes = run["invocations"][0]["toolExecutionNotifications"]
        assert notes[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == (
            "broken%0Aname.py")
    else:
        lines = out.splitlines()
        assert len(lines) == 7 and all(line.startswith("::") for line in lines)
        assert any("file=new%0Aline.py,line=2,col=37" in line for line in lines)


def test_a_torchscript_file_in_a_tree_is_skipped_not_an_error(tree: Path) -> None:
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    scripted = torch.jit.trace(torch.nn.Linear(2, 2), torch.zeros(1, 2))
    scripted.save(str(tree / "model.pt"))
    torch.save(torch.nn.Linear(2, 2), tree / "module.pt")  # a pickle weights_only refuses
    np.save(tree / "mask.npy", np.tril(np.ones((4, 4), dtype=bool)))
    r = cli("--fail-on", "warning", ".", cwd=tree)
    assert r.returncode == 1, r.stdout  # good.py's warning; nothing unreadable
    assert "model.pt" not in r.stdout and "module.pt" not in r.stdout
    assert "good.py" + FINDING in r.stdout
    named = cli("model.pt", cwd=tree)  # asked for by name, it is still an error
    assert named.returncode == 2 and "model.pt: error:" in named.stdout


def test_a_script_named_pt_in_a_tree_is_skipped_not_an_error(tree: Path) -> None:
    # deepspeed 0.9.5 ships its launcher as bin/deepspeed.pt, a Python script
    (tree / "bin").mkdir()
    (tree / "bin" / "deepspeed.pt").write_text(
        "#!/usr/bin/env python3\n\nfrom deepspeed.launcher.runner import main\n")
    r = cli("--fail-on", "warning", ".", cwd=tree)
    assert r.returncode == 1, r.stdout  # good.py's warning; nothing unreadable
    assert "deepspeed.pt" not in r.stdout
    named = cli("bin/deepspeed.pt", cwd=tree)  # asked for by name, it is still an error
    assert named.returncode == 2 and "deepspeed.pt: error:" in named.stdout


def test_a_walk_checks_only_arrays_named_as_masks(tree: Path) -> None:
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(0)
    # fairseq examples/hubert/tests/sample.large.L20.npy: activations with a few values below
    # -1000 (read alone, a biased additive mask with a weak value); a one-hot float matrix
    # (read alone, a 0/1 multiplicative mask: MC012)
    features = rng.normal(scale=50.0, size=(64, 96)).astype(np.float32)
    features[3, 5] = -1831.0
    np.save(tree / "sample.large.L20.npy", features)
    np.save(tree / "onehot.npy", np.eye(8, dtype=np.float32))
    np.savez(tree / "batch.npz", labels=np.eye(8, dtype=np.float32),
             pad_mask=np.array([[True, True, False]]))
    np.save(tree / "attn_mask.npy", np.eye(8, dtype=np.float32))
    r = cli("--fail-on", "error", ".", cwd=tree)
    assert "sample.large.L20" not in r.stdout and "onehot" not in r.stdout, r.stdout
    assert "batch.npz:labels" not in r.stdout
    assert "attn_mask.npy:attn_mask: MC012" in r.stdout
    named = cli("onehot.npy", cwd=tree)  # asked for by name, every tensor is checked
    assert named.returncode == 1 and "onehot.npy:onehot: MC012" in named.stdout


def test_a_file_over_the_size_limit_is_not_read(tree: Path) -> None:
    with open(tree / "huge.py", "wb") as f:
        f.truncate(MAX_SOURCE_BYTES + 1)  # sparse: costs no disk
    r = cli(".", cwd=tree)
    assert r.returncode == 2
    assert _lines_about(r.stdout, "huge.py") == [
        "huge.py: error: 16.0 MiB, over the 16.0 MiB limit for a Python source: not read"]


@pytest.mark.parametrize(("change", "word"), [(-1, "shrank"), (+1, "grew")])
def test_a_file_that_changes_while_read_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: int, word: str,
) -> None:
    path = tmp_path / "big.py"
    size = reading.READ_BLOCK * 2 + 10
    path.write_bytes(b"#" * size)
    real_pread = reading._pread
    calls = []

    def pread_then_change(fd: int, length: int, offset: int) -> bytes:
        calls.append(offset)
        if len(calls) == 2:  # another process truncates or appends after the first block
            with open(path, "r+b") as f:
                f.truncate(size + change * 4096)
        return real_pread(fd, length, offset)

    monkeypatch.setattr(reading, "_pread", pread_then_change)
    with pytest.raises(FileProblem, match=f"file {word} while it was read"):
        read_regular(str(path), limit=MAX_SOURCE_BYTES, what="Python source")



def test_a_hostile_tensor_name_cannot_break_a_line_or_reach_the_terminal(tree: Path) -> None:
    pytest.importorskip("numpy")
    name = "bad\nname\x1b[31m\u202e"
    header = json.dumps({name: {"dtype": "BOOL", "shape": [4, 4], "data_offsets": [0, 16]}})
    rows = b"".join(bytes([1] * (i + 1) + [0] * (3 - i)) for i in range(4))  # tril: causal
    (tree / "evil.safetensors").write_bytes(
        len(header).to_bytes(8, "little") + header.encode() + rows)
    for fmt in ("concise", "github"):
        out = cli("--format", fmt, "evil.safetensors", cwd=tree).stdout
        assert "\x1b" not in out and "\u202e" not in out
        (line,) = [line for line in out.splitlines() if "MC050" in line]
        assert "bad\\nname\\x1b[31m\\u202e: MC050" in line


@pytest.mark.parametrize("config", ["", '[tool.maskcheck]\nexclude = ["skipped"]\n'])
def test_a_tree_deeper_than_the_recursion_limit(tree: Path, config: str) -> None:
    # os.walk recursed on Python 3.11: a tree 1,000 levels deep was an internal error. The
    # run gets a recursion limit of 150 so that 300 levels show it (a tree past the default
    # limit would be too deep for pytest's own recursive clean-up of tmp_path).
    if config:
        (tree / "pyproject.toml").write_text(config)
    depth = 300
    for level in range(1, depth + 1):
        os.mkdir(tree / ("d/" * level))
    (tree / ("d/" * depth) / "deep.py").write_text(GOOD)
    script = ("import sys; sys.setrecursionlimit(150); from maskcheck.cli import main; "
              "raise SystemExit(main(['check', '.']))")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       cwd=tree, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    assert ("d/" * depth) + "deep.py" + FINDING in r.stdout
