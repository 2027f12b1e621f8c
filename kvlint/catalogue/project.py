"""What the installed distribution says about this project: its name on the package index and the URLs its
metadata declares.

The import package, the commands and the plugin names are ``kvlint``; the distribution is
``kvlint-ascend``, because ``kvlint`` on the package index is a different project (a prefix-cache log
analyser). Links that leave the repository (SARIF ``helpUri`` / ``informationUri``, the locations in
``kvlint --explain``) are derived from the metadata's ``Project-URL`` entries (or ``Home-page``); when it
declares none, there are no such links, rather than made-up ones.
"""

from __future__ import annotations

import functools
import importlib.metadata

DISTRIBUTION = "kvlint-ascend"
"""The name to ``pip install``; the import package stays ``kvlint``."""

_SOURCE_LABELS = ("source", "source code", "repository", "homepage", "home")


@functools.cache
def project_urls() -> dict[str, str]:
    """``Project-URL`` entries of the installed distribution (labels lower-cased), plus ``Home-page`` as
    ``homepage``; empty when kvlint runs from a source tree that is not installed."""
    try:
        metadata = importlib.metadata.metadata(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return {}
    urls: dict[str, str] = {}
    for entry in metadata.get_all("Project-URL") or []:
        label, _, url = entry.partition(",")
        if url.strip():
            urls[label.strip().lower()] = url.strip()
    home = metadata.get("Home-page")
    if home and home.strip() and home.strip().upper() != "UNKNOWN":
        urls.setdefault("homepage", home.strip())
    return urls


def home_url(urls: dict[str, str] | None = None) -> str | None:
    """The project's home page (SARIF ``informationUri``), or None."""
    urls = project_urls() if urls is None else urls
    return urls.get("homepage") or urls.get("home") or urls.get("source") or urls.get("repository")


def docs_url(urls: dict[str, str] | None = None) -> str | None:
    """Where the repository's ``docs/`` folder is published, ending in ``/``, or None.

    A ``Documentation`` URL is taken as that folder. Otherwise a GitHub repository among the source or home
    URLs gives ``<repository>/blob/HEAD/docs/`` (GitHub resolves ``HEAD`` to the default branch).
    """
    urls = project_urls() if urls is None else urls
    if urls.get("documentation"):
        return urls["documentation"].rstrip("/") + "/"
    for label in _SOURCE_LABELS:
        url = urls.get(label, "").rstrip("/")
        parts = url.split("/")
        if url.startswith("https://github.com/") and len(parts) == 5 and all(parts[3:]):
            return f"{url}/blob/HEAD/docs/"
    return None
