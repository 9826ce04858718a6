"""vLLM's vocabulary is written once (engine_hooks/records/vllm_names.py): no other module of the agent or the
engine spells a vLLM metric family, a `gen_ai.*` attribute or the `llm_request` span name as a string of its own."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / "engine_hooks" / "records" / "vllm_names.py"
A_NAME = re.compile(r"^(vllm:[a-z0-9_]+|gen_ai\.[a-z_.]+|llm_request)$")


def spelled(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    return [f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and A_NAME.match(node.value)]


def test_the_home_module_holds_the_names():
    assert len(spelled(HOME)) > 40


def test_no_other_module_spells_a_vllm_name():
    modules = [p for folder in ("agent", "engine_hooks", "probes") for p in sorted((ROOT / folder).rglob("*.py"))]
    assert [line for p in modules if p != HOME for line in spelled(p)] == []
