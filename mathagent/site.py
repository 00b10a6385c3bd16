"""The executed tutorial as a static site: one HTML page per notebook and per markdown page.

``python -m mathagent site`` takes the executed notebooks of a tutorial run (the copies
``python -m mathagent tutorial`` writes to ``runs/tutorial/<timestamp>/``; ``--run`` makes a
fresh run first), converts each with nbconvert's ``lab`` template, adds the project README,
the ``docs/`` pages, the results READMEs and any other markdown file of the repository these
link to, and writes ``index.html`` beside them. Links between pages (a README's link to a
doc, a notebook or a results folder) point at the pages; images a page shows are copied into
``figures/``, other files of the repository a page links to into ``files/`` at their path in
the repository (committed files only: one git ignores or over :data:`MAX_FILE_BYTES` fails the
build); a notebook's figures stay inside its page. A link to a tutorial notebook the run has
no executed copy of (a run of some notebooks) becomes its text, "(not in this run)".

The build refuses to leave a page a reader would trip over, with one line naming it: a
notebook with an error output, an image that does not load (a missing file, an empty or
undecodable embedded image, one fetched from the network), an empty page, a relative link
that leads to no page or file of the site, two files that would be one page. The folder is
written beside its target and swapped in (:mod:`mathagent.outputs`), so a failed build
leaves the previous site as it was. ``--browser-check`` then opens every page in headless
Chromium and runs the same checks on the page as a reader's browser shows it, saving a
screenshot of each (:mod:`mathagent.browser`).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import html
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote, unquote

from mathagent import paths

#: Pages shorter than this many visible characters count as empty.
MIN_TEXT_CHARS = 80
#: A linked file larger than this is not copied into a site (the build fails, naming it).
MAX_FILE_BYTES = 5_000_000


class SiteError(ValueError):
    """A page that cannot be built or checked; the message is one line naming it."""


@dataclass
class Page:
    """One page of the site: its file name, title, source and what it holds."""

    name: str
    title: str
    source: Path
    kind: str  # notebook | readme | doc (a markdown page not named README.md)
    figures: int = 0
    chars: int = 0


@dataclass
class SiteReport:
    """What a build wrote: the pages (index first), figure count, seconds, the folder."""

    out: Path
    pages: list[Page] = field(default_factory=list)
    seconds: float = 0.0
    missing: list[str] = field(default_factory=list)
    links: int = 0

    @property
    def figures(self) -> int:
        return sum(p.figures for p in self.pages)

    def summary(self) -> str:
        lines = [f"{len(self.pages)} pages, {self.figures} figures, {self.links} links "
                 f"checked, built in {self.seconds:.1f} s: {self.out / 'index.html'}"]
        width = max((len(p.name) for p in self.pages), default=0)
        lines += [f"  {p.name:<{width}}  {p.figures:3d} figures  {p.chars:7d} characters"
                  for p in self.pages]
        if self.missing:
            lines.append(f"  not in this run (no executed copy): {', '.join(self.missing)}")
        return "\n".join(lines)


# -- sources ---------------------------------------------------------------------------------
def markdown_sources(root: Path = paths.REPO_ROOT) -> list[Path]:
    """The project README, the ``docs/`` pages and every results folder's README, in that
    order (the build adds any other markdown file of the repository these link to)."""
    found = [root / "README.md"] if (root / "README.md").is_file() else []
    return (found + sorted((root / "docs").glob("*.md"))
            + sorted((root / "results").glob("*/README.md")))


def latest_tutorial_run(root: Path | None = None) -> Path:
    """The newest ``runs/tutorial/<timestamp>`` folder holding executed notebooks."""
    root = root or paths.runs_dir() / "tutorial"
    runs = sorted((d for d in root.glob("*") if d.is_dir() and any(d.glob("[0-9][0-9]*.ipynb"))),
                  key=lambda d: d.name)
    if not runs:
        raise SiteError(f"{root}: no executed tutorial run; run `python -m mathagent tutorial` "
                        "first, or `python -m mathagent site --run`")
    return runs[-1]


def _page_name(source: Path, root: Path) -> str:
    if source.suffix == ".ipynb":
        return source.stem + ".html"
    rel = source.resolve().relative_to(root.resolve()).with_suffix("")
    return "_".join(rel.parts) + ".html"


# -- rendering -------------------------------------------------------------------------------
def _exporter():
    import logging

    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab")
    exporter.log.setLevel(logging.ERROR)  # not the accessibility hints on every figure
    return exporter


def _notebook_errors(nb, source: Path) -> None:
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                raise SiteError(f"{source}: cell {i} has an error output "
                                f"({out.get('ename', 'error')}: {out.get('evalue', '')})"[:300])


def render_notebook(source: Path) -> tuple[str, str]:
    """``(title, html)`` of an executed notebook; an error output is a :class:`SiteError`."""
    import nbformat

    try:
        nb = nbformat.read(source, as_version=4)
    except Exception as exc:  # unreadable JSON, wrong format: one line naming the file
        raise SiteError(f"{source}: not a readable notebook ({type(exc).__name__})") from exc
    _notebook_errors(nb, source)
    title = next((ln.lstrip("# ").strip() for c in nb.cells if c.cell_type == "markdown"
                  for ln in c.source.splitlines() if ln.startswith("# ")), source.stem)
    body, _ = _exporter().from_notebook_node(nb, resources={"metadata": {"name": title}})
    return title, body


def render_markdown(source: Path) -> tuple[str, str]:
    """``(title, html)`` of a markdown file, through the same template as the notebooks."""
    import nbformat

    text = source.read_text(encoding="utf-8")
    title = next((ln.lstrip("# ").strip() for ln in text.splitlines() if ln.startswith("# ")),
                 source.parent.name)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(text)]
    body, _ = _exporter().from_notebook_node(nb, resources={"metadata": {"name": title}})
    return title, body


_HREF = re.compile(r'(<a\s[^>]*?href=")([^"#]*)((?:#[^"]*)?")')
_IMG_SRC = re.compile(r'(<img\s[^>]*?src=")([^"]*)(")')
_ABSOLUTE = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:|/)")  # a URL, or a path from the root


def _linked_path(base: Path, target: str) -> Path | None:
    """The file a relative link (its fragment removed) names from ``base``; None for an
    in-page anchor or an absolute URL."""
    if not target or _ABSOLUTE.match(target):
        return None
    return (base / unquote(target.partition("?")[0])).resolve()


def _page_for(path: Path, pages_by_source: dict[Path, str]) -> str | None:
    """The page a link to ``path`` means: the file's page, or a folder's README's page."""
    return next((pages_by_source[c] for c in (path, path / "README.md") if c in pages_by_source),
                None)


