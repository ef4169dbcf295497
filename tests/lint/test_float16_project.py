"""MC501's project gate: a -1e9 fill is reported only where the file's project may run
float16. Real files in real folders, `maskcheck check` as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from maskcheck.lint import project
from maskcheck.lint.runner import lint_file

ROOT = Path(__file__).resolve().parents[2]

# The annotated transformer's attention (graykode/nlp-tutorial, tunz/transformer-pytorch): in
# float32, -1e9 is finite and the fill is right; on float16 scores it raises.
ATTENTION = """\
import torch


def attention(q, k, v, mask):
    scores = torch.matmul(q, k.transpose(-2, -1)) / q.size(-1) ** 0.5
    scores = scores.masked_fill(mask == 0, -1e9)
    return torch.softmax(scores, dim=-1) @ v
"""
FILL_LINE = 6


def check(*paths: Path, cwd: Path) -> list[tuple[str, int, str]]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    r = subprocess.run([sys.executable, "-m", "maskcheck", "check", "--format", "json",
                        "--exit-zero", *map(str, paths)], capture_output=True, text=True,
                       env=env, cwd=cwd, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    return [(Path(f["path"]).name, g["line"], g["code"]) for f in json.loads(r.stdout)["files"]
            for g in f["findings"]]


def make_project(base: Path, marker: str = "pyproject.toml") -> Path:
    proj = base / "proj"
    (proj / "model").mkdir(parents=True)
    if marker == ".git":
        (proj / ".git").mkdir()
    else:
        (proj / marker).write_text("")
    (proj / "model" / "attention.py").write_text(ATTENTION)
    (proj / "train.py").write_text("import torch\n\nmodel = torch.nn.Linear(2, 2)\n")
    return proj


@pytest.mark.parametrize("marker", ["pyproject.toml", "setup.py", "setup.cfg", ".git"])
def test_silent_in_a_project_that_never_runs_float16(tmp_path: Path, marker: str) -> None:
    proj = make_project(tmp_path, marker)
    assert check(proj, cwd=proj) == []
    # The same from the pre-commit hook's point of view: one staged file, relative path.
    assert check(Path("model/attention.py"), cwd=proj) == []


@pytest.mark.parametrize("evidence", [
    ("train.py", "model = model.half()\n"),
    ("train.py", "with torch.autocast('cuda'):\n    pass\n"),
    ("train.py", "from torch.cuda.amp import autocast\n\nwith autocast():\n    pass\n"),
    ("train.py", "p.add_argument('--amp', help='automatic mixed precision')\n"),
    ("train.py", "parser.add_argument('--fp16', action='store_true')\n"),
    ("train.py", "model.to(dtype=torch.float16)\n"),
    # a dtype alone on its line, as one chosen in a multi-line call, is still a choice
    ("train.py", "model = build(\n    dtype=torch.half,\n)\n"),
    ("train.py", "DTYPES = [\n    torch.half,\n]\nmodel.to(DTYPES[0])\n"),
    ("train.py", "from apex import amp\nmodel, opt = amp.initialize(model, opt)\n"),
    ("train.py", "trainer = pl.Trainer(precision=16)\n"),
    ("configs/base.yaml", "training:\n  fp16: true\n"),
    ("configs/run.yaml", 'model:\n  dtype: "torch.float16"\n'),  # a config's dtype, quoted
    ("scripts/run.sh", "python train.py --fp16\n"),
    ("README.md", "Mixed precision training is supported.\n"),
])
def test_reported_once_the_project_mentions_float16(tmp_path: Path,
                                                     evidence: tuple[str, str]) -> None:
    proj = make_project(tmp_path)
    name, text = evidence
    if name.endswith(".py"):
        # Python's float16 switch runs the models it imports (see the tests below)
        text = "from model.attention import attention\n" + text
    (proj / name).parent.mkdir(parents=True, exist_ok=True)
    (proj / name).write_text(text)
    assert check(proj, cwd=proj) == [("attention.py", FILL_LINE, "MC501")]
    assert check(Path("model/attention.py"), cwd=proj) == [("attention.py", FILL_LINE, "MC501")]


# convlab: the float16 switches are Python code (a BERT runner's `--fp16`, a trainer's
# autocast) that imports other models; the float32-only DAMD beside them is never run in float16.
@pytest.mark.parametrize("imports", [
    "",
    "import torch\n",
    "from other.attention import attention\n",  # another package's module of the same name
    "# from model.attention import attention\n",
])
def test_a_python_switch_that_reaches_no_import_of_the_file(tmp_path: Path,
                                                            imports: str) -> None:
    proj = make_project(tmp_path)
    (proj / "other").mkdir()
    (proj / "other" / "attention.py").write_text("x = 1\n")
    (proj / "runner.py").write_text(imports + "model = model.half()\n")
    assert check(proj, cwd=proj) == []
    assert check(Path("model/attention.py"), cwd=proj) == []


@pytest.mark.parametrize("files", [
    # directly, by its dotted name or a name under its package
    {"train.py": "import model.attention\nmodel = model.half()\n"},
    {"train.py": "from model import attention\nmodel = model.half()\n"},
    {"train.py": "import model.attention as att, os\nmodel = model.half()\n"},
    {"train.py": "from model.attention import (\n    attention,\n)\nmodel = model.half()\n"},
    {"train.py": "mod = importlib.import_module('model.attention')\nmodel = model.half()\n"},
    # through another module, a relative import, or the package's __init__ the import runs
    {"train.py": "from net import build\nmodel = build().half()\n",
     "net.py": "from model.attention import attention\n"},
    {"model/net.py": "from .attention import attention\n",
     "train.py": "from model.net import build\nmodel = build().half()\n"},
    {"model/__init__.py": "from .attention import attention\n",
     "model/net.py": "x = 1\n",
     "train.py": "from model.net import build\nmodel = build().half()\n"},
    # under src/, imported by the package's name (its import root is not the project's)
    {"src/model/attention.py": ATTENTION,
     "train.py": "from model.attention import attention\nmodel = model.half()\n"},
])
def test_a_python_switch_that_imports_the_file(tmp_path: Path, files: dict[str, str]) -> None:
    proj = make_project(tmp_path)
    for name, text in files.items():
        (proj / name).parent.mkdir(parents=True, exist_ok=True)
        (proj / name).write_text(text)
    expected = [("attention.py", FILL_LINE, "MC501")]
    if "src/model/attention.py" in files:
        expected *= 2  # model/attention.py is reached too: same name, both kept
    assert check(proj, cwd=proj) == expected


def test_a_python_switch_is_followed_through_two_imports_not_three(tmp_path: Path) -> None:
    # a trainer runs the model it imports and that model's layers (train -> net -> attention);
    # a third import is a big project's plumbing (modelscope's trainer reaching an
    # inference-only LoFTR through its dataset helpers, five imports away): not followed
    proj = make_project(tmp_path)
    (proj / "net.py").write_text("from model.attention import attention\n")
    (proj / "train.py").write_text("import net\nmodel = net.build().half()\n")
    assert check(proj, cwd=proj) == [("attention.py", FILL_LINE, "MC501")]
    (proj / "train.py").write_text("import registry\nmodel = registry.build().half()\n")
    (proj / "registry.py").write_text("import net\n")
    assert check(proj, cwd=proj) == []
    # the package __init__ an import runs is reached with the import, not one further
    (proj / "train.py").write_text("from model.net import build\nmodel = build().half()\n")
    (proj / "model" / "__init__.py").write_text("from .attention import attention\n")
    (proj / "model" / "net.py").write_text("x = 1\n")
    assert check(proj, cwd=proj) == [("attention.py", FILL_LINE, "MC501")]


@pytest.mark.parametrize("evidence", [
    # torch-molecule's MolGPT: a GradScaler without autocast scales a float32 loss.
    ("train.py", "from torch.cuda.amp import GradScaler\n\nscaler = GradScaler()\n"),
    # ESMFold2: every autocast names bfloat16 (over several lines), or float32, or is off.
    ("train.py", "with torch.autocast(\n    device_type='cuda',\n    dtype=torch.bfloat16,\n):\n"
                 "    pass\n"),
    ("train.py", "@torch.amp.autocast('cuda', enabled=False)\ndef f():\n    pass\n"),
    ("train.py", "ctx = torch.amp.autocast('cuda', dtype=torch.float32)\n"),
    ("train.py", "from torch.amp import autocast\n"),
    ("train.py", "ok = torch.is_autocast_enabled()\n"),
    ("train.py", "trainer = pl.Trainer(precision='bf16-mixed')\n"),
    # DI-engine, deepchem: a dtype among others is checked, not chosen.
    ("utils.py", "FLOATS = [torch.float32, torch.float64, torch.float16]\n"),
    ("utils.py", "if x.dtype in (torch.float16, torch.bfloat16):\n    pass\n"),
    ("utils.py", "ok = x.dtype in (torch.half, torch.float32)\n"),
    # torchao: the same list written a dtype per line.
    ("quant.py", "if precision not in [\n    torch.float32,\n    torch.float16,\n"
                 "    torch.bfloat16,\n]:\n    raise ValueError(precision)\n"),
    # torch-ecg: a dtype-size table keyed by the dtypes' names, over several lines.
    ("utils.py", 'SIZES = {\n    "torch.float16": 2,\n    "torch.float32": 4,\n}\n'),
    ("utils.py", "half = str(t.dtype) == 'torch.float16'\n"),
    # A .py file's comments and docstrings talk about other code; tests cast to test.
    ("rotary.py", "# einsum converts fp32 to fp16 under AMP\nx = 1\n"),
    ("store.py", 'def save(x):\n    """Stored as fp16 to save space."""\n    return x\n'),
    ("tests/test_dtypes.py", "x = torch.zeros(2, dtype=torch.float16)\n"),
    ("test_half.py", "model = model.half()\n"),
])
def test_mentions_that_do_not_run_float16(tmp_path: Path, evidence: tuple[str, str]) -> None:
    proj = make_project(tmp_path)
    name, text = evidence
    (proj / name).parent.mkdir(parents=True, exist_ok=True)
    (proj / name).write_text(text)
    assert check(proj, cwd=proj) == []
    # The same words in the file itself: its own mention is not read as a run either, except
    # its own prose (about its own code) and what only a test file's place excused.
    (proj / "model" / "attention.py").write_text(ATTENTION + "\n" + text)
    own = "#" in text or '"""' in text or "test" in name
    assert check(Path("model/attention.py"), cwd=proj) == (
        [("attention.py", FILL_LINE, "MC501")] if own else [])


