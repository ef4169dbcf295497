"""One reading discipline: a file that shrinks while it is read is an error line, not SIGBUS."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from maskcheck.analysis import pipeline
from maskcheck.analysis.pipeline import analyze_paths, usable_cpus
from maskcheck.errors import FileProblem
from maskcheck.io import open_file
from maskcheck.io.rawfile import RawFile

ROOT = Path(__file__).resolve().parents[2]

# Run in a child: before the fix the mapped read of a truncated file killed the process
# with SIGBUS, which must fail this test, not take pytest down. The header is read, then the
# victim is truncated, then the data is read: exactly the race of a file cut by another
# process mid-inspect, made deterministic.
_TRUNCATE_AFTER_HEADER = """
import json, multiprocessing, os, sys
sys.path.insert(0, sys.argv[1])
multiprocessing.set_start_method("fork")
import maskcheck.io.safetensors_file as st
original = st._read_header
def truncating(raw):
    header, start = original(raw)
    if raw.path.endswith("victim.safetensors"):
        os.truncate(raw.path, start + 16)
    return header, start
st._read_header = truncating
from maskcheck.analysis import analyze_paths
report = analyze_paths(sys.argv[3:], jobs=int(sys.argv[2]))
print(json.dumps({f.path: [f.error, len(f.tensors)] for f in report.files}))
"""


def _masks(tmp_path: Path) -> tuple[Path, Path]:
    victim, good = tmp_path / "victim.safetensors", tmp_path / "good.safetensors"
    save_file({"bias": np.zeros((512, 512), np.float32)}, str(victim))
    save_file({"m": np.tril(np.ones((8, 8), bool))}, str(good))
    return victim, good


@pytest.mark.parametrize("jobs", [1, 2])
def test_file_truncated_between_header_and_data_is_one_error(tmp_path: Path, jobs: int) -> None:
    victim, good = _masks(tmp_path)
    opened = victim.stat().st_size
    r = subprocess.run([sys.executable, "-c", _TRUNCATE_AFTER_HEADER, str(ROOT), str(jobs),
                        str(victim), str(good)],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    got = json.loads(r.stdout)
    error, tensors = got[str(victim)]
    assert tensors == 0 and "truncated or replaced while being read" in error
    now = victim.stat().st_size
    assert f"file ends at byte {now} but had {opened} bytes when opened (now {now} bytes" in error
    assert got[str(good)] == [None, 1]  # the other file's report survives


def test_raw_read_of_a_shrunk_file_raises(tmp_path: Path) -> None:
    path = tmp_path / "x.bin"
    path.write_bytes(bytes(100_000))
    raw = RawFile(str(path), ".safetensors")
    try:
        os.truncate(path, 10)
        with pytest.raises(FileProblem, match=r"had 100000 bytes when opened \(now 10 bytes"):
            raw.read(4096, 8192)
        assert bytes(raw.read(0, 10)) == bytes(10)
    finally:
        raw.close()


def test_reads_copy_and_keep_no_map_open(tmp_path: Path) -> None:
    victim, _ = _masks(tmp_path)
    with open_file(str(victim)) as loaded:
        block = loaded.tensors[0].read_rows(0, 4)
    assert block.shape == (4, 512) and not block.any()
    # No mapping of the file is left in this process (a map is what SIGBUS needs).
    maps = Path("/proc/self/maps")
    if maps.exists():
        assert str(victim) not in maps.read_text()


def test_jobs_is_bounded_by_the_cpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = []
    for i in range(3):
        p = tmp_path / f"m{i}.safetensors"
        save_file({"m": np.tril(np.ones((4, 4), bool))}, str(p))
        files.append(str(p))
    asked: list[int] = []
    real = concurrent.futures.ProcessPoolExecutor

    def recording(max_workers: int) -> object:
        asked.append(max_workers)
        return real(max_workers=max_workers)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", recording)
    monkeypatch.setattr(pipeline, "usable_cpus", lambda: 2)
    report = analyze_paths(files, jobs=1000)
    assert asked == [2] and all(f.error is None for f in report.files)
    assert usable_cpus() >= 1


def test_inspect_cli_with_jobs_2_survives_a_file_truncated_mid_read(tmp_path: Path) -> None:
    victim, good = _masks(tmp_path)
    script = _TRUNCATE_AFTER_HEADER.split("from maskcheck.analysis import")[0] + (
        "from maskcheck.cli import main\n"
        "raise SystemExit(main(['inspect', '--jobs', '2', '--format', 'json', *sys.argv[3:]]))\n")
    r = subprocess.run([sys.executable, "-c", script, str(ROOT), "2", str(victim), str(good)],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])  # not -7 (SIGBUS)
    files = {f["path"]: f for f in json.loads(r.stdout)["files"]}
    assert "truncated or replaced while being read" in files[str(victim)]["error"]
    assert files[str(good)]["error"] is None and files[str(good)]["tensors"]
