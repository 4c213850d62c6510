"""One result against another: timing and numerical changes, and both sides run interleaved."""
