"""triptych's harness: runs scenario x framework x variant, checks equivalence, times, reports."""
