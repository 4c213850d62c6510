"""The worker processes: one per framework (worker.py) or a rank group (ranks.py, rank_main.py), driven
through one protocol (protocol.py); execute.py loads an impl by name and runs a point."""
