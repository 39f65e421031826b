"""The web console's assets (``slurm_pool/web/static``), checked as text: they can hold no markup injection.

The CSP the service sends (no inline script or style) only holds if the page
has none; the console puts every value into the page through ``textContent``,
``setAttribute`` and ``createElement``, so ``app.js`` must never use an
HTML-parsing sink.  Each checker is tried on a bad sample first, so a checker
that finds nothing cannot pass by accident.  The browser run (Chromium, a
real service) is the integration test's; this one needs no browser.
"""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "slurm_pool" / "web" / "static"
INDEX = STATIC / "index.html"
APP_JS = STATIC / "app.js"
APP_CSS = STATIC / "app.css"

#: What the browser test and users rely on (the interfaces' DOM list): ids in index.html or created by app.js.
DOM_IDS = (
    "login-user",
    "login-password",
    "login-submit",
    "login-error",
    "whoami",
    "logout",
    "pool-total",
    "pool-states",
    "pool-chart",
    "jobs-table",
    "jobs-filter",
    "job-why",
    "job-state",
    "timeline",
    "job-cancel",
    "job-hold",
    "job-release",
    "job-requeue",
    "f-tier",
    "f-project",
    "f-gpus",
    "f-nodes",
    "f-time",
    "f-name",
    "f-script",
    "f-checkpoint",
    "f-explain",
    "explanation",
    "f-submit",
    "submit-result",
    "error",
)
NAV_ROUTES = ("#/pool", "#/jobs", "#/submit", "#/projects", "#/nodes")
#: Classes and data attributes the nodes and jobs pages are read by, as app.js writes them.
JS_MARKERS = ('"node"', '"unit"', '"data-node"', '"data-state"', '"data-job-id"', '"data-kind"', '"state"')
#: XML namespace names: identifiers that are never fetched (SVG elements are created in this one).
NAMESPACES = {"http://www.w3.org/2000/svg"}

#: JavaScript that parses markup or code from a string: none of it may appear in app.js.
JS_SINKS = (
    ("innerHTML", re.compile(r"\binnerHTML\b")),
    ("outerHTML", re.compile(r"\bouterHTML\b")),
    ("insertAdjacentHTML", re.compile(r"\binsertAdjacentHTML\b")),
    ("document.write", re.compile(r"\bdocument\s*\.\s*write(?:ln)?\b")),
    ("eval", re.compile(r"(?<![\w.])eval\s*\(")),
    ("new Function", re.compile(r"\bnew\s+Function\b")),
    ("timer with a string", re.compile(r"\bset(?:Timeout|Interval)\s*\(\s*[\"'`]")),
    ("createContextualFragment", re.compile(r"\bcreateContextualFragment\b")),
    ("DOMParser", re.compile(r"\bDOMParser\b")),
    ("srcdoc", re.compile(r"\bsrcdoc\b")),
    ("inline style attribute", re.compile(r"setAttribute\(\s*[\"'](?:style|on\w+)[\"']")),
    ("style or handler attribute in h()", re.compile(r"[{,]\s*[\"']?(?:style|on[a-z]+)[\"']?\s*:")),
    ("javascript: URL", re.compile(r"javascript:", re.IGNORECASE)),
)
URL = re.compile(r"(?:https?:)?//[A-Za-z0-9.-]+\.[A-Za-z]{2,}[^\s\"'<>)]*")


