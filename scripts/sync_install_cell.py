"""Write the Colab install cell into every notebook (one template, `_config.yml`'s repository, the package's tag),
Colab's request for a T4 runtime into every notebook's metadata, an "Open in Colab" link under each notebook's title,
and the repository's Colab and website addresses into README.md's chapter table.

Usage: python scripts/sync_install_cell.py    (after forking or a version bump; tests/test_install_cell.py fails
while a notebook's cell differs from the template)
"""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTALL = re.compile(r"bertmem(\[[\w,-]+\])? @ git\+(?P<url>https://[^\"'\s@]+)(@(?P<ref>[\w.-]+))?")

# The cell a Colab reader runs first. It installs a tagged release next to Colab's own torch, transformers and
# peft (the package's pins accept Colab's versions, so pip adds only what Colab lacks), says what it did and how
# long it took, turns a failure into one sentence (git's own error line where git failed), and asks for a restart
# only when pip changed an imported module. Off Colab it installs nothing: without bertmem it stops with the command.
TEMPLATE = '''# @title Install the helper package (Colab only, about a minute)
import importlib.metadata
import importlib.util
import re
import subprocess
import sys
import time

PACKAGE = "bertmem @ git+{url}@{ref}"
on_colab = "google.colab" in sys.modules
if not on_colab and importlib.util.find_spec("bertmem") is None:
    raise SystemExit(
        f'bertmem is not installed in this kernel: run pip install "{{PACKAGE}}" in its '
        "environment (or pip install -e . in a clone of the book), then restart it."
    )
if on_colab and importlib.util.find_spec("bertmem") is None:
    print(f"pip install {{PACKAGE}}  (Colab's torch and transformers are kept)")
    start = time.perf_counter()
    command = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check"]
    command += ["--progress-bar", "off"]
    pip = subprocess.run(command + [PACKAGE], capture_output=True, text=True)
    package, tag = PACKAGE.rsplit("@", 1)
    missing = rf"pathspec '{{tag}}' did not match|couldn't find remote ref {{tag}}"
    if pip.returncode != 0 and re.search(missing, pip.stderr):
        # a version is tagged when it reaches the default branch: until then, install it
        print(f"{{tag}} is not tagged yet: installing the default branch instead")
        pip = subprocess.run(command + [package], capture_output=True, text=True)
    if pip.returncode != 0:
        lines = [x.strip() for x in pip.stderr.splitlines() if x.strip()]
        # git's own line says what went wrong (fatal: ...); pip's last line often only
        # says that a subprocess failed
        printed = (pip.stdout + pip.stderr).splitlines()
        git = [x.strip() for x in printed if x.strip().startswith("fatal:")]
        errors = [x for x in lines if x.startswith("ERROR")]
        why = (git or errors or lines or ["no message"])[-1]
        raise SystemExit(
            f"pip could not install bertmem ({{why}}): check the runtime's connection "
            "and the release tag in PACKAGE above, then run this cell again."
        )
    found = re.findall(r"^Successfully installed (.+)$", pip.stdout, re.MULTILINE)
    installed = [name.rsplit("-", 1)[0] for name in " ".join(found).split()]
    took = time.perf_counter() - start
    print(f"done in {{took:.0f}} s; installed: {{', '.join(installed) or 'nothing'}}")
    changed = {{n.lower().replace("_", "-") for n in installed}}
    stale = []  # imported modules whose distribution pip just installed or replaced
    for module, names in importlib.metadata.packages_distributions().items():
        names = {{n.lower().replace("_", "-") for n in names}}
        if module in sys.modules and names & changed:
            stale.append(module)
    if stale:
        print(
            f"Restart the session (Runtime > Restart session): {{', '.join(stale)}} "
            "changed after this notebook imported it."
        )
'''


def configured_url() -> str:
    """repository.url from _config.yml (the one place a fork edits)."""
    text = (ROOT / "_config.yml").read_text(encoding="utf-8")
    match = re.search(r"^repository:\s*\n(?:\s+.*\n)*?\s+url:\s*(\S+)", text, flags=re.MULTILINE)
    if not match:
        raise SystemExit("_config.yml has no repository.url")
    return match.group(1)


def release_tag() -> str:
    """The git tag of this version: 'v' + pyproject.toml's version (tag each release so Colab can install it)."""
    match = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), flags=re.MULTILINE)
    if not match:
        raise SystemExit("pyproject.toml has no version")
    return "v" + match.group(1)


def install_cell() -> str:
    """The install cell's source for this repository and release."""
    return TEMPLATE.format(url=configured_url(), ref=release_tag()).rstrip("\n")


# What Colab writes into a notebook saved on a T4 runtime: opened from GitHub, the notebook asks for that runtime
# (Colab's free tier offers the T4), so the GPU profile runs without a change of runtime by hand.
COLAB_METADATA = {"accelerator": "GPU", "colab": {"gpuType": "T4", "provenance": []}}


