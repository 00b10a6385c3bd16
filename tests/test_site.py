"""The static site: a page per executed notebook, README and doc, links and figures that work,
and a build that fails, naming the page, on a broken image, an error output, an empty page or
a dead link."""

from __future__ import annotations

import base64
import io
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from mathagent import paths, site

PROSE = ("This paragraph stands for a notebook's teaching text. It is long enough that a page "
         "holding it is not mistaken for an empty one, which the build refuses to write. ")


def _png() -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1, 1))
    ax.plot([0, 1], [0, 1])
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _notebook(path, *cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    nbformat.write(nb, path)
    return path


def _figure_cell(png: str):
    cell = nbformat.v4.new_code_cell("plots.save_figure(fig, 'x')")
    cell.outputs = [nbformat.v4.new_output("display_data", data={"image/png": png,
                                                                  "text/plain": "<Figure>"})]
    return cell


@pytest.fixture()
def tree(tmp_path):
    """A repository root with a README (an image, links), a doc, and a run folder of two
    notebooks."""
    root, run = tmp_path / "repo", tmp_path / "run"
    (root / "results" / "demo").mkdir(parents=True)
    (root / "notebooks").mkdir()
    (root / "docs").mkdir()
    run.mkdir()
    (root / "results" / "demo" / "curve.png").write_bytes(base64.b64decode(_png()))
    (root / "README.md").write_text(
        f"# demo\n\n{PROSE}\n\nSee [the first notebook](notebooks/01_a.ipynb), "
        "[the results](results/demo/) and [the guide](docs/guide.md).\n")
    (root / "docs" / "guide.md").write_text(f"# guide\n\n{PROSE}\n\n[home](../README.md)\n")
    (root / "results" / "demo" / "README.md").write_text(
        f"# demo results\n\n{PROSE}\n\n![curve](curve.png)\n\n[back](../../README.md)\n")
    png = _png()
    _notebook(run / "01_a.ipynb", nbformat.v4.new_markdown_cell(f"# 01 · first\n\n{PROSE}"),
              _figure_cell(png), _figure_cell(png))
    _notebook(run / "02_b.ipynb", nbformat.v4.new_markdown_cell(f"# 02 · second\n\n{PROSE}"),
              _figure_cell(png))
    return root, run


def _build(root, run, out, **kw):
    return site.build_site(run, out, markdown=site.markdown_sources(root), root=root, **kw)


def test_a_page_per_notebook_and_readme_with_working_links_and_figures(tree, tmp_path):
    root, run = tree
    out = tmp_path / "site"
    report = _build(root, run, out)
    names = [p.name for p in report.pages]
    assert names == ["01_a.html", "02_b.html", "README.html", "docs_guide.html",
                     "results_demo_README.html"]
    assert [p.kind for p in report.pages] == ["notebook", "notebook", "readme", "doc", "readme"]
    assert [p.figures for p in report.pages] == [2, 1, 0, 0, 1] and report.figures == 4
    assert [p.title for p in report.pages][:2] == ["01 · first", "02 · second"]
    assert (out / "index.html").is_file()
    readme = (out / "README.html").read_text()
    assert 'href="01_a.html"' in readme and 'href="results_demo_README.html"' in readme
    assert 'href="docs_guide.html"' in readme
    assert 'href="README.html"' in (out / "docs_guide.html").read_text()
    results = (out / "results_demo_README.html").read_text()
    assert 'src="figures/results_demo_README-curve.png"' in results
    assert (out / "figures" / "results_demo_README-curve.png").is_file()
    assert 'href="README.html"' in results
    assert '<a href="index.html">index</a>' in (out / "01_a.html").read_text()
    for page in names:  # every page passes the checks on its own
        assert site.check_page(out / page)[1] >= site.MIN_TEXT_CHARS
    assert f"{len(names)} pages, 4 figures, {report.links} links checked" in report.summary()
    assert report.links == site.check_links(out) > 0


def test_linked_markdown_becomes_a_page_and_a_linked_file_is_copied(tree, tmp_path):
    """A doc's link to a markdown file outside the page set makes it a page too (and what that
    links to); a link to another file of the repository points at a copy in files/, as an
    image a page shows is copied into figures/. A notebook's links resolve from its executed
    copy's folder, another notebook's copy included."""
    root, run = tree
    (root / "data" / "set").mkdir(parents=True)
    (root / "mathagent").mkdir()
    (root / "mathagent" / "tool.py").write_text("print('the tool')\n")
    (root / "docs" / "guide.md").write_text(
        f"# guide\n\n{PROSE}\n\n[the data](../data/README.md), "
        "[the tool](../mathagent/tool.py#L1)\n")
    (root / "data" / "README.md").write_text(f"# data\n\n{PROSE}\n\n[one set](set/)\n")
    (root / "data" / "set" / "README.md").write_text(f"# one set\n\n{PROSE}\n")
    _notebook(run / "02_b.ipynb", nbformat.v4.new_markdown_cell(
        f"# 02 · second\n\n{PROSE}\n\n[the first](01_a.ipynb), [the guide](../repo/docs/guide.md)"))
    out = tmp_path / "site"
    report = _build(root, run, out)
    assert [p.name for p in report.pages][-2:] == ["data_README.html", "data_set_README.html"]
    guide = (out / "docs_guide.html").read_text()
    assert 'href="data_README.html"' in guide
    assert 'href="files/mathagent/tool.py#L1"' in guide
    assert (out / "files" / "mathagent" / "tool.py").read_text() == "print('the tool')\n"
    assert 'href="data_set_README.html"' in (out / "data_README.html").read_text()
    second = (out / "02_b.html").read_text()
    assert 'href="01_a.html"' in second and 'href="docs_guide.html"' in second
    assert report.links == site.check_links(out)


def test_a_dead_link_fails_the_build_in_one_line_naming_page_and_link(tree, tmp_path):
    root, run = tree
    out = tmp_path / "site"
    _build(root, run, out)
    before = sorted(p.name for p in out.iterdir())
    (root / "docs" / "guide.md").write_text(f"# guide\n\n{PROSE}\n\n[gone](gone.md#top)\n")
    with pytest.raises(site.SiteError) as caught:
        _build(root, run, out)
    assert str(caught.value) == (f"{out / 'docs_guide.html'}: dead link 'gone.md#top' "
                                 "(no page or file of the site there)")
    assert sorted(p.name for p in out.iterdir()) == before


@pytest.mark.parametrize("link", ["nowhere.html", "../outside.html", "figures/", "a%20b.html"])
def test_the_link_check_names_a_link_that_leads_nowhere_in_the_site(tmp_path, link):
    """A built page's relative link must land on a file inside the site: not a missing one,
    not one beside the site folder, not a folder."""
    out = tmp_path / "site"
    (out / "figures").mkdir(parents=True)
    (tmp_path / "outside.html").write_text("beside the site, not in it")
    (out / "a b.html").write_text("<p>a page whose name has a space</p>")
    (out / "page.html").write_text(
        '<p><a href="#top">top</a> <a href="https://example.org/x">away</a> '
        '<a href="a%20b.html">space</a> <a href="/abs">root</a> '
        f'<a href="{link}">the link</a></p>')
    if link == "a%20b.html":
        assert site.check_links(out) == 2  # the space page, twice: it resolves
        return
    with pytest.raises(site.SiteError, match=rf"^{re.escape(str(out / 'page.html'))}: dead link "
                                             rf"{re.escape(repr(link))} \(no page or file"):
        site.check_links(out)


def test_the_repositorys_site_has_no_dead_link(tmp_path):
    """The site of the committed executed copies (results/notebooks_h200) with the project's
    own README, docs and results pages: every relative link lands on a page or file of it."""
    report = site.build_site(paths.RESULTS_DIR / "notebooks_h200", tmp_path / "site")
    names = {p.name for p in report.pages}
    assert {f"docs_{md.stem}.html" for md in (paths.REPO_ROOT / "docs").glob("*.md")} <= names
    assert {"README.html", "01_data_preparation.html"} <= names
    assert report.links == site.check_links(tmp_path / "site") > len(names)


def test_a_broken_image_fails_the_build_and_keeps_the_old_site(tree, tmp_path):
    root, run = tree
    out = tmp_path / "site"
    _build(root, run, out)
    before = sorted(p.name for p in out.iterdir())
    (root / "results" / "demo" / "curve.png").unlink()
    with pytest.raises(site.SiteError, match=r"results_demo_README.html: broken image "
                                             r"'curve.png' \(no such file\)"):
        _build(root, run, out)
    assert sorted(p.name for p in out.iterdir()) == before


def test_an_empty_embedded_image_is_broken(tree, tmp_path):
    root, run = tree
    _notebook(run / "03_c.ipynb", nbformat.v4.new_markdown_cell(f"# 03\n\n{PROSE}"),
              _figure_cell(""))
    with pytest.raises(site.SiteError, match=r"03_c.html: broken image"):
        _build(root, run, tmp_path / "site")


def test_an_error_output_fails_the_build_naming_the_cell(tree, tmp_path):
    root, run = tree
    bad = nbformat.v4.new_code_cell("1 / 0")
    bad.outputs = [nbformat.v4.new_output("error", ename="ZeroDivisionError",
                                          evalue="division by zero", traceback=[])]
    _notebook(run / "02_b.ipynb", nbformat.v4.new_markdown_cell(f"# 02\n\n{PROSE}"), bad)
    with pytest.raises(site.SiteError, match=r"02_b.ipynb: cell 1 has an error output "
                                             r"\(ZeroDivisionError: division by zero\)"):
        _build(root, run, tmp_path / "site")
    assert not (tmp_path / "site").exists()


def test_an_empty_page_fails_the_build(tree, tmp_path):
    root, run = tree
    _notebook(run / "02_b.ipynb", nbformat.v4.new_markdown_cell("# 02"))
    with pytest.raises(site.SiteError, match=r"02_b.html: empty page"):
        _build(root, run, tmp_path / "site")


def test_a_run_without_notebooks_and_a_kept_site_are_one_line(tree, tmp_path):
    root, run = tree
    with pytest.raises(site.SiteError, match="no executed notebooks"):
        _build(root, tmp_path, tmp_path / "site")
    _build(root, run, tmp_path / "site")
    with pytest.raises(ValueError, match="already exists and is kept"):
        _build(root, run, tmp_path / "site", force=False)


def test_the_command_reports_a_missing_run_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mathagent", "site", "--from",
                           str(tmp_path / "nope")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "no such run folder" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_newest_tutorial_run_is_the_default(tmp_path):
    for stamp in ("20250101-000000", "20250102-000000", "20250103-000000"):
        (tmp_path / stamp).mkdir()
    (tmp_path / "20250101-000000" / "01_a.ipynb").write_text("{}")
    (tmp_path / "20250102-000000" / "01_a.ipynb").write_text("{}")
    assert site.latest_tutorial_run(tmp_path).name == "20250102-000000"  # 03 holds nothing
    with pytest.raises(site.SiteError, match="no executed tutorial run"):
        site.latest_tutorial_run(tmp_path / "empty")


def test_a_partial_run_builds_and_a_link_to_a_notebook_not_in_it_is_plain_text(tree, tmp_path):
    """A run of some notebooks (``tutorial --only 02``) builds: a link to a tutorial notebook
    without a page here (from a notebook or from the README) says it is not in this run
    instead of leading nowhere; a link to a notebook the tutorial does not have stays dead."""
    root, run = tree
    for name in ("01_a", "02_b", "03_c"):
        _notebook(root / "notebooks" / f"{name}.ipynb", nbformat.v4.new_markdown_cell(name))
    (run / "01_a.ipynb").unlink()
    _notebook(run / "02_b.ipynb", nbformat.v4.new_markdown_cell(
        f"# 02 · second\n\n{PROSE}\n\nThen [the third](03_c.ipynb#top)."))
    out = tmp_path / "site"
    report = _build(root, run, out)
    assert [p.name for p in report.pages][:2] == ["02_b.html", "README.html"]
    assert report.missing == ["01_a.ipynb", "03_c.ipynb"]
    assert "not in this run (no executed copy): 01_a.ipynb, 03_c.ipynb" in report.summary()
    second, readme = (out / "02_b.html").read_text(), (out / "README.html").read_text()
    assert "03_c.ipynb" not in second and "the third (not in this run)" in second
    assert "01_a.ipynb" not in readme and "the first notebook (not in this run)" in readme
    assert 'href="docs_guide.html"' in readme  # the other links stay links
    assert report.links == site.check_links(out)
    _notebook(run / "02_b.ipynb", nbformat.v4.new_markdown_cell(
        f"# 02 · second\n\n{PROSE}\n\nThen [a typo](04_d.ipynb)."))
    with pytest.raises(site.SiteError, match=r"02_b.html: dead link '04_d.ipynb'"):
        _build(root, run, tmp_path / "site2")


def test_a_source_given_twice_is_one_page(tree, tmp_path):
    root, run = tree
    report = site.build_site(run, tmp_path / "site", root=root,
                             markdown=[root / "README.md", root / "README.md",
                                       root / "docs" / ".." / "README.md"])
    assert [p.name for p in report.pages].count("README.html") == 1


@pytest.mark.parametrize("clash", ["docs_guide.md", "index.md", "01_a.md"])
def test_two_sources_for_one_page_name_fail_in_one_line_naming_both(tree, tmp_path, clash):
    """docs/guide.md and a linked docs_guide.md both want docs_guide.html; index.md wants the
    index; 01_a.md wants the notebook's page. The build names both files."""
    root, run = tree
    (root / clash).write_text(f"# clash\n\n{PROSE}\n")
    (root / "docs" / "guide.md").write_text(f"# guide\n\n{PROSE}\n\n[clash](../{clash})\n")
    with pytest.raises(site.SiteError) as caught:
        _build(root, run, tmp_path / "site")
    message = str(caught.value)
    assert "\n" not in message and f"{root / clash}" in message
    page = Path(clash).with_suffix(".html").name
    assert f"both want the page {page}" in message
    other = {"index.md": "the site's index", "01_a.md": str(run / "01_a.ipynb"),
             "docs_guide.md": str(root / "docs" / "guide.md")}[clash]
    assert other in message
    assert not (tmp_path / "site").exists()


def _git_repo(root):
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text("runs/\n.env\n")


def test_linked_files_keep_their_paths_under_files(tree, tmp_path):
    """a/b_c.py and a_b/c.py are two files: both are copied, neither over the other."""
    root, run = tree
    for rel, text in (("a/b_c.py", "one\n"), ("a_b/c.py", "two\n"), ("a b/c.py", "three\n")):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "docs" / "guide.md").write_text(
        f"# guide\n\n{PROSE}\n\n[one](../a/b_c.py), [two](../a_b/c.py), [three](../a%20b/c.py)\n")
    out = tmp_path / "site"
    report = _build(root, run, out)
    guide = (out / "docs_guide.html").read_text()
    assert 'href="files/a/b_c.py"' in guide and 'href="files/a_b/c.py"' in guide
    assert 'href="files/a%20b/c.py"' in guide
    assert [(out / "files" / rel).read_text() for rel in ("a/b_c.py", "a_b/c.py", "a b/c.py")] \
        == ["one\n", "two\n", "three\n"]
    assert report.links == site.check_links(out)


