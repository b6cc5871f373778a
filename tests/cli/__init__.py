"""The command line: its commands, labels, and what new users reported."""
