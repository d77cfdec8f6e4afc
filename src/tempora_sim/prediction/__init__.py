"""Predicted traces for a device that was only profiled, and their check against full traces taken there."""
