"""Test support that ships with aotc: tools for testing aotc's own device paths."""
