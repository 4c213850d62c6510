"""The result file: its typed model, its JSON schema (schema/), reading, writing and upgrading it."""
