"""The signals that ask a run to stop, one list for the command (harness/run/stops.py honours each as a
stop, exit 128 + its number) and its workers (harness/workers/protocol.py ignores each: the parent
decides). Why one list: a signal the command honoured but its workers did not ignore (a closed terminal's
SIGHUP to the group) killed the workers under a run that meant to keep what they measured.
"""
import signal

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)  # Ctrl-C, timeout, closed terminal, Ctrl-\
