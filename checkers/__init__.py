"""pylint checkers of kvlint, one per rule family, all named ``kvlint``.

``pylint --load-plugins kvlint`` registers them; ``--disable=all --enable=kvlint`` runs only them.
Message ids derive from the rule catalogue: KVL001 -> W7001, KVL1nn -> E71nn/W71nn, KVL2nn -> x72nn,
KVL3nn -> x73nn.

A front-end, like ``kvlint.frontends``: it imports the engine, the configuration and suppression parsers,
and the catalogue; nothing imports it but ``kvlint.register``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvlint.checkers.families import AttentionCallChecker, FileChecker, KVCacheChecker, MaskChecker

if TYPE_CHECKING:
    from pylint.lint import PyLinter


def register_checkers(linter: PyLinter) -> None:
    linter.register_checker(FileChecker(linter))
    linter.register_checker(AttentionCallChecker(linter))
    linter.register_checker(MaskChecker(linter))
    linter.register_checker(KVCacheChecker(linter))