def _linked_markdown(body: str, source: Path, known: set[Path], root: Path) -> list[Path]:
    """The markdown files of the repository (a ``.md`` file, or a folder's README) that a
    rendered page links to and that are not pages yet."""
    found = []
    for m in _HREF.finditer(body):
        path = _linked_path(source.parent, html.unescape(m.group(2)))
        if path is None or not path.is_relative_to(root):
            continue
        for candidate in (path, path / "README.md"):
            if (candidate.suffix == ".md" and candidate.is_file() and candidate not in known
                    and candidate not in found):
                found.append(candidate)
    return found


def _git_ignored(path: Path, root: Path) -> bool:
    """Whether git ignores ``path`` in the repository at ``root`` (a tracked file is never
    ignored); False where ``root`` is no git work tree."""
    try:
        proc = subprocess.run(["git", "-C", str(root), "check-ignore", "-q", str(path)],
                              capture_output=True)
    except FileNotFoundError:  # no git: no ignore rules to read
        return False
    return proc.returncode == 0


def _copyable(path: Path, root: Path, label: Path, link: str) -> Path:
    """``path`` relative to ``root``, for a copy into the site; a :class:`SiteError` naming
    the page and the link for a file git ignores or one over :data:`MAX_FILE_BYTES`."""
    rel = path.relative_to(root)
    if _git_ignored(path, root):
        raise SiteError(f"{label}: link {link!r} is to {rel.as_posix()}, a file git ignores; "
                        "a site copies committed files only")
    if (size := path.stat().st_size) > MAX_FILE_BYTES:
        raise SiteError(f"{label}: link {link!r} is to {rel.as_posix()}, {size / 1e6:.1f} MB, "
                        f"over the {MAX_FILE_BYTES / 1e6:.0f} MB a site copies")
    return rel


_ANCHOR = re.compile(r'<a\s[^>]*?href="([^"#]*)(?:#[^"]*)?"[^>]*>(.*?)</a>', re.S)