class _Page(HTMLParser):
    """What the checks need from a page: its tags, attributes and the text inside script and style."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.inline: list[str] = []
        self._open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k.lower(): v or "" for k, v in attrs}))
        self._open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if self._open and self._open[-1] == tag:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        if self._open and self._open[-1] in ("script", "style") and data.strip():
            self.inline.append(f"<{self._open[-1]}> content")


def parse(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    page.close()
    return page


def html_problems(html: str) -> list[str]:
    """Inline script or style, event handler attributes, script URLs, and scripts or styles from elsewhere."""
    page = parse(html)
    problems = list(page.inline)
    for tag, attrs in page.tags:
        for name, value in attrs.items():
            if name.startswith("on"):
                problems.append(f"<{tag} {name}=>")
            if name == "style":
                problems.append(f"<{tag} style=>")
            if name in ("href", "src", "action", "formaction") and value.strip().lower().startswith("javascript:"):
                problems.append(f"<{tag} {name}=javascript:>")
        if tag == "style":
            problems.append("<style>")
        if tag == "script" and not attrs.get("src", "").startswith("/static/"):
            problems.append("<script> not from /static/")
        icon = tag == "link" and attrs.get("rel") == "icon" and attrs.get("href") == "data:,"  # no favicon request
        if tag == "link" and not icon and not attrs.get("href", "").startswith("/static/"):
            problems.append(f"<link href={attrs.get('href')!r}>")
    return problems


def js_problems(js: str) -> list[str]:
    return [name for name, pattern in JS_SINKS if pattern.search(js)]


def foreign_urls(text: str) -> list[str]:
    """Absolute or protocol-relative URLs in an asset, but for namespace names."""
    return [u for u in URL.findall(text) if u not in NAMESPACES]


def unlabelled(html: str) -> list[str]:
    """Form fields no <label for=...> names (hidden inputs and buttons need none)."""
    page = parse(html)
    labelled = {a.get("for") for t, a in page.tags if t == "label"}
    fields = [a for t, a in page.tags if t in ("input", "select", "textarea") and a.get("type") != "hidden"]
    return [a.get("id") or "?" for a in fields if a.get("id") not in labelled and "aria-label" not in a]


@pytest.mark.parametrize(
    "html,n",
    [
        ('<script src="/static/app.js" defer></script><p id="x">hi</p>', 0),
        ("<script>alert(1)</script>", 2),
        ('<div onclick="go()">x</div>', 1),
        ('<p style="color:red">x</p>', 1),
        ("<style>p{}</style>", 2),
        ('<a href="javascript:alert(1)">x</a>', 1),
        ('<script src="https://cdn.example.org/x.js"></script>', 1),
        ('<link rel="stylesheet" href="//cdn.example.org/x.css">', 1),
        ('<link rel="icon" href="data:,">', 0),
        ('<link rel="stylesheet" href="data:,">', 1),
    ],
)
def test_html_checker(html: str, n: int) -> None:
    assert len(html_problems(html)) == n, html_problems(html)


@pytest.mark.parametrize(
    "js,found",
    [
        ("node.textContent = name;", []),
        ("node.innerHTML = name;", ["innerHTML"]),
        ("x.outerHTML", ["outerHTML"]),
        ("el.insertAdjacentHTML('beforeend', s)", ["insertAdjacentHTML"]),
        ("document.write(s)", ["document.write"]),
        ("eval(s)", ["eval"]),
        ("const f = new Function('a', s)", ["new Function"]),
        ('setTimeout("go()", 10)', ["timer with a string"]),
        ("setTimeout(go, 10)", []),
        ('el.setAttribute("onclick", s)', ["inline style attribute"]),
        ('h("p", { style: "color: red" })', ["style or handler attribute in h()"]),
        ('h("a", { href: "javascript:void 0" })', ["javascript: URL"]),
    ],
)
def test_js_checker(js: str, found: list[str]) -> None:
    assert js_problems(js) == found


@pytest.mark.parametrize(
    "text,found",
    [
        ('const NS = "http://www.w3.org/2000/svg";', []),
        ('fetch("/api/v1/pool")', []),
        ('fetch("https://evil.example.com/x")', ["https://evil.example.com/x"]),
        ('<script src="//cdn.example.org/x.js">', ["//cdn.example.org/x.js"]),
        ("@import url(http://fonts.example.net/a.css);", ["http://fonts.example.net/a.css"]),
    ],
)
def test_url_checker(text: str, found: list[str]) -> None:
    assert foreign_urls(text) == found


def test_index_has_no_inline_script_style_or_handlers() -> None:
    assert html_problems(INDEX.read_text(encoding="utf-8")) == []


def test_index_loads_the_packaged_assets() -> None:
    page = parse(INDEX.read_text(encoding="utf-8"))
    scripts = [a for t, a in page.tags if t == "script"]
    assert scripts == [{"src": "/static/app.js", "defer": ""}]
    sheets = [a.get("href") for t, a in page.tags if t == "link" and a.get("rel") == "stylesheet"]
    assert sheets == ["/static/app.css"]


def test_index_is_usable_by_keyboard_and_screen_reader() -> None:
    html = INDEX.read_text(encoding="utf-8")
    page = parse(html)
    first_link = next(a for t, a in page.tags if t == "a")
    assert first_link.get("href") == "#main" and first_link.get("class") == "skip-link"
    assert ("main", {"id": "main", "tabindex": "-1"}) in page.tags
    assert any(t == "nav" for t, _ in page.tags)
    assert unlabelled(html) == []
    assert {a.get("role") for t, a in page.tags if a.get("id") in ("error", "login-error")} == {"alert"}
    assert page.tags[0] == ("html", {"lang": "en"})


def test_unlabelled_checker() -> None:
    assert unlabelled('<label for="a">A</label><input id="a"><input id="b"><select aria-label="c"></select>') == ["b"]


def test_app_js_uses_no_markup_sink() -> None:
    assert js_problems(APP_JS.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("asset", [INDEX, APP_JS, APP_CSS], ids=lambda p: p.name)
def test_no_url_to_another_host(asset: Path) -> None:
    text = asset.read_text(encoding="utf-8")
    assert foreign_urls(text) == []
    if asset.suffix == ".css":
        assert "@import" not in text and "url(" not in text


@pytest.mark.parametrize("dom_id", DOM_IDS)
def test_dom_id_the_browser_test_uses_exists(dom_id: str) -> None:
    page = parse(INDEX.read_text(encoding="utf-8"))
    in_html = any(a.get("id") == dom_id for _, a in page.tags)
    assert in_html or f'id: "{dom_id}"' in APP_JS.read_text(encoding="utf-8")


def test_nav_links_and_markers() -> None:
    page = parse(INDEX.read_text(encoding="utf-8"))
    nav_links = {a.get("href") for t, a in page.tags if t == "a"}
    assert set(NAV_ROUTES) <= nav_links
    js = APP_JS.read_text(encoding="utf-8")
    assert [m for m in JS_MARKERS if m not in js] == []
    for route in NAV_ROUTES:
        assert f'"{route}"' in js, f"app.js has no route {route}"


def test_every_id_app_js_looks_up_exists() -> None:
    js = APP_JS.read_text(encoding="utf-8")
    page = parse(INDEX.read_text(encoding="utf-8"))
    known = {a["id"] for _, a in page.tags if "id" in a} | set(re.findall(r'\bid: "([\w-]+)"', js))
    wanted = set(re.findall(r'\bbyId\("([\w-]+)"\)', js)) | set(re.findall(r'"(f-[\w-]+)"', js))
    assert wanted and sorted(wanted - known) == []


def test_ids_are_unique() -> None:
    page = parse(INDEX.read_text(encoding="utf-8"))
    ids = [a["id"] for _, a in page.tags if "id" in a]
    assert sorted({i for i in ids if ids.count(i) > 1}) == []


def test_the_package_ships_the_assets() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    data = [p.strip() for p in cfg["options.package_data"]["slurm_pool"].split(",")]
    assert "web/static/*" in data


@pytest.mark.skipif(shutil.which("node") is None, reason="no node to parse app.js")
def test_app_js_parses() -> None:
    done = subprocess.run(["node", "--check", str(APP_JS)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
