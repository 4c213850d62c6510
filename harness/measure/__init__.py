"""How a call is timed and what the machine is: timing, noise, calibration, traces, counted metrics."""
