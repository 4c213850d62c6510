"""Model code (numpy only) that both the scenarios' references and the impls run."""
