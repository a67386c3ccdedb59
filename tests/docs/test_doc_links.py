"""The project's pages link to files that exist, and the README is a front door (issue 34): its
measured figures live in docs/results.md, which it links."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("README.md", "deploy/README.md", "THREAT_MODEL.md", "docs/README.md", "docs/SPEC.md",
         "docs/results.md")
#: A Markdown link's target: (`text`)(target), the target up to a space, ')' or '#'.
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", PAGES)
def test_every_relative_link_of_a_page_names_a_file_that_exists(page):
    text = (ROOT / page).read_text()
    targets = [t for t in LINK.findall(text) if "://" not in t and not t.startswith("mailto:")]
    missing = [t for t in targets if not (ROOT / page).parent.joinpath(t).exists()]
    assert not missing, f"{page} links to missing files: {missing}"


def test_the_readme_links_the_results_page_and_holds_no_measured_section():
    readme = (ROOT / "README.md").read_text()
    assert "(docs/results.md)" in readme
    results = (ROOT / "docs" / "results.md").read_text()
    # Headings of measured sections: each lives on the results page, not in the README.
    for section in ("**Demo** (`noisyanchor demo --seed 1`)", "**GOPP solver**",
                    "**Hostile clients**", "**Upload against a durable baseline",
                    "**ScoreShield**"):
        assert section in results and section not in readme, section