def _unlink_absent_notebooks(body: str, base: Path, absent: set[Path]) -> str:
    """A link to a tutorial notebook that has no page in this site (a run of some notebooks)
    becomes its text, saying so."""
    def unlink(m: re.Match) -> str:
        path = _linked_path(base, html.unescape(m.group(1)))
        return m.group(0) if path not in absent else f"{m.group(2)} (not in this run)"

    return _ANCHOR.sub(unlink, body)


def _rewrite(body: str, page: Page, pages_by_source: dict[Path, str], out: Path,
             root: Path, label: Path, figures: dict[Path, Path]) -> str:
    """Point links at the site's pages, copy the other files of the repository a page links
    to into files/ (at their path in the repository) and the images it shows into figures/
    (``figures`` maps each copy to its source, so two images of one name stay two). A link to
    nothing is left as it is, for the link check to name; ``label`` names the page in an
    error."""
    base = page.source.parent

    def href(m: re.Match) -> str:
        link = html.unescape(m.group(2))
        path = _linked_path(base, link)
        if path is None:
            return m.group(0)
        name = _page_for(path, pages_by_source)
        if name is None and path.is_file() and path.is_relative_to(root):
            rel = _copyable(path, root, label, link)
            (out / "files" / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out / "files" / rel)
            name = "files/" + quote(rel.as_posix())
        return m.group(0) if name is None else m.group(1) + name + m.group(3)

    def img(m: re.Match) -> str:
        src = html.unescape(m.group(2))
        if not src or _ABSOLUTE.match(src):
            return m.group(0)
        path = (base / src).resolve()
        if not path.is_file():
            return m.group(0)  # left broken: the check names it
        if path.is_relative_to(root):
            _copyable(path, root, label, src)
        dest, n = out / "figures" / f"{Path(page.name).stem}-{path.name}", 1
        while figures.get(dest, path) != path:  # another image of this name: a new name
            n += 1
            dest = dest.with_name(f"{Path(page.name).stem}-{n}-{path.name}")
        figures[dest] = path
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
        return m.group(1) + "figures/" + quote(dest.name) + m.group(3)

    return _IMG_SRC.sub(img, _HREF.sub(href, body))


def _with_nav(body: str, page_name: str, pages: list[Page]) -> str:
    """A bar of links at the top of a page: the index, the notebooks, the README."""
    items = []
    for p in pages:
        if p.kind != "notebook" and p.name != "README.html":
            continue
        label = html.escape(p.title if p.kind == "notebook" else "README")
        items.append(f"<b>{label}</b>" if p.name == page_name
                     else f'<a href="{p.name}">{label}</a>')
    nav = ('<nav style="padding:8px 16px;border-bottom:1px solid #ccc;font:14px sans-serif">'
           f'<a href="index.html">index</a> | {" · ".join(items)}</nav>')
    return re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + nav, body, count=1)


# -- checking --------------------------------------------------------------------------------
class _PageReader(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images: list[str] = []
        self.links: list[str] = []
        self.text: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs).get("src") or "")
        if tag == "a" and dict(attrs).get("href"):
            self.links.append(dict(attrs)["href"])
        if tag in ("script", "style", "nav"):
            self._skip += 1

    def handle_endtag(self, tag):
        if tag in ("script", "style", "nav") and self._skip:
            self._skip -= 1

    def handle_data(self, data):
        if not self._skip:
            self.text.append(data)


def check_page(path: Path, label: str | Path | None = None) -> tuple[int, int]:
    """``(images, visible characters)`` of a built page; a broken image or an empty page is a
    :class:`SiteError` naming the page (as ``label``, default its path)."""
    label = label or path
    reader = _PageReader()
    reader.feed(path.read_text(encoding="utf-8"))
    for src in reader.images:
        if src.startswith("data:"):
            header, _, payload = src.partition(",")
            try:
                ok = ";base64" in header and len(base64.b64decode(payload, validate=True)) > 0
            except (binascii.Error, ValueError):
                ok = False
            if not ok:
                raise SiteError(f"{label}: broken image (an empty or undecodable embedded "
                                f"image, {header or 'data:'})")
        elif not src or re.match(r"^[a-z]+:", src):
            raise SiteError(f"{label}: broken image {src!r} (not embedded in the site)")
        elif not (path.parent / src).is_file():
            raise SiteError(f"{label}: broken image {src!r} (no such file)")
    chars = len(" ".join(" ".join(reader.text).split()))
    if chars < MIN_TEXT_CHARS:
        raise SiteError(f"{label}: empty page ({chars} visible characters)")
    return len(reader.images), chars


