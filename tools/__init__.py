"""Developer tools, run from a checkout (``python -m tools.<name>``); never imported by
Arena at run time and not installed with it."""
