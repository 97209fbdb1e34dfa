"""Sphinx fixes for a clean browser console (checked by tests/test_site_browser.py).

- sphinx-thebe registers its inline configuration script once per read phase; with Jupyter Book 1 the read
  phase runs twice, so every page declared `const THEBE_JS_URL` twice (a SyntaxError in the console).
  Drop repeated scripts from each page's list.
- pydata-sphinx-theme logs "Got invalid theme mode" on a first visit unless a default mode is set.
- The root index.html only redirects, so browsers ask for /favicon.ico there: put the favicon at the root.
"""

import shutil
from pathlib import Path


def _script_key(script) -> tuple:
    attributes = getattr(script, "attributes", {}) or {}
    return str(getattr(script, "filename", script) or ""), tuple(
        sorted((k, str(v)) for k, v in attributes.items())
    )


def _clean_page(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if scripts:
        seen, unique = set(), []
        for script in scripts:
            key = _script_key(script)
            if key not in seen:
                seen.add(key)
                unique.append(script)
        scripts[:] = unique  # in place: the builder keeps adding to this same list
    context.setdefault("default_mode", "auto")


def _root_favicon(app, exception) -> None:
    favicon = app.config.html_favicon
    if exception is None and favicon and Path(app.confdir, favicon).is_file():
        shutil.copyfile(Path(app.confdir, favicon), Path(app.outdir, "favicon.ico"))


def setup(app):
    app.connect("build-finished", _root_favicon)
    app.connect(
        "html-page-context", _clean_page, priority=999
    )  # after the handlers that add scripts
    return {"parallel_read_safe": True, "parallel_write_safe": True}
