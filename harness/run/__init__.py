"""The command line (`python -m harness`, cli.py and one cmd_*.py per command) and the run's phases
(runner.py), with its options, progress and stops."""
