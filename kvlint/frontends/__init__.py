"""The front-ends: thin layers over one engine (``kvlint.checks.engine``) that agree finding for finding.

- ``cli``: the ``kvlint`` command, with ``runner`` (finding, reading and linting files), ``output`` (text,
  json, github and SARIF renderers) and ``fixing`` (``--fix`` / ``--diff`` over files);
- ``flake8_plugin``: the ``KVL`` flake8 extension;
- ``pylint_reporters``: the SARIF reporter for pylint (public as ``kvlint.reporters``); the pylint checkers
  themselves are ``kvlint.checkers``;
- ``config`` and ``suppression``: configuration files and suppression comments, shared by all three;
- ``heap``: astroid's bootstrap frozen out of the garbage collector in the processes flake8 and the CLI own.

Imports: everything below (catalogue, analysis, checks, fix). Nothing below imports a front-end.
"""
