"""Open every page of the built book in headless Chromium (Debian's ``chromium``, driven by
Playwright) at 1400 px and fail on a script error, a local file that does not load, a broken image,
an empty table or a table wider than the text column; and where a page does not read as a book
(``assert_reads_as_a_book``): words of how it was made, a fifth verdict symbol, commit hashes in sight,
a page too long, a figure without its caption. Run after the build (``make test`` does):
``pytest tests/browser``. A screenshot of the landing page is kept in ``_build/screenshots/`` (a build
artefact, not committed).

Requests to other hosts (MathJax's CDN, say) are not checked: CI may have no internet.
"""
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from recdrop.experiments import EXPERIMENTS
from recdrop.summary import landing_claims, landing_stamps
from recdrop.verdicts import Verdict

ROOT = Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"


def chromium() -> str:
    path = os.environ.get("RECDROP_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail("no Chromium found: install Debian's `chromium` (apt-get install chromium; .ci/run does) "
                    "or set RECDROP_CHROMIUM to a Chromium binary")
    return path


def pages():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]] + [c["file"] for c in toc.get("chapters", [])]
    return [HTML / f"{f}.html" for f in files]


@pytest.fixture(scope="module")
def browser():
    if not (HTML / "index.html").exists():
        pytest.fail(f"no built book at {HTML}: run `make book` (python -m recdrop.book) first")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        yield b
        b.close()


CHECK_PAGE = r"""() => {
  const images = [...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src);
  const tables = [...document.querySelectorAll('article table, main table')];
  const empty = tables.filter(t => ![...t.querySelectorAll('td')].some(td => td.textContent.trim() !== ''))
                      .map(t => t.outerHTML.slice(0, 120));
  // a table wider than the text column needs a horizontal scroll (issue 48): none may, at 1400 px
  const column = document.querySelector('article.bd-article') || document.querySelector('main');
  const wide = tables.filter(t => t.getBoundingClientRect().width > column.clientWidth + 1)
                     .map(t => `${Math.round(t.getBoundingClientRect().width)} px > ${column.clientWidth} px: ` +
                               t.innerText.slice(0, 80));
  const h1 = document.querySelector('h1');
  const reprs = document.body.innerText
    .match(/<IPython\.core\.display\.\w+ object>|<[\w.]+ object at 0x[0-9a-f]+>/g) || [];
  const text = (document.querySelector('main') || document.body).innerText;  // what a reader sees (folds closed)
  const uncaptioned = [...document.querySelectorAll('main img')]
    .filter(i => !(i.closest('figure') && i.closest('figure').querySelector('figcaption')))
    .map(i => (i.alt || i.src).slice(0, 80));
  const symbols = [...new Set([...document.querySelectorAll('main span.verdict')]
    .map(s => s.textContent.trim().replace(/^\d+\s*/, '')[0]))];
  return {images, empty, reprs, wide, tables: tables.length, title: h1 ? h1.textContent.trim() : '', text,
          uncaptioned, symbols, height: document.documentElement.scrollHeight};
}"""


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.stem)
def test_page_opens_with_its_tables_and_figures(browser, page):
    assert page.exists(), f"{page} was not built: is it in _toc.yml and did the build finish?"
    tab = browser.new_page(viewport={"width": 1400, "height": 900})  # a reader's laptop
    errors, failed = [], []
    tab.on("pageerror", lambda e: errors.append(str(e)))
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" and "file://" in m.text else None)
    tab.on("requestfailed", lambda r: failed.append(r.url) if r.url.startswith("file://") else None)
    tab.goto(page.as_uri(), wait_until="load")
    found = tab.evaluate(CHECK_PAGE)
    if page.stem == "summary":
        shots = ROOT / "_build" / "screenshots"
        shots.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(shots / "landing.png"), full_page=True)
    tab.close()
    assert not errors, f"{page.name}: script errors: {errors}"
    assert not failed, f"{page.name}: local files that did not load: {failed}"
    assert not found["images"], f"{page.name}: images that did not load: {found['images']}"
    assert not found["empty"], f"{page.name}: empty tables: {found['empty']}"
    assert not found["wide"], f"{page.name}: tables wider than the text column at 1400 px: {found['wide']}"
    assert found["title"], f"{page.name}: no title (h1)"
    assert not found["reprs"], f"{page.name}: Python objects shown as text (an empty display?): {found['reprs']}"
    assert_reads_as_a_book(page.name, found)


