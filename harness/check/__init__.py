"""Whether the frameworks compute the same thing: the equivalence checks and how a claim is judged."""
