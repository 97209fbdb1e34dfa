"""Write the repository URL of `_config.yml` into every notebook's Colab install cell (run after forking).

Usage: python scripts/sync_repository_url.py        (tests/test_repository_url.py fails while they disagree)
"""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTALL = re.compile(r"bertmem(\[[\w,-]+\])? @ git\+(?P<url>https://[^\"'\s]+)")


def configured_url() -> str:
    """repository.url from _config.yml (the one place a fork edits)."""
    text = (ROOT / "_config.yml").read_text(encoding="utf-8")
    match = re.search(r"^repository:\s*\n(?:\s+.*\n)*?\s+url:\s*(\S+)", text, flags=re.MULTILINE)
    if not match:
        raise SystemExit("_config.yml has no repository.url")
    return match.group(1)


def main() -> None:
    url = configured_url()
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        changed = False
        for cell in notebook["cells"]:
            source = "".join(cell["source"])
            new = INSTALL.sub(f"bertmem @ git+{url}", source)
            if new != source:
                cell["source"], changed = new.splitlines(True), True
        if changed:
            path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            print(f"{path.name}: install cell now uses {url}")


if __name__ == "__main__":
    main()
