"""A wheel install (no `-e`, no checkout beside it) carries what a user needs: `stagelens runbook NAME` prints
the runbook from the installed `stagelens.runbooks` package, not from the repository; the wheel installs one
import root, `stagelens`."""

import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
# What the wheel is built from: the packages and what pyproject.toml names (readme).
SOURCES = ("pyproject.toml", "README.md", "agent", "probes", "engine_hooks", "runbooks")


def _run(args: list[str], cwd: pathlib.Path, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **(env or {})})
    assert proc.returncode == 0, (args, proc.stdout[-2000:], proc.stderr[-2000:])
    return proc


def test_the_installed_wheel_prints_a_runbook_from_its_own_files(tmp_path):
    # Built from a copy, so the build's scratch (build/, *.egg-info) never lands in the checkout.
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    pip = [sys.executable, "-m", "pip"]
    _run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(tmp_path / "dist"),
          str(src)], cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("stagelens-*.whl")
    site = tmp_path / "site"
    _run([*pip, "install", "--no-deps", "--no-index", "-q", "--target", str(site), str(wheel)], cwd=tmp_path)

    elsewhere = tmp_path / "elsewhere"     # outside the repository: nothing of it on the path
    elsewhere.mkdir()
    env = {"PYTHONPATH": str(site)}
    shown = _run([sys.executable, "-c", "from stagelens.cli import main; main()", "runbook", "KVCacheStageFiring"],
                 cwd=elsewhere, env=env)
    expected = (ROOT / "runbooks" / "KVCacheStageFiring.md").read_text(encoding="utf-8")
    assert shown.stdout == expected + "\n"

    where = _run([sys.executable, "-c", "import stagelens, stagelens.runbooks; "
                  "from stagelens.runbook_files import runbooks as books; print(stagelens.__file__); "
                  "print(stagelens.runbooks.__file__); print(' '.join(sorted(books())))"],
                 cwd=elsewhere, env=env)
    agent_file, runbooks_file, names = where.stdout.splitlines()
    assert pathlib.Path(agent_file).is_relative_to(site), agent_file
    assert pathlib.Path(runbooks_file).is_relative_to(site), runbooks_file
    assert names.split() == sorted(p.stem for p in (ROOT / "runbooks").glob("*.md")), "the wheel lacks runbooks"
    # one import root: nothing else lands in site-packages to collide with another distribution's names
    (top_level,) = site.glob("stagelens-*.dist-info/top_level.txt")
    assert top_level.read_text().split() == ["stagelens"]
    assert sorted(p.name for p in site.iterdir() if not p.name.endswith(".dist-info")) == ["bin", "stagelens"]
