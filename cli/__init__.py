"""The `aotc` command (click). This folder installs as `aotc.cli` (see setup.py): import it as aotc.cli."""
