"""The reader's front door: the README's first screen (website, Colab links, install line, the two commands), the
commands the README, CONTRIBUTING.md and the introduction give (Makefile targets, pyproject extras, `bertmem`
flags), and an "Open in Colab" link under every notebook's title."""

import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from bertmem.cli import build_parser, subcommands

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from sync_install_cell import colab_line, colab_link, configured_url, release_tag, site_link  # noqa: E402

README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = {name: (ROOT / name).read_text(encoding="utf-8") for name in ("README.md", "CONTRIBUTING.md", "book/intro.md")}
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))


def first_screen() -> str:
    """The README's first 100 lines, with the reference-style links they use resolved."""
    top = "\n".join(README.splitlines()[:100])
    targets = dict(re.findall(r"^\[([^\]]+)\]: (\S+)$", README, flags=re.MULTILINE))
    return re.sub(r"\]\[([^\]]+)\]", lambda m: f"]({targets.get(m.group(1), '?')})", top)


def test_the_first_screen_holds_the_website_the_colab_links_the_install_line_and_two_commands():
    top = first_screen()
    assert site_link() in top
    for path in NOTEBOOKS:  # every notebook: its page and its Colab link
        assert colab_link(f"book/{path.name}") in top, path.name
        assert site_link(f"book/{path.stem}.html") in top, path.name
    for page in toc_pages():  # the chapter list is complete: every page of the site's table of contents
        assert site_link(f"{page}.html") in top, page
    package = top.index(f'pip install "bertmem[cpu-model] @ git+{configured_url()}@{release_tag()}"')
    assert top.index("pip install torch --index-url https://download.pytorch.org/whl/cpu") < package  # torch first
    assert re.search(r"^make book\s", top, flags=re.MULTILINE) and re.search(r"^make test\s", top, flags=re.MULTILINE)
    assert all(f"bertmem {command} " in top for command in ("plan", "train", "predict"))
    assert README.count("(CONTRIBUTING.md)") == 1 and (ROOT / "CONTRIBUTING.md").is_file()  # linked once


def toc_pages() -> list[str]:
    """The site's pages but its front matter (the introduction, the bibliography)."""
    files = re.findall(r"^\s*(?:- )?(?:file|root): (\S+)", (ROOT / "_toc.yml").read_text(), flags=re.MULTILINE)
    return [f for f in files if not f.endswith(("intro", "bibliography"))]


def test_the_subcommands_the_readme_counts_are_the_parsers():
    said = re.search(r"then has (\w+) subcommands: (.+?)\.", " ".join(README.split()))
    assert said, "the README says which subcommands bertmem has"
    commands = set(re.findall(r"`(\w+)`", said.group(2)))
    parser_commands = set(subcommands(build_parser()))
    assert commands == parser_commands and said.group(1) == {3: "three", 4: "four", 5: "five"}[len(commands)]


def test_the_readme_states_make_books_minutes_as_recorded():
    minutes = json.loads((ROOT / "src/bertmem/recorded/cpu-profile-minutes.json").read_text())["minutes"]
    stated = re.search(r"executes the (\d+) notebooks on the CPU profile \(about (\d+) minutes", README)
    assert stated, "the README says how many notebooks make book executes and for how long"
    assert int(stated.group(1)) == len(NOTEBOOKS) == len(minutes)
    assert int(stated.group(2)) == round(sum(minutes.values()))


def makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([\w-]+):", text, flags=re.MULTILINE))


@pytest.mark.parametrize("name", sorted(DOCS))
def test_every_make_command_the_docs_give_is_a_makefile_target(name):
    targets = makefile_targets()
    named = set(re.findall(r"`make ([a-z][\w-]*)", DOCS[name])) | set(
        re.findall(r"^make ([a-z][\w-]*)", DOCS[name], flags=re.MULTILINE))
    assert named, f"{name} names no make command"
    assert named <= targets, f"{name}: {sorted(named - targets)} are not Makefile targets"


def test_every_pip_extra_the_docs_name_exists():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    extras = set(re.findall(r"^([\w-]+) = \[", text.split("[project.optional-dependencies]")[1].split("\n[")[0],
                            flags=re.MULTILINE))
    named = {e for doc in DOCS.values() for group in re.findall(r"bertmem\[([\w,-]+)\]|\.\[([\w,-]+)\]", doc)
             for part in group if part for e in part.split(",")}
    assert named and named <= extras, sorted(named - extras)


def bertmem_lines(text: str) -> list[str]:
    """Every `bertmem ...` command in the text's code blocks (also after `accelerate launch ... -m`), continuations
    joined and comments dropped; '...' (the rest of an earlier command) becomes a dataset and an output folder."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].split(" # ")[0].strip()
            line = line.split("-m bertmem ", 1)[1] if "-m bertmem " in line else line.removeprefix("bertmem ")
            if line != line.lstrip("-") or not line.split() or line.split()[0] not in SUBCOMMANDS:
                continue
            lines.append("bertmem " + line.replace("...", "--dataset x.csv --output-dir o"))
    return lines


SUBCOMMANDS = ("train", "plan", "predict", "bench")


def test_every_bertmem_command_the_readme_gives_parses():
    lines = bertmem_lines(README)
    assert len(lines) >= 15 and {line.split()[1] for line in lines} >= {"plan", "train", "predict"}
    parser = build_parser()
    for line in lines:
        try:
            parser.parse_args(shlex.split(line)[1:])
        except SystemExit:
            pytest.fail(f"the README's command does not parse: {line}")


# flags of other programs the docs mention: pip, pytest, accelerate, the scripts
OTHER_PROGRAMS = {"--index-url", "--nbval-lax", "--config_file", "--dry-run", "--cpu-work", "--jobs", "--as-t4",
                  "--notebooks-longest-first", "--use_fsdp", "--multi_gpu"}


@pytest.mark.parametrize("name", sorted(DOCS))
def test_every_flag_the_docs_name_is_one_bertmem_or_another_program_takes(name):
    known = {o for p in subcommands(build_parser()).values() for a in p._actions for o in a.option_strings}
    named = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*[a-z0-9])", DOCS[name]))
    assert named, f"{name} names no flag"
    assert named <= known | OTHER_PROGRAMS, f"{name}: {sorted(named - known - OTHER_PROGRAMS)} are no flags"


def test_a_mistyped_flag_is_caught():
    """The check above can fail: a flag bertmem does not know is refused."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(shlex.split(bertmem_lines("```bash\nbertmem plan --memroy t4\n```")[0])[1:])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_links_to_colab_under_its_title(path):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    first = next(c for c in notebook["cells"] if c["cell_type"] == "markdown")
    lines = [line for line in "".join(first["source"]).splitlines() if line.strip()]
    assert lines[0].startswith("# ") and lines[1] == colab_line(path.name), "run python scripts/sync_install_cell.py"