def test_numpy_float16_is_not_a_models_dtype(tmp_path: Path) -> None:
    """tsai downcasts a pandas frame to np.float16; pytorch-forecasting reads np.finfo of it."""
    proj = make_project(tmp_path)
    (proj / "utils.py").write_text("import numpy as np\n\ndf = df.astype(np.float16)\n"
                                   "eps = np.finfo(np.float16).eps\n")
    assert check(proj, cwd=proj) == []


def test_naming_apex_is_not_running_its_amp(tmp_path: Path) -> None:
    """allennlp 0.9.0 names apex only in a warning (its fused LayerNorm is float32 work)."""
    proj = make_project(tmp_path)
    (proj / "warn.py").write_text('WARNING = "Better speed can be achieved with apex installed '
                                  'from https://www.github.com/nvidia/apex."\n'
                                  "from apex.normalization import FusedLayerNorm\n")
    assert check(proj, cwd=proj) == []


def test_the_files_own_half_path_is_enough(tmp_path: Path) -> None:
    proj = make_project(tmp_path)
    (proj / "model" / "attention.py").write_text(ATTENTION + "\nq = torch.zeros(1).half()\n")
    assert check(proj, cwd=proj) == [("attention.py", FILL_LINE, "MC501")]


def test_a_file_outside_any_project_is_reported(tmp_path: Path) -> None:
    """Nothing says how a lone file runs: the fill is reported, as it always was."""
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "attention.py").write_text(ATTENTION)
    assert project.project_root(str(loose / "attention.py")) is None
    assert check(loose / "attention.py", cwd=tmp_path) == [("attention.py", FILL_LINE, "MC501")]


