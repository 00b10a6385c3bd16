"""The static site: a page per executed notebook and README, links and figures that work, and
a build that fails, naming the page, on a broken image, an error output or an empty page."""

from __future__ import annotations

import base64
import io
import subprocess
import sys

import nbformat
import pytest

from mathagent import site

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
    """A repository root with a README (an image, links) and a run folder of two notebooks."""
    root, run = tmp_path / "repo", tmp_path / "run"
    (root / "results" / "demo").mkdir(parents=True)
    (root / "notebooks").mkdir()
    run.mkdir()
    (root / "results" / "demo" / "curve.png").write_bytes(base64.b64decode(_png()))
    (root / "README.md").write_text(
        f"# demo\n\n{PROSE}\n\nSee [the first notebook](notebooks/01_a.ipynb) and "
        "[the results](results/demo/).\n")
    (root / "results" / "demo" / "README.md").write_text(
        f"# demo results\n\n{PROSE}\n\n![curve](curve.png)\n\n[back](../../README.md)\n")
    png = _png()
    _notebook(run / "01_a.ipynb", nbformat.v4.new_markdown_cell(f"# 01 · first\n\n{PROSE}"),
              _figure_cell(png), _figure_cell(png))
    _notebook(run / "02_b.ipynb", nbformat.v4.new_markdown_cell(f"# 02 · second\n\n{PROSE}"),
              _figure_cell(png))
    return root, run


def _build(root, run, out, **kw):
    return site.build_site(run, out, readmes=site.readme_sources(root), root=root, **kw)


def test_a_page_per_notebook_and_readme_with_working_links_and_figures(tree, tmp_path):
    root, run = tree
    out = tmp_path / "site"
    report = _build(root, run, out)
    names = [p.name for p in report.pages]
    assert names == ["01_a.html", "02_b.html", "README.html", "results_demo_README.html"]
    assert [p.figures for p in report.pages] == [2, 1, 0, 1] and report.figures == 4
    assert [p.title for p in report.pages][:2] == ["01 · first", "02 · second"]
    assert (out / "index.html").is_file()
    readme = (out / "README.html").read_text()
    assert 'href="01_a.html"' in readme and 'href="results_demo_README.html"' in readme
    results = (out / "results_demo_README.html").read_text()
    assert 'src="figures/results_demo_README-curve.png"' in results
    assert (out / "figures" / "results_demo_README-curve.png").is_file()
    assert 'href="README.html"' in results
    assert '<a href="index.html">index</a>' in (out / "01_a.html").read_text()
    for page in names:  # every page passes the checks on its own
        assert site.check_page(out / page)[1] >= site.MIN_TEXT_CHARS
    assert f"{len(names)} pages, 4 figures" in report.summary()


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
