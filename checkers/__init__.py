"""pylint checkers of kvlint, one per rule family."""