def test_the_nearest_project_is_the_one_searched(tmp_path: Path) -> None:
    """A sub-package with its own pyproject.toml is its own project: the outer repository's
    `--fp16` is another program's."""
    outer = tmp_path / "repo"
    (outer / ".git").mkdir(parents=True)
    (outer / "train_fp16.sh").write_text("python train.py --fp16\n")
    inner = make_project(outer)
    assert project.project_root(str(inner / "model" / "attention.py")) == inner.resolve()
    assert check(inner, cwd=inner) == []
    (inner / "pyproject.toml").unlink()
    assert check(inner, cwd=inner) == [("attention.py", FILL_LINE, "MC501")]


def test_notebooks_follow_the_same_gate(tmp_path: Path) -> None:
    proj = make_project(tmp_path)
    (proj / "model" / "attention.py").unlink()
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
              "source": ATTENTION.splitlines(keepends=True)}]
    nb = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (proj / "Transformer.ipynb").write_text(json.dumps(nb))
    assert check(proj, cwd=proj) == []
    cells.append({"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                  "source": ["model = model.half()\n"]})
    (proj / "Transformer.ipynb").write_text(json.dumps(nb))
    assert check(proj, cwd=proj) == [("Transformer.ipynb", FILL_LINE, "MC501")]


def test_excluded_folders_symlinks_and_fifos_are_not_read(tmp_path: Path) -> None:
    proj = make_project(tmp_path)
    outside = tmp_path / "elsewhere.py"
    outside.write_text("model.half()\n")
    (proj / "linked.py").symlink_to(outside)  # may leave the project: not followed
    (proj / ".venv" / "lib").mkdir(parents=True)
    (proj / ".venv" / "lib" / "amp.py").write_text("torch.cuda.amp.autocast()\n")
    (proj / "build").mkdir()
    (proj / "build" / "x.py").write_text("x.half()\n")
    os.mkfifo(proj / "pipe.yaml")  # opening it would block
    assert check(proj / "model", cwd=proj) == []


def test_a_project_too_big_to_read_counts_as_one_that_may_run_float16(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proj = make_project(tmp_path)
    for i in range(3):
        (proj / f"m{i}.py").write_text("x = 1\n")
    path = str(proj / "model" / "attention.py")
    project._project_evidence.cache_clear()
    assert lint_file(path, frozenset({"MC501"})).findings == []
    monkeypatch.setattr(project, "MAX_FILES", 2)
    project._project_evidence.cache_clear()
    assert [f.code for f in lint_file(path, frozenset({"MC501"})).findings] == ["MC501"]
    monkeypatch.setattr(project, "MAX_FILES", 50_000)
    monkeypatch.setattr(project, "MAX_BYTES", 10)  # the bytes read count too
    project._project_evidence.cache_clear()
    assert [f.code for f in lint_file(path, frozenset({"MC501"})).findings] == ["MC501"]
    project._project_evidence.cache_clear()


# bert4torch's GatedAttention: an arithmetic bias, which float16 turns into -inf without raising.
BIAS = """\
import torch


def attention(scores, attention_mask):
    attention_mask = (1.0 - attention_mask) * -1e12
    return torch.softmax(scores + attention_mask, dim=-1)
"""


def test_a_non_raising_bias_needs_float16_in_the_file_itself(tmp_path: Path) -> None:
    """The project's fp16 switch makes a raising fill crash; a -inf bias hurts only a row that
    loses every key, so it is reported where the file itself handles float16."""
    proj = make_project(tmp_path)
    (proj / "train.sh").write_text("python train.py --fp16\n")
    (proj / "model" / "bias.py").write_text(BIAS)
    assert check(proj, cwd=proj) == [("attention.py", FILL_LINE, "MC501")]
    # wenet's and chatterbox's mask_to_bias check the dtype among others: no float16 run.
    (proj / "model" / "bias.py").write_text(BIAS.replace(
        "    attention_mask = (1.0", "    assert attention_mask.dtype in [torch.float32, "
        "torch.bfloat16, torch.float16]\n    attention_mask = (1.0"))
    assert check(proj, cwd=proj) == [("attention.py", FILL_LINE, "MC501")]
    (proj / "model" / "bias.py").write_text(BIAS + "# scores are half precision at inference\n")
    assert sorted(check(proj, cwd=proj)) == [("attention.py", FILL_LINE, "MC501"),
                                              ("bias.py", 5, "MC501")]


def test_the_bias_gives_minus_inf_without_raising_in_float16() -> None:
    import torch

    keep = torch.tensor([1.0, 0.0], dtype=torch.float16)
    bias = (1.0 - keep) * -1e12
    assert bias.tolist() == [0.0, float("-inf")]
    assert torch.softmax(torch.zeros(2, dtype=torch.float16) + bias, dim=-1).tolist() == [1.0, 0.0]


def test_a_notebooks_outputs_are_not_read(tmp_path: Path) -> None:
    """sbi's diagnostics tutorial: a base64 PNG in a cell's output holds "fp16" by chance."""
    proj = make_project(tmp_path)
    png = "iVBORw0KGgozatkfP8Xn9fp163yVhqBSTom"
    assert "fp16" in png
    cell = {"cell_type": "code", "metadata": {}, "execution_count": 1, "source": ["x = 1\n"],
            "outputs": [{"output_type": "display_data", "metadata": {},
                         "data": {"image/png": png}}]}
    nb = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (proj / "tutorial.ipynb").write_text(json.dumps(nb))
    assert check(proj, cwd=proj) == []
    cell["source"] = ["model = model.half()\n"]  # a cell's own source still counts
    (proj / "tutorial.ipynb").write_text(json.dumps(nb))
    assert check(proj, cwd=proj) == [("attention.py", FILL_LINE, "MC501")]
    (proj / "tutorial.ipynb").write_text("not json, fp16\n")  # read whole when not a notebook
    assert check(Path("model/attention.py"), cwd=proj) == [("attention.py", FILL_LINE, "MC501")]


def test_a_big_notebooks_outputs_are_not_read_either(tmp_path: Path) -> None:
    """recohut's plotting notebook: 1.1 MB of outputs, one base64 PNG holding "fp16". Cut at
    the per-file cap, its JSON would not parse and the outputs would be read as text."""
    proj = make_project(tmp_path)
    png = "iVBORw0KGgozatkfP8Xn9fp163yVhqBSTom" + "A" * (project.MAX_BYTES_PER_FILE + 4096)
    cell = {"cell_type": "code", "metadata": {}, "execution_count": 1, "source": ["x = 1\n"],
            "outputs": [{"output_type": "display_data", "metadata": {},
                         "data": {"image/png": png}}]}
    nb = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (proj / "plots.ipynb").write_text(json.dumps(nb))
    assert (proj / "plots.ipynb").stat().st_size > project.MAX_BYTES_PER_FILE
    assert check(proj, cwd=proj) == []


def test_a_notebooks_code_comments_are_its_own_prose(tmp_path: Path) -> None:
    """recohut's metrics notebook, copied from a metrics library: `# ... it can be float if
    --fp16` in a code cell says nothing about this project's runs, as a .py comment does not;
    its markdown is read as a README is, and its code as a .py file's."""
    proj = make_project(tmp_path)

    def notebook(kind: str, source: str) -> None:
        cell: dict[str, object] = {"cell_type": kind, "metadata": {}, "source": [source]}
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        nb = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
        (proj / "metrics.ipynb").write_text(json.dumps(nb))

    notebook("code", "# the sum is double, because it can be float if --fp16\nx = 1\n")
    assert check(proj, cwd=proj) == []
    notebook("markdown", "Train with `--fp16` for mixed precision.\n")
    assert check(proj, cwd=proj) == [("attention.py", FILL_LINE, "MC501")]
    notebook("code", "model = model.half()\n")
    assert check(proj, cwd=proj) == [("attention.py", FILL_LINE, "MC501")]