def check_links(site_dir: Path, label_dir: Path | None = None) -> int:
    """The number of relative links in the pages of a built site; one that leads to no page
    or file inside the site is a :class:`SiteError` naming the page (in ``label_dir``,
    default ``site_dir``) and the link. A link's ``#fragment`` is not checked."""
    site_dir, label_dir = site_dir.resolve(), label_dir or site_dir
    count = 0
    for page in sorted(site_dir.glob("*.html")):
        reader = _PageReader()
        reader.feed(page.read_text(encoding="utf-8"))
        for link in reader.links:
            path = _linked_path(page.parent, link.partition("#")[0])
            if path is None:
                continue
            count += 1
            if not (path.is_file() and path.is_relative_to(site_dir)):
                raise SiteError(f"{label_dir / page.name}: dead link {link!r} "
                                "(no page or file of the site there)")
    return count


# -- the build -------------------------------------------------------------------------------
def _index(pages: list[Page], run_dir: Path) -> str:
    rows = "\n".join(
        f'<tr><td><a href="{p.name}">{html.escape(p.title)}</a></td><td>{p.kind}</td>'
        f"<td>{p.figures}</td></tr>" for p in pages)
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>mathagent: the executed tutorial</title>
<style>body{{font:15px/1.5 sans-serif;max-width:820px;margin:2em auto;padding:0 1em}}
td,th{{padding:2px 12px;text-align:left}}</style></head>
<body><h1>mathagent: the executed tutorial</h1>
<p>The five notebooks as they ran, every output and figure included, with the project's
README, its docs and the results READMEs.
Executed copies from <code>{html.escape(str(run_dir))}</code>.</p>
<table><tr><th>page</th><th>kind</th><th>figures</th></tr>
{rows}
</table></body></html>
"""


def _markdown_page(source: Path, root: Path) -> Page:
    """The page of a markdown file: a ``readme`` if it is a README.md, else a ``doc``."""
    return Page(_page_name(source, root), "", source.resolve(),
                "readme" if source.name == "README.md" else "doc")


def build_site(run_dir: str | Path, out_dir: str | Path, markdown: list[Path] | None = None,
               root: Path = paths.REPO_ROOT, force: bool = True) -> SiteReport:
    """Convert ``run_dir``'s executed notebooks and the ``markdown`` pages (default
    :func:`markdown_sources`), with any other markdown file of the repository they link to,
    into ``out_dir``; check every page and every relative link. Raises :class:`SiteError` (one
    line naming the page) for a page that would mislead a reader, leaving ``out_dir`` as it
    was."""
    from mathagent.outputs import check_output, staged_output

    start = time.perf_counter()
    run_dir, out, root = Path(run_dir), Path(out_dir), Path(root).resolve()
    notebooks = sorted(run_dir.glob("[0-9][0-9]*.ipynb"))
    if not notebooks:
        raise SiteError(f"{run_dir}: no executed notebooks (NN_*.ipynb) to build from")
    markdown = markdown_sources(root) if markdown is None else list(markdown)
    pages: list[Page] = []
    by_source: dict[Path, str] = {}  # a source file (or a link's alias of one) -> its page
    by_name: dict[str, str] = {"index.html": "the site's index"}  # a page -> its source

    def add(page: Page) -> None:
        if page.source in by_source:
            return  # given twice, or already found through a link
        if page.name in by_name:
            raise SiteError(f"{page.source} and {by_name[page.name]} both want the page "
                            f"{page.name}; rename one")
        pages.append(page)
        by_source[page.source], by_name[page.name] = page.name, str(page.source)

    # a link to a notebook (its source in notebooks/, or its executed copy beside another)
    # means the notebook's page; one to a tutorial notebook not in this run, no page
    for nb in notebooks:
        add(Page(_page_name(nb, root), "", nb.resolve(), "notebook"))
        by_source.setdefault((root / "notebooks" / nb.name).resolve(), _page_name(nb, root))
    tutorial = _source_notebooks(root)
    missing = sorted({p.name for p in tutorial} - {nb.name for nb in notebooks})
    absent = {(folder / name).resolve() for name in missing
              for folder in (root / "notebooks", run_dir)}
    for md in markdown:
        add(_markdown_page(md, root))
    check_output(out, force)
    bodies: dict[str, str] = {}
    for page in pages:  # the list grows as rendered pages are found to link to other files
        render = render_notebook if page.kind == "notebook" else render_markdown
        page.title, body = render(page.source)
        bodies[page.name] = _unlink_absent_notebooks(body, page.source.parent, absent)
        for linked in _linked_markdown(bodies[page.name], page.source, set(by_source), root):
            add(_markdown_page(linked, root))
    figures: dict[Path, Path] = {}
    with staged_output(out) as tmp:
        for page in pages:
            body = _rewrite(bodies[page.name], page, by_source, tmp, root, out / page.name,
                            figures)
            (tmp / page.name).write_text(_with_nav(body, page.name, pages), encoding="utf-8")
            page.figures, page.chars = check_page(tmp / page.name, out / page.name)
        (tmp / "index.html").write_text(_index(pages, run_dir), encoding="utf-8")
        links = check_links(tmp, out)
    return SiteReport(out, pages, time.perf_counter() - start, missing, links)


def _source_notebooks(root: Path) -> list[Path]:
    """The tutorial's notebooks, in ``root``'s notebooks/."""
    from mathagent.tutorial import tutorial_notebooks

    return tutorial_notebooks(root / "notebooks")


# -- the command -----------------------------------------------------------------------------
def site_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="run_dir", type=Path, metavar="RUN_DIR",
                        help="a tutorial run folder (default: the newest under runs/tutorial)")
    parser.add_argument("--run", action="store_true",
                        help="run the tutorial first (a new run folder), then build from it")
    parser.add_argument("--smoke", action="store_true",
                        help="with --run: the quick variant of every notebook")
    parser.add_argument("--out", type=Path, help="site folder (default: RUN_DIR/site)")
    parser.add_argument("--force", action="store_true", help="replace an existing site folder")
    parser.add_argument("--browser-check", action="store_true",
                        help="open every page of the site in headless Chromium and check it "
                             "(a site already built is checked as it is, unless --run or "
                             "--force builds it again)")
    parser.add_argument("--screenshots", type=Path, metavar="DIR",
                        help="with --browser-check: where the page screenshots go "
                             "(default: SITE-screenshots beside the site folder)")


def site_command(args: argparse.Namespace) -> int:
    from mathagent import tutorial

    try:
        if args.run:
            run_dir = args.run_dir or paths.new_run_dir("tutorial")
            run_dir.mkdir(parents=True, exist_ok=True)
            notebooks = tutorial.tutorial_notebooks()
            results = tutorial.run_tutorial(notebooks, run_dir, smoke=args.smoke or paths.smoke())
            print(tutorial.format_summary(results, notebooks, run_dir))
            if not all(r.ok for r in results) or len(results) != len(notebooks):
                print("site: the tutorial did not run through; no site built", file=sys.stderr)
                return 1
        else:
            run_dir = args.run_dir or latest_tutorial_run()
            if not run_dir.is_dir():
                raise SiteError(f"{run_dir}: no such run folder")
        run_dir = run_dir.resolve()  # the kernels run from notebooks/, the site from here
        out = args.out or run_dir / "site"
        if args.browser_check and not (args.run or args.force) and (out / "index.html").is_file():
            return _browser_check(out, args.screenshots)
        report = build_site(run_dir, out, force=args.force or args.run)
    except (SiteError, ValueError) as exc:  # OutputError is a ValueError
        print(f"site: {exc}", file=sys.stderr)
        return 2
    print(report.summary())
    if args.browser_check:
        return _browser_check(out, args.screenshots)
    print(f"open it: python -m http.server -d {out} 8000, then http://127.0.0.1:8000/ "
          f"(or open {out / 'index.html'} directly)")
    return 0


def _browser_check(out: Path, screenshots: Path | None) -> int:
    from mathagent import browser

    shots = screenshots or out.with_name(out.name + "-screenshots")
    start = time.perf_counter()
    try:
        checks = browser.check_site(out, shots)
    except browser.BrowserError as exc:
        print(f"site: {exc}", file=sys.stderr)
        return 2
    for check in checks:
        print("\n".join(check.lines()))
    bad = sum(not c.ok for c in checks)
    print(f"browser check: {len(checks) - bad} of {len(checks)} pages ok in "
          f"{time.perf_counter() - start:.1f} s; screenshots in {shots}")
    return 1 if bad else 0
