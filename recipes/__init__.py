"""The product commands: prepare, train, distil, decode and score (each file is a script; see its header)."""