# Words of how the book was made, not of what it found: none may reach a page.
HOW_IT_WAS_MADE = re.compile(r"\b(leases?|leased|lent|sessions?|campaigns?|issue \d+|probes/)", re.IGNORECASE)
COMMIT = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
MAX_COMMITS, MAX_HEIGHT = 3, 15_000  # a page's visible commit hashes; its length at 1400 px


def assert_reads_as_a_book(name: str, found: dict) -> None:
    """A page speaks to its reader: no words of how it was made, the four verdicts only (each with its
    own symbol), at most a few commit hashes in sight (the rest folded), a length one reads, and every
    figure with its caption."""
    words = sorted({m.group(0).lower() for m in HOW_IT_WAS_MADE.finditer(found["text"])})
    assert not words, f"{name}: words of how the book was made: {words}"
    assert set(found["symbols"]) <= {v.symbol for v in Verdict}, f"{name}: verdict symbols {found['symbols']}"
    assert not {"✓", "✗"} & set(found["text"]), f"{name}: a verdict symbol that is not one of the four"
    commits = sorted(set(COMMIT.findall(found["text"])))
    assert len(commits) <= MAX_COMMITS, f"{name}: {len(commits)} commit hashes in sight: {commits[:10]}"
    assert found["height"] <= MAX_HEIGHT, f"{name}: {found['height']} px long at 1400 px (at most {MAX_HEIGHT})"
    assert not found["uncaptioned"], f"{name}: figures without a caption: {found['uncaptioned']}"


def test_the_landing_page_links_every_table_to_its_chapter(browser):
    tab = browser.new_page()
    tab.goto((HTML / "book" / "executed" / "summary.html").as_uri())
    links = tab.evaluate("() => [...document.querySelectorAll('table.landing:not(.claims):not(.stamps) a')]"
                         ".map(a => a.href)")
    claims = tab.evaluate("() => [...document.querySelectorAll('table.claims a')].map(a => a.href)")
    stamps = tab.evaluate("() => [...document.querySelectorAll('table.stamps a')].map(a => a.href)")
    tab.close()
    ablations = sum(len(e.ablations) for e in EXPERIMENTS.values())  # a row each beside its table (issue 34)
    assert len(links) == 7 + ablations, links  # Figure 1, Tables 1-5, Figure 2, and the ablations
    assert len(claims) == len(landing_claims())  # each claim links to its table's chapter
    assert {Path(h).stem for h in claims} == {"temporal_order", "word_lm", "char_lm", "ner", "sentiment",
                                              "memory_loss", "conjecture", "seeds"}  # and the studies beyond the paper
    assert len(stamps) == len(landing_stamps())  # each stamp links to the chapter its runs are shown in
    for href in links + claims + stamps:
        assert Path(href.removeprefix("file://")).exists(), href


def test_the_landing_page_opens_with_a_sentence_per_table_and_figure(browser):
    """A reader learns in the first screen whether each table and figure of the paper reproduced."""
    tab = browser.new_page(viewport={"width": 1400, "height": 900})
    tab.goto((HTML / "book" / "executed" / "summary.html").as_uri())
    first = tab.evaluate("""() => { const ul = document.querySelector('article.bd-article ul');
        return {top: ul.getBoundingClientRect().top,
                items: [...ul.querySelectorAll('li')].map(li => li.innerText)}; }""")
    tab.close()
    assert first["top"] < 900, f"the sentences start {first['top']} px down, below the first screen"
    heads = [item.split(" (")[0] for item in first["items"]]
    tables = [e.title.split(":")[0] for e in EXPERIMENTS.values() if e.comparison is not None]
    assert heads == ["Figure 1", *[h for t in tables for h in (t, *(["Figure 2"] if t == "Table 2" else []))]], heads
