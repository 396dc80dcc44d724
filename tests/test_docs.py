"""The supported-op page is generated from the registry and kept current."""
from pathlib import Path

from fx2nnef.docs import supported_ops_markdown
from fx2nnef.nnef_emit import REGISTRY

ROOT = Path(__file__).resolve().parent.parent


def test_ops_page_is_current():
    page = ROOT / "docs" / "ops.md"
    assert page.read_text() == supported_ops_markdown(), "run: fx2nnef ops --write docs/ops.md"


def test_registry_has_enough_ops():
    source_ops = [k for k in REGISTRY.keys() if not k.startswith("nnef.")]
    assert len(source_ops) >= 150