def add_colab_metadata(notebook: dict) -> bool:
    """Add Colab's T4 runtime request to a notebook's metadata, keeping its other Colab keys; whether it changed."""
    metadata = notebook.setdefault("metadata", {})
    colab = {**metadata.get("colab", {}), "gpuType": COLAB_METADATA["colab"]["gpuType"]}
    colab.setdefault("provenance", [])
    wanted = {**metadata, "accelerator": COLAB_METADATA["accelerator"], "colab": colab}
    if metadata == wanted:
        return False
    notebook["metadata"] = wanted
    return True


def configured_branch() -> str:
    """repository.branch from _config.yml (main when it names none): the branch Colab opens notebooks from."""
    text = (ROOT / "_config.yml").read_text(encoding="utf-8")
    match = re.search(r"^repository:\s*\n(?:\s+.*\n)*?\s+branch:\s*(\S+)", text, flags=re.MULTILINE)
    return match.group(1) if match else "main"


def owner_and_name() -> tuple[str, str]:
    """The GitHub owner and repository of the configured URL."""
    match = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+?)(?:\.git)?/?", configured_url())
    if not match:
        raise SystemExit(f"_config.yml's repository.url is not a GitHub repository: {configured_url()}")
    return match.group(1), match.group(2)


def colab_link(path: str) -> str:
    """Colab's address for a notebook of this repository (`path` from the repository root)."""
    owner, name = owner_and_name()
    return f"https://colab.research.google.com/github/{owner}/{name}/blob/{configured_branch()}/{path}"


def site_link(page: str = "") -> str:
    """The website's address (GitHub Pages, published by .github/workflows/publish.yml) for a page of the book."""
    owner, name = owner_and_name()
    return f"https://{owner.lower()}.github.io/{name}/{page}"


COLAB_LINE = re.compile(r"^\[Open in Colab\]\(https://colab\.research\.google\.com/github/[^)]*\).*$", re.MULTILINE)


def colab_line(notebook_name: str) -> str:
    """The line under a notebook's title: a text link (the offline site test refuses external images)."""
    return (f"[Open in Colab]({colab_link('book/' + notebook_name)}): it asks for a T4 runtime; its first code "
            "cell installs the helper package.")


def add_colab_link(notebook: dict, notebook_name: str) -> bool:
    """Put the Colab line under the title of the notebook's first Markdown cell; whether it changed."""
    cell = next(c for c in notebook["cells"] if c["cell_type"] == "markdown")
    source = "".join(cell["source"])
    line = colab_line(notebook_name)
    if COLAB_LINE.search(source):
        wanted = COLAB_LINE.sub(lambda _: line, source, count=1)
    else:
        title, _, rest = source.partition("\n")
        wanted = f"{title}\n\n{line}\n" + (f"\n{rest.lstrip(chr(10))}" if rest.strip() else "")
    if wanted == source:
        return False
    cell["source"] = wanted.splitlines(True)
    return True


def sync_readme(path: Path) -> bool:
    """Point README.md's Colab and website links at the configured repository; whether it changed."""
    owner, name = owner_and_name()
    text = path.read_text(encoding="utf-8")
    wanted = re.sub(r"https://colab\.research\.google\.com/github/[^/\s)]+/[^/\s)]+/blob/[^/\s)]+/",
                    colab_link(""), text)
    wanted = re.sub(r"https://[\w-]+\.github\.io/[^/\s)>]+/", site_link(), wanted)
    wanted = INSTALL.sub(lambda m: f"bertmem{m.group(1) or ''} @ git+{configured_url()}@{release_tag()}", wanted)
    wanted = re.sub(r"git clone https://github\.com/\S+ && cd \S+", f"git clone {configured_url()} && cd {name}",
                    wanted)
    if wanted == text:
        return False
    path.write_text(wanted, encoding="utf-8")
    return True


def is_install_cell(source: str) -> bool:
    return "google.colab" in source and "pip" in source


def main() -> None:
    cell_source = install_cell()
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        cells = [c for c in notebook["cells"] if c["cell_type"] == "code" and is_install_cell("".join(c["source"]))]
        if len(cells) != 1:
            raise SystemExit(f"{path.name}: expected one install cell, found {len(cells)}")
        changed = add_colab_metadata(notebook)
        if add_colab_link(notebook, path.name):
            changed = True
            print(f"{path.name}: Open in Colab links to {colab_link('book/' + path.name)}")
        if "".join(cells[0]["source"]) != cell_source:
            cells[0]["source"] = cell_source.splitlines(True)
            cells[0]["metadata"].update({"cellView": "form", "tags": ["remove-cell"]})  # timings stay
            changed = True
            print(f"{path.name}: install cell now installs {configured_url()}@{release_tag()}")
        if changed:
            # sorted keys, as Jupyter writes them: the next execution changes no order
            path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False, sort_keys=True) + "\n",
                            encoding="utf-8")
    readme = ROOT / "README.md"
    if readme.is_file() and sync_readme(readme):
        print(f"README.md: Colab and website links now point at {configured_url()}")


if __name__ == "__main__":
    main()
