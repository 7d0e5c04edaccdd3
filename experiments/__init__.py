"""One-off studies, each answering one question (index: experiments/README.md)."""
