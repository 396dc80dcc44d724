"""The docs hold: the supported-op page is generated from the registry, the user pages have short
lines and links that resolve inside the repository, and the README's Python runs as written."""
import re
from pathlib import Path

import pytest

from fx2nnef.cli import build_parser
from fx2nnef.docs import supported_ops_markdown
from fx2nnef.nnef_emit import REGISTRY

ROOT = Path(__file__).resolve().parent.parent


def test_ops_page_is_current():
    page = ROOT / "docs" / "ops.md"
    assert page.read_text() == supported_ops_markdown(), "run: fx2nnef ops --write docs/ops.md"


def test_registry_has_enough_ops():
    source_ops = [k for k in REGISTRY.keys() if not k.startswith("nnef.")]
    assert len(source_ops) >= 150


# The quick start and the pages written for users: short lines, links inside the repository.
USER_PAGES = ["README.md"] + [f"docs/{name}.md" for name in
                              ("running", "capabilities", "how-it-works", "checks-and-weights", "llm")]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _blocks(text: str, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(text) if lang == language]


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", USER_PAGES)
def test_user_pages_have_short_lines_and_links_that_resolve(page):
    path = ROOT / page
    text = path.read_text()
    long = [i for i, line in enumerate(text.splitlines(), 1) if len(line) > 100]
    assert not long, f"{page}: lines over 100 characters: {long}"
    for target in LINK.findall(text):
        assert not target.startswith(("http:", "https:", "../", "/")), f"{page}: link out of the repository: {target}"
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        assert linked.is_file() and ROOT in linked.parents, f"{page}: {target} does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", linked.read_text(), re.M)
            assert anchor in {_slug(h) for h in headings}, f"{page}: no heading for #{anchor} in {file or page}"


def test_readme_is_a_quick_start():
    """Set-up, export, run and the LLM loop come before line 100; every shell command it shows exists."""
    text = (ROOT / "README.md").read_text()
    lines = text.splitlines()
    first = {needle: next(i for i, line in enumerate(lines) if needle in line)
             for needle in ("pip install .", "./dev demo", "./dev test", "fx2nnef.export(", "fx2nnef.run(",
                            "fx2nnef llm ", "TractCausalLM.load", "fx2nnef.diagnose(")}
    assert max(first.values()) < 100, first
    assert "./dev test" in (ROOT / ".ci" / "run").read_text()
    subcommands = set(build_parser()._subparsers._group_actions[0].choices)
    for block in _blocks(text, "bash"):
        for line in block.splitlines():
            if line.startswith("fx2nnef "):
                assert line.split()[1] in subcommands, line


def test_readme_python_runs(tmp_path, monkeypatch, capsys):
    """The README's Python blocks, run in order in one namespace (they build on each other)."""
    monkeypatch.chdir(tmp_path)
    namespace = {}
    blocks = _blocks((ROOT / "README.md").read_text(), "python")
    assert len(blocks) >= 4
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    printed = capsys.readouterr().out
    assert "valid for: H >= 4" in printed and "(1, 8, 23, 19)" in printed
    assert "input 'x' axis 2 has size 3 (H = 3), but the asset is valid only for H >= 4" in printed
    assert "Sequential" in printed and (tmp_path / "out" / "model.nnef.tgz").is_file()
