"""The public path of kvlint's pylint reporters: ``--output-format=kvlint.reporters.SarifReporter``.

They are defined in ``kvlint.frontends.pylint_reporters``; this module keeps the documented name.
"""

from kvlint.frontends.pylint_reporters import SarifReporter

__all__ = ["SarifReporter"]
