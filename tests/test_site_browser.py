"""The built site in a real headless Chromium: a good page passes with a full-page screenshot;
a broken image, an error output and an empty page each fail with one line naming the page.

Chromium is a system program (``bash scripts/install.sh --browser`` installs it, CI does);
without it these tests fail, saying so, rather than pass unchecked.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from bounds import hang_bound
from nbconvert import HTMLExporter
from test_site import PROSE, _figure_cell, _notebook, _png

from mathagent import browser, site

# A stream written to stderr (a progress bar, a warning) gets the same markup as an error
# output; the good page holds both kinds, and must still pass.
PROGRESS = "rollouts: 100%|██████████| 3/3 [00:04<00:00,  1.62s/rollout]\n"
WARNING = "/x/y.py:3: UserWarning: a warning is not an error\n  warnings.warn(msg)\n"
# Error outputs as nbclient records them (IPython's tracebacks, colours included): one with a
# traceback header and the exception's line, one without a header (a SyntaxError), one whose
# exception is not named ...Error (an interrupted cell).
RED, END = "\x1b[0;31m", "\x1b[0m"
TRACEBACKS = {
    "error.html": [RED + "-" * 75 + END,
                   f"{RED}ZeroDivisionError{END}         Traceback (most recent call last)",
                   "Cell \x1b[0;32mIn[1], line 1\x1b[0m\n\x1b[0;32m----> 1\x1b[0m 1 / 0\n",
                   f"{RED}ZeroDivisionError{END}: division by zero"],
    "syntax.html": ["  Cell \x1b[0;32mIn[1], line 1\x1b[0m\n    1 +\n       ^\n",
                    f"{RED}SyntaxError{END}: invalid syntax"],
    "interrupt.html": [RED + "-" * 75 + END,
                       f"{RED}KeyboardInterrupt{END}         Traceback (most recent call last)",
                       "Cell \x1b[0;32mIn[1], line 1\x1b[0m\n----> 1 time.sleep(60)\n",
                       f"{RED}KeyboardInterrupt{END}: "],
}

def _stderr(text):
    return nbformat.v4.new_output("stream", name="stderr", text=text)


def _page(path, *cells):
    """A page written by the site's template (nbconvert's lab), without the build's checks."""
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    path.write_text(HTMLExporter(template_name="lab").from_notebook_node(nb)[0])


@pytest.fixture(scope="module")
def chromium():
    """The browser; without one the tests fail (CI installs it), saying how to install it."""
    try:
        return browser.find_chromium()
    except browser.BrowserError as exc:
        missing = str(exc)
    pytest.fail(missing, pytrace=False)


@pytest.fixture(scope="module")
def built(chromium, tmp_path_factory):
    """A built site (two notebooks, a README), plus pages that each hold one problem."""
    tmp = tmp_path_factory.mktemp("browser")
    root, run, out = tmp / "repo", tmp / "run", tmp / "site"
    (root / "notebooks").mkdir(parents=True)
    run.mkdir()
    (root / "README.md").write_text(f"# demo\n\n{PROSE}\n\n[the notebook](notebooks/01_a.ipynb)\n")
    png = _png()
    streams = nbformat.v4.new_code_cell("run()")
    streams.outputs = [_stderr(PROGRESS), _stderr(WARNING)]
    _notebook(run / "01_a.ipynb", nbformat.v4.new_markdown_cell(f"# 01 · first\n\n{PROSE}"),
              _figure_cell(png), streams, _figure_cell(png))
    _notebook(run / "02_b.ipynb", nbformat.v4.new_markdown_cell(f"# 02 · second\n\n{PROSE}"),
              _figure_cell(png))
    site.build_site(run, out, markdown=[root / "README.md"], root=root)

    good = (out / "01_a.html").read_text()
    first_img = re.compile(r'(<img\s[^>]*?src=")data:[^"]*(")')
    (out / "broken_file.html").write_text(first_img.sub(r"\1figures/missing.png\2", good, 1))
    (out / "broken_data.html").write_text(
        first_img.sub(r"\1data:image/png;base64,AAAA\2", good, 1))  # decodes, but to no image
    for name, traceback in TRACEBACKS.items():
        failed = nbformat.v4.new_code_cell("run()")
        failed.outputs = [nbformat.v4.new_output("error", ename="", evalue="",
                                                 traceback=traceback)]  # the page shows these
        _page(out / name, nbformat.v4.new_markdown_cell(f"# {name}\n\n{PROSE}"), failed)
    _page(out / "empty.html", nbformat.v4.new_markdown_cell("# empty"))

    shots = tmp / "shots"
    checks = {c.name: c for c in browser.check_site(out, shots, chromium)}
    return out, shots, checks


