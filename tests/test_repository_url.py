"""One repository URL: the Colab install cells, the launch buttons and the package metadata agree with _config.yml."""

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from sync_repository_url import INSTALL, configured_url  # noqa: E402


def install_cells() -> dict[str, str]:
    cells = {}
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            source = "".join(cell["source"])
            if "google.colab" in source and "pip" in source:
                cells[path.name] = source
    return cells


def test_every_notebook_installs_the_package_from_the_configured_repository():
    url = configured_url()
    cells = install_cells()
    assert len(cells) == len(list((ROOT / "book").glob("*.ipynb")))
    for name, source in cells.items():
        found = [m.group("url") for m in INSTALL.finditer(source)]
        assert found == [url], f"{name}: install cell uses {found}, _config.yml says {url}"
        assert "[cpu-model]" not in source, f"{name}: the GPU profile does not need the CPU model package"


def test_package_metadata_names_the_same_repository():
    homepage = re.search(r'^Homepage = "(.+)"', (ROOT / "pyproject.toml").read_text(), flags=re.MULTILINE)
    assert homepage and homepage.group(1) == configured_url()


def test_the_sync_script_rewrites_a_forked_url(tmp_path):
    fork = tmp_path / "fork"
    subprocess.run(["cp", "-r", str(ROOT / "book"), str(ROOT / "_config.yml"), str(ROOT / "scripts"), str(tmp_path)],
                   check=True)
    (tmp_path / "_config.yml").write_text((ROOT / "_config.yml").read_text().replace(
        configured_url(), "https://github.com/someone/fork"))
    done = subprocess.run([sys.executable, str(tmp_path / "scripts" / "sync_repository_url.py")],
                          capture_output=True, text=True, check=True)
    assert "someone/fork" in done.stdout
    for path in (tmp_path / "book").glob("*.ipynb"):
        text = path.read_text()
        assert "git+https://github.com/someone/fork" in text and configured_url() not in text, path.name
    assert not fork.exists()
