"""Analyses usable on any dlmlab model: probes, ablations, patching, circuits, diagnostics."""