def test_two_images_of_one_name_are_two_figures(tree, tmp_path):
    root, run = tree
    (root / "results" / "other").mkdir()
    (root / "results" / "other" / "curve.png").write_bytes(base64.b64decode(_png()) + b"\0")
    (root / "docs" / "guide.md").write_text(
        f"# guide\n\n{PROSE}\n\n![a](../results/demo/curve.png) "
        "![b](../results/other/curve.png)\n")
    out = tmp_path / "site"
    _build(root, run, out)
    shown = re.findall(r'src="(figures/[^"]+)"', (out / "docs_guide.html").read_text())
    assert len(set(shown)) == 2
    assert {(out / s).read_bytes() for s in shown} == {
        (root / "results" / d / "curve.png").read_bytes() for d in ("demo", "other")}


@pytest.mark.parametrize("link", ["../.env", "../runs/x/weights.bin", "../big.bin"])
def test_an_ignored_or_oversized_linked_file_is_refused_in_one_line(tree, tmp_path, link):
    """A site holds committed files only: a linked file git ignores (runs/, .env) or one over
    the size cap fails the build, naming the page and the link, and nothing is copied."""
    root, run = tree
    _git_repo(root)
    (root / ".env").write_text("SECRET=1\n")
    (root / "runs" / "x").mkdir(parents=True)
    (root / "runs" / "x" / "weights.bin").write_bytes(b"w")
    with open(root / "big.bin", "wb") as big:  # sparse: a size, no data written
        big.truncate(site.MAX_FILE_BYTES + 1)
    (root / "docs" / "guide.md").write_text(f"# guide\n\n{PROSE}\n\n[the file]({link})\n")
    out = tmp_path / "site"
    with pytest.raises(site.SiteError) as caught:
        _build(root, run, out)
    message = str(caught.value)
    assert message.startswith(f"{out / 'docs_guide.html'}: link {link!r} ")
    assert "\n" not in message
    assert ("git ignores" if link != "../big.bin" else "MB") in message
    assert not out.exists()