def _png_size(path):
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", path
    return struct.unpack(">II", head[16:24])


def test_every_page_is_checked_index_first(built):
    out, _, checks = built
    assert list(checks)[0] == "index.html"
    assert sorted(checks) == sorted(p.name for p in out.glob("*.html"))
    for name in ("index.html", "02_b.html", "README.html"):
        assert checks[name].ok, checks[name].lines()


def test_a_good_page_passes_and_has_a_full_page_screenshot(built):
    _, shots, checks = built
    good = checks["01_a.html"]
    assert good.ok and good.lines() == [f"01_a.html: ok (2 images, {good.chars} characters)"]
    assert good.chars >= site.MIN_TEXT_CHARS
    assert good.screenshot == shots / "01_a.png"
    width, height = _png_size(good.screenshot)
    assert width == browser.WIDTH and height >= browser.HEIGHT > 300
    assert good.screenshot.stat().st_size > 10_000  # a rendered page, not a blank one


@pytest.mark.parametrize("page, line", [
    ("broken_file.html", "broken_file.html: broken image 'figures/missing.png' "
                         "(it does not load in the browser)"),
    ("broken_data.html", "broken_data.html: broken image 'data:image/png;base64,AAAA' "
                         "(it does not load in the browser)"),
    ("error.html", "error.html: error output in cell 1 (ZeroDivisionError: division by zero)"),
    ("syntax.html", "syntax.html: error output in cell 1 (SyntaxError: invalid syntax)"),
    ("interrupt.html", "interrupt.html: error output in cell 1 (KeyboardInterrupt:)"),
    ("empty.html", None),
])
def test_a_page_with_a_problem_fails_in_one_line_naming_it(built, page, line):
    _, _, checks = built
    lines = checks[page].lines()
    assert not checks[page].ok and len(lines) == 1
    if line is None:
        assert re.fullmatch(r"empty.html: empty page \(\d+ visible characters\)", lines[0])
    else:
        assert lines == [line]


def test_an_image_that_does_not_decode_is_caught_only_in_the_browser(built):
    out, _, checks = built
    site.check_page(out / "broken_data.html")  # the HTML source looks fine
    assert not checks["broken_data.html"].ok


def test_the_command_checks_a_built_site_and_exits_1_on_a_problem(built, tmp_path):
    out, _, _ = built
    proc = subprocess.run([sys.executable, "-m", "mathagent", "site", "--from", str(tmp_path),
                           "--out", str(out), "--browser-check", "--screenshots",
                           str(tmp_path / "shots")], capture_output=True, text=True,
                          timeout=hang_bound(300))
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(list(out.glob("*.html"))) + 1
    assert [ln.split(":")[0] for ln in lines if ": ok (" not in ln][:-1] == [
        "broken_data.html", "broken_file.html", "empty.html", "error.html", "interrupt.html",
        "syntax.html"]
    assert re.fullmatch(rf"browser check: 4 of 10 pages ok in [\d.]+ s; screenshots in "
                        rf"{re.escape(str(tmp_path / 'shots'))}", lines[-1])
    assert (tmp_path / "shots" / "index.png").is_file() and "Traceback" not in proc.stderr


def _live_processes(group: int) -> list[int]:
    """The processes of a process group that still run (an ended one waiting to be reaped
    by init does not count)."""
    live = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # ended meanwhile
        if int(fields[2]) == group and fields[0] != "Z":
            live.append(int(stat.parent.name))
    return live


def test_the_browser_is_stopped_even_when_the_check_fails(chromium):
    with pytest.raises(RuntimeError, match="a failed check"), \
            browser.running_browser(chromium) as devtools:
        pid = devtools.pid
        assert pid in _live_processes(pid)
        raise RuntimeError("a failed check")
    assert _live_processes(pid) == []  # neither the browser nor a process it started


def test_no_browser_is_one_line_saying_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setenv("MATHAGENT_CHROMIUM", str(tmp_path / "nope"))
    with pytest.raises(browser.BrowserError, match=r"^MATHAGENT_CHROMIUM=.*nope: no such program$"):
        browser.find_chromium()
    monkeypatch.delenv("MATHAGENT_CHROMIUM")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(browser.BrowserError, match=r"bash scripts/install.sh --browser"):
        browser.find_chromium()
    assert shutil.which("chromium") is None
